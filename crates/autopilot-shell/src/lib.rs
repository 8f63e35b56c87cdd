//! The I/O pieces that more than one shell needs, in one copy: the controller, the node
//! agent, the updater and the operator commands each depend on this crate rather than on
//! one another.
//!
//! - [`access`]: asking the API server whether the workers may read the Plan.
//! - [`https`]: the HTTP(S) client for requests that do not go to the API server (the node
//!   agent's downloads and preflight probes, the updater's update-server checks).
//! - [`events`]: publishing `events.k8s.io/v1` Events, awaited or through a background queue.
//! - [`leadership`]: who leads, until when, and whether this process does now.
//! - [`lifecycle`]: one start/run/stop lifecycle for every component, and its supervisor.
//! - [`proxy`]: proxies from `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`, and the connector through them.
//! - [`probe`]: probing plan controllers' API servers (`GET /readyz`) before one is updated.
//! - [`removed_apis`]: asking the API server which removed APIs are still in use.
//! - [`retry`]: which API errors are worth retrying, and the capped backoff of watches.
//! - [`signal`]: the one writer of signal annotations, guarded by a resourceVersion.
//! - [`watch`]: the one watch-cache chain (watch, slim, cache, backoff, re-list at once).
//! - `fake_api` (feature `fake-api`, tests only): a recording stand-in API server for unit
//!   tests of request shapes.
//!
//! It is not a place for decisions: those are `autopilot-engine`'s, whose types this crate
//! fills and carries. This crate only talks to the network and the API server.

pub mod access;
pub mod events;
#[cfg(feature = "fake-api")]
pub mod fake_api;
pub mod health;
pub mod https;
pub mod leadership;
pub mod lifecycle;
pub mod probe;
pub mod proxy;
pub mod removed_apis;
pub mod retry;
pub mod signal;
pub mod watch;
