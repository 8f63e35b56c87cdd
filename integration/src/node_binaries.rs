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
    env, fs,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, bail, ensure};

use crate::control_plane::{
    KUBERNETES_VERSION, STAGING_VERSION, build_kubernetes, cache_root, check_go, go,
    remove_if_exists, run, tools_go_all, work_dir, write_atomically,
};

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

/// Name of the file in [`cache_dir`] that marks a complete build.
const STAMP_FILE: &str = "stamp";

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
    if let Some(dir) = env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    Ok(cache_root(CACHE_DIR_ENV)?
        .join("node")
        .join(format!("k8s-{KUBERNETES_VERSION}-containerd-{CONTAINERD_VERSION}")))
}

fn stamp_contents() -> String {
    format!(
        "kubernetes={KUBERNETES_VERSION}\nstaging={STAGING_VERSION}\n\
         containerd={CONTAINERD_VERSION}\ntags={CONTAINERD_TAGS}\n"
    )
}

/// The cached binaries, without building anything; fails with the hint to run `cargo xtask
/// control-plane` when they are missing.
pub fn binaries() -> anyhow::Result<NodeBinaries> {
    let dir = cache_dir()?;
    let binaries = NodeBinaries::in_dir(&dir);
    let stamp = fs::read_to_string(dir.join(STAMP_FILE)).ok();
    if stamp.as_deref() == Some(stamp_contents().as_str())
        && binaries.all().iter().all(|b| b.is_file())
    {
        return Ok(binaries);
    }
    bail!(
        "the pinned node binaries (kubelet, kube-controller-manager, kube-scheduler \
         {KUBERNETES_VERSION}, containerd {CONTAINERD_VERSION}) are not built in {}: run `cargo \
         xtask control-plane` first (tests never build them)",
        dir.display()
    )
}

/// Builds the binaries into [`cache_dir`] unless they are there, and returns them. A binary
/// already in place is kept (an interrupted run resumes with the missing ones).
pub fn ensure_built() -> anyhow::Result<NodeBinaries> {
    let dir = cache_dir()?;
    if let Ok(binaries) = binaries() {
        println!("node binaries cached at {}", dir.display());
        return Ok(binaries);
    }
    let binaries = NodeBinaries::in_dir(&dir);
    let stamp = dir.join(STAMP_FILE);
    if let Ok(old) = fs::read_to_string(&stamp)
        && old != stamp_contents()
    {
        println!("==> {} holds other versions; rebuilding", dir.display());
        remove_if_exists(&stamp)?;
        for binary in binaries.all() {
            remove_if_exists(binary)?;
        }
    }
    let bin_dir = dir.join("bin");
    fs::create_dir_all(&bin_dir).with_context(|| format!("creating {}", bin_dir.display()))?;
    check_go()?;

    let started = Instant::now();
    let missing: Vec<(&str, &Path)> =
        binaries.kubernetes().into_iter().filter(|(_, dest)| !dest.is_file()).collect();
    if !missing.is_empty() {
        build_kubernetes("node", &missing)?;
    }
    if binaries.containerd().iter().any(|(_, dest, _)| !dest.is_file()) {
        build_containerd(&binaries)?;
    }
    ensure!(
        binaries.all().iter().all(|b| b.is_file()),
        "the build finished but some node binaries are missing"
    );
    write_atomically(&stamp, stamp_contents().as_bytes())?;
    println!("node binaries built at {} ({:.0?})", dir.display(), started.elapsed());
    Ok(binaries)
}

/// Builds containerd, its runc shim and `ctr` at [`CONTAINERD_VERSION`] in one wrapper module.
fn build_containerd(binaries: &NodeBinaries) -> anyhow::Result<()> {
    let work = work_dir("containerd")?;
    let work = work.path();
    println!("==> building containerd {CONTAINERD_VERSION} in {}", work.display());
    let go_mod = format!(
        "module k0sautopilot/node/containerd\n\ngo 1.25\n\n\
         require {CONTAINERD_MODULE} {CONTAINERD_VERSION}\n"
    );
    fs::write(work.join("go.mod"), go_mod)?;
    let packages: Vec<String> = binaries
        .containerd()
        .iter()
        .map(|(cmd, _, _)| format!("{CONTAINERD_MODULE}/{cmd}"))
        .collect();
    let package_refs: Vec<&str> = packages.iter().map(String::as_str).collect();
    fs::write(work.join("tools.go"), tools_go_all(&package_refs))?;
    run(go(work).args(["mod", "tidy"]), "go mod tidy (containerd)")?;
    let ldflags = format!("-s -w -X {CONTAINERD_MODULE}/version.Version={CONTAINERD_VERSION}");
    for ((_, dest, version_flag), package) in binaries.containerd().into_iter().zip(&packages) {
        if dest.is_file() {
            continue;
        }
        let name = dest.file_name().context("binary path has no file name")?.to_string_lossy();
        let tmp = dest.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let result = (|| {
            run(
                go(work)
                    .args(["build", "-trimpath", "-tags", CONTAINERD_TAGS, "-ldflags", &ldflags])
                    .arg("-o")
                    .arg(&tmp)
                    .arg(package),
                &format!("go build {package}"),
            )?;
            let output = std::process::Command::new(&tmp)
                .arg(version_flag)
                .stdin(std::process::Stdio::null())
                .output()
                .with_context(|| format!("running {} {version_flag}", tmp.display()))?;
            let version = String::from_utf8_lossy(&output.stdout);
            ensure!(
                version.contains(CONTAINERD_VERSION),
                "built {package} reports {:?}, expected {CONTAINERD_VERSION}",
                version.trim()
            );
            fs::rename(&tmp, dest)
                .with_context(|| format!("moving {} to {}", tmp.display(), dest.display()))?;
            println!("==> {} -> {}", version.trim(), dest.display());
            Ok(())
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
    }
    Ok(())
}
