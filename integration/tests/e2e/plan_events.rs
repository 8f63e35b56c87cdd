//! What operators see (DESIGN §4, §9.3): every plan, command and node state change is a
//! Kubernetes Event on the Plan with its reason, and a node's failure reason reaches the
//! Plan's Events as well as its status.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::PlanStateType;
use integration::responder::{Behaviour, Config, Responder};
use integration::wait_for;
use k8s_openapi::api::events::v1::Event;
use kube::Api;

use crate::support::*;

const REASON: &str = "sha256 mismatch: want 00ff, got abcd";

/// `(reason, note)` of every Event about the Plan named `autopilot`.
async fn plan_events(client: &kube::Client) -> anyhow::Result<Vec<(String, String)>> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&Default::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Plan") && r.name.as_deref() == Some("autopilot")
            })
        })
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect())
}

#[tokio::test]
async fn each_state_change_is_an_event_on_the_plan_with_the_nodes_reason() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-events")
            .controllers(1)
            .workers(&["worker-0"])
            .start()
            .await
            .unwrap();
    let config =
        Config::new().node("worker-0", Behaviour::fail(SignalPhase::FailedDownload, REASON));
    let _responder = Responder::start(client.clone(), config).await.unwrap();

    let update =
        k0s_update(Some(static_nodes(&["controller-0"], 1)), Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "events", vec![k0s_command(update)])).await.unwrap();
    wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();

    // Events are published in the background: wait until the failure's events are there.
    let events = wait_for(Duration::from_secs(30), "the failure's events", || async {
        let events = plan_events(&client).await?;
        let failed =
            events.iter().any(|(reason, note)| reason == "NodeFailed" && note.contains(REASON));
        let ended = events
            .iter()
            .any(|(reason, note)| reason == "PlanStateChanged" && note.contains("ApplyFailed"));
        Ok((failed && ended).then_some(events))
    })
    .await
    .unwrap();
    let reasons: Vec<&str> = events.iter().map(|(reason, _)| reason.as_str()).collect();
    for expected in
        ["PlanStarted", "NodeSignalled", "NodeCompleted", "NodeFailed", "PlanStateChanged"]
    {
        assert!(reasons.contains(&expected), "no {expected} event among {events:#?}");
    }
    // One event per node signalled: controller-0 and worker-0 each have their own note.
    for node in ["controller-0", "worker-0"] {
        assert!(
            events.iter().any(|(reason, note)| reason == "NodeSignalled" && note.contains(node)),
            "no NodeSignalled event naming {node}: {events:#?}"
        );
    }
}
