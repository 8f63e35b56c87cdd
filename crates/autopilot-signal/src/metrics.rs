//! The node agent's Prometheus metrics (`k0s_autopilot_agent_*`, DESIGN §12): bytes
//! downloaded, failed downloads and verifications, and the phase of the signal the agent
//! acts on.
//!
//! The agent's shell records them after it performed an action or read its signal; the pure
//! phase machine never sees them. A [`Metrics`] that was not registered anywhere records
//! into the void (tests, and a node without `--metrics-address`).

use autopilot_api::signal::SignalPhase;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of [`Metrics::phase`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The kind of the object the signal is on (`Node` or `ControlNode`).
    pub kind: String,
    /// The signal phase (its wire name, e.g. `Downloading`).
    pub phase: &'static str,
}

/// Labels of [`Metrics::rollbacks`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RollbackLabels {
    /// Why: one of [`ROLLBACK_REASONS`].
    pub reason: &'static str,
}

/// The reasons of `rollbacks_total`: the post-update watch's (`crashed`, `unhealthy`,
/// `autopilot_engine::post_update::Reason`) and a failed trial boot (`trial`).
pub const ROLLBACK_REASONS: [&str; 3] = ["crashed", "unhealthy", "trial"];

/// The node agent's metrics. Cheap to clone (every metric is shared).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// `agent_download_bytes_total`: payload bytes received by update downloads, counted as
    /// they arrive (a download that fails half-way counts what it received).
    pub download_bytes: Counter,
    /// `agent_download_failures_total`: download attempts that failed for any reason but a
    /// digest mismatch (each retry counts).
    pub download_failures: Counter,
    /// `agent_verify_failures_total`: downloads whose sha256 did not match the plan's, or whose
    /// signature was missing or did not verify where the node requires one.
    pub verify_failures: Counter,
    /// `agent_phase{kind,phase}`: 1 for the phase of the signal the agent acts on, 0 for
    /// every other phase; all 0 while there is no signal.
    pub phase: Family<PhaseLabels, Gauge>,
    /// `rollbacks_total{reason}`: rollbacks to the previous binary this process reported
    /// (it runs that binary): after a failed trial boot, or by the post-update watch. Every
    /// reason of [`ROLLBACK_REASONS`] is there from the start, at 0.
    pub rollbacks: Family<RollbackLabels, Counter>,
}

impl Metrics {
    /// New metrics, registered in `registry` (which carries the `k0s_autopilot` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let Self { download_bytes, download_failures, verify_failures, phase, rollbacks } =
            &metrics;
        registry.register(
            "agent_download_bytes",
            "Payload bytes received by update downloads",
            download_bytes.clone(),
        );
        registry.register(
            "agent_download_failures",
            "Update download attempts that failed (other than a digest mismatch)",
            download_failures.clone(),
        );
        registry.register(
            "agent_verify_failures",
            "Update downloads whose sha256 did not match the plan's or whose signature did not verify",
            verify_failures.clone(),
        );
        registry.register(
            "agent_phase",
            "1 for the phase of the signal the agent acts on, by object kind and phase",
            phase.clone(),
        );
        for reason in ROLLBACK_REASONS {
            drop(rollbacks.get_or_create(&RollbackLabels { reason }));
        }
        registry.register(
            "rollbacks",
            "Rollbacks to the previous binary after a failed trial boot or by the post-update watch, by reason",
            rollbacks.clone(),
        );
        metrics
    }

    /// Counts a rollback for `reason` (one of [`ROLLBACK_REASONS`]; another counts as
    /// `crashed`, so the series stay the fixed set).
    pub fn rolled_back(&self, reason: &str) {
        let reason = ROLLBACK_REASONS.into_iter().find(|r| *r == reason).unwrap_or("crashed");
        self.rollbacks.get_or_create(&RollbackLabels { reason }).inc();
    }

    /// Show `phase` (`None`: no signal) as the current phase of the signal on a `kind`.
    pub fn set_phase(&self, kind: &str, phase: Option<SignalPhase>) {
        for each in SignalPhase::ALL {
            let labels = PhaseLabels { kind: kind.to_string(), phase: each.as_str() };
            self.phase.get_or_create(&labels).set(i64::from(Some(each) == phase));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_is_one_hot_and_cleared_without_a_signal() {
        let metrics = Metrics::default();
        let value = |phase: SignalPhase| {
            metrics
                .phase
                .get_or_create(&PhaseLabels { kind: "Node".into(), phase: phase.as_str() })
                .get()
        };
        metrics.set_phase("Node", Some(SignalPhase::Cordoning));
        assert_eq!(value(SignalPhase::Cordoning), 1);
        assert_eq!(value(SignalPhase::Downloading), 0);
        metrics.set_phase("Node", None);
        assert!(SignalPhase::ALL.iter().all(|p| value(*p) == 0));
    }

    #[test]
    fn every_rollback_reason_is_exposed_at_zero_from_the_start() {
        let mut registry = Registry::with_prefix("k0s_autopilot");
        let metrics = Metrics::register(&mut registry);
        let text = || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
            text
        };
        let before = text();
        for reason in ROLLBACK_REASONS {
            let line = format!("k0s_autopilot_rollbacks_total{{reason=\"{reason}\"}} 0");
            assert!(before.contains(&line), "{line} in {before}");
        }
        metrics.rolled_back("crashed");
        assert!(text().contains("k0s_autopilot_rollbacks_total{reason=\"crashed\"} 1"));
    }
}
