//! The test responder against the real control plane, without any k0s process: signals are
//! written by hand, as the plan engine would, and the responder's answers and log are
//! checked. This keeps the plan scenarios honest about their own instrument.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::signal::{self, SignalData, SignalPhase};
use autopilot_api::v1beta2::{self, ControlNode};
use integration::responder::{Behaviour, Config, ObjectRef, Release, Responder};
use integration::wait_for;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use serde_json::json;

use crate::support::{Fleet, FleetBuilder};

const TIMEOUT: Duration = Duration::from_secs(30);

fn signal_data(created: &str, command_id: u32, airgap: bool) -> SignalData {
    let update = json!({ "url": "http://127.0.0.1:9/k0s", "version": "v0.0.0" });
    let command = if airgap {
        json!({ "id": command_id, "airgapupdate": update })
    } else {
        json!({ "id": command_id, "k0supdate": update })
    };
    serde_json::from_value(json!({
        "planId": "p1", "created": created, "runId": "run-1", "command": command,
    }))
    .expect("valid signal data")
}

/// Writes a fresh signal onto the Node `name`, as the leader does.
async fn signal_node(nodes: &Api<Node>, name: &str, data: &SignalData) {
    let patch = json!({ "metadata": { "annotations": signal::to_annotations(data) } });
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("writing a signal");
}

async fn phase_of(nodes: &Api<Node>, name: &str) -> Option<SignalPhase> {
    let node = nodes.get(name).await.ok()?;
    signal::from_meta(&node.metadata).ok().flatten().and_then(|d| d.phase())
}

#[tokio::test]
async fn the_responder_answers_holds_fails_and_detects_resent_signals() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("responder")
            .controllers(1)
            .unstarted_controllers()
            .start()
            .await
            .unwrap();

    // The autopilot CRDs and a few bare objects; no k0s process is involved.
    let (nodes, control_nodes) = create_objects(&client).await;

    let release = Release::new();
    let config = Config::new()
        .node("n-hold", Behaviour::Hold)
        .node("n-fail", Behaviour::fail(SignalPhase::FailedDownload, "sha256 mismatch"))
        .node("n-after", Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await.unwrap();

    // Complete: every k0supdate phase in order, on a Node and on a ControlNode.
    signal_node(&nodes, "n-complete", &signal_data("t0", 0, false)).await;
    let patch = json!({ "metadata": { "annotations": signal::to_annotations(&signal_data("t0", 0, false)) } });
    control_nodes
        .patch("c-complete", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // Airgap: Downloading, Completed.
    signal_node(&nodes, "n-airgap", &signal_data("t0", 0, true)).await;
    // Hold, Fail, CompleteAfter.
    signal_node(&nodes, "n-hold", &signal_data("t0", 0, false)).await;
    signal_node(&nodes, "n-fail", &signal_data("t0", 0, false)).await;
    signal_node(&nodes, "n-after", &signal_data("t0", 0, false)).await;

    let done = [
        ObjectRef::node("n-complete"),
        ObjectRef::control_node("c-complete"),
        ObjectRef::node("n-airgap"),
    ];
    responder
        .wait_until(TIMEOUT, "three completions and a failure", |log| {
            let completed = log.objects_with(SignalPhase::Completed);
            let failed = log.objects_with(SignalPhase::FailedDownload);
            let after_downloading = log.phases_written(&ObjectRef::node("n-after"));
            (done.iter().all(|o| completed.contains(o))
                && failed.contains(&ObjectRef::node("n-fail"))
                && after_downloading == [SignalPhase::Downloading])
            .then_some(())
        })
        .await
        .unwrap();
    check_answers(&responder.log(), &nodes).await;

    // Releasing and un-holding finish both.
    release.release();
    responder.set_behaviour("n-hold", Behaviour::Complete);
    for name in ["n-after", "n-hold"] {
        wait_for(TIMEOUT, &format!("{name} Completed"), || async {
            Ok((phase_of(&nodes, name).await == Some(SignalPhase::Completed)).then_some(()))
        })
        .await
        .unwrap();
    }
    assert!(responder.log().in_flight().is_empty(), "{}", responder.log());

    // Re-sending an answered signal, or a new signal for the same command, is a duplicate.
    check_resent(&responder, &nodes).await;
}

/// The autopilot CRDs, six bare Nodes and a ControlNode.
async fn create_objects(client: &kube::Client) -> (Api<Node>, Api<ControlNode>) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in v1beta2::crds() {
        crds.create(&PostParams::default(), &crd).await.expect("a CRD");
    }
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    wait_for(TIMEOUT, "the ControlNode API", || async {
        Ok(control_nodes.list(&Default::default()).await.ok().map(|_| ()))
    })
    .await
    .expect("the ControlNode API");
    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["n-complete", "n-airgap", "n-hold", "n-fail", "n-after", "n-resent"] {
        let node = Node {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            ..Default::default()
        };
        nodes.create(&PostParams::default(), &node).await.expect("a Node");
    }
    let cn = ControlNode {
        metadata: ObjectMeta {
            name: Some("c-complete".into()),
            labels: Some(BTreeMap::new()),
            ..Default::default()
        },
        status: None,
    };
    control_nodes.create(&PostParams::default(), &cn).await.expect("a ControlNode");
    (nodes, control_nodes)
}

/// What the responder wrote: every k0supdate phase in order for a completion, Downloading
/// and Completed for an airgap update, the failure with its reason, nothing for the held
/// node; the held node and the one waiting for its release in flight, no duplicate.
async fn check_answers(log: &integration::responder::Log, nodes: &Api<Node>) {
    use SignalPhase::*;
    let k0s_phases =
        vec![Downloading, Cordoning, ApplyingUpdate, Restarting, Uncordoning, Completed];
    assert_eq!(log.phases_written(&ObjectRef::node("n-complete")), k0s_phases, "{log}");
    assert_eq!(log.phases_written(&ObjectRef::control_node("c-complete")), k0s_phases, "{log}");
    assert_eq!(log.phases_written(&ObjectRef::node("n-airgap")), [Downloading, Completed], "{log}");
    assert_eq!(
        log.phases_written(&ObjectRef::node("n-fail")),
        [Downloading, FailedDownload],
        "{log}"
    );
    assert!(log.phases_written(&ObjectRef::node("n-hold")).is_empty(), "{log}");
    let failed = nodes.get("n-fail").await.expect("Node n-fail");
    let failed = signal::from_meta(&failed.metadata)
        .expect("a readable signal")
        .expect("a signal")
        .status
        .expect("a status");
    assert_eq!(failed.reason.as_deref(), Some("sha256 mismatch"));
    // In flight now: the held node and the one waiting for its release.
    let in_flight: Vec<String> = log.in_flight().into_iter().map(|o| o.name).collect();
    assert_eq!(in_flight, ["n-after", "n-hold"], "{log}");
    assert!(log.duplicate_signals().is_empty(), "{log}");
}

/// Re-sending an answered signal is a duplicate; a signal for the next command of the run
/// is not.
async fn check_resent(responder: &Responder, nodes: &Api<Node>) {
    signal_node(nodes, "n-resent", &signal_data("t0", 0, false)).await;
    let resent = ObjectRef::node("n-resent");
    responder
        .wait_until(TIMEOUT, "n-resent completed", |log| {
            log.objects_with(SignalPhase::Completed).contains(&resent).then_some(())
        })
        .await
        .expect("n-resent completed");
    signal_node(nodes, "n-resent", &signal_data("t0", 0, false)).await;
    let duplicates = responder
        .wait_until(TIMEOUT, "the re-sent signal to be noticed", |log| {
            let duplicates = log.duplicate_signals();
            (!duplicates.is_empty()).then_some(duplicates)
        })
        .await
        .expect("the re-sent signal noticed");
    assert!(duplicates[0].contains("Node/n-resent signalled 2 times"), "{duplicates:?}");
    assert!(duplicates[0].contains("re-sent"), "{duplicates:?}");
    // A signal for the next command of the run is not a duplicate.
    signal_node(nodes, "n-complete", &signal_data("t1", 1, false)).await;
    responder
        .wait_until(TIMEOUT, "n-complete's second command completed", |log| {
            (log.phases_written(&ObjectRef::node("n-complete")).len() == 12).then_some(())
        })
        .await
        .expect("n-complete's second command completed");
    let duplicates = responder.log().duplicate_signals();
    assert_eq!(duplicates.len(), 1, "{duplicates:?}");
}
