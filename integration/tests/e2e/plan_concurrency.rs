//! Worker concurrency (REF §4.4; DESIGN §4): with `limits.concurrent: 3`, exactly three
//! workers are in flight at a time; each completion lets exactly one more in, in name order.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, ObjectKind, ObjectRef, Release, Responder};

use crate::support::*;

const WORKERS: [&str; 8] = [
    "worker-0", "worker-1", "worker-2", "worker-3", "worker-4", "worker-5", "worker-6", "worker-7",
];

const CONCURRENT: usize = 3;

/// How long the test watches for a fourth worker while three are held.
const QUIET_WINDOW: Duration = Duration::from_secs(3);

#[tokio::test]
async fn at_most_concurrent_workers_are_in_flight_and_each_completion_admits_the_next() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-concurrency")
            .controllers(1)
            .workers(&WORKERS)
            .start()
            .await
            .unwrap();

    // Every worker finishes only when the test releases it.
    let releases: BTreeMap<&str, Release> = WORKERS.iter().map(|w| (*w, Release::new())).collect();
    let config = releases.iter().fold(Config::new(), |config, (name, release)| {
        config.node(*name, Behaviour::CompleteAfter(release.clone()))
    });
    let responder = Responder::start(client.clone(), config).await.unwrap();

    let update = k0s_update(None, Some(static_nodes(&WORKERS, CONCURRENT as u32)));
    create_plan(&client, &plan("autopilot", "concurrency", vec![k0s_command(update)]))
        .await
        .unwrap();

    for done in 0..WORKERS.len() {
        let expected = CONCURRENT.min(WORKERS.len() - done);
        let in_flight = responder
            .wait_until(PLAN_TIMEOUT, &format!("{expected} workers in flight"), |log| {
                let in_flight = log.in_flight();
                (in_flight.len() >= expected).then_some(in_flight)
            })
            .await
            .unwrap();
        assert_eq!(in_flight.len(), expected, "{}", responder.log());

        if done == 0 {
            // While three are held, nobody else is signalled, and the plan says so.
            let fourth = responder
                .wait_until(QUIET_WINDOW, "a fourth worker in flight", |log| {
                    (log.in_flight().len() > CONCURRENT).then_some(())
                })
                .await;
            assert!(fourth.is_err(), "a fourth worker was signalled:\n{}", responder.log());
            wait_plan(
                &client,
                "autopilot",
                PLAN_TIMEOUT,
                "3 SignalSent and 5 SignalPending",
                |p| {
                    count_targets(p, TargetState::SignalSent) == CONCURRENT
                        && count_targets(p, TargetState::SignalPending)
                            == WORKERS.len() - CONCURRENT
                },
            )
            .await
            .unwrap();
        }

        // Let the first (by name) of those in flight finish.
        let next = in_flight.first().cloned().expect("at least one in flight");
        releases[next.name.as_str()].release();
        responder
            .wait_until(PLAN_TIMEOUT, &format!("{next} to complete"), |log| {
                log.objects_with(SignalPhase::Completed).contains(&next).then_some(())
            })
            .await
            .unwrap();
    }

    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let status = status_yaml(&done);
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}: {status}", target.name);
    }
    let log = responder.log();
    assert_eq!(log.max_in_flight_of(Some(ObjectKind::Node)), CONCURRENT, "{log}");
    let order: Vec<ObjectRef> = WORKERS.iter().map(|w| ObjectRef::node(*w)).collect();
    assert_eq!(log.signal_order(None).len(), WORKERS.len(), "signalled once each:\n{log}");
    assert_eq!(admission_order(&log, None), order, "admitted in name order:\n{log}");
    assert!(log.duplicate_signals().is_empty(), "{:?}\n{log}", log.duplicate_signals());
}
