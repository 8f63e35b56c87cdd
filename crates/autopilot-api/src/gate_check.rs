//! A health gate's node-side check (DESIGN §15): what the leader asks a node's agent to run
//! and what the agent reports.
//!
//! The request ([`GateCheckRequest`], annotation [`keys::ANNOTATION_GATE_CHECK`]) is a
//! reference, like a preflight signal: the run, the update command's index, the ids of the
//! gates whose checks to run and an attempt number. The agent runs a request only when the
//! Plan's status lists the node in an open gate run of that command, reads the checks from
//! the command's frozen copy, and answers in its own annotation
//! ([`GateCheckReport`], [`keys::ANNOTATION_GATE_REPORT`]) with one bounded raw record per
//! gate for that attempt — or with why it refused. The update signal is left as it is: it
//! stays the node's answer about the update (a rollback after the update still reports on
//! it).
//!
//! Both annotations can be written by whoever may patch the node, so both sides bound and
//! check what they read: a report only counts for the run, command and attempt the leader
//! asked for, and only speaks for its own node.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::keys;
use crate::preflight::{MAX_REPORT_BYTES, RawRecord};

/// The most bytes of a request annotation that is read (a request names a few gate ids).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// The most bytes of a report annotation that is read: the records of one attempt
/// ([`crate::preflight::MAX_REPORT_BYTES`]) and the envelope.
pub const MAX_GATE_REPORT_BYTES: usize = MAX_REPORT_BYTES + 4 * 1024;

/// The most bytes of a refusal's text.
pub const MAX_REFUSAL_BYTES: usize = 1024;

/// The leader's request to run gate checks on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateCheckRequest {
    /// The plan id (`spec.id`).
    pub plan_id: String,
    /// The plan run (`status.runId`).
    pub run_id: String,
    /// The index of the update command whose gates these are.
    pub command: u32,
    /// The ids of the gates whose checks run, in the command's order.
    pub gates: Vec<String>,
    /// Which attempt this is (from 1): the agent runs each attempt once.
    pub attempt: u32,
    /// When the leader asked (its own clock, RFC 3339): it asks again no sooner than the
    /// retry interval after this.
    pub asked: String,
}

/// A node's answer to a [`GateCheckRequest`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateCheckReport {
    /// The run of the request answered.
    pub run_id: String,
    /// The command of the request answered.
    pub command: u32,
    /// The attempt answered.
    pub attempt: u32,
    /// What the node observed running each gate's check, by gate id (bounded as a
    /// preflight report is).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub records: BTreeMap<String, RawRecord>,
    /// Set when the node did not run the checks: why (the Plan does not authorize the
    /// request, the checks cannot be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl GateCheckReport {
    /// Whether this answers `request` (same run, command and attempt).
    pub fn answers(&self, request: &GateCheckRequest) -> bool {
        self.run_id == request.run_id
            && self.command == request.command
            && self.attempt == request.attempt
    }

    /// The report bounded for its annotation: records fitted
    /// ([`crate::preflight::fit_report`]), a refusal cut.
    pub fn bounded(self) -> Self {
        Self {
            records: crate::preflight::fit_report(self.records),
            refused: self.refused.map(|text| crate::text::truncate(&text, MAX_REFUSAL_BYTES)),
            ..self
        }
    }
}

/// The request in an object's annotations: `Ok(None)` without one, `Err` when it is over
/// [`MAX_REQUEST_BYTES`] or not a request.
pub fn request_of(meta: &ObjectMeta) -> Result<Option<GateCheckRequest>, String> {
    read(meta, keys::ANNOTATION_GATE_CHECK, MAX_REQUEST_BYTES)
}

/// The report in an object's annotations: `Ok(None)` without one, `Err` when it is over
/// [`MAX_GATE_REPORT_BYTES`] or not a report.
pub fn report_of(meta: &ObjectMeta) -> Result<Option<GateCheckReport>, String> {
    read(meta, keys::ANNOTATION_GATE_REPORT, MAX_GATE_REPORT_BYTES)
}

fn read<T: serde::de::DeserializeOwned>(
    meta: &ObjectMeta,
    key: &str,
    limit: usize,
) -> Result<Option<T>, String> {
    let Some(text) = meta.annotations.as_ref().and_then(|a| a.get(key)) else {
        return Ok(None);
    };
    if text.len() > limit {
        return Err(format!("annotation {key} is {} bytes, over the limit of {limit}", text.len()));
    }
    serde_json::from_str(text).map(Some).map_err(|error| format!("annotation {key}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(key: &str, value: String) -> ObjectMeta {
        ObjectMeta { annotations: Some([(key.to_owned(), value)].into()), ..ObjectMeta::default() }
    }

    fn request() -> GateCheckRequest {
        GateCheckRequest {
            plan_id: "id".into(),
            run_id: "run".into(),
            command: 1,
            gates: vec!["port".into()],
            attempt: 2,
            asked: "2026-11-26T10:00:00Z".into(),
        }
    }

    #[test]
    fn a_request_round_trips_in_camel_case() {
        let text = serde_json::to_string(&request()).expect("serialise");
        assert!(text.contains("\"planId\":\"id\"") && text.contains("\"runId\":\"run\""), "{text}");
        let read = request_of(&meta(keys::ANNOTATION_GATE_CHECK, text)).expect("reads");
        assert_eq!(read, Some(request()));
        assert_eq!(request_of(&ObjectMeta::default()), Ok(None));
    }

    #[test]
    fn a_report_answers_only_its_run_command_and_attempt() {
        let report = GateCheckReport {
            run_id: "run".into(),
            command: 1,
            attempt: 2,
            ..GateCheckReport::default()
        };
        assert!(report.answers(&request()));
        for other in [
            GateCheckReport { attempt: 1, ..report.clone() },
            GateCheckReport { command: 0, ..report.clone() },
            GateCheckReport { run_id: "old".into(), ..report.clone() },
        ] {
            assert!(!other.answers(&request()), "{other:?}");
        }
    }

    #[test]
    fn oversized_or_malformed_annotations_are_refused_naming_the_annotation() {
        let huge = format!("{{\"runId\":\"{}\"}}", "x".repeat(MAX_GATE_REPORT_BYTES));
        let error = report_of(&meta(keys::ANNOTATION_GATE_REPORT, huge)).expect_err("too big");
        assert!(error.contains("over the limit"), "{error}");
        let error = request_of(&meta(keys::ANNOTATION_GATE_CHECK, "{}".into())).expect_err("bad");
        assert!(
            error.starts_with(&format!("annotation {}", keys::ANNOTATION_GATE_CHECK)),
            "{error}"
        );
    }

    #[test]
    fn a_bounded_report_fits_its_annotation() {
        let big = RawRecord { stdout: "o".repeat(100_000), ..RawRecord::default() };
        let report = GateCheckReport {
            records: (0..40).map(|i| (format!("g{i}"), big.clone())).collect(),
            refused: Some("r".repeat(5000)),
            ..GateCheckReport::default()
        }
        .bounded();
        let text = serde_json::to_string(&report).expect("serialise");
        assert!(text.len() <= MAX_GATE_REPORT_BYTES, "{}", text.len());
        assert_eq!(report.records.len(), 40);
    }
}
