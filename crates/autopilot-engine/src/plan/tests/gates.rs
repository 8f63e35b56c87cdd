//! Health gates between nodes and batches (DESIGN §15): what holds the next node, what a
//! gate that does not pass does, and what NewPlan refuses.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    Gate, GateAfter, GateOnFailure, KubernetesGate, PlanStateType as P, PrometheusGate, TargetState,
};
use serde_json::json;

use super::fixtures::*;
use crate::plan::ObjectKind::Node;
use crate::plan::{GateAnswer, GateQuery};

const V: &str = "v1.31.1+k0s.0";

fn names(signals: Vec<(crate::plan::ObjectKind, String)>) -> Vec<String> {
    signals.into_iter().map(|(_, name)| name).collect()
}

/// A gate: every Pod on the node Running.
fn pods_running(after: GateAfter, on_failure: GateOnFailure) -> Gate {
    Gate {
        check: None,
        id: "pods-running".to_owned(),
        after,
        timeout: Some("1m".to_owned()),
        on_failure,
        kubernetes: Some(KubernetesGate {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            namespace: None,
            label_selector: None,
            field_selector: Some("spec.nodeName={{ .Node }}".to_owned()),
            condition: r#"objects.all(p, p.status.phase == "Running")"#.to_owned(),
        }),
        prometheus: None,
        settle: None,
    }
}

fn pods_on(node: &str) -> GateQuery {
    GateQuery::List {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        namespace: None,
        label_selector: None,
        field_selector: Some(format!("spec.nodeName={node}")),
    }
}

fn pod(phase: &str) -> serde_json::Value {
    json!({"metadata": {"name": "app", "namespace": "default"}, "status": {"phase": phase}})
}

fn healthy(node: &str) -> (GateQuery, GateAnswer) {
    (pods_on(node), GateAnswer::Items(vec![pod("Running")]))
}

fn sick(node: &str) -> (GateQuery, GateAnswer) {
    (pods_on(node), GateAnswer::Items(vec![pod("Running"), pod("CrashLoopBackOff")]))
}

fn workers<const N: usize>(names: [&str; N], concurrent: u32, gate: Gate) -> Sim {
    let plan = PlanFixture::k0s_update(V).workers(names).concurrent(concurrent).gated(0, gate);
    Sim::new(plan, ClusterFixture::new().workers(names))
}

fn complete(sim: &mut Sim, node: &str) {
    sim.cluster(|c| c.reports(Node, node, SignalPhase::Completed).running(node, V));
}

fn answer(sim: &mut Sim, (query, answer): (GateQuery, GateAnswer)) {
    sim.cluster(|c| c.answering(query, answer));
}

fn reason(sim: &Sim) -> String {
    sim.plan.command(0).reason.clone().unwrap_or_default()
}

#[test]
fn a_node_gate_holds_the_next_worker_until_it_passes_on_the_node_just_updated() {
    let mut sim = workers(["w1", "w2"], 1, pods_running(GateAfter::Node, GateOnFailure::Halt));
    assert_eq!(names(signalled(&sim.pass())), ["w1"]);

    complete(&mut sim, "w1");
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "w2 waits for w1's gate: {t:#?}");
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalCompleted);
    assert!(reason(&sim).contains("waiting for the gates of w1"), "{}", reason(&sim));
    assert!(reason(&sim).contains("pods-running"), "{}", reason(&sim));

    answer(&mut sim, sick("w1"));
    assert!(signalled(&sim.pass()).is_empty(), "a pod of w1 is not Running");
    assert!(reason(&sim).contains("is false on 2 Pod(s) for w1"), "{}", reason(&sim));

    answer(&mut sim, healthy("w1"));
    assert_eq!(names(signalled(&sim.pass())), ["w2"], "w1's gate passed");
    assert!(sim.plan.command(0).gating.is_empty());
    assert_eq!(sim.plan.command(0).gates_passed, 1);

    complete(&mut sim, "w2");
    answer(&mut sim, healthy("w2"));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed, "every gate passed");
    assert_eq!(sim.plan.command(0).gates_passed, 2);
}

#[test]
fn a_gate_that_does_not_pass_within_its_timeout_halts_the_plan_naming_the_gate_and_node() {
    let mut sim = workers(["w1", "w2"], 1, pods_running(GateAfter::Node, GateOnFailure::Halt));
    sim.pass();
    complete(&mut sim, "w1");
    answer(&mut sim, sick("w1"));
    sim.pass();
    sim.cluster(|c| c.later(Duration::from_secs(59)));
    assert!(signalled(&sim.pass()).is_empty());
    assert_eq!(sim.plan.state(), P::SchedulableWait, "within the timeout");

    sim.cluster(|c| c.later(Duration::from_secs(1)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "w2 is never signalled: {t:#?}");
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.contains("gate pods-running failed on w1"), "{description}");
    assert!(description.contains("not passed within 1m"), "{description}");
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalPending);
}

#[test]
fn a_lookup_that_fails_keeps_the_gate_waiting_with_the_reason_until_the_timeout() {
    let mut sim = workers(["w1", "w2"], 1, pods_running(GateAfter::Node, GateOnFailure::Halt));
    sim.pass();
    complete(&mut sim, "w1");
    answer(&mut sim, (pods_on("w1"), GateAnswer::Unavailable("forbidden".to_owned())));
    sim.pass();
    assert!(reason(&sim).contains("listing Pod for w1: forbidden"), "{}", reason(&sim));
    sim.cluster(|c| c.later(Duration::from_secs(60)));
    sim.pass();
    assert_eq!(sim.plan.state(), P::ApplyFailed);
}

#[test]
fn with_node_gates_a_gating_node_keeps_its_slot_of_the_concurrency() {
    let mut sim =
        workers(["w1", "w2", "w3"], 2, pods_running(GateAfter::Node, GateOnFailure::Halt));
    assert_eq!(names(signalled(&sim.pass())), ["w1", "w2"]);
    complete(&mut sim, "w1");
    assert!(signalled(&sim.pass()).is_empty(), "w1 gates, w2 works: no slot is free");
    answer(&mut sim, healthy("w1"));
    assert_eq!(names(signalled(&sim.pass())), ["w3"], "w1's slot is free again");
}

#[test]
fn batch_gates_send_workers_in_waves_judged_once_the_whole_wave_is_done() {
    let mut sim =
        workers(["w1", "w2", "w3", "w4"], 2, pods_running(GateAfter::Batch, GateOnFailure::Halt));
    assert_eq!(names(signalled(&sim.pass())), ["w1", "w2"]);
    complete(&mut sim, "w1");
    assert!(signalled(&sim.pass()).is_empty(), "a wave goes out only after the last one");
    assert!(sim.plan.command(0).gating[0].since.is_none(), "w2 still works");

    complete(&mut sim, "w2");
    answer(&mut sim, healthy("w1"));
    assert!(signalled(&sim.pass()).is_empty(), "w2's Pods are not looked at yet");
    answer(&mut sim, healthy("w2"));
    assert_eq!(names(signalled(&sim.pass())), ["w3", "w4"], "the wave passed its gate");
}

#[test]
fn a_prometheus_gate_judges_the_samples_of_its_query() {
    let gate = Gate {
        id: "no-critical-alerts".to_owned(),
        prometheus: Some(PrometheusGate {
            url: Some("http://127.0.0.1:9090".to_owned()),
            query: r#"ALERTS{alertstate="firing",severity="critical"}"#.to_owned(),
            condition: "size(result) == 0".to_owned(),
        }),
        ..Gate::default()
    };
    let query = GateQuery::Prometheus {
        url: "http://127.0.0.1:9090".to_owned(),
        query: r#"ALERTS{alertstate="firing",severity="critical"}"#.to_owned(),
    };
    let mut sim = workers(["w1", "w2"], 1, gate);
    sim.pass();
    complete(&mut sim, "w1");
    let firing = json!({"metric": {"alertname": "NodeDown", "severity": "critical"}, "value": 1});
    answer(&mut sim, (query.clone(), GateAnswer::Items(vec![firing])));
    assert!(signalled(&sim.pass()).is_empty());
    assert!(reason(&sim).contains("is false on 1 sample(s)"), "{}", reason(&sim));
    answer(&mut sim, (query, GateAnswer::Items(vec![])));
    assert_eq!(names(signalled(&sim.pass())), ["w2"]);
}

#[test]
fn settle_waits_for_the_node_ready_and_its_daemon_set_pods_ready() {
    let gate = Gate { id: "settled".to_owned(), settle: Some("2m".to_owned()), ..Gate::default() };
    let mut sim = workers(["w1", "w2"], 1, gate);
    sim.pass();
    complete(&mut sim, "w1");
    sim.cluster(|c| c.worker_not_ready("w1"));
    assert!(signalled(&sim.pass()).is_empty());
    assert!(reason(&sim).contains("w1 is not Ready"), "{}", reason(&sim));

    let ds_pod = |ready: &str| {
        json!({
            "metadata": {"name": "cni-x", "namespace": "kube-system",
                         "ownerReferences": [{"kind": "DaemonSet", "name": "cni"}]},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}
        })
    };
    // A drained Pod's replacement elsewhere is not settle's business: only DaemonSet Pods.
    let other = json!({"metadata": {"name": "web", "namespace": "default",
                       "ownerReferences": [{"kind": "ReplicaSet", "name": "web"}]}});
    sim.cluster(|c| c.worker_ready("w1"));
    answer(&mut sim, (pods_on("w1"), GateAnswer::Items(vec![ds_pod("False"), other.clone()])));
    assert!(signalled(&sim.pass()).is_empty());
    assert!(reason(&sim).contains("DaemonSet Pod(s) not Ready on w1: kube-system/cni-x"));
    answer(&mut sim, (pods_on("w1"), GateAnswer::Items(vec![ds_pod("True"), other])));
    assert_eq!(names(signalled(&sim.pass())), ["w2"]);
}

#[test]
fn new_plan_refuses_gates_it_could_not_run_naming_each_field() {
    let bad = |gate: Gate| {
        let plan = PlanFixture::k0s_update(V).workers(["w1"]).gated(0, gate);
        let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1"]));
        let t = sim.pass();
        assert!(signalled(&t).is_empty());
        assert_eq!(sim.plan.state(), P::Warning);
        sim.plan.command(0).description.clone().unwrap_or_default()
    };
    let mut typo = pods_running(GateAfter::Node, GateOnFailure::Halt);
    if let Some(k) = typo.kubernetes.as_mut() {
        k.condition = "result == 1".to_owned();
    }
    let text = bad(typo);
    assert!(
        text.contains("gates[0].kubernetes.condition uses unknown variable \"result\""),
        "{text}"
    );

    let two = Gate {
        settle: Some("1m".to_owned()),
        ..pods_running(GateAfter::Node, GateOnFailure::Halt)
    };
    let text = bad(two);
    assert!(text.contains("sets 2 of check, kubernetes, prometheus and settle"), "{text}");
    assert!(text.contains("gates[0].timeout is set on a settle gate"), "{text}");

    let nowhere = Gate {
        id: "p".to_owned(),
        prometheus: Some(PrometheusGate {
            url: None,
            query: "up".to_owned(),
            condition: "true".to_owned(),
        }),
        ..Gate::default()
    };
    let text = bad(nowhere);
    assert!(text.contains("prometheus.url is unset and the controller has no --prometheus-url"));

    let mut selector = pods_running(GateAfter::Node, GateOnFailure::Halt);
    if let Some(k) = selector.kubernetes.as_mut() {
        k.label_selector = Some("app in (".to_owned());
    }
    let text = bad(selector);
    assert!(text.contains("gates[0].kubernetes.labelSelector"), "{text}");
}

#[test]
fn a_prometheus_gate_without_url_uses_the_controllers_flag() {
    let gate = Gate {
        id: "p".to_owned(),
        prometheus: Some(PrometheusGate {
            url: None,
            query: "up".to_owned(),
            condition: "true".to_owned(),
        }),
        ..Gate::default()
    };
    let mut sim = workers(["w1"], 1, gate)
        .with_policy(|p| p.prometheus_url = Some("http://127.0.0.1:9091".to_owned()));
    sim.pass();
    complete(&mut sim, "w1");
    sim.pass();
    assert!(
        reason(&sim).contains("querying http://127.0.0.1:9091: the fixture has no answer"),
        "{}",
        reason(&sim)
    );
}

/// A gate whose check runs on the node: port 10250 answers (`tcpDial`), judged success on
/// status code 0 and error otherwise.
fn kubelet_answers(after: GateAfter) -> Gate {
    let check: autopilot_api::v1beta2::GateCheck = serde_json::from_value(json!({
        "command": {"id": "tcpDial", "timeout": 5, "data": {"host": "127.0.0.1", "port": 10250}},
        "results": [
            {"status": "success", "message": "{{ .Node }} answers", "condition": {"statusCode": 0}},
            {"status": "error", "message": "{{ .Node }}: {{ .Error }}"}
        ]
    }))
    .expect("a gate check");
    Gate {
        id: "kubelet".to_owned(),
        after,
        timeout: Some("1m".to_owned()),
        check: Some(check),
        ..Gate::default()
    }
}

/// The description NewPlan refuses a plan gated by `gate` with.
fn refused_by_new_plan(gate: Gate) -> String {
    let plan = PlanFixture::k0s_update(V).workers(["w1"]).gated(0, gate);
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1"]));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Warning);
    sim.plan.command(0).description.clone().unwrap_or_default()
}

/// The gate-check requests of a transition: object, attempt, gates.
fn asked(transition: &crate::plan::Transition) -> Vec<(String, u32, Vec<String>)> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            crate::plan::Effect::GateCheck { target, request } => {
                Some((target.name.clone(), request.asks.attempt, request.asks.gates.clone()))
            }
            crate::plan::Effect::Signal { .. }
            | crate::plan::Effect::CreatePod(_)
            | crate::plan::Effect::DeletePod { .. }
            | crate::plan::Effect::Prestage { .. }
            | crate::plan::Effect::Event { .. } => None,
        })
        .collect()
}

fn refused_connection() -> autopilot_api::preflight::RawRecord {
    autopilot_api::preflight::RawRecord::failure(111, "connection refused")
}

#[test]
fn a_check_gate_asks_the_node_just_updated_and_passes_on_its_report() {
    let mut sim = workers(["w1", "w2"], 1, kubelet_answers(GateAfter::Node));
    assert_eq!(names(signalled(&sim.pass())), ["w1"]);
    complete(&mut sim, "w1");
    let t = sim.pass();
    assert_eq!(asked(&t), [("w1".to_owned(), 1, vec!["kubelet".to_owned()])]);
    assert!(signalled(&t).is_empty(), "w2 waits for w1's check");
    assert!(reason(&sim).contains("asked w1 to run the check"), "{}", reason(&sim));

    let t = sim.pass();
    assert!(asked(&t).is_empty(), "asked once: {t:#?}");
    assert!(reason(&sim).contains("waiting for w1's report (attempt 1)"), "{}", reason(&sim));

    let ok = autopilot_api::preflight::RawRecord::success(Vec::new());
    sim.cluster(|c| c.reports_gate_checks(Node, "w1", &[("kubelet", ok)]));
    assert_eq!(names(signalled(&sim.pass())), ["w2"], "w1's check passed");
    assert_eq!(sim.plan.command(0).gates_passed, 1);
}

#[test]
fn a_failing_check_is_asked_again_after_the_retry_and_the_gate_fails_at_its_timeout() {
    let mut sim = workers(["w1", "w2"], 1, kubelet_answers(GateAfter::Node));
    sim.pass();
    complete(&mut sim, "w1");
    sim.pass();
    sim.cluster(|c| c.reports_gate_checks(Node, "w1", &[("kubelet", refused_connection())]));
    let t = sim.pass();
    assert!(asked(&t).is_empty(), "not again before the retry interval: {t:#?}");
    assert!(
        reason(&sim).contains("check on w1: w1: connection refused (status code 111) (attempt 1)"),
        "{}",
        reason(&sim)
    );

    sim.cluster(|c| c.later(crate::plan::gates::CHECK_RETRY));
    let t = sim.pass();
    assert_eq!(asked(&t), [("w1".to_owned(), 2, vec!["kubelet".to_owned()])]);
    // The report of the last attempt does not answer the new one.
    sim.pass();
    assert!(reason(&sim).contains("waiting for w1's report (attempt 2)"), "{}", reason(&sim));

    sim.cluster(|c| c.reports_gate_checks(Node, "w1", &[("kubelet", refused_connection())]));
    sim.cluster(|c| c.later(Duration::from_secs(50)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "w2 is never signalled: {t:#?}");
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.contains("gate kubelet failed on w1: check on w1"), "{description}");
    assert!(description.contains("not passed within 1m"), "{description}");
}

#[test]
fn a_refused_or_unreadable_report_keeps_a_check_gate_waiting_with_the_nodes_reason() {
    let mut sim = workers(["w1"], 1, kubelet_answers(GateAfter::Node));
    sim.pass();
    complete(&mut sim, "w1");
    sim.pass();
    sim.cluster(|mut c| {
        let object = c.objects_mut(Node).get_mut("w1").expect("w1");
        let request = object.gate_check().request.clone().expect("asked");
        object.gate_check_mut().report = Some(autopilot_api::gate_check::GateCheckReport {
            run_id: request.run_id,
            command: request.command,
            says: autopilot_api::gate_check::GateCheckSays {
                attempt: request.asks.attempt,
                records: Default::default(),
                refused: Some("refused: w1 is in no open gate run".to_owned()),
            },
        });
        c
    });
    sim.pass();
    assert!(
        reason(&sim).contains("w1 refused the check: refused: w1 is in no open gate run"),
        "{}",
        reason(&sim)
    );
    assert_eq!(sim.plan.state(), P::SchedulableWait, "a refusal is not a pass");

    sim.cluster(|mut c| {
        let object = c.objects_mut(Node).get_mut("w1").expect("w1");
        object.gate_check_mut().report = None;
        object.gate_check_mut().report_problem = Some("over the limit".to_owned());
        c
    });
    sim.pass();
    assert!(
        reason(&sim).contains("w1's report cannot be read: over the limit"),
        "{}",
        reason(&sim)
    );
}

#[test]
fn a_batch_check_gate_asks_every_node_of_the_wave_and_passes_when_all_pass() {
    let mut sim = workers(["w1", "w2", "w3"], 2, kubelet_answers(GateAfter::Batch));
    assert_eq!(names(signalled(&sim.pass())), ["w1", "w2"]);
    complete(&mut sim, "w1");
    let t = sim.pass();
    assert!(asked(&t).is_empty(), "the wave is not done yet: {t:#?}");
    complete(&mut sim, "w2");
    let t = sim.pass();
    let nodes: Vec<String> = asked(&t).into_iter().map(|(name, _, _)| name).collect();
    assert_eq!(nodes, ["w1", "w2"]);
    let ok = autopilot_api::preflight::RawRecord::success(Vec::new());
    sim.cluster(|c| c.reports_gate_checks(Node, "w1", &[("kubelet", ok.clone())]));
    sim.cluster(|c| c.reports_gate_checks(Node, "w2", &[("kubelet", refused_connection())]));
    assert!(signalled(&sim.pass()).is_empty(), "w2's check did not pass");
    assert!(reason(&sim).contains("check on w2"), "{}", reason(&sim));
    sim.cluster(|c| c.later(crate::plan::gates::CHECK_RETRY));
    let t = sim.pass();
    let nodes: Vec<String> = asked(&t).into_iter().map(|(name, _, _)| name).collect();
    assert_eq!(nodes, ["w2"], "only the node whose check failed is asked again");
    sim.cluster(|c| c.reports_gate_checks(Node, "w2", &[("kubelet", ok)]));
    assert_eq!(names(signalled(&sim.pass())), ["w3"], "the wave's gate passed");
}

#[test]
fn new_plan_refuses_a_check_gate_that_runs_a_pod_or_does_not_compile_naming_the_field() {
    let mut pod = kubelet_answers(GateAfter::Node);
    if let Some(check) = pod.check.as_mut() {
        check.command.id = autopilot_api::v1beta2::PreflightCommandId::Scheduler;
    }
    let text = refused_by_new_plan(pod);
    assert!(text.contains("gates[0].check.command.id: scheduler runs a Pod"), "{text}");

    let mut typo = kubelet_answers(GateAfter::Node);
    if let Some(check) = typo.check.as_mut() {
        check.results[0].condition =
            serde_json::from_value(json!({"boolExpr": "objects.size() > 0"})).ok();
    }
    let text = refused_by_new_plan(typo);
    assert!(text.contains("gates[0].check.results[0].condition.boolExpr"), "{text}");
}
