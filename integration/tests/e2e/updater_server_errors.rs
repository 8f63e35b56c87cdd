//! The updater survives a bad update server (issue 5): a 500, garbage instead of YAML and an
//! answer offering the running version create no Plan, each check records a clear Event
//! (`UpdateServerError` with the error text, `UpToDate`), and once the server offers a newer
//! version the next period creates the Plan, which completes. An invalid UpdateConfig (an
//! unknown weekday) is an `InvalidUpdateConfig` Event and asks nothing until it is fixed.
//! Deleting an UpdateConfig whose check waits on a silent server does not wait for that
//! check (issue 15: the updater on kube-runtime keeps what its own task map did).
//! The UpdateConfig's status says the same (issue 47): `Stalled` with the check's reason and
//! message while the server fails or the spec is invalid, `Ready` once a check succeeds for
//! the current generation, and a malformed `eolDate` is a message in `status.endOfLife`.

use autopilot_api::v1beta2::{PlanStateType, UpdateConfig};
use integration::wait_for;
use kube::ResourceExt as _;
use kube::api::{Api, PostParams};

use crate::support::*;
use crate::updater_support::*;

#[tokio::test]
async fn server_errors_create_no_plan_and_the_next_period_recovers() {
    let server = UpdateServer::start().await;
    server.add_version(OFFERED).await.unwrap();
    server.set(500, "internal error\n".to_owned());
    let Fleet { cluster: _cluster, client, mut controllers, workers: _workers } =
        updater_fleet("updater-errors").start().await.unwrap();
    let controller = controllers.remove(0);
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    configs
        .create(&PostParams::default(), &update_config("flaky", &server, "00:00", "24h"))
        .await
        .unwrap();

    // Check 1: a 500 is an UpdateServerError naming the status.
    let errors = wait_events(&client, "flaky", "UpdateServerError", 1).await.unwrap();
    assert!(errors[0].contains("500"), "{errors:?}");
    controller.wait_for_log("answered 500", STARTUP).await.unwrap();
    let stalled = wait_update_config_status(&configs, "flaky", "Stalled on the 500", |s| {
        verdict(s) == (Some("False"), Some("False"), Some("True"))
    })
    .await;
    assert_eq!(condition(&stalled, "Stalled"), Some(("True", "UpdateServerError")));
    let message = &stalled.conditions.iter().find(|c| c.type_ == "Stalled").unwrap().message;
    assert!(message.contains("500"), "{message}");
    assert_eq!(stalled.observed_generation, Some(1), "{stalled:?}");

    // Check 2: garbage instead of YAML is an UpdateServerError saying the answer is malformed.
    server.set(200, "<html>oops</html>\n".to_owned());
    let errors = wait_for(PLAN_TIMEOUT, "a malformed-answer event", || async {
        let found = events(&client, "flaky", "UpdateServerError").await?;
        Ok(found.into_iter().find(|note| note.contains("malformed")))
    })
    .await
    .unwrap();
    assert!(errors.contains("unusable"), "{errors}");

    // Check 3: the running version on offer is UpToDate: Ready, not Stalled any more; the
    // malformed eolDate is a message, not a verdict (and no metric).
    server.offer_with_eol(PLAIN_VERSION, "next spring");
    let up_to_date = wait_events(&client, "flaky", "UpToDate", 1).await.unwrap();
    assert!(up_to_date[0].contains(PLAIN_VERSION), "{up_to_date:?}");
    let ready = wait_update_config_status(&configs, "flaky", "Ready when up to date", |s| {
        verdict(s) == (Some("True"), Some("False"), Some("False"))
    })
    .await;
    assert_eq!(condition(&ready, "Ready"), Some(("True", "UpToDate")));
    let eol = ready.end_of_life.as_ref().expect("the server's eolDate");
    assert_eq!((eol.date.as_str(), eol.past), ("next spring", None), "{ready:?}");
    assert!(eol.message.contains("is not a date"), "{ready:?}");
    let scrape = wait_metrics(&controller, "the last result UpToDate", |s| {
        s.value(
            "k0s_autopilot_updater_last_check_result",
            &[("update_config", "flaky"), ("result", "UpToDate")],
        ) == Some(1.0)
    })
    .await
    .unwrap();
    let labels = [("update_config", "flaky")];
    assert_eq!(scrape.value("k0s_autopilot_updater_running_version_past_eol", &labels), None);
    assert_no_plan_for(&client, PERIOD * 2).await;

    // The server recovers with a newer version: the next period creates the plan.
    server.offer(OFFERED);
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let update = done.spec.commands[0].k0supdate.as_ref().expect("a k0supdate command");
    assert_eq!(update.version, OFFERED, "{}", status_yaml(&done));
    wait_events(&client, "flaky", "PlanCreated", 1).await.unwrap();
}

#[tokio::test]
async fn an_invalid_update_config_is_an_event_until_it_is_fixed() {
    let server = UpdateServer::start().await;
    server.add_version(OFFERED).await.unwrap();
    server.offer(OFFERED);
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        updater_fleet("updater-invalid").start().await.unwrap();
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    let mut config = update_config("typo", &server, "00:00", "24h");
    if let Some(periodic) = config.spec.upgrade_strategy.as_mut().and_then(|s| s.periodic.as_mut())
    {
        periodic.days = vec!["Funday".to_owned()];
    }
    configs.create(&PostParams::default(), &config).await.unwrap();

    let invalid = wait_events(&client, "typo", "InvalidUpdateConfig", 1).await.unwrap();
    assert!(invalid[0].contains("Funday"), "{invalid:?}");
    let stalled = wait_update_config_status(&configs, "typo", "Stalled on the typo", |s| {
        condition(s, "Stalled") == Some(("True", "InvalidUpdateConfig"))
    })
    .await;
    assert_eq!(verdict(&stalled), (Some("False"), Some("False"), Some("True")));
    let check = stalled.last_check.as_ref().expect("the refusal as the last check");
    assert!(check.message.contains("Funday"), "{stalled:?}");
    assert_no_plan_for(&client, PERIOD * 2).await;
    assert!(server.index_headers().is_empty(), "an invalid UpdateConfig asked the server");

    // Fixed: its updater restarts and the update happens.
    let mut fixed = configs.get("typo").await.unwrap();
    fixed.spec = update_config("typo", &server, "00:00", "24h").spec;
    configs.replace("typo", &PostParams::default(), &fixed).await.unwrap();
    wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let ready = wait_update_config_status(&configs, "typo", "Ready for generation 2", |s| {
        s.observed_generation == Some(2) && condition(s, "Ready").is_some_and(|(c, _)| c == "True")
    })
    .await;
    assert_eq!(verdict(&ready), (Some("True"), Some("False"), Some("False")), "{ready:?}");
    assert!(ready.conditions.iter().all(|c| c.observed_generation == Some(2)), "{ready:?}");
}

/// Well under the update-server request timeout (10 s), which would otherwise end the check.
const GONE_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

#[tokio::test]
async fn deleting_an_update_config_does_not_wait_for_a_silent_update_server() {
    let server = UpdateServer::start().await;
    server.hold_index();
    let Fleet { cluster: _cluster, client, mut controllers, workers: _workers } =
        updater_fleet("updater-silent").start().await.unwrap();
    let controller = controllers.remove(0);
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    configs
        .create(&PostParams::default(), &update_config("silent", &server, "00:00", "24h"))
        .await
        .unwrap();
    // A check is under way: the server has its request and does not answer.
    wait_for(STARTUP, "the check to reach the server", || async {
        Ok((server.index_arrivals() >= 1).then_some(()))
    })
    .await
    .unwrap();
    let config = configs.get("silent").await.unwrap();
    assert!(
        config.finalizers().iter().any(|f| f == autopilot_api::keys::UPDATECONFIG_FINALIZER),
        "{:?}",
        config.metadata.finalizers
    );

    configs.delete("silent", &Default::default()).await.unwrap();
    wait_for(GONE_WITHIN, "the UpdateConfig to be gone", || async {
        Ok(configs.get_opt("silent").await?.is_none().then_some(()))
    })
    .await
    .unwrap();
    controller.wait_for_log("stopping updater", STARTUP).await.unwrap();
    assert_eq!(server.index_arrivals(), 1, "the deleted UpdateConfig was checked again");
}
