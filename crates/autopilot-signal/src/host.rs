//! The host effects of the signal agent behind [`Host`]: download and stage, swap the
//! binary, prepare a restart; for a rollback (DESIGN §15), stage `k0s.prev` again or put
//! back the airgap bundle a run replaced. [`LinuxHost`] does them for real; [`FakeHost`] keeps an
//! in-memory disk with injectable failures and crashes for replay tests.
//!
//! Not here: re-exec or exit of the process (the agent shell does that after
//! [`Host::prepare_restart`] returns) and anything talking to the API server.

pub mod fake;
pub mod linux;

use std::path::PathBuf;

use autopilot_api::signal::{SignalData, UpdateRef};
use serde::{Deserialize, Serialize};

use crate::download::DownloadError;
use autopilot_engine::agent::{ActionKind, Facts, HostAction, Restart};

pub use fake::FakeHost;
pub use linux::{LinuxHost, Signing};

/// Result of this module.
pub type Result<T, E = HostError> = std::result::Result<T, E>;

/// Why a host action or observation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Downloading, verifying or storing the artifact failed.
    #[error(transparent)]
    Download(#[from] DownloadError),
    /// A file system operation failed.
    #[error("{action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The staged binary failed its self-test; it was removed.
    #[error("the downloaded binary failed its self-test: {reason}")]
    SelfTest {
        /// What happened when it ran (exit status and first line of output, or why it
        /// could not be started).
        reason: String,
    },
    /// The staged binary carries Kubernetes components of another minor than its k0s
    /// version names (`autopilot_engine::carried`), or a component manifest that cannot be
    /// read; it was removed, and nothing was swapped.
    #[error("the downloaded binary was refused before the swap: {reason}")]
    Carried {
        /// Which components, their versions and the minor expected (or why the manifest
        /// cannot be read).
        reason: String,
    },
    /// The restart marker exists but cannot be parsed.
    #[error("parsing restart marker {path}")]
    Marker {
        /// The marker's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A hashing or I/O task could not be joined.
    #[error("background task failed")]
    Task(#[source] tokio::task::JoinError),
    /// The payload's signature is missing or unusable where this node requires one
    /// (DESIGN §14); a signature that does not verify is a [`DownloadError::Signature`].
    #[error("{reason}")]
    Signature {
        /// What is wrong, naming the keys the node requires.
        reason: String,
    },
    /// A rollback cannot put back what the node ran before: there is no `k0s.prev`, it runs
    /// another version than the one to go back to, or the node kept no bundle for the run.
    /// Nothing was changed.
    #[error("{reason}")]
    Rollback {
        /// What is missing or does not match (naming the file and both versions).
        reason: String,
    },
    /// [`FakeHost`] only: a failure injected with [`FakeHost::fail_next`].
    #[error("injected failure of {0:?}")]
    Injected(ActionKind),
    /// [`FakeHost`] only: the simulated process crashed (see [`FakeHost::crash_after`]).
    #[error("simulated crash")]
    Crashed,
}

impl HostError {
    /// Wraps an I/O error with what was being done on which path.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io { action, path: path.into(), source }
    }

    /// A stable, low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Download(e) => e.metric_label(),
            Self::Io { .. } => "io",
            Self::SelfTest { .. } => "self_test",
            Self::Carried { .. } => "carried",
            Self::Signature { .. } => "signature",
            Self::Rollback { .. } => "rollback",
            Self::Marker { .. } => "marker",
            Self::Task(_) => "task",
            Self::Injected(_) => "injected",
            Self::Crashed => "crashed",
        }
    }

    /// The error and its causes joined with `": "`, for a signal status reason.
    pub fn reason(&self) -> String {
        let mut out = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            out.push_str(": ");
            out.push_str(&cause.to_string());
            source = cause.source();
        }
        out
    }
}

/// Where a payload's signature comes from: the frozen Plan entry the signal matched
/// (`signature` inline, or `signatureURL`). Both empty: the Plan gives none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignatureSource {
    /// The signature file's text, inline.
    pub inline: Option<String>,
    /// Where to download the signature file.
    pub url: Option<String>,
}

impl SignatureSource {
    /// The signature `entry` gives.
    pub fn of(entry: &autopilot_api::v1beta2::PlanResourceUrl) -> Self {
        Self { inline: entry.signature.clone(), url: entry.signature_url.clone() }
    }
}

/// Identity of one signal: a restart marker or staged file belongs to exactly one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalKey {
    /// The plan's `spec.id`.
    pub plan_id: String,
    /// When the leader signalled.
    pub created: String,
    /// The command index.
    pub command_id: u32,
    /// The plan run, if the signal names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl SignalKey {
    /// The key of `signal`.
    pub fn of(signal: &SignalData) -> Self {
        Self {
            plan_id: signal.plan_id.clone(),
            created: signal.created.clone(),
            command_id: signal.command.id,
            run_id: signal.run_id.clone(),
        }
    }
}

/// What the restart marker file holds: which signal, prepared by which process instance,
/// and how the new binary's trial boot went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartMarker {
    /// The signal the restart is for.
    pub signal: SignalKey,
    /// The instance id of the process that prepared it (see [`LinuxHost::instance`]).
    pub instance: String,
    /// The trial boot of the new binary (see `crate::trial`). A marker without it was
    /// written by a version without trial boots, which swapped before restarting: for it
    /// the restart was the whole story, so it reads as passed.
    #[serde(default = "TrialState::before_trials")]
    pub trial: TrialState,
    /// The post-update watch of the new binary once it passed its trial and was swapped in
    /// (see `crate::post_update`); absent before that, and with `--post-update-watch 0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchRecord>,
}

/// The post-update watch (DESIGN §15) as the restart marker records it: what
/// `autopilot_engine::post_update::decide` judges, and what a rollback needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchRecord {
    /// When the watch began (the swap), wall clock, unix seconds: which watch this is (a
    /// running binary's watch ends when the marker holds another one), never a deadline.
    pub since: i64,
    /// How long it lasts, in seconds (`--post-update-watch`), counting only time while the
    /// API server answered.
    pub window_secs: u64,
    /// How long, in seconds, the new binary has run while its quorum reads of its own object
    /// succeeded (the datastore answered), over all its starts: counted by the running
    /// binary and recorded every few seconds. Absent in a marker of a version that counted
    /// the wall clock (then nothing was counted yet).
    #[serde(default)]
    pub answered_secs: u64,
    /// The version of the proven binary (kept as `k0s.prev`), which a rollback puts back.
    pub from: String,
    /// The version of the new binary, if its self-test told it (empty: unknown).
    pub to: String,
    /// SHA-256 of the new binary as swapped in: a rollback takes only this file out.
    pub to_sha256: String,
    /// Which file the new binary is (device and inode, as swapped in): a rollback takes out
    /// only this very file with that digest, never another copy of the same bytes (one an
    /// operator installed by hand). Absent in a marker of a version that did not record it
    /// (then the digest alone decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_file: Option<FileId>,
    /// How many times the new binary started.
    pub starts: u32,
    /// How many of its runs ended without a clean stop.
    pub abnormal_exits: u32,
    /// Its last start has not stopped cleanly (yet).
    pub running: bool,
    /// The guard (`k0s.prev post-update-guard`) counted the start that follows it, and the
    /// new binary has not taken it up yet: it dies (or hangs until the watchdog kills it)
    /// before it records anything, and the exit is still counted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counted: bool,
    /// Where the watch stands.
    pub state: WatchState,
}

/// Where a post-update watch stands, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum WatchState {
    /// The new binary is watched.
    Watching,
    /// It stayed healthy long enough: the watch is over.
    Proven {
        /// When (unix seconds).
        at: i64,
    },
    /// The proven binary was put back.
    RolledBack {
        /// Why, as a metric label (`crashed`, `unhealthy`).
        reason: String,
        /// Why, in words.
        why: String,
        /// When (unix seconds).
        at: i64,
        /// The proven binary has reported it (log, Event, metric).
        reported: bool,
    },
}

/// A file's identity on this host: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    /// The device.
    pub dev: u64,
    /// The inode.
    pub ino: u64,
}

impl FileId {
    /// The identity of the file at `path` (following links), if it can be read.
    pub fn of(path: &std::path::Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(path).ok().map(|m| Self { dev: m.dev(), ino: m.ino() })
    }
}

impl WatchRecord {
    /// The watch as the pure decision sees it.
    pub fn view(&self) -> autopilot_engine::post_update::Watch {
        use autopilot_engine::post_update::{State, Watch};
        Watch {
            window: std::time::Duration::from_secs(self.window_secs),
            answered_for: std::time::Duration::from_secs(self.answered_secs),
            starts: self.starts,
            abnormal_exits: self.abnormal_exits,
            running: self.running,
            counted: self.counted,
            state: match &self.state {
                WatchState::Watching => State::Watching,
                WatchState::Proven { .. } => State::Proven,
                WatchState::RolledBack { reported, .. } => {
                    State::RolledBack { reported: *reported }
                }
            },
        }
    }

    /// Whether a process running `version` is the new binary this watch is about.
    pub fn is_about(&self, version: &str) -> bool {
        if self.to.is_empty() { version != self.from } else { version == self.to }
    }
}

/// What a passed trial starts watching: for how long, and the versions involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchStart {
    /// `--post-update-watch` (zero: no watch).
    pub window: std::time::Duration,
    /// The proven version (the running process's).
    pub from: String,
    /// The new version, if known.
    pub to: Option<String>,
}

/// Where the trial boot of a new binary stands, as recorded in the restart marker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum TrialState {
    /// The restart is prepared; the trial has not concluded. A process of another instance
    /// that reads this found the trial interrupted (the process running it died): it runs
    /// the restart, and so the trial, again.
    Pending,
    /// The new binary became healthy; it is proven.
    Passed,
    /// The new binary failed its trial; the previous one was put back.
    RolledBack {
        /// The version put back.
        to: String,
        /// Why the new binary was refused.
        reason: String,
    },
}

impl TrialState {
    fn before_trials() -> Self {
        Self::Passed
    }
}

/// What the staging record (`<data-dir>/autopilot-staged.json`) says about the staged
/// binary: which signal it was downloaded for, its digest, which trusted key's signature
/// verified it, and whether it passed the self-test. It describes the staged file only while
/// the digest matches the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagedRecord {
    /// The signal the file was downloaded for.
    pub signal: SignalKey,
    /// SHA-256 of the staged file when it was recorded.
    pub sha256: String,
    /// The id of the trusted key whose signature verified the file when it was downloaded
    /// (none when the node required no signature then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// The version the file reported in its self-test, once it passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_tested: Option<String>,
}

impl StagedRecord {
    /// Whether the staged file with digest `actual` is the one for `signal` (expecting
    /// `want`, if the signal names a digest), and whether it passed its self-test:
    /// `(staged, proven)`.
    ///
    /// `trusted` are the ids of the keys the node trusts now, when its payloads must be
    /// signed (empty: no signature required). The file is then taken only if its record says
    /// one of them verified it: a file staged before the node's keys changed (a key
    /// withdrawn, keys given where there were none) is not, and is downloaded and verified
    /// again. A signature's verdict depends only on the bytes and the key, so a key still
    /// trusted needs no second check.
    pub fn judge(
        record: Option<&Self>,
        actual: Option<&str>,
        want: Option<&str>,
        signal: &SignalKey,
        trusted: &[&str],
    ) -> (bool, bool) {
        let Some(actual) = actual else { return (false, false) };
        let recorded = record.filter(|r| r.sha256 == actual);
        let digest_ok = match want {
            Some(want) => want == actual,
            // Without a digest only the record ties the file to this signal.
            None => recorded.is_some_and(|r| &r.signal == signal),
        };
        let signature_ok = trusted.is_empty()
            || recorded
                .and_then(|r| r.signed_by.as_deref())
                .is_some_and(|key| trusted.contains(&key));
        let staged = digest_ok && signature_ok;
        (staged, staged && recorded.is_some_and(|r| r.self_tested.is_some()))
    }

    /// For a rollback to `version`: whether `record` proves the staged copy of `k0s.prev`.
    /// The digest ties the file to `k0s.prev`, not to a version, so only this signal's own
    /// self-test of exactly `version` counts (not an earlier signal's test of the same
    /// bytes).
    pub fn proves_rollback(record: Option<&Self>, signal: &SignalKey, version: &str) -> bool {
        record.is_some_and(|r| &r.signal == signal && r.self_tested.as_deref() == Some(version))
    }
}

/// What the bundle staging record (`<data-dir>/autopilot-staged-bundle.json`) says: the
/// pre-staged airgap bundle's URL, digest and file name (in `images.staged/`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagedBundle {
    /// Where it was downloaded from.
    pub url: String,
    /// Its SHA-256 (lowercase hex).
    pub sha256: String,
    /// Its file name.
    pub name: String,
    /// The id of the trusted key whose signature verified it, if one was checked: a bundle
    /// whose update expects a signature is taken only while that key is still trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
}

/// What the node kept when it stored an airgap bundle (`<data-dir>/autopilot-bundle.json`),
/// so that a rollback of that signal's run can undo it: the file the bundle replaced is kept
/// in `<data-dir>/images.prev/`, or the record says the bundle added a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleRecord {
    /// The airgap update signal that stored the bundle.
    pub signal: SignalKey,
    /// The bundle's file name in the images directory.
    pub name: String,
    /// A file of that name was there before, and is kept; otherwise the bundle added the
    /// file, and a rollback removes it.
    pub replaced: bool,
}

impl BundleRecord {
    /// The record a rollback signalled as `rollback` may undo: one kept for an airgap update
    /// of the same Plan run and command. Otherwise why not (nothing is guessed).
    pub fn for_rollback<'r>(
        record: Option<&'r Self>,
        rollback: &SignalKey,
    ) -> std::result::Result<&'r Self, String> {
        let Some(record) = record else {
            return Err("no previous airgap bundle to roll back to: this node kept none".into());
        };
        let kept = &record.signal;
        if kept.plan_id == rollback.plan_id
            && kept.run_id == rollback.run_id
            && kept.command_id == rollback.command_id
        {
            return Ok(record);
        }
        let run = |key: &SignalKey| key.run_id.clone().unwrap_or_else(|| "none".into());
        Err(format!(
            "the airgap bundle this node kept is from command {} of run {}, not from command {} \
             of run {}: nothing to roll back to",
            kept.command_id,
            run(kept),
            rollback.command_id,
            run(rollback)
        ))
    }
}

/// How the restart for a signal went, as this process sees it (owned
/// [`autopilot_engine::agent::Restart`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RestartState {
    /// Not restarted for this signal.
    #[default]
    NotYet,
    /// Restarted into the new binary, which passed its trial.
    Done,
    /// The new binary was refused and the previous one put back.
    RolledBack {
        /// The version put back.
        to: String,
        /// Why.
        reason: String,
    },
    /// The restart marker cannot be read (a corrupt file): what the restart came to is not
    /// known; the reason says why.
    Unreadable(String),
}

impl RestartState {
    /// What `marker` means for `signal` in the process `instance`.
    pub fn of(marker: Option<&RestartMarker>, signal: &SignalKey, instance: &str) -> Self {
        match marker {
            Some(m) if &m.signal == signal && m.instance != instance => match &m.trial {
                TrialState::Pending => Self::NotYet,
                TrialState::Passed => Self::Done,
                TrialState::RolledBack { to, reason } => {
                    Self::RolledBack { to: to.clone(), reason: reason.clone() }
                }
            },
            Some(_) | None => Self::NotYet,
        }
    }
}

/// The host's share of [`Facts`], owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// A verified staged binary for this signal exists next to the live binary.
    pub staged: bool,
    /// The staged binary passed its self-test.
    pub proven: bool,
    /// SHA-256 of the live binary (lowercase hex), if readable.
    pub live_sha256: Option<String>,
    /// How the restart for this signal went.
    pub restart: RestartState,
    /// The post-update watch of this signal's update rolled the node back: why.
    pub rolled_back_after_update: Option<String>,
}

impl Observed {
    /// The full facts for the phase machine; `drained`: the Plan status records the
    /// leader's drain of this node for the signal.
    pub fn facts<'a>(
        &'a self,
        update: UpdateRef<'a>,
        running_version: &'a str,
        kubelet: bool,
        drained: bool,
    ) -> Facts<'a> {
        Facts {
            update,
            running_version,
            staged: self.staged,
            proven: self.proven,
            live_sha256: self.live_sha256.as_deref(),
            restart: match &self.restart {
                RestartState::NotYet => Restart::NotYet,
                RestartState::Done => Restart::Done,
                RestartState::RolledBack { to, reason } => Restart::RolledBack { to, reason },
                RestartState::Unreadable(reason) => Restart::Unreadable { reason },
            },
            kubelet,
            drained,
        }
    }
}

/// Host effects. Every method is idempotent: calling it again after a crash at any point
/// converges, and the live binary is always a complete file (old or new).
#[allow(async_fn_in_trait)] // single-threaded use inside the agent; revisit if we need Send bounds
pub trait Host {
    /// The host facts for `signal` asking for `update` (read-only).
    async fn observe(&self, signal: &SignalKey, update: UpdateRef<'_>) -> Result<Observed>;

    /// Downloads `url`, verifies `sha256` (and the signature from `signature` when the node
    /// has trusted keys) and stages it next to the live binary for `signal` (recording which
    /// signal it is for). The live binary is never touched; a failure leaves no staged or
    /// temp file behind.
    async fn download(
        &self,
        signal: &SignalKey,
        url: &str,
        sha256: Option<&str>,
        signature: &SignatureSource,
    ) -> Result<()>;

    /// Runs the staged binary's `version` (bounded time, clean environment, no shell) and
    /// records that it passed if it exits 0 and prints `version` (any version if
    /// `any_version`); otherwise removes it and fails with [`HostError::SelfTest`]. Then
    /// reads the component set the binary carries: Kubernetes components of another minor
    /// than the version it reported names remove it too, with [`HostError::Carried`].
    async fn self_test(&self, signal: &SignalKey, version: &str, any_version: bool) -> Result<()>;

    /// Downloads and verifies an airgap bundle into the images directory (its signature
    /// when the node requires signed bundles or the Plan gives one); returns its path.
    /// Before the bundle replaces a file (or adds one), what was there is kept for a rollback
    /// of `signal`'s run (see [`BundleRecord`]), once per signal.
    async fn download_bundle(
        &self,
        signal: &SignalKey,
        url: &str,
        sha256: Option<&str>,
        signature: &SignatureSource,
    ) -> Result<PathBuf>;

    /// Pre-stages an airgap bundle (`prestage: true`): downloads and verifies it (as
    /// [`Host::download_bundle`] does) into a staging directory beside the images directory,
    /// recording its URL and digest. A later [`Host::download_bundle`] of the same URL and
    /// sha256 takes the staged file instead of downloading. Nothing reaches the images
    /// directory.
    async fn stage_bundle(
        &self,
        url: &str,
        sha256: Option<&str>,
        signature: &SignatureSource,
    ) -> Result<()>;

    /// Moves the staged binary over the live one (same directory, `rename(2)`). What
    /// happens to the live one is [`what_the_swap_keeps`]: kept as `k0s.prev` if it is
    /// proven (it is the binary this process runs); when the staged binary has `k0s.prev`'s
    /// very bytes (a fleet rollback, or a run back to that version), `k0s.prev` stays the
    /// fallback and the live one is kept as `k0s.rejected`, mode 0644, never run again; an
    /// unproven live binary (swapped in, never run) is replaced and `k0s.prev` stays.
    /// Without a staged binary: nothing to do (already swapped).
    fn swap_binary(&self) -> Result<()>;

    /// Records the restart marker for `signal` (trial pending). The caller runs the trial
    /// boot and then re-execs (or exits).
    fn prepare_restart(&self, signal: &SignalKey) -> Result<()>;

    /// The new binary passed its trial boot (and is swapped in): records it in the restart
    /// marker, with the post-update watch `watch` starts (none if `None` or zero long).
    fn pass_trial(&self, signal: &SignalKey, watch: Option<&WatchStart>) -> Result<()>;

    /// The new binary failed its trial boot: the node goes back to the binary it ran
    /// (`to_version`, still live: the staged one was never swapped in). Keeps the refused
    /// binary as `k0s.refused` for inspection and records `reason` in the restart marker.
    /// Idempotent: after a crash at any point, calling it again converges.
    fn roll_back(&self, signal: &SignalKey, to_version: &str, reason: &str) -> Result<()>;

    /// Whether a staged binary waits for the swap.
    fn has_staged(&self) -> bool;

    /// A k0s rollback: copies `k0s.prev` as the staged binary for `signal` (whole, by
    /// rename; `k0s.prev` itself stays until the swap) and self-tests it: it must report
    /// exactly `version`, the version the node ran before the run. Without a `k0s.prev`, or
    /// when it runs another version, fails with [`HostError::Rollback`] and stages nothing.
    async fn stage_previous(&self, signal: &SignalKey, version: &str) -> Result<()>;

    /// An airgap rollback: puts back the bundle file that the airgap update of `signal`'s
    /// run (same Plan, run and command) replaced, or removes the one it added. Fails with
    /// [`HostError::Rollback`] when the node kept nothing for that run. Idempotent: what was
    /// kept stays kept.
    fn restore_bundle(&self, signal: &SignalKey) -> Result<()>;
}

/// Performs `action` for `signal` on `host`; a download checks the signature from
/// `signature` (the Plan's, as the signal's frozen entry gives it).
pub async fn perform(
    host: &impl Host,
    action: &HostAction,
    signal: &SignalKey,
    signature: &SignatureSource,
) -> Result<()> {
    match action {
        HostAction::Download { url, sha256 } => {
            host.download(signal, url, sha256.as_deref(), signature).await
        }
        HostAction::SelfTest { version, any_version } => {
            host.self_test(signal, version, *any_version).await
        }
        HostAction::DownloadBundle { url, sha256 } => {
            host.download_bundle(signal, url, sha256.as_deref(), signature).await.map(drop)
        }
        HostAction::Restart => host.prepare_restart(signal),
        HostAction::StagePrevious { version } => host.stage_previous(signal, version).await,
        HostAction::RestoreBundle => host.restore_bundle(signal),
    }
}

/// The expected digest of `update`, lowercase, if it names one.
pub(crate) fn expected_sha256(update: UpdateRef<'_>) -> Option<String> {
    let sha = match update {
        UpdateRef::K0s(u) => u.sha256.trim(),
        UpdateRef::Airgap(u) => u.sha256.trim(),
        // A rollback downloads nothing; its staged file is tied to `k0s.prev` instead.
        UpdateRef::Rollback(_) => "",
    };
    (!sha.is_empty()).then(|| sha.to_ascii_lowercase())
}

/// Judges one self-test run of a staged binary: `exit` is its exit code (`None`: killed by
/// a signal), `output` what it printed (stdout, then stderr). Passes with the version it
/// reported if it exited 0 and its first line is `version` (or, with `any_version`, looks
/// like a version); otherwise says why, quoting the exit status and first line.
pub fn judge_self_test(
    exit: Option<i32>,
    output: &str,
    version: &str,
    any_version: bool,
) -> std::result::Result<String, String> {
    let first = output.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default();
    let quoted = autopilot_api::text::truncate(first, 200);
    match exit {
        Some(0) => {}
        Some(code) => return Err(format!("`version` exited with status {code}: {quoted:?}")),
        None => return Err(format!("`version` was killed by a signal: {quoted:?}")),
    }
    let looks_like_version = first.starts_with('v')
        && first[1..].starts_with(|c: char| c.is_ascii_digit())
        && !first.contains(char::is_whitespace);
    if first == version || (any_version && looks_like_version) {
        Ok(first.to_string())
    } else if any_version {
        Err(format!("`version` printed {quoted:?}, which is not a version"))
    } else {
        Err(format!("`version` reported {quoted:?}, expected {version}"))
    }
}

/// Judges the self-test of a copy of `k0s.prev` (named `name`) for a rollback to
/// `version`, like [`judge_self_test`]: passes with `version` only if it exited 0 and
/// reported exactly that; otherwise why, naming the file and both versions.
pub fn judge_previous(
    name: &str,
    exit: Option<i32>,
    output: &str,
    version: &str,
) -> std::result::Result<String, String> {
    match judge_self_test(exit, output, version, true) {
        Ok(reported) if reported == version => Ok(reported),
        Ok(reported) => Err(format!(
            "{name} runs {reported}, not the version this node ran before the run ({version})"
        )),
        Err(reason) => Err(format!("{name} does not run: {reason}")),
    }
}

/// What a swap does with the live binary it replaces (see [`what_the_swap_keeps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapKeeps {
    /// Nothing: the live binary never ran here (swapped in by an earlier signal), so it is
    /// no fallback; `k0s.prev` stays.
    Nothing,
    /// The live binary becomes `k0s.prev`: it is the proven one this process runs.
    LiveAsPrevious,
    /// `k0s.prev` stays the fallback (the staged binary is its very bytes: a fleet rollback,
    /// or a run back to that version), and the live binary, the version moved away from, is
    /// kept as `k0s.rejected`, not executable: nothing (the units' `k0s.prev
    /// post-update-guard` included) runs it again.
    LiveRejected,
}

/// What the swap keeps of the live binary: whether it is the binary this process runs
/// (`live_runs`), whether the staged binary has `k0s.prev`'s bytes (`staged_is_previous`),
/// and whether the live binary has them too (`live_is_previous`: a reinstall of the same
/// bytes, nothing is moved away from).
pub fn what_the_swap_keeps(
    live_runs: bool,
    staged_is_previous: bool,
    live_is_previous: bool,
) -> SwapKeeps {
    match (live_runs, staged_is_previous && !live_is_previous) {
        (false, _) => SwapKeeps::Nothing,
        (true, true) => SwapKeeps::LiveRejected,
        (true, false) => SwapKeeps::LiveAsPrevious,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V2: &str = "v1.35.1+k0s.0";

    #[test]
    fn a_swap_back_to_k0s_prev_keeps_it_as_the_fallback_and_rejects_the_live_binary() {
        // A fleet rollback: the staged binary is a copy of `k0s.prev`.
        assert_eq!(what_the_swap_keeps(true, true, false), SwapKeeps::LiveRejected);
        // Any other update keeps the proven live binary as the fallback.
        assert_eq!(what_the_swap_keeps(true, false, false), SwapKeeps::LiveAsPrevious);
        // A reinstall of `k0s.prev`'s bytes over the same bytes moves nothing away.
        assert_eq!(what_the_swap_keeps(true, true, true), SwapKeeps::LiveAsPrevious);
        // A live binary that never ran here is no fallback and is not kept.
        for (staged, live) in [(true, false), (false, false), (true, true)] {
            assert_eq!(what_the_swap_keeps(false, staged, live), SwapKeeps::Nothing);
        }
    }

    #[test]
    fn a_staged_file_is_taken_only_if_a_key_trusted_now_verified_it() {
        let signal = SignalKey {
            plan_id: "id".into(),
            created: "prestage 2026-11-26T00:00:00Z".into(),
            command_id: 0,
            run_id: Some("r".into()),
        };
        let record = |signed_by: Option<&str>| StagedRecord {
            signal: signal.clone(),
            sha256: "ab".into(),
            signed_by: signed_by.map(str::to_owned),
            self_tested: Some(V2.into()),
        };
        let judge = |record: &StagedRecord, trusted: &[&str]| {
            StagedRecord::judge(Some(record), Some("ab"), Some("ab"), &signal, trusted)
        };
        assert_eq!(judge(&record(Some("k1")), &["k0", "k1"]), (true, true), "still trusted");
        assert_eq!(judge(&record(Some("k1")), &["k2"]), (false, false), "its key withdrawn");
        assert_eq!(judge(&record(None), &["k1"]), (false, false), "staged without keys");
        assert_eq!(judge(&record(None), &[]), (true, true), "no signature required");
        let unrecorded = StagedRecord::judge(None, Some("ab"), Some("ab"), &signal, &["k1"]);
        assert_eq!(unrecorded, (false, false), "no record, no proof of a signature");
    }

    #[test]
    fn a_self_test_passes_only_on_exit_zero_and_the_requested_version() {
        assert_eq!(judge_self_test(Some(0), "v1.35.1+k0s.0\n", V2, false), Ok(V2.to_string()));
        let wrong = judge_self_test(Some(0), "v1.35.0+k0s.0\n", V2, false).unwrap_err();
        assert_eq!(wrong, format!("`version` reported \"v1.35.0+k0s.0\", expected {V2}"));
        let failed = judge_self_test(Some(2), "\n  sh: 2: Syntax error\nmore", V2, false);
        assert_eq!(failed.unwrap_err(), "`version` exited with status 2: \"sh: 2: Syntax error\"");
        let killed = judge_self_test(None, "", V2, false).unwrap_err();
        assert!(killed.contains("killed by a signal"), "{killed}");
    }

    #[test]
    fn a_forced_self_test_accepts_any_version_but_not_any_text() {
        assert_eq!(
            judge_self_test(Some(0), "v9.9.9+k0s.1", V2, true),
            Ok("v9.9.9+k0s.1".to_string())
        );
        let html = judge_self_test(Some(0), "<html>", V2, true).unwrap_err();
        assert!(html.contains("not a version"), "{html}");
        assert!(judge_self_test(Some(0), "", V2, true).is_err());
    }

    #[test]
    fn k0s_prev_passes_only_when_it_runs_exactly_the_from_version() {
        const V1: &str = "v1.35.0+k0s.0";
        assert_eq!(judge_previous("k0s.prev", Some(0), "v1.35.0+k0s.0\n", V1), Ok(V1.into()));
        assert_eq!(
            judge_previous("k0s.prev", Some(0), "v1.35.1+k0s.0\n", V1).unwrap_err(),
            "k0s.prev runs v1.35.1+k0s.0, not the version this node ran before the run \
             (v1.35.0+k0s.0)"
        );
        let broken = judge_previous("k0s.prev", Some(126), "Exec format error", V1).unwrap_err();
        assert_eq!(
            broken,
            "k0s.prev does not run: `version` exited with status 126: \"Exec format error\""
        );
        let garbage = judge_previous("k0s.prev", Some(0), "<html>", V1).unwrap_err();
        assert!(garbage.starts_with("k0s.prev does not run: "), "{garbage}");
    }

    #[test]
    fn a_kept_bundle_is_restored_only_for_a_rollback_of_its_own_run_and_command() {
        let key = |run: &str, command: u32| SignalKey {
            plan_id: "id123".into(),
            created: format!("created for {run}"),
            command_id: command,
            run_id: Some(run.into()),
        };
        let record =
            BundleRecord { signal: key("uid/2", 1), name: "bundle.tar".into(), replaced: true };
        // Another `created`: the rollback is another signal of the same run and command.
        assert_eq!(BundleRecord::for_rollback(Some(&record), &key("uid/2", 1)), Ok(&record));
        let none = BundleRecord::for_rollback(None, &key("uid/2", 1)).unwrap_err();
        assert_eq!(none, "no previous airgap bundle to roll back to: this node kept none");
        let other = BundleRecord::for_rollback(Some(&record), &key("uid/3", 1)).unwrap_err();
        assert_eq!(
            other,
            "the airgap bundle this node kept is from command 1 of run uid/2, not from command 1 \
             of run uid/3: nothing to roll back to"
        );
        assert!(BundleRecord::for_rollback(Some(&record), &key("uid/2", 0)).is_err());
    }

    #[test]
    fn a_restart_marker_of_a_version_without_trials_reads_as_passed() {
        let old = r#"{"signal":{"planId":"p","created":"c","commandId":0},"instance":"1-2"}"#;
        let marker: RestartMarker = serde_json::from_str(old).unwrap();
        assert_eq!(marker.trial, TrialState::Passed);
        let pending = RestartMarker { trial: TrialState::Pending, ..marker };
        let text = serde_json::to_string(&pending).unwrap();
        assert!(text.contains(r#""trial":{"state":"pending"}"#), "{text}");
        assert_eq!(serde_json::from_str::<RestartMarker>(&text).unwrap(), pending);
    }
}
