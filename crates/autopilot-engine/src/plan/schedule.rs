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

use autopilot_api::{duration, keys};
use jiff::Timestamp;

use super::command::{Command, Group, RunIdentity, format_duration, targets, targets_mut};
use super::decision::{Decision, Effect, SignalTarget};
use super::inputs::{Gaps, Inputs, ObservedSignal};
use super::phases::reasons;
use super::progress::{Outcome, end, release_hold, set_state, signal_target};

/// Drive the run's commands in order. Returns the plan state the pass ends in, or `None`
/// when the status is not one this machine can drive (left as it is).
pub(super) fn schedule(
    inputs: &Inputs<'_>,
    gaps: &mut Gaps<'_>,
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
            | PlanStateType::Aborted
            | PlanStateType::PreflightFailed => return Some(command_status.state),
        }
        match step_command(inputs, gaps, decision, &run, command, command_status) {
            Outcome::Completed => continue,
            Outcome::Running | Outcome::Ended => return Some(command_status.state),
        }
    }
    Some(PlanStateType::Completed)
}

fn step_command(
    inputs: &Inputs<'_>,
    gaps: &mut Gaps<'_>,
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
    let mut resends = read_back_targets(inputs, run, command, status);

    // 2. A node that showed no progress for the command's deadline fails (controllers
    //    too: an in-flight controller is not held by the readiness grace).
    enforce_progress_deadline(inputs, decision, run, command, status);

    // 3. Decide. A preflight command signals every target at once and judges the reports
    //    (`super::checks`). An update command: a pass that finds a target without a
    //    platform when it is about to signal it marks the target failed and decides again
    //    (at most once per target).
    if let Command::Preflight(preflight) = command {
        let outcome = super::checks::decide(inputs, decision, run, command, preflight, status);
        if let Outcome::Running = outcome {
            resends.retain(|effect| still_in_flight(effect, command, status));
            decision.signals.splice(first_signal..first_signal, resends);
        }
        return outcome;
    }
    loop {
        match decide(inputs, gaps, decision, run, command, status, &label) {
            Decided::Again => continue,
            Decided::Done(outcome) => {
                if let Outcome::Running = outcome {
                    // Only targets still in flight get their signal again (a target the
                    // progress deadline just failed does not).
                    resends.retain(|effect| still_in_flight(effect, command, status));
                    decision.signals.splice(first_signal..first_signal, resends);
                }
                return outcome;
            }
        }
    }
}

/// Read back every target of the command that is not done: a target whose object is gone
/// is `MissingSignalNode`; one whose object carries this run's signal takes the node's
/// progress from it. Returns the signals to send again: those of `SignalSent` targets whose
/// object does not carry them.
fn read_back_targets(
    inputs: &Inputs<'_>,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
) -> Vec<Effect> {
    let index = status.id;
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
                let created = format_timestamp(target.last_updated_timestamp.0);
                match command.signal_for(run, index, object, target, created) {
                    Ok(data) => {
                        resends.push(Effect::Signal {
                            target: SignalTarget { kind, name: target.name.clone() },
                            data,
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
    resends
}

/// Whether a signal effect goes to a target that is still `SignalSent`.
fn still_in_flight(effect: &Effect, command: Command<'_>, status: &PlanCommandStatus) -> bool {
    match effect {
        Effect::Signal { target, .. } => command.groups().iter().any(|&group| {
            command.object_kind(group) == target.kind
                && targets(status, command, group)
                    .iter()
                    .any(|t| t.name == target.name && t.state == TargetState::SignalSent)
        }),
        Effect::CreatePod(_) | Effect::DeletePod { .. } | Effect::Event { .. } => false,
    }
}

/// What [`decide`] concluded.
enum Decided {
    /// The command is where the pass leaves it.
    Done(Outcome),
    /// A target turned out to have no platform as it was about to be signalled; it is now
    /// failed and the failure policy must look again.
    Again,
}

/// Why a command signals no new node and ends once nothing is in flight.
enum Halt {
    /// Failures past the command's budget: any controller, any canary, or more workers than
    /// `limits.maxFailures`. The text names them.
    Failed(String),
    /// The operator aborted the plan.
    Aborted,
}

/// The failure policy, the steering and the rollout shape, in that order, then scheduling.
fn decide(
    inputs: &Inputs<'_>,
    gaps: &mut Gaps<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    label: &str,
) -> Decided {
    let in_flight: Vec<String> = command
        .groups()
        .iter()
        .flat_map(|&group| targets(status, command, group))
        .filter(|t| t.state == TargetState::SignalSent)
        .map(|t| t.name.clone())
        .collect();
    let halt = failures_past_budget(status, command)
        .map(Halt::Failed)
        .or_else(|| inputs.steering.aborted.then_some(Halt::Aborted));

    // Check 1: failures past the budget stop the command; nodes in flight finish first.
    if let Some(Halt::Failed(why)) = &halt {
        if !in_flight.is_empty() {
            return Decided::Done(stopping(decision, status, why, &in_flight));
        }
        return Decided::Done(
            end_on_target_failure(status, command, label).unwrap_or(Outcome::Ended),
        );
    }
    // Check 2: every target done (completed, or failed within the budget).
    let all_done = command
        .groups()
        .iter()
        .all(|&group| targets(status, command, group).iter().all(|t| t.state.is_terminal()));
    if all_done {
        release_hold(status);
        status.state = PlanStateType::Completed;
        status.description = failed_within_budget(status, command, label);
        return Decided::Done(Outcome::Completed);
    }
    // Check 3: an abort stops the command; nodes in flight finish first.
    if let Some(Halt::Aborted) = halt {
        return Decided::Done(stop_aborted(decision, command, status, &in_flight, label));
    }
    // Check 4: a paused plan signals no new node.
    if inputs.steering.paused {
        return Decided::Done(hold_paused(decision, status, &in_flight));
    }
    // Check 5: controllers first, one at a time, each only while all plan controllers are
    // ready and no controller works on a signal of an earlier run. Workers wait until
    // every controller is done (version-skew rule).
    if targets(status, command, Group::Controllers).iter().any(|t| !t.state.is_terminal()) {
        return schedule_controllers(inputs, gaps, decision, run, command, status, label);
    }
    // Check 6: workers: canaries first and their soak, then up to the concurrency limit,
    // in name order.
    schedule_workers(inputs, decision, run, command, status, label)
}

/// The aborted command: it waits for the nodes in flight, then ends `Aborted`.
fn stop_aborted(
    decision: &mut Decision,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    in_flight: &[String],
    label: &str,
) -> Outcome {
    let why = format!("the plan is aborted ({} annotation)", keys::ANNOTATION_ABORT);
    if !in_flight.is_empty() {
        return stopping(decision, status, &why, in_flight);
    }
    let done = command
        .groups()
        .iter()
        .flat_map(|&group| targets(status, command, group))
        .filter(|t| t.state == TargetState::SignalCompleted)
        .count();
    end(
        status,
        PlanStateType::Aborted,
        format!(
            "{label}: aborted by the {} annotation; {done} node(s) had completed and no \
             node was signalled after the abort",
            keys::ANNOTATION_ABORT
        ),
    );
    Outcome::Ended
}

/// Hold the paused command: it signals no new node, naming the nodes in flight.
fn hold_paused(
    decision: &mut Decision,
    status: &mut PlanCommandStatus,
    in_flight: &[String],
) -> Outcome {
    status.state = PlanStateType::SchedulableWait;
    status.not_ready_since = None;
    status.reason = Some(if in_flight.is_empty() {
        format!("paused ({} annotation); no node is in flight", keys::ANNOTATION_PAUSED)
    } else {
        format!(
            "paused ({} annotation); waiting for {} node(s) in flight: {}",
            keys::ANNOTATION_PAUSED,
            in_flight.len(),
            in_flight.join(", ")
        )
    });
    decision.hold(status.id, reasons::PLAN_PAUSED);
    Outcome::Running
}

/// The controllers, one at a time: wait while one is in flight or a controller works on an
/// earlier run's signal, else signal the next.
fn schedule_controllers(
    inputs: &Inputs<'_>,
    gaps: &mut Gaps<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    label: &str,
) -> Decided {
    let controllers = targets(status, command, Group::Controllers);
    if controllers.iter().any(|t| t.state == TargetState::SignalSent) {
        release_hold(status);
        status.state = PlanStateType::SchedulableWait;
        return Decided::Done(Outcome::Running);
    }
    let earlier = earlier_in_flight(inputs, decision, run, command, status.id, Group::Controllers);
    if !earlier.is_empty() {
        hold_for_earlier_run(decision, status, &earlier);
        return Decided::Done(Outcome::Running);
    }
    signal_next_controller(inputs, gaps, decision, run, command, status, label)
}

/// The workers: the canaries first, then their soak, then the others up to the concurrency
/// limit.
fn schedule_workers(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    label: &str,
) -> Decided {
    let canaries = canaries(status, command);
    let canaries_done = canaries.iter().all(|name| {
        targets(status, command, Group::Workers)
            .iter()
            .any(|t| &t.name == name && t.state == TargetState::SignalCompleted)
    });
    if !canaries_done {
        return signal_workers(inputs, decision, run, command, status, Some(&canaries));
    }
    if let Some(outcome) = soak(inputs, decision, command, status, &canaries, label) {
        return Decided::Done(outcome);
    }
    signal_workers(inputs, decision, run, command, status, None)
}

/// The command stops signalling new nodes and waits for the ones in flight.
fn stopping(
    decision: &mut Decision,
    status: &mut PlanCommandStatus,
    why: &str,
    in_flight: &[String],
) -> Outcome {
    status.state = PlanStateType::SchedulableWait;
    status.not_ready_since = None;
    status.reason = Some(format!(
        "stopping: {why}; no new node is signalled, waiting for {} node(s) in flight to \
         finish: {}",
        in_flight.len(),
        in_flight.join(", ")
    ));
    decision.hold(status.id, reasons::PLAN_STOPPING);
    Outcome::Running
}

/// The failures that stop the command, if any: a controller's, a canary's, or more failed
/// workers than `limits.maxFailures`.
fn failures_past_budget(status: &PlanCommandStatus, command: Command<'_>) -> Option<String> {
    let failed = |group: Group| -> Vec<&str> {
        targets(status, command, group)
            .iter()
            .filter(|t| t.state.is_failure())
            .map(|t| t.name.as_str())
            .collect()
    };
    let controllers = failed(Group::Controllers);
    if !controllers.is_empty() {
        return Some(format!("controller {} failed", controllers.join(", ")));
    }
    let workers = failed(Group::Workers);
    let canaries = canaries(status, command);
    let failed_canaries: Vec<&str> =
        workers.iter().copied().filter(|name| canaries.iter().any(|c| c == name)).collect();
    if !failed_canaries.is_empty() {
        return Some(format!("canary worker {} failed", failed_canaries.join(", ")));
    }
    let budget = command.max_failures();
    (workers.len() > budget).then(|| {
        let mut why = format!("worker {} failed", workers.join(", "));
        if budget > 0 {
            why.push_str(&format!(" (limits.maxFailures is {budget})"));
        }
        why
    })
}

/// The description of a command that completed with failed workers within its budget.
fn failed_within_budget(
    status: &PlanCommandStatus,
    command: Command<'_>,
    label: &str,
) -> Option<String> {
    let kind = command.object_kind(Group::Workers);
    let lines: Vec<String> = targets(status, command, Group::Workers)
        .iter()
        .filter(|t| t.state.is_failure())
        .map(|t| {
            let reason = t.reason.as_deref().unwrap_or("no reason given");
            format!("{kind} {} ({}): {reason}", t.name, t.state)
        })
        .collect();
    (!lines.is_empty()).then(|| {
        format!(
            "{label}: completed with {} failed worker(s), within limits.maxFailures {}: {}",
            lines.len(),
            command.max_failures(),
            lines.join("; ")
        )
    })
}

/// The canary workers: the first `limits.canary` worker targets by name (none when unset).
fn canaries(status: &PlanCommandStatus, command: Command<'_>) -> Vec<String> {
    let mut names: Vec<String> =
        targets(status, command, Group::Workers).iter().map(|t| t.name.clone()).collect();
    names.sort_unstable();
    names.truncate(command.canary());
    names
}

/// The canaries completed: hold the other workers until the canaries have stayed Ready for
/// the soak, counted from the last canary's completion. A canary that is not Ready during
/// the soak ends the command (no other worker was touched). `None` once the soak passed
/// (or there is none): the other workers go.
///
/// The soak has passed once any other worker left `SignalPending`, so a leader change after
/// the soak never soaks again.
fn soak(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    canaries: &[String],
    label: &str,
) -> Option<Outcome> {
    let soak = command.soak();
    if canaries.is_empty() || soak.is_zero() {
        return None;
    }
    let workers = targets(status, command, Group::Workers);
    let others_started = workers
        .iter()
        .any(|t| !canaries.contains(&t.name) && t.state != TargetState::SignalPending);
    let others_left = workers.iter().any(|t| !canaries.contains(&t.name));
    if others_started || !others_left {
        return None;
    }
    let objects = inputs.objects(command.object_kind(Group::Workers));
    let not_ready = canaries.iter().find(|name| !objects.get(*name).is_some_and(|o| o.ready));
    if let Some(name) = not_ready {
        let kind = command.object_kind(Group::Workers);
        end(
            status,
            PlanStateType::ApplyFailed,
            format!(
                "{label}: canary {kind} {name} is not Ready during its soak of {}; no other \
                 worker was signalled",
                duration::format(soak)
            ),
        );
        return Some(Outcome::Ended);
    }
    let since = workers
        .iter()
        .filter(|t| canaries.contains(&t.name))
        .map(|t| t.last_updated_timestamp.0)
        .max()
        .unwrap_or(inputs.stamp);
    let elapsed = inputs.now.duration_since(since);
    let remaining =
        jiff::SignedDuration::try_from(soak).ok().and_then(|soak| soak.checked_sub(elapsed));
    let remaining = match remaining {
        Some(remaining) if !remaining.is_positive() => return None,
        Some(remaining) => std::time::Duration::try_from(remaining).ok(),
        // A soak too long to represent never ends; NewPlan refuses such a value.
        None => None,
    };
    let until = remaining
        .and_then(|r| jiff::SignedDuration::try_from(r).ok())
        .and_then(|r| inputs.now.checked_add(r).ok())
        .map_or_else(
            || "never".to_owned(),
            |at| format_timestamp(Timestamp::from_second(at.as_second()).unwrap_or(at)),
        );
    status.state = PlanStateType::SchedulableWait;
    status.not_ready_since = None;
    status.reason = Some(format!(
        "soaking: canary worker(s) {} completed; the other workers follow if they stay Ready \
         for {} (until {until})",
        canaries.join(", "),
        duration::format(soak)
    ));
    decision.hold(status.id, reasons::CANARY_SOAKING);
    if let Some(remaining) = remaining {
        decision.requeue_after(remaining);
    }
    Some(Outcome::Running)
}

/// A node of a group's object kind that works on a signal other than this command's of this
/// run, and has made progress within the command's progress deadline.
struct EarlierSignal {
    /// Object name.
    name: String,
    /// Where the node is (`no answer yet` before it answered).
    phase: &'static str,
}

/// Every object of `group`'s kind still working on another run's (or plan's, or command's)
/// signal: it counts against the limits like one of this run's nodes. A signal counts while
/// its node made progress (answered, or was signalled) within the command's progress
/// deadline, so an abandoned one holds nothing for longer than that; the pass is requeued
/// for when the first one stops counting.
fn earlier_in_flight(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    index: u32,
    group: Group,
) -> Vec<EarlierSignal> {
    let deadline = command.progress_timeout(inputs.policy.node_progress_timeout);
    let mut found = Vec::new();
    for (name, object) in inputs.objects(command.object_kind(group)) {
        if run.signal_on(object, index, command).is_some() {
            continue;
        }
        let ObservedSignal::Valid(data) = &object.signal else { continue };
        let (phase, since) = match data.status.as_ref() {
            None => ("no answer yet", data.created.parse::<Timestamp>().ok()),
            Some(node) => match node.status {
                SignalPhase::Downloading
                | SignalPhase::Cordoning
                | SignalPhase::ApplyingUpdate
                | SignalPhase::Restarting
                | SignalPhase::Uncordoning => {
                    (node.status.as_str(), node.timestamp.parse::<Timestamp>().ok())
                }
                SignalPhase::Completed | SignalPhase::Failed | SignalPhase::FailedDownload => {
                    continue;
                }
            },
        };
        // A signal without a readable time cannot be aged: it does not hold the plan.
        let Some(since) = since else { continue };
        let remaining = jiff::SignedDuration::try_from(deadline)
            .ok()
            .and_then(|deadline| deadline.checked_sub(inputs.now.duration_since(since)));
        match remaining {
            Some(remaining) if !remaining.is_positive() => continue,
            Some(remaining) => {
                if let Ok(remaining) = std::time::Duration::try_from(remaining) {
                    decision.requeue_after(remaining);
                }
            }
            None => {}
        }
        found.push(EarlierSignal { name: name.clone(), phase });
    }
    found
}

/// Hold the command while nodes work on an earlier run's signal and no slot is free.
fn hold_for_earlier_run(
    decision: &mut Decision,
    status: &mut PlanCommandStatus,
    earlier: &[EarlierSignal],
) {
    let names: Vec<String> = earlier.iter().map(|e| format!("{} ({})", e.name, e.phase)).collect();
    status.state = PlanStateType::SchedulableWait;
    status.not_ready_since = None;
    status.reason = Some(format!(
        "waiting for {} node(s) still working on a signal of an earlier run: {}",
        earlier.len(),
        names.join(", ")
    ));
    decision.hold(status.id, reasons::EARLIER_RUN_IN_FLIGHT);
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
    gaps: &mut Gaps<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    label: &str,
) -> Decided {
    let controllers = targets(status, command, Group::Controllers);
    let mut names: Vec<&str> = controllers.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    let next = controllers
        .iter()
        .filter(|t| t.state == TargetState::SignalPending)
        .map(|t| t.name.clone())
        .min();
    if let Some((name, why)) = gaps.first_not_ready(&names) {
        return Decided::Done(hold_for_controller(inputs, decision, status, label, &name, &why));
    }
    release_hold(status);
    let Some(next) = next else {
        // Not reachable: the caller found a controller neither done nor sent.
        status.state = PlanStateType::SchedulableWait;
        return Decided::Done(Outcome::Running);
    };
    if !signal_target(inputs, decision, run, command, status, Group::Controllers, &[next]) {
        return Decided::Again;
    }
    status.state = PlanStateType::SchedulableWait;
    Decided::Done(Outcome::Running)
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
    decision.hold(status.id, reasons::CONTROLLER_NOT_READY);
    // Look again after the recheck interval, but not later than the deadline.
    let recheck = inputs.policy.readiness_recheck;
    let until_deadline =
        remaining.and_then(|remaining| std::time::Duration::try_from(remaining).ok());
    decision.requeue_after(until_deadline.map_or(recheck, |until| recheck.min(until)));
    Outcome::Running
}

/// Fill the free worker slots with pending workers in name order (k0s: Ready nodes only),
/// only from `only` when given (the canaries). Nodes working on an earlier run's signal take
/// slots too, and are not signalled until they finished.
fn signal_workers(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    command: Command<'_>,
    status: &mut PlanCommandStatus,
    only: Option<&[String]>,
) -> Decided {
    let index = status.id;
    let objects = inputs.objects(command.object_kind(Group::Workers));
    let earlier = earlier_in_flight(inputs, decision, run, command, index, Group::Workers);
    let workers = targets(status, command, Group::Workers);
    let sent = workers.iter().filter(|t| t.state == TargetState::SignalSent).count();
    let limit = command.worker_concurrency(workers.len());
    let mut free = limit.saturating_sub(sent + earlier.len());
    let mut pending: Vec<&str> = workers
        .iter()
        .filter(|t| t.state == TargetState::SignalPending)
        .filter(|t| only.is_none_or(|only| only.contains(&t.name)))
        .filter(|t| !earlier.iter().any(|e| e.name == t.name))
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
    if !signal_target(inputs, decision, run, command, status, Group::Workers, &chosen) {
        return Decided::Again;
    }
    status.not_ready_since = None;
    let sent_now = sent + chosen.len();
    match first_not_ready {
        Some(name) if free > 0 => {
            status.state = PlanStateType::Schedulable;
            status.reason = Some(format!("waiting for worker {name} to become Ready"));
        }
        Some(_) | None if sent_now == 0 && !earlier.is_empty() => {
            hold_for_earlier_run(decision, status, &earlier);
        }
        Some(_) | None => {
            status.state = PlanStateType::SchedulableWait;
            status.reason = only.filter(|only| !only.is_empty()).map(|only| {
                format!(
                    "canary: worker(s) {} go first; the others wait for them{}",
                    only.join(", "),
                    if command.soak().is_zero() {
                        String::new()
                    } else {
                        format!(" and a soak of {}", duration::format(command.soak()))
                    }
                )
            });
        }
    }
    Decided::Done(Outcome::Running)
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
