//! Weekly maintenance windows of the `periodic` strategy: `days`, `startTime`, `length`.
//!
//! A window opens on each listed day at `startTime` and stays open for `length`. The bounds
//! are **inclusive start, exclusive end**: open at exactly `startTime`, closed at exactly
//! `startTime + length` (k0s makes both bounds exclusive, REF §11.5).
//!
//! The day that counts is the day the window **starts**: `Monday 23:00` for `2h` is open on
//! Tuesday at 00:30, and a window that only lists Tuesday is not open at 00:30 on Tuesday
//! because of Monday's start (k0s never looks back to the previous day).
//!
//! Windows are evaluated in a [`TimeZone`] the caller passes. The controller passes its own
//! local zone (`TimeZone::system()`), as k0s does; tests pass a fixed zone. `startTime` is a
//! wall-clock time in that zone. On a day where it does not exist (a DST gap) the window
//! starts at the equivalent later instant; on a day where it happens twice it starts at the
//! first one. `length` is elapsed time, so a window across a DST change is still `length`
//! long.

use std::fmt;

use autopilot_api::v1beta2::PeriodicUpgradeStrategy;
use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Span, Timestamp};
use thiserror::Error;

/// The longest window we accept: with every day listed, a window this long is always open.
const MAX_LENGTH: SignedDuration = SignedDuration::from_hours(7 * 24);

/// Why a `periodic` window cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// `upgradeStrategy.periodic` is absent although the strategy is `periodic`.
    #[error("the periodic strategy needs a window (periodic.startTime and periodic.length)")]
    Missing,
    /// `startTime` is absent.
    #[error("periodic.startTime is required (HH:MM, 24-hour)")]
    MissingStartTime,
    /// `length` is absent.
    #[error("periodic.length is required (a duration such as 2h or 90m)")]
    MissingLength,
    /// A `days` entry is not an English weekday name.
    #[error("periodic.days: unknown weekday {name:?} (expected Monday, Tuesday, ... Sunday)")]
    UnknownDay {
        /// The entry as written.
        name: String,
    },
    /// `startTime` is not `HH:MM`.
    #[error("periodic.startTime {value:?} is not a time of day (expected HH:MM, 24-hour)")]
    BadStartTime {
        /// The value as written.
        value: String,
    },
    /// `length` is not a duration.
    #[error("periodic.length: {reason}")]
    BadLength {
        /// What the duration parser said (it names the value).
        reason: String,
    },
    /// `length` is zero, so the window would never be open.
    #[error("periodic.length {value:?} is zero; the window would never open")]
    ZeroLength {
        /// The value as written.
        value: String,
    },
    /// `length` is longer than a week.
    #[error("periodic.length {value:?} is longer than a week")]
    TooLong {
        /// The value as written.
        value: String,
    },
}

/// `Result` with this module's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A validated weekly window. Build it with [`Window::parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start days, indexed Monday = 0 ... Sunday = 6.
    days: [bool; 7],
    /// Wall-clock start time.
    start: Time,
    /// How long the window stays open (positive, at most [`MAX_LENGTH`]).
    length: SignedDuration,
}

/// Whether a window is open at a given instant, and when that changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowState {
    /// Inside a window that closes at `closes_at` (exclusive).
    Open {
        /// The first instant at which the window is closed again.
        closes_at: Timestamp,
    },
    /// Outside every window.
    Closed {
        /// When the next window opens; `None` only at the end of representable time.
        opens_at: Option<Timestamp>,
    },
}

impl WindowState {
    /// Whether updates may be applied now.
    pub fn is_open(&self) -> bool {
        match self {
            Self::Open { .. } => true,
            Self::Closed { .. } => false,
        }
    }
}

impl Window {
    /// Validate `periodic` (absent → [`Error::Missing`]).
    ///
    /// `days` are full English weekday names, compared case-insensitively; an empty list
    /// means every day. `startTime` is `H:MM` or `HH:MM` (24-hour). `length` is a Go duration
    /// (`2h`, `90m`, `1h30m`), more than zero and at most a week.
    pub fn parse(periodic: Option<&PeriodicUpgradeStrategy>) -> Result<Self> {
        let PeriodicUpgradeStrategy { days, start_time, length } =
            periodic.ok_or(Error::Missing)?;

        let mut day_set = [days.is_empty(); 7];
        for name in days {
            let day =
                parse_weekday(name).ok_or_else(|| Error::UnknownDay { name: name.clone() })?;
            day_set[usize::from(day.to_monday_zero_offset().unsigned_abs())] = true;
        }

        let start_time = start_time.as_deref().ok_or(Error::MissingStartTime)?;
        let start = parse_start_time(start_time)
            .ok_or_else(|| Error::BadStartTime { value: start_time.to_owned() })?;

        let length_text = length.as_deref().ok_or(Error::MissingLength)?;
        let length = autopilot_api::duration::parse(length_text)
            .map_err(|reason| Error::BadLength { reason })
            .and_then(|d| {
                SignedDuration::try_from(d)
                    .map_err(|_| Error::TooLong { value: length_text.to_owned() })
            })?;
        if length.is_zero() {
            return Err(Error::ZeroLength { value: length_text.to_owned() });
        }
        if length > MAX_LENGTH {
            return Err(Error::TooLong { value: length_text.to_owned() });
        }

        Ok(Self { days: day_set, start, length })
    }

    /// The wall-clock time the window opens.
    pub fn start_time(&self) -> Time {
        self.start
    }

    /// How long the window stays open.
    pub fn length(&self) -> SignedDuration {
        self.length
    }

    /// Whether the window opens on `day`.
    pub fn opens_on(&self, day: Weekday) -> bool {
        self.days[usize::from(day.to_monday_zero_offset().unsigned_abs())]
    }

    /// Whether the window is open at `now` in `tz`, with when that changes (for requeue).
    ///
    /// Windows that started on earlier days and are still running count (a long window, or
    /// one that crosses midnight). If windows overlap, `closes_at` is the latest end.
    pub fn state_at(&self, now: Timestamp, tz: &TimeZone) -> WindowState {
        let today = now.to_zoned(tz.clone()).date();

        // Check 1: a window that started today or on an earlier day is still open. A window
        // is at most a week long, so eight days back covers every start that can reach now
        // (one more than needed, for DST shifts).
        let mut closes_at: Option<Timestamp> = None;
        for back in 0..=8 {
            let Some((start, end)) = self.bounds_on(add_days(today, -back), tz) else {
                continue;
            };
            if start <= now && now < end {
                closes_at = Some(closes_at.map_or(end, |c| c.max(end)));
            }
        }
        if let Some(closes_at) = closes_at {
            return WindowState::Open { closes_at };
        }

        // Check 2: the next start after now, at most a week ahead (plus one day for DST).
        let opens_at = (0..=8)
            .filter_map(|ahead| self.bounds_on(add_days(today, ahead), tz))
            .map(|(start, _)| start)
            .find(|start| *start > now);
        WindowState::Closed { opens_at }
    }

    /// Start and end of the window that opens on `day`, if it opens that day.
    fn bounds_on(&self, day: Option<Date>, tz: &TimeZone) -> Option<(Timestamp, Timestamp)> {
        let day = day?;
        if !self.opens_on(day.weekday()) {
            return None;
        }
        let start = day.to_datetime(self.start).to_zoned(tz.clone()).ok()?.timestamp();
        let end = start.checked_add(self.length).ok()?;
        Some((start, end))
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days: Vec<&str> =
            WEEKDAYS.iter().filter(|(_, day)| self.opens_on(*day)).map(|(name, _)| *name).collect();
        let days = if days.len() == 7 { "every day".to_owned() } else { days.join(",") };
        write!(f, "{days} at {} for {:#}", self.start.strftime("%H:%M"), self.length)
    }
}

/// English names of the weekdays, Monday first.
const WEEKDAYS: [(&str, Weekday); 7] = [
    ("Monday", Weekday::Monday),
    ("Tuesday", Weekday::Tuesday),
    ("Wednesday", Weekday::Wednesday),
    ("Thursday", Weekday::Thursday),
    ("Friday", Weekday::Friday),
    ("Saturday", Weekday::Saturday),
    ("Sunday", Weekday::Sunday),
];

fn parse_weekday(name: &str) -> Option<Weekday> {
    let name = name.trim();
    WEEKDAYS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, day)| *day)
}

/// `H:MM` or `HH:MM`, 24-hour (Go's `15:04` layout).
fn parse_start_time(value: &str) -> Option<Time> {
    let (hour, minute) = value.trim().split_once(':')?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !(1..=2).contains(&hour.len())
        || minute.len() != 2
        || !all_digits(hour)
        || !all_digits(minute)
    {
        return None;
    }
    let hour: i8 = hour.parse().ok()?;
    let minute: i8 = minute.parse().ok()?;
    Time::new(hour, minute, 0, 0).ok()
}

fn add_days(day: Date, days: i64) -> Option<Date> {
    day.checked_add(Span::new().try_days(days).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    fn periodic(days: &[&str], start: &str, length: &str) -> PeriodicUpgradeStrategy {
        PeriodicUpgradeStrategy {
            days: days.iter().map(|d| (*d).to_owned()).collect(),
            start_time: Some(start.to_owned()),
            length: Some(length.to_owned()),
        }
    }

    fn window(days: &[&str], start: &str, length: &str) -> Window {
        Window::parse(Some(&periodic(days, start, length))).unwrap()
    }

    /// 2026-11-23 is a Monday.
    fn at(day: i8, hour: i8, minute: i8) -> Timestamp {
        date(2026, 11, day).at(hour, minute, 0, 0).to_zoned(TimeZone::UTC).unwrap().timestamp()
    }

    #[test]
    fn window_is_open_at_exactly_its_start() {
        let w = window(&["Monday"], "13:00", "2h");
        assert_eq!(
            w.state_at(at(23, 13, 0), &TimeZone::UTC),
            WindowState::Open { closes_at: at(23, 15, 0) }
        );
    }

    #[test]
    fn window_is_closed_at_exactly_its_end() {
        let w = window(&["Monday"], "13:00", "2h");
        let state = w.state_at(at(23, 15, 0), &TimeZone::UTC);
        assert_eq!(state, WindowState::Closed { opens_at: Some(at(30, 13, 0)) });
        let just_before = at(23, 15, 0).checked_sub(SignedDuration::from_secs(1)).unwrap();
        assert!(w.state_at(just_before, &TimeZone::UTC).is_open());
    }

    #[test]
    fn window_is_closed_just_before_start_and_says_when_it_opens() {
        let w = window(&["Monday"], "13:00", "2h");
        assert_eq!(
            w.state_at(at(23, 12, 59), &TimeZone::UTC),
            WindowState::Closed { opens_at: Some(at(23, 13, 0)) }
        );
    }

    #[test]
    fn window_crossing_midnight_is_open_the_next_morning() {
        let w = window(&["Monday"], "23:00", "2h");
        // Tuesday 00:30 belongs to Monday's window.
        assert_eq!(
            w.state_at(at(24, 0, 30), &TimeZone::UTC),
            WindowState::Open { closes_at: at(24, 1, 0) }
        );
        assert!(!w.state_at(at(24, 1, 0), &TimeZone::UTC).is_open());
    }

    #[test]
    fn only_the_start_day_counts_for_a_window_crossing_midnight() {
        // Listed: Tuesday only. Tuesday 00:30 is inside Monday's 23:00 window, which does not
        // exist because Monday is not listed.
        let w = window(&["Tuesday"], "23:00", "2h");
        assert_eq!(
            w.state_at(at(24, 0, 30), &TimeZone::UTC),
            WindowState::Closed { opens_at: Some(at(24, 23, 0)) }
        );
        // Wednesday 00:30 is inside Tuesday's window.
        assert!(w.state_at(at(25, 0, 30), &TimeZone::UTC).is_open());
    }

    #[test]
    fn empty_days_means_every_day() {
        let w = window(&[], "02:00", "1h");
        for day in 23..=29 {
            assert!(w.state_at(at(day, 2, 30), &TimeZone::UTC).is_open(), "day {day}");
            assert!(!w.state_at(at(day, 3, 30), &TimeZone::UTC).is_open(), "day {day}");
        }
    }

    #[test]
    fn weekday_names_are_case_insensitive() {
        let w = window(&["tuesday", "WEDNESDAY", " Friday "], "13:00", "2h");
        assert!(!w.opens_on(Weekday::Monday));
        assert!(w.opens_on(Weekday::Tuesday));
        assert!(w.opens_on(Weekday::Wednesday));
        assert!(w.opens_on(Weekday::Friday));
        assert!(w.state_at(at(25, 14, 0), &TimeZone::UTC).is_open());
    }

    #[test]
    fn unknown_weekday_is_an_error_naming_it() {
        // The k0s documentation's own example carries this typo.
        let err =
            Window::parse(Some(&periodic(&["Tuesdsay", "Wednesday"], "13:00", "2h"))).unwrap_err();
        assert_eq!(err, Error::UnknownDay { name: "Tuesdsay".to_owned() });
        assert!(err.to_string().contains("\"Tuesdsay\""), "{err}");
        assert!(Window::parse(Some(&periodic(&["Tue"], "13:00", "2h"))).is_err());
    }

    #[test]
    fn bad_start_times_are_errors() {
        for bad in ["25:00", "13:60", "1300", "13:0", "noon", "", "13:00:00", "-1:00"] {
            let err = Window::parse(Some(&periodic(&[], bad, "2h"))).unwrap_err();
            assert_eq!(err, Error::BadStartTime { value: bad.to_owned() }, "{bad:?}");
        }
        assert_eq!(window(&[], "9:05", "1h").start_time(), Time::constant(9, 5, 0, 0));
        assert_eq!(window(&[], "00:00", "1h").start_time(), Time::constant(0, 0, 0, 0));
    }

    #[test]
    fn bad_lengths_are_errors() {
        let parse = |length: &str| Window::parse(Some(&periodic(&[], "13:00", length)));
        assert!(matches!(parse("soon"), Err(Error::BadLength { .. })));
        assert!(matches!(parse("0s"), Err(Error::ZeroLength { .. })));
        assert!(matches!(parse("169h"), Err(Error::TooLong { .. })));
        assert_eq!(parse("1h30m").unwrap().length(), SignedDuration::from_mins(90));
    }

    #[test]
    fn missing_fields_are_errors() {
        assert_eq!(Window::parse(None), Err(Error::Missing));
        let mut p = periodic(&[], "13:00", "2h");
        p.start_time = None;
        assert_eq!(Window::parse(Some(&p)), Err(Error::MissingStartTime));
        let mut p = periodic(&[], "13:00", "2h");
        p.length = None;
        assert_eq!(Window::parse(Some(&p)), Err(Error::MissingLength));
    }

    #[test]
    fn window_is_evaluated_in_the_given_time_zone() {
        let tz = TimeZone::fixed(jiff::tz::offset(2));
        let w = window(&["Monday"], "13:00", "2h");
        // 13:00 at +02:00 is 11:00 UTC.
        assert!(w.state_at(at(23, 11, 0), &tz).is_open());
        assert!(!w.state_at(at(23, 13, 30), &tz).is_open());
    }

    #[test]
    fn long_windows_from_earlier_days_are_still_open() {
        let w = window(&["Monday"], "12:00", "50h");
        assert_eq!(
            w.state_at(at(25, 13, 0), &TimeZone::UTC),
            WindowState::Open { closes_at: at(25, 14, 0) }
        );
    }

    #[test]
    fn start_time_in_a_dst_gap_moves_to_the_later_instant_and_length_is_elapsed_time() {
        // US Eastern: on Sunday 2026-03-08 clocks jump from 02:00 EST to 03:00 EDT, so 02:30
        // does not exist that day; the window starts at 03:30 EDT (07:30 UTC).
        let tz = TimeZone::posix("EST5EDT,M3.2.0,M11.1.0").unwrap();
        let w = window(&["Sunday"], "02:30", "1h");
        let utc = |h: i8, m: i8| {
            date(2026, 3, 8).at(h, m, 0, 0).to_zoned(TimeZone::UTC).unwrap().timestamp()
        };
        assert_eq!(w.state_at(utc(7, 0), &tz), WindowState::Closed { opens_at: Some(utc(7, 30)) });
        assert_eq!(w.state_at(utc(7, 30), &tz), WindowState::Open { closes_at: utc(8, 30) });
    }

    #[test]
    fn display_names_days_time_and_length() {
        assert_eq!(
            window(&["monday", "Friday"], "9:05", "2h").to_string(),
            "Monday,Friday at 09:05 for 2h"
        );
        assert_eq!(window(&[], "23:00", "90m").to_string(), "every day at 23:00 for 1h 30m");
    }
}
