//! Property tests: random clusters and plans, random node responses, crashes, lost status
//! writes, readiness flaps, deletions, spec edits and signals copied onto other nodes, driven
//! pass by pass; every pass is checked against the safety invariants and the phase tables,
//! every signal the leader writes is one the status written before it records (the node
//! accepts it), and no node ever acts on a copy.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::fixtures::{SignalBuilder, airgap_signal, selector_target, static_target};
use autopilot_api::keys;
use autopilot_api::signal::{SignalData, SignalPhase, SignalStatus};
use autopilot_api::v1beta2::{
    PlanCommandStatus, PlanCommandTarget, PlanStateType, PlanStatus, TargetState,
};
use proptest::prelude::*;

use super::fixtures::*;
use crate::plan::model::command::{Command, Group, targets};
use crate::plan::phases::{self, reasons};
use crate::plan::{Effect, ObjectKind, ObservedSignal, Readiness, SignalTarget, Transition};

// === Strategies ===

/// How one target group is chosen.
#[derive(Clone, Debug)]
enum Targeting {
    Nothing,
    /// `selector: {}`.
    All,
    /// A static list: the names whose bit is set (plus a name with no object when the high
    /// bit is set).
    Static(u8),
}

#[derive(Clone, Debug)]
struct CommandShape {
    k0s: bool,
    forced: bool,
    controllers: Targeting,
    workers: Targeting,
    concurrent: u32,
    /// The workers' `limits`: a percentage instead of a count, a failure budget, a canary
    /// count with or without a soak.
    percent: Option<u32>,
    max_failures: Option<u32>,
    canary: Option<(u32, bool)>,
    /// A health gate on the workers' Pods: after each batch (else each node), and whether a
    /// failure rolls the run back.
    gate: Option<(bool, bool)>,
    /// Failure-domain waves by [`ZONE`], with a soak between groups or not.
    waves: Option<bool>,
}

/// The label the generated waves group the workers by.
const ZONE: &str = "topology.kubernetes.io/zone";

/// The zone of the `i`-th object as `zones` says (`None`: no label).
fn zone_of(zones: u8, i: usize) -> Option<&'static str> {
    [Some("a"), Some("b"), Some("c"), None][usize::from(zones >> (2 * (i % 4))) & 3]
}

#[derive(Clone, Debug)]
enum Action {
    /// A pass; the shell writes the status and every signal.
    Pass,
    /// A pass after which the leader crashes before writing any signal.
    Crash,
    /// A node carrying a signal moves to its next phase.
    Progress(u8),
    /// A node carrying a signal fails.
    Fail(u8),
    /// A controller's `/readyz` flips.
    FlipReadyz(u8),
    /// A worker's `Ready` flips.
    FlipReady(u8),
    /// Time passes.
    Wait(u16),
    /// An object is deleted.
    Delete(u8),
    /// The spec is edited (a new generation).
    Edit,
    /// The pause annotation flips.
    Pause,
    /// The abort annotation is set (rarely removed again).
    Abort(bool),
    /// A node gets a signal of an earlier run, in flight or finished.
    Earlier(u8, bool),
    /// An operator asks to roll back the current run (`k0s autopilot rollback`).
    Rollback,
    /// A node's Pods are looked up by its gate from now on: all healthy, or not.
    Health(u8, bool),
    /// A node changes its zone label (a kubelet may set its own): to the zone the second
    /// value picks, or removes it.
    Relabel(u8, u8),
    /// Someone who may patch Nodes copies the signal of a node in flight onto another object
    /// (status dropped, a `created` of their own).
    Copy(u8, u8),
    /// A pass whose status write is lost (a conflict): nothing is written, no signal.
    Lost,
}

#[derive(Clone, Debug)]
struct Scenario {
    controllers: usize,
    workers: usize,
    controller_workers: usize,
    /// Indices of objects on linux-arm64 (bit per object), and one on windows.
    arm: u8,
    windows: Option<u8>,
    commands: Vec<CommandShape>,
    grace: u64,
    /// Each object's zone label, two bits an object ([`zone_of`]).
    zones: u8,
    actions: Vec<Action>,
}

fn targeting() -> impl Strategy<Value = Targeting> {
    prop_oneof![
        1 => Just(Targeting::Nothing),
        3 => Just(Targeting::All),
        4 => (any::<u8>()).prop_map(|mask| Targeting::Static(mask & 0x7f)),
        1 => (any::<u8>()).prop_map(Targeting::Static),
    ]
}

fn command_shape() -> impl Strategy<Value = CommandShape> {
    (
        (any::<bool>(), any::<bool>(), targeting(), targeting(), 1..=3u32),
        prop::option::weighted(0.2, 1..=100u32),
        prop::option::weighted(0.2, 0..=2u32),
        prop::option::weighted(0.2, (1..=2u32, any::<bool>())),
        prop::option::weighted(0.3, (any::<bool>(), any::<bool>())),
        prop::option::weighted(0.4, any::<bool>()),
    )
        .prop_map(
            |(
                (k0s, forced, controllers, workers, concurrent),
                percent,
                max_failures,
                canary,
                gate,
                waves,
            )| {
                CommandShape {
                    k0s,
                    forced,
                    controllers,
                    workers,
                    concurrent,
                    percent,
                    max_failures,
                    canary,
                    gate,
                    waves,
                }
            },
        )
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        8 => Just(Action::Pass),
        1 => Just(Action::Crash),
        8 => any::<u8>().prop_map(Action::Progress),
        1 => any::<u8>().prop_map(Action::Fail),
        2 => any::<u8>().prop_map(Action::FlipReadyz),
        2 => any::<u8>().prop_map(Action::FlipReady),
        2 => (0..400u16).prop_map(Action::Wait),
        1 => any::<u8>().prop_map(Action::Delete),
        1 => Just(Action::Edit),
        1 => Just(Action::Pause),
        1 => any::<bool>().prop_map(Action::Abort),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(i, done)| Action::Earlier(i, done)),
        1 => Just(Action::Rollback),
        3 => (any::<u8>(), prop::bool::weighted(0.8)).prop_map(|(i, ok)| Action::Health(i, ok)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(i, zone)| Action::Relabel(i, zone)),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(from, to)| Action::Copy(from, to)),
        1 => Just(Action::Lost),
    ]
}

fn scenario(actions: impl Strategy<Value = Vec<Action>>) -> impl Strategy<Value = Scenario> {
    (
        0..=3usize,
        0..=4usize,
        0..=2usize,
        any::<u8>(),
        prop::option::weighted(0.1, any::<u8>()),
        prop::collection::vec(command_shape(), 1..=2),
        prop_oneof![Just(0u64), Just(60), Just(600)],
        any::<u8>(),
        actions,
    )
        .prop_map(
            |(
                controllers,
                workers,
                controller_workers,
                arm,
                windows,
                commands,
                grace,
                zones,
                actions,
            )| {
                Scenario {
                    controllers,
                    workers,
                    controller_workers,
                    arm,
                    windows,
                    commands,
                    grace,
                    zones,
                    actions,
                }
            },
        )
}

// === Building the simulation ===

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn target(
    targeting: &Targeting,
    candidates: &[String],
    concurrent: u32,
) -> Option<PlanCommandTarget> {
    let mut target = match targeting {
        Targeting::Nothing => return None,
        Targeting::All => selector_target(None, None),
        Targeting::Static(mask) => {
            let mut nodes: Vec<String> = candidates
                .iter()
                .enumerate()
                .filter(|(i, _)| *i < 7 && mask & (1 << i) != 0)
                .map(|(_, name)| name.clone())
                .collect();
            if mask & 0x80 != 0 {
                nodes.push("ghost".to_owned());
            }
            static_target(nodes)
        }
    };
    target.limits.concurrent = autopilot_api::v1beta2::Concurrency::Count(concurrent);
    Some(target)
}

fn build(scenario: &Scenario) -> Sim {
    let controllers = names("c", scenario.controllers);
    let workers = names("w", scenario.workers);
    let both = names("cw", scenario.controller_workers);

    let mut cluster = ClusterFixture::new();
    for name in &controllers {
        cluster = cluster.controllers([name.as_str()]);
    }
    for name in &workers {
        cluster = cluster.workers([name.as_str()]);
    }
    for name in &both {
        cluster = cluster.controller_workers([name.as_str()]);
    }
    let all: Vec<String> = controllers.iter().chain(&workers).chain(&both).cloned().collect();
    for (i, name) in all.iter().enumerate() {
        if i < 8 && scenario.arm & (1 << i) != 0 {
            cluster = cluster.platform(name, "linux", "arm64");
        }
    }
    for (i, name) in all.iter().enumerate() {
        if let Some(zone) = zone_of(scenario.zones, i) {
            cluster = cluster.label(name, ZONE, zone);
        }
    }
    if let Some(windows) = scenario.windows
        && !all.is_empty()
    {
        cluster = cluster.platform(&all[usize::from(windows) % all.len()], "windows", "amd64");
    }

    let controller_candidates: Vec<String> = controllers.iter().chain(&both).cloned().collect();
    let worker_candidates: Vec<String> = workers.iter().chain(&both).cloned().collect();
    let mut plan = PlanFixture::without_commands();
    for shape in &scenario.commands {
        if shape.k0s {
            plan = plan.then_k0s_update("v1.31.1+k0s.0");
            let k0s =
                plan.spec.commands.last_mut().and_then(|c| c.k0supdate.as_mut()).expect("k0s");
            k0s.forceupdate = shape.forced;
            k0s.targets.controllers = target(&shape.controllers, &controller_candidates, 1);
            k0s.targets.workers = target(&shape.workers, &worker_candidates, shape.concurrent)
                .map(|target| shaped(target, shape));
            k0s.rollout
                .gates
                .extend(shape.gate.map(|(batch, rollback)| health_gate(batch, rollback)));
        } else {
            plan = plan.then_airgap_update("v1.31.1+k0s.0");
            let airgap = plan
                .spec
                .commands
                .last_mut()
                .and_then(|c| c.airgapupdate.as_mut())
                .expect("airgap");
            airgap.workers = shaped(
                target(&shape.workers, &worker_candidates, shape.concurrent).unwrap_or_default(),
                shape,
            );
            airgap
                .rollout
                .gates
                .extend(shape.gate.map(|(batch, rollback)| health_gate(batch, rollback)));
        }
    }
    Sim::new(plan, cluster).with_policy(|policy| {
        policy.readiness_grace = Duration::from_secs(scenario.grace);
    })
}

/// The lookup of the generated gate for `node`.
fn health_query(node: &str) -> crate::plan::GateQuery {
    crate::plan::GateQuery::List {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        namespace: None,
        label_selector: None,
        field_selector: Some(format!("spec.nodeName={node}")),
    }
}

/// The generated gate of a command shape.
fn health_gate(batch: bool, rollback: bool) -> autopilot_api::v1beta2::Gate {
    use autopilot_api::v1beta2::{Gate, GateAfter, GateOnFailure, KubernetesGate};
    Gate {
        id: "healthy".to_owned(),
        after: if batch { GateAfter::Batch } else { GateAfter::Node },
        timeout: Some("2m".to_owned()),
        on_failure: if rollback { GateOnFailure::Rollback } else { GateOnFailure::Halt },
        kubernetes: Some(KubernetesGate {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            field_selector: Some("spec.nodeName={{ .Node }}".to_owned()),
            condition: "objects.all(p, p.ok == true)".to_owned(),
            ..KubernetesGate::default()
        }),
        ..Gate::default()
    }
}

/// The workers' limits of a command shape.
fn shaped(mut target: PlanCommandTarget, shape: &CommandShape) -> PlanCommandTarget {
    if let Some(percent) = shape.percent {
        target.limits.concurrent = autopilot_api::v1beta2::Concurrency::Percent(percent);
    }
    target.limits.max_failures = shape.max_failures;
    if let Some((canary, soak)) = shape.canary {
        target.limits.canary = Some(canary);
        target.limits.soak = soak.then(|| "2m".to_owned());
    }
    if let Some(soak) = shape.waves {
        target.limits.group_by = Some(ZONE.to_owned());
        target.limits.between_groups =
            soak.then(|| autopilot_api::v1beta2::BetweenGroups { soak: Some("3m".to_owned()) });
    }
    target
}

/// Every object that carries a signal the node has not finished, in a stable order.
fn busy_objects(cluster: &ClusterFixture) -> Vec<(ObjectKind, String)> {
    [ObjectKind::ControlNode, ObjectKind::Node]
        .into_iter()
        .flat_map(|kind| {
            cluster.objects(kind).values().filter_map(move |object| match &object.signal {
                ObservedSignal::Valid(data)
                    if !data.phase().is_some_and(SignalPhase::is_terminal) =>
                {
                    Some((kind, object.name.clone()))
                }
                ObservedSignal::Valid(_) | ObservedSignal::None | ObservedSignal::Invalid(_) => {
                    None
                }
            })
        })
        .collect()
}

fn next_phase(phase: Option<SignalPhase>) -> SignalPhase {
    match phase {
        None => SignalPhase::Downloading,
        Some(SignalPhase::Downloading) => SignalPhase::Cordoning,
        Some(SignalPhase::Cordoning) => SignalPhase::ApplyingUpdate,
        Some(SignalPhase::ApplyingUpdate) => SignalPhase::Restarting,
        Some(SignalPhase::Restarting) => SignalPhase::Uncordoning,
        Some(SignalPhase::Uncordoning) => SignalPhase::Completed,
        Some(
            done @ (SignalPhase::Completed | SignalPhase::FailedDownload | SignalPhase::Failed),
        ) => done,
    }
}

fn pick<T: Clone>(items: &[T], index: u8) -> Option<T> {
    (!items.is_empty()).then(|| items[usize::from(index) % items.len()].clone())
}

/// Apply a non-pass action to the cluster or the plan.
fn act(sim: &mut Sim, action: &Action) {
    match action {
        Action::Pass | Action::Crash | Action::Lost => {}
        Action::Progress(i) => {
            if let Some((kind, name)) = pick(&busy_objects(&sim.cluster), *i) {
                progress(sim, kind, &name);
            }
        }
        Action::Copy(from, to) => copy(sim, *from, *to),
        Action::Fail(i) => {
            if let Some((kind, name)) = pick(&busy_objects(&sim.cluster), *i) {
                let phase =
                    if i % 2 == 0 { SignalPhase::Failed } else { SignalPhase::FailedDownload };
                sim.cluster.report(kind, &name, phase, Some("injected failure"));
            }
        }
        Action::FlipReadyz(i) => flip_readyz(sim, *i),
        Action::FlipReady(i) => {
            let names: Vec<String> = sim.cluster.nodes.keys().cloned().collect();
            if let Some(name) = pick(&names, *i)
                && let Some(node) = sim.cluster.nodes.get_mut(&name)
            {
                node.ready = !node.ready;
            }
        }
        Action::Wait(seconds) => {
            sim.cluster = sim.cluster.clone().later(Duration::from_secs(u64::from(*seconds)));
        }
        Action::Delete(i) => delete(sim, *i),
        Action::Pause => {
            sim.plan.steering.paused = !sim.plan.steering.paused;
        }
        Action::Rollback => {
            sim.plan.rollback = Some(sim.plan.spec.id.clone());
        }
        Action::Health(i, ok) => health(sim, *i, *ok),
        Action::Relabel(i, zone) => relabel(sim, *i, *zone),
        Action::Abort(set) => {
            // Mostly set; sometimes removed again so later runs can start.
            sim.plan.steering.aborted = *set || !sim.plan.steering.aborted;
        }
        Action::Earlier(i, done) => earlier(sim, *i, *done),
        Action::Edit => edit(sim),
    }
}

/// The `created` of every copied signal: no leader writes it.
const COPIED: &str = "1999-01-01T00:00:00.5Z";

/// [`Action::Progress`]: the node moves its signal on as the agent does. A signal that has
/// not begun is checked against the Plan first (`authorize`: the signal the status records
/// for the node, of a plan and command that have not ended) and refused when it does not
/// pass; a copy is never accepted.
fn progress(sim: &mut Sim, kind: ObjectKind, name: &str) {
    let Some(data) = sim.cluster.signal(kind, name).cloned() else { return };
    let phase = data.phase();
    if phase.is_none() {
        let mut plan = autopilot_api::v1beta2::Plan::new(keys::PLAN_NAME, sim.plan.spec.clone());
        plan.status.clone_from(&sim.plan.status);
        let role = match kind {
            ObjectKind::ControlNode => crate::authorize::Role::Controller,
            ObjectKind::Node => crate::authorize::Role::Worker,
        };
        let node = crate::authorize::Node { name, role, platform: None };
        if let Err(refusal) = crate::authorize::authorize(Some(&plan), &data, node) {
            sim.cluster.report(kind, name, SignalPhase::Failed, Some(&refusal));
            return;
        }
        assert_ne!(data.created, COPIED, "a copy of a signal was accepted on {kind} {name}");
    }
    sim.cluster.report(kind, name, next_phase(phase), None);
}

/// [`Action::Copy`]: the signal of a node in flight, copied onto another object.
fn copy(sim: &mut Sim, from: u8, to: u8) {
    let Some((kind, source)) = pick(&busy_objects(&sim.cluster), from) else { return };
    let Some(data) = sim.cluster.signal(kind, &source).cloned() else { return };
    let names: Vec<String> = sim.cluster.objects(kind).keys().cloned().collect();
    let Some(onto) = pick(&names, to) else { return };
    let copied = SignalData { created: COPIED.to_owned(), status: None, ..data };
    if let Some(object) = sim.cluster.objects_mut(kind).get_mut(&onto) {
        object.signal = ObservedSignal::Valid(copied);
    }
}

/// Every signal a pass writes that a node has to accept (a new one, not yet answered) is one
/// the status written before it records for that node, of a plan and command that have not
/// ended: the node accepts it. No copy is ever the leader's.
fn check_recorded_signals(sim: &Sim, transition: &Transition) -> Result<(), TestCaseError> {
    let mut plan = autopilot_api::v1beta2::Plan::new(keys::PLAN_NAME, sim.plan.spec.clone());
    plan.status = Some(transition.status.clone());
    for effect in &transition.effects {
        let Effect::Signal { target, data } = effect else { continue };
        // Telling a failed node to stop may answer a copy it carries `Failed`: that starts
        // nothing. Anything else the leader writes is its own.
        if data.phase() == Some(SignalPhase::Failed) {
            continue;
        }
        prop_assert_ne!(&data.created, COPIED, "the leader wrote a copy to {:?}", target);
        if data.status.is_some() {
            continue;
        }
        let role = match target.kind {
            ObjectKind::ControlNode => crate::authorize::Role::Controller,
            ObjectKind::Node => crate::authorize::Role::Worker,
        };
        let node = crate::authorize::Node { name: &target.name, role, platform: None };
        let accepted = crate::authorize::authorize(Some(&plan), data, node);
        prop_assert!(accepted.is_ok(), "{target:?} refuses the leader's signal: {accepted:?}");
    }
    Ok(())
}

/// The names of every `Node`, then every `ControlNode`, of the simulated cluster.
fn object_names(sim: &Sim) -> Vec<String> {
    sim.cluster.nodes.keys().chain(sim.cluster.control_nodes.keys()).cloned().collect()
}

/// [`Action::FlipReadyz`]: a controller's readyz answer flips (ready, or refused).
fn flip_readyz(sim: &mut Sim, i: u8) {
    let names: Vec<String> = sim.cluster.readyz.keys().cloned().collect();
    if let Some(name) = pick(&names, i) {
        let flipped = match sim.cluster.readyz.get(&name) {
            Some(Readiness::Ready) => Readiness::NotReady("connection refused".to_owned()),
            Some(Readiness::NotReady(_)) | None => Readiness::Ready,
        };
        sim.cluster.readyz.insert(name, flipped);
    }
}

/// [`Action::Delete`]: a node or controller is deleted.
fn delete(sim: &mut Sim, i: u8) {
    // Rare on purpose: most indices miss.
    let names = object_names(sim);
    if i.is_multiple_of(4)
        && let Some(name) = pick(&names, i / 4)
    {
        sim.cluster = sim.cluster.clone().without(&name);
    }
}

/// [`Action::Health`]: the health gate's answer for a node.
fn health(sim: &mut Sim, i: u8, ok: bool) {
    let names = object_names(sim);
    if let Some(name) = pick(&names, i) {
        let answer = crate::plan::GateAnswer::Items(vec![serde_json::json!({"ok": ok})]);
        sim.cluster = sim.cluster.clone().answering(health_query(&name), answer);
    }
}

/// [`Action::Relabel`]: a node's zone label is set or removed.
fn relabel(sim: &mut Sim, i: u8, zone: u8) {
    let names = object_names(sim);
    if let Some(name) = pick(&names, i) {
        for kind in [ObjectKind::Node, ObjectKind::ControlNode] {
            if let Some(object) = sim.cluster.objects_mut(kind).get_mut(&name) {
                match zone_of(zone, 0) {
                    Some(zone) => object.labels.insert(ZONE.to_owned(), zone.to_owned()),
                    None => object.labels.remove(ZONE),
                };
            }
        }
    }
}

/// [`Action::Earlier`]: a node carries a signal of an earlier run (completed or not).
fn earlier(sim: &mut Sim, i: u8, done: bool) {
    let names = object_names(sim);
    if let Some(name) = pick(&names, i) {
        let now = sim.cluster.now;
        let mut data = earlier_run_signal(now);
        if done {
            data.status = Some(SignalStatus::new(SignalPhase::Completed, now));
        }
        let kind = if sim.cluster.nodes.contains_key(&name) {
            ObjectKind::Node
        } else {
            ObjectKind::ControlNode
        };
        sim.cluster = sim.cluster.clone().with_signal(kind, &name, data);
    }
}

/// [`Action::Edit`]: the plan's spec is edited (a new version) while it runs.
fn edit(sim: &mut Sim) {
    sim.plan = sim.plan.clone().edited(|spec| {
        for command in &mut spec.commands {
            if let Some(k0s) = command.k0supdate.as_mut() {
                k0s.version = "v1.35.2+k0s.0".to_owned();
            }
            if let Some(airgap) = command.airgapupdate.as_mut() {
                airgap.version = "v1.35.2+k0s.0".to_owned();
            }
        }
    });
}

/// A signal of another, earlier run of the plan (no status yet).
fn earlier_run_signal(now: jiff::Timestamp) -> SignalData {
    airgap_signal("earlier", "v1.35.0+k0s.0", "https://example.invalid/bundle", "")
        .created(&autopilot_api::signal::format_timestamp(now))
        .in_run(&format!("{UID}/0"))
}

// === Invariants ===

/// The objects of `kind` working on a signal this Plan wrote other than the one `command`'s
/// status records for them: an earlier run's, or one of this run (another command's, or a
/// copy the status does not record; a copy holds a slot while in flight, as the engine
/// documents). Name, run and phase.
fn earlier_in_flight(
    cluster: &ClusterFixture,
    kind: ObjectKind,
    command: &PlanCommandStatus,
    group: Group,
    run_id: Option<&String>,
) -> Vec<(String, String, Option<SignalPhase>)> {
    let this_plan = |run: &str| run.starts_with(&format!("{UID}/"));
    let recorded_here = |name: &str, data: &SignalData| {
        data.run_id.as_ref() == run_id
            && data.command.id == command.id
            && command_of(command).is_some_and(|resolved| {
                targets(command, resolved, group)
                    .iter()
                    .any(|t| t.name == name && crate::authorize::recorded(t, &data.created))
            })
    };
    cluster
        .objects(kind)
        .iter()
        .filter_map(|(name, object)| match &object.signal {
            ObservedSignal::Valid(data)
                if !recorded_here(name, data)
                    && data.run_id.as_deref().is_some_and(this_plan)
                    && !data.status.as_ref().is_some_and(|s| s.status.is_terminal()) =>
            {
                let run = data.run_id.clone().unwrap_or_default();
                Some((name.clone(), run, data.status.as_ref().map(|s| s.status)))
            }
            ObservedSignal::Valid(_) | ObservedSignal::None | ObservedSignal::Invalid(_) => None,
        })
        .collect()
}

fn command_of(status: &PlanCommandStatus) -> Option<Command<'_>> {
    status.frozen.as_ref().and_then(Command::resolve)
}

fn count(status: &PlanCommandStatus, group: Group, state: TargetState) -> usize {
    command_of(status).map_or(0, |command| {
        targets(status, command, group).iter().filter(|t| t.state == state).count()
    })
}

/// Check one pass: `before` is the status it read, `cluster` the snapshot.
fn check_pass(
    sim: &Sim,
    before: Option<&PlanStatus>,
    cluster: &ClusterFixture,
    transition: &Transition,
) -> Result<(), TestCaseError> {
    let after = &transition.status;
    check_in_flight(after)?;
    check_new_signals(sim, before, cluster, after)?;
    check_gates(before, after)?;
    check_rollbacks(after)?;
    check_terminal_idle(after)?;
    check_transitions(before, transition)?;
    check_effects(cluster, transition)?;
    check_idempotent(sim, cluster, transition)
}

/// In flight: never more than one controller, never more workers than the limit (and,
/// with waves, see [`check_waves`]), and no worker before every controller completed.
fn check_in_flight(after: &PlanStatus) -> Result<(), TestCaseError> {
    for command in &after.commands {
        let Some(kind) = command_of(command) else { continue };
        // Never more than one controller in flight.
        prop_assert!(
            count(command, Group::Controllers, TargetState::SignalSent) <= 1,
            "{after:#?}"
        );
        // Never more workers in flight than the limit.
        prop_assert!(
            count(command, Group::Workers, TargetState::SignalSent)
                <= kind.worker_concurrency(targets(command, kind, Group::Workers).len()),
            "{after:#?}"
        );
        // Failure-domain waves: never two groups in flight (signalled, or waiting for their
        // gates), never more than `concurrent` within a group, and a group goes only once
        // every group before it is done.
        if kind.group_by().is_some() {
            check_waves(command, kind, after)?;
        }
        // No worker is signalled before every controller completed.
        let workers_started = targets(command, kind, Group::Workers).iter().any(|t| {
            matches!(
                t.state,
                TargetState::SignalSent
                    | TargetState::SignalCompleted
                    | TargetState::SignalApplyFailed
            )
        });
        if workers_started {
            prop_assert!(
                targets(command, kind, Group::Controllers)
                    .iter()
                    .all(|t| t.state == TargetState::SignalCompleted),
                "a worker went before the controllers: {after:#?}"
            );
        }
    }
    Ok(())
}

/// Failure-domain waves: never two groups in flight (signalled, or waiting for their
/// gates), never more than `concurrent` within a group, and a group goes only once every
/// group before it is done.
fn check_waves(
    command: &PlanCommandStatus,
    kind: Command<'_>,
    after: &PlanStatus,
) -> Result<(), TestCaseError> {
    let workers = targets(command, kind, Group::Workers);
    let busy = |t: &&autopilot_api::v1beta2::TargetStatus| {
        t.state == TargetState::SignalSent
            || command.gating.iter().any(|run| run.nodes.contains(&t.name))
    };
    let mut in_flight: Vec<Option<&str>> =
        workers.iter().filter(busy).map(|t| t.group.as_deref()).collect();
    in_flight.dedup();
    in_flight.sort();
    in_flight.dedup();
    prop_assert!(in_flight.len() <= 1, "two groups in flight {in_flight:?}: {after:#?}");
    for group in crate::plan::rules::waves::group_order(workers) {
        let members: Vec<_> = workers.iter().filter(|t| t.group.as_deref() == group).collect();
        let sent = members.iter().filter(|t| t.state == TargetState::SignalSent).count();
        prop_assert!(
            sent <= kind.worker_concurrency(members.len()),
            "more than concurrent in group {group:?}: {after:#?}"
        );
    }
    let rank = crate::plan::rules::waves::group_rank;
    // Signalled: in flight, done or failed by its node (a target failed without a
    // signal, its object gone or its platform missing, did not go).
    let signalled = |t: &&autopilot_api::v1beta2::TargetStatus| match t.state {
        TargetState::SignalSent | TargetState::SignalCompleted | TargetState::SignalApplyFailed => {
            true
        }
        TargetState::SignalPending
        | TargetState::MissingPlatform
        | TargetState::MissingSignalNode => false,
    };
    for started in workers.iter().filter(signalled) {
        let earlier_undone = workers.iter().any(|t| {
            rank(t.group.as_deref()) < rank(started.group.as_deref()) && !t.state.is_terminal()
        });
        prop_assert!(
            !earlier_undone,
            "{} went before an earlier group was done: {after:#?}",
            started.name
        );
    }
    Ok(())
}

/// Newly signalled targets: never while paused or aborted, never once failures are past
/// the budget, and never beyond the limit counting earlier runs' nodes in flight.
fn check_new_signals(
    sim: &Sim,
    before: Option<&PlanStatus>,
    cluster: &ClusterFixture,
    after: &PlanStatus,
) -> Result<(), TestCaseError> {
    for command in &after.commands {
        let Some(kind) = command_of(command) else { continue };
        let fresh: usize =
            kind.groups().iter().map(|&g| newly_sent(before, after, command, kind, g)).sum();
        if fresh == 0 {
            continue;
        }
        prop_assert!(!sim.plan.steering.paused, "signalled while paused: {after:#?}");
        prop_assert!(!sim.plan.steering.aborted, "signalled while aborted: {after:#?}");
        let failed_workers =
            targets(command, kind, Group::Workers).iter().filter(|t| t.state.is_failure()).count();
        let failed_controllers = targets(command, kind, Group::Controllers)
            .iter()
            .filter(|t| t.state.is_failure())
            .count();
        prop_assert!(failed_controllers == 0, "signalled after a controller failed");
        prop_assert!(
            failed_workers <= kind.max_failures(),
            "signalled with {failed_workers} failed workers: {after:#?}"
        );
        let deadline = kind.progress_timeout(sim.policy.node_progress_timeout);
        if newly_sent(before, after, command, kind, Group::Workers) > 0 {
            check_earlier_runs(cluster, command, kind, after, deadline)?;
            check_canaries_first(command, kind, after)?;
        }
    }
    Ok(())
}

/// How many targets of `group` the pass newly signalled (in `SignalSent` now, not in the
/// same run's status it read).
fn newly_sent(
    before: Option<&PlanStatus>,
    after: &PlanStatus,
    command: &PlanCommandStatus,
    kind: Command<'_>,
    group: Group,
) -> usize {
    let old = before
        .filter(|before| before.run_id == after.run_id)
        .and_then(|before| before.commands.iter().find(|c| c.id == command.id));
    targets(command, kind, group)
        .iter()
        .filter(|t| t.state == TargetState::SignalSent)
        .filter(|t| {
            !old.is_some_and(|old| {
                targets(old, kind, group)
                    .iter()
                    .any(|o| o.name == t.name && o.state == TargetState::SignalSent)
            })
        })
        .count()
}

/// Earlier runs' nodes in flight: every entry kept is in flight and dated no later than
/// the pass, none is left untracked with room, and those still counting keep the worker
/// limit.
fn check_earlier_runs(
    cluster: &ClusterFixture,
    command: &PlanCommandStatus,
    kind: Command<'_>,
    after: &PlanStatus,
    deadline: Duration,
) -> Result<(), TestCaseError> {
    let in_flight = earlier_in_flight(
        cluster,
        kind.object_kind(Group::Workers),
        command,
        Group::Workers,
        after.run_id.as_ref(),
    );
    let workers = targets(command, kind, Group::Workers);
    let limit = kind.worker_concurrency(workers.len());
    // Every entry kept is a signal in flight, timed on the leader's clock; when some
    // are not kept, the entries fill the room.
    let tracked = &command.earlier_runs;
    for entry in tracked {
        prop_assert!(
            in_flight.contains(&(entry.name.clone(), entry.run_id.clone(), entry.phase)),
            "{entry:?} is kept but not in flight: {after:#?}"
        );
        prop_assert!(entry.since.0 <= cluster.now, "{entry:?} dated after the pass");
    }
    prop_assert!(
        in_flight.len() <= tracked.len() || tracked.len() >= limit,
        "earlier-run nodes in flight left untracked with room: {after:#?}"
    );
    let counting = tracked
        .iter()
        .filter(|entry| {
            cluster.now.duration_since(entry.since.0)
                < jiff::SignedDuration::try_from(deadline).expect("small")
        })
        .count();
    prop_assert!(
        count(command, Group::Workers, TargetState::SignalSent) + counting <= limit,
        "{counting} earlier-run node(s) in flight and the limit exceeded: {after:#?}"
    );
    Ok(())
}

/// Canaries first: no other worker before every canary completed. With waves the
/// canaries are the first workers of the first group.
fn check_canaries_first(
    command: &PlanCommandStatus,
    kind: Command<'_>,
    after: &PlanStatus,
) -> Result<(), TestCaseError> {
    let workers = targets(command, kind, Group::Workers);
    if kind.canary() > 0 {
        let first = crate::plan::rules::waves::group_order(workers).first().copied();
        let mut names: Vec<&str> = workers
            .iter()
            .filter(|t| kind.group_by().is_none() || Some(t.group.as_deref()) == first)
            .map(|t| t.name.as_str())
            .collect();
        names.sort_unstable();
        let canaries = &names[..kind.canary().min(names.len())];
        // Signalled: in flight, done or failed by its node. A worker that failed
        // without a signal (its object gone, no platform) did not go; one signalled
        // and then gone was seen here in the pass that signalled it.
        let others_started = workers.iter().any(|t| {
            !canaries.contains(&t.name.as_str())
                && match t.state {
                    TargetState::SignalSent
                    | TargetState::SignalCompleted
                    | TargetState::SignalApplyFailed => true,
                    TargetState::SignalPending
                    | TargetState::MissingPlatform
                    | TargetState::MissingSignalNode => false,
                }
        });
        if others_started {
            prop_assert!(
                workers
                    .iter()
                    .filter(|t| canaries.contains(&t.name.as_str()))
                    .all(|t| t.state == TargetState::SignalCompleted),
                "a worker went before the canaries completed: {after:#?}"
            );
        }
    }
    Ok(())
}

/// Gates: a node waiting for its gates keeps its slot; with batch gates a new wave goes
/// only once the last one is done and judged.
fn check_gates(before: Option<&PlanStatus>, after: &PlanStatus) -> Result<(), TestCaseError> {
    for command in &after.commands {
        let Some(kind) = command_of(command) else { continue };
        if command.rollback.is_some() || kind.gates().is_empty() {
            continue;
        }
        let workers = targets(command, kind, Group::Workers);
        let gating = workers
            .iter()
            .filter(|t| t.state == TargetState::SignalCompleted)
            .filter(|t| {
                command.gating.iter().any(|run| run.failed.is_none() && run.nodes.contains(&t.name))
            })
            .count();
        prop_assert!(
            count(command, Group::Workers, TargetState::SignalSent) + gating
                <= kind.worker_concurrency(workers.len()),
            "{after:#?}"
        );
        let in_waves =
            kind.gates().iter().any(|g| g.after == autopilot_api::v1beta2::GateAfter::Batch);
        let old = before
            .filter(|before| before.run_id == after.run_id)
            .and_then(|before| before.commands.iter().find(|c| c.id == command.id));
        if let Some(old) = old.filter(|_| in_waves) {
            let is_fresh = |name: &str| {
                targets(old, kind, Group::Workers)
                    .iter()
                    .any(|o| o.name == name && o.state == TargetState::SignalPending)
            };
            let sent: Vec<&str> = workers
                .iter()
                .filter(|t| t.state == TargetState::SignalSent)
                .map(|t| t.name.as_str())
                .collect();
            if sent.iter().any(|name| is_fresh(name)) {
                prop_assert!(
                    sent.iter().all(|name| is_fresh(name)),
                    "a wave went out while the last one worked: {after:#?}"
                );
                prop_assert!(
                    command.gating.iter().all(|run| run.since.is_none()),
                    "a wave went out before the last one was judged: {after:#?}"
                );
            }
        }
    }
    Ok(())
}

/// A rollback touches only nodes the run changed, keeps the command's limits, and
/// signals nothing while paused.
fn check_rollbacks(after: &PlanStatus) -> Result<(), TestCaseError> {
    for command in &after.commands {
        let (Some(kind), Some(lists)) = (command_of(command), command.rollback.as_ref()) else {
            continue;
        };
        let undo = kind.rollback().expect("only an update is rolled back");
        for (group, undone) in
            [(Group::Controllers, &lists.controllers), (Group::Workers, &lists.workers)]
        {
            for target in undone {
                let changed = targets(command, kind, group).iter().any(|t| {
                    t.name == target.name
                        && t.state == TargetState::SignalCompleted
                        && (!matches!(kind, Command::K0s(_))
                            || t.from.as_deref() != Some(kind.version()))
                        && t.from == target.from
                });
                prop_assert!(
                    changed,
                    "{} is rolled back but the run did not change it",
                    target.name
                );
            }
        }
        let sent = |group: Group| {
            targets(command, undo, group)
                .iter()
                .filter(|t| t.state == TargetState::SignalSent)
                .count()
        };
        prop_assert!(sent(Group::Controllers) <= 1, "{after:#?}");
        prop_assert!(
            sent(Group::Workers)
                <= kind.worker_concurrency(targets(command, kind, Group::Workers).len()),
            "{after:#?}"
        );
        prop_assert!(
            sent(Group::Controllers) == 0 || sent(Group::Workers) == 0,
            "controllers are put back after the workers: {after:#?}"
        );
        if after.is_terminal() {
            prop_assert!(sent(Group::Controllers) + sent(Group::Workers) == 0, "{after:#?}");
        }
    }
    Ok(())
}

/// A terminal run has nothing in flight.
fn check_terminal_idle(after: &PlanStatus) -> Result<(), TestCaseError> {
    if after.is_terminal() {
        for command in &after.commands {
            let Some(kind) = command_of(command) else { continue };
            for &group in kind.groups() {
                prop_assert!(
                    targets(command, kind, group)
                        .iter()
                        .all(|t| t.state != TargetState::SignalSent),
                    "a terminal plan with a node in flight: {after:#?}"
                );
            }
        }
    }
    Ok(())
}

/// Transitions are in the phase tables; terminal states stay terminal within a run.
fn check_transitions(
    before: Option<&PlanStatus>,
    transition: &Transition,
) -> Result<(), TestCaseError> {
    let after = &transition.status;
    let same_run = before.is_some_and(|before| {
        before.run_id.is_some()
            && before.run_id == after.run_id
            && before.state != PlanStateType::NewPlan
    });
    if let Some(before) = before.filter(|_| same_run) {
        prop_assert!(
            phases::plan_transition_allowed(before.state, after.state),
            "plan {} -> {}",
            before.state,
            after.state
        );
        let reopened = before.rollback.is_none() && after.rollback.is_some();
        if before.is_terminal() && !reopened {
            // An aborted run whose spec changed since observes the new generation (its own
            // stays in `runGeneration`) and says the new spec does not run: only those and
            // the conditions move.
            let run = |status: &PlanStatus| PlanStatus {
                conditions: Vec::new(),
                observed_generation: status.run_generation(),
                run_generation: None,
                ..status.clone()
            };
            if after.run_generation.is_some() {
                prop_assert_eq!(run(before), run(after), "a terminal run changed");
            } else {
                prop_assert_eq!(before, after, "a terminal run changed");
            }
            // An ended run only tells a failed node again that it failed (a write lost to
            // a crash); the signal checks below hold it to that.
            prop_assert!(
                transition.effects.iter().all(|effect| matches!(
                    effect,
                    Effect::Signal { data, .. }
                        if data.status.as_ref().map(|s| s.status) == Some(SignalPhase::Failed)
                )),
                "{:#?}",
                transition.effects
            );
        }
        prop_assert_eq!(before.commands.len(), after.commands.len());
        for (old, new) in before.commands.iter().zip(&after.commands) {
            check_command_transitions(old, new)?;
        }
    } else {
        prop_assert!(phases::plan_transition_allowed(PlanStateType::NewPlan, after.state));
        for command in &after.commands {
            prop_assert!(phases::plan_transition_allowed(PlanStateType::NewPlan, command.state));
            let Some(kind) = command_of(command) else { continue };
            for &group in kind.groups() {
                for target in targets(command, kind, group) {
                    prop_assert!(phases::new_target_allowed(target.state), "{}", target.state);
                }
            }
        }
    }
    Ok(())
}

/// One command's transitions within a run: in the phase tables, its frozen copy, its
/// targets, their groups and its rollback targets unchanged.
fn check_command_transitions(
    old: &PlanCommandStatus,
    new: &PlanCommandStatus,
) -> Result<(), TestCaseError> {
    prop_assert!(
        phases::plan_transition_allowed(old.state, new.state),
        "command {} {} -> {}",
        new.id,
        old.state,
        new.state
    );
    prop_assert_eq!(&old.frozen, &new.frozen, "the frozen command changed");
    let Some(kind) = command_of(new) else { return Ok(()) };
    if let (Some(undo), Some(_)) = (kind.rollback(), old.rollback.as_ref()) {
        for &group in undo.groups() {
            let old_targets = targets(old, undo, group);
            let new_targets = targets(new, undo, group);
            prop_assert_eq!(old_targets.len(), new_targets.len(), "rollback targets are frozen");
            for (old_target, target) in old_targets.iter().zip(new_targets) {
                prop_assert!(
                    phases::target_transition_allowed(old_target.state, target.state),
                    "rollback of {} {} -> {}",
                    target.name,
                    old_target.state,
                    target.state
                );
            }
        }
    }
    for &group in kind.groups() {
        let old_targets = targets(old, kind, group);
        let new_targets = targets(new, kind, group);
        if old.state != PlanStateType::NewPlan {
            prop_assert_eq!(old_targets.len(), new_targets.len(), "targets are frozen");
        }
        for target in new_targets {
            if old.state != PlanStateType::NewPlan
                && let Some(old_target) = old_targets.iter().find(|t| t.name == target.name)
            {
                prop_assert_eq!(&old_target.group, &target.group, "groups are frozen");
            }
            match old_targets.iter().find(|t| t.name == target.name) {
                Some(old_target) => prop_assert!(
                    phases::target_transition_allowed(old_target.state, target.state),
                    "{} {} -> {}",
                    target.name,
                    old_target.state,
                    target.state
                ),
                None => prop_assert!(phases::new_target_allowed(target.state)),
            }
        }
    }
    Ok(())
}

/// The pass's effects: signals (see [`check_signal`]), no Pod, gate checks asked only of
/// nodes of this run's gate runs, pre-staging asked only of this run's pending targets,
/// Events with known reasons.
fn check_effects(cluster: &ClusterFixture, transition: &Transition) -> Result<(), TestCaseError> {
    let after = &transition.status;
    for effect in &transition.effects {
        match effect {
            Effect::Signal { target, data } => check_signal(cluster, after, target, data)?,
            // The generated plans have no scheduler check: no Pod is created, and the
            // snapshot has none to delete.
            Effect::CreatePod(pod) => prop_assert!(false, "created Pod {:?}", pod.metadata.name),
            Effect::DeletePod { name, .. } => prop_assert!(false, "deleted Pod {name}"),
            // Gate checks are asked only of nodes of this run's gate runs.
            Effect::GateCheck { target, request } => {
                prop_assert_eq!(Some(&request.run_id), after.run_id.as_ref());
                let command = &after.commands[request.command as usize];
                prop_assert!(
                    command.gating.iter().any(|run| run.nodes.contains(&target.name)),
                    "asked {} to run gate checks, which is in no gate run",
                    target.name
                );
            }
            // Pre-staging is asked only of this run's targets that were not signalled yet.
            Effect::Prestage { target, request } => {
                prop_assert_eq!(Some(&request.run_id), after.run_id.as_ref());
                let command = &after.commands[request.command as usize];
                let base = command_of(command).expect("a pre-staging command resolves");
                let pending = base.groups().iter().any(|&group| {
                    targets(command, base, group)
                        .iter()
                        .any(|t| t.name == target.name && t.state == TargetState::SignalPending)
                });
                prop_assert!(pending, "asked {} to stage, which is not pending", target.name);
            }
            Effect::Event { reason, .. } => {
                prop_assert!(reasons::ALL.contains(reason), "unknown reason {reason}");
            }
        }
    }
    Ok(())
}

/// Signals: only to SignalSent targets of the run, with the frozen command, never to an
/// object that already carries this run's signal for that command (but over a copy, or to
/// move the leader's own on after its drain).
fn check_signal(
    cluster: &ClusterFixture,
    after: &PlanStatus,
    target: &SignalTarget,
    data: &SignalData,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(data.run_id.as_ref(), after.run_id.as_ref());
    prop_assert_eq!(Some(&data.plan_id), after.plan_id.as_ref());
    let command = &after.commands[data.command.id as usize];
    let base = command_of(command).expect("a signalled command resolves");
    if let Some(rollback) = &data.command.rollback {
        // A rollback signal names the version the target ran before the run.
        let undo = base.rollback().expect("an update");
        let target_from = undo.groups().iter().find_map(|&group| {
            targets(command, undo, group)
                .iter()
                .find(|t| t.name == target.name && undo.object_kind(group) == target.kind)
                .map(|t| t.from.clone())
        });
        prop_assert_eq!(target_from, Some(Some(rollback.version.clone())));
    }
    let kind =
        if data.command.rollback.is_some() { base.rollback().expect("an update") } else { base };
    if data.command.rollback.is_none() {
        prop_assert_eq!(
            data.command.k0supdate.as_ref().map(|u| u.version.as_str()).or(data
                .command
                .airgapupdate
                .as_ref()
                .map(|u| u.version.as_str())),
            Some(kind.version())
        );
    }
    // A node that missed its progress deadline gets its own signal back as
    // `Failed`; every other signal goes to a `SignalSent` target.
    let failed_by_deadline =
        data.status.as_ref().map(|status| status.status) == Some(SignalPhase::Failed);
    let wanted =
        if failed_by_deadline { TargetState::SignalApplyFailed } else { TargetState::SignalSent };
    let sent = kind.groups().iter().any(|&group| {
        kind.object_kind(group) == target.kind
            && targets(command, kind, group)
                .iter()
                .any(|t| t.name == target.name && t.state == wanted)
    });
    prop_assert!(sent, "signal to {} which is not {wanted}", target.name);
    if failed_by_deadline {
        // Only a node that carries this run's signal is told it failed.
        let carried = cluster.signal(target.kind, &target.name);
        prop_assert!(
            carried.is_some_and(|carried| carried.run_id == data.run_id
                && carried.created == data.created
                && carried.command == data.command),
            "failed {} which does not carry this run's signal",
            target.name
        );
        return Ok(());
    }
    if let Some(carried) = cluster.signal(target.kind, &target.name) {
        let this_runs = carried.run_id == data.run_id
            && carried.plan_id == data.plan_id
            && carried.command.id == data.command.id
            && carried.command.rollback.is_some() == data.command.rollback.is_some();
        // Written over this run's signal only when that is not the leader's (a copy: the
        // node gets its recorded signal back), or to move its own on after the drain.
        let over_a_copy = carried.created == COPIED;
        let drained = carried.created == data.created
            && carried.phase() == Some(SignalPhase::Cordoning)
            && data.phase() == Some(SignalPhase::ApplyingUpdate);
        prop_assert!(
            !this_runs || over_a_copy || drained,
            "re-signalled {} which carries this run's signal",
            target.name
        );
    }
    Ok(())
}

/// Idempotence: the same snapshot with the new status changes nothing, and only the
/// identical signals repeat.
fn check_idempotent(
    sim: &Sim,
    cluster: &ClusterFixture,
    transition: &Transition,
) -> Result<(), TestCaseError> {
    let after = &transition.status;
    let mut again_plan = sim.plan.clone();
    again_plan.status = Some(after.clone());
    let again = pass_with(&again_plan, cluster, &sim.policy);
    prop_assert_eq!(&again.status, after, "a second pass changed the status");
    let mut first_signals: Vec<String> = transition
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::Signal { .. }))
        .map(|e| format!("{e:?}"))
        .collect();
    let mut second: Vec<String> = again.effects.iter().map(|e| format!("{e:?}")).collect();
    first_signals.sort();
    second.sort();
    prop_assert_eq!(second, first_signals, "a second pass emitted something new");
    Ok(())
}

/// DESIGN §11's invariant: once a pass that ends the run has been carried out (status and
/// signals written), no node works on a signal of the run: every node autopilot cordoned
/// for it has finished (an agent and the leader's drain uncordon a node on `Completed`
/// and on `Failed`), or been told it failed.
fn check_nothing_cordoned(sim: &Sim, transition: &Transition) -> Result<(), TestCaseError> {
    let status = &transition.status;
    if !status.is_terminal() {
        return Ok(());
    }
    for kind in [ObjectKind::ControlNode, ObjectKind::Node] {
        for object in sim.cluster.objects(kind).values() {
            let ObservedSignal::Valid(data) = &object.signal else { continue };
            // A copy is not the leader's: its node refuses it (`progress`), the drain too.
            if data.run_id != status.run_id || data.created == COPIED {
                continue;
            }
            prop_assert!(
                data.phase().is_some_and(SignalPhase::is_terminal),
                "{kind} {} still works on a signal of the ended run ({:?}): {status:#?}",
                object.name,
                data.phase()
            );
        }
    }
    Ok(())
}

fn run_scenario(scenario: &Scenario) -> Result<Sim, TestCaseError> {
    let mut sim = build(scenario);
    for action in &scenario.actions {
        match action {
            Action::Lost => {
                // Decided on what the leader sees, then lost: nothing is written.
                let _ = pass_with(&sim.plan, &sim.cluster, &sim.policy);
            }
            Action::Pass | Action::Crash => {
                let before = sim.plan.status.clone();
                let snapshot = sim.cluster.clone();
                let transition = match action {
                    Action::Crash => sim.pass_without_signals(),
                    _ => sim.pass(),
                };
                check_pass(&sim, before.as_ref(), &snapshot, &transition)?;
                check_recorded_signals(&sim, &transition)?;
                if matches!(action, Action::Pass) {
                    check_nothing_cordoned(&sim, &transition)?;
                }
            }
            other => act(&mut sim, other),
        }
    }
    Ok(sim)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_runs_keep_every_safety_invariant(
        scenario in scenario(prop::collection::vec(action(), 1..80))
    ) {
        run_scenario(&scenario)?;
    }

    #[test]
    fn a_healthy_cluster_always_completes_signalling_each_target_once(
        scenario in scenario(Just(Vec::new()))
    ) {
        let mut scenario = scenario;
        scenario.windows = None;
        let mut sim = build(&scenario);
        // No ghosts: static lists name existing objects only.
        for command in &mut sim.plan.spec.commands {
            let mut groups = Vec::new();
            if let Some(k0s) = command.k0supdate.as_mut() {
                groups.extend(k0s.targets.controllers.as_mut());
                groups.extend(k0s.targets.workers.as_mut());
            }
            if let Some(airgap) = command.airgapupdate.as_mut() {
                groups.push(&mut airgap.workers);
            }
            for target in groups {
                if let Some(list) = target.discovery.r#static.as_mut() {
                    list.nodes.retain(|name| name != "ghost");
                }
            }
        }
        // Every gate finds every node healthy.
        let all: Vec<String> =
            sim.cluster.nodes.keys().chain(sim.cluster.control_nodes.keys()).cloned().collect();
        for name in all {
            let healthy = crate::plan::GateAnswer::Items(vec![serde_json::json!({"ok": true})]);
            sim.cluster = sim.cluster.clone().answering(health_query(&name), healthy);
        }
        let mut signals: BTreeMap<(u32, String, String), usize> = BTreeMap::new();
        for _ in 0..200 {
            let before = sim.plan.status.clone();
            let snapshot = sim.cluster.clone();
            let transition = sim.pass();
            check_pass(&sim, before.as_ref(), &snapshot, &transition)?;
            for effect in &transition.effects {
                if let Effect::Signal { target, data } = effect {
                    *signals.entry((data.command.id, format!("{:?}", target.kind), target.name.clone())).or_default() += 1;
                }
            }
            if transition.status.is_terminal() {
                break;
            }
            // A soak ends with time alone.
            if busy_objects(&sim.cluster).is_empty()
                && let crate::plan::Requeue::After(delay) = transition.requeue
            {
                sim.cluster = sim.cluster.clone().later(delay);
            }
            for (kind, name) in busy_objects(&sim.cluster) {
                sim.cluster.report(kind, &name, SignalPhase::Completed, None);
            }
        }
        prop_assert_eq!(sim.plan.state(), PlanStateType::Completed, "{:#?}", sim.plan.status);
        prop_assert!(signals.values().all(|n| *n == 1), "{signals:?}");
    }
}
