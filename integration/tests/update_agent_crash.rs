//! A worker's node agent crashes mid-update and a supervisor starts it again (DESIGN §5
//! "every step is idempotent and resumable after a crash", §8 "crash at each node phase"):
//! the worker is SIGKILLed (a) while it downloads v2 and (b) right after it swapped v2 into
//! place, then restarted with whatever binary is at its path. Either way the update finishes
//! at v2: the plan completes, the binary on disk is v2 (v1 kept as `k0s.prev`), the Node
//! publishes v2, it is uncordoned, and no staged or temp file is left behind.

mod support;

use std::os::unix::fs::MetadataExt as _;
use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::http::{FileServer, Serve};
use integration::{ClusterBuilder, K0sProcess, wait_for};
use support::*;

fn sha256_of_file(path: &std::path::Path) -> String {
    sha256_hex(&std::fs::read(path).expect("reading a binary"))
}

/// A plan updating worker-0 to v2 from `base` with `sha256`.
fn v2_plan(base: &str, sha256: &str) -> autopilot_api::v1beta2::Plan {
    let update = update_to(V2, base, sha256, None, Some(static_nodes(&["worker-0"], 1)));
    plan("autopilot", "v2", vec![k0s_command(update)])
}

/// The plan completes and worker-0 ends up at v2 in every respect.
async fn completes_at_v2(client: &kube::Client, worker: &K0sProcess, v1: &str, v2_sha: &str) {
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan completes");
    assert_eq!(
        target(&done, 0, "worker-0").state,
        TargetState::SignalCompleted,
        "{}",
        status_yaml(&done)
    );
    assert_eq!(binary_version(worker.binary_path()), V2, "the binary on disk is v2");
    assert_eq!(sha256_of_file(worker.binary_path()), v2_sha, "the binary on disk is v2");
    let prev = worker.binary_path().with_file_name("k0s.prev");
    assert_eq!(binary_version(&prev), v1, "v1 is kept as k0s.prev");
    wait_node_version(client, "worker-0", V2).await.expect("the Node publishes v2");
    let (unschedulable, marked) = node_cordon(client, "worker-0").await.expect("reading the Node");
    assert!(!unschedulable && !marked, "uncordoned after the update");
    let signal =
        node_signal(client, "worker-0").await.expect("reading the signal").expect("a signal");
    assert_eq!(signal.phase(), Some(SignalPhase::Completed));
    assert!(worker.is_running(), "the worker runs v2:\n{}", worker.log_tail(40));
    let leftovers = update_leftovers(worker.binary_path(), worker.data_dir());
    assert!(leftovers.is_empty(), "files left behind: {leftovers:?}");
}

#[tokio::test]
async fn a_worker_killed_during_the_download_completes_after_a_restart() {
    let (v2_bytes, v2_sha) = v2_build();
    // The first half of v2 arrives, the rest only once the test releases it.
    let half = v2_bytes.len() / 2;
    let server = FileServer::start_with(Serve::HoldUntilReleased { body: v2_bytes, after: half })
        .await
        .unwrap();

    let cluster = ClusterBuilder::new("update-crash-download")
        .controllers(1)
        .workers(&["worker-0"])
        .build()
        .await
        .unwrap();
    let client = cluster.admin_client().await.unwrap();
    let _controllers = start_controllers_with_agents(&cluster, 1, &[]).await.unwrap();
    let mut worker = start_workers_with_agents(&cluster, &["worker-0"]).await.unwrap().remove(0);
    let v1 = binary_version(worker.binary_path());
    let v1_bytes = std::fs::read(worker.binary_path()).unwrap();
    assert_ne!(v1, V2);

    create_plan(&client, &v2_plan(server.base_url(), &v2_sha)).await.unwrap();

    // Mid-download: the server has sent half the body and holds the rest, and the worker
    // has written what it got into a download temp file next to its binary.
    server.wait_held(1, PLAN_TIMEOUT).await.unwrap();
    let partial = wait_for(Duration::from_secs(30), "a partial download on disk", || async {
        let leftovers = update_leftovers(worker.binary_path(), worker.data_dir());
        Ok(leftovers
            .into_iter()
            .find(|f| f.contains(".k0s.tmp.") && std::fs::metadata(f).is_ok_and(|m| m.len() > 0)))
    })
    .await
    .unwrap();
    let signal = node_signal(&client, "worker-0").await.unwrap().unwrap();
    assert_eq!(signal.phase(), Some(SignalPhase::Downloading));

    worker.kill().unwrap();
    worker.wait_exit(Duration::from_secs(10)).await.unwrap();
    eprintln!("killed worker-0 during the download (partial file {partial})");
    assert!(
        std::fs::read(worker.binary_path()).unwrap() == v1_bytes,
        "a crash during the download leaves the binary untouched"
    );

    // The supervisor starts it again (still v1); this time the server sends everything.
    server.release();
    worker.restart().await.unwrap();
    completes_at_v2(&client, &worker, &v1, &v2_sha).await;
    assert!(server.requests() >= 2, "the download started over after the crash");
}

/// How many fresh clusters the swap scenario may take to land its kill in the window.
const SWAP_ATTEMPTS: usize = 3;

#[tokio::test]
async fn a_worker_killed_right_after_the_swap_completes_after_a_restart() {
    let (v2_bytes, v2_sha) = v2_build();
    let server = FileServer::start(v2_bytes).await.unwrap();
    // The window between the swap and the re-exec is short (tens of milliseconds); on a
    // loaded machine the kill can miss it. A miss is detected, not counted: the scenario
    // runs again in a fresh cluster until the kill lands right after the swap.
    for attempt in 1..=SWAP_ATTEMPTS {
        if kill_right_after_the_swap(attempt, server.base_url(), &v2_sha).await.unwrap() {
            return;
        }
        eprintln!("attempt {attempt}: the kill missed the window after the swap; trying again");
    }
    panic!("in {SWAP_ATTEMPTS} attempts the kill never landed between the swap and the restart");
}

/// One run of the swap scenario in a fresh cluster. The update must complete at v2 either
/// way; returns whether the kill landed between the swap and the restart.
async fn kill_right_after_the_swap(
    attempt: usize,
    base: &str,
    v2_sha: &str,
) -> anyhow::Result<bool> {
    let cluster = ClusterBuilder::new(format!("update-crash-swap-{attempt}"))
        .controllers(1)
        .workers(&["worker-0"])
        .build()
        .await?;
    let client = cluster.admin_client().await?;
    let _controllers = start_controllers_with_agents(&cluster, 1, &[]).await?;
    let mut worker = start_workers_with_agents(&cluster, &["worker-0"]).await?.remove(0);
    let v1 = binary_version(worker.binary_path());
    assert_ne!(v1, V2);
    let v1_inode = std::fs::metadata(worker.binary_path())?.ino();

    create_plan(&client, &v2_plan(base, v2_sha)).await?;

    // The swap is one rename(2) of the staged `k0s.tmp` over the binary's path, so the path
    // naming another inode is the first observable instant after it. The agent then still
    // has to record `Restarting`, see its own write come back, write its restart marker and
    // re-execute, while this loop notices the new inode within about a millisecond and kills
    // the process group at once.
    let deadline = tokio::time::Instant::now() + PLAN_TIMEOUT;
    loop {
        let inode = std::fs::metadata(worker.binary_path()).map(|m| m.ino()).ok();
        if inode.is_some_and(|inode| inode != v1_inode) {
            worker.kill()?;
            break;
        }
        assert!(worker.is_running(), "worker-0 exited before the swap:\n{}", worker.log_tail(40));
        assert!(tokio::time::Instant::now() < deadline, "worker-0 never swapped its binary");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    worker.wait_exit(Duration::from_secs(10)).await?;

    // Whenever the kill landed, v2 is in place, v1 kept and nothing staged.
    assert_eq!(sha256_of_file(worker.binary_path()), v2_sha, "v2 swapped in before the kill");
    let prev = worker.binary_path().with_file_name("k0s.prev");
    assert_eq!(binary_version(&prev), v1, "v1 kept as k0s.prev");
    assert!(!worker.binary_path().with_file_name("k0s.tmp").exists(), "nothing staged");
    // Right after the swap: the old process never re-executed and the node had not got past
    // the restart.
    let phase = node_signal(&client, "worker-0")
        .await?
        .ok_or_else(|| anyhow::anyhow!("worker-0 carries no signal"))?
        .phase();
    let landed = !worker.log().contains("restarting into")
        && matches!(phase, Some(SignalPhase::ApplyingUpdate | SignalPhase::Restarting));
    eprintln!(
        "attempt {attempt}: killed worker-0 (signal {phase:?}, right after the swap: {landed})"
    );

    // The supervisor starts whatever binary is at the path now: v2.
    worker.restart().await?;
    completes_at_v2(&client, &worker, &v1, v2_sha).await;
    Ok(landed)
}
