//! The controller's Prometheus metrics: what the plan engine, the central drain and the
//! leader election show an operator (`k0s_autopilot_*`, DESIGN §12).
//!
//! The shells record them after they acted or observed (a status written, a signal written,
//! an eviction refused); the pure plan machine never sees them. A [`Metrics`] that was not
//! registered anywhere records into the void, which is what tests and a controller without
//! `--metrics-address` use.

use autopilot_api::v1beta2::{PlanStateType, PlanStatus, TargetState, TargetStatus};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of [`Metrics::plan_state`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlanStateLabels {
    /// The Plan's name.
    pub plan: String,
    /// A plan state (`NewPlan` for the empty state).
    pub state: String,
}

/// Labels of [`Metrics::node_updates`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// [`results::COMPLETED`], [`results::FAILED`] or [`results::ROLLED_BACK`].
    pub result: &'static str,
}

/// Labels of [`Metrics::phase_duration`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The node's signal phase (its wire name, e.g. `Downloading`).
    pub phase: &'static str,
}

/// The values of the `result` label of [`Metrics::node_updates`]; each ended node update
/// counts under exactly one.
pub mod results {
    /// The node reported `Completed`.
    pub const COMPLETED: &str = "completed";
    /// The node failed (download, verification, self-test, drain, progress deadline) and
    /// was not rolled back.
    pub const FAILED: &str = "failed";
    /// The node's new binary failed its trial boot and the previous one was put back.
    pub const ROLLED_BACK: &str = "rolled_back";
}

/// The prefix of a node's reason when its trial boot put the previous binary back.
const ROLLED_BACK_PREFIX: &str = "rolled back";

/// Builds the histogram of [`Metrics::phase_duration`]: 1 s to about 4.5 h in doubling
/// buckets, because a phase lasts from a second (a leader's uncordon) to hours (a large
/// download over a slow link).
fn phase_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

/// The controller's metrics. Cheap to clone (every metric is shared).
#[derive(Clone, Debug)]
pub struct Metrics {
    /// `plan_state{plan,state}`: 1 for the state a plan is in, 0 for every other state.
    pub plan_state: Family<PlanStateLabels, Gauge>,
    /// `node_updates_total{result}`: node updates that ended, by result.
    pub node_updates: Family<ResultLabels, Counter>,
    /// `node_phase_duration_seconds{phase}`: how long nodes spent in each signal phase, as
    /// the leader saw their phase change.
    pub phase_duration: Family<PhaseLabels, Histogram, fn() -> Histogram>,
    /// `nodes_in_flight`: targets signalled and not done yet (`SignalSent`).
    pub nodes_in_flight: Gauge,
    /// `is_leader`: 1 while this controller leads, else 0.
    pub is_leader: Gauge,
    /// `drain_blocked`: nodes whose drain is refused right now (a PodDisruptionBudget).
    pub drain_blocked: Gauge,
    /// `signals_written_total`: update signals this controller wrote to nodes.
    pub signals_written: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            plan_state: Family::default(),
            node_updates: Family::default(),
            phase_duration: Family::new_with_constructor(phase_histogram),
            nodes_in_flight: Gauge::default(),
            is_leader: Gauge::default(),
            drain_blocked: Gauge::default(),
            signals_written: Counter::default(),
        }
    }
}

impl Metrics {
    /// New metrics, registered in `registry` (which carries the `k0s_autopilot` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let Self {
            plan_state,
            node_updates,
            phase_duration,
            nodes_in_flight,
            is_leader,
            drain_blocked,
            signals_written,
        } = &metrics;
        registry.register(
            "plan_state",
            "Whether a plan is in a state (1) or not (0), by plan and state",
            plan_state.clone(),
        );
        registry.register(
            "node_updates",
            "Node updates that ended, by result (completed, failed, rolled_back)",
            node_updates.clone(),
        );
        registry.register_with_unit(
            "node_phase_duration",
            "Time nodes spent in a signal phase, by phase",
            prometheus_client::registry::Unit::Seconds,
            phase_duration.clone(),
        );
        registry.register(
            "nodes_in_flight",
            "Nodes signalled and not done yet (SignalSent) in the running plan",
            nodes_in_flight.clone(),
        );
        registry.register("is_leader", "1 while this controller leads, else 0", is_leader.clone());
        registry.register(
            "drain_blocked",
            "Nodes whose drain an eviction refusal (a PodDisruptionBudget) blocks right now",
            drain_blocked.clone(),
        );
        registry.register(
            "signals_written",
            "Update signals this controller wrote to nodes",
            signals_written.clone(),
        );
        metrics
    }

    /// Show `status` as the plan's current state and nodes in flight. Every pass calls
    /// this (a new leader shows the plan at its first pass, before it writes anything).
    pub fn observe_plan(&self, plan: &str, status: &PlanStatus) {
        for state in PlanStateType::ALL {
            let labels = PlanStateLabels { plan: plan.to_string(), state: state.to_string() };
            self.plan_state.get_or_create(&labels).set(i64::from(state == status.state));
        }
        let in_flight = status.targets().filter(|t| t.state == TargetState::SignalSent).count();
        self.nodes_in_flight.set(i64::try_from(in_flight).unwrap_or(i64::MAX));
    }

    /// Record a plan status this controller has just written over `before`: the plan's
    /// state, the nodes in flight, each node update that ended, and each phase a node left.
    ///
    /// Only a status change this process wrote is recorded, so a new leader does not count
    /// again what its predecessor counted (it finds those changes already in the status).
    pub fn record_status(&self, plan: &str, before: &PlanStatus, after: &PlanStatus) {
        self.observe_plan(plan, after);
        for command in &after.commands {
            let old_command = before.commands.iter().find(|old| old.id == command.id);
            for (old, target) in paired_targets(old_command, command) {
                self.record_target(old, target);
            }
        }
    }

    /// Record one target's change from `old` (absent: just resolved) to `new`.
    fn record_target(&self, old: Option<&TargetStatus>, new: &TargetStatus) {
        if old.map(|o| o.state) != Some(new.state)
            && let Some(result) = update_result(new)
        {
            self.node_updates.get_or_create(&ResultLabels { result }).inc();
        }
        // A phase the node left: it spent from the old entry's timestamp until now in it. A
        // terminal phase is not left but replaced by a new run, which says nothing about it.
        if let Some(old) = old
            && let Some(phase) = old.phase
            && !phase.is_terminal()
            && old.phase != new.phase
        {
            let spent = new.last_updated_timestamp.0.duration_since(old.last_updated_timestamp.0);
            let seconds = spent.as_secs_f64().max(0.0);
            self.phase_duration
                .get_or_create(&PhaseLabels { phase: phase.as_str() })
                .observe(seconds);
        }
    }

    /// Forget the states of `plan` (it was deleted).
    pub fn forget_plan(&self, plan: &str) {
        for state in PlanStateType::ALL {
            self.plan_state
                .remove(&PlanStateLabels { plan: plan.to_string(), state: state.to_string() });
        }
        self.nodes_in_flight.set(0);
    }

    /// Forget what was shown about plans: this controller stopped leading and no longer
    /// knows (the new leader shows them).
    pub fn forget_plans(&self) {
        self.plan_state.clear();
        self.nodes_in_flight.set(0);
    }
}

/// Every target of the command status `new` with its entry in `old` (the same command's
/// earlier status), if it has one.
///
/// A run's lists keep their names and order from pass to pass, so they are paired side by
/// side; otherwise (a new run, lists just resolved) by name. Either way in time linear in
/// the fleet: every pass of a big run pairs every target.
pub(crate) fn paired_targets<'a>(
    old: Option<&'a autopilot_api::v1beta2::PlanCommandStatus>,
    new: &'a autopilot_api::v1beta2::PlanCommandStatus,
) -> Vec<(Option<&'a TargetStatus>, &'a TargetStatus)> {
    let old: Vec<&TargetStatus> = old.map(|old| targets_of(old).collect()).unwrap_or_default();
    let new: Vec<&TargetStatus> = targets_of(new).collect();
    let aligned = old.len() == new.len() && old.iter().zip(&new).all(|(o, n)| o.name == n.name);
    if aligned {
        return old.into_iter().map(Some).zip(new).collect();
    }
    let by_name: std::collections::HashMap<&str, &TargetStatus> =
        old.into_iter().map(|t| (t.name.as_str(), t)).collect();
    new.into_iter().map(|t| (by_name.get(t.name.as_str()).copied(), t)).collect()
}

/// Every target of a command status, controllers before workers.
fn targets_of(
    command: &autopilot_api::v1beta2::PlanCommandStatus,
) -> impl Iterator<Item = &TargetStatus> {
    let k0s = command.k0supdate.iter().flat_map(|k| k.controllers.iter().chain(&k.workers));
    let airgap = command.airgapupdate.iter().flat_map(|a| a.workers.iter());
    k0s.chain(airgap)
}

/// How a target that ended counts in [`Metrics::node_updates`]; `None` for a target that
/// was never updated (its platform or object was missing).
fn update_result(target: &TargetStatus) -> Option<&'static str> {
    match target.state {
        TargetState::SignalCompleted => Some(results::COMPLETED),
        TargetState::SignalApplyFailed
            if target.reason.as_deref().is_some_and(|r| r.starts_with(ROLLED_BACK_PREFIX)) =>
        {
            Some(results::ROLLED_BACK)
        }
        TargetState::SignalApplyFailed => Some(results::FAILED),
        TargetState::SignalPending
        | TargetState::SignalSent
        | TargetState::MissingPlatform
        | TargetState::MissingSignalNode => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopilot_api::signal::SignalPhase;
    use autopilot_api::v1beta2::{PlanCommandK0sUpdateStatus, PlanCommandStatus};

    fn status(state: PlanStateType, workers: Vec<TargetStatus>) -> PlanStatus {
        PlanStatus {
            state,
            commands: vec![PlanCommandStatus {
                id: 0,
                state,
                k0supdate: Some(PlanCommandK0sUpdateStatus { controllers: vec![], workers }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn target(
        name: &str,
        state: TargetState,
        phase: Option<SignalPhase>,
        seconds: i64,
    ) -> TargetStatus {
        TargetStatus { phase, ..TargetStatus::new(name, state, at(seconds)) }
    }

    #[test]
    fn targets_are_paired_side_by_side_or_by_name() {
        let names = |pairs: Vec<(Option<&TargetStatus>, &TargetStatus)>| {
            pairs
                .into_iter()
                .map(|(old, new)| (old.map(|t| t.name.clone()), new.name.clone(), new.state))
                .collect::<Vec<_>>()
        };
        let pending = TargetState::SignalPending;
        let sent = TargetState::SignalSent;
        let before = status(
            PlanStateType::SchedulableWait,
            vec![target("a", pending, None, 0), target("b", pending, None, 0)],
        );
        let after = status(
            PlanStateType::SchedulableWait,
            vec![target("a", sent, None, 1), target("b", pending, None, 0)],
        );
        assert_eq!(
            names(paired_targets(Some(&before.commands[0]), &after.commands[0])),
            [(Some("a".into()), "a".into(), sent), (Some("b".into()), "b".into(), pending)]
        );
        // Another order, a new name: by name.
        let other = status(
            PlanStateType::SchedulableWait,
            vec![
                target("c", sent, None, 1),
                target("b", sent, None, 1),
                target("a", sent, None, 1),
            ],
        );
        assert_eq!(
            names(paired_targets(Some(&before.commands[0]), &other.commands[0])),
            [
                (None, "c".into(), sent),
                (Some("b".into()), "b".into(), sent),
                (Some("a".into()), "a".into(), sent)
            ]
        );
        assert_eq!(names(paired_targets(None, &other.commands[0]))[0], (None, "c".into(), sent));
    }

    fn encoded(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn a_completed_node_counts_once_and_its_phases_are_timed() {
        let mut registry = Registry::with_prefix("k0s_autopilot");
        let metrics = Metrics::register(&mut registry);
        let sent = status(
            PlanStateType::SchedulableWait,
            vec![target("w1", TargetState::SignalSent, Some(SignalPhase::Downloading), 0)],
        );
        let cordoning = status(
            PlanStateType::SchedulableWait,
            vec![target("w1", TargetState::SignalSent, Some(SignalPhase::Cordoning), 3)],
        );
        let done = status(
            PlanStateType::Completed,
            vec![target("w1", TargetState::SignalCompleted, Some(SignalPhase::Completed), 10)],
        );
        metrics.record_status("autopilot", &PlanStatus::default(), &sent);
        assert_eq!(metrics.nodes_in_flight.get(), 1);
        metrics.record_status("autopilot", &sent, &cordoning);
        metrics.record_status("autopilot", &cordoning, &done);
        // The same status again (a pass that changed nothing) counts nothing.
        metrics.record_status("autopilot", &done, &done);

        let text = encoded(&registry);
        assert!(
            text.contains("k0s_autopilot_node_updates_total{result=\"completed\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("k0s_autopilot_plan_state{plan=\"autopilot\",state=\"Completed\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "k0s_autopilot_plan_state{plan=\"autopilot\",state=\"SchedulableWait\"} 0\n"
            ),
            "{text}"
        );
        assert!(text.contains("k0s_autopilot_nodes_in_flight 0\n"), "{text}");
        assert!(
            text.contains(
                "k0s_autopilot_node_phase_duration_seconds_sum{phase=\"Downloading\"} 3.0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "k0s_autopilot_node_phase_duration_seconds_sum{phase=\"Cordoning\"} 7.0\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_new_run_over_a_completed_node_times_no_phase() {
        let metrics = Metrics::default();
        let done = status(
            PlanStateType::Completed,
            vec![target("w1", TargetState::SignalCompleted, Some(SignalPhase::Completed), 10)],
        );
        let rerun = status(
            PlanStateType::SchedulableWait,
            vec![target("w1", TargetState::SignalPending, None, 100)],
        );
        metrics.record_status("autopilot", &done, &rerun);
        let completed = PhaseLabels { phase: SignalPhase::Completed.as_str() };
        assert!(metrics.phase_duration.get(&completed).is_none());
    }

    #[test]
    fn a_rolled_back_node_counts_as_rolled_back_not_failed() {
        let metrics = Metrics::default();
        let sent = status(
            PlanStateType::SchedulableWait,
            vec![
                target("w1", TargetState::SignalSent, Some(SignalPhase::Restarting), 0),
                target("w2", TargetState::SignalSent, Some(SignalPhase::Downloading), 0),
            ],
        );
        let mut rolled_back =
            target("w1", TargetState::SignalApplyFailed, Some(SignalPhase::Failed), 5);
        rolled_back.reason = Some("rolled back to v1: the new binary exited".into());
        let mut failed =
            target("w2", TargetState::SignalApplyFailed, Some(SignalPhase::FailedDownload), 5);
        failed.reason = Some("GET http://x: status 404".into());
        let ended = status(PlanStateType::ApplyFailed, vec![rolled_back, failed]);
        metrics.record_status("autopilot", &sent, &ended);
        let count = |result| metrics.node_updates.get_or_create(&ResultLabels { result }).get();
        assert_eq!(count(results::ROLLED_BACK), 1);
        assert_eq!(count(results::FAILED), 1);
        assert_eq!(count(results::COMPLETED), 0);
    }
}
