//! A test-side protocol peer that plays the node agents: it answers update signals the way a
//! node would, and records everything it saw and wrote.
//!
//! [`Responder::start`] watches every `Node` and `ControlNode` (with an admin client). When an
//! object carries a fresh signal (signal annotations without a node `status`), the responder
//! walks that signal through the node-side phases of REF §7.3 and §7.9, one write per phase:
//!
//! - `k0supdate`: `Downloading → Cordoning → ApplyingUpdate → Restart → UnCordoning →
//!   Completed`;
//! - `airgapupdate`: `Downloading → Completed`.
//!
//! Every write is a read-modify-write of the data annotation with optimistic concurrency (the
//! object's `resourceVersion` is part of the patch); a conflict means re-read and re-decide. A
//! write is skipped if the object no longer carries the same signal (the responder then stops
//! working on it) or if the signal already reached a terminal phase.
//!
//! What each node does is set per node name with a [`Behaviour`] in the [`Config`] (and can be
//! changed while running with [`Responder::set_behaviour`]): complete at once (the default),
//! fail with a reason, never answer ([`Behaviour::Hold`]), or complete only once the test lets
//! it ([`Behaviour::CompleteAfter`] with a [`Release`]). Nothing here sleeps to pace itself:
//! with the default behaviour the responder is a fast fake fleet (many nodes, instant
//! completion), which also suits benchmarks.
//!
//! The [`Log`] of [`Observation`]s (every fresh signal seen, every status written, every
//! signal that ended without a terminal status) lets tests check the plan engine's
//! promises: how many nodes were in flight at once ([`Log::max_in_flight`]), in which order
//! nodes were signalled ([`Log::signal_order`]), and whether a node was signalled twice
//! within one run ([`Log::duplicate_signals`]). Wait on the log with [`Responder::wait_until`]
//! (it wakes on every new observation, no polling).
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> anyhow::Result<()> {
//! use std::time::Duration;
//! use integration::responder::{Behaviour, Config, ObjectRef, Release, Responder};
//!
//! let release = Release::new();
//! let responder = Responder::start(
//!     client,
//!     Config::new()
//!         .node("worker-0", Behaviour::CompleteAfter(release.clone()))
//!         .node("worker-1", Behaviour::Hold),
//! )
//! .await?;
//! // ... create a Plan ...
//! responder
//!     .wait_until(Duration::from_secs(60), "worker-0 to be signalled", |log| {
//!         log.was_signalled(&ObjectRef::node("worker-0")).then_some(())
//!     })
//!     .await?;
//! release.release();
//! assert!(responder.log().max_in_flight() <= 2);
//! # Ok(()) }
//! ```
//!
//! # Ordering
//!
//! Observations are ordered by etcd revision (the `resourceVersion` of the object as seen or
//! as written). The harness runs a single etcd, so revisions order events across objects
//! exactly as they happened in the store, regardless of which watch delivered them first.
//!
//! # Not a node agent
//!
//! The responder downloads nothing, cordons nothing and restarts nothing: it only speaks the
//! annotation protocol. Do not run it against nodes whose real agent answers signals.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_api::signal::{self, SignalData, SignalPhase, SignalStatus};
use autopilot_api::v1beta2::ControlNode;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

/// How long [`Responder::start`] waits for both watches to list what exists.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// First pause before retrying a write that failed with something other than a conflict
/// (the API server may be restarting); doubles up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Longest pause between two attempts of a failing write.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);

// === Configuration ===

/// What one node does with the signals it receives.
#[derive(Clone, Debug, Default)]
pub enum Behaviour {
    /// Walk through every phase at once and end `Completed`.
    #[default]
    Complete,
    /// Answer `Completed` in one write, as a node that already runs the requested version
    /// does (REF §7.3); the fastest possible node, for benchmarks of the engine itself.
    AlreadyUpToDate,
    /// Walk the phases as a real agent does with central cordoning (DESIGN §5): write
    /// `Downloading` and `Cordoning`, wait until the leader has cordoned and drained the node
    /// and written `ApplyingUpdate`, write `Restart` and `UnCordoning`, and leave `Completed`
    /// to the leader. (Airgap signals complete as with [`Behaviour::Complete`].)
    CompleteWithLeader,
    /// Report `Downloading`, then fail: with `FailedDownload` right away, or with any other
    /// `phase` (normally `Failed`) after `Cordoning` and `ApplyingUpdate` (k0supdate). The
    /// `reason` goes into the status.
    Fail {
        /// The terminal phase to end in (`FailedDownload` or `Failed`).
        phase: SignalPhase,
        /// Why, as the node would explain it (`status.reason`).
        reason: String,
    },
    /// Never answer: the signal stays without a status, so the node stays in flight until the
    /// behaviour is changed with [`Responder::set_behaviour`].
    Hold,
    /// Report `Downloading` at once, then wait until the [`Release`] is released and walk
    /// through the remaining phases to `Completed`.
    CompleteAfter(Release),
}

impl Behaviour {
    /// [`Behaviour::Fail`] with `phase` and `reason`.
    pub fn fail(phase: SignalPhase, reason: impl Into<String>) -> Self {
        Self::Fail { phase, reason: reason.into() }
    }
}

/// A latch a test opens to let [`Behaviour::CompleteAfter`] nodes finish. Once released it
/// stays released; clones share the latch, so one release can gate many nodes.
#[derive(Clone, Debug)]
pub struct Release(Arc<watch::Sender<bool>>);

impl Release {
    /// A closed latch.
    pub fn new() -> Self {
        Self(Arc::new(watch::Sender::new(false)))
    }

    /// Opens the latch: every node waiting on it (now or later) goes on.
    pub fn release(&self) {
        self.0.send_replace(true);
    }

    /// Whether [`Release::release`] was called.
    pub fn is_released(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the latch is open.
    pub async fn released(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail with "sender dropped".
        let _ = rx.wait_for(|open| *open).await;
    }
}

impl Default for Release {
    fn default() -> Self {
        Self::new()
    }
}

/// How a [`Responder`] behaves, per node name.
#[derive(Clone, Debug, Default)]
pub struct Config {
    default: Behaviour,
    nodes: BTreeMap<String, Behaviour>,
    adopt_in_progress: bool,
}

impl Config {
    /// Every node [`Behaviour::Complete`]s; signals that already have a status are left alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// The behaviour of the node (Node and/or ControlNode) named `name`.
    pub fn node(mut self, name: impl Into<String>, behaviour: Behaviour) -> Self {
        self.nodes.insert(name.into(), behaviour);
        self
    }

    /// The behaviour of every node without its own [`Config::node`] entry.
    pub fn default_behaviour(mut self, behaviour: Behaviour) -> Self {
        self.default = behaviour;
        self
    }

    /// Also take over signals that already carry a non-terminal status when the responder
    /// first sees them (e.g. written by an earlier responder of the same test), continuing
    /// after that phase. Off by default: such signals belong to someone else.
    pub fn adopt_in_progress(mut self, adopt: bool) -> Self {
        self.adopt_in_progress = adopt;
        self
    }

    fn behaviour(&self, name: &str) -> Behaviour {
        self.nodes.get(name).unwrap_or(&self.default).clone()
    }
}

// === Observations ===

/// Kinds of signal objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// A `ControlNode` (controllers, k0supdate).
    ControlNode,
    /// A core `Node` (pure workers for k0supdate; every airgap target).
    Node,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ControlNode => "ControlNode",
            Self::Node => "Node",
        })
    }
}

/// One signal object: its kind and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// `ControlNode` or `Node`.
    pub kind: ObjectKind,
    /// Object name.
    pub name: String,
}

impl ObjectRef {
    /// The `ControlNode` named `name`.
    pub fn control_node(name: impl Into<String>) -> Self {
        Self { kind: ObjectKind::ControlNode, name: name.into() }
    }

    /// The `Node` named `name`.
    pub fn node(name: impl Into<String>) -> Self {
        Self { kind: ObjectKind::Node, name: name.into() }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// Which update a signal asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommandKind {
    /// `k0supdate`.
    K0sUpdate,
    /// `airgapupdate`.
    AirgapUpdate,
}

impl fmt::Display for CommandKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::K0sUpdate => "k0supdate",
            Self::AirgapUpdate => "airgapupdate",
        })
    }
}

/// What identifies one signal: two signals with the same key are the same instruction.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SignalKey {
    /// `planId` (the Plan's `spec.id`).
    pub plan_id: String,
    /// `runId` (the Plan's `status.runId`), if the writer set one.
    pub run_id: Option<String>,
    /// `command.id`: the command's index in the plan.
    pub command_id: u32,
    /// `created`: when the leader wrote the signal.
    pub created: String,
}

impl SignalKey {
    /// The key of `data`.
    pub fn of(data: &SignalData) -> Self {
        Self {
            plan_id: data.plan_id.clone(),
            run_id: data.run_id.clone(),
            command_id: data.command.id,
            created: data.created.clone(),
        }
    }
}

impl fmt::Display for SignalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plan {:?} run {:?} command {} created {}",
            self.plan_id,
            self.run_id.as_deref().unwrap_or("-"),
            self.command_id,
            self.created
        )
    }
}

/// Something the responder saw or did.
#[derive(Clone, Debug)]
pub struct Observation {
    /// Position in arrival order (ties in [`Observation::revision`] keep this order).
    pub seq: u64,
    /// When the responder recorded it.
    pub at: Instant,
    /// The etcd revision (`resourceVersion`) of the object as seen or as written; 0 if it did
    /// not parse as a number.
    pub revision: u64,
    /// The object.
    pub object: ObjectRef,
    /// What happened.
    pub event: Event,
}

/// What an [`Observation`] records.
#[derive(Clone, Debug)]
pub enum Event {
    /// The object carried a fresh signal (no status).
    Signalled {
        /// Which signal.
        key: SignalKey,
        /// Which update it asks for.
        command: CommandKind,
        /// The whole signal as seen.
        data: Box<SignalData>,
        /// The responder had already answered this very signal, and it was written again
        /// without a status: the leader re-sent it (a protocol violation within one run).
        repeat: bool,
        /// The signal already had a non-terminal status that the responder took over
        /// ([`Config::adopt_in_progress`]).
        adopted: bool,
    },
    /// The responder wrote a node-side status.
    Wrote {
        /// Which signal.
        key: SignalKey,
        /// The phase written.
        phase: SignalPhase,
        /// The reason written with it, if any.
        reason: Option<String>,
    },
    /// A signal the responder was working on (or holding) went away before a terminal
    /// status: the object was deleted, the annotations removed, or a newer signal replaced it.
    Ended {
        /// Which signal.
        key: SignalKey,
        /// What happened to it.
        why: String,
    },
    /// Someone else (the leader, which drives `ApplyingUpdate` and `Completed` with central
    /// cordoning) wrote a terminal phase onto a signal the responder was answering.
    Saw {
        /// Which signal.
        key: SignalKey,
        /// The phase found.
        phase: SignalPhase,
    },
}

impl Event {
    /// The signal this event is about.
    pub fn key(&self) -> &SignalKey {
        match self {
            Self::Signalled { key, .. }
            | Self::Wrote { key, .. }
            | Self::Ended { key, .. }
            | Self::Saw { key, .. } => key,
        }
    }
}

/// A snapshot of everything a [`Responder`] observed, ordered by etcd revision.
#[derive(Clone, Debug, Default)]
pub struct Log {
    entries: Vec<Observation>,
    start: Option<Instant>,
}

impl Log {
    fn new(mut entries: Vec<Observation>, start: Instant) -> Self {
        entries.sort_by_key(|o| (o.revision, o.seq));
        Self { entries, start: Some(start) }
    }

    /// Every observation, in revision order.
    pub fn entries(&self) -> &[Observation] {
        &self.entries
    }

    /// Whether nothing was observed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every fresh signal seen (including repeats), in revision order.
    pub fn signals(&self) -> impl Iterator<Item = (&Observation, &SignalData)> {
        self.entries.iter().filter_map(|o| match &o.event {
            Event::Signalled { data, .. } => Some((o, data.as_ref())),
            _ => None,
        })
    }

    /// The objects in the order they were signalled (one entry per fresh signal, repeats
    /// included), optionally only those of `kind`.
    pub fn signal_order(&self, kind: Option<ObjectKind>) -> Vec<ObjectRef> {
        self.signals()
            .map(|(o, _)| o.object.clone())
            .filter(|o| kind.is_none_or(|k| o.kind == k))
            .collect()
    }

    /// Every object that was signalled at least once.
    pub fn signalled_objects(&self) -> BTreeSet<ObjectRef> {
        self.signals().map(|(o, _)| o.object.clone()).collect()
    }

    /// Whether `object` was signalled at least once.
    pub fn was_signalled(&self, object: &ObjectRef) -> bool {
        self.signals().any(|(o, _)| o.object == *object)
    }

    /// The signals `object` received, in order.
    pub fn signals_of(&self, object: &ObjectRef) -> Vec<&SignalData> {
        self.signals().filter(|(o, _)| o.object == *object).map(|(_, d)| d).collect()
    }

    /// The phases written to `object`, in order (across all its signals).
    pub fn phases_written(&self, object: &ObjectRef) -> Vec<SignalPhase> {
        self.entries
            .iter()
            .filter(|o| o.object == *object)
            .filter_map(|o| match &o.event {
                Event::Wrote { phase, .. } => Some(*phase),
                _ => None,
            })
            .collect()
    }

    /// Every object the responder wrote `phase` to, or found `phase` on (written by someone
    /// else, see [`Event::Saw`]).
    pub fn objects_with(&self, phase: SignalPhase) -> BTreeSet<ObjectRef> {
        self.entries
            .iter()
            .filter(|o| match &o.event {
                Event::Wrote { phase: p, .. } | Event::Saw { phase: p, .. } => *p == phase,
                Event::Signalled { .. } | Event::Ended { .. } => false,
            })
            .map(|o| o.object.clone())
            .collect()
    }

    /// The first observation matching `predicate`, in revision order.
    pub fn first(&self, predicate: impl Fn(&Observation) -> bool) -> Option<&Observation> {
        self.entries.iter().find(|o| predicate(o))
    }

    /// The last observation matching `predicate`, in revision order.
    pub fn last(&self, predicate: impl Fn(&Observation) -> bool) -> Option<&Observation> {
        self.entries.iter().rev().find(|o| predicate(o))
    }

    /// The objects in flight after the last observation: signalled, and neither answered with
    /// a terminal phase nor ended.
    pub fn in_flight(&self) -> BTreeSet<ObjectRef> {
        self.in_flight_over_time(None).last().cloned().unwrap_or_default()
    }

    /// The largest number of objects in flight at once, over the whole log.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight_of(None)
    }

    /// The largest number of objects of `kind` (all kinds for `None`) in flight at once.
    pub fn max_in_flight_of(&self, kind: Option<ObjectKind>) -> usize {
        self.in_flight_over_time(kind).iter().map(BTreeSet::len).max().unwrap_or(0)
    }

    /// The set of objects in flight after each observation (of `kind`, or all).
    ///
    /// An object enters with a fresh signal and leaves when the responder writes a terminal
    /// phase for that signal, or when the signal ends otherwise ([`Event::Ended`]).
    pub fn in_flight_over_time(&self, kind: Option<ObjectKind>) -> Vec<BTreeSet<ObjectRef>> {
        let mut current: BTreeMap<ObjectRef, SignalKey> = BTreeMap::new();
        let mut timeline = Vec::new();
        for o in self.entries.iter().filter(|o| kind.is_none_or(|k| o.object.kind == k)) {
            match &o.event {
                Event::Signalled { key, .. } => {
                    current.insert(o.object.clone(), key.clone());
                }
                Event::Wrote { key, phase, .. } if phase.is_terminal() => {
                    if current.get(&o.object) == Some(key) {
                        current.remove(&o.object);
                    }
                }
                Event::Wrote { .. } => {}
                Event::Ended { key, .. } | Event::Saw { key, .. } => {
                    if current.get(&o.object) == Some(key) {
                        current.remove(&o.object);
                    }
                }
            }
            timeline.push(current.keys().cloned().collect());
        }
        timeline
    }

    /// Violations of "a node gets at most one signal per command of a run": one line per
    /// object that saw two fresh signals with the same plan id, run id and command id (a
    /// rewrite with a different `created`, or the same signal written again after it was
    /// answered). Empty when the run signalled every node at most once.
    pub fn duplicate_signals(&self) -> Vec<String> {
        type RunCommand = (ObjectRef, String, Option<String>, u32);
        let mut seen: BTreeMap<RunCommand, Vec<&Observation>> = BTreeMap::new();
        for (o, data) in self.signals() {
            seen.entry((
                o.object.clone(),
                data.plan_id.clone(),
                data.run_id.clone(),
                data.command.id,
            ))
            .or_default()
            .push(o);
        }
        seen.into_iter()
            .filter(|(_, signals)| signals.len() > 1)
            .map(|((object, plan_id, run_id, command), signals)| {
                let created: Vec<String> = signals
                    .iter()
                    .map(|o| match &o.event {
                        Event::Signalled { key, repeat, .. } => {
                            format!("{}{} @r{}", key.created, if *repeat { " (re-sent)" } else { "" }, o.revision)
                        }
                        _ => String::new(),
                    })
                    .collect();
                format!(
                    "{object} signalled {} times for plan {plan_id:?} run {:?} command {command}: {}",
                    signals.len(),
                    run_id.as_deref().unwrap_or("-"),
                    created.join(", ")
                )
            })
            .collect()
    }
}

impl fmt::Display for Log {
    /// A readable timeline, one observation per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return writeln!(f, "(responder observed nothing)");
        }
        for o in &self.entries {
            let t = self.start.map(|s| o.at.saturating_duration_since(s)).unwrap_or_default();
            write!(
                f,
                "+{:>7.3}s r{:<8} {:<24} ",
                t.as_secs_f64(),
                o.revision,
                o.object.to_string()
            )?;
            match &o.event {
                Event::Signalled { key, command, data, repeat, adopted } => {
                    let url = match command {
                        CommandKind::K0sUpdate => {
                            data.command.k0supdate.as_ref().map(|u| u.url.as_str())
                        }
                        CommandKind::AirgapUpdate => {
                            data.command.airgapupdate.as_ref().map(|u| u.url.as_str())
                        }
                    };
                    write!(f, "signalled {command} {key} url {}", url.unwrap_or("-"))?;
                    if *repeat {
                        write!(f, " [RE-SENT]")?;
                    }
                    if *adopted {
                        write!(f, " [adopted]")?;
                    }
                }
                Event::Wrote { phase, reason, key } => {
                    write!(f, "wrote {phase} (command {})", key.command_id)?;
                    if let Some(reason) = reason {
                        write!(f, " reason {reason:?}")?;
                    }
                }
                Event::Ended { key, why } => {
                    write!(f, "ended (command {}): {why}", key.command_id)?
                }
                Event::Saw { key, phase } => {
                    write!(f, "saw {phase} written by someone else (command {})", key.command_id)?
                }
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

// === The responder ===

/// A running fake fleet of node agents; see the module docs. Dropping it stops every watch
/// and every write in progress.
pub struct Responder {
    shared: Arc<Shared>,
    watchers: Vec<JoinHandle<()>>,
}

impl fmt::Debug for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder").finish_non_exhaustive()
    }
}

impl Responder {
    /// Starts watching Nodes and ControlNodes with `client` (admin credentials: the
    /// responder writes every node's annotations) and returns once both watches have listed
    /// what exists (within [`START_TIMEOUT`]).
    pub async fn start(client: kube::Client, config: Config) -> anyhow::Result<Self> {
        let (config_tx, _) = watch::channel(config);
        let (log_tx, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            start: Instant::now(),
            config: config_tx,
            log_changed: log_tx,
            state: Mutex::new(State::default()),
        });
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<ObjectKind>(2);
        let watchers = vec![
            tokio::spawn(watch_kind::<Node>(
                shared.clone(),
                Api::all(client.clone()),
                ObjectKind::Node,
                ready_tx.clone(),
            )),
            tokio::spawn(watch_kind::<ControlNode>(
                shared.clone(),
                Api::all(client),
                ObjectKind::ControlNode,
                ready_tx,
            )),
        ];
        let responder = Self { shared, watchers };
        let synced = async {
            let mut kinds = BTreeSet::new();
            while kinds.len() < 2 {
                match ready_rx.recv().await {
                    Some(kind) => kinds.insert(kind),
                    None => anyhow::bail!("a responder watch stopped before its first list"),
                };
            }
            anyhow::Ok(())
        };
        tokio::time::timeout(START_TIMEOUT, synced).await.with_context(|| {
            format!("responder watches did not list within {START_TIMEOUT:?}")
        })??;
        Ok(responder)
    }

    /// Changes the behaviour of the node `name` from now on. A held signal
    /// ([`Behaviour::Hold`]) is picked up with the new behaviour; a signal already being
    /// answered keeps its course.
    pub fn set_behaviour(&self, name: impl Into<String>, behaviour: Behaviour) {
        let name = name.into();
        self.shared.config.send_modify(|config| {
            config.nodes.insert(name, behaviour);
        });
    }

    /// Changes the behaviour of every node without its own entry.
    pub fn set_default_behaviour(&self, behaviour: Behaviour) {
        self.shared.config.send_modify(|config| config.default = behaviour);
    }

    /// A snapshot of everything observed so far.
    pub fn log(&self) -> Log {
        let state = self.shared.lock();
        Log::new(state.log.clone(), self.shared.start)
    }

    /// Waits until `check` returns `Some` for the log, and returns that value. Wakes on every
    /// new observation; the timeout error names `what` and carries the log.
    pub async fn wait_until<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut check: impl FnMut(&Log) -> Option<T>,
    ) -> anyhow::Result<T> {
        let mut changed = self.shared.log_changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changed.mark_unchanged();
            if let Some(value) = check(&self.log()) {
                return Ok(value);
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => anyhow::bail!("responder stopped while waiting for {what}"),
                Err(_) => anyhow::bail!(
                    "timed out after {timeout:?} waiting for {what}; responder log:\n{}",
                    self.log()
                ),
            }
        }
    }

    /// Stops the responder (same as dropping it).
    pub fn stop(self) {}
}

impl Drop for Responder {
    fn drop(&mut self) {
        for watcher in &self.watchers {
            watcher.abort();
        }
        self.shared.lock().drivers.abort_all();
    }
}

// === impl Shared ===

struct Shared {
    start: Instant,
    config: watch::Sender<Config>,
    /// Bumped on every new observation (for [`Responder::wait_until`]).
    log_changed: watch::Sender<u64>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    log: Vec<Observation>,
    objects: BTreeMap<ObjectRef, ObjectState>,
    drivers: JoinSet<()>,
    next_driver: u64,
    max_revision: u64,
}

/// What the responder knows about one object.
#[derive(Default)]
struct ObjectState {
    /// Every signal seen on it (fresh or adopted).
    seen: BTreeSet<SignalKey>,
    /// The signal currently in flight (seen, not terminal, not ended).
    in_flight: Option<SignalKey>,
    /// Signals the responder wrote a status for, with the revision of its last write.
    answered: BTreeMap<SignalKey, u64>,
    /// The driver working on the object: its id, signal and abort handle.
    driver: Option<(u64, SignalKey, AbortHandle)>,
}

/// What a fresh signal means to the responder.
enum Fresh {
    /// First time seen: start answering it.
    New,
    /// Seen and answered before, then written again without a status.
    Repeat,
    /// Already known (being held or answered right now, or a stale event).
    Known,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends an observation. A `revision` of 0 (unknown, e.g. a deletion noticed on a
    /// relist) is placed after everything recorded so far.
    fn record(&self, state: &mut State, revision: u64, object: &ObjectRef, event: Event) {
        let revision = if revision == 0 { state.max_revision } else { revision };
        state.max_revision = state.max_revision.max(revision);
        let seq = state.log.len() as u64;
        state.log.push(Observation {
            seq,
            at: Instant::now(),
            revision,
            object: object.clone(),
            event,
        });
        self.log_changed.send_replace(seq + 1);
    }

    /// Classifies a fresh signal (no status) seen at `revision` and records it if it is new
    /// or a repeat.
    fn note_fresh(
        &self,
        state: &mut State,
        object: &ObjectRef,
        data: &SignalData,
        revision: u64,
    ) -> Fresh {
        let key = SignalKey::of(data);
        let entry = state.objects.entry(object.clone()).or_default();
        let fresh = if !entry.seen.contains(&key) {
            Fresh::New
        } else if entry.answered.get(&key).is_some_and(|&last_write| revision > last_write) {
            Fresh::Repeat
        } else {
            return Fresh::Known;
        };
        entry.seen.insert(key.clone());
        // A repeat is recorded once; answering it again re-arms the detection.
        entry.answered.remove(&key);
        let previous = entry.in_flight.replace(key.clone());
        if let Some(previous) = previous.filter(|p| *p != key) {
            self.end(state, object, previous, revision, "replaced by a newer signal");
        }
        let event = Event::Signalled {
            command: command_kind(data),
            data: Box::new(data.clone()),
            repeat: matches!(fresh, Fresh::Repeat),
            adopted: false,
            key,
        };
        self.record(state, revision, object, event);
        fresh
    }

    /// Records that the in-flight signal `key` of `object` ended without a terminal status,
    /// and stops its driver. Does nothing if `key` is not in flight.
    fn end(&self, state: &mut State, object: &ObjectRef, key: SignalKey, revision: u64, why: &str) {
        let entry = state.objects.entry(object.clone()).or_default();
        if entry.in_flight.as_ref() != Some(&key) {
            return;
        }
        entry.in_flight = None;
        if entry.driver.as_ref().is_some_and(|(_, driving, _)| *driving == key)
            && let Some((_, _, abort)) = entry.driver.take()
        {
            abort.abort();
        }
        self.record(state, revision, object, Event::Ended { key, why: why.to_owned() });
    }

    /// Records a status the responder wrote at `revision`.
    fn note_written(
        &self,
        object: &ObjectRef,
        key: &SignalKey,
        phase: SignalPhase,
        reason: Option<String>,
        revision: u64,
    ) {
        let mut state = self.lock();
        let entry = state.objects.entry(object.clone()).or_default();
        entry.answered.insert(key.clone(), revision);
        if phase.is_terminal() && entry.in_flight.as_ref() == Some(key) {
            entry.in_flight = None;
        }
        self.record(&mut state, revision, object, Event::Wrote { key: key.clone(), phase, reason });
    }

    /// The current behaviour of `name`, and a receiver to wait for changes.
    fn behaviour(&self, name: &str) -> (Behaviour, watch::Receiver<Config>) {
        let mut rx = self.config.subscribe();
        let behaviour = rx.borrow_and_update().behaviour(name);
        (behaviour, rx)
    }
}

// === Watching ===

/// The object types the responder answers on.
trait SignalObject:
    Resource<DynamicType = ()> + Clone + fmt::Debug + DeserializeOwned + Send + Sync + 'static
{
}

impl<K> SignalObject for K where
    K: Resource<DynamicType = ()> + Clone + fmt::Debug + DeserializeOwned + Send + Sync + 'static
{
}

/// Watches every object of one kind and starts a driver for each new signal. Runs until the
/// responder is dropped; watch errors are retried with kube's default backoff.
async fn watch_kind<K: SignalObject>(
    shared: Arc<Shared>,
    api: Api<K>,
    kind: ObjectKind,
    ready: tokio::sync::mpsc::Sender<ObjectKind>,
) {
    let mut ready = Some(ready);
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut listing: BTreeSet<String> = BTreeSet::new();
    let stream = watcher(api.clone(), watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(err) => {
                eprintln!("responder: {kind} watch error (retrying): {err}");
                continue;
            }
        };
        match event {
            watcher::Event::Init => listing.clear(),
            watcher::Event::InitApply(obj) => {
                listing.insert(obj.meta().name.clone().unwrap_or_default());
                on_apply(&shared, &api, kind, &obj);
            }
            watcher::Event::InitDone => {
                // Objects that vanished while the watch was down were deleted.
                for gone in listed.difference(&listing) {
                    on_gone(&shared, &ObjectRef { kind, name: gone.clone() }, 0, "object deleted");
                }
                listed = std::mem::take(&mut listing);
                if let Some(ready) = ready.take() {
                    let _ = ready.send(kind).await;
                }
            }
            watcher::Event::Apply(obj) => {
                listed.insert(obj.meta().name.clone().unwrap_or_default());
                on_apply(&shared, &api, kind, &obj);
            }
            watcher::Event::Delete(obj) => {
                let name = obj.meta().name.clone().unwrap_or_default();
                listed.remove(&name);
                let revision = revision_of(obj.meta().resource_version.as_deref());
                on_gone(&shared, &ObjectRef { kind, name }, revision, "object deleted");
            }
        }
    }
}

/// Reacts to the current state of one object.
fn on_apply<K: SignalObject>(shared: &Arc<Shared>, api: &Api<K>, kind: ObjectKind, obj: &K) {
    let meta = obj.meta();
    let object = ObjectRef { kind, name: meta.name.clone().unwrap_or_default() };
    let revision = revision_of(meta.resource_version.as_deref());
    let data = match signal::from_meta(meta) {
        Ok(Some(data)) => data,
        Ok(None) => {
            on_gone(shared, &object, revision, "signal annotations removed");
            return;
        }
        Err(err) => {
            eprintln!("responder: {object} carries an invalid signal (ignored): {err}");
            return;
        }
    };
    let mut state = shared.lock();
    match data.phase() {
        None => match shared.note_fresh(&mut state, &object, &data, revision) {
            Fresh::New | Fresh::Repeat => {
                let busy = state.objects.get(&object).and_then(|o| o.driver.as_ref());
                let same_signal_driven =
                    busy.is_some_and(|(_, key, _)| *key == SignalKey::of(&data));
                if !same_signal_driven {
                    spawn_driver(shared, &mut state, api.clone(), object, data, None);
                }
            }
            Fresh::Known => {}
        },
        Some(phase) => {
            let key = SignalKey::of(&data);
            let entry = state.objects.entry(object.clone()).or_default();
            if entry.in_flight.as_ref().is_some_and(|k| *k != key) {
                let previous = entry.in_flight.clone().expect("checked above");
                shared.end(&mut state, &object, previous, revision, "replaced by a newer signal");
            }
            let adopt = shared.config.borrow().adopt_in_progress;
            let entry = state.objects.entry(object.clone()).or_default();
            if adopt && !phase.is_terminal() && !entry.seen.contains(&key) {
                entry.seen.insert(key.clone());
                entry.in_flight = Some(key.clone());
                let event = Event::Signalled {
                    key,
                    command: command_kind(&data),
                    data: Box::new(data.clone()),
                    repeat: false,
                    adopted: true,
                };
                shared.record(&mut state, revision, &object, event);
                spawn_driver(shared, &mut state, api.clone(), object, data, Some(phase));
            }
        }
    }
}

/// The object or its signal went away: end what was in flight.
fn on_gone(shared: &Shared, object: &ObjectRef, revision: u64, why: &str) {
    let mut state = shared.lock();
    let in_flight = state.objects.get(object).and_then(|o| o.in_flight.clone());
    if let Some(key) = in_flight {
        shared.end(&mut state, object, key, revision, why);
    }
}

fn spawn_driver<K: SignalObject>(
    shared: &Arc<Shared>,
    state: &mut State,
    api: Api<K>,
    object: ObjectRef,
    data: SignalData,
    resume_after: Option<SignalPhase>,
) {
    state.next_driver += 1;
    let id = state.next_driver;
    let key = SignalKey::of(&data);
    // Reap finished drivers so a long benchmark does not accumulate them.
    while state.drivers.try_join_next().is_some() {}
    let driver = Driver { shared: shared.clone(), api, object: object.clone(), data, id };
    let abort = state.drivers.spawn(driver.run(resume_after));
    let entry = state.objects.entry(object).or_default();
    if let Some((_, _, old)) = entry.driver.replace((id, key, abort)) {
        old.abort();
    }
}

// === Answering one signal ===

/// One step of a node's script.
#[derive(Clone, Debug)]
enum Step {
    /// Write this phase (with this reason).
    Write(SignalPhase, Option<String>),
    /// Wait until the release is open.
    Wait(Release),
    /// Wait until someone else (the leader) has written this phase onto the signal.
    AwaitPhase(SignalPhase),
}

/// How often [`Step::AwaitPhase`] looks at the object again.
const AWAIT_PHASE_POLL: Duration = Duration::from_millis(50);

/// The steps `behaviour` takes for a `command` signal (empty for [`Behaviour::Hold`]).
fn script(behaviour: &Behaviour, command: CommandKind) -> Vec<Step> {
    use SignalPhase::{
        ApplyingUpdate, Completed, Cordoning, Downloading, FailedDownload, Restarting, Uncordoning,
    };
    let success: &[SignalPhase] = match command {
        CommandKind::K0sUpdate => {
            &[Downloading, Cordoning, ApplyingUpdate, Restarting, Uncordoning, Completed]
        }
        CommandKind::AirgapUpdate => &[Downloading, Completed],
    };
    let write = |phase: &SignalPhase| Step::Write(*phase, None);
    match behaviour {
        Behaviour::Complete => success.iter().map(write).collect(),
        Behaviour::AlreadyUpToDate => vec![write(&Completed)],
        Behaviour::CompleteWithLeader => match command {
            CommandKind::K0sUpdate => vec![
                write(&Downloading),
                write(&Cordoning),
                Step::AwaitPhase(ApplyingUpdate),
                write(&Restarting),
                write(&Uncordoning),
            ],
            CommandKind::AirgapUpdate => success.iter().map(write).collect(),
        },
        Behaviour::Hold => Vec::new(),
        Behaviour::CompleteAfter(release) => {
            let mut steps = vec![write(&Downloading), Step::Wait(release.clone())];
            steps.extend(success[1..].iter().map(write));
            steps
        }
        Behaviour::Fail { phase, reason } => {
            let before: &[SignalPhase] = match (phase, command) {
                (FailedDownload, _) | (_, CommandKind::AirgapUpdate) => &[Downloading],
                (_, CommandKind::K0sUpdate) => &[Downloading, Cordoning, ApplyingUpdate],
            };
            let mut steps: Vec<Step> = before.iter().map(write).collect();
            steps.push(Step::Write(*phase, Some(reason.clone())));
            steps
        }
    }
}

/// Why a driver stopped writing.
enum Stop {
    /// The object is gone, or carries another signal (the watcher records it).
    NotOurs,
    /// The signal already has a terminal status.
    Terminal,
    /// The signal was written again without a status: answer it from the start.
    Rewritten,
}

/// Answers one signal on one object.
struct Driver<K: SignalObject> {
    shared: Arc<Shared>,
    api: Api<K>,
    object: ObjectRef,
    data: SignalData,
    id: u64,
}

impl<K: SignalObject> Driver<K> {
    async fn run(self, mut resume_after: Option<SignalPhase>) {
        let key = SignalKey::of(&self.data);
        let command = command_kind(&self.data);
        'signal: loop {
            let behaviour = self.behaviour().await;
            let mut steps = script(&behaviour, command);
            if let Some(done) = resume_after.take() {
                let position =
                    steps.iter().position(|s| matches!(s, Step::Write(p, _) if *p == done));
                if let Some(position) = position {
                    steps.drain(..=position);
                }
            }
            let mut wrote_any = false;
            for step in steps {
                match step {
                    Step::Wait(release) => release.released().await,
                    Step::AwaitPhase(phase) => match self.await_phase(&key, phase).await {
                        Ok(()) => {}
                        Err(Stop::Rewritten) => continue 'signal,
                        Err(Stop::NotOurs | Stop::Terminal) => break 'signal,
                    },
                    Step::Write(phase, reason) => {
                        match self.write(&key, phase, reason, wrote_any).await {
                            Ok(()) => wrote_any = true,
                            Err(Stop::Rewritten) => continue 'signal,
                            Err(Stop::NotOurs | Stop::Terminal) => break 'signal,
                        }
                    }
                }
            }
            break;
        }
        let mut state = self.shared.lock();
        if let Some(entry) = state.objects.get_mut(&self.object)
            && entry.driver.as_ref().is_some_and(|(id, _, _)| *id == self.id)
        {
            entry.driver = None;
        }
    }

    /// Waits until the signal `key` shows `phase` (written by someone else).
    async fn await_phase(&self, key: &SignalKey, phase: SignalPhase) -> Result<(), Stop> {
        loop {
            if let Ok(object) = self.api.get_opt(&self.object.name).await {
                let Some(object) = object else { return Err(Stop::NotOurs) };
                match signal::from_meta(object.meta()) {
                    Ok(Some(data)) if SignalKey::of(&data) == *key => {
                        if data.phase() == Some(phase) {
                            return Ok(());
                        }
                        if data.phase().is_some_and(|p| p.is_terminal()) {
                            return Err(Stop::Terminal);
                        }
                    }
                    _ => return Err(Stop::NotOurs),
                }
            }
            tokio::time::sleep(AWAIT_PHASE_POLL).await;
        }
    }

    /// The node's behaviour, waiting while it is [`Behaviour::Hold`].
    async fn behaviour(&self) -> Behaviour {
        loop {
            let (behaviour, mut changes) = self.shared.behaviour(&self.object.name);
            if !matches!(behaviour, Behaviour::Hold) {
                return behaviour;
            }
            if changes.changed().await.is_err() {
                // The responder is gone; hold forever (the task is aborted with it).
                std::future::pending::<()>().await;
            }
        }
    }

    /// Writes `phase` onto the signal `key`, retrying conflicts (re-read, re-decide) and
    /// other errors (with backoff) until it is written or no longer applies.
    async fn write(
        &self,
        key: &SignalKey,
        phase: SignalPhase,
        reason: Option<String>,
        wrote_any: bool,
    ) -> Result<(), Stop> {
        let name = &self.object.name;
        let mut delay = FIRST_RETRY_DELAY;
        loop {
            let attempt = async {
                let Some(obj) = self.api.get_opt(name).await? else {
                    return Ok(Err(Stop::NotOurs));
                };
                let meta = obj.meta();
                let revision = revision_of(meta.resource_version.as_deref());
                let current = match signal::from_meta(meta) {
                    Ok(Some(data)) if SignalKey::of(&data) == *key => data,
                    _ => return Ok(Err(Stop::NotOurs)),
                };
                match current.phase() {
                    Some(p) if p.is_terminal() => {
                        let mut state = self.shared.lock();
                        let saw = Event::Saw { key: key.clone(), phase: p };
                        self.shared.record(&mut state, revision, &self.object, saw);
                        let why = format!("someone else wrote the terminal status {p}");
                        self.shared.end(&mut state, &self.object, key.clone(), revision, &why);
                        return Ok(Err(Stop::Terminal));
                    }
                    None if wrote_any => {
                        let mut state = self.shared.lock();
                        self.shared.note_fresh(&mut state, &self.object, &current, revision);
                        return Ok(Err(Stop::Rewritten));
                    }
                    _ => {}
                }
                let mut status = SignalStatus::new(phase, jiff::Timestamp::now());
                status.reason = reason.clone();
                let (version, json) = signal::encode(&current.with_status(status));
                let patch = json!({
                    "metadata": {
                        "resourceVersion": meta.resource_version,
                        "annotations": {
                            keys::ANNOTATION_SIGNAL_VERSION: version,
                            keys::ANNOTATION_SIGNAL_DATA: json,
                        },
                    },
                });
                let written =
                    self.api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                let revision = revision_of(written.meta().resource_version.as_deref());
                self.shared.note_written(&self.object, key, phase, reason.clone(), revision);
                Ok::<_, kube::Error>(Ok(()))
            };
            match attempt.await {
                Ok(outcome) => return outcome,
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    // Someone else wrote the object since we read it: re-read and re-decide.
                }
                Err(err) => {
                    eprintln!(
                        "responder: writing {phase} to {} failed (retrying): {err}",
                        self.object
                    );
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                }
            }
        }
    }
}

fn command_kind(data: &SignalData) -> CommandKind {
    if data.command.airgapupdate.is_some() && data.command.k0supdate.is_none() {
        CommandKind::AirgapUpdate
    } else {
        CommandKind::K0sUpdate
    }
}

fn revision_of(resource_version: Option<&str>) -> u64 {
    resource_version.and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(created: &str) -> SignalKey {
        SignalKey {
            plan_id: "p".into(),
            run_id: Some("r".into()),
            command_id: 0,
            created: created.into(),
        }
    }

    fn data(created: &str) -> SignalData {
        serde_json::from_value(json!({
            "planId": "p",
            "created": created,
            "runId": "r",
            "command": { "id": 0, "k0supdate": { "url": "http://x/k0s", "version": "v1" } },
        }))
        .unwrap()
    }

    fn observation(seq: u64, revision: u64, object: ObjectRef, event: Event) -> Observation {
        Observation { seq, at: Instant::now(), revision, object, event }
    }

    fn signalled(seq: u64, revision: u64, object: ObjectRef, created: &str) -> Observation {
        let event = Event::Signalled {
            key: key(created),
            command: CommandKind::K0sUpdate,
            data: Box::new(data(created)),
            repeat: false,
            adopted: false,
        };
        observation(seq, revision, object, event)
    }

    fn wrote(
        seq: u64,
        revision: u64,
        object: ObjectRef,
        created: &str,
        phase: SignalPhase,
    ) -> Observation {
        observation(seq, revision, object, Event::Wrote { key: key(created), phase, reason: None })
    }

    #[test]
    fn in_flight_follows_revisions_not_arrival_order() {
        let a = ObjectRef::node("a");
        let b = ObjectRef::node("b");
        // b's signal arrived first but was written after a completed.
        let log = Log::new(
            vec![
                signalled(0, 30, b.clone(), "t1"),
                signalled(1, 10, a.clone(), "t0"),
                wrote(2, 20, a.clone(), "t0", SignalPhase::Completed),
                wrote(3, 40, b.clone(), "t1", SignalPhase::Completed),
            ],
            Instant::now(),
        );
        assert_eq!(log.max_in_flight(), 1);
        assert_eq!(log.signal_order(None), vec![a, b]);
        assert!(log.in_flight().is_empty());
    }

    #[test]
    fn a_second_signal_for_the_same_command_of_a_run_is_a_duplicate() {
        let a = ObjectRef::node("a");
        let log = Log::new(
            vec![
                signalled(0, 10, a.clone(), "t0"),
                wrote(1, 11, a.clone(), "t0", SignalPhase::Downloading),
                signalled(2, 12, a.clone(), "t1"),
            ],
            Instant::now(),
        );
        let duplicates = log.duplicate_signals();
        assert_eq!(duplicates.len(), 1, "{duplicates:?}");
        assert!(duplicates[0].contains("Node/a signalled 2 times"), "{duplicates:?}");
    }

    #[test]
    fn hold_writes_nothing_and_complete_after_waits_after_downloading() {
        assert!(script(&Behaviour::Hold, CommandKind::K0sUpdate).is_empty());
        let steps = script(&Behaviour::CompleteAfter(Release::new()), CommandKind::AirgapUpdate);
        assert!(matches!(
            steps.as_slice(),
            [
                Step::Write(SignalPhase::Downloading, None),
                Step::Wait(_),
                Step::Write(SignalPhase::Completed, None)
            ]
        ));
    }

    #[test]
    fn a_failed_download_fails_right_after_downloading() {
        let steps =
            script(&Behaviour::fail(SignalPhase::FailedDownload, "bad"), CommandKind::K0sUpdate);
        let phases: Vec<_> = steps
            .iter()
            .map(|s| match s {
                Step::Write(p, r) => (*p, r.clone()),
                Step::Wait(_) | Step::AwaitPhase(_) => unreachable!(),
            })
            .collect();
        assert_eq!(
            phases,
            vec![
                (SignalPhase::Downloading, None),
                (SignalPhase::FailedDownload, Some("bad".to_owned()))
            ]
        );
    }

    #[tokio::test]
    async fn a_release_lets_current_and_later_waiters_through() {
        let release = Release::new();
        let waiter = tokio::spawn({
            let release = release.clone();
            async move { release.released().await }
        });
        assert!(!release.is_released());
        release.release();
        waiter.await.unwrap();
        release.released().await;
    }
}
