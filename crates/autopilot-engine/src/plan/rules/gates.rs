//! Health gates (DESIGN §15): checks the leader runs on the nodes an update command just
//! completed before it signals the next ones.
//!
//! A gate runs after each node (`after: node`: the node keeps its slot of the concurrency
//! until its gates passed) or after each batch (`after: batch`: workers then go in waves of
//! `limits.concurrent`, and the next wave waits until every node of the last one is done
//! and the wave's gates passed). The command's status records each open run in `gating`
//! (the nodes, since when, which gates passed, why the others wait), so a new leader goes
//! on from there.
//!
//! Judging needs lookups the machine cannot make: it names them ([`GateQuery`] in
//! [`crate::plan::Needs::gates`]) and the shell answers ([`GateAnswer`] in
//! [`crate::plan::Observed::gate_answers`]). A `kubernetes` gate lists objects and its CEL
//! `condition` judges `objects`; a `prometheus` gate runs an instant query and its condition
//! judges `result`; a `settle` gate wants the node Ready and every DaemonSet Pod on it Ready
//! (the Pods listed by `spec.nodeName`); a `check` gate asks each node's agent to run a
//! check of the preflight shape ([`crate::plan::Effect::GateCheck`], a reference to the frozen gate) and
//! judges the record the node reports for that request with the check's `results`, asking
//! again every [`CHECK_RETRY`] while it does not pass. A gate that does not pass within its
//! timeout fails:
//! `onFailure: Halt` stops the command like a failed node, `Rollback` rolls the run back
//! (`crate::plan::driver::rollback`).

use std::time::Duration;

use autopilot_api::duration;
use autopilot_api::gate_check::{GateCheckAsks, GateCheckRequest};
use autopilot_api::v1beta2::{
    CheckStatus, Gate, GateAfter, GateCheck, GateOnFailure, GateRun, KubernetesGate,
    PrometheusGate, TargetState,
};

use crate::plan::model::command::{Group, targets};
use crate::plan::model::decision::SignalTarget;
use crate::plan::model::inputs::{Inputs, Policy};
use crate::plan::model::lookups::{GateAnswer, GateQuery};
use crate::plan::model::selector::LabelSelector;
use crate::plan::model::verdict::CommandView;
use crate::preflight::{GateInput, compile_gate_check, compile_gate_condition, evaluate_gate};

/// A gate's `timeout` when it sets none.
pub const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(300);

/// How often a pass looks at gates that have not passed yet.
pub const GATE_RECHECK: Duration = Duration::from_secs(2);

/// How long after asking a node to run a gate's check the leader asks again, when the
/// node answered and the check did not pass (on the leader's clock).
pub const CHECK_RETRY: Duration = Duration::from_secs(10);

/// The most bytes of a run's `waiting` text.
const MAX_WAITING_BYTES: usize = 1024;

/// The placeholder a gate's selectors and query may use for the node's name.
const NODE_PLACEHOLDERS: [&str; 2] = ["{{ .Node }}", "{{.Node}}"];

/// Why a pass stops a command for a gate.
pub(in crate::plan) struct GateFailure {
    /// `gate <id> failed on <nodes>: <why>`.
    pub(in crate::plan) why: String,
    /// The gate's `onFailure` is `Rollback`.
    pub(in crate::plan) rollback: bool,
}

/// What is wrong with a command's gates, one line per problem, each naming the field by its
/// path (`spec.commands[0].k0supdate.gates[1].timeout`).
pub(in crate::plan) fn problems(path: &str, gates: &[Gate], policy: &Policy) -> Vec<String> {
    let mut problems = Vec::new();
    for (index, gate) in gates.iter().enumerate() {
        let at = format!("{path}.gates[{index}]");
        if gate.id.trim().is_empty() {
            problems.push(format!("{at}.id is empty"));
        } else if gates[..index].iter().any(|other| other.id == gate.id) {
            problems.push(format!("{at}.id {:?} is not unique within the command", gate.id));
        }
        let kinds = usize::from(gate.kubernetes.is_some())
            + usize::from(gate.prometheus.is_some())
            + usize::from(gate.settle.is_some())
            + usize::from(gate.check.is_some());
        if kinds != 1 {
            problems.push(format!(
                "{at} sets {kinds} of check, kubernetes, prometheus and settle; exactly one is \
                 required"
            ));
        }
        if let Some(check) = &gate.check
            && let Err(found) = compile_gate_check(&format!("{at}.check"), &gate.id, check)
        {
            problems.extend(found.iter().map(ToString::to_string));
        }
        if let Some(text) = &gate.timeout {
            if gate.settle.is_some() {
                problems.push(format!(
                    "{at}.timeout is set on a settle gate, whose bound is settle itself"
                ));
            }
            if let Err(why) = positive(text) {
                problems.push(format!("{at}.timeout {why}"));
            }
        }
        if let Some(text) = &gate.settle
            && let Err(why) = positive(text)
        {
            problems.push(format!("{at}.settle {why}"));
        }
        if let Some(kubernetes) = &gate.kubernetes {
            problems.extend(kubernetes_problems(&at, kubernetes));
        }
        if let Some(prometheus) = &gate.prometheus {
            problems.extend(prometheus_problems(&at, prometheus, policy));
        }
    }
    problems
}

/// What is wrong with a `kubernetes` gate (at `at`): its kind, its selectors, its condition.
fn kubernetes_problems(at: &str, kubernetes: &KubernetesGate) -> Vec<String> {
    let mut problems = Vec::new();
    for (field, value) in [("apiVersion", &kubernetes.api_version), ("kind", &kubernetes.kind)] {
        if value.trim().is_empty() {
            problems.push(format!("{at}.kubernetes.{field} is empty"));
        }
    }
    if let Some(selector) = &kubernetes.label_selector
        && let Err(why) = LabelSelector::parse(&for_node(selector, "node-name"))
    {
        problems.push(format!("{at}.kubernetes.labelSelector {why}"));
    }
    if let Some(selector) = &kubernetes.field_selector
        && let Err(why) = field_selector_problem(&for_node(selector, "node-name"))
    {
        problems.push(format!("{at}.kubernetes.fieldSelector {why}"));
    }
    if let Err(why) = compile_gate_condition(&kubernetes.condition, GateInput::Objects) {
        problems.push(format!("{at}.kubernetes.condition {why}"));
    }
    problems
}

/// What is wrong with a `prometheus` gate (at `at`): its URL (or the controller's
/// `--prometheus-url`), its query, its condition.
fn prometheus_problems(at: &str, prometheus: &PrometheusGate, policy: &Policy) -> Vec<String> {
    let mut problems = Vec::new();
    match prometheus.url.as_deref().or(policy.prometheus_url.as_deref()) {
        None => problems.push(format!(
            "{at}.prometheus.url is unset and the controller has no --prometheus-url"
        )),
        Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) => {
            problems.push(format!("{at}.prometheus.url {url:?} is not an http:// or https:// URL"));
        }
        Some(_) => {}
    }
    if prometheus.query.trim().is_empty() {
        problems.push(format!("{at}.prometheus.query is empty"));
    }
    if let Err(why) = compile_gate_condition(&prometheus.condition, GateInput::Samples) {
        problems.push(format!("{at}.prometheus.condition {why}"));
    }
    problems
}

/// What is wrong with a field selector's syntax (`key=value`, `key==value` or
/// `key!=value`, comma-separated); which fields a kind supports is the API server's to say.
fn field_selector_problem(text: &str) -> Result<(), String> {
    for term in text.split(',') {
        let term = term.trim();
        let key = term.split_once("!=").or_else(|| term.split_once('=')).map(|(key, _)| key);
        match key {
            Some(key) if !key.trim().is_empty() => {}
            Some(_) | None => {
                return Err(format!("{text:?}: {term:?} is not key=value or key!=value"));
            }
        }
    }
    Ok(())
}

fn positive(text: &str) -> Result<Duration, String> {
    match duration::parse(text) {
        Ok(duration) if duration.is_zero() => Err(format!("{text:?} is zero")),
        Ok(duration) => Ok(duration),
        Err(why) => Err(why),
    }
}

/// `text` with the node placeholder replaced by `node`.
fn for_node(text: &str, node: &str) -> String {
    NODE_PLACEHOLDERS
        .iter()
        .fold(text.to_owned(), |text, placeholder| text.replace(placeholder, node))
}

/// Whether `text` names the node.
fn names_node(text: &str) -> bool {
    NODE_PLACEHOLDERS.iter().any(|placeholder| text.contains(placeholder))
}

/// How long a gate may take to pass.
fn bound(gate: &Gate) -> Duration {
    let text = gate.settle.as_deref().or(gate.timeout.as_deref());
    text.and_then(|text| positive(text).ok()).unwrap_or(DEFAULT_GATE_TIMEOUT)
}

/// What one look at a gate found.
enum Look {
    /// It holds on every node it judges.
    Passes,
    /// Not yet: why.
    Waits(String),
}

/// What looking at gates asks for, besides its verdict: lookups the shell has not answered
/// yet, and nodes to ask to run the command's checks (with the attempt).
#[derive(Default)]
pub(in crate::plan) struct Asks {
    /// Lookups to name in [`crate::plan::Needs::gates`].
    pub(in crate::plan) lookups: Vec<GateQuery>,
    /// Nodes to ask, each with the attempt.
    pub(in crate::plan) checks: Vec<(SignalTarget, u32)>,
}

/// Where one look at an open gate run leaves it.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::plan) enum RunVerdict {
    /// A node of the run still works: nothing to judge yet.
    Working,
    /// Every node of the run failed: the failure policy speaks for them; the run closes.
    NoneLeft,
    /// Every gate passed: the run closes.
    Passed,
    /// Gate `gate` did not pass within its bound; `passed` passed in this look.
    Failed {
        /// The gates that passed in this look.
        passed: Vec<String>,
        /// The gate that failed.
        gate: String,
        /// Why, capped.
        waiting: String,
    },
    /// Some gates still wait; `passed` passed in this look.
    Waiting {
        /// The gates that passed in this look.
        passed: Vec<String>,
        /// What the others wait for, capped.
        waiting: String,
    },
}

/// The command's gates that run `after`.
fn gates_after<'v>(view: &CommandView<'v>, after: GateAfter) -> impl Iterator<Item = &'v Gate> {
    view.command.gates().iter().filter(move |gate| gate.after == after)
}

/// Whether workers go in waves (the command has a gate that runs after each batch).
pub(in crate::plan) fn in_waves(view: &CommandView<'_>) -> bool {
    gates_after(view, GateAfter::Batch).next().is_some()
}

/// Whether the command has gates that run after each node.
pub(in crate::plan) fn after_each_node(view: &CommandView<'_>) -> bool {
    gates_after(view, GateAfter::Node).next().is_some()
}

/// How many nodes of `group` wait for their gates (they keep their slots).
pub(in crate::plan) fn gating(view: &CommandView<'_>, group: Group) -> usize {
    targets(view.status, view.command, group)
        .iter()
        .filter(|t| {
            view.status.gating.iter().any(|run| run.failed.is_none() && run.nodes.contains(&t.name))
        })
        .filter(|t| t.state == TargetState::SignalCompleted)
        .count()
}

/// Whether any gate run is still open (not passed; a failed one counts too).
pub(in crate::plan) fn gates_open(view: &CommandView<'_>) -> bool {
    !view.status.gating.is_empty()
}

/// The failure a failed run stands for.
pub(in crate::plan) fn failure_of(view: &CommandView<'_>, run: &GateRun) -> GateFailure {
    let gate = run.failed.as_deref().unwrap_or_default();
    let rollback = view
        .command
        .gates()
        .iter()
        .find(|g| g.id == gate)
        .is_some_and(|g| g.on_failure == GateOnFailure::Rollback);
    let why = format!(
        "gate {gate} failed on {}: {}",
        run.nodes.join(", "),
        run.waiting.as_deref().unwrap_or("no reason recorded")
    );
    GateFailure { why, rollback }
}

/// Look at an open run whose gates count from `since`: the gates that have not passed yet,
/// in order, until one runs out of time.
pub(in crate::plan) fn judge_run(
    view: &CommandView<'_>,
    run: &GateRun,
    since: jiff::Timestamp,
    asks: &mut Asks,
) -> RunVerdict {
    let (inputs, command) = (view.inputs, view.command);
    let states: Vec<(String, TargetState)> = command
        .groups()
        .iter()
        .flat_map(|&group| targets(view.status, command, group))
        .filter(|t| run.nodes.contains(&t.name))
        .map(|t| (t.name.clone(), t.state))
        .collect();
    if states.iter().any(|(_, state)| !state.is_terminal()) {
        // A batch whose nodes still work: nothing to judge yet.
        return RunVerdict::Working;
    }
    let judged: Vec<String> = states
        .into_iter()
        .filter(|(_, state)| *state == TargetState::SignalCompleted)
        .map(|(name, _)| name)
        .collect();
    if judged.is_empty() {
        // Every node of the run failed: the failure policy speaks for them.
        return RunVerdict::NoneLeft;
    }
    let elapsed = inputs.elapsed_since(since);
    let mut passed = Vec::new();
    let mut waiting = Vec::new();
    for gate in gates_after(view, run.after).filter(|gate| !run.passed.contains(&gate.id)) {
        match look(view, gate, &judged, since, asks) {
            Look::Passes => passed.push(gate.id.clone()),
            Look::Waits(why) => {
                let limit = bound(gate);
                if jiff::SignedDuration::try_from(limit).is_ok_and(|limit| elapsed >= limit) {
                    let waiting = autopilot_api::text::truncate(
                        &format!("{why} (not passed within {})", duration::format(limit)),
                        MAX_WAITING_BYTES,
                    );
                    return RunVerdict::Failed { passed, gate: gate.id.clone(), waiting };
                }
                waiting.push(format!("gate {}: {why}", gate.id));
            }
        }
    }
    if waiting.is_empty() {
        return RunVerdict::Passed;
    }
    let waiting = autopilot_api::text::truncate(&waiting.join("; "), MAX_WAITING_BYTES);
    RunVerdict::Waiting { passed, waiting }
}

/// Look at one gate on the nodes `judged`, whose run's gates count from `since`.
fn look(
    view: &CommandView<'_>,
    gate: &Gate,
    judged: &[String],
    since: jiff::Timestamp,
    asks: &mut Asks,
) -> Look {
    if let Some(check) = &gate.check {
        return look_check(view, gate, check, judged, since, asks);
    }
    if let Some(kubernetes) = &gate.kubernetes {
        return look_kubernetes(view, kubernetes, judged, asks);
    }
    if let Some(prometheus) = &gate.prometheus {
        return look_prometheus(view, prometheus, judged, asks);
    }
    if gate.settle.is_some() {
        return look_settle(view, judged, asks);
    }
    // A gate of no kind: NewPlan refused it, so no run gets here.
    Look::Waits("the gate sets none of check, kubernetes, prometheus and settle".to_owned())
}

/// Look at a `kubernetes` gate on the nodes `judged` (once, for no node, unless a
/// selector names the node). Every node is looked at (so one pass names every lookup a
/// batch needs); the first reason to wait is the one told.
fn look_kubernetes(
    view: &CommandView<'_>,
    kubernetes: &KubernetesGate,
    judged: &[String],
    asks: &mut Asks,
) -> Look {
    let mut waits: Option<String> = None;
    let per_node = [&kubernetes.label_selector, &kubernetes.field_selector]
        .into_iter()
        .flatten()
        .any(|selector| names_node(selector));
    let nodes: Vec<&str> =
        if per_node { judged.iter().map(String::as_str).collect() } else { vec![""] };
    for node in nodes {
        let query = GateQuery::List {
            api_version: kubernetes.api_version.clone(),
            kind: kubernetes.kind.clone(),
            namespace: kubernetes.namespace.clone(),
            label_selector: kubernetes.label_selector.as_deref().map(|s| for_node(s, node)),
            field_selector: kubernetes.field_selector.as_deref().map(|s| for_node(s, node)),
        };
        let on = if node.is_empty() { String::new() } else { format!(" for {node}") };
        match answer(view, query, asks) {
            Err(why) => {
                waits.get_or_insert(format!("listing {}{on}: {why}", kubernetes.kind));
            }
            Ok(None) => {}
            Ok(Some(items)) => {
                match evaluate_gate(&kubernetes.condition, GateInput::Objects, node, items) {
                    Ok(true) => {}
                    Ok(false) => {
                        waits.get_or_insert(format!(
                            "{:?} is false on {} {}(s){on}",
                            kubernetes.condition,
                            items.len(),
                            kubernetes.kind
                        ));
                    }
                    Err(why) => {
                        waits.get_or_insert(why);
                    }
                }
            }
        }
    }
    waits.map_or(Look::Passes, Look::Waits)
}

/// Look at a `prometheus` gate on the nodes `judged` (once, for no node, unless the
/// query names the node). Every node is looked at (so one pass names every lookup a
/// batch needs); the first reason to wait is the one told.
fn look_prometheus(
    view: &CommandView<'_>,
    prometheus: &PrometheusGate,
    judged: &[String],
    asks: &mut Asks,
) -> Look {
    let mut waits: Option<String> = None;
    let url = prometheus
        .url
        .clone()
        .or_else(|| view.inputs.policy.prometheus_url.clone())
        .unwrap_or_default();
    let nodes: Vec<&str> = if names_node(&prometheus.query) {
        judged.iter().map(String::as_str).collect()
    } else {
        vec![""]
    };
    for node in nodes {
        let query =
            GateQuery::Prometheus { url: url.clone(), query: for_node(&prometheus.query, node) };
        let on = if node.is_empty() { String::new() } else { format!(" for {node}") };
        match answer(view, query, asks) {
            Err(why) => {
                waits.get_or_insert(format!("querying {url}{on}: {why}"));
            }
            Ok(None) => {}
            Ok(Some(items)) => {
                match evaluate_gate(&prometheus.condition, GateInput::Samples, node, items) {
                    Ok(true) => {}
                    Ok(false) => {
                        waits.get_or_insert(format!(
                            "{:?} is false on {} sample(s){on}",
                            prometheus.condition,
                            items.len()
                        ));
                    }
                    Err(why) => {
                        waits.get_or_insert(why);
                    }
                }
            }
        }
    }
    waits.map_or(Look::Passes, Look::Waits)
}

/// Look at a `settle` gate on the nodes `judged`; the first reason to wait is the one
/// told.
fn look_settle(view: &CommandView<'_>, judged: &[String], asks: &mut Asks) -> Look {
    let mut waits: Option<String> = None;
    for node in judged {
        if let Look::Waits(why) = settled(view, node, asks) {
            waits.get_or_insert(why);
        }
    }
    waits.map_or(Look::Passes, Look::Waits)
}

/// Look at a `check` gate on the nodes `judged`: each node's record in its report of
/// the last request that asked for this gate at or after `since`. A node without such a
/// request is asked (attempt 1, or the next one); a node whose check did not pass is
/// asked again once it answered and [`CHECK_RETRY`] passed since the leader asked.
fn look_check(
    view: &CommandView<'_>,
    gate: &Gate,
    check: &GateCheck,
    judged: &[String],
    since: jiff::Timestamp,
    asks: &mut Asks,
) -> Look {
    let index = view.status.id;
    let compiled = match compile_gate_check("check", &gate.id, check) {
        Ok(compiled) => compiled,
        // NewPlan compiled the same frozen copy; a status edited by hand could get here.
        Err(problems) => {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return Look::Waits(problems.join("; "));
        }
    };
    let (inputs, run) = (view.inputs, view.run);
    let mut waits: Option<String> = None;
    for node in judged {
        let Some((target, object)) = object_of(inputs, view.status, view.command, node) else {
            waits.get_or_insert(format!("{node} has no object to ask"));
            continue;
        };
        let observed = object.gate_check();
        let last =
            observed.request.as_ref().filter(|r| r.run_id == run.run_id && r.command == index);
        let asked = last.and_then(|r| r.asked.parse::<jiff::Timestamp>().ok());
        let next_attempt = last.map_or(1, |r| r.asks.attempt.saturating_add(1));
        let Some(request) = last
            .filter(|r| r.asks.gates.contains(&gate.id))
            .filter(|_| asked.is_some_and(|asked| asked >= since))
        else {
            asks.checks.push((target, next_attempt));
            waits.get_or_insert(format!("asked {node} to run the check"));
            continue;
        };
        let Some(report) = observed.report.as_ref().filter(|r| r.answers(request)) else {
            waits.get_or_insert(match &observed.report_problem {
                Some(problem) => format!("{node}'s report cannot be read: {problem}"),
                None => format!("waiting for {node}'s report (attempt {})", request.asks.attempt),
            });
            continue;
        };
        let failing = match (&report.says.refused, report.says.records.get(&gate.id)) {
            (Some(refused), _) => Some(format!("{node} refused the check: {refused}")),
            (None, None) => Some(format!("{node}'s report has no record for the gate")),
            (None, Some(record)) => {
                let verdict = compiled.judge(node, record);
                match verdict.status {
                    CheckStatus::Success | CheckStatus::Warn => None,
                    CheckStatus::Error => Some(format!(
                        "check on {node}: {} (status code {})",
                        verdict.message, verdict.status_code
                    )),
                }
            }
        };
        let Some(why) = failing else { continue };
        let waited = asked.map(|asked| inputs.elapsed_since(asked));
        let retry = jiff::SignedDuration::try_from(CHECK_RETRY).unwrap_or_default();
        if waited.is_some_and(|waited| waited >= retry) {
            asks.checks.push((target, next_attempt));
        }
        waits.get_or_insert(format!("{why} (attempt {})", request.asks.attempt));
    }
    waits.map_or(Look::Passes, Look::Waits)
}

/// Whether `node` settled: Ready again, and every DaemonSet Pod on it Ready.
fn settled(view: &CommandView<'_>, node: &str, asks: &mut Asks) -> Look {
    let command = view.command;
    let ready = command.groups().iter().any(|&group| {
        let objects = view.inputs.objects(command.object_kind(group));
        targets(view.status, command, group).iter().any(|t| t.name == node)
            && objects.get(node).is_some_and(|object| object.ready)
    });
    if !ready {
        return Look::Waits(format!("{node} is not Ready"));
    }
    let query = GateQuery::List {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        namespace: None,
        label_selector: None,
        field_selector: Some(format!("spec.nodeName={node}")),
    };
    match answer(view, query, asks) {
        Err(why) => Look::Waits(format!("listing the Pods on {node}: {why}")),
        Ok(None) => Look::Passes,
        Ok(Some(pods)) => {
            let not_ready: Vec<String> = pods
                .iter()
                .filter(|pod| owned_by_daemon_set(pod) && !pod_ready(pod))
                .map(|pod| {
                    let meta = &pod["metadata"];
                    format!(
                        "{}/{}",
                        meta["namespace"].as_str().unwrap_or_default(),
                        meta["name"].as_str().unwrap_or_default()
                    )
                })
                .collect();
            if not_ready.is_empty() {
                Look::Passes
            } else {
                Look::Waits(format!(
                    "DaemonSet Pod(s) not Ready on {node}: {}",
                    not_ready.join(", ")
                ))
            }
        }
    }
}

/// The answer to `query`: `Ok(Some(items))`, `Ok(None)` when it is assumed to pass,
/// `Err(why)` when it failed or is not looked up yet (then the pass names it).
fn answer<'v>(
    view: &CommandView<'v>,
    query: GateQuery,
    asks: &mut Asks,
) -> Result<Option<&'v [serde_json::Value]>, String> {
    let answers = view.inputs.observed.gate_answers;
    match answers.get(&query) {
        Some(GateAnswer::Items(items)) => Ok(Some(items)),
        Some(GateAnswer::Assumed) => Ok(None),
        Some(GateAnswer::Unavailable(why)) => Err(why.clone()),
        None => {
            asks.lookups.push(query);
            Err("not looked up yet".to_owned())
        }
    }
}

/// The request that asks a node to run the checks of every `check` gate of the command
/// (attempt `attempt`), stamped now.
pub(in crate::plan) fn check_request(view: &CommandView<'_>, attempt: u32) -> GateCheckRequest {
    let gates: Vec<String> = view
        .command
        .gates()
        .iter()
        .filter(|gate| gate.check.is_some())
        .map(|gate| gate.id.clone())
        .collect();
    GateCheckRequest {
        plan_id: view.run.plan_id.clone(),
        run_id: view.run.run_id.clone(),
        command: view.status.id,
        asked: view.inputs.now.to_string(),
        asks: GateCheckAsks { gates, attempt },
    }
}

/// The object the target `node` of `command` is signalled through.
fn object_of<'a>(
    inputs: &Inputs<'a>,
    status: &autopilot_api::v1beta2::PlanCommandStatus,
    command: crate::plan::model::command::Command<'_>,
    node: &str,
) -> Option<(SignalTarget, &'a crate::plan::model::inputs::TargetObject)> {
    command.groups().iter().find_map(|&group| {
        if !targets(status, command, group).iter().any(|t| t.name == node) {
            return None;
        }
        let kind = command.object_kind(group);
        let object = inputs.objects(kind).get(node)?;
        Some((SignalTarget { kind, name: node.to_owned() }, object))
    })
}

/// Whether a Pod (as JSON) is owned by a DaemonSet.
fn owned_by_daemon_set(pod: &serde_json::Value) -> bool {
    pod["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|owners| owners.iter().any(|owner| owner["kind"] == "DaemonSet"))
}

/// Whether a Pod (as JSON) has the condition `Ready=True`.
fn pod_ready(pod: &serde_json::Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|conditions| {
        conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}
