//! Compiling a plan's `preflight` commands: every problem a node or the evaluator would hit,
//! found before anything runs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use autopilot_api::preflight::{MAX_CHECK_DURATION, request::Request};
use autopilot_api::v1beta2::{
    CheckStatus, GateCheck, OnWarn, PlanCommandPreflight, PlanSpec, PreflightCheck,
    PreflightCommandId, PreflightCondition, PreflightResult, PreflightTargets,
};
use cel::common::ast::{EntryExpr, Expr, IdedExpr};

use super::bounds::{self, Vocabulary};
use super::template::Template;

/// The variables a `boolExpr` may use, with their CEL types.
pub const CEL_VARIABLES: [(&str, &str); 7] = [
    ("result", "string: the first message"),
    ("results", "list(string): every message"),
    ("statusCode", "int: the command's status code"),
    ("error", "bool: whether the command failed"),
    ("stdout", "string: standard output (truncated)"),
    ("stderr", "string: standard error (truncated)"),
    ("node", "string: the node's name"),
];

/// Identifiers CEL itself defines (type names for `type(x) == string` and conversions), which
/// are not variables of ours and must not be refused as unknown.
const CEL_BUILTIN_IDENTIFIERS: [&str; 10] =
    ["bool", "bytes", "double", "int", "list", "map", "null_type", "string", "type", "uint"];

/// How long the leader waits for reports beyond a command's longest check timeout when the
/// command sets no `deadline`: time for the signal to reach the node, the agent to read the
/// Plan, and the report to come back through the API server, on a busy cluster.
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_secs(60);

/// Why a result whose `condition` is present but sets no field is refused.
pub const EMPTY_CONDITION: &str = "is empty; a condition without error, statusCode or boolExpr \
     would match every node, so a failing check would pass: omit condition for a result that \
     always matches, or set a field (seed 004's status_code and bool_expr are not fields of the \
     Plan: the API server drops them, so write statusCode and boolExpr)";

/// Something in a plan's preflight commands that would fail every node or the evaluator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The field, as a path from the Plan (`spec.commands[0].preflight.checks[1].id`).
    pub path: String,
    /// What is wrong with it, lowercase.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every preflight command of a plan, compiled, by command index.
#[derive(Clone, Debug, Default)]
pub struct Compiled {
    commands: BTreeMap<usize, CompiledCommand>,
}

impl Compiled {
    /// The compiled preflight command at `index` of `spec.commands`, if that is one.
    pub fn command(&self, index: usize) -> Option<&CompiledCommand> {
        self.commands.get(&index)
    }

    /// Whether the plan has no preflight command.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

/// One compiled `preflight` command.
#[derive(Clone, Debug)]
pub struct CompiledCommand {
    /// The checks, in spec order.
    pub checks: Vec<CompiledCheck>,
    /// What a warning does.
    pub on_warn: OnWarn,
    /// The command's `deadline`, if it sets one.
    pub deadline: Option<Duration>,
}

impl CompiledCommand {
    /// How long after signalling the leader waits for reports: the command's `deadline`, or
    /// else its longest check timeout plus `margin`.
    pub fn deadline(&self, margin: Duration) -> Duration {
        self.deadline.unwrap_or_else(|| {
            let longest = self.checks.iter().map(|check| check.timeout).max();
            longest.unwrap_or_default().saturating_add(margin)
        })
    }
}

/// How long after signalling a `preflight` command's nodes the leader waits for their
/// reports: the command's `deadline` if it parses and is not zero, else its longest check
/// timeout plus [`DEFAULT_DEADLINE_MARGIN`]. The same figure as
/// [`CompiledCommand::deadline`] without compiling the checks (the engine asks every pass).
pub fn deadline_of(command: &PlanCommandPreflight) -> Duration {
    let set = command
        .deadline
        .as_deref()
        .and_then(|text| autopilot_api::duration::parse(text).ok())
        .filter(|deadline| !deadline.is_zero());
    set.unwrap_or_else(|| {
        let longest = command
            .checks
            .iter()
            .map(|check| {
                autopilot_api::preflight::check_timeout(check.command.timeout)
                    .unwrap_or(MAX_CHECK_DURATION)
            })
            .max();
        longest.unwrap_or_default().saturating_add(DEFAULT_DEADLINE_MARGIN)
    })
}

/// One compiled check.
#[derive(Clone, Debug)]
pub struct CompiledCheck {
    /// The check's id.
    pub id: String,
    /// The check's `message`, if any.
    pub message: Option<String>,
    /// The command's id.
    pub command: PreflightCommandId,
    /// The command's validated data.
    pub request: Request,
    /// How long the check may run on a node: its `timeout`, or for `-1` (and anything longer)
    /// the node maximum, [`MAX_CHECK_DURATION`].
    pub timeout: Duration,
    pub(super) results: Vec<CompiledResult>,
}

/// One result, its message parsed and its `boolExpr` compiled.
#[derive(Clone, Debug)]
pub(super) struct CompiledResult {
    pub(super) status: CheckStatus,
    pub(super) message: Template,
    pub(super) args: BTreeMap<String, Template>,
    pub(super) error: Option<bool>,
    pub(super) status_code: Option<i64>,
    pub(super) bool_expr: Option<Arc<cel::Program>>,
}

/// Compile every `preflight` command of `spec`. All problems of all commands are reported
/// together, so an operator fixes a plan in one round.
pub fn compile(spec: &PlanSpec) -> Result<Compiled, Vec<Problem>> {
    let mut commands = BTreeMap::new();
    let mut problems = Vec::new();
    for (index, command) in spec.commands.iter().enumerate() {
        let Some(preflight) = &command.preflight else { continue };
        let path = format!("spec.commands[{index}].preflight");
        match compile_command(&path, preflight) {
            Ok(compiled) => {
                commands.insert(index, compiled);
            }
            Err(found) => problems.extend(found),
        }
    }
    if problems.is_empty() { Ok(Compiled { commands }) } else { Err(problems) }
}

/// Compile one `preflight` command found at `path` (for example `spec.commands[0].preflight`,
/// or `checks` of a `k0s autopilot check` file).
pub fn compile_command(
    path: &str,
    command: &PlanCommandPreflight,
) -> Result<CompiledCommand, Vec<Problem>> {
    let PlanCommandPreflight { checks, on_warn, deadline } = command;
    let mut problems = Vec::new();
    let mut problem = |path: String, message: String| problems.push(Problem { path, message });

    // Check 1: a deadline, if set, is a non-zero duration.
    let deadline = match deadline.as_deref().map(autopilot_api::duration::parse) {
        None => None,
        Some(Ok(duration)) if duration.is_zero() => {
            problem(format!("{path}.deadline"), "is zero; nodes need time to report".into());
            None
        }
        Some(Ok(duration)) => Some(duration),
        Some(Err(message)) => {
            problem(format!("{path}.deadline"), message);
            None
        }
    };

    // Check 2: at least one check, ids unique.
    if checks.is_empty() {
        problem(format!("{path}.checks"), "is empty; a preflight command needs a check".into());
    }
    let mut first_with_id: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, check) in checks.iter().enumerate() {
        if let Some(first) = first_with_id.insert(&check.id, index) {
            problem(
                format!("{path}.checks[{index}].id"),
                format!("{:?} is also the id of checks[{first}]; ids must be unique", check.id),
            );
            first_with_id.insert(&check.id, first);
        }
    }

    // Check 3: each check on its own.
    let mut compiled = Vec::new();
    for (index, check) in checks.iter().enumerate() {
        match compile_check(&format!("{path}.checks[{index}]"), check) {
            Ok(check) => compiled.push(check),
            Err(found) => problems.extend(found),
        }
    }

    if problems.is_empty() {
        Ok(CompiledCommand { checks: compiled, on_warn: *on_warn, deadline })
    } else {
        Err(problems)
    }
}

/// Compile a health gate's node-side check found at `path` (for example
/// `spec.commands[1].k0supdate.gates[0].check`) as a preflight check named `id` (the gate's
/// id) that targets the nodes the gate judges. `scheduler` is refused: it runs a Pod, which
/// is the leader's to create, not a node's to run.
pub fn compile_gate_check(
    path: &str,
    id: &str,
    check: &GateCheck,
) -> Result<CompiledCheck, Vec<Problem>> {
    if check.command.id == PreflightCommandId::Scheduler {
        return Err(vec![Problem {
            path: format!("{path}.command.id"),
            message: "scheduler runs a Pod, which a gate's check cannot: judge Pods with a \
                      kubernetes gate, or run a built-in probe or an allow-listed exec"
                .to_owned(),
        }]);
    }
    let as_check = PreflightCheck {
        id: id.to_owned(),
        message: check.message.clone(),
        targets: PreflightTargets { all: true, ..PreflightTargets::default() },
        command: check.command.clone(),
        results: check.results.clone(),
    };
    compile_check(path, &as_check)
}

fn compile_check(path: &str, check: &PreflightCheck) -> Result<CompiledCheck, Vec<Problem>> {
    let PreflightCheck { id, message, targets, command, results } = check;
    let mut problems = Vec::new();
    let mut problem = |path: String, message: String| problems.push(Problem { path, message });

    if id.trim().is_empty() {
        problem(format!("{path}.id"), "is empty".into());
    }
    match (targets.all, &targets.controllers, &targets.workers) {
        (true, None, None) | (false, Some(_), _) | (false, None, Some(_)) => {}
        (true, Some(_), _) | (true, None, Some(_)) => problem(
            format!("{path}.targets"),
            "sets all together with controllers or workers; choose one".into(),
        ),
        (false, None, None) => problem(
            format!("{path}.targets"),
            "targets no node; set all: true, controllers or workers".into(),
        ),
    }
    let timeout =
        autopilot_api::preflight::check_timeout(command.timeout).unwrap_or_else(|message| {
            problem(format!("{path}.command.timeout"), message);
            MAX_CHECK_DURATION
        });
    let request = match Request::parse(command.id, command.data.as_ref()) {
        Ok(request) => Some(request),
        Err(message) => {
            problem(format!("{path}.command.data"), message);
            None
        }
    };

    if results.is_empty() {
        problem(
            format!("{path}.results"),
            "is empty; no result can match, so every node would end error: add at least one \
             result (one without a condition matches always)"
                .into(),
        );
    }
    let mut compiled = Vec::new();
    for (index, result) in results.iter().enumerate() {
        match compile_result(&format!("{path}.results[{index}]"), result) {
            Ok(result) => compiled.push(result),
            Err(found) => problems.extend(found),
        }
    }

    match request {
        Some(request) if problems.is_empty() => Ok(CompiledCheck {
            id: id.clone(),
            message: message.clone(),
            command: command.id,
            request,
            timeout,
            results: compiled,
        }),
        Some(_) | None => Err(problems),
    }
}

fn compile_result(path: &str, result: &PreflightResult) -> Result<CompiledResult, Vec<Problem>> {
    let PreflightResult { status, message, condition } = result;
    let mut problems = Vec::new();
    let parsed = Template::parse(message);
    if let Err(message) = &parsed {
        problems.push(Problem { path: format!("{path}.message"), message: message.clone() });
    }
    // A condition that is present but sets no field would match every node, as an absent
    // one does. Nobody writes that on purpose: it is what remains when something between the
    // author and the API server dropped the fields (seed 004's `status_code` or `bool_expr`
    // pruned as unknown by the API server, Helm, Argo CD or Flux), and it would let a failing
    // check pass. A catch-all result omits `condition`.
    if condition.as_ref().is_some_and(PreflightCondition::is_empty) {
        problems.push(Problem {
            path: format!("{path}.condition"),
            message: EMPTY_CONDITION.to_owned(),
        });
    }
    let condition = condition.clone().unwrap_or_default();
    let bool_expr = match condition.bool_expr.as_deref().map(compile_cel) {
        None => None,
        Some(Ok(program)) => Some(Arc::new(program)),
        Some(Err(message)) => {
            problems.push(Problem { path: format!("{path}.condition.boolExpr"), message });
            None
        }
    };
    match parsed {
        Ok((message, args)) if problems.is_empty() => Ok(CompiledResult {
            status: *status,
            message,
            args,
            error: condition.error,
            status_code: condition.status_code,
            bool_expr,
        }),
        Ok(_) | Err(_) => Err(problems),
    }
}

/// Compile a `boolExpr`: it must parse, stay within the bounds of [`super::bounds`] (the
/// `cel` crate has no cost limit of its own), and every free variable must be one of
/// [`CEL_VARIABLES`] (so a typo such as `statuscode` is refused now, not on every node).
///
/// The expression is then tried once on a sample record (success, no messages): a call of
/// a function CEL does not have, operands of types no operator takes, or a value that is
/// not a bool are refused. Other failures of the trial (an index out of bounds, `int("")`)
/// depend on the record and are left to evaluation, where they decide `error`. The trial
/// only sees the branches the sample takes, so it narrows what can fail on nodes without
/// proving that nothing can.
fn compile_cel(source: &str) -> Result<cel::Program, String> {
    let sample = autopilot_api::preflight::RawRecord::default();
    compile_cel_in(source, Vocabulary::Preflight, &CEL_VARIABLES, &|| {
        super::bounds::context_for("node", &sample)
    })
}

/// [`compile_cel`] for an expression of `vocabulary`, whose variables are `variables`,
/// tried once on the context `sample` makes.
pub(super) fn compile_cel_in(
    source: &str,
    vocabulary: Vocabulary,
    variables: &[(&str, &str)],
    sample: &dyn Fn() -> cel::Context<'static, 'static>,
) -> Result<cel::Program, String> {
    if source.trim().is_empty() {
        return Err("is empty".to_owned());
    }
    bounds::check_source(source)?;
    let program = cel::Program::compile(source)
        .map_err(|errors| format!("does not parse as CEL: {}", errors.to_string().trim()))?;
    bounds::check_shape(program.expression())?;
    let mut unknown = BTreeSet::new();
    free_variables(program.expression(), variables, &mut Vec::new(), &mut unknown);
    if !unknown.is_empty() {
        let unknown: Vec<String> = unknown.iter().map(|name| format!("{name:?}")).collect();
        let known: Vec<&str> = variables.iter().map(|(name, _)| *name).collect();
        return Err(format!(
            "uses unknown variable {}; the variables are {}",
            unknown.join(", "),
            known.join(", ")
        ));
    }
    // Only now, with every variable known, is the estimate meaningful; and it must come
    // before the trial run, which would pay the cost it bounds.
    bounds::check_cost_in(program.expression(), vocabulary)?;
    match program.execute(&sample()) {
        Ok(cel::Value::Bool(_)) => Ok(program),
        Ok(other) => Err(format!("gives {}, not a bool", other.type_of())),
        Err(cel::ExecutionError::UndeclaredReference(name)) => {
            Err(format!("calls {name:?}, which CEL does not have"))
        }
        // Our variables have fixed types, so these fail on every record alike.
        Err(
            error @ (cel::ExecutionError::NoSuchOverload(_)
            | cel::ExecutionError::UnsupportedBinaryOperator(..)
            | cel::ExecutionError::ValuesNotComparable(..)),
        ) => Err(format!("fails on any record: {error}")),
        Err(_depends_on_the_record) => Ok(program),
    }
}

/// Collect identifiers of `expr` that are neither bound by an enclosing comprehension
/// (`results.exists(m, m == "ok")` binds `m`), nor our variables, nor CEL's own names.
fn free_variables(
    expr: &IdedExpr,
    variables: &[(&str, &str)],
    bound: &mut Vec<String>,
    unknown: &mut BTreeSet<String>,
) {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            let known = variables.iter().any(|(variable, _)| variable == name)
                || CEL_BUILTIN_IDENTIFIERS.contains(&name.as_str())
                || bound.contains(name)
                // The parser's own accumulator names of expanded macros.
                || name.starts_with('@');
            if !known {
                unknown.insert(name.clone());
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                free_variables(target, variables, bound, unknown);
            }
            for arg in &call.args {
                free_variables(arg, variables, bound, unknown);
            }
        }
        Expr::Comprehension(comprehension) => {
            free_variables(&comprehension.iter_range, variables, bound, unknown);
            free_variables(&comprehension.accu_init, variables, bound, unknown);
            let before = bound.len();
            bound.push(comprehension.iter_var.clone());
            bound.extend(comprehension.iter_var2.clone());
            bound.push(comprehension.accu_var.clone());
            free_variables(&comprehension.loop_cond, variables, bound, unknown);
            free_variables(&comprehension.loop_step, variables, bound, unknown);
            free_variables(&comprehension.result, variables, bound, unknown);
            bound.truncate(before);
        }
        Expr::List(list) => {
            for element in &list.elements {
                free_variables(element, variables, bound, unknown);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => {
                        free_variables(&field.value, variables, bound, unknown)
                    }
                    EntryExpr::MapEntry(entry) => {
                        free_variables(&entry.key, variables, bound, unknown);
                        free_variables(&entry.value, variables, bound, unknown);
                    }
                }
            }
        }
        Expr::Select(select) => free_variables(&select.operand, variables, bound, unknown),
        Expr::Struct(structure) => {
            for entry in &structure.entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => {
                        free_variables(&field.value, variables, bound, unknown)
                    }
                    EntryExpr::MapEntry(entry) => {
                        free_variables(&entry.key, variables, bound, unknown);
                        free_variables(&entry.value, variables, bound, unknown);
                    }
                }
            }
        }
    }
}
