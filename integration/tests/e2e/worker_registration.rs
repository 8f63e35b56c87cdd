//! Worker registration against the real control plane: a worker creates its own `Node` with
//! the platform labels and `Ready`, and with its credentials it cannot modify another
//! worker's Node (NodeRestriction).

use std::time::Duration;

use autopilot_api::keys;
use integration::{run_k0s, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::{Agents, Fleet, FleetBuilder};

const STARTUP: Duration = Duration::from_secs(60);

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
async fn worker_registers_a_ready_node_with_platform_labels() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("worker-register")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(client);
    let node = wait_for(STARTUP, "Node worker-0 Ready", || async {
        Ok(nodes.get_opt("worker-0").await?.filter(is_ready))
    })
    .await
    .unwrap();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(keys::LABEL_OS).map(String::as_str), Some(autopilot_api::platform::os()));
    assert_eq!(
        labels.get(keys::LABEL_ARCH).map(String::as_str),
        Some(autopilot_api::platform::arch())
    );
    assert_eq!(labels.get(keys::LABEL_HOSTNAME).map(String::as_str), Some("worker-0"));
    let version = String::from_utf8(run_k0s(&["version"]).unwrap().stdout).unwrap();
    assert_eq!(
        node.metadata.annotations.unwrap_or_default().get(keys::ANNOTATION_K0S_VERSION),
        Some(&version.trim().to_string())
    );
}

/// A worker beside a kubelet (the default: no `--register-node`) creates no Node, and once
/// the Node exists (the kubelet's job, done here by the test) its agent publishes its version
/// on it. One started with `--register-node` alone creates its Node with the `NoSchedule`
/// taint of a Node no kubelet runs.
#[tokio::test]
async fn a_worker_registers_no_node_by_default_and_a_registered_one_is_tainted() {
    // How a worker registers (or not) is what this test is about: it starts them itself.
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("worker-register-default")
            .controllers(1)
            .workers(&["worker-0", "worker-1"])
            .unstarted_controllers()
            .unstarted_workers()
            .start()
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(client);
    let args = |name: &str, extra: &[&str]| {
        let mut args: Vec<std::ffi::OsString> = vec![
            "worker".into(),
            "--kubeconfig".into(),
            cluster.node_kubeconfig(name).into(),
            "--data-dir".into(),
            cluster.node_data_dir(name).into(),
            "--node-name".into(),
            name.into(),
        ];
        args.extend(extra.iter().map(Into::into));
        args
    };
    let beside_kubelet = cluster.k0s_node("worker-0", args("worker-0", &[])).spawn().await.unwrap();
    beside_kubelet.wait_for_log("signal agent watching its own object", STARTUP).await.unwrap();
    assert!(nodes.get_opt("worker-0").await.unwrap().is_none(), "no Node was created");

    // The kubelet's part: the Node appears; the agent publishes its version on it.
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": "worker-0", "labels": { keys::LABEL_OS: "linux" } },
    }))
    .unwrap();
    nodes.create(&Default::default(), &node).await.unwrap();
    let version = String::from_utf8(run_k0s(&["version"]).unwrap().stdout).unwrap();
    wait_for(STARTUP, "worker-0's agent to publish its version", || async {
        let node = nodes.get("worker-0").await?;
        let annotations = node.metadata.annotations.unwrap_or_default();
        Ok(annotations.get(keys::ANNOTATION_K0S_VERSION).filter(|v| *v == version.trim()).cloned())
    })
    .await
    .unwrap();
    assert!(beside_kubelet.is_running(), "{}", beside_kubelet.log_tail(20));

    let registering =
        cluster.k0s_node("worker-1", args("worker-1", &["--register-node"])).spawn().await;
    let _registering = registering.unwrap();
    let node = wait_for(STARTUP, "Node worker-1 Ready", || async {
        Ok(nodes.get_opt("worker-1").await?.filter(is_ready))
    })
    .await
    .unwrap();
    let taints = node.spec.and_then(|spec| spec.taints).unwrap_or_default();
    assert!(
        taints.iter().any(|t| t.key == keys::TAINT_NO_KUBELET && t.effect == "NoSchedule"),
        "{taints:?}"
    );
}

#[tokio::test]
async fn worker_heartbeat_keeps_the_ready_condition_fresh() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("worker-heartbeat")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .worker_args(&["--heartbeat-interval", "1s"])
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(client);
    let heartbeat = |node: &Node| {
        node.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")?
            .last_heartbeat_time
            .clone()
    };
    let first = wait_for(STARTUP, "a Ready heartbeat", || async {
        Ok(nodes.get_opt("worker-0").await?.as_ref().and_then(heartbeat))
    })
    .await
    .unwrap();
    wait_for(Duration::from_secs(15), "a later heartbeat", || async {
        let now = nodes.get("worker-0").await.ok().as_ref().and_then(heartbeat);
        Ok(now.filter(|t| t.0 > first.0))
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn worker_credentials_cannot_modify_another_workers_node() {
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("worker-restrict")
            .controllers(1)
            .workers(&["worker-0", "worker-1"])
            .agents(Agents::Real)
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
    let admin_nodes: Api<Node> = Api::all(client);
    for name in ["worker-0", "worker-1"] {
        wait_for(STARTUP, "both Nodes Ready", || async {
            Ok(admin_nodes.get_opt(name).await?.filter(is_ready))
        })
        .await
        .unwrap();
    }

    let as_worker0: Api<Node> = Api::all(cluster.node_client("worker-0").await.unwrap());
    let patch = json!({ "metadata": { "labels": { "example.com/touched": "yes" } } });
    // Its own Node: allowed.
    as_worker0.patch("worker-0", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // Another worker's Node: refused by the Node authorizer / NodeRestriction.
    let refused = as_worker0
        .patch("worker-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect_err("worker-0 must not modify worker-1's Node");
    match refused {
        kube::Error::Api(status) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected a 403 from the API server, got {other}"),
    }
    let untouched = admin_nodes.get("worker-1").await.unwrap();
    assert!(!untouched.metadata.labels.unwrap_or_default().contains_key("example.com/touched"));
}
