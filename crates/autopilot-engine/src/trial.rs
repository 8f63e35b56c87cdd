//! The verdict on a trial boot of a new binary (DESIGN §11): pure, no clock, no process.
//!
//! The node's shell (`autopilot_signal::trial`) starts the staged binary as a child, watches
//! it and probes the API server; at every look it hands [`decide`] an [`Observation`] and
//! acts on the [`Verdict`]: wait, start the child again, swap the new binary in, or roll
//! back to the binary the node ran.

use std::time::Duration;

/// How many times the new binary may exit before it was healthy before it is refused: one
/// exit may be bad luck, three in a row are a crash loop.
pub const MAX_TRIAL_STARTS: u32 = 3;

/// What the parent sees of a trial at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The child's state.
    pub child: Child,
    /// The child wrote the expected token into the proof file.
    pub proof: bool,
    /// How many times the child has been started (this run included).
    pub starts: u32,
    /// How long the trial has run while the API server answered (outages do not count).
    pub reachable_for: Duration,
}

/// The child process of a trial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Child {
    /// Still running.
    Running,
    /// Exited (or could not be started).
    Exited {
        /// How: `exit status: 1`, `signal: 9 (SIGKILL)`, or why it could not start.
        status: String,
        /// The last line it wrote to stderr, if any.
        last_line: Option<String>,
    },
}

/// What to do about a trial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Keep waiting.
    Wait,
    /// Start the child again (it exited before it was healthy, but not too often yet).
    StartAgain,
    /// The new binary is healthy: it is proven.
    Pass,
    /// Refuse the new binary, with the reason.
    RollBack(String),
}

/// The verdict on a trial given what was seen and the trial `deadline`.
pub fn decide(seen: &Observation, deadline: Duration) -> Verdict {
    if seen.proof {
        return Verdict::Pass;
    }
    match &seen.child {
        Child::Exited { .. } if seen.starts < MAX_TRIAL_STARTS => Verdict::StartAgain,
        Child::Exited { status, last_line } => {
            let times =
                if seen.starts == 1 { String::new() } else { format!(" {} times", seen.starts) };
            let said = last_line.as_deref().map(|l| format!(": {l}")).unwrap_or_default();
            Verdict::RollBack(format!(
                "the new binary exited{times} before it was healthy ({status}){said}"
            ))
        }
        Child::Running if seen.reachable_for >= deadline => Verdict::RollBack(format!(
            "the new binary was not healthy within {} while the API server answered",
            autopilot_api::duration::format(deadline)
        )),
        Child::Running => Verdict::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(child: Child, proof: bool, starts: u32, reachable: u64) -> Observation {
        Observation { child, proof, starts, reachable_for: Duration::from_secs(reachable) }
    }

    fn exited() -> Child {
        Child::Exited { status: "exit status: 1".into(), last_line: Some("boom".into()) }
    }

    const DEADLINE: Duration = Duration::from_secs(120);

    #[test]
    fn a_proof_passes_the_trial_whatever_the_child_does_next() {
        assert_eq!(decide(&seen(Child::Running, true, 1, 0), DEADLINE), Verdict::Pass);
        assert_eq!(decide(&seen(exited(), true, 3, 500), DEADLINE), Verdict::Pass);
    }

    #[test]
    fn an_exit_before_the_proof_starts_again_then_rolls_back_after_three() {
        assert_eq!(decide(&seen(exited(), false, 1, 0), DEADLINE), Verdict::StartAgain);
        assert_eq!(decide(&seen(exited(), false, 2, 0), DEADLINE), Verdict::StartAgain);
        assert_eq!(
            decide(&seen(exited(), false, 3, 0), DEADLINE),
            Verdict::RollBack(
                "the new binary exited 3 times before it was healthy (exit status: 1): boom".into()
            )
        );
    }

    #[test]
    fn only_time_while_the_api_server_answers_counts_against_the_deadline() {
        assert_eq!(decide(&seen(Child::Running, false, 1, 119), DEADLINE), Verdict::Wait);
        let Verdict::RollBack(reason) = decide(&seen(Child::Running, false, 1, 120), DEADLINE)
        else {
            panic!("expected a rollback")
        };
        assert_eq!(
            reason,
            "the new binary was not healthy within 2m while the API server answered"
        );
    }
}
