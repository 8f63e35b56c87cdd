//! What nodes report: failures end the plan with the node's reason, reasons in flight are
//! mirrored, phases alone are not state changes, a vanished node is missing; and every
//! node-written reason is capped.

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType as P, TargetState};

use super::fixtures::*;
use super::support::*;
use crate::plan::EventKind;
use crate::plan::ObjectKind::{ControlNode, Node};
use crate::plan::model::text::{MAX_NODE_REASON, cap_node_reason};
use crate::plan::phases::reasons;

#[test]
fn a_refusal_written_on_a_completed_nodes_signal_leaves_it_completed_during_the_run() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2"]).concurrent(1),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalCompleted);
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalSent);
    // w1's signal written back to Cordoning is answered Failed with the refusal.
    let refusal = "not drained: refused: rewound: the Plan records w1 as SignalCompleted";
    sim.cluster(|c| c.later(minutes(1)).fails(Node, "w1", SignalPhase::Failed, refusal));
    sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalCompleted);
    assert!(!sim.plan.state().is_terminal(), "the run goes on");
    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
}

#[test]
fn a_node_failure_ends_the_plan_in_apply_failed_with_the_nodes_reason() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Downloading).later(minutes(3)));
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::FailedDownload, "sha256 mismatch"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let target = sim.plan.target(0, "w1");
    assert_eq!(target.state, TargetState::SignalApplyFailed);
    assert_eq!(target.phase, Some(SignalPhase::FailedDownload));
    assert_eq!(target.reason.as_deref(), Some("sha256 mismatch"));
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalPending);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some("command 0 (airgapupdate): Node w1 reported FailedDownload: sha256 mismatch")
    );
    assert!(events(&t).iter().any(|(kind, reason, note)| {
        *kind == EventKind::Warning
            && *reason == reasons::NODE_FAILED
            && note.contains("sha256 mismatch")
    }));
}

#[test]
fn an_in_flight_nodes_reason_is_mirrored_on_its_target_and_cleared_when_it_moves_on() {
    let mut sim = one_airgap_worker();
    sim.pass();
    let budget = "eviction of pod default/web-0 refused: The disruption budget web needs 2";
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::Cordoning, budget));
    sim.pass();
    let target = sim.plan.target(0, "w1");
    assert_eq!(target.state, TargetState::SignalSent, "a reason alone is no failure");
    assert_eq!(target.phase, Some(SignalPhase::Cordoning));
    assert_eq!(target.reason.as_deref(), Some(budget));
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::ApplyingUpdate));
    sim.pass();
    assert_eq!(sim.plan.target(0, "w1").reason, None, "the node no longer gives one");
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    let target = sim.plan.target(0, "w1");
    assert_eq!((target.state, target.reason.as_deref()), (TargetState::SignalCompleted, None));
}

#[test]
fn a_failure_without_a_reason_gets_one_naming_the_phase() {
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Failed));
    sim.pass();
    assert_eq!(
        sim.plan.target(0, "w1").reason.as_deref(),
        Some("the node reported Failed without a reason")
    );
}

#[test]
fn a_new_phase_is_timed_by_the_leaders_clock() {
    let mut sim = one_airgap_worker();
    sim.pass();
    let signalled_at = sim.plan.target(0, "w1").last_updated_timestamp.clone();
    // The node's own timestamp (the start) counts for nothing: the pass's time does.
    sim.cluster(|c| c.later(minutes(2)).reports(Node, "w1", SignalPhase::Downloading));
    let t = sim.pass();
    let seen = sim.plan.target(0, "w1").last_updated_timestamp.clone();
    assert_eq!(sim.plan.target(0, "w1").phase, Some(SignalPhase::Downloading));
    assert_eq!(seen.0.duration_since(signalled_at.0), jiff::SignedDuration::from_mins(2));
    assert!(events(&t).is_empty(), "a phase change is not a state change");
    // The same phase seen again later keeps the time it was first seen.
    sim.cluster(|c| c.later(minutes(3)));
    sim.pass();
    assert_eq!(sim.plan.target(0, "w1").last_updated_timestamp, seen);
}

#[test]
fn a_vanished_node_ends_the_plan_in_incomplete_targets_once_nothing_is_in_flight() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]),
    );
    sim.pass();
    sim.cluster(|c| c.without("w1"));
    sim.pass();
    // c1 is in flight: it finishes first.
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    let reason = sim.plan.command(0).reason.clone().unwrap_or_default();
    assert!(reason.starts_with("stopping: worker w1 failed"), "{reason}");
    assert!(reason.ends_with("finish: c1"), "{reason}");
    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed));
    sim.pass();
    // As k0s since 1.35: the plan-level state is IncompleteTargets, the node's own
    // SignalMissingNode.
    assert_eq!(sim.plan.state(), P::IncompleteTargets);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::MissingSignalNode);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some("command 0 (k0supdate): Node w1 no longer exists")
    );
}

// === Node-written reasons ===

#[test]
fn a_node_reason_within_the_cap_is_kept_as_written() {
    let exact = "x".repeat(MAX_NODE_REASON);
    assert_eq!(cap_node_reason(&exact), exact);
    assert_eq!(cap_node_reason("sha256 mismatch"), "sha256 mismatch");
    assert_eq!(cap_node_reason(""), "");
}

#[test]
fn a_long_node_reason_is_cut_at_a_char_boundary_and_marked() {
    // 'é' is two bytes: a cut at an odd byte would split one.
    let long = format!("a{}", "é".repeat(2000));
    let capped = cap_node_reason(&long);
    assert!(capped.len() <= MAX_NODE_REASON, "{} bytes", capped.len());
    assert!(capped.len() >= MAX_NODE_REASON - 4, "{} bytes", capped.len());
    assert!(capped.ends_with('…'));
    assert!(long.starts_with(capped.trim_end_matches('…')));

    let one_over = "y".repeat(MAX_NODE_REASON + 1);
    let capped = cap_node_reason(&one_over);
    assert_eq!(capped, format!("{}…", "y".repeat(MAX_NODE_REASON - '…'.len_utf8())));
}

#[test]
fn a_huge_reason_from_a_node_is_capped_in_the_plan_status() {
    let huge = "z".repeat(4 << 20);
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::FailedDownload, &huge));
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let reason = sim.plan.target(0, "w1").reason.clone().unwrap_or_default();
    assert_eq!(reason, cap_node_reason(&huge));
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.len() < 2 * MAX_NODE_REASON, "{} bytes", description.len());
    for (_, _, note) in events(&t) {
        assert!(note.len() < 2 * MAX_NODE_REASON, "an event of {} bytes", note.len());
    }
}

#[test]
fn a_huge_reason_of_a_node_in_flight_is_capped_too() {
    let huge = "w".repeat(64 << 10);
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|mut c| {
        c.report(Node, "w1", SignalPhase::Downloading, Some(&huge));
        c
    });
    sim.pass();
    let reason = sim.plan.target(0, "w1").reason.clone().unwrap_or_default();
    assert_eq!(reason, cap_node_reason(&huge));
    // The same report read again changes nothing (the cap is stable).
    let t = sim.pass();
    assert_eq!(Some(&t.status), sim.plan.status.as_ref());
}

#[test]
fn a_drain_note_stays_on_the_target_after_the_node_completed() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]),
    );
    let t = sim.pass();
    sim.cluster(|mut c| {
        c.deliver(&t);
        c
    });
    let note = "cordoned, not drained of pod(s) default/web-0: no other Ready, uncordoned node \
                tolerates their taints and matches their nodeSelector (drain: IfPossible)";
    sim.cluster(|mut c| {
        c.report(Node, "w1", SignalPhase::ApplyingUpdate, Some(note));
        c
    });
    sim.pass();
    assert_eq!(sim.plan.target(0, "w1").reason.as_deref(), Some(note));
    assert_eq!(sim.plan.target(0, "w1").drain.as_deref(), Some(note));
    sim.cluster(|mut c| {
        c.report(Node, "w1", SignalPhase::Restarting, None);
        c
    });
    sim.pass();
    sim.cluster(|mut c| {
        c.report(Node, "w1", SignalPhase::Completed, None);
        c
    });
    sim.pass();
    let target = sim.plan.target(0, "w1");
    assert_eq!(target.state, TargetState::SignalCompleted);
    assert_eq!((target.reason.as_deref(), target.drain.as_deref()), (None, Some(note)));
    // Any other reason is not a drain note.
    assert!(!crate::cordon::is_drain_note("draining w1: eviction refused; retrying"));
}

#[test]
fn a_drain_note_seen_only_on_the_completed_signal_is_kept() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]),
    );
    let t = sim.pass();
    sim.cluster(|mut c| {
        c.deliver(&t);
        c
    });
    // The node went from ApplyingUpdate to Completed between two passes; the note came along.
    let note = "cordoned, not drained: the command's drain is Never";
    sim.cluster(|mut c| {
        c.report(Node, "w1", SignalPhase::Completed, Some(note));
        c
    });
    sim.pass();
    let target = sim.plan.target(0, "w1");
    assert_eq!(target.state, TargetState::SignalCompleted);
    assert_eq!(target.drain.as_deref(), Some(note));
    assert_eq!(target.reason, None, "a completed node has no reason");
}
