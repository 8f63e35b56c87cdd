//! Least privilege (DESIGN §12, `manifests/rbac/`): a worker's `system:node:<name>` identity
//! cannot touch another Node, any ControlNode, any Plan or the update-server token; the
//! controller identity the harness gives every controller (bound only by `manifests/rbac/`)
//! cannot delete Nodes or CRDs, nor read any Secret but the token. Each refusal is an
//! attempted call answered 403, next to an allowed call of the same kind, so a refusal cannot
//! come from a broken client.

use autopilot_api::keys;
use autopilot_api::v1beta2::{ControlNode, Plan};
use integration::wait_for;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// The update-server token Secret the updater reads (`kube-system/update-server-token`).
const TOKEN_SECRET: &str = "update-server-token";

/// A Plan the identities try to change. Not named `autopilot`, so the engine ignores it.
const PROBE_PLAN: &str = "rbac-probe";

/// Asserts that `result` is the API server's 403 for `what`.
#[track_caller]
fn assert_forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

fn annotate(key: &str) -> serde_json::Value {
    json!({ "metadata": { "annotations": { key: "x" } } })
}

fn cordon() -> serde_json::Value {
    json!({ "spec": { "unschedulable": true } })
}

fn secret(name: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("kube-system".to_owned()),
            ..Default::default()
        },
        string_data: Some([("token".to_owned(), "s3cr3t".to_owned())].into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn workers_and_controllers_are_limited_to_what_autopilot_needs() {
    // The controller installs the CRDs and registers its ControlNode with its own restricted
    // identity; the workers register their Nodes with theirs.
    let Fleet { cluster, client: admin, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("rbac-least-privilege")
            .controllers(1)
            .workers(&WORKERS)
            .start()
            .await
            .unwrap();
    let control_nodes: Api<ControlNode> = Api::all(admin.clone());
    wait_for(STARTUP, "ControlNode controller-0", || async {
        Ok(control_nodes.get_opt("controller-0").await?)
    })
    .await
    .unwrap();
    let post = PostParams::default();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    secrets.create(&post, &secret(TOKEN_SECRET)).await.unwrap();
    secrets.create(&post, &secret("another-secret")).await.unwrap();
    let update = k0s_command(k0s_update(None, Some(static_nodes(&["worker-0"], 1))));
    create_plan(&admin, &plan(PROBE_PLAN, "id-1", vec![update])).await.unwrap();

    // --- the worker identity (system:node:worker-0) ---
    worker_identity(&cluster).await;

    // --- the controller identity ---
    controller_identity(&cluster).await;
}

/// What the worker identity (system:node:worker-0) may do: annotate its own Node, and
/// nothing else autopilot owns.
async fn worker_identity(cluster: &integration::Cluster) {
    let post = PostParams::default();
    let merge = PatchParams::default();
    let worker = cluster.node_client("worker-0").await.expect("worker-0's client");
    let nodes: Api<Node> = Api::all(worker.clone());
    nodes
        .patch("worker-0", &merge, &Patch::Merge(&annotate("example.com/own")))
        .await
        .expect("a worker may annotate its own Node");
    assert_forbidden(
        nodes.patch("worker-1", &merge, &Patch::Merge(&annotate("example.com/other"))).await,
        "worker-0 annotating Node worker-1",
    );
    assert_forbidden(
        nodes.patch("worker-1", &merge, &Patch::Merge(&cordon())).await,
        "worker-0 cordoning Node worker-1",
    );
    let worker_control_nodes: Api<ControlNode> = Api::all(worker.clone());
    assert_forbidden(
        worker_control_nodes
            .patch("controller-0", &merge, &Patch::Merge(&annotate("example.com/x")))
            .await,
        "worker-0 patching ControlNode controller-0",
    );
    let worker_plans: Api<Plan> = Api::all(worker.clone());
    assert_forbidden(
        worker_plans.create(&post, &plan("other", "id-2", Vec::new())).await,
        "worker-0 creating a Plan",
    );
    assert_forbidden(
        worker_plans
            .patch(PROBE_PLAN, &merge, &Patch::Merge(&annotate(keys::ANNOTATION_PAUSED)))
            .await,
        "worker-0 patching the Plan",
    );
    let worker_secrets: Api<Secret> = Api::namespaced(worker.clone(), "kube-system");
    assert_forbidden(worker_secrets.get(TOKEN_SECRET).await, "worker-0 reading the token");
}

/// What the controller identity may do: read its token, signal any Node, read its own CRDs;
/// not other Secrets or CRDs, nor delete Nodes, CRDs or the Plan.
async fn controller_identity(cluster: &integration::Cluster) {
    let merge = PatchParams::default();
    let controller = cluster.controller_client(0).await.expect("the controller's client");
    let controller_secrets: Api<Secret> = Api::namespaced(controller.clone(), "kube-system");
    controller_secrets.get(TOKEN_SECRET).await.expect("a controller may read the token");
    assert_forbidden(
        controller_secrets.get("another-secret").await,
        "a controller reading another Secret",
    );
    assert_forbidden(
        controller_secrets.list(&ListParams::default()).await,
        "a controller listing Secrets",
    );
    let controller_nodes: Api<Node> = Api::all(controller.clone());
    controller_nodes
        .patch("worker-1", &merge, &Patch::Merge(&annotate("example.com/by-controller")))
        .await
        .expect("a controller may annotate (signal) any Node");
    assert_forbidden(
        controller_nodes.delete("worker-1", &DeleteParams::default()).await,
        "a controller deleting a Node",
    );
    let controller_crds: Api<CustomResourceDefinition> = Api::all(controller.clone());
    let own_crd = ListParams::default().fields(&format!("metadata.name={}", keys::CRD_PLANS));
    controller_crds.list(&own_crd).await.expect("a controller may list its own CRD by name");
    // Its own CRDs it may read (their schema generation decides whether it applies them),
    // no other.
    controller_crds.get(keys::CRD_PLANS).await.expect("a controller may get its own CRD");
    assert_forbidden(
        controller_crds.get("widgets.example.com").await,
        "a controller getting another CRD",
    );
    assert_forbidden(
        controller_crds.delete(keys::CRD_PLANS, &DeleteParams::default()).await,
        "a controller deleting its CRD",
    );
    assert_forbidden(
        controller_crds.list(&ListParams::default()).await,
        "a controller listing all CRDs",
    );
    let controller_plans: Api<Plan> = Api::all(controller.clone());
    assert_forbidden(
        controller_plans.delete(PROBE_PLAN, &DeleteParams::default()).await,
        "a controller deleting the Plan",
    );
}
