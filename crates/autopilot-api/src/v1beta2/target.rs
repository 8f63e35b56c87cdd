//! Who a command targets and where each target stands: the target lists of the spec (with
//! their discovery and limits) and the per-node status the leader keeps, shared by the
//! update and preflight commands.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::signal::SignalPhase;

/// The node groups a `k0supdate` command targets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandTargets {
    /// Controllers to update (one at a time, all before any worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controllers: Option<PlanCommandTarget>,

    /// Workers to update (at most `limits.concurrent` at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<PlanCommandTarget>,
}

/// A set of nodes and how many of them may update at once.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandTarget {
    /// How to find the nodes: a static list or a selector.
    pub discovery: PlanCommandTargetDiscovery,

    /// Concurrency limits; ignored for controllers, which always update one at a time.
    #[serde(default)]
    pub limits: PlanCommandTargetLimits,
}

/// How targets are found. If both are set, `static` wins; if neither is set, no node is
/// targeted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandTargetDiscovery {
    /// An explicit list of node names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#static: Option<PlanCommandTargetDiscoveryStatic>,

    /// Label and field selectors; `selector: {}` selects every node of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<PlanCommandTargetDiscoverySelector>,
}

/// An explicit list of nodes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandTargetDiscoveryStatic {
    /// Names of the `Node`s (workers) or `ControlNode`s (controllers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
}

/// Kubernetes selectors over nodes; both must match when both are set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandTargetDiscoverySelector {
    /// A label selector, as in `kubectl get -l` (for example `role=edge,zone!=b`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<String>,

    /// A field selector, as in `kubectl get --field-selector` (for example
    /// `metadata.name=worker0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<String>,
}

/// Limits of a target group: how many nodes update at once, how many may fail, and an
/// optional canary. Controllers ignore them (one at a time, any failure stops the plan).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCommandTargetLimits {
    /// How many nodes of this group may be updating at the same time: a count (at least 1)
    /// or a percentage of the group's targets (`"25%"`, rounded down, at least 1 node).
    /// Nodes still working on a signal of an earlier run count too.
    #[serde(default)]
    pub concurrent: Concurrency,

    /// Workers only: how many nodes may fail before the plan stops signalling new ones.
    /// Unset or 0: the first failure stops it (in-flight nodes finish, then `ApplyFailed`).
    /// With N, the command goes on while at most N workers have failed and then completes,
    /// its `description` naming each failed node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,

    /// Workers only: update this many workers (the first by name) first; every other
    /// worker waits until they completed and stayed Ready for `soak`. A canary that fails
    /// or goes NotReady during the soak ends the command with no other worker touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub canary: Option<u32>,

    /// How long the canary workers must stay Ready after they completed before the rest
    /// are signalled; a duration such as `10m`. Unset: no soak (the rest follow as soon as
    /// the canaries completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<String>,

    /// Workers only: update in failure-domain waves, one group of workers at a time, the
    /// groups being the values of this Node label (for example
    /// `topology.kubernetes.io/zone`). Groups go in ascending order of the value; workers
    /// without the label form the last group. Within a group at most `concurrent` workers
    /// are in flight (a percentage counts the group's workers); the next group starts only
    /// once every worker of the group is done and its gates passed, and never after a
    /// failure past `maxFailures`. Each worker's group is read when the run starts and kept
    /// with it (`status.commands[].k0supdate.workers[].group`): a node relabelling itself
    /// mid-run changes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 317))]
    pub group_by: Option<String>,

    /// Workers only, with `groupBy`: what happens between two groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between_groups: Option<BetweenGroups>,
}

/// What happens between two failure-domain groups (`limits.betweenGroups`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BetweenGroups {
    /// How long the workers of a group that completed must stay Ready before the next
    /// group is signalled, counted from the group's last completion; a duration such as
    /// `10m`. A worker of the group that is not Ready during the soak ends the command with
    /// no worker of a later group touched. Unset: the next group follows at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<String>,
}

/// `limits.concurrent`: a node count or a percentage of the group's targets.
///
/// On the wire an integer (`3`) or a string ending in `%` (`"25%"`), like a Deployment's
/// `maxUnavailable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Concurrency {
    /// At most this many nodes (0 from an older schema counts as 1).
    Count(u32),
    /// At most this percentage (1..=100) of the group's targets, rounded down, at least 1.
    Percent(u32),
}

impl Default for Concurrency {
    fn default() -> Self {
        Self::Count(1)
    }
}

impl Concurrency {
    /// How many of `targets` nodes may be in flight at once (always at least 1).
    pub fn of(self, targets: usize) -> usize {
        let limit = match self {
            Self::Count(count) => usize::try_from(count).unwrap_or(usize::MAX),
            Self::Percent(percent) => {
                let percent = usize::try_from(percent.min(100)).unwrap_or(100);
                targets.saturating_mul(percent) / 100
            }
        };
        limit.max(1)
    }
}

impl fmt::Display for Concurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count(count) => write!(f, "{count}"),
            Self::Percent(percent) => write!(f, "{percent}%"),
        }
    }
}

impl Serialize for Concurrency {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Count(count) => serializer.serialize_u32(*count),
            Self::Percent(_) => serializer.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for Concurrency {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Count(u32),
            Text(String),
            // The int-or-string schema is nullable: `null` is the default, as if unset.
            Null(()),
        }
        match Wire::deserialize(deserializer)? {
            Wire::Null(()) => Ok(Self::default()),
            Wire::Count(count) => Ok(Self::Count(count)),
            Wire::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl std::str::FromStr for Concurrency {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || {
            format!(
                "limits.concurrent {text:?} is neither a node count nor a percentage from 1% to \
                 100% (for example 3 or \"25%\")"
            )
        };
        match text.strip_suffix('%') {
            Some(number) => match number.parse::<u32>() {
                Ok(percent @ 1..=100) if !number.starts_with('+') => Ok(Self::Percent(percent)),
                Ok(_) | Err(_) => Err(invalid()),
            },
            None => text.parse::<u32>().map(Self::Count).map_err(|_| invalid()),
        }
    }
}

impl JsonSchema for Concurrency {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Concurrency".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "How many nodes of this group may be updating at the same time: a \
                            count (at least 1) or a percentage of the group's targets (\"25%\", \
                            rounded down, at least 1 node). Nodes still working on a signal of \
                            an earlier run count too.",
            "x-kubernetes-int-or-string": true,
            "minimum": 1,
            "pattern": "^(100|[1-9][0-9]?)%$",
            "default": 1,
        })
    }
}

/// Serde helper: leave `false` booleans out, as Go's `omitempty` does.
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// Serde helper: leave zero counters out.
pub(crate) fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Progress of one targeted node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetStatus {
    /// Name of the `Node` or `ControlNode`.
    pub name: String,

    /// Where the node is in the plan.
    pub state: TargetState,

    /// When `state` (or `phase`) last changed.
    pub last_updated_timestamp: Time,

    /// The node's own signal phase, as last read back from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SignalPhase>,

    /// Human-readable detail, for example why the node failed or what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// For a `preflight` command: the ids of the checks this node runs (resolved at NewPlan
    /// from each check's targets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,

    /// For an update: the version the node ran when the leader signalled it (its
    /// `autopilot.k0sproject.io/k0s-version` then), what a rollback puts back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,

    /// How the leader's drain left the node when it did not evict every pod (`drain:
    /// IfPossible` or `Never`), for example `cordoned, not drained: no other node can take
    /// pods default/web-0`. Kept after the node completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<String>,

    /// With `limits.groupBy`: the value of the node's group label when the run started
    /// (absent: the node had no such label and is in the last group). Frozen with the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// For a command with `prestage`: where the node stands in staging the payload
    /// (`Requested`, `Staged`, `Failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prestage: Option<crate::prestage::PrestageState>,

    /// The `created` of the signal the leader wrote to this node for this command in this
    /// run. The leader records it here before it writes the signal, and the node and the
    /// drain act only on a signal whose `created` this records (DESIGN §14): a signal
    /// anyone else copied onto the node is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signalled: Option<String>,

    /// The `created` of the signal whose drain the leader finished (the node cordoned and,
    /// as its command's `drain` asks, drained). The leader records it before it moves the
    /// signal to `ApplyingUpdate`, and the node restarts only when this records its signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained: Option<String>,
}

impl TargetStatus {
    /// A target in `state` as of `now`, with no phase or reason.
    pub fn new(name: impl Into<String>, state: TargetState, now: jiff::Timestamp) -> Self {
        Self {
            name: name.into(),
            state,
            last_updated_timestamp: Time(now),
            phase: None,
            reason: None,
            checks: Vec::new(),
            from: None,
            drain: None,
            group: None,
            prestage: None,
            signalled: None,
            drained: None,
        }
    }
}

/// State of one targeted node within a command (REF §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TargetState {
    /// Discovered and valid; not signalled yet. Exits: `SignalSent`, `MissingPlatform`,
    /// `MissingSignalNode`.
    SignalPending,
    /// The signal was written to the node's object; the node is working on it. Exits:
    /// `SignalCompleted`, `SignalApplyFailed`, `MissingSignalNode`.
    SignalSent,
    /// Terminal: the node reported `Completed` for this plan and command.
    SignalCompleted,
    /// Terminal: the node reported `FailedDownload` or `Failed`.
    SignalApplyFailed,
    /// Terminal: the node's `<os>-<arch>` is unknown or has no entry in `platforms`.
    #[serde(rename = "SignalMissingPlatform")]
    MissingPlatform,
    /// Terminal: the node's `Node`/`ControlNode` object does not exist.
    #[serde(rename = "SignalMissingNode")]
    MissingSignalNode,
}

impl TargetState {
    /// Every state, in declaration order.
    pub const ALL: [TargetState; 6] = [
        Self::SignalPending,
        Self::SignalSent,
        Self::SignalCompleted,
        Self::SignalApplyFailed,
        Self::MissingPlatform,
        Self::MissingSignalNode,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SignalPending => "SignalPending",
            Self::SignalSent => "SignalSent",
            Self::SignalCompleted => "SignalCompleted",
            Self::SignalApplyFailed => "SignalApplyFailed",
            Self::MissingPlatform => "SignalMissingPlatform",
            Self::MissingSignalNode => "SignalMissingNode",
        }
    }

    /// Whether the target failed: its node reported a failure, its object vanished, or its
    /// platform has no entry.
    pub fn is_failure(self) -> bool {
        match self {
            Self::SignalApplyFailed | Self::MissingPlatform | Self::MissingSignalNode => true,
            Self::SignalPending | Self::SignalSent | Self::SignalCompleted => false,
        }
    }

    /// Whether the node is done with this command, successfully or not.
    pub fn is_terminal(self) -> bool {
        match self {
            Self::SignalPending | Self::SignalSent => false,
            Self::SignalCompleted
            | Self::SignalApplyFailed
            | Self::MissingPlatform
            | Self::MissingSignalNode => true,
        }
    }
}

impl fmt::Display for TargetState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JsonSchema for TargetState {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TargetState".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "State of a targeted node.",
            Self::ALL.iter().map(|s| s.as_str()),
        )
    }
}
