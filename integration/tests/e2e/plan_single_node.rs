//! Nowhere to drain: a controller+worker alone (`--enable-worker`, the real node agent) with
//! one Running pod. Under `drain: IfPossible` the pod has nowhere else to go, so the node is
//! cordoned but not drained, updates to v2 and completes, the pod untouched and the Plan
//! target's `drain` note naming it; `drain: Never` cordons and evicts nothing; the default,
//! `Always`, still evicts the pod. After each plan the node is uncordoned.

use autopilot_api::v1beta2::{DrainPolicy, PlanStateType, TargetState};
use integration::http::FileServer;
use integration::kubelet::FakeKubelet;
use integration::wait_for;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams};

use crate::support::*;

const NODE: &str = "controller-0";

/// Run one plan of `update` to `Completed` and return its target's `drain` note.
async fn run_plan(
    client: &kube::Client,
    id: &str,
    update: autopilot_api::v1beta2::PlanCommandK0sUpdate,
) -> Option<String> {
    create_plan(client, &plan("autopilot", id, vec![k0s_command(update)])).await.expect("the plan");
    let done =
        wait_plan(client, "autopilot", PLAN_TIMEOUT, "Completed", |p| state(p).is_terminal())
            .await
            .expect("the plan ends");
    let status = status_yaml(&done);
    assert_eq!(state(&done), PlanStateType::Completed, "{id}: {status}");
    let node = target(&done, 0, NODE);
    assert_eq!(node.state, TargetState::SignalCompleted, "{id}: {status}");
    wait_no_autopilot_cordons(client, "autopilot").await.expect("no cordon left");
    let drain = node.drain.clone();
    delete_plan(client).await;
    drain
}

#[tokio::test]
async fn a_controller_worker_alone_updates_under_if_possible_never_skips_the_drain_and_always_drains()
 {
    let (v2, sha) = v2_build();
    let server = FileServer::start(v2).await.unwrap();
    let flags: Vec<&str> = FAST_ELECTION.iter().copied().chain(["--enable-worker"]).collect();
    let Fleet { cluster: _cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("plan-single-node")
            .controllers(1)
            .agents(Agents::Real)
            .controller_args(&flags)
            .start()
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(STARTUP, "Node controller-0 Ready", || async {
        Ok(nodes.get_opt(NODE).await?.filter(is_ready).map(|_| ()))
    })
    .await
    .unwrap();
    let _kubelet = FakeKubelet::start(client.clone(), &[NODE]);
    // One Running pod on the node, with no budget (no controller-manager runs here to
    // process one, and `Always` must be able to evict it).
    pods_under_budget(&client, &[NODE], 0).await.unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    budgets.delete("web-budget", &DeleteParams::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let uid = pods.get("web-0").await.unwrap().uid();
    let only_node = Some(static_nodes(&[NODE], 1));

    // IfPossible: nowhere else to go, so cordoned, not drained; the update goes through.
    let update = autopilot_api::v1beta2::PlanCommandK0sUpdate {
        drain: Some(DrainPolicy::IfPossible),
        ..update_to(V2, server.base_url(), &sha, only_node.clone(), None)
    };
    let note = run_plan(&client, "single-if-possible", update).await;
    let note = note.expect("the target's drain note");
    assert!(
        note.starts_with("cordoned, not drained of pod(s) default/web-0: no other Ready"),
        "{note}"
    );
    assert_eq!(pods.get("web-0").await.unwrap().uid(), uid, "web-0 was not evicted");
    assert_eq!(version_on_disk(&controllers[0]), V2);

    // Never: cordoned, no drain, whatever the pods.
    let update = autopilot_api::v1beta2::PlanCommandK0sUpdate {
        drain: Some(DrainPolicy::Never),
        forceupdate: true,
        ..update_to(V2, server.base_url(), &sha, only_node.clone(), None)
    };
    let note = run_plan(&client, "single-never", update).await;
    assert_eq!(note.as_deref(), Some("cordoned, not drained: the command's drain is Never"));
    assert_eq!(pods.get("web-0").await.unwrap().uid(), uid, "web-0 was not evicted");

    // Always (the default): the pod is evicted even with nowhere to go.
    let update = autopilot_api::v1beta2::PlanCommandK0sUpdate {
        forceupdate: true,
        ..update_to(V2, server.base_url(), &sha, only_node, None)
    };
    let note = run_plan(&client, "single-always", update).await;
    assert_eq!(note, None);
    assert!(pods.get_opt("web-0").await.unwrap().is_none(), "web-0 was evicted");
}
