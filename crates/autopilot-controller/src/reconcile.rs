//! The Plan engine's shell: a kube-runtime `Controller` on Plans that also watches Nodes and
//! ControlNodes, so a node reporting progress moves the plan at once (no fixed poll).
//!
//! Runs only while this controller leads: when leadership is gained the watches start (and
//! re-list everything, which resumes any running plan); when it is lost they stop. Writes
//! are additionally safe against a stale or split-brain leader because every write carries a
//! resourceVersion precondition.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use autopilot_api::keys;
use autopilot_api::v1beta2::{ControlNode, Plan, PlanStatus};
use autopilot_shell::events::Reporter;
use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{effect, observe};
use autopilot_engine::plan::{self, Effect, Observed, PlanView, Policy, Requeue};
use autopilot_engine::preflight::scheduler;
use autopilot_engine::snapshot;
use autopilot_shell::events::EventPublisher;
use autopilot_shell::watch::cached as cached_watch;

/// Retry delay after a conflict (stale snapshot): the watch event that makes the snapshot
/// fresh usually arrives within milliseconds and triggers a pass by itself.
const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// How long a written signal suppresses resends while the cache has not caught up. Watch
/// events arrive in milliseconds; a much older entry means the signal was removed again
/// before the cache saw it, and must be resent.
const WRITTEN_MEMORY: Duration = Duration::from_secs(10);

/// How long into a leader term unfilled caches are expected (the first lists); after that a
/// pass that finds one not filled warns, and comes back after this long instead of shortly.
const CACHE_READY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many rounds of controller probes one pass may ask for (see [`reconcile`]).
const PROBE_ROUNDS: usize = 2;

/// Errors of one reconcile pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Executing the decision failed.
    #[error(transparent)]
    Effect(#[from] effect::Error),
    /// The removed-API pre-check could not run.
    #[error(transparent)]
    Observe(#[from] autopilot_shell::removed_apis::Error),
}

/// The Plan engine: what each pass needs.
#[derive(Clone)]
pub struct Engine {
    client: kube::Client,
    /// Like `client` but without kube's automatic retry of 429 answers, which are how a
    /// PodDisruptionBudget refuses an eviction: the drain must see them to back off and
    /// report the blocking budget instead of hanging in retries.
    eviction_client: kube::Client,
    prober: autopilot_shell::probe::Prober,
    policy: Policy,
    instance: String,
    metrics: crate::metrics::Metrics,
}

struct Context {
    engine: Engine,
    plans: Api<Plan>,
    control_nodes: Store<ControlNode>,
    nodes: Store<Node>,
    /// `scheduler` check Pods (labelled with their run) and the ConfigMaps holding their
    /// templates, in [`keys::NAMESPACE`].
    check_pods: Store<Pod>,
    pod_templates: Store<ConfigMap>,
    events: EventPublisher,
    /// Signals this engine wrote whose target the cache does not show yet, by target. A
    /// resend decided on a cache that lags behind our own write would only lose a conflict,
    /// so it is skipped; once the cache shows the signal (or after [`WRITTEN_MEMORY`]) the
    /// entry is dropped, and a signal that later disappears from the object is resent as usual.
    written: std::sync::Mutex<
        BTreeMap<plan::SignalTarget, (autopilot_api::signal::SignalData, Instant)>,
    >,
    /// The retry delays of failed passes (see [`error_policy`]); reset by a pass that
    /// completes.
    errors: std::sync::Mutex<autopilot_api::backoff::Capped>,
    /// The planner's views of the ControlNodes and Nodes, kept between passes.
    views: std::sync::Mutex<Views>,
    /// When this leader term's controller started (see [`CACHE_READY_TIMEOUT`]).
    started: Instant,
}

/// See [`Context::views`].
#[derive(Default)]
struct Views {
    control_nodes: observe::View,
    nodes: observe::View,
}

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
        Ok(Self {
            prober: autopilot_shell::probe::Prober::new(config, api_address),
            client,
            eviction_client,
            policy,
            instance: node_name.to_string(),
            metrics,
        })
    }

    /// Run the engine whenever `leading` is `true`, until `stop` is cancelled.
    pub async fn run_while_leader(
        self,
        mut leading: watch::Receiver<bool>,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        loop {
            // Wait to lead (or to stop).
            tokio::select! {
                result = leading.wait_for(|leads| *leads) => {
                    if result.is_err() {
                        return Ok(());
                    }
                }
                () = stop.cancelled() => return Ok(()),
            }
            info!("plan engine started (leader)");
            // One term as leader: it ends when the lead is lost or the engine stops.
            let term = stop.child_token();
            let mut lost = leading.clone();
            let lose = async {
                tokio::select! {
                    _ = lost.wait_for(|leads| !*leads) => term.cancel(),
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
        let (nodes, node_writer) = reflector::store::<Node>();
        let (control_nodes, control_node_writer) = reflector::store::<ControlNode>();
        let (node_feed, signalled_nodes) = futures::channel::mpsc::unbounded();
        let (control_node_feed, signalled_control_nodes) = futures::channel::mpsc::unbounded();
        let drain = crate::drain::run(
            self.client.clone(),
            self.eviction_client.clone(),
            self.policy.drain_timeout,
            self.metrics.drain_blocked.clone(),
            crate::drain::Watched {
                nodes: nodes.clone(),
                signalled_nodes,
                control_nodes: control_nodes.clone(),
                signalled_control_nodes,
            },
            stop.clone(),
        );
        let caches = Caches {
            nodes: (nodes, node_writer, node_feed),
            control_nodes: (control_nodes, control_node_writer, control_node_feed),
        };
        let plans = self.run_plans(caches, stop);
        futures::join!(drain, plans);
    }

    /// Run the plan controller until `stop` is cancelled.
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
                    Api::<Node>::all(client.clone()),
                    config.clone(),
                    snapshot::slim_node,
                ),
                node_feed,
            ),
            node_fingerprint,
        );

        // `scheduler` check Pods and their templates, only in the autopilot namespace.
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

        // Each watch backs off on its own errors, and the controller adds no backoff of its
        // own: kube-runtime applies the controller's trigger backoff to the *merged* trigger
        // streams, so an error of any one watch paused all of them. After an outage the
        // Plan, Node and ControlNode watches each answer once with an error (410 Gone, then
        // a re-list), and these pauses added up, one per watch, before the Plan created
        // during the outage reached the engine (seconds with the 2 s cap, minutes with
        // kube-runtime's default 30 s one).
        let plans: Api<Plan> = Api::all(client.clone());
        let (plan_store, plan_writer) = reflector::store::<Plan>();
        // A deleted plan is no longer shown in the metrics (the controller only hears of
        // applied objects, so deletions are caught here).
        let metrics = self.metrics.clone();
        let plan_events = cached_watch(plan_writer, plans.clone(), config, |_| {})
            .inspect(move |event| {
                if let Ok(watcher::Event::Delete(plan)) = event
                    && plan.name_any() == keys::PLAN_NAME
                {
                    metrics.forget_plan(keys::PLAN_NAME);
                }
            })
            .applied_objects();
        let controller = Controller::for_stream(plan_events, plan_store)
            .trigger_backoff(observe::NoTriggerBackoff);
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
        let context = Arc::new(Context {
            events: EventPublisher::start(
                client.clone(),
                Reporter {
                    controller: keys::FIELD_MANAGER.to_string(),
                    instance: self.instance.clone(),
                },
                "plan",
            ),
            engine: self,
            plans,
            control_nodes,
            nodes,
            check_pods,
            pod_templates,
            written: std::sync::Mutex::new(BTreeMap::new()),
            errors: std::sync::Mutex::new(autopilot_api::backoff::Capped::default()),
            views: std::sync::Mutex::new(Views::default()),
            started: Instant::now(),
        });
        controller
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

/// The signal-object caches the plan engine fills, and where it passes on signalled objects.
struct Caches {
    nodes: (
        Store<Node>,
        reflector::store::Writer<Node>,
        futures::channel::mpsc::UnboundedSender<Node>,
    ),
    control_nodes: (
        Store<ControlNode>,
        reflector::store::Writer<ControlNode>,
        futures::channel::mpsc::UnboundedSender<ControlNode>,
    ),
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
/// annotations and the Ready condition. Heartbeats change none of these, so they do not
/// trigger passes.
fn node_fingerprint(node: &Node) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    node.metadata.uid.hash(&mut hasher);
    node.labels().hash(&mut hasher);
    autopilot_api::signal::annotation_values(node.annotations()).hash(&mut hasher);
    snapshot::is_node_ready(node).hash(&mut hasher);
    node.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    hasher.finish()
}

/// What about a ControlNode can change a plan decision: labels, signal annotations and the
/// published addresses.
fn control_node_fingerprint(control_node: &ControlNode) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    control_node.metadata.uid.hash(&mut hasher);
    control_node.labels().hash(&mut hasher);
    autopilot_api::signal::annotation_values(control_node.annotations()).hash(&mut hasher);
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

/// The caches a pass needs that the first list has not filled yet: the ControlNodes and
/// Nodes always, the check Pods and their templates (in [`keys::NAMESPACE`]) when
/// `check_pods` (see [`uses_check_pods`]).
fn unfilled_caches(ctx: &Context, check_pods: bool) -> Vec<&'static str> {
    let mut unfilled = Vec::new();
    if !is_filled(&ctx.control_nodes) {
        unfilled.push("ControlNodes");
    }
    if !is_filled(&ctx.nodes) {
        unfilled.push("Nodes");
    }
    if check_pods && !is_filled(&ctx.check_pods) {
        unfilled.push("check Pods");
    }
    if check_pods && !is_filled(&ctx.pod_templates) {
        unfilled.push("check Pod templates (ConfigMaps)");
    }
    unfilled
}

/// Whether `store` has been filled by its first list (without waiting for it).
fn is_filled<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// Whether a pass over `plan` reads check Pods and templates: its spec or its run has a
/// `scheduler` check. (Other plans do not wait for those caches.)
fn uses_check_pods(plan: &Plan) -> bool {
    let in_spec = scheduler::in_spec(&plan.spec);
    let in_status = plan.status.iter().flat_map(|s| &s.commands).any(|command| {
        command.preflight.as_ref().is_some_and(|preflight| !preflight.pods.is_empty())
    });
    in_spec || in_status
}

/// One pass: observe, decide, write the status, perform the effects. Its span carries the
/// plan's name, id and state, so every line logged during the pass names the plan.
#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(
        plan = %plan.name_any(),
        plan_id = %plan.spec.id,
        state = %plan.status.as_ref().map(|s| s.state).unwrap_or_default(),
    )
)]
async fn reconcile(plan: Arc<Plan>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Decisions need complete caches: an empty Node cache would look like missing targets,
    // and a missing template or check Pod must be missing, not merely not listed yet.
    // Checked, not awaited: the watches that fill these caches are this controller's own
    // triggers, and they did not fill while a pass waited for them. The first pass of every
    // leader term waited out a 5 s timeout that way (the caches were filled the moment the
    // timer woke the controller). A pass that finds them not filled yet comes back shortly.
    let check_pods_needed = uses_check_pods(&plan);
    let unfilled = unfilled_caches(&ctx, check_pods_needed);
    if !unfilled.is_empty() {
        let waited = ctx.started.elapsed();
        if waited < CACHE_READY_TIMEOUT {
            debug!(caches = ?unfilled, "the caches are not filled yet");
            return Ok(Action::requeue(CONFLICT_RETRY));
        }
        warn!(
            caches = ?unfilled,
            ?waited,
            "the caches are still not filled (can this controller list and watch them?)"
        );
        return Ok(Action::requeue(CACHE_READY_TIMEOUT));
    }
    let name = plan.name_any();
    let uid = plan.uid().unwrap_or_default();
    let view = PlanView {
        name: &name,
        uid: &uid,
        generation: plan.metadata.generation.unwrap_or_default(),
        spec: &plan.spec,
        status: plan.status.as_ref(),
        steering: plan::Steering::of(plan.annotations()),
        accepted_warnings: plan
            .annotations()
            .get(autopilot_api::keys::ANNOTATION_ACCEPT_WARNINGS)
            .map(String::as_str),
    };

    // The views are taken for the pass and put back when it completes; a pass that fails
    // leaves empty ones, and the next pass builds them afresh.
    let mut views = std::mem::take(&mut *ctx.views.lock().unwrap_or_else(PoisonError::into_inner));
    views.control_nodes.refresh_control_nodes(&ctx.control_nodes);
    views.nodes.refresh_nodes(&ctx.nodes);
    let (control_nodes, control_node_versions) =
        (&views.control_nodes.objects, &views.control_nodes.versions);
    let (nodes, node_versions) = (&views.nodes.objects, &views.nodes.versions);
    let (check_pods, pod_templates) =
        observe::collect_check_pods(&ctx.check_pods, &ctx.pod_templates);
    let no_readiness = BTreeMap::new();
    let mut observed = Observed {
        now: jiff::Timestamp::now(),
        control_nodes,
        nodes,
        readiness: &no_readiness,
        removed_apis: None,
        check_pods: plan::CheckPods { pods: &check_pods, templates: &pod_templates },
    };

    // The removed-API check is asked before the pass; controller readiness as the pass
    // needs it: a pass that may signal a controller names the ones it found no probe result
    // for, and runs again with them probed (a new name in that second pass gets one more
    // round; one still unprobed after that counts as not ready, which only holds).
    let versions = plan::removed_api_check_versions(view);
    let removed_apis = if versions.is_empty() {
        None
    } else {
        let started = std::time::Instant::now();
        let uses =
            autopilot_shell::removed_apis::observe_removed_apis(&ctx.engine.client, &versions)
                .await?;
        debug!(plan = %name, ?versions, took = ?started.elapsed(), "checked removed APIs");
        Some(uses)
    };
    observed.removed_apis = removed_apis.as_deref();
    observed.now = jiff::Timestamp::now();
    let mut readiness = BTreeMap::new();
    let mut transition = plan::step(view, &observed, &ctx.engine.policy);
    for _ in 0..PROBE_ROUNDS {
        if transition.unprobed.is_empty() {
            break;
        }
        let started = std::time::Instant::now();
        readiness
            .extend(ctx.engine.prober.probe_all(&transition.unprobed, &ctx.control_nodes).await);
        debug!(plan = %name, controllers = ?transition.unprobed, took = ?started.elapsed(), "probed controllers");
        let probed = Observed { readiness: &readiness, now: jiff::Timestamp::now(), ..observed };
        transition = plan::step(view, &probed, &ctx.engine.policy);
    }

    let current = plan.status.clone().unwrap_or_default();
    // Only the Plan named `autopilot` runs; an ignored Plan would show as a plan that never
    // starts.
    let metrics = (name == keys::PLAN_NAME).then_some(&ctx.engine.metrics);
    if transition.status != current {
        effect::write_status(&ctx.plans, &plan, &transition.status).await?;
        log_changes(&name, &current, &transition.status);
        if let Some(metrics) = metrics {
            metrics.record_status(&name, &current, &transition.status);
        }
    } else if let Some(metrics) = metrics {
        metrics.observe_plan(&name, &current);
    }
    // Signals go out one by one in the machine's order (sorted by name), so nodes see them in
    // the order the plan chose; events are queued for the background publisher.
    forget_visible_signals(&ctx, control_nodes, nodes);
    for effect in &transition.effects {
        match effect {
            Effect::Signal { target, data } if already_written(&ctx, target, data) => {
                debug!(plan = %name, node = %target.name, "signal written, cache not caught up yet");
            }
            Effect::Signal { target, data } => {
                let versions = match target.kind {
                    plan::ObjectKind::ControlNode => control_node_versions,
                    plan::ObjectKind::Node => node_versions,
                };
                let version = versions.get(&target.name).map(String::as_str);
                effect::write_signal(&ctx.engine.client, target, version, data).await?;
                ctx.engine.metrics.signals_written.inc();
                remember_written(&ctx, target, data);
                info!(plan = %name, node = %target.name, kind = ?target.kind, command = data.command.id, "signalled node");
            }
            Effect::CreatePod(pod) => {
                effect::create_pod(&ctx.engine.client, pod).await?;
                info!(plan = %name, pod = pod.metadata.name.as_deref().unwrap_or_default(), node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default(), "created check Pod");
            }
            Effect::DeletePod { name: pod } => {
                effect::delete_pod(&ctx.engine.client, pod).await?;
                debug!(plan = %name, %pod, "deleted check Pod");
            }
            Effect::Event { kind, reason, note } => {
                ctx.events.publish(effect::plan_event(
                    plan.object_ref(&()),
                    *kind,
                    reason,
                    note.clone(),
                ));
            }
        }
    }
    ctx.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner).reset();
    let requeue = transition.requeue;
    drop(transition);
    *ctx.views.lock().unwrap_or_else(PoisonError::into_inner) = views;
    Ok(match requeue {
        Requeue::OnChange => Action::await_change(),
        Requeue::After(delay) => Action::requeue(delay),
    })
}

fn already_written(
    ctx: &Context,
    target: &plan::SignalTarget,
    data: &autopilot_api::signal::SignalData,
) -> bool {
    let written = ctx.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    written.get(target).is_some_and(|(written, _)| written == data)
}

fn remember_written(
    ctx: &Context,
    target: &plan::SignalTarget,
    data: &autopilot_api::signal::SignalData,
) {
    let mut written = ctx.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    written.insert(target.clone(), (data.clone(), Instant::now()));
}

/// Drop the memory of signals the cache now shows on their objects (see `Context::written`).
fn forget_visible_signals(
    ctx: &Context,
    control_nodes: &BTreeMap<String, plan::TargetObject>,
    nodes: &BTreeMap<String, plan::TargetObject>,
) {
    let mut written = ctx.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    written.retain(|target, (data, at)| {
        if at.elapsed() > WRITTEN_MEMORY {
            return false;
        }
        let objects = match target.kind {
            plan::ObjectKind::ControlNode => control_nodes,
            plan::ObjectKind::Node => nodes,
        };
        let visible = objects.get(&target.name).is_some_and(|object| match &object.signal {
            plan::ObservedSignal::Valid(seen) => {
                seen.plan_id == data.plan_id
                    && seen.run_id == data.run_id
                    && seen.created == data.created
                    && seen.command == data.command
            }
            plan::ObservedSignal::Invalid(_) | plan::ObservedSignal::None => false,
        });
        !visible
    });
}

/// What to do after a failed pass. A conflict is retried at once (the watch event that
/// makes the snapshot fresh is on its way); any other failure, typically an API server that
/// does not answer, on the short capped backoff of the watches (`backoff::CAP`), so a pass
/// that failed during an outage runs again within that cap of the server answering. A
/// longer fixed delay would add itself to every outage: nothing else triggers the pass if
/// the resumed watches bring no change.
fn error_policy(plan: Arc<Plan>, error: &Error, ctx: Arc<Context>) -> Action {
    match error {
        Error::Effect(err) if err.is_conflict() => {
            debug!(plan = %plan.name_any(), error = %err, "stale snapshot, re-observing");
            Action::requeue(CONFLICT_RETRY)
        }
        _ => {
            let delay =
                ctx.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next_delay();
            warn!(plan = %plan.name_any(), error = %autopilot_api::text::error_chain(error), retry_in = ?delay, "plan pass failed, retrying");
            Action::requeue(delay)
        }
    }
}

/// Log each plan, command and target state change once, at info.
fn log_changes(plan: &str, before: &PlanStatus, after: &PlanStatus) {
    if before.state != after.state {
        info!(plan, from = before.state.as_str(), to = after.state.as_str(), "plan state changed");
    }
    for command in &after.commands {
        let old = before.commands.iter().find(|c| c.id == command.id);
        if old.map(|c| c.state) != Some(command.state) {
            info!(
                plan,
                command = command.id,
                from = old.map(|c| c.state.as_str()).unwrap_or(""),
                to = command.state.as_str(),
                reason = command.description.as_deref().or(command.reason.as_deref()).unwrap_or(""),
                "command state changed"
            );
        }
        let targets = |c: &autopilot_api::v1beta2::PlanCommandStatus| {
            let mut all = Vec::new();
            if let Some(k) = &c.k0supdate {
                all.extend(k.controllers.iter().chain(k.workers.iter()).cloned());
            }
            if let Some(a) = &c.airgapupdate {
                all.extend(a.workers.iter().cloned());
            }
            all
        };
        let old_targets = old.map(targets).unwrap_or_default();
        for target in targets(command) {
            let was = old_targets.iter().find(|t| t.name == target.name).map(|t| t.state);
            if was != Some(target.state) {
                info!(
                    plan,
                    command = command.id,
                    node = %target.name,
                    phase = target.phase.map_or("", |p| p.as_str()),
                    from = was.map(|s| s.as_str()).unwrap_or(""),
                    to = target.state.as_str(),
                    reason = target.reason.as_deref().unwrap_or(""),
                    "node state changed"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
