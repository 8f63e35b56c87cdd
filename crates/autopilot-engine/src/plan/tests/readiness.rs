//! Readiness: a k0s update signals a controller only while every plan controller is ready
//! (within the readiness grace), and a worker only while it is Ready; airgap updates do not
//! wait.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::PlanStateType as P;

use super::fixtures::*;
use super::support::*;
use crate::plan::ObjectKind::{ControlNode, Node};
use crate::plan::phases::reasons;
use crate::plan::{EventKind, Readiness, Requeue, Transition, step};

#[test]
fn a_controller_is_signalled_only_while_every_plan_controller_is_ready() {
    let mut sim = two_controllers_one_worker();
    sim.cluster(|c| c.controller_down("c2", "connection refused"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Schedulable);
    let command = sim.plan.command(0);
    assert_eq!(command.state, P::Schedulable);
    assert_eq!(
        command.reason.as_deref(),
        Some("waiting for controller c2 to become ready: connection refused")
    );
    assert_eq!(command.not_ready_since.as_ref().map(|t| t.0), Some(start()));
    assert_eq!(t.requeue, Requeue::After(Duration::from_secs(2)));
    assert!(events(&t).iter().any(|(kind, reason, note)| {
        *kind == EventKind::Warning
            && *reason == reasons::CONTROLLER_NOT_READY
            && note.contains("c2")
    }));

    // Still down five minutes later: still held, since the first time it was seen down.
    sim.cluster(|c| c.later(minutes(5)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.command(0).not_ready_since.as_ref().map(|t| t.0), Some(start()));
    assert!(events(&t).is_empty(), "the same hold is not announced twice");

    // Close to the deadline, the requeue does not overshoot it.
    sim.cluster(|c| c.later(Duration::from_secs(299)));
    let t = sim.pass();
    assert_eq!(t.requeue, Requeue::After(Duration::from_secs(1)));

    // Back up: signal, and the hold is gone.
    sim.cluster(|c| c.controller_up("c2"));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(ControlNode, "c1".to_owned())]);
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(sim.plan.command(0).reason, None);
    assert_eq!(sim.plan.command(0).not_ready_since, None);
}

#[test]
fn a_controller_down_past_the_readiness_grace_holds_the_plan_stalled_until_it_is_back() {
    let condition = |sim: &Sim, type_: &str| {
        let status = sim.plan.status();
        let found = status.conditions.iter().find(|c| c.type_ == type_).cloned();
        found.unwrap_or_else(|| panic!("no {type_} condition in {:#?}", status.conditions))
    };
    let mut sim = held_on_controller();
    sim.cluster(|c| c.later(minutes(9)));
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
    assert_eq!(condition(&sim, "Stalled").status, "False");
    assert_eq!(condition(&sim, "Reconciling").status, "True");
    assert!(!event_reasons(&t).contains(&reasons::PLAN_STALLED));
    // The grace is over: still held (as k0s since 1.35, no InconsistentTargets), but the
    // plan says it is stalled, once.
    sim.cluster(|c| c.later(minutes(1)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Schedulable);
    let command = sim.plan.command(0);
    assert_eq!(command.state, P::Schedulable);
    assert_eq!(command.not_ready_since.as_ref().map(|t| t.0), Some(start()));
    let stalled = condition(&sim, "Stalled");
    assert_eq!(stalled.status, "True");
    assert_eq!(stalled.reason, reasons::CONTROLLER_NOT_READY);
    assert!(
        stalled.message.starts_with(
            "waiting for controller c2 to become ready: connection refused; the plan \
             controllers have not all been ready for the readiness grace of 10m"
        ),
        "{}",
        stalled.message
    );
    assert_eq!(condition(&sim, "Reconciling").status, "True");
    assert_eq!(condition(&sim, "Ready").status, "False");
    assert_eq!(event_reasons(&t).iter().filter(|r| **r == reasons::PLAN_STALLED).count(), 1);
    sim.cluster(|c| c.later(minutes(1)));
    let t = sim.pass();
    assert!(!event_reasons(&t).contains(&reasons::PLAN_STALLED), "said once");
    // c2 is back: the run goes on (c1 first) and is no longer stalled.
    sim.cluster(|c| c.controller_up("c2"));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(ControlNode, "c1".to_owned())]);
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(condition(&sim, "Stalled").status, "False");
    assert_eq!(sim.plan.command(0).not_ready_since, None);
}

#[test]
fn a_controller_that_was_not_probed_counts_as_not_ready() {
    let plan = PlanFixture::k0s_update(V).controllers(["c1"]);
    let cluster = ClusterFixture::new().controllers(["c1"]);
    let reviewed = cluster.reviewed();
    let observed = super::Observed {
        gate_answers: &crate::plan::NO_GATE_ANSWERS,
        plan_access: &reviewed,
        now: cluster.now,
        term_started: None,
        control_nodes: &cluster.control_nodes,
        nodes: &cluster.nodes,
        readiness: &Default::default(),
        api_versions: &crate::plan::NO_API_VERSIONS,
        removed_apis: Some(&[]),
        check_pods: super::CheckPods::NONE,
    };
    let t = step(plan.view(), &observed, &policy());
    assert_eq!(t.status.state, P::Schedulable);
    assert_eq!(
        t.status.commands[0].reason.as_deref(),
        Some("waiting for controller c1 to become ready: its /readyz was not probed")
    );
}

#[test]
fn a_pass_names_exactly_the_controllers_it_needs_probed() {
    let mut sim = two_controllers_one_worker();
    // A pass with no probe results (the removed-API check found nothing).
    let probe = |sim: &Sim| {
        let empty = Default::default();
        let reviewed = sim.cluster.reviewed();
        let observed = super::Observed {
            gate_answers: &crate::plan::NO_GATE_ANSWERS,
            plan_access: &reviewed,
            now: sim.cluster.now,
            term_started: None,
            control_nodes: &sim.cluster.control_nodes,
            nodes: &sim.cluster.nodes,
            readiness: &empty,
            api_versions: &crate::plan::NO_API_VERSIONS,
            removed_apis: Some(&[]),
            check_pods: super::CheckPods::NONE,
        };
        step(sim.plan.view(), &observed, &sim.policy).needs.probe
    };
    assert_eq!(probe(&sim), ["c1", "c2"], "a new run signals a controller in its first pass");
    sim.pass();
    assert!(probe(&sim).is_empty(), "c1 in flight");
    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed));
    assert_eq!(probe(&sim), ["c1", "c2"], "c1's completion is read back in the same pass");
    sim.pass();
    sim.cluster(|c| c.reports(ControlNode, "c2", SignalPhase::Completed));
    assert!(probe(&sim).is_empty(), "only workers are left");
    assert!(
        probe(&Sim::new(PlanFixture::airgap_update(V).workers(["w1"]), sim.cluster.clone()))
            .is_empty()
    );
    let restricted = two_controllers_one_worker().with_policy(|p| p.exclude_controllers = true);
    assert!(probe(&restricted).is_empty());
}

#[test]
fn workers_that_are_not_ready_hold_a_k0s_update_without_a_deadline() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]).worker_not_ready("w1"),
    );
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w2".to_owned())], "w1 is skipped, w2 fills the slot");
    assert_eq!(sim.plan.state(), P::SchedulableWait);

    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Schedulable);
    let command = sim.plan.command(0);
    assert_eq!(command.reason.as_deref(), Some("waiting for worker w1 to become Ready"));
    assert_eq!(command.not_ready_since, None);
    assert_eq!(t.requeue, Requeue::OnChange);
    assert!(event_reasons(&t).contains(&reasons::WORKER_NOT_READY));

    sim.cluster(|c| c.later(minutes(60 * 24)));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable, "no deadline for workers");

    sim.cluster(|c| c.worker_ready("w1"));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(sim.plan.command(0).reason, None);
}

#[test]
fn airgap_updates_do_not_wait_for_ready_nodes() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]).worker_not_ready("w1"),
    );
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
}

#[test]
fn readiness_results_for_other_controllers_do_not_matter() {
    let plan = PlanFixture::k0s_update(V).controllers(["c1"]);
    let cluster = ClusterFixture::new().controllers(["c1", "c2"]);
    let readiness = std::collections::BTreeMap::from([
        ("c1".to_owned(), Readiness::Ready),
        ("c2".to_owned(), Readiness::NotReady("down".to_owned())),
    ]);
    let reviewed = cluster.reviewed();
    let observed = super::Observed {
        gate_answers: &crate::plan::NO_GATE_ANSWERS,
        plan_access: &reviewed,
        now: cluster.now,
        term_started: None,
        control_nodes: &cluster.control_nodes,
        nodes: &cluster.nodes,
        readiness: &readiness,
        api_versions: &crate::plan::NO_API_VERSIONS,
        removed_apis: Some(&[]),
        check_pods: super::CheckPods::NONE,
    };
    let t: Transition = step(plan.view(), &observed, &policy());
    assert_eq!(signalled(&t), [(ControlNode, "c1".to_owned())]);
}

#[test]
fn a_readiness_grace_too_long_to_represent_never_runs_out() {
    let mut sim = two_controllers_one_worker().with_policy(|p| p.readiness_grace = Duration::MAX);
    sim.cluster(|c| c.controller_down("c2", "timeout"));
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
    assert_eq!(t.requeue, Requeue::After(Duration::from_secs(2)));
    sim.cluster(|c| c.later(minutes(60 * 24 * 365)));
    let _ = sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
}
