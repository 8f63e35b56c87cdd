//! The rollout shape (DESIGN §11; issue 11 item 6) against the real control plane:
//! `limits.concurrent: "50%"` of 4 workers puts exactly 2 in flight at once; a canary with a
//! soak goes first and nobody else is signalled before the soak has passed after the
//! canary completed; a failing canary ends the plan with no other worker signalled.
//!
//! One cluster, the three cases in sequence. The responder plays the nodes.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{Concurrency, PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, Event, ObjectKind, ObjectRef, Release, Responder};

use crate::support::*;

const WORKERS: [&str; 4] = ["worker-0", "worker-1", "worker-2", "worker-3"];

/// How long the test watches for a signal that must not come.
const QUIET_WINDOW: Duration = Duration::from_secs(4);

/// The canary's soak, short enough for a test and long enough to see nobody is signalled.
const SOAK: Duration = Duration::from_secs(5);

/// [`SOAK`] as the plan spells it.
const SOAK_SPEC: &str = "5s";

#[tokio::test]
async fn half_the_workers_go_at_once_and_a_canary_goes_first_soaks_and_stops_the_plan_if_it_fails()
{
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-rollout-shape")
            .controllers(1)
            .workers(&WORKERS)
            .start()
            .await
            .unwrap();

    fifty_percent_of_four_workers_puts_exactly_two_in_flight(&client).await.unwrap();
    delete_plan(&client).await;
    the_canary_goes_first_and_nobody_else_is_signalled_before_its_soak_passed(&client)
        .await
        .unwrap();
    delete_plan(&client).await;
    a_failing_canary_ends_the_plan_with_no_other_worker_signalled(&client).await.unwrap();
}

fn others() -> Vec<ObjectRef> {
    WORKERS[1..].iter().map(|w| ObjectRef::node(*w)).collect()
}

/// `concurrent: "50%"` of 4 workers, every node held until the test has looked: exactly 2
/// are signalled, a third is not, and over the whole run no more than 2 were ever in flight.
async fn fifty_percent_of_four_workers_puts_exactly_two_in_flight(
    client: &kube::Client,
) -> anyhow::Result<()> {
    let release = Release::new();
    let config = Config::new().default_behaviour(Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await?;

    let mut workers = static_nodes(&WORKERS, 1);
    workers.limits.concurrent = Concurrency::Percent(50);
    let update = k0s_update(None, Some(workers));
    create_plan(client, &plan("autopilot", "half", vec![k0s_command(update)])).await?;

    let in_flight = responder
        .wait_until(PLAN_TIMEOUT, "two workers in flight", |log| {
            let in_flight = log.in_flight();
            (in_flight.len() >= 2).then_some(in_flight)
        })
        .await?;
    assert_eq!(in_flight.len(), 2, "{}", responder.log());
    let third = responder
        .wait_until(QUIET_WINDOW, "a third worker in flight", |log| {
            (log.in_flight().len() > 2).then_some(())
        })
        .await;
    assert!(third.is_err(), "a third worker was signalled:\n{}", responder.log());
    wait_plan(client, "autopilot", PLAN_TIMEOUT, "2 SignalSent and 2 SignalPending", |p| {
        count_targets(p, TargetState::SignalSent) == 2
            && count_targets(p, TargetState::SignalPending) == 2
    })
    .await?;

    release.release();
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed).await?;
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    let log = responder.log();
    assert_eq!(log.max_in_flight_of(Some(ObjectKind::Node)), 2, "{log}");
    assert_eq!(log.signal_order(None).len(), WORKERS.len(), "signalled once each:\n{log}");
    Ok(())
}

/// Canary 1 with a soak of 5 s (and room for all three others at once): only worker-0 is
/// signalled while it is in flight; after it completed, every other worker's signal was
/// created at least the soak after the canary's completion; then the plan completes.
async fn the_canary_goes_first_and_nobody_else_is_signalled_before_its_soak_passed(
    client: &kube::Client,
) -> anyhow::Result<()> {
    let release = Release::new();
    let config = Config::new().node("worker-0", Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await?;

    let mut workers = static_nodes(&WORKERS, 3);
    workers.limits.canary = Some(1);
    workers.limits.soak = Some(SOAK_SPEC.to_owned());
    let update = k0s_update(None, Some(workers));
    create_plan(client, &plan("autopilot", "canary", vec![k0s_command(update)])).await?;

    // The canary alone, and the plan says so.
    let canary = ObjectRef::node("worker-0");
    responder
        .wait_until(PLAN_TIMEOUT, "the canary to be signalled", |log| {
            log.was_signalled(&canary).then_some(())
        })
        .await?;
    wait_plan(client, "autopilot", PLAN_TIMEOUT, "the plan to name the canary", |p| {
        command(p, 0).reason.as_deref().is_some_and(|r| r.starts_with("canary: worker(s) worker-0"))
    })
    .await?;
    let another = responder
        .wait_until(QUIET_WINDOW, "another worker to be signalled", |log| {
            others().iter().any(|o| log.was_signalled(o)).then_some(())
        })
        .await;
    assert!(another.is_err(), "a worker was signalled beside the canary:\n{}", responder.log());

    // The canary completes: the plan soaks, then the others follow and the plan completes.
    release.release();
    wait_plan(client, "autopilot", PLAN_TIMEOUT, "the plan to soak", |p| {
        command(p, 0)
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("soaking: canary worker(s) worker-0"))
    })
    .await?;
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed).await?;
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }

    // Timestamps: the Completed status on the canary's signal, and each other signal's
    // creation.
    let canary_signal = node_signal(client, "worker-0").await?.expect("the canary's signal");
    let completed = canary_signal.status.as_ref().expect("the canary's status");
    assert_eq!(completed.status, SignalPhase::Completed, "{canary_signal:?}");
    let completed_at: jiff::Timestamp = completed.timestamp.parse()?;
    let soak_end = completed_at + jiff::SignedDuration::try_from(SOAK)?;
    for name in &WORKERS[1..] {
        let signal = node_signal(client, name).await?.expect("a signal");
        assert_eq!(signal.plan_id, "canary", "{name} was signalled by this plan: {signal:?}");
        let created: jiff::Timestamp = signal.created.parse()?;
        eprintln!("{name} signalled at {created}; the canary completed at {completed_at}");
        assert!(
            created >= soak_end,
            "{name} signalled at {created}, before the canary's completion at {completed_at} + \
             the soak of {SOAK_SPEC}:\n{}",
            responder.log()
        );
    }
    // And in the order the responder saw things: the canary completed (written by the
    // responder, or by the leader that finishes a node it uncordoned) before anyone else was
    // signalled.
    let log = responder.log();
    let canary_done = log
        .first(|o| {
            o.object == canary
                && matches!(
                    o.event,
                    Event::Wrote { phase: SignalPhase::Completed, .. }
                        | Event::Saw { phase: SignalPhase::Completed, .. }
                )
        })
        .unwrap_or_else(|| panic!("the canary's completion in the log:\n{log}"))
        .revision;
    let first_other = log
        .first(|o| others().contains(&o.object))
        .unwrap_or_else(|| panic!("the others' signals in the log:\n{log}"));
    assert!(first_other.revision > canary_done, "{log}");
    assert!(log.duplicate_signals().is_empty(), "{:?}\n{log}", log.duplicate_signals());
    Ok(())
}

/// Canary 1 that fails: the plan ends `ApplyFailed` and none of the other workers ever got
/// a signal of this plan, although `limits.maxFailures` would allow the failure (a canary's
/// failure ends the plan whatever the budget).
async fn a_failing_canary_ends_the_plan_with_no_other_worker_signalled(
    client: &kube::Client,
) -> anyhow::Result<()> {
    const REASON: &str = "sha256 mismatch: want 00ff, got abcd";
    let config =
        Config::new().node("worker-0", Behaviour::fail(SignalPhase::FailedDownload, REASON));
    let responder = Responder::start(client.clone(), config).await?;

    let mut workers = static_nodes(&WORKERS, 3);
    workers.limits.canary = Some(1);
    workers.limits.soak = Some(SOAK_SPEC.to_owned());
    workers.limits.max_failures = Some(3);
    let update = k0s_update(None, Some(workers));
    create_plan(client, &plan("autopilot", "canary-fails", vec![k0s_command(update)])).await?;

    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed).await?;
    let status = status_yaml(&failed);
    let description = command(&failed, 0).description.clone().unwrap_or_default();
    assert!(description.contains("worker-0"), "the description names the canary:\n{status}");
    assert_eq!(target(&failed, 0, "worker-0").state, TargetState::SignalApplyFailed, "{status}");
    for name in &WORKERS[1..] {
        assert_eq!(target(&failed, 0, name).state, TargetState::SignalPending, "{status}");
        let signal = node_signal(client, name).await?;
        assert!(
            signal.as_ref().is_none_or(|s| s.plan_id != "canary-fails"),
            "{name} carries a signal of this plan: {signal:?}"
        );
    }
    let log = responder.log();
    assert_eq!(
        log.signalled_objects(),
        [ObjectRef::node("worker-0")].into_iter().collect(),
        "only the canary was signalled:\n{log}"
    );
    Ok(())
}
