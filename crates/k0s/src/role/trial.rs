//! The trial boot of a new binary, from the process's side (`autopilot_signal::trial` has
//! the verdict and the rollback): `Trial::then_restart` runs it in the parent once the
//! node's work has stopped, and [`boot`] is what the child does.

use anyhow::Context as _;

use super::STOP_GRACE;
use crate::VERSION;
use crate::cli::Command;
use autopilot_shell::lifecycle::Purpose;

impl crate::node::Trial {
    /// Runs the trial boot of the staged binary (this process's work has stopped), which
    /// swaps it in if it passes; then restarts into whatever is live: the new binary, or the
    /// one this process runs if the new one was refused.
    pub(crate) fn then_restart(
        self,
        binary: &std::path::Path,
        mode: autopilot_signal::RestartMode,
    ) -> anyhow::Result<()> {
        let Self { config, data_dir, download, timeout, post_update_watch, own_api_server } = self;
        let runtime = crate::runtime()?;
        let outcome = runtime.block_on(async {
            // SIGTERM ends the trial at once (the child goes with it): a stop must not wait
            // for a trial deadline of minutes, and the live binary is untouched until a pass.
            let terminated = super::on_termination();
            let client = kube::Client::try_from(config).context("creating a client")?;
            let host =
                autopilot_signal::host::LinuxHost::new(binary.to_path_buf(), data_dir, download)
                    .context("preparing the update host")?;
            let trial = autopilot_signal::trial::TrialConfig {
                args: std::env::args_os().skip(1).collect(),
                deadline: timeout,
                version: VERSION.to_string(),
                post_update_watch,
                own_api_server,
            };
            tokio::select! {
                outcome = autopilot_signal::trial::run(&host, &trial, &client) => outcome.map(Some),
                () = terminated.cancelled() => Ok(None),
            }
        });
        runtime.shutdown_timeout(STOP_GRACE);
        match outcome {
            Ok(None) => {
                tracing::info!(
                    "stopped during the trial boot; the live binary is unchanged and the next \
                     start tries the new one again"
                );
                return Ok(());
            }
            Ok(Some(outcome)) => tracing::info!(?outcome, "trial boot concluded"),
            // The live binary is still one that runs (the swap happens only after a pass).
            Err(err) => tracing::error!(
                error = %format!("{err:#}"),
                "the trial boot failed; restarting into the live binary"
            ),
        }
        super::restart(binary, mode)
    }
}

/// Run this process as the child of a trial boot (`autopilot_signal::trial`): start the
/// role's components as a normal start declares them (`components`, the same list and the
/// same start code), up to healthy — only those whose start proves the binary (the
/// controller's CRDs and ControlNode, the Node registration, or the API server answering);
/// then prove it, stop them without running them, and exit.
pub fn boot(command: Command, token: &str) -> anyhow::Result<()> {
    let binary = std::env::current_exe().context("finding the running binary")?;
    let runtime = crate::runtime()?;
    let result = runtime.block_on(async {
        let (supervisor, env) = match command {
            Command::Controller { node, args, updater, agent, components, worker_components } => {
                args.validate()?;
                let mut node = node.without_metrics().resolve().await?;
                let supervisor = super::controller::components(
                    &mut node,
                    args,
                    updater,
                    &agent,
                    (&components, &worker_components),
                    autopilot_signal::post_update::AtStart::Nothing,
                )?;
                (supervisor, node.into_env(binary).0)
            }
            Command::Worker { node, args, run_components, components } => {
                args.validate()?;
                let node_kubeconfig = node.kubeconfig.clone();
                let mut node = node.without_metrics().resolve().await?;
                let supervisor = super::worker::components(
                    &mut node,
                    &args,
                    run_components.then_some(&components),
                    &node_kubeconfig,
                    autopilot_signal::post_update::AtStart::Nothing,
                );
                (supervisor, node.into_env(binary).0)
            }
            Command::Version
            | Command::Status { .. }
            | Command::Autopilot { .. }
            | Command::Completion { .. }
            | Command::Components { .. }
            | Command::PostUpdateGuard { .. } => {
                anyhow::bail!("only `k0s controller` and `k0s worker` boot on trial")
            }
        };
        let never = tokio_util::sync::CancellationToken::new();
        let started = supervisor.start(&env, Purpose::Trial, &never).await?;
        autopilot_signal::trial::prove(&env.data_dir, token)?;
        tracing::info!(node.name = %env.node_name, version = VERSION, "trial boot healthy");
        // The Kubernetes components it started (`--run-components`) stop in order; the
        // process that runs the trial swaps this binary in and restarts into it.
        if let Some(started) = started {
            started.stop_unrun().await;
        }
        anyhow::Ok(())
    });
    runtime.shutdown_timeout(STOP_GRACE);
    result
}
