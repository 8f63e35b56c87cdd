//! Scheduling: drive the active command of a running plan (DESIGN §4).
//!
//! The active command is the first one not `Completed`; commands run strictly in order and
//! the next one starts in the same pass once the previous one completes. Within a k0s
//! command, controllers go one at a time and all before any worker, each only while every
//! controller of the command answers `/readyz`; workers go at most `limits.concurrent` at a
//! time, Ready nodes only (k0s), in name order.

use autopilot_api::signal::{SignalData, SignalPhase, SignalStatus, format_timestamp};
use autopilot_api::v1beta2::{
    PlanCommandStatus, PlanStateType, PlanStatus, TargetState, TargetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use autopilot_api::duration;

use super::command::{Command, Group, RunIdentity, format_duration, targets, targets_mut};
use super::machine::{Decision, Inputs, Probes};
use super::{Effect, SignalTarget};

/// Drive the run's commands in order. Returns the plan state the pass ends in, or `None`
/// when the status is not one this machine can drive (left as it is).
pub(super) fn schedule(
    inputs: &Inputs<'_>,
    probes: &mut Probes<'_>,
    decision: &mut Decision,
    status: &mut PlanStatus,
) -> Option<PlanStateType> {
    let run = RunIdentity { plan_id: status.plan_id.clone()?, run_id: status.run_id.clone()? };
    for command_status in &mut status.commands {
        let frozen = command_status.frozen.clone()?;
        let command = Command::resolve(&frozen)?;
        match command_status.state {
            PlanStateType::Completed => continue,
            PlanStateType::SchedulableWait | PlanStateType::Schedulable => {}
            // A running plan has no command left in NewPlan (NewPlan either succeeds for
            // every command or ends the plan); a status that has one is not driven.
            PlanStateType::NewPlan => return None,
            PlanStateType::IncompleteTargets
            | PlanStateType::MissingSignalNode
            | PlanStateType::MissingPlatform
            | PlanStateType::InconsistentTargets
            | PlanStateType::Restricted
            | PlanStateType::ApplyFailed
            | PlanStateType::Warning
            | PlanStateType::Aborted => return Some(command_status.state),
        }
        match step_command(inputs, probes, decision, &run, command, command_status) {
            Outcome::Completed => continue,
            Outcome::Running | Outcome::Ended => return Some(command_status.state),
        }
    }
    Some(PlanStateType::Completed)
}

/// Where one pass left a command.
enum Outcome {
    /// Every target completed; the next command may start.
    Completed,
    /// Still running (`SchedulableWait`) or held (`Schedulable`).
    Running,
    /// Ended in a failure state.
    Ended,
}

fn step_command(
    inputs: &Inputs<'_>,
    probes: &mut Probes<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
) -> Outcome {
    let index = status.id;
    let label = format!("command {index} ({})", command.name());

    // 1. Read back every target that is not done: the node's own progress, and the
    //    signals this run already wrote.
    let first_signal = decision.signals.len();
    let mut resends = Vec::new();
    for &group in command.groups() {
        let kind = command.object_kind(group);
        let objects = inputs.objects(kind);
        let Some(group_targets) = targets_mut(status, command, group) else { continue };
        for target in group_targets.iter_mut().filter(|target| !target.state.is_terminal()) {
            let Some(object) = objects.get(&target.name) else {
                set_state(target, TargetState::MissingSignalNode, inputs);
                target.reason = Some(format!("{kind} {} no longer exists", target.name));
                continue;
            };
            if let Some(signal) = run.signal_on(object, index, command) {
                read_back(target, signal, inputs);
                continue;
            }
            if target.state == TargetState::SignalSent {
                // Crash safety: the status says SignalSent but the object does not carry the
                // signal (a crash between the status write and the signal write, or a write
                // that lost a conflict). Send the identical signal again.
                match command.platform_entry(object) {
                    Ok(entry) => {
                        let created = format_timestamp(target.last_updated_timestamp.0);
                        resends.push(Effect::Signal {
                            target: SignalTarget { kind, name: target.name.clone() },
                            data: command.signal(run, index, entry, created),
                        });
                    }
                    Err(why) => {
                        set_state(target, TargetState::MissingPlatform, inputs);
                        target.reason = Some(why);
                    }
                }
            }
        }
    }

    // 2. A node that showed no progress for the command's deadline fails (controllers
    //    too: an in-flight controller is not held by the readiness grace).
    enforce_progress_deadline(inputs, decision, run, command, status);

    // 3. Decide.
    // Checks 1-3: a node reported a failure, a target's object disappeared, or a target's
    // platform went away before its signal could be resent.
    if let Some(outcome) = end_on_target_failure(status, command, &label) {
        return outcome;
    }
    // Check 4: every target completed (vacuously true for a command without targets).
    let all_completed = command.groups().iter().all(|&group| {
        targets(status, command, group).iter().all(|t| t.state == TargetState::SignalCompleted)
    });
    if all_completed {
        release_hold(status);
        status.state = PlanStateType::Completed;
        return Outcome::Completed;
    }
    // Check 5: controllers first, one at a time, each only while all plan controllers are
    // ready. Workers wait until every controller completed (version-skew rule).
    let controllers = targets(status, command, Group::Controllers);
    if controllers.iter().any(|t| t.state != TargetState::SignalCompleted) {
        let outcome = if controllers.iter().any(|t| t.state == TargetState::SignalSent) {
            release_hold(status);
            status.state = PlanStateType::SchedulableWait;
            Outcome::Running
        } else {
            signal_next_controller(inputs, probes, decision, run, command, status, &label)
        };
        if let Outcome::Running = outcome {
            decision.signals.splice(first_signal..first_signal, resends);
        }
        return outcome;
    }
    // Check 6: workers, up to the concurrency limit, in name order.
    let outcome = signal_workers(inputs, decision, run, command, status, &label);
    if let Outcome::Running = outcome {
        decision.signals.splice(first_signal..first_signal, resends);
    }
    outcome
}

/// Fail every `SignalSent` target whose signal showed no progress for the command's
/// progress deadline, and ask for a pass when the earliest remaining deadline is due (a
/// stuck node sends no event).
///
/// Progress is the node's signal status changing phase: the clock starts at the status
/// timestamp the node (or the leader's drain) wrote with its current phase, and at the
/// target's `lastUpdatedTimestamp` (when it was signalled) before the node answered. The
/// later of the two counts, so a node clock running behind cannot shorten the deadline. A
/// failed node's signal gets the status `Failed` with the same reason, so the node stops
/// and an autopilot cordon is undone as for any other failure.
fn enforce_progress_deadline(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
) {
    let index = status.id;
    let deadline = command.progress_timeout(inputs.policy.node_progress_timeout);
    for &group in command.groups() {
        let kind = command.object_kind(group);
        let objects = inputs.objects(kind);
        let Some(group_targets) = targets_mut(status, command, group) else { continue };
        for target in group_targets.iter_mut().filter(|t| t.state == TargetState::SignalSent) {
            let signal = objects.get(&target.name).and_then(|o| run.signal_on(o, index, command));
            let node_status = signal.and_then(|signal| signal.status.as_ref());
            let answered_at =
                node_status.and_then(|status| status.timestamp.parse::<jiff::Timestamp>().ok());
            let since = answered_at.map_or(target.last_updated_timestamp.0, |at| {
                at.max(target.last_updated_timestamp.0)
            });
            let elapsed = inputs.now.duration_since(since);
            // A deadline too long to represent never runs out.
            let remaining = jiff::SignedDuration::try_from(deadline)
                .ok()
                .and_then(|deadline| deadline.checked_sub(elapsed));
            match remaining {
                Some(remaining) if !remaining.is_positive() => {}
                Some(remaining) => {
                    if let Ok(remaining) = std::time::Duration::try_from(remaining) {
                        decision.requeue_after(remaining);
                    }
                    continue;
                }
                None => continue,
            }
            let phase = node_status.map_or(TargetState::SignalSent.as_str(), |s| s.status.as_str());
            let reason = format!("no progress in {phase} for {}", duration::format(deadline));
            // The node's signal is told in the same pass (see `tell_failed_nodes`).
            set_state(target, TargetState::SignalApplyFailed, inputs);
            target.phase = Some(SignalPhase::Failed);
            target.reason = Some(reason);
        }
    }
}

/// The signal writes that tell nodes they failed: every `SignalApplyFailed` target of the
/// run whose object still carries this run's signal in flight (no status yet, or a phase
/// short of `Completed`, `Failed` and `FailedDownload`) gets that signal back with the
/// status `Failed` and the target's reason. This is how a node that missed its progress
/// deadline stops and has an autopilot cordon undone. Emitted on every pass until the
/// object shows it, also after the run ended, so a write lost to a conflict is repeated.
pub(super) fn tell_failed_nodes(inputs: &Inputs<'_>, status: &PlanStatus) -> Vec<Effect> {
    let (Some(plan_id), Some(run_id)) = (status.plan_id.clone(), status.run_id.clone()) else {
        return Vec::new();
    };
    let run = RunIdentity { plan_id, run_id };
    let mut effects = Vec::new();
    for command_status in &status.commands {
        let Some(frozen) = command_status.frozen.as_ref() else { continue };
        let Some(command) = Command::resolve(frozen) else { continue };
        for &group in command.groups() {
            let kind = command.object_kind(group);
            let objects = inputs.objects(kind);
            for target in targets(command_status, command, group)
                .iter()
                .filter(|t| t.state == TargetState::SignalApplyFailed)
            {
                let Some(signal) = objects
                    .get(&target.name)
                    .and_then(|object| run.signal_on(object, command_status.id, command))
                else {
                    continue;
                };
                let in_flight = match signal.status.as_ref().map(|s| s.status) {
                    None
                    | Some(
                        SignalPhase::Downloading
                        | SignalPhase::Cordoning
                        | SignalPhase::ApplyingUpdate
                        | SignalPhase::Restarting
                        | SignalPhase::Uncordoning,
                    ) => true,
                    Some(
                        SignalPhase::Completed | SignalPhase::Failed | SignalPhase::FailedDownload,
                    ) => false,
                };
                if !in_flight {
                    continue;
                }
                let reason = target.reason.clone().unwrap_or_else(|| "failed".to_owned());
                let mut failed = signal.clone();
                failed.status =
                    Some(SignalStatus::new(SignalPhase::Failed, inputs.stamp).with_reason(reason));
                effects.push(Effect::Signal {
                    target: SignalTarget { kind, name: target.name.clone() },
                    data: failed,
                });
            }
        }
    }
    effects
}

/// Apply what a node reports on this run's signal (phase, and the reason the node gives).
/// Changing only the phase or reason does not touch `lastUpdatedTimestamp`; changing the
/// state does.
fn read_back(target: &mut TargetStatus, signal: &SignalData, inputs: &Inputs<'_>) {
    // Crash safety: the node carries this run's signal, so it was signalled even if the
    // status that said so was lost. It never gets a second signal.
    if target.state == TargetState::SignalPending {
        set_state(target, TargetState::SignalSent, inputs);
    }
    let Some(node_status) = &signal.status else { return };
    let phase = node_status.status;
    if target.phase != Some(phase) {
        target.phase = Some(phase);
    }
    match phase {
        SignalPhase::Completed => {
            set_state(target, TargetState::SignalCompleted, inputs);
            target.reason = None;
        }
        SignalPhase::FailedDownload | SignalPhase::Failed => {
            set_state(target, TargetState::SignalApplyFailed, inputs);
            target.reason = Some(node_status.reason.as_deref().map_or_else(
                || format!("the node reported {phase} without a reason"),
                cap_node_reason,
            ));
        }
        // In flight: mirror why the node is where it is (e.g. the PodDisruptionBudget that
        // holds a drain), so the Plan alone tells an operator what an update waits for.
        SignalPhase::Downloading
        | SignalPhase::Cordoning
        | SignalPhase::ApplyingUpdate
        | SignalPhase::Restarting
        | SignalPhase::Uncordoning => {
            let reason = node_status.reason.as_deref().map(cap_node_reason);
            if target.reason != reason {
                target.reason = reason;
            }
        }
    }
}

/// The most bytes of a node-written `reason` copied into the Plan status.
///
/// A node writes its signal's `reason` itself, so it could put megabytes there; the Plan
/// status (and every Event and command description quoting it) must stay small enough to
/// write and to read. 1 KiB holds any real error chain (a sha256 mismatch with both digests
/// and the URL is about 250 bytes).
pub(super) const MAX_NODE_REASON: usize = 1024;

/// A node-written reason as the Plan status keeps it: unchanged if it fits in
/// [`MAX_NODE_REASON`] bytes, else cut at a char boundary and ended with `…`, the whole
/// still within [`MAX_NODE_REASON`] bytes.
pub(super) fn cap_node_reason(reason: &str) -> String {
    if reason.len() <= MAX_NODE_REASON {
        return reason.to_owned();
    }
    // The mark counts against the budget.
    autopilot_api::text::truncate(reason, MAX_NODE_REASON - '…'.len_utf8())
}

/// Signal the first pending controller by name, if every controller of the command is
/// ready; otherwise hold the command, up to the readiness grace.
fn signal_next_controller(
    inputs: &Inputs<'_>,
    probes: &mut Probes<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    label: &str,
) -> Outcome {
    let controllers = targets(status, command, Group::Controllers);
    let mut names: Vec<&str> = controllers.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    let next = controllers
        .iter()
        .filter(|t| t.state == TargetState::SignalPending)
        .map(|t| t.name.clone())
        .min();
    if let Some((name, why)) = probes.first_not_ready(&names) {
        return hold_for_controller(inputs, decision, status, label, &name, &why);
    }
    release_hold(status);
    let Some(next) = next else {
        // Not reachable: the caller found a controller neither completed nor sent.
        status.state = PlanStateType::SchedulableWait;
        return Outcome::Running;
    };
    if let Err(outcome) =
        signal_target(inputs, decision, run, command, status, Group::Controllers, &[next])
    {
        return end_on_target_failure(status, command, label).unwrap_or(outcome);
    }
    status.state = PlanStateType::SchedulableWait;
    Outcome::Running
}

/// Hold the command for a not-ready controller, or end it in `InconsistentTargets` once the
/// controllers have been not ready for the readiness grace.
fn hold_for_controller(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    status: &mut PlanCommandStatus,
    label: &str,
    name: &str,
    why: &str,
) -> Outcome {
    let since = status.not_ready_since.as_ref().map_or(inputs.stamp, |time| time.0);
    let grace = inputs.policy.readiness_grace;
    let elapsed = inputs.now.duration_since(since);
    // A grace too long to represent never runs out.
    let remaining =
        jiff::SignedDuration::try_from(grace).ok().and_then(|grace| grace.checked_sub(elapsed));
    if remaining.is_some_and(|remaining| !remaining.is_positive()) {
        status.not_ready_since = Some(Time(since));
        end(
            status,
            PlanStateType::InconsistentTargets,
            format!(
                "{label}: controller {name} is not ready ({why}); plan controllers have not all \
                 been ready since {} and the readiness grace of {} is over",
                format_timestamp(since),
                format_duration(grace),
            ),
        );
        return Outcome::Ended;
    }
    status.state = PlanStateType::Schedulable;
    status.reason = Some(format!("waiting for controller {name} to become ready: {why}"));
    status.not_ready_since = Some(Time(since));
    // Look again after the recheck interval, but not later than the deadline.
    let recheck = inputs.policy.readiness_recheck;
    let until_deadline =
        remaining.and_then(|remaining| std::time::Duration::try_from(remaining).ok());
    decision.requeue_after(until_deadline.map_or(recheck, |until| recheck.min(until)));
    Outcome::Running
}

/// Fill the free worker slots with pending workers in name order (k0s: Ready nodes only).
fn signal_workers(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    label: &str,
) -> Outcome {
    let objects = inputs.objects(command.object_kind(Group::Workers));
    let workers = targets(status, command, Group::Workers);
    let sent = workers.iter().filter(|t| t.state == TargetState::SignalSent).count();
    let mut free = command.worker_concurrency(workers.len()).saturating_sub(sent);
    let mut pending: Vec<&str> = workers
        .iter()
        .filter(|t| t.state == TargetState::SignalPending)
        .map(|t| t.name.as_str())
        .collect();
    pending.sort_unstable();
    let mut chosen = Vec::new();
    let mut first_not_ready = None;
    for name in pending {
        let ready = !command.gates_workers_on_ready()
            || objects.get(name).is_some_and(|object| object.ready);
        if !ready {
            first_not_ready.get_or_insert(name.to_owned());
        } else if free > 0 {
            chosen.push(name.to_owned());
            free -= 1;
        }
    }
    if let Err(outcome) =
        signal_target(inputs, decision, run, command, status, Group::Workers, &chosen)
    {
        return end_on_target_failure(status, command, label).unwrap_or(outcome);
    }
    status.not_ready_since = None;
    match first_not_ready {
        Some(name) if free > 0 => {
            status.state = PlanStateType::Schedulable;
            status.reason = Some(format!("waiting for worker {name} to become Ready"));
        }
        Some(_) | None => {
            status.state = PlanStateType::SchedulableWait;
            status.reason = None;
        }
    }
    Outcome::Running
}

/// Signal the named pending targets of a group. Every target's platform is checked first;
/// if one has none, it becomes `MissingPlatform`, nothing is signalled, and `Err` tells the
/// caller to end the command (see [`end_on_target_failure`]).
fn signal_target(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    group: Group,
    names: &[String],
) -> Result<(), Outcome> {
    let index = status.id;
    let kind = command.object_kind(group);
    let objects = inputs.objects(kind);
    let Some(group_targets) = targets_mut(status, command, group) else { return Ok(()) };
    let mut signals = Vec::new();
    let mut failed = false;
    for target in group_targets.iter_mut().filter(|t| names.contains(&t.name)) {
        let Some(object) = objects.get(&target.name) else {
            // Not reachable: read-back already marked targets without an object.
            set_state(target, TargetState::MissingSignalNode, inputs);
            target.reason = Some(format!("{kind} {} no longer exists", target.name));
            failed = true;
            continue;
        };
        match command.platform_entry(object) {
            Ok(entry) => {
                let created = format_timestamp(inputs.stamp);
                signals.push((target.name.clone(), command.signal(run, index, entry, created)));
            }
            Err(why) => {
                set_state(target, TargetState::MissingPlatform, inputs);
                target.reason = Some(why);
                failed = true;
            }
        }
    }
    if failed {
        return Err(Outcome::Ended);
    }
    for target in group_targets.iter_mut().filter(|t| names.contains(&t.name)) {
        set_state(target, TargetState::SignalSent, inputs);
    }
    if !names.is_empty() {
        // Their progress deadline starts now (see `enforce_progress_deadline`).
        decision.requeue_after(command.progress_timeout(inputs.policy.node_progress_timeout));
    }
    for (name, data) in signals {
        decision.signals.push(Effect::Signal { target: SignalTarget { kind, name }, data });
    }
    Ok(())
}

/// End the command if a target failed: a node reported a failure (`ApplyFailed`), an object
/// disappeared (`MissingSignalNode`) or a platform went away (`MissingPlatform`), in that
/// order of precedence. The description names every such node and why.
fn end_on_target_failure(
    status: &mut PlanCommandStatus,
    command: Command<'_>,
    label: &str,
) -> Option<Outcome> {
    let failures = [
        (TargetState::SignalApplyFailed, PlanStateType::ApplyFailed),
        (TargetState::MissingSignalNode, PlanStateType::MissingSignalNode),
        (TargetState::MissingPlatform, PlanStateType::MissingPlatform),
    ];
    for (target_state, command_state) in failures {
        let mut lines = Vec::new();
        for &group in command.groups() {
            let kind = command.object_kind(group);
            for target in targets(status, command, group).iter().filter(|t| t.state == target_state)
            {
                let reason = target.reason.as_deref().unwrap_or("no reason given");
                lines.push(match target_state {
                    TargetState::SignalApplyFailed => {
                        let phase = target.phase.map_or("a failure", SignalPhase::as_str);
                        format!("{kind} {} reported {phase}: {reason}", target.name)
                    }
                    TargetState::MissingSignalNode => reason.to_owned(),
                    TargetState::MissingPlatform => {
                        format!("{kind} {} has no usable platform: {reason}", target.name)
                    }
                    TargetState::SignalPending
                    | TargetState::SignalSent
                    | TargetState::SignalCompleted => continue,
                });
            }
        }
        if !lines.is_empty() {
            end(status, command_state, format!("{label}: {}", lines.join("; ")));
            return Some(Outcome::Ended);
        }
    }
    None
}

/// Move a target to `state` as of this pass (a no-op when it is already there).
fn set_state(target: &mut TargetStatus, state: TargetState, inputs: &Inputs<'_>) {
    if target.state != state {
        target.state = state;
        target.last_updated_timestamp = Time(inputs.stamp);
    }
}

/// End a command in a failure state with a description. The hold reason goes (nothing is
/// waited for any more); `notReadySince` stays only as the evidence of `InconsistentTargets`.
fn end(status: &mut PlanCommandStatus, state: PlanStateType, description: String) {
    status.state = state;
    status.description = Some(description);
    status.reason = None;
    if state != PlanStateType::InconsistentTargets {
        status.not_ready_since = None;
    }
}

/// Nothing holds the command any more.
fn release_hold(status: &mut PlanCommandStatus) {
    status.reason = None;
    status.not_ready_since = None;
}
