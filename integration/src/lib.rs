//! The real-control-plane harness for end-to-end tests (DESIGN §8).
//!
//! Each test gets its own control plane: one real `etcd` and one real `kube-apiserver` per
//! controller, each apiserver on its own loopback address (127.0.0.2, 127.0.0.3, ...) with a
//! free port, generated TLS, token identities, `--authorization-mode=Node,RBAC` and the
//! `NodeRestriction` admission plugin. On top of it, tests start real `k0s` processes, each with
//! its own directory and its own copy of the binary. This crate is *not* a mock: nothing here
//! fakes API behaviour. Scenarios with Pods add real nodes ([`real_node`]): per worker a
//! containerd and a kubelet that owns the Node, in a network namespace the harness makes, and
//! the cluster's real kube-controller-manager and kube-scheduler.
//!
//! Start with [`ClusterBuilder`]:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use integration::{ClusterBuilder, wait_for};
//!
//! let cluster = ClusterBuilder::new("ha_upgrade")
//!     .controllers(3)                 // apiservers on 127.0.0.2, .3, .4
//!     .workers(&["worker-0", "worker-1"])
//!     .build()
//!     .await?;
//! let client = cluster.admin_client().await?;     // admin against apiserver 0
//! let controller = cluster.spawn_controller(0, &[]).await?;
//! let worker = cluster.spawn_worker("worker-0", &["--some-flag"]).await?;
//! worker.wait_for_log("registered", Duration::from_secs(30)).await?;
//! cluster.stop_apiserver(1).await?;              // quorum scenarios
//! cluster.start_apiserver(1).await?;
//! # Ok(()) }
//! ```
//!
//! # Prerequisites
//!
//! - The pinned control plane, built once with `cargo xtask control-plane` (see
//!   [`control_plane`]); tests only look it up and fail with that hint when it is missing.
//! - For the tests that scrape nodes with a real Prometheus ([`prometheus::Prometheus`]): the
//!   pinned Prometheus, built and cached by the same command (see [`prometheus`]).
//! - For the GitOps health tests: the real kstatus, Argo CD's way of running a health
//!   script and the real kubectl, built and cached by the same command ([`gitops`]).
//! - For real nodes: the pinned kubelet, kube-controller-manager, kube-scheduler and
//!   containerd, built and cached by the same command ([`node_binaries`]), root and a few
//!   Debian packages ([`real_node::prerequisites`]).
//! - The k0s binary: [`ClusterBuilder::k0s_binary`] if given, else `$K0S_BIN`, else
//!   [`k0s_binary`] runs `cargo build -p k0s --bin k0s` once per test process.
//!   [`k0s_binary_with_version`] builds a copy that reports another version (`K0S_VERSION` at
//!   build time), to upgrade to.
//!
//! # Identities and kubeconfigs
//!
//! | identity | groups | kubeconfig |
//! |---|---|---|
//! | `admin` | `system:masters` | [`Cluster::admin_kubeconfig`]`(i)` → apiserver `i` |
//! | `k0s-autopilot-controller:controller-<i>` | `k0s-autopilot-controllers` only (bound by `manifests/rbac/`, applied at build) | [`Cluster::controller_kubeconfig`]`(i)` → apiserver `i` |
//! | `system:node:<name>` | `system:nodes` | [`Cluster::node_kubeconfig`]`(name)` → apiserver 0, [`Cluster::node_kubeconfig_at`] |
//! | `viewer` | `k0s-viewers` only (nothing bound: a test binds what it allows) | [`Cluster::viewer_kubeconfig`]`(i)` → apiserver `i` |
//!
//! Clients: [`Cluster::admin_client`], [`Cluster::admin_client_at`],
//! [`Cluster::controller_client`], [`Cluster::node_client`],
//! [`Cluster::node_client_at`], or [`client_from_kubeconfig`] for any file.
//!
//! # k0s nodes
//!
//! [`Cluster::spawn_controller`]`(i, &extra)` runs `k0s controller --enable-autopilot
//! --kubeconfig <controller kubeconfig i> --data-dir <dir>/data --node-name controller-<i>
//! --api-address <api_address(i)> <extra>`; [`Cluster::spawn_worker`]`(name, &extra)` runs
//! `k0s worker --kubeconfig <node kubeconfig> --data-dir <dir>/data --node-name <name>
//! --register-node <extra>`. For environment variables or another binary use the builders
//! [`Cluster::k0s_controller`] / [`Cluster::k0s_worker`] and [`K0sCommand::spawn`]. The node
//! directory is `<cluster dir>/nodes/<node>/` with the binary copy `k0s` (which the node agent
//! may replace in place), `data/` and `k0s.log` (stdout and stderr, appended across restarts).
//! `RUST_LOG` and `K0S_LOG` default to `info`; `NO_COLOR=1` keeps logs greppable.
//!
//! A [`K0sProcess`] can be stopped ([`K0sProcess::terminate`], [`K0sProcess::stop`]),
//! crashed ([`K0sProcess::kill`], or at an exact point with [`K0sProcess::kill_when`]: traced,
//! and killed at the first system call after which a condition holds), reaped ([`K0sProcess::wait_exit`]), started again with the
//! binary currently in its directory ([`K0sProcess::restart`]), and read
//! ([`K0sProcess::log`], [`K0sProcess::wait_for_log`], [`K0sProcess::log_mark`] with
//! [`K0sProcess::wait_for_log_after`]). [`run_k0s`] runs short CLI commands with a timeout.
//!
//! # Waiting
//!
//! Never sleep for a fixed time: [`wait_for`] polls a closure with a deadline and names what
//! it waited for on timeout; [`wait_for_condition`] watches one object until a
//! [`conditions`] (or any [`kube::runtime::wait::Condition`]) holds.
//!
//! # Isolation and teardown
//!
//! Every cluster has its own etcd, ports and temporary directory, so tests may run in
//! parallel. Every child runs in its own process group. Dropping a [`K0sProcess`] or a
//! [`Cluster`] SIGKILLs and reaps what it started, also when the test panics (the cluster kills
//! its k0s nodes too, even leaked ones); during a panic the log tails are printed. Set
//! `K0S_KEEP_TEST_DIRS=1` to keep the directories for inspection.

mod cache;
pub mod cluster;
pub mod components;
pub mod control_plane;
pub mod cosign;
pub mod disk;
pub mod dist;
pub mod gitops;
mod go;
pub mod http;
pub mod k0s;
mod kubeconfig;
pub mod metrics;
mod net;
pub mod node_binaries;
mod pki;
mod process;
pub mod prometheus;
pub mod proxy;
pub mod rbac;
pub mod real_node;
pub mod release_binaries;
pub mod renovate;
pub mod responder;
pub mod signals;
pub mod wait;

pub use cluster::{
    ADMIN_USER, Cluster, ClusterBuilder, DEFAULT_STARTUP_TIMEOUT, KEEP_TEST_DIRS_ENV, VIEWER_GROUP,
    VIEWER_USER,
};
pub use k0s::{
    K0S_BIN_ENV, K0sCommand, K0sProcess, LogMark, Supervised, k0s_binary, k0s_binary_with_version,
    run_k0s, run_k0s_binary,
};
pub use kubeconfig::client_from_kubeconfig;
pub use process::KillWhen;
pub use responder::{Behaviour, Release, Responder};
pub use wait::{conditions, wait_for, wait_for_condition};
