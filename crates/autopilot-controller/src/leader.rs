//! Leader election on the `k0s-autopilot/k0s-autopilot-controller` Lease.
//!
//! Built on `kube-lease-manager` (server-side apply of the Lease, conflict detection). Every
//! controller takes part; the identity is `<node-name>_<random suffix>`, new on every process
//! start, so `kubectl get lease -n k0s-autopilot` tells operators which controller leads.
//! On shutdown the lease is released so another controller takes over at once.

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::keys;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use rand::Rng as _;
use serde_json::json;
use tokio::sync::watch;
use tracing::{info, warn};

/// How long to wait for the lease to be released on shutdown before giving up on it (it
/// then expires on its own after the lease duration).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Election timings, validated.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    /// Whole seconds a claim is valid without renewal.
    lease_secs: u64,
    /// Whole seconds before expiry at which the holder renews.
    grace_secs: u64,
    /// Wait before rejoining after the election task failed.
    retry_period: Duration,
}

impl Timings {
    /// Check and convert `--lease-duration`, `--renew-deadline` and `--retry-period`.
    ///
    /// The lease works in whole seconds (the Lease API stores `leaseDurationSeconds`), so the
    /// durations are rounded up to seconds.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> anyhow::Result<Self> {
        let lease_secs = ceil_secs(lease_duration);
        let renew_secs = ceil_secs(renew_deadline);
        anyhow::ensure!(
            lease_secs >= 2,
            "--lease-duration must be at least 2s (got {lease_duration:?})"
        );
        anyhow::ensure!(
            renew_secs >= 1 && renew_secs < lease_secs,
            "--renew-deadline must be at least 1s and shorter than --lease-duration \
             (got {renew_deadline:?} and {lease_duration:?})"
        );
        anyhow::ensure!(!retry_period.is_zero(), "--retry-period must be greater than zero");
        Ok(Self { lease_secs, grace_secs: lease_secs - renew_secs, retry_period })
    }
}

fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// A lease identity unique to this process start: `<node-name>_<8 hex digits>`.
pub fn identity(node_name: &str) -> String {
    let suffix: u32 = rand::rng().random();
    format!("{node_name}_{suffix:08x}")
}

/// Take part in the election until `shutdown` resolves, logging every leadership change and
/// publishing it on `leading` (the Plan engine runs only while it is `true`) and as 1 or 0 on
/// `is_leader_gauge` (the `is_leader` metric).
///
/// The returned error means the election could not be set up at all; failures after that
/// are logged and the election is rejoined after the retry period.
pub async fn run(
    client: kube::Client,
    identity: String,
    timings: Timings,
    leading: watch::Sender<bool>,
    is_leader_gauge: prometheus_client::metrics::gauge::Gauge,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    ensure_namespace(&client).await?;
    let mut shutdown = std::pin::pin!(shutdown);
    info!(%identity, lease = %format!("{}/{}", keys::NAMESPACE, keys::LEASE_NAME), "joining leader election");
    loop {
        let params = LeaseParams::new(identity.clone(), timings.lease_secs, timings.grace_secs);
        let manager = LeaseManagerBuilder::new(client.clone(), keys::LEASE_NAME)
            .with_namespace(keys::NAMESPACE)
            .with_parameters(params)
            .build()
            .await;
        let manager = match manager {
            Ok(manager) => manager,
            Err(err) => {
                warn!(error = %err, "cannot set up the leader lease, retrying");
                tokio::select! {
                    () = tokio::time::sleep(timings.retry_period) => continue,
                    () = &mut shutdown => return Ok(()),
                }
            }
        };
        let (mut lease_state, mut task) = manager.watch().await;
        let mut is_leader = false;
        loop {
            tokio::select! {
                changed = lease_state.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let now = *lease_state.borrow_and_update();
                    if now != is_leader {
                        is_leader = now;
                        if is_leader {
                            info!(%identity, leader = true, "became the autopilot leader");
                        } else {
                            info!(%identity, leader = false, "lost autopilot leadership");
                        }
                        leading.send_replace(is_leader);
                        is_leader_gauge.set(i64::from(is_leader));
                    }
                }
                () = &mut shutdown => {
                    info!(%identity, leader = is_leader, "shutting down, releasing the leader lease");
                    leading.send_replace(false);
            is_leader_gauge.set(0);
                    drop(lease_state);
                    return release(task, &identity).await;
                }
            }
        }
        // The watch channel closed: the election task ended. Find out why, then rejoin.
        match (&mut task).await {
            Ok(Ok(_)) => warn!("leader election task ended, rejoining"),
            Ok(Err(err)) => warn!(error = %err, "leader election failed, rejoining"),
            Err(err) => warn!(error = %err, "leader election task panicked, rejoining"),
        }
        if is_leader {
            info!(%identity, leader = false, "lost autopilot leadership");
            leading.send_replace(false);
            is_leader_gauge.set(0);
        }
        tokio::select! {
            () = tokio::time::sleep(timings.retry_period) => {}
            () = &mut shutdown => return Ok(()),
        }
    }
}

/// Wait for the election task to release the lease (it does so once the watch receiver is
/// dropped), bounded by [`RELEASE_TIMEOUT`].
async fn release(
    task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
    identity: &str,
) -> anyhow::Result<()> {
    match tokio::time::timeout(RELEASE_TIMEOUT, task).await {
        Ok(Ok(Ok(_))) => {
            info!(%identity, "leader lease released");
            Ok(())
        }
        Ok(Ok(Err(err))) => {
            warn!(error = %err, "releasing the leader lease failed; it expires on its own");
            Ok(())
        }
        Ok(Err(err)) => Err(err).context("leader election task panicked"),
        Err(_) => {
            warn!("releasing the leader lease timed out; it expires on its own");
            Ok(())
        }
    }
}

/// Create the autopilot namespace if it is missing (server-side apply, idempotent).
async fn ensure_namespace(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let namespace = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": keys::NAMESPACE },
    });
    api.patch(keys::NAMESPACE, &PatchParams::apply(keys::FIELD_MANAGER), &Patch::Apply(&namespace))
        .await
        .with_context(|| format!("applying namespace {}", keys::NAMESPACE))?;
    Ok(())
}
