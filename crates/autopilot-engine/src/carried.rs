//! The Kubernetes release a downloaded k0s payload carries, checked before the swap.
//!
//! k0s names its releases after the Kubernetes release they carry (k0s `v1.35.1+k0s.0`
//! carries Kubernetes `v1.35.1`), and the Plan engine judges the version skew on that name
//! (`crate::plan::skew`): a Plan names no Kubernetes version of its own. A node therefore
//! checks, once the payload is downloaded and before it is swapped in, that the Kubernetes
//! components it carries ([`KUBERNETES_COMPONENTS`]) are of the minor its k0s version names.
//! A payload that carries none of them is not checked; one that carries another minor fails
//! the node, naming the component, its version and the minor expected, and is never swapped
//! in.

use crate::plan::skew::Minor;

/// The carried components whose version is Kubernetes' (containerd and its shim version
/// on their own).
pub const KUBERNETES_COMPONENTS: [&str; 4] =
    ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"];

/// Whether the Kubernetes components among `components` (name, version, as the payload's
/// manifest lists them) are of the minor the k0s version `k0s_version` names. `Err` says
/// which are not, with their versions and the minor expected.
pub fn check<'a>(
    components: impl IntoIterator<Item = (&'a str, &'a str)>,
    k0s_version: &str,
) -> Result<(), String> {
    let kubernetes: Vec<(&str, &str)> =
        components.into_iter().filter(|(name, _)| KUBERNETES_COMPONENTS.contains(name)).collect();
    if kubernetes.is_empty() {
        return Ok(());
    }
    let Some(expected) = Minor::of(k0s_version) else {
        return Err(format!(
            "the k0s version {k0s_version:?} names no Kubernetes release to check the carried \
             components against"
        ));
    };
    let wrong: Vec<String> = kubernetes
        .iter()
        .filter(|(_, version)| Minor::of(version) != Some(expected))
        .map(|(name, version)| format!("{name} {version}"))
        .collect();
    if wrong.is_empty() {
        return Ok(());
    }
    Err(format!(
        "it carries {}, not Kubernetes {expected} as its k0s version {k0s_version} names",
        wrong.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K0S: &str = "v1.35.0+k0s.0";

    #[test]
    fn kubernetes_components_of_the_minor_the_k0s_version_names_pass_whatever_their_patch() {
        let carried = [
            ("containerd", "v2.1.4"),
            ("kubelet", "v1.35.4"),
            ("kube-apiserver", "v1.35.4"),
            ("kube-controller-manager", "v1.35.4"),
            ("kube-scheduler", "v1.35.0-rc.1"),
        ];
        assert_eq!(check(carried, K0S), Ok(()));
        assert_eq!(check(carried, "v1.35.9+k0s.2"), Ok(()));
    }

    #[test]
    fn a_payload_without_kubernetes_components_is_not_checked() {
        assert_eq!(check([], K0S), Ok(()));
        assert_eq!(check([("containerd", "v2.1.4"), ("runc", "garbage")], K0S), Ok(()));
        assert_eq!(check([("containerd", "v2.1.4")], "latest"), Ok(()));
    }

    #[test]
    fn another_minor_fails_naming_each_component_its_version_and_the_minor_expected() {
        let previous =
            [("containerd", "v2.1.4"), ("kubelet", "v1.34.4"), ("kube-apiserver", "v1.35.4")];
        assert_eq!(
            check(previous, K0S),
            Err("it carries kubelet v1.34.4, not Kubernetes v1.35 as its k0s version \
                 v1.35.0+k0s.0 names"
                .to_owned())
        );
        let all_old = [("kubelet", "v1.34.4"), ("kube-scheduler", "v1.34.4")];
        let why = check(all_old, K0S).unwrap_err();
        assert!(
            why.starts_with("it carries kubelet v1.34.4, kube-scheduler v1.34.4, not"),
            "{why}"
        );
        // A newer one, or one whose version is not a version, fails the same way.
        assert!(check([("kubelet", "v1.36.0")], K0S).is_err());
        assert!(check([("kubelet", "unknown")], K0S).unwrap_err().contains("kubelet unknown"));
    }

    #[test]
    fn a_k0s_version_that_names_no_release_fails_a_payload_that_carries_kubernetes() {
        let why = check([("kubelet", "v1.35.4")], "latest").unwrap_err();
        assert!(why.contains("\"latest\" names no Kubernetes release"), "{why}");
    }
}
