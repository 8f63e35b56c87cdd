//! Executing the Plan engine's decisions: the status write and the effects.
//!
//! Order matters (see `plan` module docs): the complete status is written first with the
//! Plan's resourceVersion as a precondition, then signals are written with the target
//! object's resourceVersion as a precondition. A conflict on either means the snapshot was
//! stale: the pass stops and the engine re-observes.

use autopilot_api::signal;
use autopilot_api::v1beta2::{ControlNode, Plan, PlanStatus};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::plan::{EventKind, ObjectKind, SignalTarget};

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
    status: &PlanStatus,
) -> Result<Plan, Error> {
    let name = plan.name_any();
    let mut next = plan.clone();
    next.status = Some(status.clone());
    next.metadata.managed_fields = None;
    plans
        .replace_status(&name, &PostParams::default(), &next)
        .await
        .map_err(|source| api_error(format!("the status of Plan {name}"), source))
}

/// Write a signal onto its target object, with the cached resourceVersion as precondition.
pub async fn write_signal(
    client: &kube::Client,
    control_nodes: &Store<ControlNode>,
    nodes: &Store<Node>,
    target: &SignalTarget,
    data: &signal::SignalData,
) -> Result<(), Error> {
    let what = format!("{:?} {}", target.kind, target.name);
    let annotations = signal::to_annotations(data);
    let resource_version = match target.kind {
        ObjectKind::ControlNode => {
            control_nodes.get(&ObjectRef::new(&target.name)).and_then(|o| o.resource_version())
        }
        ObjectKind::Node => {
            nodes.get(&ObjectRef::new(&target.name)).and_then(|o| o.resource_version())
        }
    };
    let Some(resource_version) = resource_version else {
        return Err(Error::Gone { what });
    };
    let patch = json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": annotations,
        },
    });
    let params = PatchParams::default();
    let result = match target.kind {
        ObjectKind::ControlNode => Api::<ControlNode>::all(client.clone())
            .patch(&target.name, &params, &Patch::Merge(&patch))
            .await
            .map(drop),
        ObjectKind::Node => Api::<Node>::all(client.clone())
            .patch(&target.name, &params, &Patch::Merge(&patch))
            .await
            .map(drop),
    };
    result.map_err(|source| api_error(what, source))
}

/// Publish a Kubernetes Event about the Plan. Failures are returned for logging; they never
/// stop a plan.
pub async fn publish_event(
    recorder: &Recorder,
    plan: &Plan,
    kind: EventKind,
    reason: &str,
    note: &str,
) -> Result<(), kube::Error> {
    let event = Event {
        type_: match kind {
            EventKind::Normal => EventType::Normal,
            EventKind::Warning => EventType::Warning,
        },
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    recorder.publish(&event, &plan.object_ref(&())).await
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
