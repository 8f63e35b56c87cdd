//! Pre-staging, applied (`crate::plan::rules::prestage` judges): each asked target's
//! answer written into its `prestage` field, more targets asked while the rules allow, and
//! the command held naming what staging waits for.

use autopilot_api::prestage::PrestageState;
use autopilot_api::v1beta2::{PlanStateType, TargetState, TargetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::plan::driver::progress::{CommandPass, Outcome, set_state};
use crate::plan::model::command::{Group, targets_mut};
use crate::plan::model::decision::{Effect, SignalTarget};
use crate::plan::model::inputs::Inputs;
use crate::plan::model::phases::reasons;
use crate::plan::model::text::cap_node_reason;
use crate::plan::rules::prestage::{
    Answer, answer, carries, free_asks, may_stage, request, staged_count, staging_open, waiting,
};

/// What [`CommandPass::prestage`] concluded when staging is not over.
pub(in crate::plan) enum Staging {
    /// The command waits for staging; the pass ends here.
    Held(Outcome),
    /// A target turned out to have no platform as it was about to be asked; it is now
    /// failed and the failure policy must look again.
    Again,
}

impl CommandPass<'_, '_> {
    /// Keep the command's `staged` count (`<staged>/<targets>`) when it pre-stages.
    pub(in crate::plan) fn count_staged(&mut self) {
        if let Some(count) = staged_count(&self.view()) {
            self.status.staged = Some(count);
        }
    }

    /// Read back what the asked nodes report ([`answer`]), and write each answer into
    /// its target.
    pub(in crate::plan) fn read_back_staging(&mut self) {
        if !staging_open(&self.view()) {
            return;
        }
        let (inputs, command) = (self.inputs, self.command);
        let deadline = command.progress_timeout(inputs.policy.node_progress_timeout);
        let mut answers: Vec<(Group, String, Answer)> = Vec::new();
        let view = self.view();
        for &group in command.groups() {
            let objects = inputs.objects(command.object_kind(group));
            for target in crate::plan::model::command::targets(view.status, command, group)
                .iter()
                .filter(|t| {
                    t.state == TargetState::SignalPending
                        && t.prestage == Some(PrestageState::Requested)
                })
            {
                let Some(object) = objects.get(&target.name) else { continue };
                answers.push((group, target.name.clone(), answer(&view, target, object, deadline)));
            }
        }
        for (group, name, answer) in answers {
            self.write_answer(group, &name, answer);
        }
    }

    /// Write one asked target's answer.
    fn write_answer(&mut self, group: Group, name: &str, answer: Answer) {
        let (inputs, command) = (self.inputs, self.command);
        let Some(group_targets) = targets_mut(self.status, command, group) else { return };
        let Some(target) = group_targets.iter_mut().find(|t| t.name == name) else { return };
        match answer {
            Answer::Staged => {
                target.prestage = Some(PrestageState::Staged);
                target.last_updated_timestamp = Time(inputs.stamp);
                target.reason = None;
            }
            Answer::Failed(why) => fail(target, &why, inputs),
            Answer::Waiting(Some(remaining)) => self.decision.requeue_after(remaining),
            Answer::Waiting(None) => {}
        }
    }

    /// Staging, once the failure policy, the abort and the pause had their say: `None` when
    /// staging is over (the command signals nodes as usual). Otherwise ask more targets (up
    /// to `prestageConcurrent` asked and unanswered at once; controllers, then workers, in
    /// name order) while [`may_stage`] allows, ask again any asked target whose object does
    /// not carry the request, and hold the command naming what it waits for.
    pub(in crate::plan) fn prestage(&mut self) -> Option<Staging> {
        if !staging_open(&self.view()) {
            return None;
        }
        let holds = self.staging_hold();
        let free = if holds.is_some() { 0 } else { free_asks(&self.view()) };
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
        let (steady, detail) = waiting(&self.view(), holds.as_deref());
        let status = &mut *self.status;
        status.state = PlanStateType::SchedulableWait;
        status.not_ready_since = None;
        self.decision.hold_steady(status, reasons::PRESTAGING, steady, &detail);
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

    /// Ask up to `free` pending targets that were not asked yet (controllers, then workers,
    /// in name order), and ask again every asked target whose object does not carry the
    /// request. A target without a platform becomes `MissingPlatform` instead.
    fn ask_to_stage(&mut self, mut free: usize) -> Asking {
        let (inputs, command) = (self.inputs, self.command);
        let request = request(&self.view());
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

/// The target could not stage: it fails with `why` (capped, it may quote the node).
fn fail(target: &mut TargetStatus, why: &str, inputs: &Inputs<'_>) {
    set_state(target, TargetState::SignalApplyFailed, inputs);
    target.prestage = Some(PrestageState::Failed);
    target.phase = None;
    target.reason = Some(cap_node_reason(why));
}
