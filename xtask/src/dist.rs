//! `cargo xtask dist`: build an update payload and the Plan that installs it.
//!
//! The logic lives in `integration::dist`, so the end-to-end test of the Plan it writes can
//! call it with a binary the harness already built; this module parses the flags and prints
//! what was written.

use std::path::PathBuf;

use integration::dist;

/// Arguments of `cargo xtask dist`.
#[derive(clap::Args)]
pub struct Args {
    /// The version the binary reports and the Plan updates to, as a k0s release writes it
    /// (`v1.35.1+k0s.0`).
    #[arg(long)]
    version: String,

    /// The output directory (default: `target/dist/<version>/`).
    #[arg(long)]
    out: Option<PathBuf>,

    /// Sign the binary with this key: an unencrypted PKCS#8 PEM P-256 private key (writes
    /// cosign's `<file>.sig`) or a minisign secret key (writes `<file>.minisig` with the
    /// `minisign` command).
    #[arg(long)]
    key: Option<PathBuf>,

    /// Where the files will be published; the Plan's URLs start with it (default: a
    /// placeholder, `https://downloads.example.com/k0s/<version>`).
    #[arg(long)]
    url_base: Option<String>,

    /// The cargo profile to build with.
    #[arg(long, default_value = "release", value_parser = ["release", "dev"])]
    profile: String,

    /// A Rust target triple to build for (needs its toolchain and linker); the Plan's
    /// platform key follows it (`aarch64-unknown-linux-gnu` -> `linux-arm64`).
    #[arg(long)]
    target: Option<String>,

    /// Package this binary instead of building one (it must report `--version`; checked
    /// when it runs on this machine).
    #[arg(long, conflicts_with = "profile")]
    binary: Option<PathBuf>,

    /// Package a bare binary, without the pinned Kubernetes components (kube-apiserver,
    /// kube-controller-manager, kube-scheduler, kubelet, containerd and its shim, built and
    /// cached by `cargo xtask control-plane`, which this runs first). Nodes then run the
    /// components they find in `<data-dir>/bin/` or on `PATH`.
    #[arg(long)]
    no_components: bool,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { version, out, key, url_base, profile, target, binary, no_components } = args;
    match &binary {
        Some(binary) => println!("==> packaging {} as k0s {version}", binary.display()),
        None => println!("==> building k0s {version} ({profile} profile)"),
    }
    let components = (!no_components).then_some(integration::components::Set::All);
    if components.is_some() {
        integration::control_plane::ensure_built()?;
        integration::node_binaries::ensure_built()?;
    }
    let options =
        dist::Options { version, binary, profile, target, out, key, url_base, components };
    let written = dist::dist(&options)?;
    println!("==> wrote (platform {}):", written.platform);
    println!("  {}", written.binary.display());
    if components.is_some() {
        let binary = std::fs::File::open(&written.binary)
            .map_err(anyhow::Error::from)
            .and_then(|mut file| k0s_components::carried::read(&mut file))?;
        for component in binary.map(|set| set.components).unwrap_or_default() {
            println!(
                "    carries {} {} (sha256 {})",
                component.name, component.version, component.sha256
            );
        }
    }
    println!("  {}  (sha256 {})", written.sha256_file.display(), written.sha256);
    if let Some(signature) = &written.signature {
        println!("  {}", signature.display());
    }
    println!("  {}", written.plan.display());
    println!(
        "  {}  (the digest of every release file in the directory)",
        written.sha256sums.display()
    );
    println!(
        "  {}  (the update server's index: every platform packaged in the directory)",
        written.index.display()
    );
    println!(
        "Publish the files, set the Plan's URLs to where they are (`url`{}), then \
         `kubectl apply -f {}`.",
        if written.signature.is_some() { ", `signatureURL`" } else { "" },
        written.plan.display()
    );
    Ok(())
}
