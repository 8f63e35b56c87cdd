//! `cargo xtask dist`: an update payload and the Plan that installs it.
//!
//! [`dist`] builds (or takes) a `k0s` binary that reports a given version, and writes into
//! one directory what an operator publishes and applies:
//!
//! | file | what |
//! |---|---|
//! | `k0s-<version>-<arch>` | the binary |
//! | `k0s-<version>-<arch>.sha256` | its SHA-256, in `sha256sum` format |
//! | `k0s-<version>-<arch>.sig` | with a PKCS#8 P-256 key: cosign `sign-blob`'s format |
//! | `k0s-<version>-<arch>.minisig` | with a minisign secret key: minisign's signature |
//! | `plan.yaml` | a Plan updating every controller, then every worker, to that version |
//! | `sha256sums.txt` | the SHA-256 of every file above (of every platform packaged in the directory), for `sha256sum -c` and release tooling |
//! | `index.yaml` | the update server's index for the version: every platform packaged in the directory with its URL and sha256 (and an airgap bundle found beside it), what UpdateConfigs and the Renovate configuration of `manifests/gitops/` read |
//!
//! It lives here, next to the harness, so that the end-to-end test of the Plan it writes
//! can call it with the binary the harness already built (no second release build); the
//! xtask module only parses flags and prints.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use autopilot_api::v1beta2::{
    Concurrency, Plan, PlanCommand, PlanCommandK0sUpdate, PlanCommandRollout, PlanCommandTarget,
    PlanCommandTargetDiscovery, PlanCommandTargetDiscoverySelector, PlanCommandTargetLimits,
    PlanCommandTargets, PlanResourceUrl, PlanSpec,
};
use base64::Engine as _;
use p256::ecdsa::signature::hazmat::PrehashSigner as _;
use p256::pkcs8::DecodePrivateKey as _;
use sha2::Digest as _;

use crate::k0s::{RUN_K0S_TIMEOUT, run_k0s_binary};

/// The first line of a minisign key or signature file.
const MINISIGN_COMMENT: &str = "untrusted comment:";

/// What to build and write.
#[derive(Clone, Debug)]
pub struct Options {
    /// The version the binary reports and the Plan updates to (`vX.Y.Z[-PRE]+k0s.N`).
    pub version: String,
    /// A binary that already reports `version`, used instead of building one.
    pub binary: Option<PathBuf>,
    /// The cargo profile of the build (`release`, `dev`); unused with `binary`.
    pub profile: String,
    /// A Rust target triple to build for (`aarch64-unknown-linux-gnu`) instead of this
    /// machine's; the Plan's platform key follows it. With `binary`: the triple it was built
    /// for.
    pub target: Option<String>,
    /// The output directory; `None`: `<target dir>/dist/<version>`.
    pub out: Option<PathBuf>,
    /// A key to sign the binary with: a PKCS#8 PEM P-256 private key (`.sig`) or a minisign
    /// secret key (`.minisig`).
    pub key: Option<PathBuf>,
    /// Where the files will be published; `None`: [`placeholder_url_base`].
    pub url_base: Option<String>,
    /// The pinned component set to pack onto the binary (`crate::components`); `None`: a
    /// bare binary that runs the components it finds on the node.
    pub components: Option<crate::components::Set>,
}

impl Options {
    /// Build `version` with the release profile for this machine, into the default
    /// directory, unsigned, with the placeholder URL.
    pub fn new(version: &str) -> Self {
        Self {
            version: version.to_owned(),
            binary: None,
            profile: "release".to_owned(),
            target: None,
            out: None,
            key: None,
            url_base: None,
            components: None,
        }
    }
}

/// What [`dist`] wrote.
#[derive(Clone, Debug)]
pub struct Dist {
    /// The platform key of the binary (`linux-amd64`).
    pub platform: String,
    /// The binary.
    pub binary: PathBuf,
    /// Its hex SHA-256.
    pub sha256: String,
    /// The `.sha256` file.
    pub sha256_file: PathBuf,
    /// The `.sig` or `.minisig` file, when signed.
    pub signature: Option<PathBuf>,
    /// The Plan.
    pub plan: PathBuf,
    /// `sha256sums.txt`: every release file of the version in the output directory (the
    /// binaries of each platform packaged there, their signatures, the Plan), as
    /// `sha256sum -c` reads it and as release tooling (Renovate's release-attachment
    /// digests) looks for it.
    pub sha256sums: PathBuf,
    /// The Plan as written (to edit and apply).
    pub plan_object: Plan,
    /// `index.yaml`: the update server's index for the version, with every platform packaged
    /// in the output directory ([`write_index`]).
    pub index: PathBuf,
}

/// The URL base the Plan gets without `--url-base`: clearly not a real server.
pub fn placeholder_url_base(version: &str) -> String {
    format!("https://downloads.example.com/k0s/{version}")
}

/// Validate the version, build or take the binary, copy it into the output directory with
/// its SHA-256, sign it if asked, and write the Plan.
pub fn dist(options: &Options) -> anyhow::Result<Dist> {
    let Options { version, binary: _, profile: _, target, out, key, url_base, components } =
        options;
    check_version(version)?;
    let platform = match target {
        Some(triple) => platform_of_target(triple)?,
        None => autopilot_api::platform::current(),
    };
    let runnable = platform == autopilot_api::platform::current();
    if components.is_some() && !runnable {
        bail!(
            "the pinned components are built for {}, not {platform}: package without them \
             (--no-components)",
            autopilot_api::platform::current()
        );
    }
    let arch = platform.split_once('-').map_or(platform.as_str(), |(_, arch)| arch);
    let file_name = format!("k0s-{version}-{arch}");
    let url_base = url_base.clone().unwrap_or_else(|| placeholder_url_base(version));
    let url = format!("{}/{file_name}", url_base.trim_end_matches('/'));
    if let Some(problem) = autopilot_api::payload::url_problem(&url) {
        bail!("--url-base: the binary's URL {problem}");
    }
    let key = key.as_deref().map(Key::read).transpose()?;

    let out = match out {
        Some(out) => out.clone(),
        None => crate::k0s::target_dir()?.join("dist").join(version),
    };
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let dest = out.join(&file_name);
    place_binary(options, runnable, &dest)?;

    let sha256 = hex::encode(sha256_of(&dest)?);
    let sha256_file = with_suffix(&dest, ".sha256");
    fs::write(&sha256_file, format!("{sha256}  {file_name}\n"))
        .with_context(|| format!("writing {}", sha256_file.display()))?;

    // A signature of an earlier run (perhaps by the other kind of key) must not stay beside
    // the binary it does not sign.
    for stale in [".sig", ".minisig"] {
        let stale = with_suffix(&dest, stale);
        if stale.exists() {
            fs::remove_file(&stale).with_context(|| format!("removing {}", stale.display()))?;
        }
    }
    let signature = match &key {
        None => None,
        Some(key) => Some(key.sign(&dest)?),
    };

    let signature_url = signature.as_ref().map(|signature| {
        let extension = signature.extension().unwrap_or_default().to_string_lossy();
        format!("{url}.{extension}")
    });
    let plan_object = plan(version, &platform, &url, &sha256, signature_url);
    let plan_path = out.join("plan.yaml");
    let yaml = plan_yaml(&plan_object)?;
    let header = format!(
        "# Updates every controller, then every worker (one at a time), to `version`.\n\
         # Before applying: set `url`{} to where the file is published,\n\
         # add the entries of other platforms, and narrow the targets if needed.\n",
        if signature.is_some() { " and `signatureURL`" } else { "" }
    );
    fs::write(&plan_path, format!("{header}{yaml}"))
        .with_context(|| format!("writing {}", plan_path.display()))?;
    let sha256sums = write_sha256sums(&out, version)?;
    let index = write_index(&out, version, &platform, &url, &sha256)?;

    Ok(Dist {
        platform,
        binary: dest,
        sha256,
        sha256_file,
        signature,
        plan: plan_path,
        sha256sums,
        plan_object,
        index,
    })
}

/// Builds the binary (or copies the one given) to `dest`, checks the version it reports
/// when it runs here, and packs the component set onto it.
fn place_binary(options: &Options, runnable: bool, dest: &Path) -> anyhow::Result<()> {
    let Options { version, binary, profile, target, components, .. } = options;
    match binary {
        Some(binary) => {
            crate::k0s::copy_atomically(binary, dest)?;
            if runnable && let Err(err) = check_reports(dest, version) {
                let _ = fs::remove_file(dest);
                return Err(err);
            }
        }
        None => build(version, profile, target.as_deref(), runnable, dest)?,
    }
    if let Some(set) = components {
        // In place: the binary is written to a temporary file and renamed over `dest`.
        crate::components::pack(dest, *set, dest)?;
    }
    Ok(())
}

/// `plan` as YAML, every string on one line (a long URL is not folded into a block scalar,
/// so that it reads, greps and diffs as one line, and a tool bumping versions in it, such as
/// the Renovate configuration of `manifests/gitops/`, finds it beside its key).
pub fn plan_yaml(plan: &Plan) -> anyhow::Result<String> {
    let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
    serde_saphyr::to_string_with_options(plan, options).context("serializing the Plan")
}

/// The name of the checksum list [`dist`] writes beside the files.
pub const SHA256SUMS: &str = "sha256sums.txt";

/// Writes [`SHA256SUMS`] in `out`: a `<sha256>  <name>` line for every release file of
/// `version` there (`k0s-<version>-*` but the per-file `.sha256`, and `plan.yaml`), sorted by
/// name, through a temp file and a rename.
fn write_sha256sums(out: &Path, version: &str) -> anyhow::Result<PathBuf> {
    let prefix = format!("k0s-{version}-");
    let mut names = Vec::new();
    for entry in fs::read_dir(out).with_context(|| format!("reading {}", out.display()))? {
        let entry = entry.with_context(|| format!("reading {}", out.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let release_file =
            (name.starts_with(&prefix) && !name.ends_with(".sha256")) || name == "plan.yaml";
        if release_file && entry.file_type().is_ok_and(|t| t.is_file()) {
            names.push(name);
        }
    }
    names.sort();
    let mut text = String::new();
    for name in &names {
        text.push_str(&format!("{}  {name}\n", hex::encode(sha256_of(&out.join(name))?)));
    }
    let path = out.join(SHA256SUMS);
    let temp = out.join(format!(".{SHA256SUMS}.tmp"));
    fs::write(&temp, text).with_context(|| format!("writing {}", temp.display()))?;
    fs::rename(&temp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(path)
}

/// The name of the update server's index [`dist`] writes beside the files.
pub const INDEX: &str = "index.yaml";

/// The update server's index (`docs/automatic-updates.md`, "The update server's index").
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// The version offered.
    pub version: String,
    /// Its downloads, one per platform, ordered by platform.
    #[serde(rename = "downloadURLs", default)]
    pub download_urls: Vec<IndexEntry>,
}

/// One platform's downloads in an [`Index`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexEntry {
    /// `linux`, …
    pub os: String,
    /// `amd64`, …
    pub arch: String,
    /// The binary's URL.
    pub k0s: String,
    /// Its SHA-256.
    pub k0s_sha256: String,
    /// The airgap bundle's URL, when one is packaged beside the binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub airgap_bundle: Option<String>,
    /// Its SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub airgap_sha256: Option<String>,
}

/// Writes [`INDEX`] in `out`: the index already there for `version` (the other platforms
/// packaged into the same directory) with this run's platform set to `url` and `sha256`,
/// and an airgap bundle `k0s-airgap-bundle-<version>-<arch>` beside it when there is one
/// (its URL next to the binary's). An index of another version, or one that does not parse,
/// is replaced. Through a temp file and a rename.
fn write_index(
    out: &Path,
    version: &str,
    platform: &str,
    url: &str,
    sha256: &str,
) -> anyhow::Result<PathBuf> {
    let path = out.join(INDEX);
    let mut index = fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_saphyr::from_str::<Index>(&text).ok())
        .filter(|index| index.version == version)
        .unwrap_or_else(|| Index { version: version.to_owned(), download_urls: Vec::new() });
    let (os, arch) = platform.split_once('-').unwrap_or(("linux", platform));
    let bundle_name = format!("k0s-airgap-bundle-{version}-{arch}");
    let bundle = out.join(&bundle_name);
    let (airgap_bundle, airgap_sha256) = if bundle.is_file() {
        let base = url.rsplit_once('/').map_or("", |(base, _)| base);
        (Some(format!("{base}/{bundle_name}")), Some(hex::encode(sha256_of(&bundle)?)))
    } else {
        (None, None)
    };
    index.download_urls.retain(|entry| entry.os != os || entry.arch != arch);
    index.download_urls.push(IndexEntry {
        os: os.to_owned(),
        arch: arch.to_owned(),
        k0s: url.to_owned(),
        k0s_sha256: sha256.to_owned(),
        airgap_bundle,
        airgap_sha256,
    });
    index.download_urls.sort_by(|a, b| (&a.os, &a.arch).cmp(&(&b.os, &b.arch)));
    let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
    let text =
        serde_saphyr::to_string_with_options(&index, options).context("serializing the index")?;
    let temp = out.join(format!(".{INDEX}.tmp"));
    fs::write(&temp, text).with_context(|| format!("writing {}", temp.display()))?;
    fs::rename(&temp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(path)
}

/// `version` must be a k0s version a node can run and order: `vX.Y.Z[-PRE]+k0s.N`, as
/// written (the binary reports it, and nodes compare it as an exact string).
fn check_version(version: &str) -> anyhow::Result<()> {
    if let Some(problem) = autopilot_api::payload::version_problem(version) {
        bail!("--version: {problem}");
    }
    let parsed = autopilot_api::version::K0sVersion::parse(version)
        .map_err(|err| anyhow::anyhow!("--version: {err}"))?;
    ensure!(
        parsed.k0s_build().is_some() && parsed.to_string() == version,
        "--version: {version:?} is not written as a k0s release is (vX.Y.Z+k0s.N, e.g. {:?})",
        format!("v{}+k0s.{}", parsed.semver(), parsed.k0s_build().unwrap_or(0))
    );
    Ok(())
}

/// The platform key (`<os>-<arch>`, Go's names) of a Rust target triple.
pub fn platform_of_target(triple: &str) -> anyhow::Result<String> {
    let arch = triple.split('-').next().unwrap_or_default();
    let arch = match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "i386" | "i586" | "i686" => "386",
        "powerpc64le" => "ppc64le",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        "loongarch64" => "loong64",
        arch if arch.starts_with("riscv64") => "riscv64",
        arch if arch.starts_with("arm") => "arm",
        _ => bail!("--target {triple:?}: unknown architecture {arch:?}"),
    };
    let os = if triple.contains("-linux") {
        "linux"
    } else if triple.contains("-darwin") {
        "darwin"
    } else if triple.contains("-windows") {
        "windows"
    } else {
        bail!("--target {triple:?}: unknown operating system")
    };
    Ok(autopilot_api::platform::platform_id(os, arch))
}

/// `cargo build` of k0s reporting `version` into the versions target directory (so the
/// default build stays fresh), copied to `dest`. A runnable build is checked with
/// `k0s version`: another process may build another version in the same directory at the
/// same time, and a copy that lost that race is built again.
fn build(
    version: &str,
    profile: &str,
    target: Option<&str>,
    runnable: bool,
    dest: &Path,
) -> anyhow::Result<()> {
    let target_dir = crate::k0s::versions_target_dir()?;
    let mut extra = vec!["--locked", "--profile", profile];
    if let Some(target) = target {
        extra.extend(["--target", target]);
    }
    for _ in 0..3 {
        let built = crate::k0s::cargo_build_k0s_with(Some(version), Some(&target_dir), &extra)?;
        crate::k0s::copy_atomically(&built, dest)?;
        if !runnable || check_reports(dest, version).is_ok() {
            return Ok(());
        }
    }
    check_reports(dest, version)
}

/// `binary version` prints `version`.
fn check_reports(binary: &Path, version: &str) -> anyhow::Result<()> {
    let output = run_k0s_binary(binary, &["version"], RUN_K0S_TIMEOUT)?;
    let reported = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success() && reported.trim() == version,
        "{} reports version {:?}, not {version:?}",
        binary.display(),
        reported.trim()
    );
    Ok(())
}

/// The Plan updating every controller, then every worker one at a time, to `version` from
/// `url`.
fn plan(
    version: &str,
    platform: &str,
    url: &str,
    sha256: &str,
    signature_url: Option<String>,
) -> Plan {
    let every = |concurrent| PlanCommandTarget {
        discovery: PlanCommandTargetDiscovery {
            r#static: None,
            selector: Some(PlanCommandTargetDiscoverySelector::default()),
        },
        limits: PlanCommandTargetLimits {
            concurrent: Concurrency::Count(concurrent),
            ..Default::default()
        },
    };
    let entry = PlanResourceUrl {
        url: url.to_owned(),
        sha256: Some(sha256.to_owned()),
        signature: None,
        signature_url,
    };
    let update = PlanCommandK0sUpdate {
        drain: None,
        drain_options: None,
        version: version.to_owned(),
        forceupdate: false,
        platforms: BTreeMap::from([(platform.to_owned(), entry)]),
        targets: PlanCommandTargets { controllers: Some(every(1)), workers: Some(every(1)) },
        rollout: PlanCommandRollout::default(),
    };
    let command = PlanCommand { k0supdate: Some(update), airgapupdate: None, preflight: None };
    let spec = PlanSpec {
        download_window: Default::default(),
        window: Default::default(),
        windows: Default::default(),
        id: format!("k0s-{version}"),
        timestamp: jiff::Timestamp::now().to_string(),
        commands: vec![command],
    };
    Plan::new("autopilot", spec)
}

/// A signing key, by kind.
enum Key {
    /// A P-256 key: cosign `sign-blob`'s signature, made here.
    P256(Box<p256::ecdsa::SigningKey>),
    /// A minisign secret key at this path: signed by the `minisign` CLI.
    Minisign(PathBuf),
}

impl Key {
    /// Read `path`; `Err` names it and says what it is not.
    fn read(path: &Path) -> anyhow::Result<Self> {
        let text = fs::read_to_string(path)
            .with_context(|| format!("--key: reading {}", path.display()))?;
        if text.trim_start().starts_with(MINISIGN_COMMENT) {
            // Found out now, not after a release build.
            Command::new("minisign").arg("-v").output().map_err(|err| minisign_error(path, err))?;
            return Ok(Self::Minisign(path.to_owned()));
        }
        match p256::ecdsa::SigningKey::from_pkcs8_pem(text.trim()) {
            Ok(key) => Ok(Self::P256(Box::new(key))),
            Err(err) => {
                let hint = if text.contains("SIGSTORE PRIVATE KEY") {
                    "; this is an encrypted cosign key: run `cosign sign-blob --key \
                     cosign.key --output-signature <file>.sig <file>` yourself, or export it \
                     as an unencrypted PKCS#8 key"
                } else if text.contains("BEGIN EC PRIVATE KEY") {
                    "; this is a SEC1 key: convert it with `openssl pkcs8 -topk8 -nocrypt \
                     -in <key> -out <key>.p8.pem`"
                } else if text.contains("BEGIN ENCRYPTED PRIVATE KEY") {
                    "; decrypt it first: `openssl pkcs8 -in <key> -out <key>.p8.pem`"
                } else {
                    ""
                };
                bail!(
                    "--key {}: neither an unencrypted PKCS#8 PEM P-256 private key ({err}) nor \
                     a minisign secret key{hint}",
                    path.display()
                )
            }
        }
    }

    /// Sign `file`, returning the signature file written beside it.
    fn sign(&self, file: &Path) -> anyhow::Result<PathBuf> {
        match self {
            Self::P256(key) => {
                let digest = sha256_of(file)?;
                let signature: p256::ecdsa::Signature =
                    key.sign_prehash(&digest).context("signing with the P-256 key")?;
                let der = signature.to_der();
                let sig = with_suffix(file, ".sig");
                let text = base64::engine::general_purpose::STANDARD.encode(der.as_bytes());
                fs::write(&sig, text).with_context(|| format!("writing {}", sig.display()))?;
                Ok(sig)
            }
            Self::Minisign(key) => {
                let sig = with_suffix(file, ".minisig");
                let mut command = Command::new("minisign");
                command.arg("-S").arg("-s").arg(key).arg("-m").arg(file).arg("-x").arg(&sig);
                let status = command.status().map_err(|err| minisign_error(key, err))?;
                ensure!(status.success(), "{command:?} failed ({status})");
                Ok(sig)
            }
        }
    }
}

/// Why `minisign` could not be started to sign with `key`.
fn minisign_error(key: &Path, err: std::io::Error) -> anyhow::Error {
    if err.kind() == std::io::ErrorKind::NotFound {
        anyhow::anyhow!(
            "--key {} is a minisign key, but the `minisign` command is not installed (e.g. \
             `apt-get install minisign`)",
            key.display()
        )
    } else {
        anyhow::Error::new(err).context("running minisign")
    }
}

/// `path` with `suffix` appended to its file name (`k0s-v1` -> `k0s-v1.sig`; the version's
/// dots are not an extension).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// The SHA-256 of the file at `path`, read in chunks.
fn sha256_of(path: &Path) -> anyhow::Result<[u8; 32]> {
    let mut file = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0; 1 << 20];
    loop {
        let read = file.read(&mut buffer).with_context(|| format!("reading {}", path.display()))?;
        if read == 0 {
            return Ok(hasher.finalize().into());
        }
        hasher.update(&buffer[..read]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    const VERSION: &str = "v1.2.3+k0s.4";

    /// A stand-in binary that reports `version` (a shell script).
    fn fake_binary(dir: &Path, version: &str) -> PathBuf {
        let path = dir.join("fake-k0s");
        fs::write(&path, format!("#!/bin/sh\necho {version}\n")).expect("writing the script");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    fn options(dir: &Path) -> Options {
        Options {
            binary: Some(fake_binary(dir, VERSION)),
            out: Some(dir.join("out")),
            ..Options::new(VERSION)
        }
    }

    fn run(program: &str, args: &[&str]) {
        let output = Command::new(program).args(args).output().expect(program);
        assert!(output.status.success(), "{program} {args:?}: {output:?}");
    }

    fn keys(dir: &Path) -> autopilot_signal::signature::TrustedKeys {
        autopilot_signal::signature::TrustedKeys::load(dir).expect("the trusted keys")
    }

    fn verify(keys: &autopilot_signal::signature::TrustedKeys, dist: &Dist) -> String {
        let signature = fs::read(dist.signature.as_ref().expect("signed")).expect("signature");
        let signature = autopilot_signal::signature::parse_signature(&signature).expect("parses");
        let expected = autopilot_signal::signature::Expected { keys, signature: &signature };
        let mut check = expected.start().expect("a trusted key may have made it");
        check.update(&fs::read(&dist.binary).expect("the binary"));
        let sha: [u8; 32] = hex::decode(&dist.sha256).expect("hex").try_into().expect("32 bytes");
        check.finish(&sha).expect("the signature verifies")
    }

    /// `sha256sums.txt` lists exactly `names`, each with its file's digest, and
    /// `sha256sum -c` accepts it.
    fn sha256sums_hold(dist: &Dist, names: &[&str]) {
        let out = dist.sha256sums.parent().expect("the output directory");
        let text = fs::read_to_string(&dist.sha256sums).expect("sha256sums.txt");
        let expected: String = names
            .iter()
            .map(|name| {
                let bytes = fs::read(out.join(name)).expect("a listed file");
                format!("{}  {name}\n", hex::encode(sha2::Sha256::digest(&bytes)))
            })
            .collect();
        assert_eq!(text, expected);
        let checked = std::process::Command::new("sha256sum")
            .args(["-c", SHA256SUMS])
            .current_dir(out)
            .output()
            .expect("sha256sum runs");
        assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stdout));
    }

    #[test]
    fn an_unsigned_payload_gets_its_sha256_and_a_plan_for_this_platform() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dist = dist(&options(dir.path())).expect("dist");
        let arch = autopilot_api::platform::arch();
        assert_eq!(dist.binary, dir.path().join("out").join(format!("k0s-{VERSION}-{arch}")));
        let bytes = fs::read(&dist.binary).expect("the binary");
        assert_eq!(dist.sha256, hex::encode(sha2::Sha256::digest(&bytes)));
        let line = fs::read_to_string(&dist.sha256_file).expect("the .sha256");
        assert_eq!(line, format!("{}  k0s-{VERSION}-{arch}\n", dist.sha256));
        assert!(dist.signature.is_none());
        sha256sums_hold(&dist, &[&format!("k0s-{VERSION}-{arch}"), "plan.yaml"]);

        let text = fs::read_to_string(&dist.plan).expect("plan.yaml");
        assert!(text.starts_with("# Updates every controller"), "{text}");
        assert!(text.contains("apiVersion: autopilot.k0sproject.io/v1beta2"), "{text}");
        let plan: Plan = serde_saphyr::from_str(&text).expect("plan.yaml is a Plan");
        assert_eq!(plan, dist.plan_object);
        assert_eq!(plan.metadata.name.as_deref(), Some("autopilot"));
        let update = plan.spec.commands[0].k0supdate.as_ref().expect("a k0supdate");
        assert_eq!(update.version, VERSION);
        let entry = &update.platforms[&autopilot_api::platform::current()];
        assert_eq!(
            entry.url,
            format!("https://downloads.example.com/k0s/{VERSION}/k0s-{VERSION}-{arch}")
        );
        assert_eq!(entry.sha256.as_deref(), Some(dist.sha256.as_str()));
        assert_eq!(entry.signature_url, None);
        let workers = update.targets.workers.as_ref().expect("workers");
        assert_eq!(workers.discovery.selector, Some(Default::default()));
        assert_eq!(workers.limits.concurrent, Concurrency::Count(1));
        let controllers = update.targets.controllers.as_ref().expect("controllers");
        assert_eq!(controllers.discovery.selector, Some(Default::default()));
    }

    #[test]
    fn a_p256_key_signs_in_cosign_format_and_the_node_verifies_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("key.pem");
        let trusted = dir.path().join("trusted");
        fs::create_dir(&trusted).expect("mkdir");
        let key_arg = key.to_str().expect("utf-8");
        run(
            "openssl",
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                key_arg,
            ],
        );
        let public = trusted.join("release.pub");
        run("openssl", &["pkey", "-in", key_arg, "-pubout", "-out", public.to_str().expect("utf")]);
        let options = Options {
            key: Some(key),
            url_base: Some("https://example.com/k0s/".to_owned()),
            ..options(dir.path())
        };
        let dist = dist(&options).expect("dist");
        let sig = dist.signature.clone().expect("signed");
        assert_eq!(sig, with_suffix(&dist.binary, ".sig"));
        let keys = keys(&trusted);
        assert_eq!(verify(&keys, &dist), keys.ids()[0]);
        let entry =
            &dist.plan_object.spec.commands[0].k0supdate.as_ref().expect("k0supdate").platforms
                [&dist.platform];
        let name = dist.binary.file_name().expect("name").to_string_lossy();
        assert_eq!(entry.url, format!("https://example.com/k0s/{name}"));
        assert_eq!(entry.signature_url, Some(format!("https://example.com/k0s/{name}.sig")));
        sha256sums_hold(&dist, &[&name, &format!("{name}.sig"), "plan.yaml"]);
    }

    #[test]
    fn the_index_lists_every_platform_packaged_in_the_directory_as_the_updater_reads_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        fs::create_dir_all(&out).expect("mkdir");
        let package = |version: &str, triple: &str| {
            let binary = dir.path().join(format!("built-{version}-{triple}"));
            fs::write(&binary, format!("{version} for {triple}")).expect("a binary");
            dist(&Options {
                binary: Some(binary),
                target: Some(triple.to_owned()),
                out: Some(out.clone()),
                url_base: Some(format!("https://example.com/k0s/{version}")),
                ..Options::new(version)
            })
            .expect("dist")
        };
        let version = "v1.35.2+k0s.0";
        // A bundle beside the arm64 binary is listed with it.
        fs::write(out.join(format!("k0s-airgap-bundle-{version}-arm64")), "images")
            .expect("bundle");
        let arm64 = package(version, "aarch64-unknown-linux-gnu");
        let arm = package(version, "armv7-unknown-linux-gnueabihf");
        assert_eq!(arm.index, out.join(INDEX));
        let text = fs::read_to_string(&arm.index).expect("index.yaml");
        let answer = autopilot_engine::updater::channel::ChannelAnswer::from_index_yaml(&text)
            .expect("the updater reads it");
        assert_eq!(answer.version, version);
        assert_eq!(answer.k0s.keys().collect::<Vec<_>>(), ["linux-arm", "linux-arm64"], "{text}");
        assert_eq!(
            answer.k0s["linux-arm64"].url,
            format!("https://example.com/k0s/{version}/k0s-{version}-arm64")
        );
        assert_eq!(answer.k0s["linux-arm64"].sha256.as_deref(), Some(arm64.sha256.as_str()));
        assert_eq!(answer.k0s["linux-arm"].sha256.as_deref(), Some(arm.sha256.as_str()));
        let bundle = &answer.airgap["linux-arm64"];
        assert_eq!(
            bundle.url,
            format!("https://example.com/k0s/{version}/k0s-airgap-bundle-{version}-arm64")
        );
        assert_eq!(
            bundle.sha256.as_deref(),
            Some(hex::encode(sha2::Sha256::digest(b"images")).as_str())
        );
        assert!(!answer.airgap.contains_key("linux-arm"), "{text}");

        // Packaging the same platform again replaces its entry; another version starts over.
        let again = package(version, "aarch64-unknown-linux-gnu");
        let text = fs::read_to_string(&again.index).expect("index.yaml");
        assert_eq!(text.matches("arch: arm64").count(), 1, "{text}");
        let next = package("v1.35.3+k0s.0", "aarch64-unknown-linux-gnu");
        let text = fs::read_to_string(&next.index).expect("index.yaml");
        assert!(text.starts_with("version: v1.35.3+k0s.0\n"), "{text}");
        assert!(!text.contains("arch: arm\n"), "only the new version's platform: {text}");
    }

    #[test]
    fn a_long_url_stays_on_the_line_of_its_key() {
        let version = "v1.35.2+k0s.0";
        let url = format!(
            "https://github.com/k0sproject/k0s/releases/download/{version}/k0s-{version}-amd64"
        );
        assert!(url.len() > 80, "long enough to be folded by default");
        let plan = plan(version, "linux-amd64", &url, &"ab".repeat(32), Some(format!("{url}.sig")));
        let text = plan_yaml(&plan).expect("yaml");
        assert!(text.contains(&format!("\n          url: {url}\n")), "{text}");
        assert!(text.contains(&format!("\n          signatureURL: {url}.sig\n")), "{text}");
        let read: Plan = serde_saphyr::from_str(&text).expect("a Plan");
        assert_eq!(read, plan);
    }

    #[test]
    fn a_minisign_key_signs_with_the_minisign_command_and_the_node_verifies_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = dir.path().join("minisign.key");
        let trusted = dir.path().join("trusted");
        fs::create_dir(&trusted).expect("mkdir");
        let public = trusted.join("minisign.pub");
        run(
            "minisign",
            &[
                "-G",
                "-W",
                "-p",
                public.to_str().expect("utf-8"),
                "-s",
                secret.to_str().expect("utf-8"),
            ],
        );
        // A .sig of an earlier run with another key does not stay beside the binary.
        let stale = dir
            .path()
            .join("out")
            .join(format!("k0s-{VERSION}-{}.sig", autopilot_api::platform::arch()));
        fs::create_dir_all(dir.path().join("out")).expect("mkdir");
        fs::write(&stale, "stale").expect("stale signature");
        let dist = dist(&Options { key: Some(secret), ..options(dir.path()) }).expect("dist");
        assert_eq!(dist.signature, Some(with_suffix(&dist.binary, ".minisig")));
        assert!(!stale.exists(), "the stale .sig is removed");
        let keys = keys(&trusted);
        assert_eq!(verify(&keys, &dist), keys.ids()[0]);
        let entry =
            &dist.plan_object.spec.commands[0].k0supdate.as_ref().expect("k0supdate").platforms
                [&dist.platform];
        assert!(entry.signature_url.as_deref().is_some_and(|u| u.ends_with(".minisig")));
    }

    #[test]
    fn a_key_that_is_not_pkcs8_p256_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("sec1.pem");
        let key_arg = key.to_str().expect("utf-8");
        run("openssl", &["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key_arg]);
        let err = dist(&Options { key: Some(key.clone()), ..options(dir.path()) })
            .expect_err("a SEC1 key is refused");
        let message = format!("{err:#}");
        assert!(message.contains(key_arg), "{message}");
        assert!(message.contains("openssl pkcs8 -topk8"), "{message}");
        assert!(!dir.path().join("out").exists(), "nothing is written");
    }

    #[test]
    fn versions_not_written_as_a_k0s_release_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        for version in ["", "1.2.3+k0s.4", "v1.2.3", "v1.2.3+build.4", "v1.2 .3", "v1.2.3+k0s.4 "] {
            let err = dist(&Options { version: version.to_owned(), ..options(dir.path()) })
                .expect_err(version);
            assert!(format!("{err:#}").starts_with("--version: "), "{version:?}: {err:#}");
        }
    }

    #[test]
    fn a_binary_that_reports_another_version_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = Options { version: "v1.2.3+k0s.5".to_owned(), ..options(dir.path()) };
        let err = dist(&options).expect_err("the binary reports v1.2.3+k0s.4");
        assert!(format!("{err:#}").contains(r#"reports version "v1.2.3+k0s.4""#), "{err:#}");
    }

    #[test]
    fn target_triples_map_to_go_platform_names() {
        assert_eq!(
            platform_of_target("x86_64-unknown-linux-gnu").ok().as_deref(),
            Some("linux-amd64")
        );
        assert_eq!(
            platform_of_target("aarch64-unknown-linux-musl").ok().as_deref(),
            Some("linux-arm64")
        );
        assert_eq!(
            platform_of_target("armv7-unknown-linux-gnueabihf").ok().as_deref(),
            Some("linux-arm")
        );
        assert_eq!(
            platform_of_target("riscv64gc-unknown-linux-gnu").ok().as_deref(),
            Some("linux-riscv64")
        );
        assert!(platform_of_target("wasm32-unknown-unknown").is_err());
    }
}
