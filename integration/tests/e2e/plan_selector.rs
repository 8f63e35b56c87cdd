//! Selector discovery (REF §4.2, §14 `ap-selector`; DESIGN §4, §9.5): labels AND fields pick
//! exactly the matching controller and worker; an unparseable selector is an error, never
//! "select everything".

use std::collections::BTreeSet;

use autopilot_api::v1beta2::{ControlNode, PlanStateType, TargetState};
use integration::responder::{Config, ObjectRef, Responder};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::*;

fn label(key: &str, value: &str) -> serde_json::Value {
    json!({ "metadata": { "labels": { key: value } } })
}

#[tokio::test]
async fn labels_and_fields_select_exactly_the_matching_controller_and_worker() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-selector")
            .controllers(2)
            .workers(&["worker-0", "worker-1"])
            .start()
            .await
            .unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    // controller-0 and worker-1 carry foo=bar. Decoys: controller-1 carries the label too
    // (only the field selector excludes it), worker-0 carries foo=baz.
    let pp = PatchParams::default();
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["controller-0", "controller-1"] {
        control_nodes.patch(name, &pp, &Patch::Merge(label("foo", "bar"))).await.unwrap();
    }
    nodes.patch("worker-1", &pp, &Patch::Merge(label("foo", "bar"))).await.unwrap();
    nodes.patch("worker-0", &pp, &Patch::Merge(label("foo", "baz"))).await.unwrap();

    let update = k0s_update(
        Some(selected(Some("foo=bar"), Some("metadata.name=controller-0"))),
        Some(selected(Some("foo=bar"), Some("metadata.name=worker-1"))),
    );
    create_plan(&client, &plan("autopilot", "selector", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let status = status_yaml(&done);

    let command = command(&done, 0);
    assert_eq!(controller_names(command), ["controller-0"], "{status}");
    assert_eq!(worker_names(command), ["worker-1"], "{status}");
    for target in targets(command) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}: {status}", target.name);
    }
    let log = responder.log();
    let expected =
        BTreeSet::from([ObjectRef::control_node("controller-0"), ObjectRef::node("worker-1")]);
    assert_eq!(log.signalled_objects(), expected, "{log}");
    assert!(log.duplicate_signals().is_empty(), "{:?}\n{log}", log.duplicate_signals());
}

#[tokio::test]
async fn an_unparseable_selector_ends_the_plan_in_incomplete_targets_and_signals_nobody() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-selector-bad")
            .controllers(1)
            .workers(&["worker-0"])
            .start()
            .await
            .unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();

    // An unterminated set expression: k0s would treat it as "everything".
    let update = k0s_update(None, Some(selected(Some("foo in (bar"), None)));
    create_plan(&client, &plan("autopilot", "selector-bad", vec![k0s_command(update)]))
        .await
        .unwrap();
    let ended =
        wait_plan_state(&client, "autopilot", PlanStateType::IncompleteTargets).await.unwrap();
    let status = status_yaml(&ended);

    let description = command(&ended, 0).description.clone().unwrap_or_default();
    assert!(!description.is_empty(), "the command says what is wrong:\n{status}");
    let log = responder.log();
    assert!(log.is_empty(), "nobody is signalled:\n{log}");
    assert!(objects_with_signals(&client).await.unwrap().is_empty(), "{status}");
}
