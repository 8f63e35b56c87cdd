//! The updater's `periodic` strategy end to end (issue 5, DESIGN §6): a local update server
//! advertises a newer version on a channel; with the maintenance window open the leader's
//! updater creates the `autopilot` Plan, which runs to Completed (the controller's own agent
//! downloads the served binary and restarts into it) and an Event `PlanCreated` lands on the UpdateConfig; with the window closed no Plan
//! appears over several periods and the Events say `OutsideWindow`, until the
//! UpdateConfig is changed to open it (its updater restarts and creates the Plan). The
//! leader's updater metrics follow: window closed with `OutsideWindow` as the last result,
//! then open. The open case's `planSpec` carries a plan window and command policies, which
//! the generated Plan must carry too.

use std::time::Duration;

use autopilot_api::v1beta2::{PlanStateType, UpdateConfig};
use integration::wait_for;
use kube::api::{Api, PostParams};

use crate::support::*;
use crate::updater_support::*;

#[tokio::test]
async fn window_open_creates_the_plan_which_completes() {
    let server = UpdateServer::start().await;
    server.add_version(OFFERED).await.unwrap();
    server.offer(OFFERED);
    let Fleet { cluster: _cluster, client, mut controllers, workers: _workers } =
        updater_fleet("updater-open").start().await.unwrap();
    let controller = controllers.remove(0);
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    // The template's window (open now) and command policies reach the generated Plan.
    let now = jiff::Timestamp::now();
    let mut config = update_config("open", &server, "00:00", "24h");
    config.spec.plan_spec = Some(
        serde_json::from_value(serde_json::json!({
            "window": { "ranges": [{
                "start": (now - jiff::SignedDuration::from_hours(1)).to_string(),
                "end": (now + jiff::SignedDuration::from_hours(24)).to_string(),
            }] },
            "commands": [{ "k0supdate": {
                "targets": { "controllers": { "discovery": { "selector": {} } } },
                "progressTimeout": "10m",
                "drain": "Never",
            } }],
        }))
        .unwrap(),
    );
    configs.create(&PostParams::default(), &config).await.unwrap();

    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(
        done.spec.window,
        config.spec.plan_spec.as_ref().unwrap().window,
        "{}",
        status_yaml(&done)
    );
    let update = done.spec.commands[0].k0supdate.as_ref().expect("a k0supdate command");
    assert_eq!(update.rollout.progress_timeout.as_deref(), Some("10m"));
    assert_eq!(update.drain, Some(autopilot_api::v1beta2::DrainPolicy::Never));
    assert_eq!(update.version, OFFERED, "{}", status_yaml(&done));
    assert!(
        update.platforms.contains_key(&autopilot_api::platform::current()),
        "{}",
        status_yaml(&done)
    );
    let created = wait_events(&client, "open", "PlanCreated", 1).await.unwrap();
    assert!(created[0].contains(&done.spec.id), "{created:?}");
    controller.wait_for_log("created the autopilot plan", STARTUP).await.unwrap();

    // The controller now runs the offered version, and its updater says so.
    wait_for(STARTUP, "controller-0 to report the offered version", || async {
        let version = control_node_version(&client, "controller-0").await?;
        Ok((version.as_deref() == Some(OFFERED)).then_some(()))
    })
    .await
    .unwrap();
    let up_to_date = wait_events(&client, "open", "UpToDate", 1).await.unwrap();
    assert!(
        up_to_date.iter().any(|note| note.contains(&format!("running {OFFERED}"))),
        "{up_to_date:?}"
    );

    // The finalizer is on, and deleting the UpdateConfig does not hang on it.
    let config = configs.get("open").await.unwrap();
    assert!(
        config
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == autopilot_api::keys::UPDATECONFIG_FINALIZER),
        "{:?}",
        config.metadata.finalizers
    );
    configs.delete("open", &Default::default()).await.unwrap();
    wait_for(STARTUP, "the UpdateConfig to be gone", || async {
        Ok(configs.get_opt("open").await?.is_none().then_some(()))
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn window_closed_creates_no_plan_until_the_updateconfig_opens_it() {
    let server = UpdateServer::start().await;
    server.add_version(OFFERED).await.unwrap();
    server.offer(OFFERED);
    let Fleet { cluster: _cluster, client, mut controllers, workers: _workers } =
        updater_fleet("updater-closed").start().await.unwrap();
    let controller = controllers.remove(0);
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    let start_time = local_time_in(jiff::SignedDuration::from_hours(1));
    configs
        .create(&PostParams::default(), &update_config("closed", &server, &start_time, "30m"))
        .await
        .unwrap();

    let first = wait_events(&client, "closed", "OutsideWindow", 1).await.unwrap();
    assert!(first[0].contains(OFFERED), "{first:?}");
    // The leader's metrics say the same: window closed, last result OutsideWindow, and a
    // next check scheduled in the future.
    let labels = [("update_config", "closed")];
    let closed = wait_metrics(&controller, "the updater metrics of a closed window", |s| {
        s.value("k0s_autopilot_updater_window_open", &labels) == Some(0.0)
    })
    .await
    .unwrap();
    assert_eq!(
        closed.value(
            "k0s_autopilot_updater_last_check_result",
            &[("update_config", "closed"), ("result", "OutsideWindow")]
        ),
        Some(1.0),
        "{}",
        closed.text
    );
    let next = closed.value("k0s_autopilot_updater_next_check_timestamp_seconds", &labels);
    let now = jiff::Timestamp::now().as_second() as f64;
    assert!(
        next.is_some_and(|at| at >= now - 1.0),
        "next check {next:?} at {now}:\n{}",
        closed.text
    );

    // Three more periods: every check says outside window, and no Plan ever appears.
    assert_no_plan_for(&client, PERIOD * 3 + Duration::from_secs(1)).await;
    let later = wait_events(&client, "closed", "OutsideWindow", 3).await.unwrap();
    assert!(later.len() >= 3, "{later:?}");
    assert!(events(&client, "closed", "PlanCreated").await.unwrap().is_empty());

    // Opening the window changes the object: its updater restarts and creates the plan.
    let mut config = configs.get("closed").await.unwrap();
    config.spec = update_config("closed", &server, "00:00", "24h").spec;
    configs.replace("closed", &PostParams::default(), &config).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(
        done.spec.commands[0].k0supdate.as_ref().map(|u| u.version.as_str()),
        Some(OFFERED),
        "{}",
        status_yaml(&done)
    );
    // The updated controller (same address, new process) checks again: window open.
    wait_metrics(&controller, "the updater metrics of an open window", |s| {
        s.value("k0s_autopilot_updater_window_open", &labels) == Some(1.0)
    })
    .await
    .unwrap();
}
