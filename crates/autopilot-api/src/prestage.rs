//! Pre-staging an update's payload (`prestage: true`): what the leader asks a node's agent
//! and what the agent reports.
//!
//! It goes through the one request/report channel ([`crate::ask`]). The request
//! ([`PrestageRequest`], annotation [`keys::ANNOTATION_PRESTAGE`]) is a reference,
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

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ask::{Kind, Report, Request};
use crate::keys;

/// The most bytes of a request annotation that is read.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024;

/// The most bytes of a report's reason (a sha256 mismatch with both digests and the URL is
/// about 250 bytes).
pub const MAX_REASON_BYTES: usize = 1024;

/// The most bytes of a report annotation that is read: the reason and the envelope.
pub const MAX_REPORT_BYTES: usize = MAX_REASON_BYTES + 1024;

/// Pre-staging, as a kind of request ([`crate::ask::Kind`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prestage {}

/// The leader's request to pre-stage the payload of an update command on a node.
pub type PrestageRequest = Request<Prestage>;

/// A node's answer to a [`PrestageRequest`].
pub type PrestageReport = Report<Prestage>;

/// What a pre-staging request asks besides its envelope: nothing (the payload is the
/// Plan's, never the request's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrestageAsks {}

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

/// What a pre-staging report says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrestageSays {
    /// How it went.
    pub outcome: PrestageOutcome,
    /// Why it failed, or a note on success (at most [`MAX_REASON_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Kind for Prestage {
    type Asks = PrestageAsks;
    type Says = PrestageSays;
    const REQUEST_ANNOTATION: &'static str = keys::ANNOTATION_PRESTAGE;
    const REPORT_ANNOTATION: &'static str = keys::ANNOTATION_PRESTAGE_REPORT;
    const MAX_REQUEST_BYTES: usize = MAX_REQUEST_BYTES;
    const MAX_REPORT_BYTES: usize = MAX_REPORT_BYTES;
    const NAME: &'static str = "pre-staging";

    /// Any report of the run and command.
    fn answers(_: &PrestageSays, _: &PrestageAsks) -> bool {
        true
    }

    /// The reason cut to [`MAX_REASON_BYTES`].
    fn bounded(says: PrestageSays) -> PrestageSays {
        PrestageSays {
            reason: says.reason.map(|text| crate::text::truncate(&text, MAX_REASON_BYTES)),
            ..says
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::ask::{report_of, request_of};

    fn meta(key: &str, value: String) -> ObjectMeta {
        ObjectMeta { annotations: Some([(key.to_owned(), value)].into()), ..ObjectMeta::default() }
    }

    fn request() -> PrestageRequest {
        PrestageRequest {
            plan_id: "id".into(),
            run_id: "run".into(),
            command: 1,
            asked: "2026-11-26T10:00:00Z".into(),
            asks: PrestageAsks {},
        }
    }

    #[test]
    fn a_request_round_trips_in_camel_case() {
        let text = serde_json::to_string(&request()).expect("serialise");
        assert_eq!(
            text,
            r#"{"planId":"id","runId":"run","command":1,"asked":"2026-11-26T10:00:00Z"}"#
        );
        let read = request_of::<Prestage>(&meta(keys::ANNOTATION_PRESTAGE, text)).expect("reads");
        assert_eq!(read, Some(request()));
        assert_eq!(request_of::<Prestage>(&ObjectMeta::default()), Ok(None));
    }

    #[test]
    fn a_report_answers_only_its_run_and_command() {
        let report = PrestageReport {
            run_id: "run".into(),
            command: 1,
            says: PrestageSays { outcome: PrestageOutcome::Staged, reason: None },
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
        let error =
            report_of::<Prestage>(&meta(keys::ANNOTATION_PRESTAGE_REPORT, huge)).expect_err("big");
        assert!(error.contains("over the limit"), "{error}");
        let error = report_of::<Prestage>(&meta(keys::ANNOTATION_PRESTAGE_REPORT, "{}".into()))
            .expect_err("bad");
        assert!(error.starts_with(&format!("annotation {}", keys::ANNOTATION_PRESTAGE_REPORT)));
    }

    #[test]
    fn a_bounded_report_fits_its_annotation() {
        let report = PrestageReport {
            run_id: "r".repeat(100),
            command: 3,
            says: PrestageSays {
                outcome: PrestageOutcome::Failed,
                reason: Some("é".repeat(10_000)),
            },
        }
        .bounded();
        let text = serde_json::to_string(&report).expect("serialise");
        assert!(text.len() <= MAX_REPORT_BYTES, "{}", text.len());
        assert!(report_of::<Prestage>(&meta(keys::ANNOTATION_PRESTAGE_REPORT, text)).is_ok());
    }
}
