//! Whether a signal is authorized by the Plan (DESIGN §14): pure, no I/O.
//!
//! A signal on a Node or ControlNode is only a pointer. Whoever may patch a Node can write
//! one, so neither the node agent nor the leader's drain acts on it because it is there:
//! [`authorize`] compares it with the frozen command of the Plan run it names. The signal
//! must name the Plan's current run (`runId` and `planId`), a command index the run has,
//! the command's kind, and exactly the payload the frozen command gives: the version, the
//! `forceupdate` flag, and the URL and sha256 of one platform entry (the node's own
//! platform, when the caller knows it). The node must be one of the command's targets, and a
//! preflight signal may name only checks the node was given. Every signal kind is matched
//! here, so a kind added later cannot skip the comparison (the match is exhaustive).
//!
//! And the signal must be the leader's: the node's target records it (`signalled` is the
//! signal's `created`; the leader writes that record before the signal), and neither the
//! plan nor the command has ended. Anyone who may patch a Node can copy a valid signal onto
//! it; only the leader can record one. The leader's drain is recorded the same way
//! (`drained`, see [`drained`]): a node goes on from `ApplyingUpdate` to its restart only
//! then.
//!
//! A rollback signal (DESIGN §15) carries no payload: it is authorized by the run's
//! rollback. The Plan must be rolling the run back (`status.rollback`); the command at the
//! signal's index must be of the kind rolled back (`k0supdate` for `of: k0s`,
//! `airgapupdate` for `of: airgap`); its `rollback` list must hold the node (among
//! `controllers` for a ControlNode, `workers` for a Node; an airgap rollback only workers)
//! with `from` equal to the signal's `version`; and the node must have completed the
//! command's update (`SignalCompleted` in its normal target list) from that same version.
//!
//! The agent also applies the https-or-sha256 rule itself ([`unverified`]): a payload over
//! plain http without a digest is refused unless the node allows it.
//!
//! Every refusal starts with `refused: ` and names what did not match, for the signal's
//! reason and the logs.
//!
//! Whether a read of the Plan settles the question at all (a `403` from an API server still
//! starting does not) is [`read`]'s decision.

use std::collections::BTreeMap;

use autopilot_api::gate_check::GateCheckRequest;
use autopilot_api::prestage::{PrestageRequest, PrestageState};
use autopilot_api::signal::{
    CommandAirgapUpdate, CommandK0sUpdate, CommandRollback, RollbackOf, SignalData, SignalPhase,
};
use autopilot_api::v1beta2::{
    GateCheck, Plan, PlanCommand, PlanCommandRollout, PlanCommandStatus, PlanResourceUrl,
    PlanStatus, TargetState, TargetStatus,
};
use autopilot_api::{ask, keys};

pub mod read;

/// Which list of a command's targets the signalled object belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A controller, signalled through its `ControlNode`.
    Controller,
    /// A worker (or a controller's own Node), signalled through its `Node`.
    Worker,
}

impl Role {
    fn describe(self) -> &'static str {
        match self {
            Self::Controller => "controllers",
            Self::Worker => "workers",
        }
    }
}

/// The signalled node, as the one who checks knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node<'a> {
    /// The object's name.
    pub name: &'a str,
    /// Which target list it must be in.
    pub role: Role,
    /// Its platform key (`linux-amd64`), when known: the agent knows its own; the leader
    /// accepts any of the command's platform entries.
    pub platform: Option<&'a str>,
}

/// `Ok` when `signal` matches the frozen command of the current run of `plan` for `node`,
/// with the frozen platform entry an update signal's payload matched (its signature is the
/// one the node checks; `None` for a preflight or rollback signal); otherwise the refusal
/// (starting with `refused: `).
pub fn authorize<'p>(
    plan: Option<&'p Plan>,
    signal: &SignalData,
    node: Node<'_>,
) -> Result<Option<&'p PlanResourceUrl>, String> {
    let Some(signal_run) = signal.run_id.as_deref() else {
        return Err(refused(
            "the signal names no plan run (runId); only signals written for a \
             run of Plan autopilot are acted on",
        ));
    };
    let (status, command, frozen) =
        current_command(plan, "signal", signal_run, &signal.plan_id, signal.command.id)?;
    let index = signal.command.id;
    ended(status, command, signal)?;
    let sent = &signal.command;
    let entry = match (&sent.k0supdate, &sent.airgapupdate, &sent.preflight, &sent.rollback) {
        (Some(update), None, None, None) => k0s(update, frozen, command, node).map(Some),
        (None, Some(update), None, None) => airgap(update, frozen, command, node).map(Some),
        (None, None, Some(preflight), None) => {
            preflight_checks(&preflight.checks, frozen, command, node).map(|()| None)
        }
        (None, None, None, Some(rollback)) => {
            rollback_of(rollback, status, frozen, command, node).map(|()| None)
        }
        (None, None, None, None)
        | (Some(_), Some(_), _, _)
        | (Some(_), _, Some(_), _)
        | (Some(_), _, _, Some(_))
        | (_, Some(_), Some(_), _)
        | (_, Some(_), _, Some(_))
        | (_, _, Some(_), Some(_)) => Err(refused(
            "the signal's command is not exactly one of k0supdate, airgapupdate, preflight \
             and rollback",
        )),
    }
    .map_err(|problem| refused(&format!("command {index} of run {signal_run}: {problem}")))?;
    signalled_by_leader(command, signal, node)?;
    not_rewound(command, signal, node)?;
    Ok(entry)
}

/// `Ok` unless `signal` is a rewind: an update or rollback signal the status records for
/// `node`, shown in a phase before the end its target already reached. A node's target
/// ends when the leader saw the node's terminal report (`SignalCompleted`,
/// `SignalApplyFailed`) or gave up on it; from then on the signal accepts only a terminal
/// phase (a `Completed` node may still report `Failed`: its post-update watch put the
/// previous binary back). Anything earlier was written back by someone else, and acting on
/// it would cordon, drain, download or restart a node that is done, past the plan's
/// `concurrent`: it is refused (starting with `refused: `), never acted on.
pub fn not_rewound(
    command: &PlanCommandStatus,
    signal: &SignalData,
    node: Node<'_>,
) -> Result<(), String> {
    if signal.command.preflight.is_some() {
        return Ok(());
    }
    let Some(target) = signal_target(command, signal, node) else { return Ok(()) };
    if !recorded(target, &signal.created) {
        return Ok(());
    }
    let phase = signal.phase();
    if accepts(target.state, phase) {
        return Ok(());
    }
    Err(refused(&format!(
        "rewound: the Plan records {} as {} for this signal (command {}), and a target that \
         ended accepts only its terminal phase, not {}; the signal is not acted on again",
        node.name,
        target.state,
        command.id,
        phase.map_or("a new signal", SignalPhase::as_str),
    )))
}

/// Whether a signal in `phase` (`None`: not answered yet) may be acted on for a target in
/// `state`: every phase while the target is in flight, only a terminal one after it ended.
fn accepts(state: TargetState, phase: Option<SignalPhase>) -> bool {
    match state {
        TargetState::SignalPending | TargetState::SignalSent => true,
        TargetState::SignalCompleted
        | TargetState::SignalApplyFailed
        | TargetState::MissingPlatform
        | TargetState::MissingSignalNode => phase.is_some_and(SignalPhase::is_terminal),
    }
}

/// `Ok` when the Plan status records that the leader finished draining `node` for `signal`
/// (its target's `drained` is the signal's `created`): only then may the node go on from
/// `ApplyingUpdate` to its restart (DESIGN §14). `signal` is one [`authorize`] accepted.
/// Otherwise why not (starting with `refused: `).
pub fn drained(plan: Option<&Plan>, signal: &SignalData, node: Node<'_>) -> Result<(), String> {
    let target = plan
        .and_then(|plan| plan.status.as_ref())
        .filter(|status| status.run_id == signal.run_id)
        .and_then(|status| status.commands.iter().find(|c| c.id == signal.command.id))
        .and_then(|command| signal_target(command, signal, node));
    match target.map(|target| (target.signalled.as_deref(), target.drained.as_deref())) {
        Some((_, Some(created))) if created == signal.created => Ok(()),
        // A run a leader from before these records signalled: its drain moved the signal on
        // itself (see `signalled_by_leader`).
        Some((None, None)) if target.is_some_and(|t| t.state == TargetState::SignalSent) => Ok(()),
        Some(_) | None => Err(refused(&format!(
            "the Plan does not record the drain of {} for this signal (created {}): the leader \
             did not move it to {}",
            node.name,
            signal.created,
            SignalPhase::ApplyingUpdate
        ))),
    }
}

/// A signal of a run that ended, or of a command that ended, starts nothing: the leader
/// ends a plan and a command only when no node is in flight (a rollback reopens the plan and
/// runs past its command's end).
fn ended(
    status: &PlanStatus,
    command: &PlanCommandStatus,
    signal: &SignalData,
) -> Result<(), String> {
    if status.state.is_terminal() {
        return Err(refused(&format!(
            "the plan has ended ({}); no node is signalled after its end",
            status.state
        )));
    }
    if signal.command.rollback.is_none() && command.state.is_terminal() {
        return Err(refused(&format!(
            "the plan has ended its command {} ({}); no node is signalled after its end",
            command.id, command.state
        )));
    }
    Ok(())
}

/// `Ok` when the status records that the leader wrote `signal` to `node`: its target (in
/// the list of the signal's kind and the node's role) records the signal's `created`. The
/// leader records it before it writes the signal; a signal anyone else copied onto the node
/// has no record.
fn signalled_by_leader(
    command: &PlanCommandStatus,
    signal: &SignalData,
    node: Node<'_>,
) -> Result<(), String> {
    let target = signal_target(command, signal, node);
    if target.is_some_and(|target| recorded(target, &signal.created)) {
        return Ok(());
    }
    match target.and_then(|t| t.signalled.as_deref()) {
        Some(created) => Err(refused(&format!(
            "not signalled by the leader: the Plan records the signal of {} created {created}, \
             not {}",
            node.name, signal.created
        ))),
        None => Err(refused(&format!(
            "not signalled by the leader: the Plan records no signal for {} in command {} of \
             run {}",
            node.name,
            command.id,
            signal.run_id.as_deref().unwrap_or_default()
        ))),
    }
}

/// Whether `target` records the signal created `created` as the leader's: its `signalled`
/// is that `created`. A run a leader from before these records signalled (CRD schema
/// generation 4) left none on its signalled targets (`SignalSent`, `SignalCompleted`), and
/// a node updated by such a run checks its signal again after its restart: those count. A
/// target not signalled yet records nothing, so no signal on it is the leader's.
pub fn recorded(target: &TargetStatus, created: &str) -> bool {
    match target.signalled.as_deref() {
        Some(record) => record == created,
        None => matches!(target.state, TargetState::SignalSent | TargetState::SignalCompleted),
    }
}

/// The node's target in `command`'s status for `signal`: in the list of the signal's kind
/// (an update's, a preflight's, or the rollback's) for the node's role.
fn signal_target<'s>(
    command: &'s PlanCommandStatus,
    signal: &SignalData,
    node: Node<'_>,
) -> Option<&'s TargetStatus> {
    let sent = &signal.command;
    let by_role = |controllers: &'s [TargetStatus], workers: &'s [TargetStatus]| match node.role {
        Role::Controller => controllers,
        Role::Worker => workers,
    };
    let list: &'s [TargetStatus] = if sent.rollback.is_some() {
        let rollback = command.rollback.as_ref()?;
        by_role(&rollback.controllers, &rollback.workers)
    } else if sent.preflight.is_some() {
        let preflight = command.preflight.as_ref()?;
        by_role(&preflight.controllers, &preflight.workers)
    } else if sent.airgapupdate.is_some() {
        match node.role {
            Role::Controller => &[],
            Role::Worker => command.airgapupdate.as_ref()?.workers.as_slice(),
        }
    } else {
        let k0s = command.k0supdate.as_ref()?;
        by_role(&k0s.controllers, &k0s.workers)
    };
    list.iter().find(|target| target.name == node.name)
}

/// What a request of the one request/report channel ([`ask`]) names, as the Plan records
/// it: an update command of the Plan's current run, its frozen copy, and the target list
/// of the node's role. Every kind of request is authorized from here
/// ([`gate_checks`], [`prestage`]), each adding what its kind requires.
pub struct Asked<'p> {
    /// The command's status.
    pub command: &'p PlanCommandStatus,
    /// What the frozen update command is.
    pub kind: StagingKind,
    /// Its rollout settings (gates, pre-staging).
    pub rollout: &'p PlanCommandRollout,
    /// Its payloads by platform.
    pub platforms: &'p BTreeMap<String, PlanResourceUrl>,
    /// The version it updates to.
    pub version: &'p str,
    /// Whether any version will do (a forced k0s update).
    pub any_version: bool,
    /// The targets of the node's role (`None`: the command has none, as an airgap update
    /// has no controllers).
    targets: Option<&'p [TargetStatus]>,
    /// `command <index> of run <run>`, for refusals.
    label: String,
}

impl<'p> Asked<'p> {
    /// A refusal naming the command.
    pub fn refuse(&self, problem: &str) -> String {
        refused(&format!("{}: {problem}", self.label))
    }

    /// The node's target, or the refusal.
    pub fn target(&self, node: Node<'_>) -> Result<&'p TargetStatus, String> {
        target(self.targets, node).map_err(|problem| self.refuse(&problem))
    }
}

/// The update command a request of kind `K` names, when `request` names the Plan's current
/// run (`runId` and `planId`) and an update command of it (`what_for` says what else a
/// command must be, in the refusal). Otherwise the refusal (starting with `refused: `).
pub fn asked<'p, K: ask::Kind>(
    plan: Option<&'p Plan>,
    request: &ask::Request<K>,
    node: Node<'_>,
    what_for: &str,
) -> Result<Asked<'p>, String> {
    let run = &request.run_id;
    let index = request.command;
    let (_, command, frozen) = current_command(plan, "request", run, &request.plan_id, index)?;
    let label = format!("command {index} of run {run}");
    let by_role = |controllers: &'p [TargetStatus], workers: &'p [TargetStatus]| match node.role {
        Role::Controller => controllers,
        Role::Worker => workers,
    };
    let asked = match (&frozen.k0supdate, &frozen.airgapupdate) {
        (Some(update), _) => Asked {
            command,
            kind: StagingKind::K0s,
            rollout: &update.rollout,
            platforms: &update.platforms,
            version: &update.version,
            any_version: update.forceupdate,
            targets: command.k0supdate.as_ref().map(|s| by_role(&s.controllers, &s.workers)),
            label,
        },
        (None, Some(update)) => Asked {
            command,
            kind: StagingKind::Airgap,
            rollout: &update.rollout,
            platforms: &update.platforms,
            version: &update.version,
            any_version: false,
            targets: match node.role {
                Role::Controller => None,
                Role::Worker => command.airgapupdate.as_ref().map(|s| s.workers.as_slice()),
            },
            label,
        },
        (None, None) => {
            return Err(refused(&format!("{label}: it is {}, not {what_for}", kind(frozen))));
        }
    };
    Ok(asked)
}

/// The checks a gate-check request (DESIGN §15) asks `node` to run, by gate id, when the
/// Plan authorizes it ([`asked`]): the request names an update command of the Plan's
/// current run whose frozen gates have a `check` for every id it names, and the command's
/// status lists the node (in the target list of its role) in a gate run that is open and
/// not failed. Otherwise the refusal (starting with `refused: `).
pub fn gate_checks(
    plan: Option<&Plan>,
    request: &GateCheckRequest,
    node: Node<'_>,
) -> Result<Vec<(String, GateCheck)>, String> {
    let asked = asked(plan, request, node, "an update command with gates")?;
    asked.target(node)?;
    let gating =
        asked.command.gating.iter().any(|gate_run| {
            gate_run.failed.is_none() && gate_run.nodes.iter().any(|n| n == node.name)
        });
    if !gating {
        return Err(asked.refuse(&format!("{} is in no open gate run", node.name)));
    }
    if request.asks.gates.is_empty() {
        return Err(asked.refuse("the request names no gate"));
    }
    let gates = &asked.rollout.gates;
    request
        .asks
        .gates
        .iter()
        .map(|id| {
            gates
                .iter()
                .find(|gate| &gate.id == id)
                .and_then(|gate| gate.check.clone())
                .map(|check| (id.clone(), check))
                .ok_or_else(|| asked.refuse(&format!("it has no check gate {id:?}")))
        })
        .collect()
}

/// What a pre-staging request (`prestage: true`) asks a node to stage, from the Plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Staging<'p> {
    /// The payload of the node's platform (URL, sha256, signature), from the frozen command.
    pub entry: &'p PlanResourceUrl,
    /// What the payload is.
    pub kind: StagingKind,
    /// The version the command updates to (a k0s binary's self-test must report it).
    pub version: &'p str,
    /// Any version will do (a forced k0s update).
    pub any_version: bool,
}

/// What a staged payload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagingKind {
    /// A k0s binary (`k0supdate`): downloaded, verified and self-tested.
    K0s,
    /// An airgap bundle (`airgapupdate`): downloaded and verified.
    Airgap,
}

/// What a pre-staging request asks `node` to stage, when the Plan authorizes it
/// ([`asked`]): the request names an update command of the Plan's current run whose frozen
/// copy has `prestage: true`; the command has not ended; its status lists the node (in the
/// target list of its role; airgap: workers only) as not signalled yet (`SignalPending`)
/// and asked to stage (`prestage: Requested`); and the frozen command has a payload for the
/// node's platform (the agent's own; required). The payload is the Plan's, never the
/// request's: a request names no URL. Otherwise the refusal (starting with `refused: `).
pub fn prestage<'p>(
    plan: Option<&'p Plan>,
    request: &PrestageRequest,
    node: Node<'_>,
) -> Result<Staging<'p>, String> {
    // Check 1: an update command that pre-stages.
    let asked = asked(plan, request, node, "an update command")?;
    if !asked.rollout.prestage {
        return Err(asked.refuse("it does not pre-stage (prestage is not set)"));
    }
    // Check 2: the command is running, and the leader asked this node, not yet signalled.
    if asked.command.state.is_terminal() {
        return Err(asked.refuse(&format!("it has ended ({})", asked.command.state)));
    }
    let target = asked.target(node)?;
    if target.state != TargetState::SignalPending
        || target.prestage != Some(PrestageState::Requested)
    {
        return Err(asked.refuse(&format!(
            "{} is not asked to stage (it is {}, pre-staging {})",
            node.name,
            target.state,
            target.prestage.map_or("not asked", PrestageState::as_str)
        )));
    }
    // Check 3: the payload of the node's own platform.
    let Some(platform) = node.platform else {
        return Err(asked.refuse("the node's platform is not known"));
    };
    let Some(entry) = asked.platforms.get(platform) else {
        return Err(
            asked.refuse(&format!("the Plan has no payload for this node's platform {platform}"))
        );
    };
    let (kind, version, any_version) = (asked.kind, asked.version, asked.any_version);
    Ok(Staging { entry, kind, version, any_version })
}

/// The status of the Plan's current run and its command `index` with the command's frozen
/// copy, when `run` and `plan_id` (of the `what`: a signal or a request) name that run;
/// otherwise the refusal.
fn current_command<'p>(
    plan: Option<&'p Plan>,
    what: &str,
    run: &str,
    plan_id: &str,
    index: u32,
) -> Result<(&'p PlanStatus, &'p PlanCommandStatus, &'p PlanCommand), String> {
    let Some(plan) = plan else {
        return Err(refused(&format!("Plan {} does not exist", keys::PLAN_NAME)));
    };
    let status = plan.status.as_ref();
    let plan_run = status.and_then(|status| status.run_id.as_deref());
    if plan_run != Some(run) {
        return Err(refused(&format!(
            "the {what}'s run {run} is not the current run of Plan {} ({})",
            keys::PLAN_NAME,
            plan_run.unwrap_or("none")
        )));
    }
    let Some(status) = status else {
        return Err(refused(&format!("Plan {} has no status", keys::PLAN_NAME)));
    };
    if status.plan_id.as_deref() != Some(plan_id) {
        return Err(refused(&format!(
            "the {what}'s planId {plan_id:?} is not run {run}'s ({:?})",
            status.plan_id.as_deref().unwrap_or_default()
        )));
    }
    let command = status.commands.iter().find(|command| command.id == index);
    command
        .and_then(|command| command.frozen.as_ref().map(|frozen| (status, command, frozen)))
        .ok_or_else(|| refused(&format!("run {run} has no command {index}")))
}

/// Why `update`'s payload may not be fetched by a node that does not allow unverified
/// payloads: plain http without a sha256 proves nothing about what arrives.
pub fn unverified(url: &str, sha256: &str) -> Option<String> {
    (url.starts_with("http://") && sha256.trim().is_empty()).then(|| {
        refused(&format!(
            "{url:?} is plain http without a sha256: nothing would verify what arrives; \
             serve it over https or give its sha256 (or run the node with \
             --allow-unverified-payloads)"
        ))
    })
}

fn refused(problem: &str) -> String {
    format!("refused: {problem}")
}

fn k0s<'p>(
    sent: &CommandK0sUpdate,
    frozen: &'p PlanCommand,
    command: &PlanCommandStatus,
    node: Node<'_>,
) -> Result<&'p PlanResourceUrl, String> {
    let Some(want) = &frozen.k0supdate else {
        return Err(format!("it is {}, not k0supdate", kind(frozen)));
    };
    same("version", &sent.version, &want.version)?;
    if sent.forceupdate != want.forceupdate {
        return Err(format!(
            "forceupdate is {}, the Plan says {}",
            sent.forceupdate, want.forceupdate
        ));
    }
    let entry = payload(&sent.url, &sent.sha256, &want.platforms, node.platform)?;
    let targets = command.k0supdate.as_ref().map(|status| match node.role {
        Role::Controller => &status.controllers,
        Role::Worker => &status.workers,
    });
    target(targets.map(Vec::as_slice), node).map(|_| entry)
}

fn airgap<'p>(
    sent: &CommandAirgapUpdate,
    frozen: &'p PlanCommand,
    command: &PlanCommandStatus,
    node: Node<'_>,
) -> Result<&'p PlanResourceUrl, String> {
    let Some(want) = &frozen.airgapupdate else {
        return Err(format!("it is {}, not airgapupdate", kind(frozen)));
    };
    same("version", &sent.version, &want.version)?;
    let entry = payload(&sent.url, &sent.sha256, &want.platforms, node.platform)?;
    // Airgap bundles go to workers only (a controller's bundle comes through its Node).
    let targets = match node.role {
        Role::Controller => None,
        Role::Worker => command.airgapupdate.as_ref().map(|status| status.workers.as_slice()),
    };
    target(targets, node).map(|_| entry)
}

fn preflight_checks(
    sent: &[String],
    frozen: &PlanCommand,
    command: &PlanCommandStatus,
    node: Node<'_>,
) -> Result<(), String> {
    if frozen.preflight.is_none() {
        return Err(format!("it is {}, not preflight", kind(frozen)));
    }
    let targets = command.preflight.as_ref().map(|status| match node.role {
        Role::Controller => status.controllers.as_slice(),
        Role::Worker => status.workers.as_slice(),
    });
    let target = target(targets, node)?;
    match sent.iter().find(|check| !target.checks.contains(check)) {
        Some(check) => Err(format!("check {check:?} is not one of {}'s checks", node.name)),
        None => Ok(()),
    }
}

/// A rollback of `node`'s update by this command: the run is being rolled back, the command
/// is of the kind rolled back, its rollback lists the node with the signal's version as the
/// node's "from", and the node completed the update from that version.
fn rollback_of(
    sent: &CommandRollback,
    status: &PlanStatus,
    frozen: &PlanCommand,
    command: &PlanCommandStatus,
    node: Node<'_>,
) -> Result<(), String> {
    // Check 1: the Plan rolls this run back (a rollback is never the node's own idea).
    if status.rollback.is_none() {
        return Err("the run is not being rolled back".to_owned());
    }
    // Check 2: the command updated what the signal rolls back; its targets for this node.
    let updated = match sent.of {
        RollbackOf::K0s => {
            if frozen.k0supdate.is_none() {
                return Err(format!("it is {}, not k0supdate (a rollback of k0s)", kind(frozen)));
            }
            command.k0supdate.as_ref().map(|status| match node.role {
                Role::Controller => status.controllers.as_slice(),
                Role::Worker => status.workers.as_slice(),
            })
        }
        RollbackOf::Airgap => {
            if frozen.airgapupdate.is_none() {
                return Err(format!(
                    "it is {}, not airgapupdate (a rollback of airgap)",
                    kind(frozen)
                ));
            }
            match node.role {
                Role::Controller => None,
                Role::Worker => {
                    command.airgapupdate.as_ref().map(|status| status.workers.as_slice())
                }
            }
        }
    };
    // Check 3: the run's rollback lists the node, putting back the signal's version.
    let rolled = command.rollback.as_ref().and_then(|status| match (sent.of, node.role) {
        (RollbackOf::K0s, Role::Controller) => Some(status.controllers.as_slice()),
        (RollbackOf::K0s | RollbackOf::Airgap, Role::Worker) => Some(status.workers.as_slice()),
        (RollbackOf::Airgap, Role::Controller) => None,
    });
    let Some(back) = rolled.and_then(|targets| targets.iter().find(|t| t.name == node.name)) else {
        return Err(format!("{} is not one of its rollback's {}", node.name, node.role.describe()));
    };
    from_is("its rollback", back, &sent.version)?;
    // Check 4: the node completed the update it undoes, from that same version.
    let target = target(updated, node)?;
    if target.state != TargetState::SignalCompleted {
        return Err(format!(
            "{} did not complete the update it would roll back (it is {})",
            node.name, target.state
        ));
    }
    from_is("the update", target, &sent.version)
}

/// The target's recorded "from" version must be `version`.
fn from_is(list: &str, target: &TargetStatus, version: &str) -> Result<(), String> {
    match target.from.as_deref() {
        Some(from) if from == version => Ok(()),
        Some(from) => Err(format!(
            "version is {version:?}, {list} records {} ran {from:?} before the run",
            target.name
        )),
        None => Err(format!(
            "{list} records no version {} ran before the run (the signal says {version:?})",
            target.name
        )),
    }
}

fn kind(frozen: &PlanCommand) -> &'static str {
    match (&frozen.k0supdate, &frozen.airgapupdate, &frozen.preflight) {
        (Some(_), _, _) => "k0supdate",
        (None, Some(_), _) => "airgapupdate",
        (None, None, Some(_)) => "preflight",
        (None, None, None) => "an empty command",
    }
}

fn same(field: &str, sent: &str, want: &str) -> Result<(), String> {
    if sent == want { Ok(()) } else { Err(format!("{field} is {sent:?}, the Plan says {want:?}")) }
}

/// The signal's URL and sha256 must be those of one platform entry: the node's own when its
/// platform is known, any otherwise. Digests compare without regard to case; an absent
/// digest is the empty string on the wire. Returns the entry matched.
fn payload<'p>(
    url: &str,
    sha256: &str,
    platforms: &'p std::collections::BTreeMap<String, PlanResourceUrl>,
    platform: Option<&str>,
) -> Result<&'p PlanResourceUrl, String> {
    let matches = |entry: &PlanResourceUrl| {
        entry.url == url
            && entry.sha256.as_deref().unwrap_or_default().eq_ignore_ascii_case(sha256.trim())
    };
    match platform {
        Some(platform) => match platforms.get(platform) {
            Some(entry) if matches(entry) => Ok(entry),
            Some(entry) if entry.url != url => {
                Err(format!("url {url:?} is not the Plan's for {platform} ({:?})", entry.url))
            }
            Some(_) => Err(format!("sha256 {sha256:?} is not the Plan's for {platform}")),
            None => Err(format!("the Plan has no payload for this node's platform {platform}")),
        },
        None => platforms.values().find(|entry| matches(entry)).ok_or_else(|| {
            format!("url {url:?} with sha256 {sha256:?} is none of the Plan's payloads")
        }),
    }
}

/// The node's entry in `targets` (the command's target list for its role).
fn target<'t>(
    targets: Option<&'t [TargetStatus]>,
    node: Node<'_>,
) -> Result<&'t TargetStatus, String> {
    targets
        .and_then(|targets| targets.iter().find(|target| target.name == node.name))
        .ok_or_else(|| format!("{} is not one of its {}", node.name, node.role.describe()))
}

#[cfg(test)]
mod tests;
