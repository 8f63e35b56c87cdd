//! NewPlan's removed-API check: findings that stop a plan, the ones that do not, and when the
//! shell is asked for them.

use autopilot_api::v1beta2::PlanStateType as P;

use super::fixtures::*;
use super::support::*;
use crate::plan::ObjectKind::ControlNode;
use crate::plan::{Requeue, step};

fn removed_crd() -> super::RemovedApiUse {
    removed_api("removedcrds", "k0s.k0sproject.example.com", "v1beta1", "v99.99.99", 1)
}

#[test]
fn a_removed_api_in_use_ends_in_warning_with_the_k0s_message() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update("v99.99.99+k0s.0").controllers(["c1"]),
        ClusterFixture::new().controllers(["c1"]).using_removed_api(removed_crd()),
    );
    let transition = sim.pass();
    assert!(signalled(&transition).is_empty());
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(sim.plan.command(0).state, P::Warning);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some(
            "removedcrds.k0s.k0sproject.example.com v1beta1 has been removed in Kubernetes \
             v99.99.99, but there are 1 such resources in the cluster"
        )
    );
}

#[test]
fn forceupdate_skips_the_removed_api_check_but_airgap_never_does() {
    // v99 skips minor versions: allowed here, this test is about the removed-API check.
    let forced = PlanFixture::k0s_update("v99.99.99+k0s.0")
        .controllers(["c1"])
        .forced()
        .allowing_skew("id123");
    assert!(super::removed_api_check_versions(forced.view()).is_empty());
    let mut sim = Sim::new(
        forced,
        ClusterFixture::new().controllers(["c1"]).using_removed_api(removed_crd()),
    );
    let transition = sim.pass();
    assert_eq!(signalled(&transition), [(ControlNode, "c1".to_owned())]);

    let airgap = PlanFixture::airgap_update("v99.99.99+k0s.0").workers(["w1"]);
    assert_eq!(super::removed_api_check_versions(airgap.view()), ["v99.99.99+k0s.0"]);
}

#[test]
fn a_non_blocking_or_older_removed_api_does_not_stop_the_plan() {
    let mut non_blocking = removed_crd();
    non_blocking.blocking = false;
    let mut sim = Sim::new(
        PlanFixture::airgap_update("v99.99.99").workers(["w1"]),
        ClusterFixture::new().workers(["w1"]).using_removed_api(non_blocking),
    );
    sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);

    // A finding for v1.32 does not block an update to v1.31.
    let plan = PlanFixture::airgap_update("v1.31.0+k0s.0").workers(["w1"]);
    let findings =
        [removed_api("flowschemas", "flowcontrol.apiserver.k8s.io", "v1beta3", "v1.32.0", 3)];
    let cluster = ClusterFixture::new().workers(["w1"]);
    let reviewed = cluster.reviewed();
    let observed = super::Observed {
        gate_answers: &crate::plan::NO_GATE_ANSWERS,
        plan_access: &reviewed,
        now: cluster.now,
        term_started: None,
        control_nodes: &cluster.control_nodes,
        nodes: &cluster.nodes,
        readiness: &Default::default(),
        api_versions: &crate::plan::NO_API_VERSIONS,
        removed_apis: Some(&findings),
        check_pods: super::CheckPods::NONE,
    };
    assert_eq!(step(plan.view(), &observed, &policy()).status.state, P::SchedulableWait);
}

#[test]
fn a_run_that_needs_the_removed_api_check_waits_for_its_findings() {
    let plan = PlanFixture::airgap_update(V).workers(["w1"]);
    let cluster = ClusterFixture::new().workers(["w1"]);
    let reviewed = cluster.reviewed();
    let observed = super::Observed {
        gate_answers: &crate::plan::NO_GATE_ANSWERS,
        plan_access: &reviewed,
        now: cluster.now,
        term_started: None,
        control_nodes: &cluster.control_nodes,
        nodes: &cluster.nodes,
        readiness: &Default::default(),
        api_versions: &crate::plan::NO_API_VERSIONS,
        removed_apis: None,
        check_pods: super::CheckPods::NONE,
    };
    let transition = step(plan.view(), &observed, &policy());
    assert_eq!(transition.status, Default::default());
    assert!(transition.effects.is_empty());
    assert_eq!(transition.requeue, Requeue::After(super::REMOVED_API_RECHECK));
}

#[test]
fn the_removed_api_check_is_asked_for_only_when_a_run_starts() {
    let plan =
        PlanFixture::airgap_update(V).workers(["w1"]).then_k0s_update(V).then_airgap_update(V);
    assert_eq!(super::removed_api_check_versions(plan.view()), [V]);
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1"]));
    sim.pass();
    assert!(super::removed_api_check_versions(sim.plan.view()).is_empty());
    assert!(super::removed_api_check_versions(sim.plan.clone().named("other").view()).is_empty());
}
