//! Plan processing resumes promptly after an API-server outage (issue 11): once an API server
//! the leader uses answers again, the plan moves within [`RESUME`].
//!
//! 1. Three controllers, two workers: the leader's own API server is stopped for 20 s while
//!    a Plan is created through another one. The leader keeps its lease (lease longer than
//!    the outage), so nobody handles the Plan until its API server is back; the Plan must
//!    get its first status within [`RESUME`] of that server being ready.
//! 2. One controller, four workers with real agents, `concurrent: 1`: every API server (the
//!    only one) is stopped for 15 s the moment the first worker reports `Downloading`, so its
//!    next reports fail during the outage; the plan must move again (that worker completed)
//!    within [`RESUME`] of the server being ready, and then complete.
//! 3. The same fleet under the shipped worker RBAC (issue 46, item 6): the API server is
//!    restarted as each worker starts downloading, four times, so agents read the Plan to
//!    authorize (their signal, its drain record) from a server that may not have synced its
//!    RBAC authorizer yet (`403`). The plan must complete and no node may refuse: a `403`
//!    is retried, refused only when it stays so for `authorize::read::FORBIDDEN_GRACE`.

use std::time::{Duration, Instant};

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use futures::StreamExt as _;
use integration::http::FileServer;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::watcher;

use crate::support::*;

/// The promise: plan processing resumes this soon after the API server is ready again.
const RESUME: Duration = Duration::from_secs(10);

/// Election timings under which the leader keeps its lease, and goes on counting as the
/// leader, through the outage: nobody else may take the plan over meanwhile. The lease and
/// the renew deadline outlast the 20 s by far: a graceful stop refuses new connections
/// (lease renewals) while it drains the open watches.
const LONG_LEASE: &[&str] =
    &["--lease-duration", "180s", "--renew-deadline", "170s", "--retry-period", "1s"];

#[tokio::test]
async fn a_plan_created_while_the_leaders_api_server_is_down_starts_when_it_is_back() {
    const WORKERS: [&str; 2] = ["worker-0", "worker-1"];
    const OUTAGE: Duration = Duration::from_secs(20);
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-api-outage-leader")
            .controllers(3)
            .workers(&WORKERS)
            .controller_args(LONG_LEASE)
            .start()
            .await
            .unwrap();

    let identity = leader_identity(&client).await.unwrap().expect("a leader");
    let leading = leader(&client).await.unwrap().expect("a leader index");
    let other = (leading + 1) % 3;
    let other_client = cluster.admin_client_at(other).await.unwrap();
    eprintln!("leader {identity} uses API server {leading}; the plan goes through {other}");

    cluster.stop_apiserver(leading).await.unwrap();
    let down = Instant::now();
    let update = k0s_update(None, Some(static_nodes(&WORKERS, 1)));
    create_plan(&other_client, &plan("autopilot", "outage-leader", vec![k0s_command(update)]))
        .await
        .unwrap();
    // The outage itself is what is tested: nothing to wait for but the clock.
    tokio::time::sleep(OUTAGE.saturating_sub(down.elapsed())).await;
    let plans: Api<autopilot_api::v1beta2::Plan> = Api::all(other_client.clone());
    let before = plans.get("autopilot").await.unwrap();
    assert!(
        before.status.is_none(),
        "the plan was handled while the leader's API server was down (leadership moved?):\n{}",
        status_yaml(&before)
    );
    assert_eq!(
        leader_identity(&other_client).await.unwrap().as_deref(),
        Some(identity.as_str()),
        "the leader kept its lease through the outage"
    );

    cluster.start_apiserver(leading).await.unwrap();
    let back = Instant::now();
    let started = wait_plan(&other_client, "autopilot", PLAN_TIMEOUT, "a first status", |p| {
        p.status.is_some()
    })
    .await
    .unwrap();
    let resumed = back.elapsed();
    assert_eq!(
        leader_identity(&other_client).await.unwrap().as_deref(),
        Some(identity.as_str()),
        "the status was written by the leader that kept its lease, not after a failover"
    );
    eprintln!(
        "the plan got its first status {resumed:?} after the leader's API server was ready \
         again (state {})",
        state(&started)
    );
    assert!(
        resumed <= RESUME,
        "the plan got its first status {resumed:?} after the API server was ready; at most \
         {RESUME:?} allowed"
    );
}

#[tokio::test]
async fn a_plan_interrupted_by_an_outage_of_every_api_server_moves_on_when_it_is_back() {
    const WORKERS: [&str; 4] = ["worker-0", "worker-1", "worker-2", "worker-3"];
    const OUTAGE: Duration = Duration::from_secs(15);
    let (Fleet { cluster, client, controllers: _controllers, workers: _workers }, _server) =
        updating(&WORKERS, "plan-api-outage-all", "outage-all").await;
    // Stop the API server the moment the first worker (by name) starts downloading: its next
    // reports fall into the outage and must go out once the server is back.
    let nodes: Api<Node> = Api::all(client.clone());
    let mut stream = std::pin::pin!(watcher::watch_object(nodes, WORKERS[0]));
    let deadline = tokio::time::Instant::now() + PLAN_TIMEOUT;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("the first worker starts downloading in time");
        let Some(Ok(Some(node))) = next else { continue };
        let signal = autopilot_api::signal::from_meta(&node.metadata).ok().flatten();
        if signal.and_then(|s| s.phase()) == Some(SignalPhase::Downloading) {
            break;
        }
    }

    let plans: Api<autopilot_api::v1beta2::Plan> = Api::all(client.clone());
    let at_stop = plans.get("autopilot").await.unwrap();
    let completed_at_stop = count_targets(&at_stop, TargetState::SignalCompleted);
    assert!(
        completed_at_stop < WORKERS.len(),
        "the plan must still be running when the API server stops:\n{}",
        status_yaml(&at_stop)
    );
    cluster.stop_apiserver(0).await.unwrap();
    // The outage itself is what is tested: nothing to wait for but the clock.
    tokio::time::sleep(OUTAGE).await;
    cluster.start_apiserver(0).await.unwrap();
    let back = Instant::now();

    let client = cluster.admin_client().await.unwrap();
    // Progress: one more worker completed than when the API server stopped (the one in
    // flight, which finished its update or reports it once its API server is back).
    let moved = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "one more worker completed", |p| {
        count_targets(p, TargetState::SignalCompleted) > completed_at_stop
            || state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    let resumed = back.elapsed();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let completed = back.elapsed();
    eprintln!(
        "the plan moved {resumed:?} after the API server was ready again ({} of {} workers \
         completed then) and completed {completed:?} after it",
        count_targets(&moved, TargetState::SignalCompleted),
        WORKERS.len()
    );
    for worker in WORKERS {
        assert_eq!(target(&done, 0, worker).state, TargetState::SignalCompleted);
    }
    assert!(
        resumed <= RESUME,
        "the plan moved {resumed:?} after the API server was ready; at most {RESUME:?} allowed"
    );
}

#[tokio::test]
async fn every_api_server_restarted_while_workers_update_refuses_no_node() {
    const WORKERS: [&str; 4] = ["worker-0", "worker-1", "worker-2", "worker-3"];
    let (Fleet { cluster, client, controllers: _controllers, workers: _workers }, _server) =
        updating(&WORKERS, "plan-api-restarts", "api-restarts").await;
    // `concurrent: 1`: the workers download one after the other. Restart the (only) API
    // server the moment each starts: its next Plan reads, and the next worker's, meet a
    // server that has just come back.
    let mut client = client;
    for worker in WORKERS {
        wait_downloading(&client, worker).await;
        cluster.stop_apiserver(0).await.unwrap();
        cluster.start_apiserver(0).await.unwrap();
        client = cluster.admin_client().await.unwrap();
        eprintln!("API server restarted as {worker} started downloading");
    }

    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    for worker in WORKERS {
        let target = target(&done, 0, worker);
        assert_eq!(target.state, TargetState::SignalCompleted, "{worker}:\n{}", status_yaml(&done));
    }
    // No node answered a refusal on the way (a refusal fails the node, but say it plainly).
    let nodes: Api<Node> = Api::all(client.clone());
    for worker in WORKERS {
        let node = nodes.get(worker).await.unwrap();
        let signal = autopilot_api::signal::from_meta(&node.metadata).ok().flatten();
        let reason = signal.and_then(|s| s.status).and_then(|s| s.reason).unwrap_or_default();
        assert!(!reason.contains("refused"), "{worker} refused: {reason}");
    }
}

/// One controller (its own agent off) and `workers` updating for real to v2, one at a time
/// (`concurrent: 1`), each with its own identity (`system:node:<name>`) and the shipped
/// `manifests/rbac/worker.yaml`: the fleet for test `name`, started, with the Plan of run
/// `run` created, and the file server of v2 (kept for as long as the plan runs).
async fn updating(workers: &[&str], name: &str, run: &str) -> (Fleet, FileServer) {
    let (v2, sha) = v2_build();
    let server = FileServer::start(v2).await.expect("the v2 file server");
    let fleet = FleetBuilder::new(name)
        .controllers(1)
        .workers(workers)
        .agents(Agents::Real)
        .controller_args(&[NO_AGENT])
        .start()
        .await
        .expect("the fleet starts");
    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(workers, 1)));
    create_plan(&fleet.client, &plan("autopilot", run, vec![k0s_command(update)]))
        .await
        .expect("the Plan");
    (fleet, server)
}

/// Waits (up to [`PLAN_TIMEOUT`]) until `worker`'s signal shows `Downloading`; a worker
/// already past it (a watch that missed the phase) counts too.
async fn wait_downloading(client: &kube::Client, worker: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut stream = std::pin::pin!(watcher::watch_object(nodes, worker));
    let deadline = tokio::time::Instant::now() + PLAN_TIMEOUT;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("{worker} starts downloading in time"));
        let Some(Ok(Some(node))) = next else { continue };
        let signal = autopilot_api::signal::from_meta(&node.metadata).ok().flatten();
        if signal.and_then(|s| s.phase()).is_some() {
            return;
        }
    }
}
