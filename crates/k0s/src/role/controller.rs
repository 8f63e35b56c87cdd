//! `k0s controller`: the controller process.
//!
//! Three components run side by side: the controller (`autopilot_controller::run`: CRDs,
//! its ControlNode, leader election and the Plan engine), the updater
//! (`autopilot_updater`, acting only while this controller leads) and the node side
//! (`autopilot_signal::run_controller_node`: the status socket, a controller+worker's Node
//! and the signal agent acting on this controller's own ControlNode). When the agent has put
//! a new binary in place, the controller stops cleanly (releasing the leader lease) before
//! the process runs the trial boot of that binary and restarts into it.

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::STOP_GRACE;
use crate::VERSION;
use crate::cli::{ControllerAgentFlags, NodeFlags, UpdaterFlags};
use crate::node::Started;

/// Run the controller process until SIGTERM/SIGINT, or until an update asks for a restart
/// (then run the trial boot of the new binary and restart).
pub fn run(
    node: NodeFlags,
    args: autopilot_controller::Args,
    updater: UpdaterFlags,
    agent: ControllerAgentFlags,
) -> anyhow::Result<()> {
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
    let runtime = crate::runtime()?;
    let restart_due = runtime.block_on(async {
        args.validate()?;
        // First: the one SIGTERM/SIGINT listener, shared by everything that must stop.
        let terminated = super::on_termination();
        let UpdaterFlags { update_period, send_cluster_info } = updater;
        let Started {
            client,
            config,
            server_url,
            node_name,
            data_dir,
            trial: node_trial,
            agent_metrics,
            before_agent: controller_metrics,
            after_agent: updater_metrics,
            metrics_server: _metrics_server,
        } = node.resolve().await?.start(
            &download,
            trial_timeout,
            autopilot_controller::metrics::Metrics::register,
            autopilot_updater::metrics::Metrics::register,
        );
        trial = Some(node_trial);
        let tasks = TaskTracker::new();
        // The updater runs beside the controller and acts only while it leads; it stops once
        // the controller has stopped.
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
        // The node side stops on SIGTERM/SIGINT. The controller stops on SIGTERM/SIGINT too,
        // or when the node side has ended (the agent has put a new binary in place).
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
            // However the node side ends (a restart is due, the agent failed, the task
            // panicked), the controller stops with it.
            let stop_controller = stop_controller.clone().drop_guard();
            async move {
                let outcome = autopilot_signal::run_controller_node(
                    client,
                    &server_url,
                    controller_node,
                    stop_agent,
                )
                .await;
                let stop_controller = stop_controller.disarm();
                if !stop_controller.is_cancelled() {
                    match &outcome {
                        Ok(autopilot_signal::agent::Outcome::Restart) => {
                            info!("stopping the controller to restart into the new binary");
                        }
                        Ok(autopilot_signal::agent::Outcome::Stopped) | Err(_) => {
                            info!("the node side has stopped; stopping the controller");
                        }
                    }
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
                warn!(error = %err, "updater task failed");
            }
        } else {
            warn!("updater did not stop in time, leaving it");
        }
        let restart_due = if agent.is_finished() {
            match agent.await {
                Ok(Ok(outcome)) => outcome == autopilot_signal::agent::Outcome::Restart,
                Ok(Err(err)) => {
                    warn!(error = %format!("{err:#}"), "signal agent failed");
                    false
                }
                Err(err) => {
                    warn!(error = %err, "signal agent task failed");
                    false
                }
            }
        } else {
            warn!("signal agent did not stop in time, leaving it");
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
