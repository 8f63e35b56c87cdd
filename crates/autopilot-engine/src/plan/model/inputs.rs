//! What a pass reads: the Plan as the shell read it ([`PlanView`]), the snapshot of the
//! cluster ([`Observed`]), this controller's flags ([`Policy`]), and, inside the machine, the
//! three together with the time of the pass ([`Inputs`]) and what it found missing
//! ([`Gaps`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use autopilot_api::signal::SignalData;
use autopilot_api::v1beta2::{PlanSpec, PlanStatus};
use autopilot_api::{ask, keys};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};

use crate::plan::model::decision::{Needs, ObjectKind};
use crate::plan::model::lookups::{GateAnswer, GateQuery};
use crate::plan::model::lookups::{PlanAccess, PlanReader, RemovedApiUse};

/// The Plan being decided on, as the shell read it.
#[derive(Clone, Copy, Debug)]
pub struct PlanView<'a> {
    /// `metadata.name`; only `autopilot` runs.
    pub name: &'a str,
    /// `metadata.uid`; part of the run id.
    pub uid: &'a str,
    /// `metadata.generation`; a new generation after a run ended starts a new run.
    pub generation: i64,
    /// The live spec (only read when a run starts; the run then uses its frozen copy).
    pub spec: &'a PlanSpec,
    /// The current status (`None` before the first pass).
    pub status: Option<&'a PlanStatus>,
    /// What the operator asked for through the Plan's annotations ([`Steering::of`]).
    pub steering: Steering,
    /// The value of the Plan's [`keys::ANNOTATION_ACCEPT_WARNINGS`] annotation: the plan id
    /// whose preflight warnings an operator accepted (`onWarn: Block`).
    pub accepted_warnings: Option<&'a str>,
    /// The value of the Plan's [`keys::ANNOTATION_ROLLBACK`] annotation: the plan id whose
    /// run an operator asked to roll back (DESIGN §15).
    pub rollback: Option<&'a str>,
    /// The value of the Plan's [`keys::ANNOTATION_ALLOW_SKEW`] annotation: the plan id whose
    /// version-skew refusals an operator overrides (`crate::plan::rules::skew`).
    pub allow_skew: Option<&'a str>,
}

/// An operator's steering of a running plan, kept in the Plan's annotations so it survives
/// leader changes (`k0s autopilot pause|resume|abort`, or `kubectl annotate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Steering {
    /// [`keys::ANNOTATION_PAUSED`]: signal no new node; nodes in flight finish.
    pub paused: bool,
    /// [`keys::ANNOTATION_ABORT`]: signal no new node, let the nodes in flight finish, then
    /// end the run `Aborted`. While it is set, a changed spec does not start a new run.
    pub aborted: bool,
}

impl Steering {
    /// Read from a Plan's annotations: an annotation counts when present with any value but
    /// `false` (so `kubectl annotate … paused=true` and `…=yes` both pause).
    pub fn of(annotations: &BTreeMap<String, String>) -> Self {
        let set = |key: &str| {
            annotations.get(key).is_some_and(|value| !value.trim().eq_ignore_ascii_case("false"))
        };
        Self { paused: set(keys::ANNOTATION_PAUSED), aborted: set(keys::ANNOTATION_ABORT) }
    }
}

/// One `Node` or `ControlNode` as the planner sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetObject {
    /// Object name.
    pub name: String,
    /// Object labels (platform: `kubernetes.io/os` + `kubernetes.io/arch`; selectors).
    pub labels: crate::plan::model::labels::Labels,
    /// For a `Node`: its `Ready` condition is `True`. For a `ControlNode`: always `true`
    /// (controller readiness comes from the `/readyz` probe, see [`Observed::readiness`]).
    pub ready: bool,
    /// The signal annotations found on the object.
    pub signal: ObservedSignal,
    /// The keys the node says it requires on its payloads (DESIGN §14).
    pub required_keys: RequiredKeys,
    /// The k0s version the node says it runs ([`keys::ANNOTATION_K0S_VERSION`]): what a
    /// target records as its "from" version when it is signalled (DESIGN §15).
    pub version: Option<String>,
    /// For a `Node`: the version its kubelet reports (`status.nodeInfo.kubeletVersion`),
    /// what the version skew rules judge a worker by (`crate::plan::rules::skew`); `None`
    /// when not reported, and always for a `ControlNode` (a controller's Kubernetes version
    /// is its API server's answer, [`Observed::api_versions`]).
    pub kubelet_version: Option<String>,
    /// The gate-check request and report found on the object (DESIGN §15); `None` when
    /// it carries neither, as most objects do. Boxed, like `prestage`: the leader keeps a
    /// view of every Node between passes, and these are most of its size.
    pub gate_check: Option<Box<ObservedGateCheck>>,
    /// The pre-staging request and report found on the object (`prestage: true`); `None`
    /// when it carries neither.
    pub prestage: Option<Box<ObservedPrestage>>,
    /// The `created` of this object's signal whose drain the leader's own drain finished
    /// (cordoned and drained as the command asks). Never read from the object: the drain
    /// tells the engine in memory, and the engine records it in the Plan status before it
    /// moves the signal to `ApplyingUpdate` (DESIGN §14).
    pub drained: Option<String>,
}

impl TargetObject {
    /// The gate-check request and report found on the object (none: empty).
    pub fn gate_check(&self) -> &ObservedGateCheck {
        self.gate_check.as_deref().unwrap_or(&ObservedGateCheck::NONE)
    }

    /// The gate-check request and report, to change (a dry run, tests).
    pub fn gate_check_mut(&mut self) -> &mut ObservedGateCheck {
        self.gate_check.get_or_insert_default()
    }

    /// The pre-staging request and report found on the object (none: empty).
    pub fn prestage(&self) -> &ObservedPrestage {
        self.prestage.as_deref().unwrap_or(&ObservedPrestage::NONE)
    }

    /// The pre-staging request and report, to change (a dry run, tests).
    pub fn prestage_mut(&mut self) -> &mut ObservedPrestage {
        self.prestage.get_or_insert_default()
    }
}

/// The request and report of one kind ([`ask::Kind`]) found on an object, decoded.
/// Either may be stale or written by someone else: the machine counts a report only for
/// the request it answers.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedRequest<K: ask::Kind> {
    /// The last request (`None`: none, or one that does not decode: the leader asks anew).
    pub request: Option<ask::Request<K>>,
    /// The node's last report.
    pub report: Option<ask::Report<K>>,
    /// Why the report annotation does not decode (too big, not a report).
    pub report_problem: Option<String>,
}

/// The pre-staging request and report of an object ([`keys::ANNOTATION_PRESTAGE`],
/// [`keys::ANNOTATION_PRESTAGE_REPORT`]).
pub type ObservedPrestage = ObservedRequest<autopilot_api::prestage::Prestage>;

/// The gate-check request and report of an object ([`keys::ANNOTATION_GATE_CHECK`],
/// [`keys::ANNOTATION_GATE_REPORT`]).
pub type ObservedGateCheck = ObservedRequest<autopilot_api::gate_check::GateChecks>;

impl<K: ask::Kind> Default for ObservedRequest<K> {
    fn default() -> Self {
        Self::NONE
    }
}

impl<K: ask::Kind> ObservedRequest<K> {
    /// No request and no report.
    pub const NONE: Self = Self { request: None, report: None, report_problem: None };

    /// Decode the annotations of `meta`; `None` when it carries neither.
    pub fn boxed(
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Option<Box<Self>> {
        Some(Self::of(meta)).filter(|seen| *seen != Self::NONE).map(Box::new)
    }

    /// Decode the annotations of `meta`.
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        let (report, report_problem) = match ask::report_of(meta) {
            Ok(report) => (report, None),
            Err(problem) => (None, Some(problem)),
        };
        Self { request: ask::request_of(meta).ok().flatten(), report, report_problem }
    }
}

/// The ids of the keys a node requires signatures by, as it publishes them
/// (`autopilot.k0sproject.io/payload-keys` and `…/bundle-keys`); empty: none required.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequiredKeys {
    /// On `k0supdate` payloads.
    pub payloads: Vec<String>,
    /// On airgap bundles.
    pub bundles: Vec<String>,
}

/// The signal annotations of an object, decoded.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant, reason = "one per object in a snapshot; boxing buys nothing")]
pub enum ObservedSignal {
    /// Neither signal annotation is present.
    None,
    /// The annotations are present but do not decode or validate (the text says why).
    Invalid(String),
    /// A valid signal (possibly from another plan or run: the machine checks).
    Valid(SignalData),
}

/// The result of probing one plan controller's API server (`GET /readyz`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// `/readyz` answered 2xx.
    Ready,
    /// The probe failed (connection refused, timeout, non-2xx); the text says how.
    NotReady(String),
}

/// What probing one controller's API server found: its `/readyz` and, asked alongside on
/// the same address with the same client, its `/version`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The `/readyz` result.
    pub readiness: Readiness,
    /// The `gitVersion` the API server answered on `GET /version` (`None`: no answer, or
    /// none that carries a version).
    pub version: Option<String>,
}

impl Probe {
    /// A probe that found `readiness` and no version.
    pub fn without_version(readiness: Readiness) -> Self {
        Self { readiness, version: None }
    }
}

/// What the planner may look at, captured once per pass. A snapshot: it may already be
/// stale, which the machine tolerates (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// The current time (the only clock the machine sees).
    pub now: jiff::Timestamp,
    /// When this leader's term began, on its own clock (`None`: not known, as in a dry
    /// run). Every deadline counts at most from then ([`Inputs::elapsed_since`]): a time an
    /// earlier leader wrote is never compared with this leader's clock, whose offset from
    /// the earlier one's is unknown.
    pub term_started: Option<jiff::Timestamp>,
    /// Every `ControlNode`, by name.
    pub control_nodes: &'a BTreeMap<String, TargetObject>,
    /// Every `Node`, by name.
    pub nodes: &'a BTreeMap<String, TargetObject>,
    /// `/readyz` results of the controllers probed for this pass; a controller missing here
    /// counts as not ready and is named in [`Needs::probe`].
    pub readiness: &'a BTreeMap<String, Readiness>,
    /// The Kubernetes version each probed controller's API server answered on `GET
    /// /version` (its `gitVersion`), by ControlNode name: what the version skew rules judge
    /// a controller by. A controller missing here (not probed, not reached) is judged by the
    /// k0s version it publishes ([`NO_API_VERSIONS`] when none was probed).
    pub api_versions: &'a BTreeMap<String, String>,
    /// Uses of removed APIs found by the shell for the versions named by
    /// [`Needs::removed_api_versions`] (or [`removed_api_check_versions`]; `None` while not
    /// looked up). A run that needs the check and finds `None` here waits (status unchanged,
    /// the versions named in [`Needs::removed_api_versions`]) instead of skipping it.
    pub removed_apis: Option<&'a [RemovedApiUse]>,
    /// The Pods of `scheduler` checks and their templates ([`CheckPods::NONE`] when the
    /// caller runs no such checks).
    pub check_pods: CheckPods<'a>,
    /// What the lookups of health gates returned, for the queries a pass named in
    /// [`Needs::gates`] ([`NO_GATE_ANSWERS`] when none were looked up).
    pub gate_answers: &'a BTreeMap<GateQuery, GateAnswer>,
    /// What the API server answered about the identities a new run asked about
    /// ([`Needs::plan_readers`], `crate::plan::rbac`): whether each may read the Plan. A
    /// new run that signals workers and finds no answer for its representative here waits
    /// (status unchanged) and names it ([`NO_PLAN_ACCESS`] when none was looked up).
    pub plan_access: &'a BTreeMap<PlanReader, PlanAccess>,
}

/// No API server versions.
pub static NO_API_VERSIONS: BTreeMap<String, String> = BTreeMap::new();

/// No gate lookups.
pub static NO_GATE_ANSWERS: BTreeMap<GateQuery, GateAnswer> = BTreeMap::new();

/// No access reviews.
pub static NO_PLAN_ACCESS: BTreeMap<PlanReader, PlanAccess> = BTreeMap::new();

/// What the shell found for `scheduler` checks (`crate::preflight::scheduler`), in the
/// namespace [`keys::NAMESPACE`].
#[derive(Clone, Copy, Debug)]
pub struct CheckPods<'a> {
    /// Every Pod labelled [`crate::preflight::scheduler::LABEL_RUN`], by name.
    pub pods: &'a BTreeMap<String, Pod>,
    /// Every ConfigMap (the Pod templates), by name.
    pub templates: &'a BTreeMap<String, ConfigMap>,
    /// The UID of each check Pod this leader created, by name, from the API server's
    /// answers to its create requests (a Pod's cached copy proves nothing about who made
    /// it: anyone who may create Pods in the namespace can make one of the name). The pass
    /// records it in the Pod's `uid` in the status and takes a result only from that Pod.
    pub created: &'a BTreeMap<String, String>,
}

static NO_PODS: BTreeMap<String, Pod> = BTreeMap::new();
static NO_TEMPLATES: BTreeMap<String, ConfigMap> = BTreeMap::new();
static NO_UIDS: BTreeMap<String, String> = BTreeMap::new();

impl CheckPods<'static> {
    /// No Pods and no templates: a `scheduler` check then finds no template (status code
    /// 22) and no Pod is deleted.
    pub const NONE: Self = Self { pods: &NO_PODS, templates: &NO_TEMPLATES, created: &NO_UIDS };
}

/// Controller policy: flags of this controller, not part of the Plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// `--exclude-from-plans controller`: plans that target controllers end `Restricted`.
    pub exclude_controllers: bool,
    /// `--exclude-from-plans worker`: plans that target workers end `Restricted`.
    pub exclude_workers: bool,
    /// `--readiness-grace`: how long a plan controller may stay not ready before the command
    /// ends in `InconsistentTargets`.
    pub readiness_grace: Duration,
    /// How soon to probe again while a command is held by a not-ready controller.
    pub readiness_recheck: Duration,
    /// `--node-progress-timeout`: how long a signalled node (controller or worker) may show
    /// no progress (its signal phase unchanged) before it fails with
    /// `no progress in <phase> for <duration>`. A command's `progressTimeout` overrides it.
    pub node_progress_timeout: Duration,
    /// `--drain-timeout`: how long the leader's drain of a node may stay blocked before the
    /// node fails (read by the cordon/drain controllers, not by the machine).
    pub drain_timeout: Duration,
    /// `--allow-unverified-payloads`: accept platform entries with neither a `sha256` nor
    /// an `https://` URL (each still gets a Warning Event). Without it, NewPlan refuses
    /// such a plan (`Warning`) before any node is signalled.
    pub allow_unverified_payloads: bool,
    /// `--prometheus-url`: where a `prometheus` gate without its own `url` queries.
    pub prometheus_url: Option<String>,
}

/// What every part of a pass reads: the snapshot, the policy and the time.
#[derive(Clone, Copy)]
pub(in crate::plan) struct Inputs<'a> {
    /// The snapshot.
    pub(in crate::plan) observed: &'a Observed<'a>,
    /// This controller's flags.
    pub(in crate::plan) policy: &'a Policy,
    /// The time of the snapshot, for durations.
    pub(in crate::plan) now: Timestamp,
    /// The time of the snapshot in whole seconds, for everything written to the status (the
    /// API server keeps whole seconds, so a status read back equals the one written).
    pub(in crate::plan) stamp: Timestamp,
    /// The operator's pause/abort.
    pub(in crate::plan) steering: Steering,
    /// The plan id whose preflight warnings an operator accepted, if any.
    pub(in crate::plan) accepted_warnings: Option<&'a str>,
    /// The plan id whose run an operator asked to roll back, if any.
    pub(in crate::plan) rollback: Option<&'a str>,
    /// The plan id whose version-skew refusals an operator overrides, if any.
    pub(in crate::plan) allow_skew: Option<&'a str>,
    /// The Plan's name and uid (the owner of `scheduler` check Pods).
    pub(in crate::plan) plan_name: &'a str,
    pub(in crate::plan) plan_uid: &'a str,
}

impl<'a> Inputs<'a> {
    pub(in crate::plan) fn new(
        observed: &'a Observed<'a>,
        policy: &'a Policy,
        plan: &PlanView<'a>,
    ) -> Self {
        let now = observed.now;
        let stamp = Timestamp::from_second(now.as_second()).unwrap_or(now);
        Self {
            observed,
            policy,
            now,
            stamp,
            steering: plan.steering,
            accepted_warnings: plan.accepted_warnings,
            rollback: plan.rollback,
            allow_skew: plan.allow_skew,
            plan_name: plan.name,
            plan_uid: plan.uid,
        }
    }

    /// How long since `time` on this leader's clock, counted at most from when its term
    /// began ([`Observed::term_started`]): after a leader change, every deadline, soak and
    /// retry runs afresh from the takeover, so a clock ahead of the earlier leader's ends
    /// none of them early, and one behind it (the earlier leader's times in this leader's
    /// future) holds none longer than its own length past the takeover
    /// ([`crate::term::counted_from`]).
    pub(in crate::plan) fn elapsed_since(&self, time: Timestamp) -> jiff::SignedDuration {
        self.now.duration_since(crate::term::counted_from(
            time,
            self.observed.term_started,
            self.now,
        ))
    }

    /// Every object of a kind, by name.
    pub(in crate::plan) fn objects(&self, kind: ObjectKind) -> &'a BTreeMap<String, TargetObject> {
        match kind {
            ObjectKind::ControlNode => self.observed.control_nodes,
            ObjectKind::Node => self.observed.nodes,
        }
    }
}

/// What a pass found missing while it decided: the controllers it asked about that have no
/// probe result, and the versions whose removed-API findings a new run waited for. Becomes
/// the transition's [`Needs`].
pub(in crate::plan) struct Gaps<'a> {
    /// `observed.readiness`.
    readiness: &'a BTreeMap<String, Readiness>,
    /// Every name asked about with no result (counted not ready).
    unprobed: BTreeSet<String>,
    /// The versions whose removed-API findings a new run waited for.
    removed_api_versions: BTreeSet<String>,
    /// Gate lookups a pass needed and did not have.
    gates: BTreeSet<GateQuery>,
    /// Identities whose right to read the Plan a new run waited for.
    plan_readers: BTreeSet<PlanReader>,
}

impl<'a> Gaps<'a> {
    /// Nothing found missing yet.
    pub(in crate::plan) fn new(readiness: &'a BTreeMap<String, Readiness>) -> Self {
        Self {
            readiness,
            unprobed: BTreeSet::new(),
            removed_api_versions: BTreeSet::new(),
            gates: BTreeSet::new(),
            plan_readers: BTreeSet::new(),
        }
    }

    /// What the pass needs, sorted (a pass needs no Pods).
    pub(in crate::plan) fn into_needs(self) -> Needs {
        Needs {
            probe: self.unprobed.into_iter().collect(),
            removed_api_versions: self.removed_api_versions.into_iter().collect(),
            pods_on: Vec::new(),
            gates: self.gates.into_iter().collect(),
            plan_readers: self.plan_readers.into_iter().collect(),
        }
    }

    /// A new run judges the version skew on what each controller's API server answers
    /// (`/version`, probed with `/readyz`): every one of `names` not probed yet is named.
    /// A controller whose probe does not come is judged by the k0s version it publishes.
    pub(in crate::plan) fn lacks_probes<'n>(
        &mut self,
        names: impl IntoIterator<Item = &'n String>,
    ) {
        let missing = names.into_iter().filter(|name| !self.readiness.contains_key(*name));
        self.unprobed.extend(missing.cloned());
    }

    /// A new run waited for the API server's answer about `reader`.
    pub(in crate::plan) fn lacks_plan_access(&mut self, reader: PlanReader) {
        self.plan_readers.insert(reader);
    }

    /// A gate needed the answer to `query`.
    pub(in crate::plan) fn lacks_gate(&mut self, query: GateQuery) {
        self.gates.insert(query);
    }

    /// A new run waited for the removed-API findings of `versions`.
    pub(in crate::plan) fn lacks_removed_apis(&mut self, versions: Vec<String>) {
        self.removed_api_versions.extend(versions);
    }

    /// The first of `names` (in the given order) that is not ready, and why. Every name
    /// without a probe result is recorded (all of them, so one round of probes answers the
    /// whole list) and counts as not ready.
    pub(in crate::plan) fn first_not_ready(&mut self, names: &[&str]) -> Option<(String, String)> {
        let missing = names.iter().filter(|name| !self.readiness.contains_key(**name));
        self.unprobed.extend(missing.map(|name| (*name).to_owned()));
        names.iter().find_map(|name| match self.readiness.get(*name) {
            Some(Readiness::Ready) => None,
            Some(Readiness::NotReady(why)) => Some(((*name).to_owned(), why.clone())),
            None => Some(((*name).to_owned(), "its /readyz was not probed".to_owned())),
        })
    }
}
