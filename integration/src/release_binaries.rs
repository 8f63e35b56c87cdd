//! The Kubernetes components of another release than the one the test topology runs:
//! kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet of
//! [`PREVIOUS`](crate::control_plane::PREVIOUS), which the `k0s` builds an upgrade scenario
//! starts from carry ([`crate::components::pinned_at`]); containerd stays the one of
//! [`crate::node_binaries`].
//!
//! Built and cached by the same recipe as the others ([`crate::cache`], `cargo xtask
//! control-plane`, part `previous-kubernetes`); tests only call [`binaries`], which never
//! builds.

use std::path::{Path, PathBuf};

use crate::cache::{self, CachedSet, Override};
use crate::control_plane::{Release, build_kubernetes};
use crate::go;

/// Environment variable that overrides the parent of [`cache_dir`] (each release keeps its
/// own directory under it).
pub const CACHE_DIR_ENV: &str = "K0S_RELEASE_BINARIES_CACHE";

/// The `--only` value of `cargo xtask control-plane` that builds [`crate::control_plane::PREVIOUS`].
pub const PART: &str = "previous-kubernetes";

/// Paths of one release's cached components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseBinaries {
    /// `kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `kube-controller-manager`.
    pub kube_controller_manager: PathBuf,
    /// `kube-scheduler`.
    pub kube_scheduler: PathBuf,
    /// `kubelet`.
    pub kubelet: PathBuf,
}

impl ReleaseBinaries {
    fn in_dir(dir: &Path) -> Self {
        let bin = dir.join("bin");
        Self {
            kube_apiserver: bin.join("kube-apiserver"),
            kube_controller_manager: bin.join("kube-controller-manager"),
            kube_scheduler: bin.join("kube-scheduler"),
            kubelet: bin.join("kubelet"),
        }
    }

    /// Each component's `k8s.io/kubernetes` package and path.
    fn packages(&self) -> [(&'static str, &Path); 4] {
        [
            ("k8s.io/kubernetes/cmd/kube-apiserver", &self.kube_apiserver),
            ("k8s.io/kubernetes/cmd/kube-controller-manager", &self.kube_controller_manager),
            ("k8s.io/kubernetes/cmd/kube-scheduler", &self.kube_scheduler),
            ("k8s.io/kubernetes/cmd/kubelet", &self.kubelet),
        ]
    }
}

/// The cache directory of `release`: `$K0S_RELEASE_BINARIES_CACHE/k8s-<version>` if set,
/// otherwise `~/.cache/k0s-autopilot/kubernetes/k8s-<version>/`.
pub fn cache_dir(release: Release) -> anyhow::Result<PathBuf> {
    let versions = format!("k8s-{}", release.kubernetes);
    cache::dir(CACHE_DIR_ENV, Override::Parent, "kubernetes", &versions)
}

/// What the stamp file says: the release.
fn stamp_contents(release: Release) -> String {
    format!("kubernetes={}\nstaging={}\n", release.kubernetes, release.staging)
}

fn cached_set(release: Release) -> anyhow::Result<(CachedSet, ReleaseBinaries)> {
    let dir = cache_dir(release)?;
    let binaries = ReleaseBinaries::in_dir(&dir);
    let set = CachedSet {
        name: format!("Kubernetes {} components", release.kubernetes),
        pinned: format!(
            "kube-apiserver, kube-controller-manager, kube-scheduler, kubelet {}",
            release.kubernetes
        ),
        part: PART,
        dir,
        stamp: stamp_contents(release),
        entries: binaries.packages().map(|(_, path)| path.to_path_buf()).to_vec(),
    };
    Ok((set, binaries))
}

/// The cached components of `release`, without building anything; fails with the hint to
/// run `cargo xtask control-plane` when they are missing.
pub fn binaries(release: Release) -> anyhow::Result<ReleaseBinaries> {
    let (set, binaries) = cached_set(release)?;
    set.cached()?;
    Ok(binaries)
}

/// Builds the components of `release` into [`cache_dir`] unless they are there (only the
/// missing ones), and returns them.
pub fn ensure_built(release: Release) -> anyhow::Result<ReleaseBinaries> {
    let (set, binaries) = cached_set(release)?;
    set.ensure(|missing| {
        go::check_installed()?;
        let packages: Vec<(&str, &Path)> = binaries
            .packages()
            .into_iter()
            .filter(|(_, dest)| missing.iter().any(|m| m == dest))
            .collect();
        let what = format!("kubernetes-{}", release.kubernetes);
        build_kubernetes(release, &what, &packages)
    })?;
    Ok(binaries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control_plane::{CURRENT, PREVIOUS};

    #[test]
    fn each_release_has_its_own_directory_and_stamp() {
        let previous = cache_dir(PREVIOUS).unwrap();
        let current = cache_dir(CURRENT).unwrap();
        assert_ne!(previous, current);
        assert!(previous.ends_with("k8s-v1.34.4"), "{}", previous.display());
        assert_eq!(stamp_contents(PREVIOUS), "kubernetes=v1.34.4\nstaging=v0.34.4\n");
    }

    #[test]
    fn the_previous_release_is_one_minor_before_the_current_one() {
        let minor = |release: Release| -> u32 {
            release.kubernetes.split('.').nth(1).and_then(|m| m.parse().ok()).unwrap()
        };
        assert_eq!(minor(PREVIOUS) + 1, minor(CURRENT));
        let staging_minor = |release: Release| release.staging.split('.').nth(1).unwrap();
        assert_eq!(staging_minor(PREVIOUS), minor(PREVIOUS).to_string());
    }
}
