//! The declared phase tables of the Plan engine: every plan/command phase and every target
//! phase, which are initial and terminal, and which phase may follow which.
//!
//! A transition here is what one pass of [`crate::plan::step`] may do to a stored state: `from` is
//! the state in the status the pass read, `to` the state in the status it returns. One pass
//! may do several things (NewPlan, then signal the first node), so `NewPlan → Schedulable`
//! is a single transition. Staying in the same phase is always allowed. The property tests
//! check every pass against these tables and the table tests exercise every entry, so the
//! tables are also the documentation: [`markdown`] renders them for the docs.

use autopilot_api::v1beta2::{PlanStateType, TargetState};

/// One plan or command phase (plans and commands share the vocabulary and the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseInfo {
    /// The phase.
    pub state: PlanStateType,
    /// Whether nothing ever moves a plan or command out of this phase within a run.
    pub terminal: bool,
    /// The phases one pass may move to from here (not counting staying).
    pub next: &'static [PlanStateType],
    /// What the phase means, in one line.
    pub description: &'static str,
}

/// The phase every plan and command starts a run in.
pub const INITIAL_PLAN_PHASE: PlanStateType = PlanStateType::NewPlan;

use PlanStateType as P;

/// Every plan/command phase, in [`PlanStateType::ALL`] order.
pub const PLAN_PHASES: [PhaseInfo; 14] = [
    PhaseInfo {
        state: P::NewPlan,
        terminal: false,
        next: &[
            P::SchedulableWait,
            P::Schedulable,
            P::Completed,
            P::IncompleteTargets,
            P::MissingPlatform,
            P::Restricted,
            P::ApplyFailed,
            P::Warning,
        ],
        description: "not processed yet: NewPlan resolves targets and runs the pre-checks, \
                      then scheduling goes on in the same pass",
    },
    PhaseInfo {
        state: P::SchedulableWait,
        terminal: false,
        next: &[
            P::Schedulable,
            P::Completed,
            P::IncompleteTargets,
            P::MissingPlatform,
            P::ApplyFailed,
            P::Aborted,
            P::PreflightFailed,
            P::RolledBack,
        ],
        description: "running: nodes are being signalled or are working on their signal; \
                      also while paused, soaking canaries, waiting for preflight reports or accepted \
                      warnings, or stopping after a failure or \
                      an abort until the nodes in flight finished (the reason says which)",
    },
    PhaseInfo {
        state: P::Schedulable,
        terminal: false,
        next: &[
            P::SchedulableWait,
            P::IncompleteTargets,
            P::MissingPlatform,
            P::ApplyFailed,
            P::Aborted,
            P::RolledBack,
        ],
        description: "held: a node may be signalled as soon as it is ready (the command's \
                      reason names it); a controller not ready past the readiness grace \
                      holds it too, with the Stalled condition True",
    },
    PhaseInfo {
        state: P::Completed,
        terminal: true,
        next: &[],
        description: "every target of every command completed",
    },
    PhaseInfo {
        state: P::IncompleteTargets,
        terminal: true,
        next: &[],
        description: "a static target has no object at NewPlan, or a selector does not \
                      parse, or a target's Node or ControlNode disappeared after NewPlan",
    },
    PhaseInfo {
        state: P::MissingSignalNode,
        terminal: true,
        next: &[],
        description: "no longer written (k0s folded it into IncompleteTargets): read in \
                      statuses older versions wrote",
    },
    PhaseInfo {
        state: P::MissingPlatform,
        terminal: true,
        next: &[],
        description: "a target's <os>-<arch> is unknown or has no entry in platforms",
    },
    PhaseInfo {
        state: P::InconsistentTargets,
        terminal: true,
        next: &[],
        description: "no longer written (k0s has no such state; a controller not ready past \
                      the readiness grace holds the plan Stalled): read in statuses older \
                      versions wrote",
    },
    PhaseInfo {
        state: P::Restricted,
        terminal: true,
        next: &[],
        description: "the plan targets a node kind excluded by --exclude-from-plans",
    },
    PhaseInfo {
        state: P::ApplyFailed,
        terminal: true,
        next: &[],
        description: "a node reported a failed download, verification or apply, or showed no \
                      progress for its progress deadline (past limits.maxFailures for \
                      workers; any controller or canary); set once the nodes in flight \
                      finished, or a canary went NotReady during its soak",
    },
    PhaseInfo {
        state: P::Warning,
        terminal: true,
        next: &[],
        description: "NewPlan refused the plan: its `spec.id` is empty (every signal carries it), \
                      the removed-API pre-check failed, a payload \
                      has neither a sha256 nor an https URL, the command is malformed (a \
                      preflight check that does not compile included), or a field no node or \
                      scheduler could act on (the description names it), or the workers it \
                      would signal may not read the Plan (`manifests/rbac/worker.yaml` not \
                      applied)",
    },
    PhaseInfo {
        state: P::Aborted,
        terminal: true,
        next: &[],
        description: "an operator aborted the plan: no node was signalled after the abort, \
                      the nodes in flight finished, and no autopilot cordon is left",
    },
    PhaseInfo {
        state: P::PreflightFailed,
        terminal: true,
        next: &[],
        description: "a preflight command's checks ended in error; no later command touched \
                      a node; the failing checks, nodes and messages are in the command's preflight \
                      status and Events",
    },
    PhaseInfo {
        state: P::RolledBack,
        terminal: true,
        next: &[],
        description: "the run was rolled back (a gate with onFailure: Rollback failed, or an \
                      operator asked): every node the run changed was signalled to put back \
                      what it ran before; each node's outcome is in the command's rollback \
                      list, and no autopilot cordon is left",
    },
];

/// The table entry of a plan/command phase.
pub fn plan_phase(state: PlanStateType) -> &'static PhaseInfo {
    let index = match state {
        P::NewPlan => 0,
        P::SchedulableWait => 1,
        P::Schedulable => 2,
        P::Completed => 3,
        P::IncompleteTargets => 4,
        P::MissingSignalNode => 5,
        P::MissingPlatform => 6,
        P::InconsistentTargets => 7,
        P::Restricted => 8,
        P::ApplyFailed => 9,
        P::Warning => 10,
        P::Aborted => 11,
        P::PreflightFailed => 12,
        P::RolledBack => 13,
    };
    &PLAN_PHASES[index]
}

/// The terminal states an operator's rollback (DESIGN §15) moves on to `SchedulableWait`
/// (or straight to `RolledBack` when none of the changed nodes can be signalled any more):
/// the run ended after it changed nodes, and putting them back is a continuation of the same
/// run. Nothing else moves a terminal state.
pub const REOPENED_BY_ROLLBACK: [PlanStateType; 3] =
    [PlanStateType::Completed, PlanStateType::ApplyFailed, PlanStateType::Aborted];

/// Whether one pass may move a plan or command from `from` to `to`.
pub fn plan_transition_allowed(from: PlanStateType, to: PlanStateType) -> bool {
    from == to
        || plan_phase(from).next.contains(&to)
        || (REOPENED_BY_ROLLBACK.contains(&from)
            && matches!(to, PlanStateType::SchedulableWait | PlanStateType::RolledBack))
}

/// Every `(from, to)` plan/command transition of the table (the rollback's reopening
/// included), staying excluded.
pub fn plan_transitions() -> impl Iterator<Item = (PlanStateType, PlanStateType)> {
    let table =
        PLAN_PHASES.iter().flat_map(|info| info.next.iter().map(move |to| (info.state, *to)));
    table.chain(REOPENED_BY_ROLLBACK.iter().flat_map(|from| {
        [(*from, PlanStateType::SchedulableWait), (*from, PlanStateType::RolledBack)]
    }))
}

/// One target (node) phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetPhaseInfo {
    /// The phase.
    pub state: TargetState,
    /// Whether a target in this phase ever moves again within the run.
    pub terminal: bool,
    /// Whether NewPlan may create a target in this phase.
    pub initial: bool,
    /// The phases one pass may move to from here (not counting staying).
    pub next: &'static [TargetState],
    /// What the phase means, in one line.
    pub description: &'static str,
}

use TargetState as T;

/// Every target phase, in [`TargetState::ALL`] order.
pub const TARGET_PHASES: [TargetPhaseInfo; 6] = [
    TargetPhaseInfo {
        state: T::SignalPending,
        terminal: false,
        initial: true,
        next: &[T::SignalSent, T::SignalApplyFailed, T::MissingPlatform, T::MissingSignalNode],
        description: "discovered and valid; not signalled yet",
    },
    TargetPhaseInfo {
        state: T::SignalSent,
        terminal: false,
        initial: false,
        next: &[T::SignalCompleted, T::SignalApplyFailed, T::MissingPlatform, T::MissingSignalNode],
        description: "signalled (or about to be: the pass that decides it signals it); the node works",
    },
    TargetPhaseInfo {
        state: T::SignalCompleted,
        terminal: true,
        initial: false,
        next: &[],
        description: "the node reported Completed for this run and command",
    },
    TargetPhaseInfo {
        state: T::SignalApplyFailed,
        terminal: true,
        initial: false,
        next: &[],
        description: "the node reported FailedDownload or Failed (reason kept), or its signal \
                      phase did not change for the progress deadline",
    },
    TargetPhaseInfo {
        state: T::MissingPlatform,
        terminal: true,
        initial: true,
        next: &[],
        description: "the node's <os>-<arch> is unknown or has no entry in platforms",
    },
    TargetPhaseInfo {
        state: T::MissingSignalNode,
        terminal: true,
        initial: true,
        next: &[],
        description: "the node's Node or ControlNode object does not exist",
    },
];

/// The table entry of a target phase.
pub fn target_phase(state: TargetState) -> &'static TargetPhaseInfo {
    let index = match state {
        T::SignalPending => 0,
        T::SignalSent => 1,
        T::SignalCompleted => 2,
        T::SignalApplyFailed => 3,
        T::MissingPlatform => 4,
        T::MissingSignalNode => 5,
    };
    &TARGET_PHASES[index]
}

/// Whether one pass may move a target from `from` to `to`.
pub fn target_transition_allowed(from: TargetState, to: TargetState) -> bool {
    from == to
        || target_phase(from).next.contains(&to)
        || (from, to) == REOPENED_BY_POST_UPDATE_ROLLBACK
}

/// A node that completed and then put its previous binary back (the post-update watch,
/// DESIGN §15) answers `Failed` on the signal it completed: while its command still runs the
/// leader takes that back as a failure. The one move out of a terminal target phase.
pub const REOPENED_BY_POST_UPDATE_ROLLBACK: (TargetState, TargetState) =
    (TargetState::SignalCompleted, TargetState::SignalApplyFailed);

/// Whether a target first recorded in one pass may be in `state` at the end of that pass:
/// NewPlan creates it in an initial phase and the same pass may move it on once.
pub fn new_target_allowed(state: TargetState) -> bool {
    TARGET_PHASES
        .iter()
        .filter(|info| info.initial)
        .any(|info| target_transition_allowed(info.state, state))
}

/// Every `(from, to)` target transition of the table, staying excluded.
pub fn target_transitions() -> impl Iterator<Item = (TargetState, TargetState)> {
    TARGET_PHASES
        .iter()
        .flat_map(|info| info.next.iter().map(move |to| (info.state, *to)))
        .chain(std::iter::once(REOPENED_BY_POST_UPDATE_ROLLBACK))
}

/// Both tables as Markdown (plan/command phases, then target phases), for the docs.
pub fn markdown() -> String {
    fn list<T: std::fmt::Display>(items: &[T]) -> String {
        if items.is_empty() {
            "—".to_owned()
        } else {
            items.iter().map(|item| format!("`{item}`")).collect::<Vec<_>>().join(", ")
        }
    }
    let yes_no = |flag: bool| if flag { "yes" } else { "no" };
    let mut out = String::from(
        "| Plan/command phase | Terminal | Next (one pass) | Meaning |\n|---|---|---|---|\n",
    );
    for info in PLAN_PHASES {
        let wire = match info.state {
            P::NewPlan => " (`\"\"` on the wire)",
            P::SchedulableWait
            | P::Schedulable
            | P::Completed
            | P::IncompleteTargets
            | P::MissingSignalNode
            | P::MissingPlatform
            | P::InconsistentTargets
            | P::Restricted
            | P::ApplyFailed
            | P::Warning
            | P::Aborted
            | P::PreflightFailed
            | P::RolledBack => "",
        };
        out.push_str(&format!(
            "| `{}`{wire} | {} | {} | {} |\n",
            info.state,
            yes_no(info.terminal),
            list(info.next),
            info.description
        ));
    }
    out.push_str(&format!(
        "\nAn operator's rollback (`k0s autopilot rollback`, DESIGN §15) moves {} on to \
         `SchedulableWait`: the same run then puts back the nodes it changed and ends \
         `RolledBack` (at once when none of them can be signalled any more). Nothing else \
         moves a terminal state.\n",
        list(&REOPENED_BY_ROLLBACK)
    ));
    out.push_str(
        "\n| Target phase | Terminal | Initial | Next (one pass) | Meaning |\n\
         |---|---|---|---|---|\n",
    );
    for info in TARGET_PHASES {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            info.state,
            yes_no(info.terminal),
            yes_no(info.initial),
            list(info.next),
            info.description
        ));
    }
    let (from, to) = REOPENED_BY_POST_UPDATE_ROLLBACK;
    out.push_str(&format!(
        "\nA node that completed and then put its previous binary back (the post-update watch, \
         DESIGN §15) answers `Failed` on the signal it completed: while its command still runs, \
         the leader moves the target from `{from}` to `{to}` and the failure policy counts it.\n"
    ));
    out
}

/// Event reasons (PascalCase, as Kubernetes Events spell them).
pub mod reasons {
    /// A new run of the plan started (first pass, or a new generation after a run ended).
    pub const PLAN_STARTED: &str = "PlanStarted";
    /// The plan-level state changed.
    pub const PLAN_STATE_CHANGED: &str = "PlanStateChanged";
    /// A command's state changed.
    pub const COMMAND_STATE_CHANGED: &str = "CommandStateChanged";
    /// Nodes were signalled (their targets became `SignalSent`): one Event per pass and
    /// command group, naming the nodes (at most 20 of them, the others counted). Each
    /// node's own change is in the status and the leader's log.
    pub const NODES_SIGNALLED: &str = "NodesSignalled";
    /// Nodes reported `Completed`: one Event per pass and command group, naming the nodes
    /// like [`NODES_SIGNALLED`].
    pub const NODES_COMPLETED: &str = "NodesCompleted";
    /// A node reported `FailedDownload` or `Failed`, or showed no progress for its progress
    /// deadline: one Warning per node, with its reason.
    pub const NODE_FAILED: &str = "NodeFailed";
    /// A target's object does not exist (at NewPlan or later).
    pub const NODE_MISSING: &str = "NodeMissing";
    /// A target's platform has no entry in the command's `platforms`.
    pub const NODE_MISSING_PLATFORM: &str = "NodeMissingPlatform";
    /// A command is held because a plan controller's `/readyz` fails.
    pub const CONTROLLER_NOT_READY: &str = "ControllerNotReady";
    /// A running plan stopped moving (its `Stalled` condition turned True): a plan
    /// controller stayed not ready past the readiness grace (the plan goes on once it is
    /// ready), or preflight warnings hold it under `onWarn: Block` (until accepted).
    pub const PLAN_STALLED: &str = "PlanStalled";
    /// A command is held because the next worker's Node is not Ready.
    pub const WORKER_NOT_READY: &str = "WorkerNotReady";
    /// The Plan is not executed (its name is not `autopilot`).
    pub const PLAN_IGNORED: &str = "PlanIgnored";
    /// The spec of a running plan changed; the change waits for the run to end.
    pub const SPEC_CHANGE_IGNORED: &str = "SpecChangeIgnored";
    /// A platform entry without a `sha256` is downloaded without an integrity check
    /// (`https://`, or plain `http://` under `--allow-unverified-payloads`); once per run.
    pub const UNVERIFIED_PAYLOAD: &str = "UnverifiedPayload";
    /// An operator paused the plan (the paused annotation); also the hold of its commands.
    pub const PLAN_PAUSED: &str = "PlanPaused";
    /// The paused annotation is gone: the plan goes on.
    pub const PLAN_RESUMED: &str = "PlanResumed";
    /// A command stopped signalling new nodes (a failure past its budget, or an abort) and
    /// waits for the nodes in flight before it ends.
    pub const PLAN_STOPPING: &str = "PlanStopping";
    /// A command waits for nodes still working on a signal of an earlier run.
    pub const EARLIER_RUN_IN_FLIGHT: &str = "EarlierRunInFlight";
    /// The canary workers completed; the others wait for the soak to pass.
    pub const CANARY_SOAKING: &str = "CanarySoaking";
    /// A command updating its workers in failure-domain waves (`limits.groupBy`) started a
    /// group; the later groups wait for it.
    pub const GROUP_UPDATING: &str = "GroupUpdating";
    /// A failure-domain group completed; the next one waits for `betweenGroups.soak` to pass.
    pub const GROUP_SOAKING: &str = "GroupSoaking";
    /// A preflight command waits for its nodes' reports.
    pub const PREFLIGHT_RUNNING: &str = "PreflightRunning";
    /// A preflight command ended in warnings and `onWarn: Block` holds the plan until an
    /// operator accepts them.
    pub const PREFLIGHT_WARNINGS: &str = "PreflightWarnings";

    /// A rolled-back run puts its nodes back (DESIGN §15); the command's reason says how
    /// far it got.
    pub const ROLLING_BACK: &str = "RollingBack";

    /// A run started although a command breaks the version skew rules: the Plan's
    /// `allow-skew` annotation names its id (`crate::skew`).
    pub const VERSION_SKEW_ALLOWED: &str = "VersionSkewAllowed";
    /// A run started that leaves a worker outside the version skew rules by the version
    /// that worker reports about itself, and the worker is no target (a target fails
    /// instead): a node's self-report holds no run (`crate::skew`).
    pub const VERSION_SKEW_LEFT_BEHIND: &str = "VersionSkewLeftBehind";

    /// A command holds the nodes it would signal next until their window opens
    /// (`spec.window`, `spec.downloadWindow` or a named window; `crate::window`).
    pub const WAITING_FOR_WINDOW: &str = "WaitingForWindow";
    /// A run started with nodes whose window label names no window of `spec.windows`; they
    /// go inside `spec.window`.
    pub const UNKNOWN_WINDOW: &str = "UnknownWindow";

    /// A command with `prestage` waits for its targets to stage the payload before it
    /// signals any node.
    pub const PRESTAGING: &str = "Prestaging";

    /// A Pod with the name of a check Pod is not the Pod the leader created (its UID is not
    /// the one the leader's create request was answered with): its result is not taken, it
    /// is deleted, and the leader creates its own again.
    pub const CHECK_POD_REFUSED: &str = "CheckPodRefused";

    /// A new run could not check whether its workers may read the Plan (the review of
    /// `crate::plan::rbac` could not be made); the run goes on. Once per run.
    pub const PLAN_ACCESS_UNCHECKED: &str = "PlanAccessUnchecked";

    /// Every reason, for tests and docs.
    pub const ALL: [&str; 31] = [
        PLAN_STALLED,
        PLAN_STARTED,
        PLAN_STATE_CHANGED,
        COMMAND_STATE_CHANGED,
        NODES_SIGNALLED,
        NODES_COMPLETED,
        NODE_FAILED,
        NODE_MISSING,
        NODE_MISSING_PLATFORM,
        CONTROLLER_NOT_READY,
        WORKER_NOT_READY,
        PLAN_IGNORED,
        SPEC_CHANGE_IGNORED,
        UNVERIFIED_PAYLOAD,
        PLAN_PAUSED,
        PLAN_RESUMED,
        PLAN_STOPPING,
        EARLIER_RUN_IN_FLIGHT,
        CANARY_SOAKING,
        GROUP_UPDATING,
        GROUP_SOAKING,
        PREFLIGHT_RUNNING,
        PREFLIGHT_WARNINGS,
        ROLLING_BACK,
        VERSION_SKEW_ALLOWED,
        VERSION_SKEW_LEFT_BEHIND,
        WAITING_FOR_WINDOW,
        UNKNOWN_WINDOW,
        PRESTAGING,
        CHECK_POD_REFUSED,
        PLAN_ACCESS_UNCHECKED,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_table_lists_every_phase_once_in_order() {
        let states: Vec<_> = PLAN_PHASES.iter().map(|info| info.state).collect();
        assert_eq!(states, PlanStateType::ALL);
        for state in PlanStateType::ALL {
            assert_eq!(plan_phase(state).state, state);
        }
    }

    #[test]
    fn the_target_table_lists_every_phase_once_in_order() {
        let states: Vec<_> = TARGET_PHASES.iter().map(|info| info.state).collect();
        assert_eq!(states, TargetState::ALL);
        for state in TargetState::ALL {
            assert_eq!(target_phase(state).state, state);
        }
    }

    #[test]
    fn terminal_phases_agree_with_the_api_and_have_no_exits() {
        for info in PLAN_PHASES {
            assert_eq!(info.terminal, info.state.is_terminal(), "{}", info.state);
            assert_eq!(info.terminal, info.next.is_empty(), "{}", info.state);
        }
        for info in TARGET_PHASES {
            assert_eq!(info.terminal, info.state.is_terminal(), "{}", info.state);
            assert_eq!(info.terminal, info.next.is_empty(), "{}", info.state);
        }
    }

    #[test]
    fn no_phase_leads_back_to_new_plan_or_lists_itself() {
        for (from, to) in plan_transitions() {
            assert_ne!(to, PlanStateType::NewPlan);
            assert_ne!(from, to);
        }
        for (from, to) in target_transitions() {
            assert_ne!(to, TargetState::SignalPending);
            assert_ne!(from, to);
        }
    }

    #[test]
    fn running_phases_share_their_failure_exits() {
        // Completing takes a node's report on a signal the leader recorded: a held plan
        // (`Schedulable`) waits for a node it has not signalled, so it never completes next.
        assert!(plan_transition_allowed(PlanStateType::SchedulableWait, PlanStateType::Completed));
        let running_next = [
            PlanStateType::IncompleteTargets,
            PlanStateType::MissingPlatform,
            PlanStateType::ApplyFailed,
        ];
        for state in [PlanStateType::SchedulableWait, PlanStateType::Schedulable] {
            for to in running_next {
                assert!(plan_transition_allowed(state, to), "{state} -> {to}");
            }
        }
    }

    #[test]
    fn the_states_k0s_no_longer_writes_are_never_entered() {
        for (_, to) in plan_transitions() {
            assert_ne!(to, PlanStateType::MissingSignalNode);
            assert_ne!(to, PlanStateType::InconsistentTargets);
        }
    }

    #[test]
    fn a_new_target_may_be_signalled_in_its_first_pass() {
        assert!(new_target_allowed(TargetState::SignalPending));
        assert!(new_target_allowed(TargetState::SignalSent));
        assert!(new_target_allowed(TargetState::MissingSignalNode));
    }

    #[test]
    fn the_markdown_tables_name_every_phase_by_its_wire_string() {
        let doc = markdown();
        for state in PlanStateType::ALL {
            assert!(doc.contains(&format!("| `{state}`")), "{state}");
        }
        for state in TargetState::ALL {
            assert!(doc.contains(&format!("| `{}` |", state.as_str())), "{state}");
        }
        assert!(doc.contains("| `Schedulable` | no | `SchedulableWait`, `IncompleteTargets`"));
    }

    #[test]
    fn event_reasons_are_pascal_case_and_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        for reason in reasons::ALL {
            assert!(reason.chars().next().is_some_and(|c| c.is_ascii_uppercase()), "{reason}");
            assert!(reason.chars().all(|c| c.is_ascii_alphanumeric()), "{reason}");
            assert!(seen.insert(reason), "{reason} twice");
        }
    }
}
