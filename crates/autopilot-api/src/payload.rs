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

/// The CRD pattern for a command's `version`: non-empty, no whitespace.
pub const VERSION_PATTERN: &str = r"^\S+$";

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
/// Empty (or only whitespace), or containing whitespace or a control character: no k0s
/// binary reports such a version, so a node could never complete the update. The text
/// starts with the version, quoted, so callers prefix the field: `<field>: <problem>`.
pub fn version_problem(version: &str) -> Option<String> {
    if version.trim().is_empty() {
        Some(format!("{version:?} is empty"))
    } else if version.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some(format!("{version:?} contains whitespace or a control character"))
    } else {
        None
    }
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
}
