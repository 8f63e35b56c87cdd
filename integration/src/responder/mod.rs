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
//!
//! # Layout
//!
//! `behaviour` (what each node does: [`Behaviour`], [`Release`], [`Config`]), `record` (what
//! is recorded: [`Observation`], [`Log`]), `script` (a behaviour as a list of steps, scripted
//! failures included), `watches` (the Node and ControlNode watches that start a driver per
//! fresh signal), `driver` (one signal answered, one write per phase) and `shared` (the
//! bookkeeping they share).

mod behaviour;
mod driver;
mod record;
mod script;
mod shared;
mod watches;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use autopilot_api::v1beta2::ControlNode;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use self::behaviour::{Behaviour, Config, Release};
pub use self::record::{CommandKind, Event, Log, ObjectKind, ObjectRef, Observation, SignalKey};
use self::shared::{Shared, State};
use self::watches::watch_kind;

/// How long [`Responder::start`] waits for both watches to list what exists.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

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
