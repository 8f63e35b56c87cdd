//! Events and idempotence: what the first pass announces, nodes signalled or completed
//! together are one Event while a failed node keeps its own, a second pass on the same
//! snapshot repeats nothing but identical signals, and a status reads back equal.

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType as P, TargetState};
use jiff::Timestamp;

use super::fixtures::*;
use super::support::*;
use crate::plan::EventKind;
use crate::plan::ObjectKind::Node;
use crate::plan::phases::reasons;

#[test]
fn the_first_pass_announces_the_run_each_state_change_and_each_signal() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]).then_k0s_update(V).controllers(["c1"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]),
    );
    let t = sim.pass();
    assert_eq!(
        event_reasons(&t),
        [
            reasons::PLAN_STARTED,
            reasons::NODES_SIGNALLED,
            reasons::COMMAND_STATE_CHANGED,
            reasons::COMMAND_STATE_CHANGED,
            reasons::PLAN_STATE_CHANGED,
        ]
    );
    let notes: Vec<_> = events(&t).into_iter().map(|(_, _, note)| note).collect();
    assert_eq!(
        notes[0],
        format!(
            "plan autopilot started run {UID}/1 (plan id \"id123\", generation 1, 2 command(s))"
        )
    );
    assert_eq!(notes[1], "command 0 (airgapupdate): signalled Node w1");
    assert_eq!(notes[2], "command 0 (airgapupdate): NewPlan -> SchedulableWait");
    assert_eq!(notes[4], "plan NewPlan -> SchedulableWait");
    assert!(matches!(t.effects[0], super::Effect::Signal { .. }), "signals come first");
}

#[test]
fn a_second_pass_on_the_same_snapshot_changes_nothing() {
    for sim in [
        two_controllers_one_worker(),
        held_on_controller(),
        held_on_worker(),
        first_controller_done(),
    ] {
        let mut sim = sim;
        let first = sim.pass_without_signals();
        let second = pass_with(&sim.plan, &sim.cluster, &sim.policy);
        assert_eq!(second.status, first.status);
        assert_eq!(second.requeue, first.requeue);
        let first_signals: Vec<_> =
            first.effects.iter().filter(|e| matches!(e, super::Effect::Signal { .. })).collect();
        let second_effects: Vec<_> = second.effects.iter().collect();
        assert_eq!(second_effects, first_signals, "only identical resends repeat");
    }
}

#[test]
fn timestamps_are_whole_seconds_so_a_read_back_status_is_equal() {
    let mut sim = one_airgap_worker();
    sim.cluster(|mut c| {
        c.now = Timestamp::from_millisecond(c.now.as_millisecond() + 700).expect("valid");
        c
    });
    let t = sim.pass();
    let wire = serde_json::to_string(&t.status).expect("serialise");
    let read_back: autopilot_api::v1beta2::PlanStatus = serde_json::from_str(&wire).expect("parse");
    assert_eq!(read_back, t.status);
}

/// `N` worker names from `w00` on, each after `prefix`.
fn worker_names<const N: usize>(prefix: &str) -> [String; N] {
    std::array::from_fn(|i| format!("{prefix}w{i:02}"))
}

fn batch_of<const N: usize>(names: &[String; N]) -> Sim {
    let names: [&str; N] = std::array::from_fn(|i| names[i].as_str());
    Sim::new(
        PlanFixture::airgap_update(V).workers(names).concurrent(N as u32),
        ClusterFixture::new().workers(names),
    )
}

#[test]
fn a_batch_of_nodes_signalled_or_completed_in_one_pass_is_one_event_naming_them() {
    let names = worker_names::<25>("");
    let mut sim = batch_of(&names);
    let t = sim.pass();
    assert_eq!(signalled(&t).len(), 25);
    let batch: Vec<_> = events(&t)
        .into_iter()
        .filter(|(_, reason, _)| *reason == reasons::NODES_SIGNALLED)
        .collect();
    let named = names[..20].join(", ");
    assert_eq!(
        batch,
        [(
            EventKind::Normal,
            reasons::NODES_SIGNALLED,
            format!("command 0 (airgapupdate): signalled 25 Nodes: {named} and 5 more")
        )]
    );

    for name in &names {
        sim.cluster(|c| c.reports(Node, name, SignalPhase::Completed));
    }
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    assert_eq!(
        event_reasons(&t),
        [reasons::NODES_COMPLETED, reasons::COMMAND_STATE_CHANGED, reasons::PLAN_STATE_CHANGED]
    );
    assert_eq!(
        events(&t)[0].2,
        format!("command 0 (airgapupdate): 25 Nodes completed: {named} and 5 more")
    );
    // Each node's own change is still in the status.
    for name in &names {
        assert_eq!(sim.plan.target_state(0, name), TargetState::SignalCompleted);
    }
}

#[test]
fn a_batch_events_note_names_fewer_nodes_when_their_names_are_long() {
    let names = worker_names::<25>(&"n".repeat(60));
    let mut sim = batch_of(&names);
    let t = sim.pass();
    let (_, _, note) = events(&t)
        .into_iter()
        .find(|(_, reason, _)| *reason == reasons::NODES_SIGNALLED)
        .expect("the batch event");
    assert!(note.len() < 1000, "{} bytes: {note}", note.len());
    let named = names.iter().filter(|name| note.contains(name.as_str())).count();
    assert!((5..20).contains(&named), "{named} named: {note}");
    assert!(note.ends_with(&format!(" and {} more", 25 - named)), "{note}");
}

#[test]
fn a_failed_node_keeps_its_own_warning_next_to_the_batch_of_those_that_completed() {
    let names = worker_names::<3>("");
    let mut sim = batch_of(&names);
    sim.pass();
    sim.cluster(|c| {
        c.fails(Node, "w00", SignalPhase::FailedDownload, "sha256 mismatch")
            .reports(Node, "w01", SignalPhase::Completed)
            .reports(Node, "w02", SignalPhase::Completed)
    });
    let t = sim.pass();
    let node_events: Vec<_> = events(&t)
        .into_iter()
        .filter(|(_, reason, _)| [reasons::NODES_COMPLETED, reasons::NODE_FAILED].contains(reason))
        .collect();
    assert_eq!(
        node_events,
        [
            (
                EventKind::Normal,
                reasons::NODES_COMPLETED,
                "command 0 (airgapupdate): 2 Nodes completed: w01, w02".to_owned()
            ),
            (
                EventKind::Warning,
                reasons::NODE_FAILED,
                "command 0 (airgapupdate): Node w00 failed: sha256 mismatch".to_owned()
            ),
        ]
    );
}
