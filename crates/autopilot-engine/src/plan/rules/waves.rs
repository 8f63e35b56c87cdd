//! Failure-domain waves (`limits.groupBy`): the workers of an update command go one group
//! at a time, a group being the workers that had the same value of the `groupBy` Node label
//! when the run started (frozen in each target's `group`).
//!
//! Groups go in ascending order of that value (byte order, as `kubectl get -l` sorts
//! nothing and operators name zones so they sort), and the workers without the label form
//! one last group. Within a group at most `limits.concurrent` workers are in flight (a
//! percentage counts the group's workers). The next group starts only once every worker of
//! the current one is done, no gate run is open, and the workers of the group that just
//! completed stayed Ready for `betweenGroups.soak`. A failure past the budget stops the
//! command as always (nodes in flight finish), and since nodes in flight are all of one
//! group, no later group is ever touched; a failure within `limits.maxFailures` lets the
//! rest of its own group go on, but the command ends `ApplyFailed` before the next group. Canaries are the first workers of the first group.
//!
//! Nothing here is remembered between passes beyond the targets' states: the current group
//! is the first one with a worker not done, and a group has started once one of its
//! workers left `SignalPending` (so a new leader never soaks twice).

use autopilot_api::duration;
use autopilot_api::v1beta2::{PlanStateType, TargetState, TargetStatus};

use crate::plan::model::command::{Group, targets};
use crate::plan::model::phases::reasons;
use crate::plan::model::verdict::{CommandView, Hold, Verdict};
use crate::plan::rules::soak::{Soak, clock};

/// How the status names a group: `<key>=<value>`, or `without <key>` for the workers that
/// had no such label.
pub(in crate::plan) fn group_name(key: &str, group: Option<&str>) -> String {
    match group {
        Some(value) => format!("{key}={value}"),
        None => format!("without {key}"),
    }
}

/// The order groups go in: labelled groups by ascending value, then the unlabelled one.
pub(in crate::plan) fn group_rank(group: Option<&str>) -> (bool, &str) {
    (group.is_none(), group.unwrap_or_default())
}

/// The distinct groups of `workers`, in the order they go.
pub(in crate::plan) fn group_order(workers: &[TargetStatus]) -> Vec<Option<&str>> {
    let mut groups: Vec<Option<&str>> = workers.iter().map(|t| t.group.as_deref()).collect();
    groups.sort_by_key(|group| group_rank(*group));
    groups.dedup();
    groups
}

/// Where the waves of a command are: the group whose workers may be signalled now.
#[derive(Clone, Debug)]
pub(in crate::plan) struct Wave {
    /// The `groupBy` label key.
    pub(in crate::plan) key: String,
    /// The current group's value (`None`: the workers without the label).
    pub(in crate::plan) group: Option<String>,
    /// Its place in the order (0-based) and how many groups there are.
    pub(in crate::plan) position: usize,
    pub(in crate::plan) count: usize,
    /// The names of its workers.
    pub(in crate::plan) members: Vec<String>,
    /// Whether one of its workers left `SignalPending`.
    pub(in crate::plan) started: bool,
    /// The group before it, with its workers' names (none for the first group).
    pub(in crate::plan) previous: Option<(Option<String>, Vec<String>)>,
}

impl Wave {
    /// The current group as the status names it.
    pub(in crate::plan) fn name(&self) -> String {
        group_name(&self.key, self.group.as_deref())
    }
}

/// The current wave of a command with `groupBy`: the first group (in order) with a worker
/// that is not done. `None` without `groupBy` or once every worker is done.
pub(in crate::plan) fn wave(view: &CommandView<'_>) -> Option<Wave> {
    let key = view.command.group_by()?;
    let workers = targets(view.status, view.command, Group::Workers);
    let order = group_order(workers);
    let members = |group: Option<&str>| -> Vec<&TargetStatus> {
        workers.iter().filter(|t| t.group.as_deref() == group).collect()
    };
    let position =
        order.iter().position(|&group| members(group).iter().any(|t| !t.state.is_terminal()))?;
    let group = order[position];
    let current = members(group);
    let names = |targets: &[&TargetStatus]| targets.iter().map(|t| t.name.clone()).collect();
    Some(Wave {
        key: key.to_owned(),
        group: group.map(str::to_owned),
        position,
        count: order.len(),
        members: names(&current),
        started: current.iter().any(|t| t.state != TargetState::SignalPending),
        previous: position.checked_sub(1).map(|before| {
            let group = order[before];
            (group.map(str::to_owned), names(&members(group)))
        }),
    })
}

/// The canary workers with `groupBy`: the first `limits.canary` workers by name of the
/// first group (at most the whole group), so the canaries never span two groups.
pub(in crate::plan) fn group_canaries(view: &CommandView<'_>) -> Option<Vec<String>> {
    view.command.group_by()?;
    let workers = targets(view.status, view.command, Group::Workers);
    let first = group_order(workers).first().copied();
    let mut names: Vec<String> = workers
        .iter()
        .filter(|t| first.is_some_and(|first| t.group.as_deref() == first))
        .filter(|t| !crate::plan::model::command::refused_by_own_report(t))
        .map(|t| t.name.clone())
        .collect();
    names.sort_unstable();
    names.truncate(view.command.canary());
    Some(names)
}

/// Between two groups: before the first worker of a group other than the first is
/// signalled, the gates of the last one must have passed (`gates_open` is whether a gate
/// run is still open) and its workers must have stayed Ready for `betweenGroups.soak` since
/// its last completion. [`Verdict::Go`] when the current group may go (or there are no
/// groups); otherwise held, or ended because a worker of the soaking group failed or is not
/// Ready.
pub(in crate::plan) fn between_groups(view: &CommandView<'_>, gates_open: bool) -> Verdict {
    let Some(wave) = wave(view) else { return Verdict::Go };
    let Some((previous, previous_members)) = wave.previous.clone() else { return Verdict::Go };
    if wave.started {
        return Verdict::Go;
    }
    let previous_name = group_name(&wave.key, previous.as_deref());
    // Check 0: a group with a failed worker is where the rollout stops, even within
    // `limits.maxFailures` (which lets the rest of that group go on): the next failure
    // domain is not touched after one failed.
    if let Some(ended) = stop_after_failed_group(view, &wave, &previous_name, &previous_members) {
        return ended;
    }
    // Check 1: the last group's gates (a gate run holds its nodes' slots; the next group
    // waits for them like the next wave of `after: batch`). The gates' own reason names
    // what they wait for.
    if gates_open {
        return Verdict::Hold(Hold::quiet());
    }
    // Check 2: the soak between groups.
    soak_between_groups(view, &wave, &previous_name, &previous_members)
}

/// Check 0 of [`between_groups`]: when a worker of the previous group failed, end the
/// command `ApplyFailed` naming them; `None` otherwise.
fn stop_after_failed_group(
    view: &CommandView<'_>,
    wave: &Wave,
    previous_name: &str,
    previous_members: &[String],
) -> Option<Verdict> {
    let (command, kind) = (view.command, view.command.object_kind(Group::Workers));
    let failed: Vec<String> = targets(view.status, command, Group::Workers)
        .iter()
        .filter(|t| previous_members.contains(&t.name) && t.state.is_failure())
        // A worker NewPlan failed for its own report proved nothing about the payload.
        .filter(|t| !crate::plan::model::command::refused_by_own_report(t))
        .map(|t| {
            let why = t.reason.as_deref().unwrap_or("no reason given");
            format!("{kind} {} ({}): {why}", t.name, t.state)
        })
        .collect();
    (!failed.is_empty()).then(|| Verdict::End {
        state: PlanStateType::ApplyFailed,
        description: format!(
            "{label}: group {previous_name} had {n} failed worker(s), so no worker of group \
             {next} or later was signalled (a failure within limits.maxFailures lets its own \
             group finish, never the next one start): {failed}",
            label = view.label,
            n = failed.len(),
            next = wave.name(),
            failed = failed.join("; "),
        ),
    })
}

/// Check 2 of [`between_groups`]: the soak between groups. [`Verdict::Go`] once the
/// previous group's workers stayed Ready for `betweenGroups.soak` (or there is no soak);
/// the command ends if one of them is not Ready, and is held soaking otherwise.
fn soak_between_groups(
    view: &CommandView<'_>,
    wave: &Wave,
    previous_name: &str,
    previous_members: &[String],
) -> Verdict {
    let (inputs, command) = (view.inputs, view.command);
    let soak = command.between_groups_soak();
    if soak.is_zero() {
        return Verdict::Go;
    }
    let workers = targets(view.status, command, Group::Workers);
    let of_previous: Vec<&TargetStatus> =
        workers.iter().filter(|t| previous_members.contains(&t.name)).collect();
    let objects = inputs.objects(command.object_kind(Group::Workers));
    let term = inputs.observed.term_started;
    let (until, remaining) =
        match clock(soak, &of_previous, objects, (inputs.now, inputs.stamp), term) {
            Soak::Over => return Verdict::Go,
            Soak::NotReady(target) => {
                let kind = command.object_kind(Group::Workers);
                return Verdict::End {
                    state: PlanStateType::ApplyFailed,
                    description: format!(
                        "{label}: {kind} {name} of group {previous_name} is not Ready during the \
                     soak of {soak} between groups; no worker of group {next} or later was \
                     signalled",
                        label = view.label,
                        name = target.name,
                        soak = duration::format(soak),
                        next = wave.name(),
                    ),
                };
            }
            Soak::Hold { until, remaining } => (until, remaining),
        };
    Verdict::Hold(Hold {
        state: PlanStateType::SchedulableWait,
        why: Some(format!(
            "soaking: group {previous_name} completed; group {next} ({position} of {count}) \
             follows if the workers of {previous_name} stay Ready for {soak} (until {until})",
            next = wave.name(),
            position = wave.position + 1,
            count = wave.count,
            soak = duration::format(soak),
        )),
        kind: Some(reasons::GROUP_SOAKING),
        until: remaining,
    })
}

impl Wave {
    /// What the command's `reason` says while this group goes: `updating group <name>
    /// (<n> of <count>)`.
    pub(in crate::plan) fn updating(&self) -> String {
        format!(
            "updating group {} ({} of {}); the later groups wait for it",
            self.name(),
            self.position + 1,
            self.count
        )
    }
}
