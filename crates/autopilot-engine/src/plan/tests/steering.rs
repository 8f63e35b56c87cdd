//! The failure policy, pause/resume/abort, the rollout shape (percentage, canary and soak)
//! and the concurrency limit across runs (DESIGN §11).

use std::time::Duration;

use autopilot_api::fixtures::{SignalBuilder, airgap_signal};
use autopilot_api::keys::conditions;
use autopilot_api::signal::{SignalData, SignalPhase, SignalStatus};
use autopilot_api::v1beta2::{PlanStateType as P, TargetState};

use super::fixtures::*;
use crate::plan::phases::reasons;
use crate::plan::{ObjectKind::Node, Requeue};

const V: &str = "v1.31.1+k0s.0";

fn minutes(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

fn airgap_workers<const N: usize>(names: [&str; N]) -> (PlanFixture, ClusterFixture) {
    (PlanFixture::airgap_update(V).workers(names), ClusterFixture::new().workers(names))
}

fn k0s_workers<const N: usize>(names: [&str; N]) -> (PlanFixture, ClusterFixture) {
    (PlanFixture::k0s_update(V).workers(names), ClusterFixture::new().workers(names))
}

fn reason(sim: &Sim) -> String {
    sim.plan.command(0).reason.clone().unwrap_or_default()
}

fn description(sim: &Sim) -> String {
    sim.plan.command(0).description.clone().unwrap_or_default()
}

fn names(signals: Vec<(crate::plan::ObjectKind, String)>) -> Vec<String> {
    signals.into_iter().map(|(_, name)| name).collect()
}

// === Failure policy ===

#[test]
fn a_stopping_reason_names_at_most_twenty_nodes_in_flight_and_counts_the_rest() {
    let names: [&str; 60] =
        std::array::from_fn(|i| &*Box::leak(format!("w{i:02}").into_boxed_str()));
    let (plan, cluster) = airgap_workers(names);
    let mut sim = Sim::new(plan.concurrent(60), cluster);
    assert_eq!(signalled(&sim.pass()).len(), 60);

    sim.cluster(|c| c.fails(Node, "w00", SignalPhase::FailedDownload, "sha256 mismatch"));
    sim.pass();
    let reason = reason(&sim);
    assert!(reason.starts_with("stopping: worker w00 failed"), "{reason}");
    assert!(reason.contains("waiting for 59 node(s) in flight to finish: w01, w02,"), "{reason}");
    assert!(reason.ends_with(", w20 and 39 more"), "{reason}");
    assert!(!reason.contains("w21"), "{reason}");
}

#[test]
fn the_first_failure_stops_new_signals_and_the_plan_fails_once_the_nodes_in_flight_finished() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan.concurrent(2), cluster);
    assert_eq!(names(signalled(&sim.pass())), ["w1", "w2"]);

    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::FailedDownload, "sha256 mismatch"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "no new node after a failure: {t:#?}");
    assert_eq!(sim.plan.state(), P::SchedulableWait, "w2 is still in flight");
    assert!(reason(&sim).starts_with("stopping: worker w1 failed"), "{}", reason(&sim));
    assert!(event_reasons(&t).contains(&reasons::PLAN_STOPPING), "{t:#?}");

    sim.cluster(|c| c.fails(Node, "w2", SignalPhase::Failed, "disk full"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let description = description(&sim);
    assert!(
        description.contains("Node w1 reported FailedDownload: sha256 mismatch"),
        "{description}"
    );
    assert!(description.contains("Node w2 reported Failed: disk full"), "{description}");
    assert_eq!(sim.plan.target_state(0, "w3"), TargetState::SignalPending, "never signalled");
}

#[test]
fn a_node_in_flight_that_completes_after_the_failure_is_recorded_as_completed() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan.concurrent(2), cluster);
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w2", SignalPhase::Failed, "boom"));
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalCompleted);
    assert_eq!(sim.plan.status.as_ref().and_then(|s| s.progress.clone()).as_deref(), Some("1/3"));
}

#[test]
fn max_failures_lets_the_workers_go_on_and_the_command_completes_naming_the_failed_ones() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan.max_failures(1), cluster);
    assert_eq!(names(signalled(&sim.pass())), ["w1"]);
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::Failed, "boom"));
    assert_eq!(names(signalled(&sim.pass())), ["w2"], "one failure is within the budget");
    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    assert_eq!(names(signalled(&sim.pass())), ["w3"]);
    sim.cluster(|c| c.reports(Node, "w3", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    let description = description(&sim);
    assert!(
        description.contains("completed with 1 failed worker(s), within limits.maxFailures 1"),
        "{description}"
    );
    assert!(description.contains("Node w1 (SignalApplyFailed): boom"), "{description}");
}

#[test]
fn one_failure_past_max_failures_stops_the_command() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan.max_failures(1), cluster);
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::Failed, "one"));
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w2", SignalPhase::Failed, "two"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "w3 is not signalled: {t:#?}");
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert!(description(&sim).contains("Node w2 reported Failed: two"), "{}", description(&sim));
}

#[test]
fn a_failed_controller_stops_the_plan_whatever_the_workers_budget() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1"]).max_failures(5),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]),
    );
    sim.pass();
    sim.cluster(|c| c.fails(crate::plan::ObjectKind::ControlNode, "c1", SignalPhase::Failed, "x"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::ApplyFailed);
}

// === Pause, resume, abort ===

#[test]
fn a_paused_plan_signals_nobody_new_and_resumes_where_it_stopped() {
    let (plan, cluster) = k0s_workers(["w1", "w2"]);
    let mut sim = Sim::new(plan, cluster);
    assert_eq!(names(signalled(&sim.pass())), ["w1"]);

    sim.plan(|p| p.steered(true, false));
    let t = sim.pass();
    assert!(event_reasons(&t).contains(&reasons::PLAN_PAUSED), "{t:#?}");
    let condition = |sim: &Sim| {
        sim.plan.status.as_ref().and_then(|s| {
            s.conditions.iter().find(|c| c.type_ == conditions::PAUSED).map(|c| c.message.clone())
        })
    };
    let message = condition(&sim).expect("a Paused condition");
    assert!(message.contains("1 node(s) in flight finish: w1"), "{message}");

    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "paused: w2 waits: {t:#?}");
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert!(reason(&sim).starts_with("paused"), "{}", reason(&sim));
    assert!(reason(&sim).ends_with("; no node is in flight"), "{}", reason(&sim));
    assert!(condition(&sim).expect("still paused").contains("no node is in flight"));
    // w1's completion is its own Event; the pause did not change, so no second PlanPaused.
    assert!(event_reasons(&t).contains(&reasons::NODES_COMPLETED), "{t:#?}");
    assert!(!event_reasons(&t).contains(&reasons::PLAN_PAUSED), "{t:#?}");
    // Still nothing on a later pass (a leader change reads the same annotation).
    sim.cluster(|c| c.later(minutes(30)));
    assert!(signalled(&sim.pass()).is_empty());

    sim.plan(|p| p.steered(false, false));
    let t = sim.pass();
    assert_eq!(names(signalled(&t)), ["w2"]);
    assert!(event_reasons(&t).contains(&reasons::PLAN_RESUMED), "{t:#?}");
    assert_eq!(condition(&sim), None);
    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
}

#[test]
fn an_abort_lets_the_nodes_in_flight_finish_then_ends_aborted() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan, cluster);
    sim.pass();
    sim.plan(|p| p.steered(false, true));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert!(reason(&sim).contains("the plan is aborted"), "{}", reason(&sim));

    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Aborted);
    assert!(description(&sim).contains("1 node(s) had completed"), "{}", description(&sim));
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalPending);
    assert_eq!(sim.plan.target_state(0, "w3"), TargetState::SignalPending);
}

#[test]
fn an_abort_with_nothing_in_flight_ends_at_once_and_holds_a_changed_spec_back() {
    let (plan, cluster) = k0s_workers(["w1"]);
    let mut sim = Sim::new(plan, cluster.worker_not_ready("w1"));
    sim.pass();
    sim.plan(|p| p.steered(false, true));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Aborted);

    // A new spec does not start while the abort annotation stays.
    sim.plan(|p| p.edited(|spec| spec.id = "next".to_owned()));
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Aborted);
    assert!(t.effects.is_empty(), "{t:#?}");
    // Removing it starts the new run.
    sim.plan(|p| p.steered(false, false));
    sim.cluster(|c| c.worker_ready("w1"));
    let t = sim.pass();
    assert!(event_reasons(&t).contains(&reasons::PLAN_STARTED), "{t:#?}");
    assert_eq!(names(signalled(&t)), ["w1"]);
}

#[test]
fn a_new_plan_with_the_abort_annotation_does_not_start() {
    let (plan, cluster) = airgap_workers(["w1"]);
    let mut sim = Sim::new(plan.steered(false, true), cluster);
    let t = sim.pass();
    assert!(t.effects.is_empty(), "{t:#?}");
    assert_eq!(sim.plan.state(), P::NewPlan);
}

// === Rollout shape ===

#[test]
fn a_percentage_of_the_workers_go_at_once() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3", "w4"]);
    let mut sim = Sim::new(plan.concurrent_percent(50), cluster);
    assert_eq!(names(signalled(&sim.pass())), ["w1", "w2"]);
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan.concurrent_percent(10), cluster);
    assert_eq!(names(signalled(&sim.pass())), ["w1"], "rounded down but at least one");
}

#[test]
fn canaries_go_first_and_the_others_wait_for_the_soak() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan.concurrent(3).canary(1, Some("5m")), cluster);
    assert_eq!(names(signalled(&sim.pass())), ["w1"], "only the canary");
    assert!(reason(&sim).starts_with("canary: worker(s) w1 go first"), "{}", reason(&sim));

    sim.cluster(|c| c.later(minutes(1)).reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "the soak starts: {t:#?}");
    assert!(reason(&sim).starts_with("soaking: canary worker(s) w1"), "{}", reason(&sim));
    assert!(event_reasons(&t).contains(&reasons::CANARY_SOAKING), "{t:#?}");
    assert_eq!(t.requeue, Requeue::After(minutes(5)));

    sim.cluster(|c| c.later(minutes(4)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "still soaking");
    assert_eq!(t.requeue, Requeue::After(minutes(1)));

    sim.cluster(|c| c.later(minutes(1)));
    assert_eq!(names(signalled(&sim.pass())), ["w2", "w3"], "the soak passed");
    // A canary going NotReady after the soak does not matter any more.
    sim.cluster(|c| c.worker_not_ready("w1"));
    sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_new_leader_with_a_clock_hours_behind_soaks_the_canaries_from_its_takeover() {
    let (plan, cluster) = airgap_workers(["w1", "w2"]);
    let mut sim = Sim::new(plan.concurrent(2).canary(1, Some("5m")), cluster);
    sim.pass();
    sim.cluster(|c| c.later(minutes(1)).reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    // The soak started on a clock three hours ahead of the new leader's: it soaks for its
    // own five minutes from the takeover, not three hours more.
    sim.cluster(|c| c.earlier(minutes(180)).new_leader());
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "still soaking");
    assert_eq!(t.requeue, Requeue::After(minutes(5)));
    sim.cluster(|c| c.later(minutes(5)));
    assert_eq!(names(signalled(&sim.pass())), ["w2"], "the soak passed");
}

#[test]
fn a_canary_not_ready_during_the_soak_ends_the_command_with_nobody_else_touched() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan.concurrent(3).canary(1, Some("5m")), cluster);
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    sim.cluster(|c| c.later(minutes(2)).worker_not_ready("w1"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert!(
        description(&sim).contains("canary Node w1 is not Ready during its soak of 5m"),
        "{}",
        description(&sim)
    );
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalPending);
}

#[test]
fn a_failing_canary_ends_the_plan_whatever_the_failure_budget() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let mut sim = Sim::new(plan.concurrent(3).max_failures(5).canary(1, None), cluster);
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::Failed, "bad"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalPending);
}

// === Concurrency across runs ===

/// A signal of an earlier run (another run id) on a node, in `phase`, answered at `at`.
fn earlier_signal(phase: Option<SignalPhase>, at: jiff::Timestamp) -> SignalData {
    let data = airgap_signal("id123", V, "https://example.invalid/bundle", "")
        .created(&autopilot_api::signal::format_timestamp(at))
        .in_run(&format!("{UID}/0"));
    match phase {
        Some(phase) => data.with_status(SignalStatus::new(phase, at)),
        None => data,
    }
}

#[test]
fn a_node_busy_with_an_earlier_run_takes_a_slot_until_it_finishes() {
    let (plan, cluster) = airgap_workers(["w1", "w2", "w3"]);
    let earlier = earlier_signal(Some(SignalPhase::Downloading), cluster.now);
    let mut sim = Sim::new(plan.concurrent(2), cluster.with_signal(Node, "w2", earlier.clone()));
    let t = sim.pass();
    assert_eq!(names(signalled(&t)), ["w1"], "w2 takes the second slot and is not signalled");
    // The abandoned-signal expiry is the earliest deadline.
    assert!(matches!(t.requeue, Requeue::After(_)), "{:?}", t.requeue);

    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(names(signalled(&t)), ["w3"]);

    let mut done = earlier;
    done.status = Some(SignalStatus::new(SignalPhase::Completed, sim.cluster.now));
    sim.cluster(|c| c.with_signal(Node, "w2", done));
    let t = sim.pass();
    assert_eq!(names(signalled(&t)), ["w2"], "finished: now it is this run's turn");
}

#[test]
fn an_earlier_run_holding_every_slot_is_a_named_hold() {
    let (plan, cluster) = airgap_workers(["w1", "w2"]);
    let earlier = earlier_signal(None, cluster.now);
    let mut sim = Sim::new(plan, cluster.with_signal(Node, "w9", earlier.clone()));
    // w9 is not a target but is mid-update: it still counts.
    sim.cluster(|c| c.workers(["w9"]).with_signal(Node, "w9", earlier));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert!(
        reason(&sim)
            .contains("still working on a signal of an earlier run; 1 node(s): w9 (no answer yet)"),
        "{}",
        reason(&sim)
    );
    assert!(event_reasons(&t).contains(&reasons::EARLIER_RUN_IN_FLIGHT), "{t:#?}");
}

#[test]
fn an_abandoned_earlier_signal_stops_counting_after_the_progress_deadline() {
    let (plan, cluster) = airgap_workers(["w1", "w2"]);
    let earlier = earlier_signal(Some(SignalPhase::ApplyingUpdate), cluster.now);
    let mut sim = Sim::new(plan, cluster.with_signal(Node, "w2", earlier));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(t.requeue, Requeue::After(minutes(15)));
    sim.cluster(|c| c.later(minutes(15)));
    assert_eq!(names(signalled(&sim.pass())), ["w1"]);
}

#[test]
fn a_future_dated_earlier_signal_ages_on_the_leaders_clock() {
    let (plan, cluster) = airgap_workers(["w1", "w2"]);
    // The node dates its signal and its phase in the year 2999.
    let future: jiff::Timestamp = "2999-01-01T00:00:00Z".parse().expect("a timestamp");
    let earlier = earlier_signal(Some(SignalPhase::Downloading), future);
    let mut sim = Sim::new(plan, cluster.with_signal(Node, "w2", earlier));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "w2 holds the only slot");
    assert_eq!(t.requeue, Requeue::After(minutes(15)));
    // The leader's time of first sight is kept in the status (a new leader goes on from it).
    let kept = &sim.plan.command(0).earlier_runs;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!((kept[0].name.as_str(), kept[0].phase), ("w2", Some(SignalPhase::Downloading)));
    assert_eq!(kept[0].since.0, sim.cluster.now);
    sim.cluster(|c| c.later(minutes(15) - Duration::from_secs(1)));
    assert!(signalled(&sim.pass()).is_empty());
    sim.cluster(|c| c.later(Duration::from_secs(1)));
    assert_eq!(names(signalled(&sim.pass())), ["w1"], "aged out after the deadline");
    // Aged out, it stays kept (its age must not start again) but holds nothing.
    assert_eq!(sim.plan.command(0).earlier_runs.len(), 1);
}

#[test]
fn a_signal_the_plan_did_not_write_takes_no_slot() {
    let (plan, cluster) = airgap_workers(["w1", "w2"]);
    let no_run = SignalData { run_id: None, ..earlier_signal(None, cluster.now) };
    let other_plan = earlier_signal(None, cluster.now).in_run("another-uid/7");
    let mut sim = Sim::new(
        plan.concurrent(2),
        cluster.with_signal(Node, "w1", no_run).with_signal(Node, "w2", other_plan),
    );
    let t = sim.pass();
    assert_eq!(names(signalled(&t)), ["w1", "w2"], "neither signal holds a slot");
    assert!(sim.plan.command(0).earlier_runs.is_empty());
}
