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
use autopilot_shell::leadership::{Claim, Elector};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use rand::RngExt as _;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{error, info, warn};

/// How long to wait for the lease to be released on shutdown before giving up on it (it
/// then expires on its own after the lease duration).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Election timings, validated.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    /// Whole seconds a claim is valid without renewal (`--lease-duration`).
    lease_secs: u64,
    /// Whole seconds before expiry at which the holder renews: it renews every
    /// `lease_secs - grace_secs` seconds (`--retry-period`, rounded up to seconds).
    grace_secs: u64,
    /// How long the leader goes on leading without a renewal seen (`--renew-deadline`).
    renew_deadline: Duration,
    /// How often the leader renews, and how long to wait after a failed lease operation
    /// before trying again (`--retry-period`).
    retry_period: Duration,
}

impl Timings {
    /// Check and convert `--lease-duration`, `--renew-deadline` and `--retry-period`:
    /// `retry-period < renew-deadline < lease-duration`, as kube-controller-manager's.
    ///
    /// The lease works in whole seconds (the Lease API stores `leaseDurationSeconds`), so
    /// the lease duration and the renewal period are rounded up to seconds.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> anyhow::Result<Self> {
        let lease_secs = ceil_secs(lease_duration);
        let renew_every = ceil_secs(retry_period);
        anyhow::ensure!(
            lease_secs >= 2,
            "--lease-duration must be at least 2s (got {lease_duration:?})"
        );
        anyhow::ensure!(!retry_period.is_zero(), "--retry-period must be greater than zero");
        anyhow::ensure!(
            retry_period < renew_deadline && renew_deadline < lease_duration,
            "--renew-deadline must be longer than --retry-period and shorter than \
             --lease-duration (got {renew_deadline:?}, {retry_period:?} and {lease_duration:?})"
        );
        anyhow::ensure!(
            renew_every < lease_secs,
            "--retry-period rounded up to whole seconds ({renew_every}s) must be shorter than \
             --lease-duration ({lease_secs}s)"
        );
        Ok(Self { lease_secs, grace_secs: lease_secs - renew_every, renew_deadline, retry_period })
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
/// publishing the claims it sees through `elector` (the Plan engine and the updater act
/// only while [`Leadership::is_current`](autopilot_shell::leadership::Leadership::is_current)),
/// and 1 or 0 on `is_leader_gauge` (the `is_leader` metric).
///
/// The election (`kube-lease-manager`) claims and renews the lease; a watch of the Lease
/// object tells who holds it and when each renewal lands, so a claim's expiry is counted on
/// this process's clock from the renewal it last saw.
///
/// The leader renews every `--retry-period` and leads only while its last renewal seen is
/// less than `--renew-deadline` old; a failed lease operation is logged and tried again
/// every `--retry-period`. The returned error means the election task panicked.
pub async fn run(
    client: kube::Client,
    identity: String,
    timings: Timings,
    elector: Elector,
    is_leader_gauge: prometheus_client::metrics::gauge::Gauge,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    ensure_namespace(&client).await?;
    let mut shutdown = std::pin::pin!(shutdown);
    info!(%identity, lease = %format!("{}/{}", keys::NAMESPACE, keys::LEASE_NAME), "joining leader election");
    let (seen_tx, mut seen) = watch::channel(None);
    let lease_watch = tokio::spawn(watch_lease(client.clone(), identity.clone(), timings, seen_tx));
    let _stop_lease_watch = tokio_util::task::AbortOnDropHandle::new(lease_watch);
    let mut state =
        State { identity: &identity, elector: &elector, gauge: &is_leader_gauge, is_leader: false };
    let manager = loop {
        let params = LeaseParams::new(identity.clone(), timings.lease_secs, timings.grace_secs);
        let manager = LeaseManagerBuilder::new(client.clone(), keys::LEASE_NAME)
            .with_namespace(keys::NAMESPACE)
            .with_parameters(params)
            .build()
            .await;
        match manager {
            Ok(manager) => break manager,
            Err(err) => {
                warn!(error = %err, "cannot set up the leader lease, retrying");
                tokio::select! {
                    () = tokio::time::sleep(timings.retry_period) => {}
                    () = &mut shutdown => return Ok(()),
                }
            }
        }
    };
    let (lease_tx, mut lease_state) = watch::channel(false);
    let mut task = tokio::spawn(elect(manager, timings.retry_period, lease_tx));
    // Never while the process runs (the watch retries for ever); kept from spinning.
    let mut lease_watch_ended = false;
    loop {
        tokio::select! {
            changed = lease_state.changed() => {
                if changed.is_err() {
                    // The election task panicked (it only ends when told to).
                    state.set_leader(false, &seen.borrow());
                    return match (&mut task).await {
                        Err(err) => Err(err).context("leader election task panicked"),
                        Ok(_) => Err(anyhow::anyhow!("leader election task ended")),
                    };
                }
                let now = *lease_state.borrow_and_update();
                state.set_leader(now, &seen.borrow());
            }
            changed = seen.changed(), if !lease_watch_ended => {
                match changed {
                    Ok(()) => state.publish(&seen.borrow_and_update()),
                    Err(_) => lease_watch_ended = true,
                }
            }
            () = &mut shutdown => {
                info!(%identity, leader = state.is_leader, "shutting down, releasing the leader lease");
                state.set_leader(false, &None);
                drop(lease_state);
                return release(task, &identity).await;
            }
        }
    }
}

/// Claim and renew the lease until `leader` is closed, sending whether this process holds
/// it on every change; then hand the manager back (to release the lease).
///
/// A failed lease operation (the API server unreachable) is tried again every
/// `retry_period`, not after the lease library's own growing backoff: a renewal must get
/// through within `--renew-deadline` of the last, and a 5 s blip of the API server must not
/// cost the lease.
async fn elect(
    manager: kube_lease_manager::LeaseManager,
    retry_period: Duration,
    leader: watch::Sender<bool>,
) -> kube_lease_manager::LeaseManager {
    loop {
        tokio::select! {
            biased;
            () = leader.closed() => return manager,
            changed = manager.changed() => match changed {
                Ok(is_leader) => {
                    leader.send_replace(is_leader);
                }
                Err(err) => {
                    warn!(error = %err, "leader lease operation failed, retrying");
                    tokio::select! {
                        () = leader.closed() => return manager,
                        () = tokio::time::sleep(retry_period) => {}
                    }
                }
            },
        }
    }
}

/// The election's view: whether the lease manager says this process holds the lease, and
/// where the resulting claims are published.
struct State<'a> {
    identity: &'a str,
    elector: &'a Elector,
    gauge: &'a prometheus_client::metrics::gauge::Gauge,
    is_leader: bool,
}

impl State<'_> {
    /// The lease manager says this process holds the lease (or not).
    fn set_leader(&mut self, is_leader: bool, seen: &Option<Claim>) {
        if is_leader != self.is_leader {
            self.is_leader = is_leader;
            if is_leader {
                info!(identity = %self.identity, leader = true, "became the autopilot leader");
            } else {
                info!(identity = %self.identity, leader = false, "lost autopilot leadership");
            }
            self.gauge.set(i64::from(is_leader));
        }
        self.publish(seen);
    }

    /// Publish the claim the Lease shows: this process's own only while the lease manager
    /// also says it holds the lease (not while it releases or has lost it).
    fn publish(&self, seen: &Option<Claim>) {
        let claim = seen.as_ref().filter(|claim| claim.holder != self.identity || self.is_leader);
        self.elector.publish(claim.cloned());
    }
}

/// Watch the Lease object and send the claim it shows (holder, expiry from when its last
/// renewal was seen) on every change, until aborted. Watch errors are logged and backed off.
async fn watch_lease(
    client: kube::Client,
    identity: String,
    timings: Timings,
    seen: watch::Sender<Option<Claim>>,
) {
    let api: Api<Lease> = Api::namespaced(client, keys::NAMESPACE);
    let mut leases = std::pin::pin!(
        kube::runtime::watcher::watch_object(api, keys::LEASE_NAME)
            .backoff(autopilot_shell::retry::WatchBackoff::default())
    );
    // The renewal last seen, and when: a new claim is dated from when it was first seen.
    let mut last: Option<(String, Option<MicroTime>, Instant)> = None;
    while let Some(event) = leases.next().await {
        let lease = match event {
            Ok(lease) => lease,
            Err(err) if is_forbidden(&err) => {
                error!(
                    error = %err,
                    "this controller may not list and watch the leader Lease (see \
                     manifests/rbac/controller.yaml); it does not lead until it may, retrying"
                );
                continue;
            }
            Err(err) => {
                warn!(error = %err, "watching the leader Lease failed, retrying");
                continue;
            }
        };
        let spec = lease.and_then(|lease| lease.spec).unwrap_or_default();
        let Some(holder) = spec.holder_identity.filter(|holder| !holder.is_empty()) else {
            last = None;
            seen.send_replace(None);
            continue;
        };
        // This process's own claim counts only `--renew-deadline` from its last renewal:
        // a leader that cannot renew stops leading well before another may take over.
        let duration = if holder == identity {
            timings.renew_deadline
        } else {
            spec.lease_duration_seconds
                .and_then(|secs| u64::try_from(secs).ok())
                .map_or(Duration::from_secs(timings.lease_secs), Duration::from_secs)
        };
        let renewed = spec.renew_time;
        let at = match &last {
            Some((was, when, at)) if *was == holder && *when == renewed => *at,
            _ => Instant::now(),
        };
        seen.send_replace(Some(Claim::renewed(holder.clone(), at, duration)));
        last = Some((holder, renewed, at));
    }
}

/// Whether a watch error is the API server refusing this controller's credentials.
fn is_forbidden(err: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error;
    match err {
        Error::InitialListFailed(err) | Error::WatchStartFailed(err) | Error::WatchFailed(err) => {
            matches!(err, kube::Error::Api(status) if status.code == 403)
        }
        Error::WatchError(status) => status.code == 403,
        Error::NoResourceVersion => false,
    }
}

/// Stop the election task and release the lease, bounded by [`RELEASE_TIMEOUT`].
async fn release(
    task: tokio::task::JoinHandle<kube_lease_manager::LeaseManager>,
    identity: &str,
) -> anyhow::Result<()> {
    let released = tokio::time::timeout(RELEASE_TIMEOUT, async {
        let manager = task.await.context("leader election task panicked")?;
        manager.release().await.context("releasing the leader lease")
    })
    .await;
    match released {
        Ok(Ok(())) => {
            info!(%identity, "leader lease released");
            Ok(())
        }
        Ok(Err(err)) => {
            warn!(
                error = format!("{err:#}"),
                "releasing the leader lease failed; it expires on its own"
            );
            Ok(())
        }
        Err(_) => {
            warn!("releasing the leader lease timed out; it expires on its own");
            Ok(())
        }
    }
}

/// The Pod Security labels of the autopilot namespace (DESIGN §14): check Pods run there,
/// and `baseline` forbids what would let one take over its node.
pub const POD_SECURITY_LABELS: [(&str, &str); 3] = [
    ("pod-security.kubernetes.io/enforce", "baseline"),
    ("pod-security.kubernetes.io/warn", "restricted"),
    ("pod-security.kubernetes.io/audit", "restricted"),
];

/// Create the autopilot namespace if it is missing (server-side apply, idempotent), and
/// add each of [`POD_SECURITY_LABELS`] it lacks. A label that is there stays as it is: an
/// operator who relaxed it did so on purpose.
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
    let current = api
        .get(keys::NAMESPACE)
        .await
        .with_context(|| format!("reading namespace {}", keys::NAMESPACE))?;
    let labels = current.metadata.labels.unwrap_or_default();
    let missing: serde_json::Map<String, serde_json::Value> = POD_SECURITY_LABELS
        .iter()
        .filter(|(key, _)| !labels.contains_key(*key))
        .map(|(key, value)| ((*key).to_owned(), json!(value)))
        .collect();
    if !missing.is_empty() {
        let patch = json!({ "metadata": { "labels": missing } });
        api.patch(keys::NAMESPACE, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("labelling namespace {}", keys::NAMESPACE))?;
        info!(labels = ?missing.keys().collect::<Vec<_>>(), "added Pod Security labels to namespace");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_defaults_renew_every_two_seconds_and_lead_ten_seconds_without_a_renewal() {
        let timings = Timings::new(secs(15), secs(10), secs(2)).unwrap();
        assert_eq!(timings.lease_secs, 15);
        // The lease library renews `grace` seconds before expiry: 2 s after each renewal.
        assert_eq!(timings.lease_secs - timings.grace_secs, 2);
        assert_eq!(timings.renew_deadline, secs(10));
        assert_eq!(timings.retry_period, secs(2));
    }

    #[test]
    fn the_renewal_period_is_rounded_up_to_whole_seconds() {
        let timings = Timings::new(secs(6), secs(4), Duration::from_millis(1500)).unwrap();
        assert_eq!(timings.lease_secs - timings.grace_secs, 2);
    }

    #[test]
    fn the_deadline_must_lie_between_the_retry_period_and_the_lease_duration() {
        for (lease, deadline, retry) in [(15, 15, 2), (15, 20, 2), (15, 2, 2), (15, 1, 2)] {
            let err = Timings::new(secs(lease), secs(deadline), secs(retry)).unwrap_err();
            assert!(
                err.to_string().contains("--renew-deadline must be longer than --retry-period"),
                "{lease}/{deadline}/{retry}: {err}"
            );
        }
        let err = Timings::new(secs(1), Duration::from_millis(900), Duration::from_millis(100))
            .unwrap_err();
        assert!(err.to_string().contains("--lease-duration must be at least 2s"), "{err}");
        let err = Timings::new(secs(15), secs(10), Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("--retry-period must be greater than zero"), "{err}");
        let err = Timings::new(secs(3), Duration::from_millis(2900), Duration::from_millis(2500))
            .unwrap_err();
        assert!(err.to_string().contains("rounded up to whole seconds (3s)"), "{err}");
    }
}
