//! Three controller+workers updated while a PodDisruptionBudget blocks draining, under
//! write contention (REF §14 `ap-controllerworker`), with the real node agents: every
//! controller runs `--enable-worker`, each Node runs one pod of a workload whose budget
//! needs all three, and a background writer touches every ControlNode's annotations every
//! second (so the agents' and the leader's resourceVersion-checked writes meet conflicts).
//! Asserted: while the budget exists the plan does not complete and no controller gets past
//! `Cordoning`; once it is deleted every controller updates to v2, one at a time; each
//! ControlNode's signal goes through every phase in order with non-decreasing timestamps and
//! never vanishes; afterwards every Node is Ready and uncordoned.
//!
//! Each controller is a real node too ([`integration::real_node`]), all of it run by `k0s
//! controller --run-components --enable-worker`: its API server, controller-manager and
//! scheduler, and the containerd and kubelet that own its Node and run its web Pod in a real
//! container. So each controller's update restarts one of the three API servers, and the
//! next controller's turn waits for it (the `/readyz` quorum).

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{ControlNode, PlanCommandK0sUpdate, PlanStateType, TargetState};
use integration::http::FileServer;
use integration::signals::{ObjectKind, SignalRecorder};
use integration::wait_for;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::support::*;

const CONTROLLERS: [&str; 3] = ["controller-0", "controller-1", "controller-2"];

/// How long the blocked plan is watched before the budget is deleted.
const BLOCKED_WINDOW: Duration = Duration::from_secs(10);

/// Whether `phase` is past `Cordoning` (the drain let it go).
fn past_cordoning(phase: Option<SignalPhase>) -> bool {
    matches!(
        phase,
        Some(
            SignalPhase::ApplyingUpdate
                | SignalPhase::Restarting
                | SignalPhase::Uncordoning
                | SignalPhase::Completed
        )
    )
}

#[tokio::test]
async fn controller_workers_update_once_the_budget_allows_under_write_contention_on_real_nodes() {
    let (v2, sha) = v2_build();
    let server = FileServer::start(v2).await.unwrap();

    // Real workers on the controllers: `k0s` runs each controller's API server and kubelet,
    // and the kubelet owns the controller's Node.
    let Fleet { cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("update-controller-workers")
            .controllers(3)
            .real_controllers()
            .agents(Agents::Real)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());

    // One web Pod per Node (a Deployment's, one per node by anti-affinity), Ready, and a
    // budget that needs all three.
    crate::real_nodes::wait_default_service_account(&client).await.unwrap();
    spread_deployment(&client, 3).await.unwrap();
    crate::real_nodes::budget(&client, "web-budget", "web", 3).await.unwrap();
    crate::real_nodes::wait_app_ready(&client, "web", 3).await.unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");

    // Write contention: someone else touches every ControlNode's annotations every second.
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    let toucher = touch_control_nodes(control_nodes.clone());
    // Through every API server: each restarts once during the plan.
    let mut clients = Vec::new();
    for i in 0..CONTROLLERS.len() {
        clients.push(cluster.admin_client_at(i).await.unwrap());
    }
    let recorder = SignalRecorder::start_through(&clients).await.unwrap();

    // Forced, as in k0s' scenario.
    let update = PlanCommandK0sUpdate {
        forceupdate: true,
        ..update_to(V2, server.base_url(), &sha, Some(static_nodes(&CONTROLLERS, 1)), None)
    };
    create_plan(&client, &plan("autopilot", "controller-workers", vec![k0s_command(update)]))
        .await
        .unwrap();

    // The first controller reaches Cordoning and is held there by the budget.
    wait_plan(&client, "autopilot", PLAN_TIMEOUT, "controller-0 held in Cordoning", |p| {
        target_phase(p, "controller-0") == Some(SignalPhase::Cordoning)
    })
    .await
    .unwrap();
    held_by_the_budget(&client, &recorder).await;

    pdbs.delete("web-budget", &DeleteParams::default()).await.unwrap();
    let done = wait_plan(&client, "autopilot", Duration::from_secs(240), "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    toucher.abort();
    for t in targets(command(&done, 0)) {
        assert_eq!(t.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }

    // Every ControlNode: every phase in order, timestamps never going back, never vanished;
    // one controller in flight at a time.
    check_history(&recorder);

    // Every controller runs v2 and every Node is Ready and uncordoned.
    for process in &controllers {
        assert_eq!(binary_version(process.binary_path()), V2, "{}", process.node_name());
    }
    wait_for(Duration::from_secs(60), "every controller Ready at v2 and uncordoned", || async {
        for name in CONTROLLERS {
            if control_nodes.get(name).await?.k0s_version() != Some(V2) {
                return Ok(None);
            }
            let node = nodes.get(name).await?;
            let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
            if cordoned || !is_ready(&node) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await
    .unwrap();
}

/// Write contention: someone else touches every ControlNode's annotations every second,
/// until the task is aborted.
fn touch_control_nodes(control_nodes: Api<ControlNode>) -> tokio::task::JoinHandle<()> {
    tokio::spawn({
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            for n in 0u64.. {
                tick.tick().await;
                for name in CONTROLLERS {
                    let touch = json!({ "metadata": { "annotations": {
                        "test.autopilot/touched": n.to_string(),
                    }}});
                    let params = PatchParams::default();
                    let _ = control_nodes.patch(name, &params, &Patch::Merge(&touch)).await;
                }
            }
        }
    })
}

/// For the blocked window no controller gets past Cordoning, and the plan names the budget.
async fn held_by_the_budget(client: &kube::Client, recorder: &SignalRecorder) {
    let held = watch_plan_for(client, "autopilot", BLOCKED_WINDOW, |p| {
        if state(p) == PlanStateType::Completed {
            return Err("the plan completed while the budget blocks every drain".to_owned());
        }
        for name in CONTROLLERS {
            if past_cordoning(target_phase(p, name)) {
                return Err(format!("{name} got past Cordoning while the budget exists"));
            }
        }
        Ok(())
    })
    .await
    .expect("held in Cordoning for the window");
    assert!(
        target(&held, 0, "controller-0")
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("web-budget")),
        "the plan names the budget:\n{}",
        status_yaml(&held)
    );
    for seen in recorder.history() {
        assert!(!past_cordoning(seen.phase), "{} got past Cordoning: {seen:?}", seen.object);
    }
}

/// Every ControlNode: every phase in order, timestamps never going back, never vanished;
/// one controller in flight at a time.
fn check_history(recorder: &SignalRecorder) {
    let history = recorder.history();
    assert!(recorder.vanished().is_empty(), "signals vanished: {:?}", recorder.vanished());
    let by_object = recorder.by_object();
    assert_eq!(by_object.len(), 3, "{history:?}");
    for (object, seen) in &by_object {
        assert_eq!(object.kind, ObjectKind::ControlNode);
        let phases: Vec<_> = seen.iter().map(|s| s.phase).collect();
        assert_eq!(phases, UPDATE_PHASES, "{object}: {seen:?}");
        let stamps: Vec<_> = seen.iter().filter_map(|s| s.timestamp.clone()).collect();
        assert!(stamps.is_sorted(), "{object} timestamps go back: {seen:?}");
    }
    let mut in_flight = 0usize;
    for seen in &history {
        match seen.phase {
            None => in_flight += 1,
            Some(SignalPhase::Completed) => in_flight -= 1,
            Some(_) => {}
        }
        assert!(in_flight <= 1, "two controllers in flight at once: {history:?}");
    }
}

/// The phase the plan shows for controller `name` of command 0.
fn target_phase(plan: &autopilot_api::v1beta2::Plan, name: &str) -> Option<SignalPhase> {
    plan.status
        .as_ref()
        .and_then(|s| s.commands.first())
        .and_then(|c| targets(c).into_iter().find(|t| t.name == name).and_then(|t| t.phase))
}

/// Deployment `web` with `replicas` Pods, at most one per Node (required anti-affinity: an
/// evicted one waits for its node to come back).
async fn spread_deployment(client: &kube::Client, replicas: usize) -> anyhow::Result<()> {
    let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "affinity": { "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [{
                            "labelSelector": { "matchLabels": { "app": "web" } },
                            "topologyKey": "kubernetes.io/hostname",
                        }],
                    } },
                    "containers": [crate::real_nodes::container("web", crate::real_nodes::SERVE)],
                },
            },
        },
    }))?;
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), "default")
        .create(&kube::api::PostParams::default(), &deployment)
        .await?;
    Ok(())
}
