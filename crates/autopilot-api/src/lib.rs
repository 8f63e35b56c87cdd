//! The contract between the parts of autopilot: CRD types, the signal envelope and every
//! wire string.
//!
//! - [`v1beta2`]: the `autopilot.k0sproject.io/v1beta2` resources ([`Plan`],
//!   [`ControlNode`], [`UpdateConfig`]) and [`crds`], the CRDs applied at startup.
//! - [`signal`]: the versioned annotation envelope through which the leader signals nodes
//!   and nodes report progress.
//! - [`keys`]: every annotation, label, name and finalizer string.
//! - [`duration`]: Go-style durations (`1h30m`) for flags and fields.
//! - [`platform`]: `<os>-<arch>` names as Kubernetes spells them.
//! - [`preflight`]: what a node reports for a preflight check (seed 004's status codes and
//!   the raw record the controller judges).
//! - [`gate_check`]: the request and report of a health gate's node-side check.
//! - [`prestage`]: the request and report of pre-staging an update's payload on a node.
//! - [`payload`]: the URL and version rules a node holds a command to, shared by the node
//!   agent and the Plan engine.
//! - [`version`]: k0s versions and their order (`v1.35.1+k0s.0 < v1.35.1+k0s.1 <
//!   v1.35.2+k0s.0`), for the updater and the Plan engine's removed-API check.
//! - `fixtures` (feature `fixtures`, tests only): builders of Plans, Nodes, ControlNodes
//!   and signals, shared by the test suites of every crate.
//!
//! This crate is data and pure functions only: no client, no tokio, no I/O. Field names,
//! defaults and serialised strings follow k0s, so k0s nodes and tools understand what we
//! write and vice versa.

pub mod ask;
pub mod backoff;
pub mod duration;
#[cfg(feature = "fixtures")]
pub mod fixtures;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod gate_check;
pub mod keys;
pub mod payload;
pub mod platform;
pub mod preflight;
pub mod prestage;
mod schema;
pub mod signal;
pub mod text;
pub mod v1beta2;
pub mod version;

pub use v1beta2::{ControlNode, Plan, PlanSpec, PlanStatus, UpdateConfig, UpdateConfigSpec, crds};
