//! `Plan`: what to update, on which nodes, and how far it got (REF §1.2, §3.1, §3.2).
//!
//! The spec is k0s' shape field for field. The status is k0s' shape plus a few optional
//! fields of ours (target `phase`/`reason`, `conditions`, `observedGeneration`); they are
//! left out of the JSON when unset, so a status without them is byte-for-byte k0s-shaped.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::preflight::{PlanCommandPreflight, PlanCommandPreflightStatus};
use super::target::{
    PlanCommandTarget, PlanCommandTargets, TargetState, TargetStatus, is_false, is_zero,
};
use crate::signal::SignalPhase;

/// Specification of an update plan: an ordered list of commands.
///
/// Only the Plan named `autopilot` is executed. Its spec must not change while it runs.
// Two printer columns are strings: clippy reads their repeated `type_` as a duplicated
// attribute, but each `printcolumn(...)` is its own column.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autopilot.k0sproject.io",
    crates(kube_core = "::kube_core"),
    version = "v1beta2",
    kind = "Plan",
    plural = "plans",
    singular = "plan",
    status = "PlanStatus",
    derive = "PartialEq",
    doc = "An autopilot update plan. Only the Plan named `autopilot` is executed.",
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.state",
        description = "State of the plan"
    ),
    printcolumn(
        name = "Command",
        type_ = "integer",
        json_path = ".status.commands[?(@.state!=\"Completed\")].id",
        description = "Index of the first command that has not completed"
    ),
    printcolumn(
        name = "Progress",
        type_ = "string",
        json_path = ".status.progress",
        description = "Node updates completed / node updates planned, over all commands"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PlanSpec {
    /// Free-form identifier of this plan, copied into every signal as `planId`; not empty.
    #[schemars(length(min = 1))]
    pub id: String,

    /// Free-form creation time of this plan; informational, never interpreted.
    pub timestamp: String,

    /// Commands to execute, strictly in order; the next one starts only when the previous
    /// one has completed.
    pub commands: Vec<PlanCommand>,

    /// When nodes may be signalled: a node is signalled only while the window is open
    /// (checked before every batch); nodes in flight finish when it closes. Unset: any
    /// time. Frozen when a run starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<super::PlanWindow>,

    /// When payloads may be downloaded: a node fetches its payload only while this is open
    /// (so, without pre-staging, it is signalled only while both this and `window` are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_window: Option<super::PlanWindow>,

    /// Named windows for groups of nodes: a node (or ControlNode) labelled
    /// `autopilot.k0sproject.io/window=<name>` when the run starts goes inside
    /// `windows.<name>` instead of `window`. A label naming no window here is ignored
    /// (with a warning Event): the node keeps `window`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub windows: BTreeMap<String, super::PlanWindow>,
}

/// One step of a plan. Exactly one of `k0supdate`, `airgapupdate` and `preflight` should be
/// set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommand {
    /// Replace the k0s binary on the targeted controllers and workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k0supdate: Option<PlanCommandK0sUpdate>,

    /// Download an airgap image bundle onto the targeted workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub airgapupdate: Option<PlanCommandAirgapUpdate>,

    /// Run checks on nodes and gate the commands that follow: any check ending in `error`
    /// ends the plan `PreflightFailed` before a later command touches a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<PlanCommandPreflight>,
}

/// Update k0s itself to a given version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandK0sUpdate {
    /// Target k0s version, compared as an exact string with the version a node runs
    /// (for example `v1.30.1+k0s.0`): SemVer with an optional leading `v` and at most
    /// `+k0s.N` as build metadata.
    #[schemars(length(min = 1), regex(pattern = crate::payload::VERSION_PATTERN))]
    pub version: String,

    /// Update even if a node already runs `version`, and skip the removed-API check.
    #[serde(default, skip_serializing_if = "is_false")]
    pub forceupdate: bool,

    /// Download location of the k0s binary per platform, keyed by `<os>-<arch>` (for
    /// example `linux-amd64`).
    pub platforms: BTreeMap<String, PlanResourceUrl>,

    /// Which controllers and workers to update.
    pub targets: PlanCommandTargets,

    /// How the leader drains a kubelet-bearing node before its update: `Always` (the
    /// default: every evictable pod is evicted), `IfPossible` (pods that no other node could
    /// take stay; the node is cordoned all the same) or `Never` (cordoned, not drained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainPolicy>,

    /// What the drain may evict beyond what `kubectl drain` evicts by default (Pods without
    /// a controller, Pods with `emptyDir` data), how it evicts, and which Pods it looks at.
    /// Unset: as `kubectl drain` without options, which is not what k0s does (k0s forces
    /// both: set `force` and `deleteEmptydirData` to keep its behaviour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_options: Option<DrainOptions>,

    /// How the command goes over its targets: its `progressTimeout`, `gates`, `prestage`
    /// and `prestageConcurrent`, fields of this object on the wire.
    #[serde(flatten)]
    pub rollout: PlanCommandRollout,
}

/// The longest `gracePeriod` and `skipWaitForDeleteTimeout` a drain takes, in seconds (an
/// hour): both are bounded so a typo cannot hold a node for days.
pub const DRAIN_SECONDS_MAX: u32 = 3600;

/// Options of the central drain, named as system-upgrade-controller's drain spec (the flags
/// of `kubectl drain`). Every field is an opt-in; the defaults are `kubectl drain`'s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainOptions {
    /// Evict Pods that no controller manages (bare Pods, and Pods whose DaemonSet no longer
    /// exists); such a Pod is gone for good once evicted. Unset: they hold the drain, named
    /// (`kubectl drain --force`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,

    /// Evict Pods with `emptyDir` volumes, whose data is lost. Unset: they hold the drain,
    /// named (`kubectl drain --delete-emptydir-data`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub delete_emptydir_data: bool,

    /// Seconds each evicted Pod is given to terminate, instead of its own
    /// `terminationGracePeriodSeconds`; 0 to 3600 (`kubectl drain --grace-period`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 3600))]
    pub grace_period: Option<u32>,

    /// Stop waiting for an evicted Pod once its `deletionTimestamp` is this many seconds
    /// past (a Pod stuck terminating, such as one on an unreachable kubelet); 1 to 3600
    /// (`kubectl drain --skip-wait-for-delete-timeout`). Unset: the drain waits for it, up
    /// to the controller's `--drain-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub skip_wait_for_delete_timeout: Option<u32>,

    /// Drain only the Pods this label selector selects (`kubectl drain --pod-selector`
    /// syntax, e.g. `app=web,tier notin (db)`); the others stay on the cordoned node.
    /// Unset: every Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<String>,
}

/// How the leader drains a kubelet-bearing node before its update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DrainPolicy {
    /// Evict every pod that must go (everything but DaemonSet and static pods), waiting for
    /// PodDisruptionBudgets up to `--drain-timeout`.
    #[default]
    Always,
    /// Evict the pods that have somewhere else to go: another Ready, uncordoned node whose
    /// `NoSchedule`/`NoExecute` taints the pod tolerates and whose labels match its
    /// `nodeSelector`. Pods with nowhere to go stay on the cordoned node, and the node's
    /// status says which (a single-node cluster updates without a drain).
    IfPossible,
    /// Cordon the node, evict nothing.
    Never,
}

impl DrainPolicy {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfPossible => "IfPossible",
            Self::Never => "Never",
        }
    }
}

impl fmt::Display for DrainPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JsonSchema for DrainPolicy {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DrainPolicy".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "How the leader drains a kubelet-bearing node before its update: Always \
             (default), IfPossible (pods no other node could take stay) or Never (cordon \
             only).",
            ["Always", "IfPossible", "Never"].into_iter(),
        )
    }
}

/// Download an airgap image bundle onto workers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandAirgapUpdate {
    /// k0s version the bundle belongs to; used for the removed-API check and copied into
    /// the signal. SemVer with an optional leading `v` and at most `+k0s.N` as build
    /// metadata.
    #[schemars(length(min = 1), regex(pattern = crate::payload::VERSION_PATTERN))]
    pub version: String,

    /// Download location of the bundle per platform, keyed by `<os>-<arch>`.
    pub platforms: BTreeMap<String, PlanResourceUrl>,

    /// Which workers receive the bundle.
    pub workers: PlanCommandTarget,

    /// How the command goes over its targets: its `progressTimeout`, `gates`, `prestage`
    /// and `prestageConcurrent`, fields of this object on the wire.
    #[serde(flatten)]
    pub rollout: PlanCommandRollout,
}

/// How a command that updates nodes goes over its targets: the fields `k0supdate` and
/// `airgapupdate` share, in a Plan and in an UpdateConfig's `planSpec` template alike.
///
/// Embedded with `#[serde(flatten)]`: on the wire (and in the CRD schemas) these are fields
/// of the command itself, so `{"progressTimeout": "10m", "prestage": true}` sits beside
/// `version` and `targets`, as it always has. Flattening has a cost: serde gathers these
/// fields into an untyped buffer first. So when YAML is read, a bad value here is reported
/// at the end of the command and not at the field. A plain scalar also keeps its YAML type:
/// a gate `id: 1` is refused as a number, the way the API server refuses it after
/// `kubectl apply`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandRollout {
    /// How long a node may show no progress (its signal phase unchanged) before it fails
    /// with `no progress in <phase> for <duration>`; a duration such as `5m` or `1h30m`.
    /// Unset: the controller's `--node-progress-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_timeout: Option<String>,

    /// Health gates: checks that must pass after each node (`after: node`) or each batch
    /// (`after: batch`) of this command completes, before the next node is signalled
    /// (DESIGN §15). Evaluated by the leader; each bounded by its `timeout`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<Gate>,

    /// Pre-stage the payload: before the first node of this command is signalled (so
    /// before any node is cordoned), every target downloads, verifies and self-tests it into
    /// its staged file and reports back; the update that follows only swaps and restarts.
    /// A node that cannot stage (unreachable URL, wrong sha256 or signature, a binary that
    /// fails its self-test, no answer within the progress deadline) fails the command before
    /// any node was disrupted. With a `sha256` the update finds the staged file by digest;
    /// without one it downloads again.
    #[serde(default, skip_serializing_if = "is_false")]
    pub prestage: bool,

    /// With `prestage`: how many nodes stage at the same time (at least 1). Unset: all
    /// targets at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub prestage_concurrent: Option<u32>,
}

/// A health gate (DESIGN §15): a check run on the nodes a command just updated before the
/// next ones are signalled. Exactly one of `check`, `kubernetes`, `prometheus` and `settle`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Gate {
    /// Identifier of the gate, unique within the command; names it in the status, reasons
    /// and descriptions.
    #[schemars(length(min = 1))]
    pub id: String,

    /// When the gate runs: after each node completes (`node`, the default; the node keeps
    /// its slot of `limits.concurrent` until the gate passed) or after each batch (`batch`:
    /// workers then go in waves of `limits.concurrent`, each wave judged once all its nodes
    /// are done).
    #[serde(default)]
    pub after: GateAfter,

    /// How long the gate may take to pass, counted from when the node or batch completed;
    /// a duration such as `2m` (default `5m`). For `settle` the bound is `settle` itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,

    /// What a failed gate does: `Halt` (the default: no new node is signalled, nodes in
    /// flight finish, the plan ends `ApplyFailed` naming the gate and node) or `Rollback`
    /// (every node this run changed is put back; the plan ends `RolledBack`).
    #[serde(default)]
    pub on_failure: GateOnFailure,

    /// List objects and judge them with a CEL expression over `objects`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesGate>,

    /// Run an instant PromQL query and judge the result with a CEL expression over `result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusGate>,

    /// Within this duration (for example `2m`) the node is Ready again and every DaemonSet
    /// Pod scheduled to it is Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle: Option<String>,

    /// A check of the preflight shape run by the agent of each node just updated (any
    /// command but `scheduler`), judged by the leader with its `results`; it runs again
    /// every 10 s until a run passes on every node or the gate's timeout is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<GateCheck>,
}

/// A gate's node-side check: the `command` and `results` of a preflight check, run on the
/// nodes the gate judges (they are its targets).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateCheck {
    /// What the check is about, in words an operator reads next to its results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// What runs on each node (a built-in probe or an allow-listed `exec`; not `scheduler`).
    pub command: super::preflight::PreflightCommand,

    /// The possible outcomes, evaluated in order for each node as for a preflight check:
    /// `success` and `warn` pass the node, `error` (or no match) does not.
    #[serde(default)]
    pub results: Vec<super::preflight::PreflightResult>,
}

/// When a gate runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GateAfter {
    /// After each node completes.
    #[default]
    #[serde(rename = "node")]
    Node,
    /// After each batch (wave) of nodes completes.
    #[serde(rename = "batch")]
    Batch,
}

impl GateAfter {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Node => "node",
            Self::Batch => "batch",
        }
    }
}

impl JsonSchema for GateAfter {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GateAfter".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "When the gate runs: node (default) or batch.",
            ["node", "batch"].into_iter(),
        )
    }
}

/// What a failed gate does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GateOnFailure {
    /// Stop as for a failed node: in-flight nodes finish, the plan ends `ApplyFailed`.
    #[default]
    Halt,
    /// Put back every node this run changed; the plan ends `RolledBack`.
    Rollback,
}

impl JsonSchema for GateOnFailure {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GateOnFailure".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "What a failed gate does: Halt (default) or Rollback.",
            ["Halt", "Rollback"].into_iter(),
        )
    }
}

/// A gate that lists Kubernetes objects and judges them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesGate {
    /// The objects' API version (`v1`, `apps/v1`).
    #[schemars(length(min = 1))]
    pub api_version: String,

    /// The objects' kind (`Pod`, `DaemonSet`).
    #[schemars(length(min = 1))]
    pub kind: String,

    /// The namespace to list in; unset: every namespace (or a cluster-scoped kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// A label selector; `{{ .Node }}` is replaced by the node's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,

    /// A field selector (for example `spec.nodeName={{ .Node }}`); `{{ .Node }}` is
    /// replaced by the node's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<String>,

    /// A CEL expression over `objects` (the listed objects, at most 500) and `node` that
    /// must be `true`, for example `objects.all(p, p.status.phase == "Running")`.
    #[schemars(length(min = 1))]
    pub condition: String,
}

/// A gate that queries Prometheus.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusGate {
    /// The Prometheus base URL; unset: the controller's `--prometheus-url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,

    /// An instant PromQL query; `{{ .Node }}` is replaced by the node's name.
    #[schemars(length(min = 1))]
    pub query: String,

    /// A CEL expression over `result` (a list of `{metric: {label: value}, value: number}`)
    /// and `node` that must be `true`, for example `result.all(s, s.value < 0.01)`.
    #[schemars(length(min = 1))]
    pub condition: String,
}

/// Where to download one artifact from, and its expected digest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanResourceUrl {
    /// Download URL: `http://` or `https://`, with a host.
    #[schemars(regex(pattern = crate::payload::URL_PATTERN))]
    pub url: String,

    /// Hex SHA-256 of the downloaded content; verified before the artifact is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-fA-F0-9]{64}$"))]
    pub sha256: Option<String>,

    /// The payload's signature, inline: the text of a cosign `sign-blob` `.sig` (base64 of
    /// a DER ECDSA P-256 signature), of a cosign bundle (JSON), or of a minisign `.minisig`.
    /// A node with trusted keys (`--payload-keys`) accepts a `k0supdate` payload only with a
    /// signature one of them made; see also `signatureURL`. At most one of the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16384))]
    pub signature: Option<String>,

    /// Where to download the payload's signature (a file in one of the formats `signature`
    /// accepts, e.g. the `.sig` beside a k0s release binary).
    #[serde(default, rename = "signatureURL", skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::payload::URL_PATTERN))]
    pub signature_url: Option<String>,
}

// === Status ===

/// Progress of a plan, written by the autopilot leader.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    /// Plan-level state; empty until the plan is first processed.
    #[serde(default)]
    pub state: PlanStateType,

    /// Per-command progress, in the same order as `spec.commands`.
    #[serde(default)]
    pub commands: Vec<PlanCommandStatus>,

    /// Conditions explaining decisions that are not states, for example why a plan is
    /// ignored or why a spec change was not applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` of the spec this status describes: the generation the
    /// current run started from, except while `runGeneration` is set. A terminal plan whose
    /// generation moves on starts a new run (unless it is aborted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The generation the current run started from, set only when it is not
    /// `observedGeneration`: the plan is aborted and its spec changed since the run
    /// started. The new spec does not run until the abort annotation goes, and the status
    /// says so for that spec (`observedGeneration` is its generation, `Stalled` is True),
    /// so that kstatus and GitOps engines read the plan as stalled, not in progress for
    /// ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_generation: Option<i64>,

    /// Identifies the current run (`<plan uid>/<generation>`); written into every signal of
    /// this run, so a node's signal from an earlier run (even with the same `spec.id`) is
    /// never mistaken for this run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,

    /// The `spec.id` the current run started with, frozen like the commands: every signal
    /// of this run carries it as `planId`, even if the spec is edited while the run goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,

    /// Node updates completed over node updates planned in this run, over all commands
    /// (`4/6`: four targets are `SignalCompleted` out of six), the `Progress` column of
    /// `kubectl get plans`. Absent until targets are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,

    /// Set once the run is being rolled back (DESIGN §15): why, and since when. The leader
    /// then signals every node the run changed to put back what it ran before, and the
    /// plan ends `RolledBack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackStatus>,

    /// The windows of this run (`spec.window`, `downloadWindow`, `windows` and the nodes
    /// their label put in a named window), frozen when it started. Absent: no window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<super::RunWindows>,
}

/// Why and since when a run is being rolled back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackStatus {
    /// What asked for it: `gate <id> failed on <nodes>: <why>`, or `requested by an
    /// operator` (the `autopilot.k0sproject.io/rollback` annotation).
    pub reason: String,

    /// When the leader decided it.
    pub since: Time,
}

/// Progress of one command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandStatus {
    /// Index of the command in `spec.commands` (0-based).
    pub id: u32,

    /// Command-level state (same vocabulary as the plan state).
    #[serde(default)]
    pub state: PlanStateType,

    /// Why the command ended in a failure state, when there is more to say than the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,

    /// For a command with `prestage`: targets that staged the payload over all targets
    /// (`4/6`), until the command ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<String>,

    /// Per-node progress of a `k0supdate` command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k0supdate: Option<PlanCommandK0sUpdateStatus>,

    /// Per-node progress of an `airgapupdate` command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub airgapupdate: Option<PlanCommandAirgapUpdateStatus>,

    /// What the checks of a `preflight` command found, per check and node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<PlanCommandPreflightStatus>,

    /// The command exactly as the run captured it at NewPlan (version, platforms, targets,
    /// limits). Plans are immutable while they run: the run uses this copy, not the live spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<PlanCommand>,

    /// What the command waits for right now, when it is held (for example a controller whose
    /// `/readyz` fails, or a worker that is not Ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// Since when a plan controller has been seen not ready; once this is older than the
    /// controller's readiness grace, the Plan's `Stalled` condition says so (the command
    /// stays held until the controller is ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready_since: Option<Time>,

    /// Workers found still working on a signal of an earlier run of this Plan, each with
    /// when the leader first saw it in its phase: such a signal takes a slot of the
    /// workers' concurrency until it ends or shows no progress for the progress deadline.
    /// At most as many entries as the command's concurrency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_runs: Vec<EarlierRunSignal>,

    /// Gates in progress: the nodes (one, or a batch) that completed and wait for the
    /// command's gates to pass before more nodes are signalled. At most as many entries as
    /// the command's concurrency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gating: Vec<GateRun>,

    /// How many gate runs passed so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gates_passed: u32,

    /// The rollback of this command's changed nodes (DESIGN §15), once the run is rolled
    /// back: each node with its own progress, in the order they are put back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<PlanCommandK0sUpdateStatus>,
}

/// Nodes that completed and wait for the command's gates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateRun {
    /// The nodes judged (one for `after: node`, a wave for `after: batch`).
    pub nodes: Vec<String>,

    /// Which gates run: `node` or `batch`.
    pub after: GateAfter,

    /// When the run's nodes had all completed (the leader's clock): every gate's timeout
    /// counts from here. Unset while a batch's nodes still work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,

    /// The ids of the gates that passed already.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passed: Vec<String>,

    /// Why the gates not passed yet do not pass, as last evaluated (at most 1 KiB); once a
    /// gate failed, why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,

    /// The id of the gate that failed (it did not pass within its timeout); the run stays
    /// recorded so the command stops, or rolls back, on every pass after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// A worker seen working on a signal of an earlier run of the same Plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EarlierRunSignal {
    /// The worker's name.
    pub name: String,

    /// The earlier run the signal belongs to.
    pub run_id: String,

    /// The signal's phase when last seen (absent: not answered yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SignalPhase>,

    /// When the leader first saw the signal in that phase (its own clock, never the node's).
    pub since: Time,
}

/// Per-node progress of a `k0supdate` command. Stored grouped when a list is long (see
/// [`super::grouped`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanCommandK0sUpdateStatus {
    /// Targeted controllers (signalled through their `ControlNode`).
    pub controllers: Vec<TargetStatus>,

    /// Targeted workers (signalled through their `Node`).
    pub workers: Vec<TargetStatus>,
}

/// Per-node progress of an `airgapupdate` command. Stored grouped when the list is long
/// (see [`super::grouped`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanCommandAirgapUpdateStatus {
    /// Targeted workers (signalled through their `Node`).
    pub workers: Vec<TargetStatus>,
}

impl PlanStatus {
    /// The generation the current run started from: `runGeneration` when set, else
    /// `observedGeneration` (`None`: no run of ours).
    pub fn run_generation(&self) -> Option<i64> {
        self.run_generation.or(self.observed_generation)
    }

    /// Whether the plan-level state is terminal (see [`PlanStateType::is_terminal`]).
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }

    /// Every target of every command, in command order (controllers before workers).
    pub fn targets(&self) -> impl Iterator<Item = &TargetStatus> {
        self.commands.iter().flat_map(|command| {
            let k0s = command.k0supdate.iter().flat_map(|k| k.controllers.iter().chain(&k.workers));
            let airgap = command.airgapupdate.iter().flat_map(|a| a.workers.iter());
            k0s.chain(airgap)
        })
    }

    /// The `progress` this status should carry: `completed/planned` over every target of
    /// every command, or `None` while no command has targets.
    pub fn computed_progress(&self) -> Option<String> {
        let (completed, planned) = self.targets().fold((0, 0), |(done, all), target| {
            (done + usize::from(target.state == TargetState::SignalCompleted), all + 1)
        });
        (planned > 0).then(|| format!("{completed}/{planned}"))
    }
}

// === States ===

/// State of a plan or of one of its commands (REF §3.1, DESIGN §2).
///
/// On the wire these are k0s' strings. The not-yet-processed state is the empty string
/// (k0s leaves `state` empty): it is [`PlanStateType::NewPlan`] here, serialises as `""`,
/// and is also what an absent `state` deserialises to. `"NewPlan"` is accepted on read.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum PlanStateType {
    /// Not processed yet. Exits: `SchedulableWait` or a terminal state.
    #[default]
    #[serde(rename = "", alias = "NewPlan")]
    NewPlan,
    /// Evaluating; waiting for nodes. The normal resting state while a plan runs.
    SchedulableWait,
    /// A node may be signalled now.
    Schedulable,
    /// Terminal: everything done.
    Completed,
    /// Terminal: a static target has no `Node`/`ControlNode` object at NewPlan, or a
    /// target's object disappeared after it.
    IncompleteTargets,
    /// Terminal, no longer written (k0s folded it into `IncompleteTargets`, as this version
    /// does): read in statuses earlier versions wrote, where a target's object disappeared
    /// after NewPlan.
    MissingSignalNode,
    /// Terminal: a target's `<os>-<arch>` has no entry in `platforms`.
    MissingPlatform,
    /// Terminal, no longer written (k0s has no such state; a controller not ready past the
    /// readiness grace holds the plan, `Stalled`): read in statuses earlier versions wrote.
    InconsistentTargets,
    /// Terminal: the plan targets a node kind excluded by `--exclude-from-plans`.
    Restricted,
    /// Terminal: a node reported a failed download, verification or apply.
    ApplyFailed,
    /// Terminal: NewPlan refused the plan: a pre-flight check (removed APIs) failed, a
    /// payload has neither a `sha256` nor an `https://` URL, a command is malformed (a
    /// preflight check that does not compile included), or a field is one no node or
    /// scheduler could act on (a URL or version the node agent refuses, a `soak` that is not
    /// a duration, a canary on controllers); `description` says why, naming each field by
    /// its path.
    Warning,
    /// Terminal: an operator aborted the plan (the `autopilot.k0sproject.io/abort`
    /// annotation); nodes in flight finished first and no node autopilot cordoned is left
    /// cordoned.
    Aborted,
    /// Terminal: a `preflight` command's checks ended in `error`; no later command touched
    /// a node, and `description` names the failing checks and nodes. (A check NewPlan
    /// cannot compile, such as a `boolExpr` that does not parse, ends the plan `Warning`
    /// like any other malformed command.)
    PreflightFailed,
    /// Terminal: the run was rolled back (a gate with `onFailure: Rollback` failed, or an
    /// operator asked with `k0s autopilot rollback`): every node the run changed was
    /// signalled to put back what it ran before; each node's outcome is in the command's
    /// `rollback` list.
    RolledBack,
}

/// k0s' name for the plan-level use of [`PlanStateType`].
pub type PlanState = PlanStateType;

/// k0s' name for the command-level use of [`PlanStateType`].
pub type CommandState = PlanStateType;

impl PlanStateType {
    /// Every state, in declaration order.
    pub const ALL: [PlanStateType; 14] = [
        Self::NewPlan,
        Self::SchedulableWait,
        Self::Schedulable,
        Self::Completed,
        Self::IncompleteTargets,
        Self::MissingSignalNode,
        Self::MissingPlatform,
        Self::InconsistentTargets,
        Self::Restricted,
        Self::ApplyFailed,
        Self::Warning,
        Self::Aborted,
        Self::PreflightFailed,
        Self::RolledBack,
    ];

    /// The wire string (`""` for [`PlanStateType::NewPlan`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NewPlan => "",
            Self::SchedulableWait => "SchedulableWait",
            Self::Schedulable => "Schedulable",
            Self::Completed => "Completed",
            Self::IncompleteTargets => "IncompleteTargets",
            Self::MissingSignalNode => "MissingSignalNode",
            Self::MissingPlatform => "MissingPlatform",
            Self::InconsistentTargets => "InconsistentTargets",
            Self::Restricted => "Restricted",
            Self::ApplyFailed => "ApplyFailed",
            Self::Warning => "Warning",
            Self::Aborted => "Aborted",
            Self::PreflightFailed => "PreflightFailed",
            Self::RolledBack => "RolledBack",
        }
    }

    /// Whether nothing ever moves a plan or command out of this state.
    pub fn is_terminal(self) -> bool {
        match self {
            Self::NewPlan | Self::SchedulableWait | Self::Schedulable => false,
            Self::Completed
            | Self::IncompleteTargets
            | Self::MissingSignalNode
            | Self::MissingPlatform
            | Self::InconsistentTargets
            | Self::Restricted
            | Self::ApplyFailed
            | Self::Warning
            | Self::Aborted
            | Self::PreflightFailed
            | Self::RolledBack => true,
        }
    }

    /// Whether this is a terminal state other than `Completed`.
    pub fn is_failure(self) -> bool {
        self.is_terminal() && self != Self::Completed
    }
}

impl fmt::Display for PlanStateType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NewPlan => f.write_str("NewPlan"),
            other => f.write_str(other.as_str()),
        }
    }
}

impl JsonSchema for PlanStateType {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PlanStateType".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "State of a plan or command; empty until processed.",
            Self::ALL.iter().map(|s| s.as_str()),
        )
    }
}
