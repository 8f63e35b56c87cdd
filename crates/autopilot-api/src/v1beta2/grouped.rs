//! How a command's target lists are stored: one entry per node while a list is short, and
//! grouped by name once it is long, so a plan over thousands of nodes stays far below etcd's
//! object limit (1.5 MiB by default).
//!
//! In memory every target is one [`TargetStatus`], whatever the size: the engine, the
//! status view and the metrics never see the grouping. On the wire a list longer than
//! [`GROUP_ABOVE`] keeps one entry per node only for the targets that carry something of
//! their own (in flight, failed with a reason, or with preflight checks); the targets that
//! are only waiting (`SignalPending`) or done (`SignalCompleted`) are listed by name in a
//! [`TargetGroup`] per state and phase beside it (`groupedWorkers`, `groupedControllers`).
//! A group's `lastUpdatedTimestamp` is the latest change among its nodes, which is what
//! each of them reads back: no decision depends on a waiting or done node's own timestamp.
//!
//! A list is grouped only when its names are strictly ascending (they are: discovery sorts
//! and deduplicates them), so reading it back in name order restores the list exactly.
//!
//! A preflight check's verdicts per node ([`PreflightCheckStatus`]) are stored the same way:
//! in a long list, the nodes that passed are listed by name per status code in
//! `groupedNodes`, without their message (a passed check needs none kept; DESIGN §14 bounds
//! the status), and only `warn` and `error` verdicts keep one entry per node.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::plan::{PlanCommandAirgapUpdateStatus, PlanCommandK0sUpdateStatus};
use super::preflight::{
    CheckStatus, FrozenTemplate, PlanCommandPreflightStatus, PreflightCheckStatus,
    PreflightNodeStatus, PreflightPodStatus,
};
use super::target::{TargetState, TargetStatus};
use crate::signal::SignalPhase;

/// A target list longer than this is stored grouped.
pub const GROUP_ABOVE: usize = 50;

/// Nodes of one command that are in the same state and phase and carry nothing else,
/// listed by name (a long target list is stored this way).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetGroup {
    /// The state of every node in the group: `SignalPending` or `SignalCompleted`.
    pub state: TargetState,

    /// The signal phase of every node in the group, as last read back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SignalPhase>,

    /// The latest change among the group's nodes.
    pub last_updated_timestamp: Time,

    /// For a `preflight` command: the ids of the checks every node of the group runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,

    /// For an update: the version every node of the group ran when it was signalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,

    /// With `limits.groupBy`: the failure-domain group of every node of the group (the
    /// value of its label when the run started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// For a command with `prestage`: where every node of the group stands in staging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prestage: Option<crate::prestage::PrestageState>,

    /// The `created` of the signal the leader wrote to every node of the group (nodes
    /// signalled in the same pass share it, so a group is a batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signalled: Option<String>,

    /// The `created` of the signal whose drain the leader finished, for every node of the
    /// group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained: Option<String>,

    /// The nodes, by name, in ascending order.
    pub names: Vec<String>,
}

/// Whether a target carries nothing but its name, state, phase, checks and timestamp (no
/// reason, no drain note), and is not in flight: such a target can be stored in a group. A failed target always has a
/// reason, unless the status budget dropped it (`autopilot_engine::plan::budget`).
fn groupable(target: &TargetStatus) -> bool {
    let state = match target.state {
        TargetState::SignalPending
        | TargetState::SignalCompleted
        | TargetState::SignalApplyFailed => true,
        TargetState::SignalSent | TargetState::MissingPlatform | TargetState::MissingSignalNode => {
            false
        }
    };
    // A node asked to stage is in flight: its own timestamp starts its deadline.
    let staging = target.prestage == Some(crate::prestage::PrestageState::Requested);
    state && !staging && target.reason.is_none() && target.drain.is_none()
}

/// A target list as stored: the targets kept one by one, and the groups.
struct Split<'a> {
    single: Cow<'a, [TargetStatus]>,
    groups: Vec<TargetGroup>,
}

fn split(targets: &[TargetStatus]) -> Split<'_> {
    let ascending = targets.windows(2).all(|pair| pair[0].name < pair[1].name);
    if targets.len() <= GROUP_ABOVE || !ascending {
        return Split { single: Cow::Borrowed(targets), groups: Vec::new() };
    }
    let mut single = Vec::new();
    let mut groups: Vec<TargetGroup> = Vec::new();
    for target in targets {
        if !groupable(target) {
            single.push(target.clone());
            continue;
        }
        let group = groups.iter_mut().find(|g| {
            g.state == target.state
                && g.phase == target.phase
                && g.checks == target.checks
                && g.from == target.from
                && g.group == target.group
                && g.prestage == target.prestage
                && g.signalled == target.signalled
                && g.drained == target.drained
        });
        match group {
            Some(group) => {
                group.last_updated_timestamp =
                    Time(group.last_updated_timestamp.0.max(target.last_updated_timestamp.0));
                group.names.push(target.name.clone());
            }
            None => groups.push(TargetGroup {
                state: target.state,
                phase: target.phase,
                last_updated_timestamp: target.last_updated_timestamp.clone(),
                checks: target.checks.clone(),
                from: target.from.clone(),
                group: target.group.clone(),
                prestage: target.prestage,
                signalled: target.signalled.clone(),
                drained: target.drained.clone(),
                names: vec![target.name.clone()],
            }),
        }
    }
    Split { single: Cow::Owned(single), groups }
}

/// The list a stored one stands for: its single targets and its groups' nodes, in name
/// order when there were groups (as it was before it was stored).
fn join(mut single: Vec<TargetStatus>, groups: Vec<TargetGroup>) -> Vec<TargetStatus> {
    if groups.is_empty() {
        return single;
    }
    for group in groups {
        for name in group.names {
            single.push(TargetStatus {
                name,
                state: group.state,
                last_updated_timestamp: group.last_updated_timestamp.clone(),
                phase: group.phase,
                reason: None,
                checks: group.checks.clone(),
                from: group.from.clone(),
                drain: None,
                group: group.group.clone(),
                prestage: group.prestage,
                signalled: group.signalled.clone(),
                drained: group.drained.clone(),
            });
        }
    }
    single.sort_by(|a, b| a.name.cmp(&b.name));
    single
}

/// `k0supdate` progress as stored.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "PlanCommandK0sUpdateStatus")]
/// Per-node progress of a `k0supdate` command.
struct K0sUpdateWire<'a> {
    /// Targeted controllers (signalled through their `ControlNode`), one entry each; in a
    /// long list only those in flight, failed, or with checks (the others are in
    /// `groupedControllers`).
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    controllers: Cow<'a, [TargetStatus]>,

    /// Targeted workers (signalled through their `Node`), one entry each; in a long list
    /// only those in flight, failed, or with checks (the others are in `groupedWorkers`).
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    workers: Cow<'a, [TargetStatus]>,

    /// When more than 50 controllers are targeted: those waiting or done, by state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    grouped_controllers: Vec<TargetGroup>,

    /// When more than 50 workers are targeted: those waiting or done, by state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    grouped_workers: Vec<TargetGroup>,
}

/// `airgapupdate` progress as stored.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "PlanCommandAirgapUpdateStatus")]
/// Per-node progress of an `airgapupdate` command.
struct AirgapUpdateWire<'a> {
    /// Targeted workers (signalled through their `Node`), one entry each; in a long list
    /// only those in flight, failed, or with checks (the others are in `groupedWorkers`).
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    workers: Cow<'a, [TargetStatus]>,

    /// When more than 50 workers are targeted: those waiting or done, by state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    grouped_workers: Vec<TargetGroup>,
}

impl Serialize for PlanCommandK0sUpdateStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let controllers = split(&self.controllers);
        let workers = split(&self.workers);
        K0sUpdateWire {
            controllers: controllers.single,
            workers: workers.single,
            grouped_controllers: controllers.groups,
            grouped_workers: workers.groups,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PlanCommandK0sUpdateStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = K0sUpdateWire::deserialize(deserializer)?;
        Ok(Self {
            controllers: join(wire.controllers.into_owned(), wire.grouped_controllers),
            workers: join(wire.workers.into_owned(), wire.grouped_workers),
        })
    }
}

impl JsonSchema for PlanCommandK0sUpdateStatus {
    fn schema_name() -> Cow<'static, str> {
        K0sUpdateWire::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        K0sUpdateWire::json_schema(generator)
    }
}

impl Serialize for PlanCommandAirgapUpdateStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let workers = split(&self.workers);
        AirgapUpdateWire { workers: workers.single, grouped_workers: workers.groups }
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PlanCommandAirgapUpdateStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = AirgapUpdateWire::deserialize(deserializer)?;
        Ok(Self { workers: join(wire.workers.into_owned(), wire.grouped_workers) })
    }
}

impl JsonSchema for PlanCommandAirgapUpdateStatus {
    fn schema_name() -> Cow<'static, str> {
        AirgapUpdateWire::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        AirgapUpdateWire::json_schema(generator)
    }
}

/// `preflight` progress as stored.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "PlanCommandPreflightStatus")]
/// What a `preflight` command found, per check and node.
struct PreflightWire<'a> {
    /// The worst status of any check; absent while the checks run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<CheckStatus>,

    /// Every check, in spec order.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    checks: Cow<'a, [PreflightCheckStatus]>,

    /// Targeted controllers (signalled through their `ControlNode`), each with the checks it
    /// runs; in a long list only those in flight or failed with a reason (the others are in
    /// `groupedControllers`).
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    controllers: Cow<'a, [TargetStatus]>,

    /// Targeted workers (signalled through their `Node`), each with the checks it runs; in a
    /// long list only those in flight or failed with a reason (the others are in
    /// `groupedWorkers`).
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    workers: Cow<'a, [TargetStatus]>,

    /// When more than 50 controllers are targeted: those waiting or done, by state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    grouped_controllers: Vec<TargetGroup>,

    /// When more than 50 workers are targeted: those waiting or done, by state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    grouped_workers: Vec<TargetGroup>,

    /// The Pods of `scheduler` checks: one per check and node, run by the node's kubelet
    /// (such checks signal no node).
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    pods: Cow<'a, [PreflightPodStatus]>,

    /// The Pod template of each `scheduler` check, read and frozen at NewPlan: a changed
    /// ConfigMap does not change a running check.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    templates: Cow<'a, [FrozenTemplate]>,
}

impl Serialize for PlanCommandPreflightStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let controllers = split(&self.controllers);
        let workers = split(&self.workers);
        PreflightWire {
            status: self.status,
            checks: Cow::Borrowed(&self.checks),
            controllers: controllers.single,
            workers: workers.single,
            grouped_controllers: controllers.groups,
            grouped_workers: workers.groups,
            pods: Cow::Borrowed(&self.pods),
            templates: Cow::Borrowed(&self.templates),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PlanCommandPreflightStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = PreflightWire::deserialize(deserializer)?;
        Ok(Self {
            status: wire.status,
            checks: wire.checks.into_owned(),
            controllers: join(wire.controllers.into_owned(), wire.grouped_controllers),
            workers: join(wire.workers.into_owned(), wire.grouped_workers),
            pods: wire.pods.into_owned(),
            templates: wire.templates.into_owned(),
        })
    }
}

impl JsonSchema for PlanCommandPreflightStatus {
    fn schema_name() -> Cow<'static, str> {
        PreflightWire::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        PreflightWire::json_schema(generator)
    }
}

/// Nodes on which one check ended with the same status and status code and no message to
/// keep (a passed check's is not kept), by name: a long verdict list is stored this way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightNodeGroup {
    /// The status of every node in the group.
    pub status: CheckStatus,

    /// The status code every node reported.
    pub status_code: i64,

    /// The nodes, by name, in ascending order.
    pub names: Vec<String>,
}

/// A check's verdicts as stored.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "PreflightCheckStatus")]
/// What one check found over its nodes.
struct PreflightCheckWire<'a> {
    /// The check's id.
    id: Cow<'a, str>,

    /// The worst status of its nodes; absent while nodes are still running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<CheckStatus>,

    /// Every target node, by name; in a long list only those with a warning or an error
    /// (the others are in `groupedNodes`).
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    nodes: Cow<'a, [PreflightNodeStatus]>,

    /// When more than 50 nodes ran the check: those that passed, and those without a
    /// message, by status and status code.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    grouped_nodes: Vec<PreflightNodeGroup>,
}

impl Serialize for PreflightCheckStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ascending = self.nodes.windows(2).all(|pair| pair[0].name < pair[1].name);
        let (nodes, grouped_nodes) = if self.nodes.len() <= GROUP_ABOVE || !ascending {
            (Cow::Borrowed(self.nodes.as_slice()), Vec::new())
        } else {
            let mut single = Vec::new();
            let mut groups: Vec<PreflightNodeGroup> = Vec::new();
            for node in &self.nodes {
                // Passed (its message is not kept), or with no message to keep.
                if node.status != CheckStatus::Success && !node.message.is_empty() {
                    single.push(node.clone());
                    continue;
                }
                let group = groups
                    .iter_mut()
                    .find(|g| g.status == node.status && g.status_code == node.status_code);
                match group {
                    Some(group) => group.names.push(node.name.clone()),
                    None => groups.push(PreflightNodeGroup {
                        status: node.status,
                        status_code: node.status_code,
                        names: vec![node.name.clone()],
                    }),
                }
            }
            (Cow::Owned(single), groups)
        };
        PreflightCheckWire {
            id: Cow::Borrowed(&self.id),
            status: self.status,
            nodes,
            grouped_nodes,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PreflightCheckStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = PreflightCheckWire::deserialize(deserializer)?;
        let mut nodes = wire.nodes.into_owned();
        if !wire.grouped_nodes.is_empty() {
            for group in wire.grouped_nodes {
                nodes.extend(group.names.into_iter().map(|name| PreflightNodeStatus {
                    name,
                    status: group.status,
                    status_code: group.status_code,
                    message: String::new(),
                }));
            }
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(Self { id: wire.id.into_owned(), status: wire.status, nodes })
    }
}

impl JsonSchema for PreflightCheckStatus {
    fn schema_name() -> Cow<'static, str> {
        PreflightCheckWire::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        PreflightCheckWire::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + second).expect("a valid timestamp")
    }

    fn fleet(n: usize) -> Vec<TargetStatus> {
        (0..n)
            .map(|i| TargetStatus::new(format!("worker-{i:04}"), TargetState::SignalPending, at(0)))
            .collect()
    }

    fn round_trip(
        status: &PlanCommandK0sUpdateStatus,
    ) -> (serde_json::Value, PlanCommandK0sUpdateStatus) {
        let json = serde_json::to_value(status).expect("serialises");
        let back = serde_json::from_value(json.clone()).expect("reads back");
        (json, back)
    }

    #[test]
    fn a_short_list_is_stored_one_entry_per_node_as_k0s_does() {
        let mut workers = fleet(GROUP_ABOVE);
        workers[3].state = TargetState::SignalCompleted;
        let status = PlanCommandK0sUpdateStatus { controllers: fleet(3), workers };
        let (json, back) = round_trip(&status);
        assert_eq!(json["workers"].as_array().map(Vec::len), Some(GROUP_ABOVE));
        assert_eq!(json.get("groupedWorkers"), None);
        assert_eq!(back, status);
    }

    #[test]
    fn a_long_list_groups_waiting_and_done_nodes_and_keeps_failures_and_flight_one_by_one() {
        let mut workers = fleet(200);
        for (i, target) in workers.iter_mut().enumerate().take(120) {
            target.state = TargetState::SignalCompleted;
            target.phase = Some(SignalPhase::Completed);
            target.last_updated_timestamp = Time(at(i as i64));
        }
        workers[7].state = TargetState::SignalApplyFailed;
        workers[7].reason = Some("no progress in Downloading for 10m".into());
        workers[150].state = TargetState::SignalSent;
        workers[150].last_updated_timestamp = Time(at(500));
        let status = PlanCommandK0sUpdateStatus { controllers: Vec::new(), workers };
        let (json, back) = round_trip(&status);

        let single: Vec<&str> = json["workers"]
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(single, ["worker-0007", "worker-0150"]);
        let groups = json["groupedWorkers"].as_array().expect("groups");
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0]["state"], "SignalCompleted");
        assert_eq!(groups[0]["names"].as_array().map(Vec::len), Some(119));
        assert_eq!(groups[1]["state"], "SignalPending");
        assert_eq!(groups[1]["names"].as_array().map(Vec::len), Some(79));

        // Read back: the same nodes in the same order with the same states, phases and
        // reasons; a grouped node reads its group's latest timestamp, the others their own.
        assert_eq!(back.workers.len(), 200);
        for (read, written) in back.workers.iter().zip(&status.workers) {
            assert_eq!(
                (&read.name, read.state, read.phase),
                (&written.name, written.state, written.phase)
            );
            assert_eq!(read.reason, written.reason);
        }
        assert_eq!(
            back.workers[7].last_updated_timestamp,
            status.workers[7].last_updated_timestamp
        );
        assert_eq!(back.workers[150].last_updated_timestamp, Time(at(500)));
        assert_eq!(back.workers[0].last_updated_timestamp, Time(at(119)));
        // Stored again, it is the same text: a status read back and left unchanged is not
        // written again.
        assert_eq!(serde_json::to_value(&back).expect("serialises"), json);
    }

    #[test]
    fn a_list_not_in_name_order_is_never_grouped() {
        let mut workers = fleet(100);
        workers.swap(0, 1);
        let status = PlanCommandK0sUpdateStatus { controllers: Vec::new(), workers };
        let (json, back) = round_trip(&status);
        assert_eq!(json.get("groupedWorkers"), None);
        assert_eq!(back, status);
    }

    #[test]
    fn five_thousand_completed_workers_take_a_small_part_of_the_object_limit() {
        let mut workers = fleet(5000);
        for target in &mut workers {
            target.state = TargetState::SignalCompleted;
            target.phase = Some(SignalPhase::Completed);
        }
        let status = PlanCommandAirgapUpdateStatus { workers };
        let bytes = serde_json::to_vec(&status).expect("serialises").len();
        // 5,000 names of 11 characters: about 14 bytes each.
        assert!(bytes < 80 * 1024, "{bytes} bytes");
        let back: PlanCommandAirgapUpdateStatus =
            serde_json::from_slice(&serde_json::to_vec(&status).expect("serialises"))
                .expect("reads back");
        assert_eq!(back, status);
    }

    fn verdicts(n: usize) -> PreflightCheckStatus {
        PreflightCheckStatus {
            id: "port".to_owned(),
            status: Some(CheckStatus::Error),
            nodes: (0..n)
                .map(|i| PreflightNodeStatus {
                    name: format!("worker-{i:04}"),
                    status: if i % 10 == 3 { CheckStatus::Error } else { CheckStatus::Success },
                    status_code: if i % 10 == 3 { 98 } else { 0 },
                    message: format!("port 6443 on worker-{i:04}"),
                })
                .collect(),
        }
    }

    #[test]
    fn short_verdict_lists_keep_every_node_and_message() {
        let check = verdicts(GROUP_ABOVE);
        let json = serde_json::to_value(&check).expect("serialises");
        assert_eq!(json["nodes"].as_array().map(Vec::len), Some(GROUP_ABOVE));
        assert_eq!(json.get("groupedNodes"), None);
        let back: PreflightCheckStatus = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, check);
    }

    #[test]
    fn long_verdict_lists_group_passed_nodes_without_their_messages() {
        let check = verdicts(1000);
        let json = serde_json::to_value(&check).expect("serialises");
        // Only the failures keep an entry (and their message).
        assert_eq!(json["nodes"].as_array().map(Vec::len), Some(100));
        assert_eq!(json["nodes"][0]["message"], "port 6443 on worker-0003");
        assert_eq!(json["groupedNodes"][0]["statusCode"], 0);
        assert_eq!(json["groupedNodes"][0]["names"].as_array().map(Vec::len), Some(900));
        let back: PreflightCheckStatus = serde_json::from_value(json).expect("reads back");
        assert_eq!(back.nodes.len(), 1000);
        let mut expected = check.clone();
        for node in &mut expected.nodes {
            if node.status == CheckStatus::Success {
                node.message.clear();
            }
        }
        assert_eq!(back, expected, "the same verdicts, in name order, passed ones without text");
        // 100 entries of ~90 bytes and 900 names of ~14: about 22 KiB; one entry per node
        // would be about 90 KiB.
        let bytes = serde_json::to_vec(&check).expect("serialises").len();
        assert!(bytes < 24 * 1024, "{bytes} bytes");
    }
}
