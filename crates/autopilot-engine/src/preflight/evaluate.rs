//! Judging reports: a node's record against a check's results, then checks and commands by
//! their worst status.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::preflight::RawRecord;
use autopilot_api::v1beta2::{
    CheckStatus, OnWarn, PlanCommandPreflightStatus, PreflightCheckStatus, PreflightNodeStatus,
};

use super::compile::{CompiledCheck, CompiledCommand, CompiledResult};

/// How one node did on one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeVerdict {
    /// The node's name.
    pub node: String,
    /// The status of the first matching result (`error` when none matched).
    pub status: CheckStatus,
    /// The matching result's message, filled in; or why the node is `error` without one.
    pub message: String,
    /// Index of the result that decided, `None` when none matched or a `boolExpr` failed.
    pub matched: Option<usize>,
    /// The status code the node reported (62 when it sent no report).
    pub status_code: i64,
}

/// How one check did over its nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckVerdict {
    /// The check's id.
    pub id: String,
    /// The worst node's status; `error` when the check ran on no node (a check that ran
    /// nowhere proved nothing).
    pub status: CheckStatus,
    /// Every node, by name.
    pub nodes: Vec<NodeVerdict>,
}

/// How a preflight command did: its worst check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandVerdict {
    /// The worst check's status.
    pub status: CheckStatus,
    /// Every check, in spec order.
    pub checks: Vec<CheckVerdict>,
}

/// The most bytes of a verdict's message kept (DESIGN §14): a message fills in node-written
/// text (`{{ .Result }}`, `{{ .Results }}` are up to 16 KiB), and each one goes into the Plan
/// status. Longer ones are cut at a char boundary and end with `…`.
pub const MAX_VERDICT_MESSAGE: usize = 1024;

impl CompiledCheck {
    /// Judge `node`'s `record`: the first result whose condition holds decides; no match is
    /// `error`. The message is at most [`MAX_VERDICT_MESSAGE`] bytes. A `boolExpr` that cannot be evaluated on this record (a conversion that
    /// fails, a result that is not a bool) decides `error` too: a condition that could not
    /// be checked must never let a later catch-all pass the node.
    pub fn judge(&self, node: &str, record: &RawRecord) -> NodeVerdict {
        let verdict = |status, message: String, matched| NodeVerdict {
            node: node.to_owned(),
            status,
            message: autopilot_api::text::truncate(&message, MAX_VERDICT_MESSAGE - '…'.len_utf8()),
            matched,
            status_code: record.status_code,
        };
        for (index, result) in self.results.iter().enumerate() {
            match result.holds(node, record) {
                Ok(true) => {
                    let message = result.message.render(&result.args, node, record);
                    return verdict(result.status, message, Some(index));
                }
                Ok(false) => {}
                Err(problem) => {
                    let message = format!(
                        "results[{index}].condition.boolExpr could not be evaluated: {problem}"
                    );
                    return verdict(CheckStatus::Error, message, None);
                }
            }
        }
        verdict(CheckStatus::Error, no_match(record), None)
    }

    /// Judge every target node; `records` holds the reports that arrived, a target without
    /// one counts as timed out after `deadline` (status code 62).
    pub fn evaluate(
        &self,
        targets: &[String],
        records: &BTreeMap<String, RawRecord>,
        deadline: Duration,
    ) -> CheckVerdict {
        let nodes: Vec<NodeVerdict> = targets
            .iter()
            .map(|node| match records.get(node) {
                Some(record) => self.judge(node, record),
                None => self.judge(node, &RawRecord::no_report(deadline)),
            })
            .collect();
        let status = worst(nodes.iter().map(|node| node.status)).unwrap_or(CheckStatus::Error);
        CheckVerdict { id: self.id.clone(), status, nodes }
    }
}

impl CompiledCommand {
    /// Judge every check: `targets` are each check's target nodes by check id, `records`
    /// the reports that arrived by check id and node. Call it once every target reported or
    /// the deadline passed; a target without a report counts as timed out.
    pub fn evaluate(
        &self,
        targets: &BTreeMap<String, Vec<String>>,
        records: &BTreeMap<String, BTreeMap<String, RawRecord>>,
        deadline: Duration,
    ) -> CommandVerdict {
        let none = BTreeMap::new();
        let checks: Vec<CheckVerdict> = self
            .checks
            .iter()
            .map(|check| {
                let targets = targets.get(&check.id).map_or(&[][..], Vec::as_slice);
                check.evaluate(targets, records.get(&check.id).unwrap_or(&none), deadline)
            })
            .collect();
        let status = worst(checks.iter().map(|check| check.status)).unwrap_or(CheckStatus::Error);
        CommandVerdict { status, checks }
    }
}

impl CommandVerdict {
    /// Whether the plan may go on to its next command: `success` always; `warn` with
    /// `onWarn: Proceed`, or with `Block` once an operator accepted the warnings of this
    /// plan ([`warnings_accepted`]); `error` never.
    pub fn may_proceed(&self, on_warn: OnWarn, accepted: bool) -> bool {
        match (self.status, on_warn) {
            (CheckStatus::Success, OnWarn::Proceed | OnWarn::Block) => true,
            (CheckStatus::Warn, OnWarn::Proceed) => true,
            (CheckStatus::Warn, OnWarn::Block) => accepted,
            (CheckStatus::Error, OnWarn::Proceed | OnWarn::Block) => false,
        }
    }

    /// The verdict as the Plan's command status records it (without the targets, which the
    /// engine keeps beside it).
    pub fn to_status(&self) -> PlanCommandPreflightStatus {
        PlanCommandPreflightStatus {
            status: Some(self.status),
            checks: self
                .checks
                .iter()
                .map(|check| PreflightCheckStatus {
                    id: check.id.clone(),
                    status: Some(check.status),
                    nodes: check
                        .nodes
                        .iter()
                        .map(|node| PreflightNodeStatus {
                            name: node.node.clone(),
                            status: node.status,
                            status_code: node.status_code,
                            message: node.message.clone(),
                        })
                        .collect(),
                })
                .collect(),
            controllers: Vec::new(),
            workers: Vec::new(),
            pods: Vec::new(),
            templates: Vec::new(),
        }
    }
}

impl CompiledResult {
    /// Whether every condition field that is set holds for this record (cheap fields first,
    /// so a `boolExpr` is only evaluated on records it is meant for).
    fn holds(&self, node: &str, record: &RawRecord) -> Result<bool, String> {
        if self.error.is_some_and(|error| error != record.is_error()) {
            return Ok(false);
        }
        if self.status_code.is_some_and(|code| code != record.status_code) {
            return Ok(false);
        }
        let Some(program) = &self.bool_expr else { return Ok(true) };
        let context = super::bounds::context_for(node, record);
        match program.execute(&context) {
            Ok(cel::Value::Bool(holds)) => Ok(holds),
            Ok(other) => Err(format!("it gave {}, not a bool", other.type_of())),
            Err(error) => Err(error.to_string()),
        }
    }
}

/// Whether a Plan's annotations accept the preflight warnings of the plan `plan_id`
/// ([`keys::ANNOTATION_ACCEPT_WARNINGS`] names exactly that id).
pub fn warnings_accepted(annotations: &BTreeMap<String, String>, plan_id: &str) -> bool {
    annotations.get(keys::ANNOTATION_ACCEPT_WARNINGS).is_some_and(|id| id.trim() == plan_id)
}

/// The worst of some statuses, `None` when there are none.
fn worst(statuses: impl Iterator<Item = CheckStatus>) -> Option<CheckStatus> {
    statuses.max()
}

fn no_match(record: &RawRecord) -> String {
    let mut message = format!("no result matched status code {}", record.status_code);
    if let Some(error) = &record.error {
        message.push_str(&format!(", error {error:?}"));
    } else if !record.result().is_empty() {
        message.push_str(&format!(", result {:?}", record.result()));
    }
    message
}
