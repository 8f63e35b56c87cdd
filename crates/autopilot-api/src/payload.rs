//! What a node can act on: the rules for a command's download URL and version, shared by
//! the node agent (which refuses a signal that breaks them) and the Plan engine (which
//! refuses such a plan at NewPlan, before any node is signalled).
//!
//! One function per field, so the controller never sends a signal that a node will refuse,
//! and the two can never drift apart. The CRD schema refuses the plain cases up front
//! ([`URL_PATTERN`], a non-empty `version`); these functions catch what a pattern cannot.

/// The CRD pattern for a platform entry's `url`: `http://` or `https://`, a non-empty
/// authority, no whitespace. The API server refuses anything else; [`url_problem`] refuses
/// at least as much (it also parses the URL), so a URL the schema lets through is checked
/// again by the engine.
pub const URL_PATTERN: &str = r"^https?://[^\s/?#]+\S*$";

/// The CRD pattern for a command's `version`: a SemVer version with an optional leading
/// `v` and, as build metadata, at most k0s' own `+k0s.N` (`v1.35.1+k0s.0`,
/// `v1.36.0-rc.1+k0s.0`, `1.35.1`).
///
/// A version ends up in URL paths (the update server's file names, a Plan that Renovate or
/// `cargo xtask dist` writes) and in file names on a node, so it must not carry `/`, `..`,
/// `?`, `#` or anything else a path or URL gives a meaning to: every character is an ASCII
/// letter, digit, `.`, `-` or `+`, in SemVer's order. Numbers have no leading zeros (SemVer
/// §2, §9), so a version has one spelling. [`version_problem`] refuses exactly what this
/// refuses (a test holds them together): the API server checks only what is written after
/// the CRD, the engine checks every Plan at NewPlan and a node every signal.
pub const VERSION_PATTERN: &str = concat!(
    r"^v?(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)",
    r"(?:-(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)",
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?",
    r"(?:\+k0s\.(?:0|[1-9][0-9]*))?$",
);

/// Why a node cannot download from `url`, or `None` if it can.
///
/// A node downloads only from `http://` or `https://` (lowercase, as [`URL_PATTERN`])
/// URLs with a host and without whitespace, that parse as an HTTP request target. The
/// text starts with the URL, quoted, so callers prefix the field: `<field>: <problem>`.
pub fn url_problem(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    let authority = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    if authority.is_none_or(str::is_empty) || url.contains(char::is_whitespace) {
        return Some(format!("{url:?} is not an http:// or https:// URL with a host"));
    }
    match url.parse::<http::Uri>() {
        Ok(uri) if uri.host().is_none_or(str::is_empty) => {
            Some(format!("{url:?} is not an http:// or https:// URL with a host"))
        }
        // `Uri` parses a port that is not a number as no port at all: the node would then
        // connect to the scheme's default port, not the one meant.
        Ok(uri) if has_port(&uri) && uri.port_u16().is_none() => {
            Some(format!("{url:?} is not a valid URL: its port is not a number from 0 to 65535"))
        }
        Ok(_) => None,
        Err(err) => Some(format!("{url:?} is not a valid URL: {err}")),
    }
}

/// Whether `uri`'s authority has a `:port` part after its host (user info and IPv6
/// brackets left aside).
fn has_port(uri: &http::Uri) -> bool {
    let authority = uri.authority().map(http::uri::Authority::as_str).unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host_port)| host_port);
    let after_host = host_port.rsplit_once(']').map_or(host_port, |(_, after)| after);
    after_host.contains(':')
}

/// Why `version` cannot be a version a node runs, or `None` if it can.
///
/// Empty (or only whitespace), containing whitespace or a control character, or not of
/// [`VERSION_PATTERN`]'s form (`v1.35.1+k0s.0`: SemVer, an optional `v`, at most `+k0s.N`
/// as build metadata): no k0s binary reports such a version, so a node could never complete
/// the update, and such a version could carry `/`, `..`, `?` or `#` into a URL or a path.
/// The text starts with the version, quoted, so callers prefix the field:
/// `<field>: <problem>`.
pub fn version_problem(version: &str) -> Option<String> {
    if version.trim().is_empty() {
        Some(format!("{version:?} is empty"))
    } else if version.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some(format!("{version:?} contains whitespace or a control character"))
    } else if !is_k0s_version(version) {
        Some(format!(
            "{version:?} is not a k0s version: SemVer with an optional leading v and at most \
             +k0s.N as build metadata (v1.35.1+k0s.0, v1.36.0-rc.1+k0s.0)"
        ))
    } else {
        None
    }
}

/// Whether `version` is of [`VERSION_PATTERN`]'s form, checked without a regex engine.
fn is_k0s_version(version: &str) -> bool {
    let version = version.strip_prefix('v').unwrap_or(version);
    let (version, build) = match version.split_once('+') {
        Some((version, build)) => (version, Some(build)),
        None => (version, None),
    };
    let (core, prerelease) = match version.split_once('-') {
        Some((core, prerelease)) => (core, Some(prerelease)),
        None => (version, None),
    };
    let core: Vec<&str> = core.split('.').collect();
    core.len() == 3
        && core.iter().all(|part| is_number(part))
        && prerelease.is_none_or(|pre| pre.split('.').all(is_prerelease_identifier))
        && build.is_none_or(|build| build.strip_prefix("k0s.").is_some_and(is_number))
}

/// A SemVer numeric identifier: digits, without a leading zero unless it is `0`.
fn is_number(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
}

/// A SemVer prerelease identifier: a number ([`is_number`]) or a non-empty run of ASCII
/// letters, digits and `-` with at least one letter or `-`.
fn is_prerelease_identifier(text: &str) -> bool {
    let alphanumeric = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && text.bytes().any(|b| !b.is_ascii_digit());
    alphanumeric || is_number(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_and_https_urls_with_a_host_are_accepted() {
        for url in [
            "http://example.com/k0s",
            "https://example.com",
            "https://127.0.0.1:8080/dist/k0s-v1.33.4?x=1#frag",
            "http://[::1]:80/k0s",
            "https://user:pw@example.com:8443/k0s",
            "http://[::1]/k0s",
        ] {
            assert_eq!(url_problem(url), None, "{url}");
        }
    }

    #[test]
    fn urls_a_node_cannot_download_from_are_refused_with_the_url_quoted() {
        for url in [
            "",
            "example.invalid/k0s",
            "ftp://example.com/k0s",
            "HTTPS://example.com/k0s",
            "https://",
            "https:///k0s",
            "https://?x",
            "http://example.com/k 0s",
            "http://example.com/k0s\n",
            "http://example.com:port/k0s",
            "http://example.com:99999/k0s",
            "http://user:pw@example.com:/k0s",
            "http://[::1]:x/k0s",
            "http://exa\u{0}mple.com/k0s",
        ] {
            let problem = url_problem(url).unwrap_or_else(|| panic!("{url:?} is accepted"));
            assert!(problem.starts_with(&format!("{url:?} is not")), "{problem}");
        }
    }

    #[test]
    fn versions_with_nothing_or_whitespace_in_them_are_refused() {
        assert_eq!(version_problem("v1.33.4+k0s.0"), None);
        assert_eq!(version_problem(""), Some(r#""" is empty"#.to_owned()));
        assert_eq!(version_problem("  "), Some(r#""  " is empty"#.to_owned()));
        for version in ["v1.33 ", " v1.33", "v1\t33", "v1.33\u{7}", "v1\u{a0}33"] {
            let problem = version_problem(version).expect(version);
            assert!(problem.contains("whitespace or a control character"), "{problem}");
        }
    }

    /// Versions k0s releases and the fixtures, docs and e2e scenarios use.
    const K0S_VERSIONS: [&str; 8] = [
        "v1.35.1+k0s.0",
        "v1.36.0-rc.1+k0s.0",
        "v1.35.4",
        "1.25.0",
        "v0.0.0",
        "v1.0.0-alpha",
        "v1.2.3-0.a-b.7c+k0s.12",
        "v99.99.99+k0s.0",
    ];

    /// Versions that are no SemVer with at most `+k0s.N`: path and URL characters, other
    /// build metadata, leading zeros, missing parts.
    const NOT_K0S_VERSIONS: [&str; 22] = [
        "v1.36.0-a/../x+k0s.0",
        "v1.36.0-a?x+k0s.0",
        "v1.36.0-a#x+k0s.0",
        "v1.36.0/../../etc",
        "../v1.36.0",
        "v1.36.0+k0s.0/x",
        "v1.36.0+k0s.0?x",
        "v1.36.0-a..b",
        "v1.36.0-",
        "v1.36.0-rc.01",
        "v1.36.0+k0s",
        "v1.36.0+k0s.",
        "v1.36.0+k0s.01",
        "v1.36.0+build.1",
        "v1.36.0+k0s.0+k0s.1",
        "v1.36",
        "v1.36.0.1",
        "v01.36.0",
        "vv1.36.0",
        "V1.36.0",
        "v1.36.0-r\u{e9}",
        "v2",
    ];

    #[test]
    fn only_semver_versions_with_at_most_k0s_build_metadata_are_accepted() {
        for version in K0S_VERSIONS {
            assert_eq!(version_problem(version), None, "{version}");
        }
        for version in NOT_K0S_VERSIONS {
            let problem = version_problem(version).unwrap_or_else(|| panic!("{version} accepted"));
            assert!(problem.starts_with(&format!("{version:?} is not a k0s version")), "{problem}");
        }
    }

    #[test]
    fn the_crd_version_pattern_refuses_exactly_what_version_problem_refuses() {
        // The API server applies the pattern with Go's RE2; this pattern means the same in
        // Rust's `regex`, whose syntax for it is the same.
        let pattern = regex::Regex::new(VERSION_PATTERN).expect("the pattern compiles");
        for version in K0S_VERSIONS {
            assert!(pattern.is_match(version), "{version}");
        }
        for version in NOT_K0S_VERSIONS.into_iter().chain(["", " ", "v1.36.0 ", "v1.36.0\n"]) {
            assert!(!pattern.is_match(version), "{version:?}");
            assert!(version_problem(version).is_some(), "{version:?}");
        }
    }
}
