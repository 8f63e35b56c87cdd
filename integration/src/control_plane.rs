//! The pinned real `kube-apiserver` and `etcd`, built once from the Go module proxy and cached.
//!
//! [`ensure_built`] (what `cargo xtask control-plane` runs) builds both binaries with `go build`
//! in throw-away wrapper modules outside the repository and moves them into [`cache_dir`].
//! Tests only call [`binaries`], which never builds: building takes many minutes, so a test that
//! silently started a build would look hung. The recipe of the cache is [`crate::cache`]'s.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail, ensure};

use crate::cache::{self, CachedSet, Override};
pub use crate::go::version_of;
use crate::go::{self, run};

/// The Kubernetes release whose `kube-apiserver` we build (matches the `v1_35` k8s-openapi feature).
pub const KUBERNETES_VERSION: &str = "v1.35.4";

/// The tag of the `k8s.io/*` staging modules (`k8s.io/api`, `k8s.io/apiserver`, ...) released
/// together with [`KUBERNETES_VERSION`].
///
/// `k8s.io/kubernetes` points those modules at `./staging/...` directories with `replace`
/// lines, which do not work from outside its repository, so the wrapper module replaces each of
/// them with this published tag instead.
pub const STAGING_VERSION: &str = "v0.35.4";

/// A Kubernetes release the tests build components of: its version and the tag of its
/// staging modules (see [`STAGING_VERSION`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    /// `k8s.io/kubernetes`'s version, e.g. `v1.35.4`.
    pub kubernetes: &'static str,
    /// The staging modules' tag, e.g. `v0.35.4`.
    pub staging: &'static str,
}

/// The release the test control plane and the real nodes run, and test builds carry.
pub const CURRENT: Release = Release { kubernetes: KUBERNETES_VERSION, staging: STAGING_VERSION };

/// The minor before [`CURRENT`]: what the builds an upgrade scenario starts from carry
/// ([`crate::release_binaries`]).
pub const PREVIOUS: Release = Release { kubernetes: "v1.34.4", staging: "v0.34.4" };

/// The etcd release we build (`go.etcd.io/etcd/server/v3`).
pub const ETCD_VERSION: &str = "v3.6.16";

/// Environment variable that overrides [`cache_dir`] (the whole directory, versions included).
pub const CACHE_DIR_ENV: &str = "K0S_CONTROL_PLANE_CACHE";

/// Paths of the two cached control-plane binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    /// `kube-apiserver` built from `k8s.io/kubernetes` at [`KUBERNETES_VERSION`].
    pub kube_apiserver: PathBuf,
    /// `etcd` built from `go.etcd.io/etcd/server/v3` at [`ETCD_VERSION`].
    pub etcd: PathBuf,
}

impl Binaries {
    /// Where the binaries live inside a cache directory (whether or not they exist yet).
    fn in_dir(dir: &Path) -> Self {
        let bin = dir.join("bin");
        Self { kube_apiserver: bin.join("kube-apiserver"), etcd: bin.join("etcd") }
    }
}

/// The cache directory for the pinned versions: `$K0S_CONTROL_PLANE_CACHE` if set, otherwise
/// `~/.cache/k0s-autopilot/control-plane/k8s-<version>-etcd-<version>/` (`$XDG_CACHE_HOME`
/// is honoured). The binaries live in its `bin/`.
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    let versions = format!("k8s-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}");
    cache::dir(CACHE_DIR_ENV, Override::Dir, "control-plane", &versions)
}

/// What the stamp file says: the versions the cached binaries were built from.
fn stamp_contents() -> String {
    format!("kubernetes={KUBERNETES_VERSION}\nstaging={STAGING_VERSION}\netcd={ETCD_VERSION}\n")
}

/// The cached set of the two binaries, and their paths.
fn cached_set() -> anyhow::Result<(CachedSet, Binaries)> {
    let dir = cache_dir()?;
    let binaries = Binaries::in_dir(&dir);
    let set = CachedSet {
        name: "control plane".to_owned(),
        pinned: format!("kube-apiserver {KUBERNETES_VERSION}, etcd {ETCD_VERSION}"),
        part: "control-plane",
        dir,
        stamp: stamp_contents(),
        entries: vec![binaries.kube_apiserver.clone(), binaries.etcd.clone()],
    };
    Ok((set, binaries))
}

/// The cached binaries, without building anything.
///
/// Fails with a message telling the reader to run `cargo xtask control-plane` when the cache
/// is missing or incomplete.
pub fn binaries() -> anyhow::Result<Binaries> {
    let (set, binaries) = cached_set()?;
    set.cached()?;
    Ok(binaries)
}

/// Builds the pinned binaries into [`cache_dir`] unless they are already there, and returns them.
///
/// Needs `go` on `PATH` and access to the Go module proxy. The Go toolchain's output is
/// streamed to this process's stdout/stderr; a build from scratch takes many minutes. Each
/// binary is built under a temporary name and renamed into place, and the stamp is written
/// only once both exist, so an interrupted run leaves nothing half-written behind and the next
/// run resumes with the missing binary.
pub fn ensure_built() -> anyhow::Result<Binaries> {
    let (set, binaries) = cached_set()?;
    set.ensure(|missing| {
        go::check_installed()?;
        if missing.contains(&binaries.kube_apiserver) {
            build_kube_apiserver(&binaries.kube_apiserver)?;
        }
        if missing.contains(&binaries.etcd) {
            build_etcd(&binaries.etcd)?;
        }
        Ok(())
    })?;
    Ok(binaries)
}

/// Builds `k8s.io/kubernetes/cmd/kube-apiserver` at [`KUBERNETES_VERSION`] into `dest`.
fn build_kube_apiserver(dest: &Path) -> anyhow::Result<()> {
    build_kubernetes(CURRENT, "apiserver", &[("k8s.io/kubernetes/cmd/kube-apiserver", dest)])
}

/// Builds each `(package, dest)` of `k8s.io/kubernetes` at `release` in one wrapper module
/// named after `what` (one `go mod tidy`, then one `go build` per package; the Go build
/// cache shares what they have in common).
pub(crate) fn build_kubernetes(
    release: Release,
    what: &str,
    packages: &[(&str, &Path)],
) -> anyhow::Result<()> {
    let Release { kubernetes, staging: staging_version } = release;
    let work = go::work_dir(what)?;
    let work = work.path();
    let names: Vec<&str> = packages.iter().map(|(package, _)| *package).collect();
    println!(
        "==> building {} {kubernetes} in {} (this takes several minutes)",
        names.join(", "),
        work.display()
    );

    let upstream = format!("k8s.io/kubernetes@{kubernetes}");
    let upstream_go_mod = go::download(work, &upstream)?.go_mod;
    let upstream_go_mod = fs::read_to_string(&upstream_go_mod)
        .with_context(|| format!("reading {}", upstream_go_mod.display()))?;
    let staging = staging_modules(&upstream_go_mod);
    ensure!(
        !staging.is_empty(),
        "found no `=> ./staging/...` replace lines in the go.mod of {upstream}"
    );
    println!("==> replacing {} staging modules with {staging_version}", staging.len());

    fs::write(work.join("go.mod"), kubernetes_go_mod(release, what, &staging))?;
    fs::write(work.join("tools.go"), go::tools_file(&names))?;
    run(go::command(work).args(["mod", "tidy"]), &format!("go mod tidy ({what})"))?;

    let ldflags = kubernetes_ldflags(release)?;
    for (package, dest) in packages {
        go::build(work, package, &["-v", "-trimpath", "-ldflags", &ldflags], dest, |binary| {
            go::reports(binary, &["--version"], kubernetes)
        })?;
    }
    Ok(())
}

/// `-s -w` and the version variables of `k8s.io/component-base` that a release build of
/// Kubernetes sets, for `release` (a module build has no VCS stamp to read them from).
pub(crate) fn kubernetes_ldflags(release: Release) -> anyhow::Result<String> {
    let kubernetes = release.kubernetes;
    let (major, minor) = major_minor(kubernetes)?;
    let version = "k8s.io/component-base/version";
    Ok(format!(
        "-s -w -X {version}.gitVersion={kubernetes} -X {version}.gitMajor={major} \
         -X {version}.gitMinor={minor} -X {version}.gitTreeState=clean"
    ))
}

/// Builds `go.etcd.io/etcd/server/v3` (etcd's main package) at [`ETCD_VERSION`] into `dest`.
fn build_etcd(dest: &Path) -> anyhow::Result<()> {
    let work = go::work_dir("etcd")?;
    let work = work.path();
    println!("==> building etcd {ETCD_VERSION} in {}", work.display());
    let go_mod = format!(
        "module k0sautopilot/controlplane/etcd\n\ngo 1.25\n\n\
         require go.etcd.io/etcd/server/v3 {ETCD_VERSION}\n"
    );
    fs::write(work.join("go.mod"), go_mod)?;
    fs::write(work.join("tools.go"), go::tools_file(&["go.etcd.io/etcd/server/v3"]))?;
    run(go::command(work).args(["mod", "tidy"]), "go mod tidy (etcd)")?;
    let version = ETCD_VERSION.trim_start_matches('v');
    go::build(
        work,
        "go.etcd.io/etcd/server/v3",
        &["-v", "-trimpath", "-ldflags", "-s -w"],
        dest,
        |binary| go::reports(binary, &["--version"], version),
    )
}

/// The module paths that `k8s.io/kubernetes`'s go.mod replaces with `./staging/...`
/// directories, in file order. Handles both `replace (...)` blocks and single-line replaces.
fn staging_modules(go_mod: &str) -> Vec<String> {
    go_mod
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("replace").map(str::trim_start).unwrap_or(line);
            let (from, to) = line.split_once("=>")?;
            if !to.trim().starts_with("./staging/") {
                return None;
            }
            // The left side may carry a version (`k8s.io/api v0.0.0 => ...`); keep the path.
            let module = from.split_whitespace().next()?;
            module.starts_with("k8s.io/").then(|| module.to_owned())
        })
        .collect()
}

/// The go.mod of the wrapper module `what` over `k8s.io/kubernetes` at `release`.
fn kubernetes_go_mod(release: Release, what: &str, staging: &[String]) -> String {
    let Release { kubernetes, staging: tag } = release;
    let mut go_mod = format!(
        "module k0sautopilot/controlplane/{what}\n\ngo 1.25\n\n\
         require k8s.io/kubernetes {kubernetes}\n\n"
    );
    for module in staging {
        go_mod.push_str(&format!("replace {module} => {module} {tag}\n"));
    }
    go_mod
}

/// `("1", "35")` for `"v1.35.4"`.
fn major_minor(version: &str) -> anyhow::Result<(&str, &str)> {
    let mut parts = version.trim_start_matches('v').split('.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => Ok((major, minor)),
        _ => bail!("cannot parse major.minor from {version:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_modules_are_read_from_replace_blocks_and_single_lines() {
        let go_mod = "module k8s.io/kubernetes\n\nrequire (\n\tk8s.io/api v0.0.0\n)\n\n\
                      replace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\
                      \tk8s.io/apiserver v0.0.0 => ./staging/src/k8s.io/apiserver\n\
                      \tgithub.com/x/y => github.com/x/z v1.0.0\n)\n\
                      replace k8s.io/kubectl => ./staging/src/k8s.io/kubectl\n";
        assert_eq!(staging_modules(go_mod), ["k8s.io/api", "k8s.io/apiserver", "k8s.io/kubectl"]);
    }

    #[test]
    fn apiserver_go_mod_pins_every_staging_module_to_the_staging_version() {
        let go_mod = kubernetes_go_mod(CURRENT, "apiserver", &["k8s.io/api".to_owned()]);
        assert!(go_mod.contains(&format!("require k8s.io/kubernetes {KUBERNETES_VERSION}\n")));
        assert!(go_mod.contains(&format!("replace k8s.io/api => k8s.io/api {STAGING_VERSION}\n")));
    }

    #[test]
    fn major_minor_reads_the_kubernetes_version() {
        assert_eq!(major_minor("v1.35.4").unwrap(), ("1", "35"));
    }
}
