//! A worker's node agent crashes mid-update and a supervisor starts it again (DESIGN §5
//! "every step is idempotent and resumable after a crash", §8 "crash at each node phase"):
//! the worker is SIGKILLed (a) while it downloads v2 and (b) right after it swapped v2 into
//! place (traced, and killed at the system call after the rename: before the trial's pass is
//! recorded and before the re-exec), then restarted with whatever binary is at its path. Either way the update finishes
//! at v2: the plan completes, the binary on disk is v2 (v1 kept as `k0s.prev`), the Node
//! publishes v2, it is uncordoned, and no staged or temp file is left behind.

use std::os::unix::fs::MetadataExt as _;
use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::http::{FileServer, Serve};
use integration::{K0sProcess, wait_for};

use crate::support::*;

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

    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        FleetBuilder::new("update-crash-download")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let mut worker = workers.remove(0);
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

#[tokio::test]
async fn a_worker_killed_right_after_the_swap_completes_after_a_restart() {
    let (v2_bytes, v2_sha) = v2_build();
    let server = FileServer::start(v2_bytes).await.unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        FleetBuilder::new("update-crash-swap")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let mut worker = workers.remove(0);
    let v1 = binary_version(worker.binary_path());
    assert_ne!(v1, V2);
    let v1_inode = std::fs::metadata(worker.binary_path()).unwrap().ino();

    // The swap is one rename(2) of the staged `k0s.tmp` over the binary's path. The worker's
    // main thread (where the swap runs) is traced and killed at the first system-call stop
    // at which the path names another inode: right after that rename, before the agent
    // records that the new binary passed its trial and before it re-executes.
    let live = worker.binary_path().to_path_buf();
    let swapped = move || std::fs::metadata(&live).is_ok_and(|m| m.ino() != v1_inode);
    let kill = worker.kill_when(swapped).unwrap();
    let mark = worker.log_mark();
    create_plan(&client, &v2_plan(server.base_url(), &v2_sha)).await.unwrap();
    let stops = kill.wait(PLAN_TIMEOUT).await.unwrap();
    worker.wait_exit(Duration::from_secs(10)).await.unwrap();
    eprintln!("killed worker-0 right after the swap ({stops} system-call stops traced)");

    // v2 is in place, v1 kept and nothing staged; the crash came before the restart.
    assert_eq!(sha256_of_file(worker.binary_path()), v2_sha, "v2 swapped in before the kill");
    let prev = worker.binary_path().with_file_name("k0s.prev");
    assert_eq!(binary_version(&prev), v1, "v1 kept as k0s.prev");
    assert!(!worker.binary_path().with_file_name("k0s.tmp").exists(), "nothing staged");
    let marker: serde_json::Value = serde_json::from_slice(
        &std::fs::read(worker.data_dir().join("autopilot-restart.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(marker["trial"]["state"], "pending", "the pass was never recorded: {marker}");
    let log = worker.log_after(mark);
    assert!(!log.contains("restarting into"), "killed before re-executing:\n{log}");
    let signal = node_signal(&client, "worker-0").await.unwrap().expect("a signal");
    assert_eq!(signal.phase(), Some(SignalPhase::Restarting));

    // The supervisor starts whatever binary is at the path now: v2.
    worker.restart().await.unwrap();
    completes_at_v2(&client, &worker, &v1, &v2_sha).await;
}
