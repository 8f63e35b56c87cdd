//! The Kubernetes components a `k0s` binary carries and runs (DESIGN §16).
//!
//! - [`carried`]: the component set appended to the executable (name, version, sha256 of
//!   each), read back and packed.
//! - [`stage`]: the components a role runs, put in `<data-dir>/bin/` by digest.
//! - [`health`]: whether the components are healthy (pure): what the post-update watch and
//!   the trial boot of a new binary count.
//! - [`restart`]: when a component that exited is started again (pure).
//! - [`supervise`]: one component process: started, restarted, its output kept, stopped.
//! - [`worker`]: what `k0s worker --run-components` runs: containerd and the kubelet, their
//!   generated configuration, as one component of the node process.
//! - [`controller`]: what `k0s controller --run-components` runs: kube-apiserver against an
//!   external etcd, kube-controller-manager and kube-scheduler.

pub mod carried;
pub mod controller;
pub mod health;
pub mod restart;
pub mod stage;
pub mod supervise;
pub mod worker;
