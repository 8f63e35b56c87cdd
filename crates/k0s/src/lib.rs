//! The `k0s` multicall binary's library: the command line ([`cli`]) and what each
//! subcommand runs.
//!
//! `k0s controller --enable-autopilot` runs the controller process ([`role::controller`]:
//! the controller side of autopilot from `autopilot-controller`, the updater from
//! `autopilot-updater`, and the node side from `autopilot-signal`); `k0s worker` runs the
//! worker process ([`role::worker`]: the node side). Everything that decides or acts lives in
//! those crates; this one wires them into processes (their lifecycle, the restart into a
//! new binary and its trial boot), answers `k0s status` ([`status`]) and runs the
//! `k0s autopilot` verbs ([`ops`]; `pause|resume|abort` only annotate the Plan, [`steer`]).

pub mod cli;
mod client;
pub mod components;
mod metrics;
mod node;
pub mod ops;
pub mod role;
pub mod status;
pub mod steer;

use anyhow::Context as _;

/// The version this binary was built as (`K0S_VERSION` at build time); the same value is
/// reported everywhere (CLI, ControlNode, Node annotation).
pub const VERSION: &str = env!("K0S_BUILD_VERSION");

/// The error and its causes on one line, leaving out a cause whose text the previous message
/// already repeats (some libraries put their source into their own message), and any
/// multi-line detail (source snippets) after a cause's first line.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let text = text.lines().next().unwrap_or_default().trim_end().to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// The runtime a subcommand runs on (each builds its own, and shuts it down, bounded,
/// before it restarts or exits).
///
/// One thread runs every role: the controller, the updater and the node agent wait on the
/// network almost all the time, and each extra runtime thread costs its stack and a malloc
/// arena of its own (the leader of 5,000 workers peaked at 67.1 MiB with two worker threads
/// and at 59.7 MiB with one; see docs/architecture.md). Blocking work still runs on tokio's
/// blocking pool (`tokio::fs`, hashing a staged binary).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}
