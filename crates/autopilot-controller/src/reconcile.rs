//! The Plan engine's shell: a kube-runtime `Controller` on Plans that also watches Nodes and
//! ControlNodes, so a node reporting progress moves the plan at once (no fixed poll).
//!
//! Runs only while this controller leads: when leadership is gained the watches start (and
//! re-list everything, which resumes any running plan); when it is lost they stop. Writes
//! are additionally safe against a stale or split-brain leader because every write carries a
//! resourceVersion precondition.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;

use autopilot_api::keys;
use autopilot_api::v1beta2::{ControlNode, Plan};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use autopilot_engine::plan::Policy;
use autopilot_engine::preflight::scheduler;
use autopilot_engine::snapshot::{self, SlimNode};
use autopilot_shell::leadership::Leadership;
use autopilot_shell::watch::cached as cached_watch;

impl Engine {
    /// An engine acting with `client` (admin credentials) and probing controllers with the
    /// same TLS settings (`config`); `api_address` is this controller's own API server.
    pub fn new(
        client: kube::Client,
        config: kube::Config,
        api_address: SocketAddr,
        policy: Policy,
        node_name: &str,
        metrics: crate::metrics::Metrics,
    ) -> anyhow::Result<Self> {
        let mut no_retry = config.clone();
        no_retry.default_retry = false;
        let eviction_client = kube::Client::try_from(no_retry)
            .map_err(|err| anyhow::anyhow!("creating the eviction client: {err}"))?;
        let http =
            autopilot_shell::https::HttpsClientBuilder::new(autopilot_shell::https::system_roots())
                .with_connect_timeout(crate::gates::LOOKUP_TIMEOUT)
                .build()
                .map_err(|err| anyhow::anyhow!("creating the HTTP client for gates: {err}"))?;
        Ok(Self {
            http,
            prober: autopilot_shell::probe::Prober::new(config, api_address),
            client,
            eviction_client,
            policy,
            instance: node_name.to_string(),
            metrics,
        })
    }

    /// Run the engine whenever this process leads (`leadership`), until `stop` is
    /// cancelled. A term ends when the lead is lost: the claim moves on, is released, or
    /// runs out without a renewal seen.
    pub async fn run_while_leader(
        self,
        mut leadership: Leadership,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        loop {
            // Wait to lead (or to stop).
            tokio::select! {
                acquired = leadership.acquired() => {
                    if !acquired {
                        return Ok(());
                    }
                }
                () = stop.cancelled() => return Ok(()),
            }
            info!("plan engine started (leader)");
            // One term as leader: it ends when the lead is lost or the engine stops.
            let term = stop.child_token();
            let lose = async {
                tokio::select! {
                    () = leadership.lost() => term.cancel(),
                    () = term.cancelled() => {}
                }
            };
            tokio::join!(self.clone().run_once(term.clone()), lose);
            // Another controller leads now and shows the plans.
            self.metrics.forget_plans();
            info!("plan engine stopped");
            if stop.is_cancelled() {
                return Ok(());
            }
        }
    }

    /// Run the plan controller and the central cordon/drain controllers until `stop` is
    /// cancelled.
    async fn run_once(self, stop: CancellationToken) {
        // One watch and one cache per kind of signal object serve both controllers: the
        // plan engine's watches pass every applied object that carries a signal on to the
        // cordon/drain controllers, which read the same caches.
        let (nodes, node_writer) = reflector::store::<SlimNode>();
        let (control_nodes, control_node_writer) = reflector::store::<ControlNode>();
        let (plans, plan_writer) = reflector::store::<Plan>();
        let (node_feed, signalled_nodes) = futures::channel::mpsc::unbounded();
        let (control_node_feed, signalled_control_nodes) = futures::channel::mpsc::unbounded();
        let (handoff, pokes) = crate::handoff::Handoff::new();
        let drain = crate::drain::run(
            self.client.clone(),
            self.eviction_client.clone(),
            self.policy.drain_timeout,
            // The term begins now: the drain's timeout counts at most from here.
            jiff::Timestamp::now(),
            self.metrics.drain_blocked.clone(),
            crate::drain::Watched {
                nodes: nodes.clone(),
                signalled_nodes,
                control_nodes: control_nodes.clone(),
                signalled_control_nodes,
                plans,
                handoff: handoff.clone(),
            },
            stop.clone(),
        );
        let caches = Caches {
            nodes: (nodes, node_writer, node_feed),
            control_nodes: (control_nodes, control_node_writer, control_node_feed),
            plans: plan_writer,
            handoff: (handoff, pokes),
        };
        let plans = self.run_plans(caches, stop);
        futures::join!(drain, plans);
    }

    /// Run the plan controller until `stop` is cancelled.
    ///
    /// Each watch backs off on its own errors, and the controller adds no backoff of its
    /// own: kube-runtime applies the controller's trigger backoff to the *merged* trigger
    /// streams, so an error of any one watch paused all of them. After an outage the Plan,
    /// Node and ControlNode watches each answer once with an error (410 Gone, then a
    /// re-list), and these pauses added up, one per watch, before the Plan created during
    /// the outage reached the engine (seconds with the 2 s cap, minutes with kube-runtime's
    /// default 30 s one).
    async fn run_plans(self, caches: Caches, stop: CancellationToken) {
        let client = self.client.clone();
        let config = watcher::Config::default();

        let (control_nodes, control_node_writer, control_node_feed) = caches.control_nodes;
        let control_node_events = triggers(
            feed_signalled(
                cached_watch(
                    control_node_writer,
                    Api::<ControlNode>::all(client.clone()),
                    config.clone(),
                    snapshot::slim_control_node,
                ),
                control_node_feed,
            ),
            control_node_fingerprint,
        );

        let (nodes, node_writer, node_feed) = caches.nodes;
        let node_events = triggers(
            feed_signalled(
                cached_watch(
                    node_writer,
                    Api::<SlimNode>::all(client.clone()),
                    config.clone(),
                    // Decoded slim (`SlimNode`): nothing more to drop.
                    |_| {},
                ),
                node_feed,
            ),
            node_fingerprint,
        );

        let (check_pods, check_pod_events, pod_templates, pod_template_events) =
            check_pod_watches(&client, &config);

        let plans: Api<Plan> = Api::all(client.clone());
        // A deleted plan is no longer shown in the metrics (the controller only hears of
        // applied objects, so deletions are caught here).
        let metrics = self.metrics.clone();
        let plan_store = caches.plans.as_reader();
        let plan_events = cached_watch(caches.plans, plans.clone(), config, |_| {})
            .inspect(move |event| {
                if let Ok(watcher::Event::Delete(plan)) = event
                    && plan.name_any() == keys::PLAN_NAME
                {
                    metrics.forget_plan(keys::PLAN_NAME);
                }
            })
            .applied_objects();
        let controller = Controller::for_stream(plan_events, plan_store)
            .trigger_backoff(autopilot_shell::retry::NoTriggerBackoff);
        // Node changes matter only once the Plan exists; mapping them to a missing Plan makes
        // the controller report (and delay) a reconcile of an object it does not have.
        let plan_store = controller.store();
        let to_autopilot_plan = move || {
            let plan = ObjectRef::new(keys::PLAN_NAME);
            plan_store.get(&plan).map(|_| plan)
        };
        let to_autopilot_plan_too = to_autopilot_plan.clone();
        let to_autopilot_plan_pods = to_autopilot_plan.clone();
        let to_autopilot_plan_templates = to_autopilot_plan.clone();
        let stores = Stores { control_nodes, nodes, check_pods, pod_templates };
        let (handoff, pokes) = caches.handoff;
        let context = Arc::new(Context::new(self, plans, stores, handoff));
        let drained = pokes.map(|()| ObjectRef::new(keys::PLAN_NAME));
        controller
            .reconcile_on(drained)
            .watches_stream(control_node_events, move |_| to_autopilot_plan())
            .watches_stream(node_events, move |_| to_autopilot_plan_too())
            .watches_stream(check_pod_events, move |_| to_autopilot_plan_pods())
            .watches_stream(pod_template_events, move |_| to_autopilot_plan_templates())
            .graceful_shutdown_on(stop.cancelled_owned())
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                if let Err(err) = result {
                    debug!(error = %err, "plan reconcile did not complete");
                }
            })
            .await;
    }
}

/// The caches of `scheduler` check Pods and their templates (only in the autopilot
/// namespace), with the trigger streams that fill them.
#[allow(clippy::type_complexity, reason = "two caches, each with the stream that fills it")]
fn check_pod_watches(
    client: &kube::Client,
    config: &watcher::Config,
) -> (
    Store<Pod>,
    impl futures::Stream<Item = Result<Pod, watcher::Error>> + Send + use<>,
    Store<ConfigMap>,
    impl futures::Stream<Item = Result<ConfigMap, watcher::Error>> + Send + use<>,
) {
    let (check_pods, check_pod_writer) = reflector::store::<Pod>();
    let check_pod_events = triggers(
        cached_watch(
            check_pod_writer,
            Api::<Pod>::namespaced(client.clone(), keys::NAMESPACE),
            config.clone().labels(scheduler::LABEL_RUN),
            |pod| pod.metadata.managed_fields = None,
        ),
        check_pod_fingerprint,
    );
    let (pod_templates, pod_template_writer) = reflector::store::<ConfigMap>();
    let pod_template_events = triggers(
        cached_watch(
            pod_template_writer,
            Api::<ConfigMap>::namespaced(client.clone(), keys::NAMESPACE),
            config.clone(),
            |config_map| config_map.metadata.managed_fields = None,
        ),
        config_map_fingerprint,
    );
    (check_pods, check_pod_events, pod_templates, pod_template_events)
}

/// The signal-object caches the plan engine fills, and where it passes on signalled objects.
struct Caches {
    nodes: (
        Store<SlimNode>,
        reflector::store::Writer<SlimNode>,
        futures::channel::mpsc::UnboundedSender<SlimNode>,
    ),
    control_nodes: (
        Store<ControlNode>,
        reflector::store::Writer<ControlNode>,
        futures::channel::mpsc::UnboundedSender<ControlNode>,
    ),
    /// Fills the Plan cache (the controller's own store, read by the drain too).
    plans: reflector::store::Writer<Plan>,
    /// What the drain hands over, and its requests for a pass.
    handoff: (crate::handoff::Handoff, futures::channel::mpsc::UnboundedReceiver<()>),
}

/// `events` unchanged; every applied object that carries a signal is also sent to `feed`
/// (the cordon/drain controllers' triggers). A feed nobody reads any more is ignored.
fn feed_signalled<K: Resource + Clone>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    feed: futures::channel::mpsc::UnboundedSender<K>,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> {
    events.inspect(move |event| {
        if let Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) = event
            && autopilot_api::signal::has_annotations(object.meta())
        {
            let _ = feed.unbounded_send(object.clone());
        }
    })
}

/// The objects of a watch whose change can matter to a plan: every deletion, every object of
/// a (re)list, and every update that changes the object's `fingerprint`. Heartbeats and
/// other irrelevant updates are dropped here, so they do not cause passes. (kube-runtime's
/// predicate filter cannot be used: a deleted object hashes like its last version, so a
/// deletion would be dropped and a target's disappearance would go unnoticed.)
fn triggers<K: Resource>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    fingerprint: fn(&K) -> u64,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> {
    let mut seen: HashMap<String, u64> = HashMap::new();
    events.filter_map(move |event| {
        let trigger = match event {
            Err(err) => Some(Err(err)),
            Ok(watcher::Event::Init) => {
                seen.clear();
                None
            }
            Ok(watcher::Event::InitDone) => None,
            Ok(watcher::Event::Delete(object)) => {
                seen.remove(object.meta().name.as_deref().unwrap_or_default());
                Some(Ok(object))
            }
            Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                let name = object.meta().name.clone().unwrap_or_default();
                let print = fingerprint(&object);
                (seen.insert(name, print) != Some(print)).then_some(Ok(object))
            }
        };
        std::future::ready(trigger)
    })
}

/// What about a Node can change a plan decision: labels (platform, selectors), the signal
/// and gate-check annotations and the Ready condition. Heartbeats change none of these, so they do not
/// trigger passes.
fn node_fingerprint(node: &SlimNode) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    node.metadata.uid.hash(&mut hasher);
    node.labels().hash(&mut hasher);
    autopilot_api::signal::annotation_values(node.annotations()).hash(&mut hasher);
    gate_check_annotations(node.annotations()).hash(&mut hasher);
    node.ready.hash(&mut hasher);
    node.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    hasher.finish()
}

/// The gate-check request and report annotations (DESIGN §15): a report is what a `check`
/// gate waits for.
fn gate_check_annotations(
    annotations: &std::collections::BTreeMap<String, String>,
) -> [Option<&String>; 4] {
    // And the pre-staging request and report: a report is what a `prestage` command waits for.
    [
        keys::ANNOTATION_GATE_CHECK,
        keys::ANNOTATION_GATE_REPORT,
        keys::ANNOTATION_PRESTAGE,
        keys::ANNOTATION_PRESTAGE_REPORT,
    ]
    .map(|key| annotations.get(key))
}

/// What about a ControlNode can change a plan decision: labels, signal annotations and the
/// published addresses.
fn control_node_fingerprint(control_node: &ControlNode) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    control_node.metadata.uid.hash(&mut hasher);
    control_node.labels().hash(&mut hasher);
    autopilot_api::signal::annotation_values(control_node.annotations()).hash(&mut hasher);
    gate_check_annotations(control_node.annotations()).hash(&mut hasher);
    control_node.annotations().get(keys::ANNOTATION_API_ADDRESS).hash(&mut hasher);
    control_node.internal_ip().hash(&mut hasher);
    control_node.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    hasher.finish()
}

/// What about a check Pod can change a plan decision: its phase and container states (an
/// ended Pod is a result), and whether it is being deleted.
fn check_pod_fingerprint(pod: &Pod) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    pod.metadata.uid.hash(&mut hasher);
    pod.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    if let Some(status) = &pod.status {
        status.phase.hash(&mut hasher);
        status.reason.hash(&mut hasher);
        for container in status.container_statuses.iter().flatten() {
            let terminated = container.state.as_ref().and_then(|s| s.terminated.as_ref());
            terminated.map(|t| (t.exit_code, &t.message)).hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// A ConfigMap's content (a template a check waits for may appear or change).
fn config_map_fingerprint(config_map: &ConfigMap) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    config_map.metadata.uid.hash(&mut hasher);
    config_map.data.hash(&mut hasher);
    hasher.finish()
}

mod context;
mod pace;
mod pass;

use context::{Context, Stores};
pub use context::{Engine, Error};
use pass::{error_policy, reconcile};

#[cfg(test)]
mod tests;
