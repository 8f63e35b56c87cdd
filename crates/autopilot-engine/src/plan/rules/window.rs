//! Windows on a Plan (DESIGN §4): when nodes may be signalled.
//!
//! A run freezes `spec.window`, `spec.downloadWindow`, `spec.windows` and the nodes whose
//! [`keys::LABEL_WINDOW`] label names one of `spec.windows` into its status when it starts
//! ([`freeze`]); every pass compiles the frozen copy ([`RunSchedule::compile`]) and asks,
//! per node about to be signalled, whether its window is open now ([`RunSchedule::gate`]).
//!
//! A node's window is its named window if its label put it in one, else `spec.window`
//! (none: any time). Without pre-staging a node downloads when it is signalled, so
//! `downloadWindow` must be open too; with pre-staging (`crate::plan::rules::prestage`) the leader asks a
//! node to stage only while `downloadWindow` is open, and a node that staged is signalled
//! inside its window alone. Both are checked only before a node is signalled:
//! nodes in flight finish when a window closes. A rollback ignores windows (it undoes a
//! change that went wrong; holding it for a window would keep the cluster broken).
//!
//! Weekly ranges use the updater's weekly-window rules (inclusive start, exclusive end,
//! the day the range starts counts, DST handled) in the window's time zone, looked up in the
//! time zone database built into the binary, never the host's, so two controllers on hosts
//! with different databases decide the same.

use std::collections::{BTreeMap, BTreeSet};

use autopilot_api::keys;
use autopilot_api::v1beta2::{
    PeriodicUpgradeStrategy, PlanSpec, PlanStatus, PlanWindow, RunWindows, WindowMembers,
};
use jiff::Timestamp;
use jiff::tz::{TimeZone, TimeZoneDatabase};

use crate::plan::model::command::{Command, Group, targets};
use crate::plan::model::decision::{Effect, EventKind};
use crate::plan::model::inputs::Inputs;
use crate::plan::model::phases::reasons;
use crate::updater::window::{Window as Weekly, WindowState};

/// At most this many ranges (weekly plus absolute) per window: a window is for people to
/// read, and every pass evaluates every range of every window it may need.
pub const MAX_RANGES: usize = 32;

/// At most this many named windows.
pub const MAX_NAMED: usize = 32;

/// A compiled window: its time zone, weekly ranges and absolute ranges.
#[derive(Clone, Debug)]
pub struct Compiled {
    tz: TimeZone,
    weekly: Vec<Weekly>,
    ranges: Vec<(Timestamp, Timestamp)>,
}

impl Compiled {
    /// Compile `window`; `path` names it in errors (`spec.window`).
    pub fn new(window: &PlanWindow, path: &str) -> Result<Self, String> {
        let count = window.weekly.len() + window.ranges.len();
        if count == 0 {
            return Err(format!(
                "{path}: neither weekly nor ranges is set; the window would never open"
            ));
        }
        if count > MAX_RANGES {
            return Err(format!("{path}: {count} ranges, more than the {MAX_RANGES} allowed"));
        }
        let tz = match window.time_zone.as_deref().map(str::trim) {
            None | Some("") => TimeZone::UTC,
            Some(name) => TimeZoneDatabase::bundled().get(name).map_err(|_| {
                format!(
                    "{path}.timeZone: unknown time zone {name:?} (an IANA name such as \
                     Europe/Berlin)"
                )
            })?,
        };
        let weekly = window
            .weekly
            .iter()
            .enumerate()
            .map(|(index, range)| {
                let periodic = PeriodicUpgradeStrategy {
                    days: range.days.clone(),
                    start_time: Some(range.start_time.clone()),
                    length: Some(range.length.clone()),
                };
                Weekly::parse(Some(&periodic)).map_err(|error| {
                    // The weekly-window errors name the updater's fields (`periodic.length`).
                    let text = error.to_string();
                    let field = text.strip_prefix("periodic.").unwrap_or(&text);
                    format!("{path}.weekly[{index}].{field}")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ranges = window
            .ranges
            .iter()
            .enumerate()
            .map(|(index, range)| {
                let at = |field: &str, value: &str| {
                    value.trim().parse::<Timestamp>().map_err(|error| {
                        format!(
                            "{path}.ranges[{index}].{field}: {value:?} is not an RFC 3339 \
                             timestamp with an offset ({error})"
                        )
                    })
                };
                let (start, end) = (at("start", &range.start)?, at("end", &range.end)?);
                if end <= start {
                    return Err(format!(
                        "{path}.ranges[{index}]: end {} is not after start {}",
                        range.end, range.start
                    ));
                }
                Ok((start, end))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { tz, weekly, ranges })
    }

    /// Whether the window is open at `now`, and when that changes: open until the latest
    /// end of the ranges open now; closed until the earliest start after now (`None`: it
    /// never opens again, every range is in the past).
    pub fn state_at(&self, now: Timestamp) -> WindowState {
        let mut closes_at: Option<Timestamp> = None;
        let mut opens_at: Option<Timestamp> = None;
        let mut open = |end: Timestamp| closes_at = Some(closes_at.map_or(end, |c| c.max(end)));
        let mut next = |start: Timestamp| opens_at = Some(opens_at.map_or(start, |o| o.min(start)));
        for weekly in &self.weekly {
            match weekly.state_at(now, &self.tz) {
                WindowState::Open { closes_at } => open(closes_at),
                WindowState::Closed { opens_at: Some(start) } => next(start),
                WindowState::Closed { opens_at: None } => {}
            }
        }
        for &(start, end) in &self.ranges {
            if start <= now && now < end {
                open(end);
            } else if start > now {
                next(start);
            }
        }
        match closes_at {
            Some(closes_at) => WindowState::Open { closes_at },
            None => WindowState::Closed { opens_at },
        }
    }
}

/// Which window a node goes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Which<'w> {
    /// `spec.window` (or none).
    Plan,
    /// A named window.
    Named(&'w str),
}

/// A run's windows, compiled for a pass.
#[derive(Debug, Default)]
pub struct RunSchedule<'w> {
    window: Option<Compiled>,
    download: Option<Compiled>,
    named: BTreeMap<&'w str, Compiled>,
    members: Option<&'w BTreeMap<String, WindowMembers>>,
    /// Why the frozen windows do not compile: every node is held, saying so.
    broken: Option<String>,
}

/// A node held by its window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    /// What the window is: `the window`, `the download window`, `window rack-a`.
    pub what: String,
    /// When it opens next (`None`: never again).
    pub opens_at: Option<Timestamp>,
}

impl Closed {
    /// How long from `now` until the window opens (`None`: it never opens again).
    pub fn wait_from(&self, now: Timestamp) -> Option<std::time::Duration> {
        let wait = now.duration_until(self.opens_at?);
        Some(std::time::Duration::try_from(wait).unwrap_or(std::time::Duration::ZERO))
    }

    /// Of two holds, the one whose window opens first (one that never opens last).
    pub fn earliest(held: Option<Self>, closed: Self) -> Self {
        match held {
            None => closed,
            Some(held) => match (held.opens_at, closed.opens_at) {
                (Some(a), Some(b)) if b < a => closed,
                (None, Some(_)) => closed,
                (Some(_) | None, _) => held,
            },
        }
    }

    /// `waiting for the window (opens 2026-12-05T02:00:00Z)`.
    pub fn reason(&self) -> String {
        match self.opens_at {
            Some(at) => format!(
                "waiting for {} (opens {})",
                self.what,
                autopilot_api::signal::format_timestamp(at)
            ),
            None => format!("waiting for {}, which never opens again", self.what),
        }
    }
}

impl<'w> RunSchedule<'w> {
    /// No windows: every node may go at any time.
    pub const NONE: RunSchedule<'static> = RunSchedule {
        window: None,
        download: None,
        named: BTreeMap::new(),
        members: None,
        broken: None,
    };

    /// [`Self::compile`], or, when the frozen windows do not compile, a schedule that
    /// holds every node with that reason.
    pub fn compile_or_hold(windows: Option<&'w RunWindows>) -> Self {
        Self::compile(windows)
            .unwrap_or_else(|problem| Self { broken: Some(problem), ..Self::default() })
    }

    /// Compile the run's frozen windows. A window that no longer compiles (a status edited
    /// by hand, or a time zone the binary's database dropped) never opens: holding is the
    /// safe side, and the reason says why.
    pub fn compile(windows: Option<&'w RunWindows>) -> Result<Self, String> {
        let Some(windows) = windows else { return Ok(Self::default()) };
        let window =
            windows.window.as_ref().map(|w| Compiled::new(w, "spec.window")).transpose()?;
        let download = windows
            .download_window
            .as_ref()
            .map(|w| Compiled::new(w, "spec.downloadWindow"))
            .transpose()?;
        let named = windows
            .named
            .iter()
            .map(|(name, w)| {
                Ok((name.as_str(), Compiled::new(w, &format!("spec.windows.{name}"))?))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self { window, download, named, members: Some(&windows.members), broken: None })
    }

    /// The window `name` (a target of `group`) is in.
    fn which(&self, group: Group, name: &str) -> Which<'w> {
        let Some(members) = self.members else { return Which::Plan };
        members
            .iter()
            .find(|(_, members)| {
                let names = match group {
                    Group::Controllers => &members.controllers,
                    Group::Workers => &members.workers,
                };
                names.binary_search_by(|n| n.as_str().cmp(name)).is_ok()
            })
            .map_or(Which::Plan, |(window, _)| Which::Named(window.as_str()))
    }

    /// `Ok` when `name` (a target of `group`) may be signalled at `now`; else which window
    /// holds it and when that opens. `staged`: its payload is already on the node, so the
    /// download window does not matter.
    pub(in crate::plan) fn gate(
        &self,
        group: Group,
        name: &str,
        now: Timestamp,
        staged: bool,
    ) -> Result<(), Closed> {
        if let Some(closed) = self.broken_hold() {
            return Err(closed);
        }
        let own = match self.which(group, name) {
            Which::Plan => self.window.as_ref().map(|w| (w, "the window".to_owned())),
            Which::Named(window) => self.named.get(window).map(|w| (w, format!("window {window}"))),
        };
        let download = (!staged)
            .then_some(self.download.as_ref())
            .flatten()
            .map(|w| (w, "the download window".to_owned()));
        for (window, what) in own.into_iter().chain(download) {
            if let WindowState::Closed { opens_at } = window.state_at(now) {
                return Err(Closed { what, opens_at });
            }
        }
        Ok(())
    }
}

impl RunSchedule<'_> {
    /// The hold of every node when the frozen windows do not compile.
    fn broken_hold(&self) -> Option<Closed> {
        self.broken.as_ref().map(|problem| Closed {
            what: format!("a window of this run that does not compile ({problem})"),
            opens_at: None,
        })
    }

    /// `Ok` when payloads may be downloaded at `now` (pre-staging asks a node only then);
    /// else the download window and when it opens.
    pub(in crate::plan) fn download_gate(&self, now: Timestamp) -> Result<(), Closed> {
        if let Some(closed) = self.broken_hold() {
            return Err(closed);
        }
        match self.download.as_ref().map(|window| window.state_at(now)) {
            None | Some(WindowState::Open { .. }) => Ok(()),
            Some(WindowState::Closed { opens_at }) => {
                Err(Closed { what: "the download window".to_owned(), opens_at })
            }
        }
    }
}

/// What [`freeze`] found wrong with the spec's windows (the run does not start).
pub(in crate::plan) type Refusal = String;

/// Freeze the windows of a new run into `status` (whose targets NewPlan has chosen):
/// validate every window of `spec`, and put each target whose window label names one of
/// `spec.windows` into it. Returns the warning Events (labels naming no window), or the
/// refusal when a window does not compile.
pub(in crate::plan) fn freeze(
    inputs: &Inputs<'_>,
    spec: &PlanSpec,
    status: &mut PlanStatus,
) -> Result<Vec<Effect>, Refusal> {
    if spec.window.is_none() && spec.download_window.is_none() && spec.windows.is_empty() {
        status.windows = None;
        return Ok(Vec::new());
    }
    if spec.windows.len() > MAX_NAMED {
        return Err(format!(
            "spec.windows: {} windows, more than the {MAX_NAMED} allowed",
            spec.windows.len()
        ));
    }
    let mut frozen = RunWindows {
        window: spec.window.clone(),
        download_window: spec.download_window.clone(),
        named: spec.windows.clone(),
        members: BTreeMap::new(),
    };
    // Every window must compile now, so a run never starts with one that cannot open.
    RunSchedule::compile(Some(&frozen))?;

    let mut unknown: BTreeSet<String> = BTreeSet::new();
    for command in &status.commands {
        let Some(resolved) = command.frozen.as_ref().and_then(Command::resolve) else { continue };
        for &group in resolved.groups() {
            let objects = inputs.objects(resolved.object_kind(group));
            for target in targets(command, resolved, group) {
                let Some(label) = objects
                    .get(&target.name)
                    .and_then(|object| object.labels.get(keys::LABEL_WINDOW))
                else {
                    continue;
                };
                let label = label.trim();
                if !frozen.named.contains_key(label) {
                    unknown.insert(format!(
                        "{} {} ({label:?})",
                        resolved.object_kind(group),
                        target.name
                    ));
                    continue;
                }
                let members = frozen.members.entry(label.to_owned()).or_default();
                let names = match group {
                    Group::Controllers => &mut members.controllers,
                    Group::Workers => &mut members.workers,
                };
                if let Err(at) = names.binary_search(&target.name) {
                    names.insert(at, target.name.clone());
                }
            }
        }
    }
    status.windows = Some(frozen);
    let warnings = (!unknown.is_empty())
        .then(|| Effect::Event {
            kind: EventKind::Warning,
            reason: reasons::UNKNOWN_WINDOW,
            note: format!(
                "{} names a window spec.windows does not define; these nodes go inside \
                 spec.window instead: {}",
                keys::LABEL_WINDOW,
                unknown.into_iter().collect::<Vec<_>>().join(", ")
            ),
        })
        .into_iter()
        .collect();
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopilot_api::v1beta2::{TimeRange, WeeklyRange};

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn ranges(pairs: &[(&str, &str)]) -> PlanWindow {
        PlanWindow {
            ranges: pairs
                .iter()
                .map(|(start, end)| TimeRange { start: (*start).into(), end: (*end).into() })
                .collect(),
            ..PlanWindow::default()
        }
    }

    fn weekly(tz: Option<&str>, days: &[&str], start: &str, length: &str) -> PlanWindow {
        PlanWindow {
            time_zone: tz.map(Into::into),
            weekly: vec![WeeklyRange {
                days: days.iter().map(|d| (*d).to_owned()).collect(),
                start_time: start.into(),
                length: length.into(),
            }],
            ..PlanWindow::default()
        }
    }

    #[test]
    fn absolute_ranges_are_open_from_start_until_before_end() {
        let window = Compiled::new(
            &ranges(&[("2026-12-05T10:00:00Z", "2026-12-05T10:00:30Z")]),
            "spec.window",
        )
        .unwrap();
        assert_eq!(
            window.state_at(at("2026-12-05T09:59:59Z")),
            WindowState::Closed { opens_at: Some(at("2026-12-05T10:00:00Z")) }
        );
        assert_eq!(
            window.state_at(at("2026-12-05T10:00:00Z")),
            WindowState::Open { closes_at: at("2026-12-05T10:00:30Z") }
        );
        assert_eq!(
            window.state_at(at("2026-12-05T10:00:30Z")),
            WindowState::Closed { opens_at: None },
            "after its only range a window never opens again"
        );
    }

    #[test]
    fn weekly_ranges_are_read_in_the_window_time_zone() {
        // Saturday 02:00 in Tokyo is Friday 17:00 UTC.
        let tokyo =
            Compiled::new(&weekly(Some("Asia/Tokyo"), &["Saturday"], "02:00", "1h"), "w").unwrap();
        assert!(tokyo.state_at(at("2026-12-04T17:30:00Z")).is_open());
        assert!(!tokyo.state_at(at("2026-12-05T02:30:00Z")).is_open());
        let utc = Compiled::new(&weekly(None, &["Saturday"], "02:00", "1h"), "w").unwrap();
        assert!(!utc.state_at(at("2026-12-04T17:30:00Z")).is_open());
        assert!(utc.state_at(at("2026-12-05T02:30:00Z")).is_open());
        // Europe/Berlin in summer is UTC+2: 02:00 local is 00:00 UTC.
        let berlin =
            Compiled::new(&weekly(Some("Europe/Berlin"), &[], "02:00", "30m"), "w").unwrap();
        assert_eq!(
            berlin.state_at(at("2026-07-01T00:10:00Z")),
            WindowState::Open { closes_at: at("2026-07-01T00:30:00Z") }
        );
        assert_eq!(
            berlin.state_at(at("2026-07-01T00:40:00Z")),
            WindowState::Closed { opens_at: Some(at("2026-07-02T00:00:00Z")) }
        );
    }

    #[test]
    fn the_earliest_opening_and_the_latest_closing_count() {
        let mut window = ranges(&[
            ("2026-12-05T10:00:00Z", "2026-12-05T11:00:00Z"),
            ("2026-12-05T10:30:00Z", "2026-12-05T12:00:00Z"),
            ("2026-12-05T09:00:00Z", "2026-12-05T09:10:00Z"),
        ]);
        window.weekly = weekly(None, &["Saturday"], "08:00", "10m").weekly;
        let window = Compiled::new(&window, "w").unwrap();
        assert_eq!(
            window.state_at(at("2026-12-05T10:45:00Z")),
            WindowState::Open { closes_at: at("2026-12-05T12:00:00Z") }
        );
        assert_eq!(
            window.state_at(at("2026-12-05T07:00:00Z")),
            WindowState::Closed { opens_at: Some(at("2026-12-05T08:00:00Z")) }
        );
        assert_eq!(
            window.state_at(at("2026-12-05T08:30:00Z")),
            WindowState::Closed { opens_at: Some(at("2026-12-05T09:00:00Z")) }
        );
    }

    #[test]
    fn bad_windows_are_refused_naming_the_field() {
        let refused = |window: &PlanWindow| Compiled::new(window, "spec.window").unwrap_err();
        assert_eq!(
            refused(&PlanWindow::default()),
            "spec.window: neither weekly nor ranges is set; the window would never open"
        );
        assert!(
            refused(&weekly(Some("Mars/Olympus"), &[], "02:00", "1h"))
                .starts_with("spec.window.timeZone: unknown time zone \"Mars/Olympus\""),
        );
        assert_eq!(
            refused(&weekly(None, &["Caturday"], "02:00", "1h")),
            "spec.window.weekly[0].days: unknown weekday \"Caturday\" (expected Monday, \
             Tuesday, ... Sunday)"
        );
        assert!(
            refused(&weekly(None, &[], "25:00", "1h"))
                .starts_with("spec.window.weekly[0].startTime")
        );
        assert!(
            refused(&weekly(None, &[], "02:00", "0s")).starts_with("spec.window.weekly[0].length")
        );
        assert!(refused(&ranges(&[("2026-12-05T10:00:00", "2026-12-05T11:00:00Z")])).starts_with(
            "spec.window.ranges[0].start: \"2026-12-05T10:00:00\" is not an RFC 3339"
        ),);
        assert_eq!(
            refused(&ranges(&[("2026-12-05T11:00:00Z", "2026-12-05T10:00:00Z")])),
            "spec.window.ranges[0]: end 2026-12-05T10:00:00Z is not after start \
             2026-12-05T11:00:00Z"
        );
        let many = ranges(&vec![("2026-12-05T10:00:00Z", "2026-12-05T11:00:00Z"); MAX_RANGES + 1]);
        assert_eq!(refused(&many), "spec.window: 33 ranges, more than the 32 allowed");
    }
}
