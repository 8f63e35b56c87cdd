//! Scenarios and helpers shared by the topic modules and the transition table: the version
//! the scenarios install, the signal a run sends, and plans caught mid-run.

use std::time::Duration;

use autopilot_api::fixtures::{SignalBuilder, airgap_signal, k0s_signal};
use autopilot_api::signal::{SignalData, SignalPhase};
use autopilot_api::v1beta2::PlanStateType;

use super::fixtures::*;
use crate::plan::ObjectKind;

use ObjectKind::ControlNode;
use PlanStateType as P;

pub(super) const V: &str = "v1.31.1+k0s.0";

pub(super) fn minutes(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

/// The signal the plan's current run sends for command `index` (as if written earlier).
pub(super) fn run_signal(plan: &PlanFixture, index: u32, phase: Option<SignalPhase>) -> SignalData {
    let command = &plan.spec.commands[index as usize];
    let data = if let Some(k0s) = &command.k0supdate {
        let url = &k0s.platforms["linux-amd64"].url;
        k0s_signal(&plan.spec.id, &k0s.version, url, &sha('a')).forceupdate(k0s.forceupdate)
    } else {
        let airgap = command.airgapupdate.as_ref().expect("a command");
        airgap_signal(
            &plan.spec.id,
            &airgap.version,
            &airgap.platforms["linux-amd64"].url,
            &sha('a'),
        )
    };
    let data = data.for_command(index).created(START).in_run(&plan.run_id());
    match phase {
        Some(phase) => data.with_status(autopilot_api::signal::SignalStatus::new(phase, start())),
        None => data,
    }
}

pub(super) fn two_controllers_one_worker() -> Sim {
    Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1", "c2"]).workers(["w1"]),
        ClusterFixture::new().controllers(["c1", "c2"]).workers(["w1"]),
    )
}

pub(super) fn one_airgap_worker() -> Sim {
    Sim::new(PlanFixture::airgap_update(V).workers(["w1"]), ClusterFixture::new().workers(["w1"]))
}

/// A k0s plan held because its only worker is not Ready.
pub(super) fn held_on_worker() -> Sim {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]).worker_not_ready("w1"),
    );
    sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
    sim
}

/// A k0s plan held because controller c2 is down.
pub(super) fn held_on_controller() -> Sim {
    let mut sim = two_controllers_one_worker();
    sim.cluster(|c| c.controller_down("c2", "connection refused"));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
    sim
}

/// A plan in SchedulableWait with c1 completed and c2 next.
pub(super) fn first_controller_done() -> Sim {
    let mut sim = two_controllers_one_worker();
    sim.pass();
    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed));
    sim
}

pub(super) const PLAIN_URL: &str = "http://files.internal/k0s-linux-amd64";

/// One worker on linux-amd64, updated by an airgap command whose amd64 entry is `url` with
/// `sha256`.
pub(super) fn one_worker_downloading(url: &str, sha256: Option<&str>) -> Sim {
    Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]).payload("linux-amd64", url, sha256),
        ClusterFixture::new().workers(["w1"]),
    )
}
