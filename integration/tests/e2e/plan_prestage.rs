//! Pre-staging (`prestage: true`) with the real node agents: every target downloads,
//! verifies and self-tests the payload before the first node is signalled, so before any is
//! cordoned; the update then takes the staged file (nothing is downloaded twice). A node that
//! cannot stage fails the plan with no node signalled, cordoned or changed.

use autopilot_api::prestage::PrestageState;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::http::{FileServer, Serve};
use integration::signals::SignalRecorder;

use crate::support::*;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

#[tokio::test]
async fn every_worker_stages_before_the_first_is_cordoned_and_the_update_downloads_nothing() {
    let (v2, sha) = v2_build();
    // Both staging downloads are held part-way until the test has looked around.
    let server = FileServer::start_with(Serve::HoldUntilReleased { body: v2, after: 1 << 20 })
        .await
        .unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("plan-prestage")
            .controllers(1)
            .workers(&WORKERS)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let recorder = SignalRecorder::start(&client).await.unwrap();
    let mut update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&WORKERS, 1)));
    update.prestage = true;
    create_plan(&client, &plan("autopilot", "prestage", vec![k0s_command(update)])).await.unwrap();

    // Both workers stage at once (prestageConcurrent unset: all), and while they do no node
    // carries a signal or a cordon.
    server.wait_held(2, PLAN_TIMEOUT).await.unwrap();
    let staging = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "both asked to stage", |p| {
        WORKERS.iter().all(|w| target(p, 0, w).prestage == Some(PrestageState::Requested))
    })
    .await
    .unwrap();
    assert_eq!(command(&staging, 0).staged.as_deref(), Some("0/2"), "{}", status_yaml(&staging));
    let reason = command(&staging, 0).reason.clone().unwrap_or_default();
    assert!(reason.starts_with("pre-staging: "), "{reason}");
    assert!(reason.contains("; 0/2 staged, waiting for"), "{reason}");
    for name in WORKERS {
        assert_eq!(node_cordon(&client, name).await.unwrap(), (false, false), "{name} cordoned");
        assert!(node_signal(&client, name).await.unwrap().is_none(), "{name} signalled");
    }
    assert!(recorder.history().is_empty(), "signalled while staging: {:?}", recorder.history());

    server.release();
    let done = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    assert_eq!(command(&done, 0).staged.as_deref(), Some("2/2"), "{}", status_yaml(&done));
    for name in WORKERS {
        let t = target(&done, 0, name);
        assert_eq!(t.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
        assert_eq!(t.prestage, Some(PrestageState::Staged), "{name}");
    }
    for process in &workers {
        assert_eq!(version_on_disk(process), V2, "{}", process.node_name());
    }
    // One download per worker: the updates took the staged files.
    assert_eq!(server.requests(), 2, "the update downloaded again");
    // The first signal came after both had staged: the recorder saw nothing before the
    // release, and each worker got exactly one signal.
    let per_object = recorder.by_object();
    assert_eq!(per_object.len(), 2, "{per_object:?}");
}

#[tokio::test]
async fn a_worker_that_cannot_stage_fails_the_plan_with_nothing_signalled_or_cordoned() {
    let (v2, _) = v2_build();
    let server = FileServer::start(v2).await.unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("plan-prestage-fails")
            .controllers(1)
            .workers(&WORKERS)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let before: Vec<Before> = workers.iter().map(Before::of).collect();
    let recorder = SignalRecorder::start(&client).await.unwrap();
    // The digest is not the payload's: verification fails on every worker.
    let wrong = sha256_hex(b"not the v2 build");
    let mut update =
        update_to(V2, server.base_url(), &wrong, None, Some(static_nodes(&WORKERS, 1)));
    update.prestage = true;
    create_plan(&client, &plan("autopilot", "prestage-fails", vec![k0s_command(update)]))
        .await
        .unwrap();

    let failed = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    let description = command(&failed, 0).description.clone().unwrap_or_default();
    // The first report ends the plan; which worker's comes first is the workers' race.
    assert!(description.contains("Node worker-"), "{description}");
    assert!(description.contains("could not stage the payload"), "{description}");
    assert!(description.contains("sha256"), "{description}");
    assert!(recorder.history().is_empty(), "a node was signalled: {:?}", recorder.history());
    // The other worker finishes its own attempt (and fails too) after the plan ended.
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    for name in WORKERS {
        integration::wait_for(PLAN_TIMEOUT, &format!("{name}'s pre-staging report"), || async {
            let node = nodes.get(name).await?;
            let report = autopilot_api::prestage::report_of(&node.metadata)
                .map_err(|problem| anyhow::anyhow!(problem))?;
            Ok(report.filter(|r| r.outcome == autopilot_api::prestage::PrestageOutcome::Failed))
        })
        .await
        .unwrap();
    }
    for (process, before) in workers.iter().zip(&before) {
        let name = process.node_name();
        assert_eq!(node_cordon(&client, name).await.unwrap(), (false, false), "{name} cordoned");
        before.assert_untouched(process, name);
    }
}
