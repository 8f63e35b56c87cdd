//! Central cordon and drain by the leader (DESIGN §5, §9.8): a worker is cordoned and its
//! pods evicted through the Eviction API; a PodDisruptionBudget that forbids the eviction
//! holds the node in `Cordoning` with the blocking pod named in its status reason until the
//! budget is removed; DaemonSet pods stay; afterwards only the node autopilot cordoned is
//! uncordoned — a node an administrator cordoned before the plan stays cordoned.
//!
//! The node side is the test responder acting as an agent does with central cordoning
//! (`Behaviour::CompleteWithLeader`); the fake kubelet confirms pod deletions.

mod support;

use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::kubelet::FakeKubelet;
use integration::responder::{Behaviour, Config, Responder};
use integration::{ClusterBuilder, wait_for};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

/// How long the test watches the held node before it removes the budget.
const HELD_WINDOW: Duration = Duration::from_secs(4);

fn pod(name: &str, node: &str, daemon_set: bool) -> Pod {
    let mut metadata = json!({ "name": name, "labels": { "app": "web" } });
    if daemon_set {
        metadata["labels"] = json!({ "app": "agent" });
        metadata["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
            "uid": "00000000-0000-0000-0000-000000000001", "controller": true,
        }]);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": false,
            "containers": [{ "name": "app", "image": "example.invalid/app:1" }],
        },
    }))
    .expect("a valid Pod")
}

fn unschedulable(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

fn marked(node: &Node) -> bool {
    node.annotations().contains_key(keys::ANNOTATION_CORDONED)
}

use kube::ResourceExt as _;

#[tokio::test]
async fn a_budget_holds_the_drain_and_only_autopilots_cordon_is_undone() {
    let workers = ["worker-0", "worker-1"];
    let cluster =
        ClusterBuilder::new("plan-drain").controllers(1).workers(&workers).build().await.unwrap();
    let client = cluster.admin_client().await.unwrap();
    let _controllers = start_controllers(&cluster, 1, &[]).await.unwrap();
    let _workers = start_workers(&cluster, &workers).await.unwrap();
    let _kubelet = FakeKubelet::start(client.clone(), &workers);
    let config = Config::new().default_behaviour(Behaviour::CompleteWithLeader);
    let _responder = Responder::start(client.clone(), config).await.unwrap();

    let nodes: Api<Node> = Api::all(client.clone());
    // No controller-manager runs here, so the namespace's default ServiceAccount (which pod
    // admission requires) is created by hand.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "default" } })).unwrap();
    accounts.create(&PostParams::default(), &account).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, daemon_set) in [("web-0", false), ("web-1", false), ("agent-0", true)] {
        pods.create(&PostParams::default(), &pod(name, "worker-0", daemon_set)).await.unwrap();
        // Report them Running and Ready, as a kubelet would: evicting a Pending pod skips
        // the budget check, a running one does not.
        let running = json!({ "status": {
            "phase": "Running",
            "conditions": [{ "type": "Ready", "status": "True" }],
        }});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&running)).await.unwrap();
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": { "name": "web-budget" },
        "spec": { "minAvailable": 2, "selector": { "matchLabels": { "app": "web" } } },
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    // An administrator cordoned worker-1 before the update.
    let cordon = json!({ "spec": { "unschedulable": true } });
    nodes.patch("worker-1", &PatchParams::default(), &Patch::Merge(&cordon)).await.unwrap();

    let update = k0s_update(None, Some(static_nodes(&workers, 1)));
    create_plan(&client, &plan("autopilot", "drain", vec![k0s_command(update)])).await.unwrap();

    // worker-0 is cordoned (by autopilot) and held in Cordoning, the blocked pod named.
    let reason = wait_for(PLAN_TIMEOUT, "worker-0 held in Cordoning with a reason", || async {
        let signal = node_signal(&client, "worker-0").await?;
        let status = signal.and_then(|s| s.status);
        Ok(status
            .filter(|s| s.status == SignalPhase::Cordoning)
            .and_then(|s| s.reason)
            .filter(|r| r.contains("web-")))
    })
    .await
    .unwrap();
    assert!(reason.contains("refused"), "{reason}");
    let worker0 = nodes.get("worker-0").await.unwrap();
    assert!(unschedulable(&worker0) && marked(&worker0), "worker-0 cordoned by autopilot");
    // It stays held while the budget exists.
    let moved_on = wait_for(HELD_WINDOW, "worker-0 to leave Cordoning", || async {
        let signal = node_signal(&client, "worker-0").await?;
        Ok(signal.and_then(|s| s.status).filter(|s| s.status != SignalPhase::Cordoning))
    })
    .await;
    assert!(moved_on.is_err(), "worker-0 passed Cordoning while the budget forbade eviction");
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 3, "no pod evicted");

    // Remove the budget: the pods are evicted, the node updates and is uncordoned.
    pdbs.delete("web-budget", &DeleteParams::default()).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    let remaining: Vec<String> =
        pods.list(&Default::default()).await.unwrap().items.iter().map(|p| p.name_any()).collect();
    assert_eq!(remaining, ["agent-0"], "web pods evicted, the DaemonSet pod stays");

    let worker0 = nodes.get("worker-0").await.unwrap();
    assert!(!unschedulable(&worker0) && !marked(&worker0), "worker-0 uncordoned after its update");
    let worker1 = nodes.get("worker-1").await.unwrap();
    assert!(unschedulable(&worker1), "the administrator's cordon on worker-1 stays");
    assert!(!marked(&worker1), "autopilot never claimed worker-1's cordon");
}
