//! One pass of the Plan engine over the Plan `autopilot`: check that the caches are filled,
//! observe, run the machine (answering the removed-API check and controller probes it asks
//! for), write the status, perform the effects. The term and watch wiring that triggers it
//! is the parent module's.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use autopilot_api::keys;
use autopilot_api::v1beta2::{Plan, PlanStatus};
use autopilot_engine::plan::resolve::Answer;
use autopilot_engine::plan::{self, Effect, Observed, PlanView, RemovedApiUse, Requeue};
use autopilot_engine::preflight::scheduler;
use futures::FutureExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::context::{
    CACHE_READY_TIMEOUT, CONFLICT_RETRY, CREATED_MEMORY, Context, Error, Views, WRITTEN_MEMORY,
};
use super::pace;
use crate::{effect, observe};

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
pub(super) async fn reconcile(plan: Arc<Plan>, ctx: Arc<Context>) -> Result<Action, Error> {
    if let Some(later) = caches_not_ready(&ctx, &plan) {
        return Ok(later);
    }
    let name = plan.name_any();

    // The views are taken for the pass and put back when it completes; a pass that fails
    // leaves empty ones, and the next pass builds them afresh.
    let mut views = std::mem::take(&mut *ctx.views.lock().unwrap_or_else(PoisonError::into_inner));
    views.control_nodes.refresh_control_nodes(&ctx.control_nodes);
    views.nodes.refresh_nodes(&ctx.nodes);
    ctx.handoff.mark(&mut views.control_nodes.objects, &mut views.nodes.objects);
    // The status the pass starts from: the one decided last if it is not written yet.
    let (pending, fresh) = take_pending(&ctx, &plan);
    let (transition, views, pending) =
        decide(Arc::clone(&plan), Arc::clone(&ctx), views, pending).await;
    let plan::Transition { status, effects, requeue, .. } = match transition {
        Ok(transition) => transition,
        Err(error) => {
            put_back(&ctx, pending);
            return Err(error);
        }
    };

    let deferred = record_status(&ctx, &plan, &name, (pending, fresh), status).await?;
    forget_visible_signals(&ctx, &views.control_nodes.objects, &views.nodes.objects);
    perform_all(&ctx, &plan, &name, &views, &effects).await?;
    ctx.errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner).reset();
    *ctx.views.lock().unwrap_or_else(PoisonError::into_inner) = views;
    Ok(match (requeue, deferred) {
        (Requeue::OnChange, None) => Action::await_change(),
        (Requeue::After(delay), None) | (Requeue::OnChange, Some(delay)) => Action::requeue(delay),
        (Requeue::After(delay), Some(write)) => Action::requeue(delay.min(write)),
    })
}

/// Run the engine over `plan` with `views` off the runtime thread (DESIGN §14): a pass
/// evaluates preflight conditions (CEL) and compiles new plans, which a Plan's author can
/// make expensive within the static bounds, and the process's one runtime thread also
/// renews the leader's Lease and answers `k0s status`. The lookups the engine asks for
/// (controller probes, the removed-API check) still run on the runtime, awaited from the
/// blocking thread. Returns the transition and the views (to be put back).
async fn decide(
    plan: Arc<Plan>,
    ctx: Arc<Context>,
    views: Views,
    pending: Option<PlanStatus>,
) -> (Result<plan::Transition, Error>, Views, Option<PlanStatus>) {
    let span = tracing::Span::current();
    let runtime = tokio::runtime::Handle::current();
    let pass = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let name = plan.name_any();
        let uid = plan.uid().unwrap_or_default();
        let view = plan_view(&plan, &name, &uid, pending.as_ref().or(plan.status.as_ref()));
        let (check_pods, pod_templates) =
            observe::collect_check_pods(&ctx.check_pods, &ctx.pod_templates);
        let created_pods = created_pods(&ctx);
        let no_readiness = BTreeMap::new();
        let observed = Observed {
            gate_answers: &crate::plan::NO_GATE_ANSWERS,
            plan_access: &crate::plan::NO_PLAN_ACCESS,
            now: jiff::Timestamp::now(),
            term_started: Some(ctx.term_started),
            control_nodes: &views.control_nodes.objects,
            nodes: &views.nodes.objects,
            readiness: &no_readiness,
            api_versions: &plan::NO_API_VERSIONS,
            removed_apis: None,
            check_pods: plan::CheckPods {
                pods: &check_pods,
                templates: &pod_templates,
                created: &created_pods,
            },
        };
        let mut lookups = Lookups { ctx: &ctx, plan: &name };
        let transition =
            runtime.block_on(plan::resolve(view, &observed, &ctx.engine.policy, &mut lookups));
        (transition, views, pending)
    });
    match pass.await {
        Ok(decided) => decided,
        // The engine is pure and does not panic on any input; should it, the pass fails
        // and is retried like any other failed pass (from the status on the Plan).
        Err(error) => (
            Err(Error::Engine(format!("the engine's pass did not finish: {error}"))),
            Views::default(),
            None,
        ),
    }
}

/// When to come back if the caches a pass over `plan` needs are not filled yet; `None` when
/// they are.
///
/// Decisions need complete caches: an empty Node cache would look like missing targets,
/// and a missing template or check Pod must be missing, not merely not listed yet.
/// Checked, not awaited: the watches that fill these caches are this controller's own
/// triggers, and they did not fill while a pass waited for them. The first pass of every
/// leader term waited out a 5 s timeout that way (the caches were filled the moment the
/// timer woke the controller). A pass that finds them not filled yet comes back shortly.
fn caches_not_ready(ctx: &Context, plan: &Plan) -> Option<Action> {
    let unfilled = unfilled_caches(ctx, uses_check_pods(plan));
    if unfilled.is_empty() {
        return None;
    }
    let waited = ctx.started.elapsed();
    if waited < CACHE_READY_TIMEOUT {
        debug!(caches = ?unfilled, "the caches are not filled yet");
        return Some(Action::requeue(CONFLICT_RETRY));
    }
    warn!(
        caches = ?unfilled,
        ?waited,
        "the caches are still not filled (can this controller list and watch them?)"
    );
    Some(Action::requeue(CACHE_READY_TIMEOUT))
}

/// The machine's view of `plan` (named `name`, with uid `uid`) with the status `status`.
fn plan_view<'a>(
    plan: &'a Plan,
    name: &'a str,
    uid: &'a str,
    status: Option<&'a PlanStatus>,
) -> PlanView<'a> {
    PlanView {
        rollback: plan.annotations().get(keys::ANNOTATION_ROLLBACK).map(String::as_str),
        name,
        uid,
        generation: plan.metadata.generation.unwrap_or_default(),
        spec: &plan.spec,
        status,
        steering: plan::Steering::of(plan.annotations()),
        accepted_warnings: plan
            .annotations()
            .get(autopilot_api::keys::ANNOTATION_ACCEPT_WARNINGS)
            .map(String::as_str),
        allow_skew: plan.annotations().get(keys::ANNOTATION_ALLOW_SKEW).map(String::as_str),
    }
}

/// What a pass over the Plan `plan` asks for, looked up for the engine's resolve loop
/// ([`plan::resolve`]): the removed-API check through discovery, controller readiness through
/// `/readyz` probes, the workers' right to read the Plan through a `SubjectAccessReview`. The loop bounds the questions: the removed APIs are looked up once, and
/// a controller still unprobed after the last probe round counts as not ready, which only
/// holds.
struct Lookups<'a> {
    ctx: &'a Context,
    plan: &'a str,
}

impl Answer for Lookups<'_> {
    type Error = Error;

    async fn probe(&mut self, controllers: &[String]) -> BTreeMap<String, plan::Probe> {
        let started = Instant::now();
        let probes = self.ctx.engine.prober.probe_all(controllers, &self.ctx.control_nodes).await;
        debug!(plan = %self.plan, ?controllers, took = ?started.elapsed(), "probed controllers");
        probes
    }

    async fn removed_apis(&mut self, versions: &[String]) -> Result<Vec<RemovedApiUse>, Error> {
        let started = Instant::now();
        let uses =
            autopilot_shell::removed_apis::observe_removed_apis(&self.ctx.engine.client, versions)
                .await?;
        debug!(plan = %self.plan, ?versions, took = ?started.elapsed(), "checked removed APIs");
        Ok(uses)
    }

    /// Never asked: the machine decides without Pods (draining a node is the drain
    /// controller's, which lists the node's Pods itself), so there is nothing to list.
    async fn pods_on(&mut self, _node: &str) -> Result<Vec<Pod>, Error> {
        Ok(Vec::new())
    }

    async fn plan_access(&mut self, reader: &plan::PlanReader) -> plan::PlanAccess {
        let started = Instant::now();
        let answer = autopilot_shell::access::plan_access(&self.ctx.engine.client, reader).await;
        debug!(
            plan = %self.plan,
            user = %reader.user,
            ?answer,
            took = ?started.elapsed(),
            "reviewed whether the workers may read the Plan"
        );
        answer
    }

    async fn gate(&mut self, query: &plan::GateQuery) -> plan::GateAnswer {
        let started = Instant::now();
        let answer =
            crate::gates::answer(&self.ctx.engine.client, &self.ctx.engine.http, query).await;
        debug!(plan = %self.plan, ?query, took = ?started.elapsed(), "looked up a gate");
        answer
    }
}

/// The status decided last and not written yet (see [`pace::Pace`]), taken for a pass over `plan`,
/// and whether the Plan's status is known to be the last one this term wrote (`fresh`).
///
/// Only a fresh status may be deferred: a Plan in the cache that is older than this term's
/// last write (its watch event is on its way) or whose status someone else wrote must be
/// written over at once, with its resourceVersion as the precondition, so a pass on it loses
/// a conflict before it signals anything. A deferred status whose Plan shows another
/// status is dropped: the pass starts from the one on the Plan.
fn take_pending(ctx: &Context, plan: &Plan) -> (Option<PlanStatus>, bool) {
    let mut memory = ctx.status.lock().unwrap_or_else(PoisonError::into_inner);
    let pending = memory.pending.take();
    let Some(written) = &memory.written else { return (None, false) };
    let fresh = plan.metadata.resource_version == written.resource_version
        || plan.status.as_ref().map(status_hash) == Some(written.hash);
    if !fresh && pending.is_some() {
        warn!(
            plan = %plan.name_any(),
            "the Plan's status is not the one this leader wrote last; going on from it"
        );
    }
    (pending.filter(|_| fresh), fresh)
}

/// Put back the status a failed pass took (see [`take_pending`]).
fn put_back(ctx: &Context, pending: Option<PlanStatus>) {
    ctx.status.lock().unwrap_or_else(PoisonError::into_inner).pending = pending;
}

/// A hash of `status` as JSON: tells whether the Plan still carries what this term wrote.
fn status_hash(status: &PlanStatus) -> u64 {
    measure(status).0
}

/// A hash of `status` as JSON and its size, without keeping the JSON.
fn measure(status: &PlanStatus) -> (u64, usize) {
    struct Hashing {
        hasher: std::collections::hash_map::DefaultHasher,
        bytes: usize,
    }
    impl std::io::Write for Hashing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            std::hash::Hasher::write(&mut self.hasher, buf);
            self.bytes += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Hashing { hasher: Default::default(), bytes: 0 };
    // Writing into memory cannot fail, and a status always serialises.
    let _ = serde_json::to_writer(&mut out, status);
    (std::hash::Hasher::finish(&out.hasher), out.bytes)
}

/// Record the pass's status `next` over `plan`: written when it differs from the Plan's
/// (guarded by the Plan's resourceVersion), at once or, for a big status whose change is
/// only progress, when its pace allows (see [`pace::Pace`]); the changes from the status the
/// pass started from (`pending`, else the Plan's) are logged and kept in the metrics.
/// Returns when to come back to write a deferred status.
async fn record_status(
    ctx: &Context,
    plan: &Plan,
    name: &str,
    (pending, fresh): (Option<PlanStatus>, bool),
    next: PlanStatus,
) -> Result<Option<std::time::Duration>, Error> {
    let stored = plan.status.as_ref();
    let unchanged = stored.map_or(next == PlanStatus::default(), |stored| *stored == next);
    // The last write's size stands for this one's: a pass that keeps its status does not
    // serialise it.
    let last = fresh
        .then(|| {
            let memory = ctx.status.lock().unwrap_or_else(PoisonError::into_inner);
            memory.written.as_ref().map(|w| (w.at.elapsed(), w.bytes))
        })
        .flatten();
    let write = (!unchanged).then(|| {
        let (since_last, bytes) = last.unzip();
        ctx.pace.of(stored, &next, bytes.unwrap_or_default(), since_last)
    });
    // A status written is moved into the request, and what the server stored (the same)
    // stands for it from then on: a big status is not copied for the write.
    let next = if write == Some(pace::Write::Now) {
        let (hash, bytes) = measure(&next);
        match effect::write_status(&ctx.plans, plan, next).await {
            Ok(written) => {
                ctx.status.lock().unwrap_or_else(PoisonError::into_inner).written =
                    Some(super::context::Written {
                        resource_version: written.metadata.resource_version,
                        hash,
                        bytes,
                        at: Instant::now(),
                    });
                written.status.unwrap_or_default()
            }
            Err(error) => {
                put_back(ctx, pending);
                return Err(error.into());
            }
        }
    } else {
        next
    };
    // Only the Plan named `autopilot` runs; an ignored Plan would show as a plan that never
    // starts.
    let metrics = (name == keys::PLAN_NAME).then_some(&ctx.engine.metrics);
    let default = PlanStatus::default();
    let before = pending.as_ref().or(stored).unwrap_or(&default);
    if *before != next {
        log_changes(name, before, &next);
        if let Some(metrics) = metrics {
            metrics.record_status(name, before, &next);
        }
    } else if let Some(metrics) = metrics {
        metrics.observe_plan(name, before);
    }
    let deferred = match write {
        Some(pace::Write::After(delay)) => {
            debug!(plan = %name, retry_in = ?delay, "status progress kept for a later write");
            put_back(ctx, Some(next));
            Some(delay)
        }
        Some(pace::Write::Now) | None => None,
    };
    Ok(deferred)
}

/// How many signals of one pass are written at once. The pass chose its nodes (in the
/// machine's order, within the plan's limits) before any is written, so writing them
/// together changes only when each node hears of it: one after the other, a batch of 50
/// at 10,000 workers took a round trip to the API server per node, and the leader wrote
/// more slowly than the nodes answered.
const SIGNAL_WRITES_AT_ONCE: usize = 16;

/// Perform the effects of a pass in the machine's order, except that signals next to each
/// other in it are written together (up to [`SIGNAL_WRITES_AT_ONCE`]); events are queued for
/// the background publisher. Every effect of a run of signals is attempted; the first error
/// is returned after the rest of that run are done, so a signal that was written is also
/// remembered (`Context::written`).
async fn perform_all(
    ctx: &Context,
    plan: &Plan,
    name: &str,
    views: &Views,
    effects: &[Effect],
) -> Result<(), Error> {
    use futures::StreamExt as _;
    let mut rest = effects;
    while let Some(first) = rest.first() {
        let signals =
            rest.iter().take_while(|effect| matches!(effect, Effect::Signal { .. })).count();
        if signals == 0 {
            perform(ctx, plan, name, views, first).await?;
            rest = &rest[1..];
            continue;
        }
        let (run, after) = rest.split_at(signals);
        // The futures are made here, not in the stream, so the stream's item type names no
        // closure (a closure in it is not general enough over lifetimes for a Send future).
        let writes: Vec<_> =
            run.iter().map(|effect| perform(ctx, plan, name, views, effect)).collect();
        let outcomes: Vec<Result<(), Error>> =
            futures::stream::iter(writes).buffer_unordered(SIGNAL_WRITES_AT_ONCE).collect().await;
        outcomes.into_iter().collect::<Result<(), Error>>()?;
        rest = after;
    }
    Ok(())
}

/// The resourceVersion of `target` in `views`, the snapshot the decision was made on.
fn version_of<'v>(views: &'v Views, target: &plan::SignalTarget) -> Option<&'v str> {
    let versions = match target.kind {
        plan::ObjectKind::ControlNode => &views.control_nodes.versions,
        plan::ObjectKind::Node => &views.nodes.versions,
    };
    versions.get(&target.name).map(String::as_str)
}

/// Perform one effect of the pass over `plan`; a signal or a request is written under the
/// resourceVersion of the object in `views`, the snapshot the decision was made on.
async fn perform(
    ctx: &Context,
    plan: &Plan,
    name: &str,
    views: &Views,
    effect: &Effect,
) -> Result<(), Error> {
    match effect {
        Effect::Signal { target, data } if already_written(ctx, target, data) => {
            debug!(plan = %name, node = %target.name, "signal written, cache not caught up yet");
        }
        Effect::Signal { target, data } => {
            let version = version_of(views, target);
            effect::write_signal(&ctx.engine.client, target, version, data).await?;
            if data.phase() == Some(autopilot_api::signal::SignalPhase::ApplyingUpdate) {
                ctx.handoff.delivered(target);
            }
            ctx.engine.metrics.signals_written.inc();
            remember_written(ctx, target, data);
            info!(plan = %name, node = %target.name, kind = ?target.kind, command = data.command.id, "signalled node");
        }
        Effect::CreatePod(pod) => {
            let made = effect::create_pod(&ctx.engine.client, pod).await?;
            if let (Some(uid), Some(pod)) = (made, pod.metadata.name.clone()) {
                let mut created =
                    ctx.created_pods.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                created.insert(pod, (uid, Instant::now()));
            }
            info!(plan = %name, pod = pod.metadata.name.as_deref().unwrap_or_default(), node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default(), "created check Pod");
        }
        Effect::DeletePod { name: pod, uid } => {
            effect::delete_pod(&ctx.engine.client, pod, uid.as_deref()).await?;
            debug!(plan = %name, %pod, "deleted check Pod");
        }
        Effect::GateCheck { target, request } => {
            let version = version_of(views, target);
            effect::write_request(&ctx.engine.client, target, version, request).await?;
            info!(plan = %name, node = %target.name, kind = ?target.kind, command = request.command, attempt = request.asks.attempt, gates = ?request.asks.gates, "asked node to run gate checks");
        }
        Effect::Prestage { target, request } => {
            let version = version_of(views, target);
            effect::write_request(&ctx.engine.client, target, version, request).await?;
            info!(plan = %name, node = %target.name, kind = ?target.kind, command = request.command, "asked node to pre-stage the payload");
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
    Ok(())
}

/// The UIDs of the check Pods this term created (see `Context::created_pods`), by name;
/// forgets those older than [`CREATED_MEMORY`].
fn created_pods(ctx: &Context) -> BTreeMap<String, String> {
    let mut created = ctx.created_pods.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    created.retain(|_, (_, at)| at.elapsed() < CREATED_MEMORY);
    created.iter().map(|(name, (uid, _))| (name.clone(), uid.clone())).collect()
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
pub(super) fn error_policy(plan: Arc<Plan>, error: &Error, ctx: Arc<Context>) -> Action {
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
        for (old, target) in crate::metrics::paired_targets(old, command) {
            let was = old.map(|t| t.state);
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
