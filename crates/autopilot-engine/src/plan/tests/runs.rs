//! Runs: signals survive a crash and are trusted only when they are this run's; a spec edit
//! waits for the run to end and then starts a new one; Plans not named `autopilot` are
//! ignored.

use autopilot_api::keys::conditions;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType as P, TargetState};

use super::fixtures::*;
use super::support::*;
use crate::plan::EventKind;
use crate::plan::ObjectKind::{ControlNode, Node};
use crate::plan::phases::reasons;

// === Crash safety and run identity ===

#[test]
fn a_signal_lost_in_a_crash_is_resent_identically_without_events() {
    let mut sim = two_controllers_one_worker();
    let first = sim.pass_without_signals();
    let original = signal_to(&first, "c1").clone();
    assert_eq!(sim.plan.target_state(0, "c1"), TargetState::SignalSent);

    sim.cluster(|c| c.later(minutes(1)));
    let resent = sim.pass();
    assert_eq!(signalled(&resent), [(ControlNode, "c1".to_owned())]);
    assert_eq!(signal_to(&resent, "c1"), &original, "the identical signal");
    assert!(events(&resent).is_empty());
    assert_eq!(Some(&resent.status), Some(&first.status));

    let quiet = sim.pass();
    assert!(quiet.effects.is_empty(), "delivered: nothing to resend");
}

#[test]
fn a_signal_the_status_does_not_record_holds_its_slot_and_its_node_is_signalled_anew_after() {
    let mut sim = two_controllers_one_worker();
    let first = sim.pass();
    let lost = signal_to(&first, "c1").clone();
    // The status of the first pass is lost (a restore wiped it): c1 carries a signal of this
    // run that no status records. It is not the leader's (the node would refuse it if it
    // read it now), but c1 may still be working on it: it holds the one controller slot.
    sim.plan.status = None;
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "c1 is busy with a signal of this run");
    assert_eq!(sim.plan.target_state(0, "c1"), TargetState::SignalPending, "not adopted");
    assert_eq!(sim.plan.target(0, "c1").signalled, None);

    // Once c1 is done with it, it is signalled like any node: recorded first, then written.
    sim.cluster(|c| c.later(minutes(1)).reports(ControlNode, "c1", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(ControlNode, "c1".to_owned())]);
    let fresh = signal_to(&t, "c1");
    assert_ne!(fresh.created, lost.created, "a new signal");
    assert_eq!(sim.plan.target(0, "c1").signalled.as_deref(), Some(fresh.created.as_str()));
    assert_eq!(sim.plan.target_state(0, "c1"), TargetState::SignalSent);
}

#[test]
fn a_signal_of_an_earlier_run_with_the_same_plan_id_is_not_trusted() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);

    // The same spec.id, a new generation: a new run, and w1's Completed is the old run's.
    sim.plan(|p| p.edited(|spec| spec.timestamp = "later".to_owned()));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert_eq!(signal_to(&t, "w1").run_id.as_deref(), Some(format!("{UID}/2").as_str()));
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_k0s_written_signal_without_a_run_id_is_not_trusted() {
    let plan = PlanFixture::airgap_update(V).workers(["w1"]);
    let mut k0s_signal = run_signal(&plan, 0, Some(SignalPhase::Completed));
    k0s_signal.run_id = None;
    let mut sim =
        Sim::new(plan, ClusterFixture::new().workers(["w1"]).with_signal(Node, "w1", k0s_signal));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
}

#[test]
fn a_signal_of_another_plan_id_or_command_is_not_trusted() {
    let plan = PlanFixture::airgap_update(V).workers(["w1"]);
    let mut other_plan = run_signal(&plan, 0, Some(SignalPhase::Completed));
    other_plan.plan_id = "other".to_owned();
    let mut sim = Sim::new(
        plan.clone(),
        ClusterFixture::new().workers(["w1"]).with_signal(Node, "w1", other_plan),
    );
    assert_eq!(signalled(&sim.pass()), [(Node, "w1".to_owned())]);

    let mut other_command = run_signal(&plan, 0, Some(SignalPhase::Completed));
    other_command.command.id = 3;
    let mut sim = Sim::new(
        plan,
        ClusterFixture::new().workers(["w1"]).with_signal(Node, "w1", other_command),
    );
    assert_eq!(signalled(&sim.pass()), [(Node, "w1".to_owned())]);
}

// === Runs, immutability, and Plans that are not ours ===

#[test]
fn a_plan_not_named_autopilot_is_ignored_with_a_condition() {
    let plan = PlanFixture::airgap_update(V).workers(["w1"]).named("nightly");
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1"]));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(event_reasons(&t), [reasons::PLAN_IGNORED]);
    let status = sim.plan.status();
    assert_eq!(status.state, P::NewPlan);
    assert!(status.commands.is_empty());
    assert_eq!(status.run_id, None);
    let condition = &status.conditions[0];
    assert_eq!(condition.type_, conditions::IGNORED);
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason, conditions::REASON_NOT_AUTOPILOT_PLAN);
    assert!(
        condition.message.contains(r#"only the Plan named "autopilot" is executed"#),
        "{}",
        condition.message
    );
    // A GitOps engine reads it as failed, not as in progress for ever.
    let stalled = status.conditions.iter().find(|c| c.type_ == conditions::STALLED);
    let stalled = stalled.expect("a Stalled condition");
    assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("True", "NotAutopilotPlan"));
    assert_eq!(stalled.message, condition.message);

    sim.cluster(|c| c.later(minutes(1)));
    let again = sim.pass();
    assert_eq!(Some(&again.status), Some(&t.status), "idempotent, even later");
    assert!(again.effects.is_empty());
}

#[test]
fn a_spec_edit_during_a_run_is_ignored_with_a_condition_until_the_run_ends() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    let run_id = sim.plan.status().run_id.clone();
    sim.plan(|p| {
        p.edited(|spec| {
            spec.commands[0].airgapupdate.as_mut().expect("airgap").version = "v9.9.9".to_owned()
        })
    });
    let t = sim.pass();
    assert_eq!(event_reasons(&t), [reasons::SPEC_CHANGE_IGNORED]);
    let condition = sim
        .plan
        .status()
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::SPEC_CHANGE_IGNORED)
        .expect("the condition")
        .clone();
    assert_eq!(condition.reason, conditions::REASON_PLAN_RUNNING);
    assert!(condition.message.contains("not applied to this run"), "{}", condition.message);
    assert_eq!(sim.plan.status().observed_generation, Some(1));
    assert_eq!(sim.plan.status().run_id, run_id);

    // The run goes on with the frozen command.
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    let data = signal_to(&t, "w2");
    assert_eq!(data.command.airgapupdate.as_ref().map(|u| u.version.as_str()), Some(V));

    // While an edit waits, the shell checks removed APIs for the run that may start.
    assert_eq!(super::removed_api_check_versions(sim.plan.view()), ["v9.9.9"]);

    // When the run ends, the edited spec starts a new run in the same pass, and the
    // condition goes.
    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    let t = sim.pass();
    let reasons_seen = event_reasons(&t);
    assert!(reasons_seen.contains(&reasons::NODES_COMPLETED), "the old run's end is announced");
    assert!(reasons_seen.contains(&reasons::PLAN_STARTED));
    assert!(
        events(&t).iter().any(|(_, _, note)| note.contains("the previous run ended Completed")),
        "{:#?}",
        events(&t)
    );
    assert_eq!(sim.plan.status().observed_generation, Some(2));
    assert_eq!(sim.plan.status().run_id, Some(format!("{UID}/2")));
    let types: Vec<&str> = sim.plan.status().conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Ready", "Reconciling", "Stalled"], "SpecChangeIgnored went");
    assert!(sim.plan.status().conditions.iter().all(|c| c.observed_generation == Some(2)));
    assert_eq!(
        signal_to(&t, "w1").command.airgapupdate.as_ref().map(|u| u.version.as_str()),
        Some("v9.9.9")
    );
    let again = pass_with(&sim.plan, &sim.cluster, &sim.policy);
    assert_eq!(Some(&again.status), sim.plan.status.as_ref());
}

#[test]
fn the_frozen_plan_id_is_used_after_a_spec_edit() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w2"]).with_id("first"),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.plan(|p| p.edited(|spec| spec.id = "second".to_owned()));
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalCompleted);
    assert_eq!(signal_to(&t, "w2").plan_id, "first");
}

#[test]
fn an_ended_plan_whose_spec_changes_starts_a_new_run() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::Failed, "disk full"));
    sim.pass();
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let t = sim.pass();
    assert!(t.effects.is_empty(), "an ended run stays ended while the spec is unchanged");

    sim.plan(|p| p.edited(|spec| spec.timestamp = "retry".to_owned()));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    let status = sim.plan.status();
    assert_eq!(status.run_id.as_deref(), Some(format!("{UID}/2").as_str()));
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(status.state, P::SchedulableWait);
    assert_eq!(status.commands[0].description, None);
    let (kind, reason, note) = events(&t).into_iter().next().expect("an event");
    assert_eq!((kind, reason), (EventKind::Normal, reasons::PLAN_STARTED));
    assert!(note.contains("the previous run ended ApplyFailed"), "{note}");
}

#[test]
fn a_status_written_by_k0s_starts_a_run_of_our_own() {
    let mut sim = one_airgap_worker();
    sim.plan.status =
        Some(autopilot_api::v1beta2::PlanStatus { state: P::Completed, ..Default::default() });
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert_eq!(sim.plan.status().run_id, Some(sim.plan.run_id()));
}

#[test]
fn a_plan_without_commands_completes_at_once() {
    let mut sim = Sim::new(PlanFixture::without_commands(), ClusterFixture::new());
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    assert_eq!(event_reasons(&t), [reasons::PLAN_STARTED, reasons::PLAN_STATE_CHANGED]);
}

// === Signals recorded before sent (DESIGN §14) ===

#[test]
fn every_signal_is_recorded_on_its_target_in_the_status_of_the_pass_that_sends_it() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2", "w3"]).concurrent(2),
        ClusterFixture::new().workers(["w1", "w2", "w3"]),
    );
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned()), (Node, "w2".to_owned())]);
    for name in ["w1", "w2"] {
        let recorded = t.status.commands[0].k0supdate.as_ref().unwrap().workers.iter();
        let target = recorded.clone().find(|target| target.name == name).expect("a target");
        assert_eq!(target.signalled.as_deref(), Some(signal_to(&t, name).created.as_str()));
    }
    assert_eq!(sim.plan.target(0, "w3").signalled, None, "not signalled, not recorded");
}

#[test]
fn a_signal_copied_onto_pending_targets_is_never_adopted_and_the_rollout_keeps_its_pace() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2", "w3"]).concurrent(1),
        ClusterFixture::new().workers(["w1", "w2", "w3"]),
    );
    sim.pass();
    sim.cluster(|c| {
        c.reports(Node, "w1", SignalPhase::Downloading)
            .copies_signal(Node, "w1", "w2")
            .copies_signal(Node, "w1", "w3")
    });
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "w1 holds the one slot");
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalPending);
    assert_eq!(sim.plan.target_state(0, "w3"), TargetState::SignalPending);

    // The copies are refused by their nodes; a forged Completed counts for nothing either.
    sim.cluster(|c| {
        c.fails(Node, "w2", SignalPhase::Failed, "refused: not signalled by the leader")
            .reports(Node, "w3", SignalPhase::Completed)
            .reports(Node, "w1", SignalPhase::Completed)
    });
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w2".to_owned())], "one at a time, in name order");
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalSent);
    assert_eq!(sim.plan.target_state(0, "w3"), TargetState::SignalPending, "not completed");
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_drain_the_leader_finished_is_recorded_before_the_signal_moves_to_applying_update() {
    let mut sim =
        Sim::new(PlanFixture::k0s_update(V).workers(["w1"]), ClusterFixture::new().workers(["w1"]));
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Cordoning));
    let t = sim.pass();
    assert!(t.effects.is_empty(), "nothing until the drain finished: {:#?}", t.effects);
    assert_eq!(sim.plan.target(0, "w1").drained, None);

    sim.cluster(|c| c.drained(Node, "w1"));
    let t = sim.pass();
    let created = signal_to(&t, "w1").created.clone();
    assert_eq!(signal_to(&t, "w1").phase(), Some(SignalPhase::ApplyingUpdate));
    assert_eq!(sim.plan.target(0, "w1").drained.as_deref(), Some(created.as_str()));
    assert_eq!(sim.plan.target(0, "w1").signalled.as_deref(), Some(created.as_str()));
}

#[test]
fn a_drain_of_another_signal_moves_nothing() {
    let mut sim =
        Sim::new(PlanFixture::k0s_update(V).workers(["w1"]), ClusterFixture::new().workers(["w1"]));
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Cordoning).drained(Node, "w1"));
    // The signal on w1 is replaced by a copy (another `created`) after the drain noted it.
    sim.cluster(|c| {
        c.later(minutes(1)).copies_signal(Node, "w1", "w1").reports(
            Node,
            "w1",
            SignalPhase::Cordoning,
        )
    });
    let t = sim.pass();
    assert!(
        !t.effects.iter().any(|e| matches!(e, crate::plan::Effect::Signal { data, .. } if data.phase() == Some(SignalPhase::ApplyingUpdate))),
        "{:#?}",
        t.effects
    );
    assert_eq!(sim.plan.target(0, "w1").drained, None);
}
