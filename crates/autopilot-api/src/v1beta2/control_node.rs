//! `ControlNode`: the signal object of one controller (REF §1.1).
//!
//! A ControlNode has no `spec` on the wire: only metadata (labels, the mode annotation and
//! the signal annotations) and `status`. kube's derive always adds a `spec`, so the
//! [`kube::Resource`] impl, serde and the CRD are written out here by hand.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::NodeAddress;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceSubresourceStatus, CustomResourceSubresources,
    CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::CustomResourceExt;
use kube_core::object::HasStatus;
use kube_core::{ApiResource, ClusterResourceScope, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::keys;

/// The signal object of one controller: `ControlNode` of `autopilot.k0sproject.io/v1beta2`.
///
/// Cluster-scoped, named after the controller's node name. Carries the labels
/// `kubernetes.io/{hostname,os,arch}`, the `autopilot.k0sproject.io/mode` annotation, the
/// two signal annotations, and a status with the controller's addresses and k0s version.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ControlNode {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What the controller last reported about itself.
    pub status: Option<ControlNodeStatus>,
}

/// What a controller reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlNodeStatus {
    /// The controller's addresses: `InternalIP` is its API server address, `Hostname` the
    /// name of its kubelet `Node` (if any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<NodeAddress>,

    /// Version of the k0s binary that last started on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k0s_version: Option<String>,
}

impl ControlNode {
    /// A ControlNode with only a name set.
    pub fn new(name: &str) -> Self {
        Self {
            metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
            status: None,
        }
    }

    /// The address of the first `InternalIP` entry of the status: the controller's API
    /// server address.
    pub fn internal_ip(&self) -> Option<&str> {
        self.address(keys::ADDRESS_INTERNAL_IP)
    }

    /// The address of the first `Hostname` entry of the status: the name of the
    /// controller's kubelet `Node`, if it runs one.
    pub fn hostname(&self) -> Option<&str> {
        self.address(keys::ADDRESS_HOSTNAME)
    }

    /// The k0s version this controller last started with.
    pub fn k0s_version(&self) -> Option<&str> {
        self.status.as_ref()?.k0s_version.as_deref()
    }

    fn address(&self, kind: &str) -> Option<&str> {
        let status = self.status.as_ref()?;
        status.addresses.iter().find(|a| a.type_ == kind).map(|a| a.address.as_str())
    }
}

impl CustomResourceExt for ControlNode {
    /// The `CustomResourceDefinition` of `controlnodes.autopilot.k0sproject.io`: no
    /// printer columns, status subresource on, and only `status` in the schema.
    fn crd() -> CustomResourceDefinition {
        let status = crate::schema::crd_schema_for::<ControlNodeStatus>();
        let root = JSONSchemaProps {
            description: Some(
                "The signal object of one autopilot controller. It has no spec: the \
                 controller publishes its addresses and k0s version in status, and the \
                 autopilot leader signals it through annotations."
                    .to_owned(),
            ),
            type_: Some("object".to_owned()),
            properties: Some([("status".to_owned(), status)].into_iter().collect()),
            ..JSONSchemaProps::default()
        };
        CustomResourceDefinition {
            metadata: ObjectMeta {
                name: Some(keys::CRD_CONTROL_NODES.to_owned()),
                ..ObjectMeta::default()
            },
            spec: CustomResourceDefinitionSpec {
                group: keys::GROUP.to_owned(),
                names: CustomResourceDefinitionNames {
                    kind: keys::KIND_CONTROL_NODE.to_owned(),
                    list_kind: Some(format!("{}List", keys::KIND_CONTROL_NODE)),
                    plural: "controlnodes".to_owned(),
                    singular: Some("controlnode".to_owned()),
                    ..CustomResourceDefinitionNames::default()
                },
                scope: "Cluster".to_owned(),
                versions: vec![CustomResourceDefinitionVersion {
                    name: keys::VERSION.to_owned(),
                    served: true,
                    storage: true,
                    schema: Some(CustomResourceValidation { open_api_v3_schema: Some(root) }),
                    subresources: Some(CustomResourceSubresources {
                        status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
                        scale: None,
                    }),
                    ..CustomResourceDefinitionVersion::default()
                }],
                ..CustomResourceDefinitionSpec::default()
            },
            status: None,
        }
    }

    fn crd_name() -> &'static str {
        keys::CRD_CONTROL_NODES
    }

    fn api_resource() -> ApiResource {
        ApiResource::erase::<Self>(&())
    }

    fn shortnames() -> &'static [&'static str] {
        &[]
    }
}

impl Resource for ControlNode {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        keys::KIND_CONTROL_NODE.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        keys::GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        keys::VERSION.into()
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        keys::API_VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "controlnodes".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl HasStatus for ControlNode {
    type Status = ControlNodeStatus;

    fn status(&self) -> Option<&ControlNodeStatus> {
        self.status.as_ref()
    }

    fn status_mut(&mut self) -> &mut Option<ControlNodeStatus> {
        &mut self.status
    }
}

/// Wire shape: `apiVersion` and `kind` are written from constants and ignored on read.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ControlNodeRef<'a> {
    api_version: &'a str,
    kind: &'a str,
    metadata: &'a ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a ControlNodeStatus>,
}

#[derive(Deserialize)]
struct ControlNodeOwned {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    status: Option<ControlNodeStatus>,
}

impl Serialize for ControlNode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ControlNodeRef {
            api_version: keys::API_VERSION,
            kind: keys::KIND_CONTROL_NODE,
            metadata: &self.metadata,
            status: self.status.as_ref(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ControlNode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let ControlNodeOwned { metadata, status } = ControlNodeOwned::deserialize(deserializer)?;
        Ok(Self { metadata, status })
    }
}
