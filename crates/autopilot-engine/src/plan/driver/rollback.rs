//! Rolling back a run (DESIGN §15): every node the run changed puts back what it ran
//! before, and the plan ends `RolledBack`.
//!
//! A rollback starts when a gate with `onFailure: Rollback` fails, or when an operator asks
//! (the [`keys::ANNOTATION_ROLLBACK`] annotation names the run's plan id: `k0s autopilot
//! rollback`), while the run goes on or after it ended. No new node is signalled from then
//! on; the nodes in flight finish first. Then the status records why ([`RollbackStatus`])
//! and, per update command, the nodes it changed (completed, and not already on the
//! command's version when they were signalled) in the command's `rollback` lists, each with
//! the version it ran before ("from"). Those are driven like any update: commands in reverse
//! order, workers before controllers, each group in reverse name order, workers up to the
//! command's concurrency, controllers one at a time, every signal written after the status
//! that says so, the same progress deadline. A node that fails its rollback does not stop the
//! others. A node whose version before the run is not known fails at once (nothing guessed).

use autopilot_api::keys;
use autopilot_api::v1beta2::{
    PlanCommandK0sUpdateStatus, PlanStateType, PlanStatus, RollbackStatus, TargetState,
    TargetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::plan::driver::progress::{CommandPass, release_hold};
use crate::plan::model::command::{Command, Group, RunIdentity, targets};
use crate::plan::model::decision::Decision;
use crate::plan::model::inputs::{Gaps, Inputs};

/// Whether the operator asked to roll back this run: the annotation names its plan id.
pub(in crate::plan) fn requested(inputs: &Inputs<'_>, plan_id: Option<&str>) -> bool {
    inputs.rollback.is_some_and(|asked| Some(asked.trim()) == plan_id)
}

/// Why an operator's rollback is done, for the status and the Events.
pub(in crate::plan) fn by_operator() -> String {
    format!("requested by an operator (the {} annotation)", keys::ANNOTATION_ROLLBACK)
}

/// Whether the run of `status`, which ended, is to be rolled back now: it ended in one of
/// [`crate::plan::model::phases::REOPENED_BY_ROLLBACK`], an operator asked, it has not been rolled back,
/// and it changed a node whose earlier version is known.
pub(in crate::plan) fn wanted_after_end(inputs: &Inputs<'_>, status: &PlanStatus) -> bool {
    crate::plan::model::phases::REOPENED_BY_ROLLBACK.contains(&status.state)
        && status.rollback.is_none()
        && status.run_id.is_some()
        && requested(inputs, status.plan_id.as_deref())
        && status
            .commands
            .iter()
            .any(|command| changed(command).iter().any(|(_, target)| target.from.is_some()))
}

/// The targets of an update command that its run changed, by group: completed, and (for a
/// k0s update) not already on the command's version when they were signalled.
fn changed(status: &autopilot_api::v1beta2::PlanCommandStatus) -> Vec<(Group, TargetStatus)> {
    let Some(frozen) = status.frozen.as_ref() else { return Vec::new() };
    let Some(command) = Command::resolve(frozen) else { return Vec::new() };
    if command.rollback().is_none() {
        return Vec::new();
    }
    let version = command.version();
    let is_k0s = matches!(command, Command::K0s(_));
    command
        .groups()
        .iter()
        .flat_map(|&group| targets(status, command, group).iter().map(move |t| (group, t)))
        .filter(|(_, t)| t.state == TargetState::SignalCompleted)
        .filter(|(_, t)| !is_k0s || t.from.as_deref() != Some(version))
        .map(|(group, t)| (group, t.clone()))
        .collect()
}

/// Start rolling back the run: record why, and list each update command's changed nodes
/// to put back. A node without a known "from" version fails at once.
pub(in crate::plan) fn start(inputs: &Inputs<'_>, status: &mut PlanStatus, reason: String) {
    status.rollback = Some(RollbackStatus { reason, since: Time(inputs.stamp) });
    for command in &mut status.commands {
        let changed = changed(command);
        if changed.is_empty() {
            continue;
        }
        let mut lists = PlanCommandK0sUpdateStatus::default();
        for (group, target) in changed {
            let mut undo =
                TargetStatus::new(&target.name, TargetState::SignalPending, inputs.stamp);
            undo.from = target.from.clone();
            if undo.from.is_none() {
                undo.state = TargetState::SignalApplyFailed;
                undo.reason = Some(
                    "the version it ran before the run is not known (its status lost it), so \
                     nothing is put back"
                        .to_owned(),
                );
            }
            match group {
                Group::Controllers => lists.controllers.push(undo),
                Group::Workers => lists.workers.push(undo),
            }
        }
        command.rollback = Some(lists);
    }
    status.state = PlanStateType::SchedulableWait;
}

/// Drive the rollback one pass: the last command with nodes left to put back goes on; once
/// none has, every command and the plan end `RolledBack`.
pub(in crate::plan) fn drive(
    inputs: &Inputs<'_>,
    gaps: &mut Gaps<'_>,
    decision: &mut Decision,
    status: &mut PlanStatus,
    run: &RunIdentity,
) -> PlanStateType {
    for command_status in status.commands.iter_mut().rev() {
        if command_status.rollback.is_none() {
            continue;
        }
        let Some(frozen) = command_status.frozen.clone() else { continue };
        let Some(command) = Command::resolve(&frozen).and_then(Command::rollback) else {
            continue;
        };
        let open = command.groups().iter().any(|&group| {
            targets(command_status, command, group).iter().any(|t| !t.state.is_terminal())
        });
        if !open {
            continue;
        }
        let label = format!("command {} ({})", command_status.id, command.name());
        let mut pass = CommandPass {
            inputs,
            gaps: &mut *gaps,
            decision: &mut *decision,
            run,
            command,
            status: command_status,
            label,
            // A rollback undoes a change that went wrong: no window holds it.
            windows: &crate::plan::rules::window::RunSchedule::NONE,
        };
        pass.step_rollback();
        let still_open = command.groups().iter().any(|&group| {
            targets(command_status, command, group).iter().any(|t| !t.state.is_terminal())
        });
        if still_open {
            return PlanStateType::SchedulableWait;
        }
    }
    finish(status);
    PlanStateType::RolledBack
}

/// Every command ends `RolledBack`, an update command's description saying how its nodes
/// went.
fn finish(status: &mut PlanStatus) {
    for command in &mut status.commands {
        release_hold(command);
        let Some(lists) = &command.rollback else {
            // A command that changed nothing keeps how it ended; one that never ran ends
            // with the run.
            if !command.state.is_terminal() {
                command.state = PlanStateType::RolledBack;
            }
            continue;
        };
        command.state = PlanStateType::RolledBack;
        let all: Vec<&TargetStatus> = lists.workers.iter().chain(&lists.controllers).collect();
        let back: Vec<String> = all
            .iter()
            .filter(|t| t.state == TargetState::SignalCompleted)
            .map(|t| format!("{} ({})", t.name, t.from.as_deref().unwrap_or("?")))
            .collect();
        let failed: Vec<String> = all
            .iter()
            .filter(|t| t.state.is_failure())
            .map(|t| format!("{}: {}", t.name, t.reason.as_deref().unwrap_or("no reason given")))
            .collect();
        let mut text = format!(
            "command {}: rolled back: {} of {} node(s) back on the version they ran before",
            command.id,
            back.len(),
            all.len()
        );
        if !back.is_empty() {
            text.push_str(&format!(": {}", back.join(", ")));
        }
        if !failed.is_empty() {
            text.push_str(&format!("; {} not put back: {}", failed.len(), failed.join("; ")));
        }
        command.description = Some(match command.description.take() {
            Some(before) => format!("{before}; {text}"),
            None => text,
        });
    }
}

impl CommandPass<'_, '_> {
    /// One pass over a command's rollback: read the nodes back, enforce the progress
    /// deadline, then signal the next nodes (the first group with nodes left, in reverse
    /// name order: workers up to the concurrency, controllers one at a time).
    pub(in crate::plan) fn step_rollback(&mut self) {
        let first_signal = self.decision.signals.len();
        let mut resends = self.read_back_targets();
        self.enforce_progress_deadline();
        let command = self.command;
        let group = command.groups().iter().copied().find(|&group| {
            targets(self.status, command, group).iter().any(|t| !t.state.is_terminal())
        });
        if let Some(group) = group
            && !self.inputs.steering.paused
        {
            // Each round signals the chosen nodes, or fails one that cannot be (and picks
            // again without it).
            for _ in 0..=targets(self.status, command, group).len() {
                let group_targets = targets(self.status, command, group);
                let sent =
                    group_targets.iter().filter(|t| t.state == TargetState::SignalSent).count();
                let limit = match group {
                    Group::Controllers => 1,
                    Group::Workers => command.worker_concurrency(group_targets.len()),
                };
                let mut pending: Vec<String> = group_targets
                    .iter()
                    .filter(|t| t.state == TargetState::SignalPending)
                    .map(|t| t.name.clone())
                    .collect();
                pending.sort_unstable_by(|a, b| b.cmp(a));
                pending.truncate(limit.saturating_sub(sent));
                if self.signal_target(group, &pending) {
                    break;
                }
            }
        }
        let all: Vec<&TargetStatus> = command
            .groups()
            .iter()
            .flat_map(|&group| targets(self.status, command, group))
            .collect();
        let back = all.iter().filter(|t| t.state == TargetState::SignalCompleted).count();
        let in_flight: Vec<String> = all
            .iter()
            .filter(|t| t.state == TargetState::SignalSent)
            .map(|t| t.name.clone())
            .collect();
        let total = all.len();
        let status = &mut *self.status;
        status.state = PlanStateType::SchedulableWait;
        let detail = if in_flight.is_empty() {
            format!("{back} of {total} node(s) put back")
        } else {
            format!(
                "{back} of {total} node(s) put back; in flight: {}",
                crate::plan::model::text::name_list(&in_flight)
            )
        };
        self.decision.hold_steady(
            status,
            crate::plan::model::phases::reasons::ROLLING_BACK,
            "rolling back the run".to_owned(),
            &detail,
        );
        resends.retain(|effect| self.still_in_flight(effect));
        self.decision.signals.splice(first_signal..first_signal, resends);
    }
}
