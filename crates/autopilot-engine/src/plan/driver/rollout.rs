//! A dry run of the engine: the passes [`step`] would make over a Plan spec on a snapshot,
//! if every node it signals completed at once. `k0s autopilot preview` shows the result.
//!
//! Nothing here decides anything of its own: every pass is the engine's [`step`], and the
//! "cluster" between passes is the snapshot with each signalled object answering
//! `Completed` (a preflight check, and a gate's check, as a probe that succeeded with no
//! output; every other gate as passed). So the resolved targets, the refusals (missing targets or platforms, an
//! excluded node kind, removed APIs, malformed fields), the order and the batches are
//! exactly the engine's.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::gate_check::{GateCheckRequest, GateCheckSays};
use autopilot_api::keys;
use autopilot_api::preflight::RawRecord;
use autopilot_api::prestage::{PrestageOutcome, PrestageRequest, PrestageSays};
use autopilot_api::signal::{SignalData, SignalPhase, SignalStatus};
use autopilot_api::v1beta2::{PlanSpec, PlanStateType, PlanStatus};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
};

use crate::plan::driver::machine::step;
use crate::plan::model::decision::{Effect, ObjectKind, Requeue, SignalTarget, Transition};
use crate::plan::model::inputs::{
    CheckPods, Observed, ObservedGateCheck, ObservedPrestage, ObservedSignal, PlanView, Policy,
    Readiness, Steering, TargetObject,
};
use crate::plan::model::lookups::{GateAnswer, GateQuery, PlanAccess, PlanReader};

/// The most passes a dry run makes before it reports that it stalled (a run of N targets
/// needs about 2N passes).
const MAX_PASSES: usize = 10_000;

/// Why a dry run counts an identity's access to the Plan as unknown: its caller did not
/// review it.
pub const NOT_REVIEWED: &str = "not reviewed by the dry run";

/// How far the clock of a dry run moves between two passes that changed something.
const PASS: Duration = Duration::from_secs(1);

/// Nodes the engine signalled in one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The command (index in `spec.commands`).
    pub command: u32,
    /// The objects signalled, in the engine's order.
    pub targets: Vec<(ObjectKind, String)>,
    /// How long the engine waited before this batch with nothing in flight (a canary's
    /// soak), if it did.
    pub waited: Option<Duration>,
}

/// What a dry run found.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    /// The status after the first pass: every command's resolved targets, or the state and
    /// `description` the run would end in at once.
    pub resolved: PlanStatus,
    /// The batches, in order.
    pub batches: Vec<Batch>,
    /// The status the dry run ended with (terminal unless it stalled).
    pub end: PlanStatus,
}

/// Run the engine over `spec` on the snapshot `observed` until the run ends.
///
/// Every object counts as ready (controllers answer `/readyz`, Nodes are `Ready`): which
/// targets are not ready now is the caller's to report; the rollout shows the order once
/// they are. `observed.readiness` is not read.
pub fn rollout(spec: &PlanSpec, observed: &Observed<'_>, policy: &Policy) -> Rollout {
    rollout_allowing_skew(spec, None, observed, policy)
}

/// [`rollout`] of a Plan whose [`keys::ANNOTATION_ALLOW_SKEW`] annotation has the value
/// `allow_skew` (the engine runs a plan that breaks the version skew rules only when it names
/// the plan's id, `crate::plan::rules::skew`).
pub fn rollout_allowing_skew(
    spec: &PlanSpec,
    allow_skew: Option<&str>,
    observed: &Observed<'_>,
    policy: &Policy,
) -> Rollout {
    dry_run(
        &Start { uid: "preview", generation: 1, status: None, rollback: None, allow_skew },
        spec,
        observed,
        policy,
    )
}

/// The live Plan a dry run of its rollback starts from.
#[derive(Clone, Copy, Debug)]
pub struct LivePlan<'a> {
    /// `metadata.uid`.
    pub uid: &'a str,
    /// `metadata.generation`.
    pub generation: i64,
    /// The spec.
    pub spec: &'a PlanSpec,
    /// The status, with the run to roll back.
    pub status: &'a PlanStatus,
}

/// Run the engine over the live Plan `plan` as if an operator asked to roll its run back
/// now (its rollback annotation naming the run's plan id), until the rollback ends: the
/// batches are the rollback's, in the engine's order (DESIGN §15). `k0s autopilot preview
/// --rollback` shows the result.
pub fn rollback(plan: LivePlan<'_>, observed: &Observed<'_>, policy: &Policy) -> Rollout {
    let start = Start {
        uid: plan.uid,
        generation: plan.generation,
        status: Some(plan.status.clone()),
        rollback: plan.status.plan_id.as_deref(),
        allow_skew: None,
    };
    dry_run(&start, plan.spec, observed, policy)
}

/// Where a dry run starts: the Plan's identity, its status and whether a rollback is asked.
struct Start<'a> {
    uid: &'a str,
    generation: i64,
    status: Option<PlanStatus>,
    rollback: Option<&'a str>,
    /// The allow-skew annotation (a rollback starts no run, so none).
    allow_skew: Option<&'a str>,
}

fn dry_run(
    start: &Start<'_>,
    spec: &PlanSpec,
    observed: &Observed<'_>,
    policy: &Policy,
) -> Rollout {
    let mut cluster = DryCluster::start(start, observed);
    let readiness: BTreeMap<String, Readiness> =
        cluster.control_nodes.keys().map(|name| (name.clone(), Readiness::Ready)).collect();
    let mut now = observed.now;
    let mut status: Option<PlanStatus> = start.status.clone();
    let mut resolved = None;
    let mut batches = Vec::new();
    let mut waited = Duration::ZERO;
    let mut gate_answers: BTreeMap<GateQuery, GateAnswer> = BTreeMap::new();
    let mut plan_access = observed.plan_access.clone();
    for _ in 0..MAX_PASSES {
        let plan = PlanView {
            rollback: start.rollback,
            name: keys::PLAN_NAME,
            uid: start.uid,
            generation: start.generation,
            spec,
            status: status.as_ref(),
            steering: Steering::default(),
            accepted_warnings: None,
            allow_skew: start.allow_skew,
        };
        let snapshot = Observed {
            gate_answers: &gate_answers,
            plan_access: &plan_access,
            now,
            term_started: None,
            control_nodes: &cluster.control_nodes,
            nodes: &cluster.nodes,
            readiness: &readiness,
            api_versions: observed.api_versions,
            removed_apis: observed.removed_apis,
            check_pods: CheckPods {
                pods: &cluster.pods,
                templates: observed.check_pods.templates,
                created: &cluster.created,
            },
        };
        let transition = step(plan, &snapshot, policy);
        // What the dry run cannot look up is assumed (see [`assume_unanswered`]): answered,
        // the same pass is made again.
        if assume_unanswered(&transition, &mut gate_answers, &mut plan_access) {
            continue;
        }
        let batch = cluster.answer(&transition, now);
        let changed = status.as_ref() != Some(&transition.status) || !batch.is_empty();
        if resolved.is_none() && transition.status != PlanStatus::default() {
            resolved = Some(transition.status.clone());
        }
        if let Some(&(command, _, _)) = batch.first() {
            batches.push(Batch {
                command,
                targets: batch.into_iter().map(|(_, kind, name)| (kind, name)).collect(),
                waited: (waited > Duration::ZERO).then_some(waited),
            });
            waited = Duration::ZERO;
        }
        let ended = transition.status.is_terminal();
        let requeue = transition.requeue;
        if transition.status != PlanStatus::default() {
            status = Some(transition.status);
        }
        if ended {
            break;
        }
        let Some(Wait { by, waiting }) = next_pass(changed, requeue) else { break };
        now += by;
        if waiting {
            waited += by;
        }
    }
    let end = status.clone().unwrap_or_default();
    Rollout { resolved: resolved.unwrap_or_else(|| end.clone()), batches, end }
}

/// How far the dry run's clock moves before its next pass.
struct Wait {
    /// By how much.
    by: Duration,
    /// Only time passes (the run waits): shown before the next batch.
    waiting: bool,
}

/// When the dry run's next pass is, after one that `changed` something and asked for
/// `requeue`; `None`: the run would wait for the cluster, the dry run ends.
fn next_pass(changed: bool, requeue: Requeue) -> Option<Wait> {
    match (changed, requeue) {
        (true, _) => Some(Wait { by: PASS, waiting: false }),
        // Time itself matters (a soak, a re-check): let it pass.
        (false, Requeue::After(delay)) => Some(Wait { by: delay.max(PASS), waiting: true }),
        // Nothing changes and nothing is due: the run would wait for the cluster.
        (false, Requeue::OnChange) => None,
    }
}

/// Answer what `transition` needs that the dry run cannot look up; whether it needed any.
/// A gate's lookups count as passed (a dry run shows the order, not the cluster's health).
/// An identity the caller did not review (`observed.plan_access`) counts as not checked
/// ([`NOT_REVIEWED`]): the run goes on, as the engine's does when a review cannot be made.
fn assume_unanswered(
    transition: &Transition,
    gate_answers: &mut BTreeMap<GateQuery, GateAnswer>,
    plan_access: &mut BTreeMap<PlanReader, PlanAccess>,
) -> bool {
    let unanswered = unanswered_gates(transition, gate_answers);
    let unreviewed: Vec<PlanReader> = transition
        .needs
        .plan_readers
        .iter()
        .filter(|reader| !plan_access.contains_key(*reader))
        .cloned()
        .collect();
    let needed = !unanswered.is_empty() || !unreviewed.is_empty();
    gate_answers.extend(unanswered.into_iter().map(|query| (query, GateAnswer::Assumed)));
    let not_checked = || PlanAccess::Unknown(NOT_REVIEWED.to_owned());
    plan_access.extend(unreviewed.into_iter().map(|reader| (reader, not_checked())));
    needed
}

/// The gate lookups a pass needs that the dry run has not answered yet.
fn unanswered_gates(
    transition: &Transition,
    gate_answers: &BTreeMap<GateQuery, GateAnswer>,
) -> Vec<GateQuery> {
    transition
        .needs
        .gates
        .iter()
        .filter(|query| !gate_answers.contains_key(*query))
        .cloned()
        .collect()
}

/// The cluster of a dry run: the objects the engine signals and the check Pods it creates.
struct DryCluster {
    /// Every `ControlNode`, by name.
    control_nodes: BTreeMap<String, TargetObject>,
    /// Every `Node`, by name.
    nodes: BTreeMap<String, TargetObject>,
    /// The check Pods, by name.
    pods: BTreeMap<String, Pod>,
    /// The UID each check Pod was created with, by name (as the API server answers).
    created: BTreeMap<String, String>,
}

impl DryCluster {
    /// The observed cluster with every node ready and no check Pod. A rollback waits for
    /// the nodes in flight: in the dry run they finish at once.
    fn start(start: &Start<'_>, observed: &Observed<'_>) -> Self {
        let mut cluster = DryCluster {
            control_nodes: ready(observed.control_nodes),
            nodes: ready(observed.nodes),
            pods: BTreeMap::new(),
            created: BTreeMap::new(),
        };
        if let Some(run) = start.status.as_ref().and_then(|s| s.run_id.as_deref()) {
            cluster.finish_in_flight(run, observed.now);
        }
        cluster
    }

    /// Answer a pass's effects at once; returns the nodes it signalled (with the command's
    /// index), in order.
    fn answer(
        &mut self,
        transition: &Transition,
        now: Timestamp,
    ) -> Vec<(u32, ObjectKind, String)> {
        let mut batch: Vec<(u32, ObjectKind, String)> = Vec::new();
        for effect in &transition.effects {
            match effect {
                Effect::Signal { target, data } => {
                    self.complete_signal(target, data, now);
                    batch.push((data.command.id, target.kind, target.name.clone()));
                }
                // A check Pod ends at once with exit code 0 and no output, like a probe.
                Effect::CreatePod(pod) => {
                    if let Some(signalled) = self.end_pod(pod, &transition.status) {
                        batch.push(signalled);
                    }
                }
                Effect::DeletePod { name, uid: _ } => {
                    self.pods.remove(name);
                }
                // A gate's check answers as a probe that succeeded with no output.
                Effect::GateCheck { target, request } => self.answer_gate_check(target, request),
                // Pre-staging answers `Staged` at once: the dry run shows the order.
                Effect::Prestage { target, request } => self.answer_prestage(target, request),
                Effect::Event { .. } => {}
            }
        }
        batch
    }

    /// The signalled object answers `Completed`.
    fn complete_signal(&mut self, target: &SignalTarget, data: &SignalData, now: Timestamp) {
        let objects = match target.kind {
            ObjectKind::ControlNode => &mut self.control_nodes,
            ObjectKind::Node => &mut self.nodes,
        };
        // A preflight check answers as a probe that succeeded with no output
        // (status code 0): the dry run shows the order, not the checks' outcome.
        let mut answer = SignalStatus::new(SignalPhase::Completed, now);
        if let Some(preflight) = &data.command.preflight {
            answer.preflight = preflight
                .checks
                .iter()
                .map(|check| (check.clone(), RawRecord::success(Vec::new())))
                .collect();
        }
        let answered = data.clone().with_status(answer);
        if let Some(object) = objects.get_mut(&target.name) {
            object.signal = ObservedSignal::Valid(answered);
        }
    }

    /// Every signal of run `run` that has not ended answers `Completed`.
    fn finish_in_flight(&mut self, run: &str, now: Timestamp) {
        for object in self.control_nodes.values_mut().chain(self.nodes.values_mut()) {
            if let ObservedSignal::Valid(data) = &object.signal
                && data.run_id.as_deref() == Some(run)
                && !data.phase().is_some_and(SignalPhase::is_terminal)
            {
                let answer = SignalStatus::new(SignalPhase::Completed, now);
                object.signal = ObservedSignal::Valid(data.clone().with_status(answer));
            }
        }
    }

    /// The asked object reports every gate check of `request` as a probe that succeeded.
    fn answer_gate_check(&mut self, target: &SignalTarget, request: &GateCheckRequest) {
        let objects = match target.kind {
            ObjectKind::ControlNode => &mut self.control_nodes,
            ObjectKind::Node => &mut self.nodes,
        };
        if let Some(object) = objects.get_mut(&target.name) {
            *object.gate_check_mut() = ObservedGateCheck {
                request: Some(request.clone()),
                report: Some(
                    request.answer(GateCheckSays {
                        attempt: request.asks.attempt,
                        records: request
                            .asks
                            .gates
                            .iter()
                            .map(|gate| (gate.clone(), RawRecord::success(Vec::new())))
                            .collect(),
                        refused: None,
                    }),
                ),
                report_problem: None,
            };
        }
    }

    /// The asked object reports the payload staged.
    fn answer_prestage(&mut self, target: &SignalTarget, request: &PrestageRequest) {
        let objects = match target.kind {
            ObjectKind::ControlNode => &mut self.control_nodes,
            ObjectKind::Node => &mut self.nodes,
        };
        if let Some(object) = objects.get_mut(&target.name) {
            *object.prestage_mut() = ObservedPrestage {
                request: Some(request.clone()),
                report: Some(
                    request.answer(PrestageSays { outcome: PrestageOutcome::Staged, reason: None }),
                ),
                report_problem: None,
            };
        }
    }

    /// The created check Pod, ended with exit code 0; returns its command's index and its
    /// Node, if it names one.
    fn end_pod(&mut self, pod: &Pod, status: &PlanStatus) -> Option<(u32, ObjectKind, String)> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let mut ended = pod.clone();
        let uid = format!("dry-run-{name}");
        ended.metadata.uid = Some(uid.clone());
        self.created.insert(name.clone(), uid);
        ended.status = Some(PodStatus {
            phase: Some("Succeeded".to_owned()),
            container_statuses: Some(vec![ContainerStatus {
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated::default()),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        self.pods.insert(name.clone(), ended);
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone())?;
        let command = status
            .commands
            .iter()
            .find(|c| c.preflight.as_ref().is_some_and(|p| p.pods.iter().any(|x| x.pod == name)))
            .map_or(0, |c| c.id);
        Some((command, ObjectKind::Node, node))
    }
}

/// `objects`, every one ready.
fn ready(objects: &BTreeMap<String, TargetObject>) -> BTreeMap<String, TargetObject> {
    objects
        .iter()
        .map(|(name, object)| (name.clone(), TargetObject { ready: true, ..object.clone() }))
        .collect()
}

/// Whether a rollout's run would complete.
pub fn completes(rollout: &Rollout) -> bool {
    rollout.end.state == PlanStateType::Completed
}
