//! Interrupted downloads continue (issue 27, item 2): a payload server that gives an ETag
//! and honours `Range` + `If-Range` cuts the connection at 50 %, and again at 75 %; the
//! worker continues from the bytes on disk each time (the server sends the payload once in
//! all, < 1.6× its size), verifies the sha256 and completes. A worker killed with half the
//! payload on disk continues from it after its restart. The partial file is never
//! executable.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::http::{FileServer, Serve};
use integration::wait_for;

use crate::support::*;

/// The most a node may fetch of a payload cut twice at 50 %: well under a second whole
/// copy (a download started over at each cut would take 2×).
const MAX_SERVED: f64 = 1.6;

#[tokio::test]
async fn a_download_cut_at_half_twice_fetches_only_the_rest_and_verifies() {
    let (v2_bytes, v2_sha) = v2_build();
    let len = v2_bytes.len();
    let server = FileServer::start_with(Serve::Resumable {
        body: v2_bytes,
        cuts: vec![len / 2, len * 3 / 4],
        hold: false,
    })
    .await
    .unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("update-resume-cut")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let worker = &workers[0];

    let update =
        update_to(V2, server.base_url(), &v2_sha, None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "resume", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(target(&done, 0, "worker-0").state, TargetState::SignalCompleted);

    // Three requests: the whole payload, then the rest from each cut, with the ETag.
    assert_eq!(
        server.ranges(),
        [None, Some(format!("bytes={}-", len / 2)), Some(format!("bytes={}-", len * 3 / 4))]
    );
    let served = server.body_bytes_sent() as f64 / len as f64;
    assert!(served < MAX_SERVED, "served {served:.2}× the payload");
    // What runs is v2, bit for bit (the agent verified the sha256 before the swap).
    assert_eq!(sha256_hex(&std::fs::read(worker.binary_path()).unwrap()), v2_sha);
    assert_eq!(version_on_disk(worker), V2);
    let log = worker.log();
    assert!(
        log.contains("continuing a download from the bytes on disk"),
        "{}",
        worker.log_tail(40)
    );
    let leftovers = update_leftovers(worker.binary_path(), worker.data_dir());
    assert!(leftovers.is_empty(), "files left behind: {leftovers:?}");
}

#[tokio::test]
async fn a_worker_killed_mid_download_continues_from_the_kept_half_after_its_restart() {
    let (v2_bytes, v2_sha) = v2_build();
    let len = v2_bytes.len();
    // The first answer sends half and then goes silent; every later one is whole (or the
    // rest, to a ranged request).
    let server = FileServer::start_with(Serve::Resumable {
        body: v2_bytes,
        cuts: vec![len / 2],
        hold: true,
    })
    .await
    .unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        FleetBuilder::new("update-resume-kill")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let mut worker = workers.remove(0);
    let v1_bytes = std::fs::read(worker.binary_path()).unwrap();

    let update =
        update_to(V2, server.base_url(), &v2_sha, None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "resume-kill", vec![k0s_command(update)]))
        .await
        .unwrap();
    server.wait_held(1, PLAN_TIMEOUT).await.unwrap();
    let partial = worker.binary_path().with_file_name(".k0s.tmp.partial");
    wait_for(Duration::from_secs(30), "half of v2 on disk", || async {
        Ok(std::fs::metadata(&partial).is_ok_and(|m| m.len() == (len / 2) as u64).then_some(()))
    })
    .await
    .unwrap();
    let mode = std::fs::metadata(&partial).unwrap().permissions().mode();
    assert_eq!(mode & 0o111, 0, "the partial file is not executable: {mode:o}");

    worker.kill().unwrap();
    worker.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert_eq!(std::fs::read(worker.binary_path()).unwrap(), v1_bytes, "the binary is untouched");
    assert!(partial.exists(), "the kept half survives the kill");

    worker.restart().await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(target(&done, 0, "worker-0").state, TargetState::SignalCompleted);
    let ranges = server.ranges();
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(ranges[1].as_deref(), Some(format!("bytes={}-", len / 2).as_str()));
    let served = server.body_bytes_sent() as f64 / len as f64;
    assert!(served < MAX_SERVED, "served {served:.2}× the payload");
    assert_eq!(sha256_hex(&std::fs::read(worker.binary_path()).unwrap()), v2_sha);
    let leftovers = update_leftovers(worker.binary_path(), worker.data_dir());
    assert!(leftovers.is_empty(), "files left behind: {leftovers:?}");
}
