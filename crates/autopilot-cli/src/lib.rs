//! The operator commands of `k0s autopilot` that read the cluster and write nothing.
//!
//! - [`status`]: `k0s autopilot status [--watch] [-o json]`, the running plan at a glance.
//!   [`status::render`] and [`status::eta`] are pure; [`status::run`] reads (and with
//!   `--watch`, watches) the cluster and prints.
//! - [`preview`]: `k0s autopilot preview -f plan.yaml`, the plan engine's first decisions on a
//!   snapshot of the live cluster (targets, order and batches, and every problem it would
//!   hit). [`preview::preview`] is pure; [`preview::run`] takes the snapshot.
//!
//! Each command takes a [`kube::Client`]; the `k0s` binary resolves the kubeconfig.

pub mod preview;
pub mod status;
