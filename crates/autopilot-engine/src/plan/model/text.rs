//! What the engine writes into the status and Events for people to read, shared by every
//! rule: node lists bounded in count and bytes, node-written reasons capped, conditions.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// At most this many node names in one batch Event's note; the rest are counted ("and 40
/// more"). A batch Event stands for many per-node Events (Event series only fold repeats
/// about one object), and the API server refuses notes over 1 KiB, so the list is bounded
/// by count and by [`NAMED_NODES_MAX_BYTES`]. Each node's own state, phase and reason stay
/// in the Plan's status and in the leader's log.
pub(in crate::plan) const MAX_NAMED_NODES: usize = 20;

/// The most bytes of node names (with their separators) in one batch Event's note; with
/// the command's label and the count it stays well under the API server's 1 KiB.
pub(in crate::plan) const NAMED_NODES_MAX_BYTES: usize = 640;

/// `names` joined with `, `: at most [`MAX_NAMED_NODES`] of them within
/// [`NAMED_NODES_MAX_BYTES`] (the first is always named: a node name has at most 253
/// bytes), the others counted as `and K more`.
pub(crate) fn name_list<S: AsRef<str>>(names: &[S]) -> String {
    let mut list = String::new();
    let mut named = 0;
    for name in names.iter().take(MAX_NAMED_NODES) {
        let name = name.as_ref();
        let separator = if named == 0 { "" } else { ", " };
        if named > 0 && list.len() + separator.len() + name.len() > NAMED_NODES_MAX_BYTES {
            break;
        }
        list.push_str(separator);
        list.push_str(name);
        named += 1;
    }
    if named < names.len() {
        list.push_str(&format!(" and {} more", names.len() - named));
    }
    list
}

/// The most bytes of a node-written `reason` copied into the Plan status.
///
/// A node writes its signal's `reason` itself, so it could put megabytes there; the Plan
/// status (and every Event and command description quoting it) must stay small enough to
/// write and to read. 1 KiB holds any real error chain (a sha256 mismatch with both digests
/// and the URL is about 250 bytes).
pub(in crate::plan) const MAX_NODE_REASON: usize = 1024;

/// A node-written reason as the Plan status keeps it: unchanged if it fits in
/// [`MAX_NODE_REASON`] bytes, else cut at a char boundary and ended with `…`, the whole
/// still within [`MAX_NODE_REASON`] bytes.
pub(in crate::plan) fn cap_node_reason(reason: &str) -> String {
    if reason.len() <= MAX_NODE_REASON {
        return reason.to_owned();
    }
    // The mark counts against the budget.
    autopilot_api::text::truncate(reason, MAX_NODE_REASON - '…'.len_utf8())
}

/// Make a `True` condition of `type_` say `reason` and `message`. Returns whether it is new.
/// An existing condition keeps its `lastTransitionTime` (its status does not change).
pub(in crate::plan) fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    reason: &str,
    message: &str,
    generation: i64,
    now: Timestamp,
) -> bool {
    let existed = conditions.iter().any(|c| c.type_ == type_);
    set_condition_to(conditions, type_, true, reason, message, generation, now);
    !existed
}

/// Make the condition of `type_` `True` or `False` with `reason` and `message`, adding it if
/// missing. Its `lastTransitionTime` moves only when its status changes. Returns whether it
/// turned to `value` (was missing or had the other status).
pub(in crate::plan) fn set_condition_to(
    conditions: &mut Vec<Condition>,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: Timestamp,
) -> bool {
    let status = if value { "True" } else { "False" };
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        let turned = existing.status != status;
        if turned {
            status.clone_into(&mut existing.status);
            existing.last_transition_time = Time(now);
        }
        reason.clone_into(&mut existing.reason);
        message.clone_into(&mut existing.message);
        existing.observed_generation = Some(generation);
        return turned;
    }
    conditions.push(Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: Some(generation),
        last_transition_time: Time(now),
    });
    true
}
