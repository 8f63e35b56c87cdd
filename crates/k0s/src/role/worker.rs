//! `k0s worker`: the worker process. Its components, in start order: the status socket,
//! with `--run-components` containerd and the kubelet (`k0s_components::worker`), the Node
//! registration and heartbeat (or, without `--register-node`, a first answer from
//! the API server), the update agent, and the metrics endpoint. They run until
//! SIGTERM/SIGINT, or until the agent has put a new binary in place; then the process runs
//! the trial boot of that binary and restarts into it.

use anyhow::Context as _;
use autopilot_shell::lifecycle::{ApiServer, Supervisor};
use autopilot_signal::{AgentOn, NodeRegistration, StatusSocket, UpdateAgent, status};
use k0s_components::worker::{WorkerComponentArgs, WorkerComponents};

use super::STOP_GRACE;
use crate::VERSION;
use crate::cli::NodeFlags;
use crate::node::{Metrics, ResolvedNode};

/// Run the worker process until SIGTERM/SIGINT, or until an update asks for a restart (then
/// run the trial boot of the new binary and restart).
pub fn run(
    node: NodeFlags,
    args: autopilot_signal::WorkerArgs,
    kubernetes: Option<WorkerComponentArgs>,
) -> anyhow::Result<()> {
    // Resolved before anything can replace the file: an update swaps a new binary in
    // at this path, and the restart executes whatever is there then.
    let binary = std::env::current_exe().context("finding the running binary")?;
    // First: the post-update watch (count this start of a new binary, or roll it back).
    let Some(post_update) = super::post_update::at_start(&binary, &node.data_dir, args.restart)?
    else {
        return Ok(());
    };
    let runtime = crate::runtime()?;
    let ended = runtime.block_on(async {
        args.validate()?;
        validate(&args, kubernetes.as_ref())?;
        let terminated = super::on_termination();
        super::watchdog::spawn();
        let kubeconfig = node.kubeconfig.clone();
        let mut node = node.resolve().await?;
        let trial = node.trial(&args.download, args.trial_timeout, args.post_update_watch);
        let supervisor =
            components(&mut node, &args, kubernetes.as_ref(), &kubeconfig, post_update);
        let (env, metrics_endpoint) = node.into_env(binary.clone());
        tracing::info!(node.name = %env.node_name, version = VERSION, register_node = args.registration.register_node, run_components = kubernetes.is_some(), binary = %binary.display(), "starting worker");
        let ended = supervisor.with(metrics_endpoint).run(&env, terminated).await;
        anyhow::Ok((ended, trial))
    });
    runtime.shutdown_timeout(STOP_GRACE);
    let (ended, trial) = ended?;
    super::conclude(ended, trial, &binary, args.restart)
}

/// `--run-components` runs a kubelet, which registers the Node: this process must not too.
fn validate(
    args: &autopilot_signal::WorkerArgs,
    kubernetes: Option<&WorkerComponentArgs>,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !(kubernetes.is_some() && args.registration.register_node),
        "--run-components runs the kubelet, which registers the Node: leave --register-node off"
    );
    Ok(())
}

/// The worker's components in start order (the metrics endpoint, declared last by the
/// caller, excepted); the trial boot starts the same list. With `--run-components`,
/// containerd and the kubelet come right after the status socket, so they stop last.
pub(crate) fn components(
    node: &mut ResolvedNode,
    args: &autopilot_signal::WorkerArgs,
    kubernetes: Option<&WorkerComponentArgs>,
    kubeconfig: &std::path::Path,
    post_update: autopilot_signal::post_update::AtStart,
) -> Supervisor {
    let Metrics { before_agent: (), agent: metrics, after_agent: () } =
        node.register(|_| (), |_| ());
    let board = status::Board::default();
    let supervisor = Supervisor::new(STOP_GRACE).with(StatusSocket {
        role: status::Role::Worker,
        update_agent: !args.disable_update_agent,
        board: board.clone(),
        leadership: None,
    });
    let components_health = kubernetes.map(|_| autopilot_shell::health::Health::default());
    let supervisor = match (kubernetes, &components_health) {
        (Some(kubernetes), Some(health)) => supervisor.with(WorkerComponents {
            args: kubernetes.clone(),
            kubeconfig: kubeconfig.to_path_buf(),
            backoff: k0s_components::restart::Backoff::default(),
            health: health.clone(),
        }),
        _ => supervisor,
    };
    let supervisor = if args.registration.register_node {
        supervisor.with(NodeRegistration {
            heartbeat_interval: args.heartbeat_interval,
            startup_timeout: args.startup_timeout,
            schedulable: args.registration.register_node_schedulable,
        })
    } else {
        supervisor.with(ApiServer { startup_timeout: args.startup_timeout })
    };
    supervisor.with(UpdateAgent {
        on: AgentOn::Worker,
        enabled: !args.disable_update_agent,
        download: args.download.config(VERSION),
        board,
        metrics,
        allow_unverified_payloads: args.allow_unverified_payloads,
        signing: args.signing.clone(),
        post_update,
        components: components_health,
        own_api_server: false,
    })
}
