//! `cargo xtask test`: every test, at every level, against the real control plane.
//!
//! Builds (once) the pinned kube-apiserver, etcd, Prometheus, cosign 2 and 3, the GitOps
//! tools (kstatus, Argo CD's health script runner, kubectl), Node.js with Renovate and Gitea,
//! and the real nodes' binaries, builds the `k0s` binary the end-to-end scenarios run, then
//! runs `cargo test` over the whole workspace. Nothing is opt-in; only the real-node scenarios
//! are left out where the machine cannot run real nodes (not root, packages missing), and
//! then they are named as not run.

use std::process::Command;

use anyhow::Context as _;

/// Arguments of `cargo xtask test`.
#[derive(clap::Args)]
pub struct Args {
    /// How many tests of one test binary run at once (each end-to-end test starts its own
    /// etcd and API servers, so keep this small on small machines).
    #[arg(long, default_value_t = 2)]
    test_threads: usize,

    /// Extra arguments passed to `cargo test` before `--` (e.g. `-p integration --test e2e
    /// plan_quorum`: the scenarios whose test names contain `plan_quorum`, as every end-to-end
    /// scenario is a module of the one test binary `e2e`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    cargo_args: Vec<String>,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { test_threads, cargo_args } = args;
    // Before anything is built: a missing tool stops the run now, named, not deep in it.
    crate::prerequisites::check()?;
    integration::control_plane::ensure_built()?;
    integration::prometheus::ensure_built()?;
    integration::cosign::ensure_built()?;
    integration::gitops::ensure_built()?;
    integration::renovate::ensure_built()?;
    integration::node_binaries::ensure_built()?;
    let k0s = build_k0s()?;
    let not_run = integration::real_node::prerequisites().err();
    let cargo_args = match &not_run {
        Some(reason) => {
            println!(
                "==> NOT RUN: the real-node tests (every test whose name contains `{REAL_NODE_SCENARIOS}`): {reason}"
            );
            without_real_node_tests(cargo_args)
        }
        None => cargo_args,
    };
    println!("==> running tests (k0s binary {})", k0s.display());
    let mut command = Command::new(cargo());
    command
        .current_dir(crate::workspace_root())
        .args(["test", "--workspace", "--locked", "--no-fail-fast"])
        .args(&cargo_args)
        .env("K0S_BIN", &k0s)
        .env("RUST_TEST_THREADS", test_threads.to_string());
    let status = command.status().context("running cargo test")?;
    if let Some(reason) = &not_run {
        println!(
            "==> NOT RUN (not passed): the real-node tests (every test whose name contains `{REAL_NODE_SCENARIOS}`): {reason}"
        );
    }
    anyhow::ensure!(status.success(), "tests failed ({status})");
    Ok(())
}

/// What the name of every end-to-end test that needs real nodes contains (the `real_nodes`
/// scenario, and tests of other scenarios named `…_on_real_nodes`;
/// [`integration::real_node::prerequisites`]): left out, and said so, where those are missing.
const REAL_NODE_SCENARIOS: &str = "real_nodes";

/// `cargo_args` with the test binaries told to skip every test whose name contains
/// [`REAL_NODE_SCENARIOS`] (after the `--` that separates cargo's arguments from theirs,
/// added when missing).
fn without_real_node_tests(mut cargo_args: Vec<String>) -> Vec<String> {
    if !cargo_args.iter().any(|a| a == "--") {
        cargo_args.push("--".to_owned());
    }
    cargo_args.extend(["--skip".to_owned(), REAL_NODE_SCENARIOS.to_owned()]);
    cargo_args
}

/// Build the `k0s` binary the scenarios copy into each node, and return its path.
pub fn build_k0s() -> anyhow::Result<std::path::PathBuf> {
    build_k0s_profile("dev", "debug")
}

/// Build an optimised `k0s` (for benchmarks), and return its path.
pub fn build_k0s_release() -> anyhow::Result<std::path::PathBuf> {
    build_k0s_profile("release", "release")
}

fn build_k0s_profile(profile: &str, dir: &str) -> anyhow::Result<std::path::PathBuf> {
    println!("==> building k0s ({profile} profile)");
    let status = build_k0s_command(profile).status().context("running cargo build")?;
    anyhow::ensure!(status.success(), "building k0s failed ({status})");
    Ok(k0s_path(dir))
}

/// The `cargo build` of the `k0s` binary with `profile`.
pub fn build_k0s_command(profile: &str) -> Command {
    let mut command = Command::new(cargo());
    command.current_dir(crate::workspace_root()).args([
        "build",
        "--locked",
        "--profile",
        profile,
        "--package",
        "k0s",
        "--bin",
        "k0s",
    ]);
    command
}

/// Where the `k0s` binary of the profile directory `dir` (`debug`, `release`) is built.
pub fn k0s_path(dir: &str) -> std::path::PathBuf {
    target_dir().join(dir).join("k0s")
}

/// The `target` directory (`$CARGO_TARGET_DIR`, else `<workspace>/target`).
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"))
}

/// The cargo that runs this xtask.
fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn the_real_node_tests_are_skipped_after_the_test_binaries_separator() {
        assert_eq!(without_real_node_tests(Vec::new()), strings(&["--", "--skip", "real_nodes"]));
        assert_eq!(
            without_real_node_tests(strings(&["-p", "integration", "--", "--nocapture"])),
            strings(&["-p", "integration", "--", "--nocapture", "--skip", "real_nodes"])
        );
    }
}
