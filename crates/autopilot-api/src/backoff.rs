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

    /// The next delay (the sequence never ends, so there always is one).
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.cap);
        delay
    }

    /// Continues the sequence after `delay`, a wait taken from elsewhere: the next delay is
    /// `2 × delay`, capped.
    pub fn continue_after(&mut self, delay: Duration) {
        self.next = (delay * 2).min(self.cap);
    }

    /// The longest delay.
    pub fn cap(&self) -> Duration {
        self.cap
    }
}

impl Iterator for Capped {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
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

    #[test]
    fn another_first_delay_and_cap_double_the_same_way() {
        let secs = Duration::from_secs;
        let mut delays = Capped::new(secs(1), secs(30));
        let first: Vec<u64> = (0..7).map(|_| delays.next_delay().as_secs()).collect();
        assert_eq!(first, vec![1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(delays.cap(), secs(30));
    }

    #[test]
    fn continuing_after_a_foreign_delay_doubles_that_delay() {
        let mut delays = Capped::new(Duration::from_secs(2), Duration::from_secs(30));
        delays.continue_after(Duration::from_millis(250));
        assert_eq!(delays.next_delay(), Duration::from_millis(500));
        delays.continue_after(Duration::from_secs(20));
        assert_eq!(delays.next_delay(), Duration::from_secs(30));
    }
}
