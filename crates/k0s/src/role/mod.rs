//! The node processes, one module per role: [`controller`] (`k0s controller`) and
//! [`worker`] (`k0s worker`) each build the runtime, start their components, stop them on
//! SIGTERM/SIGINT or for a restart into a new binary, and run the [`trial`] boot of that
//! binary before restarting into it.
//!
//! Each role declares its components in start order (`components`); one supervisor
//! (`autopilot_shell::lifecycle::Supervisor`) starts them in that order, runs them until the
//! termination signal (`on_termination`) or until one of them ends (the update agent, once a
//! new binary is in place), and stops them in reverse order within one grace period
//! (`STOP_GRACE`). The trial boot of a new binary starts the same list.

pub mod controller;
pub mod post_update;
pub mod trial;
mod watchdog;
pub mod worker;

use autopilot_shell::lifecycle::Ended;
use tokio_util::sync::CancellationToken;

/// How long the components get, in all, to stop (well within systemd's 30 s stop timeout).
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// What the process does once its components have stopped: restart into a new binary after
/// its trial boot (`mode` says how), stop, or fail. A stop or a restart is a clean stop for
/// the post-update watch; a failure is not.
fn conclude(
    ended: Ended,
    trial: crate::node::Trial,
    binary: &std::path::Path,
    mode: autopilot_signal::RestartMode,
) -> anyhow::Result<()> {
    let watch =
        autopilot_signal::post_update::Files::new(binary.to_path_buf(), trial.data_dir.clone());
    match ended {
        Ended::Restart => {
            autopilot_signal::post_update::stopped_cleanly(&watch, crate::VERSION);
            trial.then_restart(binary, mode)
        }
        Ended::Stopped => {
            autopilot_signal::post_update::stopped_cleanly(&watch, crate::VERSION);
            Ok(())
        }
        Ended::Failed(err) => Err(err),
    }
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

/// Restart into the binary now at `binary` (the runtime has shut down by now): re-execute it
/// with the same arguments, or exit for a supervisor.
pub(crate) fn restart(
    binary: &std::path::Path,
    mode: autopilot_signal::RestartMode,
) -> anyhow::Result<()> {
    match mode {
        autopilot_signal::RestartMode::Exec => {
            use std::os::unix::process::CommandExt as _;
            eprintln!("k0s: restarting into {}", binary.display());
            let err = std::process::Command::new(binary).args(std::env::args_os().skip(1)).exec();
            anyhow::Context::with_context(Err(err), || format!("re-executing {}", binary.display()))
        }
        autopilot_signal::RestartMode::Exit => {
            eprintln!("k0s: exiting so the supervisor starts the new binary");
            Ok(())
        }
    }
}
