//! One plan command as the machine sees it: its kind, its target groups, where each group's
//! objects live, and the signal a target of it receives.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::platform::platform_id;
use autopilot_api::signal::{
    CommandAirgapUpdate, CommandK0sUpdate, CommandPreflight, CommandRollback, RollbackOf,
    SignalCommand, SignalData,
};
use autopilot_api::v1beta2::{
    PlanCommand, PlanCommandAirgapUpdate, PlanCommandK0sUpdate, PlanCommandPreflight,
    PlanCommandStatus, PlanCommandTarget, PlanResourceUrl, TargetState, TargetStatus,
};

use crate::plan::model::decision::ObjectKind;
use crate::plan::model::inputs::{ObservedSignal, TargetObject};

/// A command with exactly one kind.
#[derive(Clone, Copy, Debug)]
pub(in crate::plan) enum Command<'a> {
    /// `k0supdate`: controllers (ControlNodes), then workers (Nodes).
    K0s(&'a PlanCommandK0sUpdate),
    /// `airgapupdate`: workers (Nodes) only.
    Airgap(&'a PlanCommandAirgapUpdate),
    /// `preflight`: checks on controllers (ControlNodes) and workers (Nodes), all at once
    /// (DESIGN §13, `crate::plan::rules::checks`).
    Preflight(&'a PlanCommandPreflight),
    /// The rollback of a `k0supdate` (DESIGN §15): the nodes it changed put `k0s.prev`
    /// back, workers first, each group in reverse name order (`crate::plan::driver::rollback`). Its
    /// targets are the command status's `rollback` lists.
    K0sRollback(&'a PlanCommandK0sUpdate),
    /// The rollback of an `airgapupdate`: the workers it changed restore their previous
    /// bundle files.
    AirgapRollback(&'a PlanCommandAirgapUpdate),
}

/// The platforms of a command that downloads nothing.
static NO_PLATFORMS: BTreeMap<String, PlanResourceUrl> = BTreeMap::new();

/// A target group of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(in crate::plan) enum Group {
    /// `k0supdate.targets.controllers`.
    Controllers,
    /// `k0supdate.targets.workers` or `airgapupdate.workers`.
    Workers,
}

impl Group {
    /// Plural name, as in the spec.
    pub(in crate::plan) fn name(self) -> &'static str {
        match self {
            Self::Controllers => "controllers",
            Self::Workers => "workers",
        }
    }
}

/// What is wrong with a command's kinds, for messages about malformed commands.
pub(in crate::plan) fn kind_problem(command: &PlanCommand) -> Option<&'static str> {
    match (&command.k0supdate, &command.airgapupdate, &command.preflight) {
        (Some(_), Some(_), _) => {
            Some("sets both k0supdate and airgapupdate; exactly one is required")
        }
        (None, None, None) => {
            Some("sets neither k0supdate nor airgapupdate; exactly one is required")
        }
        (Some(_), None, Some(_)) | (None, Some(_), Some(_)) => {
            Some("sets preflight together with an update command; exactly one is required")
        }
        (Some(_), None, None) | (None, Some(_), None) | (None, None, Some(_)) => None,
    }
}

impl<'a> Command<'a> {
    /// The command's kind, if exactly one is set (see [`kind_problem`]).
    pub(in crate::plan) fn resolve(command: &'a PlanCommand) -> Option<Self> {
        match (&command.k0supdate, &command.airgapupdate, &command.preflight) {
            (Some(k0s), None, None) => Some(Self::K0s(k0s)),
            (None, Some(airgap), None) => Some(Self::Airgap(airgap)),
            (None, None, Some(preflight)) => Some(Self::Preflight(preflight)),
            (Some(_), Some(_), _)
            | (None, None, None)
            | (Some(_), None, Some(_))
            | (None, Some(_), Some(_)) => None,
        }
    }

    /// `k0supdate` or `airgapupdate`.
    pub(in crate::plan) fn name(self) -> &'static str {
        match self {
            Self::K0s(_) => "k0supdate",
            Self::Airgap(_) => "airgapupdate",
            Self::Preflight(_) => "preflight",
            Self::K0sRollback(_) => "k0supdate rollback",
            Self::AirgapRollback(_) => "airgapupdate rollback",
        }
    }

    /// The rollback of this command, if it is an update.
    pub(in crate::plan) fn rollback(self) -> Option<Self> {
        match self {
            Self::K0s(k0s) => Some(Self::K0sRollback(k0s)),
            Self::Airgap(airgap) => Some(Self::AirgapRollback(airgap)),
            Self::Preflight(_) | Self::K0sRollback(_) | Self::AirgapRollback(_) => None,
        }
    }

    /// Whether this is the rollback of an update.
    pub(in crate::plan) fn is_rollback(self) -> bool {
        match self {
            Self::K0sRollback(_) | Self::AirgapRollback(_) => true,
            Self::K0s(_) | Self::Airgap(_) | Self::Preflight(_) => false,
        }
    }

    /// The command's health gates (none for a preflight command or a rollback).
    pub(in crate::plan) fn gates(self) -> &'a [autopilot_api::v1beta2::Gate] {
        match self {
            Self::K0s(k0s) => &k0s.rollout.gates,
            Self::Airgap(airgap) => &airgap.rollout.gates,
            Self::Preflight(_) | Self::K0sRollback(_) | Self::AirgapRollback(_) => &[],
        }
    }

    /// The version the command updates to (empty for a preflight command).
    pub(in crate::plan) fn version(self) -> &'a str {
        match self {
            Self::K0s(k0s) => &k0s.version,
            Self::Airgap(airgap) | Self::AirgapRollback(airgap) => &airgap.version,
            Self::Preflight(_) => "",
            Self::K0sRollback(k0s) => &k0s.version,
        }
    }

    /// Download locations per `<os>-<arch>` (none for a preflight command).
    pub(in crate::plan) fn platforms(self) -> &'a BTreeMap<String, PlanResourceUrl> {
        match self {
            Self::K0s(k0s) => &k0s.platforms,
            Self::Airgap(airgap) => &airgap.platforms,
            // A rollback downloads nothing.
            Self::Preflight(_) | Self::K0sRollback(_) | Self::AirgapRollback(_) => &NO_PLATFORMS,
        }
    }

    /// Whether NewPlan runs the removed-API pre-check: always for airgap, for k0s unless
    /// `forceupdate` (REF §3.4), never for preflight (it changes nothing).
    pub(in crate::plan) fn needs_removed_api_check(self) -> bool {
        match self {
            Self::K0s(k0s) => !k0s.forceupdate,
            Self::Airgap(_) => true,
            Self::Preflight(_) | Self::K0sRollback(_) | Self::AirgapRollback(_) => false,
        }
    }

    /// The target groups, in the order they are updated.
    pub(in crate::plan) fn groups(self) -> &'static [Group] {
        match self {
            Self::K0s(_) | Self::Preflight(_) => &[Group::Controllers, Group::Workers],
            Self::Airgap(_) | Self::AirgapRollback(_) => &[Group::Workers],
            // Undone in the reverse order: workers first, then controllers.
            Self::K0sRollback(_) => &[Group::Workers, Group::Controllers],
        }
    }

    /// The spec of a group (`None`: the group targets nothing; a preflight command's
    /// targets are per check, see `crate::plan::rules::checks`).
    pub(in crate::plan) fn target(self, group: Group) -> Option<&'a PlanCommandTarget> {
        match (self, group) {
            (Self::K0s(k0s) | Self::K0sRollback(k0s), Group::Controllers) => {
                k0s.targets.controllers.as_ref()
            }
            (Self::K0s(k0s) | Self::K0sRollback(k0s), Group::Workers) => {
                k0s.targets.workers.as_ref()
            }
            (Self::Airgap(_) | Self::AirgapRollback(_), Group::Controllers) => None,
            (Self::Airgap(airgap) | Self::AirgapRollback(airgap), Group::Workers) => {
                Some(&airgap.workers)
            }
            (Self::Preflight(_), Group::Controllers | Group::Workers) => None,
        }
    }

    /// The command's `progressTimeout`, if set: `Err` says why it does not parse. For a
    /// preflight command, its report deadline ([`crate::preflight::deadline_of`]): a node
    /// without a report by then counts as timed out.
    pub(in crate::plan) fn progress_timeout_override(self) -> Option<Result<Duration, String>> {
        let text = match self {
            Self::K0s(k0s) | Self::K0sRollback(k0s) => k0s.rollout.progress_timeout.as_deref(),
            Self::Airgap(airgap) | Self::AirgapRollback(airgap) => {
                airgap.rollout.progress_timeout.as_deref()
            }
            Self::Preflight(preflight) => {
                return Some(Ok(crate::preflight::deadline_of(preflight)));
            }
        }?;
        Some(autopilot_api::duration::parse(text).and_then(|duration| {
            if duration.is_zero() {
                Err(format!("{text:?} is zero; a node needs some time to make progress"))
            } else {
                Ok(duration)
            }
        }))
    }

    /// How long a signalled node of this command may show no progress: the command's
    /// `progressTimeout`, else `default` (a value NewPlan refused never gets here; it falls
    /// back to `default` all the same).
    pub(in crate::plan) fn progress_timeout(self, default: Duration) -> Duration {
        match self.progress_timeout_override() {
            Some(Ok(duration)) => duration,
            Some(Err(_)) | None => default,
        }
    }

    /// How many of the command's `workers` targets may be in flight at once: a count, or
    /// a percentage of `workers` rounded down. Always at least 1 (a 0 from an older schema
    /// counts as 1), so a plan never waits forever on its own limit (DESIGN §9.6).
    pub(in crate::plan) fn worker_concurrency(self, workers: usize) -> usize {
        self.target(Group::Workers).map_or(1, |target| target.limits.concurrent.of(workers))
    }

    /// With `prestage`: how many of `all` targets stage at once (`prestageConcurrent`,
    /// at least 1; unset: all of them). `None`: the command does not pre-stage (a rollback
    /// never does: it downloads nothing).
    pub(in crate::plan) fn prestage_limit(self, all: usize) -> Option<usize> {
        let (prestage, concurrent) = match self {
            Self::K0s(k0s) => (k0s.rollout.prestage, k0s.rollout.prestage_concurrent),
            Self::Airgap(airgap) => (airgap.rollout.prestage, airgap.rollout.prestage_concurrent),
            Self::Preflight(_) | Self::K0sRollback(_) | Self::AirgapRollback(_) => return None,
        };
        prestage
            .then(|| concurrent.map_or(all, |n| usize::try_from(n).unwrap_or(usize::MAX)).max(1))
    }

    /// How many workers may fail before the command stops signalling new ones
    /// (`limits.maxFailures`; 0 when unset). Controllers have no budget.
    pub(in crate::plan) fn max_failures(self) -> usize {
        if self.is_rollback() {
            // A rollback puts back every node it can: one that fails does not stop the others.
            return usize::MAX;
        }
        self.target(Group::Workers)
            .and_then(|target| target.limits.max_failures)
            .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// How many workers go first as canaries (`limits.canary`; 0 when unset).
    pub(in crate::plan) fn canary(self) -> usize {
        if self.is_rollback() {
            return 0;
        }
        self.target(Group::Workers)
            .and_then(|target| target.limits.canary)
            .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// How long the canaries must stay Ready after they completed (`limits.soak`; zero when
    /// unset or unparseable, which NewPlan refuses before a run gets here).
    pub(in crate::plan) fn soak(self) -> Duration {
        if self.is_rollback() {
            return Duration::ZERO;
        }
        self.target(Group::Workers)
            .and_then(|target| target.limits.soak.as_deref())
            .and_then(|text| autopilot_api::duration::parse(text).ok())
            .unwrap_or(Duration::ZERO)
    }

    /// The Node label whose values split the workers into failure-domain groups that go
    /// one at a time (`limits.groupBy`; none when unset, and none for a rollback, which puts
    /// back every changed node in reverse name order whatever their groups).
    pub(in crate::plan) fn group_by(self) -> Option<&'a str> {
        if self.is_rollback() {
            return None;
        }
        self.target(Group::Workers).and_then(|target| target.limits.group_by.as_deref())
    }

    /// How long the workers of a completed group must stay Ready before the next group is
    /// signalled (`limits.betweenGroups.soak`; zero when unset or unparseable, which NewPlan
    /// refuses before a run gets here).
    pub(in crate::plan) fn between_groups_soak(self) -> Duration {
        if self.group_by().is_none() {
            return Duration::ZERO;
        }
        self.target(Group::Workers)
            .and_then(|target| target.limits.between_groups.as_ref())
            .and_then(|between| between.soak.as_deref())
            .and_then(|text| autopilot_api::duration::parse(text).ok())
            .unwrap_or(Duration::ZERO)
    }

    /// The kind of object a group's targets are signalled through: ControlNodes for k0s
    /// controllers, Nodes for everything else (airgap always on Nodes).
    pub(in crate::plan) fn object_kind(self, group: Group) -> ObjectKind {
        match (self, group) {
            (Self::K0s(_) | Self::Preflight(_) | Self::K0sRollback(_), Group::Controllers) => {
                ObjectKind::ControlNode
            }
            (Self::K0s(_) | Self::Preflight(_) | Self::K0sRollback(_), Group::Workers)
            | (Self::Airgap(_) | Self::AirgapRollback(_), Group::Controllers | Group::Workers) => {
                ObjectKind::Node
            }
        }
    }

    /// Whether a worker must be Ready before it is signalled (k0s only, REF §4.5).
    pub(in crate::plan) fn gates_workers_on_ready(self) -> bool {
        match self {
            Self::K0s(_) => true,
            // A node being rolled back may be NotReady because of the update it undoes.
            Self::Airgap(_)
            | Self::Preflight(_)
            | Self::K0sRollback(_)
            | Self::AirgapRollback(_) => false,
        }
    }

    /// Whether a signal's command is of this command's kind.
    pub(in crate::plan) fn same_kind(self, signal: &SignalCommand) -> bool {
        let kinds = [
            signal.k0supdate.is_some(),
            signal.airgapupdate.is_some(),
            signal.preflight.is_some(),
            signal.rollback.is_some(),
        ];
        let only = |index: usize| kinds.iter().enumerate().all(|(at, set)| *set == (at == index));
        let undoes = |of: RollbackOf| signal.rollback.as_ref().is_some_and(|r| r.of == of);
        match self {
            Self::K0s(_) => only(0),
            Self::Airgap(_) => only(1),
            Self::Preflight(_) => only(2),
            Self::K0sRollback(_) => only(3) && undoes(RollbackOf::K0s),
            Self::AirgapRollback(_) => only(3) && undoes(RollbackOf::Airgap),
        }
    }

    /// The signal for `target` of this command at command index `index`, written to
    /// `object`: an update carries the payload of the object's platform (`Err` says why
    /// there is none), a preflight command the ids of the target's checks.
    pub(in crate::plan) fn signal_for(
        self,
        run: &RunIdentity,
        index: u32,
        object: &TargetObject,
        target: &TargetStatus,
        created: String,
    ) -> Result<SignalData, String> {
        let command = match self {
            Self::K0s(k0s) => {
                let entry = self.platform_entry(object)?;
                SignalCommand {
                    rollback: None,
                    id: index,
                    k0supdate: Some(CommandK0sUpdate {
                        url: entry.url.clone(),
                        version: k0s.version.clone(),
                        sha256: entry.sha256.clone().unwrap_or_default(),
                        forceupdate: k0s.forceupdate,
                    }),
                    airgapupdate: None,
                    preflight: None,
                }
            }
            Self::Airgap(airgap) => {
                let entry = self.platform_entry(object)?;
                SignalCommand {
                    rollback: None,
                    id: index,
                    k0supdate: None,
                    airgapupdate: Some(CommandAirgapUpdate {
                        url: entry.url.clone(),
                        version: airgap.version.clone(),
                        sha256: entry.sha256.clone().unwrap_or_default(),
                    }),
                    preflight: None,
                }
            }
            Self::Preflight(_) => SignalCommand {
                rollback: None,
                id: index,
                k0supdate: None,
                airgapupdate: None,
                preflight: Some(CommandPreflight { checks: target.checks.clone() }),
            },
            Self::K0sRollback(_) | Self::AirgapRollback(_) => {
                let of = match self {
                    Self::AirgapRollback(_) => RollbackOf::Airgap,
                    Self::K0sRollback(_) | Self::K0s(_) | Self::Airgap(_) | Self::Preflight(_) => {
                        RollbackOf::K0s
                    }
                };
                let Some(version) = target.from.clone() else {
                    return Err(format!(
                        "the version {} ran before the run is not known, so there is nothing to \
                         put back",
                        target.name
                    ));
                };
                SignalCommand {
                    id: index,
                    k0supdate: None,
                    airgapupdate: None,
                    preflight: None,
                    rollback: Some(CommandRollback { version, of }),
                }
            }
        };
        Ok(SignalData {
            plan_id: run.plan_id.clone(),
            created,
            command,
            status: None,
            run_id: Some(run.run_id.clone()),
        })
    }

    /// The platform entry for an object: its `<os>-<arch>` labels must name a key of
    /// `platforms`. The error says why not, for the target's `reason`.
    pub(in crate::plan) fn platform_entry(
        self,
        object: &TargetObject,
    ) -> Result<&'a PlanResourceUrl, String> {
        self.platform_key_and_entry(object).map(|(_, entry)| entry)
    }

    /// [`Self::platform_entry`] with its `platforms` key (e.g. `linux-amd64`).
    pub(in crate::plan) fn platform_key_and_entry(
        self,
        object: &TargetObject,
    ) -> Result<(&'a str, &'a PlanResourceUrl), String> {
        let os = object.labels.get(keys::LABEL_OS);
        let arch = object.labels.get(keys::LABEL_ARCH);
        let id = match (os, arch) {
            (Some(os), Some(arch)) => platform_id(os, arch),
            (None, Some(_)) => return Err(format!("label {} is missing", keys::LABEL_OS)),
            (Some(_), None) => return Err(format!("label {} is missing", keys::LABEL_ARCH)),
            (None, None) => {
                return Err(format!(
                    "labels {} and {} are missing",
                    keys::LABEL_OS,
                    keys::LABEL_ARCH
                ));
            }
        };
        self.platforms()
            .get_key_value(&id)
            .map(|(key, entry)| (key.as_str(), entry))
            .ok_or_else(|| format!("platforms has no entry for {id}"))
    }
}

/// The identity of the current run, as carried by each of its signals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::plan) struct RunIdentity {
    /// The frozen `spec.id` (`status.planId`).
    pub(in crate::plan) plan_id: String,
    /// `status.runId`.
    pub(in crate::plan) run_id: String,
}

impl RunIdentity {
    /// Whether `run` is an earlier run of the Plan this run belongs to: the same object
    /// (`<uid>/<generation>`, the uid before the last `/`), another generation.
    pub(in crate::plan) fn earlier_of_this_plan(&self, run: &str) -> bool {
        let plan = |run: &str| run.rsplit_once('/').map(|(uid, _)| uid.to_owned());
        run != self.run_id && plan(run).is_some() && plan(run) == plan(&self.run_id)
    }

    /// The signal on `object` if it is this run's signal for command `index` of `command`'s
    /// kind: plan id, run id, command index and kind all match. Anything else (another plan,
    /// an earlier run with the same `spec.id`, another command) is not this run's.
    pub(in crate::plan) fn signal_on<'o>(
        &self,
        object: &'o TargetObject,
        index: u32,
        command: Command<'_>,
    ) -> Option<&'o SignalData> {
        match &object.signal {
            ObservedSignal::Valid(data)
                if data.plan_id == self.plan_id
                    && data.run_id.as_deref() == Some(self.run_id.as_str())
                    && data.command.id == index
                    && command.same_kind(&data.command) =>
            {
                Some(data)
            }
            ObservedSignal::Valid(_) | ObservedSignal::Invalid(_) | ObservedSignal::None => None,
        }
    }
}

/// How the reason of a target NewPlan failed for its own report begins (its published keys
/// or version: `crate::plan::driver::discovery`).
pub(in crate::plan) const REFUSED_BY_OWN_REPORT: &str = "not signalled: ";

/// Whether `target` failed at NewPlan for what its node reports about itself, never
/// signalled. Such a target counts against `limits.maxFailures` like any failure, but
/// proved nothing about the payload: it is no canary, and it does not stop the waves at
/// its group.
pub(in crate::plan) fn refused_by_own_report(target: &TargetStatus) -> bool {
    target.state == TargetState::SignalApplyFailed
        && target.signalled.is_none()
        && target.reason.as_deref().is_some_and(|r| r.starts_with(REFUSED_BY_OWN_REPORT))
}

/// The targets of a group in a command status (empty when the status has none).
pub(in crate::plan) fn targets<'s>(
    status: &'s PlanCommandStatus,
    command: Command<'_>,
    group: Group,
) -> &'s [TargetStatus] {
    match (command, group) {
        (Command::K0s(_), Group::Controllers) => {
            status.k0supdate.as_ref().map_or(&[], |s| s.controllers.as_slice())
        }
        (Command::K0s(_), Group::Workers) => {
            status.k0supdate.as_ref().map_or(&[], |s| s.workers.as_slice())
        }
        (Command::Airgap(_), Group::Workers) => {
            status.airgapupdate.as_ref().map_or(&[], |s| s.workers.as_slice())
        }
        (Command::Airgap(_), Group::Controllers) => &[],
        (Command::Preflight(_), Group::Controllers) => {
            status.preflight.as_ref().map_or(&[], |s| s.controllers.as_slice())
        }
        (Command::Preflight(_), Group::Workers) => {
            status.preflight.as_ref().map_or(&[], |s| s.workers.as_slice())
        }
        (Command::K0sRollback(_), Group::Controllers) => {
            status.rollback.as_ref().map_or(&[], |s| s.controllers.as_slice())
        }
        (Command::K0sRollback(_) | Command::AirgapRollback(_), Group::Workers) => {
            status.rollback.as_ref().map_or(&[], |s| s.workers.as_slice())
        }
        (Command::AirgapRollback(_), Group::Controllers) => &[],
    }
}

/// The targets of a group in a command status, for changing (creating the kind's status
/// when missing).
pub(in crate::plan) fn targets_mut<'s>(
    status: &'s mut PlanCommandStatus,
    command: Command<'_>,
    group: Group,
) -> Option<&'s mut Vec<TargetStatus>> {
    match (command, group) {
        (Command::K0s(_), Group::Controllers) => {
            Some(&mut status.k0supdate.get_or_insert_with(Default::default).controllers)
        }
        (Command::K0s(_), Group::Workers) => {
            Some(&mut status.k0supdate.get_or_insert_with(Default::default).workers)
        }
        (Command::Airgap(_), Group::Workers) => {
            Some(&mut status.airgapupdate.get_or_insert_with(Default::default).workers)
        }
        (Command::Airgap(_), Group::Controllers) => None,
        (Command::Preflight(_), Group::Controllers) => {
            Some(&mut status.preflight.get_or_insert_with(Default::default).controllers)
        }
        (Command::Preflight(_), Group::Workers) => {
            Some(&mut status.preflight.get_or_insert_with(Default::default).workers)
        }
        (Command::K0sRollback(_), Group::Controllers) => {
            Some(&mut status.rollback.get_or_insert_with(Default::default).controllers)
        }
        (Command::K0sRollback(_) | Command::AirgapRollback(_), Group::Workers) => {
            Some(&mut status.rollback.get_or_insert_with(Default::default).workers)
        }
        (Command::AirgapRollback(_), Group::Controllers) => None,
    }
}

/// A duration the way operators write them in flags (`10m`, `1h30m`, `45s`, `500ms`).
pub(in crate::plan) fn format_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    if total == 0 {
        let millis = duration.subsec_millis();
        return if millis == 0 { "0s".to_owned() } else { format!("{millis}ms") };
    }
    let (hours, minutes, seconds) = (total / 3600, (total / 60) % 60, total % 60);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if seconds > 0 || out.is_empty() {
        out.push_str(&format!("{seconds}s"));
    }
    out
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ControlNode => "ControlNode",
            Self::Node => "Node",
        })
    }
}
