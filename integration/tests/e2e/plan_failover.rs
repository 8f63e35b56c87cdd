//! Leader failover mid-plan (DESIGN §4 crash safety, §8): with workers in flight the leader
//! is SIGKILLed and a completion lands while nobody leads; the new leader reads the run back
//! from the cluster and finishes it without signalling any node twice and without ever
//! exceeding `limits.concurrent`.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, ObjectKind, ObjectRef, Release, Responder};
use integration::wait_for;

use crate::support::*;

const WORKERS: [&str; 6] = ["worker-0", "worker-1", "worker-2", "worker-3", "worker-4", "worker-5"];

const CONCURRENT: usize = 2;

/// Lease duration (6 s) plus jitter and the take-over round trips.
const FAILOVER: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_new_leader_finishes_the_plan_without_resignalling_or_exceeding_concurrency() {
    let Fleet { cluster: _cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("plan-failover")
            .controllers(3)
            .workers(&WORKERS)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();

    let releases: BTreeMap<&str, Release> = WORKERS.iter().map(|w| (*w, Release::new())).collect();
    let config = releases.iter().fold(Config::new(), |config, (name, release)| {
        config.node(*name, Behaviour::CompleteAfter(release.clone()))
    });
    let responder = Responder::start(client.clone(), config).await.unwrap();

    let update = k0s_update(None, Some(static_nodes(&WORKERS, CONCURRENT as u32)));
    create_plan(&client, &plan("autopilot", "failover", vec![k0s_command(update)])).await.unwrap();

    // Two workers in flight; the plan has recorded both as sent.
    let in_flight = responder
        .wait_until(PLAN_TIMEOUT, "two workers in flight", |log| {
            let in_flight = log.in_flight();
            (in_flight.len() >= CONCURRENT).then_some(in_flight)
        })
        .await
        .unwrap();
    wait_plan(&client, "autopilot", PLAN_TIMEOUT, "two targets SignalSent", |p| {
        count_targets(p, TargetState::SignalSent) == CONCURRENT
    })
    .await
    .unwrap();

    // SIGKILL the leader, and complete one worker while nobody leads.
    let old_identity = leader_identity(&client).await.unwrap().expect("a leader");
    let old_leader = leader(&client).await.unwrap().expect("a leader index");
    controllers[old_leader].kill().unwrap();
    let first = in_flight.first().cloned().expect("in flight");
    releases[first.name.as_str()].release();
    responder
        .wait_until(PLAN_TIMEOUT, &format!("{first} to complete"), |log| {
            log.objects_with(SignalPhase::Completed).contains(&first).then_some(())
        })
        .await
        .unwrap();
    let new_identity = wait_for(FAILOVER, "a new leader", || async {
        Ok(leader_identity(&client).await?.filter(|h| *h != old_identity))
    })
    .await
    .unwrap();
    eprintln!("leader {old_identity} killed; {new_identity} took over");

    // The new leader carries on: release the rest one at a time as they get signalled.
    release_one_at_a_time(&responder, &releases).await;

    let finished = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let status = status_yaml(&finished);
    for target in targets(command(&finished, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}: {status}", target.name);
    }
    let log = responder.log();
    eprintln!("responder log:\n{log}");
    assert!(log.duplicate_signals().is_empty(), "{:?}\n{log}", log.duplicate_signals());
    assert_eq!(log.max_in_flight_of(Some(ObjectKind::Node)), CONCURRENT, "{log}");
    let signalled: Vec<ObjectRef> = log.signal_order(None);
    assert_eq!(signalled.len(), WORKERS.len(), "each worker signalled exactly once:\n{log}");
    assert_eq!(
        log.objects_with(SignalPhase::Completed),
        WORKERS.iter().map(|w| ObjectRef::node(*w)).collect(),
        "{log}"
    );
}

/// Releases the workers one at a time as they get signalled (one completed already), each
/// once it is in flight, until every worker completed.
async fn release_one_at_a_time(responder: &Responder, releases: &BTreeMap<&str, Release>) {
    let mut done = 1;
    while done < WORKERS.len() {
        let expected = CONCURRENT.min(WORKERS.len() - done);
        let in_flight = responder
            .wait_until(PLAN_TIMEOUT, &format!("{expected} workers in flight"), |log| {
                let in_flight = log.in_flight();
                (in_flight.len() >= expected).then_some(in_flight)
            })
            .await
            .expect("workers in flight");
        let next = in_flight
            .iter()
            .find(|o| !releases[o.name.as_str()].is_released())
            .cloned()
            .unwrap_or_else(|| panic!("an unreleased worker in flight:\n{}", responder.log()));
        releases[next.name.as_str()].release();
        responder
            .wait_until(PLAN_TIMEOUT, &format!("{next} to complete"), |log| {
                log.objects_with(SignalPhase::Completed).contains(&next).then_some(())
            })
            .await
            .expect("the released worker completes");
        done += 1;
    }
}
