//! The signal agent: the shell around [`crate::phase::next`] for this node's own object.
//!
//! Watches only its own signal object (its `Node` for a worker), and on every change: reads
//! the signal, gathers the host facts, asks the phase machine for the next step and performs
//! it — writing the node-side status (with the object's resourceVersion as precondition) or
//! running a host action. A restart ends [`run`] with [`Outcome::Restart`]; the binary then
//! re-executes itself (or exits for a supervisor) after a clean shutdown.

use std::time::Duration;

use autopilot_api::signal::{self, SignalData, SignalPhase, SignalStatus, UpdateRef};
use futures::StreamExt as _;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{debug, info, warn};

use crate::host::{self, Host, SignalKey};
use crate::phase::{self, OnFailure, Step};
use crate::status;

/// First wait before retrying a failed idempotent action; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Longest wait between retries of a failed idempotent action.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// How [`run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The shutdown signal arrived.
    Stopped,
    /// The new binary is in place and the restart is prepared: restart the process.
    Restart,
}

/// What the agent acts as.
#[derive(Clone, Debug)]
pub struct Agent {
    /// The object's name (this node).
    pub name: String,
    /// The running k0s version.
    pub version: String,
    /// Whether a kubelet runs here (the leader drains it).
    pub kubelet: bool,
    /// Act only on airgap signals (the Node of a controller+worker: its k0s updates come
    /// through its ControlNode, and one process must not swap its binary twice).
    pub airgap_only: bool,
    /// Where the agent shows the signal it acts on (for `k0s status`).
    pub board: status::Board,
}

/// Act on the signals of the object `agent.name` of kind `K` until `shutdown` resolves or a
/// restart is due.
pub async fn run<K, H>(
    client: kube::Client,
    agent: Agent,
    host: &H,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Outcome>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    H: Host,
{
    let api: Api<K> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", agent.name));
    let mut objects = watcher(api.clone(), config).default_backoff().applied_objects().boxed();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut retry = FIRST_RETRY;
    let mut latest: Option<K> = None;
    info!(node = %agent.name, kind = %K::kind(&()), "signal agent watching its own object");
    loop {
        // Act on the newest version of the object; after a failed action, try again after
        // the backoff even if nothing changes.
        let pending_retry = latest.is_some();
        tokio::select! {
            event = objects.next() => match event {
                Some(Ok(object)) => latest = Some(object),
                Some(Err(err)) => {
                    debug!(error = %err, "watch of own object interrupted, resuming");
                    continue;
                }
                None => anyhow::bail!("the watch of {} ended", agent.name),
            },
            () = tokio::time::sleep(retry), if pending_retry => {}
            () = &mut shutdown => return Ok(Outcome::Stopped),
        }
        let Some(object) = latest.take() else { continue };
        match act(&api, &agent, host, &object).await {
            Ok(Acted::Idle) => retry = FIRST_RETRY,
            Ok(Acted::Restart) => return Ok(Outcome::Restart),
            Ok(Acted::Retry) => {
                retry = (retry * 2).min(MAX_RETRY);
                latest = Some(object);
            }
            Err(err) => {
                warn!(node = %agent.name, error = %format!("{err:#}"), retry_in = ?retry, "signal agent step failed");
                retry = (retry * 2).min(MAX_RETRY);
                // Re-read before retrying: the failure may be a conflict.
                latest = api.get_opt(&agent.name).await.ok().flatten();
            }
        }
    }
}

enum Acted {
    /// Done for now; wait for the object to change.
    Idle,
    /// An idempotent action failed; try again after the backoff.
    Retry,
    /// Restart the process now.
    Restart,
}

async fn act<K, H>(api: &Api<K>, agent: &Agent, host: &H, object: &K) -> anyhow::Result<Acted>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    H: Host,
{
    let object_ref = format!("{}/{}", K::kind(&()), object.name_any());
    let data = match signal::from_meta(object.meta()) {
        Ok(Some(data)) => data,
        Ok(None) => {
            agent.board.clear(&object_ref);
            return Ok(Acted::Idle);
        }
        Err(err) => {
            debug!(error = %err, "ignoring an invalid signal");
            agent.board.clear(&object_ref);
            return Ok(Acted::Idle);
        }
    };
    if agent.airgap_only && !matches!(data.command.update(), Some(UpdateRef::Airgap(_))) {
        debug!(node = %agent.name, "not an airgap signal; the ControlNode's agent handles updates");
        return Ok(Acted::Idle);
    }
    let publish = |data: &SignalData| match status::SignalView::of(object_ref.clone(), data) {
        Some(view) => agent.board.publish(view),
        None => agent.board.clear(&object_ref),
    };
    publish(&data);
    let Some(update) = data.command.update() else { return Ok(Acted::Idle) };
    let key = SignalKey::of(&data);
    let current = data.phase();
    let observed = host.observe(&key, update).await?;
    let facts = observed.facts(update, &agent.version, agent.kubelet);
    let step = phase::next(current, &facts);
    debug!(node = %agent.name, phase = ?current, ?step, "signal agent step");
    match step {
        Step::Done | Step::Wait(_) => Ok(Acted::Idle),
        Step::Report { phase, reason } => {
            publish(&write_status(api, object, &data, phase, reason).await?);
            Ok(Acted::Idle)
        }
        Step::Run { action, on_success, on_failure } => {
            let is_restart = matches!(action, phase::HostAction::Restart);
            info!(node = %agent.name, action = ?action.kind(), "signal agent performing");
            match host::perform(host, &action, &key).await {
                Ok(()) if is_restart => {
                    info!(node = %agent.name, "new binary in place; restarting");
                    Ok(Acted::Restart)
                }
                Ok(()) => {
                    if current != Some(on_success) {
                        publish(&write_status(api, object, &data, on_success, None).await?);
                    }
                    Ok(Acted::Idle)
                }
                Err(err) => match on_failure {
                    OnFailure::Report(phase) => {
                        warn!(node = %agent.name, error = %err.reason(), "update failed");
                        let written =
                            write_status(api, object, &data, phase, Some(err.reason())).await?;
                        publish(&written);
                        Ok(Acted::Idle)
                    }
                    OnFailure::Retry => {
                        warn!(node = %agent.name, error = %err.reason(), "action failed, retrying");
                        Ok(Acted::Retry)
                    }
                },
            }
        }
    }
}

/// Write `phase` (and `reason`) as the node status of `data` on `object`, with its
/// resourceVersion as precondition; returns the signal as written.
async fn write_status<K>(
    api: &Api<K>,
    object: &K,
    data: &SignalData,
    phase: SignalPhase,
    reason: Option<String>,
) -> anyhow::Result<SignalData>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut status = SignalStatus::new(phase, jiff::Timestamp::now());
    status.reason = reason;
    let next = data.clone().with_status(status);
    let patch = json!({
        "metadata": {
            "resourceVersion": object.resource_version(),
            "annotations": signal::to_annotations(&next),
        },
    });
    api.patch(&object.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    info!(node = %object.name_any(), to = %phase, "signal status written");
    Ok(next)
}
