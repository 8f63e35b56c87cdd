//! The machine: one pass over a Plan, from the status it read to the complete next status,
//! the effects to perform and when to look again.
//!
//! A pass (1) leaves Plans not named `autopilot` alone but says why in a condition,
//! (2) starts a new run when there is none or when the last one ended and the spec moved on,
//! running NewPlan over every command ([`crate::plan::driver::discovery`]), (3) drives the active command
//! ([`crate::plan::driver::schedule`]), and (4) derives conditions and the Events of the state changes by
//! comparing the status it started from with the one it returns (one per plan or command
//! change, one per batch of nodes signalled or completed, one per node that failed).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use autopilot_api::keys::{self, conditions};
use autopilot_api::v1beta2::{
    PlanCommandStatus, PlanStateType, PlanStatus, TargetState, TargetStatus,
};

use crate::plan::driver::{access, discovery, schedule};
use crate::plan::model::command::{Command, Group, targets};
use crate::plan::model::decision::{
    Decision, Effect, EventKind, Hold, Needs, ObjectKind, Requeue, Transition,
};
use crate::plan::model::inputs::{Gaps, Inputs, Observed, PlanView, Policy};
use crate::plan::model::lookups::RemovedApiUse;
use crate::plan::model::phases::reasons;
use crate::plan::model::text::{name_list, set_condition};

/// How soon to look again when a new run waits for what the shell has not passed yet (the
/// removed-API findings, the workers' access review). Short: the shell is expected to
/// answer on its next pass.
pub const REMOVED_API_RECHECK: Duration = Duration::from_secs(1);

/// Decide one pass over `plan`: the complete next status, the effects, and when to requeue.
///
/// Deterministic and idempotent: the same inputs give the same transition, and calling it
/// again with its own output status and the same snapshot changes nothing (effects then only
/// repeat as identical signal resends for targets whose object does not yet carry them).
///
/// What the pass could not decide without, it names in [`Transition::needs`]; the shell
/// looks that up and steps again ([`crate::plan::resolve()`] does both). A controller with no
/// entry in `observed.readiness` counts as not ready and is named in
/// [`Needs::probe`](crate::plan::Needs::probe) (only a pass that may signal a controller needs
/// any, so most passes run once). A new run that needs the removed-API findings and finds
/// `observed.removed_apis` empty waits, its status unchanged, and names the versions in
/// [`Needs::removed_api_versions`](crate::plan::Needs::removed_api_versions); a plan with no status
/// then gets `PlanStatus::default()` back, which the shell need not write.
pub fn step(plan: PlanView<'_>, observed: &Observed<'_>, policy: &Policy) -> Transition {
    let mut gaps = Gaps::new(observed.readiness);
    let mut transition = Pass { inputs: Inputs::new(observed, policy, &plan), plan }.run(&mut gaps);
    transition.needs = gaps.into_needs();
    // Check Pods belong to the `autopilot` plan's run: any that no running check waits for
    // goes (recorded, aborted, ended, or left by an earlier run).
    if plan.name == keys::PLAN_NAME {
        transition
            .effects
            .extend(crate::plan::rules::checks::stale_pods(&transition.status, observed));
    }
    // Whatever the pass did, the status it writes must fit (a refused write fails for ever).
    crate::plan::driver::budget::fit(&mut transition.status, plan.generation, observed.now);
    transition
}

/// The k0s versions whose removed APIs a pass over `plan` may need (REF §9.1): the versions
/// of the commands that run the check (every `airgapupdate`, every `k0supdate` without
/// `forceupdate`) when this pass may start a new run (no run yet, an ended run whose spec
/// changed, or a running one whose spec changed and which may end in this pass); empty
/// otherwise. Deduplicated and sorted. A pass that starts a new run without the findings
/// names these in [`Needs::removed_api_versions`](crate::plan::Needs::removed_api_versions); what is
/// found goes in `observed.removed_apis`.
pub fn removed_api_check_versions(plan: PlanView<'_>) -> Vec<String> {
    if plan.name != keys::PLAN_NAME {
        return Vec::new();
    }
    let may_start = match run_state(plan) {
        RunState::New => true,
        // The spec moved on during the run: if the run ends in this pass, the next run
        // starts in the same pass (see [`step`]), so it needs the findings too.
        RunState::Running(status) => status.run_generation() != Some(plan.generation),
        RunState::Ended(_) | RunState::Held => false,
    };
    if !may_start {
        return Vec::new();
    }
    plan.spec
        .commands
        .iter()
        .filter_map(Command::resolve)
        .filter(|command| command.needs_removed_api_check())
        .map(|command| command.version().to_owned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Where a Plan's run stands before the pass.
enum RunState<'s> {
    /// A new run starts in this pass.
    New,
    /// A run is in progress.
    Running(&'s PlanStatus),
    /// The run ended and the spec has not changed since it started (or the plan is
    /// aborted, which holds a changed spec back, see [`Pass::ended`]): nothing to do.
    Ended(&'s PlanStatus),
    /// No run of ours, and the plan is aborted (or carries a rollback annotation naming
    /// its id): none starts.
    Held,
}

/// A run starts when there is no status, when the status is not one of ours (no
/// `observedGeneration`: never processed, or written by k0s), or when the last run ended
/// and the spec changed since it started (its [`PlanStatus::run_generation`]). A non-terminal status that is missing something
/// every run of ours records (run id, plan id, a frozen copy of each command, commands past
/// NewPlan) cannot be driven safely and starts a new run too.
fn run_state(plan: PlanView<'_>) -> RunState<'_> {
    // A rollback annotation naming the plan id a new run would start with holds that run
    // back: it is about an earlier run, and would roll the new one back as it starts.
    let rollback_pending = plan.rollback.is_some_and(|asked| asked.trim() == plan.spec.id.as_str());
    let new =
        if plan.steering.aborted || rollback_pending { RunState::Held } else { RunState::New };
    let Some(status) = plan.status else { return new };
    let Some(run_generation) = status.run_generation() else { return new };
    if status.is_terminal() {
        // An operator asked to roll back the run that ended (`crate::plan::driver::rollback`): it goes on.
        let roll_back = crate::plan::model::phases::REOPENED_BY_ROLLBACK.contains(&status.state)
            && status.rollback.is_none()
            && run_generation == plan.generation
            && status.run_id.is_some()
            && plan.rollback.is_some_and(|asked| Some(asked.trim()) == status.plan_id.as_deref());
        if roll_back {
            return RunState::Running(status);
        }
        return if run_generation == plan.generation || plan.steering.aborted {
            RunState::Ended(status)
        } else if rollback_pending {
            // Not a new run while the annotation names its id; the ended one stays as it is.
            RunState::Ended(status)
        } else {
            RunState::New
        };
    }
    let intact = status.run_id.is_some()
        && status.plan_id.is_some()
        && status.state != PlanStateType::NewPlan
        && status.commands.iter().all(|command| {
            command.state != PlanStateType::NewPlan
                && command.frozen.as_ref().and_then(Command::resolve).is_some()
        });
    if intact { RunState::Running(status) } else { new }
}

/// A new run whose windows do not compile does not start: the plan and its first command
/// end `Warning` with the refusal (which names the field).
fn refuse_windows(status: &mut PlanStatus, refusal: String) {
    status.state = PlanStateType::Warning;
    status.windows = None;
    if let Some(first) = status.commands.first_mut() {
        first.state = PlanStateType::Warning;
        first.description = Some(refusal);
    }
}

/// One pass.
#[derive(Clone, Copy)]
struct Pass<'a> {
    inputs: Inputs<'a>,
    plan: PlanView<'a>,
}

impl Pass<'_> {
    /// The pass, plus the start of the next run when the current one ends in it while its
    /// spec has moved on: the new run starts in the same pass (so a second pass over the
    /// same snapshot changes nothing); the ended run's events still go out, and the
    /// `PlanStarted` note says how it ended.
    fn run(&self, gaps: &mut Gaps<'_>) -> Transition {
        let ending = self.run_once(gaps);
        let outdated = matches!(run_state(self.plan), RunState::Running(_))
            && ending.status.is_terminal()
            && ending.status.run_generation() != Some(self.plan.generation);
        if !outdated {
            return ending;
        }
        let plan = PlanView { status: Some(&ending.status), ..self.plan };
        let next = Pass { plan, ..*self }.run_once(gaps);
        let mut requeue = Decision { requeue: ending.requeue, ..Decision::new() };
        if let Requeue::After(delay) = next.requeue {
            requeue.requeue_after(delay);
        }
        if next.status == ending.status {
            // The next run waits for its removed-API findings: record the end for now.
            return Transition { requeue: requeue.requeue, ..ending };
        }
        // The ended run's signals go: the next run signals its nodes afresh.
        let mut effects: Vec<Effect> = ending
            .effects
            .into_iter()
            .filter(|effect| match effect {
                Effect::Signal { .. }
                | Effect::CreatePod(_)
                | Effect::GateCheck { .. }
                | Effect::Prestage { .. } => false,
                Effect::DeletePod { .. } | Effect::Event { .. } => true,
            })
            .collect();
        effects.extend(next.effects);
        Transition {
            status: next.status,
            effects,
            requeue: requeue.requeue,
            needs: Needs::default(),
        }
    }

    /// A run that ended: a failed node still in flight is told so until its object shows
    /// it, and the conditions follow what the nodes said since (a run that ended under an
    /// older version gets them too).
    ///
    /// An aborted plan whose spec changed since its run started runs nothing until the
    /// abort annotation goes: its status then observes the new generation (the run's stays
    /// in `runGeneration`, which decides when a new run starts) and says it never runs as
    /// it is (`Stalled`, reason `Aborted`). kstatus compares `observedGeneration` first, so
    /// without this a GitOps engine would wait for it, in progress, until its timeout.
    fn ended(&self, status: &PlanStatus) -> Transition {
        let mut effects = schedule::tell_failed_nodes(&self.inputs, status);
        let mut status = status.clone();
        let plan = self.plan;
        match status.run_generation() {
            Some(run) if plan.steering.aborted && run != plan.generation => {
                let message = format!(
                    "the spec changed (generation {}) while the plan is aborted: run {} of \
                     generation {run} ended {}, and the new spec does not run until the {} \
                     annotation is removed",
                    plan.generation,
                    status.run_id.as_deref().unwrap_or("(no run id)"),
                    status.state,
                    keys::ANNOTATION_ABORT
                );
                status.run_generation = Some(run);
                status.observed_generation = Some(plan.generation);
                crate::plan::driver::conditions::never_runs(
                    &mut status,
                    PlanStateType::Aborted.as_str(),
                    &message,
                    &self.inputs,
                    plan.generation,
                );
            }
            Some(_) | None => {
                let holds = BTreeMap::new();
                crate::plan::driver::conditions::derive(
                    &mut status,
                    &self.inputs,
                    &holds,
                    &mut effects,
                );
            }
        }
        Transition { status, effects, requeue: Requeue::OnChange, needs: Needs::default() }
    }

    /// No run starts (aborted, or a rollback annotation naming its id): unchanged, but a
    /// plan aborted before its first run says it never runs.
    fn held(&self) -> Transition {
        let plan = self.plan;
        let mut status = plan.status.cloned().unwrap_or_default();
        if plan.steering.aborted && status.observed_generation.is_none() {
            let message = format!(
                "aborted before its run started: remove the {} annotation to start it",
                keys::ANNOTATION_ABORT
            );
            crate::plan::driver::conditions::never_runs(
                &mut status,
                PlanStateType::Aborted.as_str(),
                &message,
                &self.inputs,
                plan.generation,
            );
        }
        unchanged(status, Requeue::OnChange)
    }

    fn run_once(&self, gaps: &mut Gaps<'_>) -> Transition {
        let plan = self.plan;
        // Check 1: only the Plan named `autopilot` runs.
        if plan.name != keys::PLAN_NAME {
            return self.ignore();
        }
        // Check 2: start a new run, go on with the current one, or leave an ended one be.
        let mut decision = Decision::new();
        let mut started = None;
        let mut payload_warnings = Vec::new();
        let (base, mut status) = match run_state(plan) {
            RunState::Ended(status) => return self.ended(status),
            RunState::Held => return self.held(),
            // The status the pass starts from is compared with, not changed: borrowed.
            RunState::Running(status) => (std::borrow::Cow::Borrowed(status), status.clone()),
            RunState::New => {
                let Some(findings) = self.removed_api_findings() else {
                    // The shell has not checked for removed APIs yet: wait, change nothing,
                    // and say which versions to look up.
                    gaps.lacks_removed_apis(removed_api_check_versions(plan));
                    let status = plan.status.cloned().unwrap_or_default();
                    return unchanged(status, Requeue::After(REMOVED_API_RECHECK));
                };
                let fresh = self.fresh_status();
                started = Some(self.started_event(&fresh));
                let mut status = fresh.clone();
                payload_warnings = discovery::new_plan(&self.inputs, gaps, &mut status, findings);
                // May the workers it signals read the Plan? Waits for the API server's answer.
                if access::new_plan(&self.inputs, gaps, &mut status, &mut payload_warnings)
                    == access::Checked::Waits
                {
                    let status = plan.status.cloned().unwrap_or_default();
                    return unchanged(status, Requeue::After(REMOVED_API_RECHECK));
                }
                if status.state == PlanStateType::SchedulableWait {
                    match crate::plan::rules::window::freeze(&self.inputs, plan.spec, &mut status) {
                        Ok(warnings) => payload_warnings.extend(warnings),
                        Err(refusal) => refuse_windows(&mut status, refusal),
                    }
                }
                (std::borrow::Cow::Owned(fresh), status)
            }
        };
        // Check 3: drive the active command.
        if (!status.is_terminal()
            || crate::plan::driver::rollback::wanted_after_end(&self.inputs, &status))
            && let Some(state) = schedule::schedule(&self.inputs, gaps, &mut decision, &mut status)
        {
            status.state = state;
        }
        let mut condition_events = Vec::new();
        self.spec_change_condition(&mut status, &mut condition_events);
        self.paused_condition(&mut status, &mut condition_events);
        status.progress = status.computed_progress();
        crate::plan::driver::conditions::derive(
            &mut status,
            &self.inputs,
            &decision.holds,
            &mut condition_events,
        );

        let mut effects = decision.signals;
        effects.extend(schedule::tell_failed_nodes(&self.inputs, &status));
        effects.extend(started);
        effects.extend(payload_warnings);
        effects.extend(state_events(&base, &status, &decision.holds));
        effects.extend(condition_events);
        Transition { status, effects, requeue: decision.requeue, needs: Needs::default() }
    }

    /// What the removed-API pre-check found, if the run needs it; `None` while the shell
    /// has not passed findings that the run needs.
    fn removed_api_findings(&self) -> Option<&[RemovedApiUse]> {
        if removed_api_check_versions(self.plan).is_empty() {
            return Some(&[]);
        }
        self.inputs.observed.removed_apis
    }

    /// The status a new run starts from: every command frozen and in NewPlan.
    fn fresh_status(&self) -> PlanStatus {
        let plan = self.plan;
        let commands = plan
            .spec
            .commands
            .iter()
            .enumerate()
            .map(|(index, command)| PlanCommandStatus {
                id: u32::try_from(index).unwrap_or(u32::MAX),
                frozen: Some(command.clone()),
                ..PlanCommandStatus::default()
            })
            .collect();
        let conditions = plan
            .status
            .map(|status| status.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|condition| {
                condition.type_ != conditions::SPEC_CHANGE_IGNORED
                    && condition.type_ != conditions::IGNORED
            })
            .collect();
        PlanStatus {
            windows: Default::default(),
            rollback: None,
            state: PlanStateType::NewPlan,
            commands,
            conditions,
            observed_generation: Some(plan.generation),
            run_generation: None,
            run_id: Some(format!("{}/{}", plan.uid, plan.generation)),
            plan_id: Some(plan.spec.id.clone()),
            progress: None,
        }
    }

    fn started_event(&self, fresh: &PlanStatus) -> Effect {
        let plan = self.plan;
        let mut note = format!(
            "plan {} started run {} (plan id {:?}, generation {}, {} command(s))",
            plan.name,
            fresh.run_id.as_deref().unwrap_or_default(),
            plan.spec.id,
            plan.generation,
            fresh.commands.len(),
        );
        if let Some(previous) = plan.status.filter(|status| status.state != PlanStateType::NewPlan)
        {
            note.push_str(&format!("; the previous run ended {}", previous.state));
        }
        Effect::Event { kind: EventKind::Normal, reason: reasons::PLAN_STARTED, note }
    }

    /// Set `SpecChangeIgnored` while a run goes on with a spec that changed since it
    /// started; remove it once the status describes the current generation.
    fn spec_change_condition(&self, status: &mut PlanStatus, events: &mut Vec<Effect>) {
        let plan = self.plan;
        match status.run_generation() {
            Some(observed) if observed != plan.generation => {
                if status.is_terminal() {
                    // The run ended in this pass; the next pass starts the new one.
                    return;
                }
                let message = format!(
                    "the spec changed (generation {}) while run {} of generation {observed} is \
                     in progress; plans are immutable while they run, so the change is not \
                     applied to this run. When the run ends, the changed spec starts a new run",
                    plan.generation,
                    status.run_id.as_deref().unwrap_or_default(),
                );
                if set_condition(
                    &mut status.conditions,
                    conditions::SPEC_CHANGE_IGNORED,
                    conditions::REASON_PLAN_RUNNING,
                    &message,
                    plan.generation,
                    self.inputs.stamp,
                ) {
                    events.push(Effect::Event {
                        kind: EventKind::Warning,
                        reason: reasons::SPEC_CHANGE_IGNORED,
                        note: format!("plan {}: {message}", plan.name),
                    });
                }
            }
            Some(_) | None => {
                status.conditions.retain(|c| c.type_ != conditions::SPEC_CHANGE_IGNORED);
            }
        }
    }

    /// Set `Paused` while the plan carries the pause annotation and its run goes on (the
    /// message counts the nodes still in flight); remove it once the annotation is gone or
    /// the run ended. An Event when the plan pauses and when it resumes.
    fn paused_condition(&self, status: &mut PlanStatus, events: &mut Vec<Effect>) {
        let plan = self.plan;
        let had = status.conditions.iter().any(|c| c.type_ == conditions::PAUSED);
        if plan.steering.paused && !status.is_terminal() {
            let in_flight: Vec<&str> = status
                .targets()
                .filter(|t| t.state == TargetState::SignalSent)
                .map(|t| t.name.as_str())
                .collect();
            let mut message = format!(
                "paused by the {} annotation: no new node is signalled",
                keys::ANNOTATION_PAUSED
            );
            if in_flight.is_empty() {
                message.push_str("; no node is in flight");
            } else {
                message.push_str(&format!(
                    "; {} node(s) in flight finish: {}",
                    in_flight.len(),
                    name_list(&in_flight)
                ));
            }
            message.push_str(". Remove the annotation (k0s autopilot resume) to go on");
            if set_condition(
                &mut status.conditions,
                conditions::PAUSED,
                conditions::REASON_PAUSED_BY_OPERATOR,
                &message,
                plan.generation,
                self.inputs.stamp,
            ) {
                events.push(Effect::Event {
                    kind: EventKind::Normal,
                    reason: reasons::PLAN_PAUSED,
                    note: format!("plan {}: {message}", plan.name),
                });
            }
        } else if had {
            status.conditions.retain(|c| c.type_ != conditions::PAUSED);
            if !plan.steering.paused {
                events.push(Effect::Event {
                    kind: EventKind::Normal,
                    reason: reasons::PLAN_RESUMED,
                    note: format!(
                        "plan {}: resumed (the {} annotation is gone)",
                        plan.name,
                        keys::ANNOTATION_PAUSED
                    ),
                });
            }
        }
    }

    /// A Plan that is not named `autopilot`: unchanged but for the `Ignored` condition.
    fn ignore(&self) -> Transition {
        let plan = self.plan;
        let mut status = plan.status.cloned().unwrap_or_default();
        let message = format!(
            "only the Plan named {:?} is executed; this Plan ({:?}) is left alone. Rename it to \
             {:?} to run it",
            keys::PLAN_NAME,
            plan.name,
            keys::PLAN_NAME
        );
        let added = set_condition(
            &mut status.conditions,
            conditions::IGNORED,
            conditions::REASON_NOT_AUTOPILOT_PLAN,
            &message,
            plan.generation,
            self.inputs.stamp,
        );
        crate::plan::driver::conditions::never_runs(
            &mut status,
            conditions::REASON_NOT_AUTOPILOT_PLAN,
            &message,
            &self.inputs,
            plan.generation,
        );
        let effects = if added {
            vec![Effect::Event {
                kind: EventKind::Warning,
                reason: reasons::PLAN_IGNORED,
                note: format!("plan {}: {message}", plan.name),
            }]
        } else {
            Vec::new()
        };
        Transition { status, effects, requeue: Requeue::OnChange, needs: Needs::default() }
    }
}

fn unchanged(status: PlanStatus, requeue: Requeue) -> Transition {
    Transition { status, effects: Vec::new(), requeue, needs: Needs::default() }
}

// === Events ===

/// Events for what changed between `base` and `status`: per command and group, one Event
/// naming the nodes that completed in this pass and one naming those it signalled; one per
/// node that failed, went missing or has no platform (each with its reason); one per command
/// and plan state change, and one per new hold reason. Targets that first appear as
/// `SignalPending` get none (NewPlan discovering them is part of the command's event).
fn state_events(
    base: &PlanStatus,
    status: &PlanStatus,
    holds: &BTreeMap<u32, Hold>,
) -> Vec<Effect> {
    let mut events = Vec::new();
    for command_status in &status.commands {
        let before = base.commands.iter().find(|c| c.id == command_status.id);
        let Some(command) = command_status.frozen.as_ref().and_then(Command::resolve) else {
            events.extend(command_event(before, command_status, "?"));
            continue;
        };
        let label = format!("command {} ({})", command_status.id, command.name());
        for &group in command.groups() {
            events.extend(group_events(before, command_status, command, group, &label));
        }
        let hold = holds.get(&command_status.id);
        events.extend(hold_event(before, command_status, hold, &label));
        events.extend(command_event(before, command_status, &label));
    }
    events.extend(plan_state_event(base, status));
    events
}

/// The Events of one group of a command: one naming the nodes that completed in this
/// pass, one per node that failed, went missing or has no platform, and one naming the
/// nodes it signalled. Targets that first appear as `SignalPending` get none.
fn group_events(
    before: Option<&PlanCommandStatus>,
    command_status: &PlanCommandStatus,
    command: Command<'_>,
    group: Group,
    label: &str,
) -> Vec<Effect> {
    let kind = command.object_kind(group);
    let old: BTreeMap<&str, TargetState> = before
        .map_or(&[][..], |before| targets(before, command, group))
        .iter()
        .map(|t| (t.name.as_str(), t.state))
        .collect();
    let mut completed = Vec::new();
    let mut signalled = Vec::new();
    let mut failed = Vec::new();
    for target in targets(command_status, command, group) {
        let from = old.get(target.name.as_str()).copied();
        if from == Some(target.state)
            || (from.is_none() && target.state == TargetState::SignalPending)
        {
            continue;
        }
        match target.state {
            TargetState::SignalCompleted => completed.push(target.name.as_str()),
            TargetState::SignalSent => signalled.push(target.name.as_str()),
            // Not reachable: no state leads back to pending, and new pending
            // targets are skipped above.
            TargetState::SignalPending => {}
            TargetState::SignalApplyFailed
            | TargetState::MissingSignalNode
            | TargetState::MissingPlatform => {
                failed.extend(failure_event(label, kind, target));
            }
        }
    }
    let mut events = Vec::new();
    events.extend(batch_event(label, kind, reasons::NODES_COMPLETED, &completed));
    events.extend(failed);
    events.extend(batch_event(label, kind, reasons::NODES_SIGNALLED, &signalled));
    events
}

/// The Event for a command's new hold reason, if its reason changed. A hold whose text
/// counts or lists nodes is published when it starts (or its steady part changes), not as
/// each node reports.
fn hold_event(
    before: Option<&PlanCommandStatus>,
    command_status: &PlanCommandStatus,
    hold: Option<&Hold>,
    label: &str,
) -> Option<Effect> {
    let old_reason = before.and_then(|before| before.reason.as_deref());
    let same_hold = hold.and_then(|hold| hold.steady.as_deref()).is_some_and(|steady| {
        old_reason
            .is_some_and(|old| old.strip_prefix(steady).is_some_and(|rest| rest.starts_with("; ")))
    });
    let reason = command_status.reason.as_ref()?;
    if old_reason == Some(reason.as_str()) || same_hold {
        return None;
    }
    let kind = hold.map_or(reasons::WORKER_NOT_READY, |hold| hold.reason);
    let event_kind = match kind {
        reasons::PLAN_PAUSED
        | reasons::CANARY_SOAKING
        | reasons::GROUP_UPDATING
        | reasons::GROUP_SOAKING
        | reasons::PREFLIGHT_RUNNING
        | reasons::ROLLING_BACK => EventKind::Normal,
        _ => EventKind::Warning,
    };
    Some(Effect::Event {
        kind: event_kind,
        reason: kind,
        note: format!("{label} is held: {reason}"),
    })
}

/// The Event for the plan's state change, if it changed; a failure names the failing
/// command's description.
fn plan_state_event(base: &PlanStatus, status: &PlanStatus) -> Option<Effect> {
    if base.state == status.state {
        return None;
    }
    let mut note = format!("plan {} -> {}", display_state(base.state), display_state(status.state));
    if status.state.is_failure()
        && let Some(description) = status
            .commands
            .iter()
            .find(|c| c.state == status.state)
            .and_then(|c| c.description.as_ref())
    {
        note.push_str(&format!(": {description}"));
    }
    Some(Effect::Event {
        kind: state_event_kind(status.state),
        reason: reasons::PLAN_STATE_CHANGED,
        note,
    })
}

fn command_event(
    before: Option<&PlanCommandStatus>,
    status: &PlanCommandStatus,
    label: &str,
) -> Option<Effect> {
    let from = before.map_or(PlanStateType::NewPlan, |before| before.state);
    if from == status.state {
        return None;
    }
    let label = if label == "?" { format!("command {}", status.id) } else { label.to_owned() };
    let mut note = format!("{label}: {} -> {}", display_state(from), display_state(status.state));
    // A command that ended says how (a failure why; a completion with warnings or tolerated
    // failures which).
    if let Some(description) = status.description.as_ref().filter(|_| status.state.is_terminal()) {
        note.push_str(&format!(": {description}"));
    }
    Some(Effect::Event {
        kind: state_event_kind(status.state),
        reason: reasons::COMMAND_STATE_CHANGED,
        note,
    })
}

/// The one Event for the nodes of a group (`kind`) that reached the same state in a pass
/// (`reason`: [`reasons::NODES_SIGNALLED`] or [`reasons::NODES_COMPLETED`]), naming them
/// (at most [`crate::plan::model::text::MAX_NAMED_NODES`]); none when there are none.
fn batch_event(
    label: &str,
    kind: ObjectKind,
    reason: &'static str,
    names: &[&str],
) -> Option<Effect> {
    let note = match names {
        [] => return None,
        [name] if reason == reasons::NODES_SIGNALLED => format!("{label}: signalled {kind} {name}"),
        [name] => format!("{label}: {kind} {name} completed"),
        _ if reason == reasons::NODES_SIGNALLED => {
            format!("{label}: signalled {} {kind}s: {}", names.len(), name_list(names))
        }
        _ => format!("{label}: {} {kind}s completed: {}", names.len(), name_list(names)),
    };
    Some(Effect::Event { kind: EventKind::Normal, reason, note })
}

/// The Event about one node that failed, went missing or has no usable platform, with its
/// reason; `None` for the other states (their Events are per batch, [`batch_event`]).
fn failure_event(label: &str, kind: ObjectKind, target: &TargetStatus) -> Option<Effect> {
    let name = &target.name;
    let reason_text = target.reason.as_deref().unwrap_or("no reason given");
    let (reason, note) = match target.state {
        TargetState::SignalApplyFailed => {
            (reasons::NODE_FAILED, format!("{label}: {kind} {name} failed: {reason_text}"))
        }
        TargetState::MissingSignalNode => {
            (reasons::NODE_MISSING, format!("{label}: {reason_text}"))
        }
        TargetState::MissingPlatform => (
            reasons::NODE_MISSING_PLATFORM,
            format!("{label}: {kind} {name} has no usable platform: {reason_text}"),
        ),
        TargetState::SignalPending | TargetState::SignalSent | TargetState::SignalCompleted => {
            return None;
        }
    };
    Some(Effect::Event { kind: EventKind::Warning, reason, note })
}

/// Failures and holds are Warnings; progress is Normal.
fn state_event_kind(state: PlanStateType) -> EventKind {
    match state {
        PlanStateType::NewPlan | PlanStateType::SchedulableWait | PlanStateType::Completed => {
            EventKind::Normal
        }
        PlanStateType::Schedulable
        | PlanStateType::IncompleteTargets
        | PlanStateType::MissingSignalNode
        | PlanStateType::MissingPlatform
        | PlanStateType::InconsistentTargets
        | PlanStateType::Restricted
        | PlanStateType::ApplyFailed
        | PlanStateType::Warning
        | PlanStateType::Aborted
        | PlanStateType::PreflightFailed
        | PlanStateType::RolledBack => EventKind::Warning,
    }
}

/// `NewPlan` for the empty state, the wire string otherwise.
fn display_state(state: PlanStateType) -> String {
    state.to_string()
}
