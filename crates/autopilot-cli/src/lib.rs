//! The operator commands of `k0s autopilot`: views that read the cluster, and ad hoc checks.
//!
//! - [`status`]: `k0s autopilot status [--watch] [-o json]`, the running plan at a glance.
//!   [`status::render`] and [`status::eta`] are pure; [`status::run`] reads (and with
//!   `--watch`, watches) the cluster and prints.
//! - [`preview`]: `k0s autopilot preview -f plan.yaml`, the plan engine's first decisions on a
//!   snapshot of the live cluster (targets, order and batches, and every problem it would
//!   hit). [`preview::preview`] is pure; [`preview::run`] takes the snapshot.
//!
//! - [`check`]: `k0s autopilot check -f checks.yaml`, the checks of a `preflight` command run
//!   ad hoc (no update) through the Plan engine and the node agents; the one command here that
//!   writes (the Plan `autopilot`, only when no plan runs).
//!
//! - [`file`]: reading the files of `preview -f` and `check -f`: seed 004's spellings
//!   normalised to camelCase, unknown fields refused with their path.
//!
//! Each command takes a [`kube::Client`]; the `k0s` binary resolves the kubeconfig.

pub mod check;
pub mod file;
pub mod preview;
pub mod status;
