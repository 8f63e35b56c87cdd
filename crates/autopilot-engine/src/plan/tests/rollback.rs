//! Rolling back a run (DESIGN §15): what is put back, in which order and at which pace,
//! how it ends, and that nothing the run did not change is touched.

use autopilot_api::signal::{RollbackOf, SignalPhase};
use autopilot_api::v1beta2::{
    Gate, GateOnFailure, KubernetesGate, PlanStateType as P, TargetState,
};
use serde_json::json;

use super::fixtures::*;
use crate::plan::ObjectKind::{ControlNode, Node};
use crate::plan::{EventKind, GateAnswer, GateQuery, ObjectKind};

const V: &str = "v1.31.1+k0s.0";

fn names(signals: Vec<(ObjectKind, String)>) -> Vec<String> {
    signals.into_iter().map(|(_, name)| name).collect()
}

fn complete(sim: &mut Sim, kind: ObjectKind, node: &str, version: &str) {
    sim.cluster(|c| c.reports(kind, node, SignalPhase::Completed).running(node, version));
}

/// A completed run of one controller and three workers (one at a time).
fn completed_run() -> Sim {
    let plan = PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1", "w2", "w3"]);
    let cluster = ClusterFixture::new().controllers(["c1"]).workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan, cluster);
    sim.pass();
    complete(&mut sim, ControlNode, "c1", V);
    for worker in ["w1", "w2", "w3"] {
        sim.pass();
        complete(&mut sim, Node, worker, V);
    }
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    sim
}

fn rollback_lists(sim: &Sim) -> Vec<(String, TargetState)> {
    let lists = sim.plan.command(0).rollback.as_ref().expect("a rollback");
    lists.workers.iter().chain(&lists.controllers).map(|t| (t.name.clone(), t.state)).collect()
}

#[test]
fn the_status_records_the_version_each_node_ran_when_it_was_signalled() {
    let sim = completed_run();
    for node in ["w1", "w2", "w3"] {
        assert_eq!(sim.plan.target(0, node).from.as_deref(), Some(RUNNING), "{node}");
    }
    assert_eq!(sim.plan.target(0, "c1").from.as_deref(), Some(CONTROLLER_RUNNING));
}

#[test]
fn an_operator_rollback_of_a_completed_run_puts_workers_back_in_reverse_then_controllers() {
    let mut sim = completed_run();
    sim.plan(|p| p.rolling_back("id123"));

    let t = sim.pass();
    assert_eq!(names(signalled(&t)), ["w3"], "the last worker first, one at a time");
    let signal = signal_to(&t, "w3");
    let rollback = signal.command.rollback.as_ref().expect("a rollback signal");
    assert_eq!((rollback.version.as_str(), rollback.of), (RUNNING, RollbackOf::K0s));
    assert!(signal.command.k0supdate.is_none());
    assert_eq!(signal.run_id.as_deref(), Some(sim.plan.run_id().as_str()), "the same run");
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    let status = sim.plan.status();
    assert!(status.rollback.as_ref().is_some_and(|r| r.reason.contains("operator")));

    for (next, done) in [("w2", "w3"), ("w1", "w2"), ("c1", "w1")] {
        complete(&mut sim, Node, done, RUNNING);
        assert_eq!(names(signalled(&sim.pass())), [next]);
    }
    complete(&mut sim, ControlNode, "c1", CONTROLLER_RUNNING);
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::RolledBack);
    assert_eq!(sim.plan.command(0).state, P::RolledBack);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(
        description.contains("rolled back: 4 of 4 node(s) back on the version they ran before"),
        "{description}"
    );
    assert!(rollback_lists(&sim).iter().all(|(_, state)| *state == TargetState::SignalCompleted));

    // Ended: a later pass changes nothing, and the annotation does not start it again.
    let again = sim.pass();
    assert!(signalled(&again).is_empty());
    assert_eq!(sim.plan.state(), P::RolledBack);
}

#[test]
fn a_rollback_reports_its_progress_as_normal_rolling_back_events() {
    let mut sim = completed_run();
    sim.plan(|p| p.rolling_back("id123"));
    let t = sim.pass();
    let held: Vec<_> =
        events(&t).into_iter().filter(|(_, _, note)| note.contains("held")).collect();
    assert_eq!(held.len(), 1, "{held:?}");
    let (kind, reason, note) = &held[0];
    assert_eq!((*kind, *reason), (EventKind::Normal, "RollingBack"), "{note}");
    assert!(
        note.contains("rolling back the run; 0 of 4 node(s) put back; in flight: w3"),
        "{note}"
    );
    complete(&mut sim, Node, "w3", RUNNING);
    let t = sim.pass();
    assert!(!event_reasons(&t).contains(&"WorkerNotReady"), "{:?}", events(&t));
}

#[test]
fn a_rollback_keeps_the_commands_concurrency() {
    let plan = PlanFixture::k0s_update(V).workers(["w1", "w2", "w3"]).concurrent(2);
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2", "w3"]));
    sim.pass();
    complete(&mut sim, Node, "w1", V);
    complete(&mut sim, Node, "w2", V);
    sim.pass();
    complete(&mut sim, Node, "w3", V);
    sim.pass();
    sim.plan(|p| p.rolling_back("id123"));
    let mut first = names(signalled(&sim.pass()));
    first.sort_unstable();
    assert_eq!(first, ["w2", "w3"], "two at a time, the last ones first");
    complete(&mut sim, Node, "w3", RUNNING);
    assert_eq!(names(signalled(&sim.pass())), ["w1"]);
}

#[test]
fn an_operator_rollback_during_a_run_lets_the_nodes_in_flight_finish_first() {
    let plan = PlanFixture::k0s_update(V).workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2", "w3"]));
    sim.pass();
    complete(&mut sim, Node, "w1", V);
    assert_eq!(names(signalled(&sim.pass())), ["w2"]);

    sim.plan(|p| p.rolling_back("id123"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "w2 is in flight: nothing new: {t:#?}");
    let reason = sim.plan.command(0).reason.clone().unwrap_or_default();
    assert!(reason.starts_with("stopping: rolling back"), "{reason}");

    complete(&mut sim, Node, "w2", V);
    assert_eq!(names(signalled(&sim.pass())), ["w2"], "w2 changed last, goes back first");
    assert_eq!(
        rollback_lists(&sim),
        [("w1".to_owned(), TargetState::SignalPending), ("w2".to_owned(), TargetState::SignalSent)],
        "w3 was never changed, so it is not rolled back"
    );
}

#[test]
fn an_annotation_naming_another_plan_id_rolls_nothing_back() {
    let mut sim = completed_run();
    sim.plan(|p| p.rolling_back("an-older-plan"));
    assert!(signalled(&sim.pass()).is_empty());
    assert_eq!(sim.plan.state(), P::Completed);
}

#[test]
fn a_node_already_on_the_version_was_not_changed_and_is_not_rolled_back() {
    let plan = PlanFixture::k0s_update(V).workers(["w1", "w2"]);
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2"]).running("w2", V));
    sim.pass();
    complete(&mut sim, Node, "w1", V);
    sim.pass();
    complete(&mut sim, Node, "w2", V);
    sim.pass();
    sim.plan(|p| p.rolling_back("id123"));
    assert_eq!(names(signalled(&sim.pass())), ["w1"]);
    assert_eq!(rollback_lists(&sim).len(), 1);
}

#[test]
fn a_node_whose_version_before_the_run_is_unknown_fails_its_rollback_without_a_signal() {
    let plan = PlanFixture::k0s_update(V).workers(["w1", "w2"]);
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2"]));
    sim.cluster(|c| {
        let mut c = c;
        c.objects_mut(Node).get_mut("w1").expect("w1").version = None;
        c
    });
    sim.pass();
    complete(&mut sim, Node, "w1", V);
    sim.pass();
    complete(&mut sim, Node, "w2", V);
    sim.pass();
    sim.plan(|p| p.rolling_back("id123"));
    assert_eq!(names(signalled(&sim.pass())), ["w2"]);
    complete(&mut sim, Node, "w2", RUNNING);
    sim.pass();
    assert_eq!(sim.plan.state(), P::RolledBack);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.contains("1 of 2 node(s) back"), "{description}");
    assert!(description.contains("w1: the version it ran before the run is not known"));
}

#[test]
fn a_node_that_fails_its_rollback_does_not_stop_the_others() {
    let mut sim = completed_run();
    sim.plan(|p| p.rolling_back("id123"));
    sim.pass();
    sim.cluster(|c| {
        c.fails(Node, "w3", SignalPhase::Failed, "k0s.prev runs v1.29.0+k0s.0, not v1.30.0+k0s.0")
    });
    assert_eq!(names(signalled(&sim.pass())), ["w2"]);
}

#[test]
fn a_leader_that_dies_between_the_status_and_the_signal_resends_the_same_rollback_signal() {
    let mut sim = completed_run();
    sim.plan(|p| p.rolling_back("id123"));
    let first = sim.pass_without_signals();
    let sent = signal_to(&first, "w3").clone();
    let again = sim.pass();
    assert_eq!(names(signalled(&again)), ["w3"], "only w3, again");
    assert_eq!(signal_to(&again, "w3"), &sent);
}

#[test]
fn a_gate_with_on_failure_rollback_rolls_back_every_node_the_run_changed() {
    let gate = Gate {
        id: "healthy".to_owned(),
        timeout: Some("30s".to_owned()),
        on_failure: GateOnFailure::Rollback,
        kubernetes: Some(KubernetesGate {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            field_selector: Some("spec.nodeName={{ .Node }}".to_owned()),
            condition: r#"objects.all(p, p.status.phase == "Running")"#.to_owned(),
            ..KubernetesGate::default()
        }),
        ..Gate::default()
    };
    let query = |node: &str| GateQuery::List {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        namespace: None,
        label_selector: None,
        field_selector: Some(format!("spec.nodeName={node}")),
    };
    let running = GateAnswer::Items(vec![json!({"status": {"phase": "Running"}})]);
    let failing = GateAnswer::Items(vec![json!({"status": {"phase": "Failed"}})]);
    let workers = ["w1", "w2", "w3", "w4"];
    let plan = PlanFixture::k0s_update(V).workers(workers).gated(0, gate);
    let mut cluster = ClusterFixture::new().workers(workers);
    for worker in ["w1", "w2"] {
        cluster = cluster.answering(query(worker), running.clone());
    }
    cluster = cluster.answering(query("w3"), failing);
    let mut sim = Sim::new(plan, cluster);
    for worker in ["w1", "w2", "w3"] {
        assert_eq!(names(signalled(&sim.pass())), [worker]);
        complete(&mut sim, Node, worker, V);
    }
    sim.pass();
    sim.cluster(|c| c.later(std::time::Duration::from_secs(30)));
    let t = sim.pass();
    assert_eq!(names(signalled(&t)), ["w3"], "rollback starts with the last node changed");
    let reason = &sim.plan.status().rollback.as_ref().expect("rolled back").reason;
    assert!(reason.contains("gate healthy failed on w3"), "{reason}");
    for (next, done) in [("w2", "w3"), ("w1", "w2")] {
        complete(&mut sim, Node, done, RUNNING);
        assert_eq!(names(signalled(&sim.pass())), [next]);
    }
    complete(&mut sim, Node, "w1", RUNNING);
    sim.pass();
    assert_eq!(sim.plan.state(), P::RolledBack);
    assert_eq!(sim.plan.target_state(0, "w4"), TargetState::SignalPending, "never touched");
    assert_eq!(rollback_lists(&sim).len(), 3);
}

/// The dry run of a rollback on `sim`'s Plan and cluster as they are now.
fn dry_rollback(sim: &Sim) -> crate::plan::rollout::Rollout {
    let observed = sim.cluster.dry_run_view();
    let view = sim.plan.view();
    let live = crate::plan::rollout::LivePlan {
        uid: view.uid,
        generation: view.generation,
        spec: view.spec,
        status: view.status.expect("a status"),
    };
    crate::plan::rollout::rollback(live, &observed, &sim.policy)
}

#[test]
fn a_dry_run_of_a_rollback_shows_the_engines_order_and_ends_rolled_back() {
    let sim = completed_run();
    let dry = dry_rollback(&sim);
    let batches: Vec<Vec<&str>> = dry
        .batches
        .iter()
        .map(|b| b.targets.iter().map(|(_, name)| name.as_str()).collect())
        .collect();
    assert_eq!(batches, [vec!["w3"], vec!["w2"], vec!["w1"], vec!["c1"]]);
    assert_eq!(dry.end.state, P::RolledBack, "{:#?}", dry.end);
    assert_eq!(sim.plan.state(), P::Completed, "the dry run changes nothing");

    // A run that is still going: its node in flight finishes first, then the rollback.
    let plan = PlanFixture::k0s_update(V).workers(["w1", "w2", "w3"]).concurrent(1);
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2", "w3"]));
    sim.pass();
    complete(&mut sim, Node, "w1", V);
    sim.pass();
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalSent);
    let dry = dry_rollback(&sim);
    let batches: Vec<Vec<&str>> = dry
        .batches
        .iter()
        .map(|b| b.targets.iter().map(|(_, name)| name.as_str()).collect())
        .collect();
    assert_eq!(batches, [vec!["w2"], vec!["w1"]], "w3 was never changed");
    assert_eq!(dry.end.state, P::RolledBack);

    // The first node still in flight: it finishes its update, then it is put back.
    let plan = PlanFixture::k0s_update(V).workers(["w1", "w2"]).concurrent(1);
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2"]));
    sim.pass();
    let dry = dry_rollback(&sim);
    let batches: Vec<Vec<&str>> = dry
        .batches
        .iter()
        .map(|b| b.targets.iter().map(|(_, name)| name.as_str()).collect())
        .collect();
    assert_eq!(batches, [vec!["w1"]], "w2 was never signalled");
    assert_eq!(dry.end.state, P::RolledBack);
}
