//! Builders of the objects tests start from (feature `fixtures`, never in a build that
//! ships): Plan specs, worker Nodes, ControlNodes and the signals they carry.
//!
//! Each builder starts small and is changed step by step, so a test names only what
//! matters to it:
//!
//! ```
//! use autopilot_api::fixtures::*;
//!
//! let spec = spec("id123").then_k0s_update("v1.35.1+k0s.0").workers(["w1", "w2"]).concurrent(2);
//! let worker = node("w1").k0s_version("v1.35.0+k0s.0").on_platform("linux", "amd64");
//! let controller = control_node("c1").k0s_version("v1.35.0+k0s.0");
//! let signal = k0s_signal("id123", "v1.35.1+k0s.0", "https://example.com/k0s", &sha('a'))
//!     .in_run("uid/1");
//! # let _ = (spec, worker, controller, signal);
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use kube_core::Resource;

use crate::keys;
use crate::signal::{CommandAirgapUpdate, CommandK0sUpdate, SignalCommand, SignalData};
use crate::v1beta2::{
    Concurrency, ControlNode, ControlNodeStatus, Plan, PlanCommand, PlanCommandAirgapUpdate,
    PlanCommandK0sUpdate, PlanCommandRollout, PlanCommandTarget, PlanCommandTargetDiscovery,
    PlanCommandTargetDiscoverySelector, PlanCommandTargetDiscoveryStatic, PlanCommandTargetLimits,
    PlanCommandTargets, PlanResourceUrl, PlanSpec,
};

/// A SHA-256 digest in hex: `c` 64 times.
pub fn sha(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

// === Plans ===

/// A spec with id `id`, timestamp `now` and no commands yet.
pub fn spec(id: &str) -> PlanSpec {
    PlanSpec {
        download_window: Default::default(),
        window: Default::default(),
        windows: Default::default(),
        id: id.to_owned(),
        timestamp: "now".to_owned(),
        commands: Vec::new(),
    }
}

/// Targets named one by one (`discovery.static`), with the default limits.
pub fn static_target<I>(names: I) -> PlanCommandTarget
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    PlanCommandTarget {
        discovery: PlanCommandTargetDiscovery {
            r#static: Some(PlanCommandTargetDiscoveryStatic {
                nodes: names.into_iter().map(|name| name.as_ref().to_owned()).collect(),
            }),
            selector: None,
        },
        limits: PlanCommandTargetLimits::default(),
    }
}

/// Targets chosen by label and field selectors, with the default limits.
pub fn selector_target(labels: Option<&str>, fields: Option<&str>) -> PlanCommandTarget {
    PlanCommandTarget {
        discovery: PlanCommandTargetDiscovery {
            r#static: None,
            selector: Some(PlanCommandTargetDiscoverySelector {
                labels: labels.map(str::to_owned),
                fields: fields.map(str::to_owned),
            }),
        },
        limits: PlanCommandTargetLimits::default(),
    }
}

/// The payloads of a new command: `https://example.com/<artifact>-<platform>` for
/// linux-amd64 and linux-arm64, each with the digest `sha('a')`.
fn platforms(artifact: &str) -> BTreeMap<String, PlanResourceUrl> {
    ["linux-amd64", "linux-arm64"]
        .into_iter()
        .map(|platform| {
            let url = format!("https://example.com/{artifact}-{platform}");
            (
                platform.to_owned(),
                PlanResourceUrl { url, sha256: Some(sha('a')), ..Default::default() },
            )
        })
        .collect()
}

/// Builder steps for anything that holds a [`PlanSpec`]: the spec itself, a [`Plan`], or a
/// test's own plan fixture. A step after `then_*` changes the command it appended last.
pub trait PlanBuilder: Sized {
    /// The spec the steps change.
    fn spec_mut(&mut self) -> &mut PlanSpec;

    /// Append a `k0supdate` command to `version`, targeting nothing yet, with the payloads
    /// `https://example.com/k0s-<platform>` for linux-amd64 and linux-arm64.
    fn then_k0s_update(mut self, version: &str) -> Self {
        self.spec_mut().commands.push(PlanCommand {
            k0supdate: Some(PlanCommandK0sUpdate {
                drain: None,
                drain_options: None,
                version: version.to_owned(),
                forceupdate: false,
                platforms: platforms("k0s"),
                targets: PlanCommandTargets::default(),
                rollout: PlanCommandRollout::default(),
            }),
            airgapupdate: None,
            preflight: None,
        });
        self
    }

    /// Append an `airgapupdate` command to `version`, targeting nothing yet, with the
    /// payloads `https://example.com/bundle-<platform>` for linux-amd64 and linux-arm64.
    fn then_airgap_update(mut self, version: &str) -> Self {
        self.spec_mut().commands.push(PlanCommand {
            k0supdate: None,
            airgapupdate: Some(PlanCommandAirgapUpdate {
                version: version.to_owned(),
                platforms: platforms("bundle"),
                workers: PlanCommandTarget::default(),
                rollout: PlanCommandRollout::default(),
            }),
            preflight: None,
        });
        self
    }

    /// Append a command as given (e.g. a malformed one).
    fn then_command(mut self, command: PlanCommand) -> Self {
        self.spec_mut().commands.push(command);
        self
    }

    /// The spec's id.
    fn with_id(mut self, id: &str) -> Self {
        id.clone_into(&mut self.spec_mut().id);
        self
    }

    /// The last (`k0supdate`) command's controllers are `target`.
    fn controller_target(mut self, target: PlanCommandTarget) -> Self {
        let k0s = last(self.spec_mut()).k0supdate.as_mut();
        k0s.expect("controllers need a k0supdate command").targets.controllers = Some(target);
        self
    }

    /// The last command's workers are `target`.
    fn worker_target(mut self, target: PlanCommandTarget) -> Self {
        *workers(self.spec_mut()) = target;
        self
    }

    /// The last command targets these controllers by name.
    fn controllers<I>(self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.controller_target(static_target(names))
    }

    /// The last command targets these workers by name.
    fn workers<I>(self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.worker_target(static_target(names))
    }

    /// The last command selects its controllers.
    fn controller_selector(self, labels: Option<&str>, fields: Option<&str>) -> Self {
        self.controller_target(selector_target(labels, fields))
    }

    /// The last command selects its workers.
    fn worker_selector(self, labels: Option<&str>, fields: Option<&str>) -> Self {
        self.worker_target(selector_target(labels, fields))
    }

    /// The last command's workers go `n` at a time.
    fn concurrent(mut self, n: u32) -> Self {
        workers(self.spec_mut()).limits.concurrent = Concurrency::Count(n);
        self
    }

    /// The last command's workers go `percent`% of them at a time.
    fn concurrent_percent(mut self, percent: u32) -> Self {
        workers(self.spec_mut()).limits.concurrent = Concurrency::Percent(percent);
        self
    }

    /// The last command's workers may fail `n` times before it stops.
    fn max_failures(mut self, n: u32) -> Self {
        workers(self.spec_mut()).limits.max_failures = Some(n);
        self
    }

    /// The last command's first `n` workers go first and soak for `soak` (e.g. `"5m"`).
    fn canary(mut self, n: u32, soak: Option<&str>) -> Self {
        let limits = &mut workers(self.spec_mut()).limits;
        limits.canary = Some(n);
        limits.soak = soak.map(str::to_owned);
        self
    }

    /// The last command's workers go in failure-domain waves by the label `key`, with
    /// `soak` (e.g. `"5m"`) between two groups.
    fn group_by(mut self, key: &str, soak: Option<&str>) -> Self {
        let limits = &mut workers(self.spec_mut()).limits;
        limits.group_by = Some(key.to_owned());
        limits.between_groups =
            soak.map(|soak| crate::v1beta2::BetweenGroups { soak: Some(soak.to_owned()) });
        self
    }

    /// The last command downloads `platform` from `url`, verified against `sha256` if given.
    fn payload(mut self, platform: &str, url: &str, sha256: Option<&str>) -> Self {
        let resource = PlanResourceUrl {
            url: url.to_owned(),
            sha256: sha256.map(str::to_owned),
            ..Default::default()
        };
        payloads(self.spec_mut()).insert(platform.to_owned(), resource);
        self
    }

    /// The last command has no payloads (a later [`payload`](Self::payload) adds one).
    fn without_payloads(mut self) -> Self {
        payloads(self.spec_mut()).clear();
        self
    }

    /// The last (`k0supdate`) command is forced.
    fn forced(mut self) -> Self {
        let k0s = last(self.spec_mut()).k0supdate.as_mut();
        k0s.expect("a k0supdate command").forceupdate = true;
        self
    }
}

impl PlanBuilder for PlanSpec {
    fn spec_mut(&mut self) -> &mut PlanSpec {
        self
    }
}

impl PlanBuilder for Plan {
    fn spec_mut(&mut self) -> &mut PlanSpec {
        &mut self.spec
    }
}

/// The command the builder steps change.
fn last(spec: &mut PlanSpec) -> &mut PlanCommand {
    spec.commands.last_mut().expect("a command to change")
}

/// The last command's workers (a `k0supdate` without any gets default ones).
fn workers(spec: &mut PlanSpec) -> &mut PlanCommandTarget {
    let command = last(spec);
    if let Some(k0s) = command.k0supdate.as_mut() {
        k0s.targets.workers.get_or_insert_with(Default::default)
    } else {
        &mut command.airgapupdate.as_mut().expect("a k0supdate or airgapupdate command").workers
    }
}

/// The last command's payloads.
fn payloads(spec: &mut PlanSpec) -> &mut BTreeMap<String, PlanResourceUrl> {
    let command = last(spec);
    match (command.k0supdate.as_mut(), command.airgapupdate.as_mut()) {
        (Some(k0s), _) => &mut k0s.platforms,
        (None, Some(airgap)) => &mut airgap.platforms,
        (None, None) => panic!("a payload needs a k0supdate or airgapupdate command"),
    }
}

// === Nodes and ControlNodes ===

/// A worker Node named `name` whose `Ready` condition is `True`; no labels, no annotations.
pub fn node(name: &str) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.to_owned());
    node.ready(true)
}

/// A ControlNode named `name`, with nothing else set.
pub fn control_node(name: &str) -> ControlNode {
    ControlNode::new(name)
}

/// Builder steps for the metadata of any object.
pub trait MetaBuilder: Resource + Sized {
    /// Label `key` is `value`.
    fn labelled(mut self, key: &str, value: &str) -> Self {
        let labels = self.meta_mut().labels.get_or_insert_with(BTreeMap::new);
        labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The `kubernetes.io/os` and `kubernetes.io/arch` labels.
    fn on_platform(self, os: &str, arch: &str) -> Self {
        self.labelled(keys::LABEL_OS, os).labelled(keys::LABEL_ARCH, arch)
    }

    /// Annotation `key` is `value`.
    fn annotated(mut self, key: &str, value: &str) -> Self {
        let annotations = self.meta_mut().annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The object carries `data` in the signal annotations.
    fn signalled(self, data: &SignalData) -> Self {
        crate::signal::to_annotations(data)
            .iter()
            .fold(self, |object, (key, value)| object.annotated(key, value))
    }
}

impl<T: Resource> MetaBuilder for T {}

/// Builder steps for a worker [`Node`].
pub trait NodeBuilder {
    /// The `Ready` condition is `True` (or `False`); the only condition the Node has.
    #[must_use]
    fn ready(self, ready: bool) -> Self;

    /// The k0s version the node reports (the `k0s-version` annotation).
    #[must_use]
    fn k0s_version(self, version: &str) -> Self;
}

impl NodeBuilder for Node {
    fn ready(mut self, ready: bool) -> Self {
        self.status.get_or_insert_with(NodeStatus::default).conditions =
            Some(vec![NodeCondition {
                type_: "Ready".to_owned(),
                status: if ready { "True" } else { "False" }.to_owned(),
                ..NodeCondition::default()
            }]);
        self
    }

    fn k0s_version(self, version: &str) -> Self {
        self.annotated(keys::ANNOTATION_K0S_VERSION, version)
    }
}

/// Builder steps for a [`ControlNode`].
pub trait ControlNodeBuilder {
    /// The k0s version the controller reports (`status.k0sVersion`).
    #[must_use]
    fn k0s_version(self, version: &str) -> Self;
}

impl ControlNodeBuilder for ControlNode {
    fn k0s_version(mut self, version: &str) -> Self {
        let status = self.status.get_or_insert_with(ControlNodeStatus::default);
        status.k0s_version = Some(version.to_owned());
        self
    }
}

// === Signals ===

/// A signal of plan `plan_id` asking for command 0: a k0s update to `version` from `url`
/// with digest `sha256`, not forced; no creation time, run id or status yet.
pub fn k0s_signal(plan_id: &str, version: &str, url: &str, sha256: &str) -> SignalData {
    signal(
        plan_id,
        SignalCommand {
            rollback: None,
            preflight: None,
            id: 0,
            k0supdate: Some(CommandK0sUpdate {
                url: url.to_owned(),
                version: version.to_owned(),
                sha256: sha256.to_owned(),
                forceupdate: false,
            }),
            airgapupdate: None,
        },
    )
}

/// A signal of plan `plan_id` asking for command 0: an airgap bundle of `version` from
/// `url` with digest `sha256`; no creation time, run id or status yet.
pub fn airgap_signal(plan_id: &str, version: &str, url: &str, sha256: &str) -> SignalData {
    signal(
        plan_id,
        SignalCommand {
            rollback: None,
            preflight: None,
            id: 0,
            k0supdate: None,
            airgapupdate: Some(CommandAirgapUpdate {
                url: url.to_owned(),
                version: version.to_owned(),
                sha256: sha256.to_owned(),
            }),
        },
    )
}

fn signal(plan_id: &str, command: SignalCommand) -> SignalData {
    SignalData {
        plan_id: plan_id.to_owned(),
        created: String::new(),
        command,
        status: None,
        run_id: None,
    }
}

/// Builder steps for a [`SignalData`] (its status: [`SignalData::with_status`]).
pub trait SignalBuilder {
    /// The signal asks for command `id` of the plan.
    #[must_use]
    fn for_command(self, id: u32) -> Self;

    /// The time the leader wrote the signal, as written (RFC 3339).
    #[must_use]
    fn created(self, created: &str) -> Self;

    /// The signal belongs to plan run `run_id`.
    #[must_use]
    fn in_run(self, run_id: &str) -> Self;

    /// The k0s update is forced, or not (`forceupdate`).
    #[must_use]
    fn forceupdate(self, force: bool) -> Self;
}

impl SignalBuilder for SignalData {
    fn for_command(mut self, id: u32) -> Self {
        self.command.id = id;
        self
    }

    fn created(mut self, created: &str) -> Self {
        created.clone_into(&mut self.created);
        self
    }

    fn in_run(mut self, run_id: &str) -> Self {
        self.run_id = Some(run_id.to_owned());
        self
    }

    fn forceupdate(mut self, force: bool) -> Self {
        let k0s = self.command.k0supdate.as_mut().expect("a k0s update signal");
        k0s.forceupdate = force;
        self
    }
}
