//! Scheduling: the order of controllers and workers, what a signal carries, commands one
//! after another, and the plan's progress count.

use autopilot_api::signal::{CommandK0sUpdate, SignalPhase};
use autopilot_api::v1beta2::{PlanStateType as P, TargetState};

use super::fixtures::*;
use super::support::*;
use crate::plan::ObjectKind::{ControlNode, Node};
use crate::plan::Requeue;

#[test]
fn a_k0s_update_goes_controller_by_controller_then_workers_in_name_order() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V)
            .controllers(["c2", "c1"])
            .workers(["w3", "w1", "w2"])
            .concurrent(2),
        ClusterFixture::new().controllers(["c1", "c2"]).workers(["w1", "w2", "w3"]),
    );
    let t = sim.pass();
    assert_eq!(signalled(&t), [(ControlNode, "c1".to_owned())]);
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    // A node in flight has a progress deadline: the next pass is due when it runs out.
    assert_eq!(t.requeue, Requeue::After(minutes(15)));

    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Restarting));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "c1 still in flight");
    assert_eq!(sim.plan.target(0, "c1").phase, Some(SignalPhase::Restarting));

    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(ControlNode, "c2".to_owned())]);

    sim.cluster(|c| c.reports(ControlNode, "c2", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned()), (Node, "w2".to_owned())]);

    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w3".to_owned())]);

    sim.cluster(|c| {
        c.reports(Node, "w1", SignalPhase::Completed).reports(Node, "w3", SignalPhase::Completed)
    });
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Completed);
    assert_eq!(sim.plan.command(0).state, P::Completed);
    assert!(sim.plan.target_states(0).iter().all(|(_, s)| *s == TargetState::SignalCompleted));

    // A completed plan never changes again.
    let t = sim.pass();
    assert_eq!(Some(&t.status), sim.plan.status.as_ref());
    assert!(t.effects.is_empty());
}

#[test]
fn the_signal_carries_the_frozen_command_and_the_run_identity() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1"]).forced().with_id("plan-7"),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]).platform("w1", "linux", "arm64"),
    );
    sim.plan(|p| p.payload("linux-arm64", "https://example.com/k0s-linux-arm64", None));
    let t = sim.pass();
    let data = signal_to(&t, "c1");
    assert_eq!(data.plan_id, "plan-7");
    assert_eq!(data.run_id.as_deref(), Some(format!("{UID}/1").as_str()));
    assert_eq!(data.created, START);
    assert_eq!(data.status, None);
    assert_eq!(data.command.id, 0);
    assert_eq!(
        data.command.k0supdate,
        Some(CommandK0sUpdate {
            url: "https://example.com/k0s-linux-amd64".to_owned(),
            version: V.to_owned(),
            sha256: sha('a'),
            forceupdate: true,
        })
    );
    autopilot_api::signal::validate(data).expect("a valid signal");

    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed).later(minutes(1)));
    let t = sim.pass();
    let data = signal_to(&t, "w1");
    let update = data.command.k0supdate.as_ref().expect("k0s");
    assert_eq!(update.url, "https://example.com/k0s-linux-arm64");
    assert_eq!(update.sha256, "", "no sha256 for arm64");
    assert_eq!(data.created, "2024-05-01T12:01:00Z");
}

#[test]
fn commands_run_in_order_and_the_next_starts_in_the_same_pass() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w1"])
            .then_k0s_update(V)
            .controllers(["c1"])
            .workers(["w1"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]),
    );
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert!(signal_to(&t, "w1").command.airgapupdate.is_some());
    assert_eq!(sim.plan.command(1).state, P::SchedulableWait);
    assert_eq!(sim.plan.target_state(1, "c1"), TargetState::SignalPending);

    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(ControlNode, "c1".to_owned())]);
    let data = signal_to(&t, "c1");
    assert_eq!(data.command.id, 1);
    assert!(data.command.k0supdate.is_some());
    assert_eq!(sim.plan.command(0).state, P::Completed);

    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed));
    let t = sim.pass();
    // The Node still carries the airgap signal of command 0: it is not command 1's.
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert!(signal_to(&t, "w1").command.k0supdate.is_some());

    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
}

#[test]
fn progress_counts_completed_node_updates_over_every_command() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w1"])
            .then_k0s_update(V)
            .controllers(["c1"])
            .workers(["w1", "w2"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1", "w2"]),
    );
    let progress = |sim: &Sim| sim.plan.status.as_ref().and_then(|s| s.progress.clone());

    sim.pass();
    assert_eq!(progress(&sim).as_deref(), Some("0/4"));
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(progress(&sim).as_deref(), Some("1/4"), "the airgap update of w1 counts");
    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(progress(&sim).as_deref(), Some("2/4"));
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(progress(&sim).as_deref(), Some("3/4"));
    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Failed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert_eq!(progress(&sim).as_deref(), Some("3/4"), "a failed node is not progress");
}

#[test]
fn a_plan_that_ends_before_signalling_shows_nothing_done_of_every_listed_target() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1", "gone"]),
        ClusterFixture::new().controllers(["c1"]),
    );
    sim.pass();
    assert_eq!(sim.plan.state(), P::IncompleteTargets);
    let status = sim.plan.status.as_ref().expect("a status");
    assert_eq!(status.progress.as_deref(), Some("0/2"), "{status:?}");
}
