//! Pre-staging (`prestage: true` on a `k0supdate` or `airgapupdate` command): before the
//! command signals its first node, so before any node is cordoned, every target downloads,
//! verifies and (a k0s binary) self-tests the payload into its staged file and reports
//! `Staged`. The update signals that follow find the staged file by its sha256: the
//! disruptive part of the rollout is the swap and the restart only.
//!
//! The leader asks through the [`keys::ANNOTATION_PRESTAGE`] annotation
//! ([`Effect::Prestage`]), at most `prestageConcurrent` nodes at once (default: all), and
//! keeps each target's standing in its `prestage` field (`Requested`, `Staged`, `Failed`) and
//! the command's `staged` count (`4/6`). A target that reports `Failed`, whose report cannot
//! be read, or that does not answer within the command's progress deadline (counted from
//! when it was asked, on the leader's clock) fails with the reason: the failure policy then
//! ends the command `ApplyFailed` with no node signalled, so none cordoned (or, for workers
//! within `limits.maxFailures`, goes on without that node). Staging is over once every
//! target that has not failed is `Staged`, or once any target was signalled (a leader that
//! finds a run past staging never stages again).
//!
//! Staging asks no further node while the plan is paused ([`may_stage`]) or its
//! `downloadWindow` is closed (the leader looks again when it opens).
//!
//! [`keys::ANNOTATION_PRESTAGE`]: autopilot_api::keys::ANNOTATION_PRESTAGE

use autopilot_api::keys;
use autopilot_api::prestage::{PrestageOutcome, PrestageRequest, PrestageState};
use autopilot_api::signal::format_timestamp;
use autopilot_api::v1beta2::{PlanStateType, TargetState, TargetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use autopilot_api::duration;

use crate::plan::driver::progress::{CommandPass, Outcome, set_state};
use crate::plan::model::command::{targets, targets_mut};
use crate::plan::model::decision::{Effect, SignalTarget};
use crate::plan::model::inputs::{Inputs, TargetObject};
use crate::plan::model::phases::reasons;
use crate::plan::model::text::cap_node_reason;

/// Why the operator holds staging now (ask no further node), or `None`: a pause. The
/// plan's `downloadWindow` is the other hold ([`crate::plan::rules::window::RunSchedule::download_gate`],
/// checked next to it). A node that was asked already goes on staging either way.
pub(in crate::plan) fn may_stage(inputs: &Inputs<'_>) -> Option<String> {
    inputs.steering.paused.then(|| format!("paused ({} annotation)", keys::ANNOTATION_PAUSED))
}

/// What [`CommandPass::prestage`] concluded when staging is not over.
pub(in crate::plan) enum Staging {
    /// The command waits for staging; the pass ends here.
    Held(Outcome),
    /// A target turned out to have no platform as it was about to be asked; it is now
    /// failed and the failure policy must look again.
    Again,
}

impl CommandPass<'_, '_> {
    /// Whether the command pre-stages and staging is not over: no target was signalled yet,
    /// and some target that has not failed is not `Staged`.
    pub(in crate::plan) fn staging_open(&self) -> bool {
        let command = self.command;
        if command.prestage_limit(0).is_none() {
            return false;
        }
        let all: Vec<&TargetStatus> = command
            .groups()
            .iter()
            .flat_map(|&group| targets(self.status, command, group))
            .collect();
        let signalled = all.iter().any(|t| match t.state {
            TargetState::SignalSent | TargetState::SignalCompleted => true,
            TargetState::SignalPending
            | TargetState::SignalApplyFailed
            | TargetState::MissingPlatform
            | TargetState::MissingSignalNode => false,
        });
        !signalled
            && all
                .iter()
                .any(|t| !t.state.is_terminal() && t.prestage != Some(PrestageState::Staged))
    }

    /// Keep the command's `staged` count (`<staged>/<targets>`) when it pre-stages.
    pub(in crate::plan) fn count_staged(&mut self) {
        let command = self.command;
        if command.prestage_limit(0).is_none() {
            return;
        }
        let (staged, all) = command
            .groups()
            .iter()
            .flat_map(|&group| targets(self.status, command, group))
            .fold((0, 0), |(staged, all), t| {
                (staged + usize::from(t.prestage == Some(PrestageState::Staged)), all + 1)
            });
        self.status.staged = Some(format!("{staged}/{all}"));
    }

    /// Read back what the asked nodes report, and fail those past the deadline: a `Staged`
    /// report stages the target; a `Failed` one, a report that cannot be read, or no answer
    /// within the command's progress deadline (from when it was asked) fails it.
    pub(in crate::plan) fn read_back_staging(&mut self) {
        if !self.staging_open() {
            return;
        }
        let (inputs, run, command) = (self.inputs, self.run, self.command);
        let index = self.status.id;
        let deadline = command.progress_timeout(inputs.policy.node_progress_timeout);
        for &group in command.groups() {
            let objects = inputs.objects(command.object_kind(group));
            let Some(group_targets) = targets_mut(self.status, command, group) else { continue };
            for target in group_targets.iter_mut().filter(|t| {
                t.state == TargetState::SignalPending
                    && t.prestage == Some(PrestageState::Requested)
            }) {
                let Some(object) = objects.get(&target.name) else { continue };
                let seen = object.prestage();
                if let Some(report) = seen.report.as_ref().filter(|r| r.is_for(&run.run_id, index))
                {
                    match report.outcome {
                        PrestageOutcome::Staged => {
                            target.prestage = Some(PrestageState::Staged);
                            target.last_updated_timestamp = Time(inputs.stamp);
                            target.reason = None;
                            continue;
                        }
                        PrestageOutcome::Failed => {
                            let why = report.reason.as_deref().unwrap_or("no reason given");
                            fail(target, &format!("could not stage the payload: {why}"), inputs);
                            continue;
                        }
                    }
                }
                if let Some(problem) = &seen.report_problem {
                    fail(
                        target,
                        &format!("its pre-staging report cannot be read: {problem}"),
                        inputs,
                    );
                    continue;
                }
                let elapsed = inputs.now.duration_since(target.last_updated_timestamp.0);
                // A deadline too long to represent never runs out.
                let remaining = jiff::SignedDuration::try_from(deadline)
                    .ok()
                    .and_then(|deadline| deadline.checked_sub(elapsed));
                match remaining {
                    Some(remaining) if !remaining.is_positive() => {
                        let why = format!(
                            "did not report the payload staged within {}",
                            duration::format(deadline)
                        );
                        fail(target, &why, inputs);
                    }
                    Some(remaining) => {
                        if let Ok(remaining) = std::time::Duration::try_from(remaining) {
                            self.decision.requeue_after(remaining);
                        }
                    }
                    None => {}
                }
            }
        }
    }

    /// Staging, once the failure policy, the abort and the pause had their say: `None` when
    /// staging is over (the command signals nodes as usual). Otherwise ask more targets (up
    /// to `prestageConcurrent` asked and unanswered at once; controllers, then workers, in
    /// name order) while [`may_stage`] allows, ask again any asked target whose object does
    /// not carry the request, and hold the command naming what it waits for.
    pub(in crate::plan) fn prestage(&mut self) -> Option<Staging> {
        if !self.staging_open() {
            return None;
        }
        let holds = self.staging_hold();
        let free = if holds.is_some() { 0 } else { self.free_asks() };
        let asking = self.ask_to_stage(free);
        if asking.missing_platform {
            return Some(Staging::Again);
        }
        if asking.asked_now {
            // Their deadline starts now (see `read_back_staging`).
            let deadline = self.command.progress_timeout(self.inputs.policy.node_progress_timeout);
            self.decision.requeue_after(deadline);
        }
        self.decision.signals.extend(asking.effects);
        self.count_staged();
        self.hold_for_staging(holds.as_deref());
        Some(Staging::Held(Outcome::Running))
    }

    /// Why staging asks no further node now ([`may_stage`], then the closed
    /// `downloadWindow`, whose opening is requeued for), or `None`.
    fn staging_hold(&mut self) -> Option<String> {
        let inputs = self.inputs;
        may_stage(inputs).or_else(|| {
            let closed = self.windows.download_gate(inputs.now).err()?;
            if let Some(wait) = closed.wait_from(inputs.now) {
                self.decision.requeue_after(wait);
            }
            Some(closed.reason())
        })
    }

    /// How many more targets may be asked now: `prestageConcurrent` (default: all, at least
    /// one) less the targets asked and unanswered.
    fn free_asks(&self) -> usize {
        let command = self.command;
        let all = command.groups().iter().map(|&g| targets(self.status, command, g).len()).sum();
        let limit = command.prestage_limit(all).unwrap_or(all).max(1);
        let asked = command
            .groups()
            .iter()
            .flat_map(|&group| targets(self.status, command, group))
            .filter(|t| !t.state.is_terminal() && t.prestage == Some(PrestageState::Requested))
            .count();
        limit.saturating_sub(asked)
    }

    /// The request this command's targets are asked to stage with, stamped now.
    fn prestage_request(&self) -> PrestageRequest {
        PrestageRequest {
            plan_id: self.run.plan_id.clone(),
            run_id: self.run.run_id.clone(),
            command: self.status.id,
            asked: format_timestamp(self.inputs.stamp),
        }
    }

    /// Ask up to `free` pending targets that were not asked yet (controllers, then workers,
    /// in name order), and ask again every asked target whose object does not carry the
    /// request. A target without a platform becomes `MissingPlatform` instead.
    fn ask_to_stage(&mut self, mut free: usize) -> Asking {
        let (inputs, command) = (self.inputs, self.command);
        let request = self.prestage_request();
        let mut asking = Asking::default();
        for &group in command.groups() {
            let kind = command.object_kind(group);
            let objects = inputs.objects(kind);
            let Some(group_targets) = targets_mut(self.status, command, group) else { continue };
            let mut order: Vec<usize> = (0..group_targets.len()).collect();
            order.sort_by(|&a, &b| group_targets[a].name.cmp(&group_targets[b].name));
            for at in order {
                let target = &mut group_targets[at];
                if target.state != TargetState::SignalPending {
                    continue;
                }
                // Read-back marks a target without an object; nothing to ask then.
                let Some(object) = objects.get(&target.name) else { continue };
                match target.prestage {
                    None if free > 0 => {
                        if let Err(why) = command.platform_entry(object) {
                            set_state(target, TargetState::MissingPlatform, inputs);
                            target.reason = Some(why);
                            asking.missing_platform = true;
                            continue;
                        }
                        free -= 1;
                        asking.asked_now = true;
                        target.prestage = Some(PrestageState::Requested);
                        target.last_updated_timestamp = Time(inputs.stamp);
                    }
                    None | Some(PrestageState::Staged | PrestageState::Failed) => continue,
                    Some(PrestageState::Requested) => {}
                }
                // Crash safety: the status says the node was asked; its object must carry
                // the request (lost between the status write and the annotation write, or
                // to a conflict): ask again, identically but for the time.
                if !carries(object, &request) {
                    let target = SignalTarget { kind, name: target.name.clone() };
                    asking.effects.push(Effect::Prestage { target, request: request.clone() });
                }
            }
        }
        asking
    }

    /// Hold the command in `SchedulableWait`, naming the targets staging waits for and,
    /// when staging asks no further node, why.
    fn hold_for_staging(&mut self, holds: Option<&str>) {
        let command = self.command;
        let waiting: Vec<&str> = command
            .groups()
            .iter()
            .flat_map(|&group| targets(self.status, command, group))
            .filter(|t| !t.state.is_terminal() && t.prestage != Some(PrestageState::Staged))
            .map(|t| t.name.as_str())
            .collect();
        let staged = self.status.staged.clone().unwrap_or_default();
        let detail = staging_detail(&staged, &waiting, holds);
        let status = &mut *self.status;
        status.state = PlanStateType::SchedulableWait;
        status.not_ready_since = None;
        let steady = "pre-staging: no node is signalled before every target staged".to_owned();
        self.decision.hold_steady(status, reasons::PRESTAGING, steady, &detail);
    }
}

/// What [`CommandPass::ask_to_stage`] did.
#[derive(Default)]
struct Asking {
    /// A target about to be asked has no platform (it is now `MissingPlatform`).
    missing_platform: bool,
    /// Some target was asked for the first time in this pass.
    asked_now: bool,
    /// The annotations to write: the asked targets whose objects do not carry the request.
    effects: Vec<Effect>,
}

/// Whether a target's object carries `request` (the same plan, run and command).
fn carries(object: &TargetObject, request: &PrestageRequest) -> bool {
    object.prestage().request.as_ref().is_some_and(|r| {
        r.plan_id == request.plan_id && r.run_id == request.run_id && r.command == request.command
    })
}

/// The held command's detail: `<staged> staged, waiting for <up to five names>[ and <n>
/// more]`, and why no further node is asked, if so.
fn staging_detail(staged: &str, waiting: &[&str], holds: Option<&str>) -> String {
    let shown = waiting.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    let more = waiting.len().saturating_sub(5);
    let mut detail = format!(
        "{staged} staged, waiting for {shown}{}",
        if more > 0 { format!(" and {more} more") } else { String::new() }
    );
    if let Some(why) = holds {
        detail.push_str(&format!("; asking no further node: {why}"));
    }
    detail
}

/// The target could not stage: it fails with `why` (capped, it may quote the node).
fn fail(target: &mut TargetStatus, why: &str, inputs: &Inputs<'_>) {
    set_state(target, TargetState::SignalApplyFailed, inputs);
    target.prestage = Some(PrestageState::Failed);
    target.phase = None;
    target.reason = Some(cap_node_reason(why));
}
