//! The kstatus-shaped conditions: `Ready`, `Reconciling` and `Stalled` after every pass, true
//! to the state, at the run's generation, and changed only when the state says something new.

use autopilot_api::keys::{self, conditions};
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::PlanStateType as P;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::fixtures::*;
use super::support::*;
use crate::plan::ObjectKind::Node;
use crate::plan::ObservedSignal;
use crate::plan::driver::conditions::MAX_MESSAGE;

/// `(status, reason)` of the three conditions, in the order Ready, Reconciling, Stalled.
fn verdict(sim: &Sim) -> [(String, String); 3] {
    [conditions::READY, conditions::RECONCILING, conditions::STALLED].map(|type_| {
        let found = condition(sim, type_);
        (found.status, found.reason)
    })
}

fn condition(sim: &Sim, type_: &str) -> Condition {
    let status = sim.plan.status();
    let found = status.conditions.iter().find(|c| c.type_ == type_).cloned();
    found.unwrap_or_else(|| panic!("no {type_} condition in {:#?}", status.conditions))
}

fn pair(status: &str, reason: &str) -> (String, String) {
    (status.to_owned(), reason.to_owned())
}

#[test]
fn a_running_plan_is_reconciling_and_a_completed_one_ready_at_its_generation() {
    let mut sim = one_airgap_worker();
    sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    let running = pair("False", "SchedulableWait");
    assert_eq!(
        verdict(&sim),
        [running.clone(), pair("True", "SchedulableWait"), pair("False", "SchedulableWait")]
    );
    let ready = condition(&sim, conditions::READY);
    assert!(ready.message.contains("is in progress: 0/1 node updates completed"), "{ready:?}");
    assert!(sim.plan.status().conditions.iter().all(|c| c.observed_generation == Some(1)));

    sim.cluster(|c| c.later(minutes(3)).reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    assert_eq!(
        verdict(&sim),
        [pair("True", "Completed"), pair("False", "Completed"), pair("False", "Completed")]
    );
    // Ready and Reconciling turned in this pass; Stalled did not.
    let stamp = |type_| condition(&sim, type_).last_transition_time.0;
    assert_eq!(stamp(conditions::READY), start() + minutes(3));
    assert_eq!(stamp(conditions::RECONCILING), start() + minutes(3));
    assert_eq!(stamp(conditions::STALLED), start());

    // Nothing changes on later passes.
    let before = sim.plan.status().clone();
    sim.cluster(|c| c.later(minutes(1)));
    let t = sim.pass();
    assert_eq!(&t.status, &before);
}

#[test]
fn every_unsuccessful_end_is_stalled_with_its_state_and_description() {
    // A node failure.
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::FailedDownload, "sha256 mismatch"));
    sim.pass();
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert_eq!(
        verdict(&sim),
        [pair("False", "ApplyFailed"), pair("False", "ApplyFailed"), pair("True", "ApplyFailed")]
    );
    let stalled = condition(&sim, conditions::STALLED);
    assert_eq!(Some(stalled.message.as_str()), sim.plan.command(0).description.as_deref());
    assert!(stalled.message.contains("sha256 mismatch"), "{}", stalled.message);

    // A refusal at NewPlan.
    let mut sim = one_worker_downloading(PLAIN_URL, None);
    sim.pass();
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(condition(&sim, conditions::STALLED).reason, "Warning");
    assert_eq!(condition(&sim, conditions::STALLED).status, "True");
    assert_eq!(condition(&sim, conditions::READY).status, "False");

    // A vanished node: IncompleteTargets, as k0s since 1.35.
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.without("w1"));
    sim.pass();
    assert_eq!(condition(&sim, conditions::STALLED).reason, "IncompleteTargets");

    // An abort.
    let mut sim = held_on_worker();
    sim.plan(|p| p.steered(false, true));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Aborted);
    assert_eq!(
        verdict(&sim),
        [pair("False", "Aborted"), pair("False", "Aborted"), pair("True", "Aborted")]
    );
}

#[test]
fn a_plan_aborted_before_it_started_is_stalled_not_in_progress() {
    let mut sim = Sim::new(PlanFixture::airgap_update(V).workers(["w1"]).steered(false, true), {
        ClusterFixture::new().workers(["w1"])
    });
    let t = sim.pass();
    assert!(t.effects.is_empty(), "{t:#?}");
    assert_eq!(sim.plan.state(), P::NewPlan);
    assert_eq!(
        verdict(&sim),
        [pair("False", "Aborted"), pair("False", "Aborted"), pair("True", "Aborted")]
    );
    assert!(condition(&sim, conditions::STALLED).message.contains("remove the"));
}

#[test]
fn a_run_that_ended_under_an_older_version_gets_its_conditions_once() {
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    sim.plan(|mut p| {
        p.status.as_mut().expect("a status").conditions.clear();
        p
    });
    let t = sim.pass();
    assert!(t.effects.is_empty(), "{t:#?}");
    assert_eq!(condition(&sim, conditions::READY).status, "True");
    let again = sim.pass();
    assert_eq!(&again.status, sim.plan.status());
}

#[test]
fn a_spec_edited_during_the_run_leaves_the_conditions_at_the_run_generation() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.plan(|p| {
        p.edited(|spec| {
            spec.commands[0].airgapupdate.as_mut().expect("airgap").version = "v9.9.9".to_owned()
        })
    });
    sim.pass();
    // status.observedGeneration stays 1 while metadata.generation is 2: kstatus reads a
    // generation mismatch as in progress, and Ready cannot be taken for the new spec's.
    assert_eq!(sim.plan.status().observed_generation, Some(1));
    for type_ in [conditions::READY, conditions::RECONCILING, conditions::STALLED] {
        assert_eq!(condition(&sim, type_).observed_generation, Some(1), "{type_}");
    }
    assert_eq!(condition(&sim, conditions::RECONCILING).status, "True");
}

#[test]
fn a_long_description_is_cut_in_the_condition_and_kept_whole_in_the_command() {
    let mut sim = one_airgap_worker();
    sim.pass();
    let long = "x".repeat(3 * MAX_MESSAGE);
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::Failed, &long));
    sim.pass();
    let stalled = condition(&sim, conditions::STALLED);
    assert!(stalled.message.len() <= MAX_MESSAGE, "{}", stalled.message.len());
    assert!(stalled.message.ends_with('…'));
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.len() > MAX_MESSAGE, "the command keeps its own text");
}

#[test]
fn a_failed_signal_the_leader_did_not_record_or_a_refusal_leaves_a_completed_run_ready() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    let ready = [pair("True", "Completed"), pair("False", "Completed"), pair("False", "Completed")];
    assert_eq!(verdict(&sim), ready);

    // A rewound signal answered `Failed` by the node or the drain refusing it.
    let refusal = "refused: rewound: this node saw the signal end Completed, and now it shows \
                   Cordoning; a signal that ended is not acted on again";
    sim.cluster(|c| c.later(minutes(1)).fails(Node, "w1", SignalPhase::Failed, refusal));
    sim.pass();
    assert_eq!(verdict(&sim), ready, "a refusal says nothing about the update");

    // A rollback report on a signal the leader never wrote (another `created`).
    let why = "rolled back after the update: the new binary exited abnormally 3 times";
    sim.cluster(|c| {
        let mut c = c.later(minutes(1)).fails(Node, "w2", SignalPhase::Failed, why);
        let object = c.objects_mut(Node).get_mut("w2").expect("w2");
        if let ObservedSignal::Valid(data) = &mut object.signal {
            data.created = "2026-11-29T00:00:00Z".to_owned();
        }
        c
    });
    sim.pass();
    assert_eq!(verdict(&sim), ready, "only the recorded signal's report counts");
}

#[test]
fn a_completed_run_a_node_rolled_back_afterwards_is_no_longer_ready() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    assert_eq!(condition(&sim, conditions::READY).status, "True");

    // w1's post-update watch puts v1 back: its signal says Failed after Completed.
    let why = "rolled back after the update: the new binary exited abnormally 3 times";
    sim.cluster(|c| c.later(minutes(2)).fails(Node, "w1", SignalPhase::Failed, why));
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Completed, "k0s' states have no way back");
    let reason = "RolledBackAfterUpdate";
    assert_eq!(verdict(&sim), [pair("False", reason), pair("False", reason), pair("True", reason)]);
    let stalled = condition(&sim, conditions::STALLED);
    assert!(stalled.message.ends_with(&format!("back on Node w1: {why}")), "{}", stalled.message);
    assert!(t.effects.iter().all(|e| !matches!(e, crate::plan::Effect::Signal { .. })));
    // It stays so.
    let again = sim.pass();
    assert_eq!(&again.status, sim.plan.status());
}

// === Holds: which read as stalled ===

#[test]
fn a_paused_plan_is_in_progress_not_stalled_as_intended() {
    // The operator chose the pause and will resume: kstatus waits (Argo CD, reading
    // `Paused`, shows it Suspended).
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.plan(|p| p.steered(true, false));
    sim.cluster(|c| c.later(minutes(1)).reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    sim.cluster(|c| c.later(minutes(30)));
    sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    let state = "SchedulableWait";
    assert_eq!(verdict(&sim), [pair("False", state), pair("True", state), pair("False", state)]);
    assert_eq!(condition(&sim, conditions::PAUSED).status, "True");
}

#[test]
fn a_plan_held_by_preflight_warnings_is_stalled_and_not_reconciling_until_they_are_accepted() {
    use super::preflight::{free, gated, port_check};
    use autopilot_api::preflight::{RawRecord, status_code};
    use serde_json::json;

    let mut sim =
        gated(vec![port_check("api-port", json!({"all": true}))], json!({"onWarn": "Block"}));
    sim.pass();
    let late = RawRecord::failure(status_code::TIMEOUT, "timed out after 5s");
    sim.cluster(|c| {
        c.reports_checks(crate::plan::ObjectKind::ControlNode, "c1", &[("api-port", free("c1"))])
            .reports_checks(Node, "w1", &[("api-port", late)])
            .reports_checks(Node, "w2", &[("api-port", free("w2"))])
    });
    let held = sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    // Only an operator moves it: kstatus reads Failed, with the annotation to set.
    let reason = "PreflightWarnings";
    assert_eq!(verdict(&sim), [pair("False", reason), pair("False", reason), pair("True", reason)]);
    let stalled = condition(&sim, conditions::STALLED);
    let id = sim.plan.spec.id.clone();
    let accept =
        format!("accept them with the annotation {}={id}", keys::ANNOTATION_ACCEPT_WARNINGS);
    assert!(stalled.message.ends_with(&accept), "{}", stalled.message);
    assert!(event_reasons(&held).contains(&crate::plan::phases::reasons::PLAN_STALLED));
    // It stays so.
    sim.cluster(|c| c.later(minutes(30)));
    let again = sim.pass();
    assert_eq!(&again.status, sim.plan.status());

    sim.plan(|p| p.accepting_warnings(&id));
    sim.pass();
    let running = "SchedulableWait";
    assert_eq!(
        verdict(&sim),
        [pair("False", running), pair("True", running), pair("False", running)]
    );
}

// === An aborted plan whose spec changes ===

#[test]
fn an_aborted_plan_whose_spec_changes_observes_the_new_generation_and_is_stalled() {
    let mut sim = held_on_worker();
    sim.plan(|p| p.steered(false, true));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Aborted);
    let run_id = sim.plan.status().run_id.clone();

    sim.plan(|p| p.edited(|spec| spec.id = "next".to_owned()));
    let t = sim.pass();
    assert!(t.effects.is_empty(), "{t:#?}");
    // kstatus compares `observedGeneration` before the conditions: it must be the new one.
    let status = sim.plan.status();
    assert_eq!((status.observed_generation, status.run_generation), (Some(2), Some(1)));
    assert_eq!((status.state, &status.run_id), (P::Aborted, &run_id), "the run is as it ended");
    assert_eq!(
        verdict(&sim),
        [pair("False", "Aborted"), pair("False", "Aborted"), pair("True", "Aborted")]
    );
    assert!(status.conditions.iter().all(|c| c.observed_generation == Some(2)));
    let stalled = condition(&sim, conditions::STALLED);
    let remove = format!("does not run until the {} annotation is removed", keys::ANNOTATION_ABORT);
    assert!(stalled.message.contains("the spec changed (generation 2)"), "{}", stalled.message);
    assert!(stalled.message.ends_with(&remove), "{}", stalled.message);
    // It stays so.
    sim.cluster(|c| c.later(minutes(30)));
    let again = sim.pass();
    assert_eq!(&again.status, sim.plan.status());
    assert!(again.effects.is_empty(), "{again:#?}");

    // Removing the abort runs the new spec.
    sim.plan(|p| p.steered(false, false));
    sim.cluster(|c| c.worker_ready("w1"));
    let t = sim.pass();
    assert!(event_reasons(&t).contains(&crate::plan::phases::reasons::PLAN_STARTED), "{t:#?}");
    let status = sim.plan.status();
    assert_eq!((status.observed_generation, status.run_generation), (Some(2), None));
    assert_eq!(status.plan_id.as_deref(), Some("next"));
    assert_ne!(status.run_id, run_id);
    assert_eq!(condition(&sim, conditions::RECONCILING).status, "True");
    assert_eq!(condition(&sim, conditions::STALLED).status, "False");
}
