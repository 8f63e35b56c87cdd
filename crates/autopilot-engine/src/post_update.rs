//! The post-update watch of a node (DESIGN §15): pure, no clock, no file.
//!
//! After a new binary passed its trial boot and was swapped in, the restart marker carries a
//! [`Watch`] for `--post-update-watch`. The window counts only time in which a request that
//! needs the datastore succeeded with the node's own identity (a quorum read of its own
//! object): an outage of the API server or of etcd proves nothing either way, so a new binary
//! that could not do its work because the datastore was away is "not proven yet", never
//! "unhealthy", and an outage as long as the window never undoes a good update. Proof needs,
//! besides [`HEALTHY_FOR`] healthy in a row, a write of its own in the window that a quorum
//! read sees ([`Verdict::WriteProof`]).
//!
//! The new binary does not judge itself alone. Three callers look at the watch and act on
//! the [`Verdict`] of [`decide`]: the guard the units run from the proven binary (`k0s.prev
//! post-update-guard`) before every start, which counts that start itself (so a new binary
//! that dies, or hangs until the units' watchdog kills it, before it records anything is
//! counted, and its third abnormal exit rolls it back); the new binary first thing at its
//! start (the count without the guard); and the new binary while it runs (with how long it
//! has been healthy in a row). The proven binary, once it runs again after a rollback,
//! reports it ([`Caller::Previous`]).

use std::time::Duration;

/// How many abnormal exits of the new binary within the window roll it back.
pub const MAX_ABNORMAL_EXITS: u32 = 3;

/// How long the new binary must stay healthy in a row (up, its agent's watch of its own
/// object established) to be proven after the update: long enough to outlive a crash a few
/// seconds into the run, short enough that an update does not hang over a node for long.
pub const HEALTHY_FOR: Duration = Duration::from_secs(60);

/// The watch as the restart marker records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watch {
    /// How long it lasts, counting only time while the datastore answered.
    pub window: Duration,
    /// How long the new binary has run while its quorum reads succeeded, over all its
    /// starts (what the running binary counted and recorded).
    pub answered_for: Duration,
    /// How many times the new binary started.
    pub starts: u32,
    /// How many of its runs ended without a clean stop.
    pub abnormal_exits: u32,
    /// Its last start has not stopped cleanly (yet): if it is not running any more, it
    /// exited abnormally.
    pub running: bool,
    /// The guard counted the start that follows it, which the new binary has not taken up
    /// yet (it must not count it again).
    pub counted: bool,
    /// Where the watch stands.
    pub state: State,
}

/// Where a watch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The new binary is watched. Exits: [`State::Proven`] after [`HEALTHY_FOR`] healthy,
    /// [`State::RolledBack`] after [`MAX_ABNORMAL_EXITS`] abnormal exits or at the end of
    /// the window.
    Watching,
    /// The new binary stayed healthy for [`HEALTHY_FOR`]: the watch is over. Terminal.
    Proven,
    /// The proven binary was put back. `reported` once it told the cluster. Terminal but
    /// for the report.
    RolledBack {
        /// The rollback was reported (log, Event, metric).
        reported: bool,
    },
}

/// Why a watch rolled the new binary back (the `reason` label of
/// `k0s_autopilot_rollbacks_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// It exited abnormally [`MAX_ABNORMAL_EXITS`] times.
    Crashed,
    /// It was never healthy for [`HEALTHY_FOR`] in a row within the window (while its
    /// quorum reads succeeded).
    Unhealthy,
}

impl Reason {
    /// Every reason, in label order.
    pub const ALL: [Self; 2] = [Self::Crashed, Self::Unhealthy];

    /// Its metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Crashed => "crashed",
            Self::Unhealthy => "unhealthy",
        }
    }
}

/// Who asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The guard run from the proven binary before a start (`k0s.prev post-update-guard`).
    Guard,
    /// The new binary, first thing at its start.
    Starting,
    /// The new binary while it runs, healthy for `healthy_for` in a row (zero: not now),
    /// counting only time in which a quorum read of its own object succeeded.
    Running {
        /// How long it has been healthy in a row.
        healthy_for: Duration,
        /// It wrote on its own object in this run and a quorum read saw the write.
        wrote: bool,
    },
    /// The proven binary, running (again).
    Previous,
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing: no watch for this caller (over, or about another binary).
    Nothing,
    /// The new binary runs and is watched: look again later.
    KeepWatching,
    /// Record this start of the new binary (and an abnormal exit of the one before, if so).
    /// From the guard: the start that follows, marked counted.
    RecordStart {
        /// The previous start never stopped cleanly.
        abnormal_exit: bool,
    },
    /// The guard counted this start already: take it up (clear the mark), count nothing.
    Counted,
    /// Healthy long enough, but no write of its own seen yet: write on its own object and
    /// read it back with a quorum read; proven on the next look once that worked.
    WriteProof,
    /// Put the proven binary back and start it.
    RollBack {
        /// Why, as a label.
        reason: Reason,
        /// Why, in words.
        why: String,
    },
    /// The new binary is proven after the update: record it; the watch is over.
    Proven,
    /// Report the rollback (log, Event, metric) and record that it was reported.
    Report,
}

/// The verdict for `caller` on `watch`. No clock: the window is what the running binary
/// counted while its quorum reads succeeded.
pub fn decide(watch: &Watch, caller: Caller) -> Verdict {
    match (watch.state, caller) {
        (State::Watching, Caller::Guard) => {
            rollback_due(watch).unwrap_or(Verdict::RecordStart { abnormal_exit: watch.running })
        }
        // The guard decided on this start before it was made: nothing is due since.
        (State::Watching, Caller::Starting) if watch.counted => Verdict::Counted,
        (State::Watching, Caller::Starting) => {
            rollback_due(watch).unwrap_or(Verdict::RecordStart { abnormal_exit: watch.running })
        }
        (State::Watching, Caller::Running { healthy_for, wrote }) if healthy_for >= HEALTHY_FOR => {
            if wrote {
                Verdict::Proven
            } else {
                Verdict::WriteProof
            }
        }
        (State::Watching, Caller::Running { .. }) => {
            if window_over(watch) {
                Verdict::RollBack { reason: Reason::Unhealthy, why: unhealthy(watch) }
            } else {
                Verdict::KeepWatching
            }
        }
        (State::Watching, Caller::Previous) => Verdict::Nothing,
        (State::RolledBack { reported: false }, Caller::Previous) => Verdict::Report,
        (
            State::RolledBack { reported: false },
            Caller::Guard | Caller::Starting | Caller::Running { .. },
        )
        | (State::RolledBack { reported: true } | State::Proven, _) => Verdict::Nothing,
    }
}

/// A rollback, if one is due before a start: counting the exit of a start that never
/// stopped cleanly, or the window being over without a proof.
fn rollback_due(watch: &Watch) -> Option<Verdict> {
    // Check 1: the crash count, with the exit of the last start if it never stopped cleanly.
    let exits = watch.abnormal_exits + u32::from(watch.running);
    if exits >= MAX_ABNORMAL_EXITS {
        return Some(Verdict::RollBack {
            reason: Reason::Crashed,
            why: format!(
                "the new binary exited abnormally {exits} times within {} of the update",
                autopilot_api::duration::format(watch.window)
            ),
        });
    }
    // Check 2: the window is over (while the API server answered) and it was never proven.
    window_over(watch)
        .then(|| Verdict::RollBack { reason: Reason::Unhealthy, why: unhealthy(watch) })
}

fn window_over(watch: &Watch) -> bool {
    watch.answered_for >= watch.window
}

fn unhealthy(watch: &Watch) -> String {
    format!(
        "the new binary was not healthy for {} in a row within {} of the update while the datastore answered",
        autopilot_api::duration::format(HEALTHY_FOR),
        autopilot_api::duration::format(watch.window)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(600);

    fn watching(starts: u32, abnormal_exits: u32, running: bool) -> Watch {
        answered(starts, abnormal_exits, running, 0)
    }

    /// A watch whose binary ran `secs` while its quorum reads succeeded.
    fn answered(starts: u32, abnormal_exits: u32, running: bool, secs: u64) -> Watch {
        Watch {
            window: WINDOW,
            answered_for: Duration::from_secs(secs),
            starts,
            abnormal_exits,
            running,
            counted: false,
            state: State::Watching,
        }
    }

    /// The running binary, healthy for `secs` in a row, having written its proof.
    fn running(secs: u64) -> Caller {
        Caller::Running { healthy_for: Duration::from_secs(secs), wrote: true }
    }

    #[test]
    fn the_first_start_after_the_swap_is_recorded_by_the_guard_or_else_by_the_binary() {
        let watch = watching(0, 0, false);
        assert_eq!(decide(&watch, Caller::Guard), Verdict::RecordStart { abnormal_exit: false });
        assert_eq!(decide(&watch, Caller::Starting), Verdict::RecordStart { abnormal_exit: false });
    }

    #[test]
    fn a_start_the_guard_counted_is_not_counted_again_by_the_binary() {
        // The guard counted the third start after two abnormal exits: it runs, and the start
        // of the new binary takes it up, even though its `running` is set (by the guard).
        let mut watch = watching(3, 2, true);
        watch.counted = true;
        assert_eq!(decide(&watch, Caller::Starting), Verdict::Counted);
        // Had it died before taking it up, the guard before the next start counts that exit.
        assert!(matches!(
            decide(&watch, Caller::Guard),
            Verdict::RollBack { reason: Reason::Crashed, .. }
        ));
    }

    #[test]
    fn a_start_after_one_that_never_stopped_cleanly_counts_an_abnormal_exit() {
        let watch = watching(1, 0, true);
        assert_eq!(decide(&watch, Caller::Guard), Verdict::RecordStart { abnormal_exit: true });
        assert_eq!(decide(&watch, Caller::Starting), Verdict::RecordStart { abnormal_exit: true });
        let stopped_cleanly = watching(1, 0, false);
        assert_eq!(
            decide(&stopped_cleanly, Caller::Starting),
            Verdict::RecordStart { abnormal_exit: false }
        );
    }

    #[test]
    fn the_third_abnormal_exit_rolls_back_in_the_guard_and_in_the_starting_binary() {
        let watch = watching(3, 2, true);
        let expected = Verdict::RollBack {
            reason: Reason::Crashed,
            why: "the new binary exited abnormally 3 times within 10m of the update".into(),
        };
        assert_eq!(decide(&watch, Caller::Guard), expected);
        assert_eq!(decide(&watch, Caller::Starting), expected);
        // Two abnormal exits and a clean stop: not yet.
        let clean = watching(3, 2, false);
        assert_eq!(decide(&clean, Caller::Guard), Verdict::RecordStart { abnormal_exit: false });
    }

    const UNHEALTHY: &str = "the new binary was not healthy for 1m in a row within 10m of the update while the datastore answered";

    #[test]
    fn a_start_after_the_window_without_a_proof_rolls_back_as_unhealthy() {
        let expected = Verdict::RollBack { reason: Reason::Unhealthy, why: UNHEALTHY.into() };
        let over = answered(1, 0, false, 600);
        assert_eq!(decide(&over, Caller::Guard), expected);
        assert_eq!(decide(&over, Caller::Starting), expected);
        let not_yet = answered(1, 0, false, 599);
        assert_eq!(decide(&not_yet, Caller::Guard), Verdict::RecordStart { abnormal_exit: false });
    }

    #[test]
    fn time_without_the_datastore_never_ends_the_window() {
        // Hours since the swap, but no quorum read ever succeeded (the API server or etcd
        // away): not proven yet, and neither the guard nor a start nor the running binary
        // rolls back.
        let watch = answered(1, 0, true, 0);
        assert_eq!(decide(&watch, Caller::Guard), Verdict::RecordStart { abnormal_exit: true });
        assert_eq!(decide(&watch, Caller::Starting), Verdict::RecordStart { abnormal_exit: true });
        assert_eq!(decide(&watch, running(0)), Verdict::KeepWatching);
        // Once it answered for the whole window, the window is over.
        let watch = answered(1, 0, true, 600);
        assert!(matches!(decide(&watch, running(0)), Verdict::RollBack { .. }));
    }

    #[test]
    fn the_running_binary_is_proven_after_a_minute_healthy_in_a_row() {
        let watch = answered(1, 0, true, 30);
        assert_eq!(decide(&watch, running(59)), Verdict::KeepWatching);
        assert_eq!(decide(&watch, running(60)), Verdict::Proven);
        // Proof wins over a window that ends at the same moment.
        let over = answered(1, 0, true, 600);
        assert_eq!(decide(&over, running(60)), Verdict::Proven);
    }

    #[test]
    fn healthy_long_enough_is_proven_only_after_a_write_of_its_own() {
        let watch = answered(1, 0, true, 70);
        let unwritten =
            |secs| Caller::Running { healthy_for: Duration::from_secs(secs), wrote: false };
        assert_eq!(decide(&watch, unwritten(59)), Verdict::KeepWatching);
        assert_eq!(decide(&watch, unwritten(60)), Verdict::WriteProof);
        assert_eq!(decide(&watch, unwritten(600)), Verdict::WriteProof);
        assert_eq!(decide(&watch, running(60)), Verdict::Proven);
        // Not healthy (a quorum read failing resets it to zero): a write changes nothing.
        assert_eq!(decide(&watch, running(0)), Verdict::KeepWatching);
    }

    #[test]
    fn the_running_binary_rolls_itself_back_when_the_window_ends_unproven() {
        let watch = answered(1, 0, true, 600);
        assert_eq!(
            decide(&watch, running(20)),
            Verdict::RollBack { reason: Reason::Unhealthy, why: UNHEALTHY.into() }
        );
        let almost = answered(1, 0, true, 599);
        assert_eq!(decide(&almost, running(20)), Verdict::KeepWatching);
    }

    #[test]
    fn the_previous_binary_reports_a_rollback_once() {
        let mut watch = watching(3, 3, false);
        watch.state = State::RolledBack { reported: false };
        assert_eq!(decide(&watch, Caller::Previous), Verdict::Report);
        for caller in [Caller::Guard, Caller::Starting, running(100)] {
            assert_eq!(decide(&watch, caller), Verdict::Nothing, "{caller:?}");
        }
        watch.state = State::RolledBack { reported: true };
        assert_eq!(decide(&watch, Caller::Previous), Verdict::Nothing);
    }

    #[test]
    fn a_proven_watch_is_over_for_everyone() {
        let mut watch = answered(5, 2, true, 10_000);
        watch.state = State::Proven;
        for caller in [Caller::Guard, Caller::Starting, running(0), Caller::Previous] {
            assert_eq!(decide(&watch, caller), Verdict::Nothing, "{caller:?}");
        }
    }

    #[test]
    fn the_previous_binary_leaves_a_watch_in_progress_alone() {
        let watch = watching(1, 0, true);
        assert_eq!(decide(&watch, Caller::Previous), Verdict::Nothing);
    }

    #[test]
    fn reasons_have_stable_labels() {
        let labels: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels, ["crashed", "unhealthy"]);
    }
}
