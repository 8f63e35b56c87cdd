//! The component sets `k0s` builds carry (`k0s_components::carried`): the pinned set of the
//! test topology (the same binaries the control plane and the real nodes are built from), and
//! carrying copies of test builds.
//!
//! ```no_run
//! # fn demo() -> anyhow::Result<()> {
//! use integration::components::{Set, carrying};
//! let bare = integration::k0s_binary()?;
//! let worker_k0s = carrying(&bare, Set::Worker)?; // k0s + containerd, its shim, the kubelet
//! # Ok(()) }
//! ```

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Mutex,
};

use anyhow::Context as _;
use k0s_components::carried::{self, Source};

use crate::control_plane::{CURRENT, Release};
use crate::{control_plane, node_binaries, release_binaries};

/// Which components a carrying build gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Set {
    /// What a worker runs: containerd, its runc shim and the kubelet.
    Worker,
    /// Everything a release carries: the worker's components, kube-apiserver,
    /// kube-controller-manager and kube-scheduler.
    All,
}

impl Set {
    fn key(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::All => "all",
        }
    }
}

/// One pinned component: its name in `<data-dir>/bin/`, its version, the cached binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pinned {
    /// Its name.
    pub name: &'static str,
    /// The version it reports.
    pub version: &'static str,
    /// The cached binary (`cargo xtask control-plane` builds it).
    pub path: PathBuf,
}

/// The pinned components of `set` at [`CURRENT`], from the caches (never builds: `cargo
/// xtask control-plane` does).
pub fn pinned(set: Set) -> anyhow::Result<Vec<Pinned>> {
    pinned_at(set, CURRENT)
}

/// The pinned components of `set` with the Kubernetes components of `release` (containerd
/// is the same for every release), from the caches.
pub fn pinned_at(set: Set, release: Release) -> anyhow::Result<Vec<Pinned>> {
    let node = node_binaries::binaries()?;
    let k8s = release.kubernetes;
    let kubernetes = if release == CURRENT {
        let control = control_plane::binaries()?;
        release_binaries::ReleaseBinaries {
            kube_apiserver: control.kube_apiserver,
            kube_controller_manager: node.kube_controller_manager.clone(),
            kube_scheduler: node.kube_scheduler.clone(),
            kubelet: node.kubelet.clone(),
        }
    } else {
        release_binaries::binaries(release)?
    };
    let containerd = node_binaries::CONTAINERD_VERSION;
    let mut out = vec![
        Pinned { name: "containerd", version: containerd, path: node.containerd },
        Pinned { name: "containerd-shim-runc-v2", version: containerd, path: node.containerd_shim },
        Pinned { name: "kubelet", version: k8s, path: kubernetes.kubelet },
    ];
    if set == Set::All {
        out.extend([
            Pinned { name: "kube-apiserver", version: k8s, path: kubernetes.kube_apiserver },
            Pinned {
                name: "kube-controller-manager",
                version: k8s,
                path: kubernetes.kube_controller_manager,
            },
            Pinned { name: "kube-scheduler", version: k8s, path: kubernetes.kube_scheduler },
        ]);
    }
    Ok(out)
}

/// Packs `set` onto a copy of `binary` (any set it carries replaced) at `out`.
pub fn pack(binary: &Path, set: Set, out: &Path) -> anyhow::Result<carried::CarriedSet> {
    pack_at(binary, set, CURRENT, out)
}

/// [`pack`] with the Kubernetes components of `release`.
pub fn pack_at(
    binary: &Path,
    set: Set,
    release: Release,
    out: &Path,
) -> anyhow::Result<carried::CarriedSet> {
    let pinned = pinned_at(set, release)?;
    let sources: Vec<Source<'_>> =
        pinned.iter().map(|p| Source { name: p.name, version: p.version, path: &p.path }).collect();
    carried::pack(binary, &sources, out)
        .with_context(|| format!("packing the {} components onto {}", set.key(), binary.display()))
}

/// A copy of `binary` carrying `set`: `<target>/k0s-carrying/<set>/<name>-<n>/k0s`, packed once
/// per binary and set in this test process.
pub fn carrying(binary: &Path, set: Set) -> anyhow::Result<PathBuf> {
    carrying_at(binary, set, CURRENT)
}

/// [`carrying`] with the Kubernetes components of `release` (in
/// `<target>/k0s-carrying/<set>-<version>/` for another release than [`CURRENT`]).
pub fn carrying_at(binary: &Path, set: Set, release: Release) -> anyhow::Result<PathBuf> {
    type Packed = BTreeMap<(PathBuf, Set, Release), PathBuf>;
    static PACKED: Mutex<Packed> = Mutex::new(BTreeMap::new());
    let mut packed = PACKED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let key = (binary.to_path_buf(), set, release);
    if let Some(path) = packed.get(&key) {
        return Ok(path.clone());
    }
    let kind = if release == CURRENT {
        set.key().to_owned()
    } else {
        format!("{}-{}", set.key(), release.kubernetes)
    };
    let parent = crate::k0s::target_dir()?.join("k0s-carrying").join(kind);
    remove_stale(&parent);
    let dir = parent.join(format!("{}-{}", std::process::id(), packed.len()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let out = dir.join("k0s");
    pack_at(binary, set, release, &out)?;
    packed.insert(key, out.clone());
    Ok(out)
}

/// Removes the copies of test processes that are gone (`<pid>-<n>` of a pid not running).
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.split_once('-')).map(|(pid, _)| pid.to_owned());
        if let Some(pid) = pid
            && !Path::new("/proc").join(&pid).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
