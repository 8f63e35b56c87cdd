//! A leader's term, and the times an earlier leader wrote: from when this leader counts a
//! deadline, a soak or a timeout that started before it took over.
//!
//! A time in the Plan status was written on the clock of the leader that wrote it, whose
//! offset from this leader's clock is unknown. So a deadline counts at most from when this
//! leader's term began (a clock ahead of the earlier leader's ends none early), and a time in
//! this leader's future (a clock behind the earlier leader's) counts from the takeover too,
//! never from the future: it holds nothing longer than one deadline past the takeover.

use jiff::Timestamp;

/// When a deadline that started at `time` (as the Plan status keeps it) counts from, for a
/// leader whose term began at `term_started` (`None`: not known, as in a dry run) and whose
/// clock reads `now`:
///
/// - `time` itself, if it lies within this term and not after `now`;
/// - the term's start, if `time` is earlier (written before the takeover) or later than
///   `now` (by a clock ahead of this one: it was written before the takeover as well);
/// - without a known term, `time`, or `now` for a `time` in the future.
///
/// Never later than `now`, so the time elapsed since is never negative.
pub fn counted_from(time: Timestamp, term_started: Option<Timestamp>, now: Timestamp) -> Timestamp {
    let from = if time > now {
        term_started.unwrap_or(now)
    } else {
        term_started.map_or(time, |started| time.max(started))
    };
    from.min(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: i64) -> Timestamp {
        let start: Timestamp = "2030-01-01T00:00:00Z".parse().expect("a timestamp");
        start + jiff::SignedDuration::from_mins(minutes)
    }

    #[test]
    fn a_time_within_the_term_counts_as_written() {
        assert_eq!(counted_from(at(10), Some(at(0)), at(20)), at(10));
        assert_eq!(counted_from(at(20), Some(at(0)), at(20)), at(20), "written now");
        assert_eq!(counted_from(at(10), None, at(20)), at(10));
    }

    #[test]
    fn a_time_before_the_takeover_counts_from_the_takeover() {
        // The earlier leader's clock ran three hours behind this one: its times lie hours
        // before the takeover.
        assert_eq!(counted_from(at(-180), Some(at(0)), at(5)), at(0));
    }

    #[test]
    fn a_time_in_this_leaders_future_counts_from_the_takeover_not_from_the_future() {
        // The earlier leader's clock ran three hours ahead of this one: its times lie in this
        // leader's future.
        assert_eq!(counted_from(at(180), Some(at(0)), at(5)), at(0));
        assert_eq!(counted_from(at(6), Some(at(0)), at(5)), at(0), "a minute ahead");
        // Without a known term (a dry run): from now.
        assert_eq!(counted_from(at(180), None, at(5)), at(5));
    }

    #[test]
    fn never_later_than_now_even_when_this_clock_stepped_back_after_the_takeover() {
        assert_eq!(counted_from(at(10), Some(at(30)), at(20)), at(20));
        assert_eq!(counted_from(at(40), Some(at(30)), at(20)), at(20));
    }
}
