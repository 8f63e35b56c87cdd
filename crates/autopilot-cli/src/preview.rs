//! `k0s autopilot preview -f plan.yaml`: what the plan engine would do with a Plan on the
//! live cluster, writing nothing.
//!
//! The shell ([`run`]) reads a [`Cluster`] snapshot: Nodes, ControlNodes, the pods and
//! PodDisruptionBudgets a drain would meet, the `/readyz` answer of each controller, and the
//! uses of removed APIs (discovery). The pods, the probes and the removed APIs are what a
//! preview pass names as needed, looked up by the engine's resolve loop
//! ([`autopilot_engine::plan::resolve::run`]), the one the Plan engine's reconcile uses.
//! [`preview`] is pure: it runs the engine's own dry run
//! ([`autopilot_engine::plan::rollout`]) for the resolved targets, the refusals and the
//! batches, and adds what would hold or endanger the run right now: targets that are not
//! ready and budgets that block an eviction. Version skew is the engine's own refusal at
//! NewPlan (`autopilot_engine::plan::skew`), so the preview says exactly what the leader
//! would, and honours the Plan's `allow-skew` annotation the same way.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_api::v1beta2::{
    ControlNode, Plan, PlanCommand, PlanCommandStatus, PlanSpec, PlanStateType, PlanStatus,
    TargetState, TargetStatus,
};
use autopilot_engine::cordon::PodFacts;
use autopilot_engine::plan::resolve::{self, Answer, Answers, Outcome};
use autopilot_engine::plan::rollout::{self, Rollout};
use autopilot_engine::plan::{
    CheckPods, Needs, ObjectKind, Observed, PlanAccess, PlanReader, Policy, Probe, Readiness,
    RemovedApiUse, rbac,
};
use autopilot_engine::snapshot;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};
use serde::Serialize;

/// What the preview reads from the cluster.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Every Node.
    pub nodes: Vec<Node>,
    /// Every ControlNode.
    pub control_nodes: Vec<ControlNode>,
    /// The pods bound to the nodes a plan would drain.
    pub pods: Vec<Pod>,
    /// Every PodDisruptionBudget.
    pub budgets: Vec<PodDisruptionBudget>,
    /// The `/readyz` answer of each controller the plan targets.
    pub readiness: BTreeMap<String, Readiness>,
    /// The version each probed controller's API server answered on `/version` (what the
    /// version skew rules judge a controller by).
    pub api_versions: BTreeMap<String, String>,
    /// Uses of removed APIs for the versions the plan checks (`None`: not looked up).
    pub removed_apis: Option<Vec<RemovedApiUse>>,
    /// The ConfigMaps of the autopilot namespace, by name (the templates of `scheduler`
    /// checks; read only when the plan has one).
    pub pod_templates: BTreeMap<String, ConfigMap>,
    /// Whether the workers' representative may read the Plan (NewPlan's access review,
    /// `autopilot_engine::plan::rbac`), as the API server answered the person running the
    /// preview; empty: not reviewed.
    pub plan_access: BTreeMap<PlanReader, PlanAccess>,
}

/// What the preview found: the document `-o json` prints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Whether this is the preview of a rollback (`--rollback`): the commands are the
    /// rollback's targets, the batches its order.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rollback: bool,
    /// Whether the plan (or the rollback) would run to completion on the cluster as it is
    /// now.
    pub would_run: bool,
    /// The state the engine's dry run ended in.
    pub end_state: String,
    /// Every command with its resolved targets.
    pub commands: Vec<CommandReport>,
    /// The nodes signalled together, in order.
    pub batches: Vec<BatchReport>,
    /// Everything that would stop or hold the plan, one sentence each.
    pub problems: Vec<String>,
    /// The targets NewPlan would fail before signalling them (a worker whose own report,
    /// its keys or its version, refuses it), as `<Kind> <name>: <reason>`. Each counts
    /// against its command's `maxFailures`; within it, the plan still runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
    /// What the preview could not check, one sentence each (the workers' right to read the
    /// Plan when the person running it may not create SubjectAccessReviews). Not a problem:
    /// the leader checks again when the run starts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_checked: Vec<String>,
    /// The workers' representative whose right to read the Plan NewPlan asks the API server
    /// about (`None`: the run signals no worker, or this is a rollback).
    #[serde(skip)]
    pub plan_reader: Option<PlanReader>,
}

/// One command and its resolved targets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandReport {
    /// Index in `spec.commands`.
    pub id: u32,
    /// `k0supdate` or `airgapupdate`.
    pub kind: String,
    /// The version it updates to.
    pub version: String,
    /// The controllers it targets (one at a time).
    pub controllers: Vec<String>,
    /// The workers it targets.
    pub workers: Vec<String>,
    /// How many workers at once (`limits.concurrent` resolved).
    pub worker_concurrency: usize,
}

/// One batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchReport {
    /// The command.
    pub command: u32,
    /// `ControlNode/<name>` or `Node/<name>`, in the engine's order.
    pub targets: Vec<String>,
    /// Seconds the engine waits before it (a canary's soak, or the soak between two
    /// failure-domain groups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_seconds: Option<u64>,
    /// With `limits.groupBy`: the failure-domain group of the batch's workers, as the
    /// status names it (`topology.kubernetes.io/zone=a`, or `without <key>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// Preview `spec` on `cluster` under `policy` (the controllers' flags, which the cluster does
/// not show). `now` is only the dry run's clock.
pub fn preview(
    spec: &PlanSpec,
    cluster: &Cluster,
    policy: &Policy,
    now: jiff::Timestamp,
) -> Report {
    preview_what(What::Plan { spec, allow_skew: None }, cluster, policy, now)
}

/// [`preview`] of a Plan whose [`keys::ANNOTATION_ALLOW_SKEW`] annotation has the value
/// `allow_skew`: the engine runs a plan that breaks the version skew rules only when it names
/// the plan's id.
pub fn preview_allowing_skew(
    spec: &PlanSpec,
    allow_skew: Option<&str>,
    cluster: &Cluster,
    policy: &Policy,
    now: jiff::Timestamp,
) -> Report {
    preview_what(What::Plan { spec, allow_skew }, cluster, policy, now)
}

/// Preview the rollback of the live Plan `plan`'s run on `cluster` (DESIGN §15): what the
/// engine would do if an operator asked now (`k0s autopilot rollback`): the nodes in flight
/// finish, then every node the run changed is put back, in the order and batches shown.
pub fn preview_rollback(
    plan: &Plan,
    cluster: &Cluster,
    policy: &Policy,
    now: jiff::Timestamp,
) -> Report {
    preview_what(What::Rollback(plan), cluster, policy, now)
}

/// What a preview is of.
#[derive(Clone, Copy)]
enum What<'a> {
    /// A Plan as it would run (from a file), with its allow-skew annotation.
    Plan {
        /// The spec.
        spec: &'a PlanSpec,
        /// The value of its [`keys::ANNOTATION_ALLOW_SKEW`] annotation.
        allow_skew: Option<&'a str>,
    },
    /// The rollback of the live Plan's run.
    Rollback(&'a Plan),
}

impl<'a> What<'a> {
    fn spec(self) -> &'a PlanSpec {
        match self {
            Self::Plan { spec, .. } => spec,
            Self::Rollback(plan) => &plan.spec,
        }
    }
}

/// The cluster's ControlNodes and Nodes as the planner sees them, by name.
fn planner_objects(
    cluster: &Cluster,
) -> (
    BTreeMap<String, autopilot_engine::plan::TargetObject>,
    BTreeMap<String, autopilot_engine::plan::TargetObject>,
) {
    let control_nodes = cluster
        .control_nodes
        .iter()
        .map(|c| (c.name_any(), snapshot::control_node_object(c)))
        .collect();
    let nodes = cluster
        .nodes
        .iter()
        .map(|n| (n.name_any(), snapshot::node_object(&snapshot::SlimNode::from(n))))
        .collect();
    (control_nodes, nodes)
}

fn preview_what(
    what: What<'_>,
    cluster: &Cluster,
    policy: &Policy,
    now: jiff::Timestamp,
) -> Report {
    let spec = what.spec();
    let (control_nodes, nodes) = planner_objects(cluster);
    let readiness = BTreeMap::new();
    let observed = Observed {
        gate_answers: &autopilot_engine::plan::NO_GATE_ANSWERS,
        now,
        term_started: None,
        control_nodes: &control_nodes,
        nodes: &nodes,
        readiness: &readiness,
        api_versions: &cluster.api_versions,
        removed_apis: Some(cluster.removed_apis.as_deref().unwrap_or_default()),
        check_pods: CheckPods { templates: &cluster.pod_templates, ..CheckPods::NONE },
        plan_access: &cluster.plan_access,
    };
    let (rollout, commands, mut problems) = match what {
        What::Plan { spec, allow_skew } => {
            let rollout = rollout::rollout_allowing_skew(spec, allow_skew, &observed, policy);
            let commands = command_reports(spec, &rollout);
            (rollout, commands, Vec::new())
        }
        What::Rollback(plan) => {
            let status = plan.status.clone().unwrap_or_default();
            let live = rollout::LivePlan {
                uid: plan.metadata.uid.as_deref().unwrap_or_default(),
                generation: plan.metadata.generation.unwrap_or_default(),
                spec,
                status: &status,
            };
            // Without a run there is nothing to dry-run (the engine would start one).
            let rollout = if status.run_id.is_some() {
                rollout::rollback(live, &observed, policy)
            } else {
                Rollout { resolved: status.clone(), batches: Vec::new(), end: status.clone() }
            };
            let commands = rollback_reports(&rollout);
            let problems = rollback_problems(&status, &rollout);
            return finish(what, cluster, rollout, commands, problems);
        }
    };

    // Check 1: the engine's own verdict (refusals at NewPlan, version skew included; a
    // failed run).
    if rollout.end.state.is_failure() {
        let why = rollout
            .end
            .commands
            .iter()
            .find(|c| c.state.is_failure())
            .and_then(|c| c.description.clone())
            .unwrap_or_else(|| "no reason given".to_owned());
        problems.push(format!("the plan would end {}: {why}", rollout.end.state));
    } else if !rollout::completes(&rollout) {
        problems.push(format!("the plan would not finish: it would wait in {}", rollout.end.state));
    }
    let reader = plan_reader(&control_nodes, &rollout.resolved);
    let mut report = finish(what, cluster, rollout, commands, problems);
    report.not_checked.extend(reader.as_ref().and_then(|reader| unchecked_access(cluster, reader)));
    report.plan_reader = reader;
    report
}

/// The workers' representative NewPlan asks the API server about for the run `resolved`
/// records (`None`: the run signals no worker).
fn plan_reader(
    control_nodes: &BTreeMap<String, autopilot_engine::plan::TargetObject>,
    resolved: &PlanStatus,
) -> Option<PlanReader> {
    rbac::representative(control_nodes, resolved).map(|(_, reader)| reader)
}

/// The access review that could not be made for the previewed run, as a sentence (a denial
/// is the engine's refusal, among the problems).
fn unchecked_access(cluster: &Cluster, reader: &PlanReader) -> Option<String> {
    match cluster.plan_access.get(reader)? {
        PlanAccess::Unknown(why) => Some(format!(
            "whether the workers may read Plan {} ({} in {}): {why}",
            keys::PLAN_NAME,
            reader.user,
            reader.groups.join(", ")
        )),
        PlanAccess::Allowed | PlanAccess::Denied(_) => None,
    }
}

/// The report: the engine's verdict (`problems`), then what would hold or endanger the run
/// now.
fn finish(
    what: What<'_>,
    cluster: &Cluster,
    rollout: Rollout,
    commands: Vec<CommandReport>,
    mut problems: Vec<String>,
) -> Report {
    // Check 2: targets that are not ready now (the engine would wait for them).
    problems.extend(not_ready(&commands, cluster));
    // Check 3: budgets that block an eviction now.
    problems.extend(blocked_drains(&commands, cluster));

    Report {
        rollback: matches!(what, What::Rollback(_)),
        would_run: problems.is_empty(),
        end_state: rollout.end.state.to_string(),
        commands,
        batches: rollout
            .batches
            .iter()
            .map(|batch| BatchReport {
                command: batch.command,
                targets: batch
                    .targets
                    .iter()
                    .map(|(kind, name)| format!("{}/{name}", kind_name(*kind)))
                    .collect(),
                after_seconds: batch.waited.map(|d| d.as_secs()),
                // A rollback goes in reverse name order, whatever the groups.
                group: match what {
                    What::Plan { spec, .. } => batch_group(spec, &rollout.resolved, batch),
                    What::Rollback(_) => None,
                },
            })
            .collect(),
        problems,
        failing: failing(&rollout.resolved),
        not_checked: Vec::new(),
        plan_reader: None,
    }
}

/// The targets NewPlan would fail ([`Report::failing`]), if any, under their heading.
fn render_failing(out: &mut String, failing: &[String]) {
    if failing.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Nodes that would fail, each counted by its command's maxFailures ({}):",
        failing.len()
    );
    for line in failing {
        let _ = writeln!(out, "  - {line}");
    }
}

/// The targets the first pass failed before signalling any node, as `<Kind> <name>:
/// <reason>` in command order.
fn failing(resolved: &PlanStatus) -> Vec<String> {
    let mut lines = Vec::new();
    for command in &resolved.commands {
        let groups = command
            .k0supdate
            .iter()
            .flat_map(|k| [("ControlNode", &k.controllers), ("Node", &k.workers)])
            .chain(command.airgapupdate.iter().map(|a| ("Node", &a.workers)));
        for (kind, targets) in groups {
            for target in targets.iter().filter(|t| t.state == TargetState::SignalApplyFailed) {
                let reason = target.reason.as_deref().unwrap_or("no reason given");
                lines.push(format!("{kind} {}: {reason}", target.name));
            }
        }
    }
    lines
}

/// The failure-domain group of a batch of workers, if its command has `groupBy`.
fn batch_group(spec: &PlanSpec, resolved: &PlanStatus, batch: &rollout::Batch) -> Option<String> {
    let command = spec.commands.get(usize::try_from(batch.command).ok()?)?;
    let workers = command
        .k0supdate
        .as_ref()
        .and_then(|k0s| k0s.targets.workers.as_ref())
        .or(command.airgapupdate.as_ref().map(|airgap| &airgap.workers))?;
    let key = workers.limits.group_by.as_deref()?;
    let status = resolved.commands.iter().find(|c| c.id == batch.command)?;
    let targets: Vec<&TargetStatus> = status
        .k0supdate
        .iter()
        .flat_map(|k0s| &k0s.workers)
        .chain(status.airgapupdate.iter().flat_map(|airgap| &airgap.workers))
        .collect();
    let (kind, name) = batch.targets.first()?;
    if *kind != ObjectKind::Node {
        return None;
    }
    let target = targets.iter().find(|t| &t.name == name)?;
    Some(match &target.group {
        Some(value) => format!("{key}={value}"),
        None => format!("without {key}"),
    })
}

fn kind_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::ControlNode => keys::KIND_CONTROL_NODE,
        ObjectKind::Node => "Node",
    }
}

/// The commands with the targets the engine resolved.
fn command_reports(spec: &PlanSpec, rollout: &Rollout) -> Vec<CommandReport> {
    spec.commands
        .iter()
        .enumerate()
        .map(|(index, command)| {
            let id = u32::try_from(index).unwrap_or(u32::MAX);
            let status = rollout.resolved.commands.iter().find(|c| c.id == id);
            let names = |targets: &[TargetStatus]| -> Vec<String> {
                targets.iter().map(|t| t.name.clone()).collect()
            };
            let (controllers, workers) = match status {
                Some(PlanCommandStatus { k0supdate: Some(k0s), .. }) => {
                    (names(&k0s.controllers), names(&k0s.workers))
                }
                Some(PlanCommandStatus { airgapupdate: Some(airgap), .. }) => {
                    (Vec::new(), names(&airgap.workers))
                }
                Some(_) | None => (Vec::new(), Vec::new()),
            };
            let (kind, version, concurrency) = match command {
                PlanCommand { k0supdate: Some(update), .. } => (
                    "k0supdate",
                    update.version.clone(),
                    update.targets.workers.as_ref().map(|w| w.limits.concurrent),
                ),
                PlanCommand { airgapupdate: Some(update), .. } => {
                    ("airgapupdate", update.version.clone(), Some(update.workers.limits.concurrent))
                }
                PlanCommand { preflight: Some(_), .. } => ("preflight", String::new(), None),
                PlanCommand { k0supdate: None, airgapupdate: None, preflight: None } => {
                    ("unknown", String::new(), None)
                }
            };
            let worker_concurrency = concurrency.unwrap_or_default().of(workers.len());
            CommandReport {
                id,
                kind: kind.to_owned(),
                version,
                controllers,
                workers,
                worker_concurrency,
            }
        })
        .collect()
}

/// The commands of a rollback with the nodes it puts back (its `rollback` lists), each
/// command's version being the versions the nodes go back to.
fn rollback_reports(rollout: &Rollout) -> Vec<CommandReport> {
    rollout
        .resolved
        .commands
        .iter()
        .filter_map(|command| {
            let lists = command.rollback.as_ref()?;
            let names = |targets: &[TargetStatus]| -> Vec<String> {
                targets.iter().map(|t| t.name.clone()).collect()
            };
            let versions: BTreeSet<&str> = lists
                .controllers
                .iter()
                .chain(&lists.workers)
                .filter_map(|t| t.from.as_deref())
                .collect();
            let kind = match command.frozen.as_ref() {
                Some(PlanCommand { airgapupdate: Some(_), .. }) => "rollback of airgapupdate",
                Some(_) | None => "rollback of k0supdate",
            };
            let concurrency = command.frozen.as_ref().and_then(|frozen| match frozen {
                PlanCommand { k0supdate: Some(update), .. } => {
                    update.targets.workers.as_ref().map(|w| w.limits.concurrent)
                }
                PlanCommand { airgapupdate: Some(update), .. } => {
                    Some(update.workers.limits.concurrent)
                }
                PlanCommand { .. } => None,
            });
            let workers = names(&lists.workers);
            Some(CommandReport {
                id: command.id,
                kind: kind.to_owned(),
                version: versions.into_iter().collect::<Vec<_>>().join(", "),
                controllers: names(&lists.controllers),
                worker_concurrency: concurrency.unwrap_or_default().of(workers.len()),
                workers,
            })
        })
        .collect()
}

/// What stops a rollback of the run of `status`: nothing to roll back, or a dry run that
/// does not end `RolledBack`.
fn rollback_problems(status: &PlanStatus, rollout: &Rollout) -> Vec<String> {
    if status.run_id.is_none() {
        return vec!["the plan has no run to roll back".to_owned()];
    }
    if rollout.batches.is_empty() && rollout.end.state != PlanStateType::RolledBack {
        return vec![format!(
            "nothing to roll back: the run ({}) changed no node whose earlier version is known",
            status.state
        )];
    }
    if rollout.end.state == PlanStateType::RolledBack {
        return Vec::new();
    }
    let why = rollout
        .end
        .commands
        .iter()
        .find_map(|c| c.description.clone().or_else(|| c.reason.clone()))
        .unwrap_or_else(|| "no reason given".to_owned());
    vec![format!("the rollback would end {}: {why}", rollout.end.state)]
}

/// Targets that are not ready now: controllers whose `/readyz` fails, workers whose Node is
/// not `Ready`.
fn not_ready(commands: &[CommandReport], cluster: &Cluster) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for command in commands {
        for name in &command.controllers {
            if !seen.insert(("controller", name.clone())) {
                continue;
            }
            match cluster.readiness.get(name) {
                Some(Readiness::Ready) => {}
                Some(Readiness::NotReady(why)) => problems.push(format!(
                    "controller {name} is not ready ({why}): the plan would wait for it, and \
                     say it is stalled past the readiness grace"
                )),
                None => {}
            }
        }
        for name in &command.workers {
            if !seen.insert(("worker", name.clone())) {
                continue;
            }
            let node = cluster.nodes.iter().find(|n| n.name_any() == *name);
            if node.is_some_and(|n| !snapshot::is_node_ready(n)) {
                problems.push(format!(
                    "worker {name} is not Ready: the plan would wait for it before signalling it"
                ));
            }
        }
    }
    problems
}

/// The Node a target drains, if it runs a kubelet: a worker's own Node, a controller+worker's
/// Node.
fn drained_nodes(commands: &[CommandReport], cluster: &Cluster) -> BTreeSet<String> {
    let mut drained = BTreeSet::new();
    for command in commands.iter().filter(|c| c.kind == "k0supdate") {
        drained.extend(command.workers.iter().cloned());
        for name in &command.controllers {
            let control_node = cluster.control_nodes.iter().find(|c| c.name_any() == *name);
            let Some(control_node) = control_node else { continue };
            let mode = control_node.annotations().get(keys::ANNOTATION_MODE).map(String::as_str);
            if mode == Some(keys::MODE_CONTROLLER_WORKER) {
                drained.insert(control_node.hostname().unwrap_or(name).to_owned());
            }
        }
    }
    drained
}

/// The pods a drain of `node` would evict whose budget allows no disruption now.
fn blocked_drains(commands: &[CommandReport], cluster: &Cluster) -> Vec<String> {
    let mut problems = Vec::new();
    for node in drained_nodes(commands, cluster) {
        let pods = cluster.pods.iter().filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
        });
        for pod in pods {
            let facts: PodFacts = snapshot::pod_facts(pod, None);
            if !facts.must_go() || facts.terminating() {
                continue;
            }
            for budget in cluster.budgets.iter().filter(|b| covers(b, pod)) {
                let allowed = budget.status.as_ref().map_or(0, |s| s.disruptions_allowed);
                if allowed < 1 {
                    problems.push(format!(
                        "draining {node} is blocked now: evicting {}/{} is refused by \
                         PodDisruptionBudget {}/{} (0 disruptions allowed)",
                        facts.namespace,
                        facts.name,
                        budget.namespace().unwrap_or_default(),
                        budget.name_any()
                    ));
                }
            }
        }
    }
    problems
}

/// Whether `budget` covers `pod`: same namespace, and its selector matches the pod's labels
/// (a budget without a selector, or with one that does not parse, covers nothing).
fn covers(budget: &PodDisruptionBudget, pod: &Pod) -> bool {
    if budget.namespace() != pod.namespace() {
        return false;
    }
    let Some(selector) = budget.spec.as_ref().and_then(|s| s.selector.clone()) else {
        return false;
    };
    match kube::core::Selector::try_from(selector) {
        Ok(selector) => kube::core::SelectorExt::matches(&selector, pod.labels()),
        Err(_) => false,
    }
}

/// The report for a person.
pub fn render(plan_name: &str, spec: &PlanSpec, report: &Report) -> String {
    let mut out = String::new();
    let verdict = if report.rollback {
        ("The rollback would run.", "The rollback would not run as it is.")
    } else {
        ("The plan would run.", "The plan would not run as it is.")
    };
    if report.rollback {
        let _ = writeln!(
            out,
            "Rollback of the run of plan {plan_name} (id {}): {} command(s) to put back; the \
             engine's dry run ends {}",
            spec.id,
            report.commands.len(),
            report.end_state
        );
    } else {
        let _ = writeln!(
            out,
            "Plan {plan_name} (id {}): {} command(s); the engine's dry run ends {}",
            spec.id,
            report.commands.len(),
            report.end_state
        );
    }

    render_commands(&mut out, &report.commands);
    render_order(&mut out, &report.batches);
    for line in &report.not_checked {
        let _ = writeln!(out, "Could not check {line}");
    }
    if report.problems.is_empty() {
        let _ = writeln!(out, "Problems: none");
    }
    render_failing(&mut out, &report.failing);
    if report.problems.is_empty() {
        let _ = writeln!(out, "{}", verdict.0);
    } else {
        let _ = writeln!(out, "Problems ({}):", report.problems.len());
        for problem in &report.problems {
            let _ = writeln!(out, "  - {problem}");
        }
        let _ = writeln!(out, "{}", verdict.1);
    }
    out
}

/// The commands and their targets, one block each.
fn render_commands(out: &mut String, commands: &[CommandReport]) {
    for command in commands {
        let _ = writeln!(out, "Command {}: {} to {}", command.id, command.kind, command.version);
        if !command.controllers.is_empty() {
            let _ =
                writeln!(out, "  controllers (one at a time): {}", command.controllers.join(", "));
        }
        if !command.workers.is_empty() {
            let _ = writeln!(
                out,
                "  workers ({} at a time): {}",
                command.worker_concurrency,
                command.workers.join(", ")
            );
        }
        if command.controllers.is_empty() && command.workers.is_empty() {
            let _ = writeln!(out, "  no targets resolved");
        }
    }
}

/// The order nodes would be signalled in.
fn render_order(out: &mut String, batches: &[BatchReport]) {
    if !batches.is_empty() {
        let _ =
            writeln!(out, "Order (each line signalled together, once the one before completed):");
        for (i, batch) in batches.iter().enumerate() {
            let after = batch
                .after_seconds
                .map(|s| {
                    format!(
                        " (after waiting {})",
                        crate::status::human(std::time::Duration::from_secs(s))
                    )
                })
                .unwrap_or_default();
            let group =
                batch.group.as_deref().map(|group| format!(" (group {group})")).unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:>2}. command {}{group}: {}{after}",
                i + 1,
                batch.command,
                batch.targets.join(", ")
            );
        }
    }
}

// === Shell ===

/// How long reading the cluster may take.
const API_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Read the snapshot `spec` needs and preview it. Reads only (get, list, and `/readyz`
/// probes of the targeted controllers with the same credentials). The pods of the Nodes a
/// drain would meet, the probes and the removed APIs are read as each preview pass names
/// them.
pub async fn run(
    client: kube::Client,
    config: kube::Config,
    spec: &PlanSpec,
    allow_skew: Option<&str>,
    policy: &Policy,
) -> anyhow::Result<Report> {
    run_what(client, config, What::Plan { spec, allow_skew }, policy).await
}

/// [`preview_rollback`] of the live Plan `plan` on the live cluster, with the lookups of
/// [`run`].
pub async fn run_rollback(
    client: kube::Client,
    config: kube::Config,
    plan: &Plan,
    policy: &Policy,
) -> anyhow::Result<Report> {
    run_what(client, config, What::Rollback(plan), policy).await
}

async fn run_what(
    client: kube::Client,
    config: kube::Config,
    what: What<'_>,
    policy: &Policy,
) -> anyhow::Result<Report> {
    let spec = what.spec();
    let read = async {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context("listing Nodes")?
            .items;
        let control_nodes = Api::<ControlNode>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context("listing ControlNodes")?
            .items;
        let budgets = Api::<PodDisruptionBudget>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context("listing PodDisruptionBudgets")?
            .items;
        anyhow::Ok((nodes, control_nodes, budgets))
    };
    let (nodes, control_nodes, budgets) = tokio::time::timeout(API_TIMEOUT, read)
        .await
        .map_err(|_| anyhow::anyhow!("no answer from the API server in {API_TIMEOUT:?}"))??;
    let mut cluster = Cluster { nodes, control_nodes, budgets, ..Cluster::default() };
    if autopilot_engine::preflight::scheduler::in_spec(spec) {
        let templates = Api::<ConfigMap>::namespaced(client.clone(), keys::NAMESPACE)
            .list(&ListParams::default())
            .await
            .with_context(|| {
                format!("listing the ConfigMaps of {} (check Pod templates)", keys::NAMESPACE)
            })?;
        cluster.pod_templates = templates
            .items
            .into_iter()
            .map(|config_map| (config_map.name_any(), config_map))
            .collect();
    }

    let prober = autopilot_shell::probe::Prober::for_config(config);
    let mut lookups =
        Lookups { client: &client, prober: &prober, control_nodes: &cluster.control_nodes };
    // The first pass tells what the engine targets; the engine's resolve loop reads what
    // those targets need and previews again.
    let now = jiff::Timestamp::now();
    let each_pass = |known: &Answers| pass(what, &cluster, policy, now, known);
    let previewed = resolve::run(Answers::default(), each_pass, &mut lookups).await?;
    Ok(previewed.report)
}

/// A preview and what it still needs looked up.
struct Previewed {
    /// The preview with what was known.
    report: Report,
    /// What the preview could not report on without.
    needs: Needs,
}

impl Outcome for Previewed {
    fn needs(&self) -> &Needs {
        &self.needs
    }
}

/// One pass of the preview: [`preview`] on `cluster`'s objects with what is `known` (it
/// replaces `cluster`'s pods, readiness, removed APIs and access reviews), and what the
/// report needs that is not known yet: the pods of the Nodes it would drain, the `/readyz`
/// answer of the controllers it targets, the removed APIs the engine checks at NewPlan, and
/// whether the workers' representative may read the Plan.
fn pass(
    what: What<'_>,
    cluster: &Cluster,
    policy: &Policy,
    now: jiff::Timestamp,
    known: &Answers,
) -> Previewed {
    let cluster = Cluster {
        pods: known.pods.values().flatten().cloned().collect(),
        readiness: known.readiness.clone(),
        api_versions: known.api_versions.clone(),
        removed_apis: known.removed_apis.clone(),
        plan_access: known.plan_access.clone(),
        ..cluster.clone()
    };
    let report = preview_what(what, &cluster, policy, now);
    let pods_on = drained_nodes(&report.commands, &cluster)
        .into_iter()
        .filter(|node| !known.pods.contains_key(node))
        .collect();
    // The controllers it targets, and every controller when NewPlan judges the version skew
    // (by what each API server answers on `/version`, probed alongside `/readyz`).
    let judged: Vec<String> = match what {
        What::Plan { spec, .. } if spec.commands.iter().any(|c| c.k0supdate.is_some()) => {
            cluster.control_nodes.iter().map(kube::ResourceExt::name_any).collect()
        }
        What::Plan { .. } | What::Rollback(_) => Vec::new(),
    };
    let probe = report
        .commands
        .iter()
        .flat_map(|c| c.controllers.iter())
        .chain(&judged)
        .filter(|name| !known.readiness.contains_key(*name))
        .filter(|name| cluster.control_nodes.iter().any(|c| c.name_any() == **name))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // A rollback starts no new run: the removed-API check of NewPlan does not apply.
    let removed_api_versions = match what {
        What::Plan { spec, .. } if known.removed_apis.is_none() => check_versions(spec),
        What::Plan { .. } | What::Rollback(_) => Vec::new(),
    };
    // NewPlan's access review of the workers' representative, as the person previewing.
    let plan_readers = report
        .plan_reader
        .iter()
        .filter(|r| !known.plan_access.contains_key(*r))
        .cloned()
        .collect();
    let needs = Needs { gates: Vec::new(), probe, removed_api_versions, pods_on, plan_readers };
    Previewed { report, needs }
}

/// The preview's lookups: pods and removed APIs through the API server, `/readyz` probes of
/// the targeted controllers with the same credentials.
struct Lookups<'a> {
    client: &'a kube::Client,
    prober: &'a autopilot_shell::probe::Prober,
    control_nodes: &'a [ControlNode],
}

impl Answer for Lookups<'_> {
    /// A preview does not judge the cluster's health: every gate counts as passed (the
    /// preview says so next to the rollout).
    async fn gate(
        &mut self,
        _query: &autopilot_engine::plan::GateQuery,
    ) -> autopilot_engine::plan::GateAnswer {
        autopilot_engine::plan::GateAnswer::Assumed
    }

    type Error = anyhow::Error;

    async fn probe(&mut self, controllers: &[String]) -> BTreeMap<String, Probe> {
        let mut probes = BTreeMap::new();
        for name in controllers {
            let Some(control_node) = self.control_nodes.iter().find(|c| c.name_any() == *name)
            else {
                continue;
            };
            probes.insert(name.clone(), self.prober.probe(control_node).await);
        }
        probes
    }

    async fn removed_apis(&mut self, versions: &[String]) -> anyhow::Result<Vec<RemovedApiUse>> {
        autopilot_shell::removed_apis::observe_removed_apis(self.client, versions)
            .await
            .context("looking for uses of removed APIs")
    }

    /// As the person running the preview: one who may not create SubjectAccessReviews gets
    /// [`PlanAccess::Unknown`], which the preview reports as not checked.
    async fn plan_access(&mut self, reader: &PlanReader) -> PlanAccess {
        autopilot_shell::access::plan_access(self.client, reader).await
    }

    async fn pods_on(&mut self, node: &str) -> anyhow::Result<Vec<Pod>> {
        let pods = Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .with_context(|| format!("listing the pods of Node {node}"))?;
        Ok(pods.items)
    }
}

/// The versions whose removed APIs the engine checks at NewPlan for `spec`.
fn check_versions(spec: &PlanSpec) -> Vec<String> {
    let status = None;
    let view = autopilot_engine::plan::PlanView {
        rollback: None,
        name: keys::PLAN_NAME,
        uid: "preview",
        generation: 1,
        spec,
        status,
        steering: autopilot_engine::plan::Steering::default(),
        accepted_warnings: None,
        allow_skew: None,
    };
    autopilot_engine::plan::removed_api_check_versions(view)
}
