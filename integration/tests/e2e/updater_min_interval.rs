//! The minimum interval between automatic updates (issue 47, item 6): with
//! `upgradeStrategy.minInterval.patch` set, a first newer version is planned and completes;
//! a second newer version offered inside the interval waits (the decision and the
//! UpdateConfig's status say `MinIntervalWait` and until when, and no Plan is written for
//! it), and once the interval has passed it is planned and completes too. The UpdateConfig's
//! kstatus conditions follow along (Reconciling while its Plan runs, Ready while it waits,
//! never Stalled), and the server's past `eolDate` shows in the status and the metric
//! `k0s_autopilot_updater_running_version_past_eol`.

use std::time::Duration;

use autopilot_api::v1beta2::{MinInterval, Plan, PlanStateType, UpdateConfig};
use integration::wait_for;
use kube::api::{Api, PostParams};

use crate::support::*;
use crate::updater_support::*;

const SECOND: &str = "v1.35.10+k0s.0";

/// The patch interval under test: longer than the first run takes to complete and the
/// updated controller to check again, so the second version is offered inside it.
const PATCH_INTERVAL: Duration = Duration::from_secs(120);

/// An end of life in the past, for the v1.35 line both offered versions are on.
const PAST_EOL: &str = "2026-01-15";

/// The version the plan's k0supdate asks for.
fn version(plan: &Plan) -> Option<&str> {
    plan.spec.commands.first()?.k0supdate.as_ref().map(|u| u.version.as_str())
}

/// Waits up to `timeout` until the plan `autopilot` asks for `wanted` and is `Completed`.
async fn wait_completed(client: &kube::Client, wanted: &str, timeout: Duration) -> Plan {
    let plans: Api<Plan> = Api::all(client.clone());
    wait_for(timeout, &format!("the plan run for {wanted} to complete"), || async {
        let plan = plans.get_opt("autopilot").await?;
        Ok(plan.filter(|p| version(p) == Some(wanted) && state(p) == PlanStateType::Completed))
    })
    .await
    .expect("the completed run")
}

#[tokio::test]
async fn a_second_patch_inside_the_min_interval_waits_and_is_planned_after_it() {
    let server = UpdateServer::start().await;
    server.add_version(OFFERED).await.unwrap();
    server.add_version(SECOND).await.unwrap();
    server.hold_downloads();
    server.offer_with_eol(OFFERED, PAST_EOL);
    let Fleet { cluster: _cluster, client, mut controllers, workers: _workers } =
        updater_fleet("updater-min-interval").start().await.unwrap();
    let controller = controllers.remove(0);
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    let mut config = update_config("spaced", &server, "00:00", "24h");
    if let Some(strategy) = config.spec.upgrade_strategy.as_mut() {
        strategy.min_interval = Some(MinInterval {
            patch: Some(format!("{}s", PATCH_INTERVAL.as_secs())),
            minor: Some("720h".to_owned()),
        });
    }
    configs.create(&PostParams::default(), &config).await.unwrap();

    // Run 1 is written and held (its download waits): Reconciling, not Ready, not Stalled;
    // the patch update's time and the past end of life are recorded.
    let running =
        wait_update_config_status(&configs, "spaced", "Reconciling while run 1 runs", |s| {
            verdict(s) == (Some("False"), Some("True"), Some("False"))
                && s.last_patch_update.is_some()
        })
        .await;
    let first_planned = running.last_patch_update.clone().expect("the patch update time").0;
    assert_eq!(running.last_minor_update, None, "{running:?}");
    assert_eq!(running.observed_generation, Some(1), "{running:?}");
    let eol = running.end_of_life.as_ref().expect("the server's end of life");
    assert_eq!((eol.date.as_str(), eol.past), (PAST_EOL, Some(true)), "{running:?}");
    let labels = [("update_config", "spaced")];
    wait_metrics(&controller, "the past-EOL metric", |s| {
        s.value("k0s_autopilot_updater_running_version_past_eol", &labels) == Some(1.0)
    })
    .await
    .unwrap();

    // Run 1 completes; the second version, offered meanwhile, waits for the interval.
    server.offer_with_eol(SECOND, PAST_EOL);
    server.release_downloads();
    let first = wait_completed(&client, OFFERED, PLAN_TIMEOUT).await;
    let allowed_at =
        first_planned.checked_add(jiff::SignedDuration::try_from(PATCH_INTERVAL).unwrap()).unwrap();
    let waiting = wait_update_config_status(
        &configs,
        "spaced",
        "MinIntervalWait for the second version",
        |s| s.last_check.as_ref().is_some_and(|c| c.reason == "MinIntervalWait"),
    )
    .await;
    assert!(
        jiff::Timestamp::now() < allowed_at,
        "the first run took longer than the interval; the wait was not observed in time"
    );
    assert_eq!(waiting.next_update_allowed.as_ref().map(|t| t.0), Some(allowed_at));
    assert_eq!(verdict(&waiting), (Some("True"), Some("False"), Some("False")), "{waiting:?}");
    assert_eq!(condition(&waiting, "Ready"), Some(("True", "MinIntervalWait")));
    assert_eq!(waiting.running_version.as_deref(), Some(OFFERED), "{waiting:?}");
    assert_eq!(waiting.offered_version.as_deref(), Some(SECOND), "{waiting:?}");
    let message = &waiting.last_check.as_ref().expect("the last check").message;
    assert!(message.contains(&allowed_at.to_string()), "{message}");
    let notes = wait_events(&client, "spaced", "MinIntervalWait", 1).await.unwrap();
    assert!(notes[0].contains(SECOND), "{notes:?}");
    let plans: Api<Plan> = Api::all(client.clone());
    let held = plans.get("autopilot").await.unwrap();
    assert_eq!(held.spec.id, first.spec.id, "no new plan inside the interval");

    // After the interval the second version is planned (not before) and completes.
    let left = Duration::try_from(jiff::Timestamp::now().duration_until(allowed_at))
        .unwrap_or(Duration::ZERO);
    let second = wait_completed(&client, SECOND, left + PLAN_TIMEOUT).await;
    let planned_at: i64 = second.spec.timestamp.parse().expect("Unix seconds");
    assert!(
        planned_at >= allowed_at.as_second(),
        "planned at {planned_at}, allowed at {allowed_at}: {}",
        status_yaml(&second)
    );
    let done =
        wait_update_config_status(&configs, "spaced", "Ready after the second update", |s| {
            s.running_version.as_deref() == Some(SECOND)
                && verdict(s) == (Some("True"), Some("False"), Some("False"))
        })
        .await;
    let second_planned = done.last_patch_update.as_ref().expect("the second update time").0;
    assert!(second_planned >= allowed_at, "{done:?}");
    assert_eq!(done.next_update_allowed, None, "{done:?}");
}
