//! `UpdateConfig`: where to look for new k0s versions and when to roll them out (REF §1.3).
//!
//! Its status ([`UpdateConfigStatus`]) is the updater's last word on it: kstatus conditions,
//! the last check and its outcome, what the server offered (and its end of life), and when
//! the last automatic patch and minor updates were planned. The progress of an update shows
//! up on the `autopilot` Plan that the updater creates.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::PlanWindow;
use super::plan::{DrainOptions, DrainPolicy, PlanCommandRollout};
use super::target::{PlanCommandTarget, PlanCommandTargets, is_false};
use crate::keys;

/// Automatic updates: poll an update server on a channel and create the `autopilot` Plan
/// when a new version is available inside the update window.
// Four printer columns are strings: clippy reads their repeated `type_` as a duplicated
// attribute, but each `printcolumn(...)` is its own column.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autopilot.k0sproject.io",
    crates(kube_core = "::kube_core"),
    version = "v1beta2",
    kind = "UpdateConfig",
    plural = "updateconfigs",
    singular = "updateconfig",
    status = "UpdateConfigStatus",
    derive = "PartialEq",
    doc = "Automatic k0s updates from an update server.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the updater's last check of this generation succeeded"
    ),
    printcolumn(
        name = "Last Check",
        type_ = "string",
        json_path = ".status.lastCheck.reason",
        description = "What the updater's last check ended with"
    ),
    printcolumn(
        name = "Offered",
        type_ = "string",
        json_path = ".status.offeredVersion",
        description = "The version the update server offered at the last check"
    ),
    printcolumn(
        name = "Past EOL",
        type_ = "boolean",
        json_path = ".status.endOfLife.past",
        description = "Whether the running version is past the end of life the server gave"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
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

    /// The least time between two automatic updates of one kind, counted from when the
    /// updater planned the last one; absent: no minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_interval: Option<MinInterval>,
}

/// The least time between two automatic updates, separately for patch and minor updates
/// (GKE waits at least 24h between automatic patch upgrades and 30 days between minors).
///
/// An update is a *minor* one when the offered version's major or minor number differs
/// from the running version's, else a *patch* one (a `+k0s.N` re-release counts as a patch).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MinInterval {
    /// After an automatic patch update, how long until the next automatic patch update may
    /// be planned, as a Go duration (for example `24h`); absent: no minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub patch: Option<String>,

    /// After an automatic minor update, how long until the next automatic minor update may
    /// be planned, as a Go duration (for example `720h` for 30 days); absent: no minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub minor: Option<String>,
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

// === Status ===

/// What the updater last did with an UpdateConfig, written by the leading controller's
/// updater (merge patch of the status subresource, only when it changes). Every text is
/// capped, so the status stays small whatever the update server answers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateConfigStatus {
    /// The `metadata.generation` of the spec the updater last checked with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// kstatus conditions: `Ready` (the last check of this generation succeeded: up to date,
    /// waiting for its window or minimum interval, or its Plan completed), `Reconciling`
    /// (the generation is not checked yet, or a Plan the updater wrote runs), `Stalled` (the
    /// updater cannot act; the reason is the check's, the message says why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The last check: when it ended and with what.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check: Option<UpdateCheckStatus>,

    /// The version the updater ran (judged against) at the last check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_version: Option<String>,

    /// The version the update server offered at the last check that reached it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offered_version: Option<String>,

    /// The end of life the update server gave (`eolDate`), and whether the running version
    /// is past it; absent when the server gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_of_life: Option<EndOfLifeStatus>,

    /// When the updater last planned an automatic patch update (wrote the `autopilot` Plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_patch_update: Option<Time>,

    /// When the updater last planned an automatic minor update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_minor_update: Option<Time>,

    /// While a newer version waits for `upgradeStrategy.minInterval`: when it may be
    /// planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_update_allowed: Option<Time>,

    /// The `spec.id` of the last `autopilot` Plan the updater wrote for this UpdateConfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_plan_id: Option<String>,
}

/// One check of the update server and what it ended with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateCheckStatus {
    /// When the check ended.
    pub time: Time,

    /// Its outcome, as the reason of its Event (`UpToDate`, `PlanCreated`,
    /// `MinIntervalWait`, `UpdateServerError`, ...).
    #[schemars(length(max = 64))]
    pub reason: String,

    /// What it found, one line (at most 1 KiB).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1100))]
    pub message: String,
}

/// The end of life the update server gave, judged against the running version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndOfLifeStatus {
    /// `eolDate` exactly as the server gave it (at most 64 bytes).
    #[schemars(length(max = 70))]
    pub date: String,

    /// Whether the running version is past it; absent when that cannot be judged (the
    /// message says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub past: Option<bool>,

    /// Why `past` cannot be judged (a malformed date, a running version on another release
    /// line), or since when the running version is past its end of life.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1100))]
    pub message: String,
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

    /// The generated command's `drainOptions` (see the Plan's): set `force` and
    /// `deleteEmptydirData` to drain as k0s does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_options: Option<DrainOptions>,

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
