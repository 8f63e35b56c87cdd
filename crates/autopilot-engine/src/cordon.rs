//! Central cordon and drain: the pure decision.
//!
//! The leader drives two node phases for every signal object: `Cordoning` (cordon the node
//! and evict its pods, then `ApplyingUpdate`) and `UnCordoning` (uncordon, then
//! `Completed`). Only kubelet-bearing machines (pure workers' Nodes and controller+worker
//! ControlNodes) are cordoned; a pure controller passes straight through. Autopilot records
//! that it cordoned a node and uncordons only such nodes, so a node an administrator
//! cordoned before the update stays cordoned after it (unlike k0s).
//!
//! The drain acts only on signals of a run the Plan wrote (DESIGN §14): the Plan's current
//! run, and a command of it that the signal matches (`crate::authorize`). A `Cordoning`
//! signal that names no run (anyone who may patch a Node can write one), is left over from
//! another run, or does not match its run's command is failed instead of drained, so its
//! node stops and nothing waits for it. Undoing autopilot's own cordon is always safe and
//! happens whatever run the signal belongs to.
//!
//! How far the drain goes is the command's `drain` ([`DrainPolicy`]): `Always` evicts every
//! pod that must go; `Never` cordons and evicts nothing; `IfPossible` evicts only the pods
//! that have somewhere else to go ([`has_somewhere_to_go`]: another Ready, uncordoned node
//! whose `NoSchedule`/`NoExecute` taints the pod tolerates and whose labels match its
//! `nodeSelector`; a simple, documented model, not the scheduler) and leaves the others on
//! the cordoned node. A node not fully drained goes on to `ApplyingUpdate` with a note
//! ([`NOTE_PREFIX`]) as its signal's reason, which the Plan status keeps.
//!
//! The drain works as `kubectl drain --ignore-daemonsets` does. It acts on the pods it found
//! when it began ([`Facts::found`], by UID), evicts them all at once ([`Step::Evict`]) and
//! waits for them ([`Step::WaitForPods`]); a replacement that comes back to the node is none
//! of them. A pod whose eviction would lose it (no controller) or its `emptyDir` data
//! ([`PodFacts::losses`]) holds an `Always` drain before anything is evicted ([`Step::Held`])
//! unless the command's `drainOptions` allow it, and stays under `IfPossible`. Refusals,
//! held pods and the wait for pods to terminate are all bounded by `--drain-timeout`
//! ([`blocked`]); `skipWaitForDeleteTimeout` ends the wait for a pod sooner.
//!
//! [`decide`] sees one object's facts and returns the next [`Step`]; the shell
//! (`autopilot_controller::drain`) performs it and calls again. Every step is idempotent.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use autopilot_api::signal::SignalPhase;
pub use autopilot_api::v1beta2::{DrainOptions, DrainPolicy};

/// How every note of a drain that left pods on the node begins (`cordoned, not drained: …`,
/// `cordoned, drained in part: …`): the Plan engine keeps such a reason as the target's
/// `drain` note.
pub const NOTE_PREFIX: &str = "cordoned, ";

/// Whether a signal's `reason` is a drain's note ([`NOTE_PREFIX`]).
pub fn is_drain_note(reason: &str) -> bool {
    reason.starts_with(NOTE_PREFIX)
}

/// The reason a node writes with its next phase: `next`, or when it gives none, the drain's
/// note the signal carried (`previous`), so the note travels with the signal to its end
/// and the leader records it even if it never saw the phase it was written in (a node that
/// goes from `ApplyingUpdate` to `Completed` between two of the leader's passes).
pub fn carried_reason(previous: Option<&str>, next: Option<String>) -> Option<String> {
    next.or_else(|| previous.filter(|reason| is_drain_note(reason)).map(str::to_owned))
}

/// How many pod names a note lists before it says how many more.
const PODS_SHOWN: usize = 5;

/// A pod on the node being drained, as far as the decision needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFacts {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub name: String,
    /// `metadata.uid`: a drain evicts and waits for the pods it found by UID, so a
    /// replacement of the same name is another pod.
    pub uid: String,
    /// What controls the pod (its controller owner reference).
    pub controller: Controller,
    /// A static (mirror) pod: not evicted (the API object only mirrors the kubelet's).
    pub mirror: bool,
    /// `metadata.deletionTimestamp`: the pod is being deleted (set to when its grace period
    /// ends), and the drain waits for it to go away.
    pub deletion: Option<jiff::Timestamp>,
    /// `status.phase` is `Succeeded` or `Failed`: nothing runs, nothing is lost by evicting it.
    pub finished: bool,
    /// The pod has an `emptyDir` volume, whose data is lost when it goes.
    pub empty_dir: bool,
    /// The command's `drainOptions.podSelector` selects it (every pod when there is none).
    pub selected: bool,
    /// `spec.nodeSelector`: the labels a node must have to run the pod.
    pub node_selector: BTreeMap<String, String>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
}

/// What controls a pod, as far as a drain cares (its owner reference with `controller:
/// true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Controller {
    /// No controller: a bare pod, gone for good once evicted.
    None,
    /// A DaemonSet of this name. `exists`: the DaemonSet does (the shell looks it up); one
    /// that does not leaves the pod with no controller to bring it back.
    DaemonSet {
        /// The DaemonSet's name (in the pod's namespace).
        name: String,
        /// Whether it exists.
        exists: bool,
    },
    /// Another kind (a ReplicaSet, StatefulSet, Job, ...): it replaces an evicted pod.
    Other,
}

/// A pod a step names: where it is and which pod of that name (`uid`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub name: String,
    /// Its UID (an eviction is made with it as a precondition).
    pub uid: String,
}

impl PodRef {
    fn of(pod: &PodFacts) -> Self {
        Self { namespace: pod.namespace.clone(), name: pod.name.clone(), uid: pod.uid.clone() }
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod's toleration, as far as taints go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Toleration {
    /// The taint key (empty with `Exists`: every key).
    pub key: String,
    /// `Exists` or `Equal` (the default).
    pub operator: String,
    /// The value (`Equal` only).
    pub value: String,
    /// The taint effect it tolerates (empty: every effect).
    pub effect: String,
}

impl Toleration {
    /// Whether it tolerates `taint` (Kubernetes' rule).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        match self.operator.as_str() {
            "Exists" => self.key.is_empty() || self.key == taint.key,
            _ => self.key == taint.key && self.value == taint.value,
        }
    }
}

/// A node's taint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Taint {
    /// The key.
    pub key: String,
    /// The value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// Another node a pod could go to, as far as [`has_somewhere_to_go`] looks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtherNode {
    /// Its name.
    pub name: String,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its taints.
    pub taints: Vec<Taint>,
}

/// Whether `pod` has somewhere to go among `others` (nodes other than the one drained): a
/// Ready, uncordoned node whose `NoSchedule` and `NoExecute` taints the pod all tolerates
/// and whose labels include the pod's `nodeSelector`. Not the scheduler: affinity, resources,
/// ports and topology spread are not looked at, so a pod this says can go may still stay
/// Pending elsewhere (the eviction respects PodDisruptionBudgets all the same).
pub fn has_somewhere_to_go(pod: &PodFacts, others: &[OtherNode]) -> bool {
    others.iter().any(|node| {
        node.ready
            && !node.unschedulable
            && node
                .taints
                .iter()
                .filter(|taint| taint.effect == "NoSchedule" || taint.effect == "NoExecute")
                .all(|taint| pod.tolerations.iter().any(|t| t.tolerates(taint)))
            && pod.node_selector.iter().all(|(key, value)| node.labels.get(key) == Some(value))
    })
}

impl PodFacts {
    /// Whether a drain must move the pod off the node: everything but static pods and the
    /// pods of a DaemonSet that exists (it would recreate them at once, unschedulable or not).
    pub fn must_go(&self) -> bool {
        !self.mirror && !matches!(self.controller, Controller::DaemonSet { exists: true, .. })
    }

    /// Whether the pod is being deleted.
    pub fn terminating(&self) -> bool {
        self.deletion.is_some()
    }

    /// What evicting the pod would lose that `options` do not allow, as `kubectl drain`
    /// judges it: a pod no controller brings back (unless `force`), and `emptyDir` data
    /// (unless `deleteEmptydirData`). A finished pod loses nothing. Empty: it may go.
    pub fn losses(&self, options: &DrainOptions) -> Vec<String> {
        let mut lost = Vec::new();
        if self.finished {
            return lost;
        }
        match &self.controller {
            Controller::None if !options.force => lost.push(
                "no controller, so it would be gone for good (drainOptions.force evicts it)"
                    .to_owned(),
            ),
            Controller::DaemonSet { name, exists: false } if !options.force => lost.push(format!(
                "its DaemonSet {name} does not exist, so it would be gone for good \
                 (drainOptions.force evicts it)"
            )),
            Controller::None | Controller::DaemonSet { .. } | Controller::Other => {}
        }
        if self.empty_dir && !options.delete_emptydir_data {
            lost.push(
                "emptyDir data that would be lost (drainOptions.deleteEmptydirData evicts it)"
                    .to_owned(),
            );
        }
        lost
    }
}

/// Everything the decision looks at for one signal object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The node-side phase on the object's current signal (`None`: no signal or no status).
    pub phase: Option<SignalPhase>,
    /// Whether a kubelet runs on the machine (a Node, or a controller+worker ControlNode).
    pub kubelet_bearing: bool,
    /// Whether the machine's Node exists (a controller+worker may not have registered it).
    pub node_exists: bool,
    /// `spec.unschedulable` of the machine's Node.
    pub unschedulable: bool,
    /// Autopilot's own "cordoned by autopilot" mark is on the Node.
    pub cordoned_by_autopilot: bool,
    /// Pods bound to the Node.
    pub pods: Vec<PodFacts>,
    /// How the signal's run relates to the Plan's current run. Looked up only when
    /// [`needs_run`] says the decision depends on it.
    pub run: Run,
    /// The `drain` of the signal's command (`Always` unless the run says otherwise).
    pub drain: DrainPolicy,
    /// The other nodes of the cluster, under `IfPossible` only (where pods could go).
    pub others: Vec<OtherNode>,
    /// The command's `drainOptions` (the defaults when it has none).
    pub options: DrainOptions,
    /// The UIDs of the pods on the node when the drain of this signal began (the shell's
    /// first list after the cordon): only those are evicted and waited for, so a
    /// replacement that lands back on the cordoned node (it tolerates `unschedulable`, or
    /// names the node) neither is evicted again nor holds the drain. `None`: the drain
    /// begins now, every pod listed is one it found.
    pub found: Option<BTreeSet<String>>,
    /// Why the command's `drainOptions.podSelector` cannot be read, if it cannot (the plan
    /// refuses such a command before it signals a node; a signal of one is failed, never
    /// drained as if it selected everything).
    pub selector_problem: Option<String>,
    /// This leader's clock (for `skipWaitForDeleteTimeout`).
    pub now: jiff::Timestamp,
}

/// How a signal's run (`runId` in the signal data) relates to the current run of the Plan
/// named `autopilot` (its `status.runId`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Run {
    /// Not looked up: the signal's phase is driven the same whatever its run (see
    /// [`needs_run`]).
    NotLookedUp,
    /// The signal names no run: not written by this Plan's leader, so never drained.
    Unmarked,
    /// The signal belongs to the Plan's current run and matches its command.
    Current,
    /// The signal names the Plan's current run but does not match its command or targets:
    /// the refusal says why (see `crate::authorize`).
    Unauthorized(String),
    /// The signal belongs to another run: an earlier run of the Plan, or a Plan that has
    /// since been deleted (and perhaps created again).
    Other {
        /// The run the signal names.
        signal: String,
        /// What the Plan's current run is.
        plan: PlanRun,
    },
}

/// The current run of the Plan named `autopilot`, as seen when a signal's run is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanRun {
    /// No Plan named `autopilot` exists.
    Missing,
    /// The Plan exists but no run has started (no `status.runId`).
    NotStarted,
    /// The Plan's `status.runId`.
    Run(String),
}

/// Whether the decision for a signal in `phase` depends on its run, so the shell must look
/// the Plan up. Only `Cordoning` does: cordoning and evicting is what must not happen for
/// another run's signal.
pub fn needs_run(phase: Option<SignalPhase>) -> bool {
    phase == Some(SignalPhase::Cordoning)
}

/// Whether the decision on `facts` depends on the pods of the node, so the shell must list
/// them (every fact but `pods` and `others` observed): only a `Cordoning` signal of the
/// current run on a node that exists, is already cordoned, and whose command drains. Before
/// the cordon the answer is to cordon whatever runs there, and a drain of `Never` evicts
/// nothing, so a list then would be read for nothing.
pub fn needs_pods(facts: &Facts) -> bool {
    facts.phase == Some(SignalPhase::Cordoning)
        && facts.run == Run::Current
        && facts.kubelet_bearing
        && facts.node_exists
        && facts.unschedulable
        && facts.drain != DrainPolicy::Never
}

/// What to do next for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do in this phase (not ours to drive, or already done).
    Nothing,
    /// Mark the Node unschedulable and record that autopilot did it.
    Cordon,
    /// Evict these pods through the Eviction API (PodDisruptionBudgets apply), all at once,
    /// each with this grace period (seconds; `None`: the pod's own).
    Evict {
        /// The pods.
        pods: Vec<PodRef>,
        /// `drainOptions.gracePeriod`.
        grace_period: Option<u32>,
    },
    /// Pods the drain found are still terminating; look again soon. The wait counts against
    /// `--drain-timeout` ([`blocked`]), naming them.
    WaitForPods(Vec<PodRef>),
    /// Pods the drain found would lose what the command's `drainOptions` do not allow
    /// (`drain: Always`): nothing is evicted, and the drain is blocked, with this reason
    /// naming each pod and what it would lose, until they go or `--drain-timeout` ([`blocked`]).
    Held(String),
    /// Clear `spec.unschedulable` and the mark (only for nodes autopilot cordoned).
    Uncordon,
    /// Write this phase onto the signal (the drive of this phase is done).
    Advance(SignalPhase),
    /// Write `ApplyingUpdate` with this note as the reason: the node is cordoned, and the
    /// pods the command's `drain` left on it stay ([`NOTE_PREFIX`]).
    Undrained(String),
    /// Write `Failed` with this reason onto the signal: it is not ours to drive, and the
    /// node must stop rather than wait for a drain that will not come.
    Fail(String),
}

/// Decide the next step for one signal object.
pub fn decide(facts: &Facts) -> Step {
    let Some(phase) = facts.phase else {
        return Step::Nothing;
    };
    match phase {
        SignalPhase::Cordoning => match &facts.run {
            // Check 1: drive only signals of the current run that match its command.
            Run::Current => cordoning(facts),
            Run::Unmarked => Step::Fail(
                "not drained: the signal names no plan run; only signals of a run of the Plan \
                 are drained"
                    .to_owned(),
            ),
            Run::Unauthorized(refusal) => Step::Fail(format!("not drained: {refusal}")),
            Run::Other { signal, plan } => Step::Fail(not_drained(signal, plan)),
            // The shell looks the run up whenever `needs_run` says so; should it ever not
            // have, cordoning without knowing the run would be the unsafe choice.
            Run::NotLookedUp => Step::Nothing,
        },
        // Undoing autopilot's own cordon is safe whatever run the signal belongs to.
        SignalPhase::Uncordoning => {
            // Check 1: undo only our own cordon; an administrator's stays.
            if facts.kubelet_bearing && facts.node_exists && facts.cordoned_by_autopilot {
                Step::Uncordon
            } else {
                Step::Advance(SignalPhase::Completed)
            }
        }
        // A signal that ended (or failed) on a node autopilot cordoned must not leave it
        // cordoned: clean up even if the node skipped UnCordoning.
        SignalPhase::Completed | SignalPhase::Failed | SignalPhase::FailedDownload => {
            if facts.kubelet_bearing && facts.node_exists && facts.cordoned_by_autopilot {
                Step::Uncordon
            } else {
                Step::Nothing
            }
        }
        SignalPhase::Downloading | SignalPhase::ApplyingUpdate | SignalPhase::Restarting => {
            Step::Nothing
        }
    }
}

/// Why a `Cordoning` signal of another run is failed instead of drained.
fn not_drained(signal: &str, plan: &PlanRun) -> String {
    match plan {
        PlanRun::Run(current) => format!(
            "not drained: the signal belongs to run {signal}, not the plan's current run {current}"
        ),
        PlanRun::NotStarted => format!(
            "not drained: the signal belongs to run {signal}, and the plan {} has not started \
             a run",
            autopilot_api::keys::PLAN_NAME
        ),
        PlanRun::Missing => format!(
            "not drained: the signal belongs to run {signal}, and no plan {} exists",
            autopilot_api::keys::PLAN_NAME
        ),
    }
}

fn cordoning(facts: &Facts) -> Step {
    // Check 1: machines without a kubelet have nothing to cordon.
    if !facts.kubelet_bearing || !facts.node_exists {
        return Step::Advance(SignalPhase::ApplyingUpdate);
    }
    // Check 2: cordon first, so nothing new is scheduled while pods are evicted. A node an
    // administrator already cordoned is left as it is (and not marked as ours).
    if !facts.unschedulable {
        return Step::Cordon;
    }
    // Check 3: the command's drain: `Never` evicts nothing.
    let policy = facts.drain;
    match policy {
        DrainPolicy::Never => {
            return Step::Undrained(format!(
                "{NOTE_PREFIX}not drained: the command's drain is Never"
            ));
        }
        DrainPolicy::Always | DrainPolicy::IfPossible => {}
    }
    if let Some(problem) = &facts.selector_problem {
        return Step::Fail(format!("not drained: drainOptions.podSelector: {problem}"));
    }
    drain(facts, policy)
}

/// The drain of a cordoned node under `policy` (`Always` or `IfPossible`).
fn drain(facts: &Facts, policy: DrainPolicy) -> Step {
    // Check 4: only the pods found when the drain began, that the selector selects and that
    // must go; a replacement that came back is none of them.
    let found = |pod: &PodFacts| facts.found.as_ref().is_none_or(|uids| uids.contains(&pod.uid));
    let pods = facts.pods.iter().filter(|p| found(p) && p.selected && p.must_go());
    let (going, live): (Vec<&PodFacts>, Vec<&PodFacts>) = pods.partition(|p| p.terminating());
    // Check 5: a pod whose eviction would lose what the options do not allow holds an
    // `Always` drain before anything is evicted (as `kubectl drain` refuses), and stays on
    // the node under `IfPossible`, like a pod with nowhere to go.
    let (held, free): (Vec<&PodFacts>, Vec<&PodFacts>) =
        live.into_iter().partition(|p| !p.losses(&facts.options).is_empty());
    let (evict, nowhere): (Vec<&PodFacts>, Vec<&PodFacts>) = match policy {
        DrainPolicy::Always if !held.is_empty() => {
            return Step::Held(held_text(&held, &facts.options));
        }
        DrainPolicy::IfPossible => {
            free.into_iter().partition(|p| has_somewhere_to_go(p, &facts.others))
        }
        DrainPolicy::Always | DrainPolicy::Never => (free, Vec::new()),
    };
    // Check 6: evict what must go, all at once; wait for what is going (unless it has been
    // terminating for longer than `skipWaitForDeleteTimeout`).
    if !evict.is_empty() {
        let pods = evict.into_iter().map(PodRef::of).collect();
        return Step::Evict { pods, grace_period: facts.options.grace_period };
    }
    let waiting: Vec<PodRef> = going
        .into_iter()
        .filter(|p| !skip_wait(p, &facts.options, facts.now))
        .map(PodRef::of)
        .collect();
    if !waiting.is_empty() {
        return Step::WaitForPods(waiting);
    }
    // Check 7: what stays is named.
    if held.is_empty() && nowhere.is_empty() {
        return Step::Advance(SignalPhase::ApplyingUpdate);
    }
    let mut parts = Vec::new();
    if !nowhere.is_empty() {
        parts.push(format!(
            "of pod(s) {}: no other Ready, uncordoned node tolerates their taints and matches \
             their nodeSelector",
            listed(nowhere.iter().map(|p| format!("{}/{}", p.namespace, p.name)))
        ));
    }
    if !held.is_empty() {
        parts.push(format!("of {}", held_text(&held, &facts.options)));
    }
    Step::Undrained(format!(
        "{NOTE_PREFIX}not drained {} (drain: IfPossible)",
        parts.join("; nor ")
    ))
}

/// The longest text a reason built from pod names and API answers takes (bytes, before the
/// `…` of a cut): a signal status reason stays small whatever the pods are called.
pub const REASON_MAX: usize = 1024;

/// `names`, at most [`PODS_SHOWN`] of them, then how many more.
fn listed(names: impl Iterator<Item = String>) -> String {
    let names: Vec<String> = names.collect();
    let mut text = names.iter().take(PODS_SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > PODS_SHOWN {
        text.push_str(&format!(" and {} more", names.len() - PODS_SHOWN));
    }
    text
}

/// The pods `held` and what each would lose under `options` (at most [`PODS_SHOWN`]).
fn held_text(held: &[&PodFacts], options: &DrainOptions) -> String {
    let each = held
        .iter()
        .map(|p| format!("{}/{} ({})", p.namespace, p.name, p.losses(options).join("; and ")));
    autopilot_api::text::truncate(&format!("pod(s) held: {}", listed(each)), REASON_MAX)
}

/// Whether the drain stops waiting for the terminating `pod`: its `deletionTimestamp` is
/// more than `skipWaitForDeleteTimeout` behind `now` (as `kubectl drain` compares it).
fn skip_wait(pod: &PodFacts, options: &DrainOptions, now: jiff::Timestamp) -> bool {
    let (Some(deletion), Some(after)) = (pod.deletion, options.skip_wait_for_delete_timeout) else {
        return false;
    };
    now.duration_since(deletion) > jiff::SignedDuration::from_secs(i64::from(after))
}

/// The reason text for pods the drain waits for (for [`blocked`]).
pub fn waiting_text(pods: &[PodRef]) -> String {
    let text =
        format!("waiting for pod(s) {} to terminate", listed(pods.iter().map(ToString::to_string)));
    autopilot_api::text::truncate(&text, REASON_MAX)
}

/// What to do about a drain whose evictions were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// The drain has been blocked for the whole `--drain-timeout`: write `Failed` with this
    /// reason on the signal.
    Fail(String),
    /// Record the reason on the signal and try the evictions again after `delay`.
    Retry {
        /// Why the node is still `Cordoning`.
        reason: String,
        /// When to try again: the refusal backoff, or the time left before the drain
        /// times out if that is sooner.
        delay: Duration,
    },
}

/// When a drain's clock runs: what this leader observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainClock {
    /// When a leader first saw the node in `Cordoning`, as the Plan status keeps it (on that
    /// leader's clock; `None` until the status shows it).
    pub cordoning_since: Option<jiff::Timestamp>,
    /// When this leader's term began, on its own clock: the drain's timeout counts at most
    /// from then, so a time an earlier leader wrote is never compared with this leader's
    /// clock, whose offset from the earlier one's is unknown (as every deadline of the plan
    /// engine, `plan::Observed::term_started`).
    pub term_started: Option<jiff::Timestamp>,
    /// This leader's clock now.
    pub now: jiff::Timestamp,
}

impl DrainClock {
    /// When the drain's timeout counts from: `cordoning_since`, or this leader's takeover
    /// if that is later or `cordoning_since` lies in this leader's future (an earlier
    /// leader's clock ahead of its own: [`crate::term::counted_from`]).
    fn counted_from(&self) -> Option<jiff::Timestamp> {
        let since = self.cordoning_since?;
        Some(crate::term::counted_from(since, self.term_started, self.now))
    }
}

/// Decide about a drain of `node` whose evictions were refused (`blocked` says by what),
/// on the leader's `clock`; `backoff` is the shell's next retry delay for this object.
pub fn blocked(
    node: &str,
    blocked: &str,
    clock: DrainClock,
    timeout: Duration,
    backoff: Duration,
) -> Blocked {
    let blocked = autopilot_api::text::truncate(blocked, REASON_MAX);
    let delay = match drain_deadline(clock.counted_from(), clock.now, timeout) {
        DrainDeadline::Over => {
            let timeout = autopilot_api::duration::format(timeout);
            return Blocked::Fail(format!("drain of {node} blocked for {timeout}: {blocked}"));
        }
        DrainDeadline::In(remaining) => backoff.min(remaining),
        DrainDeadline::Unknown => backoff,
    };
    Blocked::Retry { reason: format!("draining {node}: {blocked}; retrying"), delay }
}

/// Where a blocked drain stands against `--drain-timeout`.
#[derive(Debug, PartialEq, Eq)]
enum DrainDeadline {
    /// The drain has been blocked for the whole timeout: the node fails.
    Over,
    /// Time left before the drain times out.
    In(Duration),
    /// The Plan status does not show when the leader saw the node enter `Cordoning` yet: the
    /// drain does not time out on this pass (the node's progress deadline still holds).
    Unknown,
}

/// How long the drain of a node that entered `Cordoning` at `since` has left at `now`.
fn drain_deadline(
    since: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
    timeout: Duration,
) -> DrainDeadline {
    let Some(since) = since else { return DrainDeadline::Unknown };
    let elapsed = now.duration_since(since);
    let Ok(timeout) = jiff::SignedDuration::try_from(timeout) else {
        return DrainDeadline::Unknown;
    };
    match timeout.checked_sub(elapsed) {
        Some(left) if left.is_positive() => {
            Duration::try_from(left).map_or(DrainDeadline::Unknown, DrainDeadline::In)
        }
        Some(_) => DrainDeadline::Over,
        None => DrainDeadline::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(phase: SignalPhase) -> Facts {
        Facts {
            phase: Some(phase),
            kubelet_bearing: true,
            node_exists: true,
            unschedulable: false,
            cordoned_by_autopilot: false,
            pods: Vec::new(),
            run: Run::Current,
            drain: DrainPolicy::Always,
            others: Vec::new(),
            options: DrainOptions::default(),
            found: None,
            selector_problem: None,
            now: "2026-01-01T00:00:00Z".parse().expect("a timestamp"),
        }
    }

    fn other_run(plan: PlanRun) -> Run {
        Run::Other { signal: "uid-1/1".into(), plan }
    }

    /// A running pod of a ReplicaSet (UID `uid-<name>`), nothing local.
    fn pod(name: &str) -> PodFacts {
        PodFacts {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Controller::Other,
            mirror: false,
            deletion: None,
            finished: false,
            empty_dir: false,
            selected: true,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
        }
    }

    /// `pod(name)` named in a step.
    fn named(name: &str) -> PodRef {
        PodRef { namespace: "default".into(), name: name.into(), uid: format!("uid-{name}") }
    }

    /// A step evicting `names` with the pods' own grace periods.
    fn evict(names: &[&str]) -> Step {
        Step::Evict { pods: names.iter().map(|n| named(n)).collect(), grace_period: None }
    }

    /// `pod(name)`, being deleted since 00:00 (the test clock's `now`).
    fn terminating(name: &str) -> PodFacts {
        PodFacts { deletion: Some("2026-01-01T00:00:00Z".parse().expect("a time")), ..pod(name) }
    }

    fn daemon_set(name: &str, exists: bool) -> PodFacts {
        PodFacts { controller: Controller::DaemonSet { name: "agent".into(), exists }, ..pod(name) }
    }

    #[test]
    fn the_pods_are_needed_exactly_where_they_change_the_decision() {
        let phases = [
            SignalPhase::Cordoning,
            SignalPhase::ApplyingUpdate,
            SignalPhase::Uncordoning,
            SignalPhase::Completed,
        ];
        let runs = [Run::Current, Run::Unmarked, Run::NotLookedUp, Run::Unauthorized("no".into())];
        let drains = [DrainPolicy::Always, DrainPolicy::IfPossible, DrainPolicy::Never];
        let mut needed = 0;
        for phase in phases {
            for run in &runs {
                for drain in drains {
                    for bits in 0..8_u8 {
                        let without = Facts {
                            kubelet_bearing: bits & 1 != 0,
                            node_exists: bits & 2 != 0,
                            unschedulable: bits & 4 != 0,
                            run: run.clone(),
                            drain,
                            ..node(phase)
                        };
                        let with = Facts { pods: vec![pod("web")], ..without.clone() };
                        if needs_pods(&without) {
                            needed += 1;
                            assert_ne!(decide(&with), decide(&without), "{without:?}");
                        } else {
                            assert_eq!(decide(&with), decide(&without), "{without:?}");
                        }
                    }
                }
            }
        }
        // Cordoning, the current run, an existing cordoned Node, `Always` or `IfPossible`.
        assert_eq!(needed, 2);
    }

    #[test]
    fn a_pure_controller_passes_through_cordoning_and_uncordoning() {
        let facts = Facts { kubelet_bearing: false, ..node(SignalPhase::Cordoning) };
        assert_eq!(decide(&facts), Step::Advance(SignalPhase::ApplyingUpdate));
        let facts = Facts { kubelet_bearing: false, ..node(SignalPhase::Uncordoning) };
        assert_eq!(decide(&facts), Step::Advance(SignalPhase::Completed));
    }

    #[test]
    fn a_schedulable_worker_is_cordoned_first() {
        let facts = Facts { pods: vec![pod("a")], ..node(SignalPhase::Cordoning) };
        assert_eq!(decide(&facts), Step::Cordon);
    }

    #[test]
    fn a_cordoned_worker_has_its_pods_evicted_except_daemon_set_and_mirror_pods() {
        let facts = Facts {
            unschedulable: true,
            cordoned_by_autopilot: true,
            pods: vec![
                pod("app"),
                daemon_set("ds", true),
                PodFacts { mirror: true, ..pod("static") },
            ],
            ..node(SignalPhase::Cordoning)
        };
        assert_eq!(decide(&facts), evict(&["app"]));
    }

    #[test]
    fn terminating_pods_are_waited_for_before_applying_the_update() {
        let facts = Facts {
            unschedulable: true,
            pods: vec![terminating("app")],
            ..node(SignalPhase::Cordoning)
        };
        assert_eq!(decide(&facts), Step::WaitForPods(vec![named("app")]));
    }

    #[test]
    fn a_drained_worker_moves_on_to_applying_the_update() {
        let facts = Facts {
            unschedulable: true,
            pods: vec![daemon_set("ds", true)],
            ..node(SignalPhase::Cordoning)
        };
        assert_eq!(decide(&facts), Step::Advance(SignalPhase::ApplyingUpdate));
    }

    #[test]
    fn only_a_node_autopilot_cordoned_is_uncordoned() {
        let ours = Facts {
            unschedulable: true,
            cordoned_by_autopilot: true,
            ..node(SignalPhase::Uncordoning)
        };
        assert_eq!(decide(&ours), Step::Uncordon);
        let admins = Facts { unschedulable: true, ..node(SignalPhase::Uncordoning) };
        assert_eq!(decide(&admins), Step::Advance(SignalPhase::Completed));
    }

    #[test]
    fn a_finished_or_failed_signal_never_leaves_our_cordon_behind() {
        for phase in [SignalPhase::Completed, SignalPhase::Failed, SignalPhase::FailedDownload] {
            let ours = Facts { unschedulable: true, cordoned_by_autopilot: true, ..node(phase) };
            assert_eq!(decide(&ours), Step::Uncordon, "{phase:?}");
            let clean = Facts { unschedulable: false, ..node(phase) };
            assert_eq!(decide(&clean), Step::Nothing, "{phase:?}");
        }
    }

    #[test]
    fn phases_the_node_drives_itself_are_left_alone() {
        for phase in
            [SignalPhase::Downloading, SignalPhase::ApplyingUpdate, SignalPhase::Restarting]
        {
            let facts = Facts { unschedulable: true, cordoned_by_autopilot: true, ..node(phase) };
            assert_eq!(decide(&facts), Step::Nothing, "{phase:?}");
        }
        let no_signal = Facts { phase: None, ..node(SignalPhase::Cordoning) };
        assert_eq!(decide(&no_signal), Step::Nothing);
    }

    #[test]
    fn a_cordoning_signal_of_the_current_run_is_drained() {
        let facts = Facts { run: Run::Current, ..node(SignalPhase::Cordoning) };
        assert_eq!(decide(&facts), Step::Cordon);
    }

    #[test]
    fn a_cordoning_signal_without_a_run_or_not_matching_its_run_is_failed_not_drained() {
        let facts =
            Facts { pods: vec![pod("app")], run: Run::Unmarked, ..node(SignalPhase::Cordoning) };
        let Step::Fail(reason) = decide(&facts) else { panic!("an unmarked signal is drained") };
        assert!(reason.starts_with("not drained: the signal names no plan run"), "{reason}");
        let forged = Facts {
            pods: vec![pod("app")],
            run: Run::Unauthorized("refused: w9 is not one of its workers".into()),
            ..node(SignalPhase::Cordoning)
        };
        assert_eq!(
            decide(&forged),
            Step::Fail("not drained: refused: w9 is not one of its workers".into())
        );
    }

    #[test]
    fn a_cordoning_signal_of_an_earlier_run_is_failed_not_drained() {
        let facts = Facts {
            pods: vec![pod("app")],
            run: other_run(PlanRun::Run("uid-1/2".into())),
            ..node(SignalPhase::Cordoning)
        };
        assert_eq!(
            decide(&facts),
            Step::Fail(
                "not drained: the signal belongs to run uid-1/1, not the plan's current run \
                 uid-1/2"
                    .into()
            )
        );
        // Also when a cordon is already on the node: failing it lets the next pass undo ours.
        let cordoned = Facts {
            unschedulable: true,
            cordoned_by_autopilot: true,
            run: other_run(PlanRun::Run("uid-1/2".into())),
            ..node(SignalPhase::Cordoning)
        };
        assert!(matches!(decide(&cordoned), Step::Fail(_)));
    }

    #[test]
    fn a_cordoning_signal_is_failed_when_the_plan_is_gone_or_has_no_run() {
        let gone = Facts { run: other_run(PlanRun::Missing), ..node(SignalPhase::Cordoning) };
        assert_eq!(
            decide(&gone),
            Step::Fail(
                "not drained: the signal belongs to run uid-1/1, and no plan autopilot exists"
                    .into()
            )
        );
        let fresh = Facts { run: other_run(PlanRun::NotStarted), ..node(SignalPhase::Cordoning) };
        assert_eq!(
            decide(&fresh),
            Step::Fail(
                "not drained: the signal belongs to run uid-1/1, and the plan autopilot has not \
                 started a run"
                    .into()
            )
        );
    }

    #[test]
    fn a_pure_controller_of_an_earlier_run_is_failed_too() {
        let facts = Facts {
            kubelet_bearing: false,
            run: other_run(PlanRun::Run("uid-1/2".into())),
            ..node(SignalPhase::Cordoning)
        };
        assert!(matches!(decide(&facts), Step::Fail(_)));
    }

    #[test]
    fn uncordoning_is_driven_whatever_the_run() {
        for run in [
            Run::NotLookedUp,
            Run::Unmarked,
            Run::Current,
            Run::Unauthorized("refused".into()),
            other_run(PlanRun::Run("uid-1/2".into())),
            other_run(PlanRun::Missing),
        ] {
            let ours = Facts {
                unschedulable: true,
                cordoned_by_autopilot: true,
                run: run.clone(),
                ..node(SignalPhase::Uncordoning)
            };
            assert_eq!(decide(&ours), Step::Uncordon, "{run:?}");
            let clean = Facts { run: run.clone(), ..node(SignalPhase::Uncordoning) };
            assert_eq!(decide(&clean), Step::Advance(SignalPhase::Completed), "{run:?}");
            let failed = Facts {
                unschedulable: true,
                cordoned_by_autopilot: true,
                run: run.clone(),
                ..node(SignalPhase::Failed)
            };
            assert_eq!(decide(&failed), Step::Uncordon, "{run:?}");
        }
    }

    #[test]
    fn only_cordoning_needs_the_run_looked_up() {
        for phase in SignalPhase::ALL {
            assert_eq!(needs_run(Some(phase)), phase == SignalPhase::Cordoning, "{phase:?}");
        }
        assert!(!needs_run(None));
        // And the safe answer, should the shell not have looked it up.
        let facts = Facts { run: Run::NotLookedUp, ..node(SignalPhase::Cordoning) };
        assert_eq!(decide(&facts), Step::Nothing);
    }

    #[test]
    fn a_drain_times_out_once_blocked_for_the_whole_timeout() {
        let since: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("a timestamp");
        let timeout = Duration::from_secs(600);
        let at = |secs: i64| since + jiff::SignedDuration::from_secs(secs);
        assert_eq!(drain_deadline(Some(since), at(0), timeout), DrainDeadline::In(timeout));
        assert_eq!(
            drain_deadline(Some(since), at(599), timeout),
            DrainDeadline::In(Duration::from_secs(1))
        );
        assert_eq!(drain_deadline(Some(since), at(600), timeout), DrainDeadline::Over);
        assert_eq!(drain_deadline(Some(since), at(3600), timeout), DrainDeadline::Over);
        assert_eq!(drain_deadline(None, at(3600), timeout), DrainDeadline::Unknown);
    }

    /// A drain clock that saw the node in `Cordoning` at `since`, of a leader whose term
    /// began no later than that, at `now`.
    fn clock(since: Option<jiff::Timestamp>, now: jiff::Timestamp) -> DrainClock {
        DrainClock { cordoning_since: since, term_started: None, now }
    }

    #[test]
    fn a_blocked_drain_retries_until_its_timeout_then_fails_the_node() {
        let since: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("a timestamp");
        let timeout = Duration::from_secs(600);
        let at = |secs: i64| since + jiff::SignedDuration::from_secs(secs);
        let backoff = Duration::from_secs(30);
        let pdb = "pod default/web: budget web";
        assert_eq!(
            blocked("w1", pdb, clock(Some(since), at(10)), timeout, backoff),
            Blocked::Retry {
                reason: "draining w1: pod default/web: budget web; retrying".into(),
                delay: backoff
            }
        );
        // The retry never sleeps past the timeout.
        let Blocked::Retry { delay, .. } =
            blocked("w1", pdb, clock(Some(since), at(590)), timeout, backoff)
        else {
            panic!("a retry before the timeout")
        };
        assert_eq!(delay, Duration::from_secs(10));
        assert_eq!(
            blocked("w1", pdb, clock(Some(since), at(600)), timeout, backoff),
            Blocked::Fail("drain of w1 blocked for 10m: pod default/web: budget web".into())
        );
        // No readable start: never times out.
        let Blocked::Retry { delay, .. } =
            blocked("w1", pdb, clock(None, at(9999)), timeout, backoff)
        else {
            panic!("no timeout without a start")
        };
        assert_eq!(delay, backoff);
    }

    #[test]
    fn a_new_leader_with_a_clock_hours_behind_counts_the_drain_timeout_from_its_takeover() {
        // An earlier leader, three hours ahead of this one, saw the node in `Cordoning` at
        // 03:00 on its clock; this leader took over at 00:00 on its own.
        let takeover: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("a timestamp");
        let since = takeover + jiff::SignedDuration::from_hours(3);
        let timeout = Duration::from_secs(600);
        let after = |secs: i64| takeover + jiff::SignedDuration::from_secs(secs);
        let pdb = "pod default/web: budget web";
        let backoff = Duration::from_secs(30);
        let new_leader =
            |now| DrainClock { cordoning_since: Some(since), term_started: Some(takeover), now };
        let Blocked::Retry { delay, .. } =
            blocked("w1", pdb, new_leader(after(590)), timeout, backoff)
        else {
            panic!("a retry before the timeout")
        };
        assert_eq!(delay, Duration::from_secs(10));
        // Not three hours and ten minutes: the timeout from the takeover.
        assert!(matches!(
            blocked("w1", pdb, new_leader(after(600)), timeout, backoff),
            Blocked::Fail(_)
        ));
    }

    #[test]
    fn a_new_leader_with_a_clock_hours_ahead_counts_the_drain_timeout_from_its_takeover() {
        // An earlier leader saw the node in `Cordoning` at 00:00 on its clock; the new
        // leader's clock runs three hours ahead and it took over at 03:00 on it.
        let since: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("a timestamp");
        let takeover = since + jiff::SignedDuration::from_hours(3);
        let timeout = Duration::from_secs(600);
        let after = |secs: i64| takeover + jiff::SignedDuration::from_secs(secs);
        let pdb = "pod default/web: budget web";
        let backoff = Duration::from_secs(30);
        let new_leader =
            |now| DrainClock { cordoning_since: Some(since), term_started: Some(takeover), now };
        // Compared with the earlier leader's time the drain would be three hours over.
        assert!(matches!(
            blocked("w1", pdb, clock(Some(since), after(10)), timeout, backoff),
            Blocked::Fail(_)
        ));
        // Counted from the takeover it has the whole timeout.
        assert_eq!(
            blocked("w1", pdb, new_leader(after(10)), timeout, backoff),
            Blocked::Retry {
                reason: "draining w1: pod default/web: budget web; retrying".into(),
                delay: backoff
            }
        );
        let Blocked::Retry { delay, .. } =
            blocked("w1", pdb, new_leader(after(590)), timeout, backoff)
        else {
            panic!("a retry before the timeout")
        };
        assert_eq!(delay, Duration::from_secs(10));
        assert!(matches!(
            blocked("w1", pdb, new_leader(after(600)), timeout, backoff),
            Blocked::Fail(_)
        ));
        // A time this leader wrote after its takeover counts as it is.
        let later = DrainClock {
            cordoning_since: Some(after(100)),
            term_started: Some(takeover),
            now: after(650),
        };
        let Blocked::Retry { delay, .. } = blocked("w1", pdb, later, timeout, backoff) else {
            panic!("counted from its own time")
        };
        assert_eq!(delay, Duration::from_secs(30));
    }

    fn other(name: &str) -> OtherNode {
        OtherNode { name: name.into(), ready: true, ..OtherNode::default() }
    }

    fn if_possible(pods: Vec<PodFacts>, others: Vec<OtherNode>) -> Facts {
        Facts {
            unschedulable: true,
            cordoned_by_autopilot: true,
            pods,
            drain: DrainPolicy::IfPossible,
            others,
            ..node(SignalPhase::Cordoning)
        }
    }

    #[test]
    fn never_cordons_and_goes_on_without_evicting_with_a_note() {
        let facts = Facts {
            drain: DrainPolicy::Never,
            pods: vec![pod("a")],
            ..node(SignalPhase::Cordoning)
        };
        assert_eq!(decide(&facts), Step::Cordon);
        let cordoned = Facts { unschedulable: true, cordoned_by_autopilot: true, ..facts };
        let Step::Undrained(note) = decide(&cordoned) else { panic!("{:?}", decide(&cordoned)) };
        assert_eq!(note, "cordoned, not drained: the command's drain is Never");
        assert!(is_drain_note(&note));
    }

    #[test]
    fn if_possible_on_a_single_node_evicts_nothing_and_names_the_pods() {
        let facts = if_possible(vec![pod("a"), daemon_set("ds", true)], vec![]);
        let Step::Undrained(note) = decide(&facts) else { panic!("{:?}", decide(&facts)) };
        assert!(note.starts_with("cordoned, not drained of pod(s) default/a: no other"), "{note}");
        assert!(!note.contains("default/ds"), "DaemonSet pods never count: {note}");
    }

    #[test]
    fn if_possible_evicts_what_has_somewhere_to_go_and_keeps_the_rest() {
        let pinned = PodFacts {
            node_selector: BTreeMap::from([("disk".to_owned(), "ssd".to_owned())]),
            ..pod("pinned")
        };
        let facts = if_possible(vec![pod("free"), pinned.clone()], vec![other("n2")]);
        assert_eq!(decide(&facts), evict(&["free"]));
        let after = if_possible(vec![pinned.clone()], vec![other("n2")]);
        let Step::Undrained(note) = decide(&after) else { panic!("{:?}", decide(&after)) };
        assert!(note.contains("default/pinned"), "{note}");
        // A node with the label takes it.
        let ssd = OtherNode {
            labels: BTreeMap::from([("disk".to_owned(), "ssd".to_owned())]),
            ..other("n3")
        };
        let facts = if_possible(vec![pinned], vec![other("n2"), ssd]);
        assert_eq!(decide(&facts), evict(&["pinned"]));
    }

    #[test]
    fn if_possible_counts_only_ready_uncordoned_nodes_whose_taints_the_pod_tolerates() {
        let not_ready = OtherNode { ready: false, ..other("down") };
        let cordoned = OtherNode { unschedulable: true, ..other("cordoned") };
        let taint = |effect: &str| Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: effect.into(),
        };
        let tainted = OtherNode { taints: vec![taint("NoSchedule")], ..other("gpu") };
        let executing = OtherNode { taints: vec![taint("NoExecute")], ..other("gpu2") };
        let others = vec![not_ready, cordoned, tainted.clone(), executing];
        assert!(!has_somewhere_to_go(&pod("a"), &others));
        let tolerant = PodFacts {
            tolerations: vec![Toleration {
                key: "dedicated".into(),
                operator: "Equal".into(),
                value: "gpu".into(),
                effect: "NoSchedule".into(),
            }],
            ..pod("b")
        };
        assert!(has_somewhere_to_go(&tolerant, &others));
        let exists_any = PodFacts {
            tolerations: vec![Toleration { operator: "Exists".into(), ..Toleration::default() }],
            ..pod("c")
        };
        assert!(has_somewhere_to_go(
            &exists_any,
            &[OtherNode { taints: vec![taint("NoExecute")], ..other("x") }]
        ));
        let wrong_value = PodFacts {
            tolerations: vec![Toleration {
                key: "dedicated".into(),
                value: "cpu".into(),
                ..Toleration::default()
            }],
            ..pod("d")
        };
        assert!(!has_somewhere_to_go(&wrong_value, &[tainted]));
        // PreferNoSchedule does not keep a pod away.
        let soft = OtherNode { taints: vec![taint("PreferNoSchedule")], ..other("soft") };
        assert!(has_somewhere_to_go(&pod("e"), &[soft]));
    }

    #[test]
    fn if_possible_waits_for_terminating_pods_like_always() {
        let facts = if_possible(vec![terminating("a")], vec![]);
        assert_eq!(decide(&facts), Step::WaitForPods(vec![named("a")]));
    }

    #[test]
    fn always_still_evicts_a_pod_with_nowhere_to_go() {
        let facts = Facts { drain: DrainPolicy::Always, ..if_possible(vec![pod("a")], vec![]) };
        assert_eq!(decide(&facts), evict(&["a"]));
    }

    #[test]
    fn a_drain_note_is_carried_to_the_next_phases_but_never_over_a_reason_of_its_own() {
        let note = "cordoned, not drained: the command's drain is Never";
        assert_eq!(super::carried_reason(Some(note), None).as_deref(), Some(note));
        assert_eq!(
            super::carried_reason(Some(note), Some("rolled back to v1".into())).as_deref(),
            Some("rolled back to v1")
        );
        assert_eq!(super::carried_reason(Some("draining w1: pod x; retrying"), None), None);
        assert_eq!(super::carried_reason(None, None), None);
    }

    /// A cordoned node of the current run, drained `Always`, with `pods` on it.
    fn draining(pods: Vec<PodFacts>) -> Facts {
        Facts {
            unschedulable: true,
            cordoned_by_autopilot: true,
            pods,
            ..node(SignalPhase::Cordoning)
        }
    }

    #[test]
    fn every_pod_found_is_evicted_at_once_not_one_at_a_time() {
        let facts = draining(vec![pod("a"), pod("b"), pod("c")]);
        assert_eq!(decide(&facts), evict(&["a", "b", "c"]));
        let graced = Facts {
            options: DrainOptions { grace_period: Some(7), ..DrainOptions::default() },
            ..facts
        };
        let Step::Evict { pods, grace_period } = decide(&graced) else { panic!("an eviction") };
        assert_eq!((pods.len(), grace_period), (3, Some(7)));
    }

    #[test]
    fn a_replacement_that_returns_to_the_node_is_neither_evicted_nor_waited_for() {
        // The drain found web-1; its ReplicaSet's replacement (another UID, or a pod pinned
        // by nodeName under the same name) landed back on the cordoned node.
        let found = Some(BTreeSet::from(["uid-web-1".to_owned()]));
        let back = PodFacts { uid: "uid-web-1-again".into(), ..pod("web-1") };
        let facts = Facts { found: found.clone(), ..draining(vec![back.clone(), pod("web-2")]) };
        assert_eq!(decide(&facts), Step::Advance(SignalPhase::ApplyingUpdate));
        // While the pod found is still there (terminating), it alone is waited for.
        let going = Facts { found, ..draining(vec![terminating("web-1"), back]) };
        assert_eq!(decide(&going), Step::WaitForPods(vec![named("web-1")]));
        // Without a record, the drain begins now: every pod listed is found.
        assert_eq!(decide(&draining(vec![pod("web-2")])), evict(&["web-2"]));
    }

    #[test]
    fn bare_and_empty_dir_pods_hold_an_always_drain_naming_each_and_what_it_would_lose() {
        let bare = PodFacts { controller: Controller::None, ..pod("bare") };
        let cache = PodFacts { empty_dir: true, ..pod("cache") };
        let facts = draining(vec![pod("web"), bare.clone(), cache.clone()]);
        let Step::Held(reason) = decide(&facts) else { panic!("{:?}", decide(&facts)) };
        assert_eq!(
            reason,
            "pod(s) held: default/bare (no controller, so it would be gone for good \
             (drainOptions.force evicts it)), default/cache (emptyDir data that would be lost \
             (drainOptions.deleteEmptydirData evicts it))"
        );
        // Nothing is evicted while they hold it, not even the pod that could go.
        assert!(!reason.contains("default/web"), "{reason}");
        // The opt-ins let each go.
        let forced = DrainOptions { force: true, ..DrainOptions::default() };
        let facts =
            Facts { options: forced.clone(), ..draining(vec![bare.clone(), cache.clone()]) };
        let Step::Held(reason) = decide(&facts) else { panic!("{:?}", decide(&facts)) };
        assert!(reason.contains("default/cache") && !reason.contains("default/bare"), "{reason}");
        let both = DrainOptions { delete_emptydir_data: true, ..forced };
        let facts = Facts { options: both, ..draining(vec![bare, cache]) };
        assert_eq!(decide(&facts), evict(&["bare", "cache"]));
    }

    #[test]
    fn only_a_daemon_set_that_exists_exempts_its_pod() {
        let facts = draining(vec![daemon_set("ds", true)]);
        assert_eq!(decide(&facts), Step::Advance(SignalPhase::ApplyingUpdate));
        let orphan = draining(vec![daemon_set("ds", false)]);
        let Step::Held(reason) = decide(&orphan) else { panic!("{:?}", decide(&orphan)) };
        assert!(reason.contains("default/ds (its DaemonSet agent does not exist"), "{reason}");
        let forced =
            Facts { options: DrainOptions { force: true, ..DrainOptions::default() }, ..orphan };
        assert_eq!(decide(&forced), evict(&["ds"]));
    }

    #[test]
    fn a_finished_pod_loses_nothing_and_goes() {
        let done = PodFacts {
            controller: Controller::None,
            empty_dir: true,
            finished: true,
            ..pod("done")
        };
        assert_eq!(decide(&draining(vec![done])), evict(&["done"]));
    }

    #[test]
    fn if_possible_leaves_held_pods_on_the_node_and_goes_on_naming_them() {
        let bare = PodFacts { controller: Controller::None, ..pod("bare") };
        let pinned = PodFacts {
            node_selector: BTreeMap::from([("disk".to_owned(), "ssd".to_owned())]),
            ..pod("pinned")
        };
        let facts = if_possible(vec![bare.clone(), pinned.clone(), pod("free")], vec![other("n2")]);
        assert_eq!(decide(&facts), evict(&["free"]));
        let after = if_possible(vec![bare, pinned], vec![other("n2")]);
        let Step::Undrained(note) = decide(&after) else { panic!("{:?}", decide(&after)) };
        assert_eq!(
            note,
            "cordoned, not drained of pod(s) default/pinned: no other Ready, uncordoned node \
             tolerates their taints and matches their nodeSelector; nor of pod(s) held: \
             default/bare (no controller, so it would be gone for good (drainOptions.force \
             evicts it)) (drain: IfPossible)"
        );
        assert!(is_drain_note(&note));
    }

    #[test]
    fn a_pod_stuck_terminating_is_waited_for_until_skip_wait_for_delete_timeout() {
        // Deleted at 00:00; the clock reads 00:01:00.
        let now = "2026-01-01T00:01:00Z".parse().expect("a time");
        let facts = Facts { now, ..draining(vec![terminating("stuck")]) };
        assert_eq!(decide(&facts), Step::WaitForPods(vec![named("stuck")]));
        let skip = |seconds| Facts {
            options: DrainOptions {
                skip_wait_for_delete_timeout: Some(seconds),
                ..DrainOptions::default()
            },
            ..facts.clone()
        };
        assert_eq!(decide(&skip(60)), Step::WaitForPods(vec![named("stuck")]), "not past yet");
        assert_eq!(decide(&skip(59)), Step::Advance(SignalPhase::ApplyingUpdate));
    }

    #[test]
    fn a_wait_for_a_pod_stuck_terminating_times_out_naming_it() {
        let since: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("a timestamp");
        let waiting = waiting_text(&[named("stuck")]);
        assert_eq!(waiting, "waiting for pod(s) default/stuck to terminate");
        let at = |secs| clock(Some(since), since + jiff::SignedDuration::from_secs(secs));
        let second = Duration::from_secs(1);
        let timeout = Duration::from_secs(20);
        assert!(matches!(blocked("w1", &waiting, at(5), timeout, second), Blocked::Retry { .. }));
        assert_eq!(
            blocked("w1", &waiting, at(20), timeout, second),
            Blocked::Fail(
                "drain of w1 blocked for 20s: waiting for pod(s) default/stuck to terminate".into()
            )
        );
    }

    #[test]
    fn the_pod_selector_limits_the_drain_and_an_unreadable_one_fails_the_node() {
        let other = PodFacts { selected: false, ..pod("other") };
        assert_eq!(decide(&draining(vec![other.clone(), pod("web")])), evict(&["web"]));
        assert_eq!(decide(&draining(vec![other])), Step::Advance(SignalPhase::ApplyingUpdate));
        let unreadable = Facts {
            selector_problem: Some("found ')', expected a key".into()),
            ..draining(vec![pod("web")])
        };
        assert_eq!(
            decide(&unreadable),
            Step::Fail("not drained: drainOptions.podSelector: found ')', expected a key".into())
        );
    }

    #[test]
    fn reasons_naming_pods_stay_bounded_whatever_their_number_and_names() {
        let long = "x".repeat(253);
        let pods: Vec<PodFacts> = (0..50)
            .map(|i| PodFacts {
                controller: Controller::None,
                empty_dir: true,
                ..pod(&format!("{long}{i}"))
            })
            .collect();
        let Step::Held(reason) = decide(&draining(pods.clone())) else { panic!("held") };
        assert!(reason.len() <= REASON_MAX + 3, "{}", reason.len());
        let refs: Vec<PodRef> = pods.iter().map(PodRef::of).collect();
        assert!(waiting_text(&refs).len() <= REASON_MAX + 3);
        let few: Vec<PodRef> = (0..7).map(|i| named(&format!("p{i}"))).collect();
        assert_eq!(
            waiting_text(&few),
            "waiting for pod(s) default/p0, default/p1, default/p2, default/p3, default/p4 and 2 \
             more to terminate"
        );
        let huge = "refused: ".repeat(1000);
        let Blocked::Retry { reason, .. } = blocked(
            "w1",
            &huge,
            clock(None, jiff::Timestamp::UNIX_EPOCH),
            Duration::from_secs(60),
            Duration::from_secs(1),
        ) else {
            panic!("a retry")
        };
        assert!(reason.len() < REASON_MAX + 64, "{}", reason.len());
    }
}
