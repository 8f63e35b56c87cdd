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
pub(super) fn port_check(id: &str, targets: serde_json::Value) -> serde_json::Value {
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
pub(super) fn gated(checks: Vec<serde_json::Value>, extra: serde_json::Value) -> Sim {
    let update =
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1"]).spec.commands[0].clone();
    Sim::new(
        PlanFixture::without_commands().then_command(gate(checks, extra)).then_command(update),
        ClusterFixture::new().controllers(["c1"]).workers(["w1", "w2"]),
    )
}

pub(super) fn free(node: &str) -> RawRecord {
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
            Effect::Signal { .. }
            | Effect::CreatePod(_)
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
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
    assert!(reason.starts_with("running preflight checks ("), "{reason}");
    assert!(reason.contains("; waiting for 3 report(s): ControlNode c1"), "{reason}");
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
    // The list of nodes due shrank; the hold is the same, so no Event (the status has it).
    let reason = sim.plan.command(0).reason.clone().unwrap_or_default();
    assert!(reason.contains("waiting for 1 report(s): Node w2"), "{reason}");
    assert!(!event_reasons(&partial).contains(&reasons::PREFLIGHT_RUNNING), "{partial:#?}");
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
            Effect::Signal { .. }
            | Effect::CreatePod(_)
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
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

    // A Pod needs a kubelet: a controller without a Node cannot run a scheduler check.
    let on_controller = scheduler_check(
        "pods",
        json!({"controllers": {"discovery": {"static":
        {"nodes": ["c1"]}}}}),
        json!({}),
    );
    let (state, why) = refused(vec![on_controller]);
    assert_eq!(state, P::IncompleteTargets);
    assert_eq!(
        why,
        "command 0 (preflight): checks[0] (pods): controller c1 has no Node: a scheduler check \
         runs a Pod, which needs a kubelet (target workers, all, or controllers that also run \
         workloads)"
    );
    let selects_none = scheduler_check("pods", json!({"all": true}), json!({"role": "gpu"}));
    let (state, why) = refused(vec![selects_none]);
    assert_eq!(state, P::IncompleteTargets);
    assert!(why.contains("check(s) pods target no node"), "{why}");

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
fn new_plan_refuses_a_condition_that_is_present_but_empty_naming_it() {
    // What the API server (or Helm, Argo CD, Flux) leaves of seed 004's
    // `condition: {status_code: 98}`: an empty object, which would match every node.
    let mut pruned = port_check("c", json!({"all": true}));
    pruned["results"][1]["condition"] = json!({});
    let mut sim = gated(vec![port_check("ok", json!({"all": true})), pruned], json!({}));
    let passed = sim.pass();
    assert!(signalled(&passed).is_empty(), "{:?}", passed.effects);
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(sim.plan.command(0).state, P::Warning);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some(
            format!(
                "spec.commands[0].preflight.checks[1].results[1].condition: {}",
                crate::preflight::EMPTY_CONDITION
            )
            .as_str()
        )
    );

    // A catch-all result omits `condition`, and is fine (port_check ends with one).
    let mut sim = gated(vec![port_check("c", json!({"all": true}))], json!({}));
    sim.pass();
    assert_ne!(sim.plan.state(), P::Warning);
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

// === scheduler checks: a Pod per node, run by the node's kubelet ===

/// A `scheduler` check running the template `lic` on `targets` (narrowed by
/// `node_selector`): exit code 0 is success (the Pod's first line in the message), anything
/// else an error naming the node, the code and the output.
fn scheduler_check(
    id: &str,
    targets: serde_json::Value,
    node_selector: serde_json::Value,
) -> serde_json::Value {
    json!({
        "id": id,
        "targets": targets,
        "command": {"id": "scheduler", "timeout": 20,
                    "data": {"kubernetes": {"podName": "lic", "nodeSelector": node_selector}}},
        "results": [
            {"status": "success", "message": "{{ .Node }}: {{ .Result }}",
             "condition": {"statusCode": 0, "error": false}},
            {"status": "error", "message": "{{ .Node }} exited {{ .StatusCode }}: {{ .Result }}"}
        ]
    })
}

const TEMPLATE: &str = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: check\n    \
                        image: lic:1\n    command: [/check]\n";

/// [`gated`] with a scheduler check on the workers and its template in place.
fn with_pods(check: serde_json::Value) -> Sim {
    let mut sim = gated(vec![check], json!({"deadline": "60s"}));
    sim.cluster.templates.insert(
        "lic".to_owned(),
        serde_json::from_value(json!({"metadata": {"name": "lic", "namespace": keys::NAMESPACE},
                                      "data": {"pod.yaml": TEMPLATE}}))
        .expect("a ConfigMap"),
    );
    sim
}

fn workers_check() -> serde_json::Value {
    scheduler_check("license", json!({"workers": {"discovery": {"selector": {}}}}), json!({}))
}

/// The Pods a transition creates, as `(name, node)`.
fn created(transition: &crate::plan::Transition) -> Vec<(String, String)> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::CreatePod(pod) => Some((
                pod.metadata.name.clone().unwrap_or_default(),
                pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
            )),
            Effect::Signal { .. }
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
        })
        .collect()
}

fn deleted(transition: &crate::plan::Transition) -> Vec<String> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::DeletePod { name, .. } => Some(name.clone()),
            Effect::Signal { .. }
            | Effect::CreatePod(_)
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
        })
        .collect()
}

/// The name of the check Pod on `node`, from the command's status.
fn pod_on(sim: &Sim, node: &str) -> String {
    let preflight = sim.plan.command(0).preflight.clone().expect("a preflight status");
    preflight.pods.iter().find(|p| p.node == node).expect("a Pod on the node").pod.clone()
}

/// The kubelet ends the Pod on `node` with `exit_code`, its termination message `output`.
fn pod_ends(sim: &mut Sim, node: &str, exit_code: i32, output: &str) {
    let name = pod_on(sim, node);
    let pod = sim.cluster.pods.get_mut(&name).expect("the Pod was created");
    let phase = if exit_code == 0 { "Succeeded" } else { "Failed" };
    pod.status = Some(
        serde_json::from_value(json!({"phase": phase, "containerStatuses": [{
            "name": "check", "image": "lic:1", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "message": output}}}]}))
        .expect("a Pod status"),
    );
}

#[test]
fn a_scheduler_check_runs_one_pinned_pod_per_node_and_signals_no_agent() {
    let mut sim = with_pods(workers_check());
    let passed = sim.pass();
    assert!(signalled(&passed).is_empty(), "no agent runs a scheduler check");
    let pods = created(&passed);
    assert_eq!(pods.iter().map(|(_, node)| node.as_str()).collect::<Vec<_>>(), ["w1", "w2"]);
    assert_eq!(pods[0].0, pod_on(&sim, "w1"), "the status names each Pod");
    let preflight = sim.plan.command(0).preflight.clone().expect("status");
    assert!(preflight.pods.iter().all(|p| p.created.is_some()), "{preflight:?}");
    let reason = sim.plan.command(0).reason.clone().unwrap_or_default();
    assert!(reason.contains(&format!("Pod {} (check license on w1)", pods[0].0)), "{reason}");

    // The Pod is pinned, owned by the Plan, stopped by the kubelet at the check's timeout.
    let pod = passed
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::CreatePod(pod) => Some(pod),
            Effect::Signal { .. }
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
        })
        .expect("a Pod");
    let spec = pod.spec.as_ref().expect("spec");
    assert_eq!(spec.active_deadline_seconds, Some(20));
    assert_eq!(pod.metadata.owner_references.as_ref().map(|o| o[0].kind.as_str()), Some("Plan"));

    // Nothing new: no Pod created twice.
    assert!(created(&sim.pass()).is_empty());

    // Both end well: the command completes, the Pods go, the update starts.
    pod_ends(&mut sim, "w1", 0, "licensed until 2027\n");
    let one = sim.pass();
    assert_eq!(deleted(&one), [pod_on(&sim, "w1")], "a recorded Pod goes at once");
    assert_eq!(sim.plan.command(0).state, P::SchedulableWait, "w2 still runs");
    pod_ends(&mut sim, "w2", 0, "licensed until 2028");
    let done = sim.pass();
    assert_eq!(sim.plan.command(0).state, P::Completed);
    assert_eq!(deleted(&done), [pod_on(&sim, "w2")]);
    assert_eq!(k0s_signalled(&done), ["c1"]);
    assert!(sim.cluster.pods.is_empty(), "no check Pod outlives its check");
    let check = &sim.plan.command(0).preflight.clone().expect("status").checks[0];
    assert_eq!(check.status, Some(CheckStatus::Success));
    assert_eq!(check.nodes[0].message, "w1: licensed until 2027");
    assert_eq!(check.nodes[1].message, "w2: licensed until 2028");
}

#[test]
fn a_pods_exit_code_is_its_status_code_and_its_output_the_messages() {
    let mut sim = with_pods(workers_check());
    sim.pass();
    pod_ends(&mut sim, "w1", 0, "ok");
    pod_ends(&mut sim, "w2", 3, "license expired\nsince 2026-01-01");
    let failed = sim.pass();
    assert_eq!(sim.plan.state(), P::PreflightFailed);
    assert!(k0s_signalled(&failed).is_empty());
    let check = &sim.plan.command(0).preflight.clone().expect("status").checks[0];
    assert_eq!(check.nodes[1].status_code, 3);
    assert_eq!(check.nodes[1].message, "w2 exited 3: license expired");
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(
        description.contains("check license on w2: w2 exited 3: license expired"),
        "{description}"
    );
    assert_eq!(deleted(&failed).len(), 2, "both Pods go");
}

#[test]
fn an_unusable_template_is_status_code_22_and_runs_no_pod() {
    let mut sim = with_pods(workers_check());
    sim.cluster.templates.clear();
    let passed = sim.pass();
    assert!(created(&passed).is_empty());
    assert_eq!(sim.plan.state(), P::PreflightFailed);
    let check = &sim.plan.command(0).preflight.clone().expect("status").checks[0];
    assert_eq!(check.nodes[0].status_code, status_code::INVALID_ARGUMENT);
    assert_eq!(check.nodes[0].message, "w1 exited 22: ConfigMap k0s-autopilot/lic does not exist");
}

#[test]
fn a_pod_that_does_not_end_by_the_deadline_is_62_and_goes() {
    let mut sim = with_pods(workers_check());
    let started = sim.pass();
    assert_eq!(started.requeue, crate::plan::Requeue::After(Duration::from_secs(60)));
    pod_ends(&mut sim, "w1", 0, "ok");
    sim.pass();
    sim.cluster(|c| c.later(Duration::from_secs(59)));
    assert_eq!(sim.pass().requeue, crate::plan::Requeue::After(Duration::from_secs(1)));
    sim.cluster(|c| c.later(Duration::from_secs(1)));
    let late = sim.pass();
    assert_eq!(sim.plan.state(), P::PreflightFailed);
    let check = &sim.plan.command(0).preflight.clone().expect("status").checks[0];
    assert_eq!(check.nodes[1].status_code, status_code::TIMEOUT);
    assert_eq!(
        check.nodes[1].message,
        format!("w2 exited 62: Pod {} did not end within the deadline of 1m", pod_on(&sim, "w2"))
    );
    assert_eq!(deleted(&late), [pod_on(&sim, "w2")], "the late Pod goes");
}

#[test]
fn a_leader_crash_before_the_create_creates_the_same_pod_again() {
    let mut sim = with_pods(workers_check());
    let lost = sim.pass_without_signals();
    let stamped = sim.plan.command(0).preflight.clone().expect("status").pods;
    let again = sim.pass();
    assert_eq!(created(&again), created(&lost), "the same names, so never two Pods");
    assert_eq!(
        sim.plan.command(0).preflight.clone().expect("status").pods,
        stamped,
        "the deadline still counts from the first create"
    );
    assert_eq!(sim.cluster.pods.len(), 2);
}

#[test]
fn node_selector_narrows_a_scheduler_checks_nodes() {
    let check =
        scheduler_check("license", json!({"all": true}), json!({keys::LABEL_HOSTNAME: "w2"}));
    let mut sim = with_pods(check);
    let passed = sim.pass();
    assert_eq!(created(&passed).into_iter().map(|(_, n)| n).collect::<Vec<_>>(), ["w2"]);
}

#[test]
fn abort_pause_and_earlier_runs_leave_no_check_pod() {
    let mut sim = with_pods(workers_check());
    sim.plan(|p| p.steered(true, false));
    assert!(created(&sim.pass()).is_empty(), "a paused plan starts no Pod");
    sim.plan(|p| p.steered(false, false));
    assert_eq!(created(&sim.pass()).len(), 2);
    // A Pod of some earlier run is no check's.
    let mut stray = sim.cluster.pods.values().next().cloned().expect("a Pod");
    stray.metadata.name = Some("preflight-0000000000000000".to_owned());
    sim.cluster.pods.insert("preflight-0000000000000000".to_owned(), stray);
    assert_eq!(deleted(&sim.pass()), ["preflight-0000000000000000"]);
    sim.plan(|p| p.steered(false, true));
    let aborted = sim.pass();
    assert_eq!(sim.plan.state(), P::Aborted);
    assert_eq!(deleted(&aborted).len(), 2, "abort removes the running Pods");
    assert!(sim.cluster.pods.is_empty());
}

#[test]
fn scheduler_and_agent_checks_share_a_command() {
    let mut sim = with_pods(workers_check());
    sim.plan(|mut plan| {
        let gate = plan.spec.commands[0].preflight.as_mut().expect("a gate");
        gate.checks.push(
            serde_json::from_value(port_check("api-port", json!({"all": true}))).expect("a check"),
        );
        plan
    });
    let passed = sim.pass();
    assert_eq!(created(&passed).len(), 2);
    assert_eq!(signalled(&passed).len(), 3, "c1, w1 and w2 get only the port check");
    assert_eq!(checks_of(&sim, Node, "w1"), ["api-port"]);
    for node in ["w1", "w2"] {
        pod_ends(&mut sim, node, 0, "ok");
    }
    sim.cluster(|c| {
        c.reports_checks(ControlNode, "c1", &[("api-port", free("c1"))])
            .reports_checks(Node, "w1", &[("api-port", free("w1"))])
            .reports_checks(Node, "w2", &[("api-port", free("w2"))])
    });
    let done = sim.pass();
    assert_eq!(sim.plan.command(0).state, P::Completed, "{:?}", sim.plan.command(0));
    assert_eq!(k0s_signalled(&done), ["c1"]);
}

#[test]
fn the_template_is_frozen_at_new_plan_and_a_changed_config_map_changes_nothing() {
    let mut sim = with_pods(workers_check());
    sim.pass();
    let frozen = sim.plan.command(0).preflight.clone().expect("status").templates;
    assert_eq!(frozen.len(), 1, "{frozen:?}");
    assert_eq!((frozen[0].check.as_str(), frozen[0].config_map.as_str()), ("license", "lic"));
    let digest = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(TEMPLATE.as_bytes()))
    };
    assert_eq!(frozen[0].sha256, digest);
    // The ConfigMap is swapped for one that escalates, and w1's Pod is deleted by hand: the
    // Pod made again is the frozen template's.
    let swapped = "apiVersion: v1\nkind: Pod\nspec:\n  hostPID: true\n  containers:\n  - name: \
                   check\n    image: evil:1\n    securityContext: {privileged: true}\n";
    sim.cluster.templates.insert(
        "lic".to_owned(),
        serde_json::from_value(json!({"metadata": {"name": "lic", "namespace": keys::NAMESPACE},
                                      "data": {"pod.yaml": swapped}}))
        .expect("a ConfigMap"),
    );
    let w1 = pod_on(&sim, "w1");
    sim.cluster.pods.remove(&w1);
    let again = sim.pass();
    let pod = again
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::CreatePod(pod) => Some(pod),
            Effect::Signal { .. }
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
        })
        .expect("the Pod is made again");
    let spec = pod.spec.as_ref().expect("spec");
    assert_eq!(spec.containers[0].image.as_deref(), Some("lic:1"));
    assert_eq!(spec.host_pid, None);
}

// === check Pods are bound to the UID their create was answered with ===

/// The UID the status recorded for the check Pod on `node`.
fn recorded_uid(sim: &Sim, node: &str) -> Option<String> {
    let preflight = sim.plan.command(0).preflight.clone().expect("a preflight status");
    preflight.pods.iter().find(|p| p.node == node).expect("a Pod on the node").uid.clone()
}

/// The deletes of a transition, as `(name, uid)`.
fn deleted_with_uid(transition: &crate::plan::Transition) -> Vec<(String, Option<String>)> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::DeletePod { name, uid } => Some((name.clone(), uid.clone())),
            Effect::Signal { .. }
            | Effect::CreatePod(_)
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
        })
        .collect()
}

#[test]
fn a_check_pod_made_again_by_someone_else_under_its_name_is_refused_not_judged() {
    let mut sim = with_pods(workers_check());
    sim.pass();
    sim.pass();
    let (w1, ours) = (pod_on(&sim, "w1"), sim.cluster.created[&pod_on(&sim, "w1")].clone());
    assert_eq!(recorded_uid(&sim, "w1"), Some(ours.clone()), "the create answer's UID is kept");

    // Someone deletes the leader's Pod and makes one of the name that says all is well.
    let mut impostor = sim.cluster.pods[&w1].clone();
    impostor.metadata.uid = Some("impostor".to_owned());
    sim.cluster.pods.insert(w1.clone(), impostor);
    pod_ends(&mut sim, "w1", 0, "all is well");
    let refused = sim.pass();
    let check = sim.plan.command(0).preflight.clone().expect("status").checks;
    assert!(check.iter().all(|c| c.nodes.is_empty()), "no result taken: {check:?}");
    let warnings: Vec<_> =
        events(&refused).into_iter().filter(|e| e.1 == reasons::CHECK_POD_REFUSED).collect();
    assert_eq!(warnings.len(), 1, "{:?}", events(&refused));
    assert_eq!(warnings[0].0, crate::plan::EventKind::Warning);
    assert!(
        warnings[0].2.contains(&format!(
            "{w1} (uid impostor) is not the one the leader created (uid {ours})"
        )),
        "{}",
        warnings[0].2
    );
    assert_eq!(
        deleted_with_uid(&refused),
        [(w1.clone(), Some("impostor".to_owned()))],
        "only the impostor goes, by its UID"
    );
    assert_eq!(recorded_uid(&sim, "w1"), Some(ours.clone()), "the leader's UID stays recorded");

    // Once it is gone the leader makes its own again, and takes its result.
    let again = sim.pass();
    let remade: Vec<String> = created(&again).into_iter().map(|(name, _)| name).collect();
    assert_eq!(remade, std::slice::from_ref(&w1));
    let remade = sim.cluster.created[&w1].clone();
    assert_ne!(remade, ours);
    sim.pass();
    assert_eq!(recorded_uid(&sim, "w1"), Some(remade));
    pod_ends(&mut sim, "w1", 3, "expired");
    pod_ends(&mut sim, "w2", 0, "ok");
    sim.pass();
    assert_eq!(sim.plan.state(), P::PreflightFailed);
    let check = &sim.plan.command(0).preflight.clone().expect("status").checks[0];
    assert_eq!(check.nodes[0].message, "w1 exited 3: expired", "the leader's own Pod's result");
}

#[test]
fn a_check_pod_whose_create_answer_no_leader_saw_is_refused_and_made_again() {
    let mut sim = with_pods(workers_check());
    sim.pass();
    // The leader stops right after its creates, before a pass recorded their UIDs: the next
    // leader has no answer that names them, so a result from them proves nothing.
    sim.cluster.created.clear();
    for node in ["w1", "w2"] {
        pod_ends(&mut sim, node, 0, "all is well");
    }
    let refused = sim.pass();
    let check = sim.plan.command(0).preflight.clone().expect("status").checks;
    assert!(check.iter().all(|c| c.nodes.is_empty()), "no result taken: {check:?}");
    let warnings: Vec<_> =
        events(&refused).into_iter().filter(|e| e.1 == reasons::CHECK_POD_REFUSED).collect();
    assert_eq!(warnings.len(), 2, "{:?}", events(&refused));
    assert!(warnings[0].2.contains("is not known to be the leader's"), "{}", warnings[0].2);
    assert_eq!(deleted_with_uid(&refused).len(), 2);
    assert_eq!(created(&sim.pass()).len(), 2, "the leader makes its own again");
    for node in ["w1", "w2"] {
        pod_ends(&mut sim, node, 0, "ok");
    }
    sim.pass();
    assert_eq!(sim.plan.command(0).state, P::Completed);
}
