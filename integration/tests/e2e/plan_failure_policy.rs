//! The failure policy (DESIGN §11; issue 11 item 3) against the real control plane: by
//! default the first failed worker stops new signals, the workers in flight finish and the
//! plan ends `ApplyFailed` naming the failed node and its reason; with `limits.maxFailures`
//! the rollout goes on past the allowed failures and completes, naming the failed node.
//!
//! One cluster, the two cases in sequence. The responder plays the nodes.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, ObjectKind, ObjectRef, Release, Responder};

use crate::support::*;

const WORKERS: [&str; 3] = ["worker-0", "worker-1", "worker-2"];

/// What the failing worker says went wrong.
const REASON: &str = "sha256 mismatch: want 00ff, got abcd";

/// How long the test watches for a signal that must not come.
const QUIET_WINDOW: Duration = Duration::from_secs(4);

#[tokio::test]
async fn the_first_failure_stops_new_signals_and_max_failures_lets_the_rollout_complete() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-failure-policy")
            .controllers(1)
            .workers(&WORKERS)
            .start()
            .await
            .unwrap();

    the_first_failure_stops_new_signals_and_the_plan_fails_once_the_nodes_in_flight_finish(&client)
        .await
        .unwrap();
    delete_plan(&client).await;
    with_max_failures_the_others_go_on_and_the_plan_completes_naming_the_failed_worker(&client)
        .await
        .unwrap();
}

/// Default policy, `concurrent: 2`: worker-0 fails while worker-1 is in flight. Nobody new
/// is signalled, the plan says it is stopping because of worker-0, worker-1 finishes, and
/// the plan ends `ApplyFailed` naming worker-0 and its reason; worker-2 never gets a signal.
async fn the_first_failure_stops_new_signals_and_the_plan_fails_once_the_nodes_in_flight_finish(
    client: &kube::Client,
) -> anyhow::Result<()> {
    let release = Release::new();
    let config = Config::new()
        .node("worker-0", Behaviour::fail(SignalPhase::FailedDownload, REASON))
        .node("worker-1", Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await?;
    let third = ObjectRef::node("worker-2");

    let update = k0s_update(None, Some(static_nodes(&WORKERS, 2)));
    create_plan(client, &plan("autopilot", "first-failure", vec![k0s_command(update)])).await?;

    // worker-0 failed, worker-1 is held in flight: the plan waits, saying why.
    let stopping = wait_plan(client, "autopilot", PLAN_TIMEOUT, "the plan to stop", |p| {
        state(p) == PlanStateType::SchedulableWait
            && command(p, 0)
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("stopping: worker worker-0 failed"))
    })
    .await?;
    assert_eq!(target(&stopping, 0, "worker-0").state, TargetState::SignalApplyFailed);
    assert_eq!(target(&stopping, 0, "worker-1").state, TargetState::SignalSent);
    assert_eq!(target(&stopping, 0, "worker-2").state, TargetState::SignalPending);
    assert!(
        responder.log().in_flight().contains(&ObjectRef::node("worker-1")),
        "worker-1 is still in flight:\n{}",
        responder.log()
    );

    // While worker-1 is in flight, worker-2 gets nothing (its slot is free: concurrent 2).
    let signalled = responder
        .wait_until(QUIET_WINDOW, "worker-2 to be signalled", |log| {
            log.was_signalled(&third).then_some(())
        })
        .await;
    assert!(signalled.is_err(), "worker-2 was signalled after the failure:\n{}", responder.log());

    // worker-1 finishes; only then does the plan end, naming worker-0 and its reason.
    release.release();
    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed).await?;
    let status = status_yaml(&failed);
    let description = command(&failed, 0).description.clone().unwrap_or_default();
    assert!(description.contains("worker-0"), "the description names worker-0:\n{status}");
    assert!(description.contains(REASON), "the description carries the reason:\n{status}");
    assert_eq!(target(&failed, 0, "worker-1").state, TargetState::SignalCompleted, "{status}");
    assert_eq!(target(&failed, 0, "worker-2").state, TargetState::SignalPending, "{status}");

    let log = responder.log();
    assert!(
        log.objects_with(SignalPhase::Completed).contains(&ObjectRef::node("worker-1")),
        "worker-1 finished:\n{log}"
    );
    assert!(!log.was_signalled(&third), "worker-2 was never signalled:\n{log}");
    assert_eq!(node_signal(client, "worker-2").await?, None, "no signal on worker-2");
    assert_eq!(log.max_in_flight_of(Some(ObjectKind::Node)), 2, "{log}");
    Ok(())
}

/// `limits.maxFailures: 1`, one at a time: worker-0 fails, worker-1 and worker-2 complete,
/// and the plan ends `Completed` with a description naming worker-0 and the limit.
async fn with_max_failures_the_others_go_on_and_the_plan_completes_naming_the_failed_worker(
    client: &kube::Client,
) -> anyhow::Result<()> {
    let config =
        Config::new().node("worker-0", Behaviour::fail(SignalPhase::FailedDownload, REASON));
    let responder = Responder::start(client.clone(), config).await?;

    let mut workers = static_nodes(&WORKERS, 1);
    workers.limits.max_failures = Some(1);
    let update = k0s_update(None, Some(workers));
    create_plan(client, &plan("autopilot", "max-failures", vec![k0s_command(update)])).await?;

    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed).await?;
    let status = status_yaml(&done);
    let description = command(&done, 0).description.clone().unwrap_or_default();
    assert!(
        description.contains("completed with 1 failed worker(s), within limits.maxFailures 1"),
        "{status}"
    );
    assert!(description.contains("worker-0"), "the description names worker-0:\n{status}");
    assert!(description.contains(REASON), "the description carries the reason:\n{status}");
    assert_eq!(target(&done, 0, "worker-0").state, TargetState::SignalApplyFailed, "{status}");
    for name in ["worker-1", "worker-2"] {
        assert_eq!(target(&done, 0, name).state, TargetState::SignalCompleted, "{status}");
    }

    let log = responder.log();
    assert_eq!(
        log.signalled_objects(),
        WORKERS.iter().map(|w| ObjectRef::node(*w)).collect(),
        "every worker was signalled, once:\n{log}"
    );
    assert!(log.duplicate_signals().is_empty(), "{:?}\n{log}", log.duplicate_signals());
    Ok(())
}
