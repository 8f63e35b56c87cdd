//! Health gates, applied (`crate::plan::rules::gates` judges): the command's open gate runs
//! in `gating`, opened as nodes complete (or as a batch is signalled), each judged every
//! pass and closed, kept waiting or failed by its verdict; the nodes a check gate asks, and
//! the lookups the shell has not answered, go out as effects and needs.

use autopilot_api::v1beta2::{GateAfter, GateRun};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::plan::driver::progress::CommandPass;
use crate::plan::model::command::Group;
use crate::plan::model::decision::{Effect, SignalTarget};
use crate::plan::rules::gates::{
    Asks, GATE_RECHECK, GateFailure, RunVerdict, after_each_node, check_request, failure_of,
    gates_open, gating, in_waves, judge_run,
};

impl CommandPass<'_, '_> {
    /// Whether workers go in waves (the command has a gate that runs after each batch).
    pub(in crate::plan) fn in_waves(&self) -> bool {
        in_waves(&self.view())
    }

    /// How many nodes of `group` wait for their gates (they keep their slots).
    pub(in crate::plan) fn gating(&self, group: Group) -> usize {
        gating(&self.view(), group)
    }

    /// Whether any gate run is still open (not passed; a failed one counts too).
    pub(in crate::plan) fn gates_open(&self) -> bool {
        gates_open(&self.view())
    }

    /// Open a batch run for the nodes just signalled together (gates `after: batch`).
    pub(in crate::plan) fn open_batch(&mut self, nodes: &[String]) {
        if nodes.is_empty() || !self.in_waves() {
            return;
        }
        self.status.gating.push(GateRun {
            nodes: nodes.to_vec(),
            after: GateAfter::Batch,
            since: None,
            passed: Vec::new(),
            waiting: None,
            failed: None,
        });
    }

    /// Open a run for each node that completed in this pass (gates `after: node`), then
    /// look at every open run: a run whose gates all passed closes; one whose gate ran out
    /// of time fails. Returns the first failure.
    pub(in crate::plan) fn run_gates(&mut self, completed_now: &[String]) -> Option<GateFailure> {
        if self.command.gates().is_empty() {
            return None;
        }
        let stamp = Time(self.inputs.stamp);
        if after_each_node(&self.view()) {
            for name in completed_now {
                self.status.gating.push(GateRun {
                    nodes: vec![name.clone()],
                    after: GateAfter::Node,
                    since: Some(stamp.clone()),
                    passed: Vec::new(),
                    waiting: None,
                    failed: None,
                });
            }
        }
        let mut runs = std::mem::take(&mut self.status.gating);
        let mut failure = None;
        let mut asks = Asks::default();
        runs.retain_mut(|run| {
            if run.failed.is_some() {
                failure.get_or_insert_with(|| failure_of(&self.view(), run));
                return true;
            }
            self.write_run(run, &mut failure, &mut asks)
        });
        self.status.gating = runs;
        self.send_asks(asks);
        failure
    }

    /// Judge an open run and write its verdict; `false` when it closes.
    fn write_run(
        &mut self,
        run: &mut GateRun,
        failure: &mut Option<GateFailure>,
        asks: &mut Asks,
    ) -> bool {
        let since = run.since.as_ref().map_or(self.inputs.stamp, |since| since.0);
        match judge_run(&self.view(), run, since, asks) {
            RunVerdict::Working => true,
            RunVerdict::NoneLeft => false,
            RunVerdict::Passed => {
                self.status.gates_passed = self.status.gates_passed.saturating_add(1);
                false
            }
            RunVerdict::Failed { passed, gate, waiting } => {
                run.since.get_or_insert(Time(since));
                run.passed.extend(passed);
                run.failed = Some(gate);
                run.waiting = Some(waiting);
                failure.get_or_insert_with(|| failure_of(&self.view(), run));
                true
            }
            RunVerdict::Waiting { passed, waiting } => {
                run.since.get_or_insert(Time(since));
                run.passed.extend(passed);
                run.waiting = Some(waiting);
                self.decision.requeue_after(GATE_RECHECK);
                true
            }
        }
    }

    /// Name the lookups the shell has not answered, and ask each node a check gate wants
    /// (once per pass).
    fn send_asks(&mut self, asks: Asks) {
        for query in asks.lookups {
            self.gaps.lacks_gate(query);
            self.decision.requeue_after(GATE_RECHECK);
        }
        for (target, attempt) in asks.checks {
            self.ask(target, attempt);
        }
    }

    /// Ask `target` to run the checks of every `check` gate of the command (attempt
    /// `attempt`), unless this pass asked already.
    fn ask(&mut self, target: SignalTarget, attempt: u32) {
        let request = check_request(&self.view(), attempt);
        let asked_already =
            self.decision.signals.iter().any(
                |effect| matches!(effect, Effect::GateCheck { target: t, .. } if *t == target),
            );
        if !asked_already {
            self.decision.signals.push(Effect::GateCheck { target, request });
        }
        self.decision.requeue_after(GATE_RECHECK);
    }
}
