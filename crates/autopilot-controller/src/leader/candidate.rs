//! The election's decision, with client-go's semantics (`leaderelection.LeaderElector`): a
//! candidate judges another holder's claim by when it last saw the Lease's record change,
//! on its own monotonic clock, never by the `renewTime` the holder wrote on its wall clock;
//! it claims a free or expired lease with an update preconditioned on the `resourceVersion`
//! it observed, so two candidates cannot both take it; and a leader that could not renew
//! within `--renew-deadline` of its last renewal sent steps down, before the others may
//! take over (`--lease-duration` after they saw that renewal land).
//!
//! Pure: [`Candidate`] is fed what the Lease read showed ([`Candidate::observe`]) and what
//! this candidate wrote ([`Candidate::wrote`]), each with the instant it happened, and
//! [`Candidate::decide`] says what to do at a given instant. The shell (`leader::run`) reads
//! and writes the Lease and keeps the time.

use std::time::Duration;

use autopilot_shell::leadership::Claim;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;

/// What a read of the Lease showed.
#[derive(Clone, Debug, PartialEq)]
pub enum Read {
    /// No Lease exists.
    Absent,
    /// The Lease's record and the `resourceVersion` it was read at.
    Lease { spec: LeaseSpec, resource_version: String },
}

/// What this candidate knows of the Lease.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    /// Nothing read yet.
    Nothing,
    /// The last read found no Lease.
    Absent,
    /// The record last read, its `resourceVersion`, and when this candidate first saw the
    /// record as it is (on its own clock): a claim is valid for its duration from then.
    Record { spec: LeaseSpec, resource_version: String, since: Instant },
}

/// What to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing is known of the Lease yet: read it again after the retry period.
    Unknown,
    /// Another candidate holds a claim valid until `until` on this candidate's clock: leave
    /// it, and look again by then.
    Follow { holder: String, until: Instant },
    /// No Lease exists: create one naming this candidate (fails if another did first).
    Create,
    /// The lease is free, or its holder's claim ran out unrenewed: claim it with an update
    /// preconditioned on the `resource_version` observed.
    Acquire { resource_version: String },
    /// This candidate holds the lease: renew it, preconditioned on `resource_version`.
    Renew { resource_version: String },
    /// This candidate leads, but its last successful renewal was sent `--renew-deadline` ago
    /// or more: stop leading now (the others may take over only later).
    StepDown,
}

/// One candidate in the election: its identity, timings and what it has seen and written.
#[derive(Clone, Debug)]
pub struct Candidate {
    identity: String,
    /// How long this candidate's claims last (`leaseDurationSeconds` it writes), and how
    /// long a claim without a valid duration of its own is taken to last.
    lease_duration: Duration,
    /// How long after its last renewal sent a leader goes on leading.
    renew_deadline: Duration,
    seen: Seen,
    /// While this candidate leads: when its last successful write of its claim was sent.
    renewed: Option<Instant>,
}

impl Candidate {
    /// A candidate that has seen nothing yet and does not lead.
    pub fn new(
        identity: impl Into<String>,
        lease_duration: Duration,
        renew_deadline: Duration,
    ) -> Self {
        Self {
            identity: identity.into(),
            lease_duration,
            renew_deadline,
            seen: Seen::Nothing,
            renewed: None,
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this candidate leads: it holds the lease and renewed it less than
    /// `--renew-deadline` ago (as of its last decision; [`Self::decide`] says
    /// [`Decision::StepDown`] once that is over).
    pub fn is_leading(&self) -> bool {
        self.renewed.is_some()
    }

    /// A read at `now` showed `read`. A record that differs from the one last seen restarts
    /// its claim's clock; the same record read again (even at a new `resourceVersion`) does
    /// not. A record naming another holder ends this candidate's lead.
    pub fn observe(&mut self, read: Read, now: Instant) {
        self.seen = match (read, &self.seen) {
            (Read::Absent, _) => Seen::Absent,
            (Read::Lease { spec, resource_version }, Seen::Record { spec: was, since, .. })
                if *was == spec =>
            {
                Seen::Record { spec, resource_version, since: *since }
            }
            (
                Read::Lease { spec, resource_version },
                Seen::Nothing | Seen::Absent | Seen::Record { .. },
            ) => Seen::Record { spec, resource_version, since: now },
        };
        if self.holder() != Some(self.identity.as_str()) {
            self.renewed = None;
        }
    }

    /// A write of this candidate's claim sent at `sent` succeeded, and the API server
    /// answered with `written`: it leads until `sent` plus `--renew-deadline`.
    pub fn wrote(&mut self, written: Read, sent: Instant) {
        self.observe(written, sent);
        if self.holder() == Some(self.identity.as_str()) {
            self.renewed = Some(sent);
        }
    }

    /// Stop leading ([`Decision::StepDown`]).
    pub fn step_down(&mut self) {
        self.renewed = None;
    }

    /// What to do at `now`.
    pub fn decide(&self, now: Instant) -> Decision {
        if let Some(deadline) = self.lead_deadline()
            && now >= deadline
        {
            return Decision::StepDown;
        }
        match &self.seen {
            Seen::Nothing => Decision::Unknown,
            Seen::Absent => Decision::Create,
            Seen::Record { spec, resource_version, since } => {
                let resource_version = resource_version.clone();
                match holder_of(spec) {
                    None => Decision::Acquire { resource_version },
                    Some(holder) if holder == self.identity => Decision::Renew { resource_version },
                    Some(holder) => {
                        let until = *since + self.duration_of(spec);
                        if now < until {
                            Decision::Follow { holder: holder.to_owned(), until }
                        } else {
                            Decision::Acquire { resource_version }
                        }
                    }
                }
            }
        }
    }

    /// The claim the Lease shows, as this candidate counts it: its own only while it leads
    /// (until its last renewal sent plus `--renew-deadline`), another's until that claim's
    /// duration after this candidate first saw it; `None` when nobody holds the lease or it
    /// is not known.
    pub fn claim(&self) -> Option<Claim> {
        let Seen::Record { spec, since, .. } = &self.seen else { return None };
        let holder = holder_of(spec)?;
        if holder == self.identity {
            let renewed = self.renewed?;
            Some(Claim::renewed(holder, renewed, self.renew_deadline))
        } else {
            Some(Claim::renewed(holder, *since, self.duration_of(spec)))
        }
    }

    /// When to look at the Lease next, after deciding at `now`: one `retry_period` on, but
    /// no later than the moment this candidate's lead ends or the claim it follows runs out
    /// (so it steps down, or takes over, on time).
    pub fn next_look(&self, now: Instant, retry_period: Duration) -> Instant {
        let next = now + retry_period;
        let bound = match self.decide(now) {
            Decision::Follow { until, .. } => Some(until),
            Decision::Unknown
            | Decision::Create
            | Decision::Acquire { .. }
            | Decision::Renew { .. }
            | Decision::StepDown => self.lead_deadline(),
        };
        bound.map_or(next, |bound| next.min(bound.max(now)))
    }

    /// How long one request to the API server may take at `now`: while leading, no longer
    /// than what is left of the lead (so a hung renewal ends in a step-down on time), else
    /// `--renew-deadline`.
    pub fn request_timeout(&self, now: Instant) -> Duration {
        self.lead_deadline()
            .map_or(self.renew_deadline, |deadline| deadline.saturating_duration_since(now))
    }

    /// The record to write for `decision` at wall-clock time `at` (kept for operators and
    /// for other implementations; no candidate here judges a claim by it): for
    /// [`Decision::Create`] and [`Decision::Acquire`] a new claim by this candidate (one more
    /// transition when the holder changes), for [`Decision::Renew`] the same claim renewed;
    /// `None` for the decisions that write nothing.
    pub fn claim_record(&self, decision: &Decision, at: jiff::Timestamp) -> Option<LeaseSpec> {
        let now = Some(MicroTime(at));
        let seen = match &self.seen {
            Seen::Record { spec, .. } => Some(spec),
            Seen::Nothing | Seen::Absent => None,
        };
        let transitions = seen.and_then(|spec| spec.lease_transitions).unwrap_or(0);
        let base = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(whole_secs(self.lease_duration)),
            acquire_time: now.clone(),
            renew_time: now,
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        match decision {
            Decision::Create => Some(base),
            Decision::Acquire { .. } => {
                let changes = seen.and_then(holder_of) != Some(self.identity.as_str());
                let transitions = transitions.saturating_add(i32::from(changes));
                Some(LeaseSpec { lease_transitions: Some(transitions), ..base })
            }
            Decision::Renew { .. } => Some(LeaseSpec {
                acquire_time: seen
                    .and_then(|spec| spec.acquire_time.clone())
                    .or(base.acquire_time.clone()),
                ..base
            }),
            Decision::Unknown | Decision::Follow { .. } | Decision::StepDown => None,
        }
    }

    /// The record that releases this candidate's claim, with the `resourceVersion` to
    /// precondition the write on; `None` when the Lease, as last seen, does not name it.
    pub fn release_record(&self, at: jiff::Timestamp) -> Option<(LeaseSpec, String)> {
        let Seen::Record { spec, resource_version, .. } = &self.seen else { return None };
        (holder_of(spec) == Some(self.identity.as_str())).then(|| {
            let released = LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(MicroTime(at)),
                renew_time: Some(MicroTime(at)),
                lease_transitions: spec.lease_transitions,
                ..LeaseSpec::default()
            };
            (released, resource_version.clone())
        })
    }

    /// When this candidate's lead ends unless it renews, if it leads.
    fn lead_deadline(&self) -> Option<Instant> {
        self.renewed.map(|renewed| renewed + self.renew_deadline)
    }

    /// The holder the Lease names, as last seen.
    fn holder(&self) -> Option<&str> {
        match &self.seen {
            Seen::Record { spec, .. } => holder_of(spec),
            Seen::Nothing | Seen::Absent => None,
        }
    }

    /// How long a claim lasts: its own `leaseDurationSeconds`, or this candidate's lease
    /// duration if it has none that is positive.
    fn duration_of(&self, spec: &LeaseSpec) -> Duration {
        spec.lease_duration_seconds
            .and_then(|secs| u64::try_from(secs).ok())
            .filter(|secs| *secs > 0)
            .map_or(self.lease_duration, Duration::from_secs)
    }
}

/// The holder a record names (an empty name is nobody).
fn holder_of(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|holder| !holder.is_empty())
}

/// A duration in whole seconds, rounded up, as `leaseDurationSeconds` holds it.
fn whole_secs(duration: Duration) -> i32 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(secs).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests;
