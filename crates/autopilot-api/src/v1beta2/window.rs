//! Windows on a Plan (DESIGN §4): when nodes may be signalled (`spec.window`), when
//! payloads may be fetched (`spec.downloadWindow`), and named windows a node label picks
//! (`spec.windows`, label [`crate::keys::LABEL_WINDOW`]). What a run uses is frozen into its
//! status when it starts ([`RunWindows`]).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A window: open whenever any of its weekly ranges or absolute ranges is open. At least
/// one range is required (NewPlan refuses an empty window, which would never open).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanWindow {
    /// IANA time zone the weekly ranges are read in (for example `Europe/Berlin`), looked up
    /// in the time zone database built into k0s (never the host's); `UTC` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,

    /// Weekly ranges: open on each listed day at `startTime` for `length`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weekly: Vec<WeeklyRange>,

    /// Absolute ranges, RFC 3339 timestamps with an offset (`2026-12-05T02:00:00+01:00`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<TimeRange>,
}

/// A weekly range of a [`PlanWindow`]. Bounds are inclusive start, exclusive end; the day
/// that counts is the day the range starts (`Friday 23:00` for `4h` is open at Saturday
/// 01:00).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeeklyRange {
    /// Days the range opens on, full English names (`Monday` ... `Sunday`); empty means
    /// every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<String>,

    /// Wall-clock time the range opens, `HH:MM` (24-hour) in the window's `timeZone`.
    pub start_time: String,

    /// How long it stays open, a duration such as `4h` or `90m` (more than zero, at most a
    /// week).
    pub length: String,
}

/// An absolute range of a [`PlanWindow`]: open from `start` (inclusive) to `end`
/// (exclusive).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeRange {
    /// RFC 3339 timestamp with an offset.
    pub start: String,

    /// RFC 3339 timestamp with an offset, after `start`.
    pub end: String,
}

/// The windows of a run, frozen when it starts: a node can neither move itself into an
/// open window (its label is read once) nor an edit of the spec change a run in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunWindows {
    /// `spec.window` as the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<PlanWindow>,

    /// `spec.downloadWindow` as the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_window: Option<PlanWindow>,

    /// `spec.windows` as the run started.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub named: BTreeMap<String, PlanWindow>,

    /// The nodes whose window label named one of `named` when the run started, by window
    /// name. These nodes go inside their named window instead of `window`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub members: BTreeMap<String, WindowMembers>,
}

/// The nodes of one named window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowMembers {
    /// ControlNode names, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controllers: Vec<String>,

    /// Node names, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<String>,
}

impl RunWindows {
    /// Whether the run has no window at all (any time is fine).
    pub fn is_empty(&self) -> bool {
        self.window.is_none() && self.download_window.is_none() && self.members.is_empty()
    }
}
