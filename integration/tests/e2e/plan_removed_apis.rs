//! Removed-API pre-check (REF §9.1, §14 `ap-removedapis`): a plan to a version that removed
//! an API still in use ends in `Warning` with k0s' exact description; `forceupdate` skips
//! the check.

use autopilot_api::keys;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::responder::{Config, ObjectRef, Responder};
use integration::wait_for;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

use crate::support::*;

const CRD_NAME: &str = "removedcrds.k0s.k0sproject.example.com";

/// The version the fixture API "was removed" in (REF §9.1's test entry).
const REMOVED_IN: &str = "v99.99.99";

/// Installs the `RemovedCRD` fixture (k0s.k0sproject.example.com/v1beta1, cluster-scoped)
/// and creates one object of it.
async fn install_removed_crd_with_one_object(client: &kube::Client) -> anyhow::Result<()> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": CRD_NAME },
        "spec": {
            "group": "k0s.k0sproject.example.com",
            "scope": "Cluster",
            "names": {
                "plural": "removedcrds",
                "singular": "removedcrd",
                "kind": "RemovedCRD",
                "listKind": "RemovedCRDList",
            },
            "versions": [{
                "name": "v1beta1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    }))?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await?;
    wait_for(STARTUP, "the RemovedCRD CRD to be Established", || async {
        let crd = crds.get(CRD_NAME).await?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        Ok(established.then_some(()))
    })
    .await?;

    let gvk = GroupVersionKind::gvk("k0s.k0sproject.example.com", "v1beta1", "RemovedCRD");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "removedcrds");
    let objects: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let object = DynamicObject::new("still-here", &resource).data(json!({ "spec": {} }));
    // The API may take a moment to be served after Established.
    wait_for(STARTUP, "a RemovedCRD object to be created", || async {
        match objects.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(Some(())),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Some(())),
            Err(err) => Err(err.into()),
        }
    })
    .await
}

fn update_to_removed_version(force: bool) -> autopilot_api::v1beta2::PlanCommandK0sUpdate {
    let mut update = k0s_update(Some(static_nodes(&["controller-0"], 1)), None);
    update.version = REMOVED_IN.to_owned();
    update.forceupdate = force;
    update
}

#[tokio::test]
async fn a_plan_to_a_version_that_removed_an_api_in_use_ends_in_warning() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-removed-apis").controllers(1).start().await.unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();
    install_removed_crd_with_one_object(&client).await.unwrap();

    let update = update_to_removed_version(false);
    create_plan(&client, &plan("autopilot", "removed-apis", vec![k0s_command(update)]))
        .await
        .unwrap();
    let ended = wait_plan_state(&client, "autopilot", PlanStateType::Warning).await.unwrap();
    let status = status_yaml(&ended);

    let command = command(&ended, 0);
    assert_eq!(command.state, PlanStateType::Warning, "{status}");
    assert_eq!(
        command.description.as_deref(),
        Some(
            "removedcrds.k0s.k0sproject.example.com v1beta1 has been removed in Kubernetes \
             v99.99.99, but there are 1 such resources in the cluster"
        ),
        "{status}"
    );
    let log = responder.log();
    assert!(log.is_empty(), "nobody is signalled:\n{log}");
}

#[tokio::test]
async fn a_forced_plan_skips_the_removed_api_check_and_runs() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-removed-forced").controllers(1).start().await.unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();
    install_removed_crd_with_one_object(&client).await.unwrap();

    let update = update_to_removed_version(true);
    let mut forced = plan("autopilot", "removed-forced", vec![k0s_command(update)]);
    // v99 skips minor versions; this scenario is about the removed-API check.
    forced.metadata.annotations =
        Some([(keys::ANNOTATION_ALLOW_SKEW.to_owned(), "removed-forced".to_owned())].into());
    create_plan(&client, &forced).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let status = status_yaml(&done);

    assert_eq!(target(&done, 0, "controller-0").state, TargetState::SignalCompleted, "{status}");
    let log = responder.log();
    assert_eq!(log.signal_order(None), [ObjectRef::control_node("controller-0")], "{log}");
    let (_, data) = log.signals().next().expect("one signal");
    let sent = data.command.k0supdate.as_ref().expect("a k0supdate signal");
    assert_eq!((sent.version.as_str(), sent.forceupdate), (REMOVED_IN, true), "{log}");
}
