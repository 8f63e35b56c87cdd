//! The election's decision on an injected monotonic clock: instants are `t0` plus offsets,
//! and the wall-clock times in the records are set far from them on purpose.

use super::*;

const LEASE: Duration = Duration::from_secs(15);
const DEADLINE: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(2);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn me() -> Candidate {
    Candidate::new("c1_0000abcd", LEASE, DEADLINE)
}

/// A wall-clock time `hours` from the real now (negative: in the past).
fn wall(hours: i64) -> jiff::Timestamp {
    jiff::Timestamp::now() + jiff::SignedDuration::from_hours(hours)
}

/// The Lease as `holder` writes it, renewed at wall-clock time `renewed`, at
/// `resourceVersion` `rv`.
fn lease(holder: &str, renewed: jiff::Timestamp, rv: &str) -> Read {
    Read::Lease {
        spec: LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(renewed - jiff::SignedDuration::from_hours(2))),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        },
        resource_version: rv.to_owned(),
    }
}

fn acquire(rv: &str) -> Decision {
    Decision::Acquire { resource_version: rv.to_owned() }
}

fn renew(rv: &str) -> Decision {
    Decision::Renew { resource_version: rv.to_owned() }
}

fn follow(until: Instant) -> Decision {
    Decision::Follow { holder: "c2_00001234".to_owned(), until }
}

#[test]
fn another_holders_claim_runs_out_one_lease_duration_after_it_was_seen_whatever_its_renew_time() {
    let t0 = Instant::now();
    // The holder's renewTime an hour in this candidate's past (a clock ahead sees that),
    // an hour in its future (a clock behind), and now: the same decisions.
    for renewed in [wall(-1), wall(1), wall(0)] {
        let mut c = me();
        c.observe(lease("c2_00001234", renewed, "100"), t0);
        assert_eq!(c.decide(t0), follow(t0 + LEASE), "renewTime {renewed}");
        assert_eq!(c.decide(t0 + LEASE - Duration::from_millis(1)), follow(t0 + LEASE));
        assert_eq!(c.decide(t0 + LEASE), acquire("100"), "expired, renewTime {renewed}");
        assert!(!c.is_leading());
    }
}

#[test]
fn each_change_of_the_record_restarts_the_claims_clock_and_a_reread_does_not() {
    let t0 = Instant::now();
    let mut c = me();
    let renewed = wall(0);
    c.observe(lease("c2_00001234", renewed, "100"), t0);
    // The same record read again later: the claim still counts from when it was first seen.
    c.observe(lease("c2_00001234", renewed, "100"), t0 + secs(14));
    assert_eq!(c.decide(t0 + secs(14)), follow(t0 + LEASE));
    // A renewal seen (a new renewTime, even an earlier one): counted afresh from then.
    let earlier = wall(-5);
    c.observe(lease("c2_00001234", earlier, "101"), t0 + secs(14));
    assert_eq!(c.decide(t0 + LEASE), follow(t0 + secs(14) + LEASE));
    // Only metadata changed (a new resourceVersion, the same record): the clock goes on,
    // and the take-over is preconditioned on the version last read.
    c.observe(lease("c2_00001234", earlier, "102"), t0 + secs(20));
    assert_eq!(c.decide(t0 + secs(14) + LEASE), acquire("102"));
}

#[test]
fn the_claims_own_duration_counts_and_one_without_a_valid_duration_lasts_this_candidates() {
    let t0 = Instant::now();
    let with_duration = |secs: Option<i32>| {
        let Read::Lease { mut spec, resource_version } = lease("c2_00001234", wall(0), "7") else {
            unreachable!("a lease")
        };
        spec.lease_duration_seconds = secs;
        Read::Lease { spec, resource_version }
    };
    for (written, lasts) in
        [(Some(60), secs(60)), (Some(0), LEASE), (Some(-5), LEASE), (None, LEASE)]
    {
        let mut c = me();
        c.observe(with_duration(written), t0);
        assert_eq!(c.decide(t0), follow(t0 + lasts), "{written:?}");
        assert_eq!(c.claim().map(|claim| claim.expiry), Some(t0 + lasts), "{written:?}");
    }
}

#[test]
fn nothing_read_waits_a_missing_lease_is_created_and_a_free_one_acquired_at_once() {
    let t0 = Instant::now();
    let mut c = me();
    assert_eq!(c.decide(t0), Decision::Unknown);
    assert_eq!(c.claim(), None);
    c.observe(Read::Absent, t0);
    assert_eq!(c.decide(t0), Decision::Create);
    // Released (no holder) or an empty holder: free, taken at once.
    let mut released = lease("", wall(0), "200");
    c.observe(released.clone(), t0);
    assert_eq!(c.decide(t0), acquire("200"));
    if let Read::Lease { spec, .. } = &mut released {
        spec.holder_identity = None;
    }
    c.observe(released, t0);
    assert_eq!(c.decide(t0), acquire("200"));
    assert_eq!(c.claim(), None);
}

#[test]
fn a_leader_renews_until_its_renew_deadline_then_steps_down_and_may_renew_again() {
    let t0 = Instant::now();
    let mut c = me();
    c.observe(lease("c2_00001234", wall(0), "100"), t0);
    assert_eq!(c.decide(t0 + LEASE), acquire("100"));
    // The take-over sent at t0 + 15 s lands.
    c.wrote(lease("c1_0000abcd", wall(0), "101"), t0 + LEASE);
    assert!(c.is_leading());
    let sent = t0 + LEASE;
    assert_eq!(c.claim(), Some(Claim::renewed("c1_0000abcd", sent, DEADLINE)));
    assert_eq!(c.decide(sent + DEADLINE - Duration::from_millis(1)), renew("101"));
    // No renewal got through for the renew deadline: step down.
    assert_eq!(c.decide(sent + DEADLINE), Decision::StepDown);
    c.step_down();
    assert!(!c.is_leading());
    assert_eq!(c.claim(), None, "its own claim counts only while it leads");
    // The Lease still names it: it renews (preconditioned), and leads again if that lands.
    assert_eq!(c.decide(sent + DEADLINE), renew("101"));
    c.wrote(lease("c1_0000abcd", wall(0), "102"), sent + secs(12));
    assert!(c.is_leading());
    assert_eq!(c.decide(sent + secs(12)), renew("102"));
}

#[test]
fn a_record_naming_another_holder_ends_the_lead_at_once() {
    let t0 = Instant::now();
    let mut c = me();
    c.observe(Read::Absent, t0);
    c.wrote(lease("c1_0000abcd", wall(0), "1"), t0);
    assert!(c.is_leading());
    c.observe(lease("c2_00001234", wall(0), "2"), t0 + secs(1));
    assert!(!c.is_leading());
    assert_eq!(c.decide(t0 + secs(1)), follow(t0 + secs(1) + LEASE));
    assert_eq!(c.claim(), Some(Claim::renewed("c2_00001234", t0 + secs(1), LEASE)));
    // Its earlier renewal no longer makes it step down: it was never leading since.
    assert_eq!(c.decide(t0 + DEADLINE), follow(t0 + secs(1) + LEASE));
}

#[test]
fn the_next_look_comes_at_the_retry_period_or_when_the_lead_or_the_followed_claim_ends() {
    let t0 = Instant::now();
    let mut c = me();
    assert_eq!(c.next_look(t0, RETRY), t0 + RETRY);
    c.observe(lease("c2_00001234", wall(0), "5"), t0);
    assert_eq!(c.next_look(t0, RETRY), t0 + RETRY);
    // One second before the claim runs out: look again as it runs out.
    assert_eq!(c.next_look(t0 + secs(14), RETRY), t0 + LEASE);
    assert_eq!(c.request_timeout(t0), DEADLINE);

    c.wrote(lease("c1_0000abcd", wall(0), "6"), t0 + LEASE);
    let deadline = t0 + LEASE + DEADLINE;
    assert_eq!(c.next_look(t0 + LEASE, RETRY), t0 + LEASE + RETRY);
    assert_eq!(c.next_look(deadline - secs(1), RETRY), deadline);
    // A request while leading may take only what is left of the lead.
    assert_eq!(c.request_timeout(deadline - secs(3)), secs(3));
    assert_eq!(c.request_timeout(deadline + secs(1)), Duration::ZERO);
}

#[test]
fn a_claim_records_the_holder_its_duration_and_one_more_transition_when_the_holder_changes() {
    let t0 = Instant::now();
    let at = wall(0);
    let mut c = me();
    c.observe(Read::Absent, t0);
    let created = c.claim_record(&Decision::Create, at).expect("a record");
    assert_eq!(created.holder_identity.as_deref(), Some("c1_0000abcd"));
    assert_eq!(created.lease_duration_seconds, Some(15));
    assert_eq!(created.renew_time, Some(MicroTime(at)));
    assert_eq!(created.lease_transitions, Some(0));

    c.observe(lease("c2_00001234", wall(-1), "9"), t0);
    let taken = c.claim_record(&acquire("9"), at).expect("a record");
    assert_eq!(taken.holder_identity.as_deref(), Some("c1_0000abcd"));
    assert_eq!(taken.acquire_time, Some(MicroTime(at)));
    assert_eq!(taken.lease_transitions, Some(4));

    c.wrote(Read::Lease { spec: taken.clone(), resource_version: "10".to_owned() }, t0);
    let later = at + jiff::SignedDuration::from_secs(2);
    let renewed = c.claim_record(&renew("10"), later).expect("a record");
    assert_eq!(renewed.acquire_time, Some(MicroTime(at)), "kept from the acquisition");
    assert_eq!(renewed.renew_time, Some(MicroTime(later)));
    assert_eq!(renewed.lease_transitions, Some(4));
    for writes_nothing in [Decision::Unknown, Decision::StepDown, follow(t0)] {
        assert_eq!(c.claim_record(&writes_nothing, at), None, "{writes_nothing:?}");
    }
}

#[test]
fn only_a_lease_naming_this_candidate_is_released_and_the_release_frees_it() {
    let t0 = Instant::now();
    let at = wall(0);
    let mut c = me();
    assert_eq!(c.release_record(at), None);
    c.observe(lease("c2_00001234", wall(0), "3"), t0);
    assert_eq!(c.release_record(at), None, "another's claim is not released");
    c.observe(lease("c1_0000abcd", wall(0), "4"), t0);
    let (released, rv) = c.release_record(at).expect("its own claim");
    assert_eq!(rv, "4");
    assert_eq!(released.holder_identity, None);
    assert_eq!(released.lease_transitions, Some(3));
    // Another candidate seeing the released record takes it at once.
    let mut other = Candidate::new("c2_00001234", LEASE, DEADLINE);
    other.observe(Read::Lease { spec: released, resource_version: "5".to_owned() }, t0);
    assert_eq!(other.decide(t0), acquire("5"));
}
