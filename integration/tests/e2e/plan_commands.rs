//! Commands in order and node failures (REF §3.5, §3.8, §14 `ap-airgap`; DESIGN §2, §4): an
//! `airgapupdate` finishes on every worker before the following `k0supdate` signals anyone;
//! a node reporting `FailedDownload` ends the plan in `ApplyFailed` with the node's reason on
//! the plan.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{
    Behaviour, CommandKind, Config, Event, ObjectKind, ObjectRef, Release, Responder,
};

use crate::support::*;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// How long the test watches for an early k0supdate signal while an airgap node is held.
const QUIET_WINDOW: Duration = Duration::from_secs(3);

#[tokio::test]
async fn airgap_update_completes_on_every_worker_before_k0s_update_signals_anyone() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-commands").controllers(1).workers(&WORKERS).start().await.unwrap();
    let release = Release::new();
    let config = Config::new().node("worker-1", Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await.unwrap();

    let airgap = airgap_command(static_nodes(&WORKERS, 2));
    let update = k0s_command(k0s_update(
        Some(static_nodes(&["controller-0"], 1)),
        Some(static_nodes(&WORKERS, 1)),
    ));
    create_plan(&client, &plan("autopilot", "commands", vec![airgap, update])).await.unwrap();

    // worker-0's bundle is done, worker-1's is held: the k0supdate must not start.
    responder
        .wait_until(PLAN_TIMEOUT, "worker-0's airgap done and worker-1's held", |log| {
            let w0 = log.phases_written(&ObjectRef::node("worker-0"));
            let held = log.was_signalled(&ObjectRef::node("worker-1"));
            (w0.contains(&SignalPhase::Completed) && held).then_some(())
        })
        .await
        .unwrap();
    let early = responder
        .wait_until(QUIET_WINDOW, "a k0supdate signal", |log| {
            log.signals().any(|(_, d)| d.command.k0supdate.is_some()).then_some(())
        })
        .await;
    assert!(early.is_err(), "k0supdate signalled before the airgap finished:\n{}", responder.log());

    release.release();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let status = status_yaml(&done);
    for i in 0..2 {
        assert_eq!(command(&done, i).state, PlanStateType::Completed, "command {i}: {status}");
        for target in targets(command(&done, i)) {
            assert_eq!(target.state, TargetState::SignalCompleted, "{}: {status}", target.name);
        }
    }

    let log = responder.log();
    let airgap_done = log
        .last(|o| {
            matches!(&o.event, Event::Wrote { key, phase: SignalPhase::Completed, .. } if key.command_id == 0)
        })
        .expect("airgap completions")
        .revision;
    let k0s_first = log
        .first(|o| matches!(&o.event, Event::Signalled { command: CommandKind::K0sUpdate, .. }))
        .expect("k0supdate signals")
        .revision;
    assert!(k0s_first > airgap_done, "k0supdate starts after the airgap completed:\n{log}");
    // Airgap went to both Nodes (command 0); the k0supdate to the controller, then the workers.
    // One pass admits both airgap targets; it may write their signals in either order.
    let mut airgap_signals: Vec<_> = log
        .signals()
        .filter(|(_, d)| d.command.airgapupdate.is_some())
        .map(|(o, d)| (o.object.clone(), d.command.id))
        .collect();
    airgap_signals.sort();
    assert_eq!(
        airgap_signals,
        [(ObjectRef::node("worker-0"), 0), (ObjectRef::node("worker-1"), 0)],
        "{log}"
    );
    let k0s_signals: Vec<_> = log
        .signals()
        .filter(|(_, d)| d.command.k0supdate.is_some())
        .map(|(o, d)| (o.object.clone(), d.command.id))
        .collect();
    assert_eq!(
        k0s_signals,
        [
            (ObjectRef::control_node("controller-0"), 1),
            (ObjectRef::node("worker-0"), 1),
            (ObjectRef::node("worker-1"), 1)
        ],
        "{log}"
    );
    assert_eq!(log.max_in_flight_of(Some(ObjectKind::ControlNode)), 1, "{log}");
    assert!(log.duplicate_signals().is_empty(), "{:?}\n{log}", log.duplicate_signals());
}

#[tokio::test]
async fn a_failed_download_ends_the_plan_in_apply_failed_with_the_nodes_reason() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-commands-fail")
            .controllers(1)
            .workers(&WORKERS)
            .start()
            .await
            .unwrap();
    let reason = "sha256 mismatch: expected 1111111111111111111111111111111111111111111111111111111111111111, got 2222222222222222222222222222222222222222222222222222222222222222";
    let config =
        Config::new().node("worker-0", Behaviour::fail(SignalPhase::FailedDownload, reason));
    let responder = Responder::start(client.clone(), config).await.unwrap();

    let update = k0s_update(None, Some(static_nodes(&WORKERS, 1)));
    create_plan(&client, &plan("autopilot", "fail", vec![k0s_command(update)])).await.unwrap();
    let ended = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    let status = status_yaml(&ended);

    let command = command(&ended, 0);
    assert_eq!(command.state, PlanStateType::ApplyFailed, "{status}");
    assert!(
        command.description.as_deref().is_some_and(|d| d.contains(reason)),
        "the command description carries the node's reason:\n{status}"
    );
    let failed = target(&ended, 0, "worker-0");
    assert_eq!(failed.state, TargetState::SignalApplyFailed, "{status}");
    assert!(failed.reason.as_deref().is_some_and(|r| r.contains(reason)), "{status}");
    assert_eq!(target(&ended, 0, "worker-1").state, TargetState::SignalPending, "{status}");
    let log = responder.log();
    assert_eq!(log.signal_order(None), [ObjectRef::node("worker-0")], "{log}");
}
