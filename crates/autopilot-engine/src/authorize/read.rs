//! When an answer to reading the Plan settles an authorization: pure, the clock is an input.
//!
//! A node reads Plan `autopilot` with its own identity to authorize what it was asked (a
//! signal, a gate check, a pre-staging). A refusal must rest on a definitive answer, not on
//! an API server that is still starting: right after a restart a server answers `403` until
//! its RBAC authorizer has synced, and `404` for a resource type whose CRD it does not serve
//! yet. So only two answers settle the read at once: the Plan, or "no Plan of that name" (a
//! `404` naming the Plan object, which the shell tells from a `404` of the resource type).
//! A `403` or a `404` of the resource type is retried on the usual capped backoff, and
//! becomes a refusal only when it stayed that way for [`FORBIDDEN_GRACE`]; an unanswered
//! read (a transport error, a `5xx`, a `429`) is retried for as long as it takes.
//!
//! [`judge`] takes what it remembers ([`Unsettled`]) by value and returns it with its
//! verdict, like kube-runtime's watcher `step`; the shell keeps it between passes.

use jiff::{SignedDuration, Timestamp};

/// How long reading the Plan may stay forbidden (`403`), or its resource type unserved,
/// before what it was read for is refused.
///
/// Why 60 s: a restarted kube-apiserver serves requests before its RBAC authorizer and its
/// CRD handler have synced their informers; until then it answers `403` to what RBAC allows
/// and `404` for custom resource types. That lasts seconds, tens of seconds on a loaded
/// control plane. A minute is well past it, and short enough that a node which may really
/// not read the Plan (the worker RBAC of `manifests/rbac/worker.yaml` not applied) still
/// fails its signal within a progress deadline instead of holding the plan for ever.
pub const FORBIDDEN_GRACE: SignedDuration = SignedDuration::from_secs(60);

/// What the API server answered to a read of the Plan, as the shell classified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer<P> {
    /// A definitive answer: the Plan, or `None` when the server said no Plan of that name
    /// exists (a `404` naming the object).
    Read(Option<P>),
    /// `403`: the identity may not read the Plan, or the server's authorizer has not synced
    /// yet. The server's message.
    Forbidden(String),
    /// A `404` that does not name the Plan: the resource type is not served (yet). The
    /// server's message.
    Unserved(String),
    /// No answer: a transport error, a timeout, a `5xx`, a `429`. What failed.
    Unanswered(String),
}

/// What to do with an [`Answer`].
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict<P> {
    /// Decide on this (`None`: there is no Plan, a definitive answer).
    Plan(Option<P>),
    /// Not settled: read again after the usual backoff. Why, for the log.
    Retry(String),
    /// Settled as a refusal (starts with `reading Plan autopilot: `); the caller prefixes
    /// `refused: ` where it answers a signal.
    Refuse(String),
}

/// What [`judge`] remembers between reads: since when the reads have not settled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unsettled {
    /// The first `403` (or `404` of the resource type) since the last definitive answer.
    since: Option<Timestamp>,
    /// The last read that did not settle (of any kind): a stretch of retries is one only
    /// while its reads follow each other within [`FORBIDDEN_GRACE`].
    last: Option<Timestamp>,
}

impl Unsettled {
    /// Since when the reads have been refused, if they are.
    pub fn since(&self) -> Option<Timestamp> {
        self.since
    }
}

/// The verdict on `answer`, read at `now`, after the reads `state` remembers; and what to
/// remember for the next read.
///
/// Check 1: a definitive answer settles it and forgets the stretch.
/// Check 2: a stretch of retries whose last read is [`FORBIDDEN_GRACE`] old or more is over
/// (the node stopped reading, e.g. it had nothing to authorize): a new one starts now, so a
/// `403` of long ago cannot make today's `403` look lasting.
/// Check 3: an unanswered read is retried; it neither starts nor ends the stretch.
/// Check 4: a `403` or `404` of the type is retried until the stretch it belongs to is
/// [`FORBIDDEN_GRACE`] old, then refused, saying for how long.
pub fn judge<P>(state: Unsettled, now: Timestamp, answer: Answer<P>) -> (Verdict<P>, Unsettled) {
    // Check 1.
    let (message, what, stayed) = match answer {
        Answer::Read(plan) => return (Verdict::Plan(plan), Unsettled::default()),
        Answer::Forbidden(message) => (message, "forbidden", "forbidden"),
        Answer::Unserved(message) => (message, "the Plan resource type is not served", "unserved"),
        Answer::Unanswered(error) => {
            // Check 2 and 3.
            let state = Unsettled { last: Some(now), ..current(state, now) };
            return (Verdict::Retry(format!("reading Plan {PLAN}: {error}")), state);
        }
    };
    // Check 2 and 4. A refusal keeps the stretch: a read right after it, still forbidden,
    // is refused too (it did stay forbidden that long).
    let since = current(state, now).since.unwrap_or(now);
    let state = Unsettled { since: Some(since), last: Some(now) };
    // A clock that went back counts as no time passed.
    let lasted = now.duration_since(since).max(SignedDuration::ZERO);
    if lasted >= FORBIDDEN_GRACE {
        let reason = format!(
            "reading Plan {PLAN}: {what}: {message} (stayed {stayed} for {}s, longer than the \
             {}s an API server may take to sync after a restart)",
            lasted.as_secs(),
            FORBIDDEN_GRACE.as_secs()
        );
        return (Verdict::Refuse(reason), state);
    }
    let why = format!(
        "reading Plan {PLAN}: {what} for {}s, retrying (an API server may answer so for up to \
         {}s after a restart): {message}",
        lasted.as_secs(),
        FORBIDDEN_GRACE.as_secs()
    );
    (Verdict::Retry(why), state)
}

/// The Plan every node reads.
const PLAN: &str = autopilot_api::keys::PLAN_NAME;

/// `state` as it stands at `now`: forgotten when its last read is [`FORBIDDEN_GRACE`] old.
fn current(state: Unsettled, now: Timestamp) -> Unsettled {
    match state.last {
        Some(last) if now.duration_since(last) < FORBIDDEN_GRACE => state,
        Some(_) | None => Unsettled::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).expect("a valid timestamp")
    }

    fn forbidden() -> Answer<&'static str> {
        Answer::Forbidden("plans.autopilot.k0sproject.io \"autopilot\" is forbidden".to_owned())
    }

    /// Judges `answers`, each read at its second, from a fresh state; returns the last
    /// verdict and state.
    fn read_all(
        answers: impl IntoIterator<Item = (i64, Answer<&'static str>)>,
    ) -> (Verdict<&'static str>, Unsettled) {
        let mut state = Unsettled::default();
        let mut verdict = Verdict::Retry(String::new());
        for (second, answer) in answers {
            (verdict, state) = judge(state, at(second), answer);
        }
        (verdict, state)
    }

    #[test]
    fn a_forbidden_read_right_after_a_restart_is_retried_not_refused() {
        let (verdict, state) = judge(Unsettled::default(), at(0), forbidden());
        let Verdict::Retry(why) = verdict else { panic!("retried: {verdict:?}") };
        assert!(why.starts_with("reading Plan autopilot: forbidden for 0s, retrying"), "{why}");
        assert_eq!(state.since(), Some(at(0)));
        // Still forbidden 58 s later: still retried.
        let (verdict, _) = read_all((0..30).map(|n| (n * 2, forbidden())));
        assert!(matches!(verdict, Verdict::Retry(_)), "{verdict:?}");
    }

    #[test]
    fn a_read_forbidden_past_the_grace_is_refused_saying_for_how_long() {
        let (verdict, _) = read_all((0..=31).map(|n| (n * 2, forbidden())));
        let Verdict::Refuse(reason) = verdict else { panic!("refused: {verdict:?}") };
        assert!(reason.starts_with("reading Plan autopilot: forbidden: plans."), "{reason}");
        assert!(reason.contains("stayed forbidden for 62s"), "{reason}");
        assert!(reason.contains("longer than the 60s"), "{reason}");
    }

    #[test]
    fn an_unanswered_read_is_retried_for_ever_and_starts_no_clock() {
        let unanswered = || Answer::Unanswered("error trying to connect".to_owned());
        let (verdict, state) = read_all((0..200).map(|n| (n * 2, unanswered())));
        let Verdict::Retry(why) = verdict else { panic!("retried: {verdict:?}") };
        assert_eq!(why, "reading Plan autopilot: error trying to connect");
        assert_eq!(state.since(), None);
        // An outage in the middle of a forbidden stretch neither ends nor starts it.
        let answers = [(0, forbidden()), (30, unanswered()), (59, unanswered()), (61, forbidden())];
        let (verdict, _) = read_all(answers);
        assert!(matches!(verdict, Verdict::Refuse(_)), "{verdict:?}");
    }

    #[test]
    fn a_definitive_answer_settles_at_once_and_forgets_the_forbidden_stretch() {
        // No Plan of that name: decided on, as before (the caller refuses for want of a Plan).
        let (verdict, state) = judge(Unsettled::default(), at(0), Answer::<&str>::Read(None));
        assert_eq!((verdict, state), (Verdict::Plan(None), Unsettled::default()));
        let (verdict, state) =
            read_all([(0, forbidden()), (50, forbidden()), (52, Answer::Read(Some("plan")))]);
        assert_eq!((verdict, state), (Verdict::Plan(Some("plan")), Unsettled::default()));
        // A 403 after that starts a new stretch.
        let (verdict, _) = judge(state, at(70), forbidden());
        assert!(matches!(verdict, Verdict::Retry(_)), "{verdict:?}");
    }

    #[test]
    fn an_unserved_resource_type_is_retried_then_refused_like_a_forbidden_read() {
        let unserved = || Answer::<&str>::Unserved("404 page not found".to_owned());
        let (verdict, _) = read_all([(0, unserved()), (30, unserved())]);
        assert!(matches!(verdict, Verdict::Retry(_)), "{verdict:?}");
        let (verdict, _) = read_all([(0, unserved()), (30, unserved()), (60, unserved())]);
        let Verdict::Refuse(reason) = verdict else { panic!("refused: {verdict:?}") };
        assert!(
            reason.starts_with("reading Plan autopilot: the Plan resource type is not served: 404"),
            "{reason}"
        );
        assert!(reason.contains("stayed unserved for 60s"), "{reason}");
    }

    #[test]
    fn a_forbidden_read_long_after_the_last_one_starts_a_new_stretch() {
        // Forbidden once, then no read for ten minutes (nothing to authorize): not lasting.
        let (verdict, state) = read_all([(0, forbidden()), (600, forbidden())]);
        assert!(matches!(verdict, Verdict::Retry(_)), "{verdict:?}");
        assert_eq!(state.since(), Some(at(600)));
    }

    #[test]
    fn a_clock_that_goes_back_counts_as_no_time_passed() {
        let (verdict, _) = read_all([(100, forbidden()), (10, forbidden())]);
        let Verdict::Retry(why) = verdict else { panic!("retried: {verdict:?}") };
        assert!(why.contains("forbidden for 0s"), "{why}");
    }
}
