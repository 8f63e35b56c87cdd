//! Property tests: random clusters and plans, random node responses, crashes, readiness
//! flaps, deletions and spec edits, driven pass by pass; every pass is checked against the
//! safety invariants and the phase tables.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    PlanCommandStatus, PlanCommandTarget, PlanCommandTargetDiscovery,
    PlanCommandTargetDiscoverySelector, PlanCommandTargetDiscoveryStatic, PlanCommandTargetLimits,
    PlanStateType, PlanStatus, TargetState,
};
use proptest::prelude::*;

use super::fixtures::*;
use crate::plan::command::{Command, Group, targets};
use crate::plan::phases::{self, reasons};
use crate::plan::{Effect, ObjectKind, ObservedSignal, Readiness, Transition};

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
    (any::<bool>(), any::<bool>(), targeting(), targeting(), 1..=3u32).prop_map(
        |(k0s, forced, controllers, workers, concurrent)| CommandShape {
            k0s,
            forced,
            controllers,
            workers,
            concurrent,
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
        actions,
    )
        .prop_map(
            |(controllers, workers, controller_workers, arm, windows, commands, grace, actions)| {
                Scenario {
                    controllers,
                    workers,
                    controller_workers,
                    arm,
                    windows,
                    commands,
                    grace,
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
    let discovery = match targeting {
        Targeting::Nothing => return None,
        Targeting::All => PlanCommandTargetDiscovery {
            r#static: None,
            selector: Some(PlanCommandTargetDiscoverySelector::default()),
        },
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
            PlanCommandTargetDiscovery {
                r#static: Some(PlanCommandTargetDiscoveryStatic { nodes }),
                selector: None,
            }
        }
    };
    Some(PlanCommandTarget {
        discovery,
        limits: PlanCommandTargetLimits {
            concurrent: autopilot_api::v1beta2::Concurrency::Count(concurrent),
            ..PlanCommandTargetLimits::default()
        },
    })
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
            plan = plan.then_k0s_update("v1.35.1+k0s.0");
            let k0s =
                plan.spec.commands.last_mut().and_then(|c| c.k0supdate.as_mut()).expect("k0s");
            k0s.forceupdate = shape.forced;
            k0s.targets.controllers = target(&shape.controllers, &controller_candidates, 1);
            k0s.targets.workers = target(&shape.workers, &worker_candidates, shape.concurrent);
        } else {
            plan = plan.then_airgap_update("v1.35.1+k0s.0");
            let airgap = plan
                .spec
                .commands
                .last_mut()
                .and_then(|c| c.airgapupdate.as_mut())
                .expect("airgap");
            airgap.workers =
                target(&shape.workers, &worker_candidates, shape.concurrent).unwrap_or_default();
        }
    }
    Sim::new(plan, cluster).with_policy(|policy| {
        policy.readiness_grace = Duration::from_secs(scenario.grace);
    })
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
        Action::Pass | Action::Crash => {}
        Action::Progress(i) => {
            if let Some((kind, name)) = pick(&busy_objects(&sim.cluster), *i) {
                let phase = sim.cluster.signal(kind, &name).and_then(|data| data.phase());
                sim.cluster.report(kind, &name, next_phase(phase), None);
            }
        }
        Action::Fail(i) => {
            if let Some((kind, name)) = pick(&busy_objects(&sim.cluster), *i) {
                let phase =
                    if i % 2 == 0 { SignalPhase::Failed } else { SignalPhase::FailedDownload };
                sim.cluster.report(kind, &name, phase, Some("injected failure"));
            }
        }
        Action::FlipReadyz(i) => {
            let names: Vec<String> = sim.cluster.readyz.keys().cloned().collect();
            if let Some(name) = pick(&names, *i) {
                let flipped = match sim.cluster.readyz.get(&name) {
                    Some(Readiness::Ready) => Readiness::NotReady("connection refused".to_owned()),
                    Some(Readiness::NotReady(_)) | None => Readiness::Ready,
                };
                sim.cluster.readyz.insert(name, flipped);
            }
        }
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
        Action::Delete(i) => {
            // Rare on purpose: most indices miss.
            let names: Vec<String> =
                sim.cluster.nodes.keys().chain(sim.cluster.control_nodes.keys()).cloned().collect();
            if i % 4 == 0
                && let Some(name) = pick(&names, i / 4)
            {
                sim.cluster = sim.cluster.clone().without(&name);
            }
        }
        Action::Edit => {
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
    }
}

// === Invariants ===

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

    // Transitions are in the phase tables; terminal states stay terminal within a run.
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
        if before.is_terminal() {
            prop_assert_eq!(before, after, "a terminal run changed");
            prop_assert!(transition.effects.is_empty());
        }
        prop_assert_eq!(before.commands.len(), after.commands.len());
        for (old, new) in before.commands.iter().zip(&after.commands) {
            prop_assert!(
                phases::plan_transition_allowed(old.state, new.state),
                "command {} {} -> {}",
                new.id,
                old.state,
                new.state
            );
            prop_assert_eq!(&old.frozen, &new.frozen, "the frozen command changed");
            let Some(kind) = command_of(new) else { continue };
            for &group in kind.groups() {
                let old_targets = targets(old, kind, group);
                let new_targets = targets(new, kind, group);
                if old.state != PlanStateType::NewPlan {
                    prop_assert_eq!(old_targets.len(), new_targets.len(), "targets are frozen");
                }
                for target in new_targets {
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

    // Signals: only to SignalSent targets of the run, with the frozen command, never to an
    // object that already carries this run's signal for that command.
    for effect in &transition.effects {
        match effect {
            Effect::Signal { target, data } => {
                prop_assert_eq!(data.run_id.as_ref(), after.run_id.as_ref());
                prop_assert_eq!(Some(&data.plan_id), after.plan_id.as_ref());
                let command = &after.commands[data.command.id as usize];
                let kind = command_of(command).expect("a signalled command resolves");
                prop_assert_eq!(
                    data.command.k0supdate.as_ref().map(|u| u.version.as_str()).or(data
                        .command
                        .airgapupdate
                        .as_ref()
                        .map(|u| u.version.as_str())),
                    Some(kind.version())
                );
                // A node that missed its progress deadline gets its own signal back as
                // `Failed`; every other signal goes to a `SignalSent` target.
                let failed_by_deadline =
                    data.status.as_ref().map(|status| status.status) == Some(SignalPhase::Failed);
                let wanted = if failed_by_deadline {
                    TargetState::SignalApplyFailed
                } else {
                    TargetState::SignalSent
                };
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
                    continue;
                }
                if let Some(carried) = cluster.signal(target.kind, &target.name) {
                    prop_assert!(
                        !(carried.run_id == data.run_id
                            && carried.plan_id == data.plan_id
                            && carried.command.id == data.command.id),
                        "re-signalled {} which carries this run's signal",
                        target.name
                    );
                }
            }
            Effect::Event { reason, .. } => {
                prop_assert!(reasons::ALL.contains(reason), "unknown reason {reason}");
            }
        }
    }

    // Idempotence: the same snapshot with the new status changes nothing, and only the
    // identical signals repeat.
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

fn run_scenario(scenario: &Scenario) -> Result<Sim, TestCaseError> {
    let mut sim = build(scenario);
    for action in &scenario.actions {
        match action {
            Action::Pass | Action::Crash => {
                let before = sim.plan.status.clone();
                let snapshot = sim.cluster.clone();
                let transition = match action {
                    Action::Crash => sim.pass_without_signals(),
                    _ => sim.pass(),
                };
                check_pass(&sim, before.as_ref(), &snapshot, &transition)?;
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
            for (kind, name) in busy_objects(&sim.cluster) {
                sim.cluster.report(kind, &name, SignalPhase::Completed, None);
            }
        }
        prop_assert_eq!(sim.plan.state(), PlanStateType::Completed, "{:#?}", sim.plan.status);
        prop_assert!(signals.values().all(|n| *n == 1), "{signals:?}");
    }
}
