//! Quorum safety (REF §6.2, §14 `ap-quorumsafety`): while one plan controller's API server is
//! down, no controller is signalled and the plan holds in `Schedulable` with a reason; once
//! it is back the plan completes. Past `--readiness-grace` the plan still holds (k0s since
//! 1.35 has no `InconsistentTargets`) but says it is stalled, in its `Stalled` condition, and
//! completes when the controller is back.

use std::time::{Duration, Instant};

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::responder::{Config, ObjectKind, Responder};

use crate::support::*;

const CONTROLLERS: [&str; 3] = ["controller-0", "controller-1", "controller-2"];

/// How long the plan must hold without signalling anyone (k0s' scenario holds 10 s).
const HOLD_WINDOW: Duration = Duration::from_secs(10);

/// The short grace of the second scenario.
const GRACE_SECS: u64 = 20;

/// States a held plan may show.
fn is_holding(state: PlanStateType) -> bool {
    matches!(
        state,
        PlanStateType::NewPlan | PlanStateType::SchedulableWait | PlanStateType::Schedulable
    )
}

#[tokio::test]
async fn a_plan_holds_while_a_controller_is_down_and_completes_when_it_returns() {
    let Fleet { cluster, client, mut controllers, workers: _workers } =
        FleetBuilder::new("plan-quorum-safety")
            .controllers(3)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    // "Stopping a controller" stops its k0s and its API server (DESIGN §8).
    controllers[1].stop(Duration::from_secs(20)).await.unwrap();
    cluster.stop_apiserver(1).await.unwrap();

    let update = k0s_update(Some(static_nodes(&CONTROLLERS, 1)), None);
    create_plan(&client, &plan("autopilot", "quorum-safety", vec![k0s_command(update)]))
        .await
        .unwrap();

    // The plan reaches Schedulable, held with a reason naming the controller that is down.
    let held = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "plan held in Schedulable", |p| {
        state(p) == PlanStateType::Schedulable && command(p, 0).reason.is_some()
    })
    .await
    .unwrap();
    let reason = command(&held, 0).reason.clone().unwrap_or_default();
    assert!(reason.contains("controller-1"), "hold reason names controller-1: {reason:?}");

    // ... and holds it: for the whole window no other state, and no controller signalled.
    watch_plan_for(&client, "autopilot", HOLD_WINDOW, |p| {
        if !is_holding(state(p)) {
            return Err(format!("plan left the held states: {}", state(p)));
        }
        let commands = p.status.as_ref().map(|s| s.commands.as_slice()).unwrap_or_default();
        let sent = commands
            .iter()
            .flat_map(targets)
            .filter(|t| t.state != TargetState::SignalPending)
            .map(|t| format!("{} {}", t.name, t.state))
            .collect::<Vec<_>>();
        if sent.is_empty() { Ok(()) } else { Err(format!("targets moved while held: {sent:?}")) }
    })
    .await
    .unwrap();
    let log = responder.log();
    assert!(log.is_empty(), "no ControlNode is signalled while controller-1 is down:\n{log}");
    assert!(objects_with_signals(&client).await.unwrap().is_empty());

    // Controller 1 comes back: the plan completes, one controller at a time.
    cluster.start_apiserver(1).await.unwrap();
    controllers[1].restart().await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let status = status_yaml(&done);
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}: {status}", target.name);
    }
    let log = responder.log();
    assert_eq!(log.max_in_flight_of(Some(ObjectKind::ControlNode)), 1, "{log}");
    assert!(log.duplicate_signals().is_empty(), "{:?}\n{log}", log.duplicate_signals());
    for name in CONTROLLERS {
        let signal = control_node_signal(&client, name).await.unwrap().expect("signal kept");
        assert_eq!(signal.phase(), Some(SignalPhase::Completed), "{name}: {signal:?}");
    }
}

/// The condition of `type_` of `plan`, as `(status, reason)`.
fn condition_of(plan: &Plan, type_: &str) -> Option<(String, String)> {
    let conditions = plan.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let found = conditions.iter().find(|c| c.type_ == type_)?;
    Some((found.status.clone(), found.reason.clone()))
}

#[tokio::test]
async fn a_controller_down_past_the_readiness_grace_stalls_the_plan_until_it_is_back() {
    let grace = format!("{GRACE_SECS}s");
    let flags: Vec<&str> =
        FAST_ELECTION.iter().copied().chain(["--readiness-grace", grace.as_str()]).collect();
    let Fleet { cluster, client, mut controllers, workers: _workers } =
        FleetBuilder::new("plan-quorum-grace")
            .controllers(3)
            .controller_args(&flags)
            .start()
            .await
            .unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    controllers[1].stop(Duration::from_secs(20)).await.unwrap();
    cluster.stop_apiserver(1).await.unwrap();

    let created = Instant::now();
    let update = k0s_update(Some(static_nodes(&CONTROLLERS, 1)), None);
    create_plan(&client, &plan("autopilot", "quorum-grace", vec![k0s_command(update)]))
        .await
        .unwrap();
    let stalled =
        wait_plan(&client, "autopilot", PLAN_TIMEOUT, "the plan to say it stalled", |p| {
            condition_of(p, "Stalled").is_some_and(|(status, _)| status == "True")
        })
        .await
        .unwrap();
    let took = created.elapsed();
    let status = status_yaml(&stalled);
    // Still held: no terminal state, the run goes on.
    assert_eq!(state(&stalled), PlanStateType::Schedulable, "{status}");
    assert_eq!(
        condition_of(&stalled, "Stalled"),
        Some(("True".to_owned(), "ControllerNotReady".to_owned())),
        "{status}"
    );
    assert_eq!(condition_of(&stalled, "Reconciling").map(|c| c.0).as_deref(), Some("True"));
    assert_eq!(condition_of(&stalled, "Ready").map(|c| c.0).as_deref(), Some("False"));
    // Not before the grace (status times have whole seconds, so allow one second of rounding).
    assert!(
        took >= Duration::from_secs(GRACE_SECS - 1),
        "stalled after {took:?}, before the {GRACE_SECS}s grace:\n{status}"
    );
    let log = responder.log();
    assert!(log.is_empty(), "nothing is signalled:\n{log}");
    assert!(objects_with_signals(&client).await.unwrap().is_empty());
    let note = wait_plan_event(&client, "PlanStalled").await.unwrap();
    assert!(note.contains("controller-1"), "{note}");

    // Controller 1 comes back: the run goes on and completes; the plan is Ready.
    cluster.start_apiserver(1).await.unwrap();
    controllers[1].restart().await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let status = status_yaml(&done);
    assert_eq!(
        condition_of(&done, "Ready"),
        Some(("True".to_owned(), "Completed".to_owned())),
        "{status}"
    );
    assert_eq!(condition_of(&done, "Stalled").map(|c| c.0).as_deref(), Some("False"), "{status}");
}
