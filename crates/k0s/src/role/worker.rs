//! `k0s worker`: the worker process. Its node side (`autopilot_signal::run_worker`: the
//! status socket, the Node heartbeat and the signal agent) runs until SIGTERM/SIGINT, or
//! until the agent has put a new binary in place; then the process runs the trial boot of
//! that binary and restarts into it.

use anyhow::Context as _;

use super::STOP_GRACE;
use super::trial::Trial;
use crate::VERSION;
use crate::cli::NodeFlags;
use crate::node::{ResolvedNode, serve_metrics};

/// Run the worker process until SIGTERM/SIGINT, or until an update asks for a restart (then
/// run the trial boot of the new binary and restart).
pub fn run(node: NodeFlags, args: autopilot_signal::WorkerArgs) -> anyhow::Result<()> {
    // Resolved before anything can replace the file: an update swaps a new binary in
    // at this path, and the restart executes whatever is there then.
    let binary = std::env::current_exe().context("finding the running binary")?;
    let runtime = crate::runtime()?;
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
        autopilot_signal::run_worker(args, process, super::on_termination()).await
    });
    runtime.shutdown_timeout(STOP_GRACE);
    let exit = exit?;
    match (exit, trial) {
        (autopilot_signal::WorkerExit::Restart(mode), Some(trial)) => {
            trial.then_restart(&binary, mode)
        }
        (autopilot_signal::WorkerExit::Restart(_) | autopilot_signal::WorkerExit::Stopped, _) => {
            Ok(())
        }
    }
}
