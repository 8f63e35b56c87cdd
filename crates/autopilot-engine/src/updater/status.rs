//! What the updater writes into an UpdateConfig's status after a check, from what the check
//! found: [`status`]. Pure: the previous status, the time and the check's outcome in, the
//! whole new status out; the shell merge-patches it onto the status subresource when it
//! differs from what is there.
//!
//! The kstatus conditions (all three are always written, each with the generation it
//! describes):
//!
//! | Outcome | `Ready` | `Reconciling` | `Stalled` |
//! |---|---|---|---|
//! | generation not checked yet | False `CheckPending` | True `CheckPending` | False |
//! | `UpToDate`, `OutsideWindow`, `MinIntervalWait`, `AlreadyPlanned` of a `Completed` Plan | True | False | False |
//! | `PlanCreated`, `PlanRunning` | False | True | False |
//! | `AlreadyPlanned` of a Plan that ended otherwise, `RolledBackVersion`, `UnverifiedPayload`, `VersionSkew`, `InvalidUpdateConfig`, `UpdateServerError` | False | False | True |
//!
//! A closed window or a minimum interval is the UpdateConfig working as configured, so it
//! is `Ready` (a GitOps health check does not wait a week for a window); the message and
//! `status.nextUpdateAllowed` say when the update comes.
//!
//! The end of life ([`end_of_life`]): the server's `eolDate` is the end of life of the
//! release line (major.minor) of the version it offers. The running version is judged
//! against it when it is on that line, or on an older one once the date has passed (an
//! older line ends no later). A date is `YYYY-MM-DD` (the end of life begins at 00:00 UTC
//! that day) or an RFC 3339 time; anything else is a message, not an error.

use autopilot_api::text;
use autopilot_api::v1beta2::{
    EndOfLifeStatus, PlanStateType, UpdateCheckStatus, UpdateConfigStatus,
};
use autopilot_api::version::K0sVersion;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::updater::channel::ChannelAnswer;
use crate::updater::decide::Decision;
use crate::updater::interval::UpdateKind;

/// The longest message kept in the status (the last check's, a condition's), in bytes;
/// as long as the Plan keeps a node's reason.
pub const MESSAGE_MAX_BYTES: usize = 1024;

/// The longest version or `eolDate` kept in the status, in bytes.
pub const SHORT_MAX_BYTES: usize = 64;

/// Condition types and the reason of their own (kstatus).
pub mod conditions {
    /// The last check of the current generation succeeded.
    pub const READY: &str = "Ready";
    /// The generation is not checked yet, or a Plan the updater wrote runs.
    pub const RECONCILING: &str = "Reconciling";
    /// The updater cannot act on the UpdateConfig.
    pub const STALLED: &str = "Stalled";
    /// Reason while the current generation is not checked yet.
    pub const CHECK_PENDING: &str = "CheckPending";
    /// Reason of a condition that is False because another one holds.
    pub const AS_EXPECTED: &str = "AsExpected";
}

/// What a check ended with.
#[derive(Clone, Copy, Debug)]
pub enum Checked<'a> {
    /// The current generation is seen but not checked yet.
    Pending,
    /// The check decided (and the Plan it decided on, if any, was written).
    Decided {
        /// The decision.
        decision: &'a Decision,
        /// What the server offered.
        answer: &'a ChannelAnswer,
    },
    /// The check could not finish: the server, a read or the Plan write failed, or the
    /// strategy is invalid.
    Failed {
        /// The Event reason (`UpdateServerError`, `InvalidUpdateConfig`).
        reason: &'static str,
        /// Why, one line.
        message: &'a str,
        /// What the server offered, if it answered before the failure.
        answer: Option<&'a ChannelAnswer>,
    },
}

/// Everything [`status`] looks at.
#[derive(Clone, Copy, Debug)]
pub struct StatusInputs<'a> {
    /// The status as it is now.
    pub previous: Option<&'a UpdateConfigStatus>,
    /// The UpdateConfig's `metadata.generation`.
    pub generation: Option<i64>,
    /// When the check ended.
    pub now: Timestamp,
    /// The version the updater judged against (the controller's own).
    pub running_version: &'a str,
    /// What the check ended with.
    pub checked: Checked<'a>,
}

/// Which condition holds, with its reason and message.
enum Verdict {
    Ready,
    Reconciling,
    Stalled,
}

/// The new status after `inputs.checked`. Pure; see the module docs.
pub fn status(inputs: &StatusInputs<'_>) -> UpdateConfigStatus {
    let StatusInputs { previous, generation, now, running_version, checked } = *inputs;
    let mut status = previous.cloned().unwrap_or_default();
    let (verdict, reason, message) = match checked {
        Checked::Pending => {
            let message = match generation {
                Some(generation) => format!("generation {generation} is not checked yet"),
                None => "not checked yet".to_owned(),
            };
            (Verdict::Reconciling, conditions::CHECK_PENDING, message)
        }
        Checked::Decided { decision, answer } => {
            record_answer(&mut status, answer, running_version, now);
            record_decision(&mut status, decision, running_version, now);
            (verdict(decision), decision.reason(), decision.message())
        }
        Checked::Failed { reason, message, answer } => {
            if let Some(answer) = answer {
                record_answer(&mut status, answer, running_version, now);
            }
            status.next_update_allowed = None;
            (Verdict::Stalled, reason, message.to_owned())
        }
    };
    let message = text::truncate(&message, MESSAGE_MAX_BYTES);
    if !matches!(checked, Checked::Pending) {
        status.observed_generation = generation;
        status.running_version = Some(text::truncate(running_version, SHORT_MAX_BYTES));
        status.last_check = Some(UpdateCheckStatus {
            time: Time(now),
            reason: reason.to_owned(),
            message: message.clone(),
        });
    }
    let holds = |which: Verdict| match (&verdict, which) {
        (Verdict::Ready, Verdict::Ready)
        | (Verdict::Reconciling, Verdict::Reconciling)
        | (Verdict::Stalled, Verdict::Stalled) => true,
        (Verdict::Ready | Verdict::Reconciling | Verdict::Stalled, _) => false,
    };
    let set = |conditions: &mut Vec<Condition>, type_: &str, holds: bool| {
        let (reason, message) = if holds || type_ == conditions::READY {
            (reason, message.as_str())
        } else {
            (conditions::AS_EXPECTED, "")
        };
        set_condition(conditions, type_, holds, reason, message, generation, now);
    };
    set(&mut status.conditions, conditions::READY, holds(Verdict::Ready));
    set(&mut status.conditions, conditions::RECONCILING, holds(Verdict::Reconciling));
    set(&mut status.conditions, conditions::STALLED, holds(Verdict::Stalled));
    status
}

/// Which condition a decision makes hold (the table of the module docs).
fn verdict(decision: &Decision) -> Verdict {
    match decision {
        Decision::UpToDate { .. }
        | Decision::OutsideWindow { .. }
        | Decision::MinIntervalWait { .. } => Verdict::Ready,
        Decision::AlreadyPlanned { state: PlanStateType::Completed, .. } => Verdict::Ready,
        // Any other end (a running Plan is `PlanRunning`, never `AlreadyPlanned`).
        Decision::AlreadyPlanned { .. } => Verdict::Stalled,
        Decision::CreatePlan { .. }
        | Decision::ReplacePlan { .. }
        | Decision::PlanRunning { .. } => Verdict::Reconciling,
        Decision::RolledBackVersion { .. }
        | Decision::UnverifiedPayload { .. }
        | Decision::VersionSkew { .. }
        | Decision::Invalid(_) => Verdict::Stalled,
    }
}

/// The server's answer: the offered version and its end of life.
fn record_answer(
    status: &mut UpdateConfigStatus,
    answer: &ChannelAnswer,
    running_version: &str,
    now: Timestamp,
) {
    status.offered_version = Some(text::truncate(&answer.version, SHORT_MAX_BYTES));
    status.end_of_life = answer
        .eol_date
        .as_deref()
        .map(|date| end_of_life(date, running_version, &answer.version, now).status);
}

/// What the decision changes beyond the last check: the Plan written and the time of the
/// last update of its kind, and when a held version is allowed.
fn record_decision(
    status: &mut UpdateConfigStatus,
    decision: &Decision,
    running_version: &str,
    now: Timestamp,
) {
    status.next_update_allowed = None;
    match decision {
        Decision::CreatePlan { spec, .. } | Decision::ReplacePlan { spec, .. } => {
            status.last_plan_id = Some(text::truncate(&spec.id, SHORT_MAX_BYTES));
            let planned = spec.commands.iter().find_map(|command| {
                let k0s = command.k0supdate.as_ref().map(|k| k.version.as_str());
                k0s.or(command.airgapupdate.as_ref().map(|a| a.version.as_str()))
            });
            let kind = planned.and_then(|planned| {
                let planned = K0sVersion::parse(planned).ok()?;
                let running = K0sVersion::parse(running_version).ok()?;
                Some(UpdateKind::between(&running, &planned))
            });
            match kind {
                Some(UpdateKind::Patch) => status.last_patch_update = Some(Time(now)),
                Some(UpdateKind::Minor) => status.last_minor_update = Some(Time(now)),
                None => {}
            }
        }
        Decision::MinIntervalWait { allowed_at, .. } => {
            status.next_update_allowed = Some(Time(*allowed_at));
        }
        Decision::UpToDate { .. }
        | Decision::OutsideWindow { .. }
        | Decision::PlanRunning { .. }
        | Decision::AlreadyPlanned { .. }
        | Decision::RolledBackVersion { .. }
        | Decision::UnverifiedPayload { .. }
        | Decision::VersionSkew { .. }
        | Decision::Invalid(_) => {}
    }
}

/// The merge patch (RFC 7386) of the status subresource that turns `old` into `new`:
/// `{"status": ...}` with only what changed, `null` for what went away (a merge patch keeps
/// whatever it does not name). `None` when nothing changed: nothing to write.
pub fn merge_patch(
    old: Option<&UpdateConfigStatus>,
    new: &UpdateConfigStatus,
) -> Option<serde_json::Value> {
    if old == Some(new) {
        return None;
    }
    let to_value = |status: &UpdateConfigStatus| {
        serde_json::to_value(status).unwrap_or(serde_json::Value::Null)
    };
    let old = old.map_or(serde_json::Value::Null, to_value);
    let diff = diff(&old, &to_value(new))?;
    Some(serde_json::json!({ "status": diff }))
}

/// What a merge patch must say to turn `old` into `new`; `None` when they are equal. Objects
/// are patched key by key, anything else is replaced whole (arrays too, as RFC 7386 says).
fn diff(old: &serde_json::Value, new: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    if old == new {
        return None;
    }
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return Some(new.clone());
    };
    let mut patch = serde_json::Map::new();
    for (key, value) in new {
        let change = match old.get(key) {
            Some(before) => diff(before, value),
            None => Some(value.clone()),
        };
        if let Some(change) = change {
            patch.insert(key.clone(), change);
        }
    }
    for key in old.keys().filter(|key| !new.contains_key(*key)) {
        patch.insert(key.clone(), Value::Null);
    }
    Some(Value::Object(patch))
}

/// Set condition `type_` to `holds`; its `lastTransitionTime` moves only when its status
/// changes.
fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    holds: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = if holds { "True" } else { "False" };
    let index = match conditions.iter().position(|c| c.type_ == type_) {
        Some(index) => index,
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status: String::new(),
                reason: String::new(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(now),
            });
            conditions.len() - 1
        }
    };
    let condition = &mut conditions[index];
    if condition.status != status {
        condition.status = status.to_owned();
        condition.last_transition_time = Time(now);
    }
    reason.clone_into(&mut condition.reason);
    message.clone_into(&mut condition.message);
    condition.observed_generation = generation;
}

/// The running version judged against the server's `eolDate` (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct EndOfLife {
    /// What the status shows.
    pub status: EndOfLifeStatus,
    /// The end of life as a time, if the date is well-formed.
    pub at: Option<Timestamp>,
}

/// Judge `running` against `eol_date`, the end of life of `offered`'s release line, at
/// `now`. Never fails: what cannot be judged is said in the message.
pub fn end_of_life(eol_date: &str, running: &str, offered: &str, now: Timestamp) -> EndOfLife {
    let date = text::truncate(eol_date, SHORT_MAX_BYTES);
    let at = match parse_eol_date(eol_date) {
        Ok(at) => at,
        Err(message) => {
            let status = EndOfLifeStatus { date, past: None, message };
            return EndOfLife { status, at: None };
        }
    };
    let lines = K0sVersion::parse(running).ok().zip(K0sVersion::parse(offered).ok()).map(
        |(running, offered)| {
            let line = |v: &K0sVersion| (v.semver().major, v.semver().minor);
            line(&running).cmp(&line(&offered))
        },
    );
    let reached = now >= at;
    let running_text = text::truncate(running, SHORT_MAX_BYTES);
    let (past, message) = match lines {
        Some(std::cmp::Ordering::Equal) if reached => {
            (Some(true), format!("{running_text} is past its end of life ({at})"))
        }
        Some(std::cmp::Ordering::Equal) => (Some(false), String::new()),
        Some(std::cmp::Ordering::Less) if reached => (
            Some(true),
            format!(
                "{running_text} is past its end of life: the newer release line the server \
                 offers ended at {at}"
            ),
        ),
        Some(std::cmp::Ordering::Less) => (
            None,
            "the date is the end of life of the newer release line the server offers; the \
             running version's own is not known"
                .to_owned(),
        ),
        Some(std::cmp::Ordering::Greater) => (
            None,
            "the date is the end of life of an older release line than the running one".to_owned(),
        ),
        None => (None, "the running or the offered version is not a k0s version".to_owned()),
    };
    EndOfLife { status: EndOfLifeStatus { date, past, message }, at: Some(at) }
}

/// `eolDate` as a time: `YYYY-MM-DD` (00:00 UTC that day) or RFC 3339; the error is a
/// message naming the value.
pub fn parse_eol_date(value: &str) -> Result<Timestamp, String> {
    let trimmed = value.trim();
    if let Ok(date) = trimmed.parse::<jiff::civil::Date>()
        && let Ok(at) = date.to_zoned(jiff::tz::TimeZone::UTC)
    {
        return Ok(at.timestamp());
    }
    trimmed.parse::<Timestamp>().map_err(|_| {
        format!(
            "the update server's eolDate {:?} is not a date (expected YYYY-MM-DD or an RFC 3339 \
             time); the end of life cannot be judged",
            text::printable(text::cut(value, SHORT_MAX_BYTES))
        )
    })
}

#[cfg(test)]
mod tests;
