//! The main job end to end (issue 4, REF §14 "ha 3×3"): 3 controllers and 3 workers at v1,
//! a v2 build served over loopback HTTP with its sha256, one Plan with static targets, not
//! forced. Real node agents download, verify, swap and restart; the leader drains workers.
//! Asserted: the Plan completes, every node runs v2 (the file on disk and the published
//! running version), each node went through the phases in order with non-decreasing
//! timestamps, controllers went one at a time and all before any worker, and no more than
//! `concurrent` workers were in flight.

use std::time::{Duration, Instant};

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{ControlNode, PlanStateType, TargetState};
use integration::signals::{ObjectKind, Seen, SignalRecorder};
use integration::wait_for;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt as _};

use crate::support::*;

const CONTROLLERS: [&str; 3] = ["controller-0", "controller-1", "controller-2"];
const WORKERS: [&str; 3] = ["worker-0", "worker-1", "worker-2"];
const WORKER_CONCURRENCY: u32 = 2;

fn describe(history: &[Seen]) -> String {
    history
        .iter()
        .map(|s| format!("{} {:?} {:?} @{}", s.object, s.phase, s.timestamp, s.revision))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn three_controllers_and_three_workers_update_from_v1_to_v2() {
    let (v2, sha) = v2_build();
    let server = integration::http::FileServer::start(v2).await.unwrap();

    let Fleet { cluster: _cluster, client, controllers, workers } =
        FleetBuilder::new("update-ha3x3")
            .controllers(3)
            .workers(&WORKERS)
            .agents(Agents::Real)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();
    let recorder = SignalRecorder::start(&client).await.unwrap();

    let update = update_to(
        V2,
        server.base_url(),
        &sha,
        Some(static_nodes(&CONTROLLERS, 1)),
        Some(static_nodes(&WORKERS, WORKER_CONCURRENCY)),
    );
    let started = Instant::now();
    create_plan(&client, &plan("autopilot", "ha3x3-v2", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan(&client, "autopilot", Duration::from_secs(240), "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    let took = started.elapsed();
    eprintln!("ha3x3: plan created to Completed in {:.1} s", took.as_secs_f64());
    for t in targets(command(&done, 0)) {
        assert_eq!(t.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    let progress = done.status.as_ref().and_then(|s| s.progress.as_deref());
    assert_eq!(progress, Some("6/6"), "the Progress column:\n{}", status_yaml(&done));

    // Every node runs v2: the file on disk, and the running process publishes it.
    for process in controllers.iter().chain(&workers) {
        assert_eq!(version_on_disk(process), V2, "{} on disk", process.node_name());
        assert!(process.is_running(), "{} runs", process.node_name());
    }
    every_node_publishes_v2(&client).await;

    // Each node went through every phase, in order, with non-decreasing timestamps.
    let history = recorder.history();
    check_phases(&recorder, &history);

    // Controllers one at a time, all before any worker; workers at most WORKER_CONCURRENCY
    // at a time. In flight: from being signalled until Completed (etcd revision order).
    check_order(&history);
}

/// Every node publishes v2 and no worker is left cordoned.
async fn every_node_publishes_v2(client: &kube::Client) {
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(Duration::from_secs(30), "every node to publish v2", || async {
        for name in CONTROLLERS {
            if control_nodes.get(name).await?.k0s_version() != Some(V2) {
                return Ok(None);
            }
        }
        for name in WORKERS {
            let node = nodes.get(name).await?;
            if node.annotations().get(keys::ANNOTATION_K0S_VERSION).map(String::as_str) != Some(V2)
            {
                return Ok(None);
            }
            let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
            anyhow::ensure!(!cordoned, "{name} is still cordoned after the plan completed");
        }
        Ok(Some(()))
    })
    .await
    .expect("every node publishes v2");
}

/// Each node went through every phase, in order, with non-decreasing timestamps.
fn check_phases(recorder: &SignalRecorder, history: &[Seen]) {
    let by_object = recorder.by_object();
    assert_eq!(by_object.len(), 6, "six signalled objects:\n{}", describe(history));
    for (object, seen) in &by_object {
        let phases: Vec<_> = seen.iter().map(|s| s.phase).collect();
        assert_eq!(phases, UPDATE_PHASES, "{object}:\n{}", describe(seen));
        let stamps: Vec<_> = seen.iter().filter_map(|s| s.timestamp.clone()).collect();
        assert!(stamps.is_sorted(), "{object} timestamps go back:\n{}", describe(seen));
        let expected_kind = if object.name.starts_with("controller-") {
            ObjectKind::ControlNode
        } else {
            ObjectKind::Node
        };
        assert_eq!(object.kind, expected_kind);
    }
}

/// Controllers one at a time, all before any worker; workers at most WORKER_CONCURRENCY
/// at a time. In flight: from being signalled until Completed (etcd revision order).
fn check_order(history: &[Seen]) {
    let mut in_flight: Vec<&str> = Vec::new();
    let mut max_workers = 0;
    let mut controllers_done = 0;
    for seen in history {
        let name = seen.object.name.as_str();
        let is_controller = seen.object.kind == ObjectKind::ControlNode;
        match seen.phase {
            None => {
                if is_controller {
                    assert!(
                        in_flight.is_empty(),
                        "{name} signalled while {in_flight:?} in flight:\n{}",
                        describe(history)
                    );
                } else {
                    assert_eq!(
                        controllers_done,
                        3,
                        "{name} signalled before every controller completed:\n{}",
                        describe(history)
                    );
                }
                in_flight.push(name);
                if !is_controller {
                    max_workers = max_workers.max(in_flight.len());
                }
            }
            Some(SignalPhase::Completed) => {
                in_flight.retain(|n| *n != name);
                if is_controller {
                    controllers_done += 1;
                }
            }
            Some(_) => {}
        }
    }
    assert!(
        max_workers <= WORKER_CONCURRENCY as usize,
        "{max_workers} workers in flight at once:\n{}",
        describe(history)
    );
}
