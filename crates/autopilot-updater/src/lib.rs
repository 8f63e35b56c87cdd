//! Automatic k0s updates: `UpdateConfig`, update-server channels and maintenance windows
//! (REF §11, DESIGN §6).
//!
//! This crate is the updater's shell: its HTTP edge (the update-server client) and, in
//! [`run`], its Kubernetes side: watching UpdateConfigs, the finalizer, reading the token
//! Secret, collecting cluster info, writing the Plan and Events. The shell runs in every
//! controller (`k0s controller` spawns [`run::run`]) but checks and writes only while that
//! controller leads.
//!
//! Its decisions are pure and live in the engine (`autopilot_engine::updater`). Start with
//! [`decide::decide`] for the rules and [`run::run`] for the loop. The modules:
//!
//! - [`decide`]: the pure decision ([`decide::Decision`]) and plan generation
//!   ([`decide::plan_spec`]); [`decide::Strategy`] validates `upgradeStrategy`.
//! - [`window`]: weekly windows of the `periodic` strategy (inclusive start, exclusive end,
//!   the start day counts across midnight).
//! - [`cron`]: the deprecated `cron` strategy's schedule, read as k0s reads it (seconds
//!   field first).
//! - [`autopilot_api::version`]: k0s version ordering (`v1.35.1+k0s.0 < v1.35.1+k0s.1 <
//!   v1.35.2+k0s.0`).
//! - [`interval`]: the minimum interval between automatic updates (patch and minor apart).
//! - [`status`]: the UpdateConfig status a check's outcome makes (kstatus conditions, the
//!   end of life), and the merge patch that writes it.
//! - [`channel`]: the update server's two YAML answers, parsed into
//!   [`channel::ChannelAnswer`].
//! - [`source`]: the HTTP client for both endpoints ([`source::Client`]).
//! - [`run`]: the shell described below.
//!
//! # How the shell drives it ([`run`])
//!
//! A kube-runtime `Controller` over UpdateConfigs; on the leader, each reconcile runs the
//! check that is due and requeues itself for the next one. A new generation schedules a
//! first check again; a deletion interrupts a check in progress, and kube-runtime's
//! `finalizer` removes the finalizer (the only thing done on delete, by any controller,
//! leader or not):
//!
//! 1. On each change of the UpdateConfig, [`decide::Strategy::from_spec`]: an error is an
//!    Event (`InvalidUpdateConfig`) and nothing more until the object changes.
//! 2. Time the checks with [`decide::Strategy::next_check`]: `periodic` every
//!    `K0S_UPDATE_PERIOD` (first check soon after start), `cron` only when the schedule fires.
//!    Windows and schedules are evaluated in the controller's local zone
//!    (`jiff::tz::TimeZone::system()`), as k0s does.
//! 3. Each check: read the token, fetch the answer with [`source::Client::fetch_index`]
//!    (`periodic`) or [`source::Client::fetch_legacy`] (`cron`), passing a
//!    [`source::ClusterInfo`] only if the operator opted in. A fetch error is logged and an
//!    Event (`UpdateServerError`, [`decide::reasons::SERVER_ERROR`]); the next check retries.
//! 4. Read the `autopilot` Plan and call [`decide::decide`] with `now`, the zone, the
//!    controller's own version and the answer. Record [`decide::Decision::reason`] /
//!    [`decide::Decision::message`] as an Event (`events.k8s.io/v1`, namespace `default`,
//!    regarding the UpdateConfig) and an `info` log line. `CreatePlan` creates the Plan
//!    `autopilot`; `ReplacePlan` replaces its spec, guarded by the resourceVersion read
//!    (a terminal Plan with a changed spec starts a new run). For
//!    `OutsideWindow { opens_at }` and `MinIntervalWait { allowed_at }` the next check is at
//!    that time if it comes before the next period.
//! 5. Write the UpdateConfig's status: [`status::status`] computes it purely from the status
//!    read before the check (a GET of the status subresource, so a write the watch has not
//!    delivered yet counts) and the outcome; [`status::merge_patch`] turns the difference
//!    into a merge patch of the status subresource, sent only when something changed. A new
//!    generation gets `Reconciling` (`CheckPending`) until its first check ends; a new
//!    leader does not rewrite a generation already checked. The end of life is recorded in
//!    the metrics too ([`metrics::Metrics::record_end_of_life`]).
//!
//! [`channel`]: autopilot_engine::updater::channel
//! [`channel::ChannelAnswer`]: autopilot_engine::updater::channel::ChannelAnswer
//! [`cron`]: autopilot_engine::updater::cron
//! [`decide`]: autopilot_engine::updater::decide
//! [`decide::Decision`]: autopilot_engine::updater::decide::Decision
//! [`decide::Decision::message`]: autopilot_engine::updater::decide::Decision::message
//! [`decide::Decision::reason`]: autopilot_engine::updater::decide::Decision::reason
//! [`decide::Strategy`]: autopilot_engine::updater::decide::Strategy
//! [`decide::Strategy::from_spec`]: autopilot_engine::updater::decide::Strategy::from_spec
//! [`decide::Strategy::next_check`]: autopilot_engine::updater::decide::Strategy::next_check
//! [`decide::decide`]: autopilot_engine::updater::decide::decide
//! [`decide::plan_spec`]: autopilot_engine::updater::decide::plan_spec
//! [`decide::reasons::SERVER_ERROR`]: autopilot_engine::updater::decide::reasons::SERVER_ERROR
//! [`window`]: autopilot_engine::updater::window
//! [`interval`]: autopilot_engine::updater::interval
//! [`status`]: autopilot_engine::updater::status
//! [`status::status`]: autopilot_engine::updater::status::status
//! [`status::merge_patch`]: autopilot_engine::updater::status::merge_patch

pub mod metrics;
pub mod run;
pub mod source;
