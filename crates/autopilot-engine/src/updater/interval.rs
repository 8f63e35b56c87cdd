//! The minimum interval between automatic updates (`upgradeStrategy.minInterval`), kept
//! separately for patch and minor updates. Pure: the last update times come in, whether the
//! offered version may be planned now comes out.
//!
//! - The kind of an update ([`UpdateKind::between`]): *minor* when the offered version's
//!   major or minor number differs from the running version's, else *patch* (a `+k0s.N`
//!   re-release of the same Kubernetes version is a patch).
//! - When the last update of a kind was planned ([`last_update`]): the UpdateConfig's
//!   `status.lastPatchUpdate` / `lastMinorUpdate`. When the status has none (it was lost,
//!   or the UpdateConfig was recreated), the `spec.timestamp` of the `autopilot` Plan counts
//!   as the last update of the kind now offered, if the updater wrote that Plan (its
//!   `spec.id` and `spec.timestamp` are the same Unix seconds, as the updater writes them):
//!   the cautious reading, since the kind of that Plan's update is no longer known.
//!   Otherwise no minimum applies.

use std::time::Duration;

use autopilot_api::v1beta2::{MinInterval, Plan, UpdateConfigStatus};
use autopilot_api::version::K0sVersion;
use jiff::{SignedDuration, Timestamp};

/// Which kind of update an offered version is, compared with the running one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateKind {
    /// Same major and minor number (a newer patch, or a `+k0s.N` re-release).
    Patch,
    /// Another major or minor number.
    Minor,
}

impl UpdateKind {
    /// The kind of moving from `running` to `offered`.
    pub fn between(running: &K0sVersion, offered: &K0sVersion) -> Self {
        let (r, o) = (running.semver(), offered.semver());
        if (r.major, r.minor) == (o.major, o.minor) { Self::Patch } else { Self::Minor }
    }

    /// `patch` or `minor`, as the spec field is named.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Patch => "patch",
            Self::Minor => "minor",
        }
    }
}

/// `upgradeStrategy.minInterval`, parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinIntervals {
    /// Between two automatic patch updates; `None`: no minimum.
    pub patch: Option<Duration>,
    /// Between two automatic minor updates; `None`: no minimum.
    pub minor: Option<Duration>,
}

impl MinIntervals {
    /// Parse the spec's durations; the error names the field.
    pub fn from_spec(spec: Option<&MinInterval>) -> Result<Self, String> {
        let Some(MinInterval { patch, minor }) = spec else { return Ok(Self::default()) };
        let parse = |value: &Option<String>, field: &str| {
            value
                .as_deref()
                .map(autopilot_api::duration::parse)
                .transpose()
                .map_err(|err| format!("upgradeStrategy.minInterval.{field}: {err}"))
        };
        Ok(Self { patch: parse(patch, "patch")?, minor: parse(minor, "minor")? })
    }

    /// The interval for updates of `kind`.
    pub fn of(self, kind: UpdateKind) -> Option<Duration> {
        match kind {
            UpdateKind::Patch => self.patch,
            UpdateKind::Minor => self.minor,
        }
    }
}

/// When the last automatic update of `kind` was planned: from `status`, else from the
/// `autopilot` Plan the updater wrote (see the module docs); `None` if neither says.
pub fn last_update(
    kind: UpdateKind,
    status: Option<&UpdateConfigStatus>,
    plan: Option<&Plan>,
) -> Option<Timestamp> {
    let recorded = status.and_then(|status| match kind {
        UpdateKind::Patch => status.last_patch_update.as_ref(),
        UpdateKind::Minor => status.last_minor_update.as_ref(),
    });
    if let Some(time) = recorded {
        return Some(time.0);
    }
    // The status says nothing of either kind (lost): the updater's own Plan stands in.
    let status_has_any = status.is_some_and(|status| {
        status.last_patch_update.is_some() || status.last_minor_update.is_some()
    });
    if status_has_any {
        return None;
    }
    let plan = plan?;
    if plan.spec.id != plan.spec.timestamp {
        return None;
    }
    let seconds: i64 = plan.spec.timestamp.parse().ok()?;
    Timestamp::from_second(seconds).ok()
}

/// When an update of `kind` may be planned again: `last` plus the interval, if that is
/// still after `now`; `None` when it may be planned now.
pub fn held_until(
    intervals: MinIntervals,
    kind: UpdateKind,
    last: Option<Timestamp>,
    now: Timestamp,
) -> Option<Timestamp> {
    let interval = SignedDuration::try_from(intervals.of(kind)?).ok()?;
    let allowed = last?.checked_add(interval).ok()?;
    (allowed > now).then_some(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopilot_api::v1beta2::PlanSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn version(v: &str) -> K0sVersion {
        K0sVersion::parse(v).expect("a valid version")
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).expect("a valid time")
    }

    const DAY: i64 = 86_400;

    fn intervals(patch: &str, minor: &str) -> MinIntervals {
        MinIntervals::from_spec(Some(&MinInterval {
            patch: Some(patch.to_owned()),
            minor: Some(minor.to_owned()),
        }))
        .expect("valid durations")
    }

    fn updater_plan(seconds: i64) -> Plan {
        Plan::new(
            "autopilot",
            PlanSpec {
                id: seconds.to_string(),
                timestamp: seconds.to_string(),
                ..PlanSpec::default()
            },
        )
    }

    #[test]
    fn a_new_minor_or_major_number_is_a_minor_update_anything_else_a_patch() {
        let running = version("v1.35.1+k0s.0");
        assert_eq!(UpdateKind::between(&running, &version("v1.35.2+k0s.0")), UpdateKind::Patch);
        assert_eq!(UpdateKind::between(&running, &version("v1.35.1+k0s.1")), UpdateKind::Patch);
        assert_eq!(UpdateKind::between(&running, &version("v1.36.0+k0s.0")), UpdateKind::Minor);
        assert_eq!(UpdateKind::between(&running, &version("v2.35.1+k0s.0")), UpdateKind::Minor);
    }

    #[test]
    fn no_min_interval_holds_nothing() {
        let none = MinIntervals::from_spec(None).expect("no spec is valid");
        assert_eq!(none, MinIntervals::default());
        assert_eq!(held_until(none, UpdateKind::Patch, Some(at(0)), at(1)), None);
        assert_eq!(held_until(none, UpdateKind::Minor, Some(at(0)), at(1)), None);
    }

    #[test]
    fn a_patch_waits_for_the_patch_interval_only() {
        let intervals = intervals("24h", "720h");
        let last = Some(at(10 * DAY));
        let soon = at(10 * DAY + 3600);
        assert_eq!(held_until(intervals, UpdateKind::Patch, last, soon), Some(at(11 * DAY)));
        assert_eq!(held_until(intervals, UpdateKind::Patch, last, at(11 * DAY)), None);
        assert_eq!(held_until(intervals, UpdateKind::Patch, last, at(12 * DAY)), None);
    }

    #[test]
    fn a_minor_waits_for_the_minor_interval_only() {
        let intervals = intervals("24h", "720h");
        let last = Some(at(10 * DAY));
        assert_eq!(
            held_until(intervals, UpdateKind::Minor, last, at(12 * DAY)),
            Some(at(40 * DAY))
        );
        assert_eq!(held_until(intervals, UpdateKind::Minor, last, at(40 * DAY)), None);
    }

    #[test]
    fn no_last_update_holds_nothing() {
        assert_eq!(held_until(intervals("24h", "720h"), UpdateKind::Patch, None, at(0)), None);
    }

    #[test]
    fn a_malformed_interval_names_its_field() {
        let err = MinIntervals::from_spec(Some(&MinInterval {
            patch: None,
            minor: Some("a month".to_owned()),
        }))
        .expect_err("not a duration");
        assert!(err.contains("upgradeStrategy.minInterval.minor"), "{err}");
        assert!(err.contains("not a duration"), "{err}");
    }

    #[test]
    fn the_last_update_comes_from_the_status_of_its_kind() {
        let status = UpdateConfigStatus {
            last_patch_update: Some(Time(at(5 * DAY))),
            ..UpdateConfigStatus::default()
        };
        let plan = updater_plan(7 * DAY);
        assert_eq!(last_update(UpdateKind::Patch, Some(&status), Some(&plan)), Some(at(5 * DAY)));
        // The status knows the updates: it has no minor one, and the Plan does not stand in.
        assert_eq!(last_update(UpdateKind::Minor, Some(&status), Some(&plan)), None);
    }

    #[test]
    fn a_lost_status_falls_back_to_the_updaters_plan_timestamp() {
        let plan = updater_plan(7 * DAY);
        assert_eq!(last_update(UpdateKind::Patch, None, Some(&plan)), Some(at(7 * DAY)));
        let empty = UpdateConfigStatus::default();
        assert_eq!(last_update(UpdateKind::Minor, Some(&empty), Some(&plan)), Some(at(7 * DAY)));
    }

    #[test]
    fn a_plan_the_updater_did_not_write_gives_no_last_update() {
        let mut plan = updater_plan(7 * DAY);
        plan.spec.id = "id-machine-1-v1.35.2-604800".to_owned();
        assert_eq!(last_update(UpdateKind::Patch, None, Some(&plan)), None);
        let mut plan = updater_plan(7 * DAY);
        plan.spec.id = "nightly".to_owned();
        plan.spec.timestamp = "nightly".to_owned();
        assert_eq!(last_update(UpdateKind::Patch, None, Some(&plan)), None);
        assert_eq!(last_update(UpdateKind::Patch, None, None), None);
    }
}
