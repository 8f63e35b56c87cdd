//! The deprecated `cron` strategy's schedule (REF §11.7), read as k0s reads it.
//!
//! k0s parses `upgradeStrategy.cron` with robfig/cron **v1**, whose fields are
//! `sec min hour dom month [dow]`: the **seconds field comes first** and the day-of-week is
//! optional. So `0 30 * * * *` is "every hour at :30:00", and a five-field expression is
//! `sec min hour dom month`, not the usual crontab `min hour dom month dow`
//! (`0 0 * * *` is hourly, not daily). We keep that meaning so an UpdateConfig written for
//! k0s behaves the same here. Descriptors are accepted too: `@yearly` (`@annually`),
//! `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly` and `@every <duration>`
//! (`@every 1h30m`, at least one second). The default is `@hourly`.
//!
//! Unlike k0s, which silently never runs an invalid expression, [`Schedule::parse`] returns
//! an error that says what is wrong. Times are evaluated in the zone the caller passes; the
//! controller passes its local zone, as k0s does.

use std::fmt;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use thiserror::Error;

/// The schedule used when `upgradeStrategy.cron` is absent or empty (k0s' default).
pub const DEFAULT_SCHEDULE: &str = "@hourly";

/// Why a cron expression cannot be used.
#[derive(Debug, Error)]
pub enum Error {
    /// The expression is not a valid `sec min hour dom month [dow]` expression or descriptor.
    #[error(
        "cron expression {expr:?} is invalid (expected `sec min hour dom month [dow]` or a descriptor such as @hourly): {reason}"
    )]
    Invalid {
        /// The expression as written.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `@every` has a duration that does not parse or is below one second.
    #[error("cron expression {expr:?} is invalid: {reason}")]
    BadEvery {
        /// The expression as written.
        expr: String,
        /// What is wrong with the duration.
        reason: String,
    },
    /// No future time matches the expression (for example the 30th of February).
    #[error("cron expression {expr:?} never fires after {after}")]
    NeverFires {
        /// The expression as written.
        expr: String,
        /// The instant searched from.
        after: Timestamp,
    },
}

/// `Result` with this module's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A parsed cron schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The expression as written (for messages).
    expr: String,
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    /// A calendar expression with a seconds field.
    Calendar(Box<Cron>),
    /// `@every <duration>`: whole seconds, at least one.
    Every(SignedDuration),
}

impl Schedule {
    /// Parse `upgradeStrategy.cron`; `None` or blank means [`DEFAULT_SCHEDULE`].
    pub fn parse_or_default(expr: Option<&str>) -> Result<Self> {
        match expr.map(str::trim) {
            Some(expr) if !expr.is_empty() => Self::parse(expr),
            Some(_) | None => Self::parse(DEFAULT_SCHEDULE),
        }
    }

    /// Parse a robfig/cron v1 expression (see the module docs).
    pub fn parse(expr: &str) -> Result<Self> {
        let trimmed = expr.trim();
        let invalid = |reason: String| Error::Invalid { expr: expr.to_owned(), reason };

        if let Some(rest) = strip_prefix_ignore_case(trimmed, "@every") {
            let every = parse_every(rest)
                .map_err(|reason| Error::BadEvery { expr: expr.to_owned(), reason })?;
            return Ok(Self { expr: expr.to_owned(), kind: Kind::Every(every) });
        }

        let normalised = if trimmed.starts_with('@') {
            // robfig's `@midnight` is croner's `@daily`; croner knows the others.
            if trimmed.eq_ignore_ascii_case("@midnight") {
                "@daily".to_owned()
            } else {
                trimmed.to_owned()
            }
        } else {
            let fields: Vec<&str> = trimmed.split_whitespace().collect();
            match fields.len() {
                6 => fields.join(" "),
                // robfig v1: a missing sixth field (day of week) means `*`.
                5 => format!("{} *", fields.join(" ")),
                n => {
                    return Err(invalid(format!(
                        "it has {n} fields; k0s expects 6 (sec min hour dom month dow) or 5 (without dow)"
                    )));
                }
            }
        };

        let parser =
            CronParser::builder().seconds(Seconds::Required).year(Year::Disallowed).build();
        let cron =
            parser.parse(&normalised).map_err(|e| invalid(lowercase_first(&e.to_string())))?;
        Ok(Self { expr: expr.to_owned(), kind: Kind::Calendar(Box::new(cron)) })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.expr
    }

    /// The first time strictly after `now` at which the schedule fires, evaluated in `tz`.
    ///
    /// For `@every d` that is `now` (whole seconds) plus `d`, as robfig's constant-delay
    /// schedule computes it from the previous run.
    pub fn next_after(&self, now: Timestamp, tz: &TimeZone) -> Result<Timestamp> {
        let never = || Error::NeverFires { expr: self.expr.clone(), after: now };
        match &self.kind {
            Kind::Every(every) => {
                let whole = Timestamp::from_second(now.as_second()).map_err(|_| never())?;
                whole.checked_add(*every).map_err(|_| never())
            }
            Kind::Calendar(cron) => cron
                .find_next_occurrence(&now.to_zoned(tz.clone()), false)
                .map(|next| next.timestamp())
                .map_err(|_| never()),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expr)
    }
}

fn parse_every(rest: &str) -> Result<SignedDuration, String> {
    let text = rest.trim();
    let duration = autopilot_api::duration::parse(text).map_err(|e| format!("@every {e}"))?;
    let seconds =
        i64::try_from(duration.as_secs()).map_err(|_| format!("@every {text:?} is too long"))?;
    if seconds < 1 {
        return Err(format!("@every {text:?} is shorter than one second"));
    }
    // robfig rounds the delay down to whole seconds.
    Ok(SignedDuration::from_secs(seconds))
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    if !head.eq_ignore_ascii_case(prefix) {
        return None;
    }
    let rest = &text[prefix.len()..];
    // `@everyday` is not `@every day`.
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then_some(rest)
}

/// croner's messages start with a capital and end with a period; ours do neither.
fn lowercase_first(message: &str) -> String {
    let message = message.trim_end_matches('.');
    let mut chars = message.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    fn utc(y: i16, mo: i8, d: i8, h: i8, mi: i8, s: i8) -> Timestamp {
        date(y, mo, d).at(h, mi, s, 0).to_zoned(TimeZone::UTC).unwrap().timestamp()
    }

    fn next(expr: &str, now: Timestamp) -> Timestamp {
        Schedule::parse(expr).unwrap().next_after(now, &TimeZone::UTC).unwrap()
    }

    #[test]
    fn six_fields_start_with_seconds() {
        let now = utc(2026, 11, 23, 10, 15, 0);
        assert_eq!(next("0 30 * * * *", now), utc(2026, 11, 23, 10, 30, 0));
        assert_eq!(next("30 * * * * *", now), utc(2026, 11, 23, 10, 15, 30));
    }

    #[test]
    fn every_second_expression_of_the_k0s_integration_test_fires_next_second() {
        let now = utc(2026, 11, 23, 10, 15, 0);
        assert_eq!(next("* * * * * *", now), utc(2026, 11, 23, 10, 15, 1));
    }

    #[test]
    fn five_fields_are_seconds_to_month_as_in_robfig_v1() {
        // sec=0 min=0 hour=* dom=* month=*: hourly, not daily.
        let now = utc(2026, 11, 23, 10, 15, 0);
        assert_eq!(next("0 0 * * *", now), utc(2026, 11, 23, 11, 0, 0));
    }

    #[test]
    fn day_of_week_counts_sunday_as_zero() {
        // 2026-11-23 is a Monday; the next Sunday is the 29th.
        let now = utc(2026, 11, 23, 10, 15, 0);
        assert_eq!(next("0 0 3 * * 0", now), utc(2026, 11, 29, 3, 0, 0));
        assert_eq!(next("0 0 3 * * SUN", now), utc(2026, 11, 29, 3, 0, 0));
    }

    #[test]
    fn descriptors_are_accepted() {
        let now = utc(2026, 11, 23, 10, 15, 0);
        assert_eq!(next("@hourly", now), utc(2026, 11, 23, 11, 0, 0));
        assert_eq!(next("@daily", now), utc(2026, 11, 24, 0, 0, 0));
        assert_eq!(next("@midnight", now), utc(2026, 11, 24, 0, 0, 0));
        assert_eq!(next("@weekly", now), utc(2026, 11, 29, 0, 0, 0));
        assert_eq!(next("@monthly", now), utc(2026, 12, 1, 0, 0, 0));
        assert_eq!(next("@yearly", now), utc(2027, 1, 1, 0, 0, 0));
    }

    #[test]
    fn every_descriptor_adds_whole_seconds_to_now() {
        let now =
            utc(2026, 11, 23, 10, 15, 0).checked_add(SignedDuration::from_millis(400)).unwrap();
        assert_eq!(next("@every 1h30m", now), utc(2026, 11, 23, 11, 45, 0));
        assert_eq!(next("@every 1.5s", now), utc(2026, 11, 23, 10, 15, 1));
    }

    #[test]
    fn every_descriptor_rejects_bad_and_tiny_durations() {
        assert!(matches!(Schedule::parse("@every soon"), Err(Error::BadEvery { .. })));
        assert!(matches!(Schedule::parse("@every 500ms"), Err(Error::BadEvery { .. })));
        assert!(matches!(Schedule::parse("@every"), Err(Error::BadEvery { .. })));
    }

    #[test]
    fn missing_expression_defaults_to_hourly() {
        assert_eq!(Schedule::parse_or_default(None).unwrap().as_str(), DEFAULT_SCHEDULE);
        assert_eq!(Schedule::parse_or_default(Some("  ")).unwrap().as_str(), DEFAULT_SCHEDULE);
        assert_eq!(Schedule::parse_or_default(Some("@daily")).unwrap().as_str(), "@daily");
    }

    #[test]
    fn invalid_expressions_are_clear_errors() {
        for bad in [
            "",
            "* * *",
            "* * * * * * *",
            "61 * * * * *",
            "0 0 25 * * *",
            "x * * * * *",
            "@reboot",
            "@everyday",
        ] {
            let err = Schedule::parse(bad).unwrap_err();
            assert!(matches!(err, Error::Invalid { .. }), "{bad:?}: {err:?}");
            let message = err.to_string();
            assert!(message.starts_with("cron expression"), "{message}");
            assert!(message.contains(&format!("{bad:?}")), "{message}");
        }
    }

    #[test]
    fn schedule_is_evaluated_in_the_given_time_zone() {
        let tz = TimeZone::fixed(jiff::tz::offset(2));
        let schedule = Schedule::parse("@daily").unwrap();
        // Midnight at +02:00 is 22:00 UTC the day before.
        assert_eq!(
            schedule.next_after(utc(2026, 11, 23, 10, 0, 0), &tz).unwrap(),
            utc(2026, 11, 23, 22, 0, 0)
        );
    }
}
