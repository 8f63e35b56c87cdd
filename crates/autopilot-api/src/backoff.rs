//! The retry delays of watches and retried API calls: doubling from a short first delay up
//! to a low cap, so that after an API-server outage work resumes within the cap of the
//! server answering again (kube-runtime's default grows to 30 s per watch, and chained
//! watches added up to more than a minute of silence after an outage).

use std::time::Duration;

/// First delay after a failure.
pub const FIRST: Duration = Duration::from_millis(250);

/// The longest delay: what an outage can add to the time work resumes after the API server
/// answers again. A watch retrying every 2 s costs an API server nothing worth counting.
pub const CAP: Duration = Duration::from_secs(2);

/// Delays `FIRST, 2×FIRST, …` capped at `CAP`, for ever; [`Capped::reset`] after a success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capped {
    next: Duration,
    first: Duration,
    cap: Duration,
}

impl Default for Capped {
    fn default() -> Self {
        Self::new(FIRST, CAP)
    }
}

impl Capped {
    /// Delays from `first`, doubling, capped at `cap`.
    pub fn new(first: Duration, cap: Duration) -> Self {
        Self { next: first, first, cap }
    }

    /// Starts again from the first delay (after a success).
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

impl Iterator for Capped {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (self.next * 2).min(self.cap);
        Some(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_start_over_after_a_reset() {
        let mut delays = Capped::default();
        let first: Vec<u64> = delays.by_ref().take(6).map(|d| d.as_millis() as u64).collect();
        assert_eq!(first, vec![250, 500, 1000, 2000, 2000, 2000]);
        delays.reset();
        assert_eq!(delays.next(), Some(FIRST));
    }
}
