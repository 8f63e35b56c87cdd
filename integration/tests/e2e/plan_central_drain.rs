//! Central cordon and drain by the leader (DESIGN §5, §9.8): a worker is cordoned and its
//! pods evicted through the Eviction API; a PodDisruptionBudget that forbids the eviction
//! holds the node in `Cordoning` with the blocking pod named in its status reason until the
//! budget is removed; DaemonSet pods stay; afterwards only the node autopilot cordoned is
//! uncordoned — a node an administrator cordoned before the plan stays cordoned. The drain
//! acts only on signals of the plan's current run: a node left in `Cordoning` by an earlier
//! run is not cordoned but failed (with both runs named), while autopilot's cordon left by an
//! earlier run's `UnCordoning` signal is still undone.
//!
//! The node side is the test responder acting as an agent does with central cordoning
//! (`Behaviour::CompleteWithLeader`). In the budget case the workers are real nodes
//! ([`integration::real_node`]): the Pods run real containers (two bare web Pods on worker-0,
//! which the plan's `drainOptions.force` lets the drain evict, and a DaemonSet's), the
//! kubelet stops the evicted ones, and the controller-manager computes the budget.

use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::signal::{CommandK0sUpdate, SignalCommand, SignalData, SignalStatus};
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use futures::StreamExt as _;
use integration::responder::{Behaviour, Config, Responder};
use integration::wait_for;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::support::*;

/// How long the test watches the held node before it removes the budget.
const HELD_WINDOW: Duration = Duration::from_secs(4);

/// A bare web Pod bound to `node`, running a real container.
fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": "web" } },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "containers": [crate::real_nodes::container("app", crate::real_nodes::SERVE)],
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
async fn a_budget_holds_the_drain_and_only_autopilots_cordon_is_undone_on_real_nodes() {
    let workers = ["worker-0", "worker-1"];
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _agents } =
        FleetBuilder::new("plan-drain").workers(&workers).real_workers().start().await.unwrap();
    let config = Config::new().default_behaviour(Behaviour::CompleteWithLeader);
    let _responder = Responder::start(client.clone(), config).await.unwrap();

    let nodes: Api<Node> = Api::all(client.clone());
    crate::real_nodes::wait_default_service_account(&client).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["web-0", "web-1"] {
        pods.create(&PostParams::default(), &pod(name, "worker-0")).await.unwrap();
    }
    integration::real_node::workload::daemon_set(&client, "agent").await.unwrap();
    crate::real_nodes::wait_app_ready(&client, "web", 2).await.unwrap();
    let agent_pods = crate::real_nodes::wait_app_ready(&client, "agent", 2).await.unwrap();
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

    // The web Pods are bare: without `force` they would hold the drain before any eviction.
    let update = autopilot_api::v1beta2::PlanCommandK0sUpdate {
        drain_options: Some(autopilot_api::v1beta2::DrainOptions {
            force: true,
            ..Default::default()
        }),
        ..k0s_update(None, Some(static_nodes(&workers, 1)))
    };
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
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 4, "no pod evicted");

    // Remove the budget: the pods are evicted, the node updates and is uncordoned.
    pdbs.delete("web-budget", &DeleteParams::default()).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    let remaining: std::collections::BTreeSet<String> =
        pods.list(&Default::default()).await.unwrap().items.iter().map(|p| p.name_any()).collect();
    assert_eq!(remaining, agent_pods, "web pods evicted, the DaemonSet's Pods stay");

    let worker0 = nodes.get("worker-0").await.unwrap();
    assert!(!unschedulable(&worker0) && !marked(&worker0), "worker-0 uncordoned after its update");
    let worker1 = nodes.get("worker-1").await.unwrap();
    assert!(unschedulable(&worker1), "the administrator's cordon on worker-1 stays");
    assert!(!marked(&worker1), "autopilot never claimed worker-1's cordon");
}

/// A signal of the run `run_id` (another run than the plan's), the node in `phase`.
fn earlier_run_signal(run_id: &str, phase: SignalPhase) -> SignalData {
    SignalData {
        plan_id: "earlier".to_owned(),
        created: "2026-01-01T00:00:00Z".to_owned(),
        command: SignalCommand {
            rollback: None,
            preflight: None,
            id: 0,
            k0supdate: Some(CommandK0sUpdate {
                url: url(&autopilot_api::platform::current()),
                version: FORCED_VERSION.to_owned(),
                sha256: PLACEHOLDER_SHA256.to_owned(),
                forceupdate: true,
            }),
            airgapupdate: None,
        },
        status: Some(SignalStatus::new(phase, jiff::Timestamp::now())),
        run_id: Some(run_id.to_owned()),
    }
}

#[tokio::test]
async fn a_cordoning_signal_of_an_earlier_run_is_failed_not_drained() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-drain-runs").controllers(1).start().await.unwrap();
    // The current run: a plan the engine ends at once (its only target does not exist), so
    // that it touches neither Node.
    let update = k0s_update(None, Some(static_nodes(&["gone"], 1)));
    create_plan(&client, &plan("autopilot", "current", vec![k0s_command(update)])).await.unwrap();
    let ended =
        wait_plan_state(&client, "autopilot", PlanStateType::IncompleteTargets).await.unwrap();
    let current_run = ended.status.and_then(|s| s.run_id).expect("the run has an id");
    let earlier_run = "00000000-0000-0000-0000-00000000e001/1";
    assert_ne!(current_run, earlier_run);

    let nodes: Api<Node> = Api::all(client.clone());
    // worker-0 is schedulable; worker-1 still carries the cordon an earlier run put on it
    // (created after the current run ended, which checks that no cordon of its own is left).
    for (name, cordoned) in [("worker-0", false), ("worker-1", true)] {
        let mut node = json!({ "metadata": { "name": name } });
        if cordoned {
            node["metadata"]["annotations"] = json!({ keys::ANNOTATION_CORDONED: "true" });
            node["spec"] = json!({ "unschedulable": true });
        }
        let node: Node = serde_json::from_value(node).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }

    // Record every version of worker-0 from now on, and whether any was cordoned (the watch
    // has listed before any signal is written).
    let (seen_tx, mut seen_rx) = tokio::sync::watch::channel((None::<String>, false));
    let watch_nodes = nodes.clone();
    let recorder = tokio::spawn(async move {
        let config = watcher::Config::default().fields("metadata.name=worker-0");
        let mut events = std::pin::pin!(watcher(watch_nodes, config));
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) = event {
                seen_tx.send_modify(|(version, cordoned)| {
                    *version = node.resource_version();
                    *cordoned |= unschedulable(&node) || marked(&node);
                });
            }
        }
    });
    let listed = nodes.get("worker-0").await.unwrap().resource_version();
    tokio::time::timeout(STARTUP, seen_rx.wait_for(|(version, _)| *version == listed))
        .await
        .expect("the worker-0 watch lists in time")
        .expect("the worker-0 watch runs");

    for (name, phase) in
        [("worker-0", SignalPhase::Cordoning), ("worker-1", SignalPhase::Uncordoning)]
    {
        let signal = earlier_run_signal(earlier_run, phase);
        let patch = json!({ "metadata": { "annotations": autopilot_api::signal::to_annotations(&signal) } });
        nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }

    // worker-0: failed, naming both runs, never cordoned.
    let status = wait_for(PLAN_TIMEOUT, "worker-0's earlier-run signal to fail", || async {
        let signal = node_signal(&client, "worker-0").await?;
        Ok(signal.and_then(|s| s.status).filter(|s| s.status == SignalPhase::Failed))
    })
    .await
    .unwrap();
    assert_eq!(
        status.reason.as_deref(),
        Some(
            format!(
                "not drained: the signal belongs to run {earlier_run}, not the plan's current run \
                 {current_run}"
            )
            .as_str()
        )
    );
    let worker0 = nodes.get("worker-0").await.unwrap();
    assert!(!unschedulable(&worker0) && !marked(&worker0), "worker-0 is not cordoned");
    // Every version up to this one was seen by the watch: none was cordoned.
    let latest = worker0.resource_version();
    let (_, cordoned) =
        tokio::time::timeout(PLAN_TIMEOUT, seen_rx.wait_for(|(version, _)| *version == latest))
            .await
            .expect("the worker-0 watch catches up")
            .expect("the worker-0 watch runs")
            .clone();
    recorder.abort();
    assert!(!cordoned, "worker-0 was cordoned for a signal of an earlier run");

    // worker-1: autopilot's own cordon is undone whatever run the signal belongs to.
    wait_for(PLAN_TIMEOUT, "worker-1's earlier-run UnCordoning to complete", || async {
        let signal = node_signal(&client, "worker-1").await?;
        Ok(signal.and_then(|s| s.status).filter(|s| s.status == SignalPhase::Completed))
    })
    .await
    .unwrap();
    let worker1 = nodes.get("worker-1").await.unwrap();
    assert!(!unschedulable(&worker1) && !marked(&worker1), "worker-1 uncordoned");
}
