//! The Plan engine's pure decision core: no kube client, no clock, no randomness, no I/O.
//!
//! The shell (`crate::reconcile`) observes the cluster into an [`Observed`] snapshot, calls
//! [`step`], then executes the returned [`Transition`]: it writes the complete next status
//! first (optimistic concurrency on the Plan) and then performs the [`Effect`]s (signals with
//! optimistic concurrency on the node object, Events). Writing the status first makes the
//! status the record of intent: a target is `SignalSent` before its node is written, so a
//! stale snapshot can never push more nodes in flight than allowed, and a crash between the
//! two writes is repaired by the next pass, which re-sends the identical signal to a
//! `SignalSent` target whose object does not carry it.
//!
//! - [`phases`]: the declared phase tables (phases, initial, terminal, allowed transitions)
//!   that tests and docs read.
//! - [`selector`]: label and field selectors, parsed strictly.
//! - [`removed_apis`]: the removed-API table and the pre-check decision.
//! - `payload` (private): which platform entries no node could verify, refused or warned
//!   about at NewPlan (`Policy::allow_unverified_payloads`).
//! - [`rollout`]: a dry run of [`step`] over a spec on a snapshot (`k0s autopilot preview`).
//! - [`step`] and [`removed_api_check_versions`]: the machine, and the question the shell
//!   asks before a pass (which versions' removed APIs to look for). Which controllers to
//!   probe, the pass itself says ([`Transition::unprobed`]).

pub mod phases;
pub mod removed_apis;
pub mod rollout;
pub mod selector;

mod checks;
mod command;
mod discovery;
mod machine;
mod payload;
mod schedule;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::SignalData;
use autopilot_api::v1beta2::{PlanSpec, PlanStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};

pub use machine::{REMOVED_API_RECHECK, removed_api_check_versions, step};
pub use removed_apis::RemovedApiUse;

/// The Plan being decided on, as the shell read it.
#[derive(Clone, Copy, Debug)]
pub struct PlanView<'a> {
    /// `metadata.name`; only `autopilot` runs.
    pub name: &'a str,
    /// `metadata.uid`; part of the run id.
    pub uid: &'a str,
    /// `metadata.generation`; a new generation after a run ended starts a new run.
    pub generation: i64,
    /// The live spec (only read when a run starts; the run then uses its frozen copy).
    pub spec: &'a PlanSpec,
    /// The current status (`None` before the first pass).
    pub status: Option<&'a PlanStatus>,
    /// What the operator asked for through the Plan's annotations ([`Steering::of`]).
    pub steering: Steering,
    /// The value of the Plan's [`keys::ANNOTATION_ACCEPT_WARNINGS`] annotation: the plan id
    /// whose preflight warnings an operator accepted (`onWarn: Block`).
    pub accepted_warnings: Option<&'a str>,
}

/// An operator's steering of a running plan, kept in the Plan's annotations so it survives
/// leader changes (`k0s autopilot pause|resume|abort`, or `kubectl annotate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Steering {
    /// [`keys::ANNOTATION_PAUSED`]: signal no new node; nodes in flight finish.
    pub paused: bool,
    /// [`keys::ANNOTATION_ABORT`]: signal no new node, let the nodes in flight finish, then
    /// end the run `Aborted`. While it is set, a changed spec does not start a new run.
    pub aborted: bool,
}

impl Steering {
    /// Read from a Plan's annotations: an annotation counts when present with any value but
    /// `false` (so `kubectl annotate … paused=true` and `…=yes` both pause).
    pub fn of(annotations: &BTreeMap<String, String>) -> Self {
        let set = |key: &str| {
            annotations.get(key).is_some_and(|value| !value.trim().eq_ignore_ascii_case("false"))
        };
        Self { paused: set(keys::ANNOTATION_PAUSED), aborted: set(keys::ANNOTATION_ABORT) }
    }
}

/// One `Node` or `ControlNode` as the planner sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetObject {
    /// Object name.
    pub name: String,
    /// Object labels (platform: `kubernetes.io/os` + `kubernetes.io/arch`; selectors).
    pub labels: BTreeMap<String, String>,
    /// For a `Node`: its `Ready` condition is `True`. For a `ControlNode`: always `true`
    /// (controller readiness comes from the `/readyz` probe, see [`Observed::readiness`]).
    pub ready: bool,
    /// The signal annotations found on the object.
    pub signal: ObservedSignal,
}

/// The signal annotations of an object, decoded.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant, reason = "one per object in a snapshot; boxing buys nothing")]
pub enum ObservedSignal {
    /// Neither signal annotation is present.
    None,
    /// The annotations are present but do not decode or validate (the text says why).
    Invalid(String),
    /// A valid signal (possibly from another plan or run: the machine checks).
    Valid(SignalData),
}

/// The result of probing one plan controller's API server (`GET /readyz`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// `/readyz` answered 2xx.
    Ready,
    /// The probe failed (connection refused, timeout, non-2xx); the text says how.
    NotReady(String),
}

/// What the planner may look at, captured once per pass. A snapshot: it may already be
/// stale, which the machine tolerates (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// The current time (the only clock the machine sees).
    pub now: jiff::Timestamp,
    /// Every `ControlNode`, by name.
    pub control_nodes: &'a BTreeMap<String, TargetObject>,
    /// Every `Node`, by name.
    pub nodes: &'a BTreeMap<String, TargetObject>,
    /// `/readyz` results of the controllers probed for this pass; a controller missing here
    /// counts as not ready and is named in [`Transition::unprobed`].
    pub readiness: &'a BTreeMap<String, Readiness>,
    /// Uses of removed APIs found by the shell for the versions named by
    /// [`removed_api_check_versions`] (`None` when that list was empty). A run that needs the
    /// check and finds `None` here waits (status unchanged) instead of skipping it.
    pub removed_apis: Option<&'a [RemovedApiUse]>,
    /// The Pods of `scheduler` checks and their templates ([`CheckPods::NONE`] when the
    /// caller runs no such checks).
    pub check_pods: CheckPods<'a>,
}

/// What the shell found for `scheduler` checks (`crate::preflight::scheduler`), in the
/// namespace [`keys::NAMESPACE`].
#[derive(Clone, Copy, Debug)]
pub struct CheckPods<'a> {
    /// Every Pod labelled [`crate::preflight::scheduler::LABEL_RUN`], by name.
    pub pods: &'a BTreeMap<String, Pod>,
    /// Every ConfigMap (the Pod templates), by name.
    pub templates: &'a BTreeMap<String, ConfigMap>,
}

static NO_PODS: BTreeMap<String, Pod> = BTreeMap::new();
static NO_TEMPLATES: BTreeMap<String, ConfigMap> = BTreeMap::new();

impl CheckPods<'static> {
    /// No Pods and no templates: a `scheduler` check then finds no template (status code
    /// 22) and no Pod is deleted.
    pub const NONE: Self = Self { pods: &NO_PODS, templates: &NO_TEMPLATES };
}

/// Controller policy: flags of this controller, not part of the Plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// `--exclude-from-plans controller`: plans that target controllers end `Restricted`.
    pub exclude_controllers: bool,
    /// `--exclude-from-plans worker`: plans that target workers end `Restricted`.
    pub exclude_workers: bool,
    /// `--readiness-grace`: how long a plan controller may stay not ready before the command
    /// ends in `InconsistentTargets`.
    pub readiness_grace: Duration,
    /// How soon to probe again while a command is held by a not-ready controller.
    pub readiness_recheck: Duration,
    /// `--node-progress-timeout`: how long a signalled node (controller or worker) may show
    /// no progress (its signal phase unchanged) before it fails with
    /// `no progress in <phase> for <duration>`. A command's `progressTimeout` overrides it.
    pub node_progress_timeout: Duration,
    /// `--drain-timeout`: how long the leader's drain of a node may stay blocked before the
    /// node fails (read by the cordon/drain controllers, not by the machine).
    pub drain_timeout: Duration,
    /// `--allow-unverified-payloads`: accept platform entries with neither a `sha256` nor
    /// an `https://` URL (each still gets a Warning Event). Without it, NewPlan refuses
    /// such a plan (`Warning`) before any node is signalled.
    pub allow_unverified_payloads: bool,
}

/// The decision of one pass.
#[must_use]
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// The complete next status (not a delta). Equal to the input status when nothing
    /// changed; the shell then writes nothing.
    pub status: PlanStatus,
    /// Side effects to perform after the status is written, in order. Each is idempotent.
    pub effects: Vec<Effect>,
    /// When the shell should run the next pass without a triggering change.
    pub requeue: Requeue,
    /// The controllers whose readiness this pass needed and `observed.readiness` did not
    /// have (it counted them not ready), sorted. When not empty, the shell probes them and
    /// calls [`step`] again with the results; only a pass that may signal a controller asks.
    pub unprobed: Vec<String>,
}

/// A side effect the shell performs. Every effect is idempotent.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant, reason = "a handful per pass; signals are the common case")]
pub enum Effect {
    /// Write the signal annotations onto the target's object (optimistic concurrency:
    /// a conflict means re-observe and re-decide). Emitted for each newly `SignalSent`
    /// target and for each `SignalSent` target whose object does not carry this run's
    /// signal; the data is identical each time for a given target and has no node status.
    /// Also emitted once when a node misses its progress deadline: then the data is the
    /// node's own signal with the status `Failed` and the deadline as its reason, so the
    /// node stops and an autopilot cordon is undone as for any failed node.
    Signal {
        /// Which object.
        target: SignalTarget,
        /// The complete signal (no node status).
        data: SignalData,
    },
    /// Create a `scheduler` check's Pod (an `AlreadyExists` answer is success: the Pod's name
    /// is stable per run, command, check and node). Emitted when the Pod is first due, and
    /// again while the snapshot does not show it and its result is not recorded.
    CreatePod(Box<Pod>),
    /// Delete a check Pod whose result is recorded, or that belongs to no running check (a
    /// `NotFound` answer is success).
    DeletePod {
        /// The Pod's name in [`keys::NAMESPACE`].
        name: String,
    },
    /// Emit a Kubernetes Event on the Plan.
    Event {
        /// `Normal` or `Warning`.
        kind: EventKind,
        /// PascalCase reason (a constant from [`phases::reasons`]).
        reason: &'static str,
        /// Human-readable note, naming the node/command and the cause.
        note: String,
    },
}

/// The object a signal is written to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SignalTarget {
    /// `ControlNode` or `Node`.
    pub kind: ObjectKind,
    /// Object name.
    pub name: String,
}

/// Kinds of signal objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjectKind {
    /// A `ControlNode` (controllers and controller+workers, k0supdate).
    ControlNode,
    /// A core `Node` (pure workers for k0supdate; every airgap target).
    Node,
}

/// Kubernetes Event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Progress.
    Normal,
    /// A failure or a hold an operator should look at.
    Warning,
}

/// When the next pass should run if nothing changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Only when a watched object changes (the normal case: event-driven).
    OnChange,
    /// After this long (time itself matters: readiness re-probe, grace expiry).
    After(Duration),
}
