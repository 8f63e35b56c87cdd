//! The pure update decision: given an UpdateConfig, the time, the running version, what the
//! update server offers and the current `autopilot` Plan, what should happen now.
//!
//! No I/O, no clock: `now` and the time zone come in as arguments, and `spec.id` /
//! `spec.timestamp` of a generated Plan are `now` in Unix seconds (as k0s writes them).
//!
//! Rules, in order (REF §11.2, §11.7, DESIGN §6):
//!
//! 1. The strategy must be valid (type set, window or cron expression parses, the minimum
//!    intervals are durations), else [`Decision::Invalid`].
//! 2. `periodic`: the offered version must be strictly newer than the running one under
//!    k0s ordering ([`autopilot_api::version`]), else [`Decision::UpToDate`]. Exception: when a
//!    `k0supdate` item of `planSpec` has `forceupdate: true`, any *different* version the
//!    server offers is taken (the server may roll a cluster back); an equal one never is.
//!    `cron`: no local comparison, the server decides (as in k0s).
//! 3. `periodic`: now must be inside the window ([`crate::updater::window`]), else
//!    [`Decision::OutsideWindow`] with when it opens. `cron` runs when its schedule fires,
//!    which the shell times with [`crate::updater::cron::Schedule::next_after`].
//! 4. A Plan that has not reached a terminal state is never touched
//!    ([`Decision::PlanRunning`]), for either strategy.
//!
//!    Then the minimum interval (`upgradeStrategy.minInterval`, [`crate::updater::interval`]):
//!    an offered version of another version than the running one, of kind patch or minor,
//!    is not planned until the interval of its kind has passed since the last automatic
//!    update of that kind ([`Decision::MinIntervalWait`], with the time it is allowed; the
//!    shell checks again then). Both strategies; under `cron` only when both versions parse.
//! 5. Every download of the generated Plan must be verifiable: an entry the server gives
//!    no digest for (always so on the legacy endpoint of the cron strategy) must be an
//!    `https://` URL, else the Plan is not created ([`Decision::UnverifiedPayload`]); the
//!    controller would refuse it anyway (DESIGN §11), and an operator learns why here, on
//!    the UpdateConfig, instead of from a refused Plan.
//!    The generated Plan must also keep to the version skew rules NewPlan judges by
//!    ([`crate::plan::skew`], on the Nodes and ControlNodes the shell read): a controller
//!    does not skip a minor version, no worker ends newer than a controller or more than one
//!    minor behind, controllers stay within one minor. Else no Plan is written
//!    ([`Decision::VersionSkew`]): the server's index names one version, and the updater
//!    does not invent an upgrade path through others. A rule broken only by the version a
//!    worker reports about itself holds nothing: the Plan is written, NewPlan fails that
//!    worker's part (or leaves it behind when it is no target), and the decision names the
//!    worker (`left_out`, a Warning Event). The keys nodes publish never hold an update
//!    either: they only give every payload its `signatureURL`, which a node without keys
//!    ignores.
//! 6. A Plan that was rolled back (DESIGN §15) to move off the offered version holds that
//!    version back ([`Decision::RolledBackVersion`]): it is not proposed again until the
//!    server offers another one, or an operator deletes the Plan (which clears the mark).
//! 7. A terminal Plan whose commands are exactly what we would generate is left alone
//!    ([`Decision::AlreadyPlanned`]): that update already ran (or failed: delete the Plan
//!    to retry the same version). This keeps a stuck version from re-running every period.
//! 8. Otherwise the Plan is generated (REF §11.6): [`Decision::CreatePlan`] when none exists,
//!    [`Decision::ReplacePlan`] over a terminal one. Applying a new spec to a terminal Plan
//!    starts a fresh run (DESIGN §9.4), so repeated updates work, unlike k0s.

use autopilot_api::v1beta2::{
    AutopilotPlanCommand, AutopilotPlanCommandAirgapUpdate, AutopilotPlanCommandK0sUpdate,
    AutopilotPlanSpec, Plan, PlanCommand, PlanCommandAirgapUpdate, PlanCommandK0sUpdate,
    PlanCommandTarget, PlanCommandTargetDiscovery, PlanCommandTargetDiscoverySelector,
    PlanCommandTargets, PlanResourceUrl, PlanSpec, PlanStateType, UpdateConfigSpec,
    UpdateConfigStatus, UpgradeStrategy, UpgradeStrategyType,
};
use std::collections::BTreeMap;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use thiserror::Error;

use crate::plan::TargetObject;

use crate::updater::channel::ChannelAnswer;
use crate::updater::cron::Schedule;
use crate::updater::interval::{self, MinIntervals, UpdateKind};
use crate::updater::window::{Window, WindowState};
use autopilot_api::version::K0sVersion;

/// Why an UpdateConfig's `upgradeStrategy` cannot be used.
#[derive(Debug, Error)]
pub enum StrategyError {
    /// `upgradeStrategy` or its `type` is absent (k0s: "unknown strategy").
    #[error("upgradeStrategy.type is required (periodic or cron)")]
    MissingType,
    /// The `periodic` window is invalid.
    #[error(transparent)]
    Window(#[from] crate::updater::window::Error),
    /// The `cron` expression is invalid.
    #[error(transparent)]
    Cron(#[from] crate::updater::cron::Error),
}

/// A validated `upgradeStrategy`.
#[derive(Clone, Debug)]
pub enum Strategy {
    /// Check every period (the shell's `K0S_UPDATE_PERIOD`); update inside the window.
    Periodic(Window),
    /// Deprecated: check when the schedule fires; the server decides whether to update.
    Cron(Schedule),
}

impl Strategy {
    /// Validate `upgradeStrategy`. The shell calls this once per UpdateConfig change to
    /// know how to time its checks; [`decide`] calls it again (it is cheap).
    pub fn from_spec(strategy: Option<&UpgradeStrategy>) -> Result<Self, StrategyError> {
        let strategy = strategy.ok_or(StrategyError::MissingType)?;
        match strategy.r#type.ok_or(StrategyError::MissingType)? {
            UpgradeStrategyType::Periodic => {
                Ok(Self::Periodic(Window::parse(strategy.periodic.as_ref())?))
            }
            UpgradeStrategyType::Cron => {
                Ok(Self::Cron(Schedule::parse_or_default(strategy.cron.as_deref())?))
            }
        }
    }
}

impl Strategy {
    /// When the shell should check next, after a check at `now`: `periodic` checks every
    /// `period` (the shell's `K0S_UPDATE_PERIOD`, 10m by default), `cron` when the schedule
    /// next fires in `tz`. `None` only if no such time exists (a cron expression that never
    /// fires again, or the end of representable time).
    pub fn next_check(
        &self,
        now: Timestamp,
        tz: &TimeZone,
        period: std::time::Duration,
    ) -> Option<Timestamp> {
        match self {
            Self::Periodic(_) => {
                let period = jiff::SignedDuration::try_from(period).ok()?;
                now.checked_add(period).ok()
            }
            Self::Cron(schedule) => schedule.next_after(now, tz).ok(),
        }
    }

    /// When to check after a check that ended at `now`: the next regular check
    /// ([`Strategy::next_check`]), or sooner when the check found the window closed and it
    /// opens before then (`opens_at`); and whether a `periodic` window is open at `now` (a
    /// `cron` strategy has none to wait for: the server decides).
    pub fn after_check(
        &self,
        now: Timestamp,
        tz: &TimeZone,
        period: std::time::Duration,
        opens_at: Option<Timestamp>,
    ) -> NextCheck {
        let mut at = self.next_check(now, tz, period);
        if let (Some(next), Some(opens)) = (at, opens_at)
            && opens > now
            && opens < next
        {
            at = Some(opens);
        }
        let window_open = match self {
            Self::Periodic(window) => window.state_at(now, tz).is_open(),
            Self::Cron(_) => true,
        };
        let wait =
            at.map(|at| std::time::Duration::try_from(now.duration_until(at)).unwrap_or_default());
        NextCheck { at, wait, window_open }
    }
}

/// The schedule after a check ([`Strategy::after_check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextCheck {
    /// When the next check is due; `None` when no further check is scheduled.
    pub at: Option<Timestamp>,
    /// How long from the check's `now` until then (zero if already due).
    pub wait: Option<std::time::Duration>,
    /// Whether the `periodic` window is open at the check's `now` (always for `cron`).
    pub window_open: bool,
}

/// Everything [`decide`] looks at, captured once per check.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The UpdateConfig's spec.
    pub spec: &'a UpdateConfigSpec,
    /// The current time.
    pub now: Timestamp,
    /// The zone windows are evaluated in; the controller passes its local zone.
    pub tz: &'a TimeZone,
    /// The version the controller runs (its own build version, as k0s compares).
    pub running_version: &'a str,
    /// What the update server offers.
    pub answer: &'a ChannelAnswer,
    /// The Plan named `autopilot`, if it exists.
    pub plan: Option<&'a Plan>,
    /// The controller runs with `--allow-unverified-payloads`: plain-http downloads without
    /// a digest are planned too (the Plan engine lets them through as well).
    pub allow_unverified_payloads: bool,
    /// Which payloads the cluster's nodes require signed (they publish the keys they
    /// require): those get `signatureURL: <url>.sig`, where k0s publishes each release
    /// binary's signature (the index has no signature field).
    pub signatures: Signatures,
    /// Every ControlNode, as the Plan engine sees it (their versions judge the skew).
    pub control_nodes: &'a BTreeMap<String, TargetObject>,
    /// Every Node, as the Plan engine sees it.
    pub nodes: &'a BTreeMap<String, TargetObject>,
    /// The UpdateConfig's status as last written (when the last automatic updates were
    /// planned, for the minimum interval); `None` when it has none.
    pub status: Option<&'a UpdateConfigStatus>,
}

/// Which payloads some node requires signed (DESIGN §14).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signatures {
    /// Some node publishes `autopilot.k0sproject.io/payload-keys`.
    pub payloads: bool,
    /// Some node publishes `autopilot.k0sproject.io/bundle-keys`.
    pub bundles: bool,
}

impl Signatures {
    /// Give every payload of `spec` that must be signed the `.sig` beside it as its
    /// `signatureURL` (an entry that has a signature already keeps it).
    pub fn apply(self, spec: &mut PlanSpec) {
        let sign = |platforms: &mut std::collections::BTreeMap<String, PlanResourceUrl>| {
            for entry in platforms.values_mut() {
                if entry.signature.is_none() && entry.signature_url.is_none() {
                    entry.signature_url = Some(format!("{}.sig", entry.url));
                }
            }
        };
        for command in &mut spec.commands {
            if let Some(k0s) = command.k0supdate.as_mut().filter(|_| self.payloads) {
                sign(&mut k0s.platforms);
            }
            if let Some(airgap) = command.airgapupdate.as_mut().filter(|_| self.bundles) {
                sign(&mut airgap.platforms);
            }
        }
    }
}

/// What the shell should do after one check. Every variant is worth an Event on the
/// UpdateConfig ([`Decision::reason`]).
#[must_use]
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// The server offers nothing newer than what runs.
    UpToDate {
        /// The running version.
        running: String,
        /// The offered version.
        offered: String,
    },
    /// A newer version is offered but the window is closed; check again at `opens_at`.
    OutsideWindow {
        /// The offered version.
        offered: String,
        /// When the window opens next.
        opens_at: Option<Timestamp>,
    },
    /// A newer version is offered, but the minimum interval since the last automatic update
    /// of its kind has not passed; check again at `allowed_at`.
    MinIntervalWait {
        /// The offered version.
        offered: String,
        /// Patch or minor, compared with the running version.
        kind: UpdateKind,
        /// When the last automatic update of that kind was planned.
        last: Timestamp,
        /// When the offered version may be planned.
        allowed_at: Timestamp,
    },
    /// The `autopilot` Plan is still running; it is never replaced mid-run.
    PlanRunning {
        /// Its current state.
        state: PlanStateType,
    },
    /// The `autopilot` Plan rolled the offered version back; it is not proposed again.
    RolledBackVersion {
        /// The offered (and rolled back) version.
        offered: String,
        /// The rolled-back run's plan id.
        plan_id: String,
    },
    /// The terminal `autopilot` Plan already has exactly these commands; nothing to do.
    AlreadyPlanned {
        /// Its terminal state.
        state: PlanStateType,
        /// The offered version.
        offered: String,
    },
    /// No `autopilot` Plan exists: create it with this spec.
    CreatePlan {
        /// The new spec.
        spec: PlanSpec,
        /// The workers whose own reported version breaks a skew rule: the run fails their
        /// part (or leaves them behind), one sentence each; empty for most plans.
        left_out: Vec<String>,
    },
    /// The `autopilot` Plan is terminal: apply this spec over it to start a fresh run.
    ReplacePlan {
        /// The terminal state of the previous run.
        previous: PlanStateType,
        /// The new spec.
        spec: PlanSpec,
        /// As for [`Decision::CreatePlan`].
        left_out: Vec<String>,
    },
    /// The server offers downloads without a sha256 over plain `http://`: no node could
    /// check what it gets, so no Plan is created (rule 5 of the module docs).
    UnverifiedPayload {
        /// The offered version.
        offered: String,
        /// Each such entry, as `<k0s|airgap> <platform> (<url>)`, sorted.
        entries: Vec<String>,
    },
    /// The generated Plan would break the version skew rules (rule 5 of the module docs):
    /// the Plan engine would refuse it, so it is not written.
    VersionSkew {
        /// The offered version.
        offered: String,
        /// NewPlan's refusal of each command that breaks them.
        problems: Vec<String>,
    },
    /// The UpdateConfig or the server's answer cannot be used; the message says why.
    Invalid(String),
}

/// Event reasons for [`Decision`]s (PascalCase, stable).
pub mod reasons {
    /// [`super::Decision::UpToDate`].
    pub const UP_TO_DATE: &str = "UpToDate";
    /// [`super::Decision::OutsideWindow`].
    pub const OUTSIDE_WINDOW: &str = "OutsideWindow";
    /// [`super::Decision::MinIntervalWait`].
    pub const MIN_INTERVAL_WAIT: &str = "MinIntervalWait";
    /// [`super::Decision::PlanRunning`].
    pub const PLAN_RUNNING: &str = "PlanRunning";
    /// [`super::Decision::AlreadyPlanned`].
    pub const ALREADY_PLANNED: &str = "AlreadyPlanned";
    /// [`super::Decision::RolledBackVersion`].
    pub const ROLLED_BACK_VERSION: &str = "RolledBackVersion";
    /// [`super::Decision::CreatePlan`] and [`super::Decision::ReplacePlan`].
    pub const PLAN_CREATED: &str = "PlanCreated";
    /// [`super::Decision::UnverifiedPayload`].
    pub const UNVERIFIED_PAYLOAD: &str = "UnverifiedPayload";
    /// [`super::Decision::VersionSkew`].
    pub const VERSION_SKEW: &str = "VersionSkew";
    /// [`super::Decision::Invalid`].
    pub const INVALID: &str = "InvalidUpdateConfig";
    /// For the shell: the update server could not be reached or answered badly.
    pub const SERVER_ERROR: &str = "UpdateServerError";

    /// Every reason.
    pub const ALL: [&str; 11] = [
        UP_TO_DATE,
        OUTSIDE_WINDOW,
        MIN_INTERVAL_WAIT,
        PLAN_RUNNING,
        ALREADY_PLANNED,
        ROLLED_BACK_VERSION,
        PLAN_CREATED,
        UNVERIFIED_PAYLOAD,
        VERSION_SKEW,
        INVALID,
        SERVER_ERROR,
    ];
}

impl Decision {
    /// The Plan spec to server-side apply, if any.
    pub fn plan_spec(&self) -> Option<&PlanSpec> {
        match self {
            Self::CreatePlan { spec, .. } | Self::ReplacePlan { spec, .. } => Some(spec),
            Self::UpToDate { .. }
            | Self::OutsideWindow { .. }
            | Self::MinIntervalWait { .. }
            | Self::PlanRunning { .. }
            | Self::AlreadyPlanned { .. }
            | Self::RolledBackVersion { .. }
            | Self::UnverifiedPayload { .. }
            | Self::VersionSkew { .. }
            | Self::Invalid(_) => None,
        }
    }

    /// Whether the decision is a problem an operator must fix (a Warning Event and a
    /// `warn` log line) rather than progress: also a Plan written while some worker's own
    /// report fails its part.
    pub fn is_problem(&self) -> bool {
        match self {
            Self::UnverifiedPayload { .. } | Self::VersionSkew { .. } | Self::Invalid(_) => true,
            Self::CreatePlan { left_out, .. } | Self::ReplacePlan { left_out, .. } => {
                !left_out.is_empty()
            }
            Self::UpToDate { .. }
            | Self::OutsideWindow { .. }
            | Self::MinIntervalWait { .. }
            | Self::PlanRunning { .. }
            | Self::AlreadyPlanned { .. }
            | Self::RolledBackVersion { .. } => false,
        }
    }

    /// The Event reason for this decision (see [`reasons`]).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UpToDate { .. } => reasons::UP_TO_DATE,
            Self::OutsideWindow { .. } => reasons::OUTSIDE_WINDOW,
            Self::MinIntervalWait { .. } => reasons::MIN_INTERVAL_WAIT,
            Self::PlanRunning { .. } => reasons::PLAN_RUNNING,
            Self::AlreadyPlanned { .. } => reasons::ALREADY_PLANNED,
            Self::RolledBackVersion { .. } => reasons::ROLLED_BACK_VERSION,
            Self::CreatePlan { .. } | Self::ReplacePlan { .. } => reasons::PLAN_CREATED,
            Self::UnverifiedPayload { .. } => reasons::UNVERIFIED_PAYLOAD,
            Self::VersionSkew { .. } => reasons::VERSION_SKEW,
            Self::Invalid(_) => reasons::INVALID,
        }
    }

    /// A one-line, lowercase description for an Event note or a log line.
    pub fn message(&self) -> String {
        match self {
            Self::UpToDate { running, offered } => {
                format!("running {running}; the server offers {offered}, nothing newer")
            }
            Self::OutsideWindow { offered, opens_at: Some(at) } => {
                format!("{offered} is available; the update window opens at {at}")
            }
            Self::OutsideWindow { offered, opens_at: None } => {
                format!("{offered} is available; the update window is closed")
            }
            Self::MinIntervalWait { offered, kind, last, allowed_at } => {
                let kind = kind.as_str();
                format!(
                    "{offered} is available; the last automatic {kind} update was planned at \
                     {last}, and upgradeStrategy.minInterval.{kind} allows the next one at \
                     {allowed_at}"
                )
            }
            Self::PlanRunning { state } => {
                format!("the autopilot plan is still running ({state}); left alone")
            }
            Self::AlreadyPlanned { state, offered } => format!(
                "the autopilot plan for {offered} already ended ({state}); delete it to run it again"
            ),
            Self::RolledBackVersion { offered, plan_id } => format!(
                "{offered} was rolled back by plan {plan_id}; it is not proposed again until the \
                 update server offers another version, or the Plan is deleted to clear the mark"
            ),
            Self::CreatePlan { spec, left_out } => {
                format!("created the autopilot plan {}{}", spec.id, left_out_text(left_out))
            }
            Self::ReplacePlan { previous, spec, left_out } => format!(
                "replaced the ended autopilot plan ({previous}) with a new run {}{}",
                spec.id,
                left_out_text(left_out)
            ),
            Self::UnverifiedPayload { offered, entries } => format!(
                "not planning {offered}: the update server gives no sha256 for {}, and \
                 {} not https, so no node could check what it downloads; the server must \
                 serve its downloads over https or give their digests (k0sSha256, \
                 airgapSha256 in index.yaml)",
                entries.join(", "),
                if entries.len() == 1 { "it is" } else { "they are" },
            ),
            Self::VersionSkew { offered, problems } => format!(
                "not planning {offered}: {}; the update server offers one version and autopilot \
                 does not plan a path through others: update to the versions named first (by \
                 hand, or as the server offers them)",
                problems.join("; ")
            ),
            Self::Invalid(reason) => reason.clone(),
        }
    }
}

/// What a written Plan's message adds about the workers whose own report fails their part.
fn left_out_text(left_out: &[String]) -> String {
    if left_out.is_empty() {
        return String::new();
    }
    format!(
        "; a node's own report holds no update, so the run fails only these nodes' part: {}",
        left_out.join("; ")
    )
}

/// Decide what to do now. Pure; see the module docs for the rules.
pub fn decide(inputs: &Inputs<'_>) -> Decision {
    let Inputs {
        spec,
        now,
        answer,
        plan,
        allow_unverified_payloads,
        signatures,
        control_nodes,
        nodes,
        ..
    } = *inputs;

    // Check 1: the strategy is usable.
    let (strategy, intervals) = match usable_strategy(spec) {
        Ok(usable) => usable,
        Err(reason) => return Decision::Invalid(reason),
    };

    // Checks 2 and 3 (a periodic strategy): a wanted version, inside the window.
    let held = match &strategy {
        Strategy::Periodic(window) => periodic_hold(inputs, window),
        // The server decides (REF §11.7); the schedule decided when to ask.
        Strategy::Cron(_) => None,
    };
    if let Some(held) = held {
        return held;
    }

    // Check 4: never touch a running plan.
    let previous = plan.map(|p| p.status.as_ref().map(|s| s.state).unwrap_or_default());
    if let Some(state) = previous.filter(|s| !s.is_terminal()) {
        return Decision::PlanRunning { state };
    }

    // Check 4b: the minimum interval since the last automatic update of this kind.
    if let Some(wait) = interval_hold(inputs, intervals) {
        return wait;
    }

    let mut new_spec = match plan_spec(spec.plan_spec.as_ref(), answer, now) {
        Ok(spec) => spec,
        Err(reason) => return Decision::Invalid(reason),
    };
    signatures.apply(&mut new_spec);

    // Check 5: every download can be verified, or at least comes over https.
    let entries = unverified_plain_downloads(&new_spec);
    if !entries.is_empty() && !allow_unverified_payloads {
        return Decision::UnverifiedPayload { offered: answer.version.clone(), entries };
    }

    // Check 5b: the Plan keeps to the version skew rules, or the engine would refuse it.
    let crate::plan::spec_skew::SpecSkew { problems, nodes: left_out } =
        crate::plan::spec_skew::judge(&new_spec, control_nodes, nodes);
    if !problems.is_empty() {
        return Decision::VersionSkew { offered: answer.version.clone(), problems };
    }

    // Check 6: a version the cluster rolled back is not proposed again.
    if let Some(plan) = plan
        && previous == Some(PlanStateType::RolledBack)
        && rolled_back_versions(plan).any(|version| version == answer.version)
    {
        let plan_id =
            plan.status.as_ref().and_then(|s| s.plan_id.clone()).unwrap_or(plan.spec.id.clone());
        return Decision::RolledBackVersion { offered: answer.version.clone(), plan_id };
    }

    // Check 7 and 8: same commands already ran, or create / replace.
    match (plan, previous) {
        (Some(plan), Some(state)) if plan.spec.commands == new_spec.commands => {
            Decision::AlreadyPlanned { state, offered: answer.version.clone() }
        }
        (Some(_), Some(previous)) => Decision::ReplacePlan { previous, spec: new_spec, left_out },
        (None, _) | (Some(_), None) => Decision::CreatePlan { spec: new_spec, left_out },
    }
}

/// Check 1: the strategy and the minimum intervals of `spec`, or why they are invalid.
fn usable_strategy(spec: &UpdateConfigSpec) -> Result<(Strategy, MinIntervals), String> {
    let strategy =
        Strategy::from_spec(spec.upgrade_strategy.as_ref()).map_err(|err| err.to_string())?;
    let min_interval = spec.upgrade_strategy.as_ref().and_then(|s| s.min_interval.as_ref());
    let intervals = MinIntervals::from_spec(min_interval)?;
    Ok((strategy, intervals))
}

/// Checks 2 and 3 of a periodic strategy with `window`: the offered version is strictly
/// newer than the running one (or different, when the operator forces updates), and now is
/// inside the window. The decision that holds the update, if one does.
fn periodic_hold(inputs: &Inputs<'_>, window: &Window) -> Option<Decision> {
    let Inputs { spec, now, tz, running_version, answer, .. } = *inputs;
    let offered = match K0sVersion::parse(&answer.version) {
        Ok(v) => v,
        Err(err) => return Some(Decision::Invalid(format!("update server offers {err}"))),
    };
    let running = match K0sVersion::parse(running_version) {
        Ok(v) => v,
        Err(err) => return Some(Decision::Invalid(format!("running version: {err}"))),
    };
    let wanted =
        if forces_update(spec.plan_spec.as_ref()) { offered != running } else { offered > running };
    if !wanted {
        return Some(Decision::UpToDate {
            running: running_version.to_owned(),
            offered: answer.version.clone(),
        });
    }
    if let WindowState::Closed { opens_at } = window.state_at(now, tz) {
        return Some(Decision::OutsideWindow { offered: answer.version.clone(), opens_at });
    }
    None
}

/// Check 4b: the decision that holds an offered version (other than the running one) for
/// the minimum interval of its kind, if one does. Versions that do not parse hold nothing
/// here (the `periodic` strategy refused them already; `cron` leaves them to the server).
fn interval_hold(inputs: &Inputs<'_>, intervals: MinIntervals) -> Option<Decision> {
    let Inputs { now, running_version, answer, plan, status, .. } = *inputs;
    if intervals == MinIntervals::default() {
        return None;
    }
    let offered = K0sVersion::parse(&answer.version).ok()?;
    let running = K0sVersion::parse(running_version).ok()?;
    if offered == running {
        return None;
    }
    let kind = UpdateKind::between(&running, &offered);
    let last = interval::last_update(kind, status, plan)?;
    let allowed_at = interval::held_until(intervals, kind, Some(last), now)?;
    Some(Decision::MinIntervalWait { offered: answer.version.clone(), kind, last, allowed_at })
}

/// The versions the rolled-back run of `plan` updated to (its frozen commands).
fn rolled_back_versions(plan: &Plan) -> impl Iterator<Item = &str> {
    plan.status.iter().flat_map(|status| &status.commands).filter_map(|command| {
        let frozen = command.frozen.as_ref()?;
        frozen
            .k0supdate
            .as_ref()
            .map(|k0s| k0s.version.as_str())
            .or(frozen.airgapupdate.as_ref().map(|airgap| airgap.version.as_str()))
    })
}

/// The downloads of `spec` without a sha256 whose URL is not `https://`, as
/// `<k0s|airgap> <platform> (<url>)`, deduplicated and sorted.
fn unverified_plain_downloads(spec: &PlanSpec) -> Vec<String> {
    let mut entries = std::collections::BTreeSet::new();
    for command in &spec.commands {
        let k0s = command.k0supdate.iter().flat_map(|k| k.platforms.iter().map(|p| ("k0s", p)));
        let airgap =
            command.airgapupdate.iter().flat_map(|a| a.platforms.iter().map(|p| ("airgap", p)));
        for (what, (platform, entry)) in k0s.chain(airgap) {
            let verified = entry.sha256.as_deref().is_some_and(|sha| !sha.trim().is_empty());
            if !verified && !is_https(&entry.url) {
                entries.insert(format!("{what} {platform} ({})", entry.url));
            }
        }
    }
    entries.into_iter().collect()
}

/// Whether `url` has the `https` scheme (compared without regard to case).
fn is_https(url: &str) -> bool {
    url.trim_start()
        .split_once("://")
        .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("https"))
}

/// Whether any `k0supdate` item of the template asks for forced updates.
fn forces_update(template: Option<&AutopilotPlanSpec>) -> bool {
    template.is_some_and(|t| {
        t.commands.iter().any(|c| c.k0supdate.as_ref().is_some_and(|k| k.forceupdate))
    })
}

/// Generate the `autopilot` Plan spec from the template and the answer (REF §11.6).
///
/// - No template, or no item with `k0supdate`/`airgapupdate`: one `k0supdate` of the whole
///   cluster (`selector: {}` for controllers and workers), not forced.
/// - Otherwise each item in order. An item with both parts becomes two commands, the
///   `airgapupdate` first so the new images are on the workers before their k0s restarts
///   (k0s puts both in one command, where only the k0s part runs). An item with neither is
///   an error (k0s writes an empty command, which breaks the plan).
///
/// `spec.id` and `spec.timestamp` are `now` in Unix seconds.
pub fn plan_spec(
    template: Option<&AutopilotPlanSpec>,
    answer: &ChannelAnswer,
    now: Timestamp,
) -> Result<PlanSpec, String> {
    let items: &[AutopilotPlanCommand] = template.map(|t| t.commands.as_slice()).unwrap_or(&[]);
    let has_update = items.iter().any(|c| c.k0supdate.is_some() || c.airgapupdate.is_some());

    let commands = if has_update {
        let mut commands = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let AutopilotPlanCommand { k0supdate, airgapupdate } = item;
            if k0supdate.is_none() && airgapupdate.is_none() {
                return Err(format!(
                    "planSpec.commands[{i}] has neither k0supdate nor airgapupdate"
                ));
            }
            if let Some(airgap) = airgapupdate {
                commands.push(airgap_update(airgap.clone(), answer));
            }
            if let Some(k0s) = k0supdate {
                commands.push(k0s_update(k0s.clone(), answer));
            }
        }
        commands
    } else {
        vec![whole_cluster_update(answer)]
    };

    // The windows are the template's, whether or not it has commands.
    let (window, download_window, windows) = template
        .map(|t| (t.window.clone(), t.download_window.clone(), t.windows.clone()))
        .unwrap_or_default();
    let id = now.as_second().to_string();
    Ok(PlanSpec { download_window, window, windows, id: id.clone(), timestamp: id, commands })
}

/// The plan command of a template's `k0supdate` item: the answer's version and k0s
/// platforms, the rest the template's (its rollout fields as one value).
fn k0s_update(template: AutopilotPlanCommandK0sUpdate, answer: &ChannelAnswer) -> PlanCommand {
    let AutopilotPlanCommandK0sUpdate { forceupdate, targets, drain, drain_options, rollout } =
        template;
    PlanCommand {
        k0supdate: Some(PlanCommandK0sUpdate {
            drain,
            drain_options,
            version: answer.version.clone(),
            forceupdate,
            platforms: answer.k0s.clone(),
            targets,
            rollout,
        }),
        airgapupdate: None,
        preflight: None,
    }
}

/// The plan command of a template's `airgapupdate` item: the answer's version and airgap
/// bundles, the rest the template's (its rollout fields as one value).
fn airgap_update(
    template: AutopilotPlanCommandAirgapUpdate,
    answer: &ChannelAnswer,
) -> PlanCommand {
    let AutopilotPlanCommandAirgapUpdate { workers, rollout } = template;
    PlanCommand {
        k0supdate: None,
        airgapupdate: Some(PlanCommandAirgapUpdate {
            version: answer.version.clone(),
            platforms: answer.airgap.clone(),
            workers,
            rollout,
        }),
        preflight: None,
    }
}

/// The command without a template (or one without updates): a `k0supdate` of the whole
/// cluster (`selector: {}` for controllers and workers), not forced.
fn whole_cluster_update(answer: &ChannelAnswer) -> PlanCommand {
    let everyone = || PlanCommandTarget {
        discovery: PlanCommandTargetDiscovery {
            r#static: None,
            selector: Some(PlanCommandTargetDiscoverySelector::default()),
        },
        limits: Default::default(),
    };
    k0s_update(
        AutopilotPlanCommandK0sUpdate {
            targets: PlanCommandTargets {
                controllers: Some(everyone()),
                workers: Some(everyone()),
            },
            ..Default::default()
        },
        answer,
    )
}

#[cfg(test)]
mod tests;
