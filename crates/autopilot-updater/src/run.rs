//! The updater's kube shell: a kube-runtime `Controller` over UpdateConfigs. Each reconcile
//! of an UpdateConfig runs its check when one is due and asks to be requeued for the next
//! ([`Action::requeue`]); kube-runtime's `finalizer` adds and removes
//! [`keys::UPDATECONFIG_FINALIZER`].
//!
//! The controller runs on every controller, leader or not, so that deleting an UpdateConfig
//! only needs *some* controller up: removing the finalizer is the only thing done without
//! leading. Adding the finalizer, checking the update server and writing Plans happen only
//! while leading; a change of leadership reconciles every UpdateConfig again.
//!
//! A check in progress is interrupted when what it checks for goes away: its UpdateConfig is
//! deleted or its spec changes (seen on the watch before the reconcile that would wait for
//! the check), leadership is lost, or the updater stops. Deleting an UpdateConfig never waits
//! for a silent update server.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use autopilot_api::v1beta2::{Plan, PlanSpec, UpdateConfig, UpdateConfigStatus};
use autopilot_api::{keys, text};
use autopilot_shell::events::{self, Event, EventType, Reporter};
use autopilot_shell::leadership::Leadership;
use autopilot_shell::lifecycle::{Component, Env, Exit, Running as RunningComponent};
use autopilot_shell::retry::WatchBackoff;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::core::v1::{Namespace, Node, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Resource as _, ResourceExt as _};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::source::{self, ClusterInfo, LegacyQuery, RequestOptions, WorkerData};
use autopilot_engine::updater::channel::ChannelAnswer;
use autopilot_engine::updater::decide::{self, Decision, Inputs, NextCheck, Strategy, reasons};
use autopilot_engine::updater::status::{self, Checked, StatusInputs};

/// How soon after an UpdateConfig is seen (or changed, or this controller starts leading)
/// its first check runs. Short, so an UpdateConfig (or a new leader) acts at once, not a full
/// period later; not zero, so a burst of changes to one object settles before the updater
/// talks to the server.
const FIRST_CHECK_DELAY: Duration = Duration::from_millis(500);

/// What the updater needs from its process.
#[derive(Clone, Debug)]
pub struct UpdaterProcess {
    /// The version this controller runs (compared with what the server offers).
    pub running_version: String,
    /// The zone windows and cron schedules are evaluated in (the controller's local zone).
    pub tz: TimeZone,
    /// How often the `periodic` strategy checks (`K0S_UPDATE_PERIOD`).
    pub period: Duration,
    /// Send cluster information headers to the update server (operator opt-in).
    pub send_cluster_info: bool,
    /// Plan plain-http downloads without a digest too (`--allow-unverified-payloads`).
    pub allow_unverified_payloads: bool,
    /// Where the updater records its metrics.
    pub metrics: crate::metrics::Metrics,
}

/// The updater component (see `autopilot_shell::lifecycle`): nothing to start; its run
/// is [`run`].
pub struct Updater {
    /// What the updater needs from its process.
    pub process: UpdaterProcess,
    /// Whether this controller leads (checks run only then).
    pub leadership: Leadership,
}

impl Component for Updater {
    fn name(&self) -> &'static str {
        "updater"
    }

    fn in_trial(&self) -> bool {
        false
    }

    fn start(
        self: Box<Self>,
        env: &Env,
    ) -> BoxFuture<'_, anyhow::Result<Box<dyn RunningComponent>>> {
        let client = env.client.clone();
        Box::pin(async move {
            Ok(Box::new(Started { client, updater: *self }) as Box<dyn RunningComponent>)
        })
    }
}

/// The started updater.
struct Started {
    client: kube::Client,
    updater: Updater,
}

impl RunningComponent for Started {
    fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
        let Started { client, updater: Updater { process, leadership } } = *self;
        Box::pin(async move {
            run(client, process, leadership, stop).await;
            Exit::Stopped
        })
    }
}

/// Run the updater until `stop` is cancelled. Checks run only while this controller leads
/// (`leadership`); finalizers of deleted UpdateConfigs are removed whether leading or not.
pub async fn run(
    client: kube::Client,
    process: UpdaterProcess,
    leadership: Leadership,
    stop: CancellationToken,
) {
    let api = Api::<UpdateConfig>::all(client.clone());
    let (store, writer) = reflector::store::<UpdateConfig>();
    let context = Arc::new(Context {
        source: source::Client::new()
            .map(|source| source.allowing_plain_http(process.allow_unverified_payloads))
            .map_err(|err| text::error_chain(&err)),
        client,
        api: api.clone(),
        process: Arc::new(process),
        leadership: leadership.clone(),
        store: store.clone(),
        schedules: Mutex::new(HashMap::new()),
        running: Mutex::new(HashMap::new()),
        errors: Mutex::new(autopilot_api::backoff::Capped::default()),
        stop: stop.clone(),
    });
    let on_watch = context.clone();
    let objects = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .inspect(move |event| {
            if let Ok(event) = event {
                on_watch.interrupt_stale(event);
            }
        })
        .applied_objects();
    let on_leadership = context.clone();
    let leadership = leadership_changes(leadership).inspect(move |()| {
        let leading = on_leadership.is_leading();
        info!(leading, "updater leadership changed");
        if !leading {
            on_leadership.interrupt_all();
        }
    });
    // One watch, so its backoff can be the controller's trigger backoff: with the short cap
    // every watch of autopilot uses, the updater sees UpdateConfig changes again within
    // `backoff::CAP` of the API server answering after an outage.
    Controller::for_stream(objects, store)
        .trigger_backoff(WatchBackoff::default())
        .reconcile_all_on(leadership)
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile, error_policy, context.clone())
        .for_each(|result| async move {
            if let Err(err) = result {
                debug!(error = %text::error_chain(&err), "updateconfig reconcile did not complete");
            }
        })
        .await;
    context.forget_all();
}

/// One item per start or end of leading, and a last one when the elector is gone (nobody
/// will make this process lead again; [`Context::is_leading`] is then false).
fn leadership_changes(leadership: Leadership) -> impl futures::Stream<Item = ()> {
    futures::stream::unfold(Some(leadership), |leadership| async move {
        let mut leadership = leadership?;
        let next = leadership.next_change().await.is_some().then_some(leadership);
        Some(((), next))
    })
}

/// What the reconciles of every UpdateConfig share.
struct Context {
    client: kube::Client,
    api: Api<UpdateConfig>,
    process: Arc<UpdaterProcess>,
    /// The update-server client, or why it could not be built (each check reports it).
    source: Result<source::Client, String>,
    leadership: Leadership,
    store: Store<UpdateConfig>,
    /// When each UpdateConfig checks next, for the spec (generation) it was scheduled for.
    schedules: Mutex<HashMap<String, Schedule>>,
    /// The checks in progress, by UpdateConfig.
    running: Mutex<HashMap<String, Running>>,
    /// The retry delays of failed finalizer writes; reset by a reconcile that succeeds.
    errors: Mutex<autopilot_api::backoff::Capped>,
    stop: CancellationToken,
}

/// An UpdateConfig's next check.
struct Schedule {
    generation: Option<i64>,
    /// `None`: no further checks for this generation (an invalid strategy, a cron schedule
    /// that never fires again).
    next: Option<Instant>,
}

/// A check in progress, and how to interrupt it.
struct Running {
    generation: Option<i64>,
    interrupt: CancellationToken,
}

/// Lock a mutex of the context; a panic elsewhere leaves the maps usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reconcile one UpdateConfig: only the leader adds the finalizer and checks; whoever sees a
/// deleted UpdateConfig forgets it and removes the finalizer.
async fn reconcile(
    config: Arc<UpdateConfig>,
    ctx: Arc<Context>,
) -> Result<Action, finalizer::Error<Infallible>> {
    if config.meta().deletion_timestamp.is_none() && !ctx.is_leading() {
        // The leader's updater shows this UpdateConfig.
        ctx.forget(&config.name_any());
        return Ok(Action::await_change());
    }
    let action = finalizer(&ctx.api, keys::UPDATECONFIG_FINALIZER, config, |event| async {
        Ok(match event {
            finalizer::Event::Apply(config) => ctx.apply(&config).await,
            finalizer::Event::Cleanup(config) => {
                ctx.forget(&config.name_any());
                Action::await_change()
            }
        })
    })
    .await?;
    lock(&ctx.errors).reset();
    Ok(action)
}

/// A finalizer write failed (a conflict with a newer version, or the API server is away):
/// try again after a capped backoff; a newer version on the watch triggers a pass sooner.
fn error_policy(
    config: Arc<UpdateConfig>,
    error: &finalizer::Error<Infallible>,
    ctx: Arc<Context>,
) -> Action {
    warn!(update_config = %config.name_any(), error = %text::error_chain(error), "updateconfig not reconciled; retrying");
    Action::requeue(lock(&ctx.errors).next_delay())
}

impl Context {
    /// Whether this controller leads; not once the elector is gone.
    fn is_leading(&self) -> bool {
        self.leadership.is_current()
    }

    /// Check now if a check is due, else say when to come back.
    async fn apply(&self, config: &Arc<UpdateConfig>) -> Action {
        let name = config.name_any();
        let generation = config.meta().generation;
        let next = lock(&self.schedules)
            .get(&name)
            .filter(|schedule| schedule.generation == generation)
            .map(|schedule| schedule.next);
        match next {
            None => self.schedule_first(config, &name, generation).await,
            Some(None) => Action::await_change(),
            Some(Some(at)) => match at.checked_duration_since(Instant::now()) {
                Some(wait) if !wait.is_zero() => Action::requeue(wait),
                Some(_) | None => self.check_now(config, &name, generation).await,
            },
        }
    }

    /// A new UpdateConfig, a new spec or a new leader: `periodic` checks soon; `cron` only
    /// when its schedule fires (as k0s). An invalid strategy is an Event until the spec
    /// changes.
    async fn schedule_first(
        &self,
        config: &Arc<UpdateConfig>,
        name: &str,
        generation: Option<i64>,
    ) -> Action {
        let first = match Strategy::from_spec(config.spec.upgrade_strategy.as_ref()) {
            Ok(Strategy::Periodic(_)) => Some(FIRST_CHECK_DELAY),
            Ok(strategy @ Strategy::Cron(_)) => {
                let now = Timestamp::now();
                let next = strategy.next_check(now, &self.process.tz, self.process.period);
                if next.is_none() {
                    info!(update_config = %name, "the cron schedule never fires; no checks");
                }
                next.map(|at| until(now, at))
            }
            Err(err) => {
                let updater = self.updater(config);
                let previous = updater.current_status().await;
                let message = format!("invalid upgradeStrategy: {err}");
                let outcome = updater.failed(previous, reasons::INVALID, message, None);
                updater.record(&outcome).await;
                None
            }
        };
        if first.is_some() {
            // Reconciling until the first check of this generation (not again for a new
            // leader: the generation it checked stays checked).
            let updater = self.updater(config);
            let previous = updater.current_status().await;
            let checked = previous.as_ref().and_then(|s| s.observed_generation) == generation;
            if !checked {
                let pending =
                    updater.status_after(previous.as_ref(), Timestamp::now(), Checked::Pending);
                updater.write_status(previous.as_ref(), &pending).await;
            }
        }
        if first.is_some() {
            let server = &config.spec.update_server;
            let default = server == autopilot_api::keys::DEFAULT_UPDATE_SERVER;
            info!(update_config = %name, ?generation, update_server = %server, channel = %config.spec.channel, "starting updater");
            if default {
                warn!(update_config = %name, update_server = %server, "no updateServer set: asking upstream k0s's update server, whose versions are upstream k0s releases");
            }
        }
        self.set_schedule(name, generation, first);
        first.map_or_else(Action::await_change, Action::requeue)
    }

    /// Run one check (interruptible, see the module documentation), record it, and schedule
    /// the next one.
    async fn check_now(
        &self,
        config: &Arc<UpdateConfig>,
        name: &str,
        generation: Option<i64>,
    ) -> Action {
        let strategy = match Strategy::from_spec(config.spec.upgrade_strategy.as_ref()) {
            Ok(strategy) => strategy,
            // Refused when this generation was first seen, and recorded then.
            Err(_) => return Action::await_change(),
        };
        let interrupt = self.stop.child_token();
        lock(&self.running)
            .insert(name.to_string(), Running { generation, interrupt: interrupt.clone() });
        let updater = self.updater(config);
        let checked = interrupt
            .run_until_cancelled(async {
                let previous = updater.current_status().await;
                let outcome = match &self.source {
                    Ok(source) => updater.check(&strategy, source, previous).await,
                    Err(err) => updater.failed(
                        previous,
                        reasons::SERVER_ERROR,
                        format!("cannot create the update-server client: {err}"),
                        None,
                    ),
                };
                updater.record(&outcome).await;
                outcome
            })
            .await;
        lock(&self.running).remove(name);
        let Some(outcome) = checked else {
            // What interrupted it (a deletion, a new spec, lost leadership) reconciles next.
            debug!(update_config = %name, "update check interrupted");
            return Action::await_change();
        };
        let now = Timestamp::now();
        let NextCheck { at: next, wait, window_open } =
            strategy.after_check(now, &self.process.tz, self.process.period, outcome.opens_at);
        self.process.metrics.record_schedule(name, next, window_open);
        match next {
            Some(next) => debug!(update_config = %name, next = %next, "next update check"),
            None => info!(update_config = %name, "no further checks are scheduled"),
        }
        self.set_schedule(name, generation, wait);
        wait.map_or_else(Action::await_change, Action::requeue)
    }

    fn updater(&self, config: &Arc<UpdateConfig>) -> Check {
        Check { client: self.client.clone(), process: self.process.clone(), config: config.clone() }
    }

    fn set_schedule(&self, name: &str, generation: Option<i64>, wait: Option<Duration>) {
        let next = wait.map(|wait| Instant::now() + wait);
        lock(&self.schedules).insert(name.to_string(), Schedule { generation, next });
    }

    /// Interrupt a check the watch shows is no longer wanted (its UpdateConfig deleted or
    /// its spec changed); forget UpdateConfigs that are gone.
    fn interrupt_stale(&self, event: &watcher::Event<UpdateConfig>) {
        match event {
            watcher::Event::Apply(config) | watcher::Event::InitApply(config) => {
                let deleting = config.meta().deletion_timestamp.is_some();
                let generation = config.meta().generation;
                if let Some(running) = lock(&self.running).get(&config.name_any())
                    && (deleting || running.generation != generation)
                {
                    running.interrupt.cancel();
                }
            }
            watcher::Event::Delete(config) => {
                let name = config.name_any();
                if let Some(running) = lock(&self.running).get(&name) {
                    running.interrupt.cancel();
                }
                self.forget(&name);
            }
            // A re-list is complete (the store holds it): UpdateConfigs deleted while the
            // watch was away are not reconciled again, so they are forgotten here.
            watcher::Event::InitDone => {
                let gone: Vec<String> = lock(&self.schedules)
                    .keys()
                    .filter(|name| self.store.get(&ObjectRef::new(name)).is_none())
                    .cloned()
                    .collect();
                for name in gone {
                    self.forget(&name);
                }
            }
            watcher::Event::Init => {}
        }
    }

    /// Interrupt every check in progress (leadership lost).
    fn interrupt_all(&self) {
        for running in lock(&self.running).values() {
            running.interrupt.cancel();
        }
    }

    /// Stop showing and scheduling an UpdateConfig (deleted, or not ours to check).
    fn forget(&self, name: &str) {
        if lock(&self.schedules).remove(name).is_some() {
            info!(update_config = name, "stopping updater");
        }
        self.process.metrics.forget(name);
    }

    fn forget_all(&self) {
        let names: Vec<String> = lock(&self.schedules).keys().cloned().collect();
        for name in names {
            self.forget(&name);
        }
    }
}

/// How long from `now` until `at`; zero if it has passed.
fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(now.duration_until(at)).unwrap_or(Duration::ZERO)
}

/// One check of one UpdateConfig: what it reads and writes with.
struct Check {
    client: kube::Client,
    process: Arc<UpdaterProcess>,
    config: Arc<UpdateConfig>,
}

/// What a check reads of the cluster's nodes.
struct Fleet {
    /// Which payloads some node requires signed.
    signatures: decide::Signatures,
    /// Every ControlNode, by name.
    control_nodes: BTreeMap<String, autopilot_engine::plan::TargetObject>,
    /// Every Node (from its metadata), by name.
    nodes: BTreeMap<String, autopilot_engine::plan::TargetObject>,
}

/// What one check ended with, for the Event, the log and the status.
struct Outcome {
    reason: &'static str,
    message: String,
    warning: bool,
    /// When to check again sooner than the next period: the window opens, or the minimum
    /// interval of the offered version's kind ends.
    opens_at: Option<Timestamp>,
    /// The status before the check (as read then) and after it.
    status: (Option<UpdateConfigStatus>, UpdateConfigStatus),
}

impl Check {
    /// One check: token, server answer, current Plan, decision, Plan write. `previous` is
    /// the status as read before the check.
    async fn check(
        &self,
        strategy: &Strategy,
        source: &source::Client,
        previous: Option<UpdateConfigStatus>,
    ) -> Outcome {
        let token = self.read_token().await;
        let plans = Api::<Plan>::all(self.client.clone());
        let plan = match plans.get_opt(keys::PLAN_NAME).await {
            Ok(plan) => plan,
            Err(err) => {
                let message = format!("cannot read the autopilot plan: {err}");
                return self.failed(previous, reasons::SERVER_ERROR, message, None);
            }
        };
        let answer = match self.fetch(strategy, source, token.as_deref(), plan.as_ref()).await {
            Ok(answer) => answer,
            Err(err) => {
                let message = text::error_chain(&err);
                return self.failed(previous, reasons::SERVER_ERROR, message, None);
            }
        };
        let fleet = match self.fleet().await {
            Ok(fleet) => fleet,
            Err(err) => {
                let message = format!(
                    "cannot read the Nodes and ControlNodes (the keys they require, the \
                     versions they run): {err}"
                );
                return self.failed(previous, reasons::SERVER_ERROR, message, Some(&answer));
            }
        };
        self.decide_and_write(&plans, plan.as_ref(), &answer, &fleet, previous).await
    }

    /// Decide on what the check read, write the Plan it decided on, and say what came of it.
    async fn decide_and_write(
        &self,
        plans: &Api<Plan>,
        plan: Option<&Plan>,
        answer: &ChannelAnswer,
        fleet: &Fleet,
        previous: Option<UpdateConfigStatus>,
    ) -> Outcome {
        let now = Timestamp::now();
        let decision = decide::decide(&Inputs {
            spec: &self.config.spec,
            now,
            tz: &self.process.tz,
            running_version: &self.process.running_version,
            answer,
            plan,
            allow_unverified_payloads: self.process.allow_unverified_payloads,
            signatures: fleet.signatures,
            control_nodes: &fleet.control_nodes,
            nodes: &fleet.nodes,
            status: previous.as_ref(),
        });
        let opens_at = match &decision {
            Decision::OutsideWindow { opens_at, .. } => *opens_at,
            Decision::MinIntervalWait { allowed_at, .. } => Some(*allowed_at),
            _ => None,
        };
        let written = match &decision {
            Decision::CreatePlan { spec, .. } => self.create_plan(plans, spec).await,
            Decision::ReplacePlan { spec, .. } => match plan {
                Some(existing) => self.replace_plan(plans, existing, spec).await,
                None => self.create_plan(plans, spec).await,
            },
            Decision::UpToDate { .. }
            | Decision::OutsideWindow { .. }
            | Decision::MinIntervalWait { .. }
            | Decision::PlanRunning { .. }
            | Decision::AlreadyPlanned { .. }
            | Decision::RolledBackVersion { .. }
            | Decision::UnverifiedPayload { .. }
            | Decision::VersionSkew { .. }
            | Decision::Invalid(_) => Ok(()),
        };
        if let Err(err) = written {
            let message = format!("cannot write the autopilot plan: {err}");
            return self.failed(previous, reasons::SERVER_ERROR, message, Some(answer));
        }
        let status = self.status_after(
            previous.as_ref(),
            now,
            Checked::Decided { decision: &decision, answer },
        );
        Outcome {
            reason: decision.reason(),
            message: decision.message(),
            warning: decision.is_problem(),
            opens_at,
            status: (previous, status),
        }
    }

    /// A check that could not finish (`reason`, `message`), after the server gave `answer`
    /// if it did.
    fn failed(
        &self,
        previous: Option<UpdateConfigStatus>,
        reason: &'static str,
        message: String,
        answer: Option<&ChannelAnswer>,
    ) -> Outcome {
        let checked = Checked::Failed { reason, message: &message, answer };
        let status = self.status_after(previous.as_ref(), Timestamp::now(), checked);
        Outcome { reason, message, warning: true, opens_at: None, status: (previous, status) }
    }

    /// The status after `checked` (the pure [`status::status`]).
    fn status_after(
        &self,
        previous: Option<&UpdateConfigStatus>,
        now: Timestamp,
        checked: Checked<'_>,
    ) -> UpdateConfigStatus {
        status::status(&StatusInputs {
            previous,
            generation: self.config.meta().generation,
            now,
            running_version: &self.process.running_version,
            checked,
        })
    }

    /// The UpdateConfig's status as the API server has it now (the watched copy may be a
    /// write behind); the watched copy's when it cannot be read.
    async fn current_status(&self) -> Option<UpdateConfigStatus> {
        let api = Api::<UpdateConfig>::all(self.client.clone());
        match api.get_status(&self.config.name_any()).await {
            Ok(config) => config.status,
            Err(err) => {
                debug!(update_config = %self.config.name_any(), error = %err, "cannot read the updateconfig status; using the watched one");
                self.config.status.clone()
            }
        }
    }

    /// Merge-patch the status subresource from `previous` (as read) to `new`; nothing when
    /// they are equal. Idempotent: the same patch again changes nothing. A failed write is
    /// logged; the next check writes the status it computes then.
    async fn write_status(&self, previous: Option<&UpdateConfigStatus>, new: &UpdateConfigStatus) {
        let Some(patch) = status::merge_patch(previous, new) else { return };
        let name = self.config.name_any();
        let api = Api::<UpdateConfig>::all(self.client.clone());
        let params = PatchParams {
            field_manager: Some(keys::FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        if let Err(err) = api.patch_status(&name, &params, &Patch::Merge(&patch)).await {
            warn!(update_config = %name, error = %err, "cannot write the updateconfig status");
        }
    }

    /// The Nodes (their metadata only) and ControlNodes as the Plan engine sees them, and
    /// which payloads some node requires signed (the keys they publish).
    async fn fleet(&self) -> Result<Fleet, kube::Error> {
        use autopilot_engine::snapshot;
        use k8s_openapi::api::core::v1::Node;
        let params = kube::api::ListParams::default();
        let nodes = Api::<Node>::all(self.client.clone());
        let control_nodes = Api::<autopilot_api::v1beta2::ControlNode>::all(self.client.clone());
        let nodes: BTreeMap<String, _> = nodes
            .list_metadata(&params)
            .await?
            .items
            .into_iter()
            .map(|m| {
                snapshot::node_object(&snapshot::SlimNode {
                    metadata: m.metadata,
                    ..Default::default()
                })
            })
            .map(|object| (object.name.clone(), object))
            .collect();
        let control_nodes: BTreeMap<String, _> = control_nodes
            .list(&params)
            .await?
            .items
            .iter()
            .map(snapshot::control_node_object)
            .map(|object| (object.name.clone(), object))
            .collect();
        let mut signatures = decide::Signatures::default();
        for object in nodes.values().chain(control_nodes.values()) {
            signatures.payloads |= !object.required_keys.payloads.is_empty();
            signatures.bundles |= !object.required_keys.bundles.is_empty();
        }
        Ok(Fleet { signatures, control_nodes, nodes })
    }

    /// Ask the update server what it offers (with `token`, if any), in the strategy's way:
    /// the index for `periodic`, the legacy query (with the cluster id and how `plan` ended)
    /// for `cron`.
    async fn fetch(
        &self,
        strategy: &Strategy,
        source: &source::Client,
        token: Option<&str>,
        plan: Option<&Plan>,
    ) -> Result<ChannelAnswer, source::Error> {
        let spec = &self.config.spec;
        let cluster_info =
            if self.process.send_cluster_info { self.cluster_info().await } else { None };
        let options = RequestOptions { token, cluster_info: cluster_info.as_ref() };
        match strategy {
            Strategy::Periodic(_) => {
                source.fetch_index(&spec.update_server, &spec.channel, options).await
            }
            Strategy::Cron(_) => {
                let query = LegacyQuery {
                    cluster_id: self.kube_system_uid().await.unwrap_or_default(),
                    last_update_status: plan
                        .and_then(|p| p.status.as_ref())
                        .map(|s| s.state.to_string())
                        .unwrap_or_default(),
                    current_version: self.process.running_version.clone(),
                };
                source.fetch_legacy(&spec.update_server, &spec.channel, &query, options).await
            }
        }
    }

    async fn create_plan(&self, plans: &Api<Plan>, spec: &PlanSpec) -> Result<(), kube::Error> {
        let plan = Plan {
            metadata: ObjectMeta { name: Some(keys::PLAN_NAME.to_string()), ..Default::default() },
            spec: spec.clone(),
            status: None,
        };
        let params = PostParams {
            field_manager: Some(keys::FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        plans.create(&params, &plan).await.map(drop)
    }

    /// Replace the spec of an ended Plan; the read's resourceVersion guards against a
    /// concurrent change (a conflict fails this check; the next one retries).
    async fn replace_plan(
        &self,
        plans: &Api<Plan>,
        existing: &Plan,
        spec: &PlanSpec,
    ) -> Result<(), kube::Error> {
        let mut plan = existing.clone();
        plan.spec = spec.clone();
        let params = PostParams {
            field_manager: Some(keys::FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        plans.replace(keys::PLAN_NAME, &params, &plan).await.map(drop)
    }

    /// The bearer token, if the Secret and its `token` key exist.
    async fn read_token(&self) -> Option<String> {
        let secrets =
            Api::<Secret>::namespaced(self.client.clone(), keys::UPDATE_SERVER_TOKEN_NAMESPACE);
        match secrets.get_opt(keys::UPDATE_SERVER_TOKEN_SECRET).await {
            Ok(secret) => secret
                .and_then(|s| s.data)
                .and_then(|mut data| data.remove(keys::UPDATE_SERVER_TOKEN_KEY))
                .and_then(|bytes| String::from_utf8(bytes.0).ok())
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
            Err(err) => {
                warn!(error = %err, "cannot read the update-server token; checking without it");
                None
            }
        }
    }

    async fn kube_system_uid(&self) -> Option<String> {
        let namespaces = Api::<Namespace>::all(self.client.clone());
        match namespaces.get(keys::CLUSTER_ID_NAMESPACE).await {
            Ok(ns) => ns.metadata.uid,
            Err(err) => {
                warn!(error = %err, "cannot read the kube-system namespace");
                None
            }
        }
    }

    /// Cluster facts for the opt-in headers (REF §11.4); `None` if they cannot be read.
    async fn cluster_info(&self) -> Option<ClusterInfo> {
        let kube_system_uid = self.kube_system_uid().await?;
        let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            self.client.clone(),
            keys::NODE_LEASE_NAMESPACE,
        );
        let control_plane_nodes_count = match leases.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter(|l| l.name_any().starts_with(keys::CONTROLLER_LEASE_PREFIX))
                .count(),
            Err(err) => {
                warn!(error = %err, "cannot list node leases for cluster info");
                return None;
            }
        };
        let mut workers = WorkerData::default();
        match Api::<Node>::all(self.client.clone()).list(&ListParams::default()).await {
            Ok(nodes) => {
                for node in nodes.items {
                    let arch = node.labels().get(keys::LABEL_ARCH).cloned().unwrap_or_default();
                    *workers.archs.entry(arch).or_default() += 1;
                    let info = node.status.and_then(|s| s.node_info);
                    let (os, runtime) =
                        info.map(|i| (i.os_image, i.container_runtime_version)).unwrap_or_default();
                    *workers.oses.entry(os).or_default() += 1;
                    *workers.runtimes.entry(runtime).or_default() += 1;
                }
            }
            Err(err) => {
                warn!(error = %err, "cannot list nodes for cluster info");
                return None;
            }
        }
        Some(ClusterInfo {
            storage_type: "etcd".to_string(),
            kube_system_uid,
            control_plane_nodes_count: u32::try_from(control_plane_nodes_count).unwrap_or(u32::MAX),
            workers,
            version: self.process.running_version.clone(),
            cni_provider: String::new(),
            arch: go_arch().to_string(),
        })
    }

    /// Log the outcome and record it as an Event on the UpdateConfig, in its status and in
    /// the metrics.
    async fn record(&self, outcome: &Outcome) {
        let name = self.config.name_any();
        self.process.metrics.record_check(&name, Timestamp::now(), outcome.reason);
        let (previous, status) = &outcome.status;
        self.process.metrics.record_end_of_life(&name, status.end_of_life.as_ref());
        self.write_status(previous.as_ref(), status).await;
        if outcome.warning {
            warn!(update_config = %name, reason = outcome.reason, "{}", outcome.message);
        } else {
            info!(update_config = %name, reason = outcome.reason, "{}", outcome.message);
        }
        if let Err(err) = publish_event(&self.client, &self.config, outcome).await {
            warn!(update_config = %name, error = %err, "cannot publish updater event");
        }
    }
}

/// The Event recording `outcome` on `config`, published and awaited, so the Events of one
/// UpdateConfig follow its checks in order.
async fn publish_event(
    client: &kube::Client,
    config: &UpdateConfig,
    outcome: &Outcome,
) -> Result<(), kube::Error> {
    let regarding = ObjectReference {
        api_version: Some(keys::API_VERSION.to_string()),
        kind: Some(keys::KIND_UPDATE_CONFIG.to_string()),
        name: Some(config.name_any()),
        uid: config.uid(),
        resource_version: config.resource_version(),
        ..Default::default()
    };
    let event = Event {
        regarding,
        action: "CheckForUpdate",
        type_: if outcome.warning { EventType::Warning } else { EventType::Normal },
        reason: outcome.reason,
        // Cut short of the publisher's limit, so the note carries no `…` mark.
        note: text::cut(&outcome.message, events::NOTE_MAX_BYTES).to_string(),
    };
    let reporter = Reporter {
        controller: keys::UPDATER_REPORTER.to_string(),
        instance: keys::UPDATER_REPORTER.to_string(),
    };
    events::publish(client, &reporter, &event).await
}

/// This controller's architecture, Go-style as the update server expects.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "riscv64" => "riscv64",
        other => other,
    }
}

impl UpdaterProcess {
    /// An updater for a controller running `running_version`, evaluating windows in the
    /// controller's local zone (as k0s does).
    pub fn local(
        running_version: &str,
        period: Duration,
        send_cluster_info: bool,
        allow_unverified_payloads: bool,
        metrics: crate::metrics::Metrics,
    ) -> Self {
        Self {
            running_version: running_version.to_string(),
            tz: TimeZone::system(),
            period,
            send_cluster_info,
            allow_unverified_payloads,
            metrics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn leadership_changes_once_per_change_and_once_more_when_the_elector_is_gone() {
        use autopilot_shell::leadership::Claim;
        let lease = Duration::from_secs(15);
        let (elector, leadership) = Leadership::new("c1_0000abcd");
        let seen = leadership.clone();
        let mut changes = std::pin::pin!(leadership_changes(leadership));
        assert!(futures::poll!(changes.next()).is_pending(), "nobody leads yet");
        elector.publish(Some(Claim::renewed("c1_0000abcd", Instant::now(), lease)));
        assert_eq!(changes.next().await, Some(()));
        assert!(seen.is_current());
        assert!(futures::poll!(changes.next()).is_pending(), "still leading");
        elector.publish(None);
        assert_eq!(changes.next().await, Some(()));
        assert!(!seen.is_current());
        assert!(futures::poll!(changes.next()).is_pending(), "nobody leads");
        elector.publish(Some(Claim::renewed("c1_0000abcd", Instant::now(), lease)));
        assert_eq!(changes.next().await, Some(()));
        assert!(futures::poll!(changes.next()).is_pending(), "still leading");
        drop(elector);
        // The claim has not run out, but nobody will renew it any more.
        assert_eq!(changes.next().await, Some(()));
        assert!(!seen.is_current());
        assert_eq!(changes.next().await, None);
    }

    #[test]
    fn go_arch_uses_go_names() {
        let arch = go_arch();
        assert_ne!(arch, "x86_64");
        assert_ne!(arch, "aarch64");
    }
}
