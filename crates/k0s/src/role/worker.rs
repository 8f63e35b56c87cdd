//! `k0s worker`: the worker process. Its node side (`autopilot_signal::run_worker`: the
//! status socket, the Node heartbeat and the signal agent) runs until SIGTERM/SIGINT, or
//! until the agent has put a new binary in place; then the process runs the trial boot of
//! that binary and restarts into it.

use anyhow::Context as _;

use super::STOP_GRACE;
use crate::VERSION;
use crate::cli::NodeFlags;
use crate::node::Started;

/// Run the worker process until SIGTERM/SIGINT, or until an update asks for a restart (then
/// run the trial boot of the new binary and restart).
pub fn run(node: NodeFlags, args: autopilot_signal::WorkerArgs) -> anyhow::Result<()> {
    // Resolved before anything can replace the file: an update swaps a new binary in
    // at this path, and the restart executes whatever is there then.
    let binary = std::env::current_exe().context("finding the running binary")?;
    let runtime = crate::runtime()?;
    let mut trial = None;
    let exit = runtime.block_on(async {
        let Started {
            client,
            config: _,
            server_url,
            node_name,
            data_dir,
            trial: node_trial,
            agent_metrics,
            before_agent: (),
            after_agent: (),
            metrics_server: _metrics_server,
        } = node.resolve().await?.start(&args.download, args.trial_timeout, |_| (), |_| ());
        trial = Some(node_trial);
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
