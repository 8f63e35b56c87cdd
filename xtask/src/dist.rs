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
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { version, out, key, url_base, profile, target, binary } = args;
    match &binary {
        Some(binary) => println!("==> packaging {} as k0s {version}", binary.display()),
        None => println!("==> building k0s {version} ({profile} profile)"),
    }
    let options = dist::Options { version, binary, profile, target, out, key, url_base };
    let written = dist::dist(&options)?;
    println!("==> wrote (platform {}):", written.platform);
    println!("  {}", written.binary.display());
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
