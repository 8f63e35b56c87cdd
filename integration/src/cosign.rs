//! The real cosign for tests: the two pinned releases users sign k0s builds with (cosign 2
//! and cosign 3), built once and cached like Prometheus, and the commands the signing
//! scenario and `docs/security.md` run with them, offline with a key pair.
//!
//! # The binaries
//!
//! [`ensure_built`] (run by `cargo xtask control-plane`, so by `.ci/run` and `cargo xtask
//! test` too) builds `github.com/sigstore/cosign/v<N>/cmd/cosign` of each [`Release`] with `go
//! build` in a throw-away wrapper module outside the repository (one per release: the two
//! majors are different modules with different dependencies), checks it with `go version -m`
//! and `cosign version`, and moves it into `<cache>/<version>/bin/cosign` with a stamp. Tests
//! only call [`binary`], which never builds and fails with the hint to run `cargo xtask
//! control-plane`.
//!
//! # The commands
//!
//! Everything runs offline: no transparency log, no TUF root, no Fulcio. cosign 2 uploads
//! every signature to the public transparency log unless told `--tlog-upload=false` (it asks
//! for a `y` on the terminal first and fails without one); cosign 3 writes only bundles in
//! the new (protobuf-JSON) format unless told `--new-bundle-format=false`, and asks its TUF
//! root for a signing configuration unless told `--use-signing-config=false`. [`Cosign`]
//! holds the flags each release needs, and the docs' commands are these.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail, ensure};

use crate::cache::{self, CachedSet, Override};
use crate::go::{self, run};

/// One pinned cosign release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    /// The Go module (`github.com/sigstore/cosign/v2`).
    pub module: &'static str,
    /// The pinned version of [`Release::module`].
    pub version: &'static str,
    /// The `go` line of the wrapper module: the Go version the module's go.mod asks for.
    pub go_version: &'static str,
}

impl Release {
    /// The package of the command-line tool.
    fn package(self) -> String {
        format!("{}/cmd/cosign", self.module)
    }

    /// What the stamp file says: the module and version the cached binary was built from.
    fn stamp_contents(self) -> String {
        format!("{}={}\n", self.module, self.version)
    }
}

/// cosign 2: its `sign-blob --bundle` writes `{"base64Signature": …}`.
pub const COSIGN_2: Release =
    Release { module: "github.com/sigstore/cosign/v2", version: "v2.6.5", go_version: "1.25.0" };

/// cosign 3: its `sign-blob --bundle` writes a protobuf-JSON Sigstore bundle.
pub const COSIGN_3: Release =
    Release { module: "github.com/sigstore/cosign/v3", version: "v3.1.3", go_version: "1.26.0" };

/// Every release the harness builds.
pub const RELEASES: [Release; 2] = [COSIGN_2, COSIGN_3];

/// Environment variable that overrides the cache directory of every release: each lives in
/// its `<version>/` subdirectory.
pub const CACHE_DIR_ENV: &str = "K0S_COSIGN_CACHE";

/// The cache directory of `release`: `$K0S_COSIGN_CACHE/<version>/` if set, otherwise
/// `~/.cache/k0s-autopilot/cosign/<version>/` (`$XDG_CACHE_HOME` is honoured). The binary
/// lives in its `bin/`.
pub fn cache_dir(release: Release) -> anyhow::Result<PathBuf> {
    cache::dir(CACHE_DIR_ENV, Override::Parent, "cosign", release.version)
}

/// The cached set of `release`'s one binary, and its path.
fn cached_set(release: Release) -> anyhow::Result<(CachedSet, PathBuf)> {
    let dir = cache_dir(release)?;
    let binary = dir.join("bin").join("cosign");
    let set = CachedSet {
        name: format!("cosign {}", release.version),
        pinned: format!("{} {}", release.module, release.version),
        part: "cosign",
        dir,
        stamp: release.stamp_contents(),
        entries: vec![binary.clone()],
    };
    Ok((set, binary))
}

/// The cached binary of `release`, without building anything.
///
/// Fails with a message telling the reader to run `cargo xtask control-plane` when it is
/// missing or was built from another version.
pub fn binary(release: Release) -> anyhow::Result<PathBuf> {
    let (set, binary) = cached_set(release)?;
    set.cached()?;
    Ok(binary)
}

/// Builds every [`RELEASES`] binary that is not cached yet, and returns them in that order.
pub fn ensure_built() -> anyhow::Result<Vec<PathBuf>> {
    RELEASES.into_iter().map(ensure_release_built).collect()
}

/// Builds `release` into its [`cache_dir`] unless it is already there, and returns it.
///
/// Needs `go` on `PATH` and access to the Go module proxy. The binary is built under a
/// temporary name, checked, and renamed into place; the stamp is written last, so an
/// interrupted run leaves nothing half-written behind.
pub fn ensure_release_built(release: Release) -> anyhow::Result<PathBuf> {
    let (set, binary) = cached_set(release)?;
    set.ensure(|_| build(release, &binary))?;
    Ok(binary)
}

/// Builds `release` into `dest`, checked with `go version -m` and `cosign version`.
fn build(release: Release, dest: &Path) -> anyhow::Result<()> {
    go::check_installed()?;
    let work = go::work_dir(&format!("cosign-{}", release.version))?;
    let work = work.path();
    let Release { module, version, go_version } = release;
    println!(
        "==> building cosign {version} ({module}) in {} (this takes a few minutes)",
        work.display()
    );
    let go_mod = format!(
        "module k0sautopilot/testing/cosign\n\ngo {go_version}\n\nrequire {module} {version}\n"
    );
    fs::write(work.join("go.mod"), go_mod)?;
    let package = release.package();
    fs::write(work.join("tools.go"), go::tools_file(&[&package]))?;
    run(go::command(work).args(["mod", "tidy"]), &format!("go mod tidy (cosign {version})"))?;
    go::build(work, &package, &["-trimpath", "-ldflags", "-s -w"], dest, |binary| {
        check_build_info(release, &go::build_info(work, binary)?)?;
        let reported = git_version(binary)?;
        ensure!(reported == version, "the built cosign reports {reported:?}, expected {version}");
        Ok(format!("cosign {version}"))
    })
}

/// Checks that `go version -m` says the binary is `release`'s module at its version.
fn check_build_info(release: Release, info: &str) -> anyhow::Result<()> {
    let Release { module, version, .. } = release;
    ensure!(
        go::shows_module(info, module, version),
        "go version -m does not show {module} {version}:\n{info}"
    );
    Ok(())
}

/// The `GitVersion:` line of `cosign version` (the module version, read from the build
/// info).
pub fn git_version(binary: &Path) -> anyhow::Result<String> {
    let output = Command::new(binary)
        .arg("version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} version", binary.display()))?;
    ensure!(output.status.success(), "{} version failed: {}", binary.display(), output.status);
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| line.trim().strip_prefix("GitVersion:").map(|v| v.trim().to_owned()))
        .with_context(|| format!("`cosign version` printed no GitVersion line:\n{text}"))
}

// === the commands ===

/// One kind of file `cosign sign-blob` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// `--output-signature`: base64 of the DER signature.
    Sig,
    /// `--bundle`: cosign 2's `{"base64Signature": …}`, cosign 3's protobuf-JSON bundle.
    Bundle,
}

/// The cached binary of one release, and the offline commands run with it.
#[derive(Clone, Debug)]
pub struct Cosign {
    release: Release,
    binary: PathBuf,
}

impl Cosign {
    /// The cached binary of `release` ([`binary`]: never builds).
    pub fn cached(release: Release) -> anyhow::Result<Self> {
        Ok(Self { release, binary: binary(release)? })
    }

    /// The release.
    pub fn release(&self) -> Release {
        self.release
    }

    /// `cosign generate-key-pair` in `dir`, with an empty password: `(cosign.key, cosign.pub)`.
    pub fn generate_key_pair(&self, dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
        self.run(dir, &["generate-key-pair"])?;
        Ok((dir.join("cosign.key"), dir.join("cosign.pub")))
    }

    /// The arguments of `cosign sign-blob` for `output` written to `out`, offline: what
    /// `docs/security.md` gives for this release.
    pub fn sign_blob_args(&self, output: Output, out: &Path) -> Vec<String> {
        let offline: &[&str] = match (self.release.version.starts_with("v2."), output) {
            // cosign 2 would upload to the public transparency log.
            (true, _) => &["--tlog-upload=false"],
            // cosign 3 would fetch a signing configuration from its TUF root first.
            (false, Output::Bundle) => &["--use-signing-config=false", "--tlog-upload=false"],
            // and writes a `.sig` only outside the new bundle format.
            (false, Output::Sig) => {
                &["--new-bundle-format=false", "--use-signing-config=false", "--tlog-upload=false"]
            }
        };
        let flag = match output {
            Output::Sig => "--output-signature",
            Output::Bundle => "--bundle",
        };
        offline
            .iter()
            .map(|f| (*f).to_owned())
            .chain([flag.to_owned(), out.display().to_string()])
            .collect()
    }

    /// Runs one command `docs/security.md` gives ([`documented_commands`]) in `dir`: its
    /// first word, `cosign`, is this release's binary.
    pub fn run_documented(&self, dir: &Path, command: &[String]) -> anyhow::Result<()> {
        let Some((first, args)) = command.split_first() else { bail!("an empty command") };
        ensure!(first == "cosign", "not a cosign command: {}", command.join(" "));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(dir, &args)
    }

    /// `cosign attest-blob --key <key> --predicate <predicate> --type custom … --bundle <out>
    /// <blob>`, offline as a bundle is signed: an in-toto attestation about the blob (a DSSE
    /// envelope), not a signature of it. Returns the bundle's bytes.
    pub fn attest_blob(
        &self,
        key: &Path,
        blob: &Path,
        predicate: &Path,
        out: &Path,
    ) -> anyhow::Result<Vec<u8>> {
        let dir = out.parent().context("the output file has no directory")?;
        let mut args: Vec<String> = ["attest-blob", "--key"].map(str::to_owned).to_vec();
        args.push(key.display().to_string());
        args.extend(["--predicate".to_owned(), predicate.display().to_string()]);
        args.extend(["--type".to_owned(), "custom".to_owned()]);
        args.extend(self.sign_blob_args(Output::Bundle, out));
        args.push(blob.display().to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(dir, &args)?;
        fs::read(out).with_context(|| format!("reading {}", out.display()))
    }

    /// Runs `cosign <args>` in `dir` with an empty `COSIGN_PASSWORD`, nothing on stdin (so
    /// any prompt is declined) and `HOME` in `dir` (nothing written to the user's
    /// `~/.sigstore`).
    fn run(&self, dir: &Path, args: &[&str]) -> anyhow::Result<()> {
        let output = Command::new(&self.binary)
            .args(args)
            .current_dir(dir)
            .env("COSIGN_PASSWORD", "")
            .env("HOME", dir)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.binary.display()))?;
        ensure!(
            output.status.success(),
            "cosign {} {} failed ({}): {}",
            self.release.version,
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }
}

/// The commands `docs/security.md` (given as `markdown`) tells users of `release` to run:
/// the `cosign …` lines of its fenced `sh` block that runs `cosign generate-key-pair`, in the
/// part after the comment `# cosign <major>:`, each split into words (lines ending in `\\`
/// joined, comments left out). `Err` when the docs give none.
pub fn documented_commands(markdown: &str, release: Release) -> anyhow::Result<Vec<Vec<String>>> {
    let major = release.version.trim_start_matches('v').split('.').next().unwrap_or_default();
    let marker = format!("# cosign {major}:");
    let block = markdown
        .split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .find(|block| block.contains("cosign generate-key-pair"))
        .context("docs/security.md has no sh block running `cosign generate-key-pair`")?;
    let mut commands = Vec::new();
    let mut in_section = false;
    for line in block.replace("\\\n", " ").lines() {
        let line = line.trim();
        if line.starts_with('#') {
            if line.starts_with("# cosign ") {
                in_section = line.starts_with(&marker);
            }
            continue;
        }
        let command = line.split(" #").next().unwrap_or_default();
        if in_section && command.starts_with("cosign ") {
            commands.push(command.split_whitespace().map(str::to_owned).collect());
        }
    }
    ensure!(!commands.is_empty(), "docs/security.md gives no commands after `{marker}`");
    Ok(commands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_release_is_cached_under_its_own_version() {
        let [v2, v3] = RELEASES;
        assert_ne!(cache_dir(v2).unwrap(), cache_dir(v3).unwrap());
        assert!(cache_dir(v3).unwrap().ends_with("v3.1.3"));
        assert_eq!(v2.stamp_contents(), "github.com/sigstore/cosign/v2=v2.6.5\n");
        assert_eq!(v3.package(), "github.com/sigstore/cosign/v3/cmd/cosign");
    }

    #[test]
    fn the_build_info_must_show_the_pinned_module() {
        let good = "/tmp/cosign: go1.26.8\n\tpath\tgithub.com/sigstore/cosign/v2/cmd/cosign\n\
                    \tmod\tgithub.com/sigstore/cosign/v2\tv2.6.5\th1:abc=\n";
        check_build_info(COSIGN_2, good).unwrap();
        assert!(check_build_info(COSIGN_2, &good.replace("v2.6.5", "v2.6.4")).is_err());
        assert!(check_build_info(COSIGN_3, good).is_err(), "another major is another module");
    }

    #[test]
    fn the_docs_give_each_release_a_key_pair_a_sig_and_a_bundle_signed_offline() {
        let docs = include_str!("../../docs/security.md");
        for release in RELEASES {
            let commands: Vec<String> =
                documented_commands(docs, release).unwrap().iter().map(|c| c.join(" ")).collect();
            assert_eq!(commands[0], "cosign generate-key-pair", "{release:?}");
            let sign: Vec<&String> =
                commands.iter().filter(|c| c.starts_with("cosign sign-blob")).collect();
            assert_eq!(sign.len(), 2, "a .sig and a bundle: {commands:?}");
            assert!(sign.iter().any(|c| c.contains("--output-signature k0s.sig k0s")));
            assert!(sign.iter().any(|c| c.contains("--bundle ")));
            for command in sign {
                // The flags the attestation of the scenario is made offline with, too.
                for flag in with(release).sign_blob_args(Output::Bundle, Path::new("x")) {
                    if flag.starts_with("--") && flag != "--bundle" {
                        assert!(command.contains(&flag), "{command} lacks {flag}");
                    }
                }
            }
        }
    }

    #[test]
    fn documented_commands_join_continued_lines_and_leave_out_comments() {
        let docs = "text\n```sh\nminisign -G\n```\n\n```sh\n# cosign 2: offline\n\
                    cosign generate-key-pair   # once\ncosign sign-blob --key k \\\n  \
                    --bundle b k0s\n# cosign 3: offline\ncosign sign-blob x\n```\n";
        let v2 = documented_commands(docs, COSIGN_2).unwrap();
        assert_eq!(
            v2,
            [
                vec!["cosign", "generate-key-pair"],
                vec!["cosign", "sign-blob", "--key", "k", "--bundle", "b", "k0s"]
            ]
        );
        assert_eq!(
            documented_commands(docs, COSIGN_3).unwrap(),
            [vec!["cosign", "sign-blob", "x"]]
        );
        assert!(documented_commands("```sh\nls\n```\n", COSIGN_2).is_err());
    }

    fn with(release: Release) -> Cosign {
        Cosign { release, binary: PathBuf::from("cosign") }
    }
}
