//! What the shells keep of the API objects they watch, and how the engine sees them: pure
//! conversions from Nodes, ControlNodes and Pods to the engine's inputs, and the slimming
//! applied before an object is cached.

use autopilot_api::signal;
use autopilot_api::v1beta2::ControlNode;
use std::borrow::Cow;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
        // A controller's Kubernetes version is its API server's `/version`, probed.
        kubelet_version: None,
        gate_check: ObservedGateCheck::boxed(control_node.meta()),
        prestage: ObservedPrestage::boxed(control_node.meta()),
        drained: None,
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
pub fn node_object(node: &SlimNode) -> TargetObject {
    TargetObject {
        name: node.name_any(),
        labels: node.labels().into(),
        ready: node.ready,
        signal: observe_signal(node.meta()),
        required_keys: required_keys(node.meta()),
        version: published_version(node.meta()),
        kubelet_version: node.kubelet_version.clone(),
        gate_check: ObservedGateCheck::boxed(node.meta()),
        prestage: ObservedPrestage::boxed(node.meta()),
        drained: None,
    }
}

/// The k0s version an object's node says it runs (its published annotation), if any.
pub fn published_version(meta: &ObjectMeta) -> Option<String> {
    let version = meta.annotations.as_ref()?.get(keys::ANNOTATION_K0S_VERSION)?.trim();
    (!version.is_empty() && version.len() <= 128).then(|| version.to_owned())
}

/// The keys an object's node requires signatures by (its published annotations).
pub fn required_keys(meta: &ObjectMeta) -> RequiredKeys {
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
pub fn observe_signal(meta: &ObjectMeta) -> ObservedSignal {
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

/// A Node as the leader caches it: its metadata (without `managedFields`), `spec.unschedulable`
/// (the cordon facts) and whether its `Ready` condition is `True` (the engine's readiness
/// gate). The watch decodes Nodes straight into this type, so the rest of a Node is never
/// held: a kubelet's status lists every image, volume, address, capacity and condition of the
/// machine, kilobytes per Node, and even an empty `k8s_openapi` Node takes 1.5 KiB where this
/// takes under 400 bytes. Nothing writes a cached object back whole (signals and cordons are
/// patches), so the cache may hold less than the server.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(from = "WireNode")]
pub struct SlimNode {
    /// The Node's metadata, without `managedFields`.
    pub metadata: ObjectMeta,
    /// `spec.unschedulable`: whether the Node is cordoned.
    pub unschedulable: bool,
    /// Whether the Node's `Ready` condition is `True`.
    pub ready: bool,
    /// `status.nodeInfo.kubeletVersion`: the version its kubelet reports (`None`: none).
    pub kubelet_version: Option<String>,
}

/// The parts of a Node's JSON a [`SlimNode`] is made from; serde skips the rest.
#[derive(serde::Deserialize)]
struct WireNode {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<WireSpec>,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(serde::Deserialize)]
struct WireSpec {
    #[serde(default)]
    unschedulable: Option<bool>,
}

#[derive(serde::Deserialize)]
struct WireStatus {
    #[serde(default)]
    conditions: Option<Vec<WireCondition>>,
    #[serde(default, rename = "nodeInfo")]
    node_info: Option<WireNodeInfo>,
}

#[derive(serde::Deserialize)]
struct WireNodeInfo {
    #[serde(default, rename = "kubeletVersion")]
    kubelet_version: Option<String>,
}

#[derive(serde::Deserialize)]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

impl From<WireNode> for SlimNode {
    fn from(wire: WireNode) -> Self {
        let WireNode { mut metadata, spec, status } = wire;
        metadata.managed_fields = None;
        let (conditions, node_info) =
            status.map_or((None, None), |status| (status.conditions, status.node_info));
        let conditions = conditions.unwrap_or_default();
        Self {
            metadata,
            unschedulable: spec.and_then(|spec| spec.unschedulable).unwrap_or(false),
            ready: conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"),
            kubelet_version: reported_version(node_info.and_then(|info| info.kubelet_version)),
        }
    }
}

impl From<&Node> for SlimNode {
    fn from(node: &Node) -> Self {
        let node_info = node.status.as_ref().and_then(|status| status.node_info.as_ref());
        Self {
            metadata: ObjectMeta { managed_fields: None, ..node.metadata.clone() },
            unschedulable: node.spec.as_ref().and_then(|spec| spec.unschedulable).unwrap_or(false),
            ready: is_node_ready(node),
            kubelet_version: reported_version(node_info.map(|info| info.kubelet_version.clone())),
        }
    }
}

/// A version as reported (trimmed), if it is one: an empty or oversized one counts as none.
fn reported_version(version: Option<String>) -> Option<String> {
    let version = version?;
    let version = version.trim();
    (!version.is_empty() && version.len() <= 128).then(|| version.to_owned())
}

impl kube_core::Resource for SlimNode {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        <Node as k8s_openapi::Resource>::KIND.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        <Node as k8s_openapi::Resource>::GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        <Node as k8s_openapi::Resource>::VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        <Node as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Drop what autopilot never reads from a watched ControlNode before it is cached: its
/// `metadata.managedFields` (a JSON tree per field manager, often larger than the rest).
pub fn slim_control_node(control_node: &mut ControlNode) {
    control_node.metadata.managed_fields = None;
}

/// What a drain needs to know about `pod`, whom `selector` (a command's
/// `drainOptions.podSelector`; `None`: every pod) may select. A pod controlled by a
/// DaemonSet is taken to be one of a DaemonSet that exists: the drain looks it up and sets
/// `exists`.
pub fn pod_facts(pod: &Pod, selector: Option<&crate::plan::selector::LabelSelector>) -> PodFacts {
    let controller = match pod.owner_references().iter().find(|o| o.controller == Some(true)) {
        None => crate::cordon::Controller::None,
        Some(owner) if owner.kind == "DaemonSet" => {
            crate::cordon::Controller::DaemonSet { name: owner.name.clone(), exists: true }
        }
        Some(_) => crate::cordon::Controller::Other,
    };
    let spec = pod.spec.as_ref();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let labels: crate::plan::Labels = pod.labels().iter().collect();
    PodFacts {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        controller,
        mirror: pod.annotations().contains_key("kubernetes.io/config.mirror"),
        deletion: pod.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        finished: matches!(phase, Some("Succeeded" | "Failed")),
        empty_dir: spec
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|volumes| volumes.iter().any(|v| v.empty_dir.is_some())),
        selected: selector.is_none_or(|selector| selector.matches(&labels)),
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

    fn kubelet_node(unschedulable: bool, ready: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "w1", "uid": "u", "resourceVersion": "7",
                "labels": {"kubernetes.io/os": "linux"},
                "annotations": {keys::ANNOTATION_SIGNAL_VERSION: "v2"},
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}],
            },
            "spec": {"unschedulable": unschedulable, "podCIDR": "10.0.0.0/24",
                     "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "True"},
                    {"type": "Ready", "status": ready, "reason": "KubeletReady"},
                ],
                "images": [{"names": ["registry.example/app:1"], "sizeBytes": 1}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "capacity": {"cpu": "2"},
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                             "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                             "machineID": "", "operatingSystem": "linux", "osImage": "",
                             "systemUUID": ""},
            },
        })
    }

    #[test]
    fn a_slim_node_keeps_what_autopilot_reads() {
        let json = kubelet_node(true, "True");
        let node: SlimNode = serde_json::from_value(json.clone()).expect("a Node");
        let full: Node = serde_json::from_value(json).expect("a Node");
        assert_eq!(node.metadata.managed_fields, None);
        assert_eq!(node.metadata.name.as_deref(), Some("w1"));
        assert_eq!(node.metadata.labels, full.metadata.labels);
        assert_eq!(node.metadata.annotations, full.metadata.annotations);
        assert_eq!(node.metadata.resource_version.as_deref(), Some("7"));
        assert!(node.unschedulable);
        assert!(node.ready);
        assert_eq!(SlimNode::from(&full), node, "decoded and converted alike");
        assert_eq!(<SlimNode as kube_core::Resource>::url_path(&(), None), "/api/v1/nodes");
    }

    #[test]
    fn a_slim_node_is_ready_only_by_its_ready_condition() {
        for (status, ready) in [("True", true), ("False", false), ("Unknown", false)] {
            let node: SlimNode =
                serde_json::from_value(kubelet_node(false, status)).expect("a Node");
            assert_eq!(node.ready, ready, "Ready={status}");
            assert!(!node.unschedulable);
        }
        let bare: SlimNode = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "w2"}, "status": {"conditions": null}}),
        )
        .expect("a Node");
        assert_eq!(bare, SlimNode { metadata: bare.metadata.clone(), ..SlimNode::default() });
        assert!(!bare.ready && !bare.unschedulable);
    }

    #[test]
    fn a_slim_node_keeps_the_version_its_kubelet_reports_and_none_for_an_empty_one() {
        let mut json = kubelet_node(false, "True");
        let node: SlimNode = serde_json::from_value(json.clone()).expect("a Node");
        assert_eq!(node.kubelet_version, None, "an empty kubeletVersion is no report");
        json["status"]["nodeInfo"]["kubeletVersion"] = " v1.35.4 ".into();
        let node: SlimNode = serde_json::from_value(json.clone()).expect("a Node");
        assert_eq!(node.kubelet_version.as_deref(), Some("v1.35.4"));
        let full: Node = serde_json::from_value(json).expect("a Node");
        assert_eq!(SlimNode::from(&full), node, "decoded and converted alike");
        assert_eq!(node_object(&node).kubelet_version.as_deref(), Some("v1.35.4"));
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

    fn meta(data: &str) -> ObjectMeta {
        ObjectMeta {
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
