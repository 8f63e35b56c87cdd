//! The node agent's download decisions: whether what a partial download kept can be
//! continued (`Range` + `If-Range`) or must start again from zero, how to read the answer,
//! whether a failed attempt is tried again, and how long to pause to stay under a rate
//! limit. The shell (`autopilot-signal`'s `download`) does the I/O.

use std::time::Duration;

/// What identifies one version of a payload on its server: a strong `ETag`, else the
/// `Last-Modified` date. Sent back as `If-Range`: a server whose payload changed answers
/// `200` with the whole new payload instead of the rest of the old one.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Validator {
    /// A strong entity tag, quotes included (`"abc"`).
    ETag(String),
    /// An HTTP date.
    LastModified(String),
}

impl Validator {
    /// The validator a response's headers give, if one usable in `If-Range`: a strong
    /// `ETag` (a weak one, `W/"…"`, may not be used there, RFC 9110 §13.1.5), else
    /// `Last-Modified`.
    pub fn of(etag: Option<&str>, last_modified: Option<&str>) -> Option<Self> {
        let etag = etag.map(str::trim).filter(|e| e.starts_with('"') && e.ends_with('"'));
        match (etag, last_modified.map(str::trim).filter(|d| !d.is_empty())) {
            (Some(etag), _) if etag.len() >= 2 => Some(Self::ETag(etag.to_owned())),
            (Some(_) | None, Some(date)) => Some(Self::LastModified(date.to_owned())),
            (Some(_) | None, None) => None,
        }
    }

    /// The `If-Range` header value.
    pub fn if_range(&self) -> &str {
        match self {
            Self::ETag(value) | Self::LastModified(value) => value,
        }
    }
}

/// What is on disk of an earlier attempt, as recorded next to it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartialRecord {
    /// The URL asked for (before redirects): a partial of another URL is never continued.
    pub url: String,
    /// The digest the payload must have, if the request gave one: a partial kept for
    /// another digest is never continued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The version of the payload the kept bytes are from.
    pub validator: Validator,
}

/// How the next request starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// A plain GET; whatever was kept is discarded first.
    FromZero,
    /// `Range: bytes=<from>-` with `If-Range: <validator>`: the kept bytes are `from` long.
    Continue {
        /// The length of the kept prefix (the first byte asked for).
        from: u64,
        /// The `If-Range` value.
        validator: Validator,
    },
}

/// How a download starts, given the record of a kept partial file (`None`: none or
/// unreadable), the length of that file (`None`: absent) and the request (`url`, `sha256`).
pub fn start(
    record: Option<&PartialRecord>,
    kept: Option<u64>,
    url: &str,
    sha256: Option<&str>,
) -> Start {
    match (record, kept) {
        // Check 1: the bytes on disk belong to this request (same URL, same digest).
        (Some(record), Some(len))
            if len > 0 && record.url == url && record.sha256.as_deref() == sha256 =>
        {
            Start::Continue { from: len, validator: record.validator.clone() }
        }
        // Nothing kept, nothing usable, or kept for another payload.
        (Some(_) | None, Some(_) | None) => Start::FromZero,
    }
}

/// What to do with a final (non-redirect) answer to a request that started as `asked`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `200 OK`: the whole payload follows; write it from byte 0 (the kept bytes, if any,
    /// are dropped: the server ignored `Range`, or the payload changed under `If-Range`).
    Whole,
    /// `206 Partial Content` from exactly the kept length: append.
    Rest {
        /// The first byte of the body (the kept length).
        from: u64,
        /// The payload's full length, if the server says (`Content-Range: …/<total>`).
        total: Option<u64>,
    },
    /// A ranged answer this download cannot use (`416`, or a `206` starting elsewhere):
    /// drop the kept bytes and ask again from zero, without `Range`.
    AskAgainFromZero {
        /// Why, for the log.
        why: String,
    },
    /// Any other status: the download fails with it.
    Refused,
}

/// Reads the answer `status` (with its `Content-Range`) to a request that started `asked`.
pub fn answer(asked: &Start, status: u16, content_range: Option<&str>) -> Answer {
    match (status, asked) {
        (200, _) => Answer::Whole,
        (206, Start::Continue { from, .. }) => match content_range.and_then(parse_content_range) {
            Some(range) if range.first == *from => Answer::Rest { from: *from, total: range.total },
            Some(range) => Answer::AskAgainFromZero {
                why: format!("asked for bytes from {from}, got a range from {}", range.first),
            },
            None => Answer::AskAgainFromZero {
                why: format!("206 without a usable Content-Range ({content_range:?})"),
            },
        },
        (206, Start::FromZero) => {
            Answer::AskAgainFromZero { why: "206 to a request without Range".to_owned() }
        }
        (416, Start::Continue { from, .. }) => Answer::AskAgainFromZero {
            why: format!("the server has no bytes from {from} on (416)"),
        },
        (_, Start::FromZero | Start::Continue { .. }) => Answer::Refused,
    }
}

/// A `Content-Range: bytes <first>-<last>/<total|*>` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentRange {
    /// The first byte in the body.
    pub first: u64,
    /// The last byte in the body (inclusive).
    pub last: u64,
    /// The full length, if known.
    pub total: Option<u64>,
}

/// Parses a `Content-Range` of a `206` answer; `None` for anything else (other units,
/// `*/<len>`, last before first, total not after last).
pub fn parse_content_range(value: &str) -> Option<ContentRange> {
    let rest = value.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (first, last) = range.trim().split_once('-')?;
    let first: u64 = first.trim().parse().ok()?;
    let last: u64 = last.trim().parse().ok()?;
    let total = match total.trim() {
        "*" => None,
        n => Some(n.parse::<u64>().ok()?),
    };
    if last < first || total.is_some_and(|t| t <= last) {
        return None;
    }
    Some(ContentRange { first, last, total })
}

/// Most attempts one download makes in a row without receiving a byte, before it fails
/// with the last error: a server that is down stays down for longer than the few seconds
/// these take, and the agent reports it rather than hiding it behind retries.
pub const ATTEMPTS_WITHOUT_PROGRESS: u32 = 3;

/// Most attempts of one download in all: a server that cuts every answer after a few bytes
/// fails the download instead of trickling it in for hours.
pub const MAX_ATTEMPTS: u32 = 20;

/// After a failed attempt (`attempts` made so far, `without_progress` of them in a row
/// received nothing), whether to try again, and after how long (`None`: fail now). An
/// attempt that made progress is followed at once: what was received is kept and the next
/// attempt continues from it.
pub fn retry_after(attempts: u32, without_progress: u32, transient: bool) -> Option<Duration> {
    // Check 1: only a transport failure is worth another attempt (a wrong digest, a 404, a
    // full disk would fail the same way again).
    if !transient || attempts >= MAX_ATTEMPTS || without_progress >= ATTEMPTS_WITHOUT_PROGRESS {
        return None;
    }
    // Check 2: the last attempt received bytes: continue from them at once.
    if without_progress == 0 {
        return Some(Duration::ZERO);
    }
    // Otherwise back off: 1 s, 2 s, ...
    Some(Duration::from_secs(1 << (without_progress - 1).min(4)))
}

/// A byte-rate limit over time (generic cell rate: each byte costs `1/rate` s of a
/// virtual clock that may run at most `burst` ahead of real time). Time is an input
/// (`now`, any monotonic origin); what comes out is how long to pause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Throttle {
    /// Bytes per second.
    rate: u64,
    /// How far the virtual clock may run ahead before bytes must wait.
    burst: Duration,
    /// The virtual clock: when the bytes taken so far are paid for.
    paid_until: Duration,
}

/// How far ahead of the rate a download may get before it pauses: small enough that a
/// second of traffic stays within the limit (plus this much), large enough that pauses are
/// few and long (not one per network frame).
pub const THROTTLE_BURST: Duration = Duration::from_millis(100);

impl Throttle {
    /// A limit of `rate` bytes per second (at least 1).
    pub fn new(rate: u64) -> Self {
        Self { rate: rate.max(1), burst: THROTTLE_BURST, paid_until: Duration::ZERO }
    }

    /// The limit, in bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Takes `bytes` at `now`: how long to pause before going on.
    pub fn take(&mut self, now: Duration, bytes: u64) -> Duration {
        let cost_nanos = u128::from(bytes) * 1_000_000_000 / u128::from(self.rate);
        let cost = Duration::from_nanos(u64::try_from(cost_nanos).unwrap_or(u64::MAX));
        self.paid_until = self.paid_until.max(now) + cost;
        self.paid_until.saturating_sub(now + self.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(url: &str, sha: Option<&str>) -> PartialRecord {
        PartialRecord {
            url: url.to_owned(),
            sha256: sha.map(str::to_owned),
            validator: Validator::ETag("\"v1\"".to_owned()),
        }
    }

    #[test]
    fn a_kept_prefix_of_the_same_request_is_continued() {
        let r = record("http://h/k0s", Some("ab"));
        assert_eq!(
            start(Some(&r), Some(10), "http://h/k0s", Some("ab")),
            Start::Continue { from: 10, validator: Validator::ETag("\"v1\"".to_owned()) }
        );
    }

    #[test]
    fn a_prefix_of_another_url_or_digest_or_nothing_kept_starts_from_zero() {
        let r = record("http://h/k0s", Some("ab"));
        assert_eq!(start(Some(&r), Some(10), "http://h/other", Some("ab")), Start::FromZero);
        assert_eq!(start(Some(&r), Some(10), "http://h/k0s", Some("cd")), Start::FromZero);
        assert_eq!(start(Some(&r), Some(10), "http://h/k0s", None), Start::FromZero);
        assert_eq!(start(Some(&r), Some(0), "http://h/k0s", Some("ab")), Start::FromZero);
        assert_eq!(start(Some(&r), None, "http://h/k0s", Some("ab")), Start::FromZero);
        assert_eq!(start(None, Some(10), "http://h/k0s", Some("ab")), Start::FromZero);
    }

    #[test]
    fn only_strong_etags_or_dates_validate() {
        assert_eq!(Validator::of(Some("\"x\""), None), Some(Validator::ETag("\"x\"".into())));
        assert_eq!(
            Validator::of(Some("W/\"x\""), Some("Tue, 01 Jul 2025 10:00:00 GMT")),
            Some(Validator::LastModified("Tue, 01 Jul 2025 10:00:00 GMT".into()))
        );
        assert_eq!(Validator::of(Some("W/\"x\""), None), None);
        assert_eq!(Validator::of(Some("unquoted"), None), None);
        assert_eq!(Validator::of(None, Some("  ")), None);
        assert_eq!(Validator::ETag("\"x\"".into()).if_range(), "\"x\"");
    }

    #[test]
    fn a_206_from_the_kept_length_is_appended() {
        let asked = Start::Continue { from: 100, validator: Validator::ETag("\"v\"".into()) };
        assert_eq!(
            answer(&asked, 206, Some("bytes 100-199/200")),
            Answer::Rest { from: 100, total: Some(200) }
        );
        assert_eq!(
            answer(&asked, 206, Some("bytes 100-199/*")),
            Answer::Rest { from: 100, total: None }
        );
    }

    #[test]
    fn a_server_that_ignores_range_or_changed_the_payload_restarts_from_zero() {
        let asked = Start::Continue { from: 100, validator: Validator::ETag("\"v\"".into()) };
        assert_eq!(answer(&asked, 200, None), Answer::Whole);
        assert_eq!(answer(&Start::FromZero, 200, None), Answer::Whole);
    }

    #[test]
    fn unusable_ranges_ask_again_from_zero() {
        let asked = Start::Continue { from: 100, validator: Validator::ETag("\"v\"".into()) };
        for (status, range) in [
            (206, Some("bytes 0-199/200")),
            (206, Some("bytes 100-99/200")),
            (206, None),
            (206, Some("items 100-199/200")),
            (416, Some("bytes */50")),
        ] {
            assert!(
                matches!(answer(&asked, status, range), Answer::AskAgainFromZero { .. }),
                "{status} {range:?}"
            );
        }
        assert!(matches!(
            answer(&Start::FromZero, 206, Some("bytes 0-9/10")),
            Answer::AskAgainFromZero { .. }
        ));
    }

    #[test]
    fn other_statuses_are_refused() {
        let asked = Start::Continue { from: 100, validator: Validator::ETag("\"v\"".into()) };
        assert_eq!(answer(&asked, 404, None), Answer::Refused);
        assert_eq!(answer(&Start::FromZero, 416, None), Answer::Refused);
        assert_eq!(answer(&Start::FromZero, 500, None), Answer::Refused);
    }

    #[test]
    fn content_ranges_parse_strictly() {
        assert_eq!(
            parse_content_range("bytes 5-9/10"),
            Some(ContentRange { first: 5, last: 9, total: Some(10) })
        );
        assert_eq!(parse_content_range("bytes 5-9/9"), None);
        assert_eq!(parse_content_range("bytes */10"), None);
        assert_eq!(parse_content_range("bytes 5-x/10"), None);
    }

    #[test]
    fn progress_is_followed_at_once_and_silence_backs_off_then_fails() {
        assert_eq!(retry_after(1, 0, true), Some(Duration::ZERO));
        assert_eq!(retry_after(2, 1, true), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(3, 2, true), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(4, ATTEMPTS_WITHOUT_PROGRESS, true), None);
        assert_eq!(retry_after(MAX_ATTEMPTS, 0, true), None);
        assert_eq!(retry_after(1, 0, false), None, "a wrong digest is not tried again");
    }

    #[test]
    fn the_throttle_holds_the_rate_after_a_burst() {
        let mut t = Throttle::new(1000);
        // 100 bytes fit in the burst (100 ms at 1000 B/s).
        assert_eq!(t.take(Duration::ZERO, 100), Duration::ZERO);
        // 1000 more bytes at once: paid until 1.1 s, may run 100 ms ahead: pause 1 s.
        assert_eq!(t.take(Duration::ZERO, 1000), Duration::from_secs(1));
        // After the pause, the next 100 bytes cost 100 ms more.
        assert_eq!(t.take(Duration::from_secs(1), 100), Duration::from_millis(100));
        // Idle time is not saved up beyond the burst.
        assert_eq!(t.take(Duration::from_secs(60), 100), Duration::ZERO);
        assert_eq!(t.take(Duration::from_secs(60), 100), Duration::from_millis(100));
    }

    #[test]
    fn a_long_run_through_the_throttle_takes_bytes_over_rate() {
        let mut t = Throttle::new(2 << 20);
        let mut now = Duration::ZERO;
        for _ in 0..100 {
            now += t.take(now, 64 * 1024);
        }
        // 6.25 MiB at 2 MiB/s: 3.125 s, less the burst the first bytes ran ahead.
        let expected = Duration::from_millis(3125) - THROTTLE_BURST;
        assert!(now.abs_diff(expected) < Duration::from_millis(1), "{now:?}");
    }
}
