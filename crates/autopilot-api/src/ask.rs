//! The one channel through which the leader asks a node's agent for something other than
//! an update (DESIGN §14, §15): a request annotation the leader writes on the node's
//! object, and a report annotation the node writes back on its own object.
//!
//! Every kind of request ([`Kind`]: pre-staging, gate checks) shares the envelope: a
//! [`Request`] names the plan, the run and the command it belongs to and when the leader
//! asked, a [`Report`] the run and command it answers; each kind adds its own details
//! ([`Kind::Asks`], [`Kind::Says`]). A request is a reference, like a signal: the node reads
//! what to do from the Plan, and does it only when the Plan's status authorizes it
//! (`autopilot_engine::authorize::asked`).
//!
//! Both annotations can be written by whoever may patch the node, so both sides bound and
//! check what they read: each annotation is read only up to its kind's limit, a report
//! counts only for the request it answers ([`Report::answers`]) and only speaks for its own
//! node, and what it says is bounded ([`Kind::bounded`]) before it is written.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A kind of request the leader makes of a node, with the node's report.
pub trait Kind: Clone + Debug + PartialEq + Eq {
    /// What the request asks beyond its envelope.
    type Asks: Clone + Debug + PartialEq + Eq + Serialize + DeserializeOwned;
    /// What the report says beyond its envelope.
    type Says: Clone + Debug + PartialEq + Eq + Serialize + DeserializeOwned;
    /// The annotation the leader writes the request in, on the node's object.
    const REQUEST_ANNOTATION: &'static str;
    /// The annotation the node writes its report in, on its own object.
    const REPORT_ANNOTATION: &'static str;
    /// The most bytes of a request annotation that is read.
    const MAX_REQUEST_BYTES: usize;
    /// The most bytes of a report annotation that is read (and written).
    const MAX_REPORT_BYTES: usize;
    /// How logs and refusals name the kind (`pre-staging`, `gate-check`).
    const NAME: &'static str;

    /// Whether what a report says answers what the request asks, its envelope matching
    /// (the same attempt of a gate check; any report of pre-staging).
    fn answers(says: &Self::Says, asks: &Self::Asks) -> bool;

    /// What a report says, bounded for its annotation.
    fn bounded(says: Self::Says) -> Self::Says;
}

/// The leader's request of kind `K` to a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound = "")]
pub struct Request<K: Kind> {
    /// The plan id (`spec.id`).
    pub plan_id: String,
    /// The plan run (`status.runId`).
    pub run_id: String,
    /// The index of the command the request belongs to.
    pub command: u32,
    /// When the leader asked (its own clock, RFC 3339).
    pub asked: String,
    /// What the kind asks besides.
    #[serde(flatten)]
    pub asks: K::Asks,
}

/// A node's report of kind `K`: the answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound = "")]
pub struct Report<K: Kind> {
    /// The run of the request answered.
    pub run_id: String,
    /// The command of the request answered.
    pub command: u32,
    /// What the kind says besides.
    #[serde(flatten)]
    pub says: K::Says,
}

impl<K: Kind> Request<K> {
    /// The report that answers this request, saying `says`, bounded for its annotation.
    pub fn answer(&self, says: K::Says) -> Report<K> {
        Report { run_id: self.run_id.clone(), command: self.command, says: K::bounded(says) }
    }
}

impl<K: Kind> Report<K> {
    /// Whether this answers `request` (same run and command, and what the kind matches).
    pub fn answers(&self, request: &Request<K>) -> bool {
        self.is_for(&request.run_id, request.command) && K::answers(&self.says, &request.asks)
    }

    /// Whether this answers a request of `run_id` for `command`.
    pub fn is_for(&self, run_id: &str, command: u32) -> bool {
        self.run_id == run_id && self.command == command
    }

    /// The report bounded for its annotation.
    pub fn bounded(self) -> Self {
        Self { says: K::bounded(self.says), ..self }
    }
}

/// The request of kind `K` in an object's annotations: `Ok(None)` without one, `Err` when
/// it is over [`Kind::MAX_REQUEST_BYTES`] or not a request.
pub fn request_of<K: Kind>(meta: &ObjectMeta) -> Result<Option<Request<K>>, String> {
    read(meta, K::REQUEST_ANNOTATION, K::MAX_REQUEST_BYTES)
}

/// The report of kind `K` in an object's annotations: `Ok(None)` without one, `Err` when
/// it is over [`Kind::MAX_REPORT_BYTES`] or not a report.
pub fn report_of<K: Kind>(meta: &ObjectMeta) -> Result<Option<Report<K>>, String> {
    read(meta, K::REPORT_ANNOTATION, K::MAX_REPORT_BYTES)
}

/// The merge patch that writes `value` (a request or a report) into `annotation`, guarded
/// by `resource_version` (the object as the writer read it): the API server refuses it with
/// a conflict when the object changed since.
pub fn patch(
    annotation: &str,
    value: &impl Serialize,
    resource_version: &str,
) -> Result<serde_json::Value, String> {
    let text = serde_json::to_string(value).map_err(|error| format!("{annotation}: {error}"))?;
    Ok(serde_json::json!({
        "metadata": { "resourceVersion": resource_version, "annotations": { annotation: text } }
    }))
}

fn read<T: DeserializeOwned>(
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
    use crate::gate_check::{GateCheckAsks, GateCheckSays, GateChecks};
    use crate::prestage::{Prestage, PrestageOutcome, PrestageSays};

    #[test]
    fn a_guarded_patch_carries_the_resource_version_and_only_its_annotation() {
        let request: Request<Prestage> = Request {
            plan_id: "id".into(),
            run_id: "run".into(),
            command: 0,
            asked: "2026-11-26T10:00:00Z".into(),
            asks: crate::prestage::PrestageAsks {},
        };
        let patch = patch(Prestage::REQUEST_ANNOTATION, &request, "42").expect("encodes");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let annotations = patch["metadata"]["annotations"].as_object().expect("annotations");
        assert_eq!(annotations.len(), 1);
        let text = annotations[Prestage::REQUEST_ANNOTATION].as_str().expect("a string");
        assert_eq!(
            text,
            r#"{"planId":"id","runId":"run","command":0,"asked":"2026-11-26T10:00:00Z"}"#
        );
    }

    #[test]
    fn an_answer_is_bounded_and_answers_its_request_only() {
        let request: Request<GateChecks> = Request {
            plan_id: "id".into(),
            run_id: "run".into(),
            command: 1,
            asked: "2026-11-26T10:00:00Z".into(),
            asks: GateCheckAsks { gates: vec!["port".into()], attempt: 2 },
        };
        let report = request.answer(GateCheckSays {
            attempt: 2,
            refused: Some("r".repeat(5000)),
            ..GateCheckSays::default()
        });
        assert!(report.answers(&request));
        assert!(report.says.refused.as_ref().is_some_and(|r| r.len() < 1100 && r.ends_with('…')));
        let staged: Report<Prestage> = Report {
            run_id: "run".into(),
            command: 1,
            says: PrestageSays { outcome: PrestageOutcome::Staged, reason: None },
        };
        assert!(staged.is_for("run", 1) && !staged.is_for("run", 0) && !staged.is_for("old", 1));
    }
}
