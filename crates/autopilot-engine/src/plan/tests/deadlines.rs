//! The progress deadline: a node in flight that makes no progress for the node progress
//! timeout (or its command's `progressTimeout`) fails, and its signal says so; a
//! `progressTimeout` that does not parse is refused up front.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType as P, TargetState};

use super::fixtures::*;
use super::support::*;
use crate::plan::ObjectKind::{ControlNode, Node};
use crate::plan::phases::reasons;
use crate::plan::{EventKind, Requeue, Transition};

/// The failed signal a pass writes onto `name` when its deadline ran out: status `Failed`
/// with the reason, everything else as the node carried it.
fn failure_written(t: &Transition, name: &str) -> Option<(SignalPhase, Option<String>)> {
    t.effects.iter().find_map(|effect| match effect {
        super::Effect::Signal { target, data } if target.name == name => {
            data.status.as_ref().map(|status| (status.status, status.reason.clone()))
        }
        super::Effect::Signal { .. }
        | super::Effect::CreatePod(_)
        | super::Effect::DeletePod { .. }
        | super::Effect::Event { .. }
        | super::Effect::GateCheck { .. }
        | super::Effect::Prestage { .. } => None,
    })
}

#[test]
fn a_new_leader_with_a_clock_hours_ahead_counts_deadlines_from_its_takeover() {
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Downloading));
    sim.pass();
    // A new leader takes over whose clock runs three hours ahead of the one that recorded
    // the node's last progress: the deadline counts from its takeover.
    sim.cluster(|c| c.later(minutes(180)).new_leader());
    let t = sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalSent);
    assert_eq!(t.requeue, Requeue::After(minutes(15)));
    // Its own deadline still runs out.
    sim.cluster(|c| c.later(minutes(15)));
    sim.pass();
    let target = sim.plan.target(0, "w1");
    assert_eq!(target.state, TargetState::SignalApplyFailed);
    assert_eq!(target.reason.as_deref(), Some("no progress in Downloading for 15m"));
}

#[test]
fn a_new_leader_with_a_clock_hours_behind_counts_deadlines_from_its_takeover() {
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Downloading));
    sim.pass();
    // A new leader takes over whose clock runs three hours behind the one that recorded the
    // node's last progress: that time lies in its future, and counts from its takeover, not
    // from three hours on.
    sim.cluster(|c| c.earlier(minutes(180)).new_leader());
    let t = sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalSent);
    assert_eq!(t.requeue, Requeue::After(minutes(15)));
    sim.cluster(|c| c.later(minutes(15) - Duration::from_secs(1)));
    let t = sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalSent);
    assert_eq!(t.requeue, Requeue::After(Duration::from_secs(1)));
    sim.cluster(|c| c.later(Duration::from_secs(1)));
    sim.pass();
    let target = sim.plan.target(0, "w1");
    assert_eq!(target.state, TargetState::SignalApplyFailed);
    assert_eq!(target.reason.as_deref(), Some("no progress in Downloading for 15m"));
}

#[test]
fn a_worker_without_progress_fails_when_its_deadline_runs_out() {
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Downloading));
    let t = sim.pass();
    assert_eq!(t.requeue, Requeue::After(minutes(15)));

    // A new phase is progress: the clock starts again.
    sim.cluster(|c| c.later(minutes(10)).reports(Node, "w1", SignalPhase::ApplyingUpdate));
    let t = sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalSent);
    assert_eq!(t.requeue, Requeue::After(minutes(15)));

    // One second short of the deadline: still in flight, woken up at the deadline.
    sim.cluster(|c| c.later(minutes(15) - Duration::from_secs(1)));
    let t = sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalSent);
    assert_eq!(t.requeue, Requeue::After(Duration::from_secs(1)));
    assert!(signalled(&t).is_empty());

    // The deadline: the node fails, the plan ends ApplyFailed, and the node's signal says so.
    sim.cluster(|c| c.later(Duration::from_secs(1)));
    let t = sim.pass();
    let target = sim.plan.target(0, "w1");
    assert_eq!(target.state, TargetState::SignalApplyFailed);
    assert_eq!(target.reason.as_deref(), Some("no progress in ApplyingUpdate for 15m"));
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.contains("no progress in ApplyingUpdate for 15m"), "{description}");
    assert_eq!(
        failure_written(&t, "w1"),
        Some((SignalPhase::Failed, Some("no progress in ApplyingUpdate for 15m".to_owned())))
    );
    assert!(events(&t).iter().any(|(kind, reason, note)| {
        *kind == EventKind::Warning && *reason == reasons::NODE_FAILED && note.contains("w1")
    }));
    assert_eq!(
        sim.cluster.signal(Node, "w1").and_then(|s| s.status.as_ref()).map(|s| s.status),
        Some(SignalPhase::Failed)
    );

    // The run ended: nothing more happens.
    sim.cluster(|c| c.later(minutes(60)));
    let t = sim.pass();
    assert!(t.effects.is_empty());
    assert_eq!(t.requeue, Requeue::OnChange);
}

#[test]
fn a_node_that_never_answers_fails_in_signal_sent() {
    let mut sim = one_airgap_worker().with_policy(|p| p.node_progress_timeout = minutes(5));
    sim.pass();
    sim.cluster(|c| c.later(minutes(5)));
    sim.pass();
    assert_eq!(
        sim.plan.target(0, "w1").reason.as_deref(),
        Some("no progress in SignalSent for 5m")
    );
    assert_eq!(sim.plan.state(), P::ApplyFailed);
}

#[test]
fn an_in_flight_controller_is_held_to_the_progress_deadline() {
    let mut sim = two_controllers_one_worker();
    sim.pass();
    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Restarting));
    sim.pass();
    // The controller's process is gone: no /readyz, no new phase.
    sim.cluster(|c| c.controller_down("c1", "connection refused").later(minutes(15)));
    let t = sim.pass();
    let target = sim.plan.target(0, "c1");
    assert_eq!(target.state, TargetState::SignalApplyFailed);
    assert_eq!(target.reason.as_deref(), Some("no progress in Restart for 15m"));
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert_eq!(sim.plan.target_state(0, "c2"), TargetState::SignalPending);
    assert_eq!(
        failure_written(&t, "c1"),
        Some((SignalPhase::Failed, Some("no progress in Restart for 15m".to_owned())))
    );
}

/// The signal on `w1` in `phase`, with the node's timestamp set to `at`.
fn dated(sim: &Sim, phase: SignalPhase, at: jiff::Timestamp) -> autopilot_api::signal::SignalData {
    let mut signal = run_signal(&sim.plan, 0, Some(phase));
    signal.created = sim.cluster.signal(Node, "w1").expect("signalled").created.clone();
    signal.status.as_mut().expect("a status").timestamp =
        autopilot_api::signal::format_timestamp(at);
    signal
}

#[test]
fn a_node_clock_behind_does_not_shorten_the_deadline() {
    let mut sim = one_airgap_worker();
    sim.cluster(|c| c.later(minutes(30)));
    sim.pass();
    // The node writes its phase with a timestamp an hour in the past; the leader sees it
    // 14 minutes after the signal.
    let stale = dated(&sim, SignalPhase::Downloading, start());
    sim.cluster(|c| c.with_signal(Node, "w1", stale).later(minutes(14)));
    sim.pass();
    // The deadline runs from when the leader saw the phase, not from the node's time.
    sim.cluster(|c| c.later(minutes(15) - Duration::from_secs(1)));
    sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalSent);
    sim.cluster(|c| c.later(Duration::from_secs(1)));
    sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalApplyFailed);
}

#[test]
fn a_node_clock_ahead_does_not_hold_the_plan() {
    let mut sim = one_airgap_worker();
    sim.pass();
    // The node dates its phase in the year 2999.
    let future: jiff::Timestamp = "2999-01-01T00:00:00Z".parse().expect("a timestamp");
    let ahead = dated(&sim, SignalPhase::Downloading, future);
    sim.cluster(|c| c.with_signal(Node, "w1", ahead).later(minutes(1)));
    let t = sim.pass();
    assert_eq!(t.requeue, Requeue::After(minutes(15)), "woken up at the leader's deadline");
    sim.cluster(|c| c.later(minutes(15)));
    sim.pass();
    let target = sim.plan.target(0, "w1");
    assert_eq!(target.state, TargetState::SignalApplyFailed);
    assert_eq!(target.reason.as_deref(), Some("no progress in Downloading for 15m"));
}

#[test]
fn a_command_progress_timeout_overrides_the_flag() {
    let mut sim = one_airgap_worker();
    sim.plan(|p| {
        p.edited(|spec| {
            spec.commands[0].airgapupdate.as_mut().expect("airgap").rollout.progress_timeout =
                Some("2m".to_owned());
        })
    });
    let t = sim.pass();
    assert_eq!(t.requeue, Requeue::After(minutes(2)));
    sim.cluster(|c| c.later(minutes(2)));
    sim.pass();
    assert_eq!(
        sim.plan.target(0, "w1").reason.as_deref(),
        Some("no progress in SignalSent for 2m")
    );
    assert_eq!(sim.plan.state(), P::ApplyFailed);
}

#[test]
fn a_progress_timeout_that_does_not_parse_is_refused_before_any_node_moves() {
    for bad in ["soon", "0s", "-5m"] {
        let mut sim = Sim::new(
            PlanFixture::k0s_update(V).workers(["w1"]),
            ClusterFixture::new().workers(["w1"]),
        );
        sim.plan(|p| {
            p.edited(|spec| {
                spec.commands[0].k0supdate.as_mut().expect("k0s").rollout.progress_timeout =
                    Some(bad.to_owned());
            })
        });
        let t = sim.pass();
        assert!(signalled(&t).is_empty(), "{bad}");
        assert_eq!(sim.plan.state(), P::Warning, "{bad}");
        let description = sim.plan.command(0).description.clone().unwrap_or_default();
        assert!(description.contains("k0supdate.progressTimeout"), "{bad}: {description}");
    }
}
