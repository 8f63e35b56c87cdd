//! `cargo xtask chaos leader|agent --kills N` and `cargo xtask chaos control-plane`: the
//! fault campaigns of `integration/tests/e2e/chaos.rs` (the tests `chaos::*` of the `e2e`
//! test binary) at full size. Each round of the campaign is a v1<->v2 update of 3 controllers
//! and 6 workers with real agents during which one process is SIGKILLed (the leader, or the
//! node in a chosen phase) and restarted; the campaign fails on any broken invariant and prints
//! the kills survived and the worst delay a kill added. The default test run does the same with
//! 2 kills each (the smoke).

use std::process::Command;

use anyhow::Context as _;

/// Arguments of `cargo xtask chaos`.
#[derive(clap::Args)]
pub struct Args {
    /// Whom to kill.
    #[command(subcommand)]
    campaign: Campaign,
}

#[derive(clap::Subcommand)]
enum Campaign {
    /// SIGKILL the leading controller at a different point of each round (plan created, a
    /// controller updating, mid-drain, a worker downloading, at uncordon).
    Leader {
        /// Rounds with a kill (plus one baseline round without).
        #[arg(long, default_value_t = 20)]
        kills: usize,
        /// Replay a campaign's random jitter.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// SIGKILL the node whose agent reached a chosen phase (downloading, applying the update,
    /// between the swap and the restart, during the new binary's trial boot, uncordoning),
    /// controllers and workers in turn, with its process group.
    Agent {
        /// Rounds with a kill (plus one baseline round without).
        #[arg(long, default_value_t = 20)]
        kills: usize,
        /// Replay a campaign's random jitter.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Restart every API server in turn, then etcd, each in the middle of a round (when a
    /// worker, then a controller, downloads); prints the delay each outage added.
    ControlPlane,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    // The test's full name in the `e2e` test binary (`<scenario module>::<test>`).
    let (test, kills, seed) = match args.campaign {
        Campaign::Leader { kills, seed } => ("chaos::leader_kills", kills, seed),
        Campaign::Agent { kills, seed } => ("chaos::agent_kills", kills, seed),
        Campaign::ControlPlane => ("chaos::control_plane_restarts", 2, None),
    };
    integration::control_plane::ensure_built()?;
    let k0s = crate::test::build_k0s()?;
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command
        .current_dir(crate::workspace_root())
        .args(["test", "--locked", "-p", "integration", "--test", "e2e", "--", "--exact"])
        .args([test, "--nocapture"])
        .env("K0S_BIN", &k0s)
        .env("K0S_CHAOS_KILLS", kills.to_string());
    if let Some(seed) = seed {
        command.env("K0S_CHAOS_SEED", seed.to_string());
    }
    let status = command.status().context("running the campaign")?;
    anyhow::ensure!(status.success(), "the {test} campaign failed ({status})");
    Ok(())
}
