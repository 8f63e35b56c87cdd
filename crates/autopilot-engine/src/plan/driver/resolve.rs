//! Ask, then step again: the one loop that serves both the Plan engine's reconcile and
//! `k0s autopilot preview`.
//!
//! A pass names what it could not decide without ([`Needs`]). [`run`] looks that up through
//! an [`Answer`] (the caller's I/O: probes, the removed-API lookup, Pod lists), adds the
//! answers to what the pass knew ([`Answers`]) and runs the pass again, a bounded number of
//! times. [`resolve()`] is that loop over [`step`]. Nothing here reads a clock: the pass's
//! `now` is the caller's, taken once, so every pass of one resolve sees the same time.

use std::collections::BTreeMap;
use std::future::Future;

use k8s_openapi::api::core::v1::Pod;

use crate::plan::driver::machine::step;
use crate::plan::model::decision::{Needs, Transition};
use crate::plan::model::inputs::{Observed, PlanView, Policy, Probe, Readiness};
use crate::plan::model::lookups::{GateAnswer, GateQuery};
use crate::plan::model::lookups::{PlanAccess, PlanReader, RemovedApiUse};

/// How many rounds of controller probes (and of Pod lists) one resolve asks for at most.
///
/// One round answers every controller a pass names; a second covers the pass that the
/// answers change so that it names a new one (a run that ends and starts the next in the
/// same pass). A controller still unprobed after that counts as not ready, which only holds
/// the plan until the next pass, so the bound costs a delay, never a wrong signal.
pub const PROBE_ROUNDS: usize = 2;

/// What a pass knows beyond its snapshot: the answers to what earlier passes needed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Answers {
    /// `/readyz` results, by controller name.
    pub readiness: BTreeMap<String, Readiness>,
    /// The versions the probed API servers answered on `/version`, by controller name.
    pub api_versions: BTreeMap<String, String>,
    /// Uses of removed APIs for the versions a pass named (`None`: not looked up).
    pub removed_apis: Option<Vec<RemovedApiUse>>,
    /// The Pods bound to each Node a pass named, by Node name (a Node listed with no Pods
    /// has an empty list).
    pub pods: BTreeMap<String, Vec<Pod>>,
    /// What the gate lookups a pass named returned.
    pub gates: BTreeMap<GateQuery, GateAnswer>,
    /// What the access reviews a pass named answered, by identity.
    pub plan_access: BTreeMap<PlanReader, PlanAccess>,
}

impl Answers {
    /// What `observed` already carries (its readiness and removed-API findings).
    pub fn of(observed: &Observed<'_>) -> Self {
        Self {
            readiness: observed.readiness.clone(),
            api_versions: observed.api_versions.clone(),
            removed_apis: observed.removed_apis.map(<[RemovedApiUse]>::to_vec),
            pods: BTreeMap::new(),
            gates: observed.gate_answers.clone(),
            plan_access: observed.plan_access.clone(),
        }
    }
}

/// The result of a pass, as far as [`run`] reads it: what the pass still needs.
pub trait Outcome {
    /// What the pass could not decide without.
    fn needs(&self) -> &Needs;
}

impl Outcome for Transition {
    fn needs(&self) -> &Needs {
        &self.needs
    }
}

/// Looks up what a pass needs: the caller's I/O.
///
/// The futures need not be `Send` for the loop; a caller that needs its resolve to be `Send`
/// gets that from its own implementation (the compiler sees the concrete futures).
pub trait Answer {
    /// Why a lookup could not be made (a failed probe is an answer, not an error).
    type Error;

    /// The `/readyz` result of each of `controllers`, with the version its API server
    /// answers on `/version` (one that is missing from the answer counts as not ready, and
    /// a later pass may name it again).
    fn probe(&mut self, controllers: &[String]) -> impl Future<Output = BTreeMap<String, Probe>>;

    /// The uses of the APIs removed in `versions` (asked at most once per resolve).
    fn removed_apis(
        &mut self,
        versions: &[String],
    ) -> impl Future<Output = Result<Vec<RemovedApiUse>, Self::Error>>;

    /// The Pods bound to the Node `node` (asked at most once per Node and resolve).
    fn pods_on(&mut self, node: &str) -> impl Future<Output = Result<Vec<Pod>, Self::Error>>;

    /// What a health gate's lookup returns (asked at most once per query and resolve; a
    /// failed lookup is an answer: [`GateAnswer::Unavailable`]).
    fn gate(&mut self, query: &GateQuery) -> impl Future<Output = GateAnswer>;

    /// Whether `reader` may read the Plan, as the API server answers a `SubjectAccessReview`
    /// (asked at most once per identity and resolve; a review that could not be made is an
    /// answer: [`PlanAccess::Unknown`]).
    fn plan_access(&mut self, reader: &PlanReader) -> impl Future<Output = PlanAccess>;
}

/// Run `pass` on what is `known`, and while it needs something, ask `answerer`, add the
/// answers and run it again. Returns the last pass's outcome.
///
/// Bounds: the removed APIs are looked up once (not at all when `known` has them); Pods
/// once per Node; each identity's access once; controllers are probed in at most [`PROBE_ROUNDS`] rounds. When nothing
/// the pass names may be asked any more, its outcome stands: a controller still unprobed
/// counted as not ready, and a run still missing removed-API findings waited. Each round
/// asks for Pods first, then removed APIs, then probes.
pub async fn run<T, A>(
    mut known: Answers,
    mut pass: impl FnMut(&Answers) -> T,
    answerer: &mut A,
) -> Result<T, A::Error>
where
    T: Outcome,
    A: Answer,
{
    let mut outcome = pass(&known);
    let mut probe_rounds = 0;
    let mut pod_rounds = 0;
    let mut gate_rounds = 0;
    loop {
        let needs = outcome.needs();
        let pods_on: Vec<&String> =
            needs.pods_on.iter().filter(|node| !known.pods.contains_key(*node)).collect();
        let pods_due = !pods_on.is_empty() && pod_rounds < PROBE_ROUNDS;
        let removed_due = !needs.removed_api_versions.is_empty() && known.removed_apis.is_none();
        let probe_due = !needs.probe.is_empty() && probe_rounds < PROBE_ROUNDS;
        let gates: Vec<GateQuery> =
            needs.gates.iter().filter(|query| !known.gates.contains_key(*query)).cloned().collect();
        let gates_due = !gates.is_empty() && gate_rounds < PROBE_ROUNDS;
        let readers: Vec<PlanReader> = needs
            .plan_readers
            .iter()
            .filter(|reader| !known.plan_access.contains_key(*reader))
            .cloned()
            .collect();
        let access_due = !readers.is_empty();
        if !(pods_due || removed_due || probe_due || gates_due || access_due) {
            return Ok(outcome);
        }
        for reader in readers {
            let answer = answerer.plan_access(&reader).await;
            known.plan_access.insert(reader, answer);
        }
        if gates_due {
            gate_rounds += 1;
            for query in gates {
                let answer = answerer.gate(&query).await;
                known.gates.insert(query, answer);
            }
        }
        if pods_due {
            pod_rounds += 1;
            for node in pods_on {
                let pods = answerer.pods_on(node).await?;
                known.pods.insert(node.clone(), pods);
            }
        }
        if removed_due {
            known.removed_apis = Some(answerer.removed_apis(&needs.removed_api_versions).await?);
        }
        if probe_due {
            probe_rounds += 1;
            for (name, Probe { readiness, version }) in answerer.probe(&needs.probe).await {
                match version {
                    Some(version) => known.api_versions.insert(name.clone(), version),
                    None => known.api_versions.remove(&name),
                };
                known.readiness.insert(name, readiness);
            }
        }
        outcome = pass(&known);
    }
}

/// Decide one pass over `plan`, looking up through `answerer` what [`step`] names in
/// [`Transition::needs`] (see [`run`] for the bounds), and return the last pass's
/// transition. `observed` is the snapshot every pass reads, with its one `now`; its
/// readiness and removed-API findings are kept and added to. Fails only when a lookup does.
pub async fn resolve<A: Answer>(
    plan: PlanView<'_>,
    observed: &Observed<'_>,
    policy: &Policy,
    answerer: &mut A,
) -> Result<Transition, A::Error> {
    let pass = |known: &Answers| {
        let observed = Observed {
            readiness: &known.readiness,
            api_versions: &known.api_versions,
            removed_apis: known.removed_apis.as_deref(),
            gate_answers: &known.gates,
            plan_access: &known.plan_access,
            ..*observed
        };
        step(plan, &observed, policy)
    };
    run(Answers::of(observed), pass, answerer).await
}
