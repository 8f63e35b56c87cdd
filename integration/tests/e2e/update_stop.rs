//! A stop in the middle of an update (DESIGN §14, systemd's stop timeout is 30 s): a worker
//! that receives SIGTERM while its download hangs on a silent server exits cleanly within
//! [`STOP_BOUND`], on its old binary with nothing half-written next to it; started again, it
//! takes the signal up where it was and, once the server answers, finishes the update.

use std::time::{Duration, Instant};

use autopilot_api::v1beta2::PlanStateType;
use integration::http::{FileServer, Serve};

use crate::support::*;

/// How long a stop may take, whatever the node is doing.
const STOP_BOUND: Duration = Duration::from_secs(10);

#[tokio::test]
async fn sigterm_during_a_download_stops_the_worker_within_ten_seconds() {
    let (v2_bytes, v2_sha) = v2_build();
    let server = FileServer::start_with(Serve::HoldUntilReleased { body: v2_bytes, after: 4096 })
        .await
        .unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        FleetBuilder::new("update-stop")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let mut worker = workers.remove(0);
    let before = Before::of(&worker);

    let update =
        update_to(V2, server.base_url(), &v2_sha, None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "stop", vec![k0s_command(update)])).await.unwrap();
    server.wait_held(1, PLAN_TIMEOUT).await.unwrap();

    let asked = Instant::now();
    worker.terminate().unwrap();
    let status = worker.wait_exit(STOP_BOUND).await.unwrap();
    assert!(asked.elapsed() < STOP_BOUND, "{:?}", asked.elapsed());
    assert!(status.success(), "a clean exit, not a kill: {status:?}");
    assert_eq!(binary_version(worker.binary_path()), before.version, "the old binary stays");
    assert_eq!(std::fs::read(worker.binary_path()).unwrap(), before.bytes);

    // Started again, it goes on with the same signal and completes once the server answers.
    server.release();
    worker.restart().await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(state(&done), PlanStateType::Completed);
    wait_node_version(&client, "worker-0", V2).await.unwrap();
    let leftovers = update_leftovers(worker.binary_path(), worker.data_dir());
    assert!(leftovers.is_empty(), "files left behind: {leftovers:?}");
}
