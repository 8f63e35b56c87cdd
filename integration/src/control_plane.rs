//! The pinned real `kube-apiserver` and `etcd`, built once from the Go module proxy and cached.
//!
//! [`ensure_built`] (what `cargo xtask control-plane` runs) builds both binaries with `go build`
//! in throw-away wrapper modules outside the repository and moves them into [`cache_dir`].
//! Tests only call [`binaries`], which never builds: building takes many minutes, so a test that
//! silently started a build would look hung.

use std::{
    env, fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail, ensure};

/// The Kubernetes release whose `kube-apiserver` we build (matches the `v1_35` k8s-openapi feature).
pub const KUBERNETES_VERSION: &str = "v1.35.4";

/// The tag of the `k8s.io/*` staging modules (`k8s.io/api`, `k8s.io/apiserver`, ...) released
/// together with [`KUBERNETES_VERSION`].
///
/// `k8s.io/kubernetes` points those modules at `./staging/...` directories with `replace`
/// lines, which do not work from outside its repository, so the wrapper module replaces each of
/// them with this published tag instead.
pub const STAGING_VERSION: &str = "v0.35.4";

/// The etcd release we build (`go.etcd.io/etcd/server/v3`).
pub const ETCD_VERSION: &str = "v3.6.16";

/// Environment variable that overrides [`cache_dir`] (the whole directory, versions included).
pub const CACHE_DIR_ENV: &str = "K0S_CONTROL_PLANE_CACHE";

/// Name of the file in [`cache_dir`] that marks a complete build; see [`stamp_contents`].
const STAMP_FILE: &str = "stamp";

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

    fn both_exist(&self) -> bool {
        self.kube_apiserver.is_file() && self.etcd.is_file()
    }
}

/// The cache directory for the pinned versions: `$K0S_CONTROL_PLANE_CACHE` if set, otherwise
/// `~/.cache/k0s-autopilot/control-plane/k8s-<version>-etcd-<version>/` (`$XDG_CACHE_HOME`
/// is honoured). The binaries live in its `bin/`.
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    Ok(cache_root(CACHE_DIR_ENV)?
        .join("control-plane")
        .join(format!("k8s-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}")))
}

/// `$XDG_CACHE_HOME/k0s-autopilot`, or `~/.cache/k0s-autopilot`: where the pinned Go binaries
/// of the test topology are cached. `override_env` names the variable that would have
/// overridden the whole directory (for the error when neither HOME nor it is set).
pub(crate) fn cache_root(override_env: &str) -> anyhow::Result<PathBuf> {
    let base = match env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .with_context(|| format!("neither {override_env} nor HOME is set"))?;
            PathBuf::from(home).join(".cache")
        }
    };
    Ok(base.join("k0s-autopilot"))
}

/// What the stamp file says: the versions the cached binaries were built from.
fn stamp_contents() -> String {
    format!("kubernetes={KUBERNETES_VERSION}\nstaging={STAGING_VERSION}\netcd={ETCD_VERSION}\n")
}

/// The cached binaries, without building anything.
///
/// Fails with a message telling the reader to run `cargo xtask control-plane` when the cache
/// is missing or incomplete.
pub fn binaries() -> anyhow::Result<Binaries> {
    let dir = cache_dir()?;
    let binaries = Binaries::in_dir(&dir);
    let stamp = fs::read_to_string(dir.join(STAMP_FILE)).ok();
    if stamp.as_deref() == Some(stamp_contents().as_str()) && binaries.both_exist() {
        return Ok(binaries);
    }
    bail!(
        "the pinned control plane (kube-apiserver {KUBERNETES_VERSION}, etcd {ETCD_VERSION}) \
         is not built in {}: run `cargo xtask control-plane` first",
        dir.display()
    )
}

/// Builds the pinned binaries into [`cache_dir`] unless they are already there, and returns them.
///
/// Needs `go` on `PATH` and access to the Go module proxy. The Go toolchain's output is
/// streamed to this process's stdout/stderr; a build from scratch takes many minutes. Each
/// binary is built under a temporary name and renamed into place, and the stamp is written
/// only once both exist, so an interrupted run leaves nothing half-written behind and the next
/// run resumes with the missing binary.
pub fn ensure_built() -> anyhow::Result<Binaries> {
    let dir = cache_dir()?;
    if let Ok(binaries) = binaries() {
        println!("control plane cached at {}", dir.display());
        return Ok(binaries);
    }
    let binaries = Binaries::in_dir(&dir);
    let stamp = dir.join(STAMP_FILE);
    if let Ok(old) = fs::read_to_string(&stamp)
        && old != stamp_contents()
    {
        // Someone pointed K0S_CONTROL_PLANE_CACHE at a cache of other versions: start over.
        println!("==> {} holds other versions; rebuilding", dir.display());
        for path in [&stamp, &binaries.kube_apiserver, &binaries.etcd] {
            remove_if_exists(path)?;
        }
    }
    let bin_dir = dir.join("bin");
    fs::create_dir_all(&bin_dir).with_context(|| format!("creating {}", bin_dir.display()))?;
    check_go()?;

    if binaries.kube_apiserver.is_file() {
        println!("==> kube-apiserver already built at {}", binaries.kube_apiserver.display());
    } else {
        build_kube_apiserver(&binaries.kube_apiserver)?;
    }
    if binaries.etcd.is_file() {
        println!("==> etcd already built at {}", binaries.etcd.display());
    } else {
        build_etcd(&binaries.etcd)?;
    }

    ensure!(binaries.both_exist(), "the build finished but the binaries are missing");
    write_atomically(&stamp, stamp_contents().as_bytes())?;
    println!("control plane built at {}", dir.display());
    Ok(binaries)
}

/// Runs `<binary> --version` and returns its first line (for `cargo xtask control-plane`).
pub fn version_of(binary: &Path) -> anyhow::Result<String> {
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} --version", binary.display()))?;
    ensure!(
        output.status.success(),
        "{} --version failed ({}): {}",
        binary.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    Ok(stdout.lines().next().unwrap_or_default().trim().to_owned())
}

pub(crate) fn check_go() -> anyhow::Result<()> {
    let output = Command::new("go")
        .arg("version")
        .stdin(Stdio::null())
        .output()
        .context("running `go version`: building the control plane needs Go on PATH")?;
    ensure!(output.status.success(), "`go version` failed: {}", output.status);
    println!("==> using {}", String::from_utf8_lossy(&output.stdout).trim());
    Ok(())
}

/// Builds `k8s.io/kubernetes/cmd/kube-apiserver` at [`KUBERNETES_VERSION`] into `dest`.
fn build_kube_apiserver(dest: &Path) -> anyhow::Result<()> {
    build_kubernetes("apiserver", &[("k8s.io/kubernetes/cmd/kube-apiserver", dest)])
}

/// Builds each `(package, dest)` of `k8s.io/kubernetes` at [`KUBERNETES_VERSION`] in one
/// wrapper module named after `what` (one `go mod tidy`, then one `go build` per package;
/// the Go build cache shares what they have in common).
pub(crate) fn build_kubernetes(what: &str, packages: &[(&str, &Path)]) -> anyhow::Result<()> {
    let work = work_dir(what)?;
    let work = work.path();
    let names: Vec<&str> = packages.iter().map(|(package, _)| *package).collect();
    println!(
        "==> building {} {KUBERNETES_VERSION} in {} (this takes several minutes)",
        names.join(", "),
        work.display()
    );

    let upstream = format!("k8s.io/kubernetes@{KUBERNETES_VERSION}");
    let upstream_go_mod = go_mod_of(work, &upstream)?;
    let upstream_go_mod = fs::read_to_string(&upstream_go_mod)
        .with_context(|| format!("reading {}", upstream_go_mod.display()))?;
    let staging = staging_modules(&upstream_go_mod);
    ensure!(
        !staging.is_empty(),
        "found no `=> ./staging/...` replace lines in the go.mod of {upstream}"
    );
    println!("==> replacing {} staging modules with {STAGING_VERSION}", staging.len());

    fs::write(work.join("go.mod"), kubernetes_go_mod(what, &staging))?;
    fs::write(work.join("tools.go"), tools_go_all(&names))?;
    run(go(work).args(["mod", "tidy"]), &format!("go mod tidy ({what})"))?;

    let (major, minor) = major_minor(KUBERNETES_VERSION)?;
    let ldflags = format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION} \
         -X k8s.io/component-base/version.gitMajor={major} \
         -X k8s.io/component-base/version.gitMinor={minor} \
         -X k8s.io/component-base/version.gitTreeState=clean"
    );
    for (package, dest) in packages {
        go_build(work, &ldflags, package, dest, KUBERNETES_VERSION)?;
    }
    Ok(())
}

/// Builds `go.etcd.io/etcd/server/v3` (etcd's main package) at [`ETCD_VERSION`] into `dest`.
fn build_etcd(dest: &Path) -> anyhow::Result<()> {
    let work = work_dir("etcd")?;
    let work = work.path();
    println!("==> building etcd {ETCD_VERSION} in {}", work.display());
    let go_mod = format!(
        "module k0sautopilot/controlplane/etcd\n\ngo 1.25\n\n\
         require go.etcd.io/etcd/server/v3 {ETCD_VERSION}\n"
    );
    fs::write(work.join("go.mod"), go_mod)?;
    fs::write(work.join("tools.go"), tools_go("go.etcd.io/etcd/server/v3"))?;
    run(go(work).args(["mod", "tidy"]), "go mod tidy (etcd)")?;
    let version = ETCD_VERSION.trim_start_matches('v');
    go_build(work, "-s -w", "go.etcd.io/etcd/server/v3", dest, version)
}

/// `go build`s `package` to a temporary name next to `dest`, checks that `--version` mentions
/// `expect_version`, then renames it into place (atomic: readers see no binary or a whole one).
pub(crate) fn go_build(
    work: &Path,
    ldflags: &str,
    package: &str,
    dest: &Path,
    expect_version: &str,
) -> anyhow::Result<()> {
    let file_name = dest.file_name().context("binary path has no file name")?.to_string_lossy();
    let tmp = dest.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    let result = (|| {
        run(
            go(work)
                .args(["build", "-v", "-trimpath", "-ldflags", ldflags, "-o"])
                .arg(&tmp)
                .arg(package),
            &format!("go build {package}"),
        )?;
        let version = version_of(&tmp)?;
        ensure!(
            version.contains(expect_version),
            "built {package} reports version {version:?}, expected {expect_version}"
        );
        fs::rename(&tmp, dest)
            .with_context(|| format!("moving {} to {}", tmp.display(), dest.display()))?;
        println!("==> {version} -> {}", dest.display());
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Runs `go mod download -json <module@version>` and returns the path of that module's go.mod.
fn go_mod_of(work: &Path, module: &str) -> anyhow::Result<PathBuf> {
    println!("$ go mod download -json {module}");
    let output = go(work)
        .args(["mod", "download", "-json", module])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running go mod download {module}"))?;
    let info: serde_json::Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("parsing the output of go mod download {module}"))?;
    if let Some(error) = info.get("Error").and_then(|e| e.as_str()) {
        bail!("go mod download {module}: {error}");
    }
    ensure!(output.status.success(), "go mod download {module} failed: {}", output.status);
    let go_mod = info
        .get("GoMod")
        .and_then(|p| p.as_str())
        .with_context(|| format!("go mod download {module} printed no GoMod path"))?;
    Ok(PathBuf::from(go_mod))
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

/// The go.mod of the wrapper module `what` over `k8s.io/kubernetes`.
fn kubernetes_go_mod(what: &str, staging: &[String]) -> String {
    let mut go_mod = format!(
        "module k0sautopilot/controlplane/{what}\n\ngo 1.25\n\n\
         require k8s.io/kubernetes {KUBERNETES_VERSION}\n\n"
    );
    for module in staging {
        go_mod.push_str(&format!("replace {module} => {module} {STAGING_VERSION}\n"));
    }
    go_mod
}

/// A Go file that imports `package` so `go mod tidy` keeps its dependencies.
pub(crate) fn tools_go(package: &str) -> String {
    tools_go_all(&[package])
}

/// A Go file that imports every one of `packages` so `go mod tidy` keeps their dependencies.
pub(crate) fn tools_go_all(packages: &[&str]) -> String {
    let imports: String = packages.iter().map(|p| format!("\t_ \"{p}\"\n")).collect();
    format!("//go:build tools\n\npackage tools\n\nimport (\n{imports})\n")
}

/// `("1", "35")` for `"v1.35.4"`.
fn major_minor(version: &str) -> anyhow::Result<(&str, &str)> {
    let mut parts = version.trim_start_matches('v').split('.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => Ok((major, minor)),
        _ => bail!("cannot parse major.minor from {version:?}"),
    }
}

/// A temporary directory for one wrapper module (removed when dropped).
pub(crate) fn work_dir(what: &str) -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("k0s-control-plane-{what}-"))
        .tempdir()
        .context("creating a temporary build directory")
}

/// A `go` command running in `work` with cgo off and module mode on.
pub(crate) fn go(work: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(work).env("CGO_ENABLED", "0").env("GO111MODULE", "on").stdin(Stdio::null());
    cmd
}

/// Runs `cmd` with inherited stdout/stderr (so the Go toolchain's progress streams through).
pub(crate) fn run(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    println!("$ {what}");
    let status = cmd.status().with_context(|| format!("starting {what}"))?;
    ensure!(status.success(), "{what} failed: {status}");
    Ok(())
}

pub(crate) fn remove_if_exists(path: &Path) -> anyhow::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err).with_context(|| format!("removing {}", path.display())),
    }
}

pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    let mut file = fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(contents)?;
    file.sync_all()?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
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
        let go_mod = kubernetes_go_mod("apiserver", &["k8s.io/api".to_owned()]);
        assert!(go_mod.contains(&format!("require k8s.io/kubernetes {KUBERNETES_VERSION}\n")));
        assert!(go_mod.contains(&format!("replace k8s.io/api => k8s.io/api {STAGING_VERSION}\n")));
    }

    #[test]
    fn major_minor_reads_the_kubernetes_version() {
        assert_eq!(major_minor("v1.35.4").unwrap(), ("1", "35"));
    }
}
