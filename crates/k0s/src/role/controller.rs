//! `k0s controller`: the controller process.
//!
//! Its components, in the order they start (and the reverse of the order they stop): the
//! status socket, with `--run-components` kube-apiserver, kube-controller-manager and
//! kube-scheduler (`k0s_components::controller`), the Node registration and heartbeat of a controller+worker, the controller
//! (`autopilot_controller::Controller`: CRDs, its ControlNode, leader election and the Plan
//! engine), the updater (acting only while this controller leads), the update agent (on this
//! controller's own ControlNode, and airgap signals on its Node), and the metrics endpoint.
//! When the agent has put a new binary in place, everything stops (the controller releasing
//! the leader lease) before the process runs the trial boot of that binary and restarts into
//! it.

use anyhow::Context as _;
use autopilot_shell::health::Health;
use autopilot_shell::lifecycle::Supervisor;
use autopilot_signal::{AgentOn, NodeRegistration, StatusSocket, UpdateAgent, status};
use k0s_components::controller::{ControllerComponentArgs, ControllerComponents};
use k0s_components::worker::{WorkerComponentArgs, WorkerComponents};

use super::STOP_GRACE;
use crate::VERSION;
use crate::cli::{ControllerAgentFlags, NodeFlags, UpdaterFlags};
use crate::node::{Metrics, ResolvedNode};

/// Run the controller process until SIGTERM/SIGINT, or until an update asks for a restart
/// (then run the trial boot of the new binary and restart).
pub fn run(
    node: NodeFlags,
    args: autopilot_controller::Args,
    updater: UpdaterFlags,
    agent: ControllerAgentFlags,
    kubernetes: (ControllerComponentArgs, WorkerComponentArgs),
) -> anyhow::Result<()> {
    // Resolved before anything can replace the file (see the worker).
    let binary = std::env::current_exe().context("finding the running binary")?;
    let restart = agent.restart;
    // First: the post-update watch (count this start of a new binary, or roll it back).
    let Some(post_update) = super::post_update::at_start(&binary, &node.data_dir, restart)? else {
        return Ok(());
    };
    let runtime = crate::runtime()?;
    let ended = runtime.block_on(async {
        args.validate()?;
        // First: the one SIGTERM/SIGINT listener, shared by everything that must stop.
        let terminated = super::on_termination();
        super::watchdog::spawn();
        let mut node = node.resolve().await?;
        let mut trial = node.trial(&agent.download, agent.trial_timeout, agent.post_update_watch);
        trial.own_api_server = kubernetes.0.run_components;
        let kubernetes = (&kubernetes.0, &kubernetes.1);
        let supervisor = components(&mut node, args, updater, &agent, kubernetes, post_update)?;
        let (env, metrics_endpoint) = node.into_env(binary.clone());
        let ended = supervisor.with(metrics_endpoint).run(&env, terminated).await;
        anyhow::Ok((ended, trial))
    });
    // Bounded: a task stuck in blocking I/O must not keep the process from exiting.
    runtime.shutdown_timeout(STOP_GRACE);
    let (ended, trial) = ended?;
    super::conclude(ended, trial, &binary, restart)
}

/// The controller's components in start order (the metrics endpoint, declared last by the
/// caller, excepted); the trial boot starts the same list. With `--run-components`, the
/// control plane comes right after the status socket (then, with `--enable-worker`,
/// containerd and the kubelet), so it stops last.
pub(crate) fn components(
    node: &mut ResolvedNode,
    args: autopilot_controller::Args,
    updater: UpdaterFlags,
    agent: &ControllerAgentFlags,
    (kubernetes, worker_components): (&ControllerComponentArgs, &WorkerComponentArgs),
    post_update: autopilot_signal::post_update::AtStart,
) -> anyhow::Result<Supervisor> {
    let Metrics {
        before_agent: controller_metrics,
        agent: agent_metrics,
        after_agent: updater_metrics,
    } = node.register(
        autopilot_controller::metrics::Metrics::register,
        autopilot_updater::metrics::Metrics::register,
    );
    let worker = args.enable_worker;
    let startup_timeout = args.startup_timeout;
    let allow_unverified_payloads = args.allow_unverified_payloads;
    let api_address = args.api_address;
    let controller =
        autopilot_controller::Controller::new(args, &node.node_name, controller_metrics)?;
    let leadership = controller.leadership();
    let board = status::Board::default();
    let supervisor = Supervisor::new(STOP_GRACE).with(StatusSocket {
        role: if worker { status::Role::ControllerWorker } else { status::Role::Controller },
        update_agent: !agent.disable_update_agent,
        board: board.clone(),
        leadership: Some(leadership.clone()),
    });
    let own_api_server = kubernetes.run_components;
    let (mut supervisor, components_health) = with_kubernetes(
        supervisor,
        KubernetesOf { kubernetes, worker_components, worker, api_address, startup_timeout },
        &node.kubeconfig,
        agent.registration.register_node,
    )?;
    if worker && agent.registration.register_node {
        supervisor = supervisor.with(NodeRegistration {
            heartbeat_interval: agent.heartbeat_interval,
            startup_timeout,
            schedulable: agent.registration.register_node_schedulable,
        });
    }
    let UpdaterFlags { update_period, send_cluster_info } = updater;
    Ok(supervisor
        .with(controller)
        .with(autopilot_updater::run::Updater {
            process: autopilot_updater::run::UpdaterProcess::local(
                VERSION,
                update_period,
                send_cluster_info,
                allow_unverified_payloads,
                updater_metrics,
            ),
            leadership,
        })
        .with(UpdateAgent {
            on: AgentOn::Controller { worker },
            enabled: !agent.disable_update_agent,
            download: agent.download.config(VERSION),
            board,
            metrics: agent_metrics,
            allow_unverified_payloads,
            signing: agent.signing.clone(),
            post_update,
            components: components_health,
            own_api_server,
        }))
}

/// What the controller's Kubernetes components are made of.
struct KubernetesOf<'a> {
    kubernetes: &'a ControllerComponentArgs,
    worker_components: &'a WorkerComponentArgs,
    /// `--enable-worker`.
    worker: bool,
    api_address: std::net::SocketAddr,
    startup_timeout: std::time::Duration,
}

/// With `--run-components`, `supervisor` with the control plane, and with `--enable-worker`
/// containerd and the kubelet after it (using `kubeconfig` unless `--kubelet-kubeconfig`),
/// and the health of all of them; `supervisor` as it is without.
fn with_kubernetes(
    mut supervisor: Supervisor,
    of: KubernetesOf<'_>,
    kubeconfig: &std::path::Path,
    register_node: bool,
) -> anyhow::Result<(Supervisor, Option<Health>)> {
    let KubernetesOf { kubernetes, worker_components, worker, api_address, startup_timeout } = of;
    if !kubernetes.run_components {
        return Ok((supervisor, None));
    }
    anyhow::ensure!(
        !(worker && register_node),
        "--enable-worker --run-components runs the kubelet, which registers the Node: leave \
         --register-node off"
    );
    let control_plane = Health::default();
    supervisor = supervisor.with(ControllerComponents {
        args: kubernetes.clone(),
        api_address,
        backoff: k0s_components::restart::Backoff::default(),
        startup_timeout,
        health: control_plane.clone(),
    });
    if !worker {
        return Ok((supervisor, Some(control_plane)));
    }
    let node = Health::default();
    supervisor = supervisor.with(WorkerComponents {
        args: worker_components.clone(),
        kubeconfig: kubeconfig.to_path_buf(),
        backoff: k0s_components::restart::Backoff::default(),
        health: node.clone(),
    });
    Ok((supervisor, Some(Health::all(&[control_plane, node]))))
}
