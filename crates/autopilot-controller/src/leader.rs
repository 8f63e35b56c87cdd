//! Leader election on the `k0s-autopilot/k0s-autopilot-controller` Lease, with client-go's
//! semantics (`leaderelection.LeaderElector`); the decision is [`candidate`], this module
//! reads and writes the Lease and keeps the time.
//!
//! Every controller takes part; the identity is `<node-name>_<random suffix>`, new on every
//! process start, so `kubectl get lease -n k0s-autopilot` tells operators which controller
//! leads. A candidate reads the Lease every `--retry-period` (and whenever a watch of it
//! shows a change), judges another holder's claim by when it saw the record change, on its
//! own monotonic clock (never by the `renewTime` written on the holder's clock, so
//! controllers' clocks need not agree), and takes a free or expired lease with an update
//! preconditioned on the `resourceVersion` it read. The leader renews the same way; one that
//! could not renew within `--renew-deadline` steps down. On shutdown the lease is released so
//! another controller takes over at once.
//!
//! No maintained crate does this for kube 5: `kube-runtime` 5 has no leader election;
//! `kube-lease-manager` (0.13.1, the newest) and `kube-leader-election` (0.44, kube 4) judge
//! expiry by comparing the `renewTime` with the local wall clock, as does `kubert`'s lease
//! (0.25, kube 1.1); `kube-coordinate` (2.0.0-rc.0, kube 2) is a release candidate on an old
//! kube.

mod candidate;

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_shell::leadership::Elector;
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt as _;
use rand::RngExt as _;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use self::candidate::{Candidate, Decision, Read};

/// How long to wait for the lease to be released on shutdown before giving up on it (it
/// then expires on its own after the lease duration).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Election timings, validated.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    /// Whole seconds a claim is valid without renewal (`--lease-duration`, rounded up: the
    /// Lease API stores `leaseDurationSeconds`).
    lease_secs: u64,
    /// How long the leader goes on leading after its last renewal sent (`--renew-deadline`).
    renew_deadline: Duration,
    /// How often every candidate reads the Lease and the leader renews it, and how long to
    /// wait after a failed lease operation before trying again (`--retry-period`).
    retry_period: Duration,
}

impl Timings {
    /// Check and convert `--lease-duration`, `--renew-deadline` and `--retry-period`:
    /// `retry-period < renew-deadline < lease-duration`, as kube-controller-manager's.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> anyhow::Result<Self> {
        let lease_secs = ceil_secs(lease_duration);
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
        Ok(Self { lease_secs, renew_deadline, retry_period })
    }

    /// How long a claim lasts without renewal, in whole seconds.
    fn lease_duration(self) -> Duration {
        Duration::from_secs(self.lease_secs)
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
/// Each look at the Lease reads it, decides ([`Candidate::decide`]) and writes what that
/// says, every request bounded (while leading, by what is left of the lead); a failed one is
/// logged and tried again at the next look, `--retry-period` later. A claim's expiry is
/// published on this process's clock, so the engine stops at the renew deadline even while
/// a request hangs. The error means the autopilot namespace could not be applied.
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
    let api: Api<Lease> = Api::namespaced(client, keys::NAMESPACE);
    let (changed_tx, mut changed) = watch::channel(());
    let lease_watch = tokio::spawn(watch_lease(api.clone(), changed_tx));
    let _stop_lease_watch = tokio_util::task::AbortOnDropHandle::new(lease_watch);
    let mut election = Election {
        api,
        candidate: Candidate::new(identity, timings.lease_duration(), timings.renew_deadline),
        meta: ObjectMeta::default(),
        retry_period: timings.retry_period,
        elector: &elector,
        gauge: &is_leader_gauge,
        leading: false,
    };
    // Never while the process runs (the watch retries for ever); kept from spinning.
    let mut lease_watch_ended = false;
    loop {
        let next = tokio::select! {
            next = election.look() => next,
            () = &mut shutdown => break,
        };
        // A change of the Lease wakes a candidate that does not lead at once (a release,
        // a renewal: it counts from when it saw it); the leader renews on its own period.
        let woken = !lease_watch_ended && !election.candidate.is_leading();
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            seen = changed.changed(), if woken => lease_watch_ended = seen.is_err(),
            () = &mut shutdown => break,
        }
    }
    info!(identity = %election.candidate.identity(), leader = election.leading, "shutting down, releasing the leader lease");
    election.release().await;
    Ok(())
}

/// The election as this process runs it: the Lease API, the decision, and where its
/// outcome is published.
struct Election<'a> {
    api: Api<Lease>,
    candidate: Candidate,
    /// The Lease's metadata as last read or written (kept on every write, which replaces
    /// the object).
    meta: ObjectMeta,
    retry_period: Duration,
    elector: &'a Elector,
    gauge: &'a prometheus_client::metrics::gauge::Gauge,
    /// Whether this process led at the last publication (for the log and the gauge).
    leading: bool,
}

impl Election<'_> {
    /// Read the Lease, decide, write what the decision says and publish the outcome; return
    /// when to look again.
    async fn look(&mut self) -> Instant {
        let timeout = self.candidate.request_timeout(Instant::now());
        match tokio::time::timeout(timeout, self.api.get_opt(keys::LEASE_NAME)).await {
            Ok(Ok(lease)) => {
                let read = self.keep(lease);
                self.candidate.observe(read, Instant::now());
            }
            Ok(Err(err)) => request_failed("reading", &err),
            Err(_) => warn!(timeout = ?timeout, "reading the leader Lease timed out, retrying"),
        }
        let decision = self.candidate.decide(Instant::now());
        match &decision {
            Decision::StepDown => {
                warn!(
                    identity = %self.candidate.identity(),
                    "no renewal of the leader lease got through within --renew-deadline; stepping down"
                );
                self.candidate.step_down();
            }
            Decision::Unknown | Decision::Follow { .. } => {}
            Decision::Create | Decision::Acquire { .. } | Decision::Renew { .. } => {
                self.write(&decision).await;
            }
        }
        self.publish();
        self.candidate.next_look(Instant::now(), self.retry_period)
    }

    /// Write the claim `decision` says: create the Lease, or replace it preconditioned on
    /// the `resourceVersion` read. A conflict means another candidate wrote first.
    async fn write(&mut self, decision: &Decision) {
        let precondition = match decision {
            Decision::Acquire { resource_version } | Decision::Renew { resource_version } => {
                Some(resource_version.clone())
            }
            Decision::Create => None,
            Decision::Unknown | Decision::Follow { .. } | Decision::StepDown => return,
        };
        let Some(spec) = self.candidate.claim_record(decision, jiff::Timestamp::now()) else {
            return;
        };
        let sent = Instant::now();
        let timeout = self.candidate.request_timeout(sent);
        let written = if let Some(resource_version) = precondition {
            let lease = self.lease(spec, &resource_version);
            let params = PostParams::default();
            let replace = self.api.replace(keys::LEASE_NAME, &params, &lease);
            tokio::time::timeout(timeout, replace).await
        } else {
            let metadata = ObjectMeta {
                name: Some(keys::LEASE_NAME.to_owned()),
                namespace: Some(keys::NAMESPACE.to_owned()),
                ..ObjectMeta::default()
            };
            let lease = Lease { metadata, spec: Some(spec) };
            tokio::time::timeout(timeout, self.api.create(&PostParams::default(), &lease)).await
        };
        match written {
            Ok(Ok(lease)) => {
                let read = self.keep(Some(lease));
                self.candidate.wrote(read, sent);
            }
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                debug!("another controller wrote the leader Lease first");
            }
            Ok(Err(err)) => request_failed("writing", &err),
            Err(_) => warn!(timeout = ?timeout, "writing the leader Lease timed out, retrying"),
        }
    }

    /// The Lease to write: its metadata as last seen, preconditioned on `resource_version`.
    fn lease(&self, spec: LeaseSpec, resource_version: &str) -> Lease {
        let metadata = ObjectMeta {
            resource_version: Some(resource_version.to_owned()),
            managed_fields: None,
            ..self.meta.clone()
        };
        Lease { metadata, spec: Some(spec) }
    }

    /// Keep the metadata of `lease` (as read or written) for the next write, and say what it
    /// shows.
    fn keep(&mut self, lease: Option<Lease>) -> Read {
        let Some(lease) = lease else { return Read::Absent };
        let resource_version = lease.metadata.resource_version.clone().unwrap_or_default();
        self.meta = lease.metadata;
        Read::Lease { spec: lease.spec.unwrap_or_default(), resource_version }
    }

    /// Publish the claim the candidate counts, and log and count a change of leadership.
    fn publish(&mut self) {
        let leading = self.candidate.is_leading();
        if leading != self.leading {
            self.leading = leading;
            let identity = self.candidate.identity();
            if leading {
                info!(%identity, leader = true, "became the autopilot leader");
            } else {
                info!(%identity, leader = false, "lost autopilot leadership");
            }
            self.gauge.set(i64::from(leading));
        }
        self.elector.publish(self.candidate.claim());
    }

    /// Stop leading, then release the lease if it names this process (preconditioned),
    /// bounded by [`RELEASE_TIMEOUT`]: a release that fails leaves it to expire.
    async fn release(&mut self) {
        self.candidate.step_down();
        self.publish();
        let identity = self.candidate.identity().to_owned();
        let Some((spec, resource_version)) = self.candidate.release_record(jiff::Timestamp::now())
        else {
            return;
        };
        let lease = self.lease(spec, &resource_version);
        let params = PostParams::default();
        let replace = self.api.replace(keys::LEASE_NAME, &params, &lease);
        match tokio::time::timeout(RELEASE_TIMEOUT, replace).await {
            Ok(Ok(_)) => info!(%identity, "leader lease released"),
            Ok(Err(err)) => warn!(
                error = %err,
                "releasing the leader lease failed; it expires on its own"
            ),
            Err(_) => warn!("releasing the leader lease timed out; it expires on its own"),
        }
    }
}

/// Log a failed request to the Lease; a refusal of this controller's credentials says
/// which RBAC rules it needs.
fn request_failed(doing: &str, err: &kube::Error) {
    if matches!(err, kube::Error::Api(status) if status.code == 403) {
        error!(
            error = %err,
            "this controller may not {doing} the leader Lease (see manifests/rbac/controller.yaml); \
             it does not lead until it may, retrying"
        );
    } else {
        warn!(error = %err, "{doing} the leader Lease failed, retrying");
    }
}

/// Watch the Lease object and mark every change on `changed`, until aborted, so a candidate
/// sees a release or a renewal at once. Watch errors are logged and backed off.
async fn watch_lease(api: Api<Lease>, changed: watch::Sender<()>) {
    let mut leases = std::pin::pin!(
        kube::runtime::watcher::watch_object(api, keys::LEASE_NAME)
            .backoff(autopilot_shell::retry::WatchBackoff::default())
    );
    while let Some(event) = leases.next().await {
        match event {
            Ok(_) => changed.send_replace(()),
            Err(err) if is_forbidden(&err) => {
                error!(
                    error = %err,
                    "this controller may not list and watch the leader Lease (see \
                     manifests/rbac/controller.yaml); it sees changes only every \
                     --retry-period, retrying"
                );
            }
            Err(err) => warn!(error = %err, "watching the leader Lease failed, retrying"),
        }
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
    fn the_defaults_lease_fifteen_seconds_renew_every_two_and_lead_ten_without_a_renewal() {
        let timings = Timings::new(secs(15), secs(10), secs(2)).unwrap();
        assert_eq!(timings.lease_duration(), secs(15));
        assert_eq!(timings.renew_deadline, secs(10));
        assert_eq!(timings.retry_period, secs(2));
    }

    #[test]
    fn the_lease_duration_is_rounded_up_to_whole_seconds_and_the_periods_are_kept() {
        let timings =
            Timings::new(Duration::from_millis(5500), secs(4), Duration::from_millis(1500))
                .unwrap();
        assert_eq!(timings.lease_duration(), secs(6));
        assert_eq!(timings.retry_period, Duration::from_millis(1500));
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
    }
}
