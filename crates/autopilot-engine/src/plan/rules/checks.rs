//! Preflight commands in the engine (DESIGN §13; the evaluation rules are in
//! `crate::preflight`; the pass that applies them is `crate::plan::driver::preflight`).
//!
//! - **NewPlan** ([`new_command`]) compiles the command (a problem refuses the plan,
//!   `Warning`, naming the field) and resolves each check's targets: `all` is every
//!   ControlNode and every Node that is not also a ControlNode (a controller+worker runs its
//!   checks once, through its ControlNode); `controllers` and `workers` select as an update
//!   command's groups do. Each target records the ids of the checks it runs. A static target
//!   without an object, or a check that targets no node at all, ends the plan
//!   `IncompleteTargets` (a check that runs nowhere proves nothing).
//! - **Schedule** (`crate::plan::driver::preflight::decide`) signals every target at once (checks change nothing, so
//!   there is no concurrency limit, no readiness gate and no drain), judges each node's
//!   report as it arrives and keeps the verdict in the command's `preflight.checks`, and
//!   concludes once no target is in flight. A node without a report by the command's
//!   deadline (its progress deadline, [`crate::preflight::deadline_of`]) is judged as
//!   status code 62. `error` ends the plan `PreflightFailed` before any later command
//!   signals a node; `warn` proceeds, or with `onWarn: Block` holds the plan until the
//!   Plan's accept-warnings annotation names the plan's id.
//! - **`scheduler` checks** signal no agent: NewPlan resolves them to Nodes (narrowed by the
//!   check's `nodeSelector`) and records one Pod per check and node in `preflight.pods`. The
//!   first running pass creates every Pod ([`Effect::CreatePod`], from the template in
//!   `Observed::check_pods`; an unusable template is status code 22 at once), stamping its
//!   creation; an ended Pod is judged from its exit code and termination message
//!   (`crate::preflight::scheduler::record_of`), and one still running at the command's
//!   deadline (from its creation) as 62. [`stale_pods`] deletes every check Pod no running
//!   check waits for, after every pass.

use std::collections::{BTreeMap, BTreeSet};

use autopilot_api::preflight::RawRecord;
use autopilot_api::v1beta2::{
    CheckStatus, FrozenTemplate, PlanCommandPreflight, PlanCommandPreflightStatus,
    PlanCommandStatus, PlanStateType, PlanStatus, PreflightCheck, PreflightPodStatus, TargetState,
    TargetStatus,
};

use autopilot_api::preflight::request::Request;

use crate::plan::model::command::Group;
use crate::plan::model::decision::{Effect, ObjectKind};
use crate::plan::model::inputs::Inputs;
use crate::plan::rules::targets::{NewCommand, select};
use crate::preflight::scheduler::{self, PodKey};

/// How many failing or warning nodes a command's description and reason name before
/// summing up the rest (the status keeps every one).
const MAX_NAMED: usize = 10;

/// NewPlan for the `preflight` command at `index` of run `run_id`.
pub(in crate::plan) fn new_command(
    inputs: &Inputs<'_>,
    run_id: &str,
    index: u32,
    preflight: &PlanCommandPreflight,
) -> NewCommand {
    let path = format!("spec.commands[{index}].preflight");
    let compiled = match crate::preflight::compile_command(&path, preflight) {
        Ok(compiled) => compiled,
        Err(problems) => {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return NewCommand::failed(PlanStateType::Warning, problems.join("; "));
        }
    };
    let label = format!("command {index} (preflight)");

    let mut placement = Placement::default();
    for (i, (check, compiled)) in preflight.checks.iter().zip(&compiled.checks).enumerate() {
        // A `scheduler` check runs a Pod on each of its Nodes; every other check is signalled
        // to the node's agent.
        let placed = if let Request::Scheduler(data) = &compiled.request {
            let pod_name = &data.kubernetes.pod_name;
            let config_map = inputs.observed.check_pods.templates.get(pod_name);
            placement.templates.push(scheduler::freeze(&check.id, config_map, pod_name));
            placement.add_pods(inputs, run_id, index, check, &data.kubernetes.node_selector)
        } else {
            placement.add_agent_targets(inputs, check)
        };
        if let Err(problem) = placed {
            return NewCommand::failed(
                PlanStateType::IncompleteTargets,
                format!("{label}: checks[{i}] ({}): {problem}", check.id),
            );
        }
    }

    let (groups, missing) = target_statuses(inputs, placement.by_group);
    let problems = incomplete_targets(&missing, &placement.nowhere);
    let (state, description) = if problems.is_empty() {
        (PlanStateType::SchedulableWait, None)
    } else {
        (PlanStateType::IncompleteTargets, Some(format!("{label}: {}", problems.join("; "))))
    };
    NewCommand {
        state,
        description,
        targets: groups,
        pods: placement.pods,
        templates: placement.templates,
        warnings: Vec::new(),
    }
}

/// Where a preflight command's checks run, as NewPlan resolves them check by check.
#[derive(Default)]
struct Placement {
    /// The agent targets per group, each with the ids of the checks it runs.
    by_group: BTreeMap<Group, BTreeMap<String, Vec<String>>>,
    /// One Pod per `scheduler` check and Node.
    pods: Vec<PreflightPodStatus>,
    /// The template of each `scheduler` check, read and frozen now.
    templates: Vec<FrozenTemplate>,
    /// The ids of the checks that target no node.
    nowhere: Vec<String>,
}

impl Placement {
    /// Place a `scheduler` check: one Pod on each of its Nodes.
    fn add_pods(
        &mut self,
        inputs: &Inputs<'_>,
        run_id: &str,
        index: u32,
        check: &PreflightCheck,
        node_selector: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let nodes = scheduler_nodes(inputs, check, node_selector)?;
        if nodes.is_empty() {
            self.nowhere.push(check.id.clone());
        }
        self.pods.extend(nodes.into_iter().map(|node| {
            let key = PodKey { run_id, command: index, check: &check.id, node: &node };
            PreflightPodStatus {
                check: check.id.clone(),
                pod: key.pod_name(),
                node,
                created: None,
                uid: None,
            }
        }));
        Ok(())
    }

    /// Place a check signalled to the agents: record it on each of its targets.
    fn add_agent_targets(
        &mut self,
        inputs: &Inputs<'_>,
        check: &PreflightCheck,
    ) -> Result<(), String> {
        let (controllers, workers) = check_targets(inputs, check)?;
        if controllers.is_empty() && workers.is_empty() {
            self.nowhere.push(check.id.clone());
        }
        for (group, names) in [(Group::Controllers, controllers), (Group::Workers, workers)] {
            for name in names {
                self.by_group
                    .entry(group)
                    .or_default()
                    .entry(name)
                    .or_default()
                    .push(check.id.clone());
            }
        }
        Ok(())
    }
}

/// The target statuses of each group (`SignalPending`, or `MissingSignalNode` for a target
/// without an object), and the targets without an object.
fn target_statuses(
    inputs: &Inputs<'_>,
    mut by_group: BTreeMap<Group, BTreeMap<String, Vec<String>>>,
) -> (Vec<(Group, Vec<TargetStatus>)>, Vec<String>) {
    let mut missing = Vec::new();
    let mut groups = Vec::new();
    for group in [Group::Controllers, Group::Workers] {
        let kind = object_kind(group);
        let objects = inputs.objects(kind);
        let statuses: Vec<TargetStatus> = by_group
            .remove(&group)
            .unwrap_or_default()
            .into_iter()
            .map(|(name, checks)| {
                let exists = objects.contains_key(&name);
                let state = if exists {
                    TargetState::SignalPending
                } else {
                    TargetState::MissingSignalNode
                };
                let mut target = TargetStatus::new(name.clone(), state, inputs.stamp);
                target.checks = checks;
                if !exists {
                    missing.push(format!("{kind} {name}"));
                    target.reason = Some(format!("{kind} {name} does not exist"));
                }
                target
            })
            .collect();
        groups.push((group, statuses));
    }
    (groups, missing)
}

/// Why the resolved targets are incomplete: targets without an object, checks that target
/// no node. Empty when they are complete.
fn incomplete_targets(missing: &[String], nowhere: &[String]) -> Vec<String> {
    [
        (!missing.is_empty()).then(|| format!("targets without an object: {}", missing.join(", "))),
        (!nowhere.is_empty()).then(|| {
            format!(
                "check(s) {} target no node (a check that runs nowhere proves nothing)",
                nowhere.join(", ")
            )
        }),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The ControlNodes and Nodes a check targets.
fn check_targets(
    inputs: &Inputs<'_>,
    check: &PreflightCheck,
) -> Result<(BTreeSet<String>, BTreeSet<String>), String> {
    let control_nodes = &inputs.observed.control_nodes;
    if check.targets.all {
        let controllers: BTreeSet<String> = control_nodes.keys().cloned().collect();
        let workers = inputs
            .observed
            .nodes
            .keys()
            .filter(|name| !control_nodes.contains_key(*name))
            .cloned()
            .collect();
        return Ok((controllers, workers));
    }
    let controllers = match &check.targets.controllers {
        Some(target) => select(inputs, ObjectKind::ControlNode, Group::Controllers, target)?,
        None => BTreeSet::new(),
    };
    let workers = match &check.targets.workers {
        // A controller+worker selected both ways runs the check once, as a controller.
        Some(target) => select(inputs, ObjectKind::Node, Group::Workers, target)?
            .into_iter()
            .filter(|name| !controllers.contains(name))
            .collect(),
        None => BTreeSet::new(),
    };
    Ok((controllers, workers))
}

/// The Nodes a `scheduler` check runs its Pod on: its targets' Nodes, only those carrying
/// every label of `node_selector`. A Pod needs a kubelet, so a targeted controller must also
/// be a `Node` (`all` takes every Node and so skips controllers that run no kubelet).
fn scheduler_nodes(
    inputs: &Inputs<'_>,
    check: &PreflightCheck,
    node_selector: &BTreeMap<String, String>,
) -> Result<BTreeSet<String>, String> {
    let nodes = inputs.observed.nodes;
    let candidates: BTreeSet<String> = if check.targets.all {
        nodes.keys().cloned().collect()
    } else {
        let (controllers, workers) = check_targets(inputs, check)?;
        let without_kubelet: Vec<&String> =
            controllers.iter().filter(|name| !nodes.contains_key(*name)).collect();
        if let Some(first) = without_kubelet.first() {
            return Err(format!(
                "controller {first} has no Node: a scheduler check runs a Pod, which needs a \
                 kubelet (target workers, all, or controllers that also run workloads)"
            ));
        }
        controllers.into_iter().chain(workers).collect()
    };
    Ok(candidates
        .into_iter()
        .filter(|name| {
            nodes.get(name).is_some_and(|node| {
                node_selector
                    .iter()
                    .all(|(key, value)| node.labels.get(key) == Some(value.as_str()))
            })
        })
        .collect())
}

/// The object kind a preflight group is signalled through.
pub(in crate::plan) fn object_kind(group: Group) -> ObjectKind {
    match group {
        Group::Controllers => ObjectKind::ControlNode,
        Group::Workers => ObjectKind::Node,
    }
}

/// One line for every node whose verdict on a check is `wanted`.
pub(in crate::plan) fn nodes_with(status: &PlanCommandStatus, wanted: CheckStatus) -> Vec<String> {
    let preflight = status.preflight.as_ref();
    preflight
        .into_iter()
        .flat_map(|p| &p.checks)
        .flat_map(|check| {
            check
                .nodes
                .iter()
                .filter(move |node| node.status == wanted)
                .map(move |node| format!("check {} on {}: {}", check.id, node.name, node.message))
        })
        .collect()
}

/// Whether `check` has a verdict for `node`.
pub(in crate::plan) fn judged(
    preflight: Option<&PlanCommandPreflightStatus>,
    check: &str,
    node: &str,
) -> bool {
    preflight.is_some_and(|p| {
        p.checks.iter().any(|c| c.id == check && c.nodes.iter().any(|n| n.name == node))
    })
}

/// The check Pods whose result is not recorded yet.
pub(in crate::plan) fn unjudged_pods(
    status: &PlanCommandStatus,
) -> impl Iterator<Item = &PreflightPodStatus> {
    let preflight = status.preflight.as_ref();
    preflight
        .into_iter()
        .flat_map(|p| &p.pods)
        .filter(move |pod| !judged(preflight, &pod.check, &pod.node))
}

/// The UID of the Pod the leader created for `pod`: the answer to this leader's own create
/// request ([`crate::plan::CheckPods::created`]), else the one the status recorded.
pub(in crate::plan) fn created_uid<'a>(
    observed: &crate::plan::model::inputs::Observed<'a>,
    pod: &'a PreflightPodStatus,
) -> Option<&'a str> {
    observed.check_pods.created.get(&pod.pod).or(pod.uid.as_ref()).map(String::as_str)
}

/// The Pod the snapshot shows for `pod` when it is the one the leader created (its UID is
/// [`created_uid`]); a Pod of the name with another UID, or with none known, is nobody's
/// result.
pub(in crate::plan) fn created_pod<'a>(
    observed: &crate::plan::model::inputs::Observed<'a>,
    pod: &'a PreflightPodStatus,
) -> Option<&'a k8s_openapi::api::core::v1::Pod> {
    let uid = created_uid(observed, pod)?;
    observed.check_pods.pods.get(&pod.pod).filter(|seen| seen.metadata.uid.as_deref() == Some(uid))
}

/// The check Pods to delete after a pass whose next status is `status`: every one in the
/// snapshot that no running check waits for (its result is recorded, its command or run
/// ended, or it belongs to an earlier run), or that has the name of one a check waits for
/// but is not the Pod the leader created (with a `CheckPodRefused` Warning: its result is
/// never taken, and once it is gone the leader creates its own again), and that is not
/// already being deleted. Each delete is bound to the UID the snapshot showed.
pub(in crate::plan) fn stale_pods(
    status: &PlanStatus,
    observed: &crate::plan::model::inputs::Observed<'_>,
) -> Vec<Effect> {
    let wanted: BTreeMap<&str, &PreflightPodStatus> = if status.is_terminal() {
        BTreeMap::new()
    } else {
        status
            .commands
            .iter()
            .filter(|command| !command.state.is_terminal())
            .flat_map(|command| unjudged_pods(command).map(|pod| (pod.pod.as_str(), pod)))
            .collect()
    };
    let mut effects = Vec::new();
    for (name, pod) in observed.check_pods.pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let uid = pod.metadata.uid.clone();
        if let Some(wanted) = wanted.get(name.as_str()) {
            let created = created_uid(observed, wanted);
            if created.is_some() && created == uid.as_deref() {
                continue;
            }
            effects.push(Effect::Event {
                kind: crate::plan::EventKind::Warning,
                reason: crate::plan::model::phases::reasons::CHECK_POD_REFUSED,
                note: refused_note(name, uid.as_deref(), created),
            });
        }
        effects.push(Effect::DeletePod { name: name.clone(), uid });
    }
    effects
}

/// Why the Pod `name` (with the UID `seen`) is refused, when the leader created the one with
/// the UID `created` (or none it knows of).
fn refused_note(name: &str, seen: Option<&str>, created: Option<&str>) -> String {
    let seen = seen.unwrap_or("none");
    let whose = match created {
        Some(created) => format!("is not the one the leader created (uid {created})"),
        None => "is not known to be the leader's: no answer to a create request of the \
                 leader's carried its uid (someone else made it, or a leader stopped right \
                 after creating it)"
            .to_owned(),
    };
    format!(
        "check Pod {}/{name} (uid {seen}) {whose}; its result is not taken: the Pod is \
         deleted and the leader creates its own again",
        autopilot_api::keys::NAMESPACE
    )
}

/// What a done target reported for `check`: its record when it answered `Completed`; when it
/// failed, a general error with its reason, or "no report" (status code 62) when the leader
/// failed it at the deadline; when its object is gone, a general error.
pub(in crate::plan) fn record_for(
    target: &TargetStatus,
    node_status: Option<&autopilot_api::signal::SignalStatus>,
    check: &str,
    deadline: std::time::Duration,
) -> RawRecord {
    let reason = target.reason.clone().unwrap_or_else(|| "failed without a reason".to_owned());
    match target.state {
        TargetState::SignalCompleted => match node_status.and_then(|s| s.preflight.get(check)) {
            Some(record) => record.clone().bounded(),
            None => RawRecord::failure(
                autopilot_api::preflight::status_code::GENERAL_ERROR,
                "the node reported no record for this check",
            ),
        },
        // The leader failed it at its deadline (`no progress in …`): it sent no report.
        TargetState::SignalApplyFailed if reason.starts_with("no progress in ") => {
            RawRecord::no_report(deadline)
        }
        TargetState::SignalApplyFailed
        | TargetState::MissingSignalNode
        | TargetState::MissingPlatform => {
            RawRecord::failure(autopilot_api::preflight::status_code::GENERAL_ERROR, reason)
        }
        TargetState::SignalPending | TargetState::SignalSent => RawRecord::no_report(deadline),
    }
}

/// The first [`MAX_NAMED`] lines joined, and how many more there are.
pub(in crate::plan) fn named(lines: &[String]) -> String {
    let mut text = lines.iter().take(MAX_NAMED).cloned().collect::<Vec<_>>().join("; ");
    if lines.len() > MAX_NAMED {
        text.push_str(&format!(" (and {} more)", lines.len() - MAX_NAMED));
    }
    text
}
