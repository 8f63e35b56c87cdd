//! Steering a running plan (DESIGN §11; issue 11 item 5) with the Plan's annotations, set
//! and removed by merge patch as `kubectl annotate` does: a pause signals nobody new while
//! the node in flight finishes, survives the leader being killed, and a resume completes the
//! plan; an abort lets the node in flight finish, ends the plan `Aborted` with the other
//! workers never signalled and leaves no node cordoned by autopilot.
//!
//! One cluster (3 controllers, for the leader change), the two cases in sequence. The
//! responder plays the nodes; in the abort case it answers as an agent with central
//! cordoning does, so the leader really cordons and drains the node in flight. The workers
//! are real nodes ([`integration::real_node`]): the Pod the budget holds is a Deployment's,
//! running a real container.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::keys::{self, conditions};
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, ObjectRef, Release, Responder};
use integration::{K0sProcess, wait_for};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::support::*;

const WORKERS: [&str; 3] = ["worker-0", "worker-1", "worker-2"];

/// How long the test watches for a signal that must not come.
const QUIET_WINDOW: Duration = Duration::from_secs(5);

/// Lease duration (6 s) plus jitter and the take-over round trips.
const FAILOVER: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_pause_holds_across_a_leader_kill_until_resumed_and_an_abort_leaves_nothing_cordoned_on_real_nodes()
 {
    let Fleet { cluster: _cluster, client, controllers, workers: _agents } =
        FleetBuilder::new("plan-pause-abort")
            .controllers(3)
            .workers(&WORKERS)
            .real_workers()
            .controller_args(FAST_ELECTION)
            .start()
            .await
            .unwrap();

    a_paused_plan_signals_nobody_new_across_a_leader_kill_and_completes_once_resumed(
        &client,
        &controllers,
    )
    .await
    .unwrap();
    delete_plan(&client).await;
    an_abort_lets_the_node_in_flight_finish_and_ends_aborted_with_nothing_cordoned(&client)
        .await
        .unwrap();
}

/// Sets (`Some`) or removes (`None`) the annotation `key` on the Plan with a merge patch.
async fn annotate_plan(
    client: &kube::Client,
    key: &str,
    value: Option<&str>,
) -> anyhow::Result<()> {
    let plans: Api<Plan> = Api::all(client.clone());
    let patch = json!({ "metadata": { "annotations": { key: value } } });
    plans
        .patch(keys::PLAN_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("annotating the plan with {key}={value:?}"))?;
    Ok(())
}

/// The message of the plan's `Paused` condition, if it has one.
fn paused(plan: &Plan) -> Option<&str> {
    plan.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::PAUSED))
        .map(|c| c.message.as_str())
}

/// One worker at a time. Paused with worker-0 in flight: the `Paused` condition and a
/// `PlanPaused` Event appear, worker-0 finishes, nobody new is signalled. The leader is
/// SIGKILLed; once another controller leads, the plan stays paused (still the condition,
/// worker-1 and worker-2 still `SignalPending`, no signal) for an observation window.
/// Removing the annotation resumes it and it completes.
async fn a_paused_plan_signals_nobody_new_across_a_leader_kill_and_completes_once_resumed(
    client: &kube::Client,
    controllers: &[K0sProcess],
) -> anyhow::Result<()> {
    let release = Release::new();
    let config = Config::new().node("worker-0", Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await?;
    let rest: Vec<ObjectRef> = WORKERS[1..].iter().map(|w| ObjectRef::node(*w)).collect();
    let quiet_rest = |what: &str| {
        let log = responder.log();
        let signalled: Vec<&ObjectRef> = rest.iter().filter(|o| log.was_signalled(o)).collect();
        assert!(signalled.is_empty(), "{what}: {signalled:?} signalled while paused:\n{log}");
    };

    let update = k0s_update(None, Some(static_nodes(&WORKERS, 1)));
    create_plan(client, &plan("autopilot", "pause", vec![k0s_command(update)])).await?;
    wait_plan(client, "autopilot", PLAN_TIMEOUT, "worker-0 SignalSent", |p| {
        count_targets(p, TargetState::SignalSent) == 1
            && target(p, 0, "worker-0").state == TargetState::SignalSent
    })
    .await?;

    // Pause with worker-0 in flight.
    annotate_plan(client, keys::ANNOTATION_PAUSED, Some("true")).await?;
    let held = wait_plan(client, "autopilot", PLAN_TIMEOUT, "the Paused condition", |p| {
        paused(p).is_some_and(|m| m.contains("1 node(s) in flight finish: worker-0"))
    })
    .await?;
    assert_eq!(state(&held), PlanStateType::SchedulableWait, "{}", status_yaml(&held));
    let note = wait_plan_event(client, "PlanPaused").await?;
    assert!(note.contains(keys::ANNOTATION_PAUSED), "{note}");

    // worker-0 finishes; nobody follows it.
    release.release();
    let idle = wait_plan(client, "autopilot", PLAN_TIMEOUT, "paused with nothing in flight", |p| {
        target(p, 0, "worker-0").state == TargetState::SignalCompleted
            && paused(p).is_some_and(|m| m.contains("no node is in flight"))
    })
    .await?;
    let reason = command(&idle, 0).reason.clone().unwrap_or_default();
    assert!(reason.starts_with("paused"), "{}", status_yaml(&idle));
    let next = responder
        .wait_until(QUIET_WINDOW, "another worker to be signalled", |log| {
            rest.iter().any(|o| log.was_signalled(o)).then_some(())
        })
        .await;
    assert!(next.is_err(), "a worker was signalled while paused:\n{}", responder.log());

    // Kill the leader while paused; another controller takes over.
    kill_the_leader(client, controllers).await?;

    // The new leader keeps it paused: for the whole window the plan shows the condition and
    // the other workers pending, and nobody gets a signal.
    stays_paused(client).await?;
    quiet_rest("after the leader change");
    for name in &WORKERS[1..] {
        let signal = node_signal(client, name).await?;
        assert!(
            signal.as_ref().is_none_or(|s| s.plan_id != "pause"),
            "{name} carries a signal of the paused plan: {signal:?}"
        );
    }

    // Resume: the rest go, one at a time, and the plan completes without the condition.
    annotate_plan(client, keys::ANNOTATION_PAUSED, None).await?;
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed).await?;
    assert_eq!(paused(&done), None, "{}", status_yaml(&done));
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    wait_plan_event(client, "PlanResumed").await?;
    let log = responder.log();
    assert_eq!(
        log.signalled_objects(),
        WORKERS.iter().map(|w| ObjectRef::node(*w)).collect(),
        "every worker signalled:\n{log}"
    );
    assert!(log.duplicate_signals().is_empty(), "{:?}\n{log}", log.duplicate_signals());
    Ok(())
}

/// SIGKILLs the leader and waits until another controller leads and its plan engine started.
async fn kill_the_leader(client: &kube::Client, controllers: &[K0sProcess]) -> anyhow::Result<()> {
    let old_identity = leader_identity(client).await?.expect("a leader");
    let old_leader = leader(client).await?.expect("a leader index");
    let marks: Vec<_> = controllers.iter().map(K0sProcess::log_mark).collect();
    controllers[old_leader].kill()?;
    let new_identity = wait_for(FAILOVER, "a new leader", || async {
        Ok(leader_identity(client).await?.filter(|h| *h != old_identity))
    })
    .await?;
    let new_leader = leader(client).await?.expect("a new leader index");
    assert_ne!(new_leader, old_leader, "{new_identity}");
    controllers[new_leader]
        .wait_for_log_after(marks[new_leader], "plan engine started (leader)", FAILOVER)
        .await?;
    eprintln!("leader {old_identity} killed while paused; {new_identity} took over");
    Ok(())
}

/// For the whole quiet window the plan shows the Paused condition and worker-1 and worker-2
/// pending.
async fn stays_paused(client: &kube::Client) -> anyhow::Result<()> {
    watch_plan_for(client, "autopilot", QUIET_WINDOW, |p| {
        if paused(p).is_none() {
            return Err("the Paused condition is gone".to_owned());
        }
        if state(p) != PlanStateType::SchedulableWait {
            return Err(format!("the plan is {}", state(p)));
        }
        match ["worker-1", "worker-2"]
            .into_iter()
            .find(|w| target(p, 0, w).state != TargetState::SignalPending)
        {
            Some(w) => Err(format!("{w} left SignalPending")),
            None => Ok(()),
        }
    })
    .await?;
    Ok(())
}

/// One worker at a time, the leader cordoning and draining centrally. worker-0 is held in
/// `Cordoning` (cordoned by autopilot) by a budget that forbids evicting its pod when the
/// plan is aborted: nobody new is signalled, the plan says it is aborted and waits; once the
/// budget is gone worker-0 finishes, the plan ends `Aborted`, worker-1 and worker-2 were
/// never signalled and no Node is cordoned.
async fn an_abort_lets_the_node_in_flight_finish_and_ends_aborted_with_nothing_cordoned(
    client: &kube::Client,
) -> anyhow::Result<()> {
    let config = Config::new().default_behaviour(Behaviour::CompleteWithLeader);
    let responder = Responder::start(client.clone(), config).await?;
    crate::real_nodes::wait_default_service_account(client).await?;
    crate::real_nodes::pinned_deployment(client, "web", "worker-0", 1).await?;
    crate::real_nodes::budget(client, "web-budget", "web", 1).await?;
    crate::real_nodes::wait_app_ready(client, "web", 1).await?;

    let update = k0s_update(None, Some(static_nodes(&WORKERS, 1)));
    create_plan(client, &plan("autopilot", "abort", vec![k0s_command(update)])).await?;

    // worker-0 is cordoned by autopilot and held in its drain.
    wait_for(PLAN_TIMEOUT, "worker-0 held in Cordoning by the budget", || async {
        let signal = node_signal(client, "worker-0").await?;
        let status = signal.filter(|s| s.plan_id == "abort").and_then(|s| s.status);
        Ok(status
            .filter(|s| s.status == SignalPhase::Cordoning)
            .and_then(|s| s.reason)
            .filter(|r| r.contains("web-"))
            .map(|_| ()))
    })
    .await?;
    assert_eq!(node_cordon(client, "worker-0").await?, (true, true), "cordoned");

    // Abort with worker-0 in flight: the plan waits for it, saying why.
    annotate_plan(client, keys::ANNOTATION_ABORT, Some("true")).await?;
    let aborting = wait_plan(client, "autopilot", PLAN_TIMEOUT, "the plan to wait on abort", |p| {
        command(p, 0).reason.as_deref().is_some_and(|r| r.contains("the plan is aborted"))
    })
    .await?;
    assert_eq!(state(&aborting), PlanStateType::SchedulableWait, "{}", status_yaml(&aborting));
    assert_eq!(target(&aborting, 0, "worker-0").state, TargetState::SignalSent);

    // Let the drain through: worker-0 finishes and the plan ends Aborted (wait_plan also
    // checks that no Node is left with autopilot's cordon).
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    budgets.delete("web-budget", &DeleteParams::default()).await?;
    let aborted = wait_plan_state(client, "autopilot", PlanStateType::Aborted).await?;
    let status = status_yaml(&aborted);
    assert_eq!(target(&aborted, 0, "worker-0").state, TargetState::SignalCompleted, "{status}");
    for name in &WORKERS[1..] {
        assert_eq!(target(&aborted, 0, name).state, TargetState::SignalPending, "{status}");
        let signal = node_signal(client, name).await?;
        assert!(
            signal.as_ref().is_none_or(|s| s.plan_id != "abort"),
            "{name} carries a signal of the aborted plan: {signal:?}"
        );
    }
    for name in WORKERS {
        assert_eq!(node_cordon(client, name).await?, (false, false), "{name} uncordoned");
    }
    let log = responder.log();
    let signalled: BTreeSet<ObjectRef> = log.signalled_objects();
    assert_eq!(
        signalled,
        [ObjectRef::node("worker-0")].into_iter().collect(),
        "only worker-0 was signalled:\n{log}"
    );
    Ok(())
}
