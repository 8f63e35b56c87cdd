//! The dry run of [`crate::plan::rollout`]: the engine's own order and batches on a snapshot.

use autopilot_api::v1beta2::{PlanStateType, TargetState};

use super::fixtures::{ClusterFixture, PlanBuilder, PlanFixture, policy};
use crate::plan::ObjectKind;
use crate::plan::rollout::{Rollout, rollout};

fn dry_run(plan: &PlanFixture, cluster: &ClusterFixture) -> Rollout {
    rollout(plan.view().spec, &cluster.dry_run_view(), &policy())
}

fn batches(rollout: &Rollout) -> Vec<Vec<(ObjectKind, &str)>> {
    rollout
        .batches
        .iter()
        .map(|b| b.targets.iter().map(|(kind, name)| (*kind, name.as_str())).collect())
        .collect()
}

#[test]
fn controllers_go_one_at_a_time_then_workers_by_the_concurrency_limit() {
    let plan = PlanFixture::k0s_update("v1.31.0+k0s.0")
        .controllers(["c0", "c1"])
        .workers(["w0", "w1", "w2"])
        .concurrent(2);
    let cluster = ClusterFixture::new().controllers(["c0", "c1"]).workers(["w0", "w1", "w2"]);
    let dry = dry_run(&plan, &cluster);
    use ObjectKind::{ControlNode, Node};
    assert_eq!(
        batches(&dry),
        [
            vec![(ControlNode, "c0")],
            vec![(ControlNode, "c1")],
            vec![(Node, "w0"), (Node, "w1")],
            vec![(Node, "w2")],
        ]
    );
    assert_eq!(dry.end.state, PlanStateType::Completed);
    assert!(dry.batches.iter().all(|b| b.command == 0 && b.waited.is_none()));
}

#[test]
fn targets_that_are_not_ready_now_are_ordered_as_if_they_were() {
    let plan = PlanFixture::k0s_update("v1.31.0+k0s.0")
        .controllers(["c0"])
        .workers(["w0", "w1"])
        .concurrent(1);
    let cluster = ClusterFixture::new()
        .controllers(["c0"])
        .workers(["w0", "w1"])
        .controller_down("c0", "connection refused")
        .worker_not_ready("w0");
    let dry = dry_run(&plan, &cluster);
    assert_eq!(dry.end.state, PlanStateType::Completed);
    assert_eq!(dry.batches.len(), 3);
}

#[test]
fn a_missing_target_ends_the_dry_run_at_new_plan_with_no_batch() {
    let plan = PlanFixture::k0s_update("v1.31.0+k0s.0").workers(["w0", "w9"]);
    let cluster = ClusterFixture::new().workers(["w0"]);
    let dry = dry_run(&plan, &cluster);
    assert_eq!(dry.resolved.state, PlanStateType::IncompleteTargets);
    assert_eq!(dry.end, dry.resolved);
    assert!(dry.batches.is_empty());
    let missing = super::fixtures::all_targets(&dry.resolved.commands[0])
        .into_iter()
        .find(|t| t.name == "w9")
        .map(|t| t.state);
    assert_eq!(missing, Some(TargetState::MissingSignalNode));
}

#[test]
fn scheduler_check_pods_show_as_a_batch_and_a_missing_template_fails_the_dry_run() {
    let gate: autopilot_api::v1beta2::PlanCommandPreflight =
        serde_json::from_value(serde_json::json!({"checks": [{
            "id": "license",
            "targets": {"all": true},
            "command": {"id": "scheduler", "data": {"kubernetes": {"podName": "lic"}}},
            "results": [{"status": "success", "condition": {"statusCode": 0}, "message": "ok"}]
        }]}))
        .expect("a preflight command");
    let update = PlanFixture::k0s_update("v1.31.0+k0s.0").workers(["w0"]).spec.commands[0].clone();
    let plan = PlanFixture::without_commands()
        .then_command(autopilot_api::v1beta2::PlanCommand {
            preflight: Some(gate),
            ..Default::default()
        })
        .then_command(update);
    let mut cluster = ClusterFixture::new().controllers(["c0"]).workers(["w0", "w1"]);

    let failed = dry_run(&plan, &cluster);
    assert_eq!(failed.end.state, PlanStateType::PreflightFailed, "no template: 22");

    cluster.templates.insert(
        "lic".to_owned(),
        serde_json::from_value(serde_json::json!({"metadata": {"name": "lic"}, "data": {
            "pod.yaml": "spec: {containers: [{name: check, image: lic:1}]}"}}))
        .expect("a ConfigMap"),
    );
    let dry = dry_run(&plan, &cluster);
    use ObjectKind::Node;
    assert_eq!(batches(&dry), [vec![(Node, "w0"), (Node, "w1")], vec![(Node, "w0")]]);
    assert_eq!(dry.batches[0].command, 0, "the check Pods, on every Node (c0 has none)");
    assert_eq!(dry.end.state, PlanStateType::Completed);
}

#[test]
fn a_gated_plan_runs_to_completion_with_every_gate_counted_as_passed() {
    let check: autopilot_api::v1beta2::GateCheck = serde_json::from_value(serde_json::json!({
        "command": {"id": "k0sVersion"},
        "results": [{"status": "success", "message": "ok", "condition": {"statusCode": 0}}]
    }))
    .expect("a check");
    let gate = |id: &str| autopilot_api::v1beta2::Gate {
        id: id.to_owned(),
        timeout: Some("1m".to_owned()),
        ..autopilot_api::v1beta2::Gate::default()
    };
    let pods = autopilot_api::v1beta2::Gate {
        kubernetes: Some(autopilot_api::v1beta2::KubernetesGate {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            field_selector: Some("spec.nodeName={{ .Node }}".to_owned()),
            condition: "objects.all(p, p.status.phase == \"Running\")".to_owned(),
            ..autopilot_api::v1beta2::KubernetesGate::default()
        }),
        ..gate("pods")
    };
    let node_check = autopilot_api::v1beta2::Gate { check: Some(check), ..gate("version") };
    let plan = PlanFixture::k0s_update("v1.31.0+k0s.0")
        .controllers(["c0"])
        .workers(["w0", "w1", "w2"])
        .concurrent(2)
        .gated(0, pods)
        .gated(0, node_check);
    let cluster = ClusterFixture::new().controllers(["c0"]).workers(["w0", "w1", "w2"]);
    let dry = dry_run(&plan, &cluster);
    assert_eq!(dry.end.state, PlanStateType::Completed, "{:#?}", dry.end);
    use ObjectKind::{ControlNode, Node};
    assert_eq!(
        batches(&dry),
        [vec![(ControlNode, "c0")], vec![(Node, "w0"), (Node, "w1")], vec![(Node, "w2")]],
        "every node's gates pass before its slot is free again"
    );
    assert_eq!(dry.end.commands[0].gates_passed, 4);
}
