//! The `k0s` multicall binary: argument parsing and wiring only.
//!
//! `k0s controller --enable-autopilot` runs the controller side of autopilot
//! (`autopilot-controller`), `k0s worker` the node side (`autopilot-signal`). Everything that
//! decides or acts lives in those crates; `k0s autopilot pause|resume|abort` only annotates
//! the Plan (module [`steer`]).

mod metrics;
mod ops;
mod steer;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

/// The version this binary was built as (`K0S_VERSION` at build time); the same value is
/// reported everywhere (CLI, ControlNode, Node annotation).
const VERSION: &str = env!("K0S_BUILD_VERSION");

/// k0s: a Kubernetes distribution that updates itself (autopilot).
#[derive(Parser)]
#[command(name = "k0s", version = VERSION, disable_version_flag = true)]
struct Cli {
    /// Log filter (e.g. `info`, `debug`, `autopilot_controller=debug`). Default: `info`;
    /// the one-shot `autopilot` verbs log nothing unless asked (their result is their output).
    #[arg(long, global = true, env = "K0S_LOG", value_name = "FILTER")]
    log_level: Option<String>,

    /// Log output format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Plain)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Print the k0s version of this binary.
    Version,
    /// Run a controller node's autopilot (leader election, Plans, ControlNode).
    Controller {
        #[command(flatten)]
        node: NodeFlags,
        #[command(flatten)]
        args: autopilot_controller::Args,
        #[command(flatten)]
        updater: UpdaterFlags,
        #[command(flatten)]
        agent: ControllerAgentFlags,
    },
    /// Run a worker node: register its Node and act on update signals.
    Worker {
        #[command(flatten)]
        node: NodeFlags,
        #[command(flatten)]
        args: autopilot_signal::WorkerArgs,
    },
    /// Show the status of the k0s process running on this machine (read from its status
    /// socket in the data directory): version, pid, role and update progress.
    Status {
        /// The data directory of the k0s process to ask.
        #[arg(long, default_value = "/var/lib/k0s", value_name = "DIR")]
        data_dir: PathBuf,

        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t = StatusFormat::Text)]
        output: StatusFormat,
    },
    /// Follow, preview and steer plans; run preflight checks ad hoc.
    Autopilot {
        #[command(subcommand)]
        command: AutopilotCommand,
    },
}

/// `k0s autopilot ...`: follow a plan (`status`), and steer the running plan through
/// annotations on the Plan (which `kubectl annotate` can set too), so a steer survives a
/// change of leader.
#[derive(Subcommand)]
enum AutopilotCommand {
    /// Show the plan at a glance: state, command, progress and ETA, each node's phase, what
    /// is blocking, the last Events (`--watch` to follow it live).
    Status(ops::StatusArgs),
    /// Preview a plan on the live cluster, writing nothing: the targets it resolves, the
    /// order and batches, and every problem it would hit. Exit status 1 if it would not run.
    Preview(ops::PreviewArgs),
    /// Run preflight checks ad hoc, with no update: the checks of a `preflight` command run on
    /// their nodes through the Plan `autopilot` (only while no plan runs); prints a table per
    /// check and node. Exit status 0 success, 1 warn, 2 error.
    Check(ops::CheckArgs),
    /// Pause the plan: no new node is signalled; nodes in flight finish
    /// (annotation `autopilot.k0sproject.io/paused=true`).
    Pause(steer::Args),
    /// Resume a paused plan (removes the `autopilot.k0sproject.io/paused` annotation).
    Resume(steer::Args),
    /// Abort the plan: no new node is signalled; nodes in flight finish, then the plan ends
    /// `Aborted` with no autopilot cordon left (annotation `autopilot.k0sproject.io/abort=true`;
    /// a changed spec starts a new run only once it is removed).
    Abort(steer::Args),
}

/// How `k0s status` prints.
#[derive(Clone, Copy, clap::ValueEnum)]
enum StatusFormat {
    /// Human-readable lines.
    Text,
    /// The status document as JSON.
    Json,
}

/// Flags every node process shares.
#[derive(clap::Args)]
struct NodeFlags {
    /// Kubeconfig to reach the API server: admin credentials for a controller, the node's own
    /// credentials (`system:node:<name>`) for a worker.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    kubeconfig: PathBuf,

    /// Directory for this node's state (status socket, airgap bundles).
    #[arg(long, default_value = "/var/lib/k0s", value_name = "DIR")]
    data_dir: PathBuf,

    /// This node's name: its ControlNode (controller) or Node (worker). Default: the host
    /// name, lower-cased.
    #[arg(long, env = "AUTOPILOT_HOSTNAME", value_name = "NAME")]
    node_name: Option<String>,

    /// Serve Prometheus metrics (`k0s_autopilot_*`, OpenMetrics text) on `GET /metrics` at
    /// this address (e.g. `127.0.0.1:9443`). Off unless set.
    #[arg(long, env = "K0S_METRICS_ADDRESS", value_name = "IP:PORT")]
    metrics_address: Option<std::net::SocketAddr>,
}

/// Flags of the signal agent a controller runs for its own ControlNode.
#[derive(clap::Args)]
struct ControllerAgentFlags {
    /// How the controller restarts into a new binary after an update: `exec` re-executes
    /// itself with the same arguments (no supervisor needed); `exit` exits for a supervisor.
    #[arg(long, value_enum, default_value_t = autopilot_signal::RestartMode::Exec)]
    restart: autopilot_signal::RestartMode,

    /// How long a new binary may take to become healthy in its trial boot (counted only
    /// while the API server answers) before the node goes back to the binary it ran.
    #[arg(long, default_value = "2m", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    trial_timeout: std::time::Duration,

    /// Download limits for update payloads.
    #[command(flatten)]
    download: autopilot_signal::download::DownloadArgs,

    /// Do not act on update signals for this controller's ControlNode: its binary is managed
    /// by other means (plans that target it wait for someone else to report its progress).
    #[arg(long)]
    disable_update_agent: bool,

    /// With `--enable-worker`: how often this node's Node Ready condition and node lease are
    /// renewed.
    #[arg(long, default_value = "10s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    heartbeat_interval: std::time::Duration,
}

/// Flags of the updater, which runs on the leading controller (DESIGN §6).
#[derive(clap::Args)]
struct UpdaterFlags {
    /// How often the `periodic` update strategy asks the update server (e.g. `10m`, `30s`).
    #[arg(
        long,
        env = "K0S_UPDATE_PERIOD",
        default_value = "10m",
        value_parser = autopilot_api::duration::parse,
        value_name = "DURATION"
    )]
    update_period: std::time::Duration,

    /// Send cluster information (storage type, cluster ID, node counts, architectures, CNI)
    /// to the update server as request headers. Off unless the operator opts in.
    #[arg(long, env = "K0S_SEND_CLUSTER_INFO")]
    send_cluster_info: bool,
}

/// What `NodeFlags` resolve to before a component starts.
struct ResolvedNode {
    client: kube::Client,
    config: kube::Config,
    server_url: String,
    node_name: String,
    data_dir: PathBuf,
    /// The registry the components register their metrics in (API errors already are).
    registry: prometheus_client::registry::Registry,
    /// The bound `--metrics-address`, if set; served once the components registered.
    metrics_listener: Option<tokio::net::TcpListener>,
}

impl NodeFlags {
    /// The same flags without `--metrics-address`: a trial boot serves no metrics.
    fn without_metrics(self) -> Self {
        Self { metrics_address: None, ..self }
    }

    async fn resolve(self) -> anyhow::Result<ResolvedNode> {
        let NodeFlags { kubeconfig, data_dir, node_name, metrics_address } = self;
        let node_name = resolve_node_name(node_name.as_deref())?;
        let metrics_listener = match metrics_address {
            Some(address) => Some(metrics::bind(address).await?),
            None => None,
        };
        let mut registry = metrics::registry();
        let api_errors = metrics::register_api_errors(&mut registry);
        let (client, config, server_url) = connect_counting_errors(&kubeconfig, api_errors).await?;
        Ok(ResolvedNode {
            client,
            config,
            server_url,
            node_name,
            data_dir,
            registry,
            metrics_listener,
        })
    }
}

/// Serve `registry` on `listener` (if `--metrics-address` was set) until the returned
/// guard is dropped.
fn serve_metrics(
    listener: Option<tokio::net::TcpListener>,
    registry: prometheus_client::registry::Registry,
) -> DropGuard {
    let stop = CancellationToken::new();
    if let Some(listener) = listener {
        tokio::spawn(metrics::serve(
            listener,
            std::sync::Arc::new(registry),
            stop.clone().cancelled_owned(),
        ));
    }
    stop.drop_guard()
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            use clap::error::ErrorKind;
            return match err.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = err.print();
                    ExitCode::SUCCESS
                }
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = err.print();
                    ExitCode::from(2)
                }
                _ => {
                    // One clear line: clap's first line names the flag and the problem; the
                    // accepted values, when clap lists them, are appended.
                    let rendered = err.render().to_string();
                    let mut line =
                        rendered.lines().next().unwrap_or("error: invalid arguments").to_string();
                    if let Some(values) =
                        rendered.lines().map(str::trim).find(|l| l.starts_with("[possible values"))
                    {
                        line = format!("{line} {values}");
                    }
                    eprintln!("{line} (see 'k0s --help')");
                    ExitCode::from(2)
                }
            };
        }
    };
    let default_filter = match cli.command {
        Command::Autopilot { .. } => "off",
        Command::Version
        | Command::Controller { .. }
        | Command::Worker { .. }
        | Command::Status { .. } => "info",
    };
    let filter = cli.log_level.as_deref().unwrap_or(default_filter);
    if let Err(err) = init_logging(filter, cli.log_format) {
        eprintln!("error: {err:#}");
        return ExitCode::from(2);
    }
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        // The report says why; nothing more to print.
        Err(err) if err.is::<ops::WouldNotRun>() => ExitCode::FAILURE,
        Err(err) if err.is::<ops::CheckExit>() => {
            ExitCode::from(err.downcast_ref::<ops::CheckExit>().map_or(2, |exit| exit.0))
        }
        Err(err) => {
            eprintln!("error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    if let Some(token) = autopilot_signal::trial::token() {
        return trial_boot(command, &token);
    }
    match command {
        Command::Version => {
            println!("{VERSION}");
            Ok(())
        }
        Command::Controller { node, args, updater, agent } => {
            // Resolved before anything can replace the file (see the worker).
            let binary = std::env::current_exe().context("finding the running binary")?;
            let ControllerAgentFlags {
                restart: restart_mode,
                trial_timeout,
                download,
                disable_update_agent,
                heartbeat_interval,
            } = agent;
            let mut trial = None;
            let runtime = runtime()?;
            let restart_due = runtime.block_on(async {
                args.validate()?;
                // First: the one SIGTERM/SIGINT listener, shared by everything that must stop.
                let terminated = on_termination();
                let UpdaterFlags { update_period, send_cluster_info } = updater;
                let ResolvedNode {
                    client,
                    config,
                    server_url,
                    node_name,
                    data_dir,
                    mut registry,
                    metrics_listener,
                } = node.resolve().await?;
                let controller_metrics =
                    autopilot_controller::metrics::Metrics::register(&mut registry);
                let agent_metrics = autopilot_signal::metrics::Metrics::register(&mut registry);
                let updater_metrics = autopilot_updater::metrics::Metrics::register(&mut registry);
                let _metrics_server = serve_metrics(metrics_listener, registry);
                trial = Some(Trial {
                    config: config.clone(),
                    data_dir: data_dir.clone(),
                    download: download.config(VERSION),
                    timeout: trial_timeout,
                });
                let tasks = TaskTracker::new();
                // The updater runs beside the controller and acts only while it leads; it stops
                // once the controller has stopped.
                let (leading, leading_rx) = tokio::sync::watch::channel(false);
                let stop_updater = CancellationToken::new();
                let updater = tasks.spawn(autopilot_updater::run::run(
                    client.clone(),
                    autopilot_updater::run::UpdaterProcess::local(
                        VERSION,
                        update_period,
                        send_cluster_info,
                        args.allow_unverified_payloads,
                        updater_metrics,
                    ),
                    leading_rx,
                    stop_updater.clone(),
                ));
                // The node side stops on SIGTERM/SIGINT. The controller stops on SIGTERM/SIGINT
                // too, or when the agent has put a new binary in place.
                let stop_agent = terminated.child_token();
                let stop_controller = terminated.child_token();
                let controller_node = autopilot_signal::ControllerNode {
                    name: node_name.clone(),
                    version: VERSION,
                    binary: binary.clone(),
                    data_dir: data_dir.clone(),
                    worker: args.enable_worker,
                    update_agent: !disable_update_agent,
                    download: download.config(VERSION),
                    heartbeat_interval,
                    startup_timeout: args.startup_timeout,
                    leading: leading.subscribe(),
                    metrics: agent_metrics,
                };
                let agent = tasks.spawn({
                    let client = client.clone();
                    let server_url = server_url.clone();
                    let stop_agent = stop_agent.clone();
                    let stop_controller = stop_controller.clone();
                    async move {
                        let outcome = autopilot_signal::run_controller_node(
                            client,
                            &server_url,
                            controller_node,
                            stop_agent,
                        )
                        .await;
                        if matches!(outcome, Ok(autopilot_signal::agent::Outcome::Restart))
                            && !stop_controller.is_cancelled()
                        {
                            tracing::info!(
                                "stopping the controller to restart into the new binary"
                            );
                            stop_controller.cancel();
                        }
                        outcome
                    }
                });
                let process = autopilot_controller::Process {
                    client,
                    config,
                    server_url,
                    node_name,
                    data_dir,
                    version: VERSION,
                    leading,
                    metrics: controller_metrics,
                };
                let result = autopilot_controller::run(args, process, stop_controller).await;
                // The controller has stopped (its lease released); now the rest. Bounded: a check
                // in flight must not keep the process from exiting.
                stop_updater.cancel();
                stop_agent.cancel();
                tasks.close();
                let _ = tokio::time::timeout(STOP_GRACE, tasks.wait()).await;
                if updater.is_finished() {
                    if let Err(err) = updater.await {
                        tracing::warn!(error = %err, "updater task failed");
                    }
                } else {
                    tracing::warn!("updater did not stop in time, leaving it");
                }
                let restart_due = if agent.is_finished() {
                    match agent.await {
                        Ok(Ok(outcome)) => outcome == autopilot_signal::agent::Outcome::Restart,
                        Ok(Err(err)) => {
                            tracing::warn!(error = %format!("{err:#}"), "signal agent failed");
                            false
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "signal agent task failed");
                            false
                        }
                    }
                } else {
                    tracing::warn!("signal agent did not stop in time, leaving it");
                    agent.abort();
                    false
                };
                result.map(|()| restart_due)
            });
            // Bounded: a task stuck in blocking I/O must not keep the process from exiting.
            runtime.shutdown_timeout(STOP_GRACE);
            let restart_due = restart_due?;
            match trial {
                Some(trial) if restart_due => trial.then_restart(&binary, restart_mode),
                Some(_) | None => Ok(()),
            }
        }
        Command::Status { data_dir, output } => {
            let report = runtime()?
                .block_on(autopilot_signal::status::query(&data_dir))
                .context("reading the status")?;
            match output {
                StatusFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
                StatusFormat::Text => print!("{}", render_status(&report)),
            }
            Ok(())
        }
        Command::Autopilot { command } => {
            let (verb, args) = match command {
                AutopilotCommand::Status(args) => return runtime()?.block_on(ops::status(args)),
                AutopilotCommand::Preview(args) => return runtime()?.block_on(ops::preview(args)),
                AutopilotCommand::Check(args) => return runtime()?.block_on(ops::check(args)),
                AutopilotCommand::Pause(args) => (steer::Verb::Pause, args),
                AutopilotCommand::Resume(args) => (steer::Verb::Resume, args),
                AutopilotCommand::Abort(args) => (steer::Verb::Abort, args),
            };
            runtime()?.block_on(steer::run(verb, args))
        }
        Command::Worker { node, args } => {
            // Resolved before anything can replace the file: an update swaps a new binary in
            // at this path, and the restart executes whatever is there then.
            let binary = std::env::current_exe().context("finding the running binary")?;
            let runtime = runtime()?;
            let mut trial = None;
            let exit = runtime.block_on(async {
                let ResolvedNode {
                    client,
                    config,
                    server_url,
                    node_name,
                    data_dir,
                    mut registry,
                    metrics_listener,
                } = node.resolve().await?;
                let agent_metrics = autopilot_signal::metrics::Metrics::register(&mut registry);
                let _metrics_server = serve_metrics(metrics_listener, registry);
                trial = Some(Trial {
                    config,
                    data_dir: data_dir.clone(),
                    download: args.download.config(VERSION),
                    timeout: args.trial_timeout,
                });
                let process = autopilot_signal::Process {
                    client,
                    server_url,
                    node_name,
                    data_dir,
                    version: VERSION,
                    binary: binary.clone(),
                    metrics: agent_metrics,
                };
                autopilot_signal::run_worker(args, process, on_termination()).await
            });
            runtime.shutdown_timeout(STOP_GRACE);
            let exit = exit?;
            match (exit, trial) {
                (autopilot_signal::WorkerExit::Restart(mode), Some(trial)) => {
                    trial.then_restart(&binary, mode)
                }
                (
                    autopilot_signal::WorkerExit::Restart(_)
                    | autopilot_signal::WorkerExit::Stopped,
                    _,
                ) => Ok(()),
            }
        }
    }
}

/// What the trial boot of a new binary needs from this process (see
/// `autopilot_signal::trial`).
struct Trial {
    config: kube::Config,
    data_dir: PathBuf,
    download: autopilot_signal::download::DownloadConfig,
    timeout: std::time::Duration,
}

impl Trial {
    /// Runs the trial boot of the staged binary (this process's work has stopped), which
    /// swaps it in if it passes; then restarts into whatever is live: the new binary, or the
    /// one this process runs if the new one was refused.
    fn then_restart(
        self,
        binary: &std::path::Path,
        mode: autopilot_signal::RestartMode,
    ) -> anyhow::Result<()> {
        let Self { config, data_dir, download, timeout } = self;
        let runtime = runtime()?;
        let outcome = runtime.block_on(async {
            let client = kube::Client::try_from(config).context("creating a client")?;
            let host =
                autopilot_signal::host::LinuxHost::new(binary.to_path_buf(), data_dir, download)
                    .context("preparing the update host")?;
            let trial = autopilot_signal::trial::TrialConfig {
                args: std::env::args_os().skip(1).collect(),
                deadline: timeout,
                version: VERSION.to_string(),
            };
            autopilot_signal::trial::run(&host, &trial, &client).await
        });
        runtime.shutdown_timeout(STOP_GRACE);
        match outcome {
            Ok(outcome) => tracing::info!(?outcome, "trial boot concluded"),
            // The live binary is still one that runs (the swap happens only after a pass).
            Err(err) => tracing::error!(
                error = %format!("{err:#}"),
                "the trial boot failed; restarting into the live binary"
            ),
        }
        restart(binary, mode)
    }
}

/// This process is the child of a trial boot (`autopilot_signal::trial`): boot the node's
/// startup path up to healthy (connected; ControlNode registered for a controller, Node
/// registered with a fresh Ready heartbeat for a worker), prove it, and exit.
fn trial_boot(command: Command, token: &str) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let result = runtime.block_on(async {
        let (node, data_dir) = match command {
            Command::Controller { node, args, updater: _, agent: _ } => {
                let startup_timeout = args.startup_timeout;
                let ResolvedNode { client, server_url, node_name, data_dir, .. } =
                    node.without_metrics().resolve().await?;
                autopilot_controller::crds::install(&client, &server_url, startup_timeout).await?;
                let registration = autopilot_controller::control_node::Registration {
                    name: node_name.clone(),
                    mode: if args.enable_worker {
                        autopilot_controller::control_node::Mode::ControllerWorker
                    } else {
                        autopilot_controller::control_node::Mode::Controller
                    },
                    api_address: args.api_address,
                    version: VERSION.to_string(),
                };
                autopilot_controller::crds::retry_transient("registering the ControlNode", || {
                    autopilot_controller::control_node::register(&client, &registration)
                })
                .await?;
                if args.enable_worker {
                    let heartbeat = autopilot_signal::node::Heartbeat {
                        name: node_name.clone(),
                        version: VERSION.to_string(),
                    };
                    heartbeat.register(&client, &server_url, startup_timeout).await?;
                }
                (node_name, data_dir)
            }
            Command::Worker { node, args } => {
                let ResolvedNode { client, server_url, node_name, data_dir, .. } =
                    node.without_metrics().resolve().await?;
                let heartbeat = autopilot_signal::node::Heartbeat {
                    name: node_name.clone(),
                    version: VERSION.to_string(),
                };
                if args.register_node {
                    heartbeat.register(&client, &server_url, args.startup_timeout).await?;
                } else {
                    autopilot_controller::crds::retry_transient(
                        "reaching the API server",
                        || async { Ok(client.apiserver_version().await?) },
                    )
                    .await?;
                }
                (node_name, data_dir)
            }
            Command::Version | Command::Status { .. } | Command::Autopilot { .. } => {
                anyhow::bail!("only `k0s controller` and `k0s worker` boot on trial")
            }
        };
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("creating data dir {}", data_dir.display()))?;
        autopilot_signal::trial::prove(&data_dir, token)?;
        tracing::info!(node.name = %node, version = VERSION, "trial boot healthy");
        anyhow::Ok(())
    });
    runtime.shutdown_timeout(STOP_GRACE);
    result
}

/// The error and its causes on one line, leaving out a cause whose text the previous message
/// already repeats (some libraries put their source into their own message), and any
/// multi-line detail (source snippets) after a cause's first line.
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let text = text.lines().next().unwrap_or_default().trim_end().to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// `k0s status` for humans.
fn render_status(report: &autopilot_signal::status::Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "Version: {}", report.version);
    let _ = writeln!(out, "Process ID: {}", report.pid);
    let _ = writeln!(out, "Role: {}", report.role);
    let _ = writeln!(out, "Node: {}", report.node_name);
    let _ = writeln!(out, "Binary: {}", report.binary.display());
    let _ = writeln!(out, "Started: {}", report.started);
    if let Some(leader) = report.leader {
        let _ = writeln!(out, "Leader: {}", if leader { "yes" } else { "no" });
    }
    let _ =
        writeln!(out, "Update agent: {}", if report.update_agent { "enabled" } else { "disabled" });
    if report.signals.is_empty() {
        let _ = writeln!(out, "Update: none");
    }
    for signal in &report.signals {
        let phase = signal.phase.as_deref().unwrap_or("(not started)");
        let _ = write!(
            out,
            "Update: {} to {} (plan {}, command {}) on {}: {phase}",
            signal.command, signal.version, signal.plan_id, signal.command_id, signal.object
        );
        if let Some(since) = &signal.since {
            let _ = write!(out, " since {since}");
        }
        if let Some(reason) = &signal.reason {
            let _ = write!(out, ": {reason}");
        }
        out.push('\n');
    }
    out
}

/// How long components get to stop after the controller has stopped.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Restart into the binary now at `binary` (the runtime has shut down by now): re-execute it
/// with the same arguments, or exit for a supervisor.
fn restart(binary: &std::path::Path, mode: autopilot_signal::RestartMode) -> anyhow::Result<()> {
    match mode {
        autopilot_signal::RestartMode::Exec => {
            use std::os::unix::process::CommandExt as _;
            eprintln!("k0s: restarting into {}", binary.display());
            let err = std::process::Command::new(binary).args(std::env::args_os().skip(1)).exec();
            Err(err).with_context(|| format!("re-executing {}", binary.display()))
        }
        autopilot_signal::RestartMode::Exit => {
            eprintln!("k0s: exiting so the supervisor starts the new binary");
            Ok(())
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")
}

/// Listen for SIGTERM and SIGINT: the returned token is cancelled on the first of them.
///
/// The process's one listener; it is installed here, before anything else starts, and
/// shared by everything that must stop (a late listener would miss an early signal). Must
/// be called inside the runtime.
fn on_termination() -> CancellationToken {
    use tokio::signal::unix::{SignalKind, signal};
    let terminated = CancellationToken::new();
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::warn!("cannot install signal handlers; stop with SIGKILL");
        return terminated;
    };
    let cancel = terminated.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("received SIGTERM, shutting down"),
            _ = int.recv() => tracing::info!("received SIGINT, shutting down"),
        }
        cancel.cancel();
    });
    terminated
}

fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("invalid --log-level {filter:?}"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        // Each line carries the fields of the span it was logged in (`span`: the plan, command,
        // node and phase a reconcile or agent step is about) and of the spans around it.
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).init(),
    }
    Ok(())
}

/// The node name: the flag or `AUTOPILOT_HOSTNAME`, else the host name; trimmed and
/// lower-cased like Kubernetes does for node names.
fn resolve_node_name(flag: Option<&str>) -> anyhow::Result<String> {
    let raw = match flag {
        Some(name) => name.to_string(),
        None => nix::unistd::gethostname()
            .context("reading the host name (pass --node-name)")?
            .to_string_lossy()
            .into_owned(),
    };
    let name = raw.trim().to_lowercase();
    anyhow::ensure!(!name.is_empty(), "the node name is empty (pass --node-name)");
    Ok(name)
}

/// A client from a kubeconfig file, with errors that name the file; also the configuration
/// it was made from and the server URL.
async fn connect(path: &std::path::Path) -> anyhow::Result<(kube::Client, kube::Config, String)> {
    connect_counting_errors(path, metrics::ApiErrors::default()).await
}

/// [`connect`], counting the client's failed requests in `api_errors`.
async fn connect_counting_errors(
    path: &std::path::Path,
    api_errors: metrics::ApiErrors,
) -> anyhow::Result<(kube::Client, kube::Config, String)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text)
        .with_context(|| format!("parsing kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    let url = config.cluster_url.to_string();
    let client = kube::client::ClientBuilder::try_from(config.clone())
        .with_context(|| format!("creating a client for {url} from {}", path.display()))?
        .with_layer(&metrics::ApiErrorsLayer(api_errors))
        .build();
    Ok((client, config, url))
}
