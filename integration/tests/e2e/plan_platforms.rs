//! Platform selection (REF §3.7 step 4, §14 `ap-platformselect`): each node is sent only the
//! URL of its own `<os>-<arch>`; a plan without a node's platform ends in `MissingPlatform`.

use autopilot_api::platform;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{Config, Responder};

use crate::support::*;

/// A real platform that is not this machine's.
fn foreign_platform() -> &'static str {
    if platform::current() == "linux-arm64" { "linux-amd64" } else { "linux-arm64" }
}

#[tokio::test]
async fn each_node_is_sent_only_the_url_of_its_own_platform() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-platforms")
            .controllers(1)
            .workers(&["worker-0"])
            .start()
            .await
            .unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    let current = platform::current();
    let mut update =
        k0s_update(Some(static_nodes(&["controller-0"], 1)), Some(static_nodes(&["worker-0"], 1)));
    update.platforms = platforms(&["windows-amd64", &current, foreign_platform()]);
    create_plan(&client, &plan("autopilot", "platforms", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let status = status_yaml(&done);
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}: {status}", target.name);
    }

    let log = responder.log();
    assert_eq!(log.signals().count(), 2, "controller-0 and worker-0 signalled once each:\n{log}");
    for (observation, data) in log.signals() {
        let sent = data.command.k0supdate.as_ref().map(|u| u.url.as_str());
        assert_eq!(sent, Some(url(&current).as_str()), "{}:\n{log}", observation.object);
    }
}

#[tokio::test]
async fn a_plan_without_the_nodes_platform_ends_in_missing_platform() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-platforms-missing").controllers(1).start().await.unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    let mut update = k0s_update(Some(static_nodes(&["controller-0"], 1)), None);
    update.platforms = platforms(&["windows-amd64", foreign_platform()]);
    create_plan(&client, &plan("autopilot", "platforms-missing", vec![k0s_command(update)]))
        .await
        .unwrap();
    let ended =
        wait_plan_state(&client, "autopilot", PlanStateType::MissingPlatform).await.unwrap();
    let status = status_yaml(&ended);

    assert_eq!(target(&ended, 0, "controller-0").state, TargetState::MissingPlatform, "{status}");
    let log = responder.log();
    assert!(log.is_empty(), "nobody is signalled:\n{log}");
    assert!(objects_with_signals(&client).await.unwrap().is_empty(), "{status}");
}
