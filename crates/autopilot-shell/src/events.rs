//! Publishing `events.k8s.io/v1` Events: one Event per call, never folded into a series
//! (unlike kube-runtime's `Recorder`, which folds events with the same reason and would lose
//! each note).
//!
//! [`publish`] writes one Event and waits for the API server (the updater, whose Events
//! follow its checks in order); [`EventPublisher`] queues them for a background task (the
//! Plan engine, which must never wait on an Event).

use autopilot_api::keys;
use autopilot_api::text::truncate;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tracing::warn;

/// The longest note written; a longer one is cut at a char boundary and marked with `…`
/// (the API server refuses notes over 1 KiB).
pub const NOTE_MAX_BYTES: usize = 1000;

/// How many events may wait for publication before new ones are dropped (with a log line).
/// Events are informational; a burst must never slow down or block their producer.
const QUEUE: usize = 4096;

/// Kubernetes Event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Progress.
    Normal,
    /// Something an operator should look at.
    Warning,
}

impl EventType {
    /// The `type` field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// One Event to publish.
#[derive(Clone, Debug)]
pub struct Event {
    /// The object the Event is about. Its namespace is the Event's (else
    /// [`keys::EVENT_NAMESPACE`]); its name (else its kind, lowercased) starts the Event's
    /// name.
    pub regarding: ObjectReference,
    /// What was done (`Reconcile`, `CheckForUpdate`).
    pub action: &'static str,
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// PascalCase reason.
    pub reason: &'static str,
    /// Human-readable note; cut to [`NOTE_MAX_BYTES`].
    pub note: String,
}

/// Who publishes: `reportingController` and `reportingInstance`.
#[derive(Clone, Debug)]
pub struct Reporter {
    /// `reportingController`.
    pub controller: String,
    /// `reportingInstance`.
    pub instance: String,
}

/// Write `event` as an Event, named `<regarding name>.<now in nanoseconds, hex>` and stamped
/// with the current time.
pub async fn publish(
    client: &kube::Client,
    reporter: &Reporter,
    event: &Event,
) -> Result<(), kube::Error> {
    let Event { regarding, action, type_, reason, note } = event;
    let namespace =
        regarding.namespace.clone().unwrap_or_else(|| keys::EVENT_NAMESPACE.to_string());
    let now = jiff::Timestamp::now();
    let prefix = match &regarding.name {
        Some(name) => name.clone(),
        None => regarding.kind.as_deref().unwrap_or_default().to_ascii_lowercase(),
    };
    let body = K8sEvent {
        metadata: ObjectMeta {
            name: Some(format!("{prefix}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        action: Some((*action).to_string()),
        reason: Some((*reason).to_string()),
        note: Some(truncate(note, NOTE_MAX_BYTES)),
        type_: Some(type_.as_str().to_string()),
        regarding: Some(regarding.clone()),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        event_time: Some(MicroTime(now)),
        ..Default::default()
    };
    Api::<K8sEvent>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &body)
        .await
        .map(drop)
}

/// Publishes Events in the background, in order; cheap to clone.
#[derive(Clone, Debug)]
pub struct EventPublisher {
    queue: tokio::sync::mpsc::Sender<Event>,
    what: &'static str,
}

impl EventPublisher {
    /// Start the background publisher; it ends when every handle is dropped. `what` names
    /// the events in log lines (`plan`: "cannot publish plan event").
    pub fn start(client: kube::Client, reporter: Reporter, what: &'static str) -> Self {
        let (queue, mut events) = tokio::sync::mpsc::channel::<Event>(QUEUE);
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                if let Err(err) = publish(&client, &reporter, &event).await {
                    warn!(reason = event.reason, error = %err, "cannot publish {what} event");
                }
            }
        });
        Self { queue, what }
    }

    /// Queue an event; never waits.
    pub fn publish(&self, event: Event) {
        if let Err(err) = self.queue.try_send(event) {
            warn!(error = %err, "{} event queue full, dropping an event", self.what);
        }
    }
}
