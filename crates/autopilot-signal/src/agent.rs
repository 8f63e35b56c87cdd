//! The signal agent: the shell around [`autopilot_engine::agent::next`] for this node's own object.
//!
//! Watches only its own signal object (its `Node` for a worker), and on every change: reads
//! the signal, gathers the host facts, asks the phase machine for the next step and performs
//! it — writing the node-side status (with the object's resourceVersion as precondition) or
//! running a host action. A restart ends [`run`] with [`Outcome::Restart`]; the binary then
//! re-executes itself (or exits for a supervisor) after a clean shutdown.

use std::time::Duration;

use autopilot_api::signal::{self, SignalData, SignalPhase, SignalStatus, UpdateRef};
use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use std::collections::BTreeMap;

use anyhow::Context as _;
use autopilot_api::backoff::Capped;
use autopilot_api::preflight::RawRecord;
use autopilot_api::v1beta2::Plan;
use autopilot_api::{ask, keys};
use autopilot_shell::retry::{self, WatchBackoff};

use crate::host::{self, Host, SignalKey, SignatureSource};
use crate::preflight;
use crate::status;
use autopilot_engine::agent::{self as phase, Step};
use autopilot_engine::authorize::{self, read};

/// First wait before retrying a failed idempotent action; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(2);

/// Longest wait between retries of a failed idempotent action.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// The longest reason the agent writes (the controller caps what it copies the same way).
pub const MAX_REASON_BYTES: usize = 1024;

/// How [`run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The shutdown signal arrived.
    Stopped,
    /// The new binary is in place and the restart is prepared: restart the process.
    Restart,
}

/// What the agent acts as.
#[derive(Clone, Debug)]
pub struct Agent {
    /// The object's name (this node).
    pub name: String,
    /// The running k0s version.
    pub version: String,
    /// Whether a kubelet runs here (the leader drains it).
    pub kubelet: bool,
    /// Act only on airgap signals (the Node of a controller+worker: its k0s updates come
    /// through its ControlNode, and one process must not swap its binary twice).
    pub airgap_only: bool,
    /// Where the agent shows the signal it acts on (for `k0s status`).
    pub board: status::Board,
    /// Where the agent records its metrics.
    pub metrics: crate::metrics::Metrics,
    /// The node-local allow-list of executables preflight `exec` checks may run
    /// ([`crate::preflight::exec`]); absent means no `exec` check can run here.
    pub exec_allow_list: std::path::PathBuf,
    /// Act on update signals whose payload is plain http without a sha256
    /// (`--allow-unverified-payloads`); refused otherwise.
    pub allow_unverified_payloads: bool,
    /// The ids of the keys this node requires signatures by, published on its object.
    pub required_keys: RequiredKeys,
    /// Where the agent shows whether its watch of its own object is established (the
    /// health of the post-update watch, `crate::post_update`); `None`: nowhere.
    pub established: Option<crate::post_update::Established>,
}

/// The ids of the keys a node requires signatures by (DESIGN §14), as it publishes them in
/// [`keys::ANNOTATION_PAYLOAD_KEYS`] and [`keys::ANNOTATION_BUNDLE_KEYS`] so NewPlan can
/// refuse an unsigned plan up front. Empty: the annotation is removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequiredKeys {
    /// On `k0supdate` payloads (every trusted key).
    pub payloads: Vec<String>,
    /// On airgap bundles (every trusted key with `--require-signed-bundles`, else none).
    pub bundles: Vec<String>,
}

impl RequiredKeys {
    /// The annotations to publish (`None`: remove), keyed by name.
    fn annotations(&self) -> [(&'static str, Option<String>); 2] {
        let value = |ids: &[String]| (!ids.is_empty()).then(|| ids.join(","));
        [
            (keys::ANNOTATION_PAYLOAD_KEYS, value(&self.payloads)),
            (keys::ANNOTATION_BUNDLE_KEYS, value(&self.bundles)),
        ]
    }
}

/// Publish on `object` what the leader and the CLI read from it, if it does not show it yet:
/// the keys this node requires and, on a Node, the k0s version it runs (a kubelet does not
/// publish it). A failure is logged, never fatal: the node enforces its keys itself; the
/// annotations only let a plan fail before any node is touched and show the version.
async fn publish_annotations<K>(api: &Api<K>, agent: &Agent, object: &K)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut wanted = agent.required_keys.annotations().to_vec();
    if K::kind(&()) == "Node" {
        wanted.push((keys::ANNOTATION_K0S_VERSION, Some(agent.version.clone())));
    }
    let current = object.meta().annotations.as_ref();
    let stale =
        wanted.iter().any(|(key, value)| current.and_then(|a| a.get(*key)) != value.as_ref());
    if !stale {
        return;
    }
    let annotations: serde_json::Map<String, serde_json::Value> = wanted
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.map_or(serde_json::Value::Null, Into::into)))
        .collect();
    let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
    let params = kube::api::PatchParams::default();
    match api.patch(&agent.name, &params, &kube::api::Patch::Merge(&patch)).await {
        Ok(_) => {
            info!(node = %agent.name, keys = ?agent.required_keys, "published the keys this node requires and its version")
        }
        Err(err) => {
            warn!(node = %agent.name, error = %err, "could not publish the keys this node requires and its version")
        }
    }
}

/// Act on the signals of the object `agent.name` of kind `K` until `shutdown` resolves or a
/// restart is due.
pub async fn run<K, H>(
    client: kube::Client,
    agent: Agent,
    host: &H,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Outcome>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    H: Host,
{
    let api: Api<K> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", agent.name));
    let mut objects = watcher(api.clone(), config).backoff(WatchBackoff::default()).boxed();
    let established = |now: bool| {
        if let Some(established) = &agent.established {
            established.set(now);
        }
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let mut retry = FIRST_RETRY;
    let mut retries = Retries::new();
    let mut latest: Option<K> = None;
    let mut again = false;
    let mut memory = Memory::default();
    info!(node = %agent.name, kind = %K::kind(&()), "signal agent watching its own object");
    loop {
        // Act on the newest version of the object; after a failed action, try again after
        // the backoff even if nothing changes; after an action that changed only the host,
        // decide again at once.
        let pending_retry = latest.is_some();
        if again {
            again = false;
        } else {
            tokio::select! {
                event = objects.next() => match own_object(event, &established, &agent.name)? {
                    Some(object) => latest = Some(object),
                    None => continue,
                },
                () = tokio::time::sleep(retry), if pending_retry => {}
                () = &mut shutdown => return Ok(Outcome::Stopped),
            }
        }
        let Some(object) = latest.take() else { continue };
        // A stop does not wait for a download or a check to finish: every action is
        // idempotent and crash-safe, so the next start takes it up again.
        let acted = tokio::select! {
            acted = act(&api, &agent, host, &object, &mut memory) => acted,
            () = &mut shutdown => return Ok(Outcome::Stopped),
        };
        match acted {
            Ok(Acted::Idle) => retries.reset(),
            Ok(Acted::Again) => {
                retries.reset();
                latest = Some(object);
                again = true;
            }
            Ok(Acted::Restart) => return Ok(Outcome::Restart),
            Ok(Acted::Retry) => {
                retry = retries.host.next_delay();
                latest = Some(object);
            }
            Err(err) => {
                retry = retries.api.next_delay();
                retries.host.continue_after(retry);
                latest = after_failed_step(&api, &agent.name, object, &err, retry).await;
            }
        }
    }
}

/// The waits before the agent tries again.
struct Retries {
    /// After failed API requests (an outage, a conflict): the short capped backoff of the
    /// watches, not the long one of failing host actions, so a report that could not be
    /// written during an outage goes out within `backoff::CAP` of the API server answering
    /// again, instead of up to 30 s later (the plan waits for that report).
    api: Capped,
    /// After failed host actions. Both kinds of failure make one sequence: a host retry
    /// right after a failed API request waits twice that request's delay.
    host: Capped,
}

impl Retries {
    fn new() -> Self {
        Self { api: Capped::default(), host: Capped::new(FIRST_RETRY, MAX_RETRY) }
    }

    /// A step went through: the next failure starts from the first delay.
    fn reset(&mut self) {
        self.host.reset();
        self.api.reset();
    }
}

/// The agent's own object from a watch `event`, when there is one to act on; `None` for the
/// events that only say where the watch stands (reported to `established`). An ended watch
/// is an error.
fn own_object<K>(
    event: Option<Result<watcher::Event<K>, watcher::Error>>,
    established: &dyn Fn(bool),
    name: &str,
) -> anyhow::Result<Option<K>> {
    match event {
        Some(Ok(watcher::Event::InitApply(object))) => Ok(Some(object)),
        Some(Ok(watcher::Event::Apply(object))) => {
            established(true);
            Ok(Some(object))
        }
        // The list is in and the watch starts: the agent hears its object now.
        Some(Ok(watcher::Event::InitDone)) => {
            established(true);
            Ok(None)
        }
        Some(Ok(watcher::Event::Init | watcher::Event::Delete(_))) => Ok(None),
        Some(Err(err)) => {
            established(false);
            debug!(error = %err, "watch of own object interrupted, resuming");
            Ok(None)
        }
        None => anyhow::bail!("the watch of {name} ended"),
    }
}

/// Log a failed step on `object` and re-read it before retrying (in `retry`): the failure
/// may be a conflict. If the API server does not answer, retry on the object as it was
/// (writes carry its resourceVersion, so a stale copy only costs a conflict) rather than
/// dropping it and waiting for a watch event that a resumed watch may never send.
async fn after_failed_step<K>(
    api: &Api<K>,
    name: &str,
    object: K,
    err: &anyhow::Error,
    retry: Duration,
) -> Option<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    // Logged outside the step's span: name the signal here.
    let data = signal::from_meta_unchecked(object.meta()).ok().flatten();
    warn!(
        node = %name,
        plan = data.as_ref().map_or("", |d| d.plan_id.as_str()),
        command = data.as_ref().map(|d| d.command.id),
        phase = data.as_ref().and_then(SignalData::phase).map_or("", SignalPhase::as_str),
        error = %format!("{err:#}"),
        retry_in = ?retry,
        "signal agent step failed"
    );
    match api.get_opt(name).await {
        Ok(fresh) => fresh,
        Err(_) => Some(object),
    }
}

enum Acted {
    /// Done for now; wait for the object to change.
    Idle,
    /// The host changed but not the phase: decide again now.
    Again,
    /// An idempotent action failed; try again after the backoff.
    Retry,
    /// Restart the process now.
    Restart,
}

/// What the agent remembers between passes.
#[derive(Default)]
struct Memory {
    /// How often in a row the current signal's action failed.
    failures: Failures,
    /// The last signal found authorized by the Plan (without its status), with the
    /// signature its frozen entry gives: the same signal is not checked again on every pass.
    authorized: Option<(SignalData, SignatureSource)>,
    /// The last signal (without its status) whose drain the Plan status was found to record.
    drained: Option<SignalData>,
    /// The last signal (without its status) seen at a terminal phase, with that phase: the
    /// same signal shown at an earlier phase again is a rewind ([`phase::rewound`]).
    ended: Option<(SignalData, SignalPhase)>,
    /// Since when reading the Plan has been forbidden (or its type unserved), across the
    /// retries of every read that authorizes something ([`read_plan`]).
    plan_read: read::Unsettled,
}

/// Remembers `data` in `ended` when it is at a terminal phase; `Some(refusal)` when it is the
/// signal `ended` holds, shown at an earlier phase again ([`phase::rewound`]).
fn rewind(data: &SignalData, ended: &mut Option<(SignalData, SignalPhase)>) -> Option<String> {
    let unmarked = SignalData { status: None, ..data.clone() };
    match data.phase() {
        Some(phase) if phase.is_terminal() => {
            *ended = Some((unmarked, phase));
            None
        }
        current => match ended.as_ref() {
            Some((seen, phase)) if seen == &unmarked => phase::rewound(*phase, current),
            Some(_) | None => None,
        },
    }
}

/// What [`authorized`] found.
enum Authorized {
    /// The signal ended already: there is nothing to authorize.
    Ended,
    /// The same signal was authorized before; its payload's signature comes from here.
    Before(SignatureSource),
    /// The Plan (as read now) authorizes the signal; its payload's signature comes from
    /// the second.
    Read(Option<Box<Plan>>, SignatureSource),
    /// Neither the Plan nor this node authorizes the signal: answer it `Failed` with this.
    Refused(String),
}

/// Whether the Plan authorizes `data` on this node (DESIGN §14): the signal must match the
/// frozen command of the run it names ([`autopilot_engine::authorize`]), and an update's
/// payload must be verifiable unless the node allows otherwise. The Plan is read with the
/// node's own identity ([`read_plan`]); a read that stayed forbidden for
/// [`read::FORBIDDEN_GRACE`] is a refusal of the signal. A read that did not settle yet is
/// returned as an error (the caller retries).
async fn authorized<K>(
    api: &Api<K>,
    agent: &Agent,
    data: &SignalData,
    memory: &mut Option<(SignalData, SignatureSource)>,
    unsettled: &mut read::Unsettled,
) -> anyhow::Result<Authorized>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    if data.phase().is_some_and(SignalPhase::is_terminal) {
        return Ok(Authorized::Ended);
    }
    let unmarked = SignalData { status: None, ..data.clone() };
    if let Some((before, signature)) = memory.as_ref()
        && before == &unmarked
    {
        return Ok(Authorized::Before(signature.clone()));
    }
    let plan = match read_plan(api, unsettled).await? {
        Ok(plan) => plan,
        Err(reason) => return Ok(Authorized::Refused(format!("refused: {reason}"))),
    };
    let role = if K::kind(&()) == "ControlNode" {
        authorize::Role::Controller
    } else {
        authorize::Role::Worker
    };
    let platform = autopilot_api::platform::current();
    let node = authorize::Node { name: &agent.name, role, platform: Some(&platform) };
    let signature = match authorize::authorize(plan.as_ref(), data, node) {
        Ok(entry) => entry.map(SignatureSource::of).unwrap_or_default(),
        Err(reason) => return Ok(Authorized::Refused(reason)),
    };
    let unverified = match data.command.update() {
        Some(UpdateRef::K0s(update)) => authorize::unverified(&update.url, &update.sha256),
        Some(UpdateRef::Airgap(update)) => authorize::unverified(&update.url, &update.sha256),
        // Nothing is fetched: the node puts back what it kept.
        Some(UpdateRef::Rollback(_)) | None => None,
    };
    if let Some(reason) = unverified.filter(|_| !agent.allow_unverified_payloads) {
        return Ok(Authorized::Refused(reason));
    }
    *memory = Some((unmarked, signature.clone()));
    Ok(Authorized::Read(plan.map(Box::new), signature))
}

/// Whether the Plan status records that the leader finished this node's drain for `data`
/// ([`authorize::drained`]): only then does the node go on from `ApplyingUpdate` to its
/// restart. A Plan the node may not read (for [`read::FORBIDDEN_GRACE`]) records nothing; a
/// read that did not settle yet is returned as an error (the caller retries).
async fn drain_on_record<K>(
    api: &Api<K>,
    agent: &Agent,
    data: &SignalData,
    memory: &mut Option<SignalData>,
    unsettled: &mut read::Unsettled,
) -> anyhow::Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let unmarked = SignalData { status: None, ..data.clone() };
    if memory.as_ref() == Some(&unmarked) {
        return Ok(true);
    }
    let Ok(plan) = read_plan(api, unsettled).await? else { return Ok(false) };
    let node = authorize::Node { name: &agent.name, role: role::<K>(), platform: None };
    match authorize::drained(plan.as_ref(), data, node) {
        Ok(()) => {
            *memory = Some(unmarked);
            Ok(true)
        }
        Err(reason) => {
            warn!(node = %agent.name, %reason, "not going on to the restart");
            Ok(false)
        }
    }
}

/// Which target list of a command the agent's object belongs to.
fn role<K: Resource<DynamicType = ()>>() -> authorize::Role {
    if K::kind(&()) == "ControlNode" {
        authorize::Role::Controller
    } else {
        authorize::Role::Worker
    }
}

/// The Plan, read with this node's identity, to authorize something: `Ok(Ok(plan))` on a
/// definitive answer (`None`: a `404` naming the Plan, [`retry::get_definitive`]);
/// `Ok(Err(reason))` once the read stayed forbidden (`403`), or the Plan resource type
/// unserved, for [`read::FORBIDDEN_GRACE`] ([`read::judge`]). Until then, and on any error
/// without an answer, an error is returned: every caller's caller is [`run`]'s loop, which
/// retries on the short capped backoff. `unsettled` remembers since when the reads have
/// been refused, across those retries and across the kinds of read.
async fn read_plan<K>(
    api: &Api<K>,
    unsettled: &mut read::Unsettled,
) -> anyhow::Result<Result<Option<Plan>, String>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    read_plan_at(api, unsettled, jiff::Timestamp::now()).await
}

/// [`read_plan`] with its clock: the read answered at `now`.
async fn read_plan_at<K>(
    api: &Api<K>,
    unsettled: &mut read::Unsettled,
    now: jiff::Timestamp,
) -> anyhow::Result<Result<Option<Plan>, String>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let plans: Api<Plan> = Api::all(api.clone().into_client());
    let answer = retry::plan_answer(retry::get_definitive(&plans, keys::PLAN_NAME).await);
    let (verdict, next) = read::judge(*unsettled, now, answer);
    *unsettled = next;
    match verdict {
        read::Verdict::Plan(plan) => Ok(Ok(plan)),
        read::Verdict::Refuse(reason) => Ok(Err(reason)),
        // The loop logs it with its retry delay.
        read::Verdict::Retry(why) => Err(anyhow::anyhow!(why)),
    }
}

/// How often in a row the current signal's retried action has failed.
#[derive(Default)]
struct Failures {
    signal: Option<SignalKey>,
    kind: Option<phase::ActionKind>,
    count: u32,
}

impl Failures {
    /// Counts one more failure of `kind` for `signal`; returns the count in a row.
    fn record(&mut self, signal: &SignalKey, kind: phase::ActionKind) -> u32 {
        if self.signal.as_ref() != Some(signal) || self.kind != Some(kind) {
            *self = Self { signal: Some(signal.clone()), kind: Some(kind), count: 0 };
        }
        self.count += 1;
        self.count
    }

    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// One step on the newest version of the agent's object. Its span carries the node, the
/// object's kind and, once the signal is read, the plan, command and phase, so every line
/// logged while acting on a signal names them.
#[tracing::instrument(
    name = "signal",
    skip_all,
    fields(
        node = %agent.name,
        kind = %K::kind(&()),
        plan = tracing::field::Empty,
        command = tracing::field::Empty,
        phase = tracing::field::Empty,
    )
)]
async fn act<K, H>(
    api: &Api<K>,
    agent: &Agent,
    host: &H,
    object: &K,
    memory: &mut Memory,
) -> anyhow::Result<Acted>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    H: Host,
{
    publish_annotations(api, agent, object).await;
    answer_gate_check(api, agent, object, &mut memory.plan_read).await?;
    answer_prestage(api, agent, host, object, &mut memory.plan_read).await?;
    let kind = K::kind(&());
    let object_ref = format!("{kind}/{}", object.name_any());
    let data = match signal::from_meta(object.meta()) {
        Ok(Some(data)) => data,
        Ok(None) => {
            agent.board.clear(&object_ref);
            agent.metrics.set_phase(&kind, None);
            return Ok(Acted::Idle);
        }
        Err(err) => {
            agent.board.clear(&object_ref);
            agent.metrics.set_phase(&kind, None);
            return refuse(api, agent, object, &err).await;
        }
    };
    let span = tracing::Span::current();
    span.record("plan", data.plan_id.as_str());
    span.record("command", data.command.id);
    span.record("phase", data.phase().map_or("", SignalPhase::as_str));
    if handled_elsewhere(agent, &data) {
        debug!(node = %agent.name, "not an airgap signal; the ControlNode's agent handles updates");
        return Ok(Acted::Idle);
    }
    let publish = |data: &SignalData| {
        agent.metrics.set_phase(&kind, data.phase());
        match status::SignalView::of(object_ref.clone(), data) {
            Some(view) => agent.board.publish(view),
            None => agent.board.clear(&object_ref),
        }
    };
    publish(&data);
    if let Some(refusal) = rewind(&data, &mut memory.ended) {
        warn!(node = %agent.name, reason = %refusal, "refusing a signal written back after it ended");
        publish(&write_status(api, object, &data, SignalPhase::Failed, Some(refusal)).await?);
        return Ok(Acted::Idle);
    }
    let (plan, signature) =
        match authorized(api, agent, &data, &mut memory.authorized, &mut memory.plan_read).await? {
            Authorized::Refused(reason) => {
                warn!(node = %agent.name, %reason, "refusing a signal the Plan does not authorize");
                publish(
                    &write_status(api, object, &data, SignalPhase::Failed, Some(reason)).await?,
                );
                return Ok(Acted::Idle);
            }
            Authorized::Read(plan, signature) => (Some(plan.map(|plan| *plan)), signature),
            Authorized::Before(signature) => (None, signature),
            Authorized::Ended => (None, SignatureSource::default()),
        };
    if let Some(preflight) = &data.command.preflight {
        if let Some(answered) =
            run_checks(api, agent, object, &data, preflight, plan, &mut memory.plan_read).await?
        {
            publish(&answered);
        }
        return Ok(Acted::Idle);
    }
    let key = SignalKey::of(&data);
    let current = data.phase();
    let signal = Signalled { api, agent, object, data: &data, key: &key, current, signature };
    act_on_update(signal, host, memory, &publish).await
}

/// Whether this agent leaves `data` to another one: on a controller+worker's Node
/// (`airgap_only`) only airgap signals are this agent's (the ControlNode's agent updates
/// k0s); checks run wherever they are signalled (they only look).
fn handled_elsewhere(agent: &Agent, data: &SignalData) -> bool {
    agent.airgap_only
        && data.command.preflight.is_none()
        && !matches!(
            data.command.update(),
            Some(
                UpdateRef::Airgap(_)
                    | UpdateRef::Rollback(signal::CommandRollback {
                        of: signal::RollbackOf::Airgap,
                        ..
                    })
            )
        )
}

/// One step of an update (or rollback) signal the Plan authorized: observe the host, decide
/// with the phase machine, and report or perform what it says.
async fn act_on_update<K, H>(
    signal: Signalled<'_, K>,
    host: &H,
    memory: &mut Memory,
    publish: &(dyn Fn(&SignalData) + Sync),
) -> anyhow::Result<Acted>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    H: Host,
{
    let Signalled { api, agent, object, data, key, current, .. } = signal;
    let Some(update) = data.command.update() else { return Ok(Acted::Idle) };
    let observed = host.observe(key, update).await?;
    // The post-update watch put the previous binary back after this signal's update: the
    // update did not hold, whatever the signal says.
    if let Some(why) = &observed.rolled_back_after_update {
        if let Some(Step::Report { phase, reason }) = phase::after_update_rollback(current, why) {
            warn!(node = %agent.name, %why, "reporting the rollback after the update on the signal");
            publish(&write_status(api, object, data, phase, reason).await?);
        }
        return Ok(Acted::Idle);
    }
    // Only on the way to the restart does the leader's record of the drain matter.
    let drained = match current {
        Some(SignalPhase::ApplyingUpdate | SignalPhase::Restarting) => {
            drain_on_record(api, agent, data, &mut memory.drained, &mut memory.plan_read).await?
        }
        None
        | Some(
            SignalPhase::Downloading
            | SignalPhase::Cordoning
            | SignalPhase::Uncordoning
            | SignalPhase::Completed
            | SignalPhase::Failed
            | SignalPhase::FailedDownload,
        ) => true,
    };
    let facts = observed.facts(update, &agent.version, agent.kubelet, drained);
    let step = phase::next(current, &facts);
    debug!(node = %agent.name, phase = ?current, ?step, "signal agent step");
    match step {
        Step::Done | Step::Wait(_) => Ok(Acted::Idle),
        Step::Report { phase, reason } => {
            publish(&write_status(api, object, data, phase, reason).await?);
            // A failed trial boot, reported by the binary that was put back.
            if matches!(observed.restart, host::RestartState::RolledBack { .. })
                && phase == SignalPhase::Failed
            {
                agent.metrics.rolled_back("trial");
            }
            Ok(Acted::Idle)
        }
        Step::Run { action, on_success, on_failure } => {
            let step = Run { action, on_success, on_failure };
            perform(signal, host, step, &mut memory.failures, publish).await
        }
    }
}

/// The signal an agent pass acts on, and where it is written back.
struct Signalled<'a, K> {
    api: &'a Api<K>,
    agent: &'a Agent,
    object: &'a K,
    data: &'a SignalData,
    key: &'a SignalKey,
    /// The phase the signal shows.
    current: Option<SignalPhase>,
    /// Where its payload's signature comes from.
    signature: SignatureSource,
}

/// A host action the phase machine asked for, with the phases to report after it.
struct Run {
    action: phase::HostAction,
    on_success: SignalPhase,
    on_failure: phase::OnFailure,
}

/// Perform `run` on `host` and report its result on the signal: the next phase, a restart,
/// a retry, or (after too many failures in a row) the failure phase with the reason.
async fn perform<K, H>(
    signal: Signalled<'_, K>,
    host: &H,
    run: Run,
    failures: &mut Failures,
    publish: &(dyn Fn(&SignalData) + Sync),
) -> anyhow::Result<Acted>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    H: Host,
{
    let Signalled { api, agent, object, data, key, current, signature } = signal;
    let Run { action, on_success, on_failure } = run;
    let is_restart = matches!(action, phase::HostAction::Restart);
    info!(node = %agent.name, action = ?action.kind(), "signal agent performing");
    let action_kind = action.kind();
    match host::perform(host, &action, key, &signature).await {
        Ok(()) if is_restart => {
            failures.reset();
            info!(node = %agent.name, "new binary in place; restarting");
            Ok(Acted::Restart)
        }
        Ok(()) if current == Some(on_success) => {
            failures.reset();
            Ok(Acted::Again)
        }
        Ok(()) => {
            failures.reset();
            publish(&write_status(api, object, data, on_success, None).await?);
            Ok(Acted::Idle)
        }
        Err(err) => {
            record_failure(&agent.metrics, action_kind, &err);
            let reason = err.reason();
            let in_a_row = failures.record(key, action_kind);
            match phase::after_failure(on_failure, action_kind, in_a_row, &reason) {
                Some(Step::Report { phase, reason }) => {
                    warn!(node = %agent.name, error = %err.reason(), "update failed");
                    failures.reset();
                    publish(&write_status(api, object, data, phase, reason).await?);
                    Ok(Acted::Idle)
                }
                Some(other) => anyhow::bail!("unexpected step after a failure: {other:?}"),
                None => {
                    warn!(node = %agent.name, error = %reason, in_a_row, "action failed, retrying");
                    Ok(Acted::Retry)
                }
            }
        }
    }
}

/// Answer a preflight signal (DESIGN §13): read the checks it names from the Plan, run them
/// (all at once, each within its timeout) and write `Completed` with a record per check;
/// `Failed` when the checks cannot be read. Returns the signal as written, `None` when it
/// was answered already. A read of the Plan that did not settle yet ([`read_plan`]) is
/// returned as an error (the caller retries on its backoff).
async fn run_checks<K>(
    api: &Api<K>,
    agent: &Agent,
    object: &K,
    data: &SignalData,
    wanted: &signal::CommandPreflight,
    read: Option<Option<Plan>>,
    unsettled: &mut read::Unsettled,
) -> anyhow::Result<Option<SignalData>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match phase::preflight(data.phase()) {
        phase::PreflightStep::Done => return Ok(None),
        phase::PreflightStep::Run => {}
    }
    let plan = match read {
        Some(plan) => plan,
        None => match read_plan(api, unsettled).await? {
            Ok(plan) => plan,
            Err(reason) => {
                warn!(node = %agent.name, %reason, "cannot read the preflight checks");
                return write_status(api, object, data, SignalPhase::Failed, Some(reason))
                    .await
                    .map(Some);
            }
        },
    };
    let checks = match preflight::definitions(plan.as_ref(), data, &wanted.checks) {
        Ok(checks) => checks,
        Err(reason) => {
            warn!(node = %agent.name, %reason, "cannot find the preflight checks");
            return write_status(api, object, data, SignalPhase::Failed, Some(reason))
                .await
                .map(Some);
        }
    };
    info!(node = %agent.name, checks = ?wanted.checks, "running preflight checks");
    let facts =
        preflight::Facts { k0s_version: &agent.version, exec_allow_list: &agent.exec_allow_list };
    let records =
        futures::future::join_all(checks.iter().map(|check| preflight::run(&check.command, facts)))
            .await;
    let report: BTreeMap<String, RawRecord> =
        checks.iter().map(|check| check.id.clone()).zip(records).collect();
    for (id, record) in &report {
        info!(node = %agent.name, check = %id, status_code = record.status_code, "preflight check ran");
    }
    let mut status = SignalStatus::new(SignalPhase::Completed, jiff::Timestamp::now());
    status.preflight = autopilot_api::preflight::fit_report(report);
    write_signal_status(api, object, data, status).await.map(Some)
}

/// Answer the request of kind `K` on `object` (the one request/report channel,
/// [`autopilot_api::ask`]) if this node has not answered it yet: `work` authorizes it
/// against the Plan and does it, and says what the report says (`None`: it is not this
/// agent's to answer). The report goes into this node's own annotation, guarded by the
/// resourceVersion the object was read at. A request that cannot be read has nothing to
/// answer: it is logged. API errors (a conflict included) and a read of the Plan that did
/// not settle yet ([`read_plan`]) are returned: the caller retries on the object as it then
/// is.
///
/// Crash safety: a crash before the report leaves the request unanswered, so the next
/// look does the work again.
async fn answer<A, K>(
    api: &Api<K>,
    agent: &Agent,
    object: &K,
    unsettled: &mut read::Unsettled,
    work: impl AsyncFnOnce(
        Result<Option<Plan>, String>,
        &ask::Request<A>,
        authorize::Role,
    ) -> Option<A::Says>,
) -> anyhow::Result<()>
where
    A: ask::Kind,
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let request = match ask::request_of::<A>(object.meta()) {
        Ok(Some(request)) => request,
        Ok(None) => return Ok(()),
        Err(problem) => {
            debug!(node = %agent.name, %problem, kind = A::NAME, "ignoring a request that cannot be read");
            return Ok(());
        }
    };
    let reported = ask::report_of::<A>(object.meta()).ok().flatten();
    if reported.is_some_and(|report| report.answers(&request)) {
        return Ok(());
    }
    let role = if K::kind(&()) == "ControlNode" {
        authorize::Role::Controller
    } else {
        authorize::Role::Worker
    };
    let plan = read_plan(api, unsettled).await?;
    let Some(says) = work(plan, &request, role).await else { return Ok(()) };
    let report = request.answer(says);
    let version = object.meta().resource_version.as_deref().unwrap_or_default();
    let patch = ask::patch(A::REPORT_ANNOTATION, &report, version)
        .map_err(|problem| anyhow::anyhow!("encoding the {} report: {problem}", A::NAME))?;
    api.patch(&agent.name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .with_context(|| format!("writing the {} report", A::NAME))?;
    Ok(())
}

/// Answer the gate-check request on `object` (DESIGN §15): when the Plan authorizes it
/// ([`authorize::gate_checks`]), run the checks of the gates it names (all at once, each
/// within its timeout) and report a record per gate; otherwise report the refusal.
async fn answer_gate_check<K>(
    api: &Api<K>,
    agent: &Agent,
    object: &K,
    unsettled: &mut read::Unsettled,
) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    use autopilot_api::gate_check::{GateCheckSays, GateChecks};
    answer::<GateChecks, K>(api, agent, object, unsettled, async |plan, request, role| {
        let node = authorize::Node { name: &agent.name, role, platform: None };
        let authorized = match plan {
            Ok(plan) => authorize::gate_checks(plan.as_ref(), request, node),
            Err(reason) => Err(format!("refused: {reason}")),
        };
        let mut says = GateCheckSays { attempt: request.asks.attempt, ..GateCheckSays::default() };
        match authorized {
            Err(reason) => {
                warn!(node = %agent.name, %reason, "refusing a gate-check request the Plan does not authorize");
                says.refused = Some(reason);
            }
            Ok(checks) => {
                let facts = preflight::Facts {
                    k0s_version: &agent.version,
                    exec_allow_list: &agent.exec_allow_list,
                };
                let records = futures::future::join_all(
                    checks.iter().map(|(_, check)| preflight::run(&check.command, facts)),
                )
                .await;
                for ((gate, _), record) in checks.iter().zip(&records) {
                    info!(node = %agent.name, %gate, attempt = request.asks.attempt, status_code = record.status_code, "gate check ran");
                }
                says.records = checks.into_iter().map(|(gate, _)| gate).zip(records).collect();
            }
        }
        Some(says)
    })
    .await
}

/// Answer the pre-staging request on `object` (`prestage: true`): when the Plan authorizes
/// it ([`authorize::prestage`]), download and verify the Plan's payload for this node's
/// platform into the staged file and self-test it (a k0s binary), then report `Staged`;
/// otherwise report `Failed` with why. The update signal that follows finds the staged file
/// by its sha256. A crash before the report stages again (the download replaces any partial
/// or earlier staged file).
async fn answer_prestage<K, H>(
    api: &Api<K>,
    agent: &Agent,
    host: &H,
    object: &K,
    unsettled: &mut read::Unsettled,
) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    H: Host,
{
    use autopilot_api::prestage::{Prestage, PrestageOutcome, PrestageSays};
    answer::<Prestage, K>(api, agent, object, unsettled, async |plan, request, role| {
        let platform = autopilot_api::platform::current();
        let node = authorize::Node { name: &agent.name, role, platform: Some(&platform) };
        let staged = match &plan {
            Err(reason) => Err(format!("refused: {reason}")),
            Ok(plan) => match authorize::prestage(plan.as_ref(), request, node) {
                Err(reason) => Err(reason),
                Ok(staging) if agent.airgap_only && staging.kind == authorize::StagingKind::K0s => {
                    // As for its signals: the ControlNode's agent updates this machine's k0s.
                    debug!(node = %agent.name, "not an airgap payload; the ControlNode's agent stages it");
                    return None;
                }
                Ok(staging) => stage_payload(agent, host, request, staging).await,
            },
        };
        Some(match staged {
            Ok(note) => {
                info!(node = %agent.name, command = request.command, "payload pre-staged");
                PrestageSays { outcome: PrestageOutcome::Staged, reason: note }
            }
            Err(reason) => {
                warn!(node = %agent.name, command = request.command, %reason, "could not pre-stage the payload");
                PrestageSays { outcome: PrestageOutcome::Failed, reason: Some(reason) }
            }
        })
    })
    .await
}

/// Stage what `staging` names: `Ok` with an optional note, or why it could not be staged.
async fn stage_payload<H: Host>(
    agent: &Agent,
    host: &H,
    request: &autopilot_api::prestage::PrestageRequest,
    staging: authorize::Staging<'_>,
) -> Result<Option<String>, String> {
    let entry = staging.entry;
    let sha256 = entry.sha256.as_deref().map(|s| s.trim().to_ascii_lowercase());
    if let Some(reason) = authorize::unverified(&entry.url, sha256.as_deref().unwrap_or_default())
        .filter(|_| !agent.allow_unverified_payloads)
    {
        return Err(reason);
    }
    let key = SignalKey {
        plan_id: request.plan_id.clone(),
        created: format!("prestage {}", request.asked),
        command_id: request.command,
        run_id: Some(request.run_id.clone()),
    };
    let signature = SignatureSource::of(entry);
    match staging.kind {
        authorize::StagingKind::K0s => {
            if agent.version == staging.version && !staging.any_version {
                return Ok(Some(format!("runs {} already: nothing to stage", agent.version)));
            }
            info!(node = %agent.name, url = %entry.url, "pre-staging the k0s binary");
            host.download(&key, &entry.url, sha256.as_deref(), &signature).await.map_err(
                |err| {
                    record_failure(&agent.metrics, phase::ActionKind::Download, &err);
                    err.reason()
                },
            )?;
            host.self_test(&key, staging.version, staging.any_version)
                .await
                .map_err(|err| err.reason())?;
            Ok(None)
        }
        authorize::StagingKind::Airgap => {
            info!(node = %agent.name, url = %entry.url, "pre-staging the airgap bundle");
            host.stage_bundle(&entry.url, sha256.as_deref(), &signature).await.map_err(|err| {
                record_failure(&agent.metrics, phase::ActionKind::DownloadBundle, &err);
                err.reason()
            })?;
            Ok(None)
        }
    }
}

/// Count a failed download (each attempt) or verification in `metrics`.
fn record_failure(
    metrics: &crate::metrics::Metrics,
    kind: phase::ActionKind,
    err: &host::HostError,
) {
    // A wrong digest or a signature that is missing or does not verify: the bytes are not
    // the ones authorized, not a transport problem.
    let digest_mismatch = matches!(
        err,
        host::HostError::Download(
            crate::download::DownloadError::DigestMismatch { .. }
                | crate::download::DownloadError::Signature { .. }
        ) | host::HostError::Signature { .. }
    );
    match kind {
        phase::ActionKind::Download | phase::ActionKind::DownloadBundle if digest_mismatch => {
            metrics.verify_failures.inc();
        }
        phase::ActionKind::Download | phase::ActionKind::DownloadBundle => {
            metrics.download_failures.inc();
        }
        phase::ActionKind::SelfTest
        | phase::ActionKind::Swap
        | phase::ActionKind::Restart
        | phase::ActionKind::StagePrevious
        | phase::ActionKind::RestoreBundle => {}
    }
}

/// Answers a signal that cannot be read as a valid one with `Failed` and the problem as
/// reason, so the plan ends instead of waiting; a signal whose JSON cannot be parsed at all
/// cannot carry an answer, so it is logged as a warning.
async fn refuse<K>(
    api: &Api<K>,
    agent: &Agent,
    object: &K,
    problem: &signal::SignalError,
) -> anyhow::Result<Acted>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let reason = format!("refused: {problem}");
    let Some(data) = signal::from_meta_unchecked(object.meta()).ok().flatten() else {
        warn!(node = %agent.name, error = %problem, "ignoring a signal that cannot be read");
        return Ok(Acted::Idle);
    };
    if data.phase().is_some_and(SignalPhase::is_terminal) {
        return Ok(Acted::Idle);
    }
    warn!(node = %agent.name, %reason, "refusing a signal");
    write_status(api, object, &data, SignalPhase::Failed, Some(reason)).await?;
    Ok(Acted::Idle)
}

/// Write `phase` (and `reason`) as the node status of `data` on `object`, with its
/// resourceVersion as precondition; returns the signal as written.
async fn write_status<K>(
    api: &Api<K>,
    object: &K,
    data: &SignalData,
    phase: SignalPhase,
    reason: Option<String>,
) -> anyhow::Result<SignalData>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut status = SignalStatus::new(phase, jiff::Timestamp::now());
    // The reason travels in an annotation and into the Plan's status: keep it readable.
    status.reason = reason.map(|r| autopilot_api::text::truncate(&r, MAX_REASON_BYTES));
    write_signal_status(api, object, data, status).await
}

/// Write `status` as the node status of `data` on `object`, with its resourceVersion as
/// precondition; returns the signal as written.
async fn write_signal_status<K>(
    api: &Api<K>,
    object: &K,
    data: &SignalData,
    status: SignalStatus,
) -> anyhow::Result<SignalData>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let phase = status.status;
    let mut status = status;
    let previous = data.status.as_ref().and_then(|s| s.reason.as_deref());
    status.reason = autopilot_engine::cordon::carried_reason(previous, status.reason.take());
    let next = data.clone().with_status(status);
    let version = object.resource_version();
    autopilot_shell::signal::write(api, &object.name_any(), version.as_deref(), &next).await?;
    info!(node = %object.name_any(), to = %phase, "signal status written");
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopilot_shell::fake_api::{self, FakeApiServer};
    use k8s_openapi::api::core::v1::Node;
    use serde_json::{Value, json};

    fn at(second: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + second).expect("a valid timestamp")
    }

    /// The API server's answer to a GET of a missing Plan `autopilot` (the resource handler
    /// names the object).
    fn plan_not_found() -> Value {
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 404,
               "reason": "NotFound",
               "message": "plans.autopilot.k0sproject.io \"autopilot\" not found",
               "details": {"name": "autopilot", "group": "autopilot.k0sproject.io",
                           "kind": "plans"}})
    }

    /// A worker's view of an API server answering every request with `answers`, in turn.
    fn worker_api(answers: Vec<(u16, Value)>) -> (Api<Node>, FakeApiServer) {
        let server = FakeApiServer::default();
        let client = server.client(move |_, before| {
            answers.get(before.len()).cloned().unwrap_or((500, fake_api::status(500, "Gone")))
        });
        (Api::all(client), server)
    }

    fn forbidden() -> (u16, Value) {
        (403, fake_api::status(403, "Forbidden"))
    }

    #[tokio::test]
    async fn a_forbidden_plan_read_right_after_a_restart_is_retried_not_refused() {
        let (api, server) = worker_api(vec![forbidden(), forbidden()]);
        let mut unsettled = read::Unsettled::default();
        let first = read_plan_at(&api, &mut unsettled, at(0)).await;
        let err = first.expect_err("retried, not answered");
        assert!(format!("{err}").contains("forbidden for 0s, retrying"), "{err}");
        let again = read_plan_at(&api, &mut unsettled, at(30)).await;
        assert!(again.is_err(), "still retried after 30 s: {again:?}");
        assert_eq!(
            server.requests()[0].path,
            format!("/apis/autopilot.k0sproject.io/v1beta2/plans/{}", keys::PLAN_NAME)
        );
    }

    #[tokio::test]
    async fn a_plan_read_forbidden_for_longer_than_the_grace_is_refused_saying_so() {
        let (api, _) = worker_api(vec![forbidden(), forbidden(), forbidden()]);
        let mut unsettled = read::Unsettled::default();
        for second in [0, 30] {
            assert!(read_plan_at(&api, &mut unsettled, at(second)).await.is_err());
        }
        let refused = read_plan_at(&api, &mut unsettled, at(61)).await.expect("an answer");
        let reason = refused.expect_err("a refusal");
        assert!(reason.starts_with("reading Plan autopilot: forbidden: Forbidden"), "{reason}");
        assert!(reason.contains("stayed forbidden for 61s"), "{reason}");
    }

    #[tokio::test]
    async fn an_unanswered_plan_read_is_retried() {
        let (api, _) = worker_api(vec![(503, fake_api::status(503, "ServiceUnavailable"))]);
        let mut unsettled = read::Unsettled::default();
        let read = read_plan_at(&api, &mut unsettled, at(0)).await;
        assert!(read.is_err(), "retried: {read:?}");
        assert_eq!(unsettled.since(), None, "an outage starts no clock");
    }

    #[tokio::test]
    async fn a_missing_plan_is_a_definitive_answer_and_an_unserved_type_is_not() {
        let (api, _) = worker_api(vec![forbidden(), (404, plan_not_found())]);
        let mut unsettled = read::Unsettled::default();
        assert!(read_plan_at(&api, &mut unsettled, at(0)).await.is_err());
        let read = read_plan_at(&api, &mut unsettled, at(2)).await.expect("an answer");
        assert!(matches!(read, Ok(None)), "no Plan, as before: {read:?}");
        assert_eq!(unsettled, read::Unsettled::default(), "the forbidden stretch is forgotten");
        // A 404 that names no Plan: the resource type is not served (yet).
        let (api, _) = worker_api(vec![(404, fake_api::status(404, "NotFound"))]);
        let read = read_plan_at(&api, &mut unsettled, at(4)).await;
        assert!(read.is_err(), "retried: {read:?}");
    }
}
