//! Failure-domain waves (`limits.groupBy`): one group at a time in label order, at most
//! `concurrent` within it, the soak between groups, a failure that stops before the next
//! group, membership frozen at NewPlan, canaries from the first group, and the NewPlan
//! refusals naming the field.

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    BetweenGroups, Gate, GateAfter, KubernetesGate, PlanStateType as P, TargetState,
};

use super::fixtures::*;
use super::support::*;
use crate::plan::phases::reasons;
use crate::plan::{GateAnswer, GateQuery, ObjectKind::Node, Requeue};

const ZONE: &str = "topology.kubernetes.io/zone";

/// Six workers in three zones whose order is not the name order: `c` = w1, w4; `a` = w2,
/// w5; `b` = w3, w6.
fn three_zones() -> ClusterFixture {
    let mut cluster = ClusterFixture::new().workers(["w1", "w2", "w3", "w4", "w5", "w6"]);
    for (name, zone) in
        [("w1", "c"), ("w4", "c"), ("w2", "a"), ("w5", "a"), ("w3", "b"), ("w6", "b")]
    {
        cluster = cluster.label(name, ZONE, zone);
    }
    cluster
}

fn zoned(concurrent: u32, soak: Option<&str>) -> Sim {
    Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w1", "w2", "w3", "w4", "w5", "w6"])
            .concurrent(concurrent)
            .group_by(ZONE, soak),
        three_zones(),
    )
}

fn names(signals: Vec<(crate::plan::ObjectKind, String)>) -> Vec<String> {
    signals.into_iter().map(|(_, name)| name).collect()
}

fn reason(sim: &Sim) -> String {
    sim.plan.command(0).reason.clone().unwrap_or_default()
}

fn complete(sim: &mut Sim, nodes: &[&str]) {
    for node in nodes {
        sim.cluster(|c| c.reports(Node, node, SignalPhase::Completed));
    }
}

#[test]
fn groups_go_one_at_a_time_in_label_order_with_concurrent_within_each() {
    let mut sim = zoned(3, None);
    let t = sim.pass();
    assert_eq!(names(signalled(&t)), ["w2", "w5"], "zone a first, though w1 sorts first");
    assert_eq!(
        reason(&sim),
        format!("updating group {ZONE}=a (1 of 3); the later groups wait for it")
    );
    assert!(event_reasons(&t).contains(&reasons::GROUP_UPDATING), "{t:#?}");
    assert_eq!(sim.plan.target(0, "w2").group.as_deref(), Some("a"));

    // One of zone a done: nobody of zone b goes beside the other.
    complete(&mut sim, &["w2"]);
    assert!(signalled(&sim.pass()).is_empty(), "zone a still in flight");
    complete(&mut sim, &["w5"]);
    assert_eq!(names(signalled(&sim.pass())), ["w3", "w6"], "then zone b");
    assert!(reason(&sim).starts_with(&format!("updating group {ZONE}=b (2 of 3)")));
    complete(&mut sim, &["w3", "w6"]);
    assert_eq!(names(signalled(&sim.pass())), ["w1", "w4"], "then zone c");
    complete(&mut sim, &["w1", "w4"]);
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
}

#[test]
fn concurrent_limits_each_group_and_a_percentage_counts_the_group() {
    let mut sim = zoned(1, None);
    assert_eq!(names(signalled(&sim.pass())), ["w2"]);
    complete(&mut sim, &["w2"]);
    assert_eq!(names(signalled(&sim.pass())), ["w5"], "one at a time within zone a");

    // 50% of a two-worker group is one worker, though 50% of all six would be three.
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w1", "w2", "w3", "w4", "w5", "w6"])
            .concurrent_percent(50)
            .group_by(ZONE, None),
        three_zones(),
    );
    assert_eq!(names(signalled(&sim.pass())), ["w2"]);
}

#[test]
fn workers_without_the_label_go_last_as_their_own_group() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w0", "w1", "w2"])
            .concurrent(3)
            .group_by(ZONE, None),
        ClusterFixture::new()
            .workers(["w0", "w1", "w2"])
            .label("w1", ZONE, "z")
            .label("w2", ZONE, "a"),
    );
    assert_eq!(names(signalled(&sim.pass())), ["w2"]);
    complete(&mut sim, &["w2"]);
    assert_eq!(names(signalled(&sim.pass())), ["w1"]);
    complete(&mut sim, &["w1"]);
    assert_eq!(names(signalled(&sim.pass())), ["w0"]);
    assert_eq!(
        reason(&sim),
        format!("updating group without {ZONE} (3 of 3); the later groups wait for it")
    );
    assert_eq!(sim.plan.target(0, "w0").group, None);
}

#[test]
fn the_next_group_waits_for_the_soak_between_groups() {
    let mut sim = zoned(2, Some("5m"));
    sim.pass();
    sim.cluster(|c| c.later(minutes(1)));
    complete(&mut sim, &["w2", "w5"]);
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "the soak starts: {t:#?}");
    assert!(
        reason(&sim).starts_with(&format!(
            "soaking: group {ZONE}=a completed; group {ZONE}=b (2 of 3) follows if the workers \
             of {ZONE}=a stay Ready for 5m (until 2024-05-01T12:06:00Z)"
        )),
        "{}",
        reason(&sim)
    );
    assert!(event_reasons(&t).contains(&reasons::GROUP_SOAKING), "{t:#?}");
    assert_eq!(t.requeue, Requeue::After(minutes(5)));

    sim.cluster(|c| c.later(minutes(4)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "still soaking");
    assert_eq!(t.requeue, Requeue::After(minutes(1)));

    sim.cluster(|c| c.later(minutes(1)));
    assert_eq!(names(signalled(&sim.pass())), ["w3", "w6"], "the soak passed");
    // Once the next group started, the last one's readiness does not matter any more, and
    // a second pass does not soak again.
    sim.cluster(|c| c.worker_not_ready("w2"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert!(reason(&sim).starts_with("updating group"), "{}", reason(&sim));
}

#[test]
fn a_worker_not_ready_during_the_soak_between_groups_ends_the_command() {
    let mut sim = zoned(2, Some("5m"));
    sim.pass();
    complete(&mut sim, &["w2", "w5"]);
    sim.pass();
    sim.cluster(|c| c.later(minutes(2)).worker_not_ready("w5"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(
        description.contains(&format!(
            "Node w5 of group {ZONE}=a is not Ready during the soak of 5m between groups; no \
             worker of group {ZONE}=b or later was signalled"
        )),
        "{description}"
    );
    for name in ["w1", "w3", "w4", "w6"] {
        assert_eq!(sim.plan.target_state(0, name), TargetState::SignalPending, "{name}");
    }
}

#[test]
fn a_failure_in_the_second_group_halts_before_the_third() {
    let mut sim = zoned(2, None);
    sim.pass();
    complete(&mut sim, &["w2", "w5"]);
    assert_eq!(names(signalled(&sim.pass())), ["w3", "w6"]);
    sim.cluster(|c| c.fails(Node, "w3", SignalPhase::Failed, "bad"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "w6 finishes, nobody else goes: {t:#?}");
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    complete(&mut sim, &["w6"]);
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalPending);
    assert_eq!(sim.plan.target_state(0, "w4"), TargetState::SignalPending);
}

#[test]
fn a_failure_within_max_failures_lets_its_group_finish_but_not_the_next_group_start() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w1", "w2", "w3", "w4", "w5", "w6"])
            .concurrent(1)
            .max_failures(2)
            .group_by(ZONE, None),
        three_zones(),
    );
    assert_eq!(names(signalled(&sim.pass())), ["w2"]);
    sim.cluster(|c| c.fails(Node, "w2", SignalPhase::Failed, "bad"));
    assert_eq!(names(signalled(&sim.pass())), ["w5"], "within the budget: zone a goes on");
    complete(&mut sim, &["w5"]);
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "zone b is not started: {t:#?}");
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(
        description.contains(&format!(
            "group {ZONE}=a had 1 failed worker(s), so no worker of group {ZONE}=b or later \
             was signalled"
        )),
        "{description}"
    );
    assert!(description.ends_with(": Node w2 (SignalApplyFailed): bad"), "{description}");
    for name in ["w1", "w3", "w4", "w6"] {
        assert_eq!(sim.plan.target_state(0, name), TargetState::SignalPending, "{name}");
    }
}

#[test]
fn group_membership_is_frozen_when_the_run_starts() {
    let mut sim = zoned(2, None);
    assert_eq!(names(signalled(&sim.pass())), ["w2", "w5"]);
    // w1 (zone c) moves itself into zone a, and w3 (zone b) leaves the zones altogether.
    sim.cluster(|c| c.label("w1", ZONE, "a"));
    sim.cluster(|c| {
        let mut c = c;
        c.objects_mut(Node).get_mut("w3").expect("w3").labels.remove(ZONE);
        c
    });
    complete(&mut sim, &["w2", "w5"]);
    assert_eq!(names(signalled(&sim.pass())), ["w3", "w6"], "zone b as it was at the start");
    assert_eq!(sim.plan.target(0, "w1").group.as_deref(), Some("c"));
    assert_eq!(sim.plan.target(0, "w3").group.as_deref(), Some("b"));
}

#[test]
fn canaries_are_the_first_workers_of_the_first_group() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w1", "w2", "w3", "w4", "w5", "w6"])
            .concurrent(2)
            .canary(3, Some("5m"))
            .group_by(ZONE, None),
        three_zones(),
    );
    // Three canaries asked for; zone a has two: those two only.
    assert_eq!(names(signalled(&sim.pass())), ["w2", "w5"]);
    assert!(reason(&sim).starts_with("canary: worker(s) w2, w5 go first"), "{}", reason(&sim));
    complete(&mut sim, &["w2", "w5"]);
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "the canaries' soak");
    assert!(reason(&sim).starts_with("soaking: canary worker(s) w2, w5"), "{}", reason(&sim));
    sim.cluster(|c| c.later(minutes(5)));
    assert_eq!(names(signalled(&sim.pass())), ["w3", "w6"]);
}

/// A `kubernetes` gate after each node, over the Pods of the node.
fn node_gate() -> Gate {
    Gate {
        id: "pods".to_owned(),
        after: GateAfter::Node,
        timeout: Some("10m".to_owned()),
        kubernetes: Some(KubernetesGate {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            field_selector: Some("spec.nodeName={{ .Node }}".to_owned()),
            condition: "objects.all(p, p.ok == true)".to_owned(),
            ..KubernetesGate::default()
        }),
        ..Gate::default()
    }
}

fn pods_of(node: &str) -> GateQuery {
    GateQuery::List {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        namespace: None,
        label_selector: None,
        field_selector: Some(format!("spec.nodeName={node}")),
    }
}

#[test]
fn the_next_group_waits_for_the_gates_of_the_last_one() {
    let (plan, cluster) = (zoned(2, None).plan, three_zones());
    let mut sim = Sim::new(plan.gated(0, node_gate()), cluster);
    sim.pass();
    complete(&mut sim, &["w2", "w5"]);
    let healthy = GateAnswer::Items(vec![serde_json::json!({"ok": true})]);
    let sick = GateAnswer::Items(vec![serde_json::json!({"ok": false})]);
    sim.cluster(|c| c.answering(pods_of("w2"), healthy.clone()).answering(pods_of("w5"), sick));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "w5's gate has not passed: {t:#?}");
    assert!(reason(&sim).starts_with("waiting for the gates of"), "{}", reason(&sim));
    sim.cluster(|c| c.answering(pods_of("w5"), healthy));
    assert_eq!(names(signalled(&sim.pass())), ["w3", "w6"]);
}

// === NewPlan ===

fn refused(edit: impl FnOnce(&mut autopilot_api::v1beta2::PlanCommandTargetLimits)) -> String {
    refused_on("workers", edit)
}

fn refused_on(
    group: &str,
    edit: impl FnOnce(&mut autopilot_api::v1beta2::PlanCommandTargetLimits),
) -> String {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]),
    );
    sim.plan(|p| {
        p.edited(|spec| {
            let targets = &mut spec.commands[0].k0supdate.as_mut().expect("k0s").targets;
            let target = match group {
                "controllers" => targets.controllers.as_mut(),
                _ => targets.workers.as_mut(),
            };
            edit(&mut target.expect("targeted").limits);
        })
    });
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert_eq!(sim.plan.state(), P::Warning);
    sim.plan.command(0).description.clone().unwrap_or_default()
}

#[test]
fn new_plan_refuses_waves_that_cannot_run_naming_the_field() {
    let path = "commands[0].k0supdate.targets";
    let description = refused(|limits| limits.group_by = Some("zone/".to_owned()));
    assert!(
        description.starts_with(&format!("{path}.workers.limits.groupBy: invalid label key")),
        "{description}"
    );
    let description = refused(|limits| {
        limits.between_groups = Some(BetweenGroups { soak: Some("5m".to_owned()) });
    });
    assert!(
        description.starts_with(&format!(
            "{path}.workers.limits.betweenGroups: is set without {path}.workers.limits.groupBy"
        )),
        "{description}"
    );
    let description = refused(|limits| {
        limits.group_by = Some(ZONE.to_owned());
        limits.between_groups = Some(BetweenGroups { soak: Some("soon".to_owned()) });
    });
    assert!(
        description.starts_with(&format!("{path}.workers.limits.betweenGroups.soak: ")),
        "{description}"
    );
    let description = refused_on("controllers", |limits| {
        limits.group_by = Some(ZONE.to_owned());
        limits.between_groups = Some(BetweenGroups::default());
    });
    assert!(
        description.starts_with(&format!(
            "{path}.controllers.limits.groupBy: \"{ZONE}\" is not allowed on controllers"
        )),
        "{description}"
    );
    assert!(
        description.contains(&format!("; {path}.controllers.limits.betweenGroups: is not allowed")),
        "{description}"
    );
}
