//! The node side of autopilot.
//!
//! Every `k0s worker` runs [`run_worker`]: with its own node credentials it registers its
//! `Node` (there is no kubelet in this distribution's test topology, so the worker keeps the
//! Node's `Ready` condition and its node lease fresh itself). The signal agent that acts on
//! update signals builds on this crate.
//!
//! Not here: anything the leader does (that is `autopilot-controller`).

pub mod agent;
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

    /// How the worker restarts into a new binary after an update: `exec` re-executes itself
    /// with the same arguments (no supervisor needed); `exit` exits for a supervisor
    /// (systemd `Restart=always` and the like) to start the new binary.
    #[arg(long, value_enum, default_value_t = RestartMode::Exec)]
    pub restart: RestartMode,

    /// Download limits for update payloads.
    #[command(flatten)]
    pub download: download::DownloadArgs,

    /// Do not act on update signals: this node's binary is managed by other means (plans
    /// that target it wait for someone else to report its progress).
    #[arg(long)]
    pub disable_update_agent: bool,
}

/// How a node restarts into a new binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RestartMode {
    /// Re-execute the (new) binary in place, same arguments.
    Exec,
    /// Exit; a supervisor starts the new binary.
    Exit,
}

/// How a worker run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerExit {
    /// Stopped by a signal (SIGTERM/SIGINT).
    Stopped,
    /// A new binary is in place: restart as `mode` says.
    Restart(RestartMode),
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
    /// The path of the running binary (resolved at start, before any update replaces it).
    pub binary: PathBuf,
}

/// Run the worker until `shutdown` resolves or an update asks for a restart.
pub async fn run_worker(
    args: WorkerArgs,
    process: Process,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<WorkerExit> {
    let WorkerArgs {
        register_node,
        heartbeat_interval,
        startup_timeout,
        restart,
        download,
        disable_update_agent,
    } = args;
    anyhow::ensure!(
        !heartbeat_interval.is_zero(),
        "--heartbeat-interval must be greater than zero"
    );
    let Process { client, server_url, node_name, data_dir, version, binary } = process;
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    info!(node.name = %node_name, version, register_node, binary = %binary.display(), "starting worker");
    let host = host::LinuxHost::new(binary, data_dir, download.config(version))
        .context("preparing the update host")?;

    let mut shutdown = std::pin::pin!(shutdown);
    let heartbeat = node::Heartbeat { name: node_name.clone(), version: version.to_string() };
    if register_node {
        tokio::select! {
            result = heartbeat.register(&client, &server_url, startup_timeout) => result?,
            () = &mut shutdown => return Ok(WorkerExit::Stopped),
        }
    }
    let agent = agent::Agent { name: node_name, version: version.to_string(), kubelet: true };
    let (stop_beat, beat_stopped) = tokio::sync::oneshot::channel::<()>();
    let beat = async {
        if register_node {
            heartbeat
                .run(&client, heartbeat_interval, async {
                    let _ = beat_stopped.await;
                })
                .await;
        }
    };
    let agent_run = async {
        let outcome = if disable_update_agent {
            info!("update agent disabled: not acting on update signals");
            shutdown.await;
            Ok(agent::Outcome::Stopped)
        } else {
            agent::run::<k8s_openapi::api::core::v1::Node, _>(
                client.clone(),
                agent,
                &host,
                &mut shutdown,
            )
            .await
        };
        let _ = stop_beat.send(());
        outcome
    };
    let (outcome, ()) = tokio::join!(agent_run, beat);
    let exit = match outcome? {
        agent::Outcome::Stopped => WorkerExit::Stopped,
        agent::Outcome::Restart => WorkerExit::Restart(restart),
    };
    info!(?exit, "worker stopped");
    Ok(exit)
}

/// What a controller's agent needs: it acts on the controller's own `ControlNode`.
#[derive(Clone, Debug)]
pub struct ControllerAgent {
    /// The ControlNode name.
    pub name: String,
    /// The running k0s version.
    pub version: &'static str,
    /// The path of the running binary (resolved at start).
    pub binary: PathBuf,
    /// This node's data directory.
    pub data_dir: PathBuf,
    /// `--enable-worker`: a kubelet runs here, so the leader drains it.
    pub kubelet: bool,
    /// Download limits.
    pub download: download::DownloadConfig,
}

/// Run the signal agent of a controller on its own `ControlNode` until `shutdown` resolves
/// or an update asks for a restart (then the caller stops the controller and restarts).
pub async fn run_controller_agent(
    client: kube::Client,
    agent: ControllerAgent,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<agent::Outcome> {
    let ControllerAgent { name, version, binary, data_dir, kubelet, download } = agent;
    let host =
        host::LinuxHost::new(binary, data_dir, download).context("preparing the update host")?;
    let agent = agent::Agent { name, version: version.to_string(), kubelet };
    agent::run::<autopilot_api::v1beta2::ControlNode, _>(client, agent, &host, shutdown).await
}
