//! Executing the Plan engine's decisions: the status write and the effects.
//!
//! Order matters (see `plan` module docs): the complete status is written first with the
//! Plan's resourceVersion as a precondition, then signals are written with the target
//! object's resourceVersion as a precondition. A conflict on either means the snapshot was
//! stale: the pass stops and the engine re-observes.

use autopilot_api::keys;
use autopilot_api::signal;
use autopilot_api::text::truncate;
use autopilot_api::v1beta2::{ControlNode, Plan, PlanStatus};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::warn;

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

/// Write a signal onto its target object, with the resourceVersion of the snapshot the
/// decision was made on as precondition (`None`: the object was not in the snapshot).
pub async fn write_signal(
    client: &kube::Client,
    target: &SignalTarget,
    resource_version: Option<&str>,
    data: &signal::SignalData,
) -> Result<(), Error> {
    let what = format!("{:?} {}", target.kind, target.name);
    let annotations = signal::to_annotations(data);
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

/// Create a `scheduler` check's Pod in [`keys::NAMESPACE`]; one that exists already (its name
/// is stable per check and node) is success.
pub async fn create_pod(client: &kube::Client, pod: &Pod) -> Result<(), Error> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let params =
        PostParams { field_manager: Some(keys::FIELD_MANAGER.to_owned()), ..PostParams::default() };
    match Api::<Pod>::namespaced(client.clone(), keys::NAMESPACE).create(&params, pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(Error::Api { what: format!("Pod {}/{name}", keys::NAMESPACE), source }),
    }
}

/// Delete a check Pod (one already gone is success). Default grace: a running Pod's
/// kubelet stops its container before the Pod goes.
pub async fn delete_pod(client: &kube::Client, name: &str) -> Result<(), Error> {
    match Api::<Pod>::namespaced(client.clone(), keys::NAMESPACE)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(Error::Api { what: format!("Pod {}/{name}", keys::NAMESPACE), source }),
    }
}

/// A Kubernetes Event about a Plan, waiting to be published.
#[derive(Clone, Debug)]
pub struct PlanEvent {
    /// The Plan the event is about.
    pub regarding: ObjectReference,
    /// `Normal` or `Warning`.
    pub kind: EventKind,
    /// PascalCase reason.
    pub reason: &'static str,
    /// Human-readable note.
    pub note: String,
}

/// How many events may wait for publication before new ones are dropped (with a log line).
/// Events are informational; a burst must never slow down or block a plan.
const EVENT_QUEUE: usize = 4096;

/// Publishes Plan events in the background, in order, one `events.k8s.io/v1` Event per
/// state change (unlike kube-runtime's `Recorder`, which folds events with the same reason
/// into a series and would lose each node's note).
#[derive(Clone)]
pub struct EventPublisher {
    queue: tokio::sync::mpsc::Sender<PlanEvent>,
}

impl EventPublisher {
    /// Start the background publisher; it ends when every handle is dropped.
    pub fn start(client: kube::Client, reporter: String, instance: String) -> Self {
        let (queue, mut events) = tokio::sync::mpsc::channel::<PlanEvent>(EVENT_QUEUE);
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                if let Err(err) = publish(&client, &reporter, &instance, &event).await {
                    warn!(reason = event.reason, error = %err, "cannot publish plan event");
                }
            }
        });
        Self { queue }
    }

    /// Queue an event; never waits.
    pub fn publish(&self, event: PlanEvent) {
        if let Err(err) = self.queue.try_send(event) {
            warn!(error = %err, "plan event queue full, dropping an event");
        }
    }
}

async fn publish(
    client: &kube::Client,
    reporter: &str,
    instance: &str,
    event: &PlanEvent,
) -> Result<(), kube::Error> {
    let namespace =
        event.regarding.namespace.clone().unwrap_or_else(|| keys::EVENT_NAMESPACE.to_string());
    let now = jiff::Timestamp::now();
    let name =
        format!("{}.{:x}", event.regarding.name.as_deref().unwrap_or("plan"), now.as_nanosecond());
    let body = K8sEvent {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        action: Some("Reconcile".to_string()),
        reason: Some(event.reason.to_string()),
        note: Some(truncate(&event.note, 1000)),
        type_: Some(match event.kind {
            EventKind::Normal => "Normal".to_string(),
            EventKind::Warning => "Warning".to_string(),
        }),
        regarding: Some(event.regarding.clone()),
        reporting_controller: Some(reporter.to_string()),
        reporting_instance: Some(instance.to_string()),
        event_time: Some(MicroTime(now)),
        ..Default::default()
    };
    Api::<K8sEvent>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &body)
        .await
        .map(drop)
}
