//! Building the pinned Go programs of the test topology: a throw-away wrapper module outside
//! the repository per program ([`work_dir`], [`tools_file`]), `go` run in it with cgo off
//! ([`command`]), and [`build`], which puts one binary into place only once it is checked.
//!
//! What to build, and how a build is checked, is each program's own module's business
//! (`control_plane`, `node_binaries`, `prometheus`, `cosign`, `gitops`, `renovate`); where it
//! is cached is [`crate::cache`]'s.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail, ensure};

/// Checks that `go` is on `PATH`, and says which one builds.
pub(crate) fn check_installed() -> anyhow::Result<()> {
    let output = Command::new("go")
        .arg("version")
        .stdin(Stdio::null())
        .output()
        .context("running `go version`: building the pinned binaries needs Go on PATH")?;
    ensure!(output.status.success(), "`go version` failed: {}", output.status);
    println!("==> using {}", String::from_utf8_lossy(&output.stdout).trim());
    Ok(())
}

/// A temporary directory for one wrapper module (removed when dropped).
pub(crate) fn work_dir(what: &str) -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("k0s-control-plane-{what}-"))
        .tempdir()
        .context("creating a temporary build directory")
}

/// A Go file that imports every one of `packages` so `go mod tidy` keeps their dependencies.
pub(crate) fn tools_file(packages: &[&str]) -> String {
    let imports: String = packages.iter().map(|p| format!("\t_ \"{p}\"\n")).collect();
    format!("//go:build tools\n\npackage tools\n\nimport (\n{imports})\n")
}

/// A `go` command running in `work` with cgo off and module mode on.
pub(crate) fn command(work: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(work).env("CGO_ENABLED", "0").env("GO111MODULE", "on").stdin(Stdio::null());
    cmd
}

/// Runs `cmd` with inherited stdout/stderr (so the toolchain's progress streams through).
pub(crate) fn run(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    println!("$ {what}");
    let status = cmd.status().with_context(|| format!("starting {what}"))?;
    ensure!(status.success(), "{what} failed: {status}");
    Ok(())
}

/// Where `go mod download` put a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Downloaded {
    /// The module's source, in the (read-only) module cache.
    pub(crate) dir: PathBuf,
    /// Its `go.mod`.
    pub(crate) go_mod: PathBuf,
}

/// `go mod download -json <module@version>` in `work`: where the module's source and `go.mod`
/// are.
pub(crate) fn download(work: &Path, module: &str) -> anyhow::Result<Downloaded> {
    println!("$ go mod download -json {module}");
    let output = command(work)
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
    let path = |field: &str| {
        info.get(field)
            .and_then(|p| p.as_str())
            .map(PathBuf::from)
            .with_context(|| format!("go mod download {module} printed no {field} path"))
    };
    Ok(Downloaded { dir: path("Dir")?, go_mod: path("GoMod")? })
}

/// `go build <flags> -o <temporary name> <package>` in `work`, then `check` on the new binary,
/// then a rename to `dest` (creating its directory): readers see no binary or a whole, checked
/// one. `check` returns what the binary says of itself, for the log. On failure the temporary
/// file is removed and `dest` is left as it was.
pub(crate) fn build(
    work: &Path,
    package: &str,
    flags: &[&str],
    dest: &Path,
    check: impl FnOnce(&Path) -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let dir = dest.parent().context("the binary's path has no directory")?;
    let name = dest.file_name().context("the binary's path has no file name")?.to_string_lossy();
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        run(
            command(work).arg("build").args(flags).arg("-o").arg(&tmp).arg(package),
            &format!("go build -o {name} {package}"),
        )?;
        let reported = check(&tmp)?;
        fs::rename(&tmp, dest)
            .with_context(|| format!("moving {} to {}", tmp.display(), dest.display()))?;
        println!("==> {reported} -> {} ({:.0?})", dest.display(), started.elapsed());
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// `go version -m <binary>`: the module versions and build settings recorded in it.
pub(crate) fn build_info(work: &Path, binary: &Path) -> anyhow::Result<String> {
    let output = command(work)
        .args(["version", "-m"])
        .arg(binary)
        .output()
        .context("running go version -m")?;
    ensure!(output.status.success(), "go version -m failed: {}", output.status);
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether `go version -m` output `info` shows `module` at `version`, as the main module
/// (`mod`) or a dependency (`dep`).
pub(crate) fn shows_module(info: &str, module: &str, version: &str) -> bool {
    info.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        matches!(fields.as_slice(), ["mod" | "dep", m, v, ..] if *m == module && *v == version)
    })
}

/// Runs `binary <args>`, checks that it succeeds and that its stdout contains `expected`, and
/// returns the first line of that stdout (for the log).
pub(crate) fn reports(binary: &Path, args: &[&str], expected: &str) -> anyhow::Result<String> {
    let stdout = stdout_of(binary, args)?;
    ensure!(
        stdout.contains(expected),
        "{} {} reports {:?}, expected {expected}",
        binary.display(),
        args.join(" "),
        stdout.trim()
    );
    Ok(stdout.lines().next().unwrap_or_default().trim().to_owned())
}

/// Runs `<binary> --version` and returns its first line (for `cargo xtask control-plane`).
pub fn version_of(binary: &Path) -> anyhow::Result<String> {
    let stdout = stdout_of(binary, &["--version"])?;
    Ok(stdout.lines().next().unwrap_or_default().trim().to_owned())
}

/// The stdout of `binary <args>`, which must succeed.
fn stdout_of(binary: &Path, args: &[&str]) -> anyhow::Result<String> {
    let what = format!("{} {}", binary.display(), args.join(" "));
    let output = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    ensure!(
        output.status.success(),
        "{what} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_file_imports_every_package_for_go_mod_tidy() {
        assert_eq!(
            tools_file(&["a.example/x", "b.example/y"]),
            "//go:build tools\n\npackage tools\n\nimport (\n\t_ \"a.example/x\"\n\
             \t_ \"b.example/y\"\n)\n"
        );
    }

    #[test]
    fn the_build_info_shows_a_module_as_main_module_or_dependency() {
        let info = "/tmp/x: go1.26.8\n\tpath\texample.com/cmd/x\n\
                    \tmod\texample.com/main\tv1.0.0\th1:abc=\n\
                    \tdep\texample.com/dep\tv0.2.0\th1:def=\n\tbuild\t-tags=a\n";
        assert!(shows_module(info, "example.com/main", "v1.0.0"));
        assert!(shows_module(info, "example.com/dep", "v0.2.0"));
        assert!(!shows_module(info, "example.com/dep", "v0.2.1"), "another version");
        assert!(!shows_module(info, "example.com/cmd/x", "example.com/cmd/x"), "a path line");
    }

    #[test]
    fn a_failed_build_leaves_neither_the_binary_nor_its_temporary_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let dest = dir.path().join("bin").join("tool");
        let error = build(dir.path(), "./does-not-exist", &[], &dest, |_| Ok(String::new()))
            .expect_err("nothing to build");
        assert!(error.to_string().contains("go build -o tool ./does-not-exist"), "{error:#}");
        assert!(!dest.exists());
        let left: Vec<_> = fs::read_dir(dir.path().join("bin")).expect("bin/").collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
