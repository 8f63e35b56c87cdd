//! Bad update payloads with the real node agent (DESIGN §5, §8 "bad payloads"): a worker is
//! asked to update from a server that serves v2 under the wrong sha256, answers 404, sends
//! the headers and part of the body and then nothing, or serves more than the worker's size
//! cap. Each time the download fails,
//! the worker reports `FailedDownload` with a reason naming the problem, the plan ends in
//! `ApplyFailed` with that reason on the target, and the node is untouched: the same
//! process keeps running the same binary, and no staged or temp file is left next to it.
//!
//! One cluster and one worker run the four cases in turn, each as a new plan (the previous
//! one deleted first) with its own `spec.id`. A fourth case serves a binary that verifies but
//! is another version than the plan names: it fails after the restart, and the node is not
//! left cordoned. A fifth puts the worker's binary on a filesystem with room for one copy
//! only: the download runs out of space, the plan says so, and the node is untouched.
//!
//! The worker serves its metrics: a bad digest counts as a verification failure, a 404 as
//! a failed download.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    PlanCommandK0sUpdate, PlanCommandRollout, PlanCommandTargets, PlanResourceUrl, PlanStateType,
    TargetState,
};
use integration::K0sProcess;
use integration::disk::SmallFilesystem;
use integration::http::{FileServer, Serve};

use crate::support::*;

const V2: &str = "v1.35.1+k0s.0";

/// The worker's stall timeout: short, so the stalled download fails within seconds.
const STALL_TIMEOUT: &str = "3s";

/// Runs one plan `id` updating worker-0 to v2 from `url` (with `sha256`), waits for it to
/// fail, checks the node is untouched and returns the target's reason.
async fn plan_fails(
    client: &kube::Client,
    worker: &K0sProcess,
    before: &Before,
    id: &str,
    url: String,
    sha256: String,
) -> String {
    let platform = autopilot_api::platform::current();
    let update = PlanCommandK0sUpdate {
        drain: None,
        drain_options: None,
        version: V2.to_owned(),
        forceupdate: false,
        platforms: [(
            platform,
            PlanResourceUrl { url, sha256: Some(sha256), ..Default::default() },
        )]
        .into(),
        targets: PlanCommandTargets {
            controllers: None,
            workers: Some(static_nodes(&["worker-0"], 1)),
        },
        rollout: PlanCommandRollout::default(),
    };
    create_plan(client, &plan("autopilot", id, vec![k0s_command(update)]))
        .await
        .expect("plan created");
    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed)
        .await
        .expect("the plan fails");
    let target = target(&failed, 0, "worker-0");
    assert_eq!(target.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    assert_eq!(target.phase, Some(SignalPhase::FailedDownload), "{}", status_yaml(&failed));
    let reason = target.reason.clone().unwrap_or_default();

    // The node's own signal says the same, for this plan.
    let signal =
        node_signal(client, "worker-0").await.expect("reading the signal").expect("a signal");
    assert_eq!(signal.plan_id, id);
    let status = signal.status.expect("a node status");
    assert_eq!(status.status, SignalPhase::FailedDownload);
    assert_eq!(status.reason.as_deref(), Some(reason.as_str()));

    // Untouched: same process, same binary, nothing staged or half-downloaded next to it,
    // not cordoned.
    before.assert_untouched(worker, id);
    assert!(
        !worker.binary_path().with_file_name("k0s.prev").exists(),
        "nothing was swapped, so there is no previous binary ({id})"
    );
    let (unschedulable, marked) = node_cordon(client, "worker-0").await.expect("reading the Node");
    assert!(!unschedulable && !marked, "a failed download never cordons the node ({id})");

    // Make room for the next case's plan.
    delete_plan(client).await;
    reason
}

#[tokio::test]
async fn a_bad_payload_fails_the_plan_and_leaves_the_worker_untouched() {
    let (v2_bytes, v2_sha) = v2_build();

    // A size cap just above v2: v2 fits, anything much larger does not.
    let cap = (v2_bytes.len() + (1 << 20)).to_string();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("update-bad-payload")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .worker_args(&["--download-stall-timeout", STALL_TIMEOUT, "--download-max-size", &cap])
            .worker_metrics()
            .start()
            .await
            .unwrap();
    let worker = &workers[0];
    let before = Before::of(worker);
    assert_ne!(before.version, V2);

    // (a) v2 served under someone else's digest: the whole body arrives, the digest does not
    // match, and the reason gives both digests.
    let wrong_sha = sha256_hex(b"not the v2 binary");
    let server = FileServer::start(v2_bytes.clone()).await.unwrap();
    let url = format!("{}/k0s", server.base_url());
    let reason =
        plan_fails(&client, worker, &before, "bad-sha256", url.clone(), wrong_sha.clone()).await;
    assert!(reason.contains("sha256 mismatch"), "{reason}");
    assert!(reason.contains(&wrong_sha), "the expected digest is named: {reason}");
    assert!(reason.contains(&v2_sha), "the digest of what arrived is named: {reason}");
    assert!(server.requests() >= 1, "the worker fetched the payload");
    drop(server);
    // The agent counted the verification failure (before it reported it), not a download
    // failure.
    let counted = failures(worker).await;
    assert_eq!(counted, (0.0, 1.0), "(download, verify) failures after a bad digest");

    // (b) 404: the status is named.
    let server = FileServer::start_with(Serve::Status(404)).await.unwrap();
    let url = format!("{}/k0s", server.base_url());
    let reason =
        plan_fails(&client, worker, &before, "not-found", url.clone(), v2_sha.clone()).await;
    assert!(reason.contains("404"), "{reason}");
    assert!(reason.contains(&url), "the URL is named: {reason}");
    assert!(server.requests() >= 1, "the worker asked the server");
    drop(server);
    let (download, verify) = failures(worker).await;
    assert!(download >= 1.0, "a 404 counts as a failed download attempt ({download})");
    assert_eq!(verify, 1.0, "and not as a verification failure");

    // (c) headers and the first MiB, then silence: the stall timeout ends the download.
    let server = FileServer::start_with(Serve::Stall { body: v2_bytes.clone(), after: 1 << 20 })
        .await
        .unwrap();
    let url = format!("{}/k0s", server.base_url());
    let reason = plan_fails(&client, worker, &before, "stalled", url.clone(), v2_sha.clone()).await;
    server.wait_held(1, Duration::ZERO).await.expect("the server stalled a response");
    assert!(reason.contains("no data received for 3s"), "{reason}");
    assert!(reason.contains(&url), "the URL is named: {reason}");
    drop(server);

    // (d) a payload larger than the worker's size cap: refused, the cap named.
    let mut huge = v2_bytes.clone();
    huge.resize(v2_bytes.len() + (4 << 20), 0);
    let huge_sha = sha256_hex(&huge);
    let server = FileServer::start(huge).await.unwrap();
    let url = format!("{}/k0s", server.base_url());
    let reason = plan_fails(&client, worker, &before, "too-large", url.clone(), huge_sha).await;
    assert!(reason.contains(&format!("larger than the limit of {cap} bytes")), "{reason}");
    assert!(reason.contains(&url), "the URL is named: {reason}");
}

/// The worker's `(agent_download_failures_total, agent_verify_failures_total)`.
async fn failures(worker: &K0sProcess) -> (f64, f64) {
    let address = worker.metrics_address().expect("started with metrics");
    let scrape = integration::metrics::scrape(address).await.expect("scraping the worker");
    (
        scrape.value_or_zero("k0s_autopilot_agent_download_failures_total", &[]),
        scrape.value_or_zero("k0s_autopilot_agent_verify_failures_total", &[]),
    )
}

/// A full disk (DESIGN "bad input"): the worker's binary lives on a filesystem with room for
/// itself and 4 MiB more, so the v2 download runs out of space part way. The plan ends in
/// `ApplyFailed` with "no space left on device" and the directory named on the target; the
/// partial download is removed (the space is free again), and the same process keeps running
/// the same, complete binary.
#[tokio::test]
async fn a_full_disk_fails_the_plan_with_the_reason_and_leaves_the_worker_untouched() {
    if !SmallFilesystem::can_mount() {
        eprintln!("skipped: mounting a small filesystem needs root");
        return;
    }
    let (v2_bytes, v2_sha) = v2_build();
    // The worker's binary lives on a small filesystem in the cluster's directory: the test
    // mounts it, then starts the worker on it.
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("update-disk-full")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .unstarted_workers()
            .start()
            .await
            .unwrap();

    let v1_len = std::fs::metadata(integration::k0s_binary().unwrap()).unwrap().len();
    let bin_dir = cluster.dir().join("small-disk").join("bin");
    // Declared before the worker, so the worker is stopped before the unmount.
    let small = SmallFilesystem::mount(&bin_dir, v1_len + (4 << 20)).unwrap();
    let worker = cluster.k0s_worker("worker-0").install_at(bin_dir.join("k0s")).spawn().await;
    let worker = worker.unwrap();
    wait_nodes_ready(&client, &["worker-0"]).await.unwrap();
    let before = Before::of(&worker);
    let free_before = free_bytes(small.path());
    assert!(v2_bytes.len() as u64 > free_before, "v2 cannot fit in the {free_before} bytes left");

    let server = FileServer::start(v2_bytes).await.unwrap();
    let url = format!("{}/k0s", server.base_url());
    let reason = plan_fails(&client, &worker, &before, "disk-full", url, v2_sha).await;
    assert!(reason.starts_with("no space left on device writing "), "{reason}");
    assert!(reason.contains(&bin_dir.display().to_string()), "the place is named: {reason}");
    let free = free_bytes(small.path());
    assert_eq!(free, free_before, "the partial download's space is free again");
}

/// Bytes free on the filesystem holding `path` (as `df` reports to unprivileged users).
fn free_bytes(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .expect("running df");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().nth(1).and_then(|l| l.trim().parse().ok()).expect("df prints a number")
}
