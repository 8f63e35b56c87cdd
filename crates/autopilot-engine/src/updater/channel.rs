//! What the update server says is available: [`ChannelAnswer`], parsed from either of its
//! two YAML formats (REF §11.3). Pure: bytes in, typed answer out.
//!
//! The periodic format (`<server>/<channel>/index.yaml`) lists one entry per platform with
//! optional SHA-256 digests; the legacy format of the cron strategy has two maps keyed by
//! `<os>-<arch>` and no digests. Both become the same [`ChannelAnswer`]. An entry without a
//! digest only becomes a Plan if its URL is `https://` (see [`crate::updater::decide`], rule 5).

use std::collections::BTreeMap;

use autopilot_api::v1beta2::PlanResourceUrl;
use serde::Deserialize;
use thiserror::Error;

/// Why an update-server answer cannot be used.
#[derive(Debug, Error)]
pub enum Error {
    /// The body is not YAML of the expected shape; the message names the field and line.
    /// (Boxed: the parser's error is large, and this one travels in every `Result` here.)
    #[error("update server answer is malformed: {0}")]
    Yaml(#[source] Box<crate::yaml::Error>),
    /// A field is present but unusable (empty version, bad digest, ...).
    #[error("update server answer is malformed: {field}: {reason}")]
    Field {
        /// Path of the field, for example `downloadURLs[0].k0sSha256`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// `Result` with this module's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The version an update server offers and where to download it, per platform.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChannelAnswer {
    /// The offered k0s version exactly as the server wrote it (for example `v1.35.2+k0s.0`);
    /// it goes into the Plan unchanged, since nodes compare it as a string.
    pub version: String,
    /// The channel name the server reports (informational).
    pub channel: Option<String>,
    /// End-of-life date of the version (informational).
    pub eol_date: Option<String>,
    /// The k0s binary per `<os>-<arch>`.
    pub k0s: BTreeMap<String, PlanResourceUrl>,
    /// The airgap image bundle per `<os>-<arch>`; platforms without a bundle are absent.
    pub airgap: BTreeMap<String, PlanResourceUrl>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexYaml {
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    eol_date: Option<String>,
    version: String,
    #[serde(rename = "downloadURLs", default)]
    download_urls: Vec<IndexDownload>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexDownload {
    os: String,
    arch: String,
    k0s: String,
    #[serde(default)]
    k0s_sha256: Option<String>,
    #[serde(default)]
    airgap_bundle: Option<String>,
    #[serde(default)]
    airgap_sha256: Option<String>,
}

#[derive(Deserialize)]
struct LegacyYaml {
    version: String,
    #[serde(rename = "downloadURLs", default)]
    download_urls: LegacyDownloads,
}

#[derive(Deserialize, Default)]
struct LegacyDownloads {
    #[serde(default)]
    k0s: BTreeMap<String, String>,
    #[serde(default)]
    airgap: BTreeMap<String, String>,
}

impl ChannelAnswer {
    /// Parse the periodic strategy's `index.yaml` (REF §11.3).
    ///
    /// Empty digests count as absent. Unlike k0s, a platform with no `airgapBundle` gets no
    /// airgap entry (k0s writes one with an empty URL, which can only fail on the node).
    pub fn from_index_yaml(body: &str) -> Result<Self> {
        let raw: IndexYaml = crate::yaml::from_str(body).map_err(|e| Error::Yaml(Box::new(e)))?;
        let version = check_version(raw.version)?;
        let mut k0s = BTreeMap::new();
        let mut airgap = BTreeMap::new();
        for (i, entry) in raw.download_urls.into_iter().enumerate() {
            let field = |name: &str| format!("downloadURLs[{i}].{name}");
            let os = non_empty(entry.os, || field("os"))?;
            let arch = non_empty(entry.arch, || field("arch"))?;
            let platform = format!("{os}-{arch}");
            let url = download_url(entry.k0s, || field("k0s"))?;
            let sha256 = digest(entry.k0s_sha256, || field("k0sSha256"))?;
            k0s.insert(platform.clone(), PlanResourceUrl { url, sha256, ..Default::default() });
            if let Some(bundle) = entry.airgap_bundle.filter(|u| !u.trim().is_empty()) {
                let bundle = download_url(bundle, || field("airgapBundle"))?;
                let sha256 = digest(entry.airgap_sha256, || field("airgapSha256"))?;
                airgap.insert(
                    platform,
                    PlanResourceUrl { url: bundle, sha256, ..Default::default() },
                );
            }
        }
        Ok(Self { version, channel: raw.channel, eol_date: raw.eol_date, k0s, airgap })
    }

    /// Parse the legacy answer of the cron strategy (REF §11.3): no digests.
    pub fn from_legacy_yaml(body: &str) -> Result<Self> {
        let raw: LegacyYaml = crate::yaml::from_str(body).map_err(|e| Error::Yaml(Box::new(e)))?;
        let version = check_version(raw.version)?;
        let urls = |map: BTreeMap<String, String>, name: &str| {
            map.into_iter()
                .map(|(platform, url)| {
                    let url = download_url(url, || format!("downloadURLs.{name}.{platform}"))?;
                    Ok((platform, PlanResourceUrl { url, sha256: None, ..Default::default() }))
                })
                .collect::<Result<BTreeMap<_, _>>>()
        };
        Ok(Self {
            version,
            channel: None,
            eol_date: None,
            k0s: urls(raw.download_urls.k0s, "k0s")?,
            airgap: urls(raw.download_urls.airgap, "airgap")?,
        })
    }
}

/// The offered version, trimmed: one the Plan schema and the nodes accept
/// ([`autopilot_api::payload::version_problem`]), or an error naming `version`.
fn check_version(version: String) -> Result<String> {
    let version = non_empty(version, || "version".to_owned())?;
    match autopilot_api::payload::version_problem(&version) {
        Some(reason) => Err(Error::Field { field: "version".to_owned(), reason }),
        None => Ok(version),
    }
}

/// A download URL, trimmed: one the Plan schema and the nodes accept
/// ([`autopilot_api::payload::url_problem`]), or an error naming `field`. A Plan with
/// any other URL would be refused by the API server or at NewPlan.
fn download_url(value: String, field: impl Fn() -> String) -> Result<String> {
    let url = non_empty(value, &field)?;
    match autopilot_api::payload::url_problem(&url) {
        Some(reason) => Err(Error::Field { field: field(), reason }),
        None => Ok(url),
    }
}

fn non_empty(value: String, field: impl FnOnce() -> String) -> Result<String> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(Error::Field { field: field(), reason: "is empty".to_owned() });
    }
    Ok(trimmed.to_owned())
}

/// An optional hex SHA-256: empty means absent; anything else must be 64 hex digits.
fn digest(value: Option<String>, field: impl FnOnce() -> String) -> Result<Option<String>> {
    let Some(value) = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if value.len() != 64 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Field {
            field: field(),
            reason: format!("{value:?} is not a hex SHA-256 (64 hex digits)"),
        });
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    /// The fenced `index.yaml` sample of docs/automatic-updates.md.
    fn documented_index() -> String {
        let doc = include_str!("../../../../docs/automatic-updates.md");
        let start = doc.find("```yaml\n# index.yaml\n").expect("the index sample in the docs");
        let body = &doc[start + "```yaml\n".len()..];
        body[..body.find("```").expect("the end of the sample")].to_owned()
    }

    #[test]
    fn the_documented_index_parses_as_the_updater_reads_it() {
        let answer = super::ChannelAnswer::from_index_yaml(&documented_index()).expect("parses");
        assert_eq!(answer.version, "v1.35.2+k0s.0");
        assert_eq!(answer.k0s.len(), 2, "{answer:?}");
        assert!(answer.k0s["linux-amd64"].sha256.is_some());
        assert_eq!(answer.airgap.len(), 1, "only amd64 has a bundle: {answer:?}");
    }

    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn index_yaml_yields_platforms_with_digests() {
        let body = format!(
            "channel: stable\neolDate: 2027-01-01\nversion: v1.35.2+k0s.0\ndownloadURLs:\n\
             - os: linux\n  arch: amd64\n  k0s: https://x/k0s-amd64\n  k0sSha256: {SHA}\n  \
             airgapBundle: https://x/airgap-amd64\n  airgapSha256: \"\"\n\
             - os: linux\n  arch: arm64\n  k0s: https://x/k0s-arm64\n"
        );
        let answer = ChannelAnswer::from_index_yaml(&body).unwrap();
        assert_eq!(answer.version, "v1.35.2+k0s.0");
        assert_eq!(answer.channel.as_deref(), Some("stable"));
        assert_eq!(
            answer.k0s["linux-amd64"],
            PlanResourceUrl {
                url: "https://x/k0s-amd64".into(),
                sha256: Some(SHA.into()),
                ..Default::default()
            }
        );
        assert_eq!(answer.k0s["linux-arm64"].sha256, None);
        assert_eq!(
            answer.airgap["linux-amd64"],
            PlanResourceUrl {
                url: "https://x/airgap-amd64".into(),
                sha256: None,
                ..Default::default()
            }
        );
        assert!(!answer.airgap.contains_key("linux-arm64"));
    }

    #[test]
    fn legacy_yaml_yields_maps_without_digests_and_ignores_extra_keys() {
        let body = "name: whatever\nversion: v1.35.2+k0s.0\ndownloadURLs:\n  k0s:\n    \
                    linux-amd64: https://x/k0s\n  airgap:\n    linux-amd64: https://x/airgap\n";
        let answer = ChannelAnswer::from_legacy_yaml(body).unwrap();
        assert_eq!(answer.version, "v1.35.2+k0s.0");
        assert_eq!(answer.k0s["linux-amd64"].url, "https://x/k0s");
        assert_eq!(answer.airgap["linux-amd64"].sha256, None);
    }

    #[test]
    fn garbage_yaml_is_an_error_naming_the_line() {
        let err = ChannelAnswer::from_index_yaml("version: [unclosed\n").unwrap_err();
        assert!(err.to_string().contains("line"), "{err}");
        let err = ChannelAnswer::from_index_yaml("<html>oops</html>").unwrap_err();
        assert!(err.to_string().starts_with("update server answer is malformed"), "{err}");
    }

    #[test]
    fn urls_and_versions_no_node_accepts_are_errors_naming_the_field() {
        let index = |version: &str, url: &str| {
            format!("version: {version}\ndownloadURLs:\n- os: linux\n  arch: amd64\n  k0s: {url}\n")
        };
        let err = ChannelAnswer::from_index_yaml(&index("v1.35.2+k0s.0", "x/k0s")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "update server answer is malformed: downloadURLs[0].k0s: \"x/k0s\" is not an \
             http:// or https:// URL with a host"
        );
        let err =
            ChannelAnswer::from_index_yaml(&index("v1.35.2+k0s.0", "https://x:y/k0s")).unwrap_err();
        assert!(err.to_string().contains("downloadURLs[0].k0s: "), "{err}");
        let err = ChannelAnswer::from_index_yaml(&index("\"v1 2\"", "https://x/k0s")).unwrap_err();
        assert!(err.to_string().contains("version: \"v1 2\" contains whitespace"), "{err}");
        // A version becomes part of the Plan's download URLs: a server's offer cannot carry
        // a path or a query into them.
        for version in ["v1.36.0-a/../x+k0s.0", "v1.36.0-a?x+k0s.0", "'v1.36.0-a#x+k0s.0'"] {
            let err = ChannelAnswer::from_index_yaml(&index(version, "https://x/k0s")).unwrap_err();
            assert!(err.to_string().contains("is not a k0s version"), "{version}: {err}");
        }
        let legacy =
            "version: v1.35.2+k0s.0\ndownloadURLs:\n  k0s:\n    linux-amd64: ftp://x/k0s\n";
        let err = ChannelAnswer::from_legacy_yaml(legacy).unwrap_err();
        assert!(err.to_string().contains("downloadURLs.k0s.linux-amd64: "), "{err}");
    }

    #[test]
    fn missing_fields_are_errors_naming_them() {
        let err = ChannelAnswer::from_index_yaml("channel: stable\n").unwrap_err();
        assert!(err.to_string().contains("version"), "{err}");
        let err = ChannelAnswer::from_index_yaml(
            "version: v1.35.2+k0s.0\ndownloadURLs:\n- os: linux\n  arch: amd64\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("k0s"), "{err}");
        let err = ChannelAnswer::from_index_yaml("version: \"\"\n").unwrap_err();
        assert!(matches!(err, Error::Field { ref field, .. } if field == "version"), "{err}");
    }

    #[test]
    fn bad_digest_is_an_error_naming_the_field() {
        let body = "version: v1.35.2+k0s.0\ndownloadURLs:\n- {os: linux, arch: amd64, k0s: \"https://x/k0s\", k0sSha256: nope}\n";
        let err = ChannelAnswer::from_index_yaml(body).unwrap_err();
        assert!(err.to_string().contains("downloadURLs[0].k0sSha256"), "{err}");
    }
}
