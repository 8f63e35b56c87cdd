//! Pre-staging (`prestage: true`): no node is signalled before every target staged the
//! payload; a node that cannot stage fails the command with nothing signalled.

use std::time::Duration;

use autopilot_api::prestage::{PrestageOutcome, PrestageState};
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType as P, TargetState};

use super::fixtures::*;
use crate::plan::ObjectKind::{ControlNode, Node};
use crate::plan::phases::reasons;
use crate::plan::{Effect, Transition};

const V: &str = "v1.31.1+k0s.0";

/// The objects a transition asks to pre-stage, in order.
fn asked(transition: &Transition) -> Vec<String> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Prestage { target, request } => {
                assert_eq!(request.command, 0);
                Some(target.name.clone())
            }
            Effect::Signal { .. }
            | Effect::CreatePod(_)
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. } => None,
        })
        .collect()
}

/// c1 and workers w1..w3 (two at a time), pre-staging `concurrent` at a time (`None`: all).
fn staged_plan(concurrent: Option<u32>) -> Sim {
    let plan = PlanFixture::k0s_update(V)
        .controllers(["c1"])
        .workers(["w1", "w2", "w3"])
        .concurrent(2)
        .edited(|spec| {
            let update = spec.commands[0].k0supdate.as_mut().expect("k0supdate");
            update.rollout.prestage = true;
            update.rollout.prestage_concurrent = concurrent;
        });
    Sim::new(plan, ClusterFixture::new().controllers(["c1"]).workers(["w1", "w2", "w3"]))
}

fn stage(sim: &mut Sim, kind: crate::plan::ObjectKind, name: &str) {
    sim.cluster(|c| c.reports_staged(kind, name, PrestageOutcome::Staged, None));
}

fn reason(sim: &Sim) -> String {
    sim.plan.command(0).reason.clone().unwrap_or_default()
}

#[test]
fn every_target_stages_before_the_first_node_is_signalled() {
    let mut sim = staged_plan(None);
    let t = sim.pass();
    assert_eq!(asked(&t), ["c1", "w1", "w2", "w3"]);
    assert!(signalled(&t).is_empty(), "nothing signalled while staging: {t:#?}");
    assert_eq!(sim.plan.command(0).staged.as_deref(), Some("0/4"));
    assert_eq!(sim.plan.target(0, "w2").prestage, Some(PrestageState::Requested));
    assert!(reason(&sim).starts_with("pre-staging: "), "{}", reason(&sim));
    assert!(reason(&sim).contains("; 0/4 staged"), "{}", reason(&sim));
    let held: Vec<_> = events(&t).into_iter().filter(|e| e.1 == reasons::PRESTAGING).collect();
    assert_eq!(held.len(), 1, "the hold is published when it starts: {held:?}");
    assert!(held[0].2.contains("0/4 staged"), "{held:?}");

    // Asked once: the objects carry the requests.
    assert!(asked(&sim.pass()).is_empty());
    for name in ["w1", "w2", "w3"] {
        stage(&mut sim, Node, name);
    }
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "c1 has not staged: {t:#?}");
    assert_eq!(sim.plan.command(0).staged.as_deref(), Some("3/4"));
    assert!(reason(&sim).contains("waiting for c1"), "{}", reason(&sim));
    // The count moved, the hold did not: no Event for it (one per report would be one
    // per node at scale); the Plan's status has the count.
    assert!(!event_reasons(&t).contains(&reasons::PRESTAGING), "{:?}", events(&t));

    stage(&mut sim, ControlNode, "c1");
    let t = sim.pass();
    assert_eq!(signalled(&t), [(ControlNode, "c1".to_owned())]);
    assert_eq!(sim.plan.command(0).staged.as_deref(), Some("4/4"));
    // Staging is over for good: the controller's update goes on as usual.
    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed).running("c1", V));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned()), (Node, "w2".to_owned())]);
    assert!(asked(&t).is_empty());
}

#[test]
fn prestage_concurrent_bounds_the_nodes_staging_at_once() {
    let mut sim = staged_plan(Some(2));
    assert_eq!(asked(&sim.pass()), ["c1", "w1"]);
    stage(&mut sim, ControlNode, "c1");
    assert_eq!(asked(&sim.pass()), ["w2"]);
    stage(&mut sim, Node, "w1");
    stage(&mut sim, Node, "w2");
    let t = sim.pass();
    assert_eq!(asked(&t), ["w3"]);
    assert!(signalled(&t).is_empty());
}

#[test]
fn a_node_that_cannot_stage_fails_the_plan_with_nothing_signalled() {
    let mut sim = staged_plan(None);
    sim.pass();
    stage(&mut sim, ControlNode, "c1");
    stage(&mut sim, Node, "w1");
    sim.cluster(|c| {
        c.reports_staged(Node, "w2", PrestageOutcome::Failed, Some("sha256 mismatch: got abc"))
    });
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalApplyFailed);
    assert_eq!(sim.plan.target(0, "w2").prestage, Some(PrestageState::Failed));
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.contains("Node w2"), "{description}");
    assert!(description.contains("could not stage the payload: sha256 mismatch"), "{description}");
    // Nothing was ever signalled.
    for name in ["c1", "w1", "w2", "w3"] {
        assert_ne!(sim.plan.target_state(0, name), TargetState::SignalSent, "{name}");
    }
}

#[test]
fn a_node_that_does_not_answer_fails_at_the_progress_deadline() {
    let mut sim = staged_plan(None);
    sim.pass();
    for name in ["w1", "w2", "w3"] {
        stage(&mut sim, Node, name);
    }
    sim.pass();
    let deadline = sim.policy.node_progress_timeout;
    sim.cluster(|c| c.later(deadline - Duration::from_secs(1)));
    let t = sim.pass();
    assert!(!sim.plan.state().is_terminal());
    assert!(signalled(&t).is_empty());
    sim.cluster(|c| c.later(Duration::from_secs(1)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.contains("ControlNode c1"), "{description}");
    assert!(description.contains("did not report the payload staged within"), "{description}");
}

#[test]
fn an_unreadable_report_fails_the_node() {
    let mut sim = staged_plan(None);
    sim.pass();
    sim.cluster(|mut c| {
        let object = c.objects_mut(Node).get_mut("w3").expect("w3");
        object.prestage_mut().report_problem = Some("over the limit".to_owned());
        c
    });
    sim.pass();
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert!(
        sim.plan.target(0, "w3").reason.as_deref().unwrap_or_default().contains("over the limit")
    );
}

#[test]
fn a_report_of_another_run_or_command_stages_nothing() {
    let mut sim = staged_plan(None);
    sim.pass();
    sim.cluster(|mut c| {
        let object = c.objects_mut(Node).get_mut("w1").expect("w1");
        object.prestage_mut().report = Some(autopilot_api::prestage::PrestageReport {
            run_id: "someone-else/1".to_owned(),
            command: 0,
            says: autopilot_api::prestage::PrestageSays {
                outcome: PrestageOutcome::Staged,
                reason: None,
            },
        });
        c
    });
    sim.pass();
    assert_eq!(sim.plan.target(0, "w1").prestage, Some(PrestageState::Requested));
    assert_eq!(sim.plan.command(0).staged.as_deref(), Some("0/4"));
}

#[test]
fn a_request_lost_after_the_status_write_is_sent_again() {
    let mut sim = staged_plan(None);
    // The leader crashes after writing the status, before the annotations.
    let t = sim.pass_without_signals();
    assert_eq!(asked(&t).len(), 4);
    assert_eq!(asked(&sim.pass()), ["c1", "w1", "w2", "w3"], "asked again");
    assert!(asked(&sim.pass()).is_empty());
}

#[test]
fn a_paused_plan_asks_no_further_node_to_stage() {
    let mut sim = staged_plan(Some(1));
    sim.pass();
    sim.plan(|p| p.steered(true, false));
    stage(&mut sim, ControlNode, "c1");
    let t = sim.pass();
    assert!(asked(&t).is_empty(), "{t:#?}");
    assert!(reason(&sim).contains("asking no further node: paused"), "{}", reason(&sim));
    sim.plan(|p| p.steered(false, false));
    assert_eq!(asked(&sim.pass()), ["w1"]);
}

#[test]
fn an_aborted_plan_ends_during_staging_with_nothing_signalled() {
    let mut sim = staged_plan(None);
    sim.pass();
    sim.plan(|p| p.steered(false, true));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Aborted);
}

#[test]
fn without_prestage_nothing_is_asked_and_no_count_is_kept() {
    let plan = PlanFixture::k0s_update(V).workers(["w1"]);
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1"]));
    let t = sim.pass();
    assert!(asked(&t).is_empty());
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert_eq!(sim.plan.command(0).staged, None);
}

#[test]
fn an_airgap_command_pre_stages_its_workers_too() {
    let plan = PlanFixture::airgap_update(V).workers(["w1", "w2"]).edited(|spec| {
        spec.commands[0].airgapupdate.as_mut().expect("airgap").rollout.prestage = true;
    });
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2"]));
    assert_eq!(asked(&sim.pass()), ["w1", "w2"]);
    stage(&mut sim, Node, "w1");
    assert!(signalled(&sim.pass()).is_empty());
    stage(&mut sim, Node, "w2");
    assert_eq!(signalled(&sim.pass()), [(Node, "w1".to_owned())]);
}
