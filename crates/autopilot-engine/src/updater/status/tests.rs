//! Tests of [`super::status`] (the conditions for each outcome, the update times) and
//! [`super::end_of_life`].

use std::collections::BTreeMap;

use autopilot_api::v1beta2::{PlanCommand, PlanCommandK0sUpdate, PlanSpec};
use jiff::Timestamp;

use super::*;
use crate::updater::decide::reasons;

const RUNNING: &str = "v1.35.1+k0s.0";

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).expect("a valid time")
}

const NOW: i64 = 1_800_000_000;

fn answer(version: &str, eol: Option<&str>) -> ChannelAnswer {
    ChannelAnswer {
        version: version.to_owned(),
        eol_date: eol.map(str::to_owned),
        k0s: BTreeMap::new(),
        ..ChannelAnswer::default()
    }
}

fn plan_for(version: &str, now: Timestamp) -> PlanSpec {
    PlanSpec {
        id: now.as_second().to_string(),
        timestamp: now.as_second().to_string(),
        commands: vec![PlanCommand {
            k0supdate: Some(PlanCommandK0sUpdate {
                version: version.to_owned(),
                ..PlanCommandK0sUpdate::default()
            }),
            airgapupdate: None,
            preflight: None,
        }],
        ..PlanSpec::default()
    }
}

fn after(
    previous: Option<&UpdateConfigStatus>,
    generation: i64,
    now: Timestamp,
    checked: Checked<'_>,
) -> UpdateConfigStatus {
    status(&StatusInputs {
        previous,
        generation: Some(generation),
        now,
        running_version: RUNNING,
        checked,
    })
}

fn decided(decision: &Decision, offered: &ChannelAnswer) -> UpdateConfigStatus {
    after(None, 3, at(NOW), Checked::Decided { decision, answer: offered })
}

/// `(Ready, Reconciling, Stalled)` statuses, and the reason of the one that holds.
fn verdict(status: &UpdateConfigStatus) -> (&str, &str, &str, &str) {
    let get = |type_: &str| {
        status.conditions.iter().find(|c| c.type_ == type_).expect("every condition is written")
    };
    let (ready, reconciling, stalled) =
        (get(conditions::READY), get(conditions::RECONCILING), get(conditions::STALLED));
    for condition in [ready, reconciling, stalled] {
        assert_eq!(condition.observed_generation, Some(3), "{condition:?}");
    }
    let holding = [ready, reconciling, stalled]
        .into_iter()
        .find(|c| c.status == "True")
        .expect("one condition holds");
    (&ready.status, &reconciling.status, &stalled.status, &holding.reason)
}

#[test]
fn up_to_date_is_ready_and_records_the_check() {
    let offered = answer(RUNNING, None);
    let decision = Decision::UpToDate { running: RUNNING.to_owned(), offered: RUNNING.to_owned() };
    let status = decided(&decision, &offered);
    assert_eq!(verdict(&status), ("True", "False", "False", reasons::UP_TO_DATE));
    assert_eq!(status.observed_generation, Some(3));
    let check = status.last_check.as_ref().expect("the last check");
    assert_eq!(check.time, Time(at(NOW)));
    assert_eq!(check.reason, reasons::UP_TO_DATE);
    assert_eq!(check.message, decision.message());
    assert_eq!(status.offered_version.as_deref(), Some(RUNNING));
    assert_eq!(status.running_version.as_deref(), Some(RUNNING));
    assert_eq!(status.end_of_life, None);
}

#[test]
fn waiting_for_the_window_or_the_interval_is_ready_and_says_until_when() {
    let offered = answer("v1.35.2+k0s.0", None);
    let window = Decision::OutsideWindow { offered: offered.version.clone(), opens_at: None };
    assert_eq!(verdict(&decided(&window, &offered)), ("True", "False", "False", "OutsideWindow"));
    let wait = Decision::MinIntervalWait {
        offered: offered.version.clone(),
        kind: UpdateKind::Patch,
        last: at(NOW - 60),
        allowed_at: at(NOW + 3600),
    };
    let status = decided(&wait, &offered);
    assert_eq!(verdict(&status), ("True", "False", "False", reasons::MIN_INTERVAL_WAIT));
    assert_eq!(status.next_update_allowed, Some(Time(at(NOW + 3600))));
    let ready = &status.conditions[0];
    assert!(ready.message.contains(&at(NOW + 3600).to_string()), "{}", ready.message);
}

#[test]
fn a_written_plan_is_reconciling_and_records_the_patch_update_time_and_plan_id() {
    let offered = answer("v1.35.2+k0s.0", None);
    let spec = plan_for("v1.35.2+k0s.0", at(NOW));
    let decision = Decision::CreatePlan { spec: spec.clone(), left_out: Vec::new() };
    let status = decided(&decision, &offered);
    assert_eq!(verdict(&status), ("False", "True", "False", reasons::PLAN_CREATED));
    assert_eq!(status.last_patch_update, Some(Time(at(NOW))));
    assert_eq!(status.last_minor_update, None);
    assert_eq!(status.last_plan_id.as_deref(), Some(spec.id.as_str()));
}

#[test]
fn a_written_minor_plan_records_the_minor_update_time_and_keeps_the_patch_one() {
    let previous = UpdateConfigStatus {
        last_patch_update: Some(Time(at(NOW - 86_400))),
        ..UpdateConfigStatus::default()
    };
    let offered = answer("v1.36.0+k0s.0", None);
    let decision = Decision::ReplacePlan {
        previous: PlanStateType::Completed,
        spec: plan_for("v1.36.0+k0s.0", at(NOW)),
        left_out: Vec::new(),
    };
    let status = after(
        Some(&previous),
        3,
        at(NOW),
        Checked::Decided { decision: &decision, answer: &offered },
    );
    assert_eq!(status.last_minor_update, Some(Time(at(NOW))));
    assert_eq!(status.last_patch_update, Some(Time(at(NOW - 86_400))));
}

#[test]
fn a_running_plan_is_reconciling() {
    let offered = answer("v1.35.2+k0s.0", None);
    let decision = Decision::PlanRunning { state: PlanStateType::SchedulableWait };
    assert_eq!(verdict(&decided(&decision, &offered)), ("False", "True", "False", "PlanRunning"));
}

#[test]
fn a_completed_plan_already_planned_is_ready_one_that_ended_otherwise_stalls() {
    let offered = answer("v1.35.2+k0s.0", None);
    let done = Decision::AlreadyPlanned {
        state: PlanStateType::Completed,
        offered: offered.version.clone(),
    };
    assert_eq!(verdict(&decided(&done, &offered)), ("True", "False", "False", "AlreadyPlanned"));
    let failed = Decision::AlreadyPlanned {
        state: PlanStateType::ApplyFailed,
        offered: offered.version.clone(),
    };
    assert_eq!(verdict(&decided(&failed, &offered)), ("False", "False", "True", "AlreadyPlanned"));
}

#[test]
fn every_problem_stalls_with_its_reason_and_message() {
    let offered = answer("v1.35.2+k0s.0", None);
    let problems = [
        Decision::Invalid("upgradeStrategy.type is required (periodic or cron)".to_owned()),
        Decision::VersionSkew {
            offered: offered.version.clone(),
            problems: vec!["controller c1 would skip a minor".to_owned()],
        },
        Decision::UnverifiedPayload {
            offered: offered.version.clone(),
            entries: vec!["k0s linux-amd64 (http://x)".to_owned()],
        },
        Decision::RolledBackVersion { offered: offered.version.clone(), plan_id: "7".to_owned() },
    ];
    for decision in problems {
        let status = decided(&decision, &offered);
        assert_eq!(verdict(&status), ("False", "False", "True", decision.reason()));
        let stalled = status.conditions.iter().find(|c| c.type_ == "Stalled").expect("Stalled");
        assert_eq!(stalled.message, decision.message());
    }
}

#[test]
fn a_failed_check_stalls_and_keeps_what_the_last_answer_said() {
    let offered = answer("v1.35.2+k0s.0", Some("2099-01-01"));
    let decision = Decision::OutsideWindow { offered: offered.version.clone(), opens_at: None };
    let before = decided(&decision, &offered);
    let failed = Checked::Failed {
        reason: reasons::SERVER_ERROR,
        message: "update server answered 503",
        answer: None,
    };
    let status = after(Some(&before), 3, at(NOW + 10), failed);
    assert_eq!(verdict(&status), ("False", "False", "True", reasons::SERVER_ERROR));
    assert_eq!(status.offered_version.as_deref(), Some("v1.35.2+k0s.0"));
    assert_eq!(status.end_of_life, before.end_of_life);
    assert_eq!(status.last_check.expect("a check").message, "update server answered 503");
    // Ready went from True to False now; Stalled too; Reconciling stayed False.
    let transition = |s: &UpdateConfigStatus, t: &str| {
        s.conditions
            .iter()
            .find(|c| c.type_ == t)
            .expect("a condition")
            .last_transition_time
            .clone()
    };
    let (old, new) = (&before, &after(Some(&before), 3, at(NOW + 10), failed));
    assert_eq!(transition(new, "Ready"), Time(at(NOW + 10)));
    assert_eq!(transition(new, "Stalled"), Time(at(NOW + 10)));
    assert_eq!(transition(new, "Reconciling"), transition(old, "Reconciling"));
}

#[test]
fn a_new_generation_not_checked_yet_is_reconciling_and_keeps_the_last_check() {
    let offered = answer(RUNNING, None);
    let decision = Decision::UpToDate { running: RUNNING.to_owned(), offered: RUNNING.to_owned() };
    let before =
        after(None, 2, at(NOW), Checked::Decided { decision: &decision, answer: &offered });
    let status = after(Some(&before), 3, at(NOW + 5), Checked::Pending);
    assert_eq!(verdict(&status), ("False", "True", "False", conditions::CHECK_PENDING));
    assert_eq!(status.observed_generation, Some(2), "the generation last checked");
    assert_eq!(status.last_check, before.last_check);
}

#[test]
fn the_same_outcome_again_changes_only_the_check_time() {
    let offered = answer(RUNNING, None);
    let decision = Decision::UpToDate { running: RUNNING.to_owned(), offered: RUNNING.to_owned() };
    let first = decided(&decision, &offered);
    let again =
        after(Some(&first), 3, at(NOW), Checked::Decided { decision: &decision, answer: &offered });
    assert_eq!(again, first, "nothing to write");
    let later = after(
        Some(&first),
        3,
        at(NOW + 600),
        Checked::Decided { decision: &decision, answer: &offered },
    );
    assert_eq!(later.conditions, first.conditions, "no transition");
}

#[test]
fn long_messages_are_capped() {
    let offered = answer("v1.35.2+k0s.0", Some(&"9".repeat(500)));
    let decision = Decision::Invalid("x".repeat(10_000));
    let status = decided(&decision, &offered);
    let check = status.last_check.as_ref().expect("a check");
    assert!(check.message.len() <= MESSAGE_MAX_BYTES + 3, "{}", check.message.len());
    assert!(status.conditions.iter().all(|c| c.message.len() <= MESSAGE_MAX_BYTES + 3));
    let eol = status.end_of_life.expect("an end of life");
    assert!(eol.date.len() <= SHORT_MAX_BYTES + 3);
    assert!(eol.message.len() <= MESSAGE_MAX_BYTES);
    let json = serde_json::to_string(&status.conditions).expect("serialisable");
    assert!(json.len() < 4 * 1024, "{}", json.len());
}

// === end of life ===

#[test]
fn a_past_eol_date_of_the_running_line_is_past() {
    let eol = end_of_life("2026-01-15", RUNNING, "v1.35.3+k0s.0", at(NOW));
    assert_eq!(eol.status.past, Some(true), "{:?}", eol.status);
    assert_eq!(eol.status.date, "2026-01-15");
    assert!(eol.status.message.contains("past its end of life"), "{}", eol.status.message);
    assert_eq!(eol.at, Some("2026-01-15T00:00:00Z".parse().expect("a time")));
}

#[test]
fn a_future_eol_date_is_not_past() {
    let eol = end_of_life("2099-12-31", RUNNING, RUNNING, at(NOW));
    assert_eq!(eol.status.past, Some(false));
    assert_eq!(eol.status.message, "");
    let rfc3339 = end_of_life("2099-12-31T12:00:00Z", RUNNING, RUNNING, at(NOW));
    assert_eq!(rfc3339.status.past, Some(false));
}

#[test]
fn the_eol_date_begins_at_midnight_utc() {
    let midnight: Timestamp = "2027-03-01T00:00:00Z".parse().expect("a time");
    let just_before = midnight.checked_sub(jiff::SignedDuration::from_secs(1)).expect("a time");
    assert_eq!(end_of_life("2027-03-01", RUNNING, RUNNING, just_before).status.past, Some(false));
    assert_eq!(end_of_life("2027-03-01", RUNNING, RUNNING, midnight).status.past, Some(true));
}

#[test]
fn a_malformed_eol_date_is_a_message_not_a_verdict() {
    for bad in ["next spring", "2026-13-45", "", "\u{1b}[31m2026"] {
        let eol = end_of_life(bad, RUNNING, RUNNING, at(NOW));
        assert_eq!(eol.status.past, None, "{bad:?}");
        assert_eq!(eol.at, None);
        assert!(eol.status.message.contains("is not a date"), "{}", eol.status.message);
        assert!(!eol.status.message.contains('\u{1b}'), "printable: {}", eol.status.message);
    }
}

#[test]
fn an_older_running_line_is_past_once_the_newer_line_ended_and_unknown_before() {
    let ended = end_of_life("2026-01-15", "v1.34.4+k0s.0", "v1.35.3+k0s.0", at(NOW));
    assert_eq!(ended.status.past, Some(true));
    let open = end_of_life("2099-01-15", "v1.34.4+k0s.0", "v1.35.3+k0s.0", at(NOW));
    assert_eq!(open.status.past, None);
    assert!(open.status.message.contains("not known"), "{}", open.status.message);
    let newer_running = end_of_life("2026-01-15", "v1.36.0+k0s.0", "v1.35.3+k0s.0", at(NOW));
    assert_eq!(newer_running.status.past, None);
}

#[test]
fn the_status_shows_the_eol_the_server_gave() {
    let offered = answer(RUNNING, Some("2026-01-15"));
    let decision = Decision::UpToDate { running: RUNNING.to_owned(), offered: RUNNING.to_owned() };
    let eol = decided(&decision, &offered).end_of_life.expect("an end of life");
    assert_eq!(eol.date, "2026-01-15");
    assert_eq!(eol.past, Some(true));
}

// === the write ===

#[test]
fn an_unchanged_status_is_not_written() {
    let offered = answer(RUNNING, None);
    let decision = Decision::UpToDate { running: RUNNING.to_owned(), offered: RUNNING.to_owned() };
    let status = decided(&decision, &offered);
    assert_eq!(merge_patch(Some(&status), &status), None);
    let first = merge_patch(None, &status).expect("a first write");
    assert_eq!(first["status"]["observedGeneration"], serde_json::json!(3));
}

#[test]
fn the_patch_names_what_changed_and_nulls_what_went_away() {
    let offered = answer("v1.35.2+k0s.0", Some("2026-01-15"));
    let wait = Decision::MinIntervalWait {
        offered: offered.version.clone(),
        kind: UpdateKind::Patch,
        last: at(NOW - 60),
        allowed_at: at(NOW + 60),
    };
    let before = decided(&wait, &offered);
    let fixed = answer("v1.35.2+k0s.0", Some("not a date"));
    let decision =
        Decision::CreatePlan { spec: plan_for("v1.35.2+k0s.0", at(NOW)), left_out: Vec::new() };
    let now =
        after(Some(&before), 3, at(NOW), Checked::Decided { decision: &decision, answer: &fixed });
    let patch = merge_patch(Some(&before), &now).expect("a change");
    let status = &patch["status"];
    assert_eq!(status["nextUpdateAllowed"], serde_json::Value::Null, "{patch}");
    assert!(status.as_object().expect("an object").contains_key("nextUpdateAllowed"));
    assert_eq!(status["endOfLife"]["past"], serde_json::Value::Null, "{patch}");
    assert!(status["endOfLife"]["message"].as_str().expect("a message").contains("not a date"));
    assert!(status.get("offeredVersion").is_none(), "unchanged: {patch}");
    assert!(status["conditions"].is_array(), "{patch}");
    assert_eq!(status["lastPlanId"], serde_json::json!(NOW.to_string()));
}
