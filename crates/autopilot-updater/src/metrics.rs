//! The updater's Prometheus metrics (`k0s_autopilot_updater_*`, DESIGN §12), by
//! UpdateConfig: when it checks next, whether its window is open, and what its last check
//! ended with. Recorded by the shell ([`crate::run`]) after each check, on the leader only.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of the per-UpdateConfig gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigLabels {
    /// The UpdateConfig's name.
    pub update_config: String,
}

/// Labels of [`Metrics::last_check_result`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The UpdateConfig's name.
    pub update_config: String,
    /// The check's reason, as in its Event (`UpToDate`, `PlanCreated`, `UpdateServerError`,
    /// ...; see `decide::reasons`).
    pub result: &'static str,
}

/// The updater's metrics. Cheap to clone (every metric is shared).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// `updater_next_check_timestamp_seconds{update_config}`: when the next check runs (Unix
    /// time); 0 when none is scheduled.
    pub next_check: Family<ConfigLabels, Gauge>,
    /// `updater_last_check_timestamp_seconds{update_config}`: when the last check ended.
    pub last_check: Family<ConfigLabels, Gauge>,
    /// `updater_window_open{update_config}`: 1 while the update window is open (always for
    /// the `cron` strategy, whose server decides), else 0.
    pub window_open: Family<ConfigLabels, Gauge>,
    /// `updater_last_check_result{update_config,result}`: 1 for what the last check ended
    /// with; other results of the same UpdateConfig are removed.
    pub last_check_result: Family<ResultLabels, Gauge>,
    /// `updater_running_version_past_eol{update_config}`: 1 while the running version is
    /// past the end of life the update server gave (`eolDate`), 0 while it is not; absent
    /// when the server gave none or it cannot be judged (the UpdateConfig's
    /// `status.endOfLife.message` says why).
    pub past_eol: Family<ConfigLabels, Gauge>,
    /// `updater_end_of_life_timestamp_seconds{update_config}`: the server's `eolDate` (Unix
    /// time); absent when it gave none or a malformed one.
    pub end_of_life: Family<ConfigLabels, Gauge>,
}

impl Metrics {
    /// New metrics, registered in `registry` (which carries the `k0s_autopilot` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let Self { next_check, last_check, window_open, last_check_result, past_eol, end_of_life } =
            &metrics;
        registry.register_with_unit(
            "updater_next_check_timestamp",
            "When the updater checks the update server next (Unix time), by UpdateConfig",
            prometheus_client::registry::Unit::Seconds,
            next_check.clone(),
        );
        registry.register_with_unit(
            "updater_last_check_timestamp",
            "When the updater's last check ended (Unix time), by UpdateConfig",
            prometheus_client::registry::Unit::Seconds,
            last_check.clone(),
        );
        registry.register(
            "updater_window_open",
            "1 while the UpdateConfig's update window is open, else 0",
            window_open.clone(),
        );
        registry.register(
            "updater_last_check_result",
            "1 for the result of the UpdateConfig's last check",
            last_check_result.clone(),
        );
        registry.register(
            "updater_running_version_past_eol",
            "1 while the running version is past the end of life the update server gave, else 0",
            past_eol.clone(),
        );
        registry.register_with_unit(
            "updater_end_of_life_timestamp",
            "The end of life the update server gave (eolDate, Unix time), by UpdateConfig",
            prometheus_client::registry::Unit::Seconds,
            end_of_life.clone(),
        );
        metrics
    }

    /// Record the end of life the last answer gave for `update_config` (`None`: none).
    pub fn record_end_of_life(
        &self,
        update_config: &str,
        eol: Option<&autopilot_api::v1beta2::EndOfLifeStatus>,
    ) {
        let config = ConfigLabels { update_config: update_config.to_string() };
        match eol.and_then(|eol| eol.past) {
            Some(past) => {
                self.past_eol.get_or_create(&config).set(i64::from(past));
            }
            None => {
                self.past_eol.remove(&config);
            }
        }
        let at =
            eol.and_then(|eol| autopilot_engine::updater::status::parse_eol_date(&eol.date).ok());
        match at {
            Some(at) => {
                self.end_of_life.get_or_create(&config).set(at.as_second());
            }
            None => {
                self.end_of_life.remove(&config);
            }
        }
    }

    /// Record a check of `update_config` that ended at `now` with `result`.
    pub fn record_check(&self, update_config: &str, now: jiff::Timestamp, result: &'static str) {
        let config = ConfigLabels { update_config: update_config.to_string() };
        self.last_check.get_or_create(&config).set(now.as_second());
        for reason in autopilot_engine::updater::decide::reasons::ALL {
            let labels = ResultLabels { update_config: update_config.to_string(), result: reason };
            if reason == result {
                self.last_check_result.get_or_create(&labels).set(1);
            } else {
                self.last_check_result.remove(&labels);
            }
        }
    }

    /// Record when `update_config` checks next (`None`: never) and whether its window is
    /// open now.
    pub fn record_schedule(
        &self,
        update_config: &str,
        next: Option<jiff::Timestamp>,
        window_open: bool,
    ) {
        let config = ConfigLabels { update_config: update_config.to_string() };
        self.next_check.get_or_create(&config).set(next.map_or(0, |at| at.as_second()));
        self.window_open.get_or_create(&config).set(i64::from(window_open));
    }

    /// Forget everything about `update_config` (deleted, or no longer checked here).
    pub fn forget(&self, update_config: &str) {
        let config = ConfigLabels { update_config: update_config.to_string() };
        self.next_check.remove(&config);
        self.last_check.remove(&config);
        self.window_open.remove(&config);
        self.past_eol.remove(&config);
        self.end_of_life.remove(&config);
        for result in autopilot_engine::updater::decide::reasons::ALL {
            let labels = ResultLabels { update_config: update_config.to_string(), result };
            self.last_check_result.remove(&labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopilot_engine::updater::decide::reasons;

    #[test]
    fn only_the_last_result_is_shown() {
        let metrics = Metrics::default();
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        metrics.record_check("daily", now, reasons::SERVER_ERROR);
        metrics.record_check("daily", now, reasons::UP_TO_DATE);
        let labels = |result| ResultLabels { update_config: "daily".into(), result };
        assert_eq!(
            metrics.last_check_result.get(&labels(reasons::UP_TO_DATE)).map(|g| g.get()),
            Some(1)
        );
        assert!(metrics.last_check_result.get(&labels(reasons::SERVER_ERROR)).is_none());
        metrics.forget("daily");
        assert!(metrics.last_check_result.get(&labels(reasons::UP_TO_DATE)).is_none());
    }
}

#[cfg(test)]
mod eol_tests {
    use super::*;
    use autopilot_api::v1beta2::EndOfLifeStatus;

    fn eol(date: &str, past: Option<bool>) -> EndOfLifeStatus {
        EndOfLifeStatus { date: date.to_owned(), past, message: String::new() }
    }

    #[test]
    fn past_eol_is_one_future_zero_unknown_absent() {
        let metrics = Metrics::default();
        let config = ConfigLabels { update_config: "daily".into() };
        let gauge = |m: &Metrics| m.past_eol.get(&config).map(|g| g.get());
        metrics.record_end_of_life("daily", Some(&eol("2026-01-15", Some(true))));
        assert_eq!(gauge(&metrics), Some(1));
        assert_eq!(
            metrics.end_of_life.get(&config).map(|g| g.get()),
            Some(jiff::Timestamp::from_second(1_768_435_200).unwrap().as_second())
        );
        metrics.record_end_of_life("daily", Some(&eol("2099-01-15", Some(false))));
        assert_eq!(gauge(&metrics), Some(0));
        metrics.record_end_of_life("daily", Some(&eol("next spring", None)));
        assert_eq!(gauge(&metrics), None);
        assert!(metrics.end_of_life.get(&config).is_none());
        metrics.record_end_of_life("daily", Some(&eol("2026-01-15", Some(true))));
        metrics.forget("daily");
        assert_eq!(gauge(&metrics), None);
    }
}
