//! Asking the API server whether an identity may read the Plan `autopilot` (a
//! `SubjectAccessReview`, authorization.k8s.io/v1), for NewPlan and for `k0s autopilot
//! preview`: the I/O half of `autopilot_engine::plan::rbac`, which chooses whom to ask
//! about and decides what the answer means.
//!
//! The review is made with the caller's own credentials: the controllers need `create` on
//! `subjectaccessreviews` (`manifests/rbac/controller.yaml`); a person running `preview`
//! needs it too, or the preview says it could not check. A review that could not be made is
//! an answer ([`PlanAccess::Unknown`]), never an error: it must not stop a plan.

use std::time::Duration;

use autopilot_api::keys;
use autopilot_engine::plan::{PlanAccess, PlanReader, rbac};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// How long one review may take. A review is one in-memory authorization on the API server
/// (milliseconds); past this the server is overloaded or unreachable, and the run goes on
/// without the answer rather than hold a leader's pass.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `reader` may `get` the Plan `autopilot`, asked through `client` (one request,
/// at most [`REVIEW_TIMEOUT`]).
pub async fn plan_access(client: &kube::Client, reader: &PlanReader) -> PlanAccess {
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let (params, review) = (PostParams::default(), review(reader));
    match tokio::time::timeout(REVIEW_TIMEOUT, reviews.create(&params, &review)).await {
        Err(_) => PlanAccess::Unknown(format!(
            "the API server did not answer the SubjectAccessReview in {}s",
            REVIEW_TIMEOUT.as_secs()
        )),
        Ok(Err(kube::Error::Api(status))) if status.code == 403 => PlanAccess::Unknown(format!(
            "this identity may not create subjectaccessreviews.authorization.k8s.io: {}",
            status.message
        )),
        Ok(Err(error)) => PlanAccess::Unknown(format!("the SubjectAccessReview failed: {error}")),
        Ok(Ok(answer)) => judged(answer),
    }
}

/// The review of `get` on the Plan `autopilot` by `reader`.
pub fn review(reader: &PlanReader) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(reader.user.clone()),
            groups: Some(reader.groups.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(rbac::VERB.to_owned()),
                group: Some(rbac::GROUP.to_owned()),
                resource: Some(rbac::RESOURCE.to_owned()),
                name: Some(keys::PLAN_NAME.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// What the API server's answer says. `allowed: false` is a denial whether an authorizer
/// denied it or none allowed it (RBAC never denies, it only does not allow); an evaluation
/// error is named beside the reason.
fn judged(answer: SubjectAccessReview) -> PlanAccess {
    let Some(status) = answer.status else {
        return PlanAccess::Unknown("the SubjectAccessReview came back without a status".into());
    };
    if status.allowed {
        return PlanAccess::Allowed;
    }
    let said: Vec<String> = [status.reason, status.evaluation_error.map(|e| format!("error: {e}"))]
        .into_iter()
        .flatten()
        .filter(|text| !text.trim().is_empty())
        .collect();
    PlanAccess::Denied(said.join("; "))
}

#[cfg(all(test, feature = "fake-api"))]
mod tests {
    use super::*;
    use crate::fake_api::{FakeApiServer, status};
    use serde_json::json;

    /// The review of worker w1 against a server that answers `code` with `body`.
    async fn answered(code: u16, body: serde_json::Value) -> (PlanAccess, FakeApiServer) {
        let server = FakeApiServer::default();
        let client = server.client(move |_, _| (code, body.clone()));
        (plan_access(&client, &PlanReader::worker("w1")).await, server)
    }

    fn review_answer(allowed: bool, reason: &str) -> serde_json::Value {
        json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {}, "status": {"allowed": allowed, "reason": reason}
        })
    }

    #[tokio::test]
    async fn the_review_asks_whether_the_worker_identity_may_get_the_plan_autopilot() {
        let (access, server) = answered(201, review_answer(true, "")).await;
        assert_eq!(access, PlanAccess::Allowed);
        let [request] = server.requests().try_into().expect("one request");
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/apis/authorization.k8s.io/v1/subjectaccessreviews");
        let spec = &request.body["spec"];
        assert_eq!(spec["user"], "system:node:w1");
        assert_eq!(spec["groups"], json!(["system:nodes", "system:authenticated"]));
        assert_eq!(
            spec["resourceAttributes"],
            json!({"verb": "get", "group": "autopilot.k0sproject.io", "resource": "plans",
                   "name": "autopilot"})
        );
    }

    #[tokio::test]
    async fn a_review_that_does_not_allow_is_a_denial_with_the_servers_reason() {
        let (access, _) = answered(201, review_answer(false, "no RBAC policy matched")).await;
        assert_eq!(access, PlanAccess::Denied("no RBAC policy matched".to_owned()));
    }

    #[tokio::test]
    async fn a_review_the_asker_may_not_make_is_unknown_naming_the_permission() {
        let (access, _) = answered(403, status(403, "Forbidden")).await;
        let PlanAccess::Unknown(why) = access else { panic!("unknown: {access:?}") };
        assert!(
            why.starts_with("this identity may not create subjectaccessreviews.authorization"),
            "{why}"
        );
    }
}
