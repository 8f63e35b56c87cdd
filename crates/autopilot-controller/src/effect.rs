//! Executing the Plan engine's decisions: the status write and the effects.
//!
//! Order matters (see `plan` module docs): the complete status is written first with the
//! Plan's resourceVersion as a precondition, then signals are written with the target
//! object's resourceVersion as a precondition. A conflict on either means the snapshot was
//! stale: the pass stops and the engine re-observes.

use autopilot_api::keys;
use autopilot_api::signal;
use autopilot_api::v1beta2::{ControlNode, Plan, PlanStatus};
use autopilot_shell::events::{Event, EventType};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};

use autopilot_engine::plan::{EventKind, ObjectKind, SignalTarget};
use autopilot_engine::snapshot::SlimNode;

/// Errors executing effects.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Someone else changed the object since it was observed; re-observe and re-decide.
    #[error("{what} changed since it was observed")]
    Conflict {
        /// Which object.
        what: String,
    },
    /// The object to signal is not in the cache (deleted since the snapshot).
    #[error("{what} is gone")]
    Gone {
        /// Which object.
        what: String,
    },
    /// What was to be written cannot be encoded as JSON.
    #[error("encoding {what}: {problem}")]
    Encode {
        /// What was being written.
        what: String,
        /// Why.
        problem: String,
    },
    /// The API server refused or could not be reached.
    #[error("writing {what}")]
    Api {
        /// What was being written.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// Whether the pass should simply be retried soon (a stale snapshot).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. } | Error::Gone { .. })
    }
}

fn api_error(what: String, source: kube::Error) -> Error {
    match &source {
        kube::Error::Api(status) if status.code == 409 => Error::Conflict { what },
        kube::Error::Api(status) if status.code == 404 => Error::Gone { what },
        _ => Error::Api { what, source },
    }
}

/// Replace the Plan's status (PUT on the status subresource, with the observed
/// resourceVersion, so a stale pass cannot overwrite a newer status).
pub async fn write_status(
    plans: &Api<Plan>,
    plan: &Plan,
    status: PlanStatus,
) -> Result<Plan, Error> {
    let name = plan.name_any();
    // Built, not cloned: the old status is not copied for nothing.
    let mut metadata = plan.metadata.clone();
    metadata.managed_fields = None;
    let next = Plan { metadata, spec: plan.spec.clone(), status: Some(status) };
    plans
        .replace_status(&name, &PostParams::default(), &next)
        .await
        .map_err(|source| api_error(format!("the status of Plan {name}"), source))
}

/// Write a signal onto its target object, with the resourceVersion of the snapshot the
/// decision was made on as precondition (`None`: the object was not in the snapshot).
pub async fn write_signal(
    client: &kube::Client,
    target: &SignalTarget,
    resource_version: Option<&str>,
    data: &signal::SignalData,
) -> Result<(), Error> {
    let what = format!("{:?} {}", target.kind, target.name);
    let Some(resource_version) = resource_version else {
        return Err(Error::Gone { what });
    };
    let result = match target.kind {
        ObjectKind::ControlNode => {
            let api = Api::<ControlNode>::all(client.clone());
            autopilot_shell::signal::write(&api, &target.name, Some(resource_version), data)
                .await
                .map(drop)
        }
        ObjectKind::Node => {
            let api = Api::<SlimNode>::all(client.clone());
            autopilot_shell::signal::write(&api, &target.name, Some(resource_version), data)
                .await
                .map(drop)
        }
    };
    result.map_err(|source| api_error(what, source))
}

/// Write a leader's request of the one request/report channel ([`autopilot_api::ask`]:
/// pre-staging, gate checks) onto its target object: a merge patch of the kind's request
/// annotation only, with the resourceVersion of the snapshot the decision was made on as
/// precondition (`None`: the object was not in the snapshot). A conflict means the object
/// changed since: the next pass decides again on what it then shows.
pub async fn write_request<K: autopilot_api::ask::Kind>(
    client: &kube::Client,
    target: &SignalTarget,
    resource_version: Option<&str>,
    request: &autopilot_api::ask::Request<K>,
) -> Result<(), Error> {
    let what = format!("the {} request on {:?} {}", K::NAME, target.kind, target.name);
    let Some(resource_version) = resource_version else {
        return Err(Error::Gone { what });
    };
    let patch = autopilot_api::ask::patch(K::REQUEST_ANNOTATION, request, resource_version)
        .map_err(|problem| Error::Encode { what: what.clone(), problem })?;
    let params = kube::api::PatchParams::default();
    let patch = kube::api::Patch::Merge(&patch);
    let result = match target.kind {
        ObjectKind::ControlNode => Api::<ControlNode>::all(client.clone())
            .patch(&target.name, &params, &patch)
            .await
            .map(drop),
        ObjectKind::Node => Api::<SlimNode>::all(client.clone())
            .patch(&target.name, &params, &patch)
            .await
            .map(drop),
    };
    result.map_err(|source| api_error(what, source))
}

/// Create a `scheduler` check's Pod in [`keys::NAMESPACE`]; returns the UID the API server
/// gave it. One that exists already (its name is stable per check and node) is success
/// without a UID: whose it is, the engine decides from the UIDs it recorded.
pub async fn create_pod(client: &kube::Client, pod: &Pod) -> Result<Option<String>, Error> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let params =
        PostParams { field_manager: Some(keys::FIELD_MANAGER.to_owned()), ..PostParams::default() };
    match Api::<Pod>::namespaced(client.clone(), keys::NAMESPACE).create(&params, pod).await {
        Ok(made) => Ok(made.metadata.uid),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
        Err(source) => Err(Error::Api { what: format!("Pod {}/{name}", keys::NAMESPACE), source }),
    }
}

/// Delete a check Pod, only the one with the UID `uid` when given (a precondition of the
/// delete). One already gone is success, and so is one whose UID is not `uid`: the Pod the
/// engine decided on is gone, and the next pass looks at the one there now. Default grace:
/// a running Pod's kubelet stops its container before the Pod goes.
pub async fn delete_pod(client: &kube::Client, name: &str, uid: Option<&str>) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: uid.map(|uid| kube::api::Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match Api::<Pod>::namespaced(client.clone(), keys::NAMESPACE).delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(Error::Api { what: format!("Pod {}/{name}", keys::NAMESPACE), source }),
    }
}

/// The Event for one of the engine's [`autopilot_engine::plan::Effect::Event`]s about the Plan
/// `regarding`, for the background [`EventPublisher`].
pub fn plan_event(
    regarding: ObjectReference,
    kind: EventKind,
    reason: &'static str,
    note: String,
) -> Event {
    let type_ = match kind {
        EventKind::Normal => EventType::Normal,
        EventKind::Warning => EventType::Warning,
    };
    Event { regarding, action: "Reconcile", type_, reason, note }
}
