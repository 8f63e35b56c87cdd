//! Plan-engine scenarios that the `plan_*` files prove with a test responder, here with the
//! real node agents doing real updates (a v2 build served over loopback):
//! - quorum safety: while one controller is down nothing is signalled or replaced; once it
//!   is back every controller updates, one at a time;
//! - failover: the leader is SIGKILLed while a worker downloads; the new leader finishes the
//!   plan without signalling any node twice, and the killed controller, restarted like a
//!   supervisor would, rejoins;
//! - selector: only the workers a label selector picks are updated; the others keep v1 and
//!   never see a signal;
//! - reruns: once a run has ended, a changed spec (back to the previous version) is a new
//!   run that really rolls the worker back.

use std::collections::BTreeSet;
use std::time::Duration;

use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::http::{FileServer, Serve};
use integration::signals::SignalRecorder;
use integration::{run_k0s_binary, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use sha2::Digest as _;

use crate::support::*;

const V2: &str = "v1.35.1+k0s.0";
const CONTROLLERS: [&str; 3] = ["controller-0", "controller-1", "controller-2"];

/// Per object, how many distinct signals (by `created`) it received.
fn signals_per_object(recorder: &SignalRecorder) -> Vec<(String, usize)> {
    recorder
        .by_object()
        .into_iter()
        .map(|(object, seen)| {
            let created: BTreeSet<_> = seen.iter().map(|s| s.created.clone()).collect();
            (object.to_string(), created.len())
        })
        .collect()
}

#[tokio::test]
async fn quorum_safety_with_real_agents() {
    let (v2, sha) = v2_build();
    let server = FileServer::start(v2).await.unwrap();
    let Fleet { cluster, client, mut controllers, workers: _workers } =
        FleetBuilder::new("real-quorum-safety")
            .controllers(3)
            .agents(Agents::Real)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();
    let recorder = SignalRecorder::start(&client).await.unwrap();

    // "Stopping a controller" stops its k0s and its API server (DESIGN §8).
    controllers[1].stop(Duration::from_secs(20)).await.unwrap();
    cluster.stop_apiserver(1).await.unwrap();
    let update = update_to(V2, server.base_url(), &sha, Some(static_nodes(&CONTROLLERS, 1)), None);
    create_plan(&client, &plan("autopilot", "real-quorum", vec![k0s_command(update)]))
        .await
        .unwrap();
    let held = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "plan held with a reason", |p| {
        state(p) == PlanStateType::Schedulable && command(p, 0).reason.is_some()
    })
    .await
    .unwrap();
    let reason = command(&held, 0).reason.clone().unwrap_or_default();
    assert!(reason.contains("controller-1"), "hold reason names controller-1: {reason:?}");
    watch_plan_for(&client, "autopilot", Duration::from_secs(5), |p| match state(p) {
        PlanStateType::NewPlan | PlanStateType::SchedulableWait | PlanStateType::Schedulable => {
            Ok(())
        }
        other => Err(format!("plan left the held states: {other}")),
    })
    .await
    .unwrap();
    assert!(recorder.history().is_empty(), "nothing signalled while controller-1 is down");
    assert_eq!(server.requests(), 0, "nothing downloaded while controller-1 is down");
    for process in [&controllers[0], &controllers[2]] {
        assert_ne!(version_on_disk(process), V2, "{} untouched", process.node_name());
    }

    cluster.start_apiserver(1).await.unwrap();
    controllers[1].restart().await.unwrap();
    let done = wait_plan(&client, "autopilot", Duration::from_secs(180), "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    for t in targets(command(&done, 0)) {
        assert_eq!(t.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    for process in &controllers {
        assert_eq!(version_on_disk(process), V2, "{}", process.node_name());
        assert!(process.is_running(), "{} runs", process.node_name());
    }
    assert!(signals_per_object(&recorder).iter().all(|(_, n)| *n == 1), "{:?}", recorder.history());
}

#[tokio::test]
async fn leader_killed_while_a_worker_downloads_the_new_leader_finishes() {
    let (v2, sha) = v2_build();
    let server = FileServer::start_with(Serve::HoldUntilReleased { body: v2, after: 1 << 20 })
        .await
        .unwrap();
    let workers = ["worker-0", "worker-1"];
    let Fleet { cluster: _cluster, client, mut controllers, workers: worker_processes } =
        FleetBuilder::new("real-failover")
            .controllers(2)
            .workers(&workers)
            .agents(Agents::Real)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();
    let recorder = SignalRecorder::start(&client).await.unwrap();

    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&workers, 1)));
    create_plan(&client, &plan("autopilot", "real-failover", vec![k0s_command(update)]))
        .await
        .unwrap();
    // worker-0 is downloading (its response is held part-way) when the leader dies.
    server.wait_held(1, PLAN_TIMEOUT).await.unwrap();
    let old = wait_for(STARTUP, "a leader", || leader(&client)).await.unwrap();
    controllers[old].kill().unwrap();
    controllers[old].wait_exit(Duration::from_secs(10)).await.unwrap();
    let new = wait_for(Duration::from_secs(30), "another leader", || async {
        Ok(leader(&client).await?.filter(|l| *l != old))
    })
    .await
    .unwrap();
    eprintln!("leader controller-{old} killed; controller-{new} took over");
    server.release();
    controllers[old].restart().await.unwrap();

    let done = wait_plan(&client, "autopilot", Duration::from_secs(180), "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    for t in targets(command(&done, 0)) {
        assert_eq!(t.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    for process in &worker_processes {
        assert_eq!(version_on_disk(process), V2, "{}", process.node_name());
    }
    let per_object = signals_per_object(&recorder);
    assert_eq!(per_object.len(), 2, "{per_object:?}");
    assert!(per_object.iter().all(|(_, n)| *n == 1), "signalled twice: {per_object:?}");
    // worker-1 was signalled only after worker-0 completed (concurrent: 1).
    let history = recorder.history();
    let w0_done = history
        .iter()
        .find(|s| s.object.name == "worker-0" && s.phase.is_some_and(|p| p.is_terminal()))
        .map(|s| s.revision);
    let w1_signalled = history.iter().find(|s| s.object.name == "worker-1").map(|s| s.revision);
    assert!(w0_done.is_some() && w0_done < w1_signalled, "{history:?}");
    assert!(controllers[old].is_running(), "the restarted controller keeps running");
}

#[tokio::test]
async fn only_the_selected_workers_update() {
    let (v2, sha) = v2_build();
    let server = FileServer::start(v2).await.unwrap();
    let workers = ["worker-0", "worker-1", "worker-2"];
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: worker_processes } =
        FleetBuilder::new("real-selector")
            .controllers(1)
            .workers(&workers)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["worker-0", "worker-2"] {
        let patch = json!({ "metadata": { "labels": { "pool": "blue" } } });
        nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }
    let recorder = SignalRecorder::start(&client).await.unwrap();

    let update =
        update_to(V2, server.base_url(), &sha, None, Some(selected(Some("pool=blue"), None)));
    create_plan(&client, &plan("autopilot", "real-selector", vec![k0s_command(update)]))
        .await
        .unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(worker_names(command(&done, 0)), ["worker-0", "worker-2"], "{}", status_yaml(&done));
    for process in &worker_processes {
        let expected_v2 = process.node_name() != "worker-1";
        assert_eq!(version_on_disk(process) == V2, expected_v2, "{}", process.node_name());
    }
    assert!(node_signal(&client, "worker-1").await.unwrap().is_none(), "worker-1 never signalled");
    let signalled: Vec<_> = recorder.by_object().into_keys().map(|o| o.name).collect();
    assert_eq!(signalled, ["worker-0", "worker-2"]);
}

#[tokio::test]
async fn a_new_run_with_the_previous_version_rolls_a_worker_back() {
    let (v2, v2_sha) = v2_build();
    let v2_server = FileServer::start(v2.clone()).await.unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("real-rollback")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let worker = &workers[0];
    let v1 = version_on_disk(worker);
    let v1_bytes = std::fs::read(worker.binary_path()).unwrap();
    let v1_sha = hex::encode(sha2::Sha256::digest(&v1_bytes));
    let v1_server = FileServer::start(v1_bytes).await.unwrap();

    let forward =
        update_to(V2, v2_server.base_url(), &v2_sha, None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "forward", vec![k0s_command(forward)])).await.unwrap();
    wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(version_on_disk(worker), V2);

    // The operator changes the ended plan back to the old version: a new run, a real update.
    let back =
        update_to(&v1, v1_server.base_url(), &v1_sha, None, Some(static_nodes(&["worker-0"], 1)));
    let spec = json!({ "spec": { "id": "back", "commands": [k0s_command(back)] } });
    let plans: Api<autopilot_api::v1beta2::Plan> = Api::all(client.clone());
    plans.patch("autopilot", &PatchParams::default(), &Patch::Merge(&spec)).await.unwrap();
    // The old run's Completed is still there at first: wait for the new run's.
    let done = wait_for(PLAN_TIMEOUT, "the rollback run to complete", || async {
        let plan = plans.get("autopilot").await?;
        let back = plan.status.as_ref().is_some_and(|s| s.plan_id.as_deref() == Some("back"));
        if back && state(&plan).is_terminal() {
            anyhow::ensure!(
                state(&plan) == PlanStateType::Completed,
                "the rollback run ended in {}:\n{}",
                state(&plan),
                status_yaml(&plan)
            );
            return Ok(Some(plan));
        }
        Ok(None)
    })
    .await
    .unwrap();
    assert_eq!(target(&done, 0, "worker-0").state, TargetState::SignalCompleted);
    assert_eq!(version_on_disk(worker), v1, "rolled back on disk");
    // Back to the version k0s.prev holds: k0s.prev stays that proven binary, and v2, which
    // the run rejected, is kept as k0s.rejected, not executable.
    let prev = worker.binary_path().with_file_name("k0s.prev");
    let prev = run_k0s_binary(&prev, &["version"], Duration::from_secs(30)).unwrap();
    assert_eq!(String::from_utf8(prev.stdout).unwrap().trim(), v1, "v1 kept as k0s.prev");
    let rejected = worker.binary_path().with_file_name("k0s.rejected");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&rejected).expect("k0s.rejected").permissions(),
    ) & 0o777;
    assert_eq!(mode, 0o644, "k0s.rejected is not executable");
    assert!(std::fs::read(&rejected).unwrap() == v2, "v2 kept as k0s.rejected");
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(Duration::from_secs(30), "worker-0 to publish the old version", || async {
        let node = nodes.get("worker-0").await?;
        let published = node.metadata.annotations.unwrap_or_default();
        Ok((published.get(autopilot_api::keys::ANNOTATION_K0S_VERSION) == Some(&v1)).then_some(()))
    })
    .await
    .unwrap();
}
