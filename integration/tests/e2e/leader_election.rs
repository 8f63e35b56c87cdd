//! The election (DESIGN §7).
//!
//! At its default timings (a 15 s lease, renewed every 2 s, a leader that could not renew for
//! 10 s stops leading): an API server blip of 5 s does not move the lease. Three controllers,
//! each on its own API server. Right after a renewal, the leader's API server is SIGKILLed,
//! left down for [`BLIP`] and started again; a watch through another API server records every
//! holder the Lease names meanwhile. The leader must renew again soon after its server is
//! back, and nobody else may have held the lease.
//!
//! With controllers' wall clocks an hour apart (libfaketime): a claim is judged by when a
//! controller saw it change, on its own monotonic clock, never by the `renewTime` the holder
//! wrote, so a controller an hour ahead takes no live leader's lease, and one an hour behind
//! takes over within one lease duration after the leader dies.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use autopilot_api::keys;
use futures::StreamExt as _;
use integration::wait_for;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::watcher;

use crate::support::*;

/// How long the leader's API server is down (its start-up comes on top).
const BLIP: Duration = Duration::from_secs(5);

/// The fast timings' lease duration ([`FAST_ELECTION`]).
const LEASE: Duration = Duration::from_secs(6);

/// Beyond one lease duration after the leader's last renewal: the take-over's read and
/// update round trips, and the watch that shows the candidate that renewal.
const TAKEOVER_SLACK: Duration = Duration::from_secs(2);

/// The lease's holder and last renewal.
async fn claim(leases: &Api<Lease>) -> anyhow::Result<Option<(String, String)>> {
    let spec = leases.get_opt(keys::LEASE_NAME).await?.and_then(|lease| lease.spec);
    Ok(spec.and_then(|spec| {
        let holder = spec.holder_identity.filter(|holder| !holder.is_empty())?;
        let renewed = spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default();
        Some((holder, renewed))
    }))
}

#[tokio::test]
async fn a_five_second_api_server_blip_keeps_the_leader() {
    let Fleet { cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("leader-blip").controllers(3).start().await.unwrap();
    let identity = wait_for(STARTUP, "a leader", || leader_identity(&client)).await.unwrap();
    let leading = leader(&client).await.unwrap().expect("a leader index");
    let other = cluster.admin_client_at((leading + 1) % 3).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(other.clone(), keys::NAMESPACE);

    // Every holder the Lease names from now on, seen through a server that stays up.
    let mut holders = Holders::watch(leases.clone());

    // Right after a renewal: the blip then covers the next few renewals.
    let (_, renewed) = claim(&leases).await.unwrap().expect("a claim");
    wait_for(Duration::from_secs(10), "a renewal of the lease", || async {
        Ok(claim(&leases).await?.filter(|(_, at)| *at != renewed).map(|_| ()))
    })
    .await
    .unwrap();
    let down = Instant::now();
    cluster.kill_apiserver(leading).await.unwrap();
    // The fault's length, not a wait for a condition.
    tokio::time::sleep(BLIP).await;
    cluster.start_apiserver(leading).await.unwrap();
    let unreachable = down.elapsed();
    let (_, before) = claim(&leases).await.unwrap().expect("a claim");
    let (holder, _) = wait_for(Duration::from_secs(10), "a renewal after the blip", || async {
        Ok(claim(&leases).await?.filter(|(_, at)| *at != before))
    })
    .await
    .unwrap();
    eprintln!(
        "API server {leading} unreachable for {:.1} s (down {} s, then its start-up); renewed {:.1} s after the kill",
        unreachable.as_secs_f64(),
        BLIP.as_secs(),
        down.elapsed().as_secs_f64()
    );
    assert_eq!(holder, identity, "the lease stayed with the leader");
    assert_eq!(holders.seen(), BTreeSet::from([identity.clone()]), "holders seen during the blip");
    let log = controllers[leading].log();
    assert!(!log.contains("lost autopilot leadership"), "the leader stayed leader:\n{log}");
}

/// Every holder the Lease names, as a watch sees it.
struct Holders {
    seen: tokio::sync::mpsc::UnboundedReceiver<String>,
    all: BTreeSet<String>,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for Holders {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl Holders {
    /// Start recording from the Lease API `leases`.
    fn watch(leases: Api<Lease>) -> Self {
        let (holders_tx, seen) = tokio::sync::mpsc::unbounded_channel();
        let watch = tokio::spawn(async move {
            let config =
                watcher::Config::default().fields(&format!("metadata.name={}", keys::LEASE_NAME));
            let mut events = std::pin::pin!(watcher::watcher(leases, config));
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) = event {
                    let holder = lease.spec.and_then(|spec| spec.holder_identity);
                    let _ = holders_tx.send(holder.unwrap_or_default());
                }
            }
        });
        Self { seen, all: BTreeSet::new(), watch }
    }

    /// Every holder seen so far (an empty name: released).
    fn seen(&mut self) -> BTreeSet<String> {
        while let Ok(holder) = self.seen.try_recv() {
            self.all.insert(holder);
        }
        self.all.clone()
    }
}

/// Start controller `i` with the fast timings and its wall clock off by `offset`
/// (libfaketime's `FAKETIME`, e.g. `+1h`), and wait until it takes part in the election.
async fn start_with_clock(
    cluster: &integration::cluster::Cluster,
    i: usize,
    offset: &str,
) -> integration::k0s::K0sProcess {
    let controller = cluster
        .k0s_controller(i)
        .args(FAST_ELECTION)
        .arg(NO_AGENT)
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", offset)
        .spawn()
        .await
        .expect("the controller starts");
    controller
        .wait_for_log("joining leader election", STARTUP)
        .await
        .unwrap_or_else(|err| panic!("{err}:\n{}", controller.log_tail(40)));
    controller
}

#[tokio::test]
async fn clocks_an_hour_apart_neither_steal_a_live_lease_nor_delay_a_takeover() {
    let Fleet { cluster, client, controllers: _none, workers: _workers } =
        FleetBuilder::new("leader-clocks")
            .controllers(3)
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let leader = cluster.k0s_controller(0).args(FAST_ELECTION).arg(NO_AGENT).spawn().await.unwrap();
    let identity =
        wait_for(STARTUP, "controller-0 leading", || leader_identity(&client)).await.unwrap();
    let mut holders = Holders::watch(leases.clone());

    // An hour ahead, controller-0's renewTimes are an hour old on controller-1's clock: it
    // must still leave the lease to the live leader. Two lease durations of renewals: the
    // observation window, not a wait for a condition.
    let ahead = start_with_clock(&cluster, 1, "+1h").await;
    tokio::time::sleep(2 * LEASE).await;
    assert_eq!(
        holders.seen(),
        BTreeSet::from([identity.clone()]),
        "holders, controller-1 ahead:\n{}",
        ahead.log_tail(40)
    );
    assert!(!ahead.log().contains("became the autopilot leader"), "{}", ahead.log());

    // An hour behind, controller-0's renewTimes lie an hour in controller-2's future; it is
    // the only other candidate when the leader dies right after a renewal.
    let behind = start_with_clock(&cluster, 2, "-1h").await;
    ahead.stop(Duration::from_secs(20)).await.unwrap();
    let (_, renewed) = claim(&leases).await.unwrap().expect("a claim");
    wait_for(Duration::from_secs(5), "a renewal by controller-0", || async {
        Ok(claim(&leases).await?.filter(|(_, at)| *at != renewed).map(|_| ()))
    })
    .await
    .unwrap();
    leader.kill().unwrap();
    let killed = Instant::now();
    let taken = wait_for(LEASE + TAKEOVER_SLACK, "controller-2 to take the lease", || async {
        Ok(leader_identity(&client).await?.filter(|holder| holder.starts_with("controller-2_")))
    })
    .await;
    let taken = taken.unwrap_or_else(|err| panic!("{err}:\n{}", behind.log_tail(40)));
    eprintln!(
        "controller-2 (FAKETIME=-1h) took the lease {:.1} s after the leader was killed (lease {} s)",
        killed.elapsed().as_secs_f64(),
        LEASE.as_secs()
    );
    behind.wait_for_log("became the autopilot leader", Duration::from_secs(10)).await.unwrap();
    assert_eq!(holders.seen(), BTreeSet::from([identity, taken]), "holders");
}
