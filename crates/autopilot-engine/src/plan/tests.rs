//! Tests of the Plan engine's pure core: one table test per allowed transition, focused
//! scenario tests, and property tests over random clusters ([`props`]).

mod fixtures;
mod preflight;
mod props;
mod rollout;
mod steering;

use std::collections::BTreeSet;
use std::time::Duration;

use autopilot_api::keys::{self, conditions};
use autopilot_api::signal::{
    CommandAirgapUpdate, CommandK0sUpdate, SignalCommand, SignalData, SignalPhase,
};
use autopilot_api::v1beta2::{PlanCommand, PlanStateType, TargetState};
use jiff::Timestamp;

use self::fixtures::*;
use super::phases::{self, reasons};
use super::schedule::{MAX_NODE_REASON, cap_node_reason};
use super::{EventKind, ObjectKind, Readiness, Requeue, Transition, step};

const V: &str = "v1.35.1+k0s.0";

use ObjectKind::{ControlNode, Node};
use PlanStateType as P;

fn minutes(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

/// The signal the plan's current run sends for command `index` (as if written earlier).
fn run_signal(plan: &PlanFixture, index: u32, phase: Option<SignalPhase>) -> SignalData {
    let command = &plan.spec.commands[index as usize];
    let command = if let Some(k0s) = &command.k0supdate {
        SignalCommand {
            preflight: None,
            id: index,
            k0supdate: Some(CommandK0sUpdate {
                url: k0s.platforms["linux-amd64"].url.clone(),
                version: k0s.version.clone(),
                sha256: sha('a'),
                forceupdate: k0s.forceupdate,
            }),
            airgapupdate: None,
        }
    } else {
        let airgap = command.airgapupdate.as_ref().expect("a command");
        SignalCommand {
            preflight: None,
            id: index,
            k0supdate: None,
            airgapupdate: Some(CommandAirgapUpdate {
                url: airgap.platforms["linux-amd64"].url.clone(),
                version: airgap.version.clone(),
                sha256: sha('a'),
            }),
        }
    };
    let data = SignalData {
        plan_id: plan.spec.id.clone(),
        created: START.to_owned(),
        command,
        status: None,
        run_id: Some(plan.run_id()),
    };
    match phase {
        Some(phase) => data.with_status(autopilot_api::signal::SignalStatus::new(phase, start())),
        None => data,
    }
}

// === Table tests: every transition of the phase tables ===

fn two_controllers_one_worker() -> Sim {
    Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1", "c2"]).workers(["w1"]),
        ClusterFixture::new().controllers(["c1", "c2"]).workers(["w1"]),
    )
}

fn one_airgap_worker() -> Sim {
    Sim::new(PlanFixture::airgap_update(V).workers(["w1"]), ClusterFixture::new().workers(["w1"]))
}

/// A k0s plan held because its only worker is not Ready.
fn held_on_worker() -> Sim {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]).worker_not_ready("w1"),
    );
    sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
    sim
}

/// A k0s plan held because controller c2 is down.
fn held_on_controller() -> Sim {
    let mut sim = two_controllers_one_worker();
    sim.cluster(|c| c.controller_down("c2", "connection refused"));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
    sim
}

/// A plan in SchedulableWait with c1 completed and c2 next.
fn first_controller_done() -> Sim {
    let mut sim = two_controllers_one_worker();
    sim.pass();
    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed));
    sim
}

/// The scenarios of the transition table: each ends right before the pass that makes the
/// transition.
fn transition_cases() -> Vec<(&'static str, PlanStateType, PlanStateType, Sim)> {
    let mut cases = Vec::new();
    let mut case = |name, from, to, sim: Sim| cases.push((name, from, to, sim));

    // From NewPlan.
    case(
        "newplan signals the first controller",
        P::NewPlan,
        P::SchedulableWait,
        two_controllers_one_worker(),
    );
    let mut sim = two_controllers_one_worker();
    sim.cluster(|c| c.controller_down("c2", "timeout"));
    case("newplan holds for a down controller", P::NewPlan, P::Schedulable, sim);
    case(
        "newplan without targets completes",
        P::NewPlan,
        P::Completed,
        Sim::new(PlanFixture::k0s_update(V), ClusterFixture::new()),
    );
    case(
        "newplan with a missing static target",
        P::NewPlan,
        P::IncompleteTargets,
        Sim::new(
            PlanFixture::k0s_update(V).controllers(["c1", "c9"]),
            ClusterFixture::new().controllers(["c1"]),
        ),
    );
    case(
        "newplan with an unknown platform",
        P::NewPlan,
        P::MissingPlatform,
        Sim::new(
            PlanFixture::airgap_update(V).workers(["w1"]),
            ClusterFixture::new().workers(["w1"]).platform("w1", "windows", "amd64"),
        ),
    );
    let mut sim = two_controllers_one_worker().with_policy(|p| p.readiness_grace = Duration::ZERO);
    sim.cluster(|c| c.controller_down("c2", "timeout"));
    case("newplan with no readiness grace", P::NewPlan, P::InconsistentTargets, sim);
    case(
        "newplan targeting excluded workers",
        P::NewPlan,
        P::Restricted,
        one_airgap_worker().with_policy(|p| p.exclude_workers = true),
    );
    let plan = PlanFixture::airgap_update(V).workers(["w1"]);
    let failed = run_signal(&plan, 0, Some(SignalPhase::Failed));
    case(
        "newplan reads back a failure of this run (status lost)",
        P::NewPlan,
        P::ApplyFailed,
        Sim::new(plan, ClusterFixture::new().workers(["w1"]).with_signal(Node, "w1", failed)),
    );
    case(
        "newplan refuses an http payload without sha256",
        P::NewPlan,
        P::Warning,
        one_worker_downloading(PLAIN_URL, None),
    );
    case(
        "newplan finds a removed api in use",
        P::NewPlan,
        P::Warning,
        Sim::new(
            PlanFixture::airgap_update(V).workers(["w1"]),
            ClusterFixture::new().workers(["w1"]).using_removed_api(removed_api(
                "flowschemas",
                "flowcontrol.apiserver.k8s.io",
                "v1beta3",
                "v1.32.0",
                2,
            )),
        ),
    );

    // From SchedulableWait.
    let mut sim = first_controller_done();
    sim.cluster(|c| c.controller_down("c2", "timeout"));
    case("a controller completes and the next is down", P::SchedulableWait, P::Schedulable, sim);
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    case("the last node completes", P::SchedulableWait, P::Completed, sim);
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.without("w1"));
    case("a signalled node disappears", P::SchedulableWait, P::MissingSignalNode, sim);
    let mut sim = one_airgap_worker();
    sim.pass_without_signals();
    sim.cluster(|c| c.without_platform_labels("w1"));
    case("a resend finds no platform", P::SchedulableWait, P::MissingPlatform, sim);
    let mut sim = first_controller_done().with_policy(|p| p.readiness_grace = Duration::ZERO);
    sim.cluster(|c| c.controller_down("c2", "timeout"));
    case(
        "the next controller is down with no grace",
        P::SchedulableWait,
        P::InconsistentTargets,
        sim,
    );
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::FailedDownload, "sha256 mismatch"));
    case("a signalled node fails", P::SchedulableWait, P::ApplyFailed, sim);

    // From Schedulable.
    let mut sim = held_on_controller();
    sim.cluster(|c| c.controller_up("c2"));
    case("the down controller comes back", P::Schedulable, P::SchedulableWait, sim);
    let mut sim = held_on_worker();
    let done = run_signal(&sim.plan, 0, Some(SignalPhase::Completed));
    sim.cluster(|c| c.with_signal(Node, "w1", done));
    case("a held node already completed this run", P::Schedulable, P::Completed, sim);
    let mut sim = held_on_worker();
    sim.cluster(|c| c.without("w1"));
    case("a held node disappears", P::Schedulable, P::MissingSignalNode, sim);
    let mut sim = held_on_worker();
    sim.cluster(|c| c.worker_ready("w1").without_platform_labels("w1"));
    case("a held node loses its platform", P::Schedulable, P::MissingPlatform, sim);
    let mut sim = held_on_controller();
    sim.cluster(|c| c.later(minutes(10)));
    case("the grace runs out", P::Schedulable, P::InconsistentTargets, sim);
    let mut sim = held_on_worker();
    let failed = run_signal(&sim.plan, 0, Some(SignalPhase::Failed));
    sim.cluster(|c| c.with_signal(Node, "w1", failed));
    case("a held node already failed this run", P::Schedulable, P::ApplyFailed, sim);
    let mut sim = held_on_worker();
    sim.plan(|p| p.steered(false, true));
    case("a held plan is aborted", P::Schedulable, P::Aborted, sim);

    // A preflight command's checks end in error.
    let preflight: autopilot_api::v1beta2::PlanCommandPreflight =
        serde_json::from_value(serde_json::json!({"checks": [{
            "id": "api-port",
            "targets": {"all": true},
            "command": {"id": "portAvailable", "data": {"port": 6443}},
            "results": [{"status": "success", "message": "free", "condition": {"statusCode": 0}}]
        }]}))
        .expect("a preflight command");
    let mut sim = Sim::new(
        PlanFixture::without_commands()
            .then_command(PlanCommand { preflight: Some(preflight), ..PlanCommand::default() }),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.pass();
    let in_use = autopilot_api::preflight::RawRecord::failure(98, "address in use");
    sim.cluster(|c| c.reports_checks(Node, "w1", &[("api-port", in_use)]));
    case("a preflight check ends in error", P::SchedulableWait, P::PreflightFailed, sim);

    // Stopping after an abort.
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.plan(|p| p.steered(false, true));
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    case(
        "the last node in flight of an aborted plan completes",
        P::SchedulableWait,
        P::Aborted,
        sim,
    );

    cases
}

#[test]
fn every_allowed_transition_is_exercised_by_a_scenario() {
    let mut plan_edges = BTreeSet::new();
    let mut command_edges = BTreeSet::new();
    let mut target_edges = BTreeSet::new();
    for (name, from, to, mut sim) in transition_cases() {
        let before = sim.plan.status.clone();
        assert_eq!(
            before.as_ref().map_or(P::NewPlan, |s| s.state),
            from,
            "{name}: starts in {from}"
        );
        let transition = sim.pass();
        assert_eq!(transition.status.state, to, "{name}: {:#?}", transition.status);
        assert!(
            phases::plan_transition_allowed(from, to),
            "{name}: {from} -> {to} is in the table"
        );
        plan_edges.insert((from, to));
        let base = before.unwrap_or_default();
        for command in &transition.status.commands {
            let old = base.commands.iter().find(|c| c.id == command.id);
            let old_state = old.map_or(P::NewPlan, |c| c.state);
            if old_state != command.state {
                command_edges.insert((old_state, command.state));
            }
            for target in all_targets(command) {
                let old_target = old
                    .and_then(|old| all_targets(old).into_iter().find(|t| t.name == target.name));
                if let Some(old_target) = old_target
                    && old_target.state != target.state
                {
                    target_edges.insert((old_target.state, target.state));
                }
            }
        }
    }
    let table: BTreeSet<_> = phases::plan_transitions().collect();
    assert_eq!(plan_edges, table, "plan transitions exercised vs the table");
    assert!(command_edges.is_subset(&table), "command transitions: {command_edges:?}");
    let target_table: BTreeSet<_> = phases::target_transitions().collect();
    assert_eq!(target_edges, target_table, "target transitions exercised vs the table");
}

// === NewPlan: discovery ===

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

// === NewPlan: command kinds and the removed-API check ===

#[test]
fn a_command_with_both_or_neither_kind_ends_in_warning() {
    let both = PlanCommand {
        k0supdate: PlanFixture::k0s_update(V).spec.commands[0].k0supdate.clone(),
        airgapupdate: PlanFixture::airgap_update(V).spec.commands[0].airgapupdate.clone(),
        preflight: None,
    };
    let mut sim =
        Sim::new(PlanFixture::without_commands().then_command(both), ClusterFixture::new());
    sim.pass();
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some("command 0 sets both k0supdate and airgapupdate; exactly one is required")
    );

    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).then_command(PlanCommand::default()),
        ClusterFixture::new(),
    );
    sim.pass();
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(sim.plan.command(0).state, P::SchedulableWait);
    assert_eq!(sim.plan.command(1).state, P::Warning);
    assert_eq!(
        sim.plan.command(1).description.as_deref(),
        Some("command 1 sets neither k0supdate nor airgapupdate; exactly one is required")
    );
}

// === NewPlan: fields the schema lets through but no node or scheduler could act on ===

/// A one-command plan (`k0supdate` of controller c1 and workers w1, w2) on a cluster that
/// has them, with `edit` applied to the spec.
fn k0s_plan_with(edit: impl FnOnce(&mut autopilot_api::PlanSpec)) -> Sim {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1", "w2"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1", "w2"]),
    );
    sim.plan(|p| p.edited(edit));
    sim
}

fn k0s_limits<'a>(
    spec: &'a mut autopilot_api::PlanSpec,
    group: &str,
) -> &'a mut autopilot_api::v1beta2::PlanCommandTargetLimits {
    let targets = &mut spec.commands[0].k0supdate.as_mut().expect("k0s").targets;
    let target = match group {
        "controllers" => targets.controllers.as_mut(),
        "workers" => targets.workers.as_mut(),
        other => panic!("no group {other}"),
    };
    &mut target.expect("the group is targeted").limits
}

/// Runs a few passes and asserts the plan ended `Warning` in the first one, with no node
/// ever signalled; returns the command's description.
fn refused_up_front(sim: &mut Sim, command: usize) -> String {
    for _ in 0..3 {
        let transition = sim.pass();
        assert!(signalled(&transition).is_empty(), "{transition:?}");
        assert_eq!(sim.plan.state(), P::Warning);
        assert_eq!(sim.plan.command(command).state, P::Warning);
    }
    sim.plan.command(command).description.clone().expect("a description")
}

#[test]
fn a_soak_that_is_not_a_duration_is_refused_naming_the_field() {
    let mut sim = k0s_plan_with(|spec| {
        let limits = k0s_limits(spec, "workers");
        limits.canary = Some(1);
        limits.soak = Some("soon".to_owned());
    });
    assert_eq!(
        refused_up_front(&mut sim, 0),
        "commands[0].k0supdate.targets.workers.limits.soak: \"soon\" is not a duration (e.g. \
         30s, 5m, 1h30m)"
    );
}

#[test]
fn a_soak_without_a_canary_is_refused_naming_both_fields() {
    let mut sim = k0s_plan_with(|spec| k0s_limits(spec, "workers").soak = Some("10m".into()));
    let description = refused_up_front(&mut sim, 0);
    assert!(
        description.starts_with(
            "commands[0].k0supdate.targets.workers.limits.soak: \"10m\" is set without \
             commands[0].k0supdate.targets.workers.limits.canary"
        ),
        "{description}"
    );
}

#[test]
fn a_canary_max_failures_or_soak_on_controllers_is_refused_naming_the_field() {
    type Edit = fn(&mut autopilot_api::v1beta2::PlanCommandTargetLimits);
    let cases: [(&str, Edit); 3] = [
        ("canary", |limits| limits.canary = Some(1)),
        ("maxFailures", |limits| limits.max_failures = Some(2)),
        ("soak", |limits| limits.soak = Some("10m".into())),
    ];
    for (field, edit) in cases {
        let mut sim = k0s_plan_with(|spec| edit(k0s_limits(spec, "controllers")));
        let description = refused_up_front(&mut sim, 0);
        let path = format!("commands[0].k0supdate.targets.controllers.limits.{field}: ");
        assert!(description.starts_with(&path), "{description}");
        assert!(description.contains("not allowed on controllers"), "{description}");
    }
}

#[test]
fn limits_that_mean_the_default_on_controllers_are_accepted() {
    let mut sim = k0s_plan_with(|spec| {
        let limits = k0s_limits(spec, "controllers");
        limits.max_failures = Some(0);
        limits.concurrent = autopilot_api::v1beta2::Concurrency::Count(3);
    });
    sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_canary_with_a_soak_on_workers_is_accepted() {
    let mut sim = k0s_plan_with(|spec| {
        let limits = k0s_limits(spec, "workers");
        limits.canary = Some(1);
        limits.soak = Some("1h30m".into());
        limits.max_failures = Some(1);
    });
    sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_url_the_node_would_refuse_is_refused_before_any_signal_with_the_nodes_words() {
    for url in ["example.invalid/k0s", "https://files.internal:port/k0s", "http://h/k 0s"] {
        let mut sim = Sim::new(
            PlanFixture::k0s_update(V).workers(["w1"]).payload("linux-amd64", url, Some(&sha('a'))),
            ClusterFixture::new().workers(["w1"]),
        );
        let description = refused_up_front(&mut sim, 0);
        let problem = autopilot_api::payload::url_problem(url).expect("the node refuses it");
        assert_eq!(
            description,
            format!("commands[0].k0supdate.platforms.linux-amd64.url: {problem}")
        );
    }
}

#[test]
fn a_version_no_node_can_report_is_refused_naming_the_field() {
    for version in [" ", "v1.35.1 +k0s.0", "v1.35.1+k0s.0\n"] {
        let mut sim = Sim::new(
            PlanFixture::airgap_update(version).workers(["w1"]),
            ClusterFixture::new().workers(["w1"]),
        );
        let description = refused_up_front(&mut sim, 0);
        assert!(description.starts_with("commands[0].airgapupdate.version: "), "{description}");
    }
}

#[test]
fn every_field_problem_of_a_command_is_named_in_one_pass() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update("v1 2").workers(["w1"]).payload(
            "linux-arm64",
            "files.internal/bundle",
            None,
        ),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.plan(|p| {
        p.edited(|spec| {
            let airgap = spec.commands[0].airgapupdate.as_mut().expect("airgap");
            airgap.progress_timeout = Some("soon".into());
            airgap.workers.limits.soak = Some("forever".into());
        })
    });
    let description = refused_up_front(&mut sim, 0);
    let fields: Vec<&str> = description
        .split("; ")
        .filter_map(|problem| problem.split_once(": "))
        .map(|p| p.0)
        .collect();
    assert_eq!(
        fields,
        [
            "commands[0].airgapupdate.version",
            "commands[0].airgapupdate.platforms.linux-arm64.url",
            "commands[0].airgapupdate.progressTimeout",
            "commands[0].airgapupdate.workers.limits.soak",
            "commands[0].airgapupdate.workers.limits.soak",
        ],
        "{description}"
    );
}

#[test]
fn a_bad_field_in_a_later_command_refuses_the_plan_before_the_first_command_signals() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1"]).then_k0s_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.plan(|p| {
        p.edited(|spec| {
            let workers =
                spec.commands[1].k0supdate.as_mut().expect("k0s").targets.workers.as_mut();
            let limits = &mut workers.expect("workers").limits;
            limits.canary = Some(1);
            limits.soak = Some("soon".into());
        })
    });
    let description = refused_up_front(&mut sim, 1);
    assert!(
        description.starts_with("commands[1].k0supdate.targets.workers.limits.soak: "),
        "{description}"
    );
}

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
    let forced = PlanFixture::k0s_update("v99.99.99+k0s.0").controllers(["c1"]).forced();
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
    let observed = super::Observed {
        now: cluster.now,
        control_nodes: &cluster.control_nodes,
        nodes: &cluster.nodes,
        readiness: &Default::default(),
        removed_apis: Some(&findings),
        check_pods: super::CheckPods::NONE,
    };
    assert_eq!(step(plan.view(), &observed, &policy()).status.state, P::SchedulableWait);
}

#[test]
fn a_run_that_needs_the_removed_api_check_waits_for_its_findings() {
    let plan = PlanFixture::airgap_update(V).workers(["w1"]);
    let cluster = ClusterFixture::new().workers(["w1"]);
    let observed = super::Observed {
        now: cluster.now,
        control_nodes: &cluster.control_nodes,
        nodes: &cluster.nodes,
        readiness: &Default::default(),
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

// === NewPlan: payload authentication ===

const PLAIN_URL: &str = "http://files.internal/k0s-linux-amd64";

/// One worker on linux-amd64, updated by an airgap command whose amd64 entry is `url` with
/// `sha256`.
fn one_worker_downloading(url: &str, sha256: Option<&str>) -> Sim {
    Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]).payload("linux-amd64", url, sha256),
        ClusterFixture::new().workers(["w1"]),
    )
}

fn unverified_payload_warnings(t: &Transition) -> Vec<String> {
    events(t)
        .into_iter()
        .filter(|(kind, reason, _)| {
            *kind == EventKind::Warning && *reason == reasons::UNVERIFIED_PAYLOAD
        })
        .map(|(_, _, note)| note)
        .collect()
}

#[test]
fn an_http_payload_without_sha256_is_refused_before_any_node_is_signalled() {
    let mut sim = one_worker_downloading(PLAIN_URL, None);
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "no node is signalled: {t:#?}");
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(sim.plan.command(0).state, P::Warning);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some(
            "command 0 (airgapupdate): platform linux-amd64 \
             (http://files.internal/k0s-linux-amd64) has no sha256 and is not https, so \
             nothing would check what the nodes download; give its sha256, serve it over \
             https, or run the controller with --allow-unverified-payloads"
        )
    );
    assert!(unverified_payload_warnings(&t).is_empty(), "a refused plan downloads nothing");
    let state_change = events(&t)
        .into_iter()
        .find(|(_, reason, _)| *reason == reasons::PLAN_STATE_CHANGED)
        .expect("a plan state event");
    assert_eq!(state_change.0, EventKind::Warning);
    assert!(state_change.2.contains("--allow-unverified-payloads"), "{}", state_change.2);

    // Terminal: nothing more happens on the same spec.
    let t = sim.pass();
    assert!(t.effects.is_empty());
}

#[test]
fn an_empty_sha256_counts_as_none() {
    let mut sim = one_worker_downloading(PLAIN_URL, Some(""));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Warning);
}

#[test]
fn every_platform_entry_is_checked_even_one_no_target_needs() {
    // w1 is linux-amd64 with a verified payload; the arm64 entry has no node at all.
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]).payload(
            "linux-arm64",
            "http://files.internal/bundle-arm64",
            None,
        ),
        ClusterFixture::new().workers(["w1"]),
    );
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Warning);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.contains("platform linux-arm64"), "{description}");
    assert!(description.contains("http://files.internal/bundle-arm64"), "{description}");
}

#[test]
fn several_refused_entries_are_named_together_and_later_commands_wait() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w1"])
            .then_k0s_update(V)
            .workers(["w1"])
            .payload("linux-amd64", "http://a/k0s", None)
            .payload("linux-arm64", "http://b/k0s", Some("")),
        ClusterFixture::new().workers(["w1"]),
    );
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "command 0 was fine, but the plan never started");
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(sim.plan.command(0).state, P::SchedulableWait);
    assert_eq!(sim.plan.command(1).state, P::Warning);
    let description = sim.plan.command(1).description.clone().unwrap_or_default();
    assert!(
        description.starts_with(
            "command 1 (k0supdate): platform linux-amd64 (http://a/k0s), platform linux-arm64 \
             (http://b/k0s) have no sha256 and are not https"
        ),
        "{description}"
    );
    assert!(description.contains("give their sha256, serve them over https"), "{description}");
}

#[test]
fn an_http_payload_without_sha256_runs_when_the_controller_allows_it_with_a_warning() {
    let mut sim =
        one_worker_downloading(PLAIN_URL, None).with_policy(|p| p.allow_unverified_payloads = true);
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(
        unverified_payload_warnings(&t),
        ["command 0 (airgapupdate): platform linux-amd64 \
          (http://files.internal/k0s-linux-amd64) has no sha256: it is downloaded over plain \
          http (allowed by --allow-unverified-payloads) without an integrity check; give its \
          sha256 to have every node verify it"]
    );
    let update = signal_to(&t, "w1").command.airgapupdate.clone().expect("airgap");
    assert_eq!((update.url.as_str(), update.sha256.as_str()), (PLAIN_URL, ""));
}

#[test]
fn an_https_payload_without_sha256_runs_with_one_warning_per_run() {
    let url = "https://files.internal/bundle-amd64";
    let mut sim = one_worker_downloading(url, None);
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    let warnings = unverified_payload_warnings(&t);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("command 0 (airgapupdate): platform linux-amd64"));
    assert!(warnings[0].contains(url), "{}", warnings[0]);
    assert!(warnings[0].contains("without an integrity check"), "{}", warnings[0]);
    assert_eq!(
        event_reasons(&t)[..2],
        [reasons::PLAN_STARTED, reasons::UNVERIFIED_PAYLOAD],
        "announced right after the run starts"
    );

    // Later passes of the same run say nothing more about it.
    let t = sim.pass();
    assert!(unverified_payload_warnings(&t).is_empty());
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    assert!(unverified_payload_warnings(&t).is_empty());

    // A new run warns again.
    sim.plan(|p| p.edited(|spec| spec.timestamp = "again".to_owned()));
    let t = sim.pass();
    assert_eq!(unverified_payload_warnings(&t).len(), 1);
}

#[test]
fn a_plan_refused_for_another_reason_gives_no_payload_warning() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w9"]).payload(
            "linux-amd64",
            "https://files.internal/bundle",
            None,
        ),
        ClusterFixture::new().workers(["w1"]),
    );
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::IncompleteTargets);
    assert!(unverified_payload_warnings(&t).is_empty());
}

#[test]
fn verified_payloads_need_no_warning_whatever_the_scheme() {
    let mut sim = one_worker_downloading(PLAIN_URL, Some(&sha('b')));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert!(unverified_payload_warnings(&t).is_empty());
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

// === Scheduling ===

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

#[test]
fn a_controller_is_signalled_only_while_every_plan_controller_is_ready() {
    let mut sim = two_controllers_one_worker();
    sim.cluster(|c| c.controller_down("c2", "connection refused"));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Schedulable);
    let command = sim.plan.command(0);
    assert_eq!(command.state, P::Schedulable);
    assert_eq!(
        command.reason.as_deref(),
        Some("waiting for controller c2 to become ready: connection refused")
    );
    assert_eq!(command.not_ready_since.as_ref().map(|t| t.0), Some(start()));
    assert_eq!(t.requeue, Requeue::After(Duration::from_secs(2)));
    assert!(events(&t).iter().any(|(kind, reason, note)| {
        *kind == EventKind::Warning
            && *reason == reasons::CONTROLLER_NOT_READY
            && note.contains("c2")
    }));

    // Still down five minutes later: still held, since the first time it was seen down.
    sim.cluster(|c| c.later(minutes(5)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.command(0).not_ready_since.as_ref().map(|t| t.0), Some(start()));
    assert!(events(&t).is_empty(), "the same hold is not announced twice");

    // Close to the deadline, the requeue does not overshoot it.
    sim.cluster(|c| c.later(Duration::from_secs(299)));
    let t = sim.pass();
    assert_eq!(t.requeue, Requeue::After(Duration::from_secs(1)));

    // Back up: signal, and the hold is gone.
    sim.cluster(|c| c.controller_up("c2"));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(ControlNode, "c1".to_owned())]);
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(sim.plan.command(0).reason, None);
    assert_eq!(sim.plan.command(0).not_ready_since, None);
}

#[test]
fn a_controller_down_past_the_readiness_grace_ends_in_inconsistent_targets() {
    let mut sim = held_on_controller();
    sim.cluster(|c| c.later(minutes(9)));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
    sim.cluster(|c| c.later(minutes(1)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::InconsistentTargets);
    let command = sim.plan.command(0);
    assert_eq!(command.state, P::InconsistentTargets);
    assert_eq!(command.reason, None);
    assert_eq!(command.not_ready_since.as_ref().map(|t| t.0), Some(start()));
    assert_eq!(
        command.description.as_deref(),
        Some(
            "command 0 (k0supdate): controller c2 is not ready (connection refused); plan \
             controllers have not all been ready since 2024-05-01T12:00:00Z and the readiness \
             grace of 10m is over"
        )
    );
    // Terminal: even with c2 back, nothing moves.
    sim.cluster(|c| c.controller_up("c2"));
    let t = sim.pass();
    assert!(t.effects.is_empty());
    assert_eq!(sim.plan.state(), P::InconsistentTargets);
}

#[test]
fn a_controller_that_was_not_probed_counts_as_not_ready() {
    let plan = PlanFixture::k0s_update(V).controllers(["c1"]);
    let cluster = ClusterFixture::new().controllers(["c1"]);
    let observed = super::Observed {
        now: cluster.now,
        control_nodes: &cluster.control_nodes,
        nodes: &cluster.nodes,
        readiness: &Default::default(),
        removed_apis: Some(&[]),
        check_pods: super::CheckPods::NONE,
    };
    let t = step(plan.view(), &observed, &policy());
    assert_eq!(t.status.state, P::Schedulable);
    assert_eq!(
        t.status.commands[0].reason.as_deref(),
        Some("waiting for controller c1 to become ready: its /readyz was not probed")
    );
}

#[test]
fn a_pass_names_exactly_the_controllers_it_needs_probed() {
    let mut sim = two_controllers_one_worker();
    // A pass with no probe results (the removed-API check found nothing).
    let probe = |sim: &Sim| {
        let empty = Default::default();
        let observed = super::Observed {
            now: sim.cluster.now,
            control_nodes: &sim.cluster.control_nodes,
            nodes: &sim.cluster.nodes,
            readiness: &empty,
            removed_apis: Some(&[]),
            check_pods: super::CheckPods::NONE,
        };
        step(sim.plan.view(), &observed, &sim.policy).unprobed
    };
    assert_eq!(probe(&sim), ["c1", "c2"], "a new run signals a controller in its first pass");
    sim.pass();
    assert!(probe(&sim).is_empty(), "c1 in flight");
    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed));
    assert_eq!(probe(&sim), ["c1", "c2"], "c1's completion is read back in the same pass");
    sim.pass();
    sim.cluster(|c| c.reports(ControlNode, "c2", SignalPhase::Completed));
    assert!(probe(&sim).is_empty(), "only workers are left");
    assert!(
        probe(&Sim::new(PlanFixture::airgap_update(V).workers(["w1"]), sim.cluster.clone()))
            .is_empty()
    );
    let restricted = two_controllers_one_worker().with_policy(|p| p.exclude_controllers = true);
    assert!(probe(&restricted).is_empty());
}

#[test]
fn workers_that_are_not_ready_hold_a_k0s_update_without_a_deadline() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]).worker_not_ready("w1"),
    );
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w2".to_owned())], "w1 is skipped, w2 fills the slot");
    assert_eq!(sim.plan.state(), P::SchedulableWait);

    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Schedulable);
    let command = sim.plan.command(0);
    assert_eq!(command.reason.as_deref(), Some("waiting for worker w1 to become Ready"));
    assert_eq!(command.not_ready_since, None);
    assert_eq!(t.requeue, Requeue::OnChange);
    assert!(event_reasons(&t).contains(&reasons::WORKER_NOT_READY));

    sim.cluster(|c| c.later(minutes(60 * 24)));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable, "no deadline for workers");

    sim.cluster(|c| c.worker_ready("w1"));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(sim.plan.command(0).reason, None);
}

#[test]
fn airgap_updates_do_not_wait_for_ready_nodes() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]).worker_not_ready("w1"),
    );
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
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
fn a_new_phase_alone_does_not_touch_the_timestamp() {
    let mut sim = one_airgap_worker();
    sim.pass();
    let signalled_at = sim.plan.target(0, "w1").last_updated_timestamp.clone();
    sim.cluster(|c| c.later(minutes(2)).reports(Node, "w1", SignalPhase::Downloading));
    let t = sim.pass();
    assert_eq!(sim.plan.target(0, "w1").phase, Some(SignalPhase::Downloading));
    assert_eq!(sim.plan.target(0, "w1").last_updated_timestamp, signalled_at);
    assert!(events(&t).is_empty(), "a phase change is not a state change");
    sim.cluster(|c| c.later(minutes(2)).reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_ne!(sim.plan.target(0, "w1").last_updated_timestamp, signalled_at);
}

#[test]
fn a_vanished_node_ends_the_plan_in_missing_signal_node_once_nothing_is_in_flight() {
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
    assert_eq!(sim.plan.state(), P::MissingSignalNode);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::MissingSignalNode);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some("command 0 (k0supdate): Node w1 no longer exists")
    );
}

// === Crash safety and run identity ===

#[test]
fn a_signal_lost_in_a_crash_is_resent_identically_without_events() {
    let mut sim = two_controllers_one_worker();
    let first = sim.pass_without_signals();
    let original = signal_to(&first, "c1").clone();
    assert_eq!(sim.plan.target_state(0, "c1"), TargetState::SignalSent);

    sim.cluster(|c| c.later(minutes(1)));
    let resent = sim.pass();
    assert_eq!(signalled(&resent), [(ControlNode, "c1".to_owned())]);
    assert_eq!(signal_to(&resent, "c1"), &original, "the identical signal");
    assert!(events(&resent).is_empty());
    assert_eq!(Some(&resent.status), Some(&first.status));

    let quiet = sim.pass();
    assert!(quiet.effects.is_empty(), "delivered: nothing to resend");
}

#[test]
fn a_node_carrying_this_runs_signal_counts_as_signalled_even_if_the_status_was_lost() {
    let mut sim = two_controllers_one_worker();
    sim.pass();
    // The status write of the first pass is lost (e.g. the leader crashed after signalling
    // and a restore wiped the status): the next pass starts the same run again.
    sim.plan.status = None;
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "c1 already carries this run's signal");
    assert_eq!(sim.plan.target_state(0, "c1"), TargetState::SignalSent);
}

#[test]
fn a_signal_of_an_earlier_run_with_the_same_plan_id_is_not_trusted() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);

    // The same spec.id, a new generation: a new run, and w1's Completed is the old run's.
    sim.plan(|p| p.edited(|spec| spec.timestamp = "later".to_owned()));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert_eq!(signal_to(&t, "w1").run_id.as_deref(), Some(format!("{UID}/2").as_str()));
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_k0s_written_signal_without_a_run_id_is_not_trusted() {
    let plan = PlanFixture::airgap_update(V).workers(["w1"]);
    let mut k0s_signal = run_signal(&plan, 0, Some(SignalPhase::Completed));
    k0s_signal.run_id = None;
    let mut sim =
        Sim::new(plan, ClusterFixture::new().workers(["w1"]).with_signal(Node, "w1", k0s_signal));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
}

#[test]
fn a_signal_of_another_plan_id_or_command_is_not_trusted() {
    let plan = PlanFixture::airgap_update(V).workers(["w1"]);
    let mut other_plan = run_signal(&plan, 0, Some(SignalPhase::Completed));
    other_plan.plan_id = "other".to_owned();
    let mut sim = Sim::new(
        plan.clone(),
        ClusterFixture::new().workers(["w1"]).with_signal(Node, "w1", other_plan),
    );
    assert_eq!(signalled(&sim.pass()), [(Node, "w1".to_owned())]);

    let mut other_command = run_signal(&plan, 0, Some(SignalPhase::Completed));
    other_command.command.id = 3;
    let mut sim = Sim::new(
        plan,
        ClusterFixture::new().workers(["w1"]).with_signal(Node, "w1", other_command),
    );
    assert_eq!(signalled(&sim.pass()), [(Node, "w1".to_owned())]);
}

// === Runs, immutability, and Plans that are not ours ===

#[test]
fn a_plan_not_named_autopilot_is_ignored_with_a_condition() {
    let plan = PlanFixture::airgap_update(V).workers(["w1"]).named("nightly");
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1"]));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(event_reasons(&t), [reasons::PLAN_IGNORED]);
    let status = sim.plan.status();
    assert_eq!(status.state, P::NewPlan);
    assert!(status.commands.is_empty());
    assert_eq!(status.run_id, None);
    let condition = &status.conditions[0];
    assert_eq!(condition.type_, conditions::IGNORED);
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason, conditions::REASON_NOT_AUTOPILOT_PLAN);
    assert!(
        condition.message.contains(r#"only the Plan named "autopilot" is executed"#),
        "{}",
        condition.message
    );

    sim.cluster(|c| c.later(minutes(1)));
    let again = sim.pass();
    assert_eq!(Some(&again.status), Some(&t.status), "idempotent, even later");
    assert!(again.effects.is_empty());
}

#[test]
fn a_spec_edit_during_a_run_is_ignored_with_a_condition_until_the_run_ends() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    let run_id = sim.plan.status().run_id.clone();
    sim.plan(|p| {
        p.edited(|spec| {
            spec.commands[0].airgapupdate.as_mut().expect("airgap").version = "v9.9.9".to_owned()
        })
    });
    let t = sim.pass();
    assert_eq!(event_reasons(&t), [reasons::SPEC_CHANGE_IGNORED]);
    let condition = sim
        .plan
        .status()
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::SPEC_CHANGE_IGNORED)
        .expect("the condition")
        .clone();
    assert_eq!(condition.reason, conditions::REASON_PLAN_RUNNING);
    assert!(condition.message.contains("not applied to this run"), "{}", condition.message);
    assert_eq!(sim.plan.status().observed_generation, Some(1));
    assert_eq!(sim.plan.status().run_id, run_id);

    // The run goes on with the frozen command.
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    let data = signal_to(&t, "w2");
    assert_eq!(data.command.airgapupdate.as_ref().map(|u| u.version.as_str()), Some(V));

    // While an edit waits, the shell checks removed APIs for the run that may start.
    assert_eq!(super::removed_api_check_versions(sim.plan.view()), ["v9.9.9"]);

    // When the run ends, the edited spec starts a new run in the same pass, and the
    // condition goes.
    sim.cluster(|c| c.reports(Node, "w2", SignalPhase::Completed));
    let t = sim.pass();
    let reasons_seen = event_reasons(&t);
    assert!(reasons_seen.contains(&reasons::NODE_COMPLETED), "the old run's end is announced");
    assert!(reasons_seen.contains(&reasons::PLAN_STARTED));
    assert!(
        events(&t).iter().any(|(_, _, note)| note.contains("the previous run ended Completed")),
        "{:#?}",
        events(&t)
    );
    assert_eq!(sim.plan.status().observed_generation, Some(2));
    assert_eq!(sim.plan.status().run_id, Some(format!("{UID}/2")));
    assert!(sim.plan.status().conditions.is_empty());
    assert_eq!(
        signal_to(&t, "w1").command.airgapupdate.as_ref().map(|u| u.version.as_str()),
        Some("v9.9.9")
    );
    let again = pass_with(&sim.plan, &sim.cluster, &sim.policy);
    assert_eq!(Some(&again.status), sim.plan.status.as_ref());
}

#[test]
fn the_frozen_plan_id_is_used_after_a_spec_edit() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w2"]).with_id("first"),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.plan(|p| p.edited(|spec| spec.id = "second".to_owned()));
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalCompleted);
    assert_eq!(signal_to(&t, "w2").plan_id, "first");
}

#[test]
fn an_ended_plan_whose_spec_changes_starts_a_new_run() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::Failed, "disk full"));
    sim.pass();
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    let t = sim.pass();
    assert!(t.effects.is_empty(), "an ended run stays ended while the spec is unchanged");

    sim.plan(|p| p.edited(|spec| spec.timestamp = "retry".to_owned()));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    let status = sim.plan.status();
    assert_eq!(status.run_id.as_deref(), Some(format!("{UID}/2").as_str()));
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(status.state, P::SchedulableWait);
    assert_eq!(status.commands[0].description, None);
    let (kind, reason, note) = events(&t).into_iter().next().expect("an event");
    assert_eq!((kind, reason), (EventKind::Normal, reasons::PLAN_STARTED));
    assert!(note.contains("the previous run ended ApplyFailed"), "{note}");
}

#[test]
fn a_status_written_by_k0s_starts_a_run_of_our_own() {
    let mut sim = one_airgap_worker();
    sim.plan.status =
        Some(autopilot_api::v1beta2::PlanStatus { state: P::Completed, ..Default::default() });
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert_eq!(sim.plan.status().run_id, Some(sim.plan.run_id()));
}

#[test]
fn a_plan_without_commands_completes_at_once() {
    let mut sim = Sim::new(PlanFixture::without_commands(), ClusterFixture::new());
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    assert_eq!(event_reasons(&t), [reasons::PLAN_STARTED, reasons::PLAN_STATE_CHANGED]);
}

// === Events and idempotence ===

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

#[test]
fn readiness_results_for_other_controllers_do_not_matter() {
    let plan = PlanFixture::k0s_update(V).controllers(["c1"]);
    let cluster = ClusterFixture::new().controllers(["c1", "c2"]);
    let readiness = std::collections::BTreeMap::from([
        ("c1".to_owned(), Readiness::Ready),
        ("c2".to_owned(), Readiness::NotReady("down".to_owned())),
    ]);
    let observed = super::Observed {
        now: cluster.now,
        control_nodes: &cluster.control_nodes,
        nodes: &cluster.nodes,
        readiness: &readiness,
        removed_apis: Some(&[]),
        check_pods: super::CheckPods::NONE,
    };
    let t: Transition = step(plan.view(), &observed, &policy());
    assert_eq!(signalled(&t), [(ControlNode, "c1".to_owned())]);
}

#[test]
fn a_readiness_grace_too_long_to_represent_never_runs_out() {
    let mut sim = two_controllers_one_worker().with_policy(|p| p.readiness_grace = Duration::MAX);
    sim.cluster(|c| c.controller_down("c2", "timeout"));
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
    assert_eq!(t.requeue, Requeue::After(Duration::from_secs(2)));
    sim.cluster(|c| c.later(minutes(60 * 24 * 365)));
    let _ = sim.pass();
    assert_eq!(sim.plan.state(), P::Schedulable);
}

// === Progress deadline ===

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
        | super::Effect::Event { .. } => None,
    })
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

#[test]
fn a_node_clock_behind_does_not_shorten_the_deadline() {
    let mut sim = one_airgap_worker();
    sim.cluster(|c| c.later(minutes(30)));
    sim.pass();
    // The node writes its phase with a timestamp half an hour in the past.
    let mut stale = run_signal(&sim.plan, 0, Some(SignalPhase::Downloading));
    stale.created = sim.cluster.signal(Node, "w1").expect("signalled").created.clone();
    sim.cluster(|c| c.with_signal(Node, "w1", stale).later(minutes(14)));
    sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalSent);
    sim.cluster(|c| c.later(minutes(1)));
    sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalApplyFailed);
}

#[test]
fn a_command_progress_timeout_overrides_the_flag() {
    let mut sim = one_airgap_worker();
    sim.plan(|p| {
        p.edited(|spec| {
            spec.commands[0].airgapupdate.as_mut().expect("airgap").progress_timeout =
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
                spec.commands[0].k0supdate.as_mut().expect("k0s").progress_timeout =
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
