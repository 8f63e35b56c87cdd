//! k0s version ordering: semver first, then the `+k0s.N` build number.
//!
//! k0s versions look like `v1.35.1+k0s.0`. Semver says build metadata does not take part
//! in ordering, but for k0s it does: `+k0s.1` is a re-release of the same Kubernetes version
//! and is newer than `+k0s.0`. So `v1.35.1+k0s.0 < v1.35.1+k0s.1 < v1.35.2+k0s.0`, and as in
//! semver a prerelease sorts before its release (`v1.35.1-rc.1+k0s.0 < v1.35.1+k0s.0`).
//!
//! Two readings, for two callers:
//!
//! - [`K0sVersion::parse`] and the type's [`Ord`]: the updater's. Only `+k0s.N` build
//!   metadata is understood, and it orders re-releases.
//! - [`K0sVersion::parse_ignoring_build`] and [`K0sVersion::cmp_ignoring_build`]: the
//!   removed-API check's. Any build metadata is accepted and takes no part (`v1.29.0+k0s.0`
//!   counts as `v1.29.0`), as in semver precedence.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Why a string is not a k0s version.
#[derive(Debug, Error)]
pub enum Error {
    /// The text is not `[v]MAJOR.MINOR.PATCH[-PRE][+BUILD]`.
    #[error("{input:?} is not a k0s version (expected vMAJOR.MINOR.PATCH[-PRE][+k0s.N])")]
    Malformed {
        /// The text as given.
        input: String,
        /// What the semver parser objected to.
        #[source]
        source: semver::Error,
    },
    /// The build metadata is something other than `k0s.N`, so the version cannot be
    /// ordered against k0s releases.
    #[error("{input:?} has build metadata {build:?}; only +k0s.N is understood")]
    UnsupportedBuild {
        /// The text as given.
        input: String,
        /// The build metadata after `+`.
        build: String,
    },
}

/// `Result` with this module's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A parsed k0s version, ordered as k0s orders releases.
///
/// The leading `v` is optional on input and always present on output ([`fmt::Display`]).
/// A version without `+k0s.N` sorts before the same version with any `+k0s.N`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct K0sVersion {
    /// Major, minor, patch and prerelease; the build metadata is always empty here.
    core: semver::Version,
    /// `N` of `+k0s.N`, if present.
    k0s_build: Option<u64>,
}

impl K0sVersion {
    /// Parse `[v]MAJOR.MINOR.PATCH[-PRE][+k0s.N]`.
    pub fn parse(input: &str) -> Result<Self> {
        let trimmed = input.trim();
        let bare = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let mut core = semver::Version::parse(bare)
            .map_err(|source| Error::Malformed { input: input.to_owned(), source })?;
        let k0s_build = if core.build.is_empty() {
            None
        } else {
            let build = core.build.as_str();
            let n = build.strip_prefix("k0s.").and_then(|n| n.parse::<u64>().ok()).ok_or_else(
                || Error::UnsupportedBuild { input: input.to_owned(), build: build.to_owned() },
            )?;
            Some(n)
        };
        core.build = semver::BuildMetadata::EMPTY;
        Ok(Self { core, k0s_build })
    }

    /// Parse `[v]MAJOR.MINOR.PATCH[-PRE][+BUILD]` for [`Self::cmp_ignoring_build`]: whatever
    /// follows `+` is dropped unread (so the result has no [`Self::k0s_build`]). The text is
    /// taken as it is, without trimming.
    pub fn parse_ignoring_build(input: &str) -> Result<Self> {
        let bare = input.strip_prefix('v').unwrap_or(input);
        let bare = bare.split_once('+').map_or(bare, |(version, _build)| version);
        let core = semver::Version::parse(bare)
            .map_err(|source| Error::Malformed { input: input.to_owned(), source })?;
        Ok(Self { core, k0s_build: None })
    }

    /// Semver precedence alone: major, minor, patch and prerelease; the `+k0s.N` build number
    /// takes no part (unlike [`Ord`]).
    pub fn cmp_ignoring_build(&self, other: &Self) -> Ordering {
        self.core.cmp(&other.core)
    }

    /// The semver part: major, minor, patch and prerelease, without build metadata.
    pub fn semver(&self) -> &semver::Version {
        &self.core
    }

    /// `N` of `+k0s.N`, if the version has one.
    pub fn k0s_build(&self) -> Option<u64> {
        self.k0s_build
    }

    /// Whether `self` is strictly newer than `other`.
    pub fn is_newer_than(&self, other: &Self) -> bool {
        self > other
    }
}

impl Ord for K0sVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        // `semver::Version`'s own order also compares build metadata, which is empty on
        // both sides here, so this is semver precedence.
        self.core.cmp(&other.core).then(self.k0s_build.cmp(&other.k0s_build))
    }
}

impl PartialOrd for K0sVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl FromStr for K0sVersion {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl fmt::Display for K0sVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.core)?;
        if let Some(n) = self.k0s_build {
            write!(f, "+k0s.{n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> K0sVersion {
        K0sVersion::parse(s).unwrap()
    }

    #[test]
    fn k0s_build_number_orders_within_one_kubernetes_version() {
        assert!(v("v1.35.1+k0s.0") < v("v1.35.1+k0s.1"));
        assert!(v("v1.35.1+k0s.1") < v("v1.35.2+k0s.0"));
        assert!(v("v1.35.1+k0s.0") < v("v1.35.2+k0s.0"));
    }

    #[test]
    fn build_numbers_compare_as_numbers_not_text() {
        assert!(v("v1.35.1+k0s.2") < v("v1.35.1+k0s.10"));
    }

    #[test]
    fn prerelease_sorts_before_its_release() {
        assert!(v("v1.35.1-rc.1+k0s.0") < v("v1.35.1+k0s.0"));
        assert!(v("v1.35.1-alpha.1+k0s.0") < v("v1.35.1-beta.0+k0s.0"));
        assert!(v("v1.35.1-rc.1+k0s.5") < v("v1.35.1+k0s.0"));
    }

    #[test]
    fn leading_v_is_optional_and_display_adds_it() {
        assert_eq!(v("1.35.1+k0s.0"), v("v1.35.1+k0s.0"));
        assert_eq!(v("1.35.1+k0s.0").to_string(), "v1.35.1+k0s.0");
        assert_eq!(v("v1.35.1-rc.1").to_string(), "v1.35.1-rc.1");
    }

    #[test]
    fn missing_k0s_build_sorts_before_build_zero() {
        assert!(v("v1.35.1") < v("v1.35.1+k0s.0"));
        assert_eq!(v("v1.35.1").k0s_build(), None);
    }

    #[test]
    fn equal_versions_are_not_newer() {
        assert!(!v("v1.35.1+k0s.0").is_newer_than(&v("v1.35.1+k0s.0")));
        assert!(v("v1.35.1+k0s.1").is_newer_than(&v("v1.35.1+k0s.0")));
    }

    #[test]
    fn garbage_is_a_clear_error_naming_the_input() {
        let err = K0sVersion::parse("latest").unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }));
        assert!(err.to_string().contains("\"latest\""), "{err}");
        assert!(K0sVersion::parse("v1.35").is_err());
        assert!(K0sVersion::parse("").is_err());
    }

    fn loose(s: &str) -> Option<K0sVersion> {
        K0sVersion::parse_ignoring_build(s).ok()
    }

    fn at_least(version: &str, floor: &str) -> bool {
        match (loose(version), loose(floor)) {
            (Some(version), Some(floor)) => version.cmp_ignoring_build(&floor) != Ordering::Less,
            (None, _) | (_, None) => false,
        }
    }

    #[test]
    fn ignoring_build_any_build_metadata_is_accepted_and_takes_no_part() {
        assert!(at_least("v1.29.0+k0s.0", "v1.29.0"));
        assert!(at_least("v1.29.0+k3s1", "v1.29.0"));
        assert!(at_least("v1.29.1+k0s.0", "v1.29.0"));
        assert!(at_least("1.32.0", "v1.32.0"));
        assert!(!at_least("v1.28.9+k0s.1", "v1.29.0"));
        assert_eq!(loose("v1.29.0+k0s.3").and_then(|v| v.k0s_build()), None);
        assert_eq!(v("v1.29.0+k0s.0").cmp_ignoring_build(&v("v1.29.0+k0s.1")), Ordering::Equal);
    }

    #[test]
    fn ignoring_build_a_pre_release_is_below_its_release() {
        assert!(!at_least("v1.29.0-rc.1+k0s.0", "v1.29.0"));
        assert!(at_least("v1.29.1-rc.1", "v1.29.0"));
        assert!(loose("v1.0.0-rc.2") < loose("v1.0.0-rc.10"));
        assert!(loose("v1.0.0-1") < loose("v1.0.0-alpha"));
        assert!(loose("v1.0.0-alpha") < loose("v1.0.0-alpha.1"));
    }

    #[test]
    fn ignoring_build_text_that_is_not_semver_is_an_error() {
        for text in ["latest", "v1.29", "v01.29.0", "", " v1.29.0", "nightly"] {
            assert!(K0sVersion::parse_ignoring_build(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn foreign_build_metadata_is_rejected() {
        let err = K0sVersion::parse("v1.35.1+k3s1").unwrap_err();
        assert!(matches!(err, Error::UnsupportedBuild { ref build, .. } if build == "k3s1"));
        assert!(K0sVersion::parse("v1.35.1+k0s.x").is_err());
    }
}
