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

use crate::{control_plane, node_binaries};

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

/// The pinned components of `set`, from the caches (never builds: `cargo xtask
/// control-plane` does).
pub fn pinned(set: Set) -> anyhow::Result<Vec<Pinned>> {
    let node = node_binaries::binaries()?;
    let k8s = control_plane::KUBERNETES_VERSION;
    let containerd = node_binaries::CONTAINERD_VERSION;
    let mut out = vec![
        Pinned { name: "containerd", version: containerd, path: node.containerd },
        Pinned { name: "containerd-shim-runc-v2", version: containerd, path: node.containerd_shim },
        Pinned { name: "kubelet", version: k8s, path: node.kubelet },
    ];
    if set == Set::All {
        let control = control_plane::binaries()?;
        out.extend([
            Pinned { name: "kube-apiserver", version: k8s, path: control.kube_apiserver },
            Pinned {
                name: "kube-controller-manager",
                version: k8s,
                path: node.kube_controller_manager,
            },
            Pinned { name: "kube-scheduler", version: k8s, path: node.kube_scheduler },
        ]);
    }
    Ok(out)
}

/// Packs `set` onto a copy of `binary` (any set it carries replaced) at `out`.
pub fn pack(binary: &Path, set: Set, out: &Path) -> anyhow::Result<carried::CarriedSet> {
    let pinned = pinned(set)?;
    let sources: Vec<Source<'_>> =
        pinned.iter().map(|p| Source { name: p.name, version: p.version, path: &p.path }).collect();
    carried::pack(binary, &sources, out)
        .with_context(|| format!("packing the {} components onto {}", set.key(), binary.display()))
}

/// A copy of `binary` carrying `set`: `<target>/k0s-carrying/<set>/<name>-<n>/k0s`, packed once
/// per binary and set in this test process.
pub fn carrying(binary: &Path, set: Set) -> anyhow::Result<PathBuf> {
    static PACKED: Mutex<BTreeMap<(PathBuf, Set), PathBuf>> = Mutex::new(BTreeMap::new());
    let mut packed = PACKED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = packed.get(&(binary.to_path_buf(), set)) {
        return Ok(path.clone());
    }
    let parent = crate::k0s::target_dir()?.join("k0s-carrying").join(set.key());
    remove_stale(&parent);
    let dir = parent.join(format!("{}-{}", std::process::id(), packed.len()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let out = dir.join("k0s");
    pack(binary, set, &out)?;
    packed.insert((binary.to_path_buf(), set), out.clone());
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
