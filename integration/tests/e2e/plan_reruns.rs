//! Runs of one Plan (DESIGN §4, §9.4; seed 001 "Plans are Immutable"): a spec edited while
//! the plan runs is not applied (a condition says so) and the run finishes with what it
//! captured; once the run has ended, a changed spec starts a new run that signals the nodes
//! again, even with the same `spec.id` (a plan id is never trusted to skip work).

use autopilot_api::keys;
use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::responder::{Behaviour, Config, ObjectRef, Release, Responder};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::*;

fn has_condition(plan: &Plan, type_: &str) -> bool {
    plan.status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

#[tokio::test]
async fn a_spec_edit_waits_for_the_run_to_end_and_then_starts_a_new_run() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-reruns")
            .controllers(1)
            .workers(&["worker-0"])
            .start()
            .await
            .unwrap();
    let release = Release::new();
    let config = Config::new().node("worker-0", Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await.unwrap();
    let plans: Api<Plan> = Api::all(client.clone());

    let update = k0s_update(None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "same-id", vec![k0s_command(update)])).await.unwrap();
    let first = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "worker-0 signalled", |p| {
        count_targets(p, TargetState::SignalSent) == 1
    })
    .await
    .unwrap();
    let first_run = first.status.as_ref().and_then(|s| s.run_id.clone()).expect("a run id");

    // Edit the spec mid-run (a new version): not applied, and the plan says so.
    let edit = json!({ "spec": { "commands": [{ "k0supdate": {
        "version": "v1.35.9+k0s.0",
        "forceupdate": true,
        "platforms": current_platforms(),
        "targets": { "workers": { "discovery": { "static": { "nodes": ["worker-0"] } } } },
    }}]}});
    plans.patch(keys::PLAN_NAME, &PatchParams::default(), &Patch::Merge(&edit)).await.unwrap();
    let held =
        wait_plan(&client, "autopilot", PLAN_TIMEOUT, "the SpecChangeIgnored condition", |p| {
            has_condition(p, keys::conditions::SPEC_CHANGE_IGNORED)
        })
        .await
        .unwrap();
    assert_eq!(held.status.as_ref().and_then(|s| s.run_id.clone()), Some(first_run.clone()));

    // The run finishes with what it captured, then the edit starts a new run with the same
    // spec.id: worker-0 is signalled again, now for the new version.
    release.release();
    let second = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "a second run completed", |p| {
        let status = p.status.as_ref();
        status.and_then(|s| s.run_id.as_deref()).is_some_and(|run| run != first_run)
            && state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    assert!(
        !has_condition(&second, keys::conditions::SPEC_CHANGE_IGNORED),
        "{}",
        status_yaml(&second)
    );
    let log = responder.log();
    let signals = log.signals_of(&ObjectRef::node("worker-0"));
    let versions: Vec<&str> = signals
        .iter()
        .filter_map(|s| s.command.k0supdate.as_ref().map(|u| u.version.as_str()))
        .collect();
    assert_eq!(versions, [FORCED_VERSION, "v1.35.9+k0s.0"], "one signal per run:\n{log}");
    assert!(signals.iter().all(|s| s.plan_id == "same-id"), "{log}");
    assert!(log.duplicate_signals().is_empty(), "{:?}", log.duplicate_signals());
}
