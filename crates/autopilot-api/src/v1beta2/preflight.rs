//! The `preflight` plan command: checks run on nodes before the update commands they guard
//! (seed 004, "programmable preflight checks"; DESIGN §13).
//!
//! The shape follows seed 004's command reference: each check names a command
//! (`{id, timeout, data}`) and an ordered list of results (`{status, message, condition}`),
//! of which the first that matches decides. Field names are camelCase like the rest of the
//! Plan, and these types read only camelCase: the API server knows no other spelling (the
//! CRD schema lists none), so an alias here could only ever see what the API server had
//! already refused or pruned. Seed 004's snake_case spellings (`global`, `status_code`,
//! `bool_expr`, `default_message`, `pod_name`, `node_selector`) are read only where the API
//! server never sees them: the files of `k0s autopilot check -f` and `preview -f`, which
//! `autopilot_cli::file` normalises to camelCase first.
//! How results are evaluated lives in the controller (`autopilot_engine::preflight`);
//! what a node reports lives in [`crate::preflight`].

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::target::{PlanCommandTarget, is_false};

/// Checks run on nodes before the commands that follow; any check ending in `error` ends the
/// plan `PreflightFailed` before a later command touches a node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandPreflight {
    /// The checks, each run on its own targets; all of them run, and the command's status is
    /// the worst status of any check (`error` over `warn` over `success`).
    #[schemars(length(min = 1))]
    pub checks: Vec<PreflightCheck>,

    /// What a `warn` does: `Proceed` (the default) keeps the warning in status and Events and
    /// goes on; `Block` holds the plan until the Plan carries the accept-warnings annotation
    /// for this plan's id.
    #[serde(default)]
    pub on_warn: OnWarn,

    /// How long the command waits for every node's report, a duration such as `2m`; a node
    /// with no report by then counts as timed out (status code 62). Unset: the longest check
    /// timeout plus the controller's margin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

/// What a `warn` result does to the plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OnWarn {
    /// Keep the warning in status and Events and go on with the next command.
    #[default]
    Proceed,
    /// Hold the plan until an operator accepts the warnings with the annotation.
    Block,
}

impl OnWarn {
    /// Every value, in declaration order.
    pub const ALL: [OnWarn; 2] = [Self::Proceed, Self::Block];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proceed => "Proceed",
            Self::Block => "Block",
        }
    }
}

impl JsonSchema for OnWarn {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "OnWarn".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "What a warn result does: Proceed (default: keep it in status and go on) or Block \
             (hold the plan until the accept-warnings annotation names this plan's id).",
            Self::ALL.iter().map(|v| v.as_str()),
        )
    }
}

/// One check: a command run on each target node, and how its outcome is judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightCheck {
    /// Identifier of the check, unique within the command; names it in status, Events and
    /// problems (for example `api-port-free`).
    #[schemars(length(min = 1))]
    pub id: String,

    /// What the check is about, in words an operator reads next to its results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// The nodes the check runs on.
    pub targets: PreflightTargets,

    /// What runs on each node.
    pub command: PreflightCommand,

    /// The possible outcomes, evaluated in order for each node: the first whose condition
    /// holds decides the node's status; a result without a condition always matches; when
    /// none matches the node's status is `error`.
    #[serde(default)]
    pub results: Vec<PreflightResult>,
}

/// The nodes a check runs on: the `k0supdate` target shape, or every node. A check runs on
/// all its nodes at once: `limits` are ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightTargets {
    /// Every controller and every worker of the cluster. When set, `controllers` and
    /// `workers` must be unset. Seed 004's `global` is not a field of the Plan: the API
    /// server refuses or drops it (`k0s autopilot check -f` and `preview -f` read it as
    /// `all`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub all: bool,

    /// Controllers to run the check on (through their `ControlNode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controllers: Option<PlanCommandTarget>,

    /// Workers to run the check on (through their `Node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<PlanCommandTarget>,
}

/// Seed 004's command resource: what runs, for how long, with which data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightCommand {
    /// Which command runs.
    pub id: PreflightCommandId,

    /// Timeout in seconds on each node (default 15); `-1` means no per-check timeout, still
    /// bounded by the node's maximum. A node that exceeds it reports status code 62.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = -1))]
    pub timeout: i64,

    /// The command's data; its shape depends on `id` (for example `{port: 6443}` for
    /// `portAvailable`, `{kubernetes: {podName: …, global: true}}` for `scheduler`), in
    /// camelCase. Data a command cannot use (an unknown field too) refuses the plan; a node
    /// that cannot use it reports status code 22.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_object")]
    pub data: Option<serde_json::Value>,
}

/// A command's timeout when the Plan does not give one (seed 004: 15 seconds).
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 15;

pub use crate::preflight::NO_TIMEOUT;

fn default_timeout() -> i64 {
    DEFAULT_TIMEOUT_SECONDS
}

/// The commands a check may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PreflightCommandId {
    /// Seed 004's `scheduler`: runs a referenced Pod on the target nodes; its output becomes
    /// the result messages and its exit code the status code.
    #[serde(rename = "scheduler")]
    Scheduler,
    /// Free space of a filesystem on the node (`{path, minBytes}`).
    #[serde(rename = "diskSpaceAvailable")]
    DiskSpaceAvailable,
    /// A TCP connection from the node (`{host, port}`); 111 when refused.
    #[serde(rename = "tcpDial")]
    TcpDial,
    /// Whether a TCP port can be bound on the node (`{port, address}`); 98 when in use.
    #[serde(rename = "portAvailable")]
    PortAvailable,
    /// An HTTP GET from the node (`{url}`); the response status becomes the first message.
    #[serde(rename = "httpGet")]
    HttpGet,
    /// Whether a path exists on the node (`{path}`).
    #[serde(rename = "fileExists")]
    FileExists,
    /// The k0s version the node runs (no data); the version becomes the first message.
    #[serde(rename = "k0sVersion")]
    K0sVersion,
    /// An executable allow-listed in a node-local file, named by its entry (`{name}`).
    #[serde(rename = "exec")]
    Exec,
}

impl PreflightCommandId {
    /// Every command, in declaration order.
    pub const ALL: [PreflightCommandId; 8] = [
        Self::Scheduler,
        Self::DiskSpaceAvailable,
        Self::TcpDial,
        Self::PortAvailable,
        Self::HttpGet,
        Self::FileExists,
        Self::K0sVersion,
        Self::Exec,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduler => "scheduler",
            Self::DiskSpaceAvailable => "diskSpaceAvailable",
            Self::TcpDial => "tcpDial",
            Self::PortAvailable => "portAvailable",
            Self::HttpGet => "httpGet",
            Self::FileExists => "fileExists",
            Self::K0sVersion => "k0sVersion",
            Self::Exec => "exec",
        }
    }
}

impl fmt::Display for PreflightCommandId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JsonSchema for PreflightCommandId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PreflightCommandId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "The command to run: scheduler (a Pod on the node), a built-in probe \
             (diskSpaceAvailable, tcpDial, portAvailable, httpGet, fileExists, k0sVersion) or \
             exec (an executable allow-listed on the node).",
            Self::ALL.iter().map(|v| v.as_str()),
        )
    }
}

/// One possible outcome of a check (seed 004's result resource).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightResult {
    /// The status a node gets when this result is the first to match.
    pub status: CheckStatus,

    /// What to tell the operator: a string, or a message object `{id, defaultMessage, args}`.
    /// Placeholders `{{ .Result }}` (the first message), `{{ .Results }}` (every message),
    /// `{{ .StatusCode }}`, `{{ .Error }}` and `{{ .Node }}` are replaced by the node's
    /// outcome, and `{{ .Args.<name> }}` by the message's args.
    pub message: PreflightMessage,

    /// When this result applies; every field set must hold. No condition: always applies. A
    /// condition with no field set refuses the plan (it is what pruning leaves of fields the
    /// Plan does not have, and would match every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<PreflightCondition>,
}

/// The status of a check on a node, of a check, or of a whole preflight command.
///
/// Ordered by severity: `Success < Warn < Error`, so the worst of several is their `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CheckStatus {
    /// The check passed.
    #[serde(rename = "success")]
    Success,
    /// The check passed with a warning; `onWarn` decides whether the plan goes on.
    #[serde(rename = "warn")]
    Warn,
    /// The check failed: the plan ends `PreflightFailed`.
    #[serde(rename = "error")]
    Error,
}

impl CheckStatus {
    /// Every status, from best to worst.
    pub const ALL: [CheckStatus; 3] = [Self::Success, Self::Warn, Self::Error];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JsonSchema for CheckStatus {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CheckStatus".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "One of success, warn or error.",
            Self::ALL.iter().map(|v| v.as_str()),
        )
    }
}

/// A result's message: plain text, or seed 004's message resource.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PreflightMessage {
    /// Plain text (placeholders allowed).
    Text(String),
    /// A message with an id (for localisation), a default text and arguments.
    Message(LocalizedMessage),
    /// Anything else (a number, a list, an object without `defaultMessage`): kept as
    /// written so the Plan still decodes, and refused when the plan is resolved, naming
    /// the field (the schema cannot refuse it: the field has no single structural type).
    Invalid(serde_json::Value),
}

impl JsonSchema for PreflightMessage {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PreflightMessage".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // A string-or-object field has no single structural type; the apiserver keeps it as
        // written and the controller reads it as one of the two forms.
        schemars::json_schema!({
            "description": "What to tell the operator: a string, or {id, defaultMessage, args}. \
                            Placeholders {{ .Result }}, {{ .Results }}, {{ .StatusCode }}, \
                            {{ .Error }} and {{ .Node }} are replaced by the node's outcome, {{ .Args.<name> }} \
                            by the message's args.",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

/// Seed 004's message resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalizedMessage {
    /// Identifier of the message, for localisation; informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,

    /// The text shown (placeholders allowed). Seed 004's `default_message` is not read here
    /// (an object without `defaultMessage` refuses the plan); `k0s autopilot check -f` and
    /// `preview -f` read it as `defaultMessage`.
    pub default_message: String,

    /// Values for `{{ .Args.<name> }}` placeholders in `defaultMessage`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
}

/// When a result applies (seed 004's condition resource): every field that is set must hold.
/// Present but with no field set, it is refused when the plan is compiled (it is what
/// pruning leaves of fields the CRD does not list, and would match every node); a result
/// that always applies omits `condition`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightCondition {
    /// Whether the command itself failed (could not run, timed out); `false` is a real
    /// constraint: the command must not have failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<bool>,

    /// The status code the command must have returned (0 success; 1 general error, 22
    /// invalid argument, 62 timeout, 98 address in use, 111 connection refused). Seed 004's
    /// `status_code` is not a field of the Plan: the API server refuses or drops it
    /// (`k0s autopilot check -f` and `preview -f` read it as `statusCode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<i64>,

    /// A CEL expression that must evaluate to `true`, over `result` (the first message),
    /// `results` (every message), `statusCode`, `error`, `stdout`, `stderr` and `node` (the
    /// node's name); for example `statusCode == 0 && int(result) > 1024`. A plan with an
    /// expression that does not compile is refused before anything runs. Seed 004's
    /// `bool_expr` is not a field of the Plan: the API server refuses or drops it
    /// (`k0s autopilot check -f` and `preview -f` read it as `boolExpr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool_expr: Option<String>,
}

impl PreflightCondition {
    /// Whether no field is set (such a condition would always hold; a plan is refused for
    /// one).
    pub fn is_empty(&self) -> bool {
        let Self { error, status_code, bool_expr } = self;
        error.is_none() && status_code.is_none() && bool_expr.is_none()
    }
}

/// Seed 004's `scheduler` command data: `{kubernetes: {podName, nodeSelector, global}}`.
///
/// Parsed from [`PreflightCommand::data`], which the API server keeps as written: unknown
/// fields (among them seed 004's `pod_name` and `node_selector`) are refused, naming them,
/// rather than dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SchedulerData {
    /// The Pod reference.
    pub kubernetes: SchedulerPodRef,
}

/// The Pod a `scheduler` command runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SchedulerPodRef {
    /// Name of the Pod template to run (seed 004's `pod_name`).
    pub pod_name: String,

    /// Only nodes with these labels (seed 004's `node_selector`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Every target node (seed 004's global mode).
    #[serde(default, skip_serializing_if = "is_false")]
    pub global: bool,
}

// === Status ===

/// What a `preflight` command found, written by the leader once the nodes reported (or the
/// command's deadline passed). Its target lists are stored grouped when long (see
/// [`super::grouped`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanCommandPreflightStatus {
    /// The worst status of any check; absent while the checks run.
    pub status: Option<CheckStatus>,

    /// Every check, in spec order.
    pub checks: Vec<PreflightCheckStatus>,

    /// Targeted controllers (signalled through their `ControlNode`), each with the checks it
    /// runs.
    pub controllers: Vec<super::TargetStatus>,

    /// Targeted workers (signalled through their `Node`), each with the checks it runs.
    pub workers: Vec<super::TargetStatus>,

    /// The Pods of `scheduler` checks: one per check and node, run by the node's kubelet
    /// (such checks signal no node).
    pub pods: Vec<PreflightPodStatus>,

    /// The Pod template of each `scheduler` check, read and frozen at NewPlan: a changed
    /// ConfigMap does not change a running check.
    pub templates: Vec<FrozenTemplate>,
}

/// A `scheduler` check's Pod template as NewPlan read it from its ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FrozenTemplate {
    /// The check's id.
    pub check: String,

    /// The ConfigMap (in `k0s-autopilot`) it was read from.
    pub config_map: String,

    /// The Pod it holds, as JSON (labels, annotations and spec); absent when unusable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,

    /// SHA-256 of the ConfigMap's template text, as read (hex).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,

    /// Why the template cannot be used (the check's Pods then report status code 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// One Pod of a `scheduler` check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightPodStatus {
    /// The check's id.
    pub check: String,

    /// The `Node` the Pod is bound to.
    pub node: String,

    /// The Pod's name, in the namespace `k0s-autopilot`; it is deleted once its result is
    /// recorded (or the command ends).
    pub pod: String,

    /// When the leader first created the Pod; the command's deadline counts from here.
    /// Absent until then (for example while the plan is paused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,

    /// The UID the API server gave the Pod when the leader created it (from the answer to
    /// its create request). A result is taken only from a Pod with this UID: a Pod of the
    /// same name made by anyone else is refused (a `CheckPodRefused` Warning) and deleted,
    /// and the leader creates its own again. Absent until the leader saw its create answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// What one check found over its nodes. Stored grouped when the list is long (see
/// [`super::grouped`]): nodes that passed are then listed by name, without a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreflightCheckStatus {
    /// The check's id.
    pub id: String,

    /// The worst status of its nodes; absent while nodes are still running it.
    pub status: Option<CheckStatus>,

    /// Every target node, by name.
    pub nodes: Vec<PreflightNodeStatus>,
}

/// What one check found on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightNodeStatus {
    /// Name of the `Node` or `ControlNode`.
    pub name: String,

    /// The status of the first matching result (`error` when none matched).
    pub status: CheckStatus,

    /// The status code the node reported (62 when it sent no report by the deadline).
    pub status_code: i64,

    /// The matching result's message with its placeholders filled in, or why the node is
    /// `error` without one.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::v1beta2::PlanCommand;

    /// Seed 004's scheduler example as a check, spelled the seed's way (snake_case).
    const SEED_CHECK: &str = r#"
id: license
message: The license checker runs on every node
targets:
  global: true
command:
  id: scheduler
  timeout: 15
  data:
    kubernetes:
      pod_name: "license-checker"
      global: true
results:
  - status: error
    message: "The license checker could not run: {{ .Error }}"
    condition:
      error: true
  - status: success
    message:
      id: license.ok
      default_message: "License valid on {{ .Node }} until {{ .Args.until }}"
      args:
        until: "2030"
    condition:
      status_code: 0
      bool_expr: 'result.startsWith("valid")'
  - status: warn
    message: "Unexpected answer: {{ .Result }}"
"#;

    /// The same check in the Plan's own spelling.
    fn camel_check() -> PreflightCheck {
        let camel = SEED_CHECK
            .replace("targets:\n  global: true", "targets:\n  all: true")
            .replace("pod_name", "podName")
            .replace("default_message", "defaultMessage")
            .replace("status_code", "statusCode")
            .replace("bool_expr", "boolExpr");
        serde_saphyr::from_str(&camel).expect("the seed's example parses in camelCase")
    }

    #[test]
    fn the_seed_example_reads_in_camel_case() {
        let check = camel_check();
        assert!(check.targets.all);
        assert_eq!(check.command.id, PreflightCommandId::Scheduler);
        assert_eq!(check.command.timeout, 15);
        let data: SchedulerData =
            serde_json::from_value(check.command.data.clone().expect("data")).expect("data");
        assert_eq!(data.kubernetes.pod_name, "license-checker");
        assert!(data.kubernetes.global);
        assert_eq!(check.results.len(), 3);
        let condition = check.results[1].condition.clone().expect("condition");
        assert_eq!(condition.status_code, Some(0));
        assert_eq!(condition.bool_expr.as_deref(), Some(r#"result.startsWith("valid")"#));
        assert_eq!(condition.error, None);
        let PreflightMessage::Message(message) = &check.results[1].message else {
            panic!("the second result has a message object");
        };
        assert_eq!(message.id.as_deref(), Some("license.ok"));
        assert_eq!(message.default_message, "License valid on {{ .Node }} until {{ .Args.until }}");
        assert_eq!(message.args["until"], "2030");
        assert_eq!(check.results[2].condition, None);

        let wire = serde_json::to_value(&check).expect("serialise");
        let back: PreflightCheck = serde_json::from_value(wire).expect("parse our own spelling");
        assert_eq!(back, check);
    }

    /// The API types see a Plan as the API server hands it over. The seed's spellings never
    /// get that far in `targets` and `condition` (the schema does not list them: refused, or
    /// pruned), and stay as written in `message` and `data` (kept as written): read here,
    /// the first come out as a pruned object would, and the others as something NewPlan
    /// refuses naming them. No alias: nothing read here is silently reinterpreted.
    #[test]
    fn the_seed_spellings_are_not_read_by_the_api_types() {
        let check: PreflightCheck = serde_saphyr::from_str(SEED_CHECK).expect("parses");
        assert!(!check.targets.all, "global is not all");
        let condition = check.results[1].condition.clone().expect("a condition, present");
        assert!(condition.is_empty(), "what pruning leaves: {condition:?}");
        assert!(
            matches!(&check.results[1].message, PreflightMessage::Invalid(_)),
            "{:?}",
            check.results[1].message
        );
        let data = serde_json::from_value::<SchedulerData>(check.command.data.expect("data"));
        assert!(data.is_err(), "{data:?}");
    }

    #[test]
    fn a_command_without_timeout_gets_fifteen_seconds_and_minus_one_is_kept() {
        let command: PreflightCommand =
            serde_json::from_value(json!({"id": "portAvailable", "data": {"port": 6443}}))
                .expect("parse");
        assert_eq!(command.timeout, DEFAULT_TIMEOUT_SECONDS);
        assert_eq!(command.timeout, 15);
        let command: PreflightCommand =
            serde_json::from_value(json!({"id": "exec", "timeout": -1})).expect("parse");
        assert_eq!(command.timeout, NO_TIMEOUT);
    }

    #[test]
    fn unknown_command_ids_and_statuses_are_refused() {
        assert!(serde_json::from_value::<PreflightCommand>(json!({"id": "rm"})).is_err());
        assert!(serde_json::from_value::<CheckStatus>(json!("fatal")).is_err());
        for id in PreflightCommandId::ALL {
            assert_eq!(serde_json::to_value(id).expect("serialise"), json!(id.as_str()));
        }
        for status in CheckStatus::ALL {
            assert_eq!(serde_json::to_value(status).expect("serialise"), json!(status.as_str()));
        }
    }

    #[test]
    fn check_statuses_order_from_success_to_error() {
        assert!(CheckStatus::Success < CheckStatus::Warn);
        assert!(CheckStatus::Warn < CheckStatus::Error);
        assert_eq!(
            [CheckStatus::Warn, CheckStatus::Error, CheckStatus::Success].into_iter().max(),
            Some(CheckStatus::Error)
        );
    }

    #[test]
    fn on_warn_defaults_to_proceed_and_reads_block() {
        let command: PlanCommandPreflight =
            serde_json::from_value(json!({"checks": []})).expect("parse");
        assert_eq!(command.on_warn, OnWarn::Proceed);
        let command: PlanCommandPreflight =
            serde_json::from_value(json!({"checks": [], "onWarn": "Block", "deadline": "2m"}))
                .expect("parse");
        assert_eq!(command.on_warn, OnWarn::Block);
        assert_eq!(command.deadline.as_deref(), Some("2m"));
    }

    #[test]
    fn a_plan_command_without_preflight_serialises_as_before() {
        let command: PlanCommand =
            serde_json::from_value(json!({"airgapupdate": null})).expect("parse");
        assert_eq!(command.preflight, None);
        assert_eq!(serde_json::to_value(&command).expect("serialise"), json!({}));
        let command: PlanCommand = serde_json::from_value(json!({"preflight": {"checks": [{
            "id": "c", "targets": {"all": true}, "command": {"id": "k0sVersion"}
        }]}}))
        .expect("parse");
        let preflight = command.preflight.expect("preflight");
        assert_eq!(preflight.checks[0].command.id, PreflightCommandId::K0sVersion);
        assert!(preflight.checks[0].results.is_empty());
    }

    #[test]
    fn a_preflight_status_leaves_out_what_is_not_known_yet() {
        let running = PlanCommandPreflightStatus {
            status: None,
            checks: vec![PreflightCheckStatus { id: "c".into(), status: None, nodes: vec![] }],
            ..PlanCommandPreflightStatus::default()
        };
        assert_eq!(
            serde_json::to_value(&running).expect("serialise"),
            json!({"checks": [{"id": "c"}]})
        );
        let done = PlanCommandPreflightStatus {
            status: Some(CheckStatus::Error),
            checks: vec![PreflightCheckStatus {
                id: "c".into(),
                status: Some(CheckStatus::Error),
                nodes: vec![PreflightNodeStatus {
                    name: "w1".into(),
                    status: CheckStatus::Error,
                    status_code: 98,
                    message: "port 6443 in use".into(),
                }],
            }],
            ..PlanCommandPreflightStatus::default()
        };
        let wire = serde_json::to_value(&done).expect("serialise");
        assert_eq!(
            wire["checks"][0]["nodes"][0],
            json!({"name": "w1", "status": "error", "statusCode": 98, "message": "port 6443 in use"})
        );
        assert_eq!(
            serde_json::from_value::<PlanCommandPreflightStatus>(wire).expect("parse"),
            done
        );
    }

    #[test]
    fn a_whole_plan_with_a_preflight_gate_round_trips() {
        let yaml = r#"
id: gated-update
timestamp: now
commands:
  - preflight:
      onWarn: Block
      deadline: 2m
      checks:
        - id: api-port
          targets:
            controllers:
              discovery:
                static:
                  nodes: [controller0]
          command:
            id: portAvailable
            data: {port: 6443}
          results:
            - status: error
              message: "port in use on {{ .Node }}"
              condition: {statusCode: 98}
            - status: success
              message: free
  - k0supdate:
      version: v1.33.4+k0s.0
      platforms:
        linux-amd64: {url: "https://example.com/k0s"}
      targets:
        controllers:
          discovery:
            static:
              nodes: [controller0]
"#;
        let spec: crate::v1beta2::PlanSpec = serde_saphyr::from_str(yaml).expect("parse");
        let preflight = spec.commands[0].preflight.as_ref().expect("preflight");
        assert_eq!(preflight.on_warn, OnWarn::Block);
        assert_eq!(
            preflight.checks[0].results[0].condition.as_ref().and_then(|c| c.status_code),
            Some(98)
        );
        assert!(spec.commands[1].k0supdate.is_some());
        let wire = serde_json::to_value(&spec).expect("serialise");
        assert_eq!(
            wire["commands"][0]["preflight"]["checks"][0]["results"][0]["condition"],
            json!({"statusCode": 98})
        );
        let back: crate::v1beta2::PlanSpec = serde_json::from_value(wire).expect("parse back");
        assert_eq!(back, spec);
    }

    #[test]
    fn an_empty_condition_is_empty_and_error_false_is_not() {
        assert!(PreflightCondition::default().is_empty());
        let condition: PreflightCondition =
            serde_json::from_value(json!({"error": false})).expect("parse");
        assert_eq!(condition.error, Some(false));
        assert!(!condition.is_empty());
    }
}
