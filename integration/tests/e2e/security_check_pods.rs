//! Check Pods cannot take over a node (DESIGN §14), on the real control plane (whose API
//! servers allow privileged Pods, as k0s's do):
//!
//! - a `scheduler` check whose template asks for a privileged container is refused by the
//!   leader with status code 22 naming the field, and no Pod is created;
//! - a template swapped in its ConfigMap mid-run changes nothing: a check Pod made again
//!   runs the template frozen at NewPlan;
//! - a Pod someone else made under a check Pod's name (after deleting the leader's) gives no
//!   result: the leader refuses it (a `CheckPodRefused` Warning), deletes it and takes the
//!   result of its own Pod made again;
//! - the namespace `k0s-autopilot` enforces Pod Security `baseline`: the API server itself
//!   refuses a privileged Pod there, even from the admin (so even a leader whose filter
//!   were bypassed could not create one);
//! - a Pod Security label an operator changed stays as they set it when a controller
//!   starts again.
//!
//! The worker is a real node ([`integration::real_node`]): the check Pods run in its
//! containerd.

use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::v1beta2::{CheckStatus, PlanCommand, PlanCommandPreflight, PlanStateType};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

fn privileged_pod() -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{
        "name": "check", "image": "registry.example/checks:1",
        "command": ["/bin/sh", "-c", "true"],
        "securityContext": {"privileged": true}}]}})
}

#[tokio::test]
async fn check_pods_cannot_be_privileged_on_real_nodes() {
    let Fleet { cluster: _cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("security-check-pods")
            .workers(&["worker-0"])
            .real_workers()
            .start()
            .await
            .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), keys::NAMESPACE);

    // The namespace carries the Pod Security labels.
    let labels = namespaces.get(keys::NAMESPACE).await.unwrap().metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("pod-security.kubernetes.io/enforce").map(String::as_str),
        Some("baseline")
    );
    assert_eq!(
        labels.get("pod-security.kubernetes.io/warn").map(String::as_str),
        Some("restricted")
    );

    // The leader refuses a privileged template with 22, naming the field; no Pod is made.
    privileged_template_refused(&client, &pods).await;

    // A template swapped mid-run changes nothing: the Pod made again after a deletion by
    // hand runs the template as NewPlan froze it.
    swapped_template_changes_nothing(&client, &pods).await;

    // A Pod made by someone else under the check Pod's name is refused, not judged.
    impostor_refused(&client, &pods).await;

    // The API server refuses a privileged Pod in the namespace, whoever asks.
    let mut pod: Pod = serde_json::from_value(privileged_pod()).unwrap();
    pod.metadata.name = Some("privileged".to_owned());
    let refused = pods.create(&PostParams::default(), &pod).await.expect_err("refused");
    let kube::Error::Api(response) = &refused else { panic!("{refused}") };
    assert_eq!(response.code, 403, "{refused}");
    assert!(response.message.contains("violates PodSecurity \"baseline"), "{}", response.message);

    // An operator's choice stays: one label relaxed, one removed, then a controller starts
    // again. It adds the missing one back and leaves the relaxed one as it is.
    let relax = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/audit": null,
    }}});
    namespaces
        .patch(keys::NAMESPACE, &PatchParams::default(), &Patch::Merge(&relax))
        .await
        .unwrap();
    let mut controller = controllers.into_iter().next().unwrap();
    controller.stop(Duration::from_secs(20)).await.unwrap();
    controller.restart().await.unwrap();
    let labels = integration::wait_for(STARTUP, "the missing label added back", || async {
        let labels = namespaces.get(keys::NAMESPACE).await?.metadata.labels.unwrap_or_default();
        Ok(labels.contains_key("pod-security.kubernetes.io/audit").then_some(labels))
    })
    .await
    .unwrap();
    assert_eq!(
        labels.get("pod-security.kubernetes.io/audit").map(String::as_str),
        Some("restricted")
    );
    assert_eq!(
        labels.get("pod-security.kubernetes.io/enforce").map(String::as_str),
        Some("privileged")
    );
}

/// The leader refuses a privileged template with 22, naming the field; no Pod is made.
async fn privileged_template_refused(client: &kube::Client, pods: &Api<Pod>) {
    let template: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "root-please", "namespace": keys::NAMESPACE},
        "data": {"pod.yaml": serde_json::to_string(&privileged_pod()).expect("the Pod as JSON")},
    }))
    .expect("a valid object");
    Api::<ConfigMap>::namespaced(client.clone(), keys::NAMESPACE)
        .create(&PostParams::default(), &template)
        .await
        .expect("creating the template");
    let preflight: PlanCommandPreflight = serde_json::from_value(json!({"checks": [{
        "id": "escalate",
        "targets": {"workers": serde_json::to_value(static_nodes(&["worker-0"], 1)).expect("targets as JSON")},
        "command": {"id": "scheduler", "timeout": 15,
                    "data": {"kubernetes": {"podName": "root-please"}}},
        "results": [
            {"status": "success", "condition": {"statusCode": 0}, "message": "ran"},
            {"status": "error", "message": "{{ .StatusCode }}: {{ .Result }}"}
        ]
    }]}))
    .expect("a valid object");
    let command = PlanCommand { k0supdate: None, airgapupdate: None, preflight: Some(preflight) };
    create_plan(client, &plan("autopilot", "escalate", vec![command]))
        .await
        .expect("creating the plan");
    let failed = wait_plan_state(client, "autopilot", PlanStateType::PreflightFailed)
        .await
        .expect("the plan ends");
    let checks = &command_status(&failed).checks;
    let verdict = &checks[0].nodes[0];
    assert_eq!(
        (verdict.status, verdict.status_code),
        (CheckStatus::Error, 22),
        "{}",
        status_yaml(&failed)
    );
    assert!(
        verdict.message.contains("spec.containers[0].securityContext.privileged"),
        "{}",
        verdict.message
    );
    let made = pods.list(&ListParams::default()).await.expect("listing Pods");
    assert!(made.items.is_empty(), "no check Pod was created: {:?}", made.items.len());
    delete_plan(client).await;
}

/// A template swapped mid-run changes nothing: the Pod made again after a deletion by hand
/// runs the template as NewPlan froze it. The frozen template answers only after 10 s, so
/// the first Pod is still running when the test swaps the template and deletes it; the
/// swapped one would answer at once.
async fn swapped_template_changes_nothing(client: &kube::Client, pods: &Api<Pod>) {
    let script = "sleep 10; echo frozen > /dev/termination-log";
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), keys::NAMESPACE);
    config_maps
        .create(&PostParams::default(), &pod_template("swap-me", script))
        .await
        .expect("creating the template");
    let preflight: PlanCommandPreflight = serde_json::from_value(json!({"checks": [{
        "id": "frozen",
        "targets": {"workers": serde_json::to_value(static_nodes(&["worker-0"], 1)).expect("targets as JSON")},
        "command": {"id": "scheduler", "timeout": 60,
                    "data": {"kubernetes": {"podName": "swap-me"}}},
        "results": [
            {"status": "success", "condition": {"statusCode": 0}, "message": "{{ .Result }}"},
            {"status": "error", "message": "{{ .StatusCode }}: {{ .Result }}"}
        ]
    }]}))
    .expect("a valid object");
    let command = PlanCommand { k0supdate: None, airgapupdate: None, preflight: Some(preflight) };
    create_plan(client, &plan("autopilot", "frozen", vec![command]))
        .await
        .expect("creating the plan");
    let first = integration::wait_for(PLAN_TIMEOUT, "the check Pod", || async {
        Ok(pods.list(&ListParams::default()).await?.items.into_iter().next())
    })
    .await
    .expect("the check Pod");
    let swapped = pod_template("swap-me", "echo swapped > /dev/termination-log");
    config_maps
        .replace("swap-me", &PostParams::default(), &swapped)
        .await
        .expect("swapping the template");
    let first_uid = first.metadata.uid.clone();
    let now = kube::api::DeleteParams::default().grace_period(0);
    pods.delete(first.metadata.name.as_deref().expect("the Pod's name"), &now)
        .await
        .expect("deleting the check Pod");
    integration::wait_for(PLAN_TIMEOUT, "the check Pod made again", || async {
        let again = pods.list(&ListParams::default()).await?.items.into_iter().next();
        Ok(again.filter(|pod| pod.metadata.uid != first_uid))
    })
    .await
    .expect("the check Pod made again");
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan ends");
    assert_eq!(
        command_status(&done).checks[0].nodes[0].message,
        "frozen",
        "{}",
        status_yaml(&done)
    );
    delete_plan(client).await;
}

/// A Pod made by someone else under the check Pod's name gives no result: the test deletes
/// the leader's Pod and creates one of the name (same labels and node) that answers
/// "impostor" at once, until its create wins over the leader's own; the leader refuses it
/// with a `CheckPodRefused` Warning naming it, deletes it, and the result is its own Pod's.
async fn impostor_refused(client: &kube::Client, pods: &Api<Pod>) {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), keys::NAMESPACE);
    config_maps
        .create(
            &PostParams::default(),
            &pod_template("genuine", "sleep 5; echo genuine > /dev/termination-log"),
        )
        .await
        .expect("creating the template");
    let preflight: PlanCommandPreflight = serde_json::from_value(json!({"checks": [{
        "id": "bound",
        "targets": {"workers": serde_json::to_value(static_nodes(&["worker-0"], 1)).expect("targets as JSON")},
        "command": {"id": "scheduler", "timeout": 120,
                    "data": {"kubernetes": {"podName": "genuine"}}},
        "results": [
            {"status": "success", "condition": {"statusCode": 0}, "message": "{{ .Result }}"},
            {"status": "error", "message": "{{ .StatusCode }}: {{ .Result }}"}
        ]
    }]}))
    .expect("a valid object");
    let command = PlanCommand { k0supdate: None, airgapupdate: None, preflight: Some(preflight) };
    create_plan(client, &plan("autopilot", "bound", vec![command]))
        .await
        .expect("creating the plan");
    let genuine = integration::wait_for(PLAN_TIMEOUT, "the check Pod", || async {
        Ok(pods.list(&ListParams::default()).await?.items.into_iter().next())
    })
    .await
    .expect("the check Pod");
    let name = genuine.metadata.name.clone().expect("the Pod's name");
    let made = replace_with_impostor(pods, &genuine).await;
    let impostor_uid = made.metadata.uid.clone().expect("a UID");
    let refused = integration::wait_for(PLAN_TIMEOUT, "the CheckPodRefused Warning", || async {
        let events = Api::<Event>::namespaced(client.clone(), "default");
        let list = events.list(&ListParams::default()).await?;
        Ok(list.items.into_iter().find(|event| {
            event.reason.as_deref() == Some("CheckPodRefused")
                && event.note.as_deref().is_some_and(|note| note.contains(&impostor_uid))
        }))
    })
    .await
    .expect("the refusal");
    assert_eq!(refused.type_.as_deref(), Some("Warning"));
    assert!(refused.note.as_deref().unwrap_or_default().contains(&name), "{refused:?}");
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan ends");
    assert_eq!(
        command_status(&done).checks[0].nodes[0].message,
        "genuine",
        "the leader's own Pod's result, never the impostor's: {}",
        status_yaml(&done)
    );
    let recorded = command_status(&done).pods[0].uid.clone();
    assert!(
        recorded.is_some() && recorded.as_deref() != Some(impostor_uid.as_str()),
        "{recorded:?}"
    );
    delete_plan(client).await;
}

/// Delete the leader's check Pod `genuine` and create one of its name, labels and node that
/// answers "impostor" at once, again until that create wins over the leader's own; returns
/// the impostor as created.
async fn replace_with_impostor(pods: &Api<Pod>, genuine: &Pod) -> Pod {
    let name = genuine.metadata.name.clone().expect("the Pod's name");
    let mut impostor = Pod { spec: genuine.spec.clone(), ..Pod::default() };
    impostor.metadata = kube::api::ObjectMeta {
        name: Some(name.clone()),
        namespace: genuine.metadata.namespace.clone(),
        labels: genuine.metadata.labels.clone(),
        annotations: genuine.metadata.annotations.clone(),
        ..kube::api::ObjectMeta::default()
    };
    let spec = impostor.spec.as_mut().expect("a spec");
    spec.containers[0].command =
        Some(["/bin/sh", "-c", "echo impostor > /dev/termination-log"].map(String::from).to_vec());
    let now = kube::api::DeleteParams::default().grace_period(0);
    integration::wait_for(PLAN_TIMEOUT, "the impostor in place", || async {
        match pods.delete(&name, &now).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(other) => return Err(other.into()),
        }
        match pods.create(&PostParams::default(), &impostor).await {
            Ok(made) => Ok(Some(made)),
            // The leader made its own again first: delete that one too.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(other) => Err(other.into()),
        }
    })
    .await
    .expect("the impostor in place")
}

fn command_status(
    plan: &autopilot_api::v1beta2::Plan,
) -> &autopilot_api::v1beta2::PlanCommandPreflightStatus {
    command(plan, 0).preflight.as_ref().expect("verdicts")
}
