//! Nowhere to drain: a controller+worker alone (`--enable-worker`, the real node agent) with
//! one Running bare pod (no controller). Under `drain: IfPossible` the pod stays (it has no
//! controller, and nowhere else to go), so the node is cordoned but not drained, updates to
//! v2 and completes, the pod untouched and the Plan target's `drain` note naming it and what
//! evicting it would lose; `drain: Never` cordons and evicts nothing; the default, `Always`,
//! with `drainOptions.force` (the pod would be gone for good) evicts the pod. After each plan
//! the node is uncordoned.
//!
//! The controller is a real node ([`integration::real_node`]) that `k0s` runs whole: `k0s
//! controller --run-components --enable-worker` runs its API server, controller-manager and
//! scheduler, and its containerd and kubelet, which owns the Node and runs the pod in a real
//! container. Each update restarts all of them from the new binary; the pod's container runs
//! on.

use autopilot_api::v1beta2::DrainPolicy;
use integration::http::FileServer;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::Api;

use crate::support::*;

const NODE: &str = "controller-0";

use crate::real_nodes::run_to_completion as run_plan;

#[tokio::test]
async fn a_controller_worker_alone_updates_under_if_possible_never_skips_the_drain_and_always_drains_on_real_nodes()
 {
    let (v2, sha) = v2_build();
    let server = FileServer::start(v2).await.unwrap();
    // A real node run by `k0s controller --run-components --enable-worker`
    // (`real_controllers`): its kubelet owns the Node.
    let Fleet { cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("plan-single-node")
            .real_controllers()
            .agents(Agents::Real)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();
    let nodes = cluster.real_nodes().expect("the real node");
    // One Running pod on the node, with no budget (`Always` must be able to evict it).
    crate::real_nodes::wait_default_service_account(&client).await.unwrap();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web-0", "labels": { "app": "web" } },
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 5,
            "containers": [crate::real_nodes::container("app", crate::real_nodes::SERVE)],
        },
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&Default::default(), &pod)
        .await
        .unwrap();
    crate::real_nodes::wait_app_ready(&client, "web", 1).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let uid = pods.get("web-0").await.unwrap().uid();
    let only_node = Some(static_nodes(&[NODE], 1));

    // IfPossible: nowhere else to go, so cordoned, not drained; the update goes through.
    let update = autopilot_api::v1beta2::PlanCommandK0sUpdate {
        drain: Some(DrainPolicy::IfPossible),
        ..update_to(V2, server.base_url(), &sha, only_node.clone(), None)
    };
    let container = crate::real_nodes::container_ids(&pods.get("web-0").await.unwrap());
    let note = run_plan(&client, "single-if-possible", update).await;
    let note = note.expect("the target's drain note");
    assert_eq!(
        note,
        "cordoned, not drained of pod(s) held: default/web-0 (no controller, so it would be \
         gone for good (drainOptions.force evicts it)) (drain: IfPossible)"
    );
    assert_eq!(pods.get("web-0").await.unwrap().uid(), uid, "web-0 was not evicted");
    let running = nodes.running_containers(NODE).unwrap();
    assert!(container.is_subset(&running), "its container runs on: {running:?}");
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

    // Always (the default), forced: the pod is evicted even with nowhere to go.
    let update = autopilot_api::v1beta2::PlanCommandK0sUpdate {
        forceupdate: true,
        drain_options: Some(autopilot_api::v1beta2::DrainOptions {
            force: true,
            ..Default::default()
        }),
        ..update_to(V2, server.base_url(), &sha, only_node, None)
    };
    let note = run_plan(&client, "single-always", update).await;
    assert_eq!(note, None);
    assert!(pods.get_opt("web-0").await.unwrap().is_none(), "web-0 was evicted");
    let running = nodes.running_containers(NODE).unwrap();
    assert!(container.is_disjoint(&running), "its container stopped: {running:?}");
}
