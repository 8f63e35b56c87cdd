//! The engine running `preflight` commands (DESIGN §13): NewPlan resolves each check's
//! targets, every target is signalled at once with a reference to its checks, reports are
//! judged as they arrive, and the verdict gates the commands after it.

use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::preflight::{RawRecord, status_code};
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    CheckStatus, PlanCommand, PlanCommandPreflight, PlanStateType as P, TargetState,
};
use serde_json::json;

use super::fixtures::*;
use crate::plan::phases::reasons;
use crate::plan::{Effect, ObjectKind};

use ObjectKind::{ControlNode, Node};

const V: &str = "v1.31.2+k0s.0";

/// A check `id` on `targets` probing port 6443: success on 0, warn on a timeout (62), and
/// error for anything else (the catch-all).
fn port_check(id: &str, targets: serde_json::Value) -> serde_json::Value {
    json!({
        "id": id,
        "targets": targets,
        "command": {"id": "portAvailable", "timeout": 5, "data": {"port": 6443}},
        "results": [
            {"status": "success", "message": "{{ .Node }}: {{ .Result }}",
             "condition": {"statusCode": 0}},
            {"status": "warn", "message": "{{ .Node }} did not answer",
             "condition": {"statusCode": 62}},
            {"status": "error", "message": "{{ .Node }}: {{ .Error }} ({{ .StatusCode }})"}
        ]
    })
}

fn gate(checks: Vec<serde_json::Value>, extra: serde_json::Value) -> PlanCommand {
    let mut body = json!({"checks": checks});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let preflight: PlanCommandPreflight =
        serde_json::from_value(body).expect("a preflight command");
    PlanCommand { preflight: Some(preflight), ..PlanCommand::default() }
}

/// A preflight gate (`checks`) before a k0s update of c1 and w1, on c1, w1 and w2.
fn gated(checks: Vec<serde_json::Value>, extra: serde_json::Value) -> Sim {
    let update =
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1"]).spec.commands[0].clone();
    Sim::new(
        PlanFixture::without_commands().then_command(gate(checks, extra)).then_command(update),
        ClusterFixture::new().controllers(["c1"]).workers(["w1", "w2"]),
    )
}

fn free(node: &str) -> RawRecord {
    RawRecord::success(vec![format!("0.0.0.0:6443 is free on {node}")])
}

fn in_use() -> RawRecord {
    RawRecord::failure(status_code::ADDRESS_IN_USE, "bind 0.0.0.0:6443: Address in use")
}

fn checks_of(sim: &Sim, kind: ObjectKind, name: &str) -> Vec<String> {
    let signal = sim.cluster.signal(kind, name).expect("a signal");
    signal.command.preflight.as_ref().expect("a preflight signal").checks.clone()
}

fn k0s_signalled(transition: &crate::plan::Transition) -> Vec<String> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Signal { target, data } if data.command.k0supdate.is_some() => {
                Some(target.name.clone())
            }
            Effect::Signal { .. } | Effect::Event { .. } => None,
        })
        .collect()
}

#[test]
fn every_target_is_signalled_at_once_with_the_ids_of_its_checks() {
    let mut sim = gated(
        vec![
            port_check("api-port", json!({"all": true})),
            port_check("w1-only", json!({"workers": {"discovery": {"static": {"nodes": ["w1"]}}}})),
        ],
        json!({}),
    );
    let passed = sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(
        signalled(&passed),
        vec![(ControlNode, "c1".to_owned()), (Node, "w1".to_owned()), (Node, "w2".to_owned())]
    );
    assert_eq!(checks_of(&sim, ControlNode, "c1"), ["api-port"]);
    assert_eq!(checks_of(&sim, Node, "w1"), ["api-port", "w1-only"]);
    assert_eq!(checks_of(&sim, Node, "w2"), ["api-port"]);
    assert!(k0s_signalled(&passed).is_empty(), "the update waits for the checks");
    let reason = sim.plan.command(0).reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("running preflight checks: waiting for the reports of 3"),
        "{reason}"
    );
    assert!(event_reasons(&passed).contains(&reasons::PREFLIGHT_RUNNING));
    // The signal refers to the checks; the definitions stay in the Plan.
    let signal = sim.cluster.signal(Node, "w1").expect("a signal");
    assert_eq!(signal.run_id.as_deref(), Some(sim.plan.run_id().as_str()));
    assert_eq!(signal.command.id, 0);
}

#[test]
fn passing_checks_let_the_next_command_start_in_the_same_pass() {
    let mut sim = gated(vec![port_check("api-port", json!({"all": true}))], json!({}));
    sim.pass();
    sim.cluster(|c| {
        c.reports_checks(ControlNode, "c1", &[("api-port", free("c1"))]).reports_checks(
            Node,
            "w1",
            &[("api-port", free("w1"))],
        )
    });
    let partial = sim.pass();
    assert_eq!(sim.plan.command(0).state, P::SchedulableWait, "w2 has not reported");
    assert!(k0s_signalled(&partial).is_empty());
    // Verdicts are kept as reports arrive.
    let preflight = sim.plan.command(0).preflight.clone().expect("preflight status");
    assert_eq!(preflight.checks[0].nodes.len(), 2);
    assert_eq!(preflight.status, None);

    sim.cluster(|c| c.reports_checks(Node, "w2", &[("api-port", free("w2"))]));
    let passed = sim.pass();
    assert_eq!(sim.plan.command(0).state, P::Completed);
    assert_eq!(sim.plan.command(0).description, None);
    let preflight = sim.plan.command(0).preflight.clone().expect("preflight status");
    assert_eq!(preflight.status, Some(CheckStatus::Success));
    let check = &preflight.checks[0];
    assert_eq!(check.status, Some(CheckStatus::Success));
    let nodes: Vec<(&str, &str)> =
        check.nodes.iter().map(|n| (n.name.as_str(), n.message.as_str())).collect();
    assert_eq!(
        nodes,
        [
            ("c1", "c1: 0.0.0.0:6443 is free on c1"),
            ("w1", "w1: 0.0.0.0:6443 is free on w1"),
            ("w2", "w2: 0.0.0.0:6443 is free on w2"),
        ]
    );
    assert_eq!(k0s_signalled(&passed), ["c1"], "the update starts with its controller");
}

#[test]
fn an_error_ends_the_plan_preflight_failed_before_any_update_signal() {
    let mut sim = gated(vec![port_check("api-port", json!({"all": true}))], json!({}));
    sim.pass();
    sim.cluster(|c| {
        c.reports_checks(ControlNode, "c1", &[("api-port", free("c1"))])
            .reports_checks(Node, "w1", &[("api-port", in_use())])
            .reports_checks(Node, "w2", &[("api-port", free("w2"))])
    });
    let passed = sim.pass();
    assert_eq!(sim.plan.state(), P::PreflightFailed);
    assert_eq!(sim.plan.command(0).state, P::PreflightFailed);
    assert_eq!(sim.plan.command(1).state, P::SchedulableWait, "the update never started");
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some(
            "command 0 (preflight): preflight checks failed: check api-port on w1: w1: bind \
             0.0.0.0:6443: Address in use (98)"
        )
    );
    let node = &sim.plan.command(0).preflight.as_ref().expect("status").checks[0].nodes[1];
    assert_eq!((node.name.as_str(), node.status, node.status_code), ("w1", CheckStatus::Error, 98));
    assert!(k0s_signalled(&passed).is_empty());
    assert!(
        events(&passed).iter().any(|(_, _, note)| note.contains("PreflightFailed")),
        "{:?}",
        events(&passed)
    );
    // Ended: later passes signal nothing.
    let again = sim.pass();
    assert!(signalled(&again).is_empty());
}

#[test]
fn a_node_without_a_report_by_the_deadline_counts_as_status_code_62() {
    // Deadline: the check's 5 s timeout plus the default margin.
    let mut sim = gated(vec![port_check("api-port", json!({"all": true}))], json!({}));
    sim.pass();
    sim.cluster(|c| {
        c.reports_checks(ControlNode, "c1", &[("api-port", free("c1"))]).reports_checks(
            Node,
            "w1",
            &[("api-port", free("w1"))],
        )
    });
    let waiting = sim.pass();
    assert_eq!(
        waiting.requeue,
        crate::plan::Requeue::After(Duration::from_secs(65)),
        "looks again when w2's deadline is due"
    );
    sim.cluster(|c| c.later(Duration::from_secs(66)));
    let passed = sim.pass();
    assert_eq!(sim.plan.command(0).state, P::Completed, "62 is a warning here; onWarn: Proceed");
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalApplyFailed);
    let node = &sim.plan.command(0).preflight.as_ref().expect("status").checks[0].nodes[2];
    assert_eq!(
        (node.name.as_str(), node.status, node.status_code, node.message.as_str()),
        ("w2", CheckStatus::Warn, 62, "w2 did not answer")
    );
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some(
            "command 0 (preflight): completed with warnings: check api-port on w2: w2 did not answer"
        )
    );
    // The warnings are in the command's Event too, not only in the status.
    assert!(
        events(&passed).iter().any(|(_, reason, note)| *reason == reasons::COMMAND_STATE_CHANGED
            && note.ends_with(
                "Completed: command 0 (preflight): completed with warnings: check \
                               api-port on w2: w2 did not answer"
            )),
        "{:?}",
        events(&passed)
    );
    // w2 is told its signal failed (so it stops), and the update goes on.
    let told: Vec<_> = passed
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Signal { target, data } if data.command.preflight.is_some() => {
                Some((target.name.clone(), data.phase()))
            }
            Effect::Signal { .. } | Effect::Event { .. } => None,
        })
        .collect();
    assert_eq!(told, [("w2".to_owned(), Some(SignalPhase::Failed))]);
    assert_eq!(k0s_signalled(&passed), ["c1"]);
}

#[test]
fn a_node_that_cannot_run_its_checks_is_judged_as_a_general_error() {
    let mut sim = gated(vec![port_check("api-port", json!({"all": true}))], json!({}));
    sim.pass();
    sim.cluster(|c| {
        c.reports_checks(ControlNode, "c1", &[("api-port", free("c1"))])
            .fails(Node, "w1", SignalPhase::Failed, "reading Plan autopilot: forbidden")
            .reports_checks(Node, "w2", &[])
    });
    sim.pass();
    assert_eq!(sim.plan.state(), P::PreflightFailed);
    let nodes = &sim.plan.command(0).preflight.as_ref().expect("status").checks[0].nodes;
    let seen: Vec<(&str, i64, &str)> =
        nodes.iter().map(|n| (n.name.as_str(), n.status_code, n.message.as_str())).collect();
    assert_eq!(
        seen,
        [
            ("c1", 0, "c1: 0.0.0.0:6443 is free on c1"),
            ("w1", 1, "w1: reading Plan autopilot: forbidden (1)"),
            ("w2", 1, "w2: the node reported no record for this check (1)"),
        ]
    );
}

#[test]
fn on_warn_block_holds_the_plan_until_the_warnings_are_accepted() {
    let mut sim =
        gated(vec![port_check("api-port", json!({"all": true}))], json!({"onWarn": "Block"}));
    sim.pass();
    let late = RawRecord::failure(status_code::TIMEOUT, "timed out after 5s");
    sim.cluster(|c| {
        c.reports_checks(ControlNode, "c1", &[("api-port", free("c1"))])
            .reports_checks(Node, "w1", &[("api-port", late)])
            .reports_checks(Node, "w2", &[("api-port", free("w2"))])
    });
    let held = sim.pass();
    assert_eq!(sim.plan.command(0).state, P::SchedulableWait);
    let id = sim.plan.spec.id.clone();
    assert_eq!(
        sim.plan.command(0).reason.clone(),
        Some(format!(
            "preflight warnings hold the plan (onWarn: Block): check api-port on w1: w1 did not \
             answer; accept them with the annotation {}={id}",
            keys::ANNOTATION_ACCEPT_WARNINGS
        ))
    );
    assert!(event_reasons(&held).contains(&reasons::PREFLIGHT_WARNINGS));
    assert!(k0s_signalled(&held).is_empty());
    assert_eq!(held.requeue, crate::plan::Requeue::OnChange, "the annotation is a change");

    // Accepting another plan's warnings does nothing.
    sim.plan(|p| p.accepting_warnings("another-plan"));
    assert!(k0s_signalled(&sim.pass()).is_empty());
    sim.plan(|p| p.accepting_warnings(&id));
    let accepted = sim.pass();
    assert_eq!(sim.plan.command(0).state, P::Completed);
    assert_eq!(k0s_signalled(&accepted), ["c1"]);
}

#[test]
fn a_leader_crash_between_status_and_signals_resends_the_same_reference() {
    let mut sim = gated(vec![port_check("api-port", json!({"all": true}))], json!({}));
    let lost = sim.pass_without_signals();
    assert_eq!(signalled(&lost).len(), 3);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalSent);
    let resent = sim.pass();
    assert_eq!(signalled(&resent), signalled(&lost));
    for effect in &resent.effects {
        if let Effect::Signal { target, data } = effect {
            assert_eq!(Some(data), signal_to(&lost, &target.name).into(), "{}", target.name);
        }
    }
}

#[test]
fn abort_during_the_checks_ends_the_plan_and_pause_signals_no_node() {
    let mut sim = gated(vec![port_check("api-port", json!({"all": true}))], json!({}));
    sim.plan(|p| p.steered(true, false));
    let paused = sim.pass();
    assert!(signalled(&paused).is_empty());
    assert_eq!(sim.plan.command(0).state, P::SchedulableWait);
    sim.plan(|p| p.steered(false, false));
    assert_eq!(signalled(&sim.pass()).len(), 3);
    sim.plan(|p| p.steered(false, true));
    let aborted = sim.pass();
    assert_eq!(sim.plan.state(), P::Aborted);
    assert!(k0s_signalled(&aborted).is_empty());
}

#[test]
fn new_plan_refuses_what_could_not_run_before_any_node_is_signalled() {
    let refused = |checks: Vec<serde_json::Value>| {
        let mut sim = gated(checks, json!({}));
        let passed = sim.pass();
        assert!(signalled(&passed).is_empty(), "{:?}", passed.effects);
        (sim.plan.state(), sim.plan.command(0).description.clone().unwrap_or_default())
    };
    let mut bad_cel = port_check("c", json!({"all": true}));
    bad_cel["results"][0]["condition"] = json!({"boolExpr": "statuscode == 0"});
    let (state, why) = refused(vec![bad_cel]);
    assert_eq!(state, P::Warning);
    assert!(
        why.starts_with(
            "spec.commands[0].preflight.checks[0].results[0].condition.boolExpr: uses unknown \
             variable \"statuscode\""
        ),
        "{why}"
    );

    let scheduler = json!({"id": "pods", "targets": {"all": true},
        "command": {"id": "scheduler", "data": {"kubernetes": {"podName": "p", "global": true}}},
        "results": [{"status": "success", "message": "ok"}]});
    let (state, why) = refused(vec![scheduler]);
    assert_eq!(state, P::Warning);
    assert_eq!(
        why,
        "spec.commands[0].preflight.checks[0].command.id: scheduler checks are not run by this \
         controller; use a node probe or an allow-listed exec"
    );

    let missing = port_check("c", json!({"workers": {"discovery": {"static": {"nodes": ["w9"]}}}}));
    let (state, why) = refused(vec![missing]);
    assert_eq!(state, P::IncompleteTargets);
    assert_eq!(why, "command 0 (preflight): targets without an object: Node w9");

    let nowhere =
        port_check("c", json!({"workers": {"discovery": {"selector": {"labels": "role=none"}}}}));
    let (state, why) = refused(vec![nowhere]);
    assert_eq!(state, P::IncompleteTargets);
    assert_eq!(
        why,
        "command 0 (preflight): check(s) c target no node (a check that runs nowhere proves \
         nothing)"
    );

    let mixed = PlanCommand {
        preflight: gate(vec![port_check("c", json!({"all": true}))], json!({})).preflight,
        ..PlanFixture::k0s_update(V).spec.commands[0].clone()
    };
    let mut sim =
        Sim::new(PlanFixture::without_commands().then_command(mixed), ClusterFixture::new());
    sim.pass();
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some("command 0 sets preflight together with an update command; exactly one is required")
    );
}

#[test]
fn all_runs_a_controller_worker_once_through_its_control_node() {
    let mut sim = Sim::new(
        PlanFixture::without_commands()
            .then_command(gate(vec![port_check("c", json!({"all": true}))], json!({}))),
        ClusterFixture::new().controller_workers(["cw1"]).workers(["w1"]),
    );
    let passed = sim.pass();
    assert_eq!(signalled(&passed), vec![(ControlNode, "cw1".to_owned()), (Node, "w1".to_owned())]);
}
