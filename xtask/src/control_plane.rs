//! `cargo xtask control-plane`: build (once) and cache the pinned kube-apiserver and etcd.
//!
//! The logic lives in `integration::control_plane`, next to the harness that uses it; this
//! module only reports what is in the cache.

use integration::control_plane;

/// Arguments of this subcommand (none yet: the versions are pinned in the code).
#[derive(clap::Args)]
pub struct Args {}

/// Build the control-plane binaries unless cached, then print their paths and versions.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {} = args;
    let binaries = control_plane::ensure_built()?;
    println!(
        "kube-apiserver: {} ({})",
        binaries.kube_apiserver.display(),
        control_plane::version_of(&binaries.kube_apiserver)?
    );
    println!(
        "etcd:           {} ({})",
        binaries.etcd.display(),
        control_plane::version_of(&binaries.etcd)?
    );
    Ok(())
}
