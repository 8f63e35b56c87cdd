//! The pieces of workloads on real nodes that tests, the demo and the benchmarks share: a
//! busybox container that serves until it is told to stop, a Pod template of it, the
//! Deployments, budgets and DaemonSets made of them (all in `default`), and readiness as the
//! kubelet reports it.

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::PostParams;

use super::image::BUSYBOX_IMAGE;

/// A container script that runs until it is told to stop (SIGTERM), and stops at once then.
pub const SERVE: &str = "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done";

/// A container `name` running `script` with `/bin/sh -c` in the nodes' busybox image
/// (`imagePullPolicy: Never`), Ready once its exec probe passes (every second).
pub fn container(name: &str, script: &str) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script],
        "readinessProbe": { "exec": { "command": ["/bin/true"] }, "periodSeconds": 1 },
    })
}

/// A Pod template labelled `app: <app>` with one [`SERVE`] container named `app` and a
/// 5-second termination grace period (for a Deployment or DaemonSet).
pub fn pod_template(app: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": { "labels": { "app": app } },
        "spec": { "terminationGracePeriodSeconds": 5, "containers": [container(app, SERVE)] },
    })
}

/// Whether the Pod's `Ready` condition is `True`.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether the Node's `Ready` condition is `True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Creates Deployment `name` in `default` with `replicas` Pods of `template` (its Pods must
/// carry the label `app: <name>`, as [`pod_template`]`(name)` does).
pub async fn deployment(
    client: &kube::Client,
    name: &str,
    replicas: usize,
    template: serde_json::Value,
) -> anyhow::Result<()> {
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": template,
        },
    }))?;
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await
        .with_context(|| format!("creating Deployment {name}"))?;
    Ok(())
}

/// Creates PodDisruptionBudget `name` in `default` over the Pods labelled `app: <app>`,
/// needing `min_available` of them.
pub async fn budget(
    client: &kube::Client,
    name: &str,
    app: &str,
    min_available: usize,
) -> anyhow::Result<()> {
    let budget: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": { "minAvailable": min_available, "selector": { "matchLabels": { "app": app } } },
    }))?;
    Api::<PodDisruptionBudget>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &budget)
        .await
        .with_context(|| format!("creating PodDisruptionBudget {name}"))?;
    Ok(())
}

/// Creates DaemonSet `name` in `default` running [`pod_template`]`(name)` on every node.
pub async fn daemon_set(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let daemon_set: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": { "selector": { "matchLabels": { "app": name } }, "template": pod_template(name) },
    }))?;
    Api::<DaemonSet>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &daemon_set)
        .await
        .with_context(|| format!("creating DaemonSet {name}"))?;
    Ok(())
}

/// Waits (up to `timeout`) for the `default` ServiceAccount of `default`, which the
/// controller-manager creates shortly after it starts; Pods are refused without it.
pub async fn wait_default_service_account(
    client: &kube::Client,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    crate::wait_for(timeout, "the default ServiceAccount", || async {
        Ok(accounts.get_opt("default").await?.map(|_| ()))
    })
    .await
}
