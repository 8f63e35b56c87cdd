//! A health gate's node-side check (DESIGN §15): what the leader asks a node's agent to run
//! and what the agent reports.
//!
//! It goes through the one request/report channel ([`crate::ask`]). The request
//! ([`GateCheckRequest`], annotation [`keys::ANNOTATION_GATE_CHECK`]) is a reference, like a preflight signal: the run, the update command's index, the ids of the
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

use serde::{Deserialize, Serialize};

use crate::ask::{Kind, Report, Request};
use crate::keys;
use crate::preflight::{MAX_REPORT_BYTES, RawRecord};

/// The most bytes of a request annotation that is read (a request names a few gate ids).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// The most bytes of a report annotation that is read: the records of one attempt
/// ([`crate::preflight::MAX_REPORT_BYTES`]) and the envelope.
pub const MAX_GATE_REPORT_BYTES: usize = MAX_REPORT_BYTES + 4 * 1024;

/// The most bytes of a refusal's text.
pub const MAX_REFUSAL_BYTES: usize = 1024;

/// Gate checks, as a kind of request ([`crate::ask::Kind`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateChecks {}

/// The leader's request to run gate checks on a node.
pub type GateCheckRequest = Request<GateChecks>;

/// A node's answer to a [`GateCheckRequest`].
pub type GateCheckReport = Report<GateChecks>;

/// What a gate-check request asks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateCheckAsks {
    /// The ids of the gates whose checks run, in the command's order.
    pub gates: Vec<String>,
    /// Which attempt this is (from 1): the agent runs each attempt once. The leader asks
    /// again no sooner than its retry interval after the request's `asked`.
    pub attempt: u32,
}

/// What a gate-check report says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateCheckSays {
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

impl Kind for GateChecks {
    type Asks = GateCheckAsks;
    type Says = GateCheckSays;
    const REQUEST_ANNOTATION: &'static str = keys::ANNOTATION_GATE_CHECK;
    const REPORT_ANNOTATION: &'static str = keys::ANNOTATION_GATE_REPORT;
    const MAX_REQUEST_BYTES: usize = MAX_REQUEST_BYTES;
    const MAX_REPORT_BYTES: usize = MAX_GATE_REPORT_BYTES;
    const NAME: &'static str = "gate-check";

    /// The same attempt.
    fn answers(says: &GateCheckSays, asks: &GateCheckAsks) -> bool {
        says.attempt == asks.attempt
    }

    /// Records fitted ([`crate::preflight::fit_report`]), a refusal cut.
    fn bounded(says: GateCheckSays) -> GateCheckSays {
        GateCheckSays {
            records: crate::preflight::fit_report(says.records),
            refused: says.refused.map(|text| crate::text::truncate(&text, MAX_REFUSAL_BYTES)),
            ..says
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::ask::{report_of, request_of};

    fn meta(key: &str, value: String) -> ObjectMeta {
        ObjectMeta { annotations: Some([(key.to_owned(), value)].into()), ..ObjectMeta::default() }
    }

    fn request() -> GateCheckRequest {
        GateCheckRequest {
            plan_id: "id".into(),
            run_id: "run".into(),
            command: 1,
            asked: "2026-11-26T10:00:00Z".into(),
            asks: GateCheckAsks { gates: vec!["port".into()], attempt: 2 },
        }
    }

    #[test]
    fn a_request_round_trips_in_camel_case_with_its_fields_on_the_envelope() {
        let text = serde_json::to_string(&request()).expect("serialise");
        assert!(text.contains("\"planId\":\"id\"") && text.contains("\"runId\":\"run\""), "{text}");
        assert!(text.contains("\"gates\":[\"port\"]") && text.contains("\"attempt\":2"), "{text}");
        let read =
            request_of::<GateChecks>(&meta(keys::ANNOTATION_GATE_CHECK, text)).expect("reads");
        assert_eq!(read, Some(request()));
        assert_eq!(request_of::<GateChecks>(&ObjectMeta::default()), Ok(None));
    }

    #[test]
    fn a_report_answers_only_its_run_command_and_attempt() {
        let report = GateCheckReport {
            run_id: "run".into(),
            command: 1,
            says: GateCheckSays { attempt: 2, ..GateCheckSays::default() },
        };
        assert!(report.answers(&request()));
        for other in [
            GateCheckReport {
                says: GateCheckSays { attempt: 1, ..report.says.clone() },
                ..report.clone()
            },
            GateCheckReport { command: 0, ..report.clone() },
            GateCheckReport { run_id: "old".into(), ..report.clone() },
        ] {
            assert!(!other.answers(&request()), "{other:?}");
        }
    }

    #[test]
    fn oversized_or_malformed_annotations_are_refused_naming_the_annotation() {
        let huge = format!("{{\"runId\":\"{}\"}}", "x".repeat(MAX_GATE_REPORT_BYTES));
        let error = report_of::<GateChecks>(&meta(keys::ANNOTATION_GATE_REPORT, huge))
            .expect_err("too big");
        assert!(error.contains("over the limit"), "{error}");
        let error = request_of::<GateChecks>(&meta(keys::ANNOTATION_GATE_CHECK, "{}".into()))
            .expect_err("bad");
        assert!(
            error.starts_with(&format!("annotation {}", keys::ANNOTATION_GATE_CHECK)),
            "{error}"
        );
    }

    #[test]
    fn a_bounded_report_fits_its_annotation() {
        let big = RawRecord { stdout: "o".repeat(100_000), ..RawRecord::default() };
        let report = request().answer(GateCheckSays {
            attempt: 2,
            records: (0..40).map(|i| (format!("g{i}"), big.clone())).collect(),
            refused: Some("r".repeat(5000)),
        });
        let text = serde_json::to_string(&report).expect("serialise");
        assert!(text.len() <= MAX_GATE_REPORT_BYTES, "{}", text.len());
        assert_eq!(report.says.records.len(), 40);
    }
}
