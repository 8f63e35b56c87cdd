//! Real updates of controllers with the real node agent on their ControlNodes (issue 4):
//! each controller downloads and verifies v2, passes the leader's (no-op) cordon, swaps its
//! binary, stops cleanly (releasing the leader lease if it held it), re-executes itself and
//! completes; controllers go one at a time and before any worker.

use std::time::Duration;

use autopilot_api::v1beta2::{ControlNode, PlanStateType, TargetState};
use integration::{K0sProcess, wait_for};
use kube::Api;

use crate::support::*;

#[tokio::test]
async fn controllers_then_a_worker_update_to_v2_one_at_a_time() {
    let (v2_bytes, sha) = v2_build();
    let server = integration::http::FileServer::start(v2_bytes).await.unwrap();
    let base = server.base_url().to_owned();

    let Fleet { cluster: _cluster, client, controllers, workers } =
        FleetBuilder::new("update-controllers")
            .controllers(2)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();
    let pids: Vec<u32> = controllers.iter().map(K0sProcess::pid).collect();

    let update = update_to(
        V2,
        &base,
        &sha,
        Some(static_nodes(&["controller-0", "controller-1"], 1)),
        Some(static_nodes(&["worker-0"], 1)),
    );
    create_plan(&client, &plan("autopilot", "v2", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }

    // Every binary on disk is v2; each controller re-executed in place and published v2.
    for process in controllers.iter().chain(workers.iter()) {
        assert_eq!(version_on_disk(process), V2, "{} on disk", process.node_name());
    }
    for (process, pid) in controllers.iter().zip(pids) {
        assert!(
            process.is_running() && process.pid() == pid,
            "{} re-executed in place",
            process.node_name()
        );
    }
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    for name in ["controller-0", "controller-1"] {
        wait_for(Duration::from_secs(30), "the ControlNode to publish v2", || async {
            let node = control_nodes.get(name).await?;
            Ok((node.k0s_version() == Some(V2)).then_some(()))
        })
        .await
        .unwrap();
    }
    // Controllers one at a time and before the worker: the worker's signal came after both
    // controllers completed (its lastUpdatedTimestamp is when it was signalled).
    let controller_done: Vec<_> = targets(command(&done, 0))
        .into_iter()
        .filter(|t| t.name.starts_with("controller-"))
        .map(|t| t.last_updated_timestamp.0)
        .collect();
    let worker_signalled = target(&done, 0, "worker-0").last_updated_timestamp.0;
    assert!(controller_done.iter().all(|t| *t <= worker_signalled), "{}", status_yaml(&done));
}
