//! What a pass decides: the complete next status with its effects ([`Transition`]) and what
//! it could not decide without ([`Needs`]), and, inside the machine, the signals and requeue
//! it is collecting ([`Decision`]).

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::signal::SignalData;
use autopilot_api::v1beta2::{PlanCommandStatus, PlanStatus};
use k8s_openapi::api::core::v1::Pod;

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
    /// What this pass could not decide without: the caller looks it up and steps again
    /// ([`crate::plan::resolve()`] does both). Empty when the pass had everything it needed.
    pub needs: Needs,
}

/// What a pass could not decide without, for the caller to look up before it steps again
/// (see [`crate::plan::driver::resolve`]). Each list is sorted and names only what the pass's inputs lack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Controllers whose `/readyz` result the pass needed and did not have (it counted them
    /// not ready). Only a pass that may signal a controller names any.
    pub probe: Vec<String>,
    /// k0s versions whose removed APIs must be looked for before a new run can start (the
    /// pass waited for them, its status unchanged).
    pub removed_api_versions: Vec<String>,
    /// Nodes whose Pods the pass needed and did not have. The Plan machine decides without
    /// Pods (draining a node is the drain controller's, which lists the node's Pods itself),
    /// so [`crate::plan::step`] never names any; the preview's pass does, for its drain check.
    pub pods_on: Vec<String>,
    /// Lookups of health gates the pass needed and did not have (DESIGN §15).
    pub gates: Vec<crate::plan::model::lookups::GateQuery>,
    /// Identities whose right to read the Plan a new run needs the API server's answer
    /// about before it signals anyone (`crate::plan::rbac`); the pass waited, its status
    /// unchanged.
    pub plan_readers: Vec<crate::plan::model::lookups::PlanReader>,
}

impl Needs {
    /// Whether the pass needed nothing it did not have.
    pub fn is_empty(&self) -> bool {
        let Self { probe, removed_api_versions, pods_on, gates, plan_readers } = self;
        probe.is_empty()
            && removed_api_versions.is_empty()
            && pods_on.is_empty()
            && gates.is_empty()
            && plan_readers.is_empty()
    }
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
    /// Ask a node's agent to run the checks of the command's `check` gates (DESIGN §15):
    /// write the request annotation onto the target's object (a merge patch of that one
    /// annotation). Emitted when a gate run needs a first or a new attempt; the same request
    /// again is harmless (the agent runs each attempt once).
    GateCheck {
        /// Which object.
        target: SignalTarget,
        /// The request.
        request: autopilot_api::gate_check::GateCheckRequest,
    },
    /// Ask a node's agent to pre-stage the payload of a `prestage: true` update command:
    /// write the request annotation onto the target's object (a merge patch of that one
    /// annotation). Emitted when the target is first asked, and again while its object does
    /// not carry the request; the same request again is harmless (the agent answers each
    /// run and command once).
    Prestage {
        /// Which object.
        target: SignalTarget,
        /// The request.
        request: autopilot_api::prestage::PrestageRequest,
    },
    /// Create a `scheduler` check's Pod (an `AlreadyExists` answer is success: the Pod's name
    /// is stable per run, command, check and node). Emitted when the Pod is first due, and
    /// again while the snapshot does not show it and its result is not recorded.
    CreatePod(Box<Pod>),
    /// Delete a check Pod whose result is recorded, that belongs to no running check, or
    /// that is not the Pod the leader created (a `NotFound` answer is success).
    DeletePod {
        /// The Pod's name in [`keys::NAMESPACE`].
        name: String,
        /// The UID of the Pod the snapshot showed, a precondition of the delete: a Pod made
        /// again under the name since is not deleted (a `Conflict` answer is success: the
        /// Pod seen is gone, and the next pass looks at the new one).
        uid: Option<String>,
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

/// The signals and the requeue a pass decided on (events are derived at the end).
#[derive(Debug)]
pub(in crate::plan) struct Decision {
    /// Signals to write and check Pods to create, in order.
    pub(in crate::plan) signals: Vec<Effect>,
    /// When to look again without a change.
    pub(in crate::plan) requeue: Requeue,
    /// Each command's hold, by command id, when it is not a not-ready worker (the default):
    /// a not-ready controller, a pause, a soak, a stop.
    pub(in crate::plan) holds: BTreeMap<u32, Hold>,
}

/// What holds a command, for its Event: the Event reason and, for a hold whose text counts
/// or lists nodes as they move, the steady part the text starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::plan) struct Hold {
    /// The Event reason (`phases::reasons`).
    pub(in crate::plan) reason: &'static str,
    /// `Some(steady)`: the command's reason is `<steady>; <detail>`, where the detail
    /// changes as nodes report (counts, node lists). The Event is published when the hold
    /// starts or its steady part changes, not for every report. `None`: whenever the
    /// reason changes.
    pub(in crate::plan) steady: Option<String>,
}

impl Decision {
    /// Nothing decided yet.
    pub(in crate::plan) fn new() -> Self {
        Self { signals: Vec::new(), requeue: Requeue::OnChange, holds: BTreeMap::new() }
    }

    /// Record what kind of hold command `id`'s `reason` describes (for its Event).
    pub(in crate::plan) fn hold(&mut self, id: u32, reason: &'static str) {
        self.holds.insert(id, Hold { reason, steady: None });
    }

    /// Hold command `status` with the reason `<steady>; <detail>`, recording its kind: the
    /// detail counts or lists nodes and changes as they report, so the hold's Event is
    /// published only when `steady` changes (an Event per report would be an Event per
    /// node at scale).
    pub(in crate::plan) fn hold_steady(
        &mut self,
        status: &mut PlanCommandStatus,
        reason: &'static str,
        steady: String,
        detail: &str,
    ) {
        status.reason = Some(format!("{steady}; {detail}"));
        self.holds.insert(status.id, Hold { reason, steady: Some(steady) });
    }

    /// Look again after `delay` at the latest.
    pub(in crate::plan) fn requeue_after(&mut self, delay: Duration) {
        self.requeue = match self.requeue {
            Requeue::OnChange => Requeue::After(delay),
            Requeue::After(current) => Requeue::After(current.min(delay)),
        };
    }
}

/// The steady part of a paused command's reason.
pub(in crate::plan) fn paused_steady() -> String {
    format!("paused ({} annotation)", autopilot_api::keys::ANNOTATION_PAUSED)
}
