//! Central cordon and drain: the shell around [`autopilot_engine::cordon::decide`].
//!
//! On the leader, one kube-runtime controller per signal-object kind (Nodes and ControlNodes)
//! looks at each object's signal. In `Cordoning` it cordons the machine's Node (marking it as
//! cordoned by autopilot) and evicts its pods through the Eviction API, so
//! PodDisruptionBudgets are respected: the pods it found at its first list after the cordon
//! (kept in memory per signal, [`Context::found`]), all at once, each guarded by its UID. A
//! refused eviction, a pod held (it would be lost) or a pod still terminating is looked at
//! again (refusals and holds with backoff) and named in the node's signal status `reason`. A
//! drain still blocked `--drain-timeout` after the node entered `Cordoning` fails the node
//! (`Failed`, naming the pods), which uncordons it: its binary was not touched yet. When the
//! Node is drained it hands the node to the plan engine ([`crate::handoff`]), which records
//! the drain in the Plan status and only then writes `ApplyingUpdate` (the node restarts only
//! on a drain the status records). In `UnCordoning` it uncordons nodes autopilot cordoned
//! and writes `Completed`. Every write carries a resourceVersion precondition.
//!
//! How far it drains is the `drain` of the signal's command in the current run
//! ([`DrainPolicy`]: `Always`, `IfPossible`, `Never`; [`autopilot_engine::cordon`] decides);
//! a node left with pods goes on to `ApplyingUpdate` with the note as its signal's reason.
//!
//! Only signals the leader wrote are drained: a `Cordoning` signal that names no run, whose
//! `runId` is not the `status.runId` of the Plan named `autopilot` (or when there is no such
//! Plan), that does not match that run's frozen command and targets, or that the Plan status
//! does not record for the node (`autopilot_engine::authorize`) is failed with the reason,
//! never cordoned. The Plan is
//! looked at when (and only when) a `Cordoning` signal names a run. The leader's Plan cache
//! settles it when it shows the signal's run and authorizes the signal; anything else is
//! decided on a GET: the engine writes a run's `status.runId` (and a rollback's targets)
//! before any signal of that run, so a read made after seeing the signal can never show an
//! older run than the signal's own, while the cache may lag behind and would fail a signal of
//! the current run. A read that gets no definitive answer (a `403` from an API server still
//! starting, a `404` of the Plan resource type, no answer at all) is retried, never taken
//! for "no Plan" ([`observe_run`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use autopilot_api::backoff::Capped;
use autopilot_api::keys;
use autopilot_api::signal::{self, SignalData, SignalPhase, SignalStatus};
use autopilot_api::v1beta2::{ControlNode, Plan};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector;
use kube::{Resource, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use autopilot_api::v1beta2::DrainOptions;
use autopilot_engine::authorize::{self, Role};
use autopilot_engine::cordon::{
    self, Blocked, Controller as PodController, DrainPolicy, Facts, PlanRun, PodRef, Run, Step,
};
use autopilot_engine::plan::selector::LabelSelector;
use autopilot_engine::plan::{ObjectKind, SignalTarget};
use autopilot_engine::snapshot::{self, SlimNode};
use autopilot_shell::retry::{self, WatchBackoff};

use crate::handoff::Handoff;

/// How long one eviction request may take before the attempt counts as failed.
const EVICTION_TIMEOUT: Duration = Duration::from_secs(30);

/// First wait after a refused eviction; doubles per refusal up to [`MAX_BLOCKED_RETRY`].
const FIRST_BLOCKED_RETRY: Duration = Duration::from_secs(1);

/// Longest wait between eviction attempts while a PodDisruptionBudget refuses them.
const MAX_BLOCKED_RETRY: Duration = Duration::from_secs(30);

/// How soon to look again while evicted pods are terminating (pod deletions are not events
/// of the signal object, so this is a timed re-check).
const TERMINATING_RECHECK: Duration = Duration::from_secs(1);

/// How many evictions of one node's pods are under way at once (`kubectl drain` sends them
/// all at once; this bounds the requests of a node with very many pods).
const EVICTION_CONCURRENCY: usize = 32;

/// How many decide-act rounds one reconcile performs before handing back to the queue.
const MAX_ROUNDS: usize = 8;

/// How many nodes the leader cordons, drains or uncordons at once (per kind); more wait
/// their turn. A plan's `limits.concurrent` bounds the nodes in flight; this bounds the
/// leader's memory when many signalled objects change at once (each pass holds a task).
const CONCURRENCY: u16 = 64;

/// The caches the plan engine's watches fill, and the signalled objects they pass on.
pub struct Watched {
    /// Every Node (slimmed).
    pub nodes: reflector::Store<SlimNode>,
    /// Each applied Node that carries a signal, as the watch sees it.
    pub signalled_nodes: futures::channel::mpsc::UnboundedReceiver<SlimNode>,
    /// Every ControlNode (slimmed).
    pub control_nodes: reflector::Store<ControlNode>,
    /// Each applied ControlNode that carries a signal.
    pub signalled_control_nodes: futures::channel::mpsc::UnboundedReceiver<ControlNode>,
    /// The Plans (see [`observe_run`]).
    pub plans: reflector::Store<Plan>,
    /// Where a finished drain is handed to the plan engine.
    pub handoff: Handoff,
}

/// Errors of one cordon/drain pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("{what}")]
    Api {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// A signal object kind the leader cordons for.
pub trait SignalObject:
    Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The machine's Node name, when the machine runs a kubelet.
    fn kubelet_node(&self) -> Option<String>;

    /// The object itself when it is that Node (a worker's signal is on its Node): its
    /// cordon facts and resourceVersion are then read from it instead of a GET.
    fn as_node(&self) -> Option<&SlimNode> {
        None
    }

    /// The object, when it is the Node `node` as a cordon or uncordon left it (the patch's
    /// answer): the next round reads it instead of a GET.
    fn from_node(_node: SlimNode) -> Option<Self> {
        None
    }
}

impl SignalObject for SlimNode {
    fn kubelet_node(&self) -> Option<String> {
        Some(self.name_any())
    }

    fn as_node(&self) -> Option<&SlimNode> {
        Some(self)
    }

    fn from_node(node: SlimNode) -> Option<Self> {
        Some(node)
    }
}

impl SignalObject for ControlNode {
    fn kubelet_node(&self) -> Option<String> {
        let mode = self.annotations().get(keys::ANNOTATION_MODE).map(String::as_str);
        (mode == Some(keys::MODE_CONTROLLER_WORKER))
            .then(|| self.hostname().map(str::to_string).unwrap_or_else(|| self.name_any()))
    }
}

struct Context {
    client: kube::Client,
    /// The plan engine's Plan cache.
    plans: reflector::Store<Plan>,
    /// A client that does not retry 429 answers (see `reconcile::Engine`).
    eviction_client: kube::Client,
    /// The backoff of each object whose evictions were refused (since its last success).
    refusals: Mutex<HashMap<String, Capped>>,
    /// `--drain-timeout`: how long a drain may stay blocked before the node fails.
    drain_timeout: Duration,
    /// When this leader's term began, on its own clock: a drain's timeout counts at most
    /// from then (`cordon::DrainClock`), never from a time an earlier leader's clock wrote.
    term_started: jiff::Timestamp,
    /// Consecutive failed passes (API errors) per object, for their backoff.
    failures: Mutex<HashMap<String, Capped>>,
    /// Per object being drained: the signal (its `created`) and the UIDs of the pods on its
    /// node when that signal's drain began ([`Context::found`]).
    found: Mutex<HashMap<String, (String, BTreeSet<String>)>>,
    /// The `drain_blocked` metric: how many objects have a refusal recorded in `refusals`.
    drain_blocked: Gauge,
    /// The versions of each object this controller wrote over.
    superseded: Mutex<Superseded>,
    /// Where a finished drain is handed to the plan engine.
    handoff: Handoff,
}

/// The resourceVersions of each object (by kind and name) the drain wrote over (a cordon, uncordon or phase
/// written with that version as its precondition), until the cache shows a version it did
/// not write over: the watch delivers an object's versions in order, so that one is newer
/// than all of them, and they are forgotten. It holds only objects being drained.
#[derive(Debug, Default)]
struct Superseded(HashMap<String, Vec<String>>);

impl Superseded {
    /// Whether `version` of `object` (`Kind/name`) is one the drain has written over.
    fn written_over(&mut self, object: &str, version: Option<&str>) -> bool {
        let Some(versions) = self.0.get(object) else { return false };
        if version.is_some_and(|version| versions.iter().any(|v| v == version)) {
            return true;
        }
        self.0.remove(object);
        false
    }

    /// The drain wrote over the version `before` of `object` (`Kind/name`), and the write left
    /// version `after` (the same when the write changed nothing: that version stays current,
    /// and its pass must not be skipped).
    fn wrote_over(&mut self, object: &str, before: Option<String>, after: Option<String>) {
        let Some(before) = before.filter(|before| after.as_ref() != Some(before)) else {
            return;
        };
        self.0.entry(object.to_owned()).or_default().push(before);
    }
}

/// Run the cordon/drain controllers for Nodes and ControlNodes until `stop` is cancelled.
/// `eviction_client` must not retry 429 answers (a PodDisruptionBudget's refusal); a drain
/// blocked for `drain_timeout` fails its node, counted at most from `term_started`, when
/// this leader's term began (on its clock).
pub async fn run(
    client: kube::Client,
    eviction_client: kube::Client,
    drain_timeout: Duration,
    term_started: jiff::Timestamp,
    drain_blocked: Gauge,
    watched: Watched,
    stop: CancellationToken,
) {
    // The caches hold slimmed objects (`snapshot::SlimNode`): drain reads labels,
    // annotations and the spec, and writes patches. Only a signalled object has anything to
    // cordon, drain or uncordon, so only those are passed on as triggers (the initial list
    // of a large fleet would otherwise start one pass per node at once).
    let Watched {
        nodes: node_store,
        signalled_nodes,
        control_nodes: control_node_store,
        signalled_control_nodes,
        plans,
        handoff,
    } = watched;
    let context = Arc::new(Context {
        client: client.clone(),
        plans,
        eviction_client,
        refusals: Mutex::new(HashMap::new()),
        drain_timeout,
        term_started,
        failures: Mutex::new(HashMap::new()),
        found: Mutex::new(HashMap::new()),
        drain_blocked: drain_blocked.clone(),
        superseded: Mutex::new(Superseded::default()),
        handoff,
    });
    let node_objects = signalled_nodes.map(Ok::<_, kube::runtime::watcher::Error>);
    let control_node_objects = signalled_control_nodes.map(Ok::<_, kube::runtime::watcher::Error>);
    let config = || kube::runtime::controller::Config::default().concurrency(CONCURRENCY);
    let nodes = Controller::for_stream(node_objects, node_store)
        .with_config(config())
        .trigger_backoff(WatchBackoff::default())
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(reconcile::<SlimNode>, error_policy::<SlimNode>, context.clone())
        .for_each(|_| async {});
    let control_nodes = Controller::for_stream(control_node_objects, control_node_store)
        .with_config(config())
        .trigger_backoff(WatchBackoff::default())
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile::<ControlNode>, error_policy::<ControlNode>, context)
        .for_each(|_| async {});
    futures::join!(nodes, control_nodes);
    // Nothing is being drained by this controller any more.
    drain_blocked.set(0);
}

/// One cordon/drain pass over a signalled object. Its span carries the object (`node`), its
/// kind and, from its signal, the plan, command and phase.
#[tracing::instrument(
    name = "drain",
    skip_all,
    fields(
        node = %object.name_any(),
        kind = %K::kind(&()),
        plan = tracing::field::Empty,
        command = tracing::field::Empty,
        phase = tracing::field::Empty,
    )
)]
async fn reconcile<K: SignalObject>(object: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = object.name_any();
    let kind = K::kind(&());
    let objects: Api<K> = Api::all(ctx.client.clone());
    // A ControlNode and its machine's Node may share a name.
    let written = format!("{kind}/{name}");
    if ctx.superseded().written_over(&written, object.meta().resource_version.as_deref()) {
        // The cache is behind this controller's own write: the newer version's event is on
        // its way and triggers the next pass. Deciding on this one would only redo a step
        // and lose a conflict.
        debug!(%kind, object = %name, "cached version already written over");
        return Ok(Action::await_change());
    }
    let mut current = (*object).clone();
    for _ in 0..MAX_ROUNDS {
        let Ok(Some(data)) = signal::from_meta(current.meta()) else {
            return Ok(Action::await_change());
        };
        let phase = data.status.as_ref().map(|s| s.status);
        let span = tracing::Span::current();
        span.record("plan", data.plan_id.as_str());
        span.record("command", data.command.id);
        span.record("phase", phase.map_or("", SignalPhase::as_str));
        let node_name = current.kubelet_node();
        let seen = observe_run::<K>(&ctx.client, &ctx.plans, &name, &data).await?;
        let (mut facts, node_version) =
            observe(&ctx.client, phase, node_name.as_deref(), current.as_node(), seen).await?;
        if cordon::needs_pods(&facts) {
            facts.found = Some(ctx.found(&name, &data, &facts.pods));
        }
        let step = cordon::decide(&facts);
        let node = node_name.unwrap_or_default();
        match step {
            Step::Nothing => {
                ctx.reset(&name);
                return Ok(Action::await_change());
            }
            Step::Cordon | Step::Uncordon => {
                let cordon = step == Step::Cordon;
                let patched =
                    set_cordon(&ctx.client, &node, node_version.as_deref(), cordon).await?;
                if let Some(fresh) = K::from_node(patched) {
                    let (before, after) = (current.resource_version(), fresh.resource_version());
                    ctx.superseded().wrote_over(&written, before, after);
                    current = fresh;
                    continue;
                }
            }
            Step::Evict { .. } | Step::WaitForPods(_) | Step::Held(_) => {
                let signal = Signal { objects: &objects, object: &current, data: &data };
                if let Some(action) = drain(&ctx, signal, &node, step).await? {
                    return Ok(action);
                }
            }
            Step::Advance(_) | Step::Undrained(_) => {
                ctx.reset(&name);
                let signal = Signal { objects: &objects, object: &current, data: &data };
                return finish(&ctx, signal, &written, &node, step).await;
            }
            Step::Fail(reason) => {
                // Crash safety: the write is guarded by the resourceVersion the signal was
                // read at; a lost write leaves the signal in Cordoning, and the next pass
                // decides the same again. The next pass (on the Failed signal) also undoes a
                // cordon autopilot left on the node.
                ctx.reset(&name);
                let after = write_failed(&objects, &current, &data, &reason).await?;
                ctx.superseded().wrote_over(&written, current.resource_version(), after);
                warn!(%kind, object = %name, %node, %reason, "signal of another run failed, not drained");
            }
        }
        // Re-read for the next round (our own write changed the picture).
        match objects.get_opt(&name).await.map_err(api(format!("reading {kind} {name}")))? {
            Some(fresh) => current = fresh,
            None => return Ok(Action::await_change()),
        }
    }
    Ok(Action::requeue(Duration::ZERO))
}

/// Perform a drain `step` (evictions, a wait, pods held) on `node`: `None` when the pods
/// were evicted (the next round looks again), else how to go on while the drain is blocked
/// ([`on_blocked`]; a wait for pods to terminate counts against `--drain-timeout` like a
/// refusal, naming them, but is looked at again soon: it is no refusal to back off from).
async fn drain<K: SignalObject>(
    ctx: &Context,
    signal: Signal<'_, K>,
    node: &str,
    step: Step,
) -> Result<Option<Action>, Error> {
    let (kind, name) = (K::kind(&()), signal.object.name_any());
    let (blocked, delay) = match step {
        Step::Evict { pods, grace_period } => {
            match evict(&ctx.eviction_client, &pods, grace_period).await? {
                None => {
                    info!(%kind, object = %name, %node, pods = pods.len(), "evicted pods");
                    return Ok(None);
                }
                Some(refused) => (refused, ctx.refused(&name)),
            }
        }
        Step::WaitForPods(pods) => {
            debug!(%kind, object = %name, %node, waiting = pods.len(), "pods terminating");
            (cordon::waiting_text(&pods), TERMINATING_RECHECK)
        }
        Step::Held(held) => (held, ctx.refused(&name)),
        Step::Nothing
        | Step::Cordon
        | Step::Uncordon
        | Step::Advance(_)
        | Step::Undrained(_)
        | Step::Fail(_) => return Ok(None),
    };
    on_blocked(ctx, signal, node, &blocked, delay).await.map(Some)
}

/// A signal the drain writes to: the objects' API, the object as read, its signal.
struct Signal<'a, K> {
    objects: &'a Api<K>,
    object: &'a K,
    data: &'a SignalData,
}

/// The end of a pass that moves the signal on: a drained node (fully, or as far as its
/// command's `drain` asks, `note` saying what stays) is handed to the plan engine, which
/// records the drain in the Plan status before it writes `ApplyingUpdate`
/// ([`crate::handoff`]); an uncordoned one is `Completed`. `written` names the object for
/// [`Superseded`]; `node` is the machine's Node.
async fn finish<K: SignalObject>(
    ctx: &Context,
    signal: Signal<'_, K>,
    written: &str,
    node: &str,
    step: Step,
) -> Result<Action, Error> {
    let Signal { objects, object, data } = signal;
    let (kind, name) = (K::kind(&()), object.name_any());
    match step {
        Step::Advance(SignalPhase::ApplyingUpdate) => {
            ctx.handoff.drained(signal_target::<K>(&name), &data.created);
            info!(%kind, object = %name, %node, "node drained, handed to the plan engine");
        }
        Step::Undrained(note) => {
            // The note goes with the signal (its reason) to `ApplyingUpdate` and the Plan.
            let after = write_reason(objects, object, data, &note).await?;
            ctx.superseded().wrote_over(written, object.resource_version(), after);
            ctx.handoff.drained(signal_target::<K>(&name), &data.created);
            info!(%kind, object = %name, %node, %note, "node cordoned, not fully drained");
        }
        Step::Advance(next) => {
            let after = write_phase(objects, object, data, next, None).await?;
            ctx.superseded().wrote_over(written, object.resource_version(), after);
            info!(%kind, object = %name, to = %next, "advanced node phase");
        }
        Step::Nothing
        | Step::Cordon
        | Step::Uncordon
        | Step::Evict { .. }
        | Step::WaitForPods(_)
        | Step::Held(_)
        | Step::Fail(_) => {}
    }
    Ok(Action::await_change())
}

/// The plan engine's name for the signal object `name` of kind `K`.
fn signal_target<K: SignalObject>(name: &str) -> SignalTarget {
    let kind =
        if K::kind(&()) == "ControlNode" { ObjectKind::ControlNode } else { ObjectKind::Node };
    SignalTarget { kind, name: name.to_owned() }
}

/// The drain of `node` is blocked (`blocked` says by what: refused evictions, pods it waits
/// for, pods held): record why on the object's signal and look again after `delay`, or fail
/// the node once the drain has been blocked for `--drain-timeout` ([`cordon::blocked`]
/// decides). `signal` is the signal the drain acted on.
async fn on_blocked<K: SignalObject>(
    ctx: &Context,
    at: Signal<'_, K>,
    node: &str,
    blocked: &str,
    delay: Duration,
) -> Result<Action, Error> {
    let Signal { objects, object, data } = at;
    let kind = K::kind(&());
    let name = &object.name_any();
    // The attempt may have taken a while: write onto a fresh read.
    let Some(fresh) = objects.get_opt(name).await.map_err(api(format!("reading {kind} {name}")))?
    else {
        return Ok(Action::await_change());
    };
    let Ok(Some(fresh_data)) = signal::from_meta(fresh.meta()) else {
        return Ok(Action::await_change());
    };
    if fresh_data.plan_id != data.plan_id || fresh_data.created != data.created {
        return Ok(Action::await_change());
    }
    let clock = cordon::DrainClock {
        cordoning_since: cordoning_seen::<K>(&ctx.client, name, &fresh_data).await?,
        term_started: Some(ctx.term_started),
        now: jiff::Timestamp::now(),
    };
    match cordon::blocked(node, blocked, clock, ctx.drain_timeout, delay) {
        Blocked::Fail(reason) => {
            ctx.reset(name);
            write_failed(objects, &fresh, &fresh_data, &reason).await?;
            warn!(%kind, object = %name, %node, %blocked, "drain timed out, node failed");
            Ok(Action::await_change())
        }
        Blocked::Retry { reason, delay } => {
            write_reason(objects, &fresh, &fresh_data, &reason).await?;
            warn!(%kind, object = %name, %node, %blocked, retry_in = ?delay, "drain blocked");
            Ok(Action::requeue(delay))
        }
    }
}

/// When the leader first saw the node of object `name` in `Cordoning` for the signal `data`:
/// the `lastUpdatedTimestamp` of its target in the Plan's status, which the engine sets on
/// its own clock when it reads the phase back (DESIGN §14). A node's own timestamp never
/// counts: one dated in the future would hold the drain for ever. `None` while the Plan does
/// not show the node in `Cordoning` for this run (yet).
async fn cordoning_seen<K: SignalObject>(
    client: &kube::Client,
    name: &str,
    data: &SignalData,
) -> Result<Option<jiff::Timestamp>, Error> {
    if data.phase() != Some(SignalPhase::Cordoning) {
        return Ok(None);
    }
    let plans: Api<Plan> = Api::all(client.clone());
    let plan = retry::get_definitive(&plans, keys::PLAN_NAME)
        .await
        .map_err(api(format!("reading Plan {}", keys::PLAN_NAME)))?;
    let Some(status) = plan.and_then(|plan| plan.status) else { return Ok(None) };
    if status.run_id.is_none() || status.run_id != data.run_id {
        return Ok(None);
    }
    let Some(command) = status.commands.iter().find(|command| command.id == data.command.id) else {
        return Ok(None);
    };
    let controller = K::kind(&()) == "ControlNode";
    let targets = match (&data.command.rollback, &command.rollback) {
        // A rollback signal's node is in the command's rollback lists (DESIGN §15).
        (Some(_), Some(rollback)) if controller => &rollback.controllers,
        (Some(_), Some(rollback)) => &rollback.workers,
        (Some(_), None) => return Ok(None),
        (None, _) => match (&command.k0supdate, &command.airgapupdate) {
            (Some(k0s), _) if controller => &k0s.controllers,
            (Some(k0s), _) => &k0s.workers,
            (None, Some(airgap)) => &airgap.workers,
            (None, None) => return Ok(None),
        },
    };
    Ok(targets
        .iter()
        .find(|target| target.name == name && target.phase == Some(SignalPhase::Cordoning))
        .map(|target| target.last_updated_timestamp.0))
}

/// A failed API request is retried on the short capped backoff of the watches, not on the
/// eviction-refusal backoff (up to 30 s): a pass that failed because the API server was away
/// runs again within [`autopilot_api::backoff::CAP`] of it answering, so a node waiting to
/// be cordoned or uncordoned after an outage is not left waiting (a resumed watch need not
/// deliver any event that would trigger the pass sooner).
fn error_policy<K: SignalObject>(object: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.failed(&object.name_any());
    warn!(object = %object.name_any(), error = %autopilot_api::text::error_chain(error), retry_in = ?delay, "cordon/drain pass failed");
    Action::requeue(delay)
}

impl Context {
    fn superseded(&self) -> std::sync::MutexGuard<'_, Superseded> {
        self.superseded.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Record a refusal and return how long to wait before the next attempt.
    fn refused(&self, name: &str) -> Duration {
        let mut refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        let delay = refusals
            .entry(name.to_string())
            .or_insert_with(|| Capped::new(FIRST_BLOCKED_RETRY, MAX_BLOCKED_RETRY))
            .next_delay();
        self.drain_blocked.set(i64::try_from(refusals.len()).unwrap_or(i64::MAX));
        delay
    }

    /// Record a failed pass and return how long to wait before the next one: doubling from
    /// [`autopilot_api::backoff::FIRST`] up to [`autopilot_api::backoff::CAP`].
    fn failed(&self, name: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let backoff = failures.entry(name.to_string()).or_default();
        backoff.next_delay()
    }

    /// The UIDs of the pods the drain of `data` on object `name` found: those recorded when
    /// it began, or, on its first list, those of `pods`, recorded now. Kept in memory: a new
    /// leader begins the drain afresh with the pods then on the node (each evicted once,
    /// their replacements not), so the drain still ends.
    fn found(&self, name: &str, data: &SignalData, pods: &[cordon::PodFacts]) -> BTreeSet<String> {
        let mut found = self.found.lock().unwrap_or_else(PoisonError::into_inner);
        match found.get(name) {
            Some((created, uids)) if *created == data.created => uids.clone(),
            Some(_) | None => {
                let uids: BTreeSet<String> = pods.iter().map(|p| p.uid.clone()).collect();
                found.insert(name.to_owned(), (data.created.clone(), uids.clone()));
                uids
            }
        }
    }

    fn reset(&self, name: &str) {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
        self.found.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
        let mut refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        refusals.remove(name);
        self.drain_blocked.set(i64::try_from(refusals.len()).unwrap_or(i64::MAX));
    }
}

/// How a signal's run (its `runId`) relates to the Plan's current run, and whether the
/// signal matches that run's command for the object `name` (`autopilot_engine::authorize`,
/// any platform: the leader does not pick the node's payload again). The Plan is looked at
/// only when the decision depends on it ([`cordon::needs_run`]) and the signal names a run:
/// first in the leader's Plan cache, which settles it when it shows the signal's run as
/// current and the signal as authorized by it; otherwise (the cache may lag behind the
/// signal, see the module docs) read from the API server, which decides. Only a definitive
/// answer decides ([`retry::get_definitive`]: the Plan, or a `404` naming it); a `403` (an
/// API server whose authorizer has not synced after a restart), a `404` of the Plan
/// resource type and every transport error fail the pass, which [`error_policy`] retries on
/// the short capped backoff, for as long as it takes: the drain never fails a signal for
/// want of an answer.
///
/// With the run comes the `drain` and `drainOptions` of the signal's command in that run
/// (its frozen copy in the Plan status; `Always` and the defaults when the run is not the
/// current one, or the command has none).
async fn observe_run<K: SignalObject>(
    client: &kube::Client,
    cached_plans: &reflector::Store<Plan>,
    name: &str,
    data: &SignalData,
) -> Result<RunSeen, Error> {
    let Some(signal_run) = data.run_id.as_deref() else {
        return Ok(RunSeen::other(Run::Unmarked));
    };
    if !cordon::needs_run(data.phase()) {
        return Ok(RunSeen::other(Run::NotLookedUp));
    }
    if let Some(cached) = cached_plans.get(&reflector::ObjectRef::new(keys::PLAN_NAME)) {
        let seen = run_of::<K>(Some(&cached), name, data, signal_run);
        if seen.run == Run::Current {
            return Ok(seen);
        }
    }
    let plans: Api<Plan> = Api::all(client.clone());
    let plan = retry::get_definitive(&plans, keys::PLAN_NAME)
        .await
        .map_err(api(format!("reading Plan {}", keys::PLAN_NAME)))?;
    Ok(run_of::<K>(plan.as_ref(), name, data, signal_run))
}

/// A signal's run as [`observe_run`] sees it, and how its command drains.
#[derive(Debug)]
struct RunSeen {
    run: Run,
    drain: DrainPolicy,
    options: DrainOptions,
}

impl RunSeen {
    /// A run that is not the current one: nothing of its command is read.
    fn other(run: Run) -> Self {
        Self { run, drain: DrainPolicy::Always, options: DrainOptions::default() }
    }
}

/// [`observe_run`]'s decision on `plan` (`None`: there is no Plan) for the signal `data` of
/// run `signal_run` on the object `name`.
fn run_of<K: SignalObject>(
    plan: Option<&Plan>,
    name: &str,
    data: &SignalData,
    signal_run: &str,
) -> RunSeen {
    let plan_run = match plan {
        None => PlanRun::Missing,
        Some(plan) => match plan.status.as_ref().and_then(|status| status.run_id.clone()) {
            None => PlanRun::NotStarted,
            Some(run) => PlanRun::Run(run),
        },
    };
    let role = if K::kind(&()) == "ControlNode" { Role::Controller } else { Role::Worker };
    let k0s = plan
        .and_then(|plan| plan.status.as_ref())
        .and_then(|status| status.commands.iter().find(|c| c.id == data.command.id))
        .and_then(|command| command.frozen.as_ref())
        .and_then(|frozen| frozen.k0supdate.as_ref());
    let drain = k0s.and_then(|k0s| k0s.drain).unwrap_or_default();
    let options = k0s.and_then(|k0s| k0s.drain_options.clone()).unwrap_or_default();
    let run = match plan_run {
        PlanRun::Run(current) if current == signal_run => {
            match authorize::authorize(plan, data, authorize::Node { name, role, platform: None }) {
                Ok(_) => Run::Current,
                Err(refusal) => Run::Unauthorized(refusal),
            }
        }
        plan => Run::Other { signal: signal_run.to_string(), plan },
    };
    match run {
        Run::Current => RunSeen { run, drain, options },
        Run::NotLookedUp | Run::Unmarked | Run::Unauthorized(_) | Run::Other { .. } => {
            RunSeen::other(run)
        }
    }
}

/// Collect the facts for one object, and the resourceVersion of its Node (the precondition
/// of a cordon or uncordon). The Node is `own_node` when the signal object is that Node (as
/// the watch, this pass's own re-read or its cordon's answer delivered it; a stale copy only
/// loses a conflict), else read with a GET. Pods are listed only when the decision reads
/// them ([`cordon::needs_pods`]: a cordoned node of a signal that is ours to drain), with
/// the DaemonSets that control any of them, and the other Nodes (where its pods could go)
/// only when its command's `drain` is `IfPossible`. The pods the drain found when it began
/// (`Facts::found`) are the caller's to fill in.
async fn observe(
    client: &kube::Client,
    phase: Option<SignalPhase>,
    node_name: Option<&str>,
    own_node: Option<&SlimNode>,
    seen: RunSeen,
) -> Result<(Facts, Option<String>), Error> {
    let RunSeen { run, drain, options } = seen;
    let mut facts = Facts {
        phase,
        kubelet_bearing: node_name.is_some(),
        node_exists: false,
        unschedulable: false,
        cordoned_by_autopilot: false,
        pods: Vec::new(),
        run,
        drain,
        others: Vec::new(),
        options,
        found: None,
        selector_problem: None,
        now: jiff::Timestamp::now(),
    };
    let Some(node_name) = node_name else { return Ok((facts, None)) };
    let fetched;
    let node = match own_node.filter(|node| node.metadata.name.as_deref() == Some(node_name)) {
        Some(node) => node,
        None => {
            let nodes: Api<SlimNode> = Api::all(client.clone());
            fetched =
                nodes.get_opt(node_name).await.map_err(api(format!("reading Node {node_name}")))?;
            let Some(node) = fetched.as_ref() else { return Ok((facts, None)) };
            node
        }
    };
    facts.node_exists = true;
    facts.unschedulable = node.unschedulable;
    facts.cordoned_by_autopilot = node.annotations().contains_key(keys::ANNOTATION_CORDONED);
    if cordon::needs_pods(&facts) {
        let selector = match facts.options.pod_selector.as_deref().map(LabelSelector::parse) {
            None => None,
            Some(Ok(selector)) => Some(selector),
            Some(Err(why)) => {
                facts.selector_problem = Some(why.to_string());
                None
            }
        };
        let pods: Api<Pod> = Api::all(client.clone());
        let list = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
            .await
            .map_err(api(format!("listing the pods of Node {node_name}")))?;
        facts.pods =
            list.items.iter().map(|pod| snapshot::pod_facts(pod, selector.as_ref())).collect();
        daemon_sets_exist(client, &mut facts.pods).await?;
        if drain == DrainPolicy::IfPossible && facts.pods.iter().any(|p| p.must_go()) {
            // The full Nodes (taints, labels, Ready): the watch cache keeps them slimmed.
            let nodes: Api<Node> = Api::all(client.clone());
            let list = nodes
                .list(&ListParams::default())
                .await
                .map_err(api("listing the Nodes (where pods could go)"))?;
            facts.others = list
                .items
                .iter()
                .filter(|other| other.metadata.name.as_deref() != Some(node_name))
                .map(snapshot::other_node)
                .collect();
        }
    }
    Ok((facts, node.resource_version()))
}

/// Set `exists` of every pod's DaemonSet controller: a GET of each DaemonSet named (in its
/// namespace, once each). A pod whose DaemonSet is gone has no controller to bring it back.
async fn daemon_sets_exist(
    client: &kube::Client,
    pods: &mut [cordon::PodFacts],
) -> Result<(), Error> {
    let mut seen: HashMap<(String, String), bool> = HashMap::new();
    for pod in pods.iter_mut() {
        let PodController::DaemonSet { name, exists } = &mut pod.controller else { continue };
        let key = (pod.namespace.clone(), name.clone());
        if let Some(known) = seen.get(&key) {
            *exists = *known;
            continue;
        }
        let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), &pod.namespace);
        let found = daemon_sets
            .get_opt(name)
            .await
            .map_err(api(format!("reading DaemonSet {}/{name}", pod.namespace)))?;
        *exists = found.is_some();
        seen.insert(key, *exists);
    }
    Ok(())
}

/// Cordon `node` (or uncordon it when `cordon` is false), guarded by the resourceVersion
/// it was observed at; the Node as the patch left it.
async fn set_cordon(
    client: &kube::Client,
    node: &str,
    version: Option<&str>,
    cordon: bool,
) -> Result<SlimNode, Error> {
    if cordon {
        let patched = cordon_node(client, node, version).await?;
        info!(%node, "cordoned node for its update");
        Ok(patched)
    } else {
        let patched = uncordon_node(client, node, version).await?;
        info!(%node, "uncordoned node after its update");
        Ok(patched)
    }
}

/// Cordon `node`, guarded by the resourceVersion it was observed at (a conflict means
/// re-observe and re-decide); the Node as the cordon left it.
async fn cordon_node(
    client: &kube::Client,
    node: &str,
    version: Option<&str>,
) -> Result<SlimNode, Error> {
    let patch = json!({
        "metadata": {
            "resourceVersion": version,
            "annotations": { keys::ANNOTATION_CORDONED: "true" },
        },
        "spec": { "unschedulable": true },
    });
    Api::<SlimNode>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api(format!("cordoning Node {node}")))
}

/// Uncordon `node`, guarded by the resourceVersion it was observed at; the Node as the
/// uncordon left it.
async fn uncordon_node(
    client: &kube::Client,
    node: &str,
    version: Option<&str>,
) -> Result<SlimNode, Error> {
    let patch = json!({
        "metadata": {
            "resourceVersion": version,
            "annotations": { keys::ANNOTATION_CORDONED: null },
        },
        "spec": { "unschedulable": null },
    });
    Api::<SlimNode>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api(format!("uncordoning Node {node}")))
}

/// Evict `pods`, all at once (at most [`EVICTION_CONCURRENCY`] requests under way), each
/// guarded by its UID and given `grace_period` (seconds; `None`: its own). `Some(why)` names
/// every pod whose eviction was refused or timed out, and why: every one of them counts
/// against `--drain-timeout`. An error (no answer from the API server) fails the pass, to be
/// retried, once the other evictions have been made.
async fn evict(
    client: &kube::Client,
    pods: &[PodRef],
    grace_period: Option<u32>,
) -> Result<Option<String>, Error> {
    let attempts: Vec<_> = pods
        .iter()
        .map(|pod| {
            let (client, pod) = (client.clone(), pod.clone());
            async move { evict_one(&client, &pod, grace_period).await }
        })
        .collect();
    let outcomes: Vec<Result<Option<String>, Error>> =
        futures::stream::iter(attempts).buffer_unordered(EVICTION_CONCURRENCY).collect().await;
    let mut refused = Vec::new();
    let mut failure = None;
    for outcome in outcomes {
        match outcome {
            Ok(None) => {}
            Ok(Some(why)) => refused.push(why),
            Err(error) => failure = failure.or(Some(error)),
        }
    }
    if !refused.is_empty() {
        // In the order of the pods, so the same refusals read the same.
        refused.sort();
        return Ok(Some(refused.join("; ")));
    }
    failure.map_or(Ok(None), Err)
}

/// Evict `pod` (see [`evict`]): `None` once it is evicted or gone (a `404`, or a `409` of
/// its UID precondition: the pod found is gone and another bears its name), `Some(why)`
/// when the API server refuses it (a PodDisruptionBudget's `429`, the `500` of a pod under
/// more than one budget, any other answer) or does not answer within [`EVICTION_TIMEOUT`].
async fn evict_one(
    client: &kube::Client,
    pod: &PodRef,
    grace_period: Option<u32>,
) -> Result<Option<String>, Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let (params, body) = (PostParams::default(), eviction(pod, grace_period));
    let request =
        api.create_subresource::<_, serde_json::Value>("eviction", &pod.name, &params, &body);
    let attempt = tokio::time::timeout(EVICTION_TIMEOUT, request);
    match attempt.await {
        Ok(Ok(_)) => Ok(None),
        Ok(Err(kube::Error::Api(status))) if status.code == 404 || status.code == 409 => Ok(None),
        Ok(Err(kube::Error::Api(status))) if status.code == 429 => {
            Ok(Some(format!("eviction of pod {pod} refused: {}", refusal(&status))))
        }
        Ok(Err(kube::Error::Api(status))) => Ok(Some(format!(
            "eviction of pod {pod} failed ({}): {}",
            status.code,
            refusal(&status)
        ))),
        Ok(Err(source)) => Err(Error::Api { what: format!("evicting pod {pod}"), source }),
        Err(_) => Ok(Some(format!(
            "eviction of pod {pod} took longer than {}s",
            EVICTION_TIMEOUT.as_secs()
        ))),
    }
}

/// The body of the eviction of `pod`: a `policy/v1` Eviction whose `deleteOptions` carry its
/// UID as a precondition and `grace_period`. Written here rather than by `Api::evict`, which
/// (kube 5) sends the options as `delete_options`, a field the API server drops: the grace
/// period and the precondition would be silently ignored.
fn eviction(pod: &PodRef, grace_period: Option<u32>) -> serde_json::Value {
    let mut options = json!({ "preconditions": { "uid": pod.uid } });
    if let Some(seconds) = grace_period {
        options["gracePeriodSeconds"] = json!(seconds);
    }
    json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": { "name": pod.name, "namespace": pod.namespace },
        "deleteOptions": options,
    })
}

/// Why an eviction was refused: the answer's message and its causes, which are where the
/// API server names the PodDisruptionBudget ("The disruption budget web needs 2 healthy
/// pods and has 2 currently").
fn refusal(status: &kube::core::Status) -> String {
    let causes = status.details.iter().flat_map(|d| &d.causes);
    let mut why = status.message.trim().to_owned();
    for cause in causes.map(|c| c.message.trim()).filter(|m| !m.is_empty()) {
        why.push_str(if why.is_empty() { "" } else { " " });
        why.push_str(cause);
    }
    why
}

/// Write `phase` as the node status of the object's signal (same signal, fresh timestamp),
/// with `reason` if given.
async fn write_phase<K: SignalObject>(
    objects: &Api<K>,
    object: &K,
    data: &SignalData,
    phase: SignalPhase,
    reason: Option<&str>,
) -> Result<Option<String>, Error> {
    let mut next = data.clone();
    let status = SignalStatus::new(phase, jiff::Timestamp::now());
    next.status = Some(match reason {
        Some(reason) => status.with_reason(reason),
        None => status,
    });
    write_signal(objects, object, &next).await
}

/// Fail the node: `Failed` with `reason` (same signal, fresh timestamp). Its binary was not
/// touched (the drain comes before the update), and `Failed` makes the next pass uncordon it.
async fn write_failed<K: SignalObject>(
    objects: &Api<K>,
    object: &K,
    data: &SignalData,
    reason: &str,
) -> Result<Option<String>, Error> {
    let mut next = data.clone();
    next.status =
        Some(SignalStatus::new(SignalPhase::Failed, jiff::Timestamp::now()).with_reason(reason));
    write_signal(objects, object, &next).await
}

/// Keep the phase, set the status reason (only when it changes, to avoid churn).
async fn write_reason<K: SignalObject>(
    objects: &Api<K>,
    object: &K,
    data: &SignalData,
    reason: &str,
) -> Result<Option<String>, Error> {
    let Some(status) = &data.status else { return Ok(object.resource_version()) };
    if status.reason.as_deref() == Some(reason) {
        return Ok(object.resource_version());
    }
    let mut next = data.clone();
    next.status = Some(status.clone().with_reason(reason));
    write_signal(objects, object, &next).await
}

async fn write_signal<K: SignalObject>(
    objects: &Api<K>,
    object: &K,
    data: &SignalData,
) -> Result<Option<String>, Error> {
    let name = object.name_any();
    let version = object.resource_version();
    // The resourceVersion the write left.
    let written = autopilot_shell::signal::write(objects, &name, version.as_deref(), data)
        .await
        .map_err(api(format!("writing the signal status of {} {name}", K::kind(&()))))?;
    Ok(written.resource_version())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_budget_from_the_causes() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "code": 429,
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": { "causes": [{
                "reason": "DisruptionBudget",
                "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
            }]},
        }))
        .expect("a Status");
        assert_eq!(
            refusal(&status),
            "Cannot evict pod as it would violate the pod's disruption budget. \
             The disruption budget web needs 2 healthy pods and has 2 currently"
        );
        let bare = kube::core::Status::failure("Too many requests", "TooManyRequests");
        assert_eq!(refusal(&bare), "Too many requests");
    }

    #[tokio::test]
    async fn every_pod_is_evicted_by_uid_and_every_refusal_is_named() {
        let server = autopilot_shell::fake_api::FakeApiServer::default();
        let client = server.client(|request, _| {
            let status = autopilot_shell::fake_api::status;
            match request.path.rsplit('/').nth(1) {
                Some("b") => (429, serde_json::json!({"kind": "Status", "code": 429,
                    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                    "details": {"causes": [{"reason": "DisruptionBudget",
                        "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]}})),
                Some("c") => (500, serde_json::json!({"kind": "Status", "code": 500,
                    "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."})),
                // The pod found is gone; another bears its name (the UID precondition).
                Some("d") => (409, status(409, "Conflict")),
                Some("e") => (404, status(404, "NotFound")),
                _ => (201, serde_json::json!({"kind": "Status", "code": 201, "status": "Success"})),
            }
        });
        let pods: Vec<PodRef> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| PodRef {
                namespace: "default".into(),
                name: (*n).into(),
                uid: format!("uid-{n}"),
            })
            .collect();
        let why = evict(&client, &pods, Some(7)).await.expect("answered").expect("refusals");
        assert_eq!(
            why,
            "eviction of pod default/b refused: Cannot evict pod as it would violate the pod's \
             disruption budget. The disruption budget web needs 2 healthy pods and has 2 \
             currently; eviction of pod default/c failed (500): This pod has more than one \
             PodDisruptionBudget, which the eviction subresource does not support."
        );
        let posts = server.requests_with("POST");
        assert_eq!(posts.len(), 5, "no eviction waits for another's refusal: {posts:#?}");
        for post in posts {
            let name = post.path.rsplit('/').nth(1).expect("a pod name");
            assert_eq!(post.path, format!("/api/v1/namespaces/default/pods/{name}/eviction"));
            assert_eq!(post.body["apiVersion"], "policy/v1", "{post:?}");
            assert_eq!(post.body["kind"], "Eviction", "{post:?}");
            let options = &post.body["deleteOptions"];
            assert_eq!(options["preconditions"]["uid"], format!("uid-{name}"), "{post:?}");
            assert_eq!(options["gracePeriodSeconds"], 7, "{post:?}");
        }
        let gone = evict(&client, &pods[3..], None).await.expect("answered");
        assert_eq!(gone, None, "a pod gone or replaced is evicted");
    }

    /// The `created` of the signal the leader wrote to `w1`.
    const CREATED: &str = "2026-11-28T08:00:00Z";

    /// Plan `autopilot` on run `run`: command 0 updates k0s on worker `w1`.
    fn plan_on_run(run: &str) -> Plan {
        use autopilot_api::fixtures::{PlanBuilder as _, spec};
        use autopilot_api::v1beta2::{
            PlanCommandK0sUpdateStatus, PlanCommandStatus, PlanStatus, TargetState, TargetStatus,
        };
        let spec = spec("id1").then_k0s_update("v1.35.1+k0s.0");
        let mut worker =
            TargetStatus::new("w1", TargetState::SignalSent, jiff::Timestamp::UNIX_EPOCH);
        // The leader recorded the signal it wrote (see `cordoning_in`).
        worker.signalled = Some(CREATED.to_owned());
        let command = PlanCommandStatus {
            id: 0,
            frozen: Some(spec.commands[0].clone()),
            k0supdate: Some(PlanCommandK0sUpdateStatus {
                controllers: vec![],
                workers: vec![worker],
            }),
            ..PlanCommandStatus::default()
        };
        let mut plan = Plan::new(keys::PLAN_NAME, spec);
        plan.status = Some(PlanStatus {
            run_id: Some(run.into()),
            plan_id: Some("id1".into()),
            commands: vec![command],
            ..PlanStatus::default()
        });
        plan
    }

    /// `w1`'s signal of run `run`, in `Cordoning`.
    fn cordoning_in(run: &str) -> SignalData {
        use autopilot_api::fixtures::{SignalBuilder as _, k0s_signal, sha};
        let url = "https://example.com/k0s-linux-amd64";
        k0s_signal("id1", "v1.35.1+k0s.0", url, &sha('a'))
            .in_run(run)
            .created(CREATED)
            .with_status(SignalStatus::new(SignalPhase::Cordoning, jiff::Timestamp::UNIX_EPOCH))
    }

    /// The run `observe_run` sees for `w1`'s signal of run `signal` with `cached` in the
    /// Plan cache and `served` on the API server, and the requests it made.
    async fn run_seen(
        cached: Option<Plan>,
        served: Plan,
        signal: &str,
    ) -> (Run, Vec<autopilot_shell::fake_api::Request>) {
        let server = autopilot_shell::fake_api::FakeApiServer::default();
        let served = serde_json::to_value(served).expect("a Plan as JSON");
        let client = server.client(move |_, _| (200, served.clone()));
        let (store, mut writer) = reflector::store::<Plan>();
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Init);
        writer.apply_watcher_event(&kube::runtime::watcher::Event::InitDone);
        if let Some(plan) = cached {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(plan));
        }
        let seen = observe_run::<SlimNode>(&client, &store, "w1", &cordoning_in(signal))
            .await
            .expect("the run is observed");
        (seen.run, server.requests())
    }

    #[tokio::test]
    async fn a_signal_of_the_cached_run_is_judged_without_reading_the_plan() {
        let (run, requests) = run_seen(Some(plan_on_run("r2")), plan_on_run("r2"), "r2").await;
        assert_eq!(run, Run::Current);
        assert!(requests.is_empty(), "no Plan read: {requests:#?}");
    }

    #[tokio::test]
    async fn a_signal_the_plan_does_not_record_is_not_drained() {
        // Copied onto w1 by someone who may patch Nodes: the run and payload are right, but
        // the leader has not signalled w1 (nor recorded a signal for it).
        let mut unrecorded = plan_on_run("r2");
        let status = unrecorded.status.as_mut().expect("a status");
        let w1 = &mut status.commands[0].k0supdate.as_mut().expect("k0s").workers[0];
        w1.signalled = None;
        w1.state = autopilot_api::v1beta2::TargetState::SignalPending;
        let (run, requests) = run_seen(Some(unrecorded.clone()), unrecorded, "r2").await;
        let Run::Unauthorized(refusal) = &run else { panic!("refused: {run:?}") };
        assert!(refusal.starts_with("refused: not signalled by the leader"), "{refusal}");
        assert_eq!(requests.len(), 1, "the API server decides, not the cache: {requests:#?}");
        let step = cordon::decide(&Facts {
            phase: Some(SignalPhase::Cordoning),
            kubelet_bearing: true,
            node_exists: true,
            unschedulable: false,
            cordoned_by_autopilot: false,
            pods: Vec::new(),
            run,
            drain: DrainPolicy::Always,
            others: Vec::new(),
            options: DrainOptions::default(),
            found: None,
            selector_problem: None,
            now: jiff::Timestamp::now(),
        });
        assert!(
            matches!(step, Step::Fail(ref why) if why.contains("not signalled by the leader")),
            "{step:?}"
        );
    }

    #[tokio::test]
    async fn a_cache_behind_the_signal_is_overruled_by_a_read_of_the_plan() {
        // The cache still shows the run before the signal's, or no Plan at all.
        for cached in [Some(plan_on_run("r1")), None] {
            let (run, requests) = run_seen(cached, plan_on_run("r2"), "r2").await;
            assert_eq!(run, Run::Current);
            assert_eq!(requests.len(), 1, "one Plan read: {requests:#?}");
            assert_eq!(requests[0].method, "GET");
            assert_eq!(
                requests[0].path,
                format!("/apis/autopilot.k0sproject.io/v1beta2/plans/{}", keys::PLAN_NAME)
            );
        }
    }

    #[tokio::test]
    async fn a_plan_read_without_a_definitive_answer_is_retried_not_taken_for_no_plan() {
        let observe = |code: u16, body: serde_json::Value| async move {
            let server = autopilot_shell::fake_api::FakeApiServer::default();
            let client = server.client(move |_, _| (code, body.clone()));
            let (store, _writer) = reflector::store::<Plan>();
            observe_run::<SlimNode>(&client, &store, "w1", &cordoning_in("r2")).await
        };
        let status = autopilot_shell::fake_api::status;
        // An API server whose authorizer has not synced yet, one that does not serve the
        // Plan type (yet), one that does not answer: the pass fails and is retried.
        for (code, reason) in [(403, "Forbidden"), (404, "NotFound"), (503, "ServiceUnavailable")] {
            let seen = observe(code, status(code, reason)).await;
            assert!(seen.is_err(), "{code}: retried, not decided: {seen:?}");
        }
        // A 404 naming the Plan: there is none, a definitive answer.
        let missing = serde_json::json!({"apiVersion": "v1", "kind": "Status",
            "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "plans.autopilot.k0sproject.io \"autopilot\" not found",
            "details": {"name": keys::PLAN_NAME, "group": "autopilot.k0sproject.io",
                        "kind": "plans"}});
        let run = observe(404, missing).await.expect("decided").run;
        assert_eq!(run, Run::Other { signal: "r2".into(), plan: PlanRun::Missing });
    }

    #[tokio::test]
    async fn a_signal_of_an_older_run_is_refused_on_what_the_api_server_says() {
        let (run, requests) = run_seen(Some(plan_on_run("r2")), plan_on_run("r2"), "r1").await;
        let Run::Other { signal, plan } = run else { panic!("another run: {run:?}") };
        assert_eq!((signal.as_str(), plan), ("r1", PlanRun::Run("r2".into())));
        assert_eq!(requests.len(), 1, "the refusal rests on a read: {requests:#?}");
    }

    #[test]
    fn versions_written_over_are_skipped_until_a_newer_one_is_seen() {
        let mut superseded = Superseded::default();
        let some = |v: &str| Some(v.to_owned());
        // A pass cordoned at 1 (leaving 2) and advanced the phase at 2 (leaving 3).
        superseded.wrote_over("Node/w1", some("1"), some("2"));
        superseded.wrote_over("Node/w1", some("2"), some("3"));
        assert!(superseded.written_over("Node/w1", Some("1")));
        assert!(superseded.written_over("Node/w1", Some("2")));
        assert!(!superseded.written_over("ControlNode/w1", Some("1")), "another kind");
        // Version 3 was not written over: it is seen, and the rest is forgotten.
        assert!(!superseded.written_over("Node/w1", Some("3")));
        assert!(!superseded.written_over("Node/w1", Some("2")));
        assert!(superseded.0.is_empty(), "nothing kept once caught up");
        // A write that changed nothing leaves its version current.
        superseded.wrote_over("Node/w1", some("4"), some("4"));
        assert!(!superseded.written_over("Node/w1", Some("4")));
        superseded.wrote_over("Node/w1", None, some("5"));
        assert!(superseded.0.is_empty());
    }
}
