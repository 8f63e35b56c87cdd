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
//! check of the preflight shape ([`Effect::GateCheck`], a reference to the frozen gate) and
//! judges the record the node reports for that request with the check's `results`, asking
//! again every [`CHECK_RETRY`] while it does not pass. A gate that does not pass within its
//! timeout fails:
//! `onFailure: Halt` stops the command like a failed node, `Rollback` rolls the run back
//! (`crate::plan::driver::rollback`).

use std::time::Duration;

use autopilot_api::duration;
use autopilot_api::gate_check::GateCheckRequest;
use autopilot_api::v1beta2::{
    CheckStatus, Gate, GateAfter, GateCheck, GateOnFailure, GateRun, KubernetesGate,
    PrometheusGate, TargetState,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::plan::driver::progress::CommandPass;
use crate::plan::model::command::{Group, targets};
use crate::plan::model::decision::{Effect, SignalTarget};
use crate::plan::model::inputs::{Inputs, Policy};
use crate::plan::model::lookups::{GateAnswer, GateQuery};
use crate::plan::model::selector::LabelSelector;
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

impl CommandPass<'_, '_> {
    /// The command's gates that run `after`.
    fn gates_after(&self, after: GateAfter) -> impl Iterator<Item = &Gate> + '_ {
        self.command.gates().iter().filter(move |gate| gate.after == after)
    }

    /// Whether workers go in waves (the command has a gate that runs after each batch).
    pub(in crate::plan) fn in_waves(&self) -> bool {
        self.gates_after(GateAfter::Batch).next().is_some()
    }

    /// How many nodes of `group` wait for their gates (they keep their slots).
    pub(in crate::plan) fn gating(&self, group: Group) -> usize {
        let group_targets = targets(self.status, self.command, group);
        group_targets
            .iter()
            .filter(|t| {
                self.status
                    .gating
                    .iter()
                    .any(|run| run.failed.is_none() && run.nodes.contains(&t.name))
            })
            .filter(|t| t.state == TargetState::SignalCompleted)
            .count()
    }

    /// Whether any gate run is still open (not passed; a failed one counts too).
    pub(in crate::plan) fn gates_open(&self) -> bool {
        !self.status.gating.is_empty()
    }

    /// Open a batch run for the nodes just signalled together (gates `after: batch`).
    pub(in crate::plan) fn open_batch(&mut self, nodes: &[String]) {
        if nodes.is_empty() || !self.in_waves() {
            return;
        }
        self.status.gating.push(GateRun {
            nodes: nodes.to_vec(),
            after: GateAfter::Batch,
            since: None,
            passed: Vec::new(),
            waiting: None,
            failed: None,
        });
    }

    /// Open a run for each node that completed in this pass (gates `after: node`), then
    /// look at every open run: a run whose gates all passed closes; one whose gate ran out
    /// of time fails. Returns the first failure.
    pub(in crate::plan) fn run_gates(&mut self, completed_now: &[String]) -> Option<GateFailure> {
        if self.command.gates().is_empty() {
            return None;
        }
        let stamp = Time(self.inputs.stamp);
        if self.gates_after(GateAfter::Node).next().is_some() {
            for name in completed_now {
                self.status.gating.push(GateRun {
                    nodes: vec![name.clone()],
                    after: GateAfter::Node,
                    since: Some(stamp.clone()),
                    passed: Vec::new(),
                    waiting: None,
                    failed: None,
                });
            }
        }
        let mut runs = std::mem::take(&mut self.status.gating);
        let mut failure = None;
        runs.retain_mut(|run| {
            if run.failed.is_some() {
                failure.get_or_insert_with(|| self.failure_of(run));
                return true;
            }
            self.look_at(run, &mut failure)
        });
        self.status.gating = runs;
        failure
    }

    /// The failure a failed run stands for.
    fn failure_of(&self, run: &GateRun) -> GateFailure {
        let gate = run.failed.as_deref().unwrap_or_default();
        let rollback = self
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

    /// Look at an open run; `false` when it passed (and closes).
    fn look_at(&mut self, run: &mut GateRun, failure: &mut Option<GateFailure>) -> bool {
        let (inputs, command) = (self.inputs, self.command);
        let states: Vec<(String, TargetState)> = command
            .groups()
            .iter()
            .flat_map(|&group| targets(self.status, command, group))
            .filter(|t| run.nodes.contains(&t.name))
            .map(|t| (t.name.clone(), t.state))
            .collect();
        if states.iter().any(|(_, state)| !state.is_terminal()) {
            // A batch whose nodes still work: nothing to judge yet.
            return true;
        }
        let since = run.since.get_or_insert(Time(inputs.stamp)).0;
        let judged: Vec<String> = states
            .into_iter()
            .filter(|(_, state)| *state == TargetState::SignalCompleted)
            .map(|(name, _)| name)
            .collect();
        if judged.is_empty() {
            // Every node of the run failed: the failure policy speaks for them.
            return false;
        }
        let elapsed = inputs.now.duration_since(since);
        let gates: Vec<Gate> = self
            .gates_after(run.after)
            .filter(|gate| !run.passed.contains(&gate.id))
            .cloned()
            .collect();
        let mut waiting = Vec::new();
        for gate in &gates {
            match self.look(gate, &judged, since) {
                Look::Passes => run.passed.push(gate.id.clone()),
                Look::Waits(why) => {
                    let limit = bound(gate);
                    let over =
                        jiff::SignedDuration::try_from(limit).is_ok_and(|limit| elapsed >= limit);
                    if over {
                        run.failed = Some(gate.id.clone());
                        run.waiting = Some(autopilot_api::text::truncate(
                            &format!("{why} (not passed within {})", duration::format(limit)),
                            MAX_WAITING_BYTES,
                        ));
                        failure.get_or_insert_with(|| self.failure_of(run));
                        return true;
                    }
                    waiting.push(format!("gate {}: {why}", gate.id));
                }
            }
        }
        if waiting.is_empty() {
            self.status.gates_passed = self.status.gates_passed.saturating_add(1);
            return false;
        }
        run.waiting = Some(autopilot_api::text::truncate(&waiting.join("; "), MAX_WAITING_BYTES));
        self.decision.requeue_after(GATE_RECHECK);
        true
    }

    /// Look at one gate on the nodes `judged`, whose run's gates count from `since`.
    fn look(&mut self, gate: &Gate, judged: &[String], since: jiff::Timestamp) -> Look {
        if let Some(check) = &gate.check {
            return self.look_check(gate, check, judged, since);
        }
        if let Some(kubernetes) = &gate.kubernetes {
            return self.look_kubernetes(kubernetes, judged);
        }
        if let Some(prometheus) = &gate.prometheus {
            return self.look_prometheus(prometheus, judged);
        }
        if gate.settle.is_some() {
            return self.look_settle(judged);
        }
        // A gate of no kind: NewPlan refused it, so no run gets here.
        Look::Waits("the gate sets none of check, kubernetes, prometheus and settle".to_owned())
    }

    /// Look at a `kubernetes` gate on the nodes `judged` (once, for no node, unless a
    /// selector names the node). Every node is looked at (so one pass names every lookup a
    /// batch needs); the first reason to wait is the one told.
    fn look_kubernetes(&mut self, kubernetes: &KubernetesGate, judged: &[String]) -> Look {
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
            match self.answer(query) {
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
    fn look_prometheus(&mut self, prometheus: &PrometheusGate, judged: &[String]) -> Look {
        let mut waits: Option<String> = None;
        let url = prometheus
            .url
            .clone()
            .or_else(|| self.inputs.policy.prometheus_url.clone())
            .unwrap_or_default();
        let nodes: Vec<&str> = if names_node(&prometheus.query) {
            judged.iter().map(String::as_str).collect()
        } else {
            vec![""]
        };
        for node in nodes {
            let query = GateQuery::Prometheus {
                url: url.clone(),
                query: for_node(&prometheus.query, node),
            };
            let on = if node.is_empty() { String::new() } else { format!(" for {node}") };
            match self.answer(query) {
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
    fn look_settle(&mut self, judged: &[String]) -> Look {
        let mut waits: Option<String> = None;
        for node in judged {
            if let Look::Waits(why) = self.settled(node) {
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
        &mut self,
        gate: &Gate,
        check: &GateCheck,
        judged: &[String],
        since: jiff::Timestamp,
    ) -> Look {
        let index = self.status.id;
        let compiled = match compile_gate_check("check", &gate.id, check) {
            Ok(compiled) => compiled,
            // NewPlan compiled the same frozen copy; a status edited by hand could get here.
            Err(problems) => {
                let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
                return Look::Waits(problems.join("; "));
            }
        };
        let (inputs, run) = (self.inputs, self.run);
        let mut waits: Option<String> = None;
        for node in judged {
            let Some((target, object)) = object_of(inputs, self.status, self.command, node) else {
                waits.get_or_insert(format!("{node} has no object to ask"));
                continue;
            };
            let observed = object.gate_check();
            let last =
                observed.request.as_ref().filter(|r| r.run_id == run.run_id && r.command == index);
            let asked = last.and_then(|r| r.asked.parse::<jiff::Timestamp>().ok());
            let next_attempt = last.map_or(1, |r| r.attempt.saturating_add(1));
            let Some(request) = last
                .filter(|r| r.gates.contains(&gate.id))
                .filter(|_| asked.is_some_and(|asked| asked >= since))
            else {
                self.ask(target, next_attempt);
                waits.get_or_insert(format!("asked {node} to run the check"));
                continue;
            };
            let Some(report) = observed.report.as_ref().filter(|r| r.answers(request)) else {
                waits.get_or_insert(match &observed.report_problem {
                    Some(problem) => format!("{node}'s report cannot be read: {problem}"),
                    None => format!("waiting for {node}'s report (attempt {})", request.attempt),
                });
                continue;
            };
            let failing = match (&report.refused, report.records.get(&gate.id)) {
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
            let waited = asked.map(|asked| inputs.now.duration_since(asked));
            let retry = jiff::SignedDuration::try_from(CHECK_RETRY).unwrap_or_default();
            if waited.is_some_and(|waited| waited >= retry) {
                self.ask(target, next_attempt);
            }
            waits.get_or_insert(format!("{why} (attempt {})", request.attempt));
        }
        waits.map_or(Look::Passes, Look::Waits)
    }

    /// Ask `target` to run the checks of every `check` gate of the command (attempt
    /// `attempt`), unless this pass asked already.
    fn ask(&mut self, target: SignalTarget, attempt: u32) {
        let gates: Vec<String> = self
            .command
            .gates()
            .iter()
            .filter(|gate| gate.check.is_some())
            .map(|gate| gate.id.clone())
            .collect();
        let request = GateCheckRequest {
            plan_id: self.run.plan_id.clone(),
            run_id: self.run.run_id.clone(),
            command: self.status.id,
            gates,
            attempt,
            asked: self.inputs.now.to_string(),
        };
        let asked_already =
            self.decision.signals.iter().any(
                |effect| matches!(effect, Effect::GateCheck { target: t, .. } if *t == target),
            );
        if !asked_already {
            self.decision.signals.push(Effect::GateCheck { target, request });
        }
        self.decision.requeue_after(GATE_RECHECK);
    }

    /// Whether `node` settled: Ready again, and every DaemonSet Pod on it Ready.
    fn settled(&mut self, node: &str) -> Look {
        let command = self.command;
        let ready = command.groups().iter().any(|&group| {
            let objects = self.inputs.objects(command.object_kind(group));
            targets(self.status, command, group).iter().any(|t| t.name == node)
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
        match self.answer(query) {
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
    fn answer(&mut self, query: GateQuery) -> Result<Option<&[serde_json::Value]>, String> {
        let answers = self.inputs.observed.gate_answers;
        match answers.get(&query) {
            Some(GateAnswer::Items(items)) => Ok(Some(items)),
            Some(GateAnswer::Assumed) => Ok(None),
            Some(GateAnswer::Unavailable(why)) => Err(why.clone()),
            None => {
                self.gaps.lacks_gate(query);
                self.decision.requeue_after(GATE_RECHECK);
                Err("not looked up yet".to_owned())
            }
        }
    }
}

/// The object the target `node` of `command` is signalled through.
fn object_of<'a>(
    inputs: &Inputs<'a>,
    status: &autopilot_api::v1beta2::PlanCommandStatus,
    command: crate::plan::model::command::Command<'_>,
    node: &str,
) -> Option<(SignalTarget, &'a crate::plan::TargetObject)> {
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
