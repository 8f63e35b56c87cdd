//! Trial boot and rollback (DESIGN §11) with real node agents and the real control plane: a
//! "v2" that answers `version` correctly (so it passes the self-test) but cannot start, or
//! starts and never becomes healthy. The worker runs it on trial before it replaces the live
//! binary; when it fails, the worker goes back to v1, keeps the refused file as
//! `k0s.refused`, and reports `Failed` with `rolled back to <v1>: <why>`; the plan ends
//! `ApplyFailed`, the node runs v1 and is uncordoned. Both restart modes: `exec` (the same
//! process re-executes v1) and `exit` under the harness as supervisor.

use std::time::{Duration, Instant};

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::http::FileServer;
use integration::{K0sProcess, wait_for};

use crate::support::*;

/// The trial deadline the workers run with.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(15);

/// A "v2" that answers `version` like the real v2 but fails at startup.
fn crashing_v2() -> Vec<u8> {
    format!(
        "#!/bin/sh\nif [ \"$1\" = version ]; then echo {V2}; exit 0; fi\n\
         echo 'k0s {V2}: cannot start: missing kernel module' >&2\nexit 1\n"
    )
    .into_bytes()
}

/// A "v2" that answers `version` but never gets healthy when started.
fn hanging_v2() -> Vec<u8> {
    format!("#!/bin/sh\nif [ \"$1\" = version ]; then echo {V2}; exit 0; fi\nexec sleep 3600\n")
        .into_bytes()
}

/// Creates plan `id` updating `node` to `payload` as v2.
async fn create_update(
    client: &kube::Client,
    server: &FileServer,
    node: &str,
    id: &str,
    payload: &[u8],
) {
    let update = update_to(
        V2,
        server.base_url(),
        &sha256_hex(payload),
        None,
        Some(static_nodes(&[node], 1)),
    );
    create_plan(client, &plan("autopilot", id, vec![k0s_command(update)])).await.expect("plan");
}

/// Waits for the plan to fail and checks the node went back to v1: reason, binary on disk,
/// the refused file kept aside, no `k0s.prev` (nothing was swapped), published version,
/// uncordoned. Returns the reason; deletes the plan.
async fn rolled_back(
    client: &kube::Client,
    worker: &K0sProcess,
    v1_bytes: &[u8],
    v1: &str,
    payload: &[u8],
) -> String {
    let node = worker.node_name();
    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed)
        .await
        .expect("the plan fails");
    let target = target(&failed, 0, node);
    assert_eq!(target.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    assert_eq!(target.phase, Some(SignalPhase::Failed), "{}", status_yaml(&failed));
    let reason = target.reason.clone().unwrap_or_default();
    assert!(reason.starts_with(&format!("rolled back to {v1}: ")), "{}", status_yaml(&failed));

    assert!(worker.is_running(), "{node} runs:\n{}", worker.log_tail(40));
    let on_disk = std::fs::read(worker.binary_path()).expect("reading the binary");
    assert!(on_disk == v1_bytes, "{node} has v1 on disk");
    assert_eq!(binary_version(worker.binary_path()), v1);
    let refused = std::fs::read(worker.binary_path().with_file_name("k0s.refused"))
        .expect("the refused binary is kept");
    assert!(refused == payload, "k0s.refused is the refused payload");
    assert!(
        !worker.binary_path().with_file_name("k0s.prev").exists(),
        "nothing was swapped in, so nothing became k0s.prev"
    );
    wait_node_version(client, node, v1).await.expect("the node publishes v1");
    wait_for(Duration::from_secs(30), &format!("{node} uncordoned"), || async {
        let (cordoned, marked) = node_cordon(client, node).await?;
        Ok((!cordoned && !marked).then_some(()))
    })
    .await
    .expect("uncordoned after the rollback");

    delete_plan(client).await;
    reason
}

#[tokio::test]
async fn a_v2_that_cannot_start_or_never_gets_healthy_is_rolled_back_in_both_restart_modes() {
    let trial = format!("{}s", TRIAL_TIMEOUT.as_secs());
    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        FleetBuilder::new("update-rollback")
            .controllers(1)
            .workers(&["worker-0", "worker-1"])
            .agents(Agents::Real)
            .worker_args(&["--trial-timeout", &trial])
            .node_args("worker-1", &["--restart", "exit"])
            .start()
            .await
            .unwrap();
    let [exec_worker, exit_worker] = &mut workers[..] else { panic!("two workers") };
    let v1_bytes = std::fs::read(exec_worker.binary_path()).unwrap();
    let v1 = binary_version(exec_worker.binary_path());
    assert_ne!(v1, V2);
    let crashing = crashing_v2();
    let server = FileServer::start(crashing.clone()).await.unwrap();

    // (a) exec mode: the process tries v2 three times, then re-executes v1 in place.
    let pid = exec_worker.pid();
    let started = Instant::now();
    create_update(&client, &server, "worker-0", "crash-exec", &crashing).await;
    let reason = rolled_back(&client, exec_worker, &v1_bytes, &v1, &crashing).await;
    let took = started.elapsed();
    eprintln!("exec mode: plan created → rolled back and failed in {took:?}");
    for line in exec_worker.log().lines().filter(|l| l.contains("trial boot over")) {
        eprintln!("exec mode, worker-0: {line}");
    }
    assert_eq!(
        reason,
        format!(
            "rolled back to {v1}: the new binary exited 3 times before it was healthy \
             (exit status: 1): k0s {V2}: cannot start: missing kernel module"
        )
    );
    assert_eq!(exec_worker.pid(), pid, "re-executed in place: the process never exited");
    assert!(took < TRIAL_TIMEOUT + Duration::from_secs(10), "rolled back in {took:?}");

    // (b) exit mode under a supervisor (the harness): the worker exits after going back to
    // v1 and the supervisor starts what is installed, v1, which reports the rollback.
    create_update(&client, &server, "worker-1", "crash-exit", &crashing).await;
    let exit =
        exit_worker.wait_exit(PLAN_TIMEOUT).await.expect("the worker exits for its supervisor");
    assert!(exit.success(), "{exit:?}");
    exit_worker.restart().await.unwrap();
    let reason = rolled_back(&client, exit_worker, &v1_bytes, &v1, &crashing).await;
    assert!(reason.contains("exited 3 times before it was healthy"), "{reason}");

    // (c) a v2 that starts and never becomes healthy: refused once the trial deadline has
    // passed while the API server answered.
    let hanging = hanging_v2();
    drop(server);
    let server = FileServer::start(hanging.clone()).await.unwrap();
    let started = Instant::now();
    create_update(&client, &server, "worker-0", "hang-exec", &hanging).await;
    let reason = rolled_back(&client, exec_worker, &v1_bytes, &v1, &hanging).await;
    let took = started.elapsed();
    eprintln!("exec mode, hanging v2: plan created → rolled back and failed in {took:?}");
    assert_eq!(
        reason,
        format!(
            "rolled back to {v1}: the new binary was not healthy within {}s while the API server answered",
            TRIAL_TIMEOUT.as_secs()
        )
    );
    assert_eq!(exec_worker.pid(), pid);
    assert!(took >= TRIAL_TIMEOUT, "the deadline was respected: {took:?}");
    assert!(took < TRIAL_TIMEOUT + Duration::from_secs(10), "rolled back in {took:?}");
}
