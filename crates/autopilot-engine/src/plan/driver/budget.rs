//! The Plan status's size budget (DESIGN §14).
//!
//! etcd refuses any object over its request limit (1.5 MiB by default), and a status write
//! that is refused fails on every pass: the plan could never end. Most of a big status is
//! bounded by construction (long target and verdict lists are stored grouped, node-written
//! reasons and verdict messages are capped at 1 KiB each), but a thousand failing nodes with
//! a full reason each would still not fit. So after every pass the status is measured; one
//! over [`STATUS_BUDGET_BYTES`] has its per-node texts (target reasons, verdict messages)
//! shortened to [`SHORT_TEXT_BYTES`], then dropped, until it fits, and carries the condition
//! `StatusShrunk` saying so. Nothing that a decision reads is touched: states, phases,
//! timestamps, frozen commands and names stay.

use autopilot_api::keys::conditions;
use autopilot_api::v1beta2::{PlanStatus, TargetStatus};
use jiff::Timestamp;

/// The most bytes the Plan status may take as JSON: half of etcd's default request limit
/// (1.5 MiB), leaving the other half to the spec, the metadata and the managed fields.
pub const STATUS_BUDGET_BYTES: usize = 786_432;

/// What a per-node text is cut to on the first shrink.
pub const SHORT_TEXT_BYTES: usize = 128;

/// How many bytes `status` takes as JSON.
pub fn status_bytes(status: &PlanStatus) -> usize {
    /// Counts what is written, keeps nothing.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serialising a status to a sink that never fails cannot fail.
    serde_json::to_writer(&mut count, status).map_or(usize::MAX, |()| count.0)
}

/// Shrink `status` to [`STATUS_BUDGET_BYTES`] if it is over: per-node texts cut to
/// [`SHORT_TEXT_BYTES`], then dropped, and the condition `StatusShrunk` set (as of `now`,
/// for `generation`). Returns whether it shrank anything.
pub(in crate::plan) fn fit(status: &mut PlanStatus, generation: i64, now: Timestamp) -> bool {
    let before = status_bytes(status);
    if before <= STATUS_BUDGET_BYTES {
        return false;
    }
    for limit in [Some(SHORT_TEXT_BYTES), None] {
        shorten(status, limit);
        if status_bytes(status) <= STATUS_BUDGET_BYTES {
            break;
        }
    }
    let message = format!(
        "the status was {before} bytes, over its budget of {STATUS_BUDGET_BYTES}: per-node \
         reasons and check messages were shortened (cut ones end with …) or dropped; the \
         nodes' own signals and the Events keep them"
    );
    crate::plan::model::text::set_condition(
        &mut status.conditions,
        conditions::STATUS_SHRUNK,
        conditions::REASON_OVER_SIZE_BUDGET,
        &message,
        generation,
        now,
    );
    true
}

/// Cut every per-node text of `status` to `limit` bytes (`None`: drop them).
fn shorten(status: &mut PlanStatus, limit: Option<usize>) {
    let cut = |text: &mut String| match limit {
        Some(limit) if text.len() > limit => {
            *text = autopilot_api::text::truncate(text, limit - '…'.len_utf8());
        }
        Some(_) => {}
        None => text.clear(),
    };
    let cut_reason = |target: &mut TargetStatus| {
        if let Some(reason) = target.reason.as_mut() {
            cut(reason);
            if reason.is_empty() {
                target.reason = None;
            }
        }
    };
    for command in &mut status.commands {
        if let Some(k0s) = command.k0supdate.as_mut() {
            k0s.controllers.iter_mut().chain(&mut k0s.workers).for_each(cut_reason);
        }
        if let Some(airgap) = command.airgapupdate.as_mut() {
            airgap.workers.iter_mut().for_each(cut_reason);
        }
        if let Some(preflight) = command.preflight.as_mut() {
            preflight.controllers.iter_mut().chain(&mut preflight.workers).for_each(cut_reason);
            for check in &mut preflight.checks {
                check.nodes.iter_mut().for_each(|node| cut(&mut node.message));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use autopilot_api::v1beta2::{
        CheckStatus, PlanCommandPreflightStatus, PlanCommandStatus, PreflightCheckStatus,
        PreflightNodeStatus, TargetState,
    };

    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("a timestamp")
    }

    /// A preflight command over `nodes` workers whose check failed on each with a message of
    /// `message_bytes`, and whose targets failed with a reason of the same length.
    fn failed_everywhere(nodes: usize, message_bytes: usize) -> PlanStatus {
        let text = "x".repeat(message_bytes);
        let names: Vec<String> = (0..nodes).map(|i| format!("worker-{i:05}")).collect();
        let workers = names
            .iter()
            .map(|name| {
                let mut target = TargetStatus::new(name, TargetState::SignalApplyFailed, now());
                target.reason = Some(text.clone());
                target.checks = vec!["port".to_owned()];
                target
            })
            .collect();
        let check = PreflightCheckStatus {
            id: "port".to_owned(),
            status: Some(CheckStatus::Error),
            nodes: names
                .iter()
                .map(|name| PreflightNodeStatus {
                    name: name.clone(),
                    status: CheckStatus::Error,
                    status_code: 98,
                    message: text.clone(),
                })
                .collect(),
        };
        PlanStatus {
            commands: vec![PlanCommandStatus {
                preflight: Some(PlanCommandPreflightStatus {
                    checks: vec![check],
                    workers,
                    ..PlanCommandPreflightStatus::default()
                }),
                ..PlanCommandStatus::default()
            }],
            ..PlanStatus::default()
        }
    }

    #[test]
    fn a_status_within_its_budget_is_left_alone() {
        let mut status = failed_everywhere(100, 1000);
        let before = status.clone();
        assert!(!fit(&mut status, 1, now()));
        assert_eq!(status, before);
    }

    #[test]
    fn an_over_budget_status_is_shrunk_with_a_marker_and_keeps_every_decision() {
        // 1,000 nodes with 1 KiB in two texts each: about 2 MiB.
        let mut status = failed_everywhere(1000, 1000);
        assert!(status_bytes(&status) > STATUS_BUDGET_BYTES);
        assert!(fit(&mut status, 3, now()));
        assert!(status_bytes(&status) <= STATUS_BUDGET_BYTES, "{}", status_bytes(&status));
        let preflight = status.commands[0].preflight.as_ref().expect("preflight");
        let message = &preflight.checks[0].nodes[0].message;
        assert!(message.len() <= SHORT_TEXT_BYTES && message.ends_with('…'), "{message}");
        let reason = preflight.workers[0].reason.as_deref().unwrap_or_default();
        assert!(reason.len() <= SHORT_TEXT_BYTES && reason.ends_with('…'), "{reason}");
        // Names, states and verdicts are all still there.
        assert_eq!(preflight.workers.len(), 1000);
        assert!(preflight.workers.iter().all(|t| t.state == TargetState::SignalApplyFailed));
        assert!(preflight.checks[0].nodes.iter().all(|n| n.status == CheckStatus::Error));
        let marker = status.conditions.iter().find(|c| c.type_ == conditions::STATUS_SHRUNK);
        let marker = marker.expect("the status says it was shrunk");
        assert_eq!(marker.reason, conditions::REASON_OVER_SIZE_BUDGET);
        assert!(marker.message.contains("over its budget of 786432"), "{}", marker.message);
        // Shrunk once, it fits: the next pass changes nothing.
        let shrunk = status.clone();
        assert!(!fit(&mut status, 3, now()));
        assert_eq!(status, shrunk);
    }

    #[test]
    fn texts_are_dropped_when_cutting_them_is_not_enough() {
        // 10,000 nodes: even 128 bytes each is too much.
        let mut status = failed_everywhere(10_000, 1000);
        assert!(fit(&mut status, 1, now()));
        let preflight = status.commands[0].preflight.as_ref().expect("preflight");
        assert!(preflight.workers.iter().all(|t| t.reason.is_none()));
        assert!(preflight.checks[0].nodes.iter().all(|n| n.message.is_empty()));
        assert!(status_bytes(&status) <= STATUS_BUDGET_BYTES, "{}", status_bytes(&status));
    }
}
