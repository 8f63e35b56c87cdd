//! Only the leader runs the updater (issue 5, DESIGN §6–§7): with two controllers only the
//! lease holder checks the update server; when it dies, the new leader takes the checks over.

use std::time::Duration;

use autopilot_api::v1beta2::UpdateConfig;
use integration::wait_for;
use kube::api::{Api, PostParams};

use crate::support::*;
use crate::updater_support::*;

/// What the updater logs on each check with the window closed.
const CHECK_LOG: &str = "the update window opens at";

#[tokio::test]
async fn only_the_leader_checks_and_a_new_leader_takes_over() {
    let server = UpdateServer::start().await;
    server.offer(OFFERED);
    // Their own agents off (`Agents::None`): only the updater is under test.
    let Fleet { cluster: _cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("updater-leader")
            .controllers(2)
            .controller_args(FAST_ELECTION)
            .controller_env("K0S_UPDATE_PERIOD", format!("{}s", PERIOD.as_secs()))
            .controller_env("SSL_CERT_FILE", update_server_ca_file())
            .start()
            .await
            .unwrap();
    let first = wait_for(STARTUP, "a leader", || leader(&client)).await.unwrap();
    let other = 1 - first;

    let configs: Api<UpdateConfig> = Api::all(client.clone());
    let start_time = local_time_in(jiff::SignedDuration::from_hours(1));
    configs
        .create(&PostParams::default(), &update_config("ha", &server, &start_time, "30m"))
        .await
        .unwrap();
    wait_events(&client, "ha", "OutsideWindow", 2).await.unwrap();
    controllers[first].wait_for_log(CHECK_LOG, STARTUP).await.unwrap();
    assert!(
        !controllers[other].log().contains(CHECK_LOG),
        "the non-leader checked:\n{}",
        controllers[other].log()
    );

    let mark = controllers[other].log_mark();
    controllers[first].kill().unwrap();
    controllers[other].wait_for_log_after(mark, CHECK_LOG, Duration::from_secs(60)).await.unwrap();
    assert_eq!(leader(&client).await.unwrap(), Some(other));
}
