//! The version skew rules ([`crate::plan::rules::skew`]) over a whole spec, its targets resolved as
//! NewPlan resolves them: what the updater checks before it writes a Plan.

use std::collections::BTreeMap;

use autopilot_api::keys;
use autopilot_api::v1beta2::PlanSpec;

use crate::plan::model::command::{Command, Group};
use crate::plan::model::inputs::{
    CheckPods, Inputs, NO_GATE_ANSWERS, Observed, PlanView, Policy, TargetObject,
};
use crate::plan::rules::skew::Fleet;

/// The rules `spec` would break on a cluster of `control_nodes` and `nodes`, one sentence per
/// command that breaks any (`commands[i].k0supdate.version: …`), as NewPlan would refuse it;
/// empty when it keeps to them. The targets are resolved as NewPlan resolves them; a command
/// whose targets do not resolve is not judged (NewPlan refuses it for that). The updater uses
/// this so that it never writes a Plan the engine would refuse for its skew.
pub fn problems(
    spec: &PlanSpec,
    control_nodes: &BTreeMap<String, TargetObject>,
    nodes: &BTreeMap<String, TargetObject>,
) -> Vec<String> {
    let readiness = BTreeMap::new();
    let observed = Observed {
        now: jiff::Timestamp::UNIX_EPOCH,
        term_started: None,
        control_nodes,
        nodes,
        readiness: &readiness,
        removed_apis: Some(&[]),
        check_pods: CheckPods::NONE,
        gate_answers: &NO_GATE_ANSWERS,
    };
    // Discovery reads neither the flags nor the time.
    let policy = Policy {
        exclude_controllers: false,
        exclude_workers: false,
        readiness_grace: std::time::Duration::ZERO,
        readiness_recheck: std::time::Duration::ZERO,
        node_progress_timeout: std::time::Duration::ZERO,
        drain_timeout: std::time::Duration::ZERO,
        allow_unverified_payloads: false,
        prometheus_url: None,
    };
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
    for (index, command) in spec.commands.iter().enumerate() {
        let Some(Command::K0s(k0s)) = Command::resolve(command) else { continue };
        let resolved = |group: Group| {
            crate::plan::rules::targets::discover(&inputs, Command::K0s(k0s), group)
                .unwrap_or_default()
        };
        let violations =
            fleet.update(&k0s.version, &resolved(Group::Controllers), &resolved(Group::Workers));
        if !violations.is_empty() {
            let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
            problems.push(format!(
                "commands[{index}].k0supdate.version: {} breaks the version skew rules: {}",
                k0s.version,
                listed.join("; ")
            ));
        }
    }
    problems
}
