//! When a pass writes the Plan status it decided: at once, or later with the next one.
//!
//! A Plan's status names every target, so a status write is as big as the fleet, and a run
//! needs at least one pass per batch (`limits.concurrent` nodes). Written on every pass, the
//! bytes the API server takes in (and sends to every watcher) grow with the square of the
//! fleet: 235 writes of up to 412 KiB for 10,000 workers against 28 of up to 43 KiB for 1,000.
//! So a big status's *progress* (target states, counts, hold reasons) is written at a bounded
//! rate of bytes per second, while the engine goes on from the status it decided: the
//! signals of a deferred pass still go out, and the next pass starts from that status.
//!
//! A milestone (the plan's or a command's state or description, a new run, a condition,
//! a rollback, and whatever authorizes a node: a signal or drain the leader recorded, a
//! pre-staging request, a gate run) is always written at once, before the writes it
//! authorizes, and a status under 64 KiB (about
//! 1,500 workers) on every pass that changes it, as before ([`Pace::DEFAULT`]). What a deferred write risks is
//! only that its progress is not on the Plan yet: a new leader reads it back from the nodes
//! (a node carrying this run's signal counts as signalled, DESIGN §4).

use std::time::Duration;

use autopilot_api::prestage::PrestageState;
use autopilot_api::v1beta2::{PlanCommandStatus, PlanStatus};

/// How fast a big status's progress is written.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    /// Statuses up to this many bytes (as JSON) are written on every pass that changes them.
    pub from_bytes: usize,
    /// The rate, in bytes of status per second, at which a bigger status's progress is
    /// written.
    pub bytes_per_second: usize,
    /// The longest a status's progress waits to be written, however big the status.
    pub max_delay: Duration,
}

impl Pace {
    /// The leader's pace: statuses over 64 KiB (about 1,500 workers) at 64 KiB/s, so
    /// 10,000 workers' 412 KiB every 5 s (the cap) rather than on every pass.
    pub const DEFAULT: Pace = Pace {
        from_bytes: 64 * 1024,
        bytes_per_second: 64 * 1024,
        max_delay: Duration::from_secs(5),
    };

    /// When to write `next`, which differs from `stored`, the status on the Plan; the last
    /// write of this leader term was `since_last` ago (`None`: none yet, or the Plan's status
    /// is not known to be that write's) and `bytes` long as JSON (a status grows or shrinks
    /// little between two writes).
    pub fn of(
        &self,
        stored: Option<&PlanStatus>,
        next: &PlanStatus,
        bytes: usize,
        since_last: Option<Duration>,
    ) -> Write {
        let Some(since_last) = since_last else { return Write::Now };
        if bytes <= self.from_bytes || stored.is_none_or(|stored| is_milestone(stored, next)) {
            return Write::Now;
        }
        let interval = Duration::from_secs_f64(bytes as f64 / self.bytes_per_second as f64)
            .min(self.max_delay);
        match interval.checked_sub(since_last) {
            Some(left) if !left.is_zero() => Write::After(left),
            Some(_) | None => Write::Now,
        }
    }
}

/// What to do with a status that differs from the one on the Plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Write {
    /// Write it in this pass.
    Now,
    /// Keep it and write it (or a later one) after this long.
    After(Duration),
}

/// Whether `next` changes more than progress against `stored`: the run, the plan's state,
/// a condition, a rollback, the windows, or a command's state or description (what it
/// ended with).
fn is_milestone(stored: &PlanStatus, next: &PlanStatus) -> bool {
    let commands = |status: &PlanStatus| {
        status.commands.iter().map(|c| (c.id, c.state, c.description.clone())).collect::<Vec<_>>()
    };
    stored.state != next.state
        || stored.run_id != next.run_id
        || stored.plan_id != next.plan_id
        || stored.observed_generation != next.observed_generation
        || stored.conditions != next.conditions
        || stored.rollback != next.rollback
        || stored.windows != next.windows
        || commands(stored) != commands(next)
        || stored.commands.len() != next.commands.len()
        || stored.commands.iter().zip(&next.commands).any(|(a, b)| authorizes_more(a, b))
}

/// Whether `next` authorizes a node to do what `stored` does not (DESIGN §14): a signal or
/// a drain the leader recorded, a pre-staging request, or an open gate run (which asks for
/// checks). A node acts only on what the Plan status shows, so these are written before the
/// writes they authorize, never deferred. What a node reports back (a staged payload, a
/// gate's verdict) takes an authorization away and is progress.
fn authorizes_more(stored: &PlanCommandStatus, next: &PlanCommandStatus) -> bool {
    fn records(command: &PlanCommandStatus) -> impl Iterator<Item = Record<'_>> {
        let k0s = command.k0supdate.iter().flat_map(|k| k.controllers.iter().chain(&k.workers));
        let airgap = command.airgapupdate.iter().flat_map(|a| a.workers.iter());
        let preflight =
            command.preflight.iter().flat_map(|p| p.controllers.iter().chain(&p.workers));
        let rollback = command.rollback.iter().flat_map(|r| r.controllers.iter().chain(&r.workers));
        k0s.chain(airgap).chain(preflight).chain(rollback).map(|target| Record {
            name: &target.name,
            signalled: target.signalled.as_deref(),
            drained: target.drained.as_deref(),
            staging: target.prestage == Some(PrestageState::Requested),
        })
    }
    let open = |command: &PlanCommandStatus| -> Vec<Vec<String>> {
        command
            .gating
            .iter()
            .filter(|run| run.failed.is_none())
            .map(|run| run.nodes.clone())
            .collect()
    };
    let stored_open = open(stored);
    if open(next).iter().any(|nodes| !stored_open.contains(nodes)) {
        return true;
    }
    let mut before = records(stored);
    let mut after = records(next);
    loop {
        match (before.next(), after.next()) {
            (None, None) => return false,
            (Some(old), Some(new)) if old.name == new.name => {
                let granted = |old: Option<&str>, new: Option<&str>| new.is_some() && new != old;
                if granted(old.signalled, new.signalled)
                    || granted(old.drained, new.drained)
                    || (new.staging && !old.staging)
                {
                    return true;
                }
            }
            // Other targets (not the same run's lists): everything is new.
            (Some(_) | None, Some(_)) | (Some(_), None) => return true,
        }
    }
}

/// What a target authorizes: the signal and drain recorded, whether it is asked to stage.
struct Record<'a> {
    name: &'a str,
    signalled: Option<&'a str>,
    drained: Option<&'a str>,
    staging: bool,
}

#[cfg(test)]
mod tests {
    use autopilot_api::v1beta2::{PlanStateType, TargetState, TargetStatus};

    use super::*;

    fn status(command: PlanStateType, progress: &str) -> PlanStatus {
        PlanStatus {
            state: PlanStateType::SchedulableWait,
            run_id: Some("uid/1".to_owned()),
            plan_id: Some("id".to_owned()),
            progress: Some(progress.to_owned()),
            commands: vec![PlanCommandStatus { id: 0, state: command, ..Default::default() }],
            ..Default::default()
        }
    }

    const BIG: usize = 412 * 1024;
    const PACE: Pace = Pace::DEFAULT;

    #[test]
    fn a_small_status_is_written_on_every_pass() {
        let stored = status(PlanStateType::SchedulableWait, "1/10");
        let next = status(PlanStateType::SchedulableWait, "2/10");
        let just_now = Some(Duration::from_millis(1));
        assert_eq!(PACE.of(Some(&stored), &next, PACE.from_bytes, just_now), Write::Now);
    }

    #[test]
    fn a_big_statuss_progress_waits_its_size_over_the_rate_capped() {
        let stored = status(PlanStateType::SchedulableWait, "1/10000");
        let next = status(PlanStateType::SchedulableWait, "50/10000");
        // 128 KiB at 64 KiB/s: every 2 s.
        let bytes = 2 * PACE.bytes_per_second;
        assert_eq!(
            PACE.of(Some(&stored), &next, bytes, Some(Duration::from_millis(500))),
            Write::After(Duration::from_millis(1500))
        );
        assert_eq!(PACE.of(Some(&stored), &next, bytes, Some(Duration::from_secs(2))), Write::Now);
        // 412 KiB would be 6.4 s: capped.
        assert_eq!(
            PACE.of(Some(&stored), &next, BIG, Some(Duration::from_secs(1))),
            Write::After(PACE.max_delay - Duration::from_secs(1))
        );
        assert_eq!(PACE.of(Some(&stored), &next, BIG, Some(PACE.max_delay)), Write::Now);
    }

    #[test]
    fn what_authorizes_a_node_is_never_deferred() {
        let soon = Some(Duration::from_millis(10));
        let mut stored = status(PlanStateType::SchedulableWait, "0/2");
        let now = jiff::Timestamp::UNIX_EPOCH;
        let pending = |name: &str| TargetStatus::new(name, TargetState::SignalPending, now);
        stored.commands[0].k0supdate = Some(autopilot_api::v1beta2::PlanCommandK0sUpdateStatus {
            controllers: Vec::new(),
            workers: vec![pending("a"), pending("b")],
        });
        fn workers(status: &mut PlanStatus) -> &mut Vec<TargetStatus> {
            &mut status.commands[0].k0supdate.as_mut().unwrap().workers
        }

        let mut progress = stored.clone();
        workers(&mut progress)[0].reason = Some("waiting".to_owned());
        assert!(matches!(PACE.of(Some(&stored), &progress, BIG, soon), Write::After(_)));

        let mut signalled = stored.clone();
        workers(&mut signalled)[0].state = TargetState::SignalSent;
        workers(&mut signalled)[0].signalled = Some("2026-11-28T00:00:00Z".to_owned());
        assert_eq!(PACE.of(Some(&stored), &signalled, BIG, soon), Write::Now, "a signal");

        let mut drained = signalled.clone();
        workers(&mut drained)[0].drained = Some("2026-11-28T00:00:00Z".to_owned());
        assert_eq!(PACE.of(Some(&signalled), &drained, BIG, soon), Write::Now, "a drain");

        let mut asked = stored.clone();
        workers(&mut asked)[1].prestage = Some(PrestageState::Requested);
        assert_eq!(PACE.of(Some(&stored), &asked, BIG, soon), Write::Now, "a staging request");
        let mut staged = asked.clone();
        workers(&mut staged)[1].prestage = Some(PrestageState::Staged);
        assert!(
            matches!(PACE.of(Some(&asked), &staged, BIG, soon), Write::After(_)),
            "a node's report is progress"
        );

        let mut gating = stored.clone();
        gating.commands[0].gating.push(autopilot_api::v1beta2::GateRun {
            nodes: vec!["a".to_owned()],
            after: autopilot_api::v1beta2::GateAfter::Node,
            since: None,
            passed: Vec::new(),
            waiting: None,
            failed: None,
        });
        assert_eq!(PACE.of(Some(&stored), &gating, BIG, soon), Write::Now, "a gate run");
    }

    #[test]
    fn the_first_write_of_a_term_and_every_milestone_go_out_at_once() {
        let stored = status(PlanStateType::SchedulableWait, "9999/10000");
        let soon = Some(Duration::from_millis(10));
        let progress = status(PlanStateType::SchedulableWait, "10000/10000");
        assert_eq!(PACE.of(Some(&stored), &progress, BIG, None), Write::Now, "first of the term");
        assert_eq!(PACE.of(None, &progress, BIG, soon), Write::Now, "no status on the Plan yet");

        let completed = status(PlanStateType::Completed, "10000/10000");
        assert_eq!(PACE.of(Some(&stored), &completed, BIG, soon), Write::Now, "a command's state");

        let mut described = progress.clone();
        described.commands[0].description = Some("why".to_owned());
        assert_eq!(PACE.of(Some(&stored), &described, BIG, soon), Write::Now, "its description");

        let mut ended = progress.clone();
        ended.state = PlanStateType::Completed;
        assert_eq!(PACE.of(Some(&stored), &ended, BIG, soon), Write::Now, "the plan's state");

        let mut new_run = progress.clone();
        new_run.run_id = Some("uid/2".to_owned());
        assert_eq!(PACE.of(Some(&stored), &new_run, BIG, soon), Write::Now, "a new run");

        let mut held = progress;
        held.commands[0].reason = Some("paused; 3 in flight".to_owned());
        assert!(
            matches!(PACE.of(Some(&stored), &held, BIG, soon), Write::After(_)),
            "a hold reason is progress"
        );
    }
}
