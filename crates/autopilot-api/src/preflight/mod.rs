//! What a node reports for a preflight check: seed 004's status codes and the raw record.
//!
//! The node agent runs a check and writes a [`RawRecord`]: what happened, not what it means.
//! The controller judges the record against the check's `results` (the first matching
//! result decides). Keeping judgement out of the node means a node never needs to
//! understand CEL, and one rule decides for every node.
//!
//! [`request`] parses a check's `command.data` per command id, for both sides.

pub mod request;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::text::truncate;

/// Seed 004's status codes. A command returns 0 when it did what was asked; otherwise one of
/// these (errno-like numbers, so they read the same as the OS errors they come from).
pub mod status_code {
    /// The command did what was asked (the port is free, the dial connected, …).
    pub const SUCCESS: i64 = 0;
    /// Catch-all for general errors: anything not covered by a more specific code.
    pub const GENERAL_ERROR: i64 = 1;
    /// Invalid argument: the command's data is missing a field, has a wrong type, or names
    /// something the command cannot use (errno `EINVAL`).
    pub const INVALID_ARGUMENT: i64 = 22;
    /// Timeout: the command did not finish within its timeout, or the node sent no report by
    /// the command's deadline (errno `ETIME`).
    pub const TIMEOUT: i64 = 62;
    /// Address already in use: a port the check wanted to bind is taken (errno `EADDRINUSE`).
    pub const ADDRESS_IN_USE: i64 = 98;
    /// Connection refused: nothing listens where the check dialled (errno `ECONNREFUSED`).
    pub const CONNECTION_REFUSED: i64 = 111;

    /// Every code seed 004 defines, success first.
    pub const ALL: [i64; 6] =
        [SUCCESS, GENERAL_ERROR, INVALID_ARGUMENT, TIMEOUT, ADDRESS_IN_USE, CONNECTION_REFUSED];
}

/// The `timeout` value that means "no per-check timeout" (seed 004); the node still stops
/// the check at its own maximum ([`MAX_CHECK_DURATION`]).
pub const NO_TIMEOUT: i64 = -1;

/// The longest a check may run on a node, whatever its `timeout` says (also for `-1`, "no
/// timeout"): a check that never ends would hold the plan forever, and an operator who
/// needs longer should run the work outside the plan.
pub const MAX_CHECK_DURATION: Duration = Duration::from_secs(10 * 60);

/// How long a check may run on a node: its `timeout` in seconds, or for `-1` ("no timeout")
/// and anything longer, [`MAX_CHECK_DURATION`]. `Err` for a timeout that is neither -1 nor
/// at least 1 second.
pub fn check_timeout(seconds: i64) -> Result<Duration, String> {
    match seconds {
        NO_TIMEOUT => Ok(MAX_CHECK_DURATION),
        seconds if seconds >= 1 => {
            Ok(Duration::from_secs(seconds.unsigned_abs()).min(MAX_CHECK_DURATION))
        }
        seconds => {
            Err(format!("{seconds} is neither -1 (no timeout) nor a number of seconds from 1"))
        }
    }
}

/// How many messages a record keeps; later ones are dropped (the count is noted).
pub const MAX_MESSAGES: usize = 16;

/// How many bytes of one message a record keeps.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// How many bytes of stdout and of stderr a record keeps. Records travel through the API
/// server, whose objects are limited in size; a check's output is evidence, not payload.
pub const MAX_OUTPUT_BYTES: usize = 4096;

/// What one node observed running one check: seed 004's command outcome ("result
/// messages, a status code and an error") plus the raw output and how long it took.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawRecord {
    /// The command's status code ([`status_code`]); 0 on success.
    pub status_code: i64,

    /// Set when the command itself failed (could not run, timed out, invalid data); the text
    /// says how. Conditions see only whether it is set (`error: true|false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,

    /// The result messages; the first is seed 004's `.Result`, all of them `.Results`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,

    /// Standard output of a Pod or executable (truncated), empty for built-in probes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout: String,

    /// Standard error of a Pod or executable (truncated), empty for built-in probes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,

    /// How long the check ran, in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
}

impl RawRecord {
    /// A successful outcome with these messages.
    pub fn success(messages: Vec<String>) -> Self {
        Self { status_code: status_code::SUCCESS, messages, ..Self::default() }
    }

    /// A failed outcome: `status_code` with `error` as the error text and first message.
    pub fn failure(status_code: i64, error: impl Into<String>) -> Self {
        let error = error.into();
        Self { status_code, messages: vec![error.clone()], error: Some(error), ..Self::default() }
    }

    /// The record the controller uses for a node that sent no report by the deadline:
    /// status code 62 with an error saying so.
    pub fn no_report(deadline: Duration) -> Self {
        Self::failure(
            status_code::TIMEOUT,
            format!("no report within the deadline of {}", crate::duration::format(deadline)),
        )
    }

    /// With `duration` as how long the check ran.
    pub fn with_duration(mut self, duration: Duration) -> Self {
        self.duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Whether the command failed ([`RawRecord::error`] is set).
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// The first message (`.Result`), empty when there is none.
    pub fn result(&self) -> &str {
        self.messages.first().map_or("", String::as_str)
    }

    /// The record cut to the bounds a node may report ([`MAX_MESSAGES`],
    /// [`MAX_MESSAGE_BYTES`], [`MAX_OUTPUT_BYTES`]); cuts are marked with `…`.
    pub fn bounded(self) -> Self {
        let Self { status_code, error, mut messages, stdout, stderr, duration_ms } = self;
        let dropped = messages.len().saturating_sub(MAX_MESSAGES);
        messages.truncate(MAX_MESSAGES);
        let mut messages: Vec<String> =
            messages.iter().map(|message| truncate(message, MAX_MESSAGE_BYTES)).collect();
        if dropped > 0
            && let Some(last) = messages.last_mut()
        {
            *last = format!("{last} (and {dropped} more messages)");
        }
        Self {
            status_code,
            error: error.map(|text| truncate(&text, MAX_MESSAGE_BYTES)),
            messages,
            stdout: truncate(&stdout, MAX_OUTPUT_BYTES),
            stderr: truncate(&stderr, MAX_OUTPUT_BYTES),
            duration_ms,
        }
    }
}

/// A command's output as result messages: its non-empty lines, trailing whitespace removed
/// (an `exec` entry's stdout, a `scheduler` Pod's termination message).
pub fn output_lines(output: &str) -> Vec<String> {
    output.lines().map(str::trim_end).filter(|line| !line.is_empty()).map(str::to_owned).collect()
}

/// The most bytes a node's report (every record of one preflight signal, as JSON) may take.
/// It travels in an annotation beside the signal; the API server limits all of an object's
/// annotations together to 256 KiB.
pub const MAX_REPORT_BYTES: usize = 64 * 1024;

/// How many bytes of stdout and of stderr, and of each message, a record keeps when a report
/// is over [`MAX_REPORT_BYTES`].
const SHRUNK_BYTES: usize = 256;

/// The records of one report, each [`RawRecord::bounded`], and together within
/// [`MAX_REPORT_BYTES`]: a report that is still too big keeps every record's status code,
/// error and first message and cuts its output and other messages; if even that is too big,
/// records keep only their status code and a cut error (the leader judges by them).
pub fn fit_report(
    records: std::collections::BTreeMap<String, RawRecord>,
) -> std::collections::BTreeMap<String, RawRecord> {
    let size = |records: &std::collections::BTreeMap<String, RawRecord>| {
        serde_json::to_string(records).map_or(usize::MAX, |text| text.len())
    };
    let records: std::collections::BTreeMap<String, RawRecord> =
        records.into_iter().map(|(id, record)| (id, record.bounded())).collect();
    if size(&records) <= MAX_REPORT_BYTES {
        return records;
    }
    let shrunk: std::collections::BTreeMap<String, RawRecord> = records
        .iter()
        .map(|(id, record)| {
            let mut record = record.clone();
            record.messages.truncate(1);
            record.messages = record.messages.iter().map(|m| truncate(m, SHRUNK_BYTES)).collect();
            record.stdout = truncate(&record.stdout, SHRUNK_BYTES);
            record.stderr = truncate(&record.stderr, SHRUNK_BYTES);
            record.error = record.error.map(|e| truncate(&e, SHRUNK_BYTES));
            (id.clone(), record)
        })
        .collect();
    if size(&shrunk) <= MAX_REPORT_BYTES {
        return shrunk;
    }
    records
        .into_iter()
        .map(|(id, record)| {
            let error = record.error.map(|e| truncate(&e, 64));
            let short = RawRecord {
                status_code: record.status_code,
                error,
                duration_ms: record.duration_ms,
                ..RawRecord::default()
            };
            (id, short)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_too_big_for_its_annotation_is_cut_keeping_every_status_code() {
        let big = |code| RawRecord {
            status_code: code,
            error: Some("e".repeat(2000)),
            messages: (0..16).map(|i| format!("{i}{}", "m".repeat(1000))).collect(),
            stdout: "o".repeat(10_000),
            stderr: "x".repeat(10_000),
            duration_ms: 3,
        };
        let small: std::collections::BTreeMap<String, RawRecord> =
            [("a".to_owned(), RawRecord::success(vec!["ok".into()]))].into();
        assert_eq!(fit_report(small.clone()), small, "a small report is kept whole");

        let some: std::collections::BTreeMap<String, RawRecord> =
            (0..3).map(|i| (format!("c{i}"), big(i))).collect();
        let fitted = fit_report(some);
        let text = serde_json::to_string(&fitted).expect("serialise");
        assert!(text.len() <= MAX_REPORT_BYTES, "{}", text.len());
        assert_eq!(fitted["c2"].status_code, 2);
        assert_eq!(fitted["c2"].messages.len(), 1);
        assert!(fitted["c2"].messages[0].starts_with("0mmm"));

        let many: std::collections::BTreeMap<String, RawRecord> =
            (0..400).map(|i| (format!("check-{i}"), big(i))).collect();
        let fitted = fit_report(many);
        assert_eq!(fitted.len(), 400, "no record is dropped");
        assert!(fitted.values().all(|r| r.messages.is_empty()));
        assert!(fitted.iter().all(|(id, r)| id.ends_with(&r.status_code.to_string())));
    }

    #[test]
    fn status_codes_are_exactly_seed_004s() {
        assert_eq!(status_code::ALL, [0, 1, 22, 62, 98, 111]);
    }

    #[test]
    fn timeouts_are_seconds_and_minus_one_is_the_node_maximum() {
        assert_eq!(check_timeout(15), Ok(Duration::from_secs(15)));
        assert_eq!(check_timeout(-1), Ok(MAX_CHECK_DURATION));
        assert_eq!(check_timeout(i64::MAX), Ok(MAX_CHECK_DURATION));
        assert!(check_timeout(0).is_err());
        assert!(check_timeout(-5).is_err());
    }

    #[test]
    fn a_failure_is_an_error_whose_text_is_also_the_first_message() {
        let record = RawRecord::failure(status_code::CONNECTION_REFUSED, "connection refused");
        assert!(record.is_error());
        assert_eq!(record.result(), "connection refused");
        assert_eq!(record.status_code, 111);
        assert!(!RawRecord::success(vec!["ok".into()]).is_error());
        assert_eq!(RawRecord::default().result(), "");
    }

    #[test]
    fn a_missing_report_times_out_with_status_code_62() {
        let record = RawRecord::no_report(Duration::from_secs(90));
        assert_eq!(record.status_code, status_code::TIMEOUT);
        assert_eq!(record.error.as_deref(), Some("no report within the deadline of 1m30s"));
    }

    #[test]
    fn bounded_cuts_messages_and_output_and_says_how_many_were_dropped() {
        let record = RawRecord {
            messages: (0..20).map(|i| format!("m{i}")).collect(),
            stdout: "o".repeat(MAX_OUTPUT_BYTES + 10),
            stderr: "short".into(),
            error: Some("e".repeat(MAX_MESSAGE_BYTES * 2)),
            ..RawRecord::default()
        }
        .bounded();
        assert_eq!(record.messages.len(), MAX_MESSAGES);
        assert_eq!(record.messages[MAX_MESSAGES - 1], "m15 (and 4 more messages)");
        assert_eq!(record.stdout.len(), MAX_OUTPUT_BYTES + '…'.len_utf8());
        assert_eq!(record.stderr, "short");
        assert!(record.error.as_deref().is_some_and(|e| e.ends_with('…')));
    }

    #[test]
    fn records_round_trip_camel_case_and_leave_empty_fields_out() {
        let record = RawRecord::success(vec!["v1.33.4+k0s.0".into()])
            .with_duration(Duration::from_millis(12));
        let wire = serde_json::to_value(&record).expect("serialise");
        assert_eq!(
            wire,
            serde_json::json!({"statusCode": 0, "messages": ["v1.33.4+k0s.0"], "durationMs": 12})
        );
        let back: RawRecord = serde_json::from_value(wire).expect("parse");
        assert_eq!(back, record);
    }
}
