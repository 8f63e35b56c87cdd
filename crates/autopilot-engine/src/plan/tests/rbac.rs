//! NewPlan's access review (`crate::plan::rbac`): workers that may not read the Plan end the
//! run `Warning` before any node is signalled; a review that could not be made lets the run
//! go on with one Warning Event; one review stands for every worker.

use autopilot_api::v1beta2::PlanStateType as P;

use super::fixtures::*;
use super::support::*;
use crate::plan::ObjectKind::{ControlNode, Node};
use crate::plan::phases::reasons;
use crate::plan::{EventKind, PlanAccess, PlanReader, Requeue, step};

/// Controller c1 and workers w1, w2, w3, all targeted; the API server answers every
/// access review with `access`.
fn fleet(access: PlanAccess) -> Sim {
    let mut cluster = ClusterFixture::new().controllers(["c1"]).workers(["w1", "w2", "w3"]);
    cluster.plan_access = access;
    Sim::new(PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1", "w2", "w3"]), cluster)
}

#[test]
fn workers_that_may_not_read_the_plan_end_it_warning_at_new_plan_naming_identity_and_fix() {
    let mut sim = fleet(PlanAccess::Denied("no RBAC policy matched".to_owned()));
    let transition = sim.pass();
    assert!(signalled(&transition).is_empty(), "no node signalled, not even the controller");
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(sim.plan.command(0).state, P::Warning);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert_eq!(
        description,
        "the workers may not read the Plan: system:node:w1 (groups system:nodes, \
         system:authenticated) may not get plans.autopilot.k0sproject.io \"autopilot\" (the \
         API server said: no RBAC policy matched), and every signalled worker's agent reads it \
         with its own identity and would refuse its signal (forbidden). Apply the worker RBAC \
         (ClusterRole and ClusterRoleBinding k0s-autopilot-worker): kubectl apply -f \
         manifests/rbac/worker.yaml"
    );
    let warned = events(&transition).into_iter().any(|(kind, reason, note)| {
        kind == EventKind::Warning
            && reason == reasons::PLAN_STATE_CHANGED
            && note.contains("manifests/rbac/worker.yaml")
    });
    assert!(warned, "{:?}", events(&transition));
    // Ended: the next pass changes nothing and signals nobody.
    let again = sim.pass();
    assert!(signalled(&again).is_empty());
    assert_eq!(sim.plan.state(), P::Warning);
}

#[test]
fn workers_that_may_read_the_plan_run_as_before_and_no_event_is_said_about_it() {
    let mut sim = fleet(PlanAccess::Allowed);
    let transition = sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(signalled(&transition), [(ControlNode, "c1".to_owned())]);
    assert!(!event_reasons(&transition).contains(&reasons::PLAN_ACCESS_UNCHECKED));
}

#[test]
fn a_review_that_could_not_be_made_lets_the_run_go_on_and_says_so_once() {
    let why = "this identity may not create subjectaccessreviews.authorization.k8s.io: no";
    let mut sim = fleet(PlanAccess::Unknown(why.to_owned()));
    let transition = sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(signalled(&transition), [(ControlNode, "c1".to_owned())]);
    let unchecked: Vec<_> = events(&transition)
        .into_iter()
        .filter(|(_, reason, _)| *reason == reasons::PLAN_ACCESS_UNCHECKED)
        .collect();
    let [(kind, _, note)] = unchecked.as_slice() else { panic!("one Event: {unchecked:?}") };
    assert_eq!(*kind, EventKind::Warning);
    assert!(note.starts_with("could not check whether the workers may read Plan autopilot"));
    assert!(note.contains(why), "{note}");
    // Later passes of the run say nothing more about it.
    sim.cluster(|c| c.reports(ControlNode, "c1", autopilot_api::signal::SignalPhase::Completed));
    let next = sim.pass();
    assert_eq!(signalled(&next), [(Node, "w1".to_owned())]);
    assert!(!event_reasons(&next).contains(&reasons::PLAN_ACCESS_UNCHECKED));
}

#[test]
fn a_new_run_waits_for_one_review_that_stands_for_every_worker_of_every_command() {
    let plan = PlanFixture::k0s_update(V)
        .controllers(["c1"])
        .workers(["w2", "w3"])
        .then_airgap_update(V)
        .workers(["w1", "w2", "w3"]);
    let cluster = ClusterFixture::new().controllers(["c1"]).workers(["w1", "w2", "w3"]);
    let observed = crate::plan::Observed {
        plan_access: &crate::plan::NO_PLAN_ACCESS,
        ..cluster.dry_run_view()
    };
    let transition = step(plan.view(), &observed, &policy());
    // Unchanged, nobody signalled, and one identity to ask about: the first worker target.
    assert_eq!(transition.status, Default::default());
    assert!(transition.effects.is_empty());
    assert_eq!(transition.requeue, Requeue::After(super::REMOVED_API_RECHECK));
    assert_eq!(transition.needs.plan_readers, [PlanReader::worker("w2")]);
}

#[test]
fn controllers_alone_need_no_review_and_a_controller_worker_is_no_workers_representative() {
    // Controllers read the Plan with the controller credentials, which let the leader read it.
    let plan = PlanFixture::k0s_update(V).controllers(["c1"]);
    let cluster = ClusterFixture::new().controllers(["c1"]);
    let transition = step(plan.view(), &cluster.dry_run_view(), &policy());
    assert!(transition.needs.plan_readers.is_empty());
    assert_eq!(signalled(&transition), [(ControlNode, "c1".to_owned())]);

    // A controller+worker's Node reads with the controller credentials too: not asked about.
    let plan = PlanFixture::airgap_update(V).workers(["c1", "w1"]);
    let cluster = ClusterFixture::new().controller_workers(["c1"]).workers(["w1"]);
    let transition = step(plan.view(), &cluster.dry_run_view(), &policy());
    assert_eq!(transition.needs.plan_readers, [PlanReader::worker("w1")]);
    let plan = PlanFixture::airgap_update(V).workers(["c1"]);
    let transition = step(plan.view(), &cluster.dry_run_view(), &policy());
    assert!(transition.needs.plan_readers.is_empty());
    assert_eq!(signalled(&transition), [(Node, "c1".to_owned())]);
}

#[test]
fn a_refused_plan_drops_its_payload_warnings_since_nothing_is_downloaded() {
    let mut sim = one_worker_downloading("https://files.internal/k0s", None);
    sim.cluster(|mut c| {
        c.plan_access = PlanAccess::Denied(String::new());
        c
    });
    let transition = sim.pass();
    assert_eq!(sim.plan.state(), P::Warning);
    assert!(!event_reasons(&transition).contains(&reasons::UNVERIFIED_PAYLOAD));
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(!description.contains("the API server said"), "no reason, no quote: {description}");
}
