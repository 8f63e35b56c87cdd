//! The version skew rules ([`crate::plan::rules::skew`]) over a whole spec, its targets resolved as
//! NewPlan resolves them: what the updater checks before it writes a Plan.

use std::collections::{BTreeMap, BTreeSet};

use autopilot_api::keys;
use autopilot_api::v1beta2::PlanSpec;

use crate::plan::model::command::{Command, Group};
use crate::plan::model::inputs::{
    CheckPods, Inputs, NO_GATE_ANSWERS, Observed, PlanView, Policy, TargetObject,
};
use crate::plan::rules::skew::{Fleet, Violation};

/// What the skew rules make of a whole spec ([`judge`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecSkew {
    /// One sentence per command that breaks a rule on the plan's versions or the
    /// controllers' reports (`commands[i].k0supdate.version: …`), as NewPlan would refuse
    /// it; empty when none does.
    pub problems: Vec<String>,
    /// One sentence per worker whose own reported version alone breaks a rule, by name:
    /// NewPlan fails that worker's targets (a worker that is no target is left behind with
    /// a Warning Event), and the plan runs.
    pub nodes: Vec<String>,
}

/// The policy discovery runs under here: discovery reads neither the flags nor the time.
fn discovery_policy() -> Policy {
    Policy {
        exclude_controllers: false,
        exclude_workers: false,
        readiness_grace: std::time::Duration::ZERO,
        readiness_recheck: std::time::Duration::ZERO,
        node_progress_timeout: std::time::Duration::ZERO,
        drain_timeout: std::time::Duration::ZERO,
        allow_unverified_payloads: false,
        prometheus_url: None,
    }
}

/// The rules `spec` would break on a cluster of `control_nodes` and `nodes`, as NewPlan
/// judges them, except that no API server is asked its version: a controller counts by the
/// k0s version it publishes (NewPlan, which probes them, has the last word). The targets are resolved as NewPlan resolves them; a command whose targets
/// do not resolve is not judged (NewPlan refuses it for that). The updater uses this so that
/// it never writes a Plan the engine would refuse for its skew, and says which nodes the
/// Plan it writes fails for what they report about themselves.
pub fn judge(
    spec: &PlanSpec,
    control_nodes: &BTreeMap<String, TargetObject>,
    nodes: &BTreeMap<String, TargetObject>,
) -> SpecSkew {
    let readiness = BTreeMap::new();
    let observed = Observed {
        now: jiff::Timestamp::UNIX_EPOCH,
        term_started: None,
        control_nodes,
        nodes,
        readiness: &readiness,
        // No API server is probed here: controllers count by the k0s version they publish
        // (workers by their kubelets' versions, as NewPlan judges them).
        api_versions: &crate::plan::model::inputs::NO_API_VERSIONS,
        removed_apis: Some(&[]),
        check_pods: CheckPods::NONE,
        gate_answers: &NO_GATE_ANSWERS,
        // Discovery alone: no pass, so no access review.
        plan_access: &crate::plan::model::inputs::NO_PLAN_ACCESS,
    };
    let policy = discovery_policy();
    let plan = PlanView {
        name: keys::PLAN_NAME,
        uid: "",
        generation: 0,
        spec,
        status: None,
        steering: crate::plan::model::inputs::Steering::default(),
        accepted_warnings: None,
        rollback: None,
        allow_skew: None,
    };
    let inputs = Inputs::new(&observed, &policy, &plan);
    let mut fleet = Fleet::observe(&inputs);
    let mut problems = Vec::new();
    let mut own: BTreeMap<String, Vec<Violation>> = BTreeMap::new();
    let mut targeted = BTreeSet::new();
    for (index, command) in spec.commands.iter().enumerate() {
        let Some(Command::K0s(k0s)) = Command::resolve(command) else { continue };
        let resolved = |group: Group| {
            crate::plan::rules::targets::discover(&inputs, Command::K0s(k0s), group)
                .unwrap_or_default()
        };
        let workers = resolved(Group::Workers);
        targeted.extend(workers.iter().cloned());
        let walk = fleet.update(&k0s.version, &resolved(Group::Controllers), &workers);
        for (worker, violations) in walk.workers {
            own.entry(worker).or_default().extend(violations);
        }
        if !walk.plan.is_empty() {
            let listed: Vec<String> = walk.plan.iter().map(ToString::to_string).collect();
            problems.push(format!(
                "commands[{index}].k0supdate.version: {} breaks the version skew rules: {}",
                k0s.version,
                listed.join("; ")
            ));
        }
    }
    let nodes = own
        .into_iter()
        .map(|(worker, violations)| {
            let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
            let outcome = if targeted.contains(&worker) {
                "it fails in the run"
            } else {
                "it is no target and is left behind"
            };
            format!(
                "Node {worker}, by the version it reports about itself: {} ({outcome})",
                listed.join("; ")
            )
        })
        .collect();
    SpecSkew { problems, nodes }
}
