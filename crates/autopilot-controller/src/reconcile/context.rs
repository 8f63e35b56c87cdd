//! What every pass of the Plan engine shares: the engine's settings ([`Engine`]), a
//! leader term's context (its caches, its memory of what it wrote), and a pass's errors.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use autopilot_api::keys;
use autopilot_api::v1beta2::{ControlNode, Plan};
use autopilot_shell::events::Reporter;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::runtime::reflector::Store;

use crate::{effect, observe};

use super::pace;
use autopilot_engine::plan::{self, Policy};
use autopilot_engine::snapshot::SlimNode;
use autopilot_shell::events::EventPublisher;

/// Retry delay after a conflict (stale snapshot): the watch event that makes the snapshot
/// fresh usually arrives within milliseconds and triggers a pass by itself.
pub(super) const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// How long a written signal suppresses resends while the cache has not caught up. Watch
/// events arrive in milliseconds; a much older entry means the signal was removed again
/// before the cache saw it, and must be resent.
pub(super) const WRITTEN_MEMORY: Duration = Duration::from_secs(10);

/// How long the UID of a check Pod this term created is kept (see [`Context::created_pods`]).
/// The next pass records it in the Plan's status, which keeps it from then on; the memory
/// only has to outlast a status write the pace deferred or that failed for a while. A UID
/// forgotten before it was recorded costs a check run again, never a wrong result: the
/// Pod is then refused as unknown and made again.
pub(super) const CREATED_MEMORY: Duration = Duration::from_secs(3600);

/// How long into a leader term unfilled caches are expected (the first lists); after that a
/// pass that finds one not filled warns, and comes back after this long instead of shortly.
pub(super) const CACHE_READY_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of one reconcile pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Executing the decision failed.
    #[error(transparent)]
    Effect(#[from] effect::Error),
    /// The removed-API pre-check could not run.
    #[error(transparent)]
    Observe(#[from] autopilot_shell::removed_apis::Error),
    /// The engine's pass did not finish (its thread ended abnormally).
    #[error("{0}")]
    Engine(String),
}

/// The Plan engine: what each pass needs.
#[derive(Clone)]
pub struct Engine {
    pub(super) client: kube::Client,
    /// Like `client` but without kube's automatic retry of 429 answers, which are how a
    /// PodDisruptionBudget refuses an eviction: the drain must see them to back off and
    /// report the blocking budget instead of hanging in retries.
    pub(super) eviction_client: kube::Client,
    pub(super) prober: autopilot_shell::probe::Prober,
    pub(super) policy: Policy,
    pub(super) instance: String,
    pub(super) metrics: crate::metrics::Metrics,
    /// For `prometheus` gates (the system's trust roots; `http://` allowed).
    pub(super) http: autopilot_shell::https::HttpsClient,
}

pub(super) struct Context {
    pub(super) engine: Engine,
    pub(super) plans: Api<Plan>,
    pub(super) control_nodes: Store<ControlNode>,
    pub(super) nodes: Store<SlimNode>,
    /// `scheduler` check Pods (labelled with their run) and the ConfigMaps holding their
    /// templates, in [`keys::NAMESPACE`].
    pub(super) check_pods: Store<Pod>,
    pub(super) pod_templates: Store<ConfigMap>,
    pub(super) events: EventPublisher,
    /// Signals this engine wrote whose target the cache does not show yet, by target. A
    /// resend decided on a cache that lags behind our own write would only lose a conflict,
    /// so it is skipped; once the cache shows the signal (or after [`WRITTEN_MEMORY`]) the
    /// entry is dropped, and a signal that later disappears from the object is resent as usual.
    pub(super) written: std::sync::Mutex<
        BTreeMap<plan::SignalTarget, (autopilot_api::signal::SignalData, Instant)>,
    >,
    /// The UID of each check Pod this term created, by name, from the API server's answers
    /// to the create requests (with when), for the engine to record (`plan::CheckPods::
    /// created`): a result is taken only from the Pod the leader made.
    pub(super) created_pods: std::sync::Mutex<BTreeMap<String, (String, Instant)>>,
    /// The nodes the drain finished draining, for the engine to record and move on.
    pub(super) handoff: crate::handoff::Handoff,
    /// The retry delays of failed passes (see [`error_policy`]); reset by a pass that
    /// completes.
    pub(super) errors: std::sync::Mutex<autopilot_api::backoff::Capped>,
    /// The planner's views of the ControlNodes and Nodes, kept between passes.
    pub(super) views: std::sync::Mutex<Views>,
    /// When this leader term's controller started (see [`CACHE_READY_TIMEOUT`]).
    pub(super) started: Instant,
    /// The same, on the wall clock: every deadline the engine measures counts at most
    /// from then (`plan::Observed::term_started`), never from a time an earlier leader's
    /// clock wrote.
    pub(super) term_started: jiff::Timestamp,
    /// This term's status writes: the last one, and a status decided but not written yet
    /// (see [`pace::Pace`]).
    pub(super) status: std::sync::Mutex<StatusMemory>,
    /// How fast a big status's progress is written.
    pub(super) pace: pace::Pace,
}

/// See [`Context::status`].
#[derive(Default)]
pub(super) struct StatusMemory {
    /// The status the last pass decided, when its write was deferred: the next pass starts
    /// from it.
    pub(super) pending: Option<autopilot_api::v1beta2::PlanStatus>,
    /// This term's last status write.
    pub(super) written: Option<Written>,
}

/// A status write of this term.
pub(super) struct Written {
    /// The Plan's resourceVersion the write produced.
    pub(super) resource_version: Option<String>,
    /// A hash of the status written (as JSON).
    pub(super) hash: u64,
    /// The status's size as JSON: what paces the next write.
    pub(super) bytes: usize,
    /// When.
    pub(super) at: Instant,
}

/// See [`Context::views`].
#[derive(Default)]
pub(super) struct Views {
    pub(super) control_nodes: observe::View,
    pub(super) nodes: observe::View,
}

/// The caches a pass reads (see [`Context`]).
pub(super) struct Stores {
    pub(super) control_nodes: Store<ControlNode>,
    pub(super) nodes: Store<SlimNode>,
    pub(super) check_pods: Store<Pod>,
    pub(super) pod_templates: Store<ConfigMap>,
}

impl Context {
    /// The context of a leader term's passes: `engine`, the Plans' API and the caches.
    pub(super) fn new(
        engine: Engine,
        plans: Api<Plan>,
        stores: Stores,
        handoff: crate::handoff::Handoff,
    ) -> Self {
        let Stores { control_nodes, nodes, check_pods, pod_templates } = stores;
        let reporter = Reporter {
            controller: keys::FIELD_MANAGER.to_string(),
            instance: engine.instance.clone(),
        };
        Self {
            events: EventPublisher::start(engine.client.clone(), reporter, "plan"),
            engine,
            plans,
            control_nodes,
            nodes,
            check_pods,
            pod_templates,
            written: std::sync::Mutex::new(BTreeMap::new()),
            created_pods: std::sync::Mutex::new(BTreeMap::new()),
            handoff,
            errors: std::sync::Mutex::new(autopilot_api::backoff::Capped::default()),
            views: std::sync::Mutex::new(Views::default()),
            started: Instant::now(),
            term_started: jiff::Timestamp::now(),
            status: std::sync::Mutex::new(StatusMemory::default()),
            pace: pace::Pace::DEFAULT,
        }
    }
}
