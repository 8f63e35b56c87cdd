//! NewPlan: resolve every command's targets once, run the pre-checks, and record the result
//! in the command statuses (REF §3.4, §4; DESIGN §4).
//!
//! Commands are processed in order. The first one that fails gives its state to itself and
//! to the plan; the commands after it keep `NewPlan`, so the status shows how far it got.
//! A command whose payload no node could verify is refused here, before any node is
//! signalled ([`crate::plan::rules::payload`]), and so is every field the schema lets through but no
//! node or scheduler could act on ([`field_problems`]): a plan never sends a signal that a
//! node will refuse. Last, the versions each `k0supdate` leaves are judged against the
//! upgrade-path and skew rules ([`crate::plan::rules::skew`]), walking the commands in order.
//!
//! A node's self-report fails at most that node: a worker target whose own published keys
//! ask for a signature the payload lacks, or whose own published version alone breaks a
//! skew rule, is recorded `SignalApplyFailed` with the reason (naming the node, the key or
//! the rule), and the command's `limits.maxFailures` counts it like any failed target; a
//! worker that is no target is named in a Warning Event. What a controller reports about
//! itself (its keys, its version) still refuses the command: see `docs/security.md`.

use std::collections::BTreeMap;

use autopilot_api::duration;
use autopilot_api::v1beta2::{
    PlanCommand, PlanCommandStatus, PlanCommandTargetLimits, PlanStateType, PlanStatus,
    TargetState, TargetStatus,
};

use crate::plan::model::command::{
    Command, Group, REFUSED_BY_OWN_REPORT, kind_problem, targets_mut,
};
use crate::plan::model::decision::Effect;
use crate::plan::model::inputs::{Gaps, Inputs};
use crate::plan::model::lookups::RemovedApiUse;
use crate::plan::rules::payload;
use crate::plan::rules::removed_apis::blocking_use;
use crate::plan::rules::skew::{self, Fleet};
use crate::plan::rules::targets::{NewCommand, discover};

/// NewPlan's refusal of a Plan whose `spec.id` is empty (or blank).
pub(crate) const EMPTY_PLAN_ID: &str =
    "spec.id is empty: every signal carries the plan's id (planId), so a plan needs one";

/// Run NewPlan over every command of a freshly started run. Sets the plan state to
/// `SchedulableWait` on success or to the failing command's state.
///
/// Returns the Warning Events about payloads downloaded without an integrity check, for
/// every command, when NewPlan succeeds (empty when it fails: nothing is downloaded then).
pub(in crate::plan) fn new_plan(
    inputs: &Inputs<'_>,
    gaps: &mut Gaps<'_>,
    status: &mut PlanStatus,
    findings: &[RemovedApiUse],
) -> Vec<Effect> {
    let mut warnings = Vec::new();
    let run_id = status.run_id.clone().unwrap_or_default();
    let plan_id = status.plan_id.clone().unwrap_or_default();
    // Check 0: every signal carries the plan's id (`planId`), which a node refuses empty.
    // The CRD's schema requires one; a Plan the schema did not check must not start either.
    if plan_id.trim().is_empty() {
        refuse_empty_plan_id(status);
        return Vec::new();
    }
    let mut fleet = Fleet::observe(inputs);
    let mut outcomes = Vec::with_capacity(status.commands.len());
    // Workers whose own reported version breaks a skew rule, and what it breaks.
    let mut own_skew: BTreeMap<String, Vec<skew::Violation>> = BTreeMap::new();
    for command_status in &status.commands {
        let index = command_status.id;
        let mut outcome = match &command_status.frozen {
            Some(frozen) => new_command(inputs, &run_id, index, frozen, findings),
            // Crash safety: a fresh run always freezes every command; a missing copy means
            // the status was edited by hand, and a command we cannot see must not run.
            None => NewCommand::failed(
                PlanStateType::Warning,
                format!("command {index} has no frozen copy in the status"),
            ),
        };
        // Check 8: the version skew the command leaves, walked over the commands before it.
        if outcome.state == PlanStateType::SchedulableWait
            && let Some(Command::K0s(k0s)) =
                command_status.frozen.as_ref().and_then(Command::resolve)
        {
            // The rules judge each controller by the version its API server answers on
            // `/version`, probed with `/readyz`: name those not probed yet (this pass goes
            // on; the resolve loop passes again with the answers).
            gaps.lacks_probes(inputs.observed.control_nodes.keys());
            let skew = SkewCheck { inputs, plan_id: &plan_id, index, version: &k0s.version };
            for (worker, violations) in skew.check(&mut fleet, &mut outcome) {
                own_skew.entry(worker).or_default().extend(violations);
            }
        }
        let state = outcome.state;
        outcomes.push(outcome);
        if state != PlanStateType::SchedulableWait {
            for (command_status, outcome) in status.commands.iter_mut().zip(outcomes) {
                record_command(command_status, outcome);
            }
            status.state = state;
            return Vec::new();
        }
    }
    warnings.extend(fail_own_skew(&mut outcomes, own_skew, &plan_id));
    for (command_status, outcome) in status.commands.iter_mut().zip(outcomes) {
        warnings.extend(record_command(command_status, outcome));
    }
    status.state = PlanStateType::SchedulableWait;
    warnings
}

/// Check 8 (continued): every worker whose own reported version breaks a skew rule
/// (`own_skew`) fails as a target of every update command of the run, with the reason; one
/// that is no target gets a Warning Event and the run goes on. Returns those Events.
fn fail_own_skew(
    outcomes: &mut [NewCommand],
    own_skew: BTreeMap<String, Vec<skew::Violation>>,
    plan_id: &str,
) -> Vec<Effect> {
    let mut events = Vec::new();
    for (worker, violations) in own_skew {
        let mut targeted = false;
        let targets = outcomes
            .iter_mut()
            .flat_map(|outcome| outcome.targets.iter_mut())
            .filter(|(group, _)| *group == Group::Workers)
            .flat_map(|(_, statuses)| statuses.iter_mut())
            .filter(|target| target.name == worker);
        for target in targets {
            targeted = true;
            if target.state == TargetState::SignalPending {
                target.state = TargetState::SignalApplyFailed;
                target.reason = Some(skew::worker_refusal(&worker, &violations, plan_id));
            }
        }
        if !targeted {
            events.push(skew::left_behind_event(&worker, &violations));
        }
    }
    events
}

/// Check 0's refusal: the plan and its first command turn `Warning`, the command saying
/// why ([`EMPTY_PLAN_ID`]).
fn refuse_empty_plan_id(status: &mut PlanStatus) {
    status.state = PlanStateType::Warning;
    if let Some(first) = status.commands.first_mut() {
        first.state = PlanStateType::Warning;
        first.description = Some(EMPTY_PLAN_ID.to_owned());
    }
}

/// Check 8 for one `k0supdate`: the version it installs, judged against the fleet as the
/// commands before it leave it.
struct SkewCheck<'a> {
    /// The snapshot (the `allowSkew` annotation's value).
    inputs: &'a Inputs<'a>,
    /// The plan's id, which the `allowSkew` annotation must name.
    plan_id: &'a str,
    /// The command's index.
    index: u32,
    /// The version the command installs.
    version: &'a str,
}

impl SkewCheck<'_> {
    /// Walk the fleet over the command's targets; a skew the rules refuse fails the
    /// command (`Warning`), one the operator allowed adds a Warning Event. Returns the
    /// rules broken only by what a worker reports about itself (not allowed), by worker:
    /// they fail that worker, never the command.
    fn check(
        &self,
        fleet: &mut Fleet,
        outcome: &mut NewCommand,
    ) -> BTreeMap<String, Vec<skew::Violation>> {
        let names = |group: Group| -> Vec<String> {
            outcome
                .targets
                .iter()
                .filter(|(g, _)| *g == group)
                .flat_map(|(_, statuses)| statuses.iter().map(|t| t.name.clone()))
                .collect()
        };
        let walk = fleet.update(self.version, &names(Group::Controllers), &names(Group::Workers));
        let path = format!("commands[{}].k0supdate", self.index);
        if walk.is_empty() {
            // Nothing to refuse or allow.
            BTreeMap::new()
        } else if skew::allowed(self.inputs.allow_skew, self.plan_id) {
            let mut violations = walk.plan;
            violations.extend(walk.workers.into_values().flatten());
            outcome.warnings.push(skew::allowed_event(&path, self.version, &violations));
            BTreeMap::new()
        } else {
            if !walk.plan.is_empty() {
                outcome.state = PlanStateType::Warning;
                outcome.description = Some(skew::refusal(
                    &path,
                    self.version,
                    &walk.plan,
                    self.plan_id,
                    self.inputs.allow_skew,
                ));
            }
            walk.workers
        }
    }
}

/// Record one command's NewPlan outcome in its status: its targets, its preflight Pods and
/// templates, its state and description. Returns the outcome's Warning Events.
fn record_command(command_status: &mut PlanCommandStatus, outcome: NewCommand) -> Vec<Effect> {
    let NewCommand { state, description, targets, pods, templates, warnings } = outcome;
    let frozen = command_status.frozen.clone();
    if let Some(command) = frozen.as_ref().and_then(Command::resolve) {
        for (group, group_targets) in targets {
            if let Some(slot) = targets_mut(command_status, command, group) {
                *slot = group_targets;
            }
        }
    }
    if !pods.is_empty() {
        command_status.preflight.get_or_insert_with(Default::default).pods = pods;
    }
    if !templates.is_empty() {
        command_status.preflight.get_or_insert_with(Default::default).templates = templates;
    }
    command_status.state = state;
    command_status.description = description;
    warnings
}

/// The NewPlan checks of one command, in order; the first that fails decides the result.
fn new_command(
    inputs: &Inputs<'_>,
    run_id: &str,
    index: u32,
    spec: &PlanCommand,
    findings: &[RemovedApiUse],
) -> NewCommand {
    // Check 1: exactly one kind (the schema should already ensure it). A preflight command
    // is compiled (every problem named by its field path) and its checks' targets resolved
    // by `crate::plan::rules::checks`.
    if let (None, None, Some(preflight)) = (&spec.k0supdate, &spec.airgapupdate, &spec.preflight) {
        return crate::plan::rules::checks::new_command(inputs, run_id, index, preflight);
    }
    check_update(inputs, index, spec, findings).unwrap_or_else(|failed| *failed)
}

/// A check's outcome: `Err` is the command's failed NewPlan result.
type Checked<T> = Result<T, Box<NewCommand>>;

/// The NewPlan checks of a `k0supdate` or `airgapupdate` command, in order.
fn check_update(
    inputs: &Inputs<'_>,
    index: u32,
    spec: &PlanCommand,
    findings: &[RemovedApiUse],
) -> Checked<NewCommand> {
    let command = check_kind(index, spec)?;
    let label = format!("command {index} ({})", command.name());
    check_fields(index, command)?;
    check_gates(inputs, index, command)?;
    let warnings = check_payloads(inputs, &label, command)?;
    check_removed_apis(command, findings)?;
    let groups = check_discovery(inputs, &label, command)?;
    let targets = check_targets(inputs, &label, command, groups)?;
    let targets = check_not_excluded(inputs, &label, targets)?;
    let targets = check_signatures(inputs, &label, command, targets)?;
    Ok(NewCommand {
        state: PlanStateType::SchedulableWait,
        description: None,
        targets,
        pods: Vec::new(),
        templates: Vec::new(),
        warnings,
    })
}

/// Check 1 (continued): the command is of exactly one kind.
fn check_kind(index: u32, spec: &PlanCommand) -> Checked<Command<'_>> {
    Command::resolve(spec).ok_or_else(|| {
        let problem = kind_problem(spec).unwrap_or("is malformed");
        Box::new(NewCommand::failed(PlanStateType::Warning, format!("command {index} {problem}")))
    })
}

/// Check 1b: every field the schema cannot judge (version, URLs, progressTimeout, limits)
/// is one the nodes and the scheduler can act on; all problems in one pass.
fn check_fields(index: u32, command: Command<'_>) -> Checked<()> {
    let problems = field_problems(index, command);
    if !problems.is_empty() {
        return Err(Box::new(NewCommand::failed(PlanStateType::Warning, problems.join("; "))));
    }
    Ok(())
}

/// Check 1c: the command's health gates (DESIGN §15) can run: one kind each, durations,
/// selectors and Prometheus URL valid, every condition compiles within the CEL bounds.
fn check_gates(inputs: &Inputs<'_>, index: u32, command: Command<'_>) -> Checked<()> {
    let path = format!("commands[{index}].{}", command.name());
    let problems = crate::plan::rules::gates::problems(&path, command.gates(), inputs.policy);
    if !problems.is_empty() {
        return Err(Box::new(NewCommand::failed(PlanStateType::Warning, problems.join("; "))));
    }
    Ok(())
}

/// Check 2: every payload can be verified by the nodes, or is at least fetched over https
/// (DESIGN §11), unless this controller allows unverified payloads. Returns the Warning
/// Events about payloads accepted without an integrity check.
fn check_payloads(inputs: &Inputs<'_>, label: &str, command: Command<'_>) -> Checked<Vec<Effect>> {
    let payload::Verdict { refusal, warnings } =
        payload::judge(label, command, inputs.policy.allow_unverified_payloads);
    match refusal {
        Some(refusal) => Err(Box::new(NewCommand::failed(PlanStateType::Warning, refusal))),
        None => Ok(warnings),
    }
}

/// Check 3: the removed-API pre-check (REF §9.1), unless forced.
fn check_removed_apis(command: Command<'_>, findings: &[RemovedApiUse]) -> Checked<()> {
    if command.needs_removed_api_check()
        && let Some(use_) = blocking_use(findings, command.version())
    {
        return Err(Box::new(NewCommand::failed(PlanStateType::Warning, use_.message())));
    }
    Ok(())
}

/// Check 4: discovery, the target names of every group; a selector that does not parse is
/// an error, never "all".
fn check_discovery(
    inputs: &Inputs<'_>,
    label: &str,
    command: Command<'_>,
) -> Checked<Vec<(Group, Vec<String>)>> {
    command
        .groups()
        .iter()
        .map(|&group| match discover(inputs, command, group) {
            Ok(names) => Ok((group, names)),
            Err(problem) => Err(Box::new(NewCommand::failed(
                PlanStateType::IncompleteTargets,
                format!("{label}: {problem}"),
            ))),
        })
        .collect()
}

/// The targets one check found wanting, each as `<kind> <name>` (with why, for a platform).
#[derive(Default)]
struct Wanting {
    /// Targets without an object.
    missing: Vec<String>,
    /// Targets whose object has no usable platform.
    no_platform: Vec<String>,
}

impl Wanting {
    /// The state and description of a command with these targets wanting, if any is:
    /// `IncompleteTargets` when an object is missing (naming the platforms wanting too),
    /// else `MissingPlatform`.
    fn failure(self, label: &str) -> Option<(PlanStateType, String)> {
        let Self { missing, no_platform } = self;
        if !missing.is_empty() {
            let mut description =
                format!("{label}: targets without an object: {}", missing.join(", "));
            if !no_platform.is_empty() {
                description
                    .push_str(&format!("; targets without a platform: {}", no_platform.join(", ")));
            }
            return Some((PlanStateType::IncompleteTargets, description));
        }
        if !no_platform.is_empty() {
            let description =
                format!("{label}: targets without a platform: {}", no_platform.join(", "));
            return Some((PlanStateType::MissingPlatform, description));
        }
        None
    }
}

/// Check 5: every target has an object and a platform. The target statuses are recorded
/// even when this fails, so the status shows which nodes were missing or had no platform.
fn check_targets(
    inputs: &Inputs<'_>,
    label: &str,
    command: Command<'_>,
    groups: Vec<(Group, Vec<String>)>,
) -> Checked<Vec<(Group, Vec<TargetStatus>)>> {
    let mut wanting = Wanting::default();
    let targets = groups
        .into_iter()
        .map(|(group, names)| {
            let statuses = names
                .into_iter()
                .map(|name| target_status(inputs, command, group, name, &mut wanting))
                .collect::<Vec<_>>();
            (group, statuses)
        })
        .collect::<Vec<_>>();
    match wanting.failure(label) {
        Some((state, description)) => {
            Err(Box::new(NewCommand::with_targets(state, description, targets)))
        }
        None => Ok(targets),
    }
}

/// The NewPlan status of the target `name` of `group`: `SignalPending`, or why it cannot be
/// signalled (also noted in `wanting`).
fn target_status(
    inputs: &Inputs<'_>,
    command: Command<'_>,
    group: Group,
    name: String,
    wanting: &mut Wanting,
) -> TargetStatus {
    let kind = command.object_kind(group);
    match inputs.objects(kind).get(&name) {
        None => {
            wanting.missing.push(format!("{kind} {name}"));
            let mut target =
                TargetStatus::new(name.clone(), TargetState::MissingSignalNode, inputs.stamp);
            target.reason = Some(format!("{kind} {name} does not exist"));
            target
        }
        Some(object) => match command.platform_entry(object) {
            Ok(_) => {
                let mut target = TargetStatus::new(name, TargetState::SignalPending, inputs.stamp);
                // Failure-domain waves: the node's group is read once, here, and kept with
                // the run (a kubelet may set its own zone label; a relabel mid-run changes
                // nothing).
                if group == Group::Workers
                    && let Some(key) = command.group_by()
                {
                    target.group = object.labels.get(key).map(str::to_owned);
                }
                target
            }
            Err(why) => {
                wanting.no_platform.push(format!("{kind} {name} ({why})"));
                let mut target =
                    TargetStatus::new(name, TargetState::MissingPlatform, inputs.stamp);
                target.reason = Some(why);
                target
            }
        },
    }
}

/// What the refusal of a payload without signature adds when no platform of the command has
/// one: the shape of the Plans Cluster API's k0smotron writes for its in-place updates (they
/// never carry a signature), and where the ways out are documented. The docs quote it.
pub const UNSIGNED_PLAN_HINT: &str = ". No platform of this command has a signature: Plans \
     written by Cluster API's k0smotron never have one; for the nodes such Plans update, see \
     \"Driven by Cluster API (k0smotron)\" in docs/updating-a-cluster.md";

/// Check 7: every target that publishes the keys it requires (DESIGN §14: a node's
/// `autopilot.k0sproject.io/payload-keys`, or `bundle-keys` for an airgap bundle) gets a
/// payload with a signature or a signatureURL. The node would refuse an unsigned payload
/// anyway. The keys are the node's own report, so a worker's fail only that worker
/// (`SignalApplyFailed` with the reason, counted by `limits.maxFailures`); a controller's
/// refuse the command before any node is touched, naming the nodes and keys (controllers go
/// first, one at a time, and any failed controller stops the plan: the same end, before
/// anything changed). The leader does not download anything to check a signature: the
/// nodes do.
fn check_signatures(
    inputs: &Inputs<'_>,
    label: &str,
    command: Command<'_>,
    mut targets: Vec<(Group, Vec<TargetStatus>)>,
) -> Checked<Vec<(Group, Vec<TargetStatus>)>> {
    let mut unsigned = Vec::new();
    let unsigned_plan = command
        .platforms()
        .values()
        .all(|entry| entry.signature.is_none() && entry.signature_url.is_none());
    let hint = if unsigned_plan { UNSIGNED_PLAN_HINT } else { "" };
    for (group, statuses) in &mut targets {
        let kind = command.object_kind(*group);
        for target in statuses.iter_mut() {
            let Some(object) = inputs.objects(kind).get(&target.name) else { continue };
            let (keys, annotation) = match command {
                Command::K0s(_) => {
                    (&object.required_keys.payloads, autopilot_api::keys::ANNOTATION_PAYLOAD_KEYS)
                }
                Command::Airgap(_) => {
                    (&object.required_keys.bundles, autopilot_api::keys::ANNOTATION_BUNDLE_KEYS)
                }
                Command::Preflight(_) | Command::K0sRollback(_) | Command::AirgapRollback(_) => {
                    continue;
                }
            };
            let Ok((platform, entry)) = command.platform_key_and_entry(object) else { continue };
            if keys.is_empty() || entry.signature.is_some() || entry.signature_url.is_some() {
                continue;
            }
            let why = format!(
                "{kind} {} requires a signature by key {} and platforms.{platform} has none",
                target.name,
                keys.join(" or ")
            );
            match group {
                Group::Controllers => unsigned.push(why),
                Group::Workers => {
                    target.state = TargetState::SignalApplyFailed;
                    target.reason = Some(format!(
                        "{REFUSED_BY_OWN_REPORT}{why}; only this node fails, as the keys are its own \
                         report ({annotation}): give platforms.{platform} a signature or \
                         signatureURL, or remove the keys from the node's --payload-keys{hint}"
                    ));
                }
            }
        }
    }
    if unsigned.is_empty() {
        return Ok(targets);
    }
    let description = format!(
        "{label}: {}; give each such platform a signature or signatureURL (or remove the \
         keys from the nodes' --payload-keys){hint}",
        unsigned.join("; ")
    );
    Err(Box::new(NewCommand::with_targets(PlanStateType::Warning, description, targets)))
}

/// Check 6: the node kinds this controller excludes from plans (`--exclude-from-plans`).
fn check_not_excluded(
    inputs: &Inputs<'_>,
    label: &str,
    targets: Vec<(Group, Vec<TargetStatus>)>,
) -> Checked<Vec<(Group, Vec<TargetStatus>)>> {
    let mut restricted = Vec::new();
    for (group, statuses) in &targets {
        let excluded = match group {
            Group::Controllers => inputs.policy.exclude_controllers,
            Group::Workers => inputs.policy.exclude_workers,
        };
        if excluded && !statuses.is_empty() {
            let names: Vec<&str> = statuses.iter().map(|t| t.name.as_str()).collect();
            restricted.push(format!("{} ({})", group.name(), names.join(", ")));
        }
    }
    if !restricted.is_empty() {
        let description = format!(
            "{label} targets {}, which this controller excludes from plans \
             (--exclude-from-plans)",
            restricted.join(" and ")
        );
        return Err(Box::new(NewCommand::with_targets(
            PlanStateType::Restricted,
            description,
            targets,
        )));
    }
    Ok(targets)
}

/// Every field of command `index` that no node or scheduler could act on, each as
/// `<field path>: <problem>` (`commands[0].k0supdate.targets.workers.limits.soak: ...`), in
/// spec order; empty when the command can run.
///
/// The CRD schema refuses the plain cases at the API server (an empty version, a URL
/// without `http(s)://`); this catches what a schema cannot, with the node agent's own
/// rules ([`autopilot_api::payload`]), so no node is ever signalled only to refuse.
fn field_problems(index: u32, command: Command<'_>) -> Vec<String> {
    let path = format!("commands[{index}].{}", command.name());
    let mut problems = Vec::new();
    if let Some(problem) = autopilot_api::payload::version_problem(command.version()) {
        problems.push(format!("{path}.version: {problem}"));
    }
    for (platform, entry) in command.platforms() {
        if let Some(problem) = autopilot_api::payload::url_problem(&entry.url) {
            problems.push(format!("{path}.platforms.{platform}.url: {problem}"));
        }
        match (&entry.signature, &entry.signature_url) {
            (Some(_), Some(_)) => problems.push(format!(
                "{path}.platforms.{platform}: give signature or signatureURL, not both"
            )),
            (None, Some(url)) => {
                if let Some(problem) = autopilot_api::payload::url_problem(url) {
                    problems.push(format!("{path}.platforms.{platform}.signatureURL: {problem}"));
                }
            }
            (Some(signature), None) if signature.trim().is_empty() => {
                problems.push(format!("{path}.platforms.{platform}.signature: is empty"));
            }
            (Some(_) | None, None) => {}
        }
    }
    if let Some(Err(why)) = command.progress_timeout_override() {
        problems.push(format!("{path}.progressTimeout: {why}"));
    }
    if let Command::K0s(k0s) = command
        && let Some(options) = &k0s.drain_options
    {
        problems.extend(drain_options_problems(&format!("{path}.drainOptions"), options));
    }
    for &group in command.groups() {
        if let Some(target) = command.target(group) {
            let limits = match (command, group) {
                (Command::K0s(_), Group::Controllers | Group::Workers) => {
                    format!("{path}.targets.{}.limits", group.name())
                }
                (Command::Airgap(_), Group::Controllers | Group::Workers) => {
                    format!("{path}.{}.limits", group.name())
                }
                // A preflight command's targets are per check (`crate::plan::rules::checks`); a rollback
                // is never a command of the spec.
                (
                    Command::Preflight(_) | Command::K0sRollback(_) | Command::AirgapRollback(_),
                    Group::Controllers | Group::Workers,
                ) => continue,
            };
            problems.extend(limits_problems(&limits, group, &target.limits));
        }
    }
    problems
}

/// The problems of a command's `drainOptions` (at `path`): what the CRD schema bounds
/// (checked again for a Plan that did not pass the API server, as `k0s autopilot preview`
/// reads it), and a `podSelector` that is no label selector (never taken for "every pod").
pub(in crate::plan) fn drain_options_problems(
    path: &str,
    options: &autopilot_api::v1beta2::DrainOptions,
) -> Vec<String> {
    use autopilot_api::v1beta2::DRAIN_SECONDS_MAX;
    let mut problems = Vec::new();
    if let Some(seconds) = options.grace_period.filter(|s| *s > DRAIN_SECONDS_MAX) {
        problems.push(format!(
            "{path}.gracePeriod: {seconds} is more than {DRAIN_SECONDS_MAX} seconds"
        ));
    }
    match options.skip_wait_for_delete_timeout {
        Some(0) => problems.push(format!("{path}.skipWaitForDeleteTimeout: must be at least 1")),
        Some(seconds) if seconds > DRAIN_SECONDS_MAX => problems.push(format!(
            "{path}.skipWaitForDeleteTimeout: {seconds} is more than {DRAIN_SECONDS_MAX} seconds"
        )),
        Some(_) | None => {}
    }
    if let Some(selector) = &options.pod_selector
        && let Err(why) = crate::plan::selector::LabelSelector::parse(selector)
    {
        problems.push(format!("{path}.podSelector: {why}"));
    }
    problems
}

/// The problems of one group's `limits` (at `path`, e.g.
/// `commands[0].k0supdate.targets.workers.limits`).
///
/// Controllers update one at a time and any failed controller stops the plan, so a
/// `canary`, `soak` or non-zero `maxFailures` on them would be silently ignored: refused,
/// so the operator learns it before the run rather than after. (`concurrent` is accepted
/// and ignored, as in k0s, whose example plans set it on controllers.) The same goes for
/// `groupBy` and `betweenGroups`: controllers never go in waves.
fn limits_problems(path: &str, group: Group, limits: &PlanCommandTargetLimits) -> Vec<String> {
    let PlanCommandTargetLimits {
        concurrent: _,
        max_failures,
        canary,
        soak,
        group_by,
        between_groups,
    } = limits;
    let mut problems = Vec::new();
    match group {
        Group::Controllers => {
            if let Some(key) = group_by {
                problems.push(format!(
                    "{path}.groupBy: {key:?} is not allowed on controllers (they update one at \
                     a time, before any worker); set it on workers.limits or remove it"
                ));
            }
            if between_groups.is_some() {
                problems.push(format!(
                    "{path}.betweenGroups: is not allowed on controllers (they go in no \
                     groups); set it on workers.limits or remove it"
                ));
            }
            if let Some(canary) = canary {
                problems.push(format!(
                    "{path}.canary: {canary} is not allowed on controllers (they update one at \
                     a time, before any worker); set it on workers.limits or remove it"
                ));
            }
            if let Some(max_failures @ 1..) = max_failures {
                problems.push(format!(
                    "{path}.maxFailures: {max_failures} is not allowed on controllers (any \
                     failed controller stops the plan); set it on workers.limits or remove it"
                ));
            }
            if let Some(soak) = soak {
                problems.push(format!(
                    "{path}.soak: {soak:?} is not allowed on controllers (they take no \
                     canary); set it on workers.limits or remove it"
                ));
            }
        }
        Group::Workers => {
            if *canary == Some(0) {
                problems.push(format!(
                    "{path}.canary: 0 canary workers; set at least 1 or remove canary"
                ));
            }
            if let Some(soak) = soak {
                if let Err(why) = duration::parse(soak) {
                    problems.push(format!("{path}.soak: {why}"));
                }
                if canary.is_none() {
                    problems.push(format!(
                        "{path}.soak: {soak:?} is set without {path}.canary (the soak is how \
                         long the canary workers must stay Ready); set canary or remove soak"
                    ));
                }
            }
            if let Some(key) = group_by
                && let Some(problem) = crate::plan::model::selector::label_key_problem(key)
            {
                problems.push(format!("{path}.groupBy: {problem}"));
            }
            if let Some(between) = between_groups {
                if group_by.is_none() {
                    problems.push(format!(
                        "{path}.betweenGroups: is set without {path}.groupBy (there are no \
                         groups to go between); set groupBy or remove betweenGroups"
                    ));
                }
                if let Some(Err(why)) = between.soak.as_deref().map(duration::parse) {
                    problems.push(format!("{path}.betweenGroups.soak: {why}"));
                }
            }
        }
    }
    problems
}
