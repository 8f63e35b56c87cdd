//! The drain timeout (`--drain-timeout`): a drain a PodDisruptionBudget keeps refusing fails
//! the node once it has been in `Cordoning` for the timeout. The reason names the blocking
//! pod and budget, the plan ends `ApplyFailed`, the node is uncordoned (its binary was never
//! touched: the node did not get past `Cordoning`) and the pod was not evicted.
//!
//! The node side is the test responder acting as an agent does with central cordoning
//! (`Behaviour::CompleteWithLeader`).

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, Responder};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;

use crate::support::*;

#[tokio::test]
async fn a_drain_blocked_past_the_timeout_fails_the_node_and_uncordons_it() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("drain-timeout")
            .controllers(1)
            .workers(&["worker-0"])
            .controller_args(&["--drain-timeout", "5s"])
            .start()
            .await
            .unwrap();
    let config = Config::new().default_behaviour(Behaviour::CompleteWithLeader);
    let _responder = Responder::start(client.clone(), config).await.unwrap();
    // One pod on the node, and a budget that needs it: every eviction is refused.
    pods_under_budget(&client, &["worker-0"], 1).await.unwrap();

    let update = k0s_update(None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "blocked", vec![k0s_command(update)])).await.unwrap();

    let failed = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    let worker = target(&failed, 0, "worker-0");
    assert_eq!(worker.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    let reason = worker.reason.clone().unwrap_or_default();
    assert!(reason.starts_with("drain of worker-0 blocked for 5s: "), "{reason}");
    assert!(reason.contains("default/web-0"), "the blocking pod is named: {reason}");
    assert!(reason.contains("web-budget"), "the blocking budget is named: {reason}");

    // The node never got past Cordoning: it is uncordoned and the pod is still there.
    let signal = node_signal(&client, "worker-0").await.unwrap().expect("a signal");
    assert_eq!(signal.status.map(|s| s.status), Some(SignalPhase::Failed));
    integration::wait_for(PLAN_TIMEOUT, "worker-0 uncordoned", || async {
        Ok((node_cordon(&client, "worker-0").await? == (false, false)).then_some(()))
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert!(pods.get_opt("web-0").await.unwrap().is_some(), "the budget's pod was not evicted");
}
