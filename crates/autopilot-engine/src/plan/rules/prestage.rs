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

use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::prestage::{PrestageAsks, PrestageOutcome, PrestageRequest, PrestageState};
use autopilot_api::signal::format_timestamp;
use autopilot_api::v1beta2::{TargetState, TargetStatus};

use autopilot_api::duration;

use crate::plan::model::command::targets;
use crate::plan::model::inputs::{Inputs, TargetObject};
use crate::plan::model::verdict::CommandView;

/// Why the operator holds staging now (ask no further node), or `None`: a pause. The
/// plan's `downloadWindow` is the other hold ([`crate::plan::rules::window::RunSchedule::download_gate`],
/// checked next to it). A node that was asked already goes on staging either way.
pub(in crate::plan) fn may_stage(inputs: &Inputs<'_>) -> Option<String> {
    inputs.steering.paused.then(|| format!("paused ({} annotation)", keys::ANNOTATION_PAUSED))
}

/// Whether the command pre-stages and staging is not over: no target was signalled yet,
/// and some target that has not failed is not `Staged`.
pub(in crate::plan) fn staging_open(view: &CommandView<'_>) -> bool {
    let command = view.command;
    if command.prestage_limit(0).is_none() {
        return false;
    }
    let all: Vec<&TargetStatus> =
        command.groups().iter().flat_map(|&group| targets(view.status, command, group)).collect();
    let signalled = all.iter().any(|t| match t.state {
        TargetState::SignalSent | TargetState::SignalCompleted => true,
        TargetState::SignalPending
        | TargetState::SignalApplyFailed
        | TargetState::MissingPlatform
        | TargetState::MissingSignalNode => false,
    });
    !signalled
        && all.iter().any(|t| !t.state.is_terminal() && t.prestage != Some(PrestageState::Staged))
}

/// The command's `staged` count (`<staged>/<targets>`) when it pre-stages.
pub(in crate::plan) fn staged_count(view: &CommandView<'_>) -> Option<String> {
    let command = view.command;
    command.prestage_limit(0)?;
    let (staged, all) = command
        .groups()
        .iter()
        .flat_map(|&group| targets(view.status, command, group))
        .fold((0, 0), |(staged, all), t| {
            (staged + usize::from(t.prestage == Some(PrestageState::Staged)), all + 1)
        });
    Some(format!("{staged}/{all}"))
}

/// What an asked target's object says this pass.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::plan) enum Answer {
    /// It staged the payload.
    Staged,
    /// It could not stage (or said nothing in time): the target fails, and why.
    Failed(String),
    /// No answer yet; look again within this long (`None`: the deadline never runs out).
    Waiting(Option<Duration>),
}

/// Judge the answer of an asked target (`Requested`) from its object: a `Staged` report
/// stages it; a `Failed` one, a report that cannot be read, or no answer within the
/// command's progress `deadline` (from when it was asked) fails it.
pub(in crate::plan) fn answer(
    view: &CommandView<'_>,
    target: &TargetStatus,
    object: &TargetObject,
    deadline: Duration,
) -> Answer {
    let seen = object.prestage();
    if let Some(report) =
        seen.report.as_ref().filter(|r| r.is_for(&view.run.run_id, view.status.id))
    {
        return match report.says.outcome {
            PrestageOutcome::Staged => Answer::Staged,
            PrestageOutcome::Failed => {
                let why = report.says.reason.as_deref().unwrap_or("no reason given");
                Answer::Failed(format!("could not stage the payload: {why}"))
            }
        };
    }
    if let Some(problem) = &seen.report_problem {
        return Answer::Failed(format!("its pre-staging report cannot be read: {problem}"));
    }
    let elapsed = view.inputs.elapsed_since(target.last_updated_timestamp.0);
    // A deadline too long to represent never runs out.
    let remaining = jiff::SignedDuration::try_from(deadline)
        .ok()
        .and_then(|deadline| deadline.checked_sub(elapsed));
    match remaining {
        Some(remaining) if !remaining.is_positive() => Answer::Failed(format!(
            "did not report the payload staged within {}",
            duration::format(deadline)
        )),
        Some(remaining) => Answer::Waiting(Duration::try_from(remaining).ok()),
        None => Answer::Waiting(None),
    }
}

/// How many more targets may be asked now: `prestageConcurrent` (default: all, at least
/// one) less the targets asked and unanswered.
pub(in crate::plan) fn free_asks(view: &CommandView<'_>) -> usize {
    let command = view.command;
    let all = command.groups().iter().map(|&g| targets(view.status, command, g).len()).sum();
    let limit = command.prestage_limit(all).unwrap_or(all).max(1);
    let asked = command
        .groups()
        .iter()
        .flat_map(|&group| targets(view.status, command, group))
        .filter(|t| !t.state.is_terminal() && t.prestage == Some(PrestageState::Requested))
        .count();
    limit.saturating_sub(asked)
}

/// The request this command's targets are asked to stage with, stamped now.
pub(in crate::plan) fn request(view: &CommandView<'_>) -> PrestageRequest {
    PrestageRequest {
        plan_id: view.run.plan_id.clone(),
        run_id: view.run.run_id.clone(),
        command: view.status.id,
        asked: format_timestamp(view.inputs.stamp),
        asks: PrestageAsks {},
    }
}

/// Whether a target's object carries `request` (the same plan, run and command).
pub(in crate::plan) fn carries(object: &TargetObject, request: &PrestageRequest) -> bool {
    object.prestage().request.as_ref().is_some_and(|r| {
        r.plan_id == request.plan_id && r.run_id == request.run_id && r.command == request.command
    })
}

/// What the held command says: the steady part (its Event's) and the detail, `<staged>
/// staged, waiting for <up to five names>[ and <n> more]`, and why no further node is
/// asked (`holds`), if so.
pub(in crate::plan) fn waiting(view: &CommandView<'_>, holds: Option<&str>) -> (String, String) {
    let command = view.command;
    let waiting: Vec<&str> = command
        .groups()
        .iter()
        .flat_map(|&group| targets(view.status, command, group))
        .filter(|t| !t.state.is_terminal() && t.prestage != Some(PrestageState::Staged))
        .map(|t| t.name.as_str())
        .collect();
    let staged = view.status.staged.clone().unwrap_or_default();
    let steady = "pre-staging: no node is signalled before every target staged".to_owned();
    (steady, staging_detail(&staged, &waiting, holds))
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
