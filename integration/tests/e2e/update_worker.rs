//! A real update of a worker with the real node agent (issue 4): a v2 build served over
//! loopback HTTP with its sha256, a Plan for the worker, and the agent downloads, verifies,
//! waits for the leader's cordon, swaps the binary atomically (keeping `k0s.prev`),
//! re-executes itself and reports; the leader uncordons and completes. Afterwards the binary
//! on disk and the running process both report v2. With `--restart exit` the worker exits
//! instead and a supervisor (the harness) starts the new binary.

use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::{run_k0s_binary, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::support::*;

#[tokio::test]
async fn a_worker_updates_to_v2_and_runs_it() {
    let (v2_bytes, sha) = v2_build();
    let server = integration::http::FileServer::start(v2_bytes).await.unwrap();
    let base = server.base_url().to_owned();

    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("update-worker")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let worker = &workers[0];
    let pid = worker.pid();
    let v1 = run_k0s_binary(worker.binary_path(), &["version"], Duration::from_secs(30)).unwrap();
    let v1 = String::from_utf8(v1.stdout).unwrap().trim().to_string();
    assert_ne!(v1, V2);

    let update = update_to(V2, &base, &sha, None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "v2", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(
        target(&done, 0, "worker-0").state,
        TargetState::SignalCompleted,
        "{}",
        status_yaml(&done)
    );

    // The binary on disk is v2, the previous one is kept, and the same process (re-executed
    // in place) publishes v2.
    let on_disk =
        run_k0s_binary(worker.binary_path(), &["version"], Duration::from_secs(30)).unwrap();
    assert_eq!(String::from_utf8(on_disk.stdout).unwrap().trim(), V2);
    let prev = worker.binary_path().with_file_name("k0s.prev");
    let prev = run_k0s_binary(&prev, &["version"], Duration::from_secs(30)).unwrap();
    assert_eq!(String::from_utf8(prev.stdout).unwrap().trim(), v1);
    assert!(worker.is_running() && worker.pid() == pid, "re-executed in place, same process");
    let nodes: Api<Node> = Api::all(client.clone());
    let published = wait_for(Duration::from_secs(30), "worker-0 to publish v2", || async {
        let node = nodes.get("worker-0").await?;
        Ok(node.annotations().get(keys::ANNOTATION_K0S_VERSION).filter(|v| *v == V2).cloned())
    })
    .await
    .unwrap();
    assert_eq!(published, V2);
    let node = nodes.get("worker-0").await.unwrap();
    let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    assert!(!unschedulable, "uncordoned after the update");
    let signal = node_signal(&client, "worker-0").await.unwrap().unwrap();
    assert_eq!(signal.phase(), Some(SignalPhase::Completed));
}

use kube::ResourceExt as _;

#[tokio::test]
async fn with_restart_exit_the_worker_exits_and_its_supervisor_starts_v2() {
    let (v2_bytes, sha) = v2_build();
    let server = integration::http::FileServer::start(v2_bytes).await.unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        FleetBuilder::new("update-worker-exit")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .worker_args(&["--restart", "exit"])
            .start()
            .await
            .unwrap();
    let worker = &mut workers[0];

    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "v2-exit", vec![k0s_command(update)])).await.unwrap();

    // The worker swaps the binary and exits cleanly, leaving the restart to its supervisor.
    let exit = worker.wait_exit(PLAN_TIMEOUT).await.unwrap();
    assert!(exit.success(), "exits with success for the supervisor: {exit:?}");
    let signal = node_signal(&client, "worker-0").await.unwrap().unwrap();
    assert_eq!(signal.phase(), Some(SignalPhase::Restarting), "{signal:?}");
    let on_disk =
        run_k0s_binary(worker.binary_path(), &["version"], Duration::from_secs(30)).unwrap();
    assert_eq!(String::from_utf8(on_disk.stdout).unwrap().trim(), V2);

    // The supervisor starts whatever is installed now: v2, which completes the update.
    worker.restart().await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(target(&done, 0, "worker-0").state, TargetState::SignalCompleted);
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(Duration::from_secs(30), "worker-0 to publish v2", || async {
        let node = nodes.get("worker-0").await?;
        Ok((node.annotations().get(keys::ANNOTATION_K0S_VERSION).map(String::as_str) == Some(V2))
            .then_some(()))
    })
    .await
    .unwrap();
}
