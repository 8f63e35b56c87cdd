//! `k0s autopilot status`: the plan, its state and command, progress with an ETA, each
//! node's phase, time in phase and reason, what is blocking, and the last Events, on one
//! screen.
//!
//! The shell ([`run`], module `watch`) reads a [`Snapshot`] of the cluster (the Plan, every
//! Node and ControlNode, the Events about the Plan); [`view`] turns it into a [`View`] (the
//! document `-o json` prints) and [`render`] into the screen. Both are pure: the time is an
//! argument, so fixtures render the same screen every time.

mod watch;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::{self, SignalPhase};
use autopilot_api::v1beta2::{
    ControlNode, Plan, PlanCommand, PlanCommandStatus, PlanStateType, PlanStatus, TargetState,
    TargetStatus, UpdateConfig,
};
use autopilot_engine::plan::Steering;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt as _;
use serde::Serialize;

pub use autopilot_shell::probe::Prober;
pub use watch::{CLEAR, Output, read, run};

/// How many of the Plan's Events the screen shows (the newest).
pub const EVENTS_SHOWN: usize = 8;

/// The namespace the plan engine writes its Events to: a Plan is cluster-scoped, and Events
/// about cluster-scoped objects go to `default`.
pub const EVENTS_NAMESPACE: &str = "default";

/// The longest note or blocking line the screen shows on one line; longer ones are cut with
/// `…` (`-o json` has them whole).
const LINE_TEXT: usize = 120;

/// The longest node reason the screen shows (the table fills the rest of a 160-column line).
const REASON_TEXT: usize = 50;

/// What the status view reads from the cluster. Objects are as the API server returned
/// them; nothing here is interpreted yet.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The name of the Plan asked about (`--plan`, default `autopilot`).
    pub plan_name: String,
    /// The Plan, if it exists.
    pub plan: Option<Plan>,
    /// Every Node.
    pub nodes: Vec<Node>,
    /// Every ControlNode.
    pub control_nodes: Vec<ControlNode>,
    /// Events in [`EVENTS_NAMESPACE`] (those about other objects are left out by [`view`]).
    pub events: Vec<Event>,
    /// Every UpdateConfig (their update windows decide when the updater creates a plan).
    pub update_configs: Vec<UpdateConfig>,
    /// The time zone the windows are read in: the leader reads them in its own, so the shell
    /// passes this machine's (fixtures: UTC).
    pub time_zone: jiff::tz::TimeZone,
    /// What each controller's API server answered on `/version`, by ControlNode name (asked
    /// at the ControlNode's address, as the leader's probe does; those that did not answer
    /// are missing).
    pub api_versions: BTreeMap<String, String>,
}

impl Snapshot {
    /// Nothing read yet about the Plan `plan_name`, windows read in UTC.
    pub fn empty(plan_name: &str) -> Self {
        Self {
            plan_name: plan_name.to_owned(),
            plan: None,
            nodes: Vec::new(),
            control_nodes: Vec::new(),
            events: Vec::new(),
            update_configs: Vec::new(),
            time_zone: jiff::tz::TimeZone::UTC,
            api_versions: BTreeMap::new(),
        }
    }
}

/// The status of one Plan: the document `k0s autopilot status -o json` prints.
///
/// Field names are stable; times are RFC 3339 and durations whole seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// The Plan's name.
    pub plan: String,
    /// Whether the Plan exists (everything below is empty when it does not).
    pub found: bool,
    /// The plan state (`NewPlan` before the leader first processed it).
    pub state: String,
    /// Whether the state is terminal.
    pub ended: bool,
    /// `spec.id` of the current run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
    /// The current run (`<uid>/<generation>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The command the plan is at: the first one not completed (the last one once all are).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<u32>,
    /// Every command, in order.
    pub commands: Vec<CommandView>,
    /// Node updates completed, failed and planned over all commands.
    pub progress: Progress,
    /// When the remaining node updates should be done, from the durations seen so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eta: Option<EtaView>,
    /// The `paused` steering annotation is set.
    pub paused: bool,
    /// The `abort` steering annotation is set.
    pub aborting: bool,
    /// The run's rollback (DESIGN §15), once it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackView>,
    /// What holds the plan or a node right now, one sentence each.
    pub blocking: Vec<String>,
    /// Every target of every command, in command order (controllers before workers).
    pub nodes: Vec<NodeView>,
    /// The last [`EVENTS_SHOWN`] Events about the Plan, oldest first.
    pub events: Vec<EventView>,
    /// The update window of each UpdateConfig with the `periodic` strategy.
    pub windows: Vec<WindowView>,
    /// What the updater last found for each UpdateConfig it checked (its status).
    pub updaters: Vec<UpdaterView>,
}

/// A run's rollback: why, and how far putting the nodes back got.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackView {
    /// Why the run is rolled back.
    pub reason: String,
    /// Nodes put back, over the nodes to put back.
    pub back: usize,
    /// Nodes to put back.
    pub total: usize,
    /// Nodes putting back their earlier version now, each `name (phase)`.
    pub in_flight: Vec<String>,
    /// Nodes that could not be put back, each `name: why`.
    pub failed: Vec<String>,
}

fn rollback_view(status: &autopilot_api::v1beta2::PlanStatus) -> Option<RollbackView> {
    let rollback = status.rollback.as_ref()?;
    let targets: Vec<&TargetStatus> = status
        .commands
        .iter()
        .filter_map(|c| c.rollback.as_ref())
        .flat_map(|r| r.workers.iter().chain(&r.controllers))
        .collect();
    Some(RollbackView {
        reason: rollback.reason.clone(),
        back: targets.iter().filter(|t| t.state == TargetState::SignalCompleted).count(),
        total: targets.len(),
        in_flight: targets
            .iter()
            .filter(|t| t.state == TargetState::SignalSent)
            .map(|t| match t.phase {
                Some(phase) => format!("{} ({phase})", t.name),
                None => format!("{} (signalled)", t.name),
            })
            .collect(),
        failed: targets
            .iter()
            .filter(|t| t.state.is_failure())
            .map(|t| format!("{}: {}", t.name, t.reason.as_deref().unwrap_or("no reason given")))
            .collect(),
    })
}

/// The update window of one UpdateConfig.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowView {
    /// The UpdateConfig's name.
    pub update_config: String,
    /// The window as configured (days, start time, length).
    pub window: String,
    /// Whether it is open now.
    pub open: bool,
    /// When it closes (open) or next opens (closed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// The updater's last word on one UpdateConfig (its status).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdaterView {
    /// The UpdateConfig's name.
    pub update_config: String,
    /// The last check's outcome (`UpToDate`, `MinIntervalWait`, ...).
    pub last_check: String,
    /// When it ended.
    pub checked_at: String,
    /// The version the server offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered: Option<String>,
    /// While a newer version waits for the minimum interval: when it may be planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_update_allowed: Option<String>,
    /// The server's `eolDate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_of_life: Option<String>,
    /// Whether the running version is past it (absent: cannot be judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub past_end_of_life: Option<bool>,
    /// What the status says about the end of life (a malformed date, ...).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub end_of_life_message: String,
}

/// The updater's view of each UpdateConfig that has a status with a check, by name.
fn updaters(update_configs: &[UpdateConfig]) -> Vec<UpdaterView> {
    let mut out: Vec<UpdaterView> = update_configs
        .iter()
        .filter_map(|config| {
            let status = config.status.as_ref()?;
            let check = status.last_check.as_ref()?;
            let eol = status.end_of_life.as_ref();
            Some(UpdaterView {
                update_config: config.name_any(),
                last_check: check.reason.clone(),
                checked_at: check.time.0.to_string(),
                offered: status.offered_version.clone(),
                next_update_allowed: status.next_update_allowed.as_ref().map(|t| t.0.to_string()),
                end_of_life: eol.map(|eol| eol.date.clone()),
                past_end_of_life: eol.and_then(|eol| eol.past),
                end_of_life_message: eol.map(|eol| eol.message.clone()).unwrap_or_default(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.update_config.cmp(&b.update_config));
    out
}

/// One blocking line for each UpdateConfig whose running version is past its end of life.
fn past_end_of_life(updaters: &[UpdaterView]) -> impl Iterator<Item = String> + '_ {
    updaters.iter().filter(|u| u.past_end_of_life == Some(true)).map(|u| {
        format!(
            "UpdateConfig {}: the running version is past its end of life ({}, as the update \
             server says)",
            u.update_config,
            autopilot_api::text::printable(u.end_of_life.as_deref().unwrap_or("-"))
        )
    })
}

/// One command of the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandView {
    /// Index in `spec.commands`.
    pub id: u32,
    /// `k0supdate` or `airgapupdate` (`unknown` for a malformed command).
    pub kind: String,
    /// The version the command updates to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The command state.
    pub state: String,
    /// Why the command ended in a failure state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What the command waits for right now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// With `prestage`: targets that staged the payload over all targets (`4/6`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staged: Option<String>,
}

/// Node updates over all commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Targets in `SignalCompleted`.
    pub completed: usize,
    /// Targets that failed (`SignalApplyFailed`, missing node or platform).
    pub failed: usize,
    /// Targets in `SignalSent`.
    pub in_flight: usize,
    /// Every target.
    pub planned: usize,
}

/// The estimate of the time left ([`eta`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EtaView {
    /// Seconds until the last node update should be done.
    pub remaining_seconds: u64,
    /// How many completed node updates the estimate is based on.
    pub samples: usize,
    /// Their mean duration, in seconds.
    pub mean_seconds: u64,
}

/// One targeted node of one command.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    /// Node or ControlNode name.
    pub name: String,
    /// `controller` or `worker`.
    pub role: String,
    /// The command this target belongs to.
    pub command: u32,
    /// The target state (`SignalPending`, `SignalSent`, `SignalCompleted`, …).
    pub state: String,
    /// The node's own signal phase, once it reported one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the state or phase last changed.
    pub since: String,
    /// Seconds since then.
    pub seconds_in_phase: u64,
    /// Why the node failed or what it waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The node's `Ready` condition (`None` for a pure controller, which has no Node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// The k0s version the node publishes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The Kubernetes version the node runs, as the cluster reports it: a controller's API
    /// server on `/version` (else the kubelet of its Node, if it has one), a worker's kubelet
    /// (its Node's `status.nodeInfo.kubeletVersion`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<String>,
    /// With `limits.groupBy`: the failure-domain group the run put the node in (the value
    /// of its label when the run started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// With `prestage`: where the node stands in staging the payload (`Requested`,
    /// `Staged`, `Failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prestage: Option<autopilot_api::prestage::PrestageState>,
}

/// One Event about the Plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    /// When it happened.
    pub time: String,
    /// Seconds before the snapshot's time.
    pub age_seconds: u64,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// PascalCase reason.
    pub reason: String,
    /// The note.
    pub note: String,
}

// === ETA ===

/// Nodes that update one after another within the limit of a group: the controllers of a
/// command (one at a time) or its workers (`limits.concurrent` at a time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtaGroup {
    /// How many of the group may be in flight at once (at least 1).
    pub concurrency: usize,
    /// How long each node in flight has been so far.
    pub in_flight: Vec<Duration>,
    /// Nodes not signalled yet.
    pending: usize,
}

impl EtaGroup {
    /// A group of `pending` nodes still to signal, `in_flight` ones under way (their elapsed
    /// times), at most `concurrency` at once.
    pub fn new(concurrency: usize, in_flight: Vec<Duration>, pending: usize) -> Self {
        Self { concurrency: concurrency.max(1), in_flight, pending }
    }
}

/// How long until every group is done, if each node update takes the mean of `samples` (the
/// node updates completed so far, from signal to `Completed`). `None` without samples.
///
/// Groups run one after another (controllers before workers, commands in order). Within a
/// group, each of `concurrency` slots is busy until its node in flight should be done (the
/// mean less its elapsed time, at least nothing), and each pending node takes the slot that
/// frees first. A canary's soak and holds (a paused plan, a blocked drain) are not counted.
pub fn eta(samples: &[Duration], groups: &[EtaGroup]) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let count = u32::try_from(samples.len()).unwrap_or(u32::MAX);
    let mean = samples.iter().sum::<Duration>() / count;
    let mut total = Duration::ZERO;
    for group in groups {
        let mut slots: Vec<Duration> =
            group.in_flight.iter().map(|elapsed| mean.saturating_sub(*elapsed)).collect();
        while slots.len() < group.concurrency {
            slots.push(Duration::ZERO);
        }
        for _ in 0..group.pending {
            let earliest = slots
                .iter_mut()
                .min()
                .expect("a group has at least one slot (concurrency is at least 1)");
            *earliest += mean;
        }
        total += slots.into_iter().max().unwrap_or_default();
    }
    Some(total)
}

// === View ===

/// The status of the Plan in `snapshot` as of `now`.
pub fn view(snapshot: &Snapshot, now: jiff::Timestamp) -> View {
    let Snapshot {
        plan_name,
        plan,
        nodes,
        control_nodes,
        events,
        update_configs,
        time_zone,
        api_versions,
    } = snapshot;
    let windows = windows(update_configs, now, time_zone);
    let updaters = updaters(update_configs);
    let Some(plan) = plan else {
        return not_found(plan_name, windows, updaters);
    };
    let status = plan.status.clone().unwrap_or_default();
    let steering = Steering::of(plan.annotations());
    let commands: Vec<CommandView> = status
        .commands
        .iter()
        .map(|command| command_view(command_spec(plan, command), command))
        .collect();
    let current = current_command(&status);
    let targets = Targets::read(plan, &status, (nodes, control_nodes, api_versions), now);
    // The ETA is the update's; a rollback has its own line.
    let eta = if status.state.is_terminal() || status.rollback.is_some() {
        None
    } else {
        eta_view(&targets.samples, &targets.groups)
    };
    let mut blocking = blocking(&status, steering, current, &targets.nodes, &targets.states);
    if status.state.is_terminal() {
        blocking.extend(closed_windows(&windows));
    }
    blocking.extend(past_end_of_life(&updaters));
    let events = plan_events(plan, events, now);
    View {
        plan: plan_name.clone(),
        found: true,
        state: status.state.to_string(),
        ended: status.state.is_terminal(),
        plan_id: status.plan_id.clone(),
        run_id: status.run_id.clone(),
        command: current.map(|c| c.id),
        commands,
        progress: targets.progress,
        eta,
        paused: steering.paused,
        aborting: steering.aborted,
        rollback: rollback_view(&status),
        blocking,
        nodes: targets.nodes,
        events,
        windows,
        updaters,
    }
}

/// The view of a Plan that does not exist: what blocks is its absence, the closed windows
/// and the running version past its end of life.
fn not_found(plan_name: &str, windows: Vec<WindowView>, updaters: Vec<UpdaterView>) -> View {
    let mut blocking = vec![format!("there is no Plan named {plan_name}")];
    blocking.extend(closed_windows(&windows));
    blocking.extend(past_end_of_life(&updaters));
    View {
        rollback: None,
        plan: plan_name.to_owned(),
        found: false,
        state: String::new(),
        ended: false,
        plan_id: None,
        run_id: None,
        command: None,
        commands: Vec::new(),
        progress: Progress::default(),
        eta: None,
        paused: false,
        aborting: false,
        blocking,
        nodes: Vec::new(),
        events: Vec::new(),
        windows,
        updaters,
    }
}

/// One blocking line for each closed update window: the updater creates no plan before it
/// opens.
fn closed_windows(windows: &[WindowView]) -> impl Iterator<Item = String> + '_ {
    windows.iter().filter(|w| !w.open).map(|w| {
        format!(
            "UpdateConfig {}: its update window ({}) is closed{}: the updater creates no plan \
             before it opens",
            w.update_config,
            w.window,
            w.until.as_deref().map(|t| format!(" until {t}")).unwrap_or_default()
        )
    })
}

/// The spec a command runs: the copy frozen in its status, else `spec.commands[id]`.
fn command_spec<'a>(plan: &'a Plan, command: &'a PlanCommandStatus) -> Option<&'a PlanCommand> {
    command
        .frozen
        .as_ref()
        .or_else(|| plan.spec.commands.get(usize::try_from(command.id).unwrap_or(0)))
}

/// One command of the plan: its kind and version from `spec`, its state from `command`.
fn command_view(spec: Option<&PlanCommand>, command: &PlanCommandStatus) -> CommandView {
    let (kind, version) = match spec {
        Some(PlanCommand { k0supdate: Some(update), .. }) => {
            ("k0supdate", Some(update.version.clone()))
        }
        Some(PlanCommand { airgapupdate: Some(update), .. }) => {
            ("airgapupdate", Some(update.version.clone()))
        }
        Some(PlanCommand { preflight: Some(_), .. }) => ("preflight", None),
        Some(PlanCommand { k0supdate: None, airgapupdate: None, preflight: None }) | None => {
            ("unknown", None)
        }
    };
    CommandView {
        id: command.id,
        kind: kind.to_owned(),
        version,
        state: command.state.to_string(),
        description: command.description.clone(),
        reason: command.reason.clone(),
        staged: command.staged.clone(),
    }
}

/// The command the plan is at: the first one not completed (the last one once all are).
fn current_command(status: &PlanStatus) -> Option<&PlanCommandStatus> {
    status.commands.iter().find(|c| c.state != PlanStateType::Completed).or(status.commands.last())
}

/// The Nodes and ControlNodes by name, and the run and time the targets are read against.
struct Objects<'a> {
    nodes: BTreeMap<&'a str, &'a Node>,
    control_nodes: BTreeMap<&'a str, &'a ControlNode>,
    api_versions: &'a BTreeMap<String, String>,
    run_id: &'a Option<String>,
    now: jiff::Timestamp,
    /// The run is being rolled back: rows are the nodes put back.
    rolling_back: bool,
}

/// Every target of every command, read once: the node rows, their states, the durations of
/// the node updates completed in this run, the groups still to update and the progress.
#[derive(Default)]
struct Targets {
    /// One row per target, in command order (controllers before workers).
    nodes: Vec<NodeView>,
    /// The state of each row's target.
    states: Vec<TargetState>,
    /// How long each node update completed in this run took.
    samples: Vec<Duration>,
    /// The controllers and the workers of each command not ended yet.
    groups: Vec<EtaGroup>,
    /// The targets counted by state.
    progress: Progress,
}

impl Targets {
    /// The targets of every command in `status`, each read against its Node or ControlNode.
    fn read(
        plan: &Plan,
        status: &PlanStatus,
        (nodes, control_nodes, api_versions): (&[Node], &[ControlNode], &BTreeMap<String, String>),
        now: jiff::Timestamp,
    ) -> Self {
        let objects = Objects {
            api_versions,
            nodes: nodes
                .iter()
                .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), n))
                .collect(),
            control_nodes: control_nodes
                .iter()
                .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), n))
                .collect(),
            run_id: &status.run_id,
            now,
            rolling_back: status.rollback.is_some(),
        };
        let mut out = Self::default();
        for command in &status.commands {
            // While a run is rolled back, a command's rows are the nodes it puts back.
            let (controllers, workers) = match (&status.rollback, &command.rollback) {
                (Some(_), Some(rollback)) => {
                    (rollback.controllers.as_slice(), rollback.workers.as_slice())
                }
                (Some(_) | None, _) => command_targets(command),
            };
            let worker_limit = command_spec(plan, command)
                .and_then(worker_limits)
                .map_or(1, |c| c.of(workers.len()));
            for (role, targets, concurrency) in
                [("controller", controllers, 1), ("worker", workers, worker_limit)]
            {
                let group = out.add_group(&objects, command.id, role, targets, concurrency);
                if !command.state.is_terminal() {
                    out.groups.push(group);
                }
            }
        }
        out
    }

    /// Adds the `role` targets of command `command` (a row and a count each, a sample for
    /// each completed one); returns them as a group of at most `concurrency` at once.
    fn add_group(
        &mut self,
        objects: &Objects<'_>,
        command: u32,
        role: &str,
        targets: &[TargetStatus],
        concurrency: usize,
    ) -> EtaGroup {
        let mut in_flight = Vec::new();
        let mut pending = 0;
        for target in targets {
            let control_node = objects.control_nodes.get(target.name.as_str()).copied();
            let node = objects.nodes.get(target.name.as_str()).copied();
            let since = target.last_updated_timestamp.0;
            let in_phase = elapsed(since, objects.now);
            self.progress.planned += 1;
            match target.state {
                TargetState::SignalPending => pending += 1,
                TargetState::SignalSent => {
                    self.progress.in_flight += 1;
                    in_flight.push(
                        signalled_at(node, control_node, role, objects.run_id, command)
                            .map_or(in_phase, |at| elapsed(at, objects.now)),
                    );
                }
                TargetState::SignalCompleted => {
                    self.progress.completed += 1;
                    if let Some(took) = took(node, control_node, role, objects.run_id, command) {
                        self.samples.push(took);
                    }
                }
                TargetState::SignalApplyFailed
                | TargetState::MissingPlatform
                | TargetState::MissingSignalNode => self.progress.failed += 1,
            }
            self.states.push(target.state);
            self.nodes.push(NodeView {
                name: target.name.clone(),
                role: role.to_owned(),
                command,
                state: target.state.to_string(),
                phase: target.phase.map(|p| p.to_string()),
                prestage: target.prestage,
                since: since.to_string(),
                seconds_in_phase: in_phase.as_secs(),
                reason: target.reason.clone().or_else(|| {
                    // A rollback's row says what it puts back.
                    target.from.as_ref().filter(|_| objects.rolling_back).map(|from| {
                        match target.state {
                            TargetState::SignalCompleted => format!("back on {from}"),
                            TargetState::SignalPending
                            | TargetState::SignalSent
                            | TargetState::SignalApplyFailed
                            | TargetState::MissingPlatform
                            | TargetState::MissingSignalNode => format!("to be put back on {from}"),
                        }
                    })
                }),
                ready: node.map(is_ready),
                version: published_version(node, control_node),
                kubernetes: kubernetes_version(
                    role,
                    node,
                    objects.api_versions.get(target.name.as_str()),
                ),
                group: target.group.clone(),
            });
        }
        EtaGroup::new(concurrency, in_flight, pending)
    }
}

/// The estimate of the time left for `groups`, from the durations in `samples`.
fn eta_view(samples: &[Duration], groups: &[EtaGroup]) -> Option<EtaView> {
    eta(samples, groups).map(|remaining| EtaView {
        remaining_seconds: remaining.as_secs(),
        samples: samples.len(),
        mean_seconds: (samples.iter().sum::<Duration>()
            / u32::try_from(samples.len()).unwrap_or(u32::MAX))
        .as_secs(),
    })
}

/// The window of each UpdateConfig with a valid `periodic` strategy, at `now` in `tz`.
fn windows(
    update_configs: &[UpdateConfig],
    now: jiff::Timestamp,
    tz: &jiff::tz::TimeZone,
) -> Vec<WindowView> {
    use autopilot_engine::updater::decide::Strategy;
    use autopilot_engine::updater::window::WindowState;
    let mut out: Vec<WindowView> = update_configs
        .iter()
        .filter_map(|config| {
            let strategy = Strategy::from_spec(config.spec.upgrade_strategy.as_ref()).ok()?;
            let window = match strategy {
                Strategy::Periodic(window) => window,
                Strategy::Cron(_) => return None,
            };
            let (open, until) = match window.state_at(now, tz) {
                WindowState::Open { closes_at } => (true, Some(closes_at)),
                WindowState::Closed { opens_at } => (false, opens_at),
            };
            Some(WindowView {
                update_config: config.name_any(),
                window: window.to_string(),
                open,
                until: until.map(|t| t.to_string()),
            })
        })
        .collect();
    out.sort_by(|a, b| a.update_config.cmp(&b.update_config));
    out
}

/// The controller and worker targets of a command.
fn command_targets(command: &PlanCommandStatus) -> (&[TargetStatus], &[TargetStatus]) {
    match (&command.k0supdate, &command.airgapupdate) {
        (Some(k0s), _) => (&k0s.controllers, &k0s.workers),
        (None, Some(airgap)) => (&[], &airgap.workers),
        (None, None) => (&[], &[]),
    }
}

/// `limits.concurrent` of a command's workers.
fn worker_limits(command: &PlanCommand) -> Option<autopilot_api::v1beta2::Concurrency> {
    match (&command.k0supdate, &command.airgapupdate) {
        (Some(k0s), _) => k0s.targets.workers.as_ref().map(|w| w.limits.concurrent),
        (None, Some(airgap)) => Some(airgap.workers.limits.concurrent),
        (None, None) => None,
    }
}

/// What holds the plan or a node, in the order an operator acts on it: the steering, the
/// plan's own conditions, the current command's hold, nodes in flight with a reason (a
/// blocked drain), targets whose Node is not Ready, and why a failed plan ended.
fn blocking(
    status: &autopilot_api::v1beta2::PlanStatus,
    steering: Steering,
    current: Option<&PlanCommandStatus>,
    nodes: &[NodeView],
    states: &[TargetState],
) -> Vec<String> {
    let mut out = Vec::new();
    let ended = status.state.is_terminal();
    if status.state == PlanStateType::NewPlan {
        out.push("waiting for the autopilot leader to pick the plan up".to_owned());
    }
    if steering.aborted && !ended {
        out.push(
            "aborting: no new node is signalled; nodes in flight finish, then the plan ends \
             Aborted"
                .to_owned(),
        );
    }
    if steering.paused && !ended {
        out.push(
            "paused by an operator: no new node is signalled (k0s autopilot resume to go on)"
                .to_owned(),
        );
    }
    out.extend(condition_blockers(&status.conditions, ended));
    if let Some(reason) = current.and_then(|c| c.reason.as_deref()).filter(|_| !ended) {
        out.push(format!("command {}: {reason}", current.map_or(0, |c| c.id)));
    }
    if !ended {
        out.extend(node_blockers(current, nodes, states));
    }
    if status.state.is_failure() {
        let why = status
            .commands
            .iter()
            .find(|c| c.state.is_failure())
            .map(|c| match &c.description {
                Some(description) => format!("command {} ended {}: {description}", c.id, c.state),
                None => format!("command {} ended {}", c.id, c.state),
            })
            .unwrap_or_else(|| format!("the plan ended {}", status.state));
        out.push(why);
    }
    out
}

/// The plan's conditions that hold it: every `True` one but `Paused` (the steering says
/// it), `Ready` and `Reconciling` (they say what the state says) and, once the plan ended,
/// `Stalled` (an ended plan's reason is its description).
fn condition_blockers(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    ended: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for condition in conditions {
        // `Ready` and `Reconciling` say what the state says; `Stalled` blocks only a plan
        // still running (a controller not ready past the grace): an ended plan's reason is
        // its description, shown below.
        let informational = [keys::conditions::READY, keys::conditions::RECONCILING]
            .contains(&condition.type_.as_str())
            || (condition.type_ == keys::conditions::STALLED && ended);
        if condition.status == "True"
            && condition.type_ != keys::conditions::PAUSED
            && !informational
        {
            out.push(format!("{}: {}", condition.type_, condition.message));
        }
    }
    out
}

/// The nodes of the current command that hold it: one in flight with a reason (a blocked
/// drain), one waiting whose Node is not Ready (unless the command's hold names it already).
fn node_blockers(
    current: Option<&PlanCommandStatus>,
    nodes: &[NodeView],
    states: &[TargetState],
) -> Vec<String> {
    let mut out = Vec::new();
    let held_by = current.and_then(|c| c.reason.as_deref()).unwrap_or_default();
    for (node, state) in nodes.iter().zip(states) {
        let in_current = current.is_some_and(|c| c.id == node.command);
        if !in_current {
            continue;
        }
        match state {
            TargetState::SignalSent => {
                if let Some(reason) = &node.reason {
                    out.push(format!("{}: {reason}", node.name));
                }
            }
            TargetState::SignalPending => {
                if node.ready == Some(false) && !held_by.contains(&node.name) {
                    out.push(format!(
                        "{}: Node is not Ready (not signalled until it is)",
                        node.name
                    ));
                }
            }
            TargetState::SignalCompleted
            | TargetState::SignalApplyFailed
            | TargetState::MissingPlatform
            | TargetState::MissingSignalNode => {}
        }
    }
    out
}

/// The newest [`EVENTS_SHOWN`] Events about `plan`, oldest first.
fn plan_events(plan: &Plan, events: &[Event], now: jiff::Timestamp) -> Vec<EventView> {
    let name = plan.name_any();
    let uid = plan.uid();
    let mut about: Vec<(jiff::Timestamp, &Event)> = events
        .iter()
        .filter(|event| {
            event.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some(keys::KIND_PLAN)
                    && r.name.as_deref() == Some(name.as_str())
                    && (r.uid.is_none() || uid.is_none() || r.uid == uid)
            })
        })
        .map(|event| (event_time(event), event))
        .collect();
    about.sort_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.metadata.name.cmp(&y.metadata.name)));
    let skip = about.len().saturating_sub(EVENTS_SHOWN);
    about
        .into_iter()
        .skip(skip)
        .map(|(time, event)| EventView {
            time: time.to_string(),
            age_seconds: elapsed(time, now).as_secs(),
            type_: event.type_.clone().unwrap_or_default(),
            reason: event.reason.clone().unwrap_or_default(),
            note: event.note.clone().unwrap_or_default(),
        })
        .collect()
}

/// When an Event happened: its `eventTime`, else its last (or first) deprecated timestamp,
/// else its creation.
fn event_time(event: &Event) -> jiff::Timestamp {
    event
        .event_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.deprecated_first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or_default()
}

/// `now - since`, nothing if `since` is in the future (clock skew).
fn elapsed(since: jiff::Timestamp, now: jiff::Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or_default()
}

/// The signal of this run and command on the target's object: the ControlNode for a
/// controller of a `k0supdate`, else the Node.
fn run_signal(
    node: Option<&Node>,
    control_node: Option<&ControlNode>,
    role: &str,
    run_id: &Option<String>,
    command: u32,
) -> Option<signal::SignalData> {
    let meta = match role {
        "controller" => &control_node?.metadata,
        _ => &node?.metadata,
    };
    let data = signal::from_meta(meta).ok().flatten()?;
    (data.run_id == *run_id && data.command.id == command).then_some(data)
}

/// When the leader signalled the target in this run.
fn signalled_at(
    node: Option<&Node>,
    control_node: Option<&ControlNode>,
    role: &str,
    run_id: &Option<String>,
    command: u32,
) -> Option<jiff::Timestamp> {
    run_signal(node, control_node, role, run_id, command)?.created.parse().ok()
}

/// How long the target's update took in this run: from the signal to `Completed`.
fn took(
    node: Option<&Node>,
    control_node: Option<&ControlNode>,
    role: &str,
    run_id: &Option<String>,
    command: u32,
) -> Option<Duration> {
    let data = run_signal(node, control_node, role, run_id, command)?;
    let created: jiff::Timestamp = data.created.parse().ok()?;
    let status = data.status?;
    if status.status != SignalPhase::Completed {
        return None;
    }
    let done: jiff::Timestamp = status.timestamp.parse().ok()?;
    Some(elapsed(created, done))
}

/// Whether a Node's `Ready` condition is `True`.
fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Kubernetes version a node runs as the cluster reports it: a controller's API server
/// (`api_server`), else (and for a worker) the kubelet of its Node.
fn kubernetes_version(
    role: &str,
    node: Option<&Node>,
    api_server: Option<&String>,
) -> Option<String> {
    let kubelet = || {
        let info = node?.status.as_ref()?.node_info.as_ref()?;
        Some(info.kubelet_version.clone()).filter(|v| !v.is_empty())
    };
    match role {
        "controller" => api_server.cloned().or_else(kubelet),
        _ => kubelet(),
    }
}

/// The version a node publishes: ControlNode `status.k0sVersion`, else the Node annotation.
fn published_version(node: Option<&Node>, control_node: Option<&ControlNode>) -> Option<String> {
    control_node
        .and_then(|c| c.k0s_version())
        .map(str::to_owned)
        .or_else(|| node.and_then(|n| n.annotations().get(keys::ANNOTATION_K0S_VERSION).cloned()))
}

// === Render ===

/// The status screen of the Plan in `snapshot` as of `now`.
pub fn render(snapshot: &Snapshot, now: jiff::Timestamp) -> String {
    render_view(&view(snapshot, now))
}

/// The status screen of `view`.
pub fn render_view(view: &View) -> String {
    let mut out = String::new();
    if !view.found {
        let _ = writeln!(out, "Plan {}: not found", view.plan);
        render_windows(&mut out, &view.windows);
        render_updaters(&mut out, &view.updaters);
        return out;
    }
    render_plan(&mut out, view);
    render_progress(&mut out, view);
    render_windows(&mut out, &view.windows);
    render_updaters(&mut out, &view.updaters);
    out.push('\n');
    render_blocking(&mut out, &view.blocking);
    out.push('\n');
    render_nodes(&mut out, &view.nodes);
    out.push('\n');
    render_events(&mut out, &view.events);
    out
}

/// The plan line (name, state, steering, id) and the line of the command it is at.
fn render_plan(out: &mut String, view: &View) {
    let steer = match (view.aborting, view.paused) {
        (true, _) if !view.ended => " (aborting)",
        (_, true) if !view.ended => " (paused)",
        (true | false, true | false) => "",
    };
    let _ = write!(out, "Plan {}: {}{steer}", view.plan, view.state);
    if let Some(id) = &view.plan_id {
        let _ = write!(out, "   id {id}");
    }
    out.push('\n');
    if let Some(rollback) = &view.rollback {
        let verb = if view.ended { "Rolled back" } else { "Rolling back" };
        let _ = write!(
            out,
            "{verb}: {}/{} node(s) back on their earlier version ({})",
            rollback.back, rollback.total, rollback.reason
        );
        if !rollback.in_flight.is_empty() {
            let _ = write!(out, "; in flight: {}", rollback.in_flight.join(", "));
        }
        if !rollback.failed.is_empty() {
            let _ = write!(out, "; not put back: {}", rollback.failed.join("; "));
        }
        out.push('\n');
    }
    if let Some(command) = view.command.and_then(|i| view.commands.iter().find(|c| c.id == i)) {
        let version = command.version.as_deref().map(|v| format!(" to {v}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "Command {}/{}: {}{version}: {}{}",
            command.id + 1,
            view.commands.len(),
            command.kind,
            command.state,
            command.staged.as_deref().map(|s| format!("   staged {s}")).unwrap_or_default()
        );
    }
}

/// The progress line: node updates done, in flight and failed, then the ETA.
fn render_progress(out: &mut String, view: &View) {
    let Progress { completed, failed, in_flight, planned } = view.progress;
    let percent = (completed * 100).checked_div(planned).unwrap_or(0);
    let _ = write!(out, "Progress: {completed}/{planned} node updates ({percent}%)");
    if in_flight > 0 {
        let _ = write!(out, ", {in_flight} in flight");
    }
    if failed > 0 {
        let _ = write!(out, ", {failed} failed");
    }
    match view.eta {
        Some(eta) => {
            let _ = write!(
                out,
                "   ETA {} (mean {} per node over {} update(s))",
                human(Duration::from_secs(eta.remaining_seconds)),
                human(Duration::from_secs(eta.mean_seconds)),
                eta.samples
            );
        }
        None if !view.ended && planned > 0 => out.push_str("   ETA unknown (no node done yet)"),
        None => {}
    }
    out.push('\n');
}

/// What blocks, one line each (`Blocking: nothing` when nothing does).
fn render_blocking(out: &mut String, blocking: &[String]) {
    if blocking.is_empty() {
        let _ = writeln!(out, "Blocking: nothing");
    } else {
        let _ = writeln!(out, "Blocking:");
        for line in blocking {
            let _ = writeln!(out, "  {}", cut(line, LINE_TEXT));
        }
    }
}

/// The node table: a header, then one row per target.
fn render_nodes(out: &mut String, nodes: &[NodeView]) {
    use autopilot_api::text::printable;
    let header = format!(
        "{:<16} {:<10} {:<3} {:<17} {:<14} {:>8}  {:<5} {:<16} {:<10} REASON",
        "NODE", "ROLE", "CMD", "STATE", "PHASE", "IN PHASE", "READY", "VERSION", "KUBERNETES"
    );
    let _ = writeln!(out, "{header}");
    for node in nodes {
        let ready = match node.ready {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        // A worker of a failure-domain group shows it beside its role (`worker:zone-a`).
        let role = match &node.group {
            Some(group) => std::borrow::Cow::Owned(format!("{}:{}", node.role, printable(group))),
            None => std::borrow::Cow::Borrowed(node.role.as_str()),
        };
        let line = format!(
            "{:<16} {:<10} {:<3} {:<17} {:<14} {:>8}  {:<5} {:<16} {:<10} {}",
            node.name,
            role,
            node.command,
            node.state,
            node.phase.as_deref().or(node.prestage.map(staging_column)).unwrap_or("-"),
            human(Duration::from_secs(node.seconds_in_phase)),
            ready,
            node.version.as_deref().map_or(std::borrow::Cow::Borrowed("-"), printable),
            node.kubernetes.as_deref().map_or(std::borrow::Cow::Borrowed("-"), printable),
            node.reason.as_deref().map(|r| cut(r, REASON_TEXT)).unwrap_or_default(),
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// The PHASE column of a node not signalled yet that a `prestage` command asked to stage.
fn staging_column(prestage: autopilot_api::prestage::PrestageState) -> &'static str {
    use autopilot_api::prestage::PrestageState;
    match prestage {
        PrestageState::Requested => "Staging",
        PrestageState::Staged => "Staged",
        PrestageState::Failed => "StageFailed",
    }
}

/// The Events section: one line per Event, oldest first (`Events: none` without any).
fn render_events(out: &mut String, events: &[EventView]) {
    if events.is_empty() {
        let _ = writeln!(out, "Events: none");
    } else {
        let _ = writeln!(out, "Events (last {}):", events.len());
        for event in events {
            let _ = writeln!(
                out,
                "  {:>8} ago  {:<8} {:<20} {}",
                human(Duration::from_secs(event.age_seconds)),
                event.type_,
                event.reason,
                cut(&event.note, LINE_TEXT)
            );
        }
    }
}

/// One line per update window.
fn render_windows(out: &mut String, windows: &[WindowView]) {
    for window in windows {
        let until = window.until.as_deref().unwrap_or("-");
        let state = if window.open {
            format!("open until {until}")
        } else {
            format!("closed, opens {until}")
        };
        let _ = writeln!(
            out,
            "Update window of UpdateConfig {}: {} ({state})",
            window.update_config, window.window
        );
    }
}

/// One line per UpdateConfig the updater checked: the last outcome, the offered version,
/// the minimum interval's wait and the end of life.
fn render_updaters(out: &mut String, updaters: &[UpdaterView]) {
    use autopilot_api::text::printable;
    for u in updaters {
        let mut line = format!(
            "Updater of UpdateConfig {}: {} at {}",
            u.update_config, u.last_check, u.checked_at
        );
        if let Some(offered) = &u.offered {
            let _ = write!(line, ", offered {}", printable(offered));
        }
        if let Some(at) = &u.next_update_allowed {
            let _ = write!(line, ", next update allowed at {at}");
        }
        if let Some(eol) = &u.end_of_life {
            let verdict = match u.past_end_of_life {
                Some(true) => "running version PAST its end of life",
                Some(false) => "running version within its end of life",
                None => "end of life not judged",
            };
            let _ = write!(line, "; eolDate {} ({verdict})", printable(eol));
        }
        if !u.end_of_life_message.is_empty() && u.past_end_of_life != Some(true) {
            let _ = write!(line, ": {}", printable(&u.end_of_life_message));
        }
        let _ = writeln!(out, "{line}");
    }
}

/// A duration for the screen: `42s`, `3m05s`, `1h02m`.
pub fn human(duration: Duration) -> String {
    let secs = duration.as_secs();
    match (secs / 3600, secs / 60 % 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// `text` on one line of at most `max` characters, with what would act on the terminal
/// escaped (node-written text: reasons, notes, versions).
fn cut(text: &str, max: usize) -> String {
    let line = autopilot_api::text::printable(&text.replace('\n', " ")).into_owned();
    if line.chars().count() <= max {
        line
    } else {
        let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}
