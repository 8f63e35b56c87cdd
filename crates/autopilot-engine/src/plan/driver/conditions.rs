//! The conditions a machine reads: `Ready`, `Reconciling` and `Stalled`, in the shape kstatus
//! computes a resource's status from (what Flux's health checks, `kubectl wait`, cli-utils and
//! Argo CD's health check in `manifests/gitops/` read).
//!
//! All three are always present once the leader has passed over the Plan, each `True` or
//! `False`, with the plan state's wire name (`NewPlan` for the empty state) as the reason of
//! the ones that are `True`:
//!
//! | Plan state | `Ready` | `Reconciling` | `Stalled` |
//! |---|---|---|---|
//! | `""`, `SchedulableWait`, `Schedulable` (paused too) | False | True | False |
//! | held for a controller past the readiness grace | False | True | True (`ControllerNotReady`) |
//! | held by preflight warnings (`onWarn: Block`) until accepted | False | False | True (`PreflightWarnings`) |
//! | `Completed` | True | False | False |
//! | `Completed`, then a node's post-update watch rolled it back | False | False | True (`RolledBackAfterUpdate`) |
//! | any other terminal state | False | False | True (the state; the description as message) |
//!
//! A paused plan is in progress, as intended: an operator chose to hold it and will resume it
//! (the `Paused` condition says so, and Argo CD's health check reads it as Suspended). A plan
//! held by preflight warnings cannot move until an operator accepts them, so it is stalled
//! and not reconciling, which kstatus reads as failed, with the `Stalled` message naming the
//! annotation that accepts the warnings. A controller not ready past the grace is stalled
//! but still reconciling (it goes on by itself once the controller is ready), which kstatus,
//! reading `Reconciling` first, keeps in progress.
//!
//! Their `observedGeneration` is the generation the run started from (`status.observedGeneration`):
//! `Ready` is therefore True only when the run of the current spec completed, and a spec that
//! moved on shows as a generation mismatch, which kstatus reads as in progress. One exception:
//! an aborted plan whose spec changes runs nothing until the abort annotation goes, so its
//! status observes the new generation and reads `Stalled` (reason `Aborted`), see
//! `crate::plan::driver::machine`.

use autopilot_api::keys::conditions;
use autopilot_api::v1beta2::{PlanStateType, PlanStatus, TargetState};

use std::collections::BTreeMap;

use crate::plan::model::command::{Command, RunIdentity, format_duration, targets};
use crate::plan::model::decision::{Effect, EventKind, Hold};
use crate::plan::model::inputs::Inputs;
use crate::plan::model::phases::{plan_phase, reasons};
use crate::plan::model::text::set_condition_to;

/// The longest condition message, in bytes: a failure's description can name many nodes, and
/// the full text stays in the command's `description`.
pub const MAX_MESSAGE: usize = 1024;

/// What the three conditions say about a status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::plan) enum Verdict {
    /// The run goes on (reason: the state).
    Running { reason: String, message: String },
    /// The run goes on but cannot move: a controller stayed not ready past the grace.
    Stuck { reason: String, message: String, why: String },
    /// The run cannot move until an operator acts: preflight warnings under
    /// `onWarn: Block` wait to be accepted (`why` says with which annotation).
    Blocked { reason: String, message: String, why: String },
    /// The run completed.
    Ready { message: String },
    /// The run ended any other way (reason: the state).
    Failed { reason: String, message: String },
}

/// The verdict on `status` at `inputs`' time, given what the pass found `holds` each
/// command (empty for a run that ended).
pub(in crate::plan) fn verdict(
    status: &PlanStatus,
    inputs: &Inputs<'_>,
    holds: &BTreeMap<u32, Hold>,
) -> Verdict {
    let state = status.state;
    let reason = reason_of(state);
    match state {
        PlanStateType::NewPlan | PlanStateType::SchedulableWait | PlanStateType::Schedulable => {
            running(status, inputs, holds, reason)
        }
        PlanStateType::Completed => {
            let undone = rolled_back_after_completion(inputs, status);
            if undone.is_empty() {
                Verdict::Ready {
                    message: format!("run {}: every command completed", run_of(status)),
                }
            } else {
                Verdict::Failed {
                    reason: ROLLED_BACK_AFTER_UPDATE.to_owned(),
                    message: format!(
                        "run {} completed, then its post-update watch put the previous binary \
                         back on {}",
                        run_of(status),
                        undone.join("; ")
                    ),
                }
            }
        }
        PlanStateType::IncompleteTargets
        | PlanStateType::MissingSignalNode
        | PlanStateType::MissingPlatform
        | PlanStateType::InconsistentTargets
        | PlanStateType::Restricted
        | PlanStateType::ApplyFailed
        | PlanStateType::Warning
        | PlanStateType::Aborted
        | PlanStateType::PreflightFailed
        | PlanStateType::RolledBack => {
            // The command that ended the plan says why; otherwise the state's meaning.
            let described = status
                .commands
                .iter()
                .filter(|command| command.state == state)
                .chain(status.commands.iter().filter(|command| command.state.is_failure()))
                .find_map(|command| command.description.as_deref());
            let message = match (&status.rollback, described) {
                (Some(rollback), _) if state == PlanStateType::RolledBack => {
                    format!("rolled back: {}", rollback.reason)
                }
                (_, Some(description)) => description.to_owned(),
                (_, None) => format!("the plan ended {state}: {}", plan_phase(state).description),
            };
            Verdict::Failed { reason, message }
        }
    }
}

/// The verdict on a run that goes on (`reason`: its state): stuck on a controller not
/// ready past the grace, blocked by preflight warnings, or running.
fn running(
    status: &PlanStatus,
    inputs: &Inputs<'_>,
    holds: &BTreeMap<u32, Hold>,
    reason: String,
) -> Verdict {
    let active = status.commands.iter().find(|command| !command.state.is_terminal());
    let held = active.and_then(|command| command.reason.as_deref());
    let mut message = format!("run {} is in progress", run_of(status));
    if let Some(progress) = &status.progress {
        message.push_str(&format!(": {progress} node updates completed"));
    }
    if let Some(held) = held {
        message.push_str(&format!("; {held}"));
    }
    // Only an operator moves a plan that preflight warnings hold: the command's
    // reason names the annotation that accepts them.
    let blocked = active.filter(|command| {
        holds.get(&command.id).is_some_and(|h| h.reason == reasons::PREFLIGHT_WARNINGS)
    });
    if let Some(why) = blocked.and_then(|command| command.reason.clone()) {
        return Verdict::Blocked { reason: reasons::PREFLIGHT_WARNINGS.to_owned(), message, why };
    }
    let stuck = active.and_then(|command| {
        let since = command.not_ready_since.as_ref()?;
        let grace = jiff::SignedDuration::try_from(inputs.policy.readiness_grace).ok()?;
        (inputs.elapsed_since(since.0) >= grace).then(|| {
            format!(
                "{}; the plan controllers have not all been ready for the readiness \
                 grace of {}: the plan goes on once they are, or ends when aborted",
                held.unwrap_or("a plan controller is not ready"),
                format_duration(inputs.policy.readiness_grace),
            )
        })
    });
    match stuck {
        Some(why) => Verdict::Stuck { reason, message, why },
        None => Verdict::Running { reason, message },
    }
}

/// Bring `status`'s three conditions in line with its state. A `PlanStalled` Warning Event
/// when a running plan turns stalled (an ended one has its state-change Events).
pub(in crate::plan) fn derive(
    status: &mut PlanStatus,
    inputs: &Inputs<'_>,
    holds: &BTreeMap<u32, Hold>,
    events: &mut Vec<Effect>,
) {
    let generation = status.observed_generation.unwrap_or_default();
    let verdict = verdict(status, inputs, holds);
    let not_ready = || "the run completed".to_owned();
    let (ready, reconciling, stalled) = match &verdict {
        Verdict::Running { reason, message } => (
            (false, reason.clone(), message.clone()),
            (true, reason.clone(), message.clone()),
            (false, reason.clone(), "nothing stops the run".to_owned()),
        ),
        Verdict::Stuck { reason, message, why } => (
            (false, reason.clone(), message.clone()),
            (true, reason.clone(), message.clone()),
            (true, reasons::CONTROLLER_NOT_READY.to_owned(), why.clone()),
        ),
        Verdict::Blocked { reason, message, why } => (
            (false, reason.clone(), message.clone()),
            (false, reason.clone(), why.clone()),
            (true, reason.clone(), why.clone()),
        ),
        Verdict::Ready { message } => (
            (true, reason_of(PlanStateType::Completed), message.clone()),
            (false, reason_of(PlanStateType::Completed), not_ready()),
            (false, reason_of(PlanStateType::Completed), not_ready()),
        ),
        Verdict::Failed { reason, message } => (
            (false, reason.clone(), message.clone()),
            (false, reason.clone(), format!("the run ended {reason}")),
            (true, reason.clone(), message.clone()),
        ),
    };
    let stamp = inputs.stamp;
    for (type_, (value, reason, message)) in [
        (conditions::READY, ready),
        (conditions::RECONCILING, reconciling),
        (conditions::STALLED, stalled),
    ] {
        let message = autopilot_api::text::truncate(&message, MAX_MESSAGE - '…'.len_utf8());
        let turned = set_condition_to(
            &mut status.conditions,
            type_,
            value,
            &reason,
            &message,
            generation,
            stamp,
        );
        if turned && value && type_ == conditions::STALLED && !status.is_terminal() {
            events.push(Effect::Event {
                kind: EventKind::Warning,
                reason: reasons::PLAN_STALLED,
                note: format!("plan {}: {message}", inputs.plan_name),
            });
        }
    }
}

/// A Plan none of whose runs goes on: not executed at all (reason `NotAutopilotPlan`),
/// aborted before its first run started, or aborted with a spec that changed since its run
/// started (reason `Aborted`). `Stalled`, so that a GitOps engine reads it as failed rather
/// than in progress for ever.
pub(in crate::plan) fn never_runs(
    status: &mut PlanStatus,
    reason: &str,
    message: &str,
    inputs: &Inputs<'_>,
    generation: i64,
) {
    let stamp = inputs.stamp;
    let not_run = "no run of this plan goes on";
    for (type_, value, message) in [
        (conditions::READY, false, not_run),
        (conditions::RECONCILING, false, not_run),
        (conditions::STALLED, true, message),
    ] {
        set_condition_to(&mut status.conditions, type_, value, reason, message, generation, stamp);
    }
}

/// The reason of `Ready` and `Stalled` when a node of a completed run rolled its update back
/// afterwards (its post-update watch): the plan stays `Completed`, as k0s' state vocabulary
/// has no way back, but it is not `Ready` any more.
pub const ROLLED_BACK_AFTER_UPDATE: &str = "RolledBackAfterUpdate";

/// The nodes of a completed run whose signal of this run says `Failed` since: the post-update
/// watch put their previous binary back after they reported `Completed`. `<kind> <name>:
/// <reason>` each, in command and target order.
fn rolled_back_after_completion(inputs: &Inputs<'_>, status: &PlanStatus) -> Vec<String> {
    let (Some(plan_id), Some(run_id)) = (status.plan_id.clone(), status.run_id.clone()) else {
        return Vec::new();
    };
    let run = RunIdentity { plan_id, run_id };
    let mut undone = Vec::new();
    for command_status in &status.commands {
        let Some(command) = command_status.frozen.as_ref().and_then(Command::resolve) else {
            continue;
        };
        for &group in command.groups() {
            let kind = command.object_kind(group);
            let objects = inputs.objects(kind);
            let completed = targets(command_status, command, group);
            for target in completed.iter().filter(|t| t.state == TargetState::SignalCompleted) {
                let Some(signal) = objects
                    .get(&target.name)
                    .and_then(|object| run.signal_on(object, command_status.id, command))
                else {
                    continue;
                };
                // Only the signal the leader recorded for the node, and only the node's own
                // report of a rollback by its post-update watch: a refusal written over a
                // rewound signal (by the node or the drain), or a copy of the signal, says
                // nothing about the update.
                if !crate::authorize::recorded(target, &signal.created) {
                    continue;
                }
                if let Some(why) = crate::agent::rolled_back_after_update(signal) {
                    undone.push(format!("{kind} {}: {why}", target.name));
                }
            }
        }
    }
    undone
}

/// The reason a state gives its conditions: its wire name, `NewPlan` for the empty state.
fn reason_of(state: PlanStateType) -> String {
    // Every wire name but the empty one (NewPlan's) is already a condition reason.
    if state == PlanStateType::NewPlan { "NewPlan" } else { state.as_str() }.to_owned()
}

fn run_of(status: &PlanStatus) -> &str {
    status.run_id.as_deref().unwrap_or("(no run id)")
}
