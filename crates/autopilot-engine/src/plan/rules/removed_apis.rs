//! The removed-API pre-check of NewPlan (REF §9.1): which Kubernetes APIs a target version
//! no longer serves, and the decision whether the cluster still uses them.
//!
//! The shell does the I/O (discovery, listing, the GET through the still-served version) and
//! reports each use as a [`RemovedApiUse`]; this module holds the table as data, the version
//! comparison and the failure message, so the decision itself is pure and tested here.

use std::cmp::Ordering;
use std::fmt;

use autopilot_api::version::K0sVersion;

use crate::plan::model::lookups::RemovedApiUse;

/// One API version that Kubernetes stopped serving in a given release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemovedApi {
    /// API group (`flowcontrol.apiserver.k8s.io`).
    pub group: &'static str,
    /// The removed version of that group (`v1beta2`).
    pub version: &'static str,
    /// Kind (`FlowSchema`).
    pub kind: &'static str,
    /// Resource plural, as discovery names it (`flowschemas`).
    pub resource: &'static str,
    /// The first Kubernetes release that no longer serves this version (`v1.29.0`).
    pub removed_in: &'static str,
    /// A version of the same group that still serves the kind, if any. Objects reachable
    /// through it are migrated automatically and do not block (REF §9.1 step 4).
    pub served_in: Option<&'static str>,
}

/// Every removed API the pre-check knows about (REF §9.1), in table order.
///
/// The last entry is a test fixture that k0s ships too: a CRD that "will be removed" in a
/// version nobody runs, so the integration tests can make the check fail on purpose.
pub const REMOVED_APIS: &[RemovedApi] = &[
    RemovedApi {
        group: "flowcontrol.apiserver.k8s.io",
        version: "v1beta2",
        kind: "FlowSchema",
        resource: "flowschemas",
        removed_in: "v1.29.0",
        served_in: Some("v1beta3"),
    },
    RemovedApi {
        group: "flowcontrol.apiserver.k8s.io",
        version: "v1beta2",
        kind: "PriorityLevelConfiguration",
        resource: "prioritylevelconfigurations",
        removed_in: "v1.29.0",
        served_in: Some("v1"),
    },
    RemovedApi {
        group: "flowcontrol.apiserver.k8s.io",
        version: "v1beta3",
        kind: "FlowSchema",
        resource: "flowschemas",
        removed_in: "v1.32.0",
        served_in: Some("v1"),
    },
    RemovedApi {
        group: "flowcontrol.apiserver.k8s.io",
        version: "v1beta3",
        kind: "PriorityLevelConfiguration",
        resource: "prioritylevelconfigurations",
        removed_in: "v1.32.0",
        served_in: Some("v1"),
    },
    RemovedApi {
        group: "k0s.k0sproject.example.com",
        version: "v1beta1",
        kind: "RemovedCRD",
        resource: "removedcrds",
        removed_in: "v99.99.99",
        served_in: None,
    },
];

/// The table entries that matter for an update to `target_version`: those removed in that
/// version or earlier. A version that is not semver needs no check (REF §9.1 step 3).
pub fn removed_by(target_version: &str) -> impl Iterator<Item = &'static RemovedApi> + '_ {
    REMOVED_APIS.iter().filter(move |api| is_removed_in(target_version, api.removed_in))
}

/// Whether an update to `target_version` crosses `removed_in`, i.e. `target_version >=
/// removed_in` in semver order, ignoring `+build` metadata (`v1.29.0+k0s.0` counts as
/// `v1.29.0`). A `target_version` that is not semver is lower than everything (`false`).
pub fn is_removed_in(target_version: &str, removed_in: &str) -> bool {
    match (
        K0sVersion::parse_ignoring_build(target_version),
        K0sVersion::parse_ignoring_build(removed_in),
    ) {
        (Ok(target), Ok(removed)) => target.cmp_ignoring_build(&removed) != Ordering::Less,
        (Err(_), _) | (_, Err(_)) => false,
    }
}

impl RemovedApiUse {
    /// Whether this use blocks an update to `target_version`.
    pub fn blocks(&self, target_version: &str) -> bool {
        self.blocking && is_removed_in(target_version, &self.removed_in)
    }
}

impl fmt::Display for RemovedApiUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// The use that blocks an update to `target_version`, if any. When several do, the first in
/// `(group, resource, version)` order, so the answer does not depend on the shell's order.
pub fn blocking_use<'a>(
    uses: &'a [RemovedApiUse],
    target_version: &str,
) -> Option<&'a RemovedApiUse> {
    uses.iter().filter(|use_| use_.blocks(target_version)).min_by(|a, b| {
        (&a.group, &a.resource, &a.version).cmp(&(&b.group, &b.resource, &b.version))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_metadata_is_ignored_when_comparing_versions() {
        assert!(is_removed_in("v1.29.0+k0s.0", "v1.29.0"));
        assert!(is_removed_in("v1.29.1+k0s.0", "v1.29.0"));
        assert!(is_removed_in("1.32.0", "v1.32.0"));
        assert!(!is_removed_in("v1.28.9+k0s.1", "v1.29.0"));
    }

    #[test]
    fn a_pre_release_is_below_its_release() {
        assert!(!is_removed_in("v1.29.0-rc.1+k0s.0", "v1.29.0"));
        assert!(is_removed_in("v1.29.1-rc.1", "v1.29.0"));
        // Pre-release precedence: numbers numerically, numbers below words, a prefix first.
        assert!(!is_removed_in("v1.0.0-rc.2", "v1.0.0-rc.10"));
        assert!(!is_removed_in("v1.0.0-1", "v1.0.0-alpha"));
        assert!(!is_removed_in("v1.0.0-alpha", "v1.0.0-alpha.1"));
    }

    #[test]
    fn a_version_that_is_not_semver_passes_the_check() {
        assert!(!is_removed_in("latest", "v1.29.0"));
        assert!(!is_removed_in("v1.29", "v1.29.0"));
        assert!(!is_removed_in("v01.29.0", "v1.29.0"));
        assert!(!is_removed_in("", "v1.29.0"));
        assert_eq!(removed_by("nightly").count(), 0);
    }

    #[test]
    fn the_table_entries_apply_from_their_release_on() {
        let names = |version| {
            removed_by(version)
                .map(|api| format!("{}/{}", api.resource, api.version))
                .collect::<Vec<_>>()
        };
        assert!(names("v1.28.3+k0s.0").is_empty());
        assert_eq!(
            names("v1.29.0+k0s.0"),
            ["flowschemas/v1beta2", "prioritylevelconfigurations/v1beta2"]
        );
        assert_eq!(names("v1.35.1+k0s.0").len(), 4);
        assert_eq!(names("v99.99.99").len(), 5);
    }

    #[test]
    fn the_message_is_exactly_what_k0s_writes() {
        let use_ = RemovedApiUse {
            resource: "removedcrds".into(),
            group: "k0s.k0sproject.example.com".into(),
            version: "v1beta1".into(),
            removed_in: "v99.99.99".into(),
            count: 1,
            blocking: true,
        };
        assert_eq!(
            use_.message(),
            "removedcrds.k0s.k0sproject.example.com v1beta1 has been removed in Kubernetes \
             v99.99.99, but there are 1 such resources in the cluster"
        );
        assert_eq!(use_.to_string(), use_.message());
    }

    #[test]
    fn only_blocking_uses_at_or_below_the_target_version_block() {
        let use_ = |resource: &str, removed_in: &str, blocking| RemovedApiUse {
            resource: resource.into(),
            group: "g".into(),
            version: "v1beta1".into(),
            removed_in: removed_in.into(),
            count: 2,
            blocking,
        };
        let uses = [
            use_("zs", "v1.29.0", true),
            use_("as", "v1.29.0", true),
            use_("bs", "v1.20.0", false),
        ];
        assert_eq!(blocking_use(&uses, "v1.29.0+k0s.0").map(|u| u.resource.as_str()), Some("as"));
        assert_eq!(blocking_use(&uses, "v1.28.0+k0s.0"), None);
        assert_eq!(blocking_use(&uses[2..], "v1.30.0"), None);
    }
}
