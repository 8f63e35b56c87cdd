//! What operators see (DESIGN §4, §9.3): every plan and command state change is a Kubernetes
//! Event on the Plan with its reason; the nodes signalled or completed in one pass are one
//! Event naming them, and a node's failure is an Event of its own carrying the node's reason
//! (which is in the Plan's status too).

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
async fn state_changes_are_events_on_the_plan_one_per_batch_of_nodes_and_one_per_failed_node() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-events").controllers(1).workers(&WORKERS).start().await.unwrap();
    let config =
        Config::new().node("worker-0", Behaviour::fail(SignalPhase::FailedDownload, REASON));
    let _responder = Responder::start(client.clone(), config).await.unwrap();

    // All three workers go at once, in the pass that sees controller-0 completed.
    let update =
        k0s_update(Some(static_nodes(&["controller-0"], 1)), Some(static_nodes(&WORKERS, 3)));
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
        ["PlanStarted", "NodesSignalled", "NodesCompleted", "NodeFailed", "PlanStateChanged"]
    {
        assert!(reasons.contains(&expected), "no {expected} event among {events:#?}");
    }
    // One event per batch: controller-0 alone, then the three workers together.
    let signalled: Vec<&str> = events
        .iter()
        .filter(|(reason, _)| reason == "NodesSignalled")
        .map(|(_, note)| note.as_str())
        .collect();
    assert_eq!(
        signalled,
        [
            "command 0 (k0supdate): signalled ControlNode controller-0",
            "command 0 (k0supdate): signalled 3 Nodes: worker-0, worker-1, worker-2",
        ],
        "{events:#?}"
    );
    // The failed worker has a Warning of its own, with its reason; none of the others has.
    let failed: Vec<&str> = events
        .iter()
        .filter(|(reason, _)| reason == "NodeFailed")
        .map(|(_, note)| note.as_str())
        .collect();
    assert_eq!(
        failed,
        [format!("command 0 (k0supdate): Node worker-0 failed: {REASON}")],
        "{events:#?}"
    );
    // The workers that completed are named by the NodesCompleted events (one or two,
    // depending on whether their reports reached the same pass).
    for worker in ["worker-1", "worker-2"] {
        assert!(
            events.iter().any(|(reason, note)| reason == "NodesCompleted" && note.contains(worker)),
            "no NodesCompleted event naming {worker}: {events:#?}"
        );
    }
}

const WORKERS: [&str; 3] = ["worker-0", "worker-1", "worker-2"];
