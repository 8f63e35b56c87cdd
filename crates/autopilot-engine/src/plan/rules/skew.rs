//! Upgrade path and version skew, judged at NewPlan (kubeadm and Talos refuse the same).
//!
//! A k0s node runs the Kubernetes components of its release, so the versions a plan leaves
//! behind are Kubernetes' version skew. NewPlan walks the plan's commands in order, over the
//! Kubernetes versions the cluster reports, and refuses a plan that would, at any point of
//! its run:
//!
//! 1. [`rules::CONTROLLER_MINOR_SKIP`]: move a controller more than one minor version up in
//!    one step (`v1.33` to `v1.35`): the control plane's storage and APIs migrate one minor
//!    at a time;
//! 2. [`rules::WORKER_NEWER_THAN_CONTROLLER`]: leave a worker on a newer minor than a
//!    controller (a kubelet must not be newer than its API server);
//! 3. [`rules::WORKER_TOO_OLD`]: leave a worker more than one minor behind a controller;
//! 4. [`rules::CONTROLLER_SKEW`]: leave two controllers more than one minor apart.
//!
//! Where each version comes from ([`Source`]):
//!
//! - a controller (every ControlNode, a controller+worker too): the `gitVersion` its own API
//!   server answers on `GET /version`, which the leader asks alongside `/readyz` on the same
//!   address with the same client ([`Observed::api_versions`]);
//! - a worker (every other Node): its kubelet's `status.nodeInfo.kubeletVersion`;
//! - a node whose Kubernetes version is not reported (its API server not reached, no kubelet
//!   version) keeps the k0s version it publishes (a ControlNode's `status.k0sVersion`, a
//!   Node's `autopilot.k0sproject.io/k0s-version`); a node with neither is not judged;
//! - the version a command installs is derived from its k0s version, as k0s names releases
//!   (k0s `v1.35.1+k0s.0` carries Kubernetes `v1.35.1`); the node agent checks, before the
//!   swap, that the Kubernetes components the downloaded payload carries are of that minor.
//!
//! Every refusal says which source each version came from (`controller-0 (API server
//! v1.34.4)`, `worker-0 (kubelet v1.34.4)`, `worker-1 (published k0s v1.35.0+k0s.0)`,
//! `controller-0 (planned k0s v1.35.0+k0s.0)` for a version the plan installs).
//!
//! The states judged are those after each command's controllers and after its workers
//! (controllers go first, one at a time, and never skip under rule 1, so no state in
//! between is worse). Rules 2 to 4 are about pairs of nodes; a pair counts only when the
//! plan changes one of its nodes and makes its gap wider than it was: a plan is never
//! refused for a skew it found and does not deepen (it may be the plan that repairs it).
//!
//! Whose report a broken rule rests on decides what it stops (issue: a node's self-report
//! fails at most that node). A worker's versions are written by the node's own identity (the
//! kubelet writes its Node's status, and may annotate its own Node), so a pair rule broken
//! only because of what a worker reports about itself (the worker keeps its reported
//! version, the plan moved the controller) is [`Walk::workers`]'s: that worker's targets
//! fail, and a worker that is no target is only named in a Warning Event. Everything else is
//! [`Walk::plan`]'s and refuses the command: the plan's own versions, and the controllers'
//! (an API server's `/version` is observed by the leader directly; a ControlNode's status is
//! written by the controller itself, which holds the control plane anyway; the control
//! plane's skew is what these rules protect).
//!
//! Minor versions are compared (`v1.35.1+k0s.0` and `v1.35.4` are `v1.35`); a version that
//! does not parse counts as not reported, and a command whose version does not parse is not
//! judged. Each refusal names the rule, the nodes, their versions and the minor version to
//! go through first. An operator who knows better sets the Plan annotation
//! [`keys::ANNOTATION_ALLOW_SKEW`] to the plan's id: the run then starts, with a Warning
//! Event listing what was allowed. The annotation naming another id does not count.
//!
//! [`Observed::api_versions`]: crate::plan::Observed::api_versions

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use autopilot_api::keys;
use autopilot_api::version::K0sVersion;

use crate::plan::model::decision::{Effect, EventKind};
use crate::plan::model::inputs::Inputs;
use crate::plan::model::phases::reasons;

/// The rules' names, as refusals and docs show them.
pub mod rules {
    /// A controller would move more than one minor version up in one step.
    pub const CONTROLLER_MINOR_SKIP: &str = "controller-minor-skip";
    /// A worker would run a newer minor version than a controller.
    pub const WORKER_NEWER_THAN_CONTROLLER: &str = "worker-newer-than-controller";
    /// A worker would be more than one minor version behind a controller.
    pub const WORKER_TOO_OLD: &str = "worker-too-old";
    /// Two controllers would be more than one minor version apart.
    pub const CONTROLLER_SKEW: &str = "controller-skew";

    /// Every rule, in the order they are checked.
    pub const ALL: [&str; 4] =
        [CONTROLLER_MINOR_SKIP, WORKER_NEWER_THAN_CONTROLLER, WORKER_TOO_OLD, CONTROLLER_SKEW];
}

/// How many node names one refusal lists before it says how many more.
const NAMES_SHOWN: usize = 5;

/// A minor release line, such as `v1.35`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Minor {
    major: u64,
    minor: u64,
}

impl Minor {
    /// The minor line of a k0s version (any build metadata, a prerelease counts as its
    /// release's line); `None` when it is not a version.
    pub fn of(version: &str) -> Option<Self> {
        let parsed = K0sVersion::parse_ignoring_build(version.trim()).ok()?;
        let semver = parsed.semver();
        Some(Self { major: semver.major, minor: semver.minor })
    }

    /// How many minor versions `self` is above `other` (negative: below). Another major
    /// version counts as far apart (1000 minors per major).
    fn above(self, other: Self) -> i64 {
        let index = |m: Self| {
            i64::try_from(m.major)
                .unwrap_or(i64::MAX / 2_000)
                .saturating_mul(1000)
                .saturating_add(i64::try_from(m.minor.min(999)).unwrap_or(999))
        };
        index(self).saturating_sub(index(other))
    }

    /// The next minor line.
    fn next(self) -> Self {
        Self { minor: self.minor.saturating_add(1), ..self }
    }

    /// The minor line before (itself for `x.0`: nothing older is named).
    fn previous(self) -> Self {
        Self { minor: self.minor.saturating_sub(1), ..self }
    }
}

impl fmt::Display for Minor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}", self.major, self.minor)
    }
}

/// Where a version the rules judge comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// A controller's API server, as it answers the leader on `GET /version`.
    ApiServer,
    /// A Node's kubelet (`status.nodeInfo.kubeletVersion`, written by the node itself).
    Kubelet,
    /// The k0s version the node publishes about itself: what counts when its Kubernetes
    /// version is not reported.
    Published,
    /// The version a command of the plan installs (its k0s version, which names the
    /// Kubernetes release it carries).
    Plan,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::ApiServer => "API server",
            Source::Kubelet => "kubelet",
            Source::Published => "published k0s",
            Source::Plan => "planned k0s",
        })
    }
}

/// A node's version: as reported (or as the plan leaves it), its minor line and where it
/// comes from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Running {
    version: String,
    minor: Minor,
    source: Source,
}

impl Running {
    fn of(version: &str, source: Source) -> Option<Self> {
        Some(Self { version: version.trim().to_owned(), minor: Minor::of(version)?, source })
    }

    /// The version of the first source that reports one that parses.
    fn first_of(reports: [(Option<&String>, Source); 2]) -> Option<Self> {
        reports.into_iter().find_map(|(version, source)| Self::of(version?, source))
    }
}

impl fmt::Display for Running {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.source, self.version)
    }
}

/// The kind of node a version belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Controller,
    Worker,
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule ([`rules`]).
    pub rule: &'static str,
    /// What would happen and the minor version to go through first.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.rule, self.message)
    }
}

/// A pair violation's grouping: the rule, the controller it is about and its version, and
/// the worker whose own report alone makes it (`None`: the plan's or the controllers').
type PairKey = (&'static str, String, Running, Option<String>);

/// The rules one command's walk breaks, by whose report they rest on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// Broken by the plan's versions or the controllers' reports: the command is refused
    /// (unless the `allow-skew` annotation names the plan).
    pub plan: Vec<Violation>,
    /// Broken only because of the version a worker reports about itself (the worker keeps
    /// it, the plan moved a controller), by worker name: that worker's targets fail.
    pub workers: BTreeMap<String, Vec<Violation>>,
}

impl Walk {
    /// Whether nothing is broken.
    pub fn is_empty(&self) -> bool {
        self.plan.is_empty() && self.workers.is_empty()
    }
}

/// The versions of the cluster as a plan's run moves them, command by command.
#[derive(Clone, Debug)]
pub(in crate::plan) struct Fleet {
    /// Before the run.
    start: BTreeMap<(Role, String), Running>,
    /// Now (after the commands walked so far).
    now: BTreeMap<(Role, String), Running>,
    /// The nodes the commands walked so far change.
    changed: BTreeSet<(Role, String)>,
    /// The pair violations already reported (rule, the two nodes).
    reported: BTreeSet<(&'static str, String, String)>,
}

impl Fleet {
    /// The versions the cluster reports: every ControlNode is a controller (a
    /// controller+worker too: it is updated as a controller), judged by its API server's
    /// `/version`, every other Node a worker, judged by its kubelet's version; either, when
    /// not reported, by the k0s version it publishes. Nodes without a version that parses
    /// are left out.
    pub(in crate::plan) fn observe(inputs: &Inputs<'_>) -> Self {
        let observed = inputs.observed;
        let controllers = observed.control_nodes.iter().filter_map(|(name, object)| {
            let reports = [
                (observed.api_versions.get(name), Source::ApiServer),
                (object.version.as_ref(), Source::Published),
            ];
            Some(((Role::Controller, name.clone()), Running::first_of(reports)?))
        });
        let workers = observed
            .nodes
            .iter()
            .filter(|(name, _)| !observed.control_nodes.contains_key(*name))
            .filter_map(|(name, object)| {
                let reports = [
                    (object.kubelet_version.as_ref(), Source::Kubelet),
                    (object.version.as_ref(), Source::Published),
                ];
                Some(((Role::Worker, name.clone()), Running::first_of(reports)?))
            });
        let start: BTreeMap<_, _> = controllers.chain(workers).collect();
        Self { now: start.clone(), start, changed: BTreeSet::new(), reported: BTreeSet::new() }
    }

    /// Walk one update command to `version` over its resolved `controllers` and `workers`
    /// (a k0s update; an airgap bundle changes no version) and return the rules it breaks,
    /// by whose report they rest on.
    pub(in crate::plan) fn update(
        &mut self,
        version: &str,
        controllers: &[String],
        workers: &[String],
    ) -> Walk {
        let Some(to) = Running::of(version, Source::Plan) else { return Walk::default() };
        let mut violations = Vec::new();
        // Check 1: no controller skips a minor version.
        let mut skipping: BTreeMap<Running, Vec<String>> = BTreeMap::new();
        for name in controllers {
            let key = (Role::Controller, name.clone());
            if let Some(from) = self.now.get(&key)
                && to.minor.above(from.minor) > 1
            {
                skipping.entry(from.clone()).or_default().push(name.clone());
            }
        }
        for (from, names) in skipping {
            violations.push(Violation {
                rule: rules::CONTROLLER_MINOR_SKIP,
                message: format!(
                    "{} {} ({from}) would go to {version} in one step, skipping {}; update \
                     {} to a {} release first",
                    plural(names.len(), "controller", "controllers"),
                    listed(&names),
                    skipped(from.minor, to.minor),
                    if names.len() == 1 { "it" } else { "them" },
                    from.minor.next(),
                ),
            });
        }
        // Checks 2 to 4, once the command's controllers are done and once its workers are.
        let mut walk = Walk { plan: violations, workers: BTreeMap::new() };
        self.move_to(Role::Controller, controllers, &to);
        self.pairs(&mut walk);
        self.move_to(Role::Worker, workers, &to);
        self.pairs(&mut walk);
        walk
    }

    /// The nodes `names` of `role` now run `to`. A worker target that is a ControlNode (a
    /// controller+worker updated as a worker, its ControlNode having no platform) is the
    /// same machine as the controller: the controller moves.
    fn move_to(&mut self, role: Role, names: &[String], to: &Running) {
        for name in names {
            let controller = (Role::Controller, name.clone());
            let key = match role {
                Role::Worker if self.now.contains_key(&controller) => controller,
                Role::Worker | Role::Controller => (role, name.clone()),
            };
            self.now.insert(key.clone(), to.clone());
            self.changed.insert(key);
        }
    }

    /// The pair rules on the current versions: only pairs the plan changed a node of and
    /// made wider than they were, each pair once; added to `walk` by whose report they rest
    /// on.
    fn pairs(&mut self, walk: &mut Walk) {
        // (rule, the node the message is about, its version) -> the nodes on the other side.
        let mut found: BTreeMap<PairKey, Vec<(String, Running)>> = BTreeMap::new();
        let controllers = self.role(Role::Controller);
        let workers = self.role(Role::Worker);
        for (controller, c) in &controllers {
            // Check 2 and 3: each worker against each controller.
            for (worker, w) in &workers {
                let gap = w.minor.above(c.minor);
                let rule = if gap > 0 {
                    rules::WORKER_NEWER_THAN_CONTROLLER
                } else if gap < -1 {
                    rules::WORKER_TOO_OLD
                } else {
                    continue;
                };
                if !self.widened(rule, (Role::Worker, worker), (Role::Controller, controller), gap)
                {
                    continue;
                }
                // The worker's own report alone: it keeps the version it published, and the
                // plan moved the controller.
                let own_report = !self.changed.contains(&(Role::Worker, worker.clone()))
                    && self.changed.contains(&(Role::Controller, controller.clone()));
                found
                    .entry((
                        rule,
                        controller.clone(),
                        c.clone(),
                        own_report.then(|| worker.clone()),
                    ))
                    .or_default()
                    .push((worker.clone(), w.clone()));
            }
            // Check 4: each pair of controllers, the older one named.
            for (other, o) in &controllers {
                let gap = o.minor.above(c.minor);
                if gap < 2
                    || !self.widened(
                        rules::CONTROLLER_SKEW,
                        (Role::Controller, other),
                        (Role::Controller, controller),
                        gap,
                    )
                {
                    continue;
                }
                found
                    .entry((rules::CONTROLLER_SKEW, controller.clone(), c.clone(), None))
                    .or_default()
                    .push((other.clone(), o.clone()));
            }
        }
        for ((rule, controller, running, worker), others) in found {
            let violation = pair_violation(rule, &controller, &running, &others);
            match worker {
                Some(worker) => walk.workers.entry(worker).or_default().push(violation),
                None => walk.plan.push(violation),
            }
        }
    }

    /// The current versions of one role's nodes, by name.
    fn role(&self, role: Role) -> Vec<(String, Running)> {
        self.now
            .iter()
            .filter(|((r, _), _)| *r == role)
            .map(|((_, name), running)| (name.clone(), running.clone()))
            .collect()
    }

    /// Whether the gap of the pair `a`–`b` (`a` above `b` by `gap` minors) is one the plan
    /// made: one of them changed and the gap is wider than before the run (a pair one of
    /// whose nodes had no version before counts as new). Records the pair as reported.
    fn widened(
        &mut self,
        rule: &'static str,
        a: (Role, &String),
        b: (Role, &String),
        gap: i64,
    ) -> bool {
        let a = (a.0, a.1.clone());
        let b = (b.0, b.1.clone());
        if !self.changed.contains(&a) && !self.changed.contains(&b) {
            return false;
        }
        let before = match (self.start.get(&a), self.start.get(&b)) {
            (Some(x), Some(y)) => Some(x.minor.above(y.minor)),
            (None, _) | (_, None) => None,
        };
        let wider =
            before.is_none_or(|before| gap.abs() > before.abs() || gap.signum() != before.signum());
        wider && self.reported.insert((rule, a.1, b.1))
    }
}

/// The violation of a pair rule about `controller` (at `running`) and the `others` (workers,
/// or the controllers too far above it), each version with its source.
fn pair_violation(
    rule: &'static str,
    controller: &str,
    running: &Running,
    others: &[(String, Running)],
) -> Violation {
    let names: Vec<String> = others.iter().map(|(name, _)| name.clone()).collect();
    let versions: BTreeSet<String> = others.iter().map(|(_, v)| v.to_string()).collect();
    let versions = versions.into_iter().collect::<Vec<_>>().join(", ");
    let minor = running.minor;
    let newest = others.iter().map(|(_, v)| v.minor).max().unwrap_or(minor);
    let oldest = others.iter().map(|(_, v)| v.minor).min().unwrap_or(minor);
    let message = match rule {
        rules::WORKER_NEWER_THAN_CONTROLLER => format!(
            "{} {} ({versions}) would be newer than controller {controller} ({running}); \
             update the controllers to {newest} first (controllers go first)",
            plural(names.len(), "worker", "workers"),
            listed(&names),
        ),
        rules::WORKER_TOO_OLD => format!(
            "{} {} ({versions}) would be {} minor versions behind controller {controller} \
             ({running}); update the workers to {} first",
            plural(names.len(), "worker", "workers"),
            listed(&names),
            minor.above(oldest),
            minor.previous(),
        ),
        rules::CONTROLLER_SKEW => format!(
            "controller {controller} ({running}) would be {} minor versions behind {} {} \
             ({versions}); update {controller} to {} first",
            newest.above(minor),
            plural(names.len(), "controller", "controllers"),
            listed(&names),
            newest.previous(),
        ),
        _ => format!("controller {controller} ({running}) and {}", listed(&names)),
    };
    Violation { rule, message }
}

/// `v1.34` or `v1.34 to v1.35`: the minor lines between `from` and `to`.
fn skipped(from: Minor, to: Minor) -> String {
    let first = from.next();
    let last = to.previous();
    if first == last || first.major != last.major {
        first.to_string()
    } else {
        format!("{first} to {last}")
    }
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

/// Up to [`NAMES_SHOWN`] names, then how many more.
fn listed(names: &[String]) -> String {
    let mut text = names.iter().take(NAMES_SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > NAMES_SHOWN {
        text.push_str(&format!(" and {} more", names.len() - NAMES_SHOWN));
    }
    text
}

/// Whether the plan's [`keys::ANNOTATION_ALLOW_SKEW`] annotation (`allow_skew`) names
/// `plan_id`.
pub(in crate::plan) fn allowed(allow_skew: Option<&str>, plan_id: &str) -> bool {
    allow_skew.is_some_and(|id| id.trim() == plan_id)
}

/// The refusal of a command whose update breaks `violations` (at `path`, e.g.
/// `commands[1].k0supdate`), telling how to override it; `allow_skew` is the annotation's
/// value when it names another plan.
pub(in crate::plan) fn refusal(
    path: &str,
    version: &str,
    violations: &[Violation],
    plan_id: &str,
    allow_skew: Option<&str>,
) -> String {
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    let mut text = format!(
        "{path}.version: {version} breaks the version skew rules: {}. To run the plan \
         anyway, annotate it {}={plan_id}",
        listed.join("; "),
        keys::ANNOTATION_ALLOW_SKEW,
    );
    if let Some(other) = allow_skew.map(str::trim).filter(|other| *other != plan_id) {
        text.push_str(&format!(
            " (the annotation names plan id {other:?}, not this plan's id {plan_id:?})"
        ));
    }
    text
}

/// The Warning Event of a command whose skew the annotation allowed.
pub(in crate::plan) fn allowed_event(
    path: &str,
    version: &str,
    violations: &[Violation],
) -> Effect {
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    Effect::Event {
        kind: EventKind::Warning,
        reason: reasons::VERSION_SKEW_ALLOWED,
        note: format!(
            "{path}.version: {version} breaks the version skew rules, allowed by the {} \
             annotation: {}",
            keys::ANNOTATION_ALLOW_SKEW,
            listed.join("; ")
        ),
    }
}

/// The reason the target of worker `name` fails when the rules broken only by the version
/// it reports about itself (`violations`, from [`Walk::workers`]) are not allowed: names
/// the node, its version and each rule, and how to update it anyway.
pub(in crate::plan) fn worker_refusal(
    name: &str,
    violations: &[Violation],
    plan_id: &str,
) -> String {
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    format!(
        "{}the version Node {name} reports about itself (its kubelet's, else the k0s \
         version it publishes) breaks the version skew rules: {}. Only this node fails, as \
         the rule rests on its own report; to update it anyway, annotate the plan {}={plan_id}",
        crate::plan::model::command::REFUSED_BY_OWN_REPORT,
        listed.join("; "),
        keys::ANNOTATION_ALLOW_SKEW,
    )
}

/// The Warning Event about worker `name`, no target of the run, whose own reported version
/// breaks `violations` once the run moved the controllers: the run goes on.
pub(in crate::plan) fn left_behind_event(name: &str, violations: &[Violation]) -> Effect {
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    Effect::Event {
        kind: EventKind::Warning,
        reason: reasons::VERSION_SKEW_LEFT_BEHIND,
        note: format!(
            "Node {name} is no target of this run, and the version it reports about itself \
             (its kubelet's, else the k0s version it publishes) breaks the version skew rules \
             once the run has moved the controllers: {}; the run goes on, as the rule rests on \
             the node's own report (update the node next)",
            listed.join("; ")
        ),
    }
}
