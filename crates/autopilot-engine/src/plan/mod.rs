//! The Plan engine's pure decision core: no kube client, no clock, no randomness, no I/O.
//!
//! The shell (`autopilot_controller::reconcile`) observes the cluster into an [`Observed`] snapshot, calls
//! [`step`] through [`resolve()`] (which looks up what a pass names in [`Needs`] and steps
//! again), then executes the returned [`Transition`]: it writes the complete next status
//! first (optimistic concurrency on the Plan) and then performs the [`Effect`]s (signals with
//! optimistic concurrency on the node object, Events). Writing the status first makes the
//! status the record of intent: a target is `SignalSent` before its node is written, so a
//! stale snapshot can never push more nodes in flight than allowed, and a crash between the
//! two writes is repaired by the next pass, which re-sends the identical signal to a
//! `SignalSent` target whose object does not carry it.
//!
//! - [`phases`]: the declared phase tables (phases, initial, terminal, allowed transitions)
//!   that tests and docs read.
//! - [`selector`]: label and field selectors, parsed strictly.
//! - [`removed_apis`]: the removed-API table and the pre-check decision.
//! - `payload` (private): which platform entries no node could verify, refused or warned
//!   about at NewPlan (`Policy::allow_unverified_payloads`).
//! - [`skew`]: the upgrade-path and version skew rules NewPlan judges a plan by.
//! - [`rollout`]: a dry run of [`step`] over a spec on a snapshot (`k0s autopilot preview`).
//! - [`resolve`]: ask, then step again: the one loop that looks up what a pass needs, for
//!   the reconcile ([`resolve()`]) and the preview ([`resolve::run`]).
//! - `inputs` and `decision` (private, their types re-exported here): what a pass reads (the
//!   shell's [`PlanView`], [`Observed`] and [`Policy`]; the machine's `Inputs` and `Gaps`)
//!   and what it decides ([`Transition`] with its [`Effect`]s and [`Needs`]; the machine's
//!   `Decision`). Every other module imports them from there, so `plan/` has no import cycle.
//! - [`step`] and [`removed_api_check_versions`]: the machine, and which versions' removed
//!   APIs a pass over a plan may need. What a pass needs (controllers to probe, removed
//!   APIs to look for), the pass itself says ([`Transition::needs`]).

mod driver;
mod model;
mod rules;

pub use driver::{resolve, rollout};
pub use model::{phases, selector};
pub use rules::{budget, gates, removed_apis, skew, spec_skew, window};

#[cfg(test)]
mod tests;

pub use driver::machine::{REMOVED_API_RECHECK, removed_api_check_versions, step};
pub use driver::resolve::resolve;
pub use model::decision::{
    Effect, EventKind, Needs, ObjectKind, Requeue, SignalTarget, Transition,
};
pub use model::inputs::{
    CheckPods, NO_GATE_ANSWERS, Observed, ObservedGateCheck, ObservedPrestage, ObservedSignal,
    PlanView, Policy, Readiness, RequiredKeys, Steering, TargetObject,
};
pub use model::labels::Labels;
pub use model::lookups::{GateAnswer, GateQuery, RemovedApiUse};
