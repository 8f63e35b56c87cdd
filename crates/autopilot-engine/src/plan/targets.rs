//! Which objects a command targets: a group's selection among the snapshot's objects
//! ([`select`]), and NewPlan's result for one command ([`NewCommand`]), shared by NewPlan
//! ([`super::discovery`]) and the preflight checks ([`super::checks`]).

use std::collections::BTreeSet;

use autopilot_api::v1beta2::{FrozenTemplate, PlanStateType, PreflightPodStatus, TargetStatus};

use super::command::Group;
use super::decision::{Effect, ObjectKind};
use super::inputs::Inputs;
use super::selector::{FieldSelector, LabelSelector};

/// The NewPlan result of one command.
pub(super) struct NewCommand {
    /// `SchedulableWait` or the failure.
    pub(super) state: PlanStateType,
    /// Why it failed.
    pub(super) description: Option<String>,
    /// The resolved targets per group (recorded even when a target check fails, so the
    /// status shows which nodes were missing or had no platform).
    pub(super) targets: Vec<(Group, Vec<TargetStatus>)>,
    /// A preflight command's `scheduler` Pods, one per check and node.
    pub(super) pods: Vec<PreflightPodStatus>,
    /// A preflight command's `scheduler` templates, frozen.
    pub(super) templates: Vec<FrozenTemplate>,
    /// Warning Events about payloads accepted without an integrity check.
    pub(super) warnings: Vec<Effect>,
}

impl NewCommand {
    pub(super) fn failed(state: PlanStateType, description: String) -> Self {
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
    pub(super) fn with_targets(
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
pub(super) fn select(
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
