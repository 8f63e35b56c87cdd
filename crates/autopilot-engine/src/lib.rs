//! Autopilot's decisions, and nothing else: every state machine and rule of the controller,
//! the node agent and the updater as pure functions of what the shells observed.
//!
//! No module here talks to an API server, opens a file or a socket, spawns a process or a
//! thread, or reads a clock: `now`, the time zone and every observation come in as
//! arguments, and what to do goes out as data the shells execute. Two guards hold that:
//! the crate's dependency list (no kube client or runtime, no tokio, hyper or nix; see
//! `tests/dependencies.rs`) and the crate's own `clippy.toml`, which refuses the standard
//! library's file system, network, process, thread and clock calls.
//!
//! - [`plan`]: the Plan engine (`step`, its phases and the preview's dry run).
//! - [`preflight`]: compiling and judging preflight checks (seed 004).
//! - [`cordon`]: the central cordon-and-drain decision.
//! - [`agent`]: the node agent's phase machine for one signal.
//! - [`carried`]: whether a downloaded payload carries the Kubernetes release its k0s
//!   version names.
//! - [`download`]: resume or restart a download, read the answer, retry, rate limit.
//! - [`authorize`]: whether a signal matches the frozen command of the Plan run it names.
//! - [`trial`]: the verdict on a trial boot of a new binary.
//! - [`post_update`]: the watch of a new binary after its swap, and its rollback.
//! - [`steer`]: what `k0s autopilot pause|resume|abort` writes and says.
//! - [`snapshot`]: how the engine sees watched Nodes, ControlNodes and Pods.
//! - [`updater`]: when to check the update server, which release, which Plan.
//! - [`yaml`]: the one set of rules every YAML input is read with.
//! - [`term`]: from when a leader counts a deadline that began before its takeover.

pub mod agent;
pub mod authorize;
pub mod carried;
pub mod cordon;
pub mod download;
pub mod plan;
pub mod post_update;
pub mod preflight;
pub mod snapshot;
pub mod steer;
pub mod term;
pub mod trial;
pub mod updater;
pub mod yaml;
