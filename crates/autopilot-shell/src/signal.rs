//! The one writer of the signal protocol's annotations (DESIGN §4): the leader's signals,
//! the drain's phase changes and the node agent's answers all go through [`write`].
//!
//! A signal is written as a JSON merge patch of the two signal annotations, with the
//! resourceVersion the writer decided on as precondition: a decision made on a stale copy
//! of the object costs a conflict (409) and a fresh look, never an overwrite of newer data.

use autopilot_api::signal::{self, SignalData};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Write `data` as the signal of the object `name` through `api`, guarded by
/// `resource_version` (the version the writer saw; `None` writes unguarded, for an object
/// read without one).
pub async fn write<K>(
    api: &Api<K>,
    name: &str,
    resource_version: Option<&str>,
    data: &SignalData,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch(resource_version, data))).await
}

/// The merge patch [`write`] sends.
fn patch(resource_version: Option<&str>, data: &SignalData) -> serde_json::Value {
    json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": signal::to_annotations(data),
        },
    })
}

#[cfg(test)]
mod tests {
    use autopilot_api::keys;
    use autopilot_api::signal::{CommandK0sUpdate, SignalCommand};

    use super::*;

    fn data() -> SignalData {
        SignalData {
            plan_id: "id123".into(),
            created: "2024-05-01T12:00:00Z".into(),
            command: SignalCommand {
                rollback: None,
                preflight: None,
                id: 0,
                k0supdate: Some(CommandK0sUpdate {
                    url: "https://example.com/k0s".into(),
                    version: "v1.30.2+k0s.0".into(),
                    sha256: "ab".repeat(32),
                    forceupdate: false,
                }),
                airgapupdate: None,
            },
            status: None,
            run_id: None,
        }
    }

    #[test]
    fn a_signal_is_both_annotations_under_the_version_it_was_decided_on() {
        let patch = patch(Some("42"), &data());
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let annotations = patch["metadata"]["annotations"].as_object().expect("annotations");
        assert_eq!(annotations.len(), 2, "{patch}");
        assert_eq!(annotations[keys::ANNOTATION_SIGNAL_VERSION], "v2");
        let written: SignalData = serde_json::from_str(
            annotations[keys::ANNOTATION_SIGNAL_DATA].as_str().expect("a JSON string"),
        )
        .expect("the signal");
        assert_eq!(written, data());
        // Without a version the patch carries no precondition.
        assert!(super::patch(None, &data())["metadata"]["resourceVersion"].is_null());
    }
}
