//! May the nodes a new run signals read the Plan? NewPlan asks before it signals anyone.
//!
//! Every node agent reads the Plan `autopilot` with its own identity to authorize what it
//! was signalled to do (`crate::authorize::read`). A worker's identity is
//! `system:node:<name>` in the groups `system:nodes` and `system:authenticated`; the Node
//! authorizer has no opinion on Plans, so only RBAC can let it read one, and the shipped
//! grant is `manifests/rbac/worker.yaml` (ClusterRole and ClusterRoleBinding
//! `k0s-autopilot-worker`, bound to the group `system:nodes`). Without it every signalled
//! worker refuses its signal once its read stayed forbidden for
//! [`FORBIDDEN_GRACE`](crate::authorize::read::FORBIDDEN_GRACE): a minute per node, one node
//! at a time, and the run fails on its first worker. So a new run asks the API server first
//! (a `SubjectAccessReview`, the shell's I/O) and ends `Warning` at NewPlan, naming the
//! identity and the manifest, when the answer is no.
//!
//! One review per identity kind, never one per node. Check 1: the workers are asked about
//! through one representative, the first worker target of the run (command order, then
//! name order): RBAC grants nodes by group, and every worker is in the same groups, so the
//! answer for one is the answer for all. It is not when a cluster grants Plans to nodes one
//! by one (a binding per `system:node:<name>` user) or through a webhook authorizer that
//! decides per node; then a worker the representative does not stand for still refuses its
//! own signal after the grace, and that refusal ends the run as it did before this check.
//!
//! The controllers are not asked about: their agents read the Plan with the controller
//! credentials (group `k0s-autopilot-controllers`, `manifests/rbac/controller.yaml`), the
//! same binding that lets the leader list and watch the Plan it is deciding on, so the pass
//! itself shows that controllers may read it. A controller that also acts as a worker
//! (`--enable-worker`) is a ControlNode and reads with those credentials too; a Node target
//! that is also a ControlNode is therefore never the workers' representative.
//!
//! Check 2: a review that could not be made (the leader may not create SubjectAccessReviews,
//! no answer in time) blocks nothing: the run goes on as it would without the check, with
//! one Warning Event saying so.

use std::collections::BTreeMap;

use autopilot_api::keys;
use autopilot_api::v1beta2::{PlanStatus, TargetState};

use crate::plan::model::command::{Command, targets};
use crate::plan::model::decision::ObjectKind;
use crate::plan::model::inputs::{Inputs, TargetObject};
use crate::plan::model::lookups::{PlanAccess, PlanReader};

/// The verb a node uses on the Plan.
pub const VERB: &str = "get";
/// The API group of Plans.
pub const GROUP: &str = "autopilot.k0sproject.io";
/// The resource (plural) of Plans.
pub const RESOURCE: &str = "plans";
/// The groups of a worker's identity (the Node authorizer's `system:nodes`, and the group
/// every authenticated identity is in).
pub const WORKER_GROUPS: [&str; 2] = ["system:nodes", "system:authenticated"];
/// The manifest that grants workers the read.
pub const WORKER_MANIFEST: &str = "manifests/rbac/worker.yaml";
/// The ClusterRole and ClusterRoleBinding of [`WORKER_MANIFEST`].
pub const WORKER_ROLE: &str = "k0s-autopilot-worker";

impl PlanReader {
    /// The identity of the worker `node` (`system:node:<node>` in [`WORKER_GROUPS`]).
    pub fn worker(node: &str) -> Self {
        Self {
            user: format!("system:node:{node}"),
            groups: WORKER_GROUPS.iter().map(|group| (*group).to_owned()).collect(),
        }
    }
}

/// The workers' representative of a new run whose targets `status` records (NewPlan
/// resolved them): the command index and the identity of its first worker target to signal
/// that is not also a ControlNode in `control_nodes` (a controller+worker reads with the
/// controller credentials). `None` when the run signals no worker.
pub fn representative(
    control_nodes: &BTreeMap<String, TargetObject>,
    status: &PlanStatus,
) -> Option<(u32, PlanReader)> {
    status.commands.iter().find_map(|command_status| {
        let command = command_status.frozen.as_ref().and_then(Command::resolve)?;
        command
            .groups()
            .iter()
            .filter(|group| command.object_kind(**group) == ObjectKind::Node)
            .flat_map(|group| targets(command_status, command, *group))
            .find(|target| {
                // Pending, or signalled in the pass that started the run (a dry run's first
                // status); not one NewPlan failed for its own report, which is never signalled.
                matches!(target.state, TargetState::SignalPending | TargetState::SignalSent)
                    && !control_nodes.contains_key(&target.name)
            })
            .map(|target| (command_status.id, PlanReader::worker(&target.name)))
    })
}

/// What NewPlan does about the workers' right to read the Plan.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::plan) enum Verdict {
    /// Nothing to ask, or the representative may read it: the run goes on.
    Go,
    /// The API server has not been asked yet: wait for its answer about this identity.
    Ask(PlanReader),
    /// The representative may not read the Plan: the command ends `Warning` with this
    /// description, and so does the plan.
    Refuse {
        /// The command whose worker stands for the others.
        command: u32,
        /// Names the identity, the verb and resource, and the fix.
        description: String,
    },
    /// The review could not be made: the run goes on, with a Warning Event
    /// (`PlanAccessUnchecked`) of this note.
    Unchecked(String),
}

/// The verdict on a new run whose targets `status` records, from what the shell answered
/// (`inputs.observed.plan_access`). Only a run that NewPlan would start (`SchedulableWait`)
/// is judged.
pub(in crate::plan) fn judge(inputs: &Inputs<'_>, status: &PlanStatus) -> Verdict {
    if status.state != autopilot_api::v1beta2::PlanStateType::SchedulableWait {
        return Verdict::Go;
    }
    // Check 1: one representative for the workers.
    let Some((command, reader)) = representative(inputs.observed.control_nodes, status) else {
        return Verdict::Go;
    };
    match inputs.observed.plan_access.get(&reader) {
        None => Verdict::Ask(reader),
        Some(PlanAccess::Allowed) => Verdict::Go,
        Some(PlanAccess::Denied(reason)) => {
            Verdict::Refuse { command, description: denial(&reader, reason) }
        }
        // Check 2.
        Some(PlanAccess::Unknown(why)) => Verdict::Unchecked(unchecked(&reader, why)),
    }
}

/// What the API server denied, and the fix: the description of the refused command.
pub fn denial(reader: &PlanReader, reason: &str) -> String {
    let said = if reason.trim().is_empty() {
        String::new()
    } else {
        format!(" (the API server said: {})", reason.trim())
    };
    format!(
        "the workers may not read the Plan: {} (groups {}) may not {VERB} {RESOURCE}.{GROUP} \
         {:?}{said}, and every signalled worker's agent reads it with its own identity and \
         would refuse its signal (forbidden). Apply the worker RBAC (ClusterRole and \
         ClusterRoleBinding {WORKER_ROLE}): kubectl apply -f {WORKER_MANIFEST}",
        reader.user,
        reader.groups.join(", "),
        keys::PLAN_NAME,
    )
}

/// The note of the Warning Event of a review that could not be made.
pub fn unchecked(reader: &PlanReader, why: &str) -> String {
    format!(
        "could not check whether the workers may read Plan {} (a SubjectAccessReview of \
         {VERB} {RESOURCE}.{GROUP} for {}): {why}. The run goes on; a worker that may not \
         read the Plan refuses its signal. The controllers need create on \
         subjectaccessreviews.authorization.k8s.io (manifests/rbac/controller.yaml) for the \
         check",
        keys::PLAN_NAME,
        reader.user,
    )
}
