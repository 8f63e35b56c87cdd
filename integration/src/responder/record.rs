//! What the responder records: the signal objects and signals it tells apart, every
//! [`Observation`] it makes, and the [`Log`] that answers the tests' questions about them
//! (what was in flight at once, in which order nodes were signalled, duplicate signals).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Instant;

use autopilot_api::signal::{SignalData, SignalPhase};

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
        /// ([`Config::adopt_in_progress`](super::Config::adopt_in_progress)).
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

/// A snapshot of everything a [`Responder`](super::Responder) observed, ordered by etcd revision.
#[derive(Clone, Debug, Default)]
pub struct Log {
    entries: Vec<Observation>,
    start: Option<Instant>,
}

impl Log {
    pub(super) fn new(mut entries: Vec<Observation>, start: Instant) -> Self {
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
        // A rollback of the run's update is another signal of the same command (DESIGN
        // §15), once per node too.
        type RunCommand = (ObjectRef, String, Option<String>, u32, bool);
        let mut seen: BTreeMap<RunCommand, Vec<&Observation>> = BTreeMap::new();
        for (o, data) in self.signals() {
            seen.entry((
                o.object.clone(),
                data.plan_id.clone(),
                data.run_id.clone(),
                data.command.id,
                data.command.rollback.is_some(),
            ))
            .or_default()
            .push(o);
        }
        seen.into_iter()
            .filter(|(_, signals)| signals.len() > 1)
            .map(|((object, plan_id, run_id, command, _rollback), signals)| {
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

/// Which update `data` asks for.
pub(super) fn command_kind(data: &SignalData) -> CommandKind {
    if data.command.airgapupdate.is_some() && data.command.k0supdate.is_none() {
        CommandKind::AirgapUpdate
    } else {
        CommandKind::K0sUpdate
    }
}

/// The etcd revision a `resourceVersion` stands for (0 if it is not a number).
pub(super) fn revision_of(resource_version: Option<&str>) -> u64 {
    resource_version.and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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
}
