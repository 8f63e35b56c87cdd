//! Fuzz target of the signal-vs-plan match (DESIGN §14): mutated signals against a running
//! Plan, and signals against mutated Plans. No input panics; a signal is authorized only if
//! it names the Plan's run and carries exactly one payload of its frozen command to one of
//! its targets, whose status records the signal's `created`, in a plan that has not ended; a rollback signal only if the Plan rolls the run back and lists the node
//! with the signal's version as its "from" (DESIGN §15).

use autopilot_api::Plan;
use autopilot_api::fuzz::{config, mutated};
use autopilot_api::signal::SignalData;
use autopilot_api::v1beta2::PlanResourceUrl;
use autopilot_engine::authorize::{Node, Role, authorize};
use proptest::prelude::*;
use serde_json::{Value, json};

const PLATFORM: &str = "linux-amd64";

/// Plan `autopilot` on run `uid-1/1`: command 0 updates k0s on worker `w1`.
fn running_plan() -> Value {
    let sha = "ab".repeat(32);
    json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "Plan",
        "metadata": { "name": "autopilot", "uid": "uid-1", "generation": 1 },
        "spec": { "id": "id-1", "timestamp": "now", "commands": [] },
        "status": {
            "state": "SchedulableWait",
            "runId": "uid-1/1",
            "planId": "id-1",
            "commands": [{
                "id": 0,
                "state": "SchedulableWait",
                "frozen": { "k0supdate": {
                    "version": "v1.35.1+k0s.0",
                    "platforms": { PLATFORM: { "url": "https://127.0.0.1/k0s", "sha256": sha } },
                    "targets": { "workers": { "discovery": { "static": { "nodes": ["w1"] } } } },
                } },
                "k0supdate": { "workers": [{
                    "name": "w1", "state": "SignalSent",
                    "lastUpdatedTimestamp": "2026-11-26T00:00:00Z",
                    "signalled": "2026-11-26T00:00:00Z",
                }] },
            }],
        },
    })
}

/// The signal the leader writes to `w1` for that run.
fn its_signal() -> Value {
    json!({
        "planId": "id-1",
        "created": "2026-11-26T00:00:00Z",
        "command": { "id": 0, "k0supdate": {
            "url": "https://127.0.0.1/k0s", "version": "v1.35.1+k0s.0", "sha256": "ab".repeat(32),
        } },
        "runId": "uid-1/1",
    })
}

const W1: Node<'static> = Node { name: "w1", role: Role::Worker, platform: Some(PLATFORM) };

/// Checks what an `Ok` promises, against the unmutated run.
fn authorized_means_the_plans_own(
    signal: &SignalData,
    plan: &Plan,
    matched: Option<&PlanResourceUrl>,
) -> Result<(), TestCaseError> {
    let status = plan.status.as_ref().expect("an authorized signal's Plan has a status");
    prop_assert_eq!(signal.run_id.as_deref(), status.run_id.as_deref());
    prop_assert_eq!(Some(signal.plan_id.as_str()), status.plan_id.as_deref());
    let command = status.commands.iter().find(|c| c.id == signal.command.id);
    let frozen = command.and_then(|c| c.frozen.as_ref()).expect("a frozen command");
    let (Some(sent), Some(want)) = (&signal.command.k0supdate, &frozen.k0supdate) else {
        return Err(TestCaseError::fail("only the k0s update can be authorized here"));
    };
    prop_assert_eq!(&sent.version, &want.version);
    let entry = &want.platforms[PLATFORM];
    prop_assert_eq!(matched, Some(entry), "the entry returned is the node's platform's");
    prop_assert_eq!(&sent.url, &entry.url);
    prop_assert!(entry.sha256.as_deref().unwrap_or_default().eq_ignore_ascii_case(&sent.sha256));
    let targets = &command.and_then(|c| c.k0supdate.as_ref()).expect("targets").workers;
    let target = targets.iter().find(|t| t.name == "w1").expect("w1 is a target");
    match target.signalled.as_deref() {
        Some(created) => prop_assert_eq!(created, signal.created.as_str(), "the record"),
        // A status of a leader from before the records: only a target it signalled.
        None => prop_assert!(matches!(
            target.state,
            autopilot_api::v1beta2::TargetState::SignalSent
                | autopilot_api::v1beta2::TargetState::SignalCompleted
        )),
    }
    prop_assert!(!status.state.is_terminal(), "the plan has not ended");
    Ok(())
}

/// [`running_plan`] once `w1` completed the update from v1.35.0 and the run is being rolled
/// back: the command's rollback lists `w1` (signalled) with the same `from`.
fn rolling_back_plan() -> Value {
    let mut plan = running_plan();
    let status = &mut plan["status"];
    status["rollback"] =
        json!({ "reason": "requested by an operator", "since": "2026-11-26T00:00:00Z" });
    let command = &mut status["commands"][0];
    let target = &mut command["k0supdate"]["workers"][0];
    target["state"] = json!("SignalCompleted");
    target["from"] = json!("v1.35.0+k0s.0");
    let mut back = target.clone();
    back["state"] = json!("SignalSent");
    back["signalled"] = json!("2026-11-26T01:00:00Z");
    command["rollback"] = json!({ "controllers": [], "workers": [back] });
    plan
}

/// The rollback signal the leader writes to `w1` for that run.
fn its_rollback_signal() -> Value {
    json!({
        "planId": "id-1",
        "created": "2026-11-26T01:00:00Z",
        "command": { "id": 0, "rollback": { "version": "v1.35.0+k0s.0", "of": "k0s" } },
        "runId": "uid-1/1",
    })
}

/// Checks what an `Ok` for a rollback signal promises: the Plan rolls the signal's run back,
/// and `w1` completed command 0's k0s update from the signal's version and is listed in its
/// rollback with that version.
fn rollback_means_the_plans_own(
    signal: &SignalData,
    plan: &Plan,
    matched: Option<&PlanResourceUrl>,
) -> Result<(), TestCaseError> {
    let Some(sent) = &signal.command.rollback else {
        return authorized_means_the_plans_own(signal, plan, matched);
    };
    prop_assert_eq!(matched, None, "a rollback matches no payload");
    let status = plan.status.as_ref().expect("an authorized signal's Plan has a status");
    prop_assert!(status.rollback.is_some());
    prop_assert_eq!(signal.run_id.as_deref(), status.run_id.as_deref());
    prop_assert_eq!(Some(signal.plan_id.as_str()), status.plan_id.as_deref());
    prop_assert_eq!(sent.of, autopilot_api::signal::RollbackOf::K0s);
    let command = status.commands.iter().find(|c| c.id == signal.command.id).expect("command");
    prop_assert!(command.frozen.as_ref().is_some_and(|f| f.k0supdate.is_some()));
    let back = command.rollback.as_ref().expect("a rollback list");
    let listed = back.workers.iter().find(|t| t.name == "w1").expect("w1 in the rollback");
    prop_assert_eq!(listed.from.as_deref(), Some(sent.version.as_str()));
    let updated = command.k0supdate.as_ref().expect("targets");
    let target = updated.workers.iter().find(|t| t.name == "w1").expect("w1 a target");
    prop_assert_eq!(target.state, autopilot_api::v1beta2::TargetState::SignalCompleted);
    prop_assert_eq!(target.from.as_deref(), Some(sent.version.as_str()));
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_rollback_signals_are_authorized_only_when_the_plan_rolls_the_node_back(
        signal in mutated(its_rollback_signal())
    ) {
        let plan: Plan = serde_json::from_value(rolling_back_plan()).expect("the Plan");
        let Ok(signal) = serde_json::from_value::<SignalData>(signal) else { return Ok(()) };
        match authorize(Some(&plan), &signal, W1) {
            Ok(entry) => rollback_means_the_plans_own(&signal, &plan, entry)?,
            Err(refusal) => prop_assert!(refusal.starts_with("refused: "), "{refusal}"),
        }
    }

    #[test]
    fn the_rollback_signal_against_mutated_plans_is_authorized_only_by_a_rollback(
        plan in mutated(rolling_back_plan())
    ) {
        let Ok(plan) = serde_json::from_value::<Plan>(plan) else { return Ok(()) };
        let signal: SignalData =
            serde_json::from_value(its_rollback_signal()).expect("the signal");
        match authorize(Some(&plan), &signal, W1) {
            Ok(entry) => rollback_means_the_plans_own(&signal, &plan, entry)?,
            Err(refusal) => prop_assert!(refusal.starts_with("refused: "), "{refusal}"),
        }
    }

    #[test]
    fn mutated_signals_are_authorized_only_when_they_are_the_plans(
        signal in mutated(its_signal())
    ) {
        let plan: Plan = serde_json::from_value(running_plan()).expect("the running Plan");
        let Ok(signal) = serde_json::from_value::<SignalData>(signal) else { return Ok(()) };
        match authorize(Some(&plan), &signal, W1) {
            Ok(entry) => authorized_means_the_plans_own(&signal, &plan, entry)?,
            Err(refusal) => prop_assert!(refusal.starts_with("refused: "), "{refusal}"),
        }
    }

    #[test]
    fn the_signal_against_mutated_plans_never_panics_and_is_refused_with_a_reason(
        plan in mutated(running_plan())
    ) {
        let Ok(plan) = serde_json::from_value::<Plan>(plan) else { return Ok(()) };
        let signal: SignalData = serde_json::from_value(its_signal()).expect("the signal");
        match authorize(Some(&plan), &signal, W1) {
            Ok(entry) => authorized_means_the_plans_own(&signal, &plan, entry)?,
            Err(refusal) => prop_assert!(refusal.starts_with("refused: "), "{refusal}"),
        }
    }
}

#[test]
fn the_unmutated_signal_is_authorized() {
    let plan: Plan = serde_json::from_value(running_plan()).expect("the running Plan");
    let signal: SignalData = serde_json::from_value(its_signal()).expect("the signal");
    let entry = authorize(Some(&plan), &signal, W1).expect("authorized");
    let frozen = plan.status.as_ref().and_then(|s| s.commands[0].frozen.as_ref());
    let want = &frozen.and_then(|c| c.k0supdate.as_ref()).expect("k0supdate").platforms[PLATFORM];
    assert_eq!(entry, Some(want), "the entry of the node's platform");
}

#[test]
fn the_unmutated_rollback_signal_is_authorized() {
    let plan: Plan = serde_json::from_value(rolling_back_plan()).expect("the Plan");
    let signal: SignalData = serde_json::from_value(its_rollback_signal()).expect("the signal");
    assert_eq!(authorize(Some(&plan), &signal, W1), Ok(None));
}
