//! Project automation: `cargo xtask <command>`.
//!
//! One module per subcommand. Everything a newcomer or CI needs goes through here, so the
//! README's commands stay short and true.

mod bench;
mod bench_node;
mod bench_upgrade;
mod chaos;
mod control_plane;
mod crdgen;
mod demo;
mod dist;
mod fuzz;
mod hot;
mod prerequisites;
#[cfg(test)]
mod structure;
mod test;

use clap::{Parser, Subcommand};

/// Project automation for the k0s autopilot workspace.
#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate the CRD manifests in manifests/crds from the Rust types.
    Crdgen(crdgen::Args),
    /// Build (once) and cache the pinned kube-apiserver and etcd used by tests and the demo,
    /// the Prometheus used by tests, the real nodes' kubelet, kube-controller-manager,
    /// kube-scheduler and containerd, cosign 2 and 3 (the signing scenario signs with them),
    /// and the GitOps tools (kstatus, Argo CD's health script runner, kubectl).
    ControlPlane(control_plane::Args),
    /// Run the demo on a local real control plane.
    Demo(demo::Args),
    /// Build a k0s binary reporting `--version`, its sha256, an optional signature and a
    /// ready-to-edit Plan that installs it, into `target/dist/<version>/`.
    Dist(dist::Args),
    /// Run every test: unit, shell and end-to-end against the real control plane.
    Test(test::Args),
    /// Run a benchmark (`cargo xtask bench plan`: the engine on the real control plane;
    /// `cargo xtask bench download`: the agent's download + verify).
    Bench(bench::Args),
    /// Build a copy of k0s that reports VERSION and print its path (a step of the demo, run
    /// as a child so its build output goes to the demo's log).
    #[command(hide = true)]
    BuildK0sVersion {
        /// The version the copy reports.
        version: String,
    },
    /// Run every fuzz target with 100,000 cases each (the default test run has 10,000).
    Fuzz(fuzz::Args),
    /// Run a fault campaign (`cargo xtask chaos leader --kills 20`, `chaos agent`): real
    /// agents, v1<->v2 rounds, one SIGKILL per round; fails on any broken invariant.
    Chaos(chaos::Args),
    /// Profile the idle worker and controllers (callgrind) and write the functions they run
    /// to crates/k0s/hot-functions.txt, which the release link lays out first.
    HotFunctions(hot::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crdgen(args) => crdgen::run(args),
        Command::ControlPlane(args) => control_plane::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Dist(args) => dist::run(args),
        Command::Test(args) => test::run(args),
        Command::Bench(args) => bench::run(args),
        Command::BuildK0sVersion { version } => {
            println!("{}", integration::k0s_binary_with_version(&version)?.display());
            Ok(())
        }
        Command::Fuzz(args) => fuzz::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::HotFunctions(args) => hot::run(args),
    }
}

/// The workspace root (xtask lives one level below it).
fn workspace_root() -> std::path::PathBuf {
    let manifest_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().expect("xtask sits inside the workspace").to_path_buf()
}
