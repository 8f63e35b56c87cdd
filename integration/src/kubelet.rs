//! A stand-in for one kubelet duty, for nodes that have no kubelet: confirming pod deletions
//! ([`FakeKubelet`]). Scenarios with Pods run on real nodes ([`crate::real_node`]) instead.
//!
//! A pod bound to a node without a kubelet that is evicted (or deleted with a grace period)
//! would stay `Terminating` forever. [`FakeKubelet`] watches the
//! pods of the given nodes and, when one gets a `deletionTimestamp`, deletes it with grace
//! period 0 — what a kubelet does once the containers have stopped.

use std::collections::BTreeSet;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::task::JoinHandle;

/// Confirms the deletion of terminating pods on a set of nodes; stops when dropped.
#[derive(Debug)]
pub struct FakeKubelet {
    task: JoinHandle<()>,
}

impl FakeKubelet {
    /// Start confirming deletions of pods bound to any of `nodes`.
    pub fn start(client: kube::Client, nodes: &[&str]) -> Self {
        let nodes: BTreeSet<String> = nodes.iter().map(|n| (*n).to_string()).collect();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::all(client.clone());
            let mut events = watcher(pods, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                let Ok(pod) = event else { continue };
                if bound_to(&pod, &nodes) && pod.metadata.deletion_timestamp.is_some() {
                    confirm_deletion(&client, &pod, "fake kubelet").await;
                }
            }
        });
        Self { task }
    }
}

/// Whether `pod` is bound to one of `nodes`.
fn bound_to(pod: &Pod, nodes: &BTreeSet<String>) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| nodes.contains(n))
}

/// Delete a terminating `pod` with grace period 0, as a kubelet does once its containers
/// stopped; `who` names the stand-in in the log line of a failure.
async fn confirm_deletion(client: &kube::Client, pod: &Pod, who: &str) {
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let params = DeleteParams::default().grace_period(0);
    if let Err(err) = api.delete(&pod.name_any(), &params).await {
        eprintln!("{who}: confirming deletion of {namespace}/{}: {err}", pod.name_any());
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}
