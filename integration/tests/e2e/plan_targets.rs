//! Target problems (REF §3.4, §4.3, §4.6; DESIGN §2, §4): a static target without an object
//! ends in `IncompleteTargets`; a target whose object disappears mid-run ends in
//! `IncompleteTargets` too, as k0s since 1.35 (the node's own state is `SignalMissingNode`);
//! an excluded node kind ends in `Restricted`; a Plan not named
//! `autopilot` is left alone with an `Ignored` condition.

use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, ObjectRef, Release, Responder};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::DeleteParams;

use crate::support::*;

#[tokio::test]
async fn a_static_target_without_an_object_ends_the_plan_in_incomplete_targets() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-targets-missing").controllers(1).start().await.unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    let update = k0s_update(Some(static_nodes(&["controller-0", "controller-9"], 1)), None);
    create_plan(&client, &plan("autopilot", "missing", vec![k0s_command(update)])).await.unwrap();
    let ended =
        wait_plan_state(&client, "autopilot", PlanStateType::IncompleteTargets).await.unwrap();
    let status = status_yaml(&ended);

    assert_eq!(target(&ended, 0, "controller-9").state, TargetState::MissingSignalNode, "{status}");
    let log = responder.log();
    assert!(log.is_empty(), "nobody is signalled, not even the existing controller:\n{log}");
    assert!(objects_with_signals(&client).await.unwrap().is_empty(), "{status}");
}

/// The failure policy (DESIGN §11): the deletion stops new signals at once, worker-0 (in
/// flight) finishes, and only then does the plan end.
#[tokio::test]
async fn a_worker_node_deleted_during_the_run_ends_the_plan_in_incomplete_targets() {
    let workers = ["worker-0", "worker-1", "worker-2"];
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: processes } =
        FleetBuilder::new("plan-targets-deleted")
            .controllers(1)
            .workers(&workers)
            .start()
            .await
            .unwrap();
    // worker-0 (first by name) reports Downloading and then waits for the test, so the run
    // stays in flight.
    let release = Release::new();
    let config = Config::new().node("worker-0", Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await.unwrap();

    let update = k0s_update(None, Some(static_nodes(&workers, 1)));
    create_plan(&client, &plan("autopilot", "deleted", vec![k0s_command(update)])).await.unwrap();
    // Once the plan shows worker-0's phase, the engine has read the signal back and has
    // nothing left to do: the deletion below is the only thing that can move the plan.
    wait_plan(&client, "autopilot", PLAN_TIMEOUT, "worker-0 Downloading on the plan", |p| {
        p.status.as_ref().and_then(|s| s.commands.first()).is_some_and(|c| {
            targets(c)
                .iter()
                .any(|t| t.name == "worker-0" && t.phase == Some(SignalPhase::Downloading))
        })
    })
    .await
    .unwrap();

    // worker-2 goes away for good: stop its process (which would re-create its Node), then
    // delete the Node.
    processes[2].stop(Duration::from_secs(20)).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.delete("worker-2", &DeleteParams::default()).await.unwrap();

    // No new node is signalled; the plan waits for worker-0, which is in flight.
    wait_plan(&client, "autopilot", PLAN_TIMEOUT, "the command to stop for worker-2", |p| {
        p.status.as_ref().and_then(|s| s.commands.first()).is_some_and(|c| {
            c.reason.as_deref().is_some_and(|r| {
                r.starts_with("stopping: worker worker-2 failed") && r.ends_with("finish: worker-0")
            })
        })
    })
    .await
    .unwrap();
    release.release();

    let ended =
        wait_plan_state(&client, "autopilot", PlanStateType::IncompleteTargets).await.unwrap();
    let status = status_yaml(&ended);
    assert_eq!(target(&ended, 0, "worker-2").state, TargetState::MissingSignalNode, "{status}");
    assert_eq!(target(&ended, 0, "worker-0").state, TargetState::SignalCompleted, "{status}");
    let log = responder.log();
    assert_eq!(
        log.signal_order(None),
        [ObjectRef::node("worker-0")],
        "only worker-0 was signalled:\n{log}"
    );
}

#[tokio::test]
async fn a_plan_targeting_an_excluded_node_kind_ends_in_restricted() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-targets-restricted")
            .controllers(1)
            .workers(&["worker-0"])
            .controller_args(&["--exclude-from-plans", "worker"])
            .start()
            .await
            .unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    let update = k0s_update(None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "restricted", vec![k0s_command(update)]))
        .await
        .unwrap();
    let ended = wait_plan_state(&client, "autopilot", PlanStateType::Restricted).await.unwrap();
    let status = status_yaml(&ended);

    let log = responder.log();
    assert!(log.is_empty(), "nobody is signalled:\n{log}");
    assert!(objects_with_signals(&client).await.unwrap().is_empty(), "{status}");
}

#[tokio::test]
async fn a_plan_not_named_autopilot_is_left_alone_with_an_ignored_condition() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-targets-other").controllers(1).start().await.unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    let update = k0s_update(Some(static_nodes(&["controller-0"], 1)), None);
    create_plan(&client, &plan("other", "other", vec![k0s_command(update)])).await.unwrap();
    let ignored = |p: &Plan| {
        p.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == keys::conditions::IGNORED && c.status == "True")
        })
    };
    let other =
        wait_plan(&client, "other", PLAN_TIMEOUT, "an Ignored condition", ignored).await.unwrap();
    let status = status_yaml(&other);

    let condition = other
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == keys::conditions::IGNORED))
        .expect("checked above");
    assert_eq!(condition.reason, keys::conditions::REASON_NOT_AUTOPILOT_PLAN, "{status}");
    assert!(!condition.message.is_empty(), "the condition says why:\n{status}");
    assert_eq!(state(&other), PlanStateType::NewPlan, "state untouched:\n{status}");
    assert!(other.status.as_ref().is_some_and(|s| s.commands.is_empty()), "{status}");
    let log = responder.log();
    assert!(log.is_empty(), "nobody is signalled:\n{log}");
    assert!(objects_with_signals(&client).await.unwrap().is_empty(), "{status}");
}
