//! NewPlan's discovery: static targets and selectors, controller workers, and the states a
//! plan ends in when a target is missing, has no platform, or is excluded.

use autopilot_api::keys;
use autopilot_api::v1beta2::{PlanStateType as P, TargetState};

use super::fixtures::*;
use super::support::*;
use crate::plan::ObjectKind::Node;

#[test]
fn static_targets_are_deduplicated_and_sorted_by_name() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w3", "w1", "w3", "w2"]).concurrent(3),
        ClusterFixture::new().workers(["w1", "w2", "w3"]),
    );
    sim.pass();
    let names: Vec<_> = sim.plan.target_states(0).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["w1", "w2", "w3"]);
}

#[test]
fn a_label_and_field_selector_must_both_match() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .worker_selector(Some("role=edge"), Some("metadata.name!=w2"))
            .concurrent(5),
        ClusterFixture::new()
            .workers(["w1", "w2", "w3", "w4"])
            .label("w1", "role", "edge")
            .label("w2", "role", "edge")
            .label("w3", "role", "edge"),
    );
    sim.pass();
    let names: Vec<_> = sim.plan.target_states(0).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["w1", "w3"]);
}

#[test]
fn an_empty_selector_selects_every_object_of_the_kind() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controller_selector(None, None).worker_selector(None, None),
        ClusterFixture::new().controllers(["c1", "c2"]).workers(["w1", "w2"]),
    );
    sim.pass();
    let names: Vec<_> = sim.plan.target_states(0).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["c1", "c2", "w1", "w2"]);
}

#[test]
fn a_selector_that_does_not_parse_ends_in_incomplete_targets_and_selects_nothing() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).worker_selector(Some("zone in (a"), None),
        ClusterFixture::new().workers(["w1"]),
    );
    let transition = sim.pass();
    assert_eq!(sim.plan.state(), P::IncompleteTargets);
    assert_eq!(sim.plan.command(0).state, P::IncompleteTargets);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(
        description.starts_with(
            r#"command 0 (airgapupdate): workers label selector "zone in (a" is invalid: "#
        ),
        "{description}"
    );
    assert!(signalled(&transition).is_empty());
    assert!(sim.plan.target_states(0).is_empty());
}

#[test]
fn a_field_selector_on_another_field_is_an_error() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).worker_selector(None, Some("spec.unschedulable=false")),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.pass();
    assert_eq!(sim.plan.state(), P::IncompleteTargets);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.contains("workers field selector"), "{description}");
    assert!(description.contains("unsupported field selector"), "{description}");
}

#[test]
fn static_discovery_wins_over_a_selector_and_neither_targets_nothing() {
    let mut plan = PlanFixture::airgap_update(V).workers(["w2"]);
    let workers = &mut plan.spec.commands[0].airgapupdate.as_mut().expect("airgap").workers;
    workers.discovery.selector = Some(Default::default());
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2"]));
    sim.pass();
    assert_eq!(sim.plan.target_states(0), [("w2".to_owned(), TargetState::SignalSent)]);

    let mut plan = PlanFixture::airgap_update(V).workers(["w2"]);
    plan.spec.commands[0].airgapupdate.as_mut().expect("airgap").workers.discovery =
        Default::default();
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2"]));
    sim.pass();
    assert!(sim.plan.target_states(0).is_empty());
    assert_eq!(sim.plan.state(), P::Completed);
}

#[test]
fn a_controller_worker_is_updated_once_as_a_controller() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controller_selector(None, None).worker_selector(None, None),
        ClusterFixture::new().controller_workers(["cw1"]).controllers(["c1"]).workers(["w1"]),
    );
    sim.pass();
    let command = sim.plan.command(0);
    let k0s = command.k0supdate.as_ref().expect("k0s status");
    let controllers: Vec<_> = k0s.controllers.iter().map(|t| t.name.as_str()).collect();
    let workers: Vec<_> = k0s.workers.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(controllers, ["c1", "cw1"]);
    assert_eq!(workers, ["w1"]);
}

#[test]
fn a_controller_worker_whose_control_node_has_no_platform_stays_a_worker() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).worker_selector(None, None),
        ClusterFixture::new().controller_workers(["cw1"]),
    );
    sim.cluster(|mut c| {
        let control_node = c.control_nodes.get_mut("cw1").expect("cw1");
        control_node.labels.insert(keys::LABEL_ARCH.to_owned(), "riscv64".to_owned());
        c
    });
    sim.pass();
    assert_eq!(sim.plan.target_states(0), [("cw1".to_owned(), TargetState::SignalSent)]);
}

#[test]
fn airgap_targets_controller_worker_nodes_too() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).worker_selector(None, None).concurrent(2),
        ClusterFixture::new().controller_workers(["cw1"]).workers(["w1"]),
    );
    let transition = sim.pass();
    assert_eq!(signalled(&transition), [(Node, "cw1".to_owned()), (Node, "w1".to_owned())]);
}

#[test]
fn a_missing_static_target_ends_in_incomplete_targets_naming_it() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1", "w9"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]),
    );
    let transition = sim.pass();
    assert!(signalled(&transition).is_empty());
    assert_eq!(sim.plan.state(), P::IncompleteTargets);
    assert_eq!(sim.plan.command(0).state, P::IncompleteTargets);
    assert_eq!(sim.plan.target_state(0, "w9"), TargetState::MissingSignalNode);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalPending);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some("command 0 (k0supdate): targets without an object: Node w9")
    );
    let wire = serde_json::to_value(sim.plan.target(0, "w9")).expect("serialise");
    assert_eq!(wire["state"], "SignalMissingNode");
}

#[test]
fn a_target_without_a_platform_entry_ends_in_missing_platform_naming_it() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1", "w2"]),
        ClusterFixture::new()
            .controllers(["c1"])
            .workers(["w1", "w2"])
            .platform("w1", "windows", "amd64")
            .without_platform_labels("w2"),
    );
    let transition = sim.pass();
    assert!(signalled(&transition).is_empty());
    assert_eq!(sim.plan.state(), P::MissingPlatform);
    assert_eq!(sim.plan.command(0).state, P::MissingPlatform);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::MissingPlatform);
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::MissingPlatform);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some(
            "command 0 (k0supdate): targets without a platform: Node w1 (platforms has no entry \
             for windows-amd64), Node w2 (labels kubernetes.io/os and kubernetes.io/arch are \
             missing)"
        )
    );
}

#[test]
fn excluded_node_kinds_end_in_restricted() {
    let plan = PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1"]);
    let cluster = ClusterFixture::new().controllers(["c1"]).workers(["w1"]);
    let mut sim =
        Sim::new(plan.clone(), cluster.clone()).with_policy(|p| p.exclude_controllers = true);
    let transition = sim.pass();
    assert!(signalled(&transition).is_empty());
    assert_eq!(sim.plan.state(), P::Restricted);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some(
            "command 0 (k0supdate) targets controllers (c1), which this controller excludes \
             from plans (--exclude-from-plans)"
        )
    );

    // Excluding workers does not restrict a plan that targets only controllers.
    let mut sim = Sim::new(PlanFixture::k0s_update(V).controllers(["c1"]), cluster)
        .with_policy(|p| p.exclude_workers = true);
    sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_failed_command_and_the_plan_share_the_state_and_later_commands_stay_new() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w1"])
            .then_k0s_update(V)
            .controllers(["c9"])
            .then_airgap_update(V)
            .workers(["w1"]),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.pass();
    let states: Vec<_> = sim.plan.status().commands.iter().map(|c| c.state).collect();
    assert_eq!(states, [P::SchedulableWait, P::IncompleteTargets, P::NewPlan]);
    assert_eq!(sim.plan.state(), P::IncompleteTargets);
    assert!(sim.plan.status().commands.iter().all(|c| c.frozen.is_some()));
}
