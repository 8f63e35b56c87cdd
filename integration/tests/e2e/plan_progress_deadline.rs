//! The progress deadline (`--node-progress-timeout`): a signalled node whose signal phase does
//! not change for the deadline fails with `no progress in <phase> for <duration>`, the plan
//! ends `ApplyFailed`, and a node autopilot cordoned is uncordoned. Controllers in flight are
//! held to it as well: a controller that never answers does not hold the plan forever.
//!
//! The node side is the test responder told never to answer (`Behaviour::Hold`); where a
//! node must reach a cordoned phase, the test writes `Cordoning` onto the signal itself, as
//! an agent would, and the leader cordons and drains it and writes `ApplyingUpdate`, after
//! which nothing happens any more (the agent's process is gone).

use autopilot_api::signal::{self, SignalPhase, SignalStatus};
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, Responder};
use integration::wait_for;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::*;

/// The deadline these scenarios run with: short, so a test takes seconds.
const DEADLINE: &str = "5s";

#[tokio::test]
async fn a_worker_stuck_after_its_drain_fails_and_is_uncordoned() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("progress-worker")
            .controllers(1)
            .workers(&["worker-0"])
            .controller_args(&["--node-progress-timeout", DEADLINE])
            .start()
            .await
            .unwrap();
    let config = Config::new().default_behaviour(Behaviour::Hold);
    let _responder = Responder::start(client.clone(), config).await.unwrap();

    let update = k0s_update(None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "stuck", vec![k0s_command(update)])).await.unwrap();

    // The node downloads and asks to be drained, as an agent does.
    let data = wait_for(PLAN_TIMEOUT, "worker-0 signalled", || node_signal(&client, "worker-0"))
        .await
        .unwrap();
    let mut cordoning = data.clone();
    cordoning.status = Some(SignalStatus::new(SignalPhase::Cordoning, jiff::Timestamp::now()));
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = json!({ "metadata": { "annotations": signal::to_annotations(&cordoning) } });
    nodes.patch("worker-0", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();

    // The leader cordons and drains it (nothing to evict) and hands it back: ApplyingUpdate.
    wait_for(PLAN_TIMEOUT, "worker-0 cordoned and in ApplyingUpdate", || async {
        let phase =
            node_signal(&client, "worker-0").await?.and_then(|s| s.status).map(|s| s.status);
        let cordon = node_cordon(&client, "worker-0").await?;
        Ok((phase == Some(SignalPhase::ApplyingUpdate) && cordon == (true, true)).then_some(()))
    })
    .await
    .unwrap();

    // Nothing more happens on the node: the deadline fails it.
    let failed = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    let worker = target(&failed, 0, "worker-0");
    assert_eq!(worker.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    assert_eq!(
        worker.reason.as_deref(),
        Some("no progress in ApplyingUpdate for 5s"),
        "{}",
        status_yaml(&failed)
    );
    let description = command(&failed, 0).description.clone().unwrap_or_default();
    assert!(description.contains("no progress in ApplyingUpdate for 5s"), "{description}");

    // The node's signal says so, and autopilot's cordon is undone.
    let status = node_signal(&client, "worker-0").await.unwrap().and_then(|s| s.status);
    assert_eq!(status.map(|s| s.status), Some(SignalPhase::Failed));
    wait_for(PLAN_TIMEOUT, "worker-0 uncordoned", || async {
        Ok((node_cordon(&client, "worker-0").await? == (false, false)).then_some(()))
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_controller_that_never_answers_does_not_hold_the_plan() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("progress-controller")
            .controllers(1)
            .controller_args(&["--node-progress-timeout", DEADLINE])
            .start()
            .await
            .unwrap();
    let config = Config::new().default_behaviour(Behaviour::Hold);
    let _responder = Responder::start(client.clone(), config).await.unwrap();

    let update = k0s_update(Some(static_nodes(&["controller-0"], 1)), None);
    create_plan(&client, &plan("autopilot", "silent", vec![k0s_command(update)])).await.unwrap();

    let failed = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    let controller = target(&failed, 0, "controller-0");
    assert_eq!(controller.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    assert_eq!(
        controller.reason.as_deref(),
        Some("no progress in SignalSent for 5s"),
        "{}",
        status_yaml(&failed)
    );
    // The leader tells the node after it wrote the status that ended the plan.
    wait_for(std::time::Duration::from_secs(30), "controller-0's signal Failed", || async {
        let signal = control_node_signal(&client, "controller-0").await?;
        let phase = signal.and_then(|s| s.status).map(|s| s.status);
        Ok((phase == Some(SignalPhase::Failed)).then_some(()))
    })
    .await
    .expect("the leader tells controller-0 it failed");
}
