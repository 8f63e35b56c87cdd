//! The bookkeeping the watches and the drivers share: what the responder knows about each
//! object and every observation recorded so far, behind one lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use autopilot_api::signal::{SignalData, SignalPhase};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};

use super::behaviour::{Behaviour, Config};
use super::record::{Event, ObjectRef, Observation, SignalKey, command_kind};

/// What the [`Responder`](super::Responder), its watches and its drivers share.
pub(super) struct Shared {
    /// When the responder started (the origin of the log's timeline).
    pub(super) start: Instant,
    /// The behaviours, changed while running by the responder's setters.
    pub(super) config: watch::Sender<Config>,
    /// Bumped on every new observation (for
    /// [`Responder::wait_until`](super::Responder::wait_until)).
    pub(super) log_changed: watch::Sender<u64>,
    /// Everything else, behind one lock.
    pub(super) state: Mutex<State>,
}

/// The responder's bookkeeping.
#[derive(Default)]
pub(super) struct State {
    /// Every observation, in arrival order.
    pub(super) log: Vec<Observation>,
    /// What is known about each object.
    pub(super) objects: BTreeMap<ObjectRef, ObjectState>,
    /// Every driver task (aborted when the responder stops).
    pub(super) drivers: JoinSet<()>,
    /// The id of the last driver started.
    pub(super) next_driver: u64,
    /// The highest revision recorded.
    pub(super) max_revision: u64,
}

/// What the responder knows about one object.
#[derive(Default)]
pub(super) struct ObjectState {
    /// Every signal seen on it (fresh or adopted).
    pub(super) seen: BTreeSet<SignalKey>,
    /// The signal currently in flight (seen, not terminal, not ended).
    pub(super) in_flight: Option<SignalKey>,
    /// Signals the responder wrote a status for, with the revision of its last write.
    pub(super) answered: BTreeMap<SignalKey, u64>,
    /// The driver working on the object: its id, signal and abort handle.
    pub(super) driver: Option<(u64, SignalKey, AbortHandle)>,
}

/// What a fresh signal means to the responder.
pub(super) enum Fresh {
    /// First time seen: start answering it.
    New,
    /// Seen and answered before, then written again without a status.
    Repeat,
    /// Already known (being held or answered right now, or a stale event).
    Known,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends an observation. A `revision` of 0 (unknown, e.g. a deletion noticed on a
    /// relist) is placed after everything recorded so far.
    pub(super) fn record(
        &self,
        state: &mut State,
        revision: u64,
        object: &ObjectRef,
        event: Event,
    ) {
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
    pub(super) fn note_fresh(
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
    pub(super) fn end(
        &self,
        state: &mut State,
        object: &ObjectRef,
        key: SignalKey,
        revision: u64,
        why: &str,
    ) {
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
    pub(super) fn note_written(
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
    pub(super) fn behaviour(&self, name: &str) -> (Behaviour, watch::Receiver<Config>) {
        let mut rx = self.config.subscribe();
        let behaviour = rx.borrow_and_update().behaviour(name);
        (behaviour, rx)
    }
}
