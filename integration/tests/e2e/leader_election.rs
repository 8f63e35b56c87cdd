//! The election at its default timings (DESIGN §7: a 15 s lease, renewed every 2 s, a leader
//! that could not renew for 10 s stops leading): an API server blip of 5 s does not move the
//! lease.
//!
//! Three controllers, each on its own API server. Right after a renewal, the leader's API
//! server is SIGKILLed, left down for [`BLIP`] and started again; a watch through another API
//! server records every holder the Lease names meanwhile. The leader must renew again soon
//! after its server is back, and nobody else may have held the lease.

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
    let (holders_tx, mut holders_rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = tokio::spawn({
        let leases = leases.clone();
        async move {
            let config =
                watcher::Config::default().fields(&format!("metadata.name={}", keys::LEASE_NAME));
            let mut events = std::pin::pin!(watcher::watcher(leases, config));
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) = event {
                    let holder = lease.spec.and_then(|spec| spec.holder_identity);
                    let _ = holders_tx.send(holder.unwrap_or_default());
                }
            }
        }
    });

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
    watch.abort();
    let mut seen = BTreeSet::new();
    while let Ok(holder) = holders_rx.try_recv() {
        seen.insert(holder);
    }
    assert_eq!(seen, BTreeSet::from([identity.clone()]), "holders seen during the blip");
    let log = controllers[leading].log();
    assert!(!log.contains("lost autopilot leadership"), "the leader stayed leader:\n{log}");
}
