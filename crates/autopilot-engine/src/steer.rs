//! What `k0s autopilot pause|resume|abort` writes on a Plan and says, from what the Plan
//! shows: pure. The verbs only write annotations on the Plan ([`keys::ANNOTATION_PAUSED`],
//! [`keys::ANNOTATION_ABORT`]); the leader's Plan engine acts on them. The shell (`k0s`'s
//! `steer`) reads the Plan, writes the patch [`decide`] returns and prints its message.

use autopilot_api::keys;
use autopilot_api::v1beta2::PlanStateType;
use serde_json::json;

/// The annotation value that turns a steer on.
const TRUE: &str = "true";

/// A steering verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// Signal no new node; nodes in flight finish (`paused=true`).
    Pause,
    /// Undo a pause (remove `paused`, and only that).
    Resume,
    /// Signal no new node; nodes in flight finish, then the plan ends `Aborted`
    /// (`abort=true`).
    Abort,
    /// Put back every node the run changed; the plan ends `RolledBack` (`rollback=<plan
    /// id>`, DESIGN §15).
    Rollback,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Abort => "abort",
            Self::Rollback => "roll back",
        }
    }
}

/// What a verb looks at on the Plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen<'a> {
    /// The Plan's name.
    pub name: &'a str,
    /// Value of [`keys::ANNOTATION_PAUSED`], if present.
    pub paused: Option<&'a str>,
    /// Value of [`keys::ANNOTATION_ABORT`], if present.
    pub abort: Option<&'a str>,
    /// `status.state` (`NewPlan` before the plan is first processed).
    pub state: PlanStateType,
    /// Targets in `SignalSent`: nodes working on a signal, which finish either way.
    pub in_flight: usize,
    /// The plan id of the current run (`status.planId`), if it ever started.
    pub plan_id: Option<&'a str>,
    /// Value of [`keys::ANNOTATION_ROLLBACK`], if present.
    pub rollback: Option<&'a str>,
}

/// What a verb does: the merge patch to write on the Plan (if any) and the line to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Merge patch for the Plan; `None` when nothing needs writing.
    pub patch: Option<serde_json::Value>,
    /// What was done and what happens next, in one line.
    pub message: String,
}

/// Decide what `verb` writes and says for the plan as `seen`. `Err` is the one-line reason
/// the verb refuses (nothing is written then).
pub fn decide(verb: Verb, seen: &Seen<'_>) -> Result<Outcome, String> {
    let Seen { name, paused, abort, state, in_flight, .. } = *seen;
    let is_paused = paused == Some(TRUE);
    let is_aborting = abort == Some(TRUE);
    let ended = state.is_terminal();
    let in_flight_finish = format!("{in_flight} node(s) in flight will finish");
    match verb {
        Verb::Rollback => rollback(seen),
        Verb::Pause | Verb::Abort if ended => {
            Err(format!("plan {name:?} already ended in {state}: nothing to {}", verb.as_str()))
        }
        Verb::Pause => {
            let next = format!(
                "no new node will be signalled; {in_flight_finish} (k0s autopilot resume to go on)"
            );
            Ok(if is_paused {
                Outcome { patch: None, message: format!("plan {name} was already paused: {next}") }
            } else {
                Outcome {
                    patch: Some(annotation(keys::ANNOTATION_PAUSED, json!(TRUE))),
                    message: format!("plan {name} paused: {next}"),
                }
            })
        }
        Verb::Abort => {
            let next = format!(
                "no new node will be signalled; {in_flight_finish}, then the plan ends Aborted \
                 with no autopilot cordon left"
            );
            Ok(if is_aborting {
                Outcome {
                    patch: None,
                    message: format!("plan {name} was already being aborted: {next}"),
                }
            } else {
                Outcome {
                    patch: Some(annotation(keys::ANNOTATION_ABORT, json!(TRUE))),
                    message: format!("plan {name} aborted: {next}"),
                }
            })
        }
        Verb::Resume => Ok(resume(seen)),
    }
}

/// `rollback`: refused for a plan that has not run, was rolled back already, or ended in a
/// state a rollback does not reopen; otherwise the rollback annotation names the run's
/// plan id (written once).
fn rollback(seen: &Seen<'_>) -> Result<Outcome, String> {
    let Seen { name, paused, state, in_flight, plan_id, rollback, .. } = *seen;
    let is_paused = paused == Some(TRUE);
    let ended = state.is_terminal();
    let in_flight_finish = format!("{in_flight} node(s) in flight will finish");
    let Some(id) = plan_id.filter(|_| state != PlanStateType::NewPlan) else {
        return Err(format!("plan {name:?} has not run: nothing to roll back"));
    };
    let reopenable = crate::plan::phases::REOPENED_BY_ROLLBACK.contains(&state);
    match state {
        PlanStateType::RolledBack => {
            return Err(format!("plan {name:?} (id {id}) was already rolled back"));
        }
        _ if ended && !reopenable => {
            return Err(format!(
                "plan {name:?} (id {id}) ended in {state}; only a run that ended \
                 Completed, ApplyFailed or Aborted (or one still running) is rolled \
                 back: write a Plan to the earlier version instead"
            ));
        }
        _ => {}
    }
    let next = format!(
        "{in_flight_finish}, then every node the run changed puts back the version it \
         ran before (workers first, newest first), and the plan ends RolledBack{} \
         (follow it with k0s autopilot status)",
        if is_paused { "; it is paused: the rollback waits for k0s autopilot resume" } else { "" }
    );
    Ok(if rollback.map(str::trim) == Some(id) {
        Outcome {
            patch: None,
            message: format!("plan {name} (id {id}) was already being rolled back: {next}"),
        }
    } else {
        Outcome {
            patch: Some(annotation(keys::ANNOTATION_ROLLBACK, json!(id))),
            message: format!("plan {name} (id {id}) is rolled back: {next}"),
        }
    })
}

/// `resume`: remove the pause annotation (and only that), saying what still holds the plan.
fn resume(seen: &Seen<'_>) -> Outcome {
    let Seen { name, paused, abort, state, .. } = *seen;
    let is_paused = paused == Some(TRUE);
    let is_aborting = abort == Some(TRUE);
    let ended = state.is_terminal();
    // Only the pause is undone; what still holds the plan is said.
    let next = if ended {
        format!("it already ended in {state}, so no node will be signalled")
    } else if is_aborting {
        "it is being aborted, so no new node will be signalled".to_string()
    } else {
        "nodes will be signalled again as its limits allow".to_string()
    };
    let patch = paused.map(|_| annotation(keys::ANNOTATION_PAUSED, json!(null)));
    let message = if is_paused {
        format!("plan {name} resumed: {next}")
    } else {
        format!("plan {name} was not paused: {next}")
    };
    Outcome { patch, message }
}

/// A merge patch setting (or, with `null`, removing) one annotation.
fn annotation(key: &str, value: serde_json::Value) -> serde_json::Value {
    json!({ "metadata": { "annotations": { key: value } } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(in_flight: usize) -> Seen<'static> {
        Seen {
            name: "autopilot",
            paused: None,
            abort: None,
            state: PlanStateType::SchedulableWait,
            in_flight,
            plan_id: Some("id-1"),
            rollback: None,
        }
    }

    #[test]
    fn pause_sets_the_paused_annotation_and_counts_the_nodes_in_flight() {
        let outcome = decide(Verb::Pause, &running(2)).unwrap();
        assert_eq!(
            outcome.patch,
            Some(json!({ "metadata": { "annotations": {
                "autopilot.k0sproject.io/paused": "true" } } }))
        );
        assert_eq!(
            outcome.message,
            "plan autopilot paused: no new node will be signalled; 2 node(s) in flight will \
             finish (k0s autopilot resume to go on)"
        );
    }

    #[test]
    fn pausing_a_paused_plan_writes_nothing_and_says_so() {
        let seen = Seen { paused: Some("true"), ..running(1) };
        let outcome = decide(Verb::Pause, &seen).unwrap();
        assert_eq!(outcome.patch, None);
        assert!(outcome.message.starts_with("plan autopilot was already paused: "), "{outcome:?}");
    }

    #[test]
    fn a_paused_annotation_other_than_true_is_not_a_pause() {
        let seen = Seen { paused: Some("false"), ..running(0) };
        let outcome = decide(Verb::Pause, &seen).unwrap();
        assert!(outcome.patch.is_some());
        // Resume removes it all the same, and says the plan was not paused.
        let outcome = decide(Verb::Resume, &seen).unwrap();
        assert_eq!(
            outcome.patch,
            Some(json!({ "metadata": { "annotations": {
                "autopilot.k0sproject.io/paused": null } } }))
        );
        assert!(outcome.message.starts_with("plan autopilot was not paused"), "{outcome:?}");
    }

    #[test]
    fn resume_removes_only_the_paused_annotation() {
        let seen = Seen { paused: Some("true"), ..running(0) };
        let outcome = decide(Verb::Resume, &seen).unwrap();
        assert_eq!(
            outcome.patch,
            Some(json!({ "metadata": { "annotations": {
                "autopilot.k0sproject.io/paused": null } } }))
        );
        assert_eq!(
            outcome.message,
            "plan autopilot resumed: nodes will be signalled again as its limits allow"
        );
    }

    #[test]
    fn resuming_a_plan_that_is_not_paused_writes_nothing() {
        let outcome = decide(Verb::Resume, &running(0)).unwrap();
        assert_eq!(outcome.patch, None);
        assert!(outcome.message.starts_with("plan autopilot was not paused: "), "{outcome:?}");
    }

    #[test]
    fn resume_says_what_still_holds_the_plan() {
        let aborting = Seen { paused: Some("true"), abort: Some("true"), ..running(0) };
        let outcome = decide(Verb::Resume, &aborting).unwrap();
        assert!(outcome.patch.is_some());
        assert!(outcome.message.contains("being aborted"), "{outcome:?}");
        let ended = Seen { paused: Some("true"), state: PlanStateType::ApplyFailed, ..running(0) };
        let outcome = decide(Verb::Resume, &ended).unwrap();
        assert!(outcome.patch.is_some(), "resume may tidy an ended plan");
        assert!(outcome.message.contains("already ended in ApplyFailed"), "{outcome:?}");
    }

    #[test]
    fn abort_sets_the_abort_annotation_once() {
        let outcome = decide(Verb::Abort, &running(3)).unwrap();
        assert_eq!(
            outcome.patch,
            Some(json!({ "metadata": { "annotations": {
                "autopilot.k0sproject.io/abort": "true" } } }))
        );
        assert_eq!(
            outcome.message,
            "plan autopilot aborted: no new node will be signalled; 3 node(s) in flight will \
             finish, then the plan ends Aborted with no autopilot cordon left"
        );
        let again = Seen { abort: Some("true"), ..running(3) };
        let outcome = decide(Verb::Abort, &again).unwrap();
        assert_eq!(outcome.patch, None);
        assert!(outcome.message.starts_with("plan autopilot was already being aborted: "));
    }

    #[test]
    fn an_ended_plan_is_neither_paused_nor_aborted() {
        for state in PlanStateType::ALL.into_iter().filter(|s| s.is_terminal()) {
            let seen = Seen { state, ..running(0) };
            assert_eq!(
                decide(Verb::Pause, &seen),
                Err(format!("plan \"autopilot\" already ended in {state}: nothing to pause"))
            );
            assert_eq!(
                decide(Verb::Abort, &seen),
                Err(format!("plan \"autopilot\" already ended in {state}: nothing to abort"))
            );
        }
    }

    #[test]
    fn a_plan_not_processed_yet_can_be_paused_and_aborted() {
        let fresh = Seen { state: PlanStateType::NewPlan, ..running(0) };
        assert!(decide(Verb::Pause, &fresh).unwrap().patch.is_some());
        assert!(decide(Verb::Abort, &fresh).unwrap().patch.is_some());
    }

    #[test]
    fn rollback_names_the_running_plan_id_and_says_what_happens() {
        let outcome = decide(Verb::Rollback, &running(1)).unwrap();
        assert_eq!(
            outcome.patch,
            Some(json!({ "metadata": { "annotations": {
                "autopilot.k0sproject.io/rollback": "id-1" } } }))
        );
        assert!(outcome.message.starts_with("plan autopilot (id id-1) is rolled back: 1 node(s)"));
        let again = decide(Verb::Rollback, &Seen { rollback: Some("id-1"), ..running(0) });
        assert_eq!(again.unwrap().patch, None, "already asked");
        let older = decide(Verb::Rollback, &Seen { rollback: Some("id-0"), ..running(0) });
        assert!(older.unwrap().patch.is_some(), "an annotation for another id is replaced");
    }

    #[test]
    fn rollback_refuses_a_plan_that_never_ran_or_cannot_be_rolled_back() {
        let fresh = Seen { state: PlanStateType::NewPlan, plan_id: None, ..running(0) };
        assert!(decide(Verb::Rollback, &fresh).unwrap_err().contains("has not run"));
        let done = Seen { state: PlanStateType::RolledBack, ..running(0) };
        assert!(decide(Verb::Rollback, &done).unwrap_err().contains("already rolled back"));
        let refused = Seen { state: PlanStateType::Warning, ..running(0) };
        assert!(decide(Verb::Rollback, &refused).unwrap_err().contains("ended in Warning"));
        for state in [PlanStateType::Completed, PlanStateType::ApplyFailed, PlanStateType::Aborted]
        {
            assert!(decide(Verb::Rollback, &Seen { state, ..running(0) }).is_ok(), "{state}");
        }
    }
}
