//! What a pass does to one command's status, shared by the k0s/airgap scheduling
//! ([`crate::plan::driver::schedule`]) and the preflight checks ([`crate::plan::rules::checks`]): the pass over the
//! command ([`CommandPass`]), move targets on, signal them, end the command or release its
//! hold, and say where the pass left it.

use autopilot_api::signal::{MAX_SIGNAL_BYTES, SignalData, format_created};
use autopilot_api::v1beta2::{PlanCommandStatus, PlanStateType, TargetState, TargetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::plan::model::command::{Command, Group, RunIdentity, targets_mut};
use crate::plan::model::decision::{Decision, Effect, SignalTarget};
use crate::plan::model::inputs::{Gaps, Inputs};
use crate::plan::model::verdict::{CommandView, Hold, Verdict};

/// Where one pass left a command.
pub(in crate::plan) enum Outcome {
    /// Every target completed; the next command may start.
    Completed,
    /// Still running (`SchedulableWait`) or held (`Schedulable`).
    Running,
    /// Ended in a failure state.
    Ended,
    /// Stopped for a rollback of the run (nothing in flight any more); the text says why.
    RollBack(String),
}

/// One pass over one command of the run: what every step of it reads and writes. The
/// scheduling's steps are its methods; a preflight command's pass goes to
/// [`crate::plan::rules::checks::decide`].
pub(in crate::plan) struct CommandPass<'p, 'g> {
    /// The snapshot, the policy and the time.
    pub(in crate::plan) inputs: &'p Inputs<'p>,
    /// What the pass found missing (controllers asked about without a probe result).
    pub(in crate::plan) gaps: &'p mut Gaps<'g>,
    /// What the pass decided so far: signals, holds, requeues.
    pub(in crate::plan) decision: &'p mut Decision,
    /// The run the command belongs to.
    pub(in crate::plan) run: &'p RunIdentity,
    /// The command, resolved from its frozen copy.
    pub(in crate::plan) command: Command<'p>,
    /// The command's status, changed in place.
    pub(in crate::plan) status: &'p mut PlanCommandStatus,
    /// How descriptions name the command: `command <index> (<kind>)`.
    pub(in crate::plan) label: String,
    /// The run's windows, compiled for this pass (none for a rollback).
    pub(in crate::plan) windows: &'p crate::plan::rules::window::RunSchedule<'p>,
}

impl CommandPass<'_, '_> {
    /// The pass as the rules read it.
    pub(in crate::plan) fn view(&self) -> CommandView<'_> {
        CommandView {
            inputs: self.inputs,
            run: self.run,
            command: self.command,
            status: self.status,
            label: &self.label,
        }
    }

    /// Apply a rule's verdict: `None` for [`Verdict::Go`] (the pass goes on), otherwise
    /// where it leaves the command.
    pub(in crate::plan) fn apply(&mut self, verdict: Verdict) -> Option<Outcome> {
        match verdict {
            Verdict::Go => None,
            Verdict::Hold(Hold { state, why, kind, until }) => {
                let status = &mut *self.status;
                status.state = state;
                status.not_ready_since = None;
                status.reason = why;
                if let Some(kind) = kind {
                    self.decision.hold(status.id, kind);
                }
                if let Some(until) = until {
                    self.decision.requeue_after(until);
                }
                Some(Outcome::Running)
            }
            Verdict::End { state, description } => {
                end(self.status, state, description);
                Some(Outcome::Ended)
            }
        }
    }

    /// Signal the named pending targets of a group. Every target's platform is checked
    /// first; if one has none, it becomes `MissingPlatform`, nothing is signalled, and
    /// `false` tells the caller to decide again (the failure policy now counts it).
    pub(in crate::plan) fn signal_target(&mut self, group: Group, names: &[String]) -> bool {
        let (inputs, run, command) = (self.inputs, self.run, self.command);
        let index = self.status.id;
        let kind = command.object_kind(group);
        let objects = inputs.objects(kind);
        let Some(group_targets) = targets_mut(self.status, command, group) else { return true };
        let mut signals = Vec::new();
        let mut failed = false;
        // Looked up for every target of the group: a set.
        let names: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
        // Every signal of the pass has the same `created`, which the status records for
        // each node before the signal is written (DESIGN §14); to the nanosecond, so no copy
        // written ahead of time can have it.
        let created = format_created(inputs.now);
        for target in group_targets.iter_mut().filter(|t| names.contains(t.name.as_str())) {
            let Some(object) = objects.get(&target.name) else {
                // Not reachable: read-back already marked targets without an object.
                set_state(target, TargetState::MissingSignalNode, inputs);
                target.reason = Some(format!("{kind} {} no longer exists", target.name));
                failed = true;
                continue;
            };
            match command.signal_for(run, index, object, target, created.clone()) {
                // The leader never writes a signal over the annotation budget: the API server
                // could refuse it on every pass.
                Ok(data) if signal_bytes(&data) > MAX_SIGNAL_BYTES => {
                    set_state(target, TargetState::SignalApplyFailed, inputs);
                    target.reason = Some(format!(
                        "refused: its signal would be {} bytes, over the {MAX_SIGNAL_BYTES}-byte \
                         budget of a signal annotation (shorten the Plan's URLs or check lists)",
                        signal_bytes(&data)
                    ));
                    failed = true;
                }
                Ok(data) => signals.push((target.name.clone(), data)),
                Err(why) => {
                    set_state(target, TargetState::MissingPlatform, inputs);
                    target.reason = Some(why);
                    failed = true;
                }
            }
        }
        if failed {
            return false;
        }
        for target in group_targets.iter_mut().filter(|t| names.contains(t.name.as_str())) {
            if target.state == TargetState::SignalPending && !command.is_rollback() {
                // What a rollback would put back (DESIGN §15): the version the node says it
                // runs as it is signalled.
                target.from = objects.get(&target.name).and_then(|object| object.version.clone());
            }
            set_state(target, TargetState::SignalSent, inputs);
            target.signalled = Some(created.clone());
            target.drained = None;
        }
        if !names.is_empty() {
            // Their progress deadline starts now (see `enforce_progress_deadline`).
            let deadline = command.progress_timeout(inputs.policy.node_progress_timeout);
            self.decision.requeue_after(deadline);
        }
        for (name, data) in signals {
            self.decision
                .signals
                .push(Effect::Signal { target: SignalTarget { kind, name }, data });
        }
        true
    }
}

/// The bytes of `data`'s annotation value.
fn signal_bytes(data: &SignalData) -> usize {
    autopilot_api::signal::encode(data).1.len()
}

/// Move a target to `state` as of this pass (a no-op when it is already there).
pub(in crate::plan) fn set_state(
    target: &mut TargetStatus,
    state: TargetState,
    inputs: &Inputs<'_>,
) {
    if target.state != state {
        target.state = state;
        target.last_updated_timestamp = Time(inputs.stamp);
    }
}

/// End a command in a failure state with a description. The hold reason goes (nothing is
/// waited for any more).
pub(in crate::plan) fn end(
    status: &mut PlanCommandStatus,
    state: PlanStateType,
    description: String,
) {
    status.state = state;
    status.description = Some(description);
    status.reason = None;
    status.not_ready_since = None;
}

/// Nothing holds the command any more.
pub(in crate::plan) fn release_hold(status: &mut PlanCommandStatus) {
    status.reason = None;
    status.not_ready_since = None;
}
