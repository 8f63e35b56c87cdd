//! The pinned binaries of real nodes and of the control plane's workload half: `kubelet`,
//! `kube-controller-manager` and `kube-scheduler` from the same `k8s.io/kubernetes` release
//! as the API server, and `containerd` (with its runc shim and `ctr`) from the Go module
//! proxy; built once and cached like the API server and Prometheus.
//!
//! [`ensure_built`] (run by `cargo xtask control-plane`, so by `.ci/run` and `cargo xtask
//! test`) builds them in throw-away wrapper modules outside the repository and moves each into
//! [`cache_dir`]`/bin/` under a temporary name first; the stamp is written last. Tests only
//! call [`binaries`], which never builds.
//!
//! What the node needs from the machine besides these (Debian packages `.ci/run` installs):
//! `runc` (it needs cgo and libseccomp, so it is not built here), the CNI plugins in
//! [`CNI_BIN_DIR`] (`containernetworking-plugins`) and a static busybox
//! (`busybox-static`) that the harness packs into the nodes' images.

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::cache::{self, CachedSet, Override};
use crate::control_plane::{KUBERNETES_VERSION, STAGING_VERSION, build_kubernetes};
use crate::go::{self, run};

/// The containerd release the nodes run (the 2.2 line still supports cgroup v1, which the
/// machines the tests run on have).
pub const CONTAINERD_VERSION: &str = "v2.2.9";

/// The Go module containerd is built from.
const CONTAINERD_MODULE: &str = "github.com/containerd/containerd/v2";

/// containerd's build tags: none of the snapshotters that need cgo or kernel features the
/// nodes do not use (they use overlayfs).
const CONTAINERD_TAGS: &str = "no_btrfs,no_devmapper,no_zfs";

/// Where Debian's `containernetworking-plugins` puts the CNI plugins.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// Environment variable that overrides [`cache_dir`] (the whole directory, versions included).
pub const CACHE_DIR_ENV: &str = "K0S_NODE_BINARIES_CACHE";

/// Paths of the cached binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeBinaries {
    /// `kubelet` at [`KUBERNETES_VERSION`].
    pub kubelet: PathBuf,
    /// `kube-controller-manager` at [`KUBERNETES_VERSION`].
    pub kube_controller_manager: PathBuf,
    /// `kube-scheduler` at [`KUBERNETES_VERSION`].
    pub kube_scheduler: PathBuf,
    /// `containerd` at [`CONTAINERD_VERSION`].
    pub containerd: PathBuf,
    /// `containerd-shim-runc-v2` at [`CONTAINERD_VERSION`] (first on containerd's `PATH`).
    pub containerd_shim: PathBuf,
    /// `ctr` at [`CONTAINERD_VERSION`] (imports the nodes' images).
    pub ctr: PathBuf,
}

impl NodeBinaries {
    fn in_dir(dir: &Path) -> Self {
        let bin = dir.join("bin");
        Self {
            kubelet: bin.join("kubelet"),
            kube_controller_manager: bin.join("kube-controller-manager"),
            kube_scheduler: bin.join("kube-scheduler"),
            containerd: bin.join("containerd"),
            containerd_shim: bin.join("containerd-shim-runc-v2"),
            ctr: bin.join("ctr"),
        }
    }

    fn kubernetes(&self) -> [(&'static str, &Path); 3] {
        [
            ("k8s.io/kubernetes/cmd/kubelet", &self.kubelet),
            ("k8s.io/kubernetes/cmd/kube-controller-manager", &self.kube_controller_manager),
            ("k8s.io/kubernetes/cmd/kube-scheduler", &self.kube_scheduler),
        ]
    }

    fn containerd(&self) -> [(&'static str, &Path, &'static str); 3] {
        [
            ("cmd/containerd", &self.containerd, "--version"),
            ("cmd/containerd-shim-runc-v2", &self.containerd_shim, "-v"),
            ("cmd/ctr", &self.ctr, "--version"),
        ]
    }

    fn all(&self) -> [&Path; 6] {
        [
            &self.kubelet,
            &self.kube_controller_manager,
            &self.kube_scheduler,
            &self.containerd,
            &self.containerd_shim,
            &self.ctr,
        ]
    }
}

/// The cache directory: `$K0S_NODE_BINARIES_CACHE` if set, otherwise
/// `~/.cache/k0s-autopilot/node/k8s-<version>-containerd-<version>/`.
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    let versions = format!("k8s-{KUBERNETES_VERSION}-containerd-{CONTAINERD_VERSION}");
    cache::dir(CACHE_DIR_ENV, Override::Dir, "node", &versions)
}

/// What the stamp file says: the versions and containerd's build tags.
fn stamp_contents() -> String {
    format!(
        "kubernetes={KUBERNETES_VERSION}\nstaging={STAGING_VERSION}\n\
         containerd={CONTAINERD_VERSION}\ntags={CONTAINERD_TAGS}\n"
    )
}

/// The cached set of the node binaries, and their paths.
fn cached_set() -> anyhow::Result<(CachedSet, NodeBinaries)> {
    let dir = cache_dir()?;
    let binaries = NodeBinaries::in_dir(&dir);
    let set = CachedSet {
        name: "node binaries".to_owned(),
        pinned: format!(
            "kubelet, kube-controller-manager, kube-scheduler {KUBERNETES_VERSION}, containerd \
             {CONTAINERD_VERSION}"
        ),
        part: "node",
        dir,
        stamp: stamp_contents(),
        entries: binaries.all().map(Path::to_path_buf).to_vec(),
    };
    Ok((set, binaries))
}

/// The cached binaries, without building anything; fails with the hint to run `cargo xtask
/// control-plane` when they are missing.
pub fn binaries() -> anyhow::Result<NodeBinaries> {
    let (set, binaries) = cached_set()?;
    set.cached()?;
    Ok(binaries)
}

/// Builds the binaries into [`cache_dir`] unless they are there, and returns them. A binary
/// already in place is kept (an interrupted run resumes with the missing ones).
pub fn ensure_built() -> anyhow::Result<NodeBinaries> {
    let (set, binaries) = cached_set()?;
    set.ensure(|missing| {
        go::check_installed()?;
        let is_missing = |dest: &Path| missing.iter().any(|m| m == dest);
        let kubernetes: Vec<(&str, &Path)> =
            binaries.kubernetes().into_iter().filter(|(_, dest)| is_missing(dest)).collect();
        if !kubernetes.is_empty() {
            build_kubernetes(crate::control_plane::CURRENT, "node", &kubernetes)?;
        }
        let containerd: Vec<_> =
            binaries.containerd().into_iter().filter(|(_, dest, _)| is_missing(dest)).collect();
        if !containerd.is_empty() {
            build_containerd(&containerd)?;
        }
        Ok(())
    })?;
    Ok(binaries)
}

/// Builds each `(cmd, dest, version flag)` of containerd at [`CONTAINERD_VERSION`] in one
/// wrapper module (one `go mod tidy`, then one `go build` per command).
fn build_containerd(commands: &[(&str, &Path, &str)]) -> anyhow::Result<()> {
    let work = go::work_dir("containerd")?;
    let work = work.path();
    println!("==> building containerd {CONTAINERD_VERSION} in {}", work.display());
    let go_mod = format!(
        "module k0sautopilot/node/containerd\n\ngo 1.25\n\n\
         require {CONTAINERD_MODULE} {CONTAINERD_VERSION}\n"
    );
    fs::write(work.join("go.mod"), go_mod)?;
    let packages: Vec<String> =
        commands.iter().map(|(cmd, _, _)| format!("{CONTAINERD_MODULE}/{cmd}")).collect();
    let package_refs: Vec<&str> = packages.iter().map(String::as_str).collect();
    fs::write(work.join("tools.go"), go::tools_file(&package_refs))?;
    run(go::command(work).args(["mod", "tidy"]), "go mod tidy (containerd)")?;
    let ldflags = format!("-s -w -X {CONTAINERD_MODULE}/version.Version={CONTAINERD_VERSION}");
    let flags = ["-trimpath", "-tags", CONTAINERD_TAGS, "-ldflags", &ldflags];
    for ((_, dest, version_flag), package) in commands.iter().zip(&packages) {
        go::build(work, package, &flags, dest, |binary| {
            go::reports(binary, &[version_flag], CONTAINERD_VERSION)
        })?;
    }
    Ok(())
}
