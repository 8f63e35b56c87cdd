//! The node-side phase machine for one signal (REF §7.3, §7.9): pure, no I/O, no clock.
//!
//! [`next`] looks at the signal's phase and the [`Facts`] the shell gathered (mostly from
//! disk, so they survive a crash) and returns one [`Step`]. Every step is idempotent:
//! replaying [`next`] after a crash at any point converges.
//!
//! A rollback signal (DESIGN §15) walks the same phases as the update it undoes: a k0s
//! rollback stages `k0s.prev` instead of downloading ([`HostAction::StagePrevious`]), then
//! self-test, cordon, trial boot, swap and restart as any update; an airgap rollback puts
//! the kept bundle back ([`HostAction::RestoreBundle`]).

use autopilot_api::payload;
use autopilot_api::signal::{
    CommandAirgapUpdate, CommandK0sUpdate, CommandRollback, RollbackOf, SignalPhase, UpdateRef,
};

/// What the agent knows when it decides, captured once per pass. Snapshot: may be stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts<'a> {
    /// The update the signal asks for.
    pub update: UpdateRef<'a>,
    /// The k0s version this process runs.
    pub running_version: &'a str,
    /// A verified staged binary for this signal exists next to the live binary.
    pub staged: bool,
    /// The staged binary passed its self-test (it ran and reported an acceptable version).
    pub proven: bool,
    /// SHA-256 of the live binary (lowercase hex), if it could be read.
    pub live_sha256: Option<&'a str>,
    /// What the restart for this signal came to, as far as this process can tell.
    pub restart: Restart<'a>,
    /// The machine runs a kubelet (pure workers, controller+workers): the leader drains it.
    pub kubelet: bool,
    /// The Plan status records that the leader finished this node's drain for this signal
    /// (DESIGN §14): only then does `ApplyingUpdate` (or a `Restarting` not begun) go on to
    /// the restart. Looked up by the shell in those phases only.
    pub drained: bool,
}

/// What the restart for a signal came to (read from the restart marker, so it survives the
/// restart itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart<'a> {
    /// This process has not restarted for this signal (no marker for it, or this very
    /// process wrote it).
    NotYet,
    /// This process started after the restart for this signal, and the new binary passed
    /// its trial boot.
    Done,
    /// The new binary failed its trial boot; the previous binary was put back and this
    /// process runs it.
    RolledBack {
        /// The version put back (the previous binary's).
        to: &'a str,
        /// Why the new binary was refused.
        reason: &'a str,
    },
    /// The restart marker cannot be read (a corrupt file), so what the restart came to is
    /// unknown: a signal in `Restarting` fails with this reason instead of waiting.
    Unreadable {
        /// Why it cannot be read.
        reason: &'a str,
    },
}

/// A host effect for the shell to perform through `autopilot_signal::host::Host`. Each is idempotent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostAction {
    /// Download, verify and stage the new binary next to the live one (never over it).
    Download {
        /// Where from.
        url: String,
        /// Expected SHA-256 (hex), if the signal gives one.
        sha256: Option<String>,
    },
    /// Run the staged binary (`<staged> version`, bounded time, clean environment) and
    /// keep it only if it exits 0 and reports an acceptable version; otherwise remove it.
    SelfTest {
        /// The version it must report.
        version: String,
        /// Any version will do (a forced update): it must still run and print one.
        any_version: bool,
    },
    /// Record the restart marker for this signal; the shell then stops the node's work,
    /// runs the staged binary's trial boot and swaps it in only if it passes (keeping the
    /// running binary as `k0s.prev`), then re-execs (or exits) — see `autopilot_signal::trial`.
    Restart,
    /// Download and verify an airgap bundle into `<data-dir>/images`, keeping what it
    /// replaces (or that it replaced nothing) so a rollback can put it back.
    DownloadBundle {
        /// Where from.
        url: String,
        /// Expected SHA-256 (hex), if the signal gives one.
        sha256: Option<String>,
    },
    /// A k0s rollback's "download": copy the previous binary (`k0s.prev`) as the staged
    /// binary (whole, by rename; `k0s.prev` stays in place until the swap) and self-test
    /// it: it must report exactly `version`. Fails, staging nothing, when there is no
    /// `k0s.prev` or it runs another version; nothing is guessed or fetched.
    StagePrevious {
        /// The version the node ran before the run, which `k0s.prev` must run.
        version: String,
    },
    /// An airgap rollback: put back the bundle file the signal's run replaced (or remove
    /// the one it added), from what the node kept when it stored the run's bundle. Fails
    /// when the node kept nothing for that run.
    RestoreBundle,
}

/// The kind of a [`HostAction`], without its data (for failure injection and metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ActionKind {
    /// [`HostAction::Download`].
    Download,
    /// [`HostAction::SelfTest`].
    SelfTest,
    /// The swap after a passed trial boot (done by `autopilot_signal::trial`, not a phase-machine step).
    Swap,
    /// [`HostAction::Restart`].
    Restart,
    /// [`HostAction::DownloadBundle`].
    DownloadBundle,
    /// [`HostAction::StagePrevious`].
    StagePrevious,
    /// [`HostAction::RestoreBundle`].
    RestoreBundle,
}

impl HostAction {
    /// The action's kind.
    pub fn kind(&self) -> ActionKind {
        match self {
            Self::Download { .. } => ActionKind::Download,
            Self::SelfTest { .. } => ActionKind::SelfTest,
            Self::Restart => ActionKind::Restart,
            Self::DownloadBundle { .. } => ActionKind::DownloadBundle,
            Self::StagePrevious { .. } => ActionKind::StagePrevious,
            Self::RestoreBundle => ActionKind::RestoreBundle,
        }
    }
}

/// What to do when a [`Step::Run`] action fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// Write this phase with the error as the reason.
    Report(SignalPhase),
    /// Stay in the phase and retry with backoff (the action is idempotent).
    Retry,
}

/// Whom the agent waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFor {
    /// The leader cordons and drains this machine's Node, then writes `ApplyingUpdate`.
    Drain,
    /// The leader uncordons this machine's Node, then writes `Completed`.
    Uncordon,
    /// No kubelet here: the leader just advances the phase.
    Leader,
}

/// The one thing to do next.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write this phase (and reason) into the signal's status.
    Report {
        /// The new phase.
        phase: SignalPhase,
        /// Why, for failures.
        reason: Option<String>,
    },
    /// Perform `action`; then write `on_success`, or handle the failure as `on_failure`
    /// says. When `on_success` is the current phase the shell decides again at once (the
    /// action changed the host, not the phase). After a successful [`HostAction::Restart`]
    /// the shell re-execs (or exits) instead of writing anything.
    Run {
        /// The effect.
        action: HostAction,
        /// The phase after success.
        on_success: SignalPhase,
        /// What a failure means.
        on_failure: OnFailure,
    },
    /// Nothing to do until the signal changes.
    Wait(WaitFor),
    /// The signal is finished on this node.
    Done,
}

impl Step {
    fn report(phase: SignalPhase) -> Self {
        Self::Report { phase, reason: None }
    }

    fn fail(phase: SignalPhase, reason: String) -> Self {
        Self::Report { phase, reason: Some(reason) }
    }
}

/// How the reason of a signal the post-update watch rolled back begins
/// ([`after_update_rollback`]): the only `Failed` a `Completed` node reports.
pub const ROLLED_BACK_AFTER_UPDATE: &str = "rolled back after the update: ";

/// The reason of `signal`'s answer when it is the post-update watch's rollback
/// ([`after_update_rollback`]): `Failed` with a reason that begins
/// [`ROLLED_BACK_AFTER_UPDATE`]. Only that answer undoes a node's `Completed`; any other
/// `Failed` on a finished node's signal (a refusal of a signal written back, by the node or
/// the drain) says nothing about the update.
pub fn rolled_back_after_update(signal: &autopilot_api::signal::SignalData) -> Option<&str> {
    let status = signal.status.as_ref()?;
    let reason = status.reason.as_deref()?;
    (status.status == SignalPhase::Failed && reason.starts_with(ROLLED_BACK_AFTER_UPDATE))
        .then_some(reason)
}

/// The signal's answer once the post-update watch (`crate::post_update`) put the previous
/// binary back, `why` saying why: `Failed` with `rolled back after the update: <why>`,
/// whatever phase the signal had reached (`Completed` too: the update did not hold); nothing
/// once it says `Failed`. Only for the signal the watched update was for.
pub fn after_update_rollback(phase: Option<SignalPhase>, why: &str) -> Option<Step> {
    match phase {
        Some(SignalPhase::Failed) => None,
        None
        | Some(
            SignalPhase::Downloading
            | SignalPhase::Cordoning
            | SignalPhase::ApplyingUpdate
            | SignalPhase::Restarting
            | SignalPhase::Uncordoning
            | SignalPhase::Completed
            | SignalPhase::FailedDownload,
        ) => Some(Step::fail(SignalPhase::Failed, format!("{ROLLED_BACK_AFTER_UPDATE}{why}"))),
    }
}

/// Whether a signal this agent saw at the terminal phase `ended` and now sees at `current`
/// was rewound: written back to a phase before its end by someone else (the agent and the
/// leader only ever move a signal forward, and a `Completed` one only to `Failed`, when the
/// post-update watch puts the previous binary back). `Some(refusal)` (starting with
/// `refused: `): the signal is not acted on again, and is answered `Failed` with it.
pub fn rewound(ended: SignalPhase, current: Option<SignalPhase>) -> Option<String> {
    let back_to = match current {
        None => "a new signal",
        Some(
            phase @ (SignalPhase::Downloading
            | SignalPhase::Cordoning
            | SignalPhase::ApplyingUpdate
            | SignalPhase::Restarting
            | SignalPhase::Uncordoning),
        ) => phase.as_str(),
        Some(SignalPhase::Completed | SignalPhase::Failed | SignalPhase::FailedDownload) => {
            return None;
        }
    };
    Some(format!(
        "refused: rewound: this node saw the signal end {ended}, and now it shows {back_to}; \
         a signal that ended is not acted on again"
    ))
}

/// How many times in a row a retried action ([`OnFailure::Retry`]) may fail before the
/// signal ends `Failed` with the last error: enough to ride out a transient problem (a busy
/// file, a full disk being cleaned up), few enough that a stuck node says so in minutes.
pub const MAX_FAILURES_IN_A_ROW: u32 = 5;

/// What a failed [`Step::Run`] of `kind` leads to, after `failures_in_a_row` failures of it
/// (this one included): a report, or `None` to retry after a backoff.
pub fn after_failure(
    on_failure: OnFailure,
    kind: ActionKind,
    failures_in_a_row: u32,
    error: &str,
) -> Option<Step> {
    match on_failure {
        OnFailure::Report(phase) => Some(Step::fail(phase, error.to_string())),
        OnFailure::Retry if failures_in_a_row >= MAX_FAILURES_IN_A_ROW => Some(Step::fail(
            SignalPhase::Failed,
            format!("{} failed {failures_in_a_row} times in a row: {error}", kind.describe()),
        )),
        OnFailure::Retry => None,
    }
}

impl ActionKind {
    /// What the action does, for reasons.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Download => "downloading the binary",
            Self::SelfTest => "self-testing the binary",
            Self::Swap => "swapping in the new binary",
            Self::Restart => "preparing the restart",
            Self::DownloadBundle => "downloading the bundle",
            Self::StagePrevious => "staging the previous binary",
            Self::RestoreBundle => "restoring the previous bundle",
        }
    }
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// Decides the next step for a signal in `phase` (`None`: the node has not reacted yet).
pub fn next(phase: Option<SignalPhase>, facts: &Facts<'_>) -> Step {
    // A signal this node cannot act on is answered, never ignored: the plan must end.
    if let Some(problem) = refusal(facts.update)
        && !phase.is_some_and(SignalPhase::is_terminal)
    {
        return Step::fail(SignalPhase::Failed, problem);
    }
    match facts.update {
        UpdateRef::K0s(update) => k0s_update(phase, facts, &Binary::update(update)),
        UpdateRef::Airgap(update) => airgap_update(phase, update),
        UpdateRef::Rollback(rollback) => match rollback.of {
            RollbackOf::K0s => k0s_update(phase, facts, &Binary::rollback(rollback)),
            RollbackOf::Airgap => airgap_rollback(phase),
        },
    }
}

/// Why this node cannot act on `update` at all, if it cannot: no usable version, or a URL
/// this agent cannot download from (only `http://` and `https://` with a host). The rules
/// are [`autopilot_api::payload`]'s, the same the Plan engine applies at NewPlan.
pub fn refusal(update: UpdateRef<'_>) -> Option<String> {
    let (command, url, version) = match update {
        UpdateRef::K0s(u) => ("k0supdate", Some(u.url.as_str()), u.version.as_str()),
        UpdateRef::Airgap(u) => ("airgapupdate", Some(u.url.as_str()), u.version.as_str()),
        // Nothing is fetched: the version is all there is to check.
        UpdateRef::Rollback(r) => ("rollback", None, r.version.as_str()),
    };
    if let Some(problem) = payload::version_problem(version) {
        return Some(format!("refused: command.{command}.version: {problem}"));
    }
    url.and_then(payload::url_problem)
        .map(|problem| format!("refused: command.{command}.url: {problem}"))
}

/// A k0s binary a signal asks this node to run: an update's (downloaded) or a rollback's
/// (`k0s.prev`). Both walk the same phases; only where the staged file comes from differs.
struct Binary {
    /// The version the node must run when the signal completes.
    version: String,
    /// Any version will do (a forced update).
    any_version: bool,
    /// Where the staged binary comes from.
    source: Source,
}

/// Where a staged binary comes from.
enum Source {
    /// Downloaded (and verified against the digest, if the signal gives one).
    Download {
        /// Where from.
        url: String,
        /// The signal's digest, lowercase.
        sha256: Option<String>,
    },
    /// The node's own `k0s.prev` (a rollback): no download.
    Previous,
}

impl Binary {
    fn update(update: &CommandK0sUpdate) -> Self {
        Self {
            version: update.version.clone(),
            any_version: update.forceupdate,
            source: Source::Download {
                url: update.url.clone(),
                sha256: non_empty(&update.sha256).map(|s| s.to_ascii_lowercase()),
            },
        }
    }

    fn rollback(rollback: &CommandRollback) -> Self {
        Self { version: rollback.version.clone(), any_version: false, source: Source::Previous }
    }

    /// The action that stages the binary, with what its failure means.
    fn stage(&self) -> Step {
        match &self.source {
            Source::Download { url, sha256 } => Step::Run {
                action: HostAction::Download { url: url.clone(), sha256: sha256.clone() },
                on_success: SignalPhase::Downloading,
                on_failure: OnFailure::Report(SignalPhase::FailedDownload),
            },
            // Nothing was downloaded: a missing or wrong `k0s.prev` is a plain failure.
            Source::Previous => Step::Run {
                action: HostAction::StagePrevious { version: self.version.clone() },
                on_success: SignalPhase::Downloading,
                on_failure: OnFailure::Report(SignalPhase::Failed),
            },
        }
    }

    /// The digest the live binary must have once the staged one was swapped in, if known.
    fn swapped_sha256(&self) -> Option<&str> {
        match &self.source {
            Source::Download { sha256, .. } => sha256.as_deref(),
            // `k0s.prev` changes with the swap itself (it then keeps the binary replaced),
            // so there is no digest to hold the live binary to; the restart's version check
            // tells.
            Source::Previous => None,
        }
    }
}

/// The phases of a k0s binary signal: an update or a k0s rollback.
fn k0s_update(phase: Option<SignalPhase>, facts: &Facts<'_>, binary: &Binary) -> Step {
    let wanted = binary.version.as_str();
    // Idempotent: a node that runs the version already (never updated, or a rollback
    // already done before a crash) completes at once.
    let Some(phase) = phase else {
        return if facts.running_version == wanted && !binary.any_version {
            Step::report(SignalPhase::Completed)
        } else {
            Step::report(SignalPhase::Downloading)
        };
    };
    let self_test = |on_success| Step::Run {
        action: HostAction::SelfTest {
            version: wanted.to_string(),
            any_version: binary.any_version,
        },
        on_success,
        on_failure: OnFailure::Report(SignalPhase::Failed),
    };
    match phase {
        // Only the leader moves a signal past `Cordoning`, after recording the drain: an
        // `ApplyingUpdate` (or `Restarting`) the status does not back goes back to wait for
        // the drain, and nothing restarts.
        SignalPhase::ApplyingUpdate | SignalPhase::Restarting
            if !facts.drained && facts.restart == Restart::NotYet =>
        {
            Step::fail(
                SignalPhase::Cordoning,
                format!(
                    "back to {}: the Plan does not record this node's drain, so {phase} was not \
                     the leader's",
                    SignalPhase::Cordoning
                ),
            )
        }
        // The host ties a staged file to the signal it was downloaded for (by digest, or
        // by the signal's identity without one). A verified file is self-tested before the
        // node is cordoned: a payload that does not run never costs a drain.
        SignalPhase::Downloading if facts.staged && facts.proven => {
            Step::report(SignalPhase::Cordoning)
        }
        SignalPhase::Downloading if facts.staged => self_test(SignalPhase::Cordoning),
        SignalPhase::Downloading => binary.stage(),
        SignalPhase::Cordoning => {
            Step::Wait(if facts.kubelet { WaitFor::Drain } else { WaitFor::Leader })
        }
        // The swap comes with the restart, once the new binary passed its trial boot; the
        // live binary stays the proven one until then.
        SignalPhase::ApplyingUpdate if facts.staged && facts.proven => {
            Step::report(SignalPhase::Restarting)
        }
        // Never restart into a file that has not passed the self-test.
        SignalPhase::ApplyingUpdate if facts.staged => self_test(SignalPhase::ApplyingUpdate),
        // The staged file is gone: an earlier pass swapped it in (REF §7.7, step 1). With a
        // digest we can check that the live binary is the one we staged.
        SignalPhase::ApplyingUpdate => swapped_in(binary.swapped_sha256(), facts.live_sha256),
        SignalPhase::Restarting => restart(facts, binary),
        SignalPhase::Uncordoning => {
            Step::Wait(if facts.kubelet { WaitFor::Uncordon } else { WaitFor::Leader })
        }
        SignalPhase::Completed | SignalPhase::FailedDownload | SignalPhase::Failed => Step::Done,
    }
}

/// `ApplyingUpdate` with the staged file gone (an earlier pass swapped it in): restart,
/// unless the signal's digest shows the live binary is not the one staged.
fn swapped_in(want_sha256: Option<&str>, live_sha256: Option<&str>) -> Step {
    match (want_sha256, live_sha256) {
        (Some(want), Some(live)) if live != want => Step::fail(
            SignalPhase::Failed,
            format!(
                "staged binary is gone and the live binary's sha256 {live} is not the expected {want}"
            ),
        ),
        (Some(_), None) => Step::fail(
            SignalPhase::Failed,
            "staged binary is gone and the live binary cannot be read".to_string(),
        ),
        (Some(_), Some(_)) | (None, _) => Step::report(SignalPhase::Restarting),
    }
}

/// `Restarting`: restart, or judge what the restart came to (the running version must be
/// the wanted one unless the update is forced).
fn restart(facts: &Facts<'_>, binary: &Binary) -> Step {
    let wanted = binary.version.as_str();
    match facts.restart {
        Restart::Done if facts.running_version == wanted || binary.any_version => {
            Step::report(SignalPhase::Uncordoning)
        }
        Restart::Done => Step::fail(
            SignalPhase::Failed,
            format!("running version {} after restart, expected {wanted}", facts.running_version),
        ),
        Restart::RolledBack { to, reason } => {
            Step::fail(SignalPhase::Failed, format!("rolled back to {to}: {reason}"))
        }
        Restart::Unreadable { reason } => Step::fail(
            SignalPhase::Failed,
            format!(
                "the restart marker cannot be read, so the restart's outcome is unknown: {reason}"
            ),
        ),
        Restart::NotYet => Step::Run {
            action: HostAction::Restart,
            on_success: SignalPhase::Restarting,
            on_failure: OnFailure::Retry,
        },
    }
}

fn airgap_update(phase: Option<SignalPhase>, update: &CommandAirgapUpdate) -> Step {
    let Some(phase) = phase else {
        return Step::report(SignalPhase::Downloading);
    };
    match phase {
        SignalPhase::Downloading => Step::Run {
            action: HostAction::DownloadBundle {
                url: update.url.clone(),
                sha256: non_empty(&update.sha256).map(|s| s.to_ascii_lowercase()),
            },
            on_success: SignalPhase::Completed,
            on_failure: OnFailure::Report(SignalPhase::FailedDownload),
        },
        SignalPhase::Cordoning
        | SignalPhase::ApplyingUpdate
        | SignalPhase::Restarting
        | SignalPhase::Uncordoning => Step::fail(
            SignalPhase::Failed,
            format!("phase {phase} is not part of an airgap update"),
        ),
        SignalPhase::Completed | SignalPhase::FailedDownload | SignalPhase::Failed => Step::Done,
    }
}

/// The phases of an airgap rollback: like the airgap update it undoes, with the kept bundle
/// put back instead of a download. Restoring is idempotent, so a crash before the answer
/// just restores again.
fn airgap_rollback(phase: Option<SignalPhase>) -> Step {
    let Some(phase) = phase else {
        return Step::report(SignalPhase::Downloading);
    };
    match phase {
        SignalPhase::Downloading => Step::Run {
            action: HostAction::RestoreBundle,
            on_success: SignalPhase::Completed,
            on_failure: OnFailure::Report(SignalPhase::Failed),
        },
        SignalPhase::Cordoning
        | SignalPhase::ApplyingUpdate
        | SignalPhase::Restarting
        | SignalPhase::Uncordoning => Step::fail(
            SignalPhase::Failed,
            format!("phase {phase} is not part of an airgap rollback"),
        ),
        SignalPhase::Completed | SignalPhase::FailedDownload | SignalPhase::Failed => Step::Done,
    }
}

/// What a node does with a preflight signal (DESIGN §13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreflightStep {
    /// Read the checks from the Plan, run them, and answer `Completed` with a record per
    /// check (or `Failed` when the checks cannot be read). Checks only look, so running them
    /// again after a crash before the answer is harmless.
    Run,
    /// The node answered already (or the leader ended the signal): nothing to do.
    Done,
}

/// The next step for a preflight signal in `phase` (`None`: not answered yet).
pub fn preflight(phase: Option<SignalPhase>) -> PreflightStep {
    match phase {
        None => PreflightStep::Run,
        Some(SignalPhase::Completed | SignalPhase::Failed | SignalPhase::FailedDownload) => {
            PreflightStep::Done
        }
        // Not phases of a preflight signal; a node never writes them for one. Answering is
        // how the signal ends, so run the checks.
        Some(
            SignalPhase::Downloading
            | SignalPhase::Cordoning
            | SignalPhase::ApplyingUpdate
            | SignalPhase::Restarting
            | SignalPhase::Uncordoning,
        ) => PreflightStep::Run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_seen_ended_and_shown_earlier_again_is_a_rewind() {
        for ended in [SignalPhase::Completed, SignalPhase::Failed, SignalPhase::FailedDownload] {
            for earlier in [
                None,
                Some(SignalPhase::Downloading),
                Some(SignalPhase::Cordoning),
                Some(SignalPhase::ApplyingUpdate),
                Some(SignalPhase::Restarting),
                Some(SignalPhase::Uncordoning),
            ] {
                let refusal = rewound(ended, earlier).expect("a rewind");
                assert!(refusal.starts_with("refused: rewound: "), "{refusal}");
                assert!(refusal.contains(&format!("end {ended}")), "{refusal}");
            }
            // A terminal phase after a terminal one is no rewind: the post-update watch
            // answers a `Completed` signal `Failed`.
            for end in [SignalPhase::Completed, SignalPhase::Failed, SignalPhase::FailedDownload] {
                assert_eq!(rewound(ended, Some(end)), None);
            }
        }
    }

    const V1: &str = "v1.35.0+k0s.0";
    const V2: &str = "v1.35.1+k0s.0";
    const SHA: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const OTHER: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn k0s(sha256: &str, forceupdate: bool) -> CommandK0sUpdate {
        CommandK0sUpdate {
            url: "http://127.0.0.1/k0s".into(),
            version: V2.into(),
            sha256: sha256.into(),
            forceupdate,
        }
    }

    fn facts(update: &CommandK0sUpdate) -> Facts<'_> {
        Facts {
            update: UpdateRef::K0s(update),
            running_version: V1,
            staged: false,
            proven: false,
            live_sha256: Some(OTHER),
            restart: Restart::NotYet,
            kubelet: true,
            drained: true,
        }
    }

    fn report(phase: SignalPhase) -> Step {
        Step::Report { phase, reason: None }
    }

    fn reason(step: &Step) -> &str {
        match step {
            Step::Report { reason: Some(reason), .. } => reason,
            other => panic!("expected a report with a reason, got {other:?}"),
        }
    }

    #[test]
    fn a_fresh_signal_for_the_running_version_completes_at_once() {
        let update = k0s(SHA, false);
        let f = Facts { running_version: V2, ..facts(&update) };
        assert_eq!(next(None, &f), report(SignalPhase::Completed));
    }

    #[test]
    fn a_forced_signal_for_the_running_version_still_downloads() {
        let update = k0s(SHA, true);
        let f = Facts { running_version: V2, ..facts(&update) };
        assert_eq!(next(None, &f), report(SignalPhase::Downloading));
    }

    #[test]
    fn a_fresh_signal_for_another_version_starts_downloading() {
        let update = k0s(SHA, false);
        assert_eq!(next(None, &facts(&update)), report(SignalPhase::Downloading));
    }

    #[test]
    fn downloading_fetches_into_staging_and_fails_as_failed_download() {
        let update = k0s(&SHA.to_uppercase(), false);
        assert_eq!(
            next(Some(SignalPhase::Downloading), &facts(&update)),
            Step::Run {
                action: HostAction::Download { url: update.url.clone(), sha256: Some(SHA.into()) },
                on_success: SignalPhase::Downloading,
                on_failure: OnFailure::Report(SignalPhase::FailedDownload),
            }
        );
    }

    #[test]
    fn a_staged_binary_is_self_tested_before_the_node_is_cordoned() {
        let update = k0s(SHA, false);
        let f = Facts { staged: true, ..facts(&update) };
        assert_eq!(
            next(Some(SignalPhase::Downloading), &f),
            Step::Run {
                action: HostAction::SelfTest { version: V2.into(), any_version: false },
                on_success: SignalPhase::Cordoning,
                on_failure: OnFailure::Report(SignalPhase::Failed),
            }
        );
        let forced = k0s(SHA, true);
        let f = Facts { staged: true, ..facts(&forced) };
        assert!(matches!(
            next(Some(SignalPhase::Downloading), &f),
            Step::Run { action: HostAction::SelfTest { any_version: true, .. }, .. }
        ));
    }

    #[test]
    fn an_unproven_staged_binary_is_never_swapped_in() {
        let update = k0s(SHA, false);
        let f = Facts { staged: true, proven: false, ..facts(&update) };
        assert!(matches!(
            next(Some(SignalPhase::ApplyingUpdate), &f),
            Step::Run {
                action: HostAction::SelfTest { .. },
                on_success: SignalPhase::ApplyingUpdate,
                ..
            }
        ));
    }

    #[test]
    fn a_signal_the_node_cannot_act_on_is_answered_with_failed() {
        for (url, version) in [
            ("example.invalid/k0s", V2),
            ("ftp://127.0.0.1/k0s", V2),
            ("http:///k0s", V2),
            ("http://127.0.0.1/k0s", " "),
            ("http://127.0.0.1:port/k0s", V2),
            ("http://127.0.0.1/k0s", "v1 .2"),
        ] {
            let update = CommandK0sUpdate { version: version.into(), ..k0s(SHA, false) };
            let update = CommandK0sUpdate { url: url.into(), ..update };
            for phase in [None, Some(SignalPhase::Downloading)] {
                let step = next(phase, &facts(&update));
                assert!(matches!(step, Step::Report { phase: SignalPhase::Failed, .. }), "{url}");
                assert!(reason(&step).starts_with("refused: command.k0supdate."), "{step:?}");
            }
            assert_eq!(next(Some(SignalPhase::Failed), &facts(&update)), Step::Done);
        }
    }

    #[test]
    fn retried_actions_give_up_after_five_failures_in_a_row_with_the_last_error() {
        assert_eq!(after_failure(OnFailure::Retry, ActionKind::Swap, 4, "busy"), None);
        assert_eq!(
            after_failure(OnFailure::Retry, ActionKind::Swap, 5, "busy"),
            Some(Step::Report {
                phase: SignalPhase::Failed,
                reason: Some("swapping in the new binary failed 5 times in a row: busy".into()),
            })
        );
        assert_eq!(
            after_failure(
                OnFailure::Report(SignalPhase::FailedDownload),
                ActionKind::Download,
                1,
                "404"
            ),
            Some(Step::Report { phase: SignalPhase::FailedDownload, reason: Some("404".into()) })
        );
    }

    #[test]
    fn a_rolled_back_restart_fails_naming_the_version_put_back_and_why() {
        let update = k0s(SHA, false);
        let f = Facts {
            restart: Restart::RolledBack { to: V1, reason: "the new binary exited" },
            ..facts(&update)
        };
        assert_eq!(
            next(Some(SignalPhase::Restarting), &f),
            Step::Report {
                phase: SignalPhase::Failed,
                reason: Some(format!("rolled back to {V1}: the new binary exited")),
            }
        );
    }

    #[test]
    fn downloading_without_a_digest_downloads_unverified() {
        let update = k0s("", false);
        let step = next(Some(SignalPhase::Downloading), &facts(&update));
        assert!(matches!(
            step,
            Step::Run { action: HostAction::Download { sha256: None, .. }, .. }
        ));
    }

    #[test]
    fn downloading_after_a_crash_with_the_file_staged_moves_on() {
        let update = k0s(SHA, false);
        let f = Facts { staged: true, proven: true, ..facts(&update) };
        assert_eq!(next(Some(SignalPhase::Downloading), &f), report(SignalPhase::Cordoning));
    }

    #[test]
    fn cordoning_and_uncordoning_wait_for_the_leader() {
        let update = k0s(SHA, false);
        let f = facts(&update);
        assert_eq!(next(Some(SignalPhase::Cordoning), &f), Step::Wait(WaitFor::Drain));
        assert_eq!(next(Some(SignalPhase::Uncordoning), &f), Step::Wait(WaitFor::Uncordon));
        let f = Facts { kubelet: false, ..f };
        assert_eq!(next(Some(SignalPhase::Cordoning), &f), Step::Wait(WaitFor::Leader));
        assert_eq!(next(Some(SignalPhase::Uncordoning), &f), Step::Wait(WaitFor::Leader));
    }

    #[test]
    fn applying_update_with_a_proven_staged_binary_goes_on_to_the_restart() {
        let update = k0s(SHA, false);
        let f = Facts { staged: true, proven: true, ..facts(&update) };
        assert_eq!(next(Some(SignalPhase::ApplyingUpdate), &f), report(SignalPhase::Restarting));
    }

    #[test]
    fn applying_update_after_crash_skips_swap_when_staged_file_is_gone() {
        let update = k0s(SHA, false);
        let f = Facts { live_sha256: Some(SHA), ..facts(&update) };
        assert_eq!(next(Some(SignalPhase::ApplyingUpdate), &f), report(SignalPhase::Restarting));
    }

    #[test]
    fn applying_update_without_a_digest_trusts_a_missing_staged_file() {
        let update = k0s("", false);
        assert_eq!(
            next(Some(SignalPhase::ApplyingUpdate), &facts(&update)),
            report(SignalPhase::Restarting)
        );
    }

    #[test]
    fn applying_update_fails_when_staged_file_is_gone_and_live_binary_is_not_the_new_one() {
        let update = k0s(SHA, false);
        let step = next(Some(SignalPhase::ApplyingUpdate), &facts(&update));
        assert!(reason(&step).contains(OTHER), "{step:?}");
        assert!(matches!(step, Step::Report { phase: SignalPhase::Failed, .. }));
        let f = Facts { live_sha256: None, ..facts(&update) };
        let step = next(Some(SignalPhase::ApplyingUpdate), &f);
        assert!(matches!(step, Step::Report { phase: SignalPhase::Failed, .. }));
    }

    #[test]
    fn restart_before_restarting_asks_for_the_restart() {
        let update = k0s(SHA, false);
        assert_eq!(
            next(Some(SignalPhase::Restarting), &facts(&update)),
            Step::Run {
                action: HostAction::Restart,
                on_success: SignalPhase::Restarting,
                on_failure: OnFailure::Retry,
            }
        );
    }

    #[test]
    fn restart_is_done_when_the_new_process_runs_the_requested_version() {
        let update = k0s(SHA, false);
        let f = Facts { restart: Restart::Done, running_version: V2, ..facts(&update) };
        assert_eq!(next(Some(SignalPhase::Restarting), &f), report(SignalPhase::Uncordoning));
    }

    #[test]
    fn restart_into_the_wrong_version_fails_with_both_versions() {
        let update = k0s(SHA, false);
        let f = Facts { restart: Restart::Done, ..facts(&update) };
        let step = next(Some(SignalPhase::Restarting), &f);
        assert_eq!(reason(&step), format!("running version {V1} after restart, expected {V2}"));
        assert!(matches!(step, Step::Report { phase: SignalPhase::Failed, .. }));
    }

    #[test]
    fn a_forced_restart_accepts_any_running_version() {
        let update = k0s(SHA, true);
        let f = Facts { restart: Restart::Done, ..facts(&update) };
        assert_eq!(next(Some(SignalPhase::Restarting), &f), report(SignalPhase::Uncordoning));
    }

    #[test]
    fn terminal_phases_are_done() {
        let update = k0s(SHA, false);
        for phase in [SignalPhase::Completed, SignalPhase::FailedDownload, SignalPhase::Failed] {
            assert_eq!(next(Some(phase), &facts(&update)), Step::Done, "{phase}");
        }
    }

    #[test]
    fn an_unreadable_restart_marker_fails_the_restart_instead_of_waiting() {
        let update = k0s(SHA, false);
        let f = Facts {
            restart: Restart::Unreadable { reason: "restart marker: expected value at line 1" },
            running_version: V2,
            ..facts(&update)
        };
        let Step::Report { phase: SignalPhase::Failed, reason: Some(reason) } =
            next(Some(SignalPhase::Restarting), &f)
        else {
            panic!("a restart with an unreadable marker must fail");
        };
        assert!(reason.contains("restart marker cannot be read"), "{reason}");
        assert!(reason.contains("expected value at line 1"), "{reason}");
        // Elsewhere the marker is not read by the decision: downloading goes on.
        assert!(matches!(next(Some(SignalPhase::Downloading), &f), Step::Run { .. }));
    }

    #[test]
    fn applying_update_without_the_drain_on_record_goes_back_to_cordoning_and_restarts_nothing() {
        let update = k0s(SHA, false);
        let undrained = Facts { drained: false, staged: true, proven: true, ..facts(&update) };
        for phase in [SignalPhase::ApplyingUpdate, SignalPhase::Restarting] {
            let Step::Report { phase: back, reason } = next(Some(phase), &undrained) else {
                panic!("{phase}: a report");
            };
            assert_eq!(back, SignalPhase::Cordoning, "{phase}");
            let reason = reason.unwrap_or_default();
            assert!(reason.contains("does not record this node's drain"), "{reason}");
        }
        let drained = Facts { drained: true, ..undrained };
        assert_eq!(
            next(Some(SignalPhase::ApplyingUpdate), &drained),
            report(SignalPhase::Restarting)
        );
        // After the restart the new binary judges it: the drain was done before.
        let restarted = Facts { restart: Restart::Done, running_version: V2, ..undrained };
        assert_eq!(
            next(Some(SignalPhase::Restarting), &restarted),
            report(SignalPhase::Uncordoning)
        );
    }

    #[test]
    fn every_phase_and_fact_combination_has_exactly_one_step() {
        // The whole table: every phase × every combination of the boolean facts. Terminal
        // phases stay terminal; only Downloading/ApplyingUpdate/Restarting act on the host.
        let update = k0s(SHA, false);
        let phases = std::iter::once(None).chain(SignalPhase::ALL.into_iter().map(Some));
        for phase in phases {
            for bits in 0..=255u8 {
                let f = Facts {
                    drained: bits & 128 != 0,
                    staged: bits & 1 != 0,
                    restart: match ((bits >> 1) & 3, bits & 64 != 0) {
                        (0, false) => Restart::NotYet,
                        (0, true) => Restart::Unreadable { reason: "garbage" },
                        (1, _) => Restart::Done,
                        _ => Restart::RolledBack { to: V1, reason: "crashed" },
                    },
                    kubelet: bits & 8 != 0,
                    running_version: if bits & 16 != 0 { V2 } else { V1 },
                    proven: bits & 32 != 0,
                    ..facts(&update)
                };
                let step = next(phase, &f);
                match (phase, &step) {
                    (Some(p), Step::Done) => assert!(p.is_terminal()),
                    (Some(p), _) => assert!(!p.is_terminal(), "{p} → {step:?}"),
                    (None, step) => assert!(matches!(step, Step::Report { .. })),
                }
                if let Step::Run { action, .. } = &step {
                    let allowed: &[ActionKind] = match phase {
                        Some(SignalPhase::Downloading) => {
                            &[ActionKind::Download, ActionKind::SelfTest]
                        }
                        Some(SignalPhase::ApplyingUpdate) => &[ActionKind::SelfTest],
                        Some(SignalPhase::Restarting) => &[ActionKind::Restart],
                        other => panic!("{other:?} must not act on the host"),
                    };
                    assert!(allowed.contains(&action.kind()), "{phase:?} → {step:?}");
                    // Nothing restarts past a drain the Plan does not record.
                    if action.kind() == ActionKind::Restart {
                        assert!(f.drained, "{f:?}");
                    }
                    // Nothing unproven ever goes on to the restart.
                    if phase == Some(SignalPhase::ApplyingUpdate)
                        && step == report(SignalPhase::Restarting)
                        && f.staged
                    {
                        assert!(f.proven, "{f:?}");
                    }
                }
                assert_eq!(next(phase, &f), step, "deciding is deterministic");
            }
        }
    }

    #[test]
    fn an_airgap_signal_downloads_the_bundle_and_completes_without_restart() {
        let update = CommandAirgapUpdate {
            url: "http://127.0.0.1/bundle.tar".into(),
            version: V2.into(),
            sha256: String::new(),
        };
        let k0s_update = k0s(SHA, false);
        let f = Facts { update: UpdateRef::Airgap(&update), ..facts(&k0s_update) };
        assert_eq!(next(None, &f), report(SignalPhase::Downloading));
        assert_eq!(
            next(Some(SignalPhase::Downloading), &f),
            Step::Run {
                action: HostAction::DownloadBundle { url: update.url.clone(), sha256: None },
                on_success: SignalPhase::Completed,
                on_failure: OnFailure::Report(SignalPhase::FailedDownload),
            }
        );
        let step = next(Some(SignalPhase::Restarting), &f);
        assert!(matches!(step, Step::Report { phase: SignalPhase::Failed, .. }), "{step:?}");
        assert_eq!(next(Some(SignalPhase::Completed), &f), Step::Done);
    }

    #[test]
    fn a_preflight_signal_runs_until_answered() {
        assert_eq!(preflight(None), PreflightStep::Run);
        for phase in SignalPhase::ALL {
            let expected =
                if phase.is_terminal() { PreflightStep::Done } else { PreflightStep::Run };
            assert_eq!(preflight(Some(phase)), expected, "{phase}");
        }
    }
    #[test]
    fn a_rollback_after_the_update_fails_the_signal_once_whatever_its_phase() {
        for phase in std::iter::once(None).chain(SignalPhase::ALL.map(Some)) {
            let step = after_update_rollback(phase, "the new binary exited abnormally 3 times");
            if phase == Some(SignalPhase::Failed) {
                assert_eq!(step, None);
            } else {
                assert_eq!(
                    step,
                    Some(Step::Report {
                        phase: SignalPhase::Failed,
                        reason: Some(
                            "rolled back after the update: the new binary exited abnormally 3 times"
                                .into()
                        ),
                    }),
                    "{phase:?}"
                );
            }
        }
    }

    // === Rollback ===

    fn rollback(of: RollbackOf) -> CommandRollback {
        CommandRollback { version: V1.into(), of }
    }

    /// Facts of a node that runs V2 (the run's update) and is asked to go back to V1.
    fn rolled(rollback: &CommandRollback) -> Facts<'_> {
        Facts {
            update: UpdateRef::Rollback(rollback),
            running_version: V2,
            staged: false,
            proven: false,
            live_sha256: Some(OTHER),
            restart: Restart::NotYet,
            kubelet: true,
            drained: true,
        }
    }

    #[test]
    fn a_rollback_on_a_node_that_runs_the_from_version_completes_at_once() {
        let back = rollback(RollbackOf::K0s);
        let f = Facts { running_version: V1, ..rolled(&back) };
        assert_eq!(next(None, &f), report(SignalPhase::Completed));
        assert_eq!(next(None, &rolled(&back)), report(SignalPhase::Downloading));
    }

    #[test]
    fn a_k0s_rollback_stages_k0s_prev_instead_of_downloading_and_fails_as_failed() {
        let back = rollback(RollbackOf::K0s);
        assert_eq!(
            next(Some(SignalPhase::Downloading), &rolled(&back)),
            Step::Run {
                action: HostAction::StagePrevious { version: V1.into() },
                on_success: SignalPhase::Downloading,
                on_failure: OnFailure::Report(SignalPhase::Failed),
            }
        );
        assert_eq!(ActionKind::StagePrevious.describe(), "staging the previous binary");
    }

    #[test]
    fn a_staged_previous_binary_is_self_tested_for_exactly_the_from_version() {
        let back = rollback(RollbackOf::K0s);
        // Staged but not proven: a crash between the copy and its record.
        let f = Facts { staged: true, ..rolled(&back) };
        let self_test = |on_success| Step::Run {
            action: HostAction::SelfTest { version: V1.into(), any_version: false },
            on_success,
            on_failure: OnFailure::Report(SignalPhase::Failed),
        };
        assert_eq!(next(Some(SignalPhase::Downloading), &f), self_test(SignalPhase::Cordoning));
        assert_eq!(
            next(Some(SignalPhase::ApplyingUpdate), &f),
            self_test(SignalPhase::ApplyingUpdate)
        );
        let f = Facts { staged: true, proven: true, ..rolled(&back) };
        assert_eq!(next(Some(SignalPhase::Downloading), &f), report(SignalPhase::Cordoning));
        assert_eq!(next(Some(SignalPhase::ApplyingUpdate), &f), report(SignalPhase::Restarting));
    }

    #[test]
    fn a_k0s_rollback_is_cordoned_drained_and_uncordoned_like_an_update() {
        let back = rollback(RollbackOf::K0s);
        let f = rolled(&back);
        assert_eq!(next(Some(SignalPhase::Cordoning), &f), Step::Wait(WaitFor::Drain));
        assert_eq!(next(Some(SignalPhase::Uncordoning), &f), Step::Wait(WaitFor::Uncordon));
        let f = Facts { kubelet: false, ..f };
        assert_eq!(next(Some(SignalPhase::Cordoning), &f), Step::Wait(WaitFor::Leader));
        assert_eq!(next(Some(SignalPhase::Uncordoning), &f), Step::Wait(WaitFor::Leader));
    }

    #[test]
    fn a_k0s_rollback_whose_staged_file_is_gone_restarts_without_a_digest_check() {
        // Swapped in by an earlier pass: `k0s.prev` changed with the swap, so only the
        // version after the restart can tell.
        let back = rollback(RollbackOf::K0s);
        let f = Facts { live_sha256: None, ..rolled(&back) };
        assert_eq!(next(Some(SignalPhase::ApplyingUpdate), &f), report(SignalPhase::Restarting));
    }

    #[test]
    fn a_k0s_rollback_restarts_and_completes_only_on_the_from_version() {
        let back = rollback(RollbackOf::K0s);
        assert_eq!(
            next(Some(SignalPhase::Restarting), &rolled(&back)),
            Step::Run {
                action: HostAction::Restart,
                on_success: SignalPhase::Restarting,
                on_failure: OnFailure::Retry,
            }
        );
        let f = Facts { restart: Restart::Done, running_version: V1, ..rolled(&back) };
        assert_eq!(next(Some(SignalPhase::Restarting), &f), report(SignalPhase::Uncordoning));
        let f = Facts { restart: Restart::Done, ..rolled(&back) };
        let step = next(Some(SignalPhase::Restarting), &f);
        assert_eq!(reason(&step), format!("running version {V2} after restart, expected {V1}"));
        let f =
            Facts { restart: Restart::RolledBack { to: V2, reason: "it exited" }, ..rolled(&back) };
        let step = next(Some(SignalPhase::Restarting), &f);
        assert_eq!(reason(&step), format!("rolled back to {V2}: it exited"));
    }

    #[test]
    fn a_rollback_without_a_usable_version_is_refused() {
        let back = CommandRollback { version: " ".into(), of: RollbackOf::K0s };
        let step = next(None, &rolled(&back));
        assert!(reason(&step).starts_with("refused: command.rollback.version: "), "{step:?}");
        let airgap = CommandRollback { version: "v1 .2".into(), of: RollbackOf::Airgap };
        let step = next(Some(SignalPhase::Downloading), &rolled(&airgap));
        assert!(reason(&step).starts_with("refused: command.rollback.version: "), "{step:?}");
        assert_eq!(next(Some(SignalPhase::Failed), &rolled(&back)), Step::Done);
    }

    #[test]
    fn an_airgap_rollback_restores_the_kept_bundle_and_completes_without_restart() {
        let back = rollback(RollbackOf::Airgap);
        let f = rolled(&back);
        assert_eq!(next(None, &f), report(SignalPhase::Downloading));
        assert_eq!(
            next(Some(SignalPhase::Downloading), &f),
            Step::Run {
                action: HostAction::RestoreBundle,
                on_success: SignalPhase::Completed,
                on_failure: OnFailure::Report(SignalPhase::Failed),
            }
        );
        for phase in [
            SignalPhase::Cordoning,
            SignalPhase::ApplyingUpdate,
            SignalPhase::Restarting,
            SignalPhase::Uncordoning,
        ] {
            let step = next(Some(phase), &f);
            assert_eq!(reason(&step), format!("phase {phase} is not part of an airgap rollback"));
        }
        for phase in [SignalPhase::Completed, SignalPhase::FailedDownload, SignalPhase::Failed] {
            assert_eq!(next(Some(phase), &f), Step::Done, "{phase}");
        }
        // The node's own version does not matter to a bundle.
        let f = Facts { running_version: V1, ..f };
        assert_eq!(next(None, &f), report(SignalPhase::Downloading));
    }

    #[test]
    fn every_phase_and_fact_combination_of_a_k0s_rollback_has_exactly_one_step() {
        let back = rollback(RollbackOf::K0s);
        let phases = std::iter::once(None).chain(SignalPhase::ALL.into_iter().map(Some));
        for phase in phases {
            for bits in 0..128u8 {
                let f = Facts {
                    drained: bits & 64 != 0,
                    staged: bits & 1 != 0,
                    proven: bits & 2 != 0,
                    restart: match (bits >> 2) & 3 {
                        0 => Restart::NotYet,
                        1 => Restart::Done,
                        2 => Restart::Unreadable { reason: "garbage" },
                        _ => Restart::RolledBack { to: V2, reason: "crashed" },
                    },
                    running_version: if bits & 16 != 0 { V1 } else { V2 },
                    kubelet: bits & 32 != 0,
                    ..rolled(&back)
                };
                let step = next(phase, &f);
                match (phase, &step) {
                    (Some(p), Step::Done) => assert!(p.is_terminal()),
                    (Some(p), _) => assert!(!p.is_terminal(), "{p} → {step:?}"),
                    (None, step) => assert!(matches!(step, Step::Report { .. })),
                }
                if let Step::Run { action, .. } = &step {
                    // Never a download: a rollback only uses what is on the node.
                    let allowed: &[ActionKind] = match phase {
                        Some(SignalPhase::Downloading) => {
                            &[ActionKind::StagePrevious, ActionKind::SelfTest]
                        }
                        Some(SignalPhase::ApplyingUpdate) => &[ActionKind::SelfTest],
                        Some(SignalPhase::Restarting) => &[ActionKind::Restart],
                        other => panic!("{other:?} must not act on the host"),
                    };
                    assert!(allowed.contains(&action.kind()), "{phase:?} → {step:?}");
                }
                if phase == Some(SignalPhase::ApplyingUpdate)
                    && step == report(SignalPhase::Restarting)
                    && f.staged
                {
                    assert!(f.proven, "nothing unproven goes on to the restart: {f:?}");
                }
            }
        }
    }
}
