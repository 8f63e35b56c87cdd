//! Pre-staging an update's payload (`prestage: true`): what the leader asks a node's agent
//! and what the agent reports.
//!
//! The request ([`PrestageRequest`], annotation [`keys::ANNOTATION_PRESTAGE`]) is a reference,
//! like a gate-check request: the run and the update command's index. The agent stages only
//! when the Plan's status lists the node as asked to stage for that command
//! (`autopilot_engine::authorize::prestage`), takes the payload (URL, sha256, signature) from
//! the command's frozen copy for its own platform, downloads, verifies and self-tests it
//! into the staged file (never executable but for the self-test), and answers in its own
//! annotation ([`PrestageReport`], [`keys::ANNOTATION_PRESTAGE_REPORT`]): `Staged`, or
//! `Failed` with why. The update signal that follows for the same payload finds the staged
//! file by its sha256 and downloads nothing.
//!
//! Both annotations can be written by whoever may patch the node, so both sides bound and
//! check what they read: a report counts only for the run and command the leader asked
//! about, and only speaks for its own node; its reason is capped.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::keys;

/// The most bytes of a request annotation that is read.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024;

/// The most bytes of a report's reason (a sha256 mismatch with both digests and the URL is
/// about 250 bytes).
pub const MAX_REASON_BYTES: usize = 1024;

/// The most bytes of a report annotation that is read: the reason and the envelope.
pub const MAX_REPORT_BYTES: usize = MAX_REASON_BYTES + 1024;

/// The leader's request to pre-stage the payload of an update command on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrestageRequest {
    /// The plan id (`spec.id`).
    pub plan_id: String,
    /// The plan run (`status.runId`).
    pub run_id: String,
    /// The index of the update command whose payload to stage.
    pub command: u32,
    /// When the leader asked (its own clock, RFC 3339); informational.
    pub asked: String,
}

/// How a node's pre-staging ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PrestageOutcome {
    /// The payload is downloaded, verified and (for a k0s binary) self-tested, and waits in
    /// the staged file; or the node runs the version already and needs nothing.
    Staged,
    /// The node could not stage the payload (refused by the Plan, download, digest,
    /// signature or self-test failed); the report's `reason` says why.
    Failed,
}

/// A node's answer to a [`PrestageRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrestageReport {
    /// The run of the request answered.
    pub run_id: String,
    /// The command of the request answered.
    pub command: u32,
    /// How it went.
    pub outcome: PrestageOutcome,
    /// Why it failed, or a note on success (at most [`MAX_REASON_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl PrestageReport {
    /// Whether this answers `request` (same run and command).
    pub fn answers(&self, request: &PrestageRequest) -> bool {
        self.run_id == request.run_id && self.command == request.command
    }

    /// Whether this answers the request of `run_id` for `command`.
    pub fn is_for(&self, run_id: &str, command: u32) -> bool {
        self.run_id == run_id && self.command == command
    }

    /// The report bounded for its annotation: the reason cut to [`MAX_REASON_BYTES`].
    pub fn bounded(self) -> Self {
        Self {
            reason: self.reason.map(|text| crate::text::truncate(&text, MAX_REASON_BYTES)),
            ..self
        }
    }
}

/// Where a target stands in the pre-staging of its command, as the Plan status keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PrestageState {
    /// The leader asked the node to stage; no answer yet. Exits: `Staged`, `Failed`.
    Requested,
    /// Terminal: the node staged the payload (or needs none).
    Staged,
    /// Terminal: the node could not stage it, or did not answer within the command's
    /// progress deadline; the target failed with the reason.
    Failed,
}

impl PrestageState {
    /// Every state, in declaration order.
    pub const ALL: [PrestageState; 3] = [Self::Requested, Self::Staged, Self::Failed];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "Requested",
            Self::Staged => "Staged",
            Self::Failed => "Failed",
        }
    }
}

impl std::fmt::Display for PrestageState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JsonSchema for PrestageState {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PrestageState".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "Where the node stands in the pre-staging of the command's payload.",
            Self::ALL.iter().map(|s| s.as_str()),
        )
    }
}

/// The request in an object's annotations: `Ok(None)` without one, `Err` when it is over
/// [`MAX_REQUEST_BYTES`] or not a request.
pub fn request_of(meta: &ObjectMeta) -> Result<Option<PrestageRequest>, String> {
    read(meta, keys::ANNOTATION_PRESTAGE, MAX_REQUEST_BYTES)
}

/// The report in an object's annotations: `Ok(None)` without one, `Err` when it is over
/// [`MAX_REPORT_BYTES`] or not a report.
pub fn report_of(meta: &ObjectMeta) -> Result<Option<PrestageReport>, String> {
    read(meta, keys::ANNOTATION_PRESTAGE_REPORT, MAX_REPORT_BYTES)
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

    fn request() -> PrestageRequest {
        PrestageRequest {
            plan_id: "id".into(),
            run_id: "run".into(),
            command: 1,
            asked: "2026-11-26T10:00:00Z".into(),
        }
    }

    #[test]
    fn a_request_round_trips_in_camel_case() {
        let text = serde_json::to_string(&request()).expect("serialise");
        assert!(text.contains("\"planId\":\"id\"") && text.contains("\"runId\":\"run\""), "{text}");
        let read = request_of(&meta(keys::ANNOTATION_PRESTAGE, text)).expect("reads");
        assert_eq!(read, Some(request()));
        assert_eq!(request_of(&ObjectMeta::default()), Ok(None));
    }

    #[test]
    fn a_report_answers_only_its_run_and_command() {
        let report = PrestageReport {
            run_id: "run".into(),
            command: 1,
            outcome: PrestageOutcome::Staged,
            reason: None,
        };
        assert!(report.answers(&request()));
        for other in [
            PrestageReport { command: 0, ..report.clone() },
            PrestageReport { run_id: "old".into(), ..report.clone() },
        ] {
            assert!(!other.answers(&request()), "{other:?}");
        }
        let text = serde_json::to_string(&report).expect("serialise");
        assert_eq!(text, r#"{"runId":"run","command":1,"outcome":"Staged"}"#);
    }

    #[test]
    fn oversized_or_malformed_reports_are_refused_naming_the_annotation() {
        let huge = format!(
            r#"{{"runId":"run","command":1,"outcome":"Failed","reason":"{}"}}"#,
            "x".repeat(MAX_REPORT_BYTES)
        );
        let error = report_of(&meta(keys::ANNOTATION_PRESTAGE_REPORT, huge)).expect_err("big");
        assert!(error.contains("over the limit"), "{error}");
        let error =
            report_of(&meta(keys::ANNOTATION_PRESTAGE_REPORT, "{}".into())).expect_err("bad");
        assert!(error.starts_with(&format!("annotation {}", keys::ANNOTATION_PRESTAGE_REPORT)));
    }

    #[test]
    fn a_bounded_report_fits_its_annotation() {
        let report = PrestageReport {
            run_id: "r".repeat(100),
            command: 3,
            outcome: PrestageOutcome::Failed,
            reason: Some("é".repeat(10_000)),
        }
        .bounded();
        let text = serde_json::to_string(&report).expect("serialise");
        assert!(text.len() <= MAX_REPORT_BYTES, "{}", text.len());
        assert!(report_of(&meta(keys::ANNOTATION_PRESTAGE_REPORT, text)).is_ok());
    }
}
