//! The deprecated `cron` strategy end to end (issue 5, REF §11.3, §11.7): checks happen when
//! the schedule fires, ask the legacy endpoint `/<channel>?clusterID=..&lastUpdateStatus=..&
//! currentVersion=..`, and a newer version there creates the `autopilot` Plan, which the
//! controller applies for real.

mod support;
mod updater_support;

use autopilot_api::v1beta2::{
    PlanStateType, UpdateConfig, UpdateConfigSpec, UpgradeStrategy, UpgradeStrategyType,
};
use integration::wait_for;
use kube::api::{Api, PostParams};
use support::*;
use updater_support::*;

#[tokio::test]
async fn a_cron_schedule_asks_the_legacy_endpoint_and_creates_the_plan() {
    let server = UpdateServer::start().await;
    server.add_version(OFFERED).await.unwrap();
    server.offer_legacy(OFFERED);
    let (_cluster, client, _controller) = start("updater-cron").await.unwrap();
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    let config = UpdateConfig::new(
        "nightly",
        UpdateConfigSpec {
            channel: CHANNEL.to_owned(),
            update_server: server.url.clone(),
            upgrade_strategy: Some(UpgradeStrategy {
                r#type: Some(UpgradeStrategyType::Cron),
                // robfig v1: seconds first, so this fires every two seconds.
                cron: Some("*/2 * * * * *".to_owned()),
                periodic: None,
            }),
            plan_spec: None,
        },
    );
    configs.create(&PostParams::default(), &config).await.unwrap();

    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let update = done.spec.commands[0].k0supdate.as_ref().expect("a k0supdate command");
    assert_eq!(update.version, OFFERED, "{}", status_yaml(&done));
    wait_events(&client, "nightly", "PlanCreated", 1).await.unwrap();

    let queries = server.legacy_queries();
    let first = queries.first().expect("the legacy endpoint was asked");
    assert!(first.contains("clusterID="), "{queries:?}");
    assert!(first.contains("lastUpdateStatus=&"), "no plan yet: {queries:?}");
    assert!(
        first.contains(&format!("currentVersion={}", PLAIN_VERSION.replace('+', "%2B"))),
        "{queries:?}"
    );

    // After the update the controller runs the offered version, and says so to the server.
    wait_for(STARTUP, "the legacy endpoint to hear the new version", || async {
        let wanted = format!("currentVersion={}", OFFERED.replace('+', "%2B"));
        Ok(server.legacy_queries().iter().any(|q| q.contains(&wanted)).then_some(()))
    })
    .await
    .unwrap();
}
