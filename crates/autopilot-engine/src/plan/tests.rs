//! Tests of the Plan engine's pure core: one table test per allowed transition (here),
//! focused scenario tests by topic, and property tests over random clusters ([`props`]).

mod conditions;
mod deadlines;
mod events;
mod fixtures;
mod gates;
mod node_reports;
mod payload;
mod preflight;
mod prestage;
mod props;
mod rbac;
mod readiness;
mod removed_apis;
mod resolve;
mod rollback;
mod rollout;
mod runs;
mod schedule;
mod skew;
mod steering;
mod support;
mod targets;
mod validation;
mod waves;
mod windows;

use std::collections::BTreeSet;
use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanCommand, PlanStateType};

use self::fixtures::*;
use self::support::*;
use super::ObjectKind::Node;
use super::phases;

// The topic modules reach these engine items as `super::…`.
use super::{
    CheckPods, Effect, Observed, REMOVED_API_RECHECK, RemovedApiUse, removed_api_check_versions,
};

use PlanStateType as P;

// === Table tests: every transition of the phase tables ===

/// A transition scenario: its name, the state it starts in, the state the next pass
/// leaves, and the simulation right before that pass.
type Case = (&'static str, PlanStateType, PlanStateType, Sim);

/// The scenarios of the transition table: each ends right before the pass that makes the
/// transition.
fn transition_cases() -> Vec<Case> {
    let mut cases = new_plan_cases();
    cases.extend(schedulable_wait_cases());
    cases.extend(schedulable_cases());
    cases.extend(stop_cases());
    cases.extend(rollback_cases());
    cases
}

/// The scenarios that start in `NewPlan`.
fn new_plan_cases() -> Vec<Case> {
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
    case("newplan with no readiness grace holds", P::NewPlan, P::Schedulable, sim);
    case(
        "newplan targeting excluded workers",
        P::NewPlan,
        P::Restricted,
        one_airgap_worker().with_policy(|p| p.exclude_workers = true),
    );
    let url =
        format!("https://files.internal/{}", "k".repeat(autopilot_api::signal::MAX_SIGNAL_BYTES));
    case(
        "newplan finds the first signal over the annotation budget",
        P::NewPlan,
        P::ApplyFailed,
        one_worker_downloading(&url, Some(&"a".repeat(64))),
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
                "v1.31.0",
                2,
            )),
        ),
    );
    cases
}

/// The scenarios that start in `SchedulableWait`.
fn schedulable_wait_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut case = |name, from, to, sim: Sim| cases.push((name, from, to, sim));
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
    case("a signalled node disappears", P::SchedulableWait, P::IncompleteTargets, sim);
    let mut sim = one_airgap_worker();
    sim.pass_without_signals();
    sim.cluster(|c| c.without_platform_labels("w1"));
    case("a resend finds no platform", P::SchedulableWait, P::MissingPlatform, sim);
    let mut sim = one_airgap_worker();
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::FailedDownload, "sha256 mismatch"));
    case("a signalled node fails", P::SchedulableWait, P::ApplyFailed, sim);
    // w2's platform has a payload whose signal is over the annotation budget: it fails as
    // its turn comes (SignalPending -> SignalApplyFailed in one pass).
    let url =
        format!("https://files.internal/{}", "k".repeat(autopilot_api::signal::MAX_SIGNAL_BYTES));
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w2"]).payload(
            "linux-arm64",
            &url,
            Some(&"a".repeat(64)),
        ),
        ClusterFixture::new().workers(["w1", "w2"]).platform("w2", "linux", "arm64"),
    );
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    case("the next node's signal is over the budget", P::SchedulableWait, P::ApplyFailed, sim);
    cases
}

/// The scenarios that start in `Schedulable`.
fn schedulable_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut case = |name, from, to, sim: Sim| cases.push((name, from, to, sim));
    // From Schedulable.
    let mut sim = held_on_controller();
    sim.cluster(|c| c.controller_up("c2"));
    case("the down controller comes back", P::Schedulable, P::SchedulableWait, sim);
    let mut sim = held_on_worker();
    sim.cluster(|c| c.without("w1"));
    case("a held node disappears", P::Schedulable, P::IncompleteTargets, sim);
    let mut sim = held_on_worker();
    sim.cluster(|c| c.worker_ready("w1").without_platform_labels("w1"));
    case("a held node loses its platform", P::Schedulable, P::MissingPlatform, sim);
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2"]).concurrent(2),
        ClusterFixture::new().workers(["w1", "w2"]).worker_not_ready("w2"),
    );
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w1", SignalPhase::Failed, "self-test failed"));
    case("a node fails while another is held", P::Schedulable, P::ApplyFailed, sim);
    let mut sim = held_on_worker();
    sim.plan(|p| p.steered(false, true));
    case("a held plan is aborted", P::Schedulable, P::Aborted, sim);
    let mut sim = held_on_worker();
    sim.plan(|p| p.rolling_back("id123"));
    case("a held plan that changed nothing is rolled back", P::Schedulable, P::RolledBack, sim);
    cases
}

/// The scenarios that stop a run: a preflight check in error, the last node in flight of an
/// aborted plan, a canary that rolls itself back.
fn stop_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut case = |name, from, to, sim: Sim| cases.push((name, from, to, sim));
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

    // A canary that completed rolls itself back after the update during its soak.
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2"]).canary(1, Some("10m")),
        ClusterFixture::new().workers(["w1", "w2"]),
    );
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    sim.pass();
    sim.cluster(|c| {
        c.fails(Node, "w1", SignalPhase::Failed, "rolled back after the update: it crashed")
    });
    case(
        "a completed canary rolls itself back after the update",
        P::SchedulableWait,
        P::ApplyFailed,
        sim,
    );
    cases
}

/// The scenarios of an operator's rollback: it reopens a run that ended, and a rollback
/// ends `RolledBack`.
fn rollback_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut case = |name, from, to, sim: Sim| cases.push((name, from, to, sim));
    // An operator's rollback reopens a run that ended, and a rollback ends RolledBack.
    let two_workers = || {
        Sim::new(
            PlanFixture::k0s_update(V).workers(["w1", "w2"]),
            ClusterFixture::new().workers(["w1", "w2"]),
        )
    };
    let complete = |sim: &mut Sim, node: &str| {
        sim.cluster(|c| c.reports(Node, node, SignalPhase::Completed).running(node, V));
    };
    let mut sim = two_workers();
    sim.pass();
    complete(&mut sim, "w1");
    sim.pass();
    complete(&mut sim, "w2");
    sim.pass();
    sim.plan(|p| p.rolling_back("id123"));
    case("an operator rolls back a completed run", P::Completed, P::SchedulableWait, sim.clone());
    sim.pass();
    complete(&mut sim, "w2");
    sim.pass();
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed).running("w1", RUNNING));
    case("the last node is put back", P::SchedulableWait, P::RolledBack, sim);
    let mut sim = two_workers();
    sim.pass();
    complete(&mut sim, "w1");
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w2", SignalPhase::Failed, "boom"));
    sim.pass();
    sim.plan(|p| p.rolling_back("id123"));
    case("an operator rolls back a failed run", P::ApplyFailed, P::SchedulableWait, sim);
    let mut sim = two_workers();
    sim.pass();
    sim.plan(|p| p.steered(false, true));
    complete(&mut sim, "w1");
    sim.pass();
    sim.plan(|p| p.steered(false, false).rolling_back("id123"));
    case("an operator rolls back an aborted run", P::Aborted, P::SchedulableWait, sim.clone());
    // ... and straight to RolledBack when no changed node can be signalled any more.
    sim.cluster(|c| c.without("w1"));
    case("a rollback of an aborted run finds nothing left", P::Aborted, P::RolledBack, sim);
    let mut sim = two_workers();
    sim.pass();
    complete(&mut sim, "w1");
    sim.pass();
    complete(&mut sim, "w2");
    sim.pass();
    sim.plan(|p| p.rolling_back("id123"));
    sim.cluster(|c| c.without("w1").without("w2"));
    case("a rollback of a completed run finds nothing left", P::Completed, P::RolledBack, sim);
    let mut sim = two_workers();
    sim.pass();
    complete(&mut sim, "w1");
    sim.pass();
    sim.cluster(|c| c.fails(Node, "w2", SignalPhase::Failed, "boom"));
    sim.pass();
    sim.plan(|p| p.rolling_back("id123"));
    sim.cluster(|c| c.without("w1"));
    case("a rollback of a failed run finds nothing left", P::ApplyFailed, P::RolledBack, sim);
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
