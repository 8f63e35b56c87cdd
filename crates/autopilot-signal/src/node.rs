//! Registering this worker's `Node` and keeping it fresh.
//!
//! This distribution's workers have no kubelet in the test topology, so the worker does the
//! part of a kubelet's job that autopilot relies on: the `Node` exists with the platform
//! labels, its `Ready` condition is `True` with a recent heartbeat, its node lease in
//! `kube-node-lease` is renewed, and the running k0s version is published. Everything is
//! written with the node's own credentials, so NodeRestriction limits it to its own objects.

use std::future::Future;
use std::time::Duration;

use autopilot_api::backoff::Capped;
use autopilot_api::keys;
use autopilot_shell::retry;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::{debug, info, warn};

/// Seconds a node lease stays valid, as the kubelet sets it.
const NODE_LEASE_SECONDS: i32 = 40;

/// First delay between attempts while the API server is unreachable at startup.
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(200);

/// Longest delay between attempts while the API server is unreachable at startup: the
/// short cap of every watch and retry of autopilot, so a node restarted during an outage
/// registers (and its update proceeds) within that cap of the API server answering again.
const MAX_RETRY_DELAY: Duration = autopilot_api::backoff::CAP;

/// The heartbeat of one worker's Node.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    /// The Node name (this worker's identity, `system:node:<name>`).
    pub name: String,
    /// The running k0s version, published as an annotation.
    pub version: String,
    /// Create the Node without the [`keys::TAINT_NO_KUBELET`] `NoSchedule` taint.
    pub schedulable: bool,
}

impl Heartbeat {
    /// Create the Node if it is absent (labels, version annotation) and mark it Ready.
    ///
    /// While the API server cannot answer (connection failures, 5xx, 429) this keeps retrying
    /// with capped backoff: for ever with a zero `startup_timeout` (an outage never kills a
    /// node), else until it has passed, and then the error names the API server. A
    /// misconfiguration (TLS trust, 401/403) fails at once.
    pub async fn register(
        &self,
        client: &kube::Client,
        server_url: &str,
        startup_timeout: Duration,
    ) -> anyhow::Result<()> {
        let delays = Capped::new(FIRST_RETRY_DELAY, MAX_RETRY_DELAY);
        let what = format!("registering Node {}", self.name);
        retry::until(retry::deadline_after(startup_timeout), delays, &what, || async {
            self.create_if_absent(client).await?;
            self.beat(client, true).await
        })
        .await
        .map_err(|gave_up| gave_up.into_startup_error(server_url, startup_timeout, &what))?;
        info!(node = %self.name, version = %self.version, "Node registered and ready");
        Ok(())
    }

    /// A trial boot's proof (DESIGN §14): with this node's credentials, read its own `Node`
    /// (retrying an unreachable API server as [`Heartbeat::register`] does). Writes nothing:
    /// the live binary stays the one keeping the Node.
    pub async fn read_own(
        &self,
        client: &kube::Client,
        server_url: &str,
        startup_timeout: Duration,
    ) -> anyhow::Result<()> {
        let delays = Capped::new(FIRST_RETRY_DELAY, MAX_RETRY_DELAY);
        let what = format!("reading Node {}", self.name);
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
        retry::until(retry::deadline_after(startup_timeout), delays, &what, || {
            nodes.get(&self.name)
        })
        .await
        .map_err(|gave_up| gave_up.into_startup_error(server_url, startup_timeout, &what))?;
        info!(node = %self.name, "read its own Node (trial boot)");
        Ok(())
    }

    /// Renew the Ready condition and node lease every `interval` until `shutdown` resolves.
    /// Failures are logged and retried at the next beat.
    pub async fn run(
        &self,
        client: &kube::Client,
        interval: Duration,
        shutdown: impl Future<Output = ()>,
    ) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    if let Err(err) = self.beat(client, false).await {
                        warn!(node = %self.name, error = %err, "node heartbeat failed");
                    }
                }
                () = &mut shutdown => return,
            }
        }
    }

    async fn create_if_absent(&self, client: &kube::Client) -> Result<(), kube::Error> {
        let api: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": self.labels(),
                "annotations": { keys::ANNOTATION_K0S_VERSION: self.version },
            },
            "spec": { "taints": self.taints() },
        }))
        .expect("a Node literal deserialises");
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {
                info!(node = %self.name, "created Node");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                // Already registered (a restart): refresh what we own on it.
                let patch = json!({
                    "metadata": {
                        "labels": self.labels(),
                        "annotations": { keys::ANNOTATION_K0S_VERSION: self.version },
                    },
                });
                api.patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                debug!(node = %self.name, "Node already registered, labels refreshed");
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// The taints a Node this process creates carries: none when schedulable, else
    /// [`keys::TAINT_NO_KUBELET`] with `NoSchedule` (no kubelet would run its Pods).
    fn taints(&self) -> serde_json::Value {
        if self.schedulable {
            json!([])
        } else {
            json!([{ "key": keys::TAINT_NO_KUBELET, "effect": "NoSchedule" }])
        }
    }

    fn labels(&self) -> serde_json::Value {
        json!({
            keys::LABEL_HOSTNAME: self.name,
            keys::LABEL_OS: autopilot_api::platform::os(),
            keys::LABEL_ARCH: autopilot_api::platform::arch(),
        })
    }

    /// One heartbeat: Ready=True with a fresh heartbeat time, and the node lease renewed.
    /// `first` marks the transition to Ready (at registration); later beats keep the
    /// transition time (conditions merge by `type`).
    async fn beat(&self, client: &kube::Client, first: bool) -> Result<(), kube::Error> {
        let now = Time(jiff::Timestamp::now());
        let nodes: Api<Node> = Api::all(client.clone());
        let mut ready = json!({
            "type": "Ready",
            "status": "True",
            "reason": "K0sWorkerReady",
            "message": "k0s worker is posting ready status",
            "lastHeartbeatTime": now,
        });
        if first {
            ready["lastTransitionTime"] = json!(now);
        }
        let status = json!({
            "status": {
                "conditions": [ready],
                // No `kubeletVersion`: that is the kubelet's report (the version skew rules
                // judge a worker by it), and this worker runs none; the field merges, so a
                // report written by another hand stays.
                "nodeInfo": {
                    "architecture": autopilot_api::platform::arch(),
                    "operatingSystem": autopilot_api::platform::os(),
                    "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                    "kubeProxyVersion": "", "machineID": "",
                    "osImage": "", "systemUUID": "",
                },
            },
        });
        nodes.patch_status(&self.name, &PatchParams::default(), &Patch::Strategic(&status)).await?;

        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": { "name": self.name },
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": NODE_LEASE_SECONDS,
                "renewTime": MicroTime(jiff::Timestamp::now()),
            },
        });
        let params = PatchParams::apply(keys::FIELD_MANAGER).force();
        leases.patch(&self.name, &params, &Patch::Apply(&lease)).await?;
        Ok(())
    }
}
