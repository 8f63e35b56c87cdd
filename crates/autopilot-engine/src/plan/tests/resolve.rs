//! The resolve loop: what a pass names is asked for, the answers are used, and the bounds
//! hold (removed APIs once, Pods once per Node, at most `PROBE_ROUNDS` rounds of probes).

use std::collections::BTreeMap;

use autopilot_api::v1beta2::PlanStateType as P;
use k8s_openapi::api::core::v1::Pod;

use super::fixtures::*;
use super::support::*;
use crate::plan::ObjectKind::ControlNode;
use crate::plan::resolve::{self, Answer, Answers, Outcome, PROBE_ROUNDS};
use crate::plan::{
    CheckPods, Needs, Observed, PlanAccess, PlanReader, Readiness, RemovedApiUse, Transition,
};

/// An answerer that records every question and answers from fixed tables.
#[derive(Default)]
struct Counting {
    /// Each probe question, in order.
    probed: Vec<Vec<String>>,
    /// Each removed-API question, in order.
    removed: Vec<Vec<String>>,
    /// Each Node whose Pods were asked for, in order.
    pods_asked: Vec<String>,
    /// The probe answers (a controller not here gets no answer).
    readyz: BTreeMap<String, Readiness>,
    /// The removed-API answer.
    uses: Vec<RemovedApiUse>,
    /// Answer removed-API questions with this error.
    fail_removed: Option<&'static str>,
    /// Each identity whose access to the Plan was asked about, in order.
    reviewed: Vec<crate::plan::PlanReader>,
}

impl Counting {
    fn asked_anything(&self) -> bool {
        !self.probed.is_empty() || !self.removed.is_empty() || !self.pods_asked.is_empty()
    }
}

impl Answer for Counting {
    type Error = &'static str;

    async fn gate(&mut self, _query: &crate::plan::GateQuery) -> crate::plan::GateAnswer {
        crate::plan::GateAnswer::Assumed
    }

    async fn probe(&mut self, controllers: &[String]) -> BTreeMap<String, crate::plan::Probe> {
        self.probed.push(controllers.to_vec());
        controllers
            .iter()
            .filter_map(|name| {
                let readiness = self.readyz.get(name)?.clone();
                Some((name.clone(), crate::plan::Probe::without_version(readiness)))
            })
            .collect()
    }

    async fn removed_apis(
        &mut self,
        versions: &[String],
    ) -> Result<Vec<RemovedApiUse>, Self::Error> {
        self.removed.push(versions.to_vec());
        match self.fail_removed {
            Some(error) => Err(error),
            None => Ok(self.uses.clone()),
        }
    }

    async fn plan_access(&mut self, reader: &crate::plan::PlanReader) -> crate::plan::PlanAccess {
        self.reviewed.push(reader.clone());
        crate::plan::PlanAccess::Allowed
    }

    async fn pods_on(&mut self, node: &str) -> Result<Vec<Pod>, Self::Error> {
        self.pods_asked.push(node.to_owned());
        let mut pod = Pod::default();
        pod.metadata.name = Some(format!("pod-on-{node}"));
        Ok(vec![pod])
    }
}

/// A pass outcome for the generic loop: what a fake pass saw, and what it needs.
struct Seen {
    known: Answers,
    needs: Needs,
}

impl Outcome for Seen {
    fn needs(&self) -> &Needs {
        &self.needs
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|name| (*name).to_owned()).collect()
}

/// `resolve` over a fixture plan and cluster with nothing probed or looked up yet.
fn resolve_on(sim: &Sim, answerer: &mut Counting) -> Result<Transition, &'static str> {
    let empty = BTreeMap::new();
    let observed = Observed {
        gate_answers: &crate::plan::NO_GATE_ANSWERS,
        plan_access: &crate::plan::NO_PLAN_ACCESS,
        now: sim.cluster.now,
        term_started: None,
        control_nodes: &sim.cluster.control_nodes,
        nodes: &sim.cluster.nodes,
        readiness: &empty,
        api_versions: &crate::plan::NO_API_VERSIONS,
        removed_apis: None,
        check_pods: CheckPods {
            pods: &sim.cluster.pods,
            templates: &sim.cluster.templates,
            created: &sim.cluster.created,
        },
    };
    block_on(crate::plan::resolve(sim.plan.view(), &observed, &sim.policy, answerer))
}

fn all_ready(list: &[&str]) -> BTreeMap<String, Readiness> {
    list.iter().map(|name| ((*name).to_owned(), Readiness::Ready)).collect()
}

#[test]
fn a_pass_that_needs_nothing_asks_nothing() {
    let mut passes = 0;
    let mut answerer = Counting::default();
    let outcome = block_on(resolve::run(
        Answers::default(),
        |known: &Answers| {
            passes += 1;
            Seen { known: known.clone(), needs: Needs::default() }
        },
        &mut answerer,
    ));
    assert!(outcome.is_ok());
    assert_eq!(passes, 1);
    assert!(!answerer.asked_anything());

    // A plan whose controller is in flight needs no probe and no lookup.
    let mut sim = two_controllers_one_worker();
    sim.pass();
    let mut answerer = Counting::default();
    let transition = resolve_on(&sim, &mut answerer).expect("no lookup fails");
    assert!(transition.needs.is_empty());
    assert!(!answerer.asked_anything());
}

#[test]
fn unprobed_controllers_are_probed_once_and_their_answers_used() {
    let sim = two_controllers_one_worker();
    let mut answerer = Counting { readyz: all_ready(&["c1", "c2"]), ..Counting::default() };
    let transition = resolve_on(&sim, &mut answerer).expect("no lookup fails");
    // The first pass waits for the removed-API check; the second, with its findings, needs
    // the controllers probed; the third signals the first one.
    assert_eq!(answerer.removed, [names(&[V])]);
    assert_eq!(answerer.probed, [names(&["c1", "c2"])]);
    assert_eq!(signalled(&transition), [(ControlNode, "c1".to_owned())]);
    assert!(transition.needs.is_empty());
    assert_eq!(transition, pass_with(&sim.plan, &sim.cluster, &sim.policy));
}

#[test]
fn the_removed_apis_a_new_run_waits_for_are_looked_up_once_and_used() {
    let sim = one_airgap_worker();
    let blocking =
        removed_api("removedcrds", "k0s.k0sproject.example.com", "v1beta1", "v1.31.0", 1);
    let mut answerer = Counting { uses: vec![blocking], ..Counting::default() };
    let transition = resolve_on(&sim, &mut answerer).expect("no lookup fails");
    assert_eq!(answerer.removed, [names(&[V])]);
    assert!(answerer.probed.is_empty());
    assert_eq!(transition.status.state, P::Warning, "the finding stops the run");
    assert!(transition.needs.is_empty());

    // Findings the caller already has are not looked up again.
    let mut passes = 0;
    let mut answerer = Counting::default();
    let known = Answers { removed_apis: Some(Vec::new()), ..Answers::default() };
    let needs = Needs { removed_api_versions: names(&[V]), ..Needs::default() };
    let outcome = block_on(resolve::run(
        known,
        |known: &Answers| {
            passes += 1;
            Seen { known: known.clone(), needs: needs.clone() }
        },
        &mut answerer,
    ));
    assert!(outcome.is_ok());
    assert_eq!(passes, 1);
    assert!(!answerer.asked_anything());
}

#[test]
fn a_failed_lookup_ends_the_resolve_with_its_error() {
    let sim = one_airgap_worker();
    let mut answerer = Counting { fail_removed: Some("discovery failed"), ..Counting::default() };
    assert_eq!(resolve_on(&sim, &mut answerer), Err("discovery failed"));
    assert_eq!(answerer.removed.len(), 1);
}

#[test]
fn probes_stop_after_the_bound_and_an_unprobed_controller_counts_not_ready() {
    // A pass that names a new controller every time is probed PROBE_ROUNDS times.
    let mut passes = 0;
    let mut answerer = Counting::default();
    let outcome = block_on(resolve::run(
        Answers::default(),
        |known: &Answers| {
            passes += 1;
            let needs = Needs { probe: vec![format!("c{passes}")], ..Needs::default() };
            Seen { known: known.clone(), needs }
        },
        &mut answerer,
    ));
    assert!(outcome.is_ok());
    assert_eq!(answerer.probed.len(), PROBE_ROUNDS);
    assert_eq!(passes, PROBE_ROUNDS + 1);

    // A controller that never answers holds the plan once the rounds are spent.
    let sim = two_controllers_one_worker();
    let mut answerer = Counting::default();
    let transition = resolve_on(&sim, &mut answerer).expect("no lookup fails");
    assert_eq!(answerer.probed, vec![names(&["c1", "c2"]); PROBE_ROUNDS]);
    assert!(signalled(&transition).is_empty());
    assert_eq!(transition.status.state, P::Schedulable);
    assert_eq!(
        transition.status.commands[0].reason.as_deref(),
        Some("waiting for controller c1 to become ready: its /readyz was not probed")
    );
    assert_eq!(transition.needs.probe, names(&["c1", "c2"]));
}

#[test]
fn pods_are_listed_once_per_node_and_every_answer_reaches_the_next_pass() {
    let mut answerer = Counting { readyz: all_ready(&["c1"]), ..Counting::default() };
    let mut passes = 0;
    let outcome = block_on(resolve::run(
        Answers::default(),
        |known: &Answers| {
            passes += 1;
            // The first pass needs everything; the second a new Node; the third nothing.
            let needs = match passes {
                1 => Needs {
                    gates: Vec::new(),
                    probe: names(&["c1"]),
                    removed_api_versions: names(&[V]),
                    pods_on: names(&["w1", "w2"]),
                    plan_readers: vec![PlanReader::worker("w1")],
                },
                2 => Needs {
                    pods_on: names(&["w1", "w2", "w3"]),
                    plan_readers: vec![PlanReader::worker("w1")],
                    ..Needs::default()
                },
                _ => Needs::default(),
            };
            Seen { known: known.clone(), needs }
        },
        &mut answerer,
    ))
    .expect("no lookup fails");
    assert_eq!(passes, 3);
    assert_eq!(answerer.pods_asked, names(&["w1", "w2", "w3"]));
    assert_eq!(answerer.removed, [names(&[V])]);
    assert_eq!(answerer.probed, [names(&["c1"])]);
    assert_eq!(answerer.reviewed, [PlanReader::worker("w1")], "each identity reviewed once");
    let known = outcome.known;
    assert_eq!(known.plan_access, [(PlanReader::worker("w1"), PlanAccess::Allowed)].into());
    assert_eq!(known.readiness, all_ready(&["c1"]));
    assert_eq!(known.removed_apis, Some(Vec::new()));
    assert_eq!(known.pods.keys().collect::<Vec<_>>(), ["w1", "w2", "w3"]);
    assert_eq!(known.pods["w3"][0].metadata.name.as_deref(), Some("pod-on-w3"));
}
