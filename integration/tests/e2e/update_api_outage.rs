//! An API-server outage during a node's restart never kills the node or rolls it back
//! (DESIGN §11): a worker updating to v2 loses its API server (killed) the moment it reports
//! `Restarting` — while its trial boot of v2 is starting — and gets it back 90 s later. The
//! trial does not count the outage against its deadline and nothing gives up: once the API
//! server answers, the node completes at v2, and its process never exited (re-executed in
//! place, same pid).

use std::time::{Duration, Instant};

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use futures::StreamExt as _;
use integration::http::FileServer;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::watcher;

use crate::support::*;

/// How long the API server stays away: longer than the trial deadline the worker runs with.
const OUTAGE: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_worker_whose_api_server_is_down_while_it_restarts_completes_at_v2_when_it_returns() {
    let (v2_bytes, sha) = v2_build();
    let server = FileServer::start(v2_bytes.clone()).await.unwrap();
    // A trial deadline shorter than the outage: only time while the API server answers counts.
    let Fleet { cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("update-api-outage")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .worker_args(&["--trial-timeout", "30s"])
            .start()
            .await
            .unwrap();
    let worker = &workers[0];
    let pid = worker.pid();

    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "outage", vec![k0s_command(update)])).await.unwrap();

    // Watch the Node and kill the API server the moment the worker reports Restarting.
    let nodes: Api<Node> = Api::all(client.clone());
    let mut stream = std::pin::pin!(watcher::watch_object(nodes, "worker-0"));
    let deadline = tokio::time::Instant::now() + PLAN_TIMEOUT;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("worker-0 reaches Restarting in time");
        let Some(Ok(Some(node))) = next else { continue };
        let signal = autopilot_api::signal::from_meta(&node.metadata).ok().flatten();
        if signal.and_then(|s| s.phase()) == Some(SignalPhase::Restarting) {
            break;
        }
    }
    let mark = worker.log_mark();
    cluster.kill_apiserver(0).await.unwrap();
    let down = Instant::now();
    // Nothing to wait for but the clock: the outage itself is what is tested. Meanwhile the
    // process must stay up.
    while down.elapsed() < OUTAGE {
        assert!(
            worker.is_running(),
            "the worker exited during the outage:\n{}",
            worker.log_tail(40)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    cluster.start_apiserver(0).await.unwrap();
    let back = Instant::now();

    let client = cluster.admin_client().await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    eprintln!("plan completed {:?} after the API server came back", back.elapsed());
    assert_eq!(target(&done, 0, "worker-0").state, TargetState::SignalCompleted);
    assert!(worker.is_running(), "the worker runs:\n{}", worker.log_tail(40));
    assert_eq!(worker.pid(), pid, "the process never exited (re-executed in place)");
    assert_eq!(version_on_disk(worker), V2);
    wait_node_version(&client, "worker-0", V2).await.unwrap();
    let (cordoned, marked) = node_cordon(&client, "worker-0").await.unwrap();
    assert!(!cordoned && !marked, "uncordoned after the update");
    let after_mark = worker.log_after(mark);
    assert!(!after_mark.contains("rolling back"), "an outage never causes a rollback");
    assert!(
        after_mark.contains("API server not answering"),
        "the node waited for its API server:\n{}",
        worker.log_tail(60)
    );
}
