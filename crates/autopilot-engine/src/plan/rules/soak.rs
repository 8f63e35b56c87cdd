//! The one soak clock (canaries before the other workers, a group before the next): a pure
//! verdict from the soaking nodes' targets, their objects and the pass's time ([`clock`]).
//! The canaries' soak ([`canaries`]) and the soak between groups
//! (`crate::plan::rules::waves`) word the hold and the failure; nothing here writes.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::duration;
use autopilot_api::signal::format_timestamp;
use autopilot_api::v1beta2::{PlanStateType, TargetState, TargetStatus};
use jiff::Timestamp;

use crate::plan::model::command::{Group, targets};
use crate::plan::model::inputs::TargetObject;
use crate::plan::model::phases::reasons;
use crate::plan::model::verdict::{CommandView, Hold, Verdict};

/// What the soak says this pass.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::plan) enum Soak<'t> {
    /// Over (or none): go on.
    Over,
    /// This node is not Ready: the soak failed.
    NotReady(&'t TargetStatus),
    /// Still soaking: hold until `until` (a timestamp, or `never` for a soak too long to
    /// represent), and look again after `remaining` (when it can be represented).
    Hold { until: String, remaining: Option<Duration> },
}

/// The soak of `soak` over `nodes` (the targets that soak, as the status lists them), each
/// of which must stay Ready (its object in `objects`): it started when the last of them
/// changed state (the leader's own clock, kept in the status), or when this leader's term
/// began (`term_started`) if that is later or in this leader's future
/// ([`crate::term::counted_from`]), and `now` is the pass's time (`stamp`, in whole
/// seconds, stands in for a start not recorded yet).
pub(in crate::plan) fn clock<'t>(
    soak: Duration,
    nodes: &[&'t TargetStatus],
    objects: &BTreeMap<String, TargetObject>,
    (now, stamp): (Timestamp, Timestamp),
    term_started: Option<Timestamp>,
) -> Soak<'t> {
    if soak.is_zero() {
        return Soak::Over;
    }
    if let Some(target) = nodes.iter().find(|t| !objects.get(&t.name).is_some_and(|o| o.ready)) {
        return Soak::NotReady(target);
    }
    let since = nodes.iter().map(|t| t.last_updated_timestamp.0).max().unwrap_or(stamp);
    let since = crate::term::counted_from(since, term_started, now);
    let remaining = jiff::SignedDuration::try_from(soak)
        .ok()
        .and_then(|soak| soak.checked_sub(now.duration_since(since)));
    let remaining = match remaining {
        Some(remaining) if !remaining.is_positive() => return Soak::Over,
        Some(remaining) => Duration::try_from(remaining).ok(),
        // A soak too long to represent never ends; NewPlan refuses such a value.
        None => None,
    };
    let until = remaining
        .and_then(|r| jiff::SignedDuration::try_from(r).ok())
        .and_then(|r| now.checked_add(r).ok())
        .map_or_else(
            || "never".to_owned(),
            |at| format_timestamp(Timestamp::from_second(at.as_second()).unwrap_or(at)),
        );
    Soak::Hold { until, remaining }
}

/// The canaries completed: hold the other workers until the canaries have stayed Ready for
/// the soak, counted from the last canary's completion. A canary that is not Ready during
/// the soak ends the command (no other worker was touched). [`Verdict::Go`] once the soak
/// passed (or there is none): the other workers go.
///
/// The soak has passed once any other worker left `SignalPending`, so a leader change after
/// the soak never soaks again.
pub(in crate::plan) fn canaries(view: &CommandView<'_>, canaries: &[String]) -> Verdict {
    let (inputs, command) = (view.inputs, view.command);
    let soak = command.soak();
    if canaries.is_empty() || soak.is_zero() {
        return Verdict::Go;
    }
    let workers = targets(view.status, command, Group::Workers);
    let others_started = workers
        .iter()
        .any(|t| !canaries.contains(&t.name) && t.state != TargetState::SignalPending);
    let others_left = workers.iter().any(|t| !canaries.contains(&t.name));
    if others_started || !others_left {
        return Verdict::Go;
    }
    let objects = inputs.objects(command.object_kind(Group::Workers));
    let soaking: Vec<&TargetStatus> =
        workers.iter().filter(|t| canaries.contains(&t.name)).collect();
    let term = inputs.observed.term_started;
    let (until, remaining) = match clock(soak, &soaking, objects, (inputs.now, inputs.stamp), term)
    {
        Soak::Over => return Verdict::Go,
        Soak::NotReady(canary) => {
            let kind = command.object_kind(Group::Workers);
            return Verdict::End {
                state: PlanStateType::ApplyFailed,
                description: format!(
                    "{label}: canary {kind} {name} is not Ready during its soak of {}; no other \
                     worker was signalled",
                    duration::format(soak),
                    label = view.label,
                    name = canary.name,
                ),
            };
        }
        Soak::Hold { until, remaining } => (until, remaining),
    };
    Verdict::Hold(Hold {
        state: PlanStateType::SchedulableWait,
        why: Some(format!(
            "soaking: canary worker(s) {} completed; the other workers follow if they stay Ready \
             for {} (until {until})",
            canaries.join(", "),
            duration::format(soak)
        )),
        kind: Some(reasons::CANARY_SOAKING),
        until: remaining,
    })
}

#[cfg(test)]
mod tests {
    use autopilot_api::v1beta2::TargetState;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn done(name: &str, at: Timestamp) -> TargetStatus {
        let mut target = TargetStatus::new(name, TargetState::SignalCompleted, at);
        target.last_updated_timestamp = Time(at);
        target
    }

    fn objects(ready: &[(&str, bool)]) -> BTreeMap<String, TargetObject> {
        ready
            .iter()
            .map(|(name, ready)| {
                let object = TargetObject {
                    name: (*name).to_owned(),
                    labels: Default::default(),
                    ready: *ready,
                    signal: crate::plan::model::inputs::ObservedSignal::None,
                    required_keys: Default::default(),
                    version: None,
                    kubelet_version: None,
                    gate_check: None,
                    prestage: None,
                    drained: None,
                };
                ((*name).to_owned(), object)
            })
            .collect()
    }

    #[test]
    fn a_soak_runs_from_the_last_node_done_and_fails_on_a_node_not_ready() {
        let soak = Duration::from_secs(60);
        let (a, b) = (done("a", at(0)), done("b", at(10)));
        let ready = objects(&[("a", true), ("b", true)]);
        let held = clock(soak, &[&a, &b], &ready, (at(40), at(40)), None);
        assert_eq!(
            held,
            Soak::Hold {
                until: format_timestamp(at(70)),
                remaining: Some(Duration::from_secs(30))
            }
        );
        assert_eq!(clock(soak, &[&a, &b], &ready, (at(70), at(70)), None), Soak::Over);
        let b_down = objects(&[("a", true), ("b", false)]);
        assert_eq!(clock(soak, &[&a, &b], &b_down, (at(40), at(40)), None), Soak::NotReady(&b));
        assert_eq!(clock(Duration::ZERO, &[&a, &b], &b_down, (at(40), at(40)), None), Soak::Over);
    }
}
