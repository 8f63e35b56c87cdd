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
//! `plan/` is three levels; a module imports from its own level or a lower one, never a
//! higher one (`cargo test -p xtask structure` fails otherwise, and on any import cycle):
//!
//! 1. `model/`, the words every rule shares: the command, its groups and targets, the run
//!    (`command`); what a pass reads (the shell's [`PlanView`], [`Observed`] and [`Policy`];
//!    the machine's `Inputs` and `Gaps`) and decides ([`Transition`] with its [`Effect`]s
//!    and [`Needs`]; the machine's `Decision`); the lookups a pass asks for
//!    ([`GateQuery`], [`RemovedApiUse`]); a rule's read-only view of one command's pass and
//!    its verdict (`verdict`: go; hold, with why and until when; end, with state and
//!    reason); the declared phase tables ([`phases`]), selectors ([`selector`]) and the
//!    text the status shows.
//! 2. `rules/`, each a pure function of the model that returns a verdict and never writes
//!    the status: [`window`], waves, the one soak clock, [`gates`], pre-staging, version
//!    [`skew`] (and [`spec_skew`] over a whole spec), the preflight commands' targets,
//!    payload authentication, [`removed_apis`], the workers' right to read the Plan
//!    ([`rbac`]), target selection.
//! 3. `driver/`, the one writer of a command's status and the one emitter of effects:
//!    [`step`] (`machine`: one pass in numbered steps), NewPlan (`discovery`, and
//!    `access`, which applies [`rbac`]), the
//!    scheduling of an update command (`schedule`, with its steps numbered in one order;
//!    gates applied in `gating`, pre-staging in `staging`), a preflight command
//!    (`preflight`), a rollback (`rollback`: a mode chosen once per pass, with its own
//!    pass over each command), the status [`budget`], and the loops around [`step`]:
//!    [`resolve`](mod@resolve) (ask, then step again: [`resolve()`] for the reconcile, [`resolve::run`]
//!    for the preview) and [`rollout`] (a dry run over a spec on a snapshot, `k0s
//!    autopilot preview`). [`removed_api_check_versions`] says which versions' removed
//!    APIs a pass over a plan may need.

mod driver;
mod model;
mod rules;

pub use driver::{budget, resolve, rollout};
pub use model::{phases, selector};
pub use rules::{gates, rbac, removed_apis, skew, spec_skew, window};

#[cfg(test)]
mod tests;

pub use driver::discovery::UNSIGNED_PLAN_HINT;
pub use driver::machine::{REMOVED_API_RECHECK, removed_api_check_versions, step};
pub use driver::resolve::resolve;
pub use model::decision::{
    Effect, EventKind, Needs, ObjectKind, Requeue, SignalTarget, Transition,
};
pub use model::inputs::{
    CheckPods, NO_API_VERSIONS, NO_GATE_ANSWERS, NO_PLAN_ACCESS, Observed, ObservedGateCheck,
    ObservedPrestage, ObservedSignal, PlanView, Policy, Probe, Readiness, RequiredKeys, Steering,
    TargetObject,
};
pub use model::labels::Labels;
pub use model::lookups::{GateAnswer, GateQuery, PlanAccess, PlanReader, RemovedApiUse};
