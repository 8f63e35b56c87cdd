//! Quorum (REF §14 `ap-quorum`): a plan for all three controllers completes, updating them
//! strictly one at a time, each signalled exactly once and in name order.

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{Config, ObjectKind, ObjectRef, Responder};

use crate::support::*;

const CONTROLLERS: [&str; 3] = ["controller-0", "controller-1", "controller-2"];

#[tokio::test]
async fn three_controllers_are_updated_one_at_a_time_and_the_plan_completes() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-quorum")
            .controllers(3)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    let update = k0s_update(Some(static_nodes(&CONTROLLERS, 1)), None);
    create_plan(&client, &plan("autopilot", "quorum", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let log = responder.log();
    let status = status_yaml(&done);

    // The plan status: one command, Completed, every controller SignalCompleted, no workers.
    let command = command(&done, 0);
    assert_eq!(command.state, PlanStateType::Completed, "{status}");
    assert_eq!(controller_names(command), CONTROLLERS, "{status}");
    assert!(worker_names(command).is_empty(), "{status}");
    for target in targets(command) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}: {status}", target.name);
    }

    // One controller at a time, in name order, each exactly once.
    assert_eq!(log.max_in_flight_of(Some(ObjectKind::ControlNode)), 1, "{log}");
    let order: Vec<ObjectRef> = CONTROLLERS.iter().map(|n| ObjectRef::control_node(*n)).collect();
    assert_eq!(log.signal_order(None), order, "{log}");
    assert!(log.duplicate_signals().is_empty(), "{:?}\n{log}", log.duplicate_signals());

    // Every signal belongs to this plan and run, and the node went through every phase.
    let run_id = done.status.as_ref().and_then(|s| s.run_id.clone());
    assert!(run_id.is_some(), "the plan status carries a run id: {status}");
    for (observation, data) in log.signals() {
        assert_eq!(data.plan_id, "quorum", "{}", observation.object);
        assert_eq!(data.run_id, run_id, "{}", observation.object);
        assert_eq!(data.command.id, 0, "{}", observation.object);
        assert!(data.command.k0supdate.as_ref().is_some_and(|u| u.forceupdate), "{log}");
    }
    for name in CONTROLLERS {
        let signal = control_node_signal(&client, name).await.unwrap().expect("signal kept");
        assert_eq!(signal.phase(), Some(SignalPhase::Completed), "{name}: {signal:?}");
    }
}
