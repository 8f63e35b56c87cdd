//! Fixture builders that read like k0s scenarios: a [`PlanFixture`] for the Plan, a
//! [`ClusterFixture`] for the objects, readiness and removed-API findings, and a [`Sim`]
//! that runs passes the way the shell does and delivers the signals. The spec's builder
//! steps (`controllers`, `workers`, `concurrent`, `payload`, ...) are
//! [`autopilot_api::fixtures::PlanBuilder`]'s, shared with the other crates' tests.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use autopilot_api::fixtures::spec;
pub use autopilot_api::fixtures::{PlanBuilder, sha};
use autopilot_api::keys;
use autopilot_api::signal::{SignalData, SignalPhase, SignalStatus};
use autopilot_api::v1beta2::{
    PlanCommandStatus, PlanSpec, PlanStateType, PlanStatus, TargetState, TargetStatus,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};

use crate::plan::resolve::Answer;
use crate::plan::{
    CheckPods, Effect, EventKind, ObjectKind, Observed, ObservedSignal, PlanView, Policy, Probe,
    Readiness, RemovedApiUse, SignalTarget, Steering, TargetObject, Transition, resolve,
};

/// The fixed start of every scenario's clock.
pub const START: &str = "2024-05-01T12:00:00Z";

/// The uid of every fixture plan.
pub const UID: &str = "5f0c6a2e-uid";

pub fn start() -> Timestamp {
    START.parse().expect("valid timestamp")
}

// === PlanFixture ===

/// A Plan as the shell reads it: name, uid, generation, spec and status.
#[derive(Clone, Debug)]
pub struct PlanFixture {
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub spec: PlanSpec,
    pub status: Option<PlanStatus>,
    pub steering: Steering,
    pub accepted_warnings: Option<String>,
    /// The rollback annotation's value.
    pub rollback: Option<String>,
    /// The allow-skew annotation's value.
    pub allow_skew: Option<String>,
}

impl PlanFixture {
    fn empty() -> Self {
        Self {
            name: keys::PLAN_NAME.to_owned(),
            uid: UID.to_owned(),
            generation: 1,
            spec: spec("id123"),
            status: None,
            steering: Steering::default(),
            accepted_warnings: None,
            rollback: None,
            allow_skew: None,
        }
    }

    /// A plan of one `k0supdate` command to `version`, targeting nothing yet.
    pub fn k0s_update(version: &str) -> Self {
        Self::empty().then_k0s_update(version)
    }

    /// A plan of one `airgapupdate` command to `version`, targeting nothing yet.
    pub fn airgap_update(version: &str) -> Self {
        Self::empty().then_airgap_update(version)
    }

    /// A plan with no commands at all.
    pub fn without_commands() -> Self {
        Self::empty()
    }

    /// The accept-warnings annotation with `id`.
    pub fn accepting_warnings(mut self, id: &str) -> Self {
        self.accepted_warnings = Some(id.to_owned());
        self
    }

    /// The allow-skew annotation naming plan `id`.
    pub fn allowing_skew(mut self, id: &str) -> Self {
        self.allow_skew = Some(id.to_owned());
        self
    }

    /// The rollback annotation naming plan `id` (`k0s autopilot rollback`).
    pub fn rolling_back(mut self, id: &str) -> Self {
        self.rollback = Some(id.to_owned());
        self
    }

    /// Add `gate` to update command `index`.
    pub fn gated(mut self, index: usize, gate: autopilot_api::v1beta2::Gate) -> Self {
        let command = &mut self.spec.commands[index];
        match (&mut command.k0supdate, &mut command.airgapupdate) {
            (Some(k0s), _) => k0s.rollout.gates.push(gate),
            (None, Some(airgap)) => airgap.rollout.gates.push(gate),
            (None, None) => panic!("command {index} is not an update"),
        }
        self
    }

    /// The operator's pause/abort annotations.
    pub fn steered(mut self, paused: bool, aborted: bool) -> Self {
        self.steering = Steering { paused, aborted };
        self
    }

    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// An edit of the spec: a new generation, with the change made by `edit`.
    pub fn edited(mut self, edit: impl FnOnce(&mut PlanSpec)) -> Self {
        edit(&mut self.spec);
        self.generation += 1;
        self
    }

    pub fn view(&self) -> PlanView<'_> {
        PlanView {
            rollback: self.rollback.as_deref(),
            name: &self.name,
            uid: &self.uid,
            generation: self.generation,
            spec: &self.spec,
            status: self.status.as_ref(),
            steering: self.steering,
            accepted_warnings: self.accepted_warnings.as_deref(),
            allow_skew: self.allow_skew.as_deref(),
        }
    }

    /// The run id a run started at the current generation gets.
    pub fn run_id(&self) -> String {
        format!("{}/{}", self.uid, self.generation)
    }

    pub fn status(&self) -> &PlanStatus {
        self.status.as_ref().expect("the plan has a status")
    }

    pub fn state(&self) -> PlanStateType {
        self.status().state
    }

    pub fn command(&self, index: usize) -> &PlanCommandStatus {
        &self.status().commands[index]
    }

    /// A target of a command by name (controllers first, then workers).
    pub fn target(&self, index: usize, name: &str) -> &TargetStatus {
        all_targets(self.command(index))
            .into_iter()
            .find(|target| target.name == name)
            .unwrap_or_else(|| panic!("command {index} has no target {name}"))
    }

    pub fn target_state(&self, index: usize, name: &str) -> TargetState {
        self.target(index, name).state
    }

    /// `name: state` of every target of a command, in status order.
    pub fn target_states(&self, index: usize) -> Vec<(String, TargetState)> {
        all_targets(self.command(index)).into_iter().map(|t| (t.name.clone(), t.state)).collect()
    }
}

impl PlanBuilder for PlanFixture {
    fn spec_mut(&mut self) -> &mut PlanSpec {
        &mut self.spec
    }
}

/// Every target of a command status, controllers first.
pub fn all_targets(command: &PlanCommandStatus) -> Vec<&TargetStatus> {
    let mut all = Vec::new();
    if let Some(k0s) = &command.k0supdate {
        all.extend(&k0s.controllers);
        all.extend(&k0s.workers);
    }
    if let Some(airgap) = &command.airgapupdate {
        all.extend(&airgap.workers);
    }
    if let Some(preflight) = &command.preflight {
        all.extend(&preflight.controllers);
        all.extend(&preflight.workers);
    }
    all
}

// === ClusterFixture ===

/// The objects, probe results and removed-API findings the shell would observe.
#[derive(Clone, Debug)]
pub struct ClusterFixture {
    pub now: Timestamp,
    /// When the leader that runs the passes took over (`None`: not known).
    pub term_started: Option<Timestamp>,
    pub control_nodes: BTreeMap<String, TargetObject>,
    pub nodes: BTreeMap<String, TargetObject>,
    /// `/readyz` of every controller (absent: not reachable at all).
    pub readyz: BTreeMap<String, Readiness>,
    /// What each controller's API server answers on `/version` (absent: no answer).
    pub api_versions: BTreeMap<String, String>,
    /// Removed APIs in use, for every version the shell is asked about.
    pub removed_api_uses: Vec<RemovedApiUse>,
    /// Check Pods (as created; a test ends them) and Pod templates, by name.
    pub pods: BTreeMap<String, Pod>,
    /// The UID each check Pod the leader created got, by name (from its create answers).
    pub created: BTreeMap<String, String>,
    /// How many Pods were created (numbers their UIDs).
    pub creates: u32,
    pub templates: BTreeMap<String, ConfigMap>,
    /// What each health-gate lookup returns (a query not here: unavailable).
    pub gate_answers: BTreeMap<crate::plan::GateQuery, crate::plan::GateAnswer>,
    /// What the API server answers to every access review (default: allowed).
    pub plan_access: crate::plan::PlanAccess,
}

/// The version every fixture node runs until it updates.
pub const RUNNING: &str = "v1.30.0+k0s.0";

/// The version every fixture ControlNode publishes: one minor ahead of the workers, as a
/// cluster is after its controllers were updated (so a plan of workers alone to `v1.31` keeps
/// to the version skew rules).
pub const CONTROLLER_RUNNING: &str = "v1.31.0+k0s.0";

fn object(name: &str) -> TargetObject {
    TargetObject {
        prestage: Default::default(),
        drained: None,
        gate_check: Default::default(),
        version: Some(RUNNING.to_owned()),
        kubelet_version: None,
        name: name.to_owned(),
        labels: BTreeMap::from([
            (keys::LABEL_OS.to_owned(), "linux".to_owned()),
            (keys::LABEL_ARCH.to_owned(), "amd64".to_owned()),
            (keys::LABEL_HOSTNAME.to_owned(), name.to_owned()),
        ])
        .into(),
        ready: true,
        signal: ObservedSignal::None,
        required_keys: Default::default(),
    }
}

impl ClusterFixture {
    pub fn new() -> Self {
        Self {
            now: start(),
            term_started: None,
            control_nodes: BTreeMap::new(),
            nodes: BTreeMap::new(),
            readyz: BTreeMap::new(),
            api_versions: BTreeMap::new(),
            removed_api_uses: Vec::new(),
            pods: BTreeMap::new(),
            created: BTreeMap::new(),
            creates: 0,
            templates: BTreeMap::new(),
            gate_answers: BTreeMap::new(),
            plan_access: crate::plan::PlanAccess::Allowed,
        }
    }

    /// ControlNodes (linux-amd64) whose `/readyz` answers.
    pub fn controllers<const N: usize>(mut self, names: [&str; N]) -> Self {
        for name in names {
            let control_node =
                TargetObject { version: Some(CONTROLLER_RUNNING.to_owned()), ..object(name) };
            self.control_nodes.insert(name.to_owned(), control_node);
            self.readyz.insert(name.to_owned(), Readiness::Ready);
        }
        self
    }

    /// Ready Nodes (linux-amd64).
    pub fn workers<const N: usize>(mut self, names: [&str; N]) -> Self {
        for name in names {
            self.nodes.insert(name.to_owned(), object(name));
        }
        self
    }

    /// Controllers started with `--enable-worker`: a ControlNode and a Node each.
    pub fn controller_workers<const N: usize>(self, names: [&str; N]) -> Self {
        self.controllers(names).workers(names)
    }

    /// Label an object (ControlNode and Node of that name, whichever exist).
    pub fn label(mut self, name: &str, key: &str, value: &str) -> Self {
        for object in self.objects_named(name) {
            object.labels.insert(key.to_owned(), value.to_owned());
        }
        self
    }

    /// Give the objects of that name another platform.
    pub fn platform(self, name: &str, os: &str, arch: &str) -> Self {
        self.label(name, keys::LABEL_OS, os).label(name, keys::LABEL_ARCH, arch)
    }

    /// The objects of that name require signatures by `payloads` (k0s) and `bundles` keys.
    pub fn requiring_keys(mut self, name: &str, payloads: &[&str], bundles: &[&str]) -> Self {
        for object in self.objects_named(name) {
            object.required_keys = crate::plan::RequiredKeys {
                payloads: payloads.iter().map(|k| (*k).to_owned()).collect(),
                bundles: bundles.iter().map(|k| (*k).to_owned()).collect(),
            };
        }
        self
    }

    /// Remove the platform labels from the objects of that name.
    pub fn without_platform_labels(mut self, name: &str) -> Self {
        for object in self.objects_named(name) {
            object.labels.remove(keys::LABEL_OS);
            object.labels.remove(keys::LABEL_ARCH);
        }
        self
    }

    /// A controller whose `/readyz` fails.
    pub fn controller_down(mut self, name: &str, why: &str) -> Self {
        self.readyz.insert(name.to_owned(), Readiness::NotReady(why.to_owned()));
        self
    }

    /// A controller whose `/readyz` answers again.
    pub fn controller_up(mut self, name: &str) -> Self {
        self.readyz.insert(name.to_owned(), Readiness::Ready);
        self
    }

    /// A Node whose `Ready` condition is not `True`.
    pub fn worker_not_ready(mut self, name: &str) -> Self {
        if let Some(node) = self.nodes.get_mut(name) {
            node.ready = false;
        }
        self
    }

    pub fn worker_ready(mut self, name: &str) -> Self {
        if let Some(node) = self.nodes.get_mut(name) {
            node.ready = true;
        }
        self
    }

    /// Delete every object of that name.
    pub fn without(mut self, name: &str) -> Self {
        self.control_nodes.remove(name);
        self.nodes.remove(name);
        self
    }

    /// The cluster still serves a removed API.
    pub fn using_removed_api(mut self, use_: RemovedApiUse) -> Self {
        self.removed_api_uses.push(use_);
        self
    }

    /// The clock moved on.
    /// A new leader runs the passes from now on, its term started now.
    pub fn new_leader(mut self) -> Self {
        self.term_started = Some(self.now);
        self
    }

    /// The clock set back by `by` (a new leader whose clock runs behind the earlier one's).
    pub fn earlier(mut self, by: Duration) -> Self {
        self.now -= jiff::SignedDuration::try_from(by).expect("small duration");
        self
    }

    pub fn later(mut self, by: Duration) -> Self {
        self.now += jiff::SignedDuration::try_from(by).expect("small duration");
        self
    }

    /// What the lookup of a gate `query` returns from now on.
    pub fn answering(
        mut self,
        query: crate::plan::GateQuery,
        answer: crate::plan::GateAnswer,
    ) -> Self {
        self.gate_answers.insert(query, answer);
        self
    }

    /// The node `name` now says it runs `version` (both objects of that name).
    pub fn running(mut self, name: &str, version: &str) -> Self {
        for kind in [ObjectKind::ControlNode, ObjectKind::Node] {
            if let Some(object) = self.objects_mut(kind).get_mut(name) {
                object.version = Some(version.to_owned());
            }
        }
        self
    }

    /// The API server of controller `name` answers `version` on `/version`.
    pub fn api_server(mut self, name: &str, version: &str) -> Self {
        self.api_versions.insert(name.to_owned(), version.to_owned());
        self
    }

    /// The kubelet of Node `name` reports `version` (`status.nodeInfo.kubeletVersion`).
    pub fn kubelet(mut self, name: &str, version: &str) -> Self {
        if let Some(node) = self.nodes.get_mut(name) {
            node.kubelet_version = Some(version.to_owned());
        }
        self
    }

    /// Put a signal on an object, as if written earlier.
    pub fn with_signal(mut self, kind: ObjectKind, name: &str, data: SignalData) -> Self {
        if let Some(object) = self.objects_mut(kind).get_mut(name) {
            object.signal = ObservedSignal::Valid(data);
        }
        self
    }

    /// The node on `kind`/`name` reports `phase` on the signal it carries.
    pub fn reports(mut self, kind: ObjectKind, name: &str, phase: SignalPhase) -> Self {
        self.report(kind, name, phase, None);
        self
    }

    /// The leader's drain finished draining `kind`/`name` for the signal it carries (what
    /// the drain hands the engine in memory).
    pub fn drained(mut self, kind: ObjectKind, name: &str) -> Self {
        let object = self.objects_mut(kind).get_mut(name).expect("object drained");
        let ObservedSignal::Valid(data) = &object.signal else {
            panic!("{kind} {name} carries no signal to drain for");
        };
        object.drained = Some(data.created.clone());
        self
    }

    /// Someone who may patch Nodes copies the signal of `from` onto `to`, with a fresh
    /// `created` and no status.
    pub fn copies_signal(mut self, kind: ObjectKind, from: &str, to: &str) -> Self {
        let ObservedSignal::Valid(data) = &self.objects_mut(kind)[from].signal else {
            panic!("{kind} {from} carries no signal to copy");
        };
        let mut copy = data.clone();
        copy.status = None;
        copy.created = autopilot_api::signal::format_timestamp(self.now);
        self.objects_mut(kind).get_mut(to).expect("object copied onto").signal =
            ObservedSignal::Valid(copy);
        self
    }

    /// The node reports a failure with a reason.
    pub fn fails(mut self, kind: ObjectKind, name: &str, phase: SignalPhase, reason: &str) -> Self {
        self.report(kind, name, phase, Some(reason));
        self
    }

    pub fn report(
        &mut self,
        kind: ObjectKind,
        name: &str,
        phase: SignalPhase,
        reason: Option<&str>,
    ) {
        let now = self.now;
        let object = self.objects_mut(kind).get_mut(name).expect("object to report on");
        let ObservedSignal::Valid(data) = &mut object.signal else {
            panic!("{kind} {name} carries no signal to report on");
        };
        let mut status = SignalStatus::new(phase, now);
        status.reason = reason.map(str::to_owned);
        data.status = Some(status);
    }

    /// The node on `kind`/`name` answers its preflight signal: `Completed` with `records`.
    pub fn reports_checks(
        mut self,
        kind: ObjectKind,
        name: &str,
        records: &[(&str, autopilot_api::preflight::RawRecord)],
    ) -> Self {
        self.report(kind, name, SignalPhase::Completed, None);
        let object = self.objects_mut(kind).get_mut(name).expect("object to report on");
        if let ObservedSignal::Valid(data) = &mut object.signal
            && let Some(status) = data.status.as_mut()
        {
            status.preflight =
                records.iter().map(|(id, record)| ((*id).to_owned(), record.clone())).collect();
        }
        self
    }

    /// Write the signals of a transition onto the objects, as the shell does.
    pub fn deliver(&mut self, transition: &Transition) {
        for effect in &transition.effects {
            match effect {
                Effect::Signal { target, data } => self.write_signal(target, data),
                // The API server gives each new Pod a UID and answers the leader with it; a
                // Pod of the name already there is `AlreadyExists`, without one.
                Effect::CreatePod(pod) => {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if !self.pods.contains_key(&name) {
                        self.creates += 1;
                        let uid = format!("uid-{}", self.creates);
                        let mut made = (**pod).clone();
                        made.metadata.uid = Some(uid.clone());
                        self.pods.insert(name.clone(), made);
                        self.created.insert(name, uid);
                    }
                }
                Effect::DeletePod { name, uid } => {
                    if uid.is_none()
                        || self.pods.get(name).and_then(|p| p.metadata.uid.as_ref()) == uid.as_ref()
                    {
                        self.pods.remove(name);
                    }
                }
                Effect::GateCheck { target, request } => {
                    if let Some(object) = self.objects_mut(target.kind).get_mut(&target.name) {
                        object.gate_check_mut().request = Some(request.clone());
                    }
                }
                Effect::Prestage { target, request } => {
                    if let Some(object) = self.objects_mut(target.kind).get_mut(&target.name) {
                        object.prestage_mut().request = Some(request.clone());
                    }
                }
                Effect::Event { .. } => {}
            }
        }
    }

    /// The node on `kind`/`name` answers its pre-staging request with `outcome` (and
    /// `reason`).
    pub fn reports_staged(
        mut self,
        kind: ObjectKind,
        name: &str,
        outcome: autopilot_api::prestage::PrestageOutcome,
        reason: Option<&str>,
    ) -> Self {
        let object = self.objects_mut(kind).get_mut(name).expect("object to report on");
        let request = object.prestage().request.clone().expect("a pre-staging request");
        object.prestage_mut().report = Some(autopilot_api::prestage::PrestageReport {
            run_id: request.run_id,
            command: request.command,
            says: autopilot_api::prestage::PrestageSays {
                outcome,
                reason: reason.map(str::to_owned),
            },
        });
        self
    }

    /// The node on `kind`/`name` answers its gate-check request with `records` (by gate id).
    pub fn reports_gate_checks(
        mut self,
        kind: ObjectKind,
        name: &str,
        records: &[(&str, autopilot_api::preflight::RawRecord)],
    ) -> Self {
        let object = self.objects_mut(kind).get_mut(name).expect("object to report on");
        let request = object.gate_check().request.clone().expect("a gate-check request");
        object.gate_check_mut().report = Some(autopilot_api::gate_check::GateCheckReport {
            run_id: request.run_id,
            command: request.command,
            says: autopilot_api::gate_check::GateCheckSays {
                attempt: request.asks.attempt,
                records: records.iter().map(|(id, r)| ((*id).to_owned(), r.clone())).collect(),
                refused: None,
            },
        });
        self
    }

    pub fn write_signal(&mut self, target: &SignalTarget, data: &SignalData) {
        if let Some(object) = self.objects_mut(target.kind).get_mut(&target.name) {
            object.signal = ObservedSignal::Valid(data.clone());
        }
    }

    pub fn objects_mut(&mut self, kind: ObjectKind) -> &mut BTreeMap<String, TargetObject> {
        match kind {
            ObjectKind::ControlNode => &mut self.control_nodes,
            ObjectKind::Node => &mut self.nodes,
        }
    }

    pub fn objects(&self, kind: ObjectKind) -> &BTreeMap<String, TargetObject> {
        match kind {
            ObjectKind::ControlNode => &self.control_nodes,
            ObjectKind::Node => &self.nodes,
        }
    }

    fn objects_named(&mut self, name: &str) -> Vec<&mut TargetObject> {
        self.control_nodes.get_mut(name).into_iter().chain(self.nodes.get_mut(name)).collect()
    }

    /// The signal an object carries, if valid.
    pub fn signal(&self, kind: ObjectKind, name: &str) -> Option<&SignalData> {
        match &self.objects(kind).get(name)?.signal {
            ObservedSignal::Valid(data) => Some(data),
            ObservedSignal::None | ObservedSignal::Invalid(_) => None,
        }
    }
}

// === Passes ===

pub fn policy() -> Policy {
    Policy {
        prometheus_url: None,
        exclude_controllers: false,
        exclude_workers: false,
        readiness_grace: Duration::from_secs(600),
        readiness_recheck: Duration::from_secs(2),
        node_progress_timeout: Duration::from_secs(15 * 60),
        drain_timeout: Duration::from_secs(10 * 60),
        allow_unverified_payloads: false,
    }
}

/// The shell's lookups on a [`ClusterFixture`]: a controller's probe answers its `readyz`
/// entry (a controller with none refuses the connection), the removed-API lookup finds the
/// uses removed in the versions asked about, and no Node has Pods.
pub struct FixtureAnswers<'a> {
    pub cluster: &'a ClusterFixture,
}

impl Answer for FixtureAnswers<'_> {
    type Error = Infallible;

    async fn gate(&mut self, query: &crate::plan::GateQuery) -> crate::plan::GateAnswer {
        self.cluster.gate_answers.get(query).cloned().unwrap_or_else(|| {
            crate::plan::GateAnswer::Unavailable("the fixture has no answer".to_owned())
        })
    }

    async fn probe(&mut self, controllers: &[String]) -> BTreeMap<String, Probe> {
        controllers
            .iter()
            .map(|name| {
                let readiness = self
                    .cluster
                    .readyz
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| Readiness::NotReady("connection refused".to_owned()));
                let version = self.cluster.api_versions.get(name).cloned();
                (name.clone(), Probe { readiness, version })
            })
            .collect()
    }

    async fn removed_apis(
        &mut self,
        versions: &[String],
    ) -> Result<Vec<RemovedApiUse>, Infallible> {
        Ok(self
            .cluster
            .removed_api_uses
            .iter()
            .filter(|use_| {
                versions
                    .iter()
                    .any(|v| crate::plan::removed_apis::is_removed_in(v, &use_.removed_in))
            })
            .cloned()
            .collect())
    }

    async fn pods_on(&mut self, _node: &str) -> Result<Vec<Pod>, Infallible> {
        Ok(Vec::new())
    }

    async fn plan_access(&mut self, _reader: &crate::plan::PlanReader) -> crate::plan::PlanAccess {
        self.cluster.plan_access.clone()
    }
}

impl ClusterFixture {
    /// [`ClusterFixture::plan_access`] as the answer about every Node's worker identity: for
    /// a pass that is not resolved (`step` alone) and must not wait for a review.
    pub fn reviewed(&self) -> BTreeMap<crate::plan::PlanReader, crate::plan::PlanAccess> {
        self.nodes
            .keys()
            .map(|name| (crate::plan::PlanReader::worker(name), self.plan_access.clone()))
            .collect()
    }
}

/// Drive a future whose every await is ready at once (the fixtures' lookups) to its end.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}

/// One pass as the shell runs it (the engine's resolve loop: step, look up what the pass
/// needs, step again), without writing anything.
impl ClusterFixture {
    /// The snapshot a dry run (`plan::rollout`) starts from: this cluster with its readiness,
    /// removed APIs and check Pod templates, no gate answers.
    pub fn dry_run_view(&self) -> Observed<'_> {
        Observed {
            gate_answers: &crate::plan::NO_GATE_ANSWERS,
            plan_access: &crate::plan::NO_PLAN_ACCESS,
            now: self.now,
            term_started: None,
            control_nodes: &self.control_nodes,
            nodes: &self.nodes,
            readiness: &self.readyz,
            api_versions: &self.api_versions,
            removed_apis: Some(&self.removed_api_uses),
            check_pods: CheckPods { templates: &self.templates, ..CheckPods::NONE },
        }
    }
}

pub fn pass_with(plan: &PlanFixture, cluster: &ClusterFixture, policy: &Policy) -> Transition {
    let empty = BTreeMap::new();
    let observed = Observed {
        gate_answers: &crate::plan::NO_GATE_ANSWERS,
        plan_access: &crate::plan::NO_PLAN_ACCESS,
        now: cluster.now,
        term_started: cluster.term_started,
        control_nodes: &cluster.control_nodes,
        nodes: &cluster.nodes,
        readiness: &empty,
        api_versions: &crate::plan::NO_API_VERSIONS,
        removed_apis: None,
        check_pods: CheckPods {
            pods: &cluster.pods,
            templates: &cluster.templates,
            created: &cluster.created,
        },
    };
    let mut answers = FixtureAnswers { cluster };
    match block_on(resolve(plan.view(), &observed, policy, &mut answers)) {
        Ok(transition) => transition,
        Err(never) => match never {},
    }
}

/// What one [`Sim`] pass decided (a [`Transition`] that may be ignored).
#[derive(Debug)]
pub struct Passed(pub Transition);

impl std::ops::Deref for Passed {
    type Target = Transition;

    fn deref(&self) -> &Transition {
        &self.0
    }
}

/// A plan and a cluster evolving pass by pass.
#[derive(Clone, Debug)]
pub struct Sim {
    pub plan: PlanFixture,
    pub cluster: ClusterFixture,
    pub policy: Policy,
}

impl Sim {
    pub fn new(plan: PlanFixture, cluster: ClusterFixture) -> Self {
        Self { plan, cluster, policy: policy() }
    }

    pub fn with_policy(mut self, edit: impl FnOnce(&mut Policy)) -> Self {
        edit(&mut self.policy);
        self
    }

    /// One pass: the status is written, then the signals (all of them).
    pub fn pass(&mut self) -> Passed {
        let transition = self.pass_without_signals();
        self.cluster.deliver(&transition);
        transition
    }

    /// One pass where the leader crashes after writing the status, before any signal.
    pub fn pass_without_signals(&mut self) -> Passed {
        let transition = pass_with(&self.plan, &self.cluster, &self.policy);
        self.plan.status = Some(transition.status.clone());
        Passed(transition)
    }

    /// Change the cluster between passes.
    pub fn cluster(&mut self, change: impl FnOnce(ClusterFixture) -> ClusterFixture) {
        self.cluster = change(self.cluster.clone());
    }

    /// Change the plan between passes.
    pub fn plan(&mut self, change: impl FnOnce(PlanFixture) -> PlanFixture) {
        self.plan = change(self.plan.clone());
    }
}

// === Reading transitions ===

/// The `(kind, name)` of every signal in a transition.
pub fn signalled(transition: &Transition) -> Vec<(ObjectKind, String)> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Signal { target, .. } => Some((target.kind, target.name.clone())),
            Effect::CreatePod(_)
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
        })
        .collect()
}

/// The signal a transition sends to `name`.
pub fn signal_to<'t>(transition: &'t Transition, name: &str) -> &'t SignalData {
    transition
        .effects
        .iter()
        .find_map(|effect| match effect {
            Effect::Signal { target, data } if target.name == name => Some(data),
            Effect::Signal { .. }
            | Effect::CreatePod(_)
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
        })
        .unwrap_or_else(|| panic!("no signal to {name} in {transition:#?}"))
}

/// `(kind, reason, note)` of every event in a transition.
pub fn events(transition: &Transition) -> Vec<(EventKind, &'static str, String)> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Event { kind, reason, note } => Some((*kind, *reason, note.clone())),
            Effect::Signal { .. }
            | Effect::CreatePod(_)
            | Effect::DeletePod { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
        })
        .collect()
}

/// The reasons of every event in a transition.
pub fn event_reasons(transition: &Transition) -> Vec<&'static str> {
    events(transition).into_iter().map(|(_, reason, _)| reason).collect()
}

/// A removed-API finding.
pub fn removed_api(
    resource: &str,
    group: &str,
    version: &str,
    removed_in: &str,
    count: u64,
) -> RemovedApiUse {
    RemovedApiUse {
        resource: resource.to_owned(),
        group: group.to_owned(),
        version: version.to_owned(),
        removed_in: removed_in.to_owned(),
        count,
        blocking: true,
    }
}
