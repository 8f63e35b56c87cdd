//! The updater's decisions (REF §11, DESIGN §6): when to check, which release, which plan.
//!
//! - [`decide`]: the pure decision ([`decide::Decision`]) and plan generation
//!   ([`decide::plan_spec`]); [`decide::Strategy`] validates `upgradeStrategy`.
//! - [`window`]: weekly windows of the `periodic` strategy (inclusive start, exclusive end,
//!   the start day counts across midnight).
//! - [`cron`]: the deprecated `cron` strategy's schedule, read as k0s reads it (seconds
//!   field first).
//! - [`interval`]: the minimum interval between automatic updates, by kind (patch, minor).
//! - [`status`]: what the updater writes into an UpdateConfig's status (kstatus conditions,
//!   the last check, the end of life), from a check's outcome.
//! - [`channel`]: the update server's two YAML answers, parsed into
//!   [`channel::ChannelAnswer`].

pub mod channel;
pub mod cron;
pub mod decide;
pub mod interval;
pub mod status;
pub mod window;
