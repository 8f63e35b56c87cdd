//! Preflight commands, applied (DESIGN §13): one pass over a running preflight command
//! judges the reports and check Pods that arrived into the command's status, then signals,
//! holds or concludes. What a check says is `crate::preflight`'s; which nodes a command
//! checks, NewPlan's (`crate::plan::rules::checks`).

use std::collections::BTreeMap;

use autopilot_api::keys;
use autopilot_api::preflight::RawRecord;
use autopilot_api::v1beta2::{
    CheckStatus, OnWarn, PlanCommandPreflight, PlanCommandPreflightStatus, PlanCommandStatus,
    PlanStateType, PreflightCheckStatus, PreflightNodeStatus, PreflightPodStatus, TargetState,
};

use autopilot_api::preflight::request::Request;
use autopilot_api::preflight::status_code;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

use crate::plan::driver::progress::{CommandPass, Outcome, end, release_hold};
use crate::plan::model::command::{Command, Group, RunIdentity, targets};
use crate::plan::model::decision::{Decision, Effect, paused_steady};
use crate::plan::model::inputs::Inputs;
use crate::plan::model::phases::reasons;
use crate::plan::rules::checks::{
    created_pod, judged, named, nodes_with, object_kind, record_for, unjudged_pods,
};
use crate::preflight::scheduler::{self, PodKey};
use crate::preflight::{CompiledCommand, NodeVerdict};

/// One pass over a running preflight command, after the read-back and the deadline: judge
/// the reports that arrived, then signal, wait, hold or conclude.
pub(in crate::plan) fn decide(
    pass: &mut CommandPass<'_, '_>,
    preflight: &PlanCommandPreflight,
) -> Outcome {
    let (inputs, run, command) = (pass.inputs, pass.run, pass.command);
    let index = pass.status.id;
    let compiled = match crate::preflight::compile_command(
        &format!("spec.commands[{index}].preflight"),
        preflight,
    ) {
        Ok(compiled) => compiled,
        // NewPlan compiled the same frozen copy; a status edited by hand could get here.
        Err(problems) => {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            let description = format!("{}: {}", pass.label, problems.join("; "));
            end(pass.status, PlanStateType::Warning, description);
            return Outcome::Ended;
        }
    };
    let deadline = crate::preflight::deadline_of(preflight);
    judge_reports(inputs, run, command, &compiled, deadline, pass.status);
    record_created(inputs, pass.status);
    judge_pods(inputs, pass.decision, &compiled, deadline, pass.status);

    let pending = targets_in_state(pass.status, command, TargetState::SignalPending);
    let in_flight = targets_in_state(pass.status, command, TargetState::SignalSent);

    // Check 1: an abort ends the command at once (checks change nothing on the nodes; a
    // node still running one answers a signal nobody reads any more).
    if inputs.steering.aborted {
        end(
            pass.status,
            PlanStateType::Aborted,
            format!(
                "{label}: aborted by the {} annotation during the preflight checks; no update \
                 command signalled a node",
                keys::ANNOTATION_ABORT,
                label = pass.label,
            ),
        );
        return Outcome::Ended;
    }
    // Check 2: a paused plan signals no new node and starts no Pod.
    if let Some(outcome) = hold_if_paused(inputs, pass.decision, pass.status, &pending) {
        return outcome;
    }
    // Check 3: every pending target and every check Pod at once.
    start_pods(inputs, pass.decision, run, &compiled, deadline, pass.status);
    signal_pending(pass, &pending);
    if let Some(outcome) =
        wait_for_reports(pass.decision, pass.status, in_flight, pending, deadline)
    {
        return outcome;
    }

    // Check 4: every node answered (or its deadline passed): conclude.
    let verdict = conclude(&compiled, deadline, pass.status);
    apply_verdict(pass, compiled.on_warn, verdict)
}

/// The command's targets in `state`, with their groups.
fn targets_in_state(
    status: &PlanCommandStatus,
    command: Command<'_>,
    state: TargetState,
) -> Vec<(Group, String)> {
    command
        .groups()
        .iter()
        .flat_map(|&group| {
            targets(status, command, group)
                .iter()
                .filter(move |t| t.state == state)
                .map(move |t| (group, t.name.clone()))
        })
        .collect()
}

/// Hold a paused plan while any target is not signalled or any check Pod not started yet.
fn hold_if_paused(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    status: &mut PlanCommandStatus,
    pending: &[(Group, String)],
) -> Option<Outcome> {
    let pods_due = unjudged_pods(status).filter(|pod| pod.created.is_none()).count();
    if inputs.steering.paused && (!pending.is_empty() || pods_due > 0) {
        status.state = PlanStateType::SchedulableWait;
        let detail = format!(
            "{} node(s) not signalled and {pods_due} check Pod(s) not started for the \
             preflight checks yet",
            pending.len()
        );
        decision.hold_steady(status, reasons::PLAN_PAUSED, paused_steady(), &detail);
        return Some(Outcome::Running);
    }
    None
}

/// Signal every pending target, controllers first.
fn signal_pending(pass: &mut CommandPass<'_, '_>, pending: &[(Group, String)]) {
    if pending.is_empty() {
        return;
    }
    for group in [Group::Controllers, Group::Workers] {
        let names: Vec<String> =
            pending.iter().filter(|(g, _)| *g == group).map(|(_, name)| name.clone()).collect();
        // Preflight targets need no platform: signalling cannot fail.
        let _signalled = pass.signal_target(group, &names);
    }
}

/// Hold the command while a target (signalled in flight, or just now) or a check Pod has no
/// result yet, naming them.
fn wait_for_reports(
    decision: &mut Decision,
    status: &mut PlanCommandStatus,
    in_flight: Vec<(Group, String)>,
    pending: Vec<(Group, String)>,
    deadline: std::time::Duration,
) -> Option<Outcome> {
    let in_flight: Vec<String> = in_flight
        .into_iter()
        .chain(pending)
        .map(|(group, name)| format!("{} {name}", object_kind(group)))
        .chain(
            unjudged_pods(status)
                .map(|pod| format!("Pod {} (check {} on {})", pod.pod, pod.check, pod.node)),
        )
        .collect();
    if in_flight.is_empty() {
        return None;
    }
    status.state = PlanStateType::SchedulableWait;
    let steady = format!(
        "running preflight checks (each node reports within {} of being signalled)",
        autopilot_api::duration::format(deadline)
    );
    let detail = format!("waiting for {} report(s): {}", in_flight.len(), named(&in_flight));
    decision.hold_steady(status, reasons::PREFLIGHT_RUNNING, steady, &detail);
    Some(Outcome::Running)
}

/// The concluded command's outcome on its `verdict`: an error ends the plan
/// `PreflightFailed`; a warning holds it under `onWarn: Block` until accepted; otherwise it
/// completes (naming any warnings).
fn apply_verdict(pass: &mut CommandPass<'_, '_>, on_warn: OnWarn, verdict: CheckStatus) -> Outcome {
    let (inputs, run, label) = (pass.inputs, pass.run, &pass.label);
    let (decision, status) = (&mut *pass.decision, &mut *pass.status);
    match verdict {
        CheckStatus::Error => {
            let errors = nodes_with(status, CheckStatus::Error);
            end(
                status,
                PlanStateType::PreflightFailed,
                format!("{label}: preflight checks failed: {}", named(&errors)),
            );
            Outcome::Ended
        }
        CheckStatus::Warn
            if on_warn == OnWarn::Block
                && inputs.accepted_warnings.is_none_or(|id| id.trim() != run.plan_id) =>
        {
            let warnings = nodes_with(status, CheckStatus::Warn);
            status.state = PlanStateType::SchedulableWait;
            status.reason = Some(format!(
                "preflight warnings hold the plan (onWarn: Block): {}; accept them with the \
                 annotation {}={}",
                named(&warnings),
                keys::ANNOTATION_ACCEPT_WARNINGS,
                run.plan_id
            ));
            decision.hold(status.id, reasons::PREFLIGHT_WARNINGS);
            Outcome::Running
        }
        CheckStatus::Warn | CheckStatus::Success => {
            let warnings = nodes_with(status, CheckStatus::Warn);
            release_hold(status);
            status.state = PlanStateType::Completed;
            status.description = (!warnings.is_empty())
                .then(|| format!("{label}: completed with warnings: {}", named(&warnings)));
            Outcome::Completed
        }
    }
}

/// Judge every report that arrived since the last pass: each target that is done (answered,
/// failed, gone, or past the deadline) and has no verdict yet for one of its checks.
fn judge_reports(
    inputs: &Inputs<'_>,
    run: &RunIdentity,
    command: Command<'_>,
    compiled: &CompiledCommand,
    deadline: std::time::Duration,
    status: &mut PlanCommandStatus,
) {
    let index = status.id;
    let mut verdicts: Vec<NodeVerdict> = Vec::new();
    let mut judged: Vec<(String, String)> = Vec::new();
    let known = |check: &str, node: &str| self::judged(status.preflight.as_ref(), check, node);
    for &group in command.groups() {
        let objects = inputs.objects(command.object_kind(group));
        for target in targets(status, command, group).iter().filter(|t| t.state.is_terminal()) {
            let signal = objects.get(&target.name).and_then(|o| run.signal_on(o, index, command));
            for check_id in &target.checks {
                if known(check_id, &target.name) {
                    continue;
                }
                let Some(check) = compiled.checks.iter().find(|c| &c.id == check_id) else {
                    continue;
                };
                let record =
                    record_for(target, signal.and_then(|s| s.status.as_ref()), check_id, deadline);
                verdicts.push(check.judge(&target.name, &record));
                judged.push((check_id.clone(), target.name.clone()));
            }
        }
    }
    for ((check_id, _), verdict) in judged.into_iter().zip(verdicts) {
        record_verdict(status, &check_id, verdict);
    }
}

/// Keep `verdict` (one node's) in the command's status under `check_id`.
fn record_verdict(status: &mut PlanCommandStatus, check_id: &str, verdict: NodeVerdict) {
    let preflight = status.preflight.get_or_insert_with(PlanCommandPreflightStatus::default);
    let check = match preflight.checks.iter().position(|c| c.id == check_id) {
        Some(at) => &mut preflight.checks[at],
        None => {
            preflight.checks.push(PreflightCheckStatus {
                id: check_id.to_owned(),
                status: None,
                nodes: Vec::new(),
            });
            preflight.checks.last_mut().expect("just pushed")
        }
    };
    check.nodes.push(PreflightNodeStatus {
        name: verdict.node,
        status: verdict.status,
        status_code: verdict.status_code,
        message: verdict.message,
    });
    check.nodes.sort_by(|a, b| a.name.cmp(&b.name));
}

/// Record in the status the UID of each check Pod this leader created, from the answers to
/// its create requests (`CheckPods::created`): a result is taken only from that Pod, also by
/// a later leader.
fn record_created(inputs: &Inputs<'_>, status: &mut PlanCommandStatus) {
    let created = inputs.observed.check_pods.created;
    let Some(preflight) = status.preflight.as_mut() else { return };
    for pod in preflight.pods.iter_mut().filter(|pod| pod.created.is_some()) {
        if let Some(uid) = created.get(&pod.pod)
            && pod.uid.as_ref() != Some(uid)
        {
            pod.uid = Some(uid.clone());
        }
    }
}

/// Judge every check Pod that ended since the last pass, and every one still without a
/// result at the command's deadline (counted from its creation: status code 62); look again
/// at the earliest deadline still ahead.
fn judge_pods(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    compiled: &CompiledCommand,
    deadline: std::time::Duration,
    status: &mut PlanCommandStatus,
) {
    let mut verdicts = Vec::new();
    for pod in unjudged_pods(status) {
        let Some(check) = compiled.checks.iter().find(|c| c.id == pod.check) else { continue };
        // Only the Pod the leader created speaks for the node: one of the name with another
        // UID is refused (`stale_pods`) and counts as no result.
        let ended = created_pod(inputs.observed, pod).and_then(scheduler::record_of);
        let record = match (ended, &pod.created) {
            (Some(record), _) => record,
            (None, None) => continue,
            (None, Some(created)) => {
                let elapsed = inputs.elapsed_since(created.0);
                // A deadline too long to represent never runs out.
                let remaining = jiff::SignedDuration::try_from(deadline)
                    .ok()
                    .and_then(|deadline| deadline.checked_sub(elapsed));
                match remaining {
                    Some(remaining) if !remaining.is_positive() => RawRecord::failure(
                        status_code::TIMEOUT,
                        format!(
                            "Pod {} did not end within the deadline of {}",
                            pod.pod,
                            autopilot_api::duration::format(deadline)
                        ),
                    ),
                    Some(remaining) => {
                        if let Ok(remaining) = std::time::Duration::try_from(remaining) {
                            decision.requeue_after(remaining);
                        }
                        continue;
                    }
                    None => continue,
                }
            }
        };
        verdicts.push((pod.check.clone(), check.judge(&pod.node, &record)));
    }
    for (check_id, verdict) in verdicts {
        record_verdict(status, &check_id, verdict);
    }
}

/// Create every check Pod that is due (not created yet) and every created one the snapshot
/// does not show while its result is not recorded (a crash between the status write and the
/// create, or a Pod deleted by hand; an `AlreadyExists` answer is fine). A template that
/// cannot be used is the node's result at once: status code 22.
fn start_pods(
    inputs: &Inputs<'_>,
    decision: &mut Decision,
    run: &RunIdentity,
    compiled: &CompiledCommand,
    deadline: std::time::Duration,
    status: &mut PlanCommandStatus,
) {
    let index = status.id;
    let due: Vec<PreflightPodStatus> = unjudged_pods(status)
        .filter(|pod| {
            pod.created.is_none() || !inputs.observed.check_pods.pods.contains_key(&pod.pod)
        })
        .cloned()
        .collect();
    let mut verdicts = Vec::new();
    let mut created = Vec::new();
    for pod in due {
        let Some(check) = compiled.checks.iter().find(|c| c.id == pod.check) else { continue };
        let Request::Scheduler(data) = &check.request else { continue };
        let pod_name = &data.kubernetes.pod_name;
        // The copy NewPlan froze; a run started by a version that froze none reads the
        // ConfigMap as it is now.
        let frozen = status
            .preflight
            .as_ref()
            .and_then(|p| p.templates.iter().find(|t| t.check == pod.check));
        let template = match frozen {
            Some(frozen) => scheduler::thaw(frozen),
            None => {
                scheduler::template(inputs.observed.check_pods.templates.get(pod_name), pod_name)
            }
        };
        match template {
            Err(why) => verdicts.push((
                pod.check.clone(),
                check.judge(&pod.node, &RawRecord::failure(status_code::INVALID_ARGUMENT, why)),
            )),
            Ok(template) => {
                let key = PodKey {
                    run_id: &run.run_id,
                    command: index,
                    check: &pod.check,
                    node: &pod.node,
                };
                let mut object = scheduler::pod_for(&template, key, check.timeout);
                object.metadata.owner_references = Some(vec![OwnerReference {
                    api_version: keys::API_VERSION.to_owned(),
                    kind: "Plan".to_owned(),
                    name: inputs.plan_name.to_owned(),
                    uid: inputs.plan_uid.to_owned(),
                    ..OwnerReference::default()
                }]);
                decision.signals.push(Effect::CreatePod(Box::new(object)));
                if pod.created.is_none() {
                    created.push(pod.pod.clone());
                }
            }
        }
    }
    for (check_id, verdict) in verdicts {
        record_verdict(status, &check_id, verdict);
    }
    if created.is_empty() {
        return;
    }
    if let Some(preflight) = status.preflight.as_mut() {
        for pod in preflight.pods.iter_mut().filter(|pod| created.contains(&pod.pod)) {
            pod.created = Some(Time(inputs.stamp));
        }
    }
    decision.requeue_after(deadline);
}

/// Every check's status (its worst node; a target never judged counts as no report) and
/// the command's (its worst check), written into the status; returns the command's.
fn conclude(
    compiled: &CompiledCommand,
    deadline: std::time::Duration,
    status: &mut PlanCommandStatus,
) -> CheckStatus {
    let preflight = status.preflight.get_or_insert_with(PlanCommandPreflightStatus::default);
    let mut targets_of: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for target in preflight.controllers.iter().chain(&preflight.workers) {
        for check in &target.checks {
            targets_of.entry(check.as_str()).or_default().push(target.name.clone());
        }
    }
    for pod in &preflight.pods {
        targets_of.entry(pod.check.as_str()).or_default().push(pod.node.clone());
    }
    let mut checks = Vec::new();
    for check in &compiled.checks {
        let mut nodes = preflight
            .checks
            .iter()
            .find(|c| c.id == check.id)
            .map(|c| c.nodes.clone())
            .unwrap_or_default();
        for name in targets_of.get(check.id.as_str()).into_iter().flatten() {
            if !nodes.iter().any(|n| &n.name == name) {
                let verdict = check.judge(name, &RawRecord::no_report(deadline));
                nodes.push(PreflightNodeStatus {
                    name: verdict.node,
                    status: verdict.status,
                    status_code: verdict.status_code,
                    message: verdict.message,
                });
            }
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        // A check that ran on no node proved nothing (NewPlan refuses such a plan).
        let worst = nodes.iter().map(|n| n.status).max().unwrap_or(CheckStatus::Error);
        checks.push(PreflightCheckStatus { id: check.id.clone(), status: Some(worst), nodes });
    }
    let worst = checks.iter().filter_map(|c| c.status).max().unwrap_or(CheckStatus::Error);
    preflight.checks = checks;
    preflight.status = Some(worst);
    worst
}
