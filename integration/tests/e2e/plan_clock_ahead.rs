//! A new leader whose clock runs hours ahead (issue 46, item 7): with workers in flight the
//! leader is SIGKILLed and a controller whose wall clock is three hours ahead (libfaketime,
//! `FAKETIME=+3h`) takes over. Every deadline counts at most from its takeover on its own
//! clock (`Observed::term_started`, and the drain's `cordon::DrainClock`), never by comparing
//! its clock with the times the earlier leader wrote: no node in flight is failed by a
//! deadline, and the plan completes.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, Release, Responder};
use integration::wait_for;

use crate::support::*;

const WORKERS: [&str; 4] = ["worker-0", "worker-1", "worker-2", "worker-3"];

const CONCURRENT: usize = 2;

/// Lease duration (6 s) plus jitter and the take-over round trips.
const FAILOVER: Duration = Duration::from_secs(30);

/// How far ahead the new leader's clock runs.
const AHEAD: &str = "+3h";

#[tokio::test]
async fn a_new_leader_with_a_clock_hours_ahead_fails_no_node_in_flight() {
    let Fleet { cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("plan-clock-ahead")
            .controllers(2)
            .workers(&WORKERS)
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();
    // controller-1 comes back later with its clock ahead; controller-0 leads until then.
    controllers[1].stop(Duration::from_secs(20)).await.unwrap();
    wait_for(FAILOVER, "controller-0 leading", || async {
        Ok((leader(&client).await? == Some(0)).then_some(()))
    })
    .await
    .unwrap();

    let releases: BTreeMap<&str, Release> = WORKERS.iter().map(|w| (*w, Release::new())).collect();
    let config = releases.iter().fold(Config::new(), |config, (name, release)| {
        config.node(*name, Behaviour::CompleteAfter(release.clone()))
    });
    let responder = Responder::start(client.clone(), config).await.unwrap();
    let update = k0s_update(None, Some(static_nodes(&WORKERS, CONCURRENT as u32)));
    create_plan(&client, &plan("autopilot", "clock-ahead", vec![k0s_command(update)]))
        .await
        .unwrap();
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

    // The leader dies; controller-1 starts with its clock three hours ahead and takes over.
    controllers[0].kill().unwrap();
    let ahead = take_over_ahead(&cluster, &client).await;

    // One worker in flight completes: the new leader records it and signals a third one,
    // dated hours ahead on its clock, while the other worker it took over in flight stays
    // in flight (compared with the earlier leader's times, it would be hours past its
    // progress deadline).
    let mut in_flight = in_flight.into_iter();
    let (first, held) =
        (in_flight.next().expect("in flight"), in_flight.next().expect("in flight"));
    releases[first.name.as_str()].release();
    let ahead_of_now = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(2);
    let third =
        wait_plan(&client, "autopilot", PLAN_TIMEOUT, "a worker signalled by controller-1", |p| {
            targets(command(p, 0)).iter().any(|t| {
                t.state == TargetState::SignalSent
                    && t.name != held.name
                    && t.last_updated_timestamp.0 > ahead_of_now
            })
        })
        .await;
    let third = match third {
        Ok(plan) => plan,
        Err(err) => panic!("{err}: controller-1's clock ahead?\n{}", ahead.log_tail(40)),
    };
    let status = status_yaml(&third);
    eprintln!("controller-1 (FAKETIME={AHEAD}) leads; the status it wrote:\n{status}");
    let still = targets(command(&third, 0)).into_iter().find(|t| t.name == held.name);
    assert_eq!(still.map(|t| t.state), Some(TargetState::SignalSent), "{status}");

    // The rest complete: nothing failed by a deadline.
    for release in releases.values() {
        release.release();
    }
    let finished = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let status = status_yaml(&finished);
    for target in targets(command(&finished, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}: {status}", target.name);
    }
    let log = responder.log();
    assert!(log.objects_with(SignalPhase::Failed).is_empty(), "no node failed:\n{log}");
}

/// Start controller-1 again with its clock [`AHEAD`] (libfaketime) and wait until it leads.
async fn take_over_ahead(
    cluster: &integration::cluster::Cluster,
    client: &kube::Client,
) -> integration::k0s::K0sProcess {
    let ahead = cluster
        .k0s_controller(1)
        .args(FAST_ELECTION)
        .arg(NO_AGENT)
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", AHEAD)
        .spawn()
        .await
        .expect("controller-1 starts");
    let leading = wait_for(FAILOVER, "controller-1 leading", || async {
        Ok((leader(client).await? == Some(1)).then_some(()))
    })
    .await;
    if let Err(err) = leading {
        panic!("{err}:\n{}", ahead.log_tail(40));
    }
    ahead
}
