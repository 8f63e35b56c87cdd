//! Registering this controller's `ControlNode`.
//!
//! The ControlNode is how the Plan engine finds a controller (labels for platform and
//! selectors, InternalIP for the readiness probe) and how the controller receives update
//! signals. Unlike k0s, the labels and the mode annotation are re-applied on every start, so
//! switching a controller to `--enable-worker` is reflected (k0s writes them only once).

use std::net::SocketAddr;

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_api::v1beta2::ControlNode;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::info;

/// What kind of controller this is, published as the `autopilot.k0sproject.io/mode`
/// annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A pure control-plane node: no kubelet, never cordoned.
    Controller,
    /// A controller that also runs workloads: cordoned and drained during updates.
    ControllerWorker,
}

impl Mode {
    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Controller => keys::MODE_CONTROLLER,
            Mode::ControllerWorker => keys::MODE_CONTROLLER_WORKER,
        }
    }
}

/// Everything this controller publishes about itself.
#[derive(Clone, Debug)]
pub struct Registration {
    /// ControlNode name (also the `kubernetes.io/hostname` label and `Hostname` address).
    pub name: String,
    /// Controller or controller+worker.
    pub mode: Mode,
    /// This controller's API server: its IP is the `InternalIP` address, and the whole
    /// address is published as an annotation so the leader probes `/readyz` on the right port.
    pub api_address: SocketAddr,
    /// The running k0s version (`status.k0sVersion`).
    pub version: String,
}

/// Create or update the ControlNode's metadata and status (server-side apply, our field
/// manager only, so signal annotations written by others are left alone).
pub async fn register(client: &kube::Client, registration: &Registration) -> anyhow::Result<()> {
    let api: Api<ControlNode> = Api::all(client.clone());
    let params = PatchParams::apply(keys::FIELD_MANAGER).force();
    let Registration { name, mode, api_address, version } = registration;

    let metadata = json!({
        "apiVersion": keys::API_VERSION,
        "kind": "ControlNode",
        "metadata": {
            "name": name,
            "labels": {
                keys::LABEL_HOSTNAME: name,
                keys::LABEL_OS: autopilot_api::platform::os(),
                keys::LABEL_ARCH: autopilot_api::platform::arch(),
            },
            "annotations": {
                keys::ANNOTATION_MODE: mode.as_str(),
                keys::ANNOTATION_API_ADDRESS: api_address.to_string(),
            },
        },
    });
    api.patch(name, &params, &Patch::Apply(&metadata))
        .await
        .with_context(|| format!("applying ControlNode {name}"))?;

    let status = json!({
        "apiVersion": keys::API_VERSION,
        "kind": "ControlNode",
        "metadata": { "name": name },
        "status": {
            "addresses": [
                { "type": keys::ADDRESS_INTERNAL_IP, "address": api_address.ip().to_string() },
                { "type": keys::ADDRESS_HOSTNAME, "address": name },
            ],
            "k0sVersion": version,
        },
    });
    api.patch_status(name, &params, &Patch::Apply(&status))
        .await
        .with_context(|| format!("applying the status of ControlNode {name}"))?;
    info!(control_node = %name, mode = mode.as_str(), version = %version, "ControlNode registered");
    Ok(())
}
