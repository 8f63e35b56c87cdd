//! `cargo xtask control-plane`: build (once) and cache the pinned Go binaries of the test
//! topology: kube-apiserver and etcd, the Prometheus that scrapes the nodes, what real
//! nodes run (kubelet, kube-controller-manager, kube-scheduler, containerd), the cosign
//! releases the signing scenario signs with, the GitOps tools (kstatus, Argo CD's health
//! script runner, kubectl) the health checks are tested with, and Renovate with the Gitea it
//! runs against (installed from the npm registry and built from the Go module proxy), and the
//! Kubernetes components of the minor before (`integration::release_binaries`).
//!
//! The logic lives in `integration::control_plane`, `integration::prometheus`,
//! `integration::node_binaries`, `integration::cosign`, `integration::gitops` and `integration::renovate`, next to the harness that uses it;
//! this module only reports what is in the cache.

use integration::{
    control_plane, cosign, gitops, node_binaries, prometheus, release_binaries, renovate,
};

/// Arguments of this subcommand (the versions are pinned in the code).
#[derive(clap::Args)]
pub struct Args {
    /// Build only these parts (repeat the flag for several); every part by default.
    #[arg(long = "only", value_enum)]
    only: Vec<Part>,
}

/// A part of the test topology this subcommand builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// kube-apiserver and etcd.
    ControlPlane,
    /// The Prometheus the tests scrape nodes with.
    Prometheus,
    /// What real nodes run: kubelet, kube-controller-manager, kube-scheduler, containerd.
    Node,
    /// cosign 2 and 3, which the signing scenario signs with.
    Cosign,
    /// The GitOps tools: kstatus and Argo CD's health script runner (`gitops-health`), Flux's
    /// `healthCheckExprs` evaluator (`flux-health`) and kubectl.
    Gitops,
    /// Node.js, Renovate and the Gitea it opens pull requests on, with which the shipped
    /// Renovate configuration is tested.
    Renovate,
    /// The Kubernetes components (kube-apiserver, kube-controller-manager, kube-scheduler,
    /// kubelet) of the minor before the test topology's, which the builds an upgrade
    /// scenario starts from carry.
    PreviousKubernetes,
}

impl Part {
    /// Its `--only` value.
    pub fn flag(self) -> &'static str {
        match self {
            Self::ControlPlane => "control-plane",
            Self::Prometheus => "prometheus",
            Self::Node => "node",
            Self::Cosign => "cosign",
            Self::Gitops => "gitops",
            Self::Renovate => "renovate",
            Self::PreviousKubernetes => release_binaries::PART,
        }
    }
}

/// Build the control-plane binaries, Prometheus, the nodes' binaries, cosign, the GitOps
/// tools and Renovate with Gitea (or only the parts asked for) unless cached, then print their paths and versions.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { only } = args;
    let wanted = |part: Part| only.is_empty() || only.contains(&part);
    if wanted(Part::ControlPlane) {
        control_plane_part()?;
    }
    if wanted(Part::Prometheus) {
        let prometheus = prometheus::ensure_built()?;
        println!(
            "prometheus:     {} ({})",
            prometheus.display(),
            control_plane::version_of(&prometheus)?
        );
    }
    if wanted(Part::Node) {
        node_part()?;
    }
    if wanted(Part::Cosign) {
        for binary in cosign::ensure_built()? {
            println!("cosign:         {} ({})", binary.display(), cosign::git_version(&binary)?);
        }
    }
    if wanted(Part::Gitops) {
        gitops_part()?;
    }
    if wanted(Part::PreviousKubernetes) {
        previous_kubernetes_part()?;
    }
    if wanted(Part::Renovate) {
        let renovate::Tools { node, renovate, gitea, .. } = renovate::ensure_built()?;
        println!("node:           {} (for Renovate)", node.display());
        println!("renovate:       {}", renovate.display());
        println!("gitea:          {}", gitea.display());
    }
    Ok(())
}

fn gitops_part() -> anyhow::Result<()> {
    let gitops::Binaries { health, flux, kubectl } = gitops::ensure_built()?;
    println!("gitops-health:  {} (kstatus, argo-health)", health.display());
    println!("flux-health:    {}", flux.display());
    println!("kubectl:        {}", kubectl.display());
    Ok(())
}

fn control_plane_part() -> anyhow::Result<()> {
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

fn previous_kubernetes_part() -> anyhow::Result<()> {
    let release = release_binaries::ensure_built(control_plane::PREVIOUS)?;
    print_versions(&[
        ("kube-apiserver: ", &release.kube_apiserver),
        ("kube-controller-manager:", &release.kube_controller_manager),
        ("kube-scheduler: ", &release.kube_scheduler),
        ("kubelet:        ", &release.kubelet),
    ])
}

/// One line per binary: its label, path and what `--version` says.
fn print_versions(binaries: &[(&str, &std::path::Path)]) -> anyhow::Result<()> {
    for (name, binary) in binaries {
        println!("{name} {} ({})", binary.display(), control_plane::version_of(binary)?);
    }
    Ok(())
}

fn node_part() -> anyhow::Result<()> {
    let node = node_binaries::ensure_built()?;
    print_versions(&[
        ("kubelet:        ", &node.kubelet),
        ("kube-controller-manager:", &node.kube_controller_manager),
        ("kube-scheduler: ", &node.kube_scheduler),
        ("containerd:     ", &node.containerd),
    ])
}
