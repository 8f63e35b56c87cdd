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
pub mod metrics;
pub mod node;
pub mod preflight;
pub mod status;
pub mod trial;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
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

    /// How long to keep retrying while the API server cannot answer at startup before
    /// giving up with an error; `0s` (the default) keeps retrying for as long as it takes,
    /// so an outage never kills a node. A misconfiguration (TLS trust, credentials) fails at
    /// once either way.
    #[arg(long, default_value = "0s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub startup_timeout: Duration,

    /// How the worker restarts into a new binary after an update: `exec` re-executes itself
    /// with the same arguments (no supervisor needed); `exit` exits for a supervisor
    /// (systemd `Restart=always` and the like) to start the new binary.
    #[arg(long, value_enum, default_value_t = RestartMode::Exec)]
    pub restart: RestartMode,

    /// How long a new binary may take to become healthy in its trial boot (counted only
    /// while the API server answers) before the node goes back to the binary it ran.
    #[arg(long, default_value = "2m", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub trial_timeout: Duration,

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
    /// Where the agent records its metrics (registered by the caller when
    /// `--metrics-address` is set; otherwise recorded into the void).
    pub metrics: metrics::Metrics,
}

/// Run the worker until `shutdown` is cancelled or an update asks for a restart.
pub async fn run_worker(
    args: WorkerArgs,
    process: Process,
    shutdown: CancellationToken,
) -> anyhow::Result<WorkerExit> {
    let WorkerArgs {
        register_node,
        heartbeat_interval,
        startup_timeout,
        restart,
        trial_timeout: _,
        download,
        disable_update_agent,
    } = args;
    anyhow::ensure!(
        !heartbeat_interval.is_zero(),
        "--heartbeat-interval must be greater than zero"
    );
    let Process { client, server_url, node_name, data_dir, version, binary, metrics } = process;
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    info!(node.name = %node_name, version, register_node, binary = %binary.display(), "starting worker");
    let board = status::Board::default();
    // The status socket is served until everything else has stopped, or until this
    // function returns early (the guard cancels it when dropped).
    let stop_status = CancellationToken::new();
    let status_task = tokio::spawn(serve_status(
        data_dir.clone(),
        StatusFacts {
            version,
            role: status::Role::Worker,
            node_name: node_name.clone(),
            binary: binary.clone(),
            update_agent: !disable_update_agent,
            board: board.clone(),
            leader: None,
        },
        stop_status.clone().cancelled_owned(),
    ));
    let stop_status = stop_status.drop_guard();
    let exec_allow_list = preflight::exec::allow_list_path(&data_dir);
    let host = host::LinuxHost::new(binary, data_dir, download.config(version))
        .context("preparing the update host")?
        .with_metrics(&metrics);

    let heartbeat = node::Heartbeat { name: node_name.clone(), version: version.to_string() };
    if register_node {
        tokio::select! {
            result = heartbeat.register(&client, &server_url, startup_timeout) => result?,
            () = shutdown.cancelled() => return Ok(WorkerExit::Stopped),
        }
    }
    let agent = agent::Agent {
        name: node_name,
        version: version.to_string(),
        kubelet: true,
        airgap_only: false,
        board,
        metrics,
        exec_allow_list,
    };
    // The heartbeat keeps the Node Ready until the agent has stopped.
    let stop_beat = CancellationToken::new();
    let beat = async {
        if register_node {
            heartbeat.run(&client, heartbeat_interval, stop_beat.cancelled()).await;
        }
    };
    let agent_run = async {
        let outcome = if disable_update_agent {
            info!("update agent disabled: not acting on update signals");
            shutdown.cancelled().await;
            Ok(agent::Outcome::Stopped)
        } else {
            agent::run::<k8s_openapi::api::core::v1::Node, _>(
                client.clone(),
                agent,
                &host,
                shutdown.cancelled(),
            )
            .await
        };
        stop_beat.cancel();
        outcome
    };
    let (outcome, ()) = tokio::join!(agent_run, beat);
    drop(stop_status);
    let _ = status_task.await;
    let exit = match outcome? {
        agent::Outcome::Stopped => WorkerExit::Stopped,
        agent::Outcome::Restart => WorkerExit::Restart(restart),
    };
    info!(?exit, "worker stopped");
    Ok(exit)
}

/// What a controller's node side needs: its update agent acts on the controller's own
/// `ControlNode` (and, with `--enable-worker`, airgap signals on its own `Node`).
#[derive(Clone, Debug)]
pub struct ControllerNode {
    /// The ControlNode (and Node) name.
    pub name: String,
    /// The running k0s version.
    pub version: &'static str,
    /// The path of the running binary (resolved at start).
    pub binary: PathBuf,
    /// This node's data directory.
    pub data_dir: PathBuf,
    /// `--enable-worker`: this controller is also a worker node. It registers its `Node` and
    /// keeps it Ready (no kubelet in this distribution's test topology), the leader drains
    /// it, and its agent acts on airgap signals on that Node too.
    pub worker: bool,
    /// Whether the update agent acts on signals (`--disable-update-agent` turns it off).
    pub update_agent: bool,
    /// Download limits.
    pub download: download::DownloadConfig,
    /// How often the Node's Ready condition is renewed (`worker` only).
    pub heartbeat_interval: Duration,
    /// How long Node registration retries an unreachable API server (`worker` only).
    pub startup_timeout: Duration,
    /// Whether this controller leads now (shown by `k0s status`).
    pub leading: tokio::sync::watch::Receiver<bool>,
    /// Where the agents record their metrics.
    pub metrics: metrics::Metrics,
}

/// Run the node side of a controller until `shutdown` is cancelled or an update asks for a
/// restart (then the caller stops the controller and restarts): the status socket, the
/// Node heartbeat of a controller+worker, and the update agents.
pub async fn run_controller_node(
    client: kube::Client,
    server_url: &str,
    node: ControllerNode,
    shutdown: CancellationToken,
) -> anyhow::Result<agent::Outcome> {
    let ControllerNode {
        name,
        version,
        binary,
        data_dir,
        worker,
        update_agent,
        download,
        heartbeat_interval,
        startup_timeout,
        leading,
        metrics,
    } = node;
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let board = status::Board::default();
    // The status socket, the heartbeat and the agents stop together once the agents have
    // stopped (on `shutdown`, or when one of them ends), or when this function returns
    // early (the guard cancels `stop` when dropped).
    let stop = CancellationToken::new();
    let _stop_on_return = stop.clone().drop_guard();
    let status_task = tokio::spawn(serve_status(
        data_dir.clone(),
        StatusFacts {
            version,
            role: if worker { status::Role::ControllerWorker } else { status::Role::Controller },
            node_name: name.clone(),
            binary: binary.clone(),
            update_agent,
            board: board.clone(),
            leader: Some(leading),
        },
        stop.clone().cancelled_owned(),
    ));
    let heartbeat = node::Heartbeat { name: name.clone(), version: version.to_string() };
    if worker {
        tokio::select! {
            result = heartbeat.register(&client, server_url, startup_timeout) => result?,
            () = shutdown.cancelled() => {
                stop.cancel();
                let _ = status_task.await;
                return Ok(agent::Outcome::Stopped);
            }
        }
    }
    let beat = async {
        if worker {
            heartbeat.run(&client, heartbeat_interval, stop.cancelled()).await;
        }
    };
    let agents = async {
        // Whichever way the agents end (an error preparing the host included), `stop` is
        // cancelled after them, so the heartbeat and the status socket stop too.
        let outcome = async {
            if update_agent {
                let exec_allow_list = preflight::exec::allow_list_path(&data_dir);
                let host = host::LinuxHost::new(binary, data_dir, download)
                    .context("preparing the update host")?
                    .with_metrics(&metrics);
                let control_node = agent::Agent {
                    name: name.clone(),
                    version: version.to_string(),
                    kubelet: worker,
                    airgap_only: false,
                    board: board.clone(),
                    metrics: metrics.clone(),
                    exec_allow_list,
                };
                let own_node =
                    agent::Agent { airgap_only: true, kubelet: true, ..control_node.clone() };
                let on_control_node = agent::run::<autopilot_api::v1beta2::ControlNode, _>(
                    client.clone(),
                    control_node,
                    &host,
                    stop.cancelled(),
                );
                let on_node = async {
                    if worker {
                        agent::run::<k8s_openapi::api::core::v1::Node, _>(
                            client.clone(),
                            own_node,
                            &host,
                            stop.cancelled(),
                        )
                        .await
                    } else {
                        stop.cancelled().await;
                        Ok(agent::Outcome::Stopped)
                    }
                };
                tokio::select! {
                    outcome = on_control_node => outcome,
                    outcome = on_node => outcome,
                    () = shutdown.cancelled() => Ok(agent::Outcome::Stopped),
                }
            } else {
                info!("update agent disabled: not acting on update signals");
                shutdown.cancelled().await;
                Ok(agent::Outcome::Stopped)
            }
        }
        .await;
        stop.cancel();
        outcome
    };
    let (outcome, ()) = tokio::join!(agents, beat);
    let _ = status_task.await;
    outcome
}

/// What the status socket reports about this process, besides what changes.
struct StatusFacts {
    version: &'static str,
    role: status::Role,
    node_name: String,
    binary: PathBuf,
    update_agent: bool,
    board: status::Board,
    leader: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Serves the status socket in `data_dir` until `shutdown`; a failure is logged, never
/// fatal (the node keeps working without `k0s status`).
async fn serve_status(data_dir: PathBuf, facts: StatusFacts, shutdown: impl Future<Output = ()>) {
    let started = jiff::Timestamp::now().to_string();
    let pid = std::process::id();
    let report = move || status::Report {
        version: facts.version.to_string(),
        pid,
        role: facts.role,
        node_name: facts.node_name.clone(),
        binary: facts.binary.clone(),
        started: started.clone(),
        leader: facts.leader.as_ref().map(|rx| *rx.borrow()),
        update_agent: facts.update_agent,
        signals: facts.board.signals(),
    };
    if let Err(err) = status::serve(&data_dir, report, shutdown).await {
        tracing::warn!(error = %format!("{:#}", anyhow::Error::new(err)), "status socket not served; `k0s status` will not work");
    }
}
