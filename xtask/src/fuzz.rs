//! `cargo xtask fuzz`: every fuzz target (the `fuzz` test of the API, agent and engine
//! crates) with many more cases than the default test run's 10,000 each.
//!
//! The targets are proptest properties over generated and mutated inputs (see
//! `autopilot_api::fuzz`): no input panics, every refusal says why, and what is accepted
//! keeps the crate's invariants. Built optimised, as the case count is large.

use std::process::Command;

use anyhow::Context as _;

/// The crates that have a `fuzz` test target.
const CRATES: &[&str] = &["autopilot-api", "autopilot-signal", "autopilot-engine"];

/// Arguments of `cargo xtask fuzz`.
#[derive(clap::Args)]
pub struct Args {
    /// Cases per target.
    #[arg(long, default_value_t = 100_000)]
    cases: u32,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { cases } = args;
    println!("==> {cases} cases per fuzz target, release build");
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(crate::workspace_root()).args(["test", "--locked", "--release"]);
    for package in CRATES {
        command.args(["--package", package]);
    }
    command.args(["--test", "fuzz"]).env("K0S_FUZZ_CASES", cases.to_string());
    let status = command.status().context("running cargo test")?;
    anyhow::ensure!(status.success(), "a fuzz target failed ({status})");
    Ok(())
}
