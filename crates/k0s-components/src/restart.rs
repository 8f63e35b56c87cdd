//! When a supervised component that exited is started again (pure: no clock, no process).
//!
//! The first restart comes quickly (a killed kubelet is back in well under a second); each
//! further exit in a row doubles the wait up to a cap, so a component that cannot start
//! costs a bounded share of the machine; a run that lasted long enough counts as healthy and
//! starts the count afresh.

use std::time::Duration;

/// The restart policy of a supervised component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the first restart after a healthy run.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
    /// A run at least this long was healthy: the next exit waits `first` again.
    pub healthy_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            first: Duration::from_millis(500),
            max: Duration::from_secs(15),
            healthy_after: Duration::from_secs(30),
        }
    }
}

/// Exits in a row without a healthy run between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streak(pub u32);

impl Backoff {
    /// After an exit of a run that lasted `ran_for`, with `streak` exits in a row before it:
    /// the streak now and how long to wait before starting it again.
    #[must_use]
    pub fn after_exit(&self, streak: Streak, ran_for: Duration) -> (Streak, Duration) {
        let streak = if ran_for >= self.healthy_after {
            Streak(1)
        } else {
            Streak(streak.0.saturating_add(1))
        };
        let doublings = streak.0.saturating_sub(1).min(16);
        let wait = self.first.saturating_mul(1u32 << doublings).min(self.max);
        (streak, wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_restart_is_quick_and_each_exit_in_a_row_doubles_the_wait_up_to_the_cap() {
        let policy = Backoff::default();
        let mut streak = Streak::default();
        let mut waits = Vec::new();
        for _ in 0..8 {
            let (next, wait) = policy.after_exit(streak, SHORT);
            streak = next;
            waits.push(wait.as_millis());
        }
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 15000, 15000, 15000]);
    }

    #[test]
    fn a_healthy_run_starts_the_count_afresh() {
        let policy = Backoff::default();
        let (streak, _) = policy.after_exit(Streak(6), SHORT);
        assert_eq!(streak, Streak(7));
        let (streak, wait) = policy.after_exit(streak, Duration::from_secs(30));
        assert_eq!((streak, wait), (Streak(1), Duration::from_millis(500)));
    }

    #[test]
    fn a_streak_of_any_length_never_overflows() {
        let policy = Backoff::default();
        let (streak, wait) = policy.after_exit(Streak(u32::MAX), SHORT);
        assert_eq!(streak, Streak(u32::MAX));
        assert_eq!(wait, policy.max);
    }
}
