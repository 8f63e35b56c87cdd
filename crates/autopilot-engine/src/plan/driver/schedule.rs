//! Scheduling: drive the active command of a running plan (DESIGN §4).
//!
//! The active command is the first one not `Completed`; commands run strictly in order and
//! the next one starts in the same pass once the previous one completes. Within a k0s
//! command, controllers go one at a time and all before any worker, each only while every
//! controller of the command answers `/readyz`; workers go at most `limits.concurrent` at a
//! time, Ready nodes only (k0s), in name order.

use autopilot_api::signal::{SignalData, SignalPhase, SignalStatus, format_timestamp};
use autopilot_api::v1beta2::{
    EarlierRunSignal, PlanStateType, PlanStatus, TargetState, TargetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use autopilot_api::prestage::PrestageState;
use autopilot_api::{duration, keys};

use crate::plan::driver::progress::{CommandPass, Outcome, end, release_hold, set_state};
use crate::plan::model::command::{Command, Group, RunIdentity, targets, targets_mut};
use crate::plan::model::decision::{Decision, Effect, ObjectKind, SignalTarget, paused_steady};
use crate::plan::model::inputs::{Gaps, Inputs, ObservedSignal, TargetObject};
use crate::plan::model::phases::reasons;
use crate::plan::model::text::cap_node_reason;
use crate::plan::rules::gates::GateFailure;
use crate::plan::rules::window::Closed;
use crate::plan::rules::{soak, waves};

/// Drive the run's commands in order. Returns the plan state the pass ends in, or `None`
/// when the status is not one this machine can drive (left as it is).
pub(in crate::plan) fn schedule(
    inputs: &Inputs<'_>,
    gaps: &mut Gaps<'_>,
    decision: &mut Decision,
    status: &mut PlanStatus,
) -> Option<PlanStateType> {
    let run = RunIdentity { plan_id: status.plan_id.clone()?, run_id: status.run_id.clone()? };
    if status.rollback.is_some() {
        return Some(crate::plan::driver::rollback::drive(inputs, gaps, decision, status, &run));
    }
    if crate::plan::driver::rollback::wanted_after_end(inputs, status) {
        crate::plan::driver::rollback::start(
            inputs,
            status,
            crate::plan::driver::rollback::by_operator(),
        );
        return Some(crate::plan::driver::rollback::drive(inputs, gaps, decision, status, &run));
    }
    let frozen_windows = status.windows.clone();
    let windows = crate::plan::rules::window::RunSchedule::compile_or_hold(frozen_windows.as_ref());
    let mut roll_back = None;
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
            | PlanStateType::PreflightFailed
            | PlanStateType::RolledBack => return Some(command_status.state),
        }
        if let Command::Preflight(_) = command
            && crate::plan::driver::rollback::requested(inputs, Some(&run.plan_id))
        {
            // A preflight command changes nothing: the rollback need not wait for it.
            roll_back = Some(crate::plan::driver::rollback::by_operator());
            break;
        }
        let label = format!("command {} ({})", command_status.id, command.name());
        let mut pass = CommandPass {
            inputs,
            gaps,
            decision,
            run: &run,
            command,
            status: command_status,
            label,
            windows: &windows,
        };
        match pass.step() {
            Outcome::Completed => continue,
            Outcome::Running | Outcome::Ended => return Some(command_status.state),
            Outcome::RollBack(why) => {
                roll_back = Some(why);
                break;
            }
        }
    }
    if let Some(why) = roll_back {
        crate::plan::driver::rollback::start(inputs, status, why);
        return Some(crate::plan::driver::rollback::drive(inputs, gaps, decision, status, &run));
    }
    Some(PlanStateType::Completed)
}

/// What [`CommandPass::decide`] concluded.
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
    /// The run is to be rolled back (a gate with `onFailure: Rollback` failed, or an
    /// operator asked); the text says why.
    RollBack(String),
}

/// A node of a group's object kind that works on a signal other than this command's of this
/// run, and has made progress within the command's progress deadline.
struct EarlierSignal {
    /// Object name.
    name: String,
    /// Where the node is (`no answer yet` before it answered).
    phase: &'static str,
}

impl CommandPass<'_, '_> {
    /// One pass over the command: read its targets back, enforce the progress deadline,
    /// then decide. Returns where the pass left the command.
    fn step(&mut self) -> Outcome {
        // 1. Read back every target that is not done: the node's own progress, and the
        //    signals this run already wrote.
        let first_signal = self.decision.signals.len();
        // A set: at 10,000 workers a list searched once per completed name took most of
        // the leader's time late in a run.
        let before: std::collections::HashSet<String> =
            self.completed_names().into_iter().collect();
        let mut resends = self.read_back_targets();

        // 2. A node that showed no progress for the command's deadline fails (controllers
        //    too: an in-flight controller is not held by the readiness grace).
        self.enforce_progress_deadline();

        // 2a. Pre-staging (`prestage: true`): what the asked nodes report, and their deadline.
        self.read_back_staging();

        // 2b. Health gates (DESIGN §15): nodes that completed in this pass open their runs,
        //     and every open run is looked at.
        let completed_now: Vec<String> =
            self.completed_names().into_iter().filter(|name| !before.contains(name)).collect();
        let gate_failure = self.run_gates(&completed_now);

        // 3. Decide. A preflight command signals every target at once and judges the reports
        //    (`crate::plan::rules::checks`). An update command: a pass that finds a target without a
        //    platform when it is about to signal it marks the target failed and decides again
        //    (at most once per target).
        let outcome = if let Command::Preflight(preflight) = self.command {
            crate::plan::driver::preflight::decide(self, preflight)
        } else {
            loop {
                match self.decide(gate_failure.as_ref()) {
                    Decided::Again => continue,
                    Decided::Done(outcome) => break outcome,
                }
            }
        };
        if let Outcome::Running = outcome
            && self.status.reason.is_none()
            && let Some(run) = self.status.gating.iter().find(|run| run.since.is_some())
        {
            self.status.reason = Some(format!(
                "waiting for the gates of {}: {}",
                run.nodes.join(", "),
                run.waiting.as_deref().unwrap_or("not judged yet")
            ));
        }
        self.count_staged();
        if let Outcome::Running = outcome {
            // Only targets still in flight get their signal again (a target the progress
            // deadline just failed does not).
            resends.retain(|effect| self.still_in_flight(effect));
            self.decision.signals.splice(first_signal..first_signal, resends);
        }
        outcome
    }

    /// The names of the command's targets that completed.
    fn completed_names(&self) -> Vec<String> {
        let command = self.command;
        command
            .groups()
            .iter()
            .flat_map(|&group| targets(self.status, command, group))
            .filter(|t| t.state == TargetState::SignalCompleted)
            .map(|t| t.name.clone())
            .collect()
    }

    /// Read back every target of the command that is not done: a target whose object is
    /// gone is `MissingSignalNode`; one whose object carries the signal the status records
    /// for it (this run's, with the recorded `created`) takes the node's progress from it.
    /// A signal the status does not record (copied onto the node by someone else) is not
    /// the leader's: it never counts, and a signalled node gets its own signal back.
    /// Returns the signals to write: those of `SignalSent` targets whose object does not
    /// carry them, and the `ApplyingUpdate` of nodes whose drain the leader finished (the
    /// status records the drain first).
    pub(in crate::plan) fn read_back_targets(&mut self) -> Vec<Effect> {
        let (inputs, run, command) = (self.inputs, self.run, self.command);
        let index = self.status.id;
        let mut writes = Vec::new();
        for &group in command.groups() {
            let kind = command.object_kind(group);
            let objects = inputs.objects(kind);
            let Some(group_targets) = targets_mut(self.status, command, group) else { continue };
            // A node that completed and then rolled itself back after the update (its
            // post-update watch) answers `Failed` on the signal it completed: a failure. Any
            // other `Failed` there is a refusal of the signal written back after its end
            // (`crate::authorize::not_rewound`): the node stays completed.
            for target in group_targets
                .iter_mut()
                .filter(|target| target.state == TargetState::SignalCompleted)
            {
                let Some(signal) = objects
                    .get(&target.name)
                    .and_then(|o| run.signal_on(o, index, command))
                    .filter(|signal| recorded(target, signal))
                else {
                    continue;
                };
                if crate::agent::rolled_back_after_update(signal).is_some() {
                    read_back(target, signal, inputs);
                }
            }
            for target in group_targets.iter_mut().filter(|target| !target.state.is_terminal()) {
                let Some(object) = objects.get(&target.name) else {
                    set_state(target, TargetState::MissingSignalNode, inputs);
                    target.reason = Some(format!("{kind} {} no longer exists", target.name));
                    continue;
                };
                if let Some(signal) =
                    run.signal_on(object, index, command).filter(|signal| recorded(target, signal))
                {
                    read_back(target, signal, inputs);
                    writes.extend(record_drain(target, object, signal, kind, inputs));
                    continue;
                }
                if target.state == TargetState::SignalSent {
                    // Crash safety: the status says SignalSent but the object does not carry
                    // the signal (a crash between the status write and the signal write, a
                    // write that lost a conflict, or a signal someone wrote over). Send the
                    // identical signal again.
                    let created = target
                        .signalled
                        .clone()
                        .unwrap_or_else(|| format_timestamp(target.last_updated_timestamp.0));
                    match command.signal_for(run, index, object, target, created) {
                        Ok(data) => {
                            writes.push(Effect::Signal {
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
        writes
    }

    /// Whether a signal effect goes to a target that is still `SignalSent`.
    pub(in crate::plan) fn still_in_flight(&self, effect: &Effect) -> bool {
        let command = self.command;
        match effect {
            Effect::Signal { target, .. } => command.groups().iter().any(|&group| {
                command.object_kind(group) == target.kind
                    && targets(self.status, command, group)
                        .iter()
                        .any(|t| t.name == target.name && t.state == TargetState::SignalSent)
            }),
            Effect::CreatePod(_)
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => false,
        }
    }

    /// The failure policy, the steering and the rollout shape, in that order, then
    /// scheduling.
    fn decide(&mut self, gate_failure: Option<&GateFailure>) -> Decided {
        let command = self.command;
        let in_flight: Vec<String> = command
            .groups()
            .iter()
            .flat_map(|&group| targets(self.status, command, group))
            .filter(|t| t.state == TargetState::SignalSent)
            .map(|t| t.name.clone())
            .collect();
        let operator_rollback =
            crate::plan::driver::rollback::requested(self.inputs, Some(&self.run.plan_id))
                .then(crate::plan::driver::rollback::by_operator);
        let gate_rollback = gate_failure.filter(|f| f.rollback).map(|f| f.why.clone());
        let gate_halt = gate_failure.filter(|f| !f.rollback).map(|f| f.why.clone());
        let halt = operator_rollback
            .or(gate_rollback)
            .map(Halt::RollBack)
            .or_else(|| self.failures_past_budget().or(gate_halt.clone()).map(Halt::Failed))
            .or_else(|| self.inputs.steering.aborted.then_some(Halt::Aborted));

        // Check 0: a rollback stops the command; nodes in flight finish first.
        if let Some(Halt::RollBack(why)) = &halt {
            if !in_flight.is_empty() {
                let why = format!("rolling back ({why})");
                return Decided::Done(self.stopping(&why, &in_flight));
            }
            return Decided::Done(Outcome::RollBack(why.clone()));
        }
        // Check 1: failures past the budget (or a failed gate) stop the command; nodes in
        // flight finish first.
        if let Some(Halt::Failed(why)) = &halt {
            if !in_flight.is_empty() {
                return Decided::Done(self.stopping(why, &in_flight));
            }
            let ended = self.end_on_target_failure().unwrap_or_else(|| {
                end(self.status, PlanStateType::ApplyFailed, format!("{}: {why}", self.label));
                Outcome::Ended
            });
            return Decided::Done(ended);
        }
        // Check 2: every target done (completed, or failed within the budget), and no gate
        // open.
        let all_done = !self.gates_open()
            && command.groups().iter().all(|&group| {
                targets(self.status, command, group).iter().all(|t| t.state.is_terminal())
            });
        if all_done {
            release_hold(self.status);
            self.status.state = PlanStateType::Completed;
            self.status.description = self.failed_within_budget();
            return Decided::Done(Outcome::Completed);
        }
        // Check 3: an abort stops the command; nodes in flight finish first.
        if let Some(Halt::Aborted) = halt {
            return Decided::Done(self.stop_aborted(&in_flight));
        }
        // Check 4: pre-staging: no node is signalled before every target staged the payload
        // (a pause holds it too, see `crate::plan::rules::prestage::may_stage`).
        match self.prestage() {
            Some(crate::plan::driver::staging::Staging::Held(outcome)) => {
                return Decided::Done(outcome);
            }
            Some(crate::plan::driver::staging::Staging::Again) => return Decided::Again,
            None => {}
        }
        // Check 4b: a paused plan signals no new node.
        if self.inputs.steering.paused {
            return Decided::Done(self.hold_paused(&in_flight));
        }
        // Check 5: controllers first, one at a time, each only while all plan controllers are
        // ready and no controller works on a signal of an earlier run. Workers wait until
        // every controller is done (version-skew rule).
        let controllers = targets(self.status, command, Group::Controllers);
        if controllers.iter().any(|t| !t.state.is_terminal()) || self.gating(Group::Controllers) > 0
        {
            return self.schedule_controllers();
        }
        // Check 6: workers: canaries first and their soak, then up to the concurrency limit,
        // in name order.
        self.schedule_workers()
    }

    /// The aborted command: it waits for the nodes in flight, then ends `Aborted`.
    fn stop_aborted(&mut self, in_flight: &[String]) -> Outcome {
        let why = format!("the plan is aborted ({} annotation)", keys::ANNOTATION_ABORT);
        if !in_flight.is_empty() {
            return self.stopping(&why, in_flight);
        }
        let command = self.command;
        let done = command
            .groups()
            .iter()
            .flat_map(|&group| targets(self.status, command, group))
            .filter(|t| t.state == TargetState::SignalCompleted)
            .count();
        end(
            self.status,
            PlanStateType::Aborted,
            format!(
                "{label}: aborted by the {} annotation; {done} node(s) had completed and no \
                 node was signalled after the abort",
                keys::ANNOTATION_ABORT,
                label = self.label,
            ),
        );
        Outcome::Ended
    }

    /// Hold the paused command: it signals no new node, naming the nodes in flight.
    fn hold_paused(&mut self, in_flight: &[String]) -> Outcome {
        let status = &mut *self.status;
        status.state = PlanStateType::SchedulableWait;
        status.not_ready_since = None;
        let detail = if in_flight.is_empty() {
            "no node is in flight".to_owned()
        } else {
            format!(
                "waiting for {} node(s) in flight: {}",
                in_flight.len(),
                crate::plan::model::text::name_list(in_flight)
            )
        };
        self.decision.hold_steady(status, reasons::PLAN_PAUSED, paused_steady(), &detail);
        Outcome::Running
    }

    /// The controllers, one at a time: wait while one is in flight or a controller works on
    /// an earlier run's signal, else signal the next.
    fn schedule_controllers(&mut self) -> Decided {
        let controllers = targets(self.status, self.command, Group::Controllers);
        if controllers.iter().any(|t| t.state == TargetState::SignalSent)
            || self.gating(Group::Controllers) > 0
        {
            release_hold(self.status);
            self.status.state = PlanStateType::SchedulableWait;
            return Decided::Done(Outcome::Running);
        }
        let room = controllers.len();
        let earlier = self.earlier_in_flight(Group::Controllers, room);
        if !earlier.is_empty() {
            self.hold_for_earlier_run(&earlier);
            return Decided::Done(Outcome::Running);
        }
        self.signal_next_controller()
    }

    /// The workers: the canaries first, then their soak, then the others up to the
    /// concurrency limit; with `groupBy`, one group at a time (`crate::plan::rules::waves`).
    fn schedule_workers(&mut self) -> Decided {
        let canaries = self.canaries();
        let canaries_done = canaries.iter().all(|name| {
            targets(self.status, self.command, Group::Workers)
                .iter()
                .any(|t| &t.name == name && t.state == TargetState::SignalCompleted)
        });
        if !canaries_done {
            return self.signal_workers(Some(&canaries));
        }
        if let Some(outcome) = self.apply(soak::canaries(&self.view(), &canaries)) {
            return Decided::Done(outcome);
        }
        let gates_open = self.gates_open();
        if let Some(outcome) = self.apply(waves::between_groups(&self.view(), gates_open)) {
            return Decided::Done(outcome);
        }
        self.signal_workers(None)
    }

    /// Nodes the command would signal are held by their window: look again when it opens,
    /// and when `nothing_out` (no node of the group signalled or in flight) hold the command
    /// with the window's reason. Returns the outcome when the command is held.
    fn wait_for_window(&mut self, closed: &Closed, nothing_out: bool) -> Option<Outcome> {
        if let Some(wait) = closed.wait_from(self.inputs.now) {
            self.decision.requeue_after(wait);
        }
        if !nothing_out {
            return None;
        }
        self.status.state = PlanStateType::SchedulableWait;
        self.status.not_ready_since = None;
        self.status.reason = Some(closed.reason());
        self.decision.hold(self.status.id, reasons::WAITING_FOR_WINDOW);
        Some(Outcome::Running)
    }

    /// The command stops signalling new nodes and waits for the ones in flight.
    fn stopping(&mut self, why: &str, in_flight: &[String]) -> Outcome {
        let status = &mut *self.status;
        status.state = PlanStateType::SchedulableWait;
        status.not_ready_since = None;
        let detail = format!(
            "no new node is signalled, waiting for {} node(s) in flight to finish: {}",
            in_flight.len(),
            crate::plan::model::text::name_list(in_flight)
        );
        self.decision.hold_steady(
            status,
            reasons::PLAN_STOPPING,
            format!("stopping: {why}"),
            &detail,
        );
        Outcome::Running
    }

    /// The failures that stop the command, if any: a controller's, a canary's, or more
    /// failed workers than `limits.maxFailures`.
    fn failures_past_budget(&self) -> Option<String> {
        let failed = |group: Group| -> Vec<&str> {
            targets(self.status, self.command, group)
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
        let canaries = self.canaries();
        let failed_canaries: Vec<&str> =
            workers.iter().copied().filter(|name| canaries.iter().any(|c| c == name)).collect();
        if !failed_canaries.is_empty() {
            return Some(format!("canary worker {} failed", failed_canaries.join(", ")));
        }
        let budget = self.command.max_failures();
        (workers.len() > budget).then(|| {
            let mut why = format!("worker {} failed", workers.join(", "));
            if budget > 0 {
                why.push_str(&format!(" (limits.maxFailures is {budget})"));
            }
            why
        })
    }

    /// The description of a command that completed with failed workers within its budget.
    fn failed_within_budget(&self) -> Option<String> {
        let kind = self.command.object_kind(Group::Workers);
        let lines: Vec<String> = targets(self.status, self.command, Group::Workers)
            .iter()
            .filter(|t| t.state.is_failure())
            .map(|t| {
                let reason = t.reason.as_deref().unwrap_or("no reason given");
                format!("{kind} {} ({}): {reason}", t.name, t.state)
            })
            .collect();
        (!lines.is_empty()).then(|| {
            format!(
                "{}: completed with {} failed worker(s), within limits.maxFailures {}: {}",
                self.label,
                lines.len(),
                self.command.max_failures(),
                lines.join("; ")
            )
        })
    }

    /// The canary workers: the first `limits.canary` worker targets by name (none when
    /// unset); with `groupBy`, those of the first group.
    fn canaries(&self) -> Vec<String> {
        if let Some(names) = waves::group_canaries(&self.view()) {
            return names;
        }
        // A worker NewPlan failed for its own report is no canary: it proves nothing.
        let mut names: Vec<String> = targets(self.status, self.command, Group::Workers)
            .iter()
            .filter(|t| !crate::plan::model::command::refused_by_own_report(t))
            .map(|t| t.name.clone())
            .collect();
        names.sort_unstable();
        names.truncate(self.command.canary());
        names
    }

    /// Every object of `group`'s kind still working on another signal this Plan wrote (an
    /// earlier run's, or this run's for another command): it counts against the limits like one of this run's nodes. Only runs this Plan
    /// wrote count (DESIGN §14: a signal that names no run, or another Plan's run, is not
    /// ours and holds nothing), and at most `room` of them are looked at: no more can hold
    /// the command, and the status keeps one entry for each (`earlierRuns`). A signal
    /// counts while it shows progress within the command's progress deadline, measured from
    /// when the leader first saw it in its phase (kept in the status, so a new leader goes
    /// on from there), never from a node's timestamp; so an abandoned or future-dated one
    /// holds nothing for longer than the deadline. The pass is requeued for when the first
    /// one stops counting.
    fn earlier_in_flight(&mut self, group: Group, room: usize) -> Vec<EarlierSignal> {
        let (inputs, command) = (self.inputs, self.command);
        let deadline = command.progress_timeout(inputs.policy.node_progress_timeout);
        let previous = std::mem::take(&mut self.status.earlier_runs);
        let seen_before = |name: &str, run: &str, phase: Option<SignalPhase>| {
            previous.iter().find(|e| e.name == name && e.run_id == run && e.phase == phase)
        };
        let mut candidates: Vec<EarlierRunSignal> = self
            .others_in_flight(group)
            .into_iter()
            .map(|(name, run, phase)| {
                let since = seen_before(&name, &run, phase).map(|e| e.since.clone());
                EarlierRunSignal {
                    name,
                    run_id: run,
                    phase,
                    since: since.unwrap_or(Time(inputs.stamp)),
                }
            })
            .collect();
        // The ones already being aged keep their place (a newcomer earlier by name must not
        // push one out and have its age start again later).
        candidates.sort_by_key(|e| seen_before(&e.name, &e.run_id, e.phase).is_none());
        candidates.truncate(room.max(1));
        let mut found = Vec::new();
        for entry in &candidates {
            let remaining = jiff::SignedDuration::try_from(deadline)
                .ok()
                .and_then(|deadline| deadline.checked_sub(inputs.elapsed_since(entry.since.0)));
            match remaining {
                // Aged out: kept in the status (so its age does not start again), not counted.
                Some(remaining) if !remaining.is_positive() => continue,
                Some(remaining) => {
                    if let Ok(remaining) = std::time::Duration::try_from(remaining) {
                        self.decision.requeue_after(remaining);
                    }
                }
                None => {}
            }
            let phase = entry.phase.map_or("no answer yet", SignalPhase::as_str);
            found.push(EarlierSignal { name: entry.name.clone(), phase });
        }
        candidates.sort_by(|a, b| a.name.cmp(&b.name));
        self.status.earlier_runs = candidates;
        // Named in name order: the order they were kept in depends on what the previous
        // pass saw, and a second pass over the same snapshot must say the same.
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }

    /// The objects of `group`'s kind working on a signal this Plan wrote that is not this
    /// command's signal the status records for them (an earlier run's, another command's, or
    /// one of this run the status does not record): name, run and phase, in name order.
    fn others_in_flight(&self, group: Group) -> Vec<(String, String, Option<SignalPhase>)> {
        let (inputs, command) = (self.inputs, self.command);
        let index = self.status.id;
        let mut found = Vec::new();
        // The targets by name, for the objects that carry a signal of this command (at
        // 10,000 workers a list searched per object took seconds).
        let mut by_name: Option<std::collections::HashMap<&str, &TargetStatus>> = None;
        for (name, object) in inputs.objects(command.object_kind(group)) {
            if let Some(signal) = self.run.signal_on(object, index, command) {
                let by_name = by_name.get_or_insert_with(|| {
                    targets(self.status, command, group)
                        .iter()
                        .map(|t| (t.name.as_str(), t))
                        .collect()
                });
                // The leader's own signal: read back as the target's progress. One the
                // status does not record (copied onto the node, or a status that was lost)
                // is not the leader's: it holds a slot while it is in flight, like an
                // earlier run's, and its node is signalled once it ended.
                if by_name.get(name.as_str()).is_some_and(|target| recorded(target, signal)) {
                    continue;
                }
            }
            let ObservedSignal::Valid(data) = &object.signal else { continue };
            // This run's signal of another command, or an earlier run's: signals this Plan wrote.
            let ours = |run: &&str| *run == self.run.run_id || self.run.earlier_of_this_plan(run);
            let Some(run) = data.run_id.as_deref().filter(ours) else {
                continue;
            };
            let phase = data.status.as_ref().map(|node| node.status);
            match phase {
                None
                | Some(
                    SignalPhase::Downloading
                    | SignalPhase::Cordoning
                    | SignalPhase::ApplyingUpdate
                    | SignalPhase::Restarting
                    | SignalPhase::Uncordoning,
                ) => found.push((name.clone(), run.to_owned(), phase)),
                Some(
                    SignalPhase::Completed | SignalPhase::Failed | SignalPhase::FailedDownload,
                ) => {}
            }
        }
        found
    }

    /// Hold the command while nodes work on an earlier run's signal and no slot is free.
    fn hold_for_earlier_run(&mut self, earlier: &[EarlierSignal]) {
        let names: Vec<String> =
            earlier.iter().map(|e| format!("{} ({})", e.name, e.phase)).collect();
        let status = &mut *self.status;
        status.state = PlanStateType::SchedulableWait;
        status.not_ready_since = None;
        let detail =
            format!("{} node(s): {}", earlier.len(), crate::plan::model::text::name_list(&names));
        self.decision.hold_steady(
            status,
            reasons::EARLIER_RUN_IN_FLIGHT,
            "waiting for nodes still working on a signal of an earlier run".to_owned(),
            &detail,
        );
    }

    /// Fail every `SignalSent` target whose signal showed no progress for the command's
    /// progress deadline, and ask for a pass when the earliest remaining deadline is due (a
    /// stuck node sends no event).
    ///
    /// Progress is the node's signal status changing phase: the clock starts at the target's
    /// `lastUpdatedTimestamp`, the leader's time when it signalled the node or first saw its
    /// current phase ([`read_back`]). A node's own timestamp counts for nothing: one dated in
    /// the future cannot hold the plan, one in the past cannot fail the node early.
    /// A failed node's signal gets the status `Failed` with the same reason, so the node
    /// stops and an autopilot cordon is undone as for any other failure.
    pub(in crate::plan) fn enforce_progress_deadline(&mut self) {
        let (inputs, run, command) = (self.inputs, self.run, self.command);
        let index = self.status.id;
        let deadline = command.progress_timeout(inputs.policy.node_progress_timeout);
        for &group in command.groups() {
            let kind = command.object_kind(group);
            let objects = inputs.objects(kind);
            let Some(group_targets) = targets_mut(self.status, command, group) else { continue };
            for target in group_targets.iter_mut().filter(|t| t.state == TargetState::SignalSent) {
                let signal =
                    objects.get(&target.name).and_then(|o| run.signal_on(o, index, command));
                let node_status = signal.and_then(|signal| signal.status.as_ref());
                let elapsed = inputs.elapsed_since(target.last_updated_timestamp.0);
                // A deadline too long to represent never runs out.
                let remaining = jiff::SignedDuration::try_from(deadline)
                    .ok()
                    .and_then(|deadline| deadline.checked_sub(elapsed));
                match remaining {
                    Some(remaining) if !remaining.is_positive() => {}
                    Some(remaining) => {
                        if let Ok(remaining) = std::time::Duration::try_from(remaining) {
                            self.decision.requeue_after(remaining);
                        }
                        continue;
                    }
                    None => continue,
                }
                let phase =
                    node_status.map_or(TargetState::SignalSent.as_str(), |s| s.status.as_str());
                let reason = format!("no progress in {phase} for {}", duration::format(deadline));
                // The node's signal is told in the same pass (see `tell_failed_nodes`).
                set_state(target, TargetState::SignalApplyFailed, inputs);
                target.phase = Some(SignalPhase::Failed);
                target.reason = Some(reason);
            }
        }
    }

    /// Signal the first pending controller by name, if every controller of the command is
    /// ready; otherwise hold the command, up to the readiness grace.
    fn signal_next_controller(&mut self) -> Decided {
        let controllers = targets(self.status, self.command, Group::Controllers);
        let mut names: Vec<&str> = controllers.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        let next = controllers
            .iter()
            .filter(|t| t.state == TargetState::SignalPending)
            .map(|t| t.name.clone())
            .min();
        if let Some((name, why)) = self.gaps.first_not_ready(&names) {
            return Decided::Done(self.hold_for_controller(&name, &why));
        }
        release_hold(self.status);
        let Some(next) = next else {
            // Not reachable: the caller found a controller neither done nor sent.
            self.status.state = PlanStateType::SchedulableWait;
            return Decided::Done(Outcome::Running);
        };
        let staged = targets(self.status, self.command, Group::Controllers)
            .iter()
            .any(|t| t.name == next && t.prestage == Some(PrestageState::Staged));
        if let Err(closed) = self.windows.gate(Group::Controllers, &next, self.inputs.now, staged)
            && let Some(outcome) = self.wait_for_window(&closed, true)
        {
            return Decided::Done(outcome);
        }
        if !self.signal_target(Group::Controllers, std::slice::from_ref(&next)) {
            return Decided::Again;
        }
        self.open_batch(&[next]);
        self.status.state = PlanStateType::SchedulableWait;
        Decided::Done(Outcome::Running)
    }

    /// Hold the command for a not-ready controller, for as long as it stays not ready.
    ///
    /// As k0s does since 1.35, a controller that is not ready never ends the plan: nothing
    /// has been done to it, and a control plane that recovers goes on updating. Past the
    /// readiness grace the plan says so: its `Stalled` condition turns True with reason
    /// `ControllerNotReady` (see [`crate::plan::driver::conditions`]) and a Warning Event
    /// goes out, so a GitOps engine or an operator sees a plan that no longer moves; aborting
    /// it ends it.
    fn hold_for_controller(&mut self, name: &str, why: &str) -> Outcome {
        let inputs = self.inputs;
        let since = self.status.not_ready_since.as_ref().map_or(inputs.stamp, |time| time.0);
        let grace = inputs.policy.readiness_grace;
        let elapsed = inputs.elapsed_since(since);
        // A grace too long to represent never runs out.
        let remaining =
            jiff::SignedDuration::try_from(grace).ok().and_then(|grace| grace.checked_sub(elapsed));
        let status = &mut *self.status;
        status.state = PlanStateType::Schedulable;
        status.reason = Some(format!("waiting for controller {name} to become ready: {why}"));
        status.not_ready_since = Some(Time(since));
        self.decision.hold(status.id, reasons::CONTROLLER_NOT_READY);
        // Look again after the recheck interval, and at the end of the grace, when the plan
        // starts to say it is stalled.
        let recheck = inputs.policy.readiness_recheck;
        let until_grace = remaining
            .filter(|remaining| remaining.is_positive())
            .and_then(|remaining| std::time::Duration::try_from(remaining).ok());
        self.decision.requeue_after(until_grace.map_or(recheck, |until| recheck.min(until)));
        Outcome::Running
    }

    /// Fill the free worker slots with pending workers in name order (k0s: Ready nodes
    /// only), only from `only` when given (the canaries), and with `groupBy` only from the
    /// current group, whose size a percentage counts. Nodes working on an earlier run's
    /// signal take slots too, and are not signalled until they finished.
    fn signal_workers(&mut self, only: Option<&[String]>) -> Decided {
        let command = self.command;
        let wave = waves::wave(&self.view());
        let group_size = wave.as_ref().map_or_else(
            || targets(self.status, command, Group::Workers).len(),
            |wave| wave.members.len(),
        );
        let limit = command.worker_concurrency(group_size);
        let earlier = self.earlier_in_flight(Group::Workers, limit);
        let workers = targets(self.status, command, Group::Workers);
        let sent = workers.iter().filter(|t| t.state == TargetState::SignalSent).count()
            + self.gating(Group::Workers);
        let mut free = limit.saturating_sub(sent + earlier.len());
        if self.in_waves() && (sent > 0 || self.gates_open()) {
            // Waves: the next batch waits until the last one is done and its gates passed.
            free = 0;
        }
        let pending = self.pending_workers(only, wave.as_ref(), &earlier);
        let Choice { chosen, first_not_ready, window_closed } = self.choose_workers(pending, free);
        if !self.signal_target(Group::Workers, &chosen) {
            return Decided::Again;
        }
        if let Some(closed) = window_closed
            && let Some(outcome) = self.wait_for_window(&closed, chosen.is_empty() && sent == 0)
        {
            return Decided::Done(outcome);
        }
        self.open_batch(&chosen);
        self.status.not_ready_since = None;
        let sent_now = sent + chosen.len();
        // In waves a worker that is not Ready waits for the next wave anyway once one is
        // out: it holds nothing.
        let wave_out = self.in_waves() && sent_now > 0;
        match first_not_ready {
            Some(name) if free > chosen.len() && !wave_out => {
                self.status.state = PlanStateType::Schedulable;
                self.status.reason = Some(format!("waiting for worker {name} to become Ready"));
            }
            Some(_) | None if sent_now == 0 && !earlier.is_empty() => {
                self.hold_for_earlier_run(&earlier);
            }
            Some(_) | None
                if only.is_none_or(<[String]>::is_empty)
                    && !self.status.gating.iter().any(|run| run.since.is_some())
                    && let Some(wave) = &wave =>
            {
                // Which group goes (a gate run being judged names itself instead).
                self.status.state = PlanStateType::SchedulableWait;
                self.status.reason = Some(wave.updating());
                self.decision.hold(self.status.id, reasons::GROUP_UPDATING);
            }
            Some(_) | None => self.name_canaries(only),
        }
        Decided::Done(Outcome::Running)
    }

    /// The pending workers that may be chosen, in name order, each with whether it staged
    /// its payload: only from `only` when given (the canaries), only from the current `wave`
    /// with `groupBy`, and none working on an `earlier` run's signal.
    fn pending_workers(
        &self,
        only: Option<&[String]>,
        wave: Option<&crate::plan::rules::waves::Wave>,
        earlier: &[EarlierSignal],
    ) -> Vec<(String, bool)> {
        // Each pass looks at every pending worker of a fleet of thousands: sets, not lists.
        let wave_members: Option<std::collections::HashSet<&str>> =
            wave.map(|wave| wave.members.iter().map(String::as_str).collect());
        // A node that staged its payload downloads nothing more: no download window for it.
        let mut pending: Vec<(String, bool)> = targets(self.status, self.command, Group::Workers)
            .iter()
            .filter(|t| t.state == TargetState::SignalPending)
            .filter(|t| only.is_none_or(|only| only.contains(&t.name)))
            .filter(|t| wave_members.as_ref().is_none_or(|wave| wave.contains(t.name.as_str())))
            .filter(|t| !earlier.iter().any(|e| e.name == t.name))
            .map(|t| (t.name.clone(), t.prestage == Some(PrestageState::Staged)))
            .collect();
        pending.sort_unstable();
        pending
    }

    /// Up to `free` of the `pending` workers, in their order: Ready ones (k0s) whose window
    /// is open; with the first that is not Ready and the earliest closed window seen while
    /// a slot was free.
    fn choose_workers(&self, pending: Vec<(String, bool)>, mut free: usize) -> Choice {
        let objects = self.inputs.objects(self.command.object_kind(Group::Workers));
        let mut choice = Choice { chosen: Vec::new(), first_not_ready: None, window_closed: None };
        for (name, staged) in pending {
            if free == 0 {
                // No room: the rest waits for a slot (which node is not Ready, or outside
                // its window, only matters while a slot is free).
                break;
            }
            let ready = !self.command.gates_workers_on_ready()
                || objects.get(&name).is_some_and(|object| object.ready);
            if !ready {
                choice.first_not_ready.get_or_insert(name);
            } else if let Err(closed) =
                self.windows.gate(Group::Workers, &name, self.inputs.now, staged)
            {
                choice.window_closed = Some(Closed::earliest(choice.window_closed, closed));
            } else {
                choice.chosen.push(name);
                free -= 1;
            }
        }
        choice
    }

    /// The command runs: `SchedulableWait`, naming the canaries that go first (`only`) and
    /// their soak, if any.
    fn name_canaries(&mut self, only: Option<&[String]>) {
        let soak = self.command.soak();
        self.status.state = PlanStateType::SchedulableWait;
        self.status.reason = only.filter(|only| !only.is_empty()).map(|only| {
            format!(
                "canary: worker(s) {} go first; the others wait for them{}",
                only.join(", "),
                if soak.is_zero() {
                    String::new()
                } else {
                    format!(" and a soak of {}", duration::format(soak))
                }
            )
        });
    }

    /// End the command if a target failed: a node reported a failure (`ApplyFailed`), an
    /// object disappeared (`IncompleteTargets`, as k0s since 1.35) or a platform went away (`MissingPlatform`),
    /// in that order of precedence. The description names every such node and why.
    fn end_on_target_failure(&mut self) -> Option<Outcome> {
        let command = self.command;
        let failures = [
            (TargetState::SignalApplyFailed, PlanStateType::ApplyFailed),
            (TargetState::MissingSignalNode, PlanStateType::IncompleteTargets),
            (TargetState::MissingPlatform, PlanStateType::MissingPlatform),
        ];
        for (target_state, command_state) in failures {
            let mut lines = Vec::new();
            for &group in command.groups() {
                let kind = command.object_kind(group);
                let failed = targets(self.status, command, group);
                for target in failed.iter().filter(|t| t.state == target_state) {
                    let reason = target.reason.as_deref().unwrap_or("no reason given");
                    lines.push(match target_state {
                        TargetState::SignalApplyFailed
                            if crate::plan::model::command::refused_by_own_report(target) =>
                        {
                            format!("{kind} {}: {reason}", target.name)
                        }
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
                end(self.status, command_state, format!("{}: {}", self.label, lines.join("; ")));
                return Some(Outcome::Ended);
            }
        }
        None
    }
}

/// The signal writes that tell nodes they failed: every `SignalApplyFailed` target of the
/// run whose object still carries this run's signal in flight (no status yet, or a phase
/// short of `Completed`, `Failed` and `FailedDownload`) gets that signal back with the
/// status `Failed` and the target's reason. This is how a node that missed its progress
/// deadline stops and has an autopilot cordon undone. Emitted on every pass until the
/// object shows it, also after the run ended, so a write lost to a conflict is repeated.
pub(in crate::plan) fn tell_failed_nodes(inputs: &Inputs<'_>, status: &PlanStatus) -> Vec<Effect> {
    let (Some(plan_id), Some(run_id)) = (status.plan_id.clone(), status.run_id.clone()) else {
        return Vec::new();
    };
    let run = RunIdentity { plan_id, run_id };
    let mut effects = Vec::new();
    for command_status in &status.commands {
        let Some(frozen) = command_status.frozen.as_ref() else { continue };
        let Some(base) = Command::resolve(frozen) else { continue };
        let rollback = base.rollback().filter(|_| command_status.rollback.is_some());
        for (command, &group) in std::iter::once(base)
            .chain(rollback)
            .flat_map(|command| command.groups().iter().map(move |group| (command, group)))
        {
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

/// Whether `signal` (this run's, for the target's command) is the one the status records
/// for `target` ([`crate::authorize::recorded`], the rule the nodes apply).
fn recorded(target: &TargetStatus, signal: &SignalData) -> bool {
    crate::authorize::recorded(target, &signal.created)
}

/// When the leader's drain finished draining the node of `target` for `signal` (in
/// `Cordoning`): record it on the target and move the signal to `ApplyingUpdate`, with the
/// drain's note as its reason when the drain left pods (`drain: IfPossible|Never`). The
/// status write comes before the signal write, so the node, which restarts only when the
/// status records its drain, never sees an `ApplyingUpdate` the status does not back.
fn record_drain(
    target: &mut TargetStatus,
    object: &TargetObject,
    signal: &SignalData,
    kind: ObjectKind,
    inputs: &Inputs<'_>,
) -> Option<Effect> {
    let drained = object.drained.as_deref().filter(|created| *created == signal.created)?;
    if signal.phase() != Some(SignalPhase::Cordoning) {
        return None;
    }
    if target.drained.as_deref() != Some(drained) {
        target.drained = Some(drained.to_owned());
    }
    let note = signal
        .status
        .as_ref()
        .and_then(|status| status.reason.clone())
        .filter(|reason| crate::cordon::is_drain_note(reason));
    let mut advanced = signal.clone();
    let mut status = SignalStatus::new(SignalPhase::ApplyingUpdate, inputs.stamp);
    if let Some(note) = note {
        status = status.with_reason(note);
    }
    advanced.status = Some(status);
    Some(Effect::Signal {
        target: SignalTarget { kind, name: target.name.clone() },
        data: advanced,
    })
}

/// The workers a pass chose to signal, and what held the others.
struct Choice {
    /// Chosen, in name order.
    chosen: Vec<String>,
    /// The first worker that was not Ready while a slot was free.
    first_not_ready: Option<String>,
    /// The earliest window that was closed for a worker while a slot was free.
    window_closed: Option<Closed>,
}

/// Apply what a node reports on this run's signal (phase, and the reason the node gives).
/// A new phase or state sets `lastUpdatedTimestamp` to this pass's time: the leader's own
/// clock says when it first saw the node in that phase (DESIGN §14), never the node's
/// timestamp, and the Plan status keeps it for the next leader. A new reason alone does not.
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
        target.last_updated_timestamp = Time(inputs.stamp);
    }
    match phase {
        SignalPhase::Completed => {
            // The drain's note travels with the signal to its end (`cordon::carried_reason`):
            // kept even when no pass saw the phase it was written in.
            if let Some(note) =
                node_status.reason.as_deref().filter(|r| crate::cordon::is_drain_note(r))
                && target.drain.as_deref() != Some(note)
            {
                target.drain = Some(cap_node_reason(note));
            }
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
            // The drain's note on what it left on the node (`drain: IfPossible|Never`) stays
            // on the target after the node moves on, so the Plan tells how it was updated.
            if let Some(note) = reason.as_deref().filter(|r| crate::cordon::is_drain_note(r))
                && target.drain.as_deref() != Some(note)
            {
                target.drain = Some(note.to_owned());
            }
            if target.reason != reason {
                target.reason = reason;
            }
        }
    }
}
