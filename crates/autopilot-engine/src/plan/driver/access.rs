//! NewPlan's last check: may the workers the run signals read the Plan
//! ([`crate::plan::rules::rbac`])? Applies the rule's verdict to the new run's status.

use autopilot_api::v1beta2::{PlanStateType, PlanStatus};

use crate::plan::model::decision::{Effect, EventKind};
use crate::plan::model::inputs::{Gaps, Inputs};
use crate::plan::model::phases::reasons;
use crate::plan::rules::rbac::{self, Verdict};

/// Whether the new run may be decided on now.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::plan) enum Checked {
    /// Decided: `status` and the warnings say what came of it.
    Decided,
    /// The API server's answer is needed first (named in the pass's needs): the pass waits.
    Waits,
}

/// Judge the new run whose NewPlan result is `status` (and its Warning Events `warnings`).
/// A refusal ends the plan and the command it names `Warning` before any node is signalled,
/// and drops the warnings about payloads nobody will download; a review that could not be
/// made adds its Warning Event; a missing answer is named in `gaps`.
pub(in crate::plan) fn new_plan(
    inputs: &Inputs<'_>,
    gaps: &mut Gaps<'_>,
    status: &mut PlanStatus,
    warnings: &mut Vec<Effect>,
) -> Checked {
    match rbac::judge(inputs, status) {
        Verdict::Go => Checked::Decided,
        Verdict::Ask(reader) => {
            gaps.lacks_plan_access(reader);
            Checked::Waits
        }
        Verdict::Refuse { command, description } => {
            status.state = PlanStateType::Warning;
            if let Some(refused) = status.commands.iter_mut().find(|c| c.id == command) {
                refused.state = PlanStateType::Warning;
                refused.description = Some(description);
            }
            warnings.clear();
            Checked::Decided
        }
        Verdict::Unchecked(note) => {
            let reason = reasons::PLAN_ACCESS_UNCHECKED;
            warnings.push(Effect::Event { kind: EventKind::Warning, reason, note });
            Checked::Decided
        }
    }
}
