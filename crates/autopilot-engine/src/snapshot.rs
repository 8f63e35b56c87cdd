//! What the shells keep of the API objects they watch, and how the engine sees them: pure
//! conversions from Nodes, ControlNodes and Pods to the engine's inputs, and the slimming
//! applied before an object is cached.

use autopilot_api::signal;
use autopilot_api::v1beta2::ControlNode;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod};
use kube_core::{Resource as _, ResourceExt as _};

use crate::cordon::PodFacts;
use crate::plan::{
    ObservedGateCheck, ObservedPrestage, ObservedSignal, RequiredKeys, TargetObject,
};
use autopilot_api::keys;

/// A ControlNode as the planner sees it.
pub fn control_node_object(control_node: &ControlNode) -> TargetObject {
    TargetObject {
        name: control_node.name_any(),
        labels: control_node.labels().into(),
        // Controller readiness comes from the /readyz probe, not from the object.
        ready: true,
        signal: observe_signal(control_node.meta()),
        required_keys: required_keys(control_node.meta()),
        version: control_node_version(control_node),
        gate_check: ObservedGateCheck::boxed(control_node.meta()),
        prestage: ObservedPrestage::boxed(control_node.meta()),
    }
}

/// The k0s version a controller runs: the `status.k0sVersion` it registers on every start
/// (a controller does not publish the [`keys::ANNOTATION_K0S_VERSION`] annotation a worker
/// does), else that annotation.
fn control_node_version(control_node: &ControlNode) -> Option<String> {
    let version = control_node.k0s_version().map(str::trim).unwrap_or_default();
    if !version.is_empty() && version.len() <= 128 {
        return Some(version.to_owned());
    }
    published_version(control_node.meta())
}

/// A Node as the planner sees it.
pub fn node_object(node: &Node) -> TargetObject {
    TargetObject {
        name: node.name_any(),
        labels: node.labels().into(),
        ready: is_node_ready(node),
        signal: observe_signal(node.meta()),
        required_keys: required_keys(node.meta()),
        version: published_version(node.meta()),
        gate_check: ObservedGateCheck::boxed(node.meta()),
        prestage: ObservedPrestage::boxed(node.meta()),
    }
}

/// The k0s version an object's node says it runs (its published annotation), if any.
pub fn published_version(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    let version = meta.annotations.as_ref()?.get(keys::ANNOTATION_K0S_VERSION)?.trim();
    (!version.is_empty() && version.len() <= 128).then(|| version.to_owned())
}

/// The keys an object's node requires signatures by (its published annotations).
pub fn required_keys(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> RequiredKeys {
    let ids = |key: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map_or_else(Vec::new, |v| keys::key_ids(v))
    };
    RequiredKeys {
        payloads: ids(keys::ANNOTATION_PAYLOAD_KEYS),
        bundles: ids(keys::ANNOTATION_BUNDLE_KEYS),
    }
}

/// Whether a Node's `Ready` condition is `True`.
pub fn is_node_ready(node: &Node) -> bool {
    node.status.as_ref().and_then(|status| status.conditions.as_ref()).is_some_and(|conditions| {
        conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// Decode the signal annotations of an object. A signal that fails validation but that the
/// node has answered with a terminal status (a node refuses what it cannot act on, with the
/// reason) is read as it stands, so the answer ends the plan instead of being ignored.
pub fn observe_signal(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> ObservedSignal {
    match signal::from_meta(meta) {
        Ok(None) => ObservedSignal::None,
        Ok(Some(data)) => ObservedSignal::Valid(data),
        Err(err) => match signal::from_meta_unchecked(meta) {
            Ok(Some(data)) if data.phase().is_some_and(signal::SignalPhase::is_terminal) => {
                ObservedSignal::Valid(data)
            }
            Ok(_) | Err(_) => ObservedSignal::Invalid(err.to_string()),
        },
    }
}

/// Drop what autopilot never reads from a watched Node or ControlNode before it is cached:
/// `metadata.managedFields` (a JSON tree per field manager, often larger than the rest of the
/// object), and of a Node everything but `spec.unschedulable` (the cordon facts) and the
/// `Ready` condition (the engine's readiness gate): a kubelet's status lists every image,
/// volume, address, capacity and condition of the machine, kilobytes per Node that a cache of
/// thousands would hold for nothing. Nothing writes a cached object back whole (signals and
/// cordons are patches), so the cache may hold less than the server.
pub fn slim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(spec) = node.spec.as_mut() {
        *spec = NodeSpec { unschedulable: spec.unschedulable, ..NodeSpec::default() };
    }
    if let Some(status) = node.status.as_mut() {
        let ready = status.conditions.take().map(|conditions| {
            conditions.into_iter().filter(|condition| condition.type_ == "Ready").collect()
        });
        *status = NodeStatus { conditions: ready, ..NodeStatus::default() };
    }
}

/// [`slim_node`] for a ControlNode: its `metadata.managedFields`.
pub fn slim_control_node(control_node: &mut ControlNode) {
    control_node.metadata.managed_fields = None;
}

/// What a drain needs to know about `pod`.
pub fn pod_facts(pod: &Pod) -> PodFacts {
    PodFacts {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        daemon_set: pod.owner_references().iter().any(|o| o.kind == "DaemonSet"),
        mirror: pod.annotations().contains_key("kubernetes.io/config.mirror"),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        node_selector: pod.spec.as_ref().and_then(|s| s.node_selector.clone()).unwrap_or_default(),
        tolerations: pod
            .spec
            .iter()
            .flat_map(|s| s.tolerations.iter().flatten())
            .map(|t| crate::cordon::Toleration {
                key: t.key.clone().unwrap_or_default(),
                operator: t.operator.clone().unwrap_or_default(),
                value: t.value.clone().unwrap_or_default(),
                effect: t.effect.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

/// Another node, as a drain under `IfPossible` sees it (`crate::cordon::has_somewhere_to_go`).
pub fn other_node(node: &Node) -> crate::cordon::OtherNode {
    let spec = node.spec.as_ref();
    crate::cordon::OtherNode {
        name: node.name_any(),
        ready: is_node_ready(node),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        labels: node.labels().clone(),
        taints: spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .map(|t| crate::cordon::Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: t.effect.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slim_node_keeps_what_autopilot_reads() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "w1", "uid": "u", "resourceVersion": "7",
                "labels": {"kubernetes.io/os": "linux"},
                "annotations": {keys::ANNOTATION_SIGNAL_VERSION: "v2"},
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}],
            },
            "spec": {"unschedulable": true, "podCIDR": "10.0.0.0/24",
                     "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True"},
                ],
                "images": [{"names": ["registry.example/app:1"], "sizeBytes": 1}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "capacity": {"cpu": "2"},
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                             "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                             "machineID": "", "operatingSystem": "linux", "osImage": "",
                             "systemUUID": ""},
            },
        }))
        .expect("a Node");
        let before = node.clone();
        slim_node(&mut node);
        assert_eq!(node.metadata.managed_fields, None);
        assert_eq!(node.status.as_ref().and_then(|s| s.images.as_ref()), None);
        assert_eq!(node.metadata.labels, before.metadata.labels);
        assert_eq!(node.metadata.annotations, before.metadata.annotations);
        assert_eq!(node.metadata.resource_version, before.metadata.resource_version);
        assert_eq!(node.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
        assert_eq!(node.spec.as_ref().and_then(|s| s.taints.as_ref()), None);
        assert_eq!(node.spec.as_ref().and_then(|s| s.pod_cidr.as_ref()), None);
        let status = node.status.as_ref().expect("the status is kept");
        let conditions: Vec<&str> =
            status.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
        assert_eq!(conditions, ["Ready"]);
        assert_eq!(status.addresses, None);
        assert_eq!(status.capacity, None);
        assert_eq!(status.node_info, None);
        assert!(is_node_ready(&node));
    }

    #[test]
    fn a_control_node_runs_the_version_it_registered_in_its_status() {
        let control_node = |value: serde_json::Value| -> ControlNode {
            serde_json::from_value(value).expect("a ControlNode")
        };
        let registered = control_node(serde_json::json!({
            "metadata": {"name": "controller-0"},
            "status": {"k0sVersion": "v1.35.0+k0s.0"},
        }));
        let version = control_node_object(&registered).version;
        assert_eq!(version.as_deref(), Some("v1.35.0+k0s.0"));
        let annotated = control_node(serde_json::json!({
            "metadata": {"name": "controller-0",
                         "annotations": {keys::ANNOTATION_K0S_VERSION: "v1.34.0+k0s.0"}},
        }));
        let version = control_node_object(&annotated).version;
        assert_eq!(version.as_deref(), Some("v1.34.0+k0s.0"));
        let unknown = control_node(serde_json::json!({"metadata": {"name": "controller-0"}}));
        assert_eq!(control_node_object(&unknown).version, None);
    }

    fn meta(data: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            annotations: Some(
                [
                    (keys::ANNOTATION_SIGNAL_VERSION.to_owned(), "v2".to_owned()),
                    (keys::ANNOTATION_SIGNAL_DATA.to_owned(), data.to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_answer_to_a_signal_it_refused_is_read_but_an_unanswered_invalid_one_is_not() {
        let unanswered = r#"{"planId":"p","created":"c","command":{"id":0,"k0supdate":{"url":"example.invalid/k0s","version":"v2"}}}"#;
        assert!(matches!(observe_signal(&meta(unanswered)), ObservedSignal::Invalid(_)));
        let answered = r#"{"planId":"p","created":"c","command":{"id":0,"k0supdate":{"url":"example.invalid/k0s","version":"v2"}},"status":{"status":"Failed","timestamp":"t","reason":"refused: no scheme"}}"#;
        let ObservedSignal::Valid(data) = observe_signal(&meta(answered)) else {
            panic!("the answer is read")
        };
        assert_eq!(data.phase(), Some(signal::SignalPhase::Failed));
    }
}
