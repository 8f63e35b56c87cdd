//! `UpdateConfig`: where to look for new k0s versions and when to roll them out (REF §1.3).
//!
//! No status: progress shows up on the `autopilot` Plan that the updater creates.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::PlanWindow;
use super::plan::{DrainPolicy, PlanCommandRollout};
use super::target::{PlanCommandTarget, PlanCommandTargets, is_false};
use crate::keys;

/// Automatic updates: poll an update server on a channel and create the `autopilot` Plan
/// when a new version is available inside the update window.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autopilot.k0sproject.io",
    crates(kube_core = "::kube_core"),
    version = "v1beta2",
    kind = "UpdateConfig",
    plural = "updateconfigs",
    singular = "updateconfig",
    derive = "PartialEq",
    doc = "Automatic k0s updates from an update server."
)]
#[serde(rename_all = "camelCase")]
pub struct UpdateConfigSpec {
    /// Release channel; a path segment on the update server.
    #[serde(default = "default_channel")]
    pub channel: String,

    /// Base URL of the update server; `https://` is assumed when the scheme is missing.
    #[serde(default = "default_update_server")]
    pub update_server: String,

    /// When updates may be applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<UpgradeStrategy>,

    /// Template of the plan to create; versions and download URLs come from the update
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_spec: Option<AutopilotPlanSpec>,
}

impl Default for UpdateConfigSpec {
    fn default() -> Self {
        Self {
            channel: default_channel(),
            update_server: default_update_server(),
            upgrade_strategy: None,
            plan_spec: None,
        }
    }
}

fn default_channel() -> String {
    keys::DEFAULT_CHANNEL.to_owned()
}

fn default_update_server() -> String {
    keys::DEFAULT_UPDATE_SERVER.to_owned()
}

/// When updates may be applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStrategy {
    /// Which strategy to use; required in practice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<UpgradeStrategyType>,

    /// Deprecated: cron expression for the `cron` strategy (default `@hourly`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,

    /// Update window for the `periodic` strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periodic: Option<PeriodicUpgradeStrategy>,
}

/// Kind of upgrade strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpgradeStrategyType {
    /// Check periodically; apply inside a weekly window.
    Periodic,
    /// Deprecated: check on a cron schedule.
    Cron,
}

impl UpgradeStrategyType {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Periodic => "periodic",
            Self::Cron => "cron",
        }
    }
}

impl JsonSchema for UpgradeStrategyType {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "UpgradeStrategyType".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "Kind of upgrade strategy: periodic, or the deprecated cron.",
            [Self::Periodic, Self::Cron].iter().map(|t| t.as_str()),
        )
    }
}

/// A weekly update window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeriodicUpgradeStrategy {
    /// Days of the week the window opens on, as full English names (`Monday` ...
    /// `Sunday`); empty means every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<String>,

    /// Time of day the window opens, `HH:MM` (24-hour, controller local time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,

    /// How long the window stays open, as a Go duration (for example `2h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<String>,
}

/// Template of the plan an `UpdateConfig` creates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutopilotPlanSpec {
    /// Commands of the plan, in order.
    pub commands: Vec<AutopilotPlanCommand>,

    /// The generated plan's `spec.window`: when its nodes may be signalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<PlanWindow>,

    /// The generated plan's `spec.downloadWindow`: when its nodes may download (pre-stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_window: Option<PlanWindow>,

    /// The generated plan's `spec.windows`: windows a node picks by its
    /// `autopilot.k0sproject.io/window` label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub windows: BTreeMap<String, PlanWindow>,
}

/// A plan command without versions or download URLs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutopilotPlanCommand {
    /// Update k0s on these targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k0supdate: Option<AutopilotPlanCommandK0sUpdate>,

    /// Download the airgap bundle onto these workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub airgapupdate: Option<AutopilotPlanCommandAirgapUpdate>,
}

/// Targets of a generated `k0supdate` command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutopilotPlanCommandK0sUpdate {
    /// Update even if nodes already run the version, and skip the removed-API check.
    #[serde(default, skip_serializing_if = "is_false")]
    pub forceupdate: bool,

    /// Which controllers and workers to update.
    pub targets: PlanCommandTargets,

    /// The generated command's `drain` policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainPolicy>,

    /// The generated command's `progressTimeout`, `gates`, `prestage` and
    /// `prestageConcurrent`, fields of this object on the wire, copied as they are.
    #[serde(flatten)]
    pub rollout: PlanCommandRollout,
}

/// Targets of a generated `airgapupdate` command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutopilotPlanCommandAirgapUpdate {
    /// Which workers receive the bundle.
    pub workers: PlanCommandTarget,

    /// The generated command's `progressTimeout`, `gates`, `prestage` and
    /// `prestageConcurrent`, fields of this object on the wire, copied as they are.
    #[serde(flatten)]
    pub rollout: PlanCommandRollout,
}
