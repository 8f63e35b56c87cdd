//! Durations as operators write them in k0s: Go-style `30s`, `5m`, `1h30m`, `1.5h`.
//!
//! Used by command-line flags and by fields such as an UpdateConfig window's `length`.

use std::time::Duration;

/// Parse a non-negative duration such as `60s`, `1m30s`, `2h` or `1.5h`.
///
/// The error is a lowercase message suitable for a flag or field error.
pub fn parse(value: &str) -> Result<Duration, String> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err("empty duration (e.g. 30s, 5m, 1h30m)".to_string());
    }
    let parsed: jiff::SignedDuration = trimmed
        .parse()
        .map_err(|_| format!("{value:?} is not a duration (e.g. 30s, 5m, 1h30m)"))?;
    Duration::try_from(parsed).map_err(|_| format!("{value:?} is negative"))
}

/// Formats a duration the way [`parse`] reads it, in whole seconds: `2m`, `90s` → `1m30s`,
/// `1h`, `0s`.
pub fn format(duration: Duration) -> String {
    let secs = duration.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_whole_seconds_as_parse_reads_them() {
        for (secs, text) in [(0, "0s"), (90, "1m30s"), (120, "2m"), (3600, "1h"), (3661, "1h1m1s")]
        {
            assert_eq!(format(Duration::from_secs(secs)), text);
            assert_eq!(parse(text), Ok(Duration::from_secs(secs)));
        }
    }

    #[test]
    fn parses_go_style_durations() {
        assert_eq!(parse("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
    }

    #[test]
    fn rejects_garbage_and_negative_durations() {
        assert!(parse("soon").unwrap_err().contains("not a duration"));
        assert!(parse("").unwrap_err().contains("empty"));
        assert!(parse("-5s").unwrap_err().contains("negative"));
    }
}
