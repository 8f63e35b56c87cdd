//! The node side of autopilot.
//!
//! Every `k0s worker` runs [`run_worker`]: with its own node credentials it registers its
//! `Node` (there is no kubelet in this distribution's test topology, so the worker keeps the
//! Node's `Ready` condition and its node lease fresh itself). The signal agent that acts on
//! update signals builds on this crate.
//!
//! Not here: anything the leader does (that is `autopilot-controller`).

pub mod download;
pub mod host;
pub mod node;
pub mod phase;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use tracing::info;

/// Command-line arguments of `k0s worker`.
#[derive(Clone, Debug, clap::Args)]
pub struct WorkerArgs {
    /// Create this node's `Node` if it is absent and keep its Ready condition and node lease
    /// fresh (the job a kubelet would do).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, value_name = "BOOL")]
    pub register_node: bool,

    /// How often the Node's Ready condition and node lease are renewed.
    #[arg(long, default_value = "10s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub heartbeat_interval: Duration,

    /// How long to keep retrying while the API server is unreachable at startup before
    /// giving up with an error.
    #[arg(long, default_value = "60s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub startup_timeout: Duration,
}

/// What the binary resolved before starting the worker: the connection and this node's
/// identity (flags shared with `k0s controller`, plus facts fixed at build time).
#[derive(Clone)]
pub struct Process {
    /// Client with this node's own credentials.
    pub client: kube::Client,
    /// The API server URL the client talks to (for error messages).
    pub server_url: String,
    /// This node's `Node` name.
    pub node_name: String,
    /// This node's data directory (created if missing).
    pub data_dir: PathBuf,
    /// The k0s version this binary was built as (e.g. `v1.35.0+k0s.0`).
    pub version: &'static str,
}

/// Run the worker until `shutdown` resolves.
pub async fn run_worker(
    args: WorkerArgs,
    process: Process,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let WorkerArgs { register_node, heartbeat_interval, startup_timeout } = args;
    anyhow::ensure!(
        !heartbeat_interval.is_zero(),
        "--heartbeat-interval must be greater than zero"
    );
    let Process { client, server_url, node_name, data_dir, version } = process;
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    info!(node.name = %node_name, version, register_node, "starting worker");

    let mut shutdown = std::pin::pin!(shutdown);
    let heartbeat = node::Heartbeat { name: node_name, version: version.to_string() };
    if register_node {
        tokio::select! {
            result = heartbeat.register(&client, &server_url, startup_timeout) => result?,
            () = &mut shutdown => return Ok(()),
        }
        heartbeat.run(&client, heartbeat_interval, shutdown).await;
    } else {
        shutdown.await;
    }
    info!("worker stopped");
    Ok(())
}
