//! The command line of the `k0s` binary (clap derive): the subcommands and the flags of
//! the node processes. The flags of each component live in its crate
//! (`autopilot_controller::Args`, `autopilot_signal::WorkerArgs`); the ones the binary adds
//! for the process around them are here.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::VERSION;

/// k0s: a Kubernetes distribution that updates itself (autopilot).
#[derive(Parser)]
#[command(name = "k0s", version = VERSION, disable_version_flag = true)]
pub struct Cli {
    /// Log filter (e.g. `info`, `debug`, `autopilot_controller=debug`). Default: `info`;
    /// the one-shot `autopilot` verbs log nothing unless asked (their result is their output).
    #[arg(long, global = true, env = "K0S_LOG", value_name = "FILTER")]
    pub log_level: Option<String>,

    /// Log output format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written (`--log-format`).
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// The subcommands of `k0s`.
#[derive(Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process")]
pub enum Command {
    /// Print the k0s version of this binary.
    Version,
    /// Run a controller node's autopilot (leader election, Plans, ControlNode).
    Controller {
        /// The node's connection, name, data directory and metrics.
        #[command(flatten)]
        node: NodeFlags,
        /// The controller's flags.
        #[command(flatten)]
        args: autopilot_controller::Args,
        /// The updater's flags.
        #[command(flatten)]
        updater: UpdaterFlags,
        /// The flags of the signal agent for the controller's own ControlNode.
        #[command(flatten)]
        agent: ControllerAgentFlags,
        /// Whether it runs the control plane, and what that needs.
        #[command(flatten)]
        components: k0s_components::controller::ControllerComponentArgs,
        /// What containerd and the kubelet need of the host, when it runs them too
        /// (`--enable-worker --run-components`).
        #[command(flatten)]
        worker_components: k0s_components::worker::WorkerComponentArgs,
    },
    /// Run a worker node: register its Node and act on update signals.
    Worker {
        /// The node's connection, name, data directory and metrics.
        #[command(flatten)]
        node: NodeFlags,
        /// The worker's flags.
        #[command(flatten)]
        args: autopilot_signal::WorkerArgs,
        /// Run containerd and the kubelet (the kubelet registers the Node) from the
        /// components this binary carries (`k0s components`), staged into
        /// `<data-dir>/bin/`; a component it does not carry is taken from there or from
        /// `PATH`. Without it, `k0s worker` runs the autopilot alone, beside a kubelet
        /// something else runs. The installation chooses (the unit's command line); an update
        /// never changes it.
        #[arg(long)]
        run_components: bool,
        /// What containerd and the kubelet need of the host.
        #[command(flatten)]
        components: k0s_components::worker::WorkerComponentArgs,
    },
    /// List the Kubernetes components this binary carries (name, version, sha256), which
    /// `k0s controller` and `k0s worker` stage into `<data-dir>/bin/` and run.
    Components {
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t = StatusFormat::Text)]
        output: StatusFormat,
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
    /// Before a node process starts (the units' `ExecStartPre`, run from the proven binary
    /// `k0s.prev`): count this start of a new binary under the post-update watch (and the
    /// abnormal exit of the one before), and put `k0s.prev` back as the live binary if the
    /// watch says so (three abnormal exits, crashes or watchdog kills, or never proven
    /// within the window). Does nothing, successfully, without a restart marker, a watch or
    /// a `k0s.prev`.
    PostUpdateGuard {
        /// The data directory of the node process (where its restart marker is).
        #[arg(long, default_value = "/var/lib/k0s", value_name = "DIR")]
        data_dir: PathBuf,

        /// The live k0s binary the node process runs. Default: this binary's path without
        /// its `.prev` suffix (the guard runs as `<dir>/k0s.prev`).
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
    },
    /// Print a shell completion script: `source <(k0s completion bash)`, or save it where
    /// the shell loads completions from (`k0s completion zsh > "${fpath[1]}/_k0s"`,
    /// `k0s completion fish > ~/.config/fish/completions/k0s.fish`).
    Completion {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Follow, preview and steer plans; run preflight checks ad hoc.
    Autopilot {
        /// The verb.
        #[command(subcommand)]
        command: AutopilotCommand,
    },
}

/// `k0s autopilot ...`: follow a plan (`status`), and steer the running plan through
/// annotations on the Plan (which `kubectl annotate` can set too), so a steer survives a
/// change of leader.
#[derive(Subcommand)]
pub enum AutopilotCommand {
    /// Show the plan at a glance: state, command, progress and ETA, each node's phase, what
    /// is blocking, the last Events (`--watch` to follow it live).
    Status(crate::ops::StatusArgs),
    /// Preview a plan on the live cluster, writing nothing: the targets it resolves, the
    /// order and batches, and every problem it would hit. Exit status 1 if it would not run.
    Preview(crate::ops::PreviewArgs),
    /// Run preflight checks ad hoc, with no update: the checks of a `preflight` command run on
    /// their nodes through the Plan `autopilot` (only while no plan runs); prints a table per
    /// check and node. Exit status 0 success, 1 warn, 2 error.
    Check(crate::ops::CheckArgs),
    /// Pause the plan: no new node is signalled; nodes in flight finish
    /// (annotation `autopilot.k0sproject.io/paused=true`).
    Pause(crate::steer::Args),
    /// Resume a paused plan (removes the `autopilot.k0sproject.io/paused` annotation).
    Resume(crate::steer::Args),
    /// Abort the plan: no new node is signalled; nodes in flight finish, then the plan ends
    /// `Aborted` with no autopilot cordon left (annotation `autopilot.k0sproject.io/abort=true`;
    /// a changed spec starts a new run only once it is removed).
    Abort(crate::steer::Args),
    /// Roll back the plan's run: nodes in flight finish, then every node the run changed
    /// puts back the version it ran before (workers first, newest first, with the command's
    /// limits), and the plan ends `RolledBack` (annotation
    /// `autopilot.k0sproject.io/rollback=<plan id>`).
    Rollback(crate::steer::Args),
}

/// How `k0s status` prints.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum StatusFormat {
    /// Human-readable lines.
    Text,
    /// The status document as JSON.
    Json,
}

/// Flags every node process shares.
#[derive(clap::Args)]
pub struct NodeFlags {
    /// Kubeconfig to reach the API server: for a controller, credentials in the group
    /// `k0s-autopilot-controllers` (see `manifests/rbac/`); for a worker, the node's own
    /// (`system:node:<name>`).
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: PathBuf,

    /// Directory for this node's state (status socket, airgap bundles).
    #[arg(long, default_value = "/var/lib/k0s", value_name = "DIR")]
    pub data_dir: PathBuf,

    /// This node's name: its ControlNode (controller) or Node (worker). Default: the host
    /// name, lower-cased.
    #[arg(long, env = "AUTOPILOT_HOSTNAME", value_name = "NAME")]
    pub node_name: Option<String>,

    /// Serve Prometheus metrics (`k0s_autopilot_*`, OpenMetrics text) on `GET /metrics` at
    /// this address (e.g. `0.0.0.0:9808`). Off unless set.
    #[arg(long, env = "K0S_METRICS_ADDRESS", value_name = "IP:PORT")]
    pub metrics_address: Option<std::net::SocketAddr>,
}

/// Flags of the signal agent a controller runs for its own ControlNode.
#[derive(clap::Args)]
pub struct ControllerAgentFlags {
    /// How the controller restarts into a new binary after an update: `exec` re-executes
    /// itself with the same arguments (no supervisor needed); `exit` exits for a supervisor.
    #[arg(long, value_enum, default_value_t = autopilot_signal::RestartMode::Exec)]
    pub restart: autopilot_signal::RestartMode,

    /// How long a new binary may take to become healthy in its trial boot (counted only
    /// while the API server answers) before the node goes back to the binary it ran.
    #[arg(long, default_value = "2m", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub trial_timeout: std::time::Duration,

    /// How long a new binary is watched after it passed its trial boot and was swapped in
    /// (counted only while the API server answers: an outage proves nothing): three
    /// abnormal exits within it, or never 60 s healthy in a row (up, its agent's watch of
    /// its own ControlNode established), put the previous binary back. `0s`: no watch.
    #[arg(long, default_value = "10m", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub post_update_watch: std::time::Duration,

    /// Download limits for update payloads.
    #[command(flatten)]
    pub download: autopilot_signal::download::DownloadArgs,

    /// Do not act on update signals for this controller's ControlNode: its binary is managed
    /// by other means (plans that target it wait for someone else to report its progress).
    #[arg(long)]
    pub disable_update_agent: bool,

    /// With `--enable-worker`: whether this process registers the Node itself (hosts
    /// without a kubelet).
    #[command(flatten)]
    pub registration: autopilot_signal::RegistrationArgs,

    /// With `--enable-worker --register-node`: how often this node's Node Ready condition and
    /// node lease are renewed.
    #[arg(long, default_value = "10s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub heartbeat_interval: std::time::Duration,

    /// Which payload signatures this controller requires.
    #[command(flatten)]
    pub signing: autopilot_signal::SigningArgs,
}

/// Flags of the updater, which runs on the leading controller (DESIGN §6).
#[derive(clap::Args)]
pub struct UpdaterFlags {
    /// How often the `periodic` update strategy asks the update server (e.g. `10m`, `30s`).
    #[arg(
        long,
        env = "K0S_UPDATE_PERIOD",
        default_value = "10m",
        value_parser = autopilot_api::duration::parse,
        value_name = "DURATION"
    )]
    pub update_period: std::time::Duration,

    /// Send cluster information (storage type, cluster ID, node counts, architectures, CNI)
    /// to the update server as request headers. Off unless the operator opts in.
    #[arg(long, env = "K0S_SEND_CLUSTER_INFO")]
    pub send_cluster_info: bool,
}

/// Run a `k0s autopilot` verb.
pub fn run(command: AutopilotCommand) -> anyhow::Result<()> {
    let runtime = crate::runtime()?;
    let (verb, args) = match command {
        AutopilotCommand::Status(args) => return runtime.block_on(crate::ops::status(args)),
        AutopilotCommand::Preview(args) => return runtime.block_on(crate::ops::preview(args)),
        AutopilotCommand::Check(args) => return runtime.block_on(crate::ops::check(args)),
        AutopilotCommand::Pause(args) => (autopilot_engine::steer::Verb::Pause, args),
        AutopilotCommand::Resume(args) => (autopilot_engine::steer::Verb::Resume, args),
        AutopilotCommand::Abort(args) => (autopilot_engine::steer::Verb::Abort, args),
        AutopilotCommand::Rollback(args) => (autopilot_engine::steer::Verb::Rollback, args),
    };
    runtime.block_on(crate::steer::run(verb, args))
}
