//! The trial boot of a new binary, from the process's side (`autopilot_signal::trial` has
//! the verdict and the rollback): `Trial::then_restart` runs it in the parent once the
//! node's work has stopped, and [`boot`] is what the child does.

use std::path::PathBuf;

use anyhow::Context as _;

use super::STOP_GRACE;
use crate::VERSION;
use crate::cli::Command;
use crate::node::ResolvedNode;

/// What the trial boot of a new binary needs from this process (see
/// `autopilot_signal::trial`).
pub(crate) struct Trial {
    pub(crate) config: kube::Config,
    pub(crate) data_dir: PathBuf,
    pub(crate) download: autopilot_signal::download::DownloadConfig,
    pub(crate) timeout: std::time::Duration,
}

impl Trial {
    /// Runs the trial boot of the staged binary (this process's work has stopped), which
    /// swaps it in if it passes; then restarts into whatever is live: the new binary, or the
    /// one this process runs if the new one was refused.
    pub(crate) fn then_restart(
        self,
        binary: &std::path::Path,
        mode: autopilot_signal::RestartMode,
    ) -> anyhow::Result<()> {
        let Self { config, data_dir, download, timeout } = self;
        let runtime = crate::runtime()?;
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

/// Run this process as the child of a trial boot (`autopilot_signal::trial`): boot the node's
/// startup path up to healthy, prove it, and exit. The steps are the real start's own, not
/// copies: `autopilot_controller::start` (CRDs, ControlNode) for a controller, and
/// `Heartbeat::register` (Node, fresh Ready heartbeat) for a worker or a controller+worker; a
/// worker that registers no Node proves that it reaches its API server.
pub fn boot(command: Command, token: &str) -> anyhow::Result<()> {
    let runtime = crate::runtime()?;
    let result = runtime.block_on(async {
        let (node, data_dir) = match command {
            Command::Controller { node, args, updater: _, agent: _ } => {
                let startup_timeout = args.startup_timeout;
                let ResolvedNode { client, server_url, node_name, data_dir, .. } =
                    node.without_metrics().resolve().await?;
                autopilot_controller::start(&client, &server_url, &node_name, &args, VERSION)
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
