//! Events and idempotence: what the first pass announces, a second pass on the same snapshot
//! repeats nothing but identical signals, and a status reads back equal.

use jiff::Timestamp;

use super::fixtures::*;
use super::support::*;
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
            reasons::NODE_SIGNALLED,
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
