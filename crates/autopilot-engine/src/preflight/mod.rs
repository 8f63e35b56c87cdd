//! Preflight checks (seed 004, DESIGN §13): compiling a plan's `preflight` commands and
//! judging what nodes report. Pure: no client, no clock, no I/O.
//!
//! # How execution plugs in
//!
//! 1. **NewPlan** compiles each preflight command ([`compile`] for a whole spec,
//!    [`compile_command`] for one). Any [`Problem`] (a `boolExpr` that does not parse,
//!    names an unknown variable or is over a bound such as [`MAX_CEL_COST`], a placeholder
//!    that does not exist, data no node could use, a timeout of 0, a `condition` that is
//!    present but empty) refuses the plan (`Warning`, like any malformed command) before
//!    any node is touched, naming the field by its path
//!    (`spec.commands[0].preflight.checks[1].results[0].condition.boolExpr: …`). NewPlan
//!    does this today; the engine will keep the [`Compiled`] plan for the run (derived from
//!    the frozen spec, so a new leader rebuilds it).
//! 2. **Signal**: the leader writes a *reference* to each target node — the run id, the
//!    command index and the ids of the checks that target that node — never the check
//!    definitions themselves.
//! 3. **Agent**: the node agent reads the definitions from the Plan (by run and command
//!    index), parses each check's data with [`autopilot_api::preflight::request`], runs it
//!    within its timeout (bounded by [`autopilot_api::preflight::MAX_CHECK_DURATION`]), and
//!    writes one bounded [`RawRecord`] per check: status code, error, messages, truncated
//!    stdout/stderr, duration. It judges nothing.
//! 4. **Evaluate**: once every node reported or the command's deadline
//!    ([`CompiledCommand::deadline`]) passed, the leader calls [`CompiledCommand::evaluate`]
//!    with the records it has; a node with none counts as timed out (status code 62). The
//!    [`CommandVerdict`] decides ([`CommandVerdict::may_proceed`]): `error` ends the plan
//!    `PreflightFailed`, `warn` proceeds or, with `onWarn: Block`, waits for the
//!    accept-warnings annotation naming the plan's id ([`warnings_accepted`]), `success`
//!    goes on to the next command. [`CommandVerdict::to_status`] is what the command's
//!    status records.
//!
//! Evaluation follows seed 004: results are tried in order and the first whose condition
//! holds decides; a result without a condition always matches; no match is `error`. A
//! condition that is present but empty is refused at compile time ([`EMPTY_CONDITION`]): it
//! is what pruning leaves of a condition in fields the CRD does not list. A
//! condition holds when every field it sets holds (`error: false` is a real constraint).
//! A check's status is its worst node's, the command's its worst check's.

mod bounds;
mod compile;
mod evaluate;
mod gate;
pub mod scheduler;
mod template;

#[cfg(test)]
mod tests;

pub use bounds::{
    MAX_CEL_COMPREHENSION_NESTING, MAX_CEL_COST, MAX_CEL_LITERAL_BYTES, MAX_CEL_LITERAL_ELEMENTS,
    MAX_CEL_NODES, MAX_CEL_SOURCE_BYTES, MAX_GATE_OBJECTS, MAX_GATE_SAMPLES,
};
pub use compile::{
    CEL_VARIABLES, Compiled, CompiledCheck, CompiledCommand, DEFAULT_DEADLINE_MARGIN,
    EMPTY_CONDITION, Problem, compile, compile_command, compile_gate_check, deadline_of,
};
pub use evaluate::{
    CheckVerdict, CommandVerdict, MAX_VERDICT_MESSAGE, NodeVerdict, warnings_accepted,
};

pub use gate::{
    GateInput, KUBERNETES_GATE_VARIABLES, PROMETHEUS_GATE_VARIABLES, compile_gate_condition,
    evaluate_gate, to_cel,
};

pub use autopilot_api::preflight::RawRecord;
