//! `cargo xtask control-plane`: build (once) and cache the pinned Go binaries of the test
//! topology: kube-apiserver and etcd, the Prometheus that scrapes the nodes, what real
//! nodes run (kubelet, kube-controller-manager, kube-scheduler, containerd), and the cosign
//! releases the signing scenario signs with.
//!
//! The logic lives in `integration::control_plane`, `integration::prometheus`,
//! `integration::node_binaries` and `integration::cosign`, next to the harness that uses it;
//! this module only reports what is in the cache.

use integration::{control_plane, cosign, node_binaries, prometheus};

/// Arguments of this subcommand (none yet: the versions are pinned in the code).
#[derive(clap::Args)]
pub struct Args {}

/// Build the control-plane binaries, Prometheus, the nodes' binaries and cosign unless
/// cached, then print their paths and versions.
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
    let prometheus = prometheus::ensure_built()?;
    println!(
        "prometheus:     {} ({})",
        prometheus.display(),
        control_plane::version_of(&prometheus)?
    );
    let node = node_binaries::ensure_built()?;
    for (name, binary) in [
        ("kubelet:        ", &node.kubelet),
        ("kube-controller-manager:", &node.kube_controller_manager),
        ("kube-scheduler: ", &node.kube_scheduler),
        ("containerd:     ", &node.containerd),
    ] {
        println!("{name} {} ({})", binary.display(), control_plane::version_of(binary)?);
    }
    for binary in cosign::ensure_built()? {
        println!("cosign:         {} ({})", binary.display(), cosign::git_version(&binary)?);
    }
    Ok(())
}
