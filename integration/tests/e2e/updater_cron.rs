//! The deprecated `cron` strategy end to end (issue 5, REF §11.3, §11.7): checks happen when
//! the schedule fires, ask the legacy endpoint `/<channel>?clusterID=..&lastUpdateStatus=..&
//! currentVersion=..`, and a newer version there creates the `autopilot` Plan, which the
//! controller applies for real.
//!
//! The legacy answer carries no digests, so its downloads must be https (DESIGN §11): first
//! the server points at plain-http downloads, and the updater creates no Plan and says why
//! (a Warning Event `UnverifiedPayload` on the UpdateConfig); then it points at an https
//! server the controller trusts, and the update goes through.

use autopilot_api::v1beta2::{
    Plan, PlanStateType, UpdateConfig, UpdateConfigSpec, UpgradeStrategy, UpgradeStrategyType,
};
use integration::http::FileServer;
use integration::{k0s_binary_with_version, wait_for};
use kube::api::{Api, PostParams};

use crate::support::*;
use crate::updater_support::*;

#[tokio::test]
async fn a_cron_schedule_asks_the_legacy_endpoint_and_creates_the_plan() {
    let server = UpdateServer::start().await;
    server.add_version(OFFERED).await.unwrap();
    // First offered from a plain-http server (the legacy format has no digests) …
    let offered = std::fs::read(k0s_binary_with_version(OFFERED).unwrap()).unwrap();
    let plain = FileServer::start(offered.clone()).await.unwrap();
    server.offer_legacy_from(OFFERED, plain.base_url());
    // … then the same binary over https, from a server the controller's agent trusts.
    let downloads = FileServer::start_tls(integration::http::Serve::Body(offered)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("downloads-ca.pem");
    std::fs::write(&ca, downloads.ca_pem().expect("a tls server")).unwrap();
    let ca_arg = ca.display().to_string();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        updater_fleet("updater-cron")
            .controller_args(&["--download-ca-file", &ca_arg])
            .start()
            .await
            .unwrap();
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
                min_interval: None,
            }),
            plan_spec: None,
        },
    );
    configs.create(&PostParams::default(), &config).await.unwrap();

    // Plain-http downloads without digests: no plan, and the UpdateConfig says why.
    let refused = wait_events(&client, "nightly", "UnverifiedPayload", 2).await.unwrap();
    let platform = autopilot_api::platform::current();
    let plain_url = format!("{}/k0s/{OFFERED}/k0s", plain.base_url());
    for note in &refused {
        assert!(note.starts_with(&format!("not planning {OFFERED}")), "{note}");
        assert!(note.contains(&format!("k0s {platform} ({plain_url})")), "{note}");
        assert!(note.contains("over https or give their digests"), "{note}");
    }
    let plans: Api<Plan> = Api::all(client.clone());
    assert!(plans.get_opt("autopilot").await.unwrap().is_none(), "two checks made no plan");
    assert_eq!(plain.requests(), 0, "nothing was downloaded");

    // The same version over https: planned and applied.
    server.offer_legacy_from(OFFERED, downloads.base_url());
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let update = done.spec.commands[0].k0supdate.as_ref().expect("a k0supdate command");
    assert_eq!(update.version, OFFERED, "{}", status_yaml(&done));
    assert_eq!(
        update.platforms[&platform].url,
        format!("{}/k0s/{OFFERED}/k0s", downloads.base_url()),
        "{}",
        status_yaml(&done)
    );
    assert_eq!(update.platforms[&platform].sha256, None, "the legacy format has no digests");
    assert!(downloads.requests() >= 1, "the controller downloaded over https");
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
