//! Which objects a command targets: a group's selection among the snapshot's objects
//! ([`select`], and a group with the controller+worker rule: [`discover`]), and NewPlan's result for one command ([`NewCommand`]), shared by NewPlan
//! ([`crate::plan::driver::discovery`]) and the preflight checks ([`crate::plan::rules::checks`]).

use std::collections::BTreeSet;

use autopilot_api::v1beta2::{FrozenTemplate, PlanStateType, PreflightPodStatus, TargetStatus};

use crate::plan::model::command::{Command, Group};
use crate::plan::model::decision::{Effect, ObjectKind};
use crate::plan::model::inputs::Inputs;
use crate::plan::model::selector::{FieldSelector, LabelSelector};

/// The NewPlan result of one command.
pub(in crate::plan) struct NewCommand {
    /// `SchedulableWait` or the failure.
    pub(in crate::plan) state: PlanStateType,
    /// Why it failed.
    pub(in crate::plan) description: Option<String>,
    /// The resolved targets per group (recorded even when a target check fails, so the
    /// status shows which nodes were missing or had no platform).
    pub(in crate::plan) targets: Vec<(Group, Vec<TargetStatus>)>,
    /// A preflight command's `scheduler` Pods, one per check and node.
    pub(in crate::plan) pods: Vec<PreflightPodStatus>,
    /// A preflight command's `scheduler` templates, frozen.
    pub(in crate::plan) templates: Vec<FrozenTemplate>,
    /// Warning Events about payloads accepted without an integrity check.
    pub(in crate::plan) warnings: Vec<Effect>,
}

impl NewCommand {
    pub(in crate::plan) fn failed(state: PlanStateType, description: String) -> Self {
        Self {
            state,
            description: Some(description),
            targets: Vec::new(),
            pods: Vec::new(),
            templates: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// A failure that still records the resolved `targets` (which nodes were missing, had no
    /// platform or are excluded).
    pub(in crate::plan) fn with_targets(
        state: PlanStateType,
        description: String,
        targets: Vec<(Group, Vec<TargetStatus>)>,
    ) -> Self {
        Self {
            state,
            description: Some(description),
            targets,
            pods: Vec::new(),
            templates: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// The names `target` selects among the objects of `kind`: its `static` list (objects need
/// not exist), else its selector (labels and fields both match; `{}` is every object), else
/// nothing. A selector that does not parse is an error naming the group, never "all".
pub(in crate::plan) fn select(
    inputs: &Inputs<'_>,
    kind: ObjectKind,
    group: Group,
    target: &autopilot_api::v1beta2::PlanCommandTarget,
) -> Result<BTreeSet<String>, String> {
    let objects = inputs.objects(kind);
    let names: BTreeSet<String> = if let Some(list) = &target.discovery.r#static {
        list.nodes.iter().cloned().collect()
    } else if let Some(selector) = &target.discovery.selector {
        let label_text = selector.labels.as_deref().unwrap_or_default();
        let labels = LabelSelector::parse(label_text).map_err(|problem| {
            format!("{} label selector {label_text:?} is invalid: {problem}", group.name())
        })?;
        let field_text = selector.fields.as_deref().unwrap_or_default();
        let fields = FieldSelector::parse(field_text).map_err(|problem| {
            format!("{} field selector {field_text:?} is invalid: {problem}", group.name())
        })?;
        objects
            .iter()
            .filter(|(name, object)| labels.matches(&object.labels) && fields.matches(name))
            .map(|(name, _)| name.clone())
            .collect()
    } else {
        BTreeSet::new()
    };
    Ok(names)
}

/// The names a group targets, deduplicated and sorted by name.
///
/// `static` wins over `selector`; neither targets nothing. A selector's labels and fields
/// must both match; `selector: {}` selects every object of the kind. For k0s workers, a Node
/// that is also a ControlNode with a usable platform is a controller+worker and is updated
/// as a controller only (REF §4.3 rule 3).
pub(in crate::plan) fn discover(
    inputs: &Inputs<'_>,
    command: Command<'_>,
    group: Group,
) -> Result<Vec<String>, String> {
    let Some(target) = command.target(group) else {
        return Ok(Vec::new());
    };
    let names = select(inputs, command.object_kind(group), group, target)?;
    let is_controller_worker = |name: &String| {
        matches!(command, Command::K0s(_))
            && group == Group::Workers
            && inputs.observed.nodes.contains_key(name)
            && inputs
                .observed
                .control_nodes
                .get(name)
                .is_some_and(|control_node| command.platform_entry(control_node).is_ok())
    };
    Ok(names.into_iter().filter(|name| !is_controller_worker(name)).collect())
}
