//! The `autopilot.k0sproject.io/v1beta2` custom resources: [`Plan`], [`ControlNode`] and
//! [`UpdateConfig`], all cluster-scoped.
//!
//! Start with [`crds`]: the three CustomResourceDefinitions every controller applies.

mod control_node;
mod grouped;
mod plan;
mod preflight;
mod target;
mod update_config;
mod window;

#[cfg(test)]
mod tests;

pub use control_node::{ControlNode, ControlNodeStatus};
pub use grouped::{GROUP_ABOVE, PreflightNodeGroup, TargetGroup};
pub use plan::{
    CommandState, DRAIN_SECONDS_MAX, DrainOptions, DrainPolicy, EarlierRunSignal, Gate, GateAfter,
    GateCheck, GateOnFailure, GateRun, KubernetesGate, Plan, PlanCommand, PlanCommandAirgapUpdate,
    PlanCommandAirgapUpdateStatus, PlanCommandK0sUpdate, PlanCommandK0sUpdateStatus,
    PlanCommandRollout, PlanCommandStatus, PlanResourceUrl, PlanSpec, PlanState, PlanStateType,
    PlanStatus, PrometheusGate, RollbackStatus,
};
pub use preflight::{
    CheckStatus, DEFAULT_TIMEOUT_SECONDS, FrozenTemplate, LocalizedMessage, NO_TIMEOUT, OnWarn,
    PlanCommandPreflight, PlanCommandPreflightStatus, PreflightCheck, PreflightCheckStatus,
    PreflightCommand, PreflightCommandId, PreflightCondition, PreflightMessage,
    PreflightNodeStatus, PreflightPodStatus, PreflightResult, PreflightTargets, SchedulerData,
    SchedulerPodRef,
};
pub use target::{
    BetweenGroups, Concurrency, PlanCommandTarget, PlanCommandTargetDiscovery,
    PlanCommandTargetDiscoverySelector, PlanCommandTargetDiscoveryStatic, PlanCommandTargetLimits,
    PlanCommandTargets, TargetState, TargetStatus,
};
pub use update_config::{
    AutopilotPlanCommand, AutopilotPlanCommandAirgapUpdate, AutopilotPlanCommandK0sUpdate,
    AutopilotPlanSpec, EndOfLifeStatus, MinInterval, PeriodicUpgradeStrategy, UpdateCheckStatus,
    UpdateConfig, UpdateConfigSpec, UpdateConfigStatus, UpgradeStrategy, UpgradeStrategyType,
};
pub use window::{PlanWindow, RunWindows, TimeRange, WeeklyRange, WindowMembers};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_core::CustomResourceExt;

/// The three autopilot CRDs, in name order: `controlnodes`, `plans`, `updateconfigs`.
///
/// These are exactly what the controller applies at startup and what `cargo xtask crdgen`
/// writes to `manifests/crds/`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![ControlNode::crd(), Plan::crd(), UpdateConfig::crd()];
    for crd in &mut crds {
        crd.metadata.annotations.get_or_insert_with(Default::default).insert(
            crate::keys::ANNOTATION_CRD_GENERATION.to_owned(),
            CRD_SCHEMA_GENERATION.to_string(),
        );
    }
    crds
}

/// Where [`CRDS_JSONL`] lives in the workspace (written by `cargo xtask crdgen`).
pub const CRDS_JSONL_PATH: &str = "crates/autopilot-api/crds.jsonl";

/// [`crds`] as `cargo xtask crdgen` wrote them: one compact JSON object per line, in the same
/// order. The controller applies these instead of building the schemas from the types: that
/// code (schemars and every type's schema) was a few hundred KiB of every `k0s` binary, run
/// once per start. A test checks they are [`crds`] and `crdgen --check` that the file is
/// current.
pub const CRDS_JSONL: &str = include_str!("../../crds.jsonl");

/// [`crds`] as JSON, one line each: the content of [`CRDS_JSONL`].
pub fn crds_jsonl() -> String {
    crds()
        .iter()
        .map(|crd| serde_json::to_string(crd).expect("a CRD serialises to JSON") + "\n")
        .collect()
}

/// The generation of the CRD schemas this binary carries. Bump it with every change to a
/// CRD (the `crds_stay_readable` test says so), and keep each generation readable by the one
/// before: new fields optional, no field removed or retyped, so a binary rolled back after an
/// update keeps working on the newer CRDs it leaves in place.
pub const CRD_SCHEMA_GENERATION: u32 = 9;
