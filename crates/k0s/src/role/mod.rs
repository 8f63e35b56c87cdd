//! The node processes, one module per role: [`controller`] (`k0s controller`) and
//! [`worker`] (`k0s worker`) each build the runtime, start their components, stop them on
//! SIGTERM/SIGINT or for a restart into a new binary, and run the [`trial`] boot of that
//! binary before restarting into it.
//!
//! Lifecycles are structured: one [`CancellationToken`] is cancelled by the termination
//! signal (`on_termination`), each component stops on a child token of it (or on its own
//! token where it must stop later, after the controller), and the spawned components are
//! waited for within `STOP_GRACE`.

pub mod controller;
pub mod trial;
pub mod worker;

use tokio_util::sync::CancellationToken;

/// How long components get to stop after the controller has stopped.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

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
