//! Repeated automatic updates (issue 5, DESIGN §6, unlike k0s REF §11.6): after a completed
//! run the server advertises a newer version and the updater starts a second run of the
//! `autopilot` Plan, and the controller ends at the second version; while a run is in
//! progress a newer offer never replaces it (Events say `PlanRunning`).

use autopilot_api::v1beta2::{Plan, PlanStateType, UpdateConfig};
use integration::wait_for;
use kube::api::{Api, PostParams};

use crate::support::*;
use crate::updater_support::*;

const SECOND: &str = "v1.35.10+k0s.0";

/// The version the plan's k0supdate asks for.
fn version(plan: &Plan) -> Option<&str> {
    plan.spec.commands.first()?.k0supdate.as_ref().map(|u| u.version.as_str())
}

/// Waits until the plan `autopilot` asks for `wanted` and is in `phase`.
async fn wait_run(client: &kube::Client, wanted: &str, phase: PlanStateType) -> Plan {
    let plans: Api<Plan> = Api::all(client.clone());
    wait_for(PLAN_TIMEOUT, &format!("a plan run for {wanted} in {phase}"), || async {
        let plan = plans.get_opt("autopilot").await?;
        Ok(plan.filter(|p| version(p) == Some(wanted) && state(p) == phase))
    })
    .await
    .expect("the plan run")
}

#[tokio::test]
async fn a_running_plan_is_never_replaced_and_a_newer_offer_after_it_completes_starts_a_second_run()
{
    let server = UpdateServer::start().await;
    server.add_version(OFFERED).await.unwrap();
    server.add_version(SECOND).await.unwrap();
    server.hold_downloads();
    server.offer(OFFERED);
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        updater_fleet("updater-rerun").start().await.unwrap();
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    configs
        .create(&PostParams::default(), &update_config("rerun", &server, "00:00", "24h"))
        .await
        .unwrap();

    // Run 1 is in progress (its download is held); a newer offer meanwhile leaves it alone.
    let plans: Api<Plan> = Api::all(client.clone());
    let first = wait_for(PLAN_TIMEOUT, "run 1 to start", || async {
        let plan = plans.get_opt("autopilot").await?;
        Ok(plan.filter(|p| version(p) == Some(OFFERED) && !state(p).is_terminal()))
    })
    .await
    .unwrap();
    server.offer(SECOND);
    let running_before = events(&client, "rerun", "PlanRunning").await.unwrap().len();
    wait_events(&client, "rerun", "PlanRunning", running_before + 2).await.unwrap();
    let held = plans.get("autopilot").await.unwrap();
    assert_eq!(version(&held), Some(OFFERED), "{}", status_yaml(&held));
    assert_eq!(held.spec.id, first.spec.id, "{}", status_yaml(&held));
    assert!(!state(&held).is_terminal(), "{}", status_yaml(&held));

    // Run 1 completes; the next period starts run 2, with a new id, for the newer version.
    server.release_downloads();
    let second = wait_run(&client, SECOND, PlanStateType::Completed).await;
    assert_ne!(first.spec.id, second.spec.id);
    assert!(wait_events(&client, "rerun", "PlanCreated", 2).await.unwrap().len() >= 2);
    wait_for(STARTUP, "controller-0 to report the second version", || async {
        let version = control_node_version(&client, "controller-0").await?;
        Ok((version.as_deref() == Some(SECOND)).then_some(()))
    })
    .await
    .unwrap();
}
