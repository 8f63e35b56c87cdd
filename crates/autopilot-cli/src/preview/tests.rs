use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::fixtures::{
    ControlNodeBuilder, MetaBuilder, NodeBuilder, PlanBuilder, control_node, node, sha, spec,
};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::*;

fn now() -> jiff::Timestamp {
    "2026-01-01T12:00:00Z".parse().expect("a timestamp")
}

fn policy() -> Policy {
    Policy {
        prometheus_url: None,
        exclude_controllers: false,
        exclude_workers: false,
        readiness_grace: Duration::from_secs(600),
        readiness_recheck: Duration::from_secs(5),
        node_progress_timeout: Duration::from_secs(900),
        drain_timeout: Duration::from_secs(600),
        allow_unverified_payloads: false,
    }
}

/// A plan updating `controllers` and then `workers` (two at a time) to `version`.
fn plan(version: &str, controllers: &[&str], workers: &[&str]) -> PlanSpec {
    let mut spec = spec("preview").then_k0s_update(version).without_payloads().payload(
        "linux-amd64",
        "https://example.com/k0s",
        Some(&sha('a')),
    );
    if !controllers.is_empty() {
        spec = spec.controllers(controllers);
    }
    if !workers.is_empty() {
        spec = spec.workers(workers).concurrent(2);
    }
    spec
}

/// A Ready worker on linux-amd64 at v1.34.2.
fn worker(name: &str) -> Node {
    node(name).on_platform("linux", "amd64").k0s_version("v1.34.2+k0s.0")
}

/// One controller and three Ready workers, all at v1.34.2.
fn cluster() -> Cluster {
    Cluster {
        nodes: ["worker-0", "worker-1", "worker-2"].into_iter().map(worker).collect(),
        control_nodes: vec![
            control_node("controller-0").on_platform("linux", "amd64").k0s_version("v1.34.2+k0s.0"),
        ],
        readiness: BTreeMap::from([("controller-0".to_owned(), Readiness::Ready)]),
        removed_apis: Some(Vec::new()),
        ..Cluster::default()
    }
}

const WORKERS: [&str; 3] = ["worker-0", "worker-1", "worker-2"];

#[test]
fn a_good_plan_would_run_controllers_first_then_workers_two_at_a_time() {
    let spec = plan("v1.35.0+k0s.0", &["controller-0"], &WORKERS);
    let report = preview(&spec, &cluster(), &policy(), now());
    assert_eq!(report.problems, Vec::<String>::new());
    assert!(report.would_run);
    assert_eq!(report.end_state, "Completed");
    assert_eq!(report.commands[0].controllers, ["controller-0"]);
    assert_eq!(report.commands[0].workers, WORKERS);
    assert_eq!(report.commands[0].worker_concurrency, 2);
    let batches: Vec<Vec<&str>> =
        report.batches.iter().map(|b| b.targets.iter().map(String::as_str).collect()).collect();
    assert_eq!(
        batches,
        [
            vec!["ControlNode/controller-0"],
            vec!["Node/worker-0", "Node/worker-1"],
            vec!["Node/worker-2"]
        ]
    );
    let text = render("autopilot", &spec, &report);
    assert_eq!(
        text,
        "\
Plan autopilot (id preview): 1 command(s); the engine's dry run ends Completed
Command 0: k0supdate to v1.35.0+k0s.0
  controllers (one at a time): controller-0
  workers (2 at a time): worker-0, worker-1, worker-2
Order (each line signalled together, once the one before completed):
   1. command 0: ControlNode/controller-0
   2. command 0: Node/worker-0, Node/worker-1
   3. command 0: Node/worker-2
Problems: none
The plan would run.
"
    );
}

#[test]
fn a_target_that_does_not_exist_is_named_and_the_plan_would_not_run() {
    let spec = plan("v1.34.3+k0s.0", &[], &["worker-0", "worker-9"]);
    let report = preview(&spec, &cluster(), &policy(), now());
    assert!(!report.would_run);
    assert_eq!(report.end_state, "IncompleteTargets");
    assert_eq!(
        report.problems,
        ["the plan would end IncompleteTargets: command 0 (k0supdate): targets without an \
          object: Node worker-9"]
    );
    assert!(report.batches.is_empty());
}

#[test]
fn a_worker_that_is_not_ready_and_a_controller_without_readyz_are_problems() {
    let mut cluster = cluster();
    cluster.nodes[1] = worker("worker-1").ready(false);
    cluster.readiness.insert(
        "controller-0".to_owned(),
        Readiness::NotReady("https://10.0.0.1:6443/readyz: connection refused".to_owned()),
    );
    let spec = plan("v1.35.0+k0s.0", &["controller-0"], &WORKERS);
    let report = preview(&spec, &cluster, &policy(), now());
    assert!(!report.would_run);
    assert_eq!(
        report.problems,
        [
            "controller controller-0 is not ready (https://10.0.0.1:6443/readyz: connection \
             refused): the plan would wait for it, and say it is stalled past the readiness \
             grace",
            "worker worker-1 is not Ready: the plan would wait for it before signalling it",
        ]
    );
    // The order is still shown, as once every target is ready.
    assert_eq!(report.batches.len(), 3);
}

#[test]
fn a_budget_that_allows_no_disruption_blocks_the_drain_of_its_pods_node() {
    let mut cluster = cluster();
    let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
    cluster.pods.push(Pod {
        metadata: ObjectMeta {
            name: Some("web-0".to_owned()),
            namespace: Some("shop".to_owned()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec { node_name: Some("worker-1".to_owned()), ..PodSpec::default() }),
        ..Pod::default()
    });
    let budget = |name: &str, allowed: i32| PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("shop".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: Some(PodDisruptionBudgetStatus {
            disruptions_allowed: allowed,
            ..PodDisruptionBudgetStatus::default()
        }),
    };
    cluster.budgets = vec![budget("web", 0), budget("roomy", 1)];
    let spec = plan("v1.34.3+k0s.0", &[], &WORKERS);
    let report = preview(&spec, &cluster, &policy(), now());
    assert_eq!(
        report.problems,
        ["draining worker-1 is blocked now: evicting shop/web-0 is refused by \
          PodDisruptionBudget shop/web (0 disruptions allowed)"]
    );
    assert!(!report.would_run);
}

#[test]
fn version_skew_is_the_engines_refusal_and_the_allow_skew_annotation_lets_it_run() {
    let spec = plan("v1.36.0+k0s.0", &[], &["worker-0"]);
    let report = preview(&spec, &cluster(), &policy(), now());
    assert_eq!(report.end_state, "Warning");
    assert!(!report.would_run);
    assert_eq!(
        report.problems,
        ["the plan would end Warning: commands[0].k0supdate.version: v1.36.0+k0s.0 breaks \
             the version skew rules: [worker-newer-than-controller] worker worker-0 (planned \
             k0s v1.36.0+k0s.0) would be newer than controller controller-0 (published k0s \
             v1.34.2+k0s.0); update the controllers to v1.36 first (controllers go first). To \
             run the plan anyway, annotate it autopilot.k0sproject.io/allow-skew=preview"]
    );
    // What the controller's API server answers on `/version` counts over what it publishes.
    let reported = Cluster {
        api_versions: BTreeMap::from([("controller-0".to_owned(), "v1.35.4".to_owned())]),
        ..cluster()
    };
    let report = preview(&spec, &reported, &policy(), now());
    assert!(
        report.problems[0].contains("newer than controller controller-0 (API server v1.35.4)"),
        "{:?}",
        report.problems
    );
    let allowed = preview_allowing_skew(&spec, Some("preview"), &cluster(), &policy(), now());
    assert!(allowed.would_run, "{:?}", allowed.problems);
    let other = preview_allowing_skew(&spec, Some("another"), &cluster(), &policy(), now());
    assert!(!other.would_run);
    // A patch release for workers alone is fine.
    let spec = plan("v1.34.3+k0s.0", &[], &["worker-0"]);
    assert!(preview(&spec, &cluster(), &policy(), now()).would_run);
}

#[test]
fn a_canary_with_a_soak_goes_alone_and_the_rest_follow_after_the_soak() {
    let mut spec = plan("v1.34.3+k0s.0", &[], &WORKERS);
    let workers = spec.commands[0]
        .k0supdate
        .as_mut()
        .and_then(|u| u.targets.workers.as_mut())
        .expect("workers");
    workers.limits.canary = Some(1);
    workers.limits.soak = Some("5m".to_owned());
    let report = preview(&spec, &cluster(), &policy(), now());
    assert!(report.would_run, "{:?}", report.problems);
    assert_eq!(report.batches[0].targets, ["Node/worker-0"]);
    assert_eq!(report.batches[1].targets, ["Node/worker-1", "Node/worker-2"]);
    let waited = report.batches[1].after_seconds.expect("a soak before the rest");
    // The soak of 5m counts from the canary's completion; a pass or two went by meanwhile.
    assert!((295..=300).contains(&waited), "waited {waited}s");
}

#[test]
fn failure_domain_groups_go_one_batch_after_the_other_each_named_with_the_soak_between() {
    let spec =
        plan("v1.34.3+k0s.0", &[], &WORKERS).group_by("topology.kubernetes.io/zone", Some("5m"));
    let mut cluster = cluster();
    cluster.nodes = [("worker-0", Some("b")), ("worker-1", None), ("worker-2", Some("a"))]
        .into_iter()
        .map(|(name, zone)| match zone {
            Some(zone) => worker(name).labelled("topology.kubernetes.io/zone", zone),
            None => worker(name),
        })
        .collect();
    let report = preview(&spec, &cluster, &policy(), now());
    assert!(report.would_run, "{:?}", report.problems);
    let batches: Vec<(Vec<&str>, Option<&str>)> = report
        .batches
        .iter()
        .map(|b| (b.targets.iter().map(String::as_str).collect(), b.group.as_deref()))
        .collect();
    assert_eq!(
        batches,
        [
            (vec!["Node/worker-2"], Some("topology.kubernetes.io/zone=a")),
            (vec!["Node/worker-0"], Some("topology.kubernetes.io/zone=b")),
            (vec!["Node/worker-1"], Some("without topology.kubernetes.io/zone")),
        ]
    );
    assert!(report.batches[1].after_seconds.is_some_and(|s| s >= 295), "{:?}", report.batches);
    let text = render("autopilot", &spec, &report);
    assert!(
        text.contains("   2. command 0 (group topology.kubernetes.io/zone=b): Node/worker-0"),
        "{text}"
    );
}

#[test]
fn a_worker_requiring_a_key_the_plan_has_no_signature_for_fails_counted_by_max_failures() {
    let mut cluster = cluster();
    let requiring =
        worker("worker-1").annotated(autopilot_api::keys::ANNOTATION_PAYLOAD_KEYS, "k-one");
    cluster.nodes[1] = requiring;
    // maxFailures 0: the one failure is past the budget, the plan would end ApplyFailed.
    let spec = plan("v1.34.3+k0s.0", &[], &WORKERS);
    let report = preview(&spec, &cluster, &policy(), now());
    assert_eq!(report.end_state, "ApplyFailed");
    assert!(
        report.problems[0].contains(
            "Node worker-1: not signalled: Node worker-1 requires a signature by key k-one"
        ),
        "{:?}",
        report.problems
    );
    // maxFailures 1: the others update; the preview names the node that would fail, and why.
    let mut spec = spec;
    let workers = &mut spec.commands[0].k0supdate.as_mut().expect("k0supdate").targets.workers;
    workers.as_mut().expect("workers").limits.max_failures = Some(1);
    let report = preview(&spec, &cluster, &policy(), now());
    assert_eq!(report.end_state, "Completed");
    assert!(report.would_run, "{:?}", report.problems);
    assert_eq!(report.failing.len(), 1, "{:?}", report.failing);
    assert!(
        report.failing[0].starts_with(
            "Node worker-1: not signalled: Node worker-1 requires a signature by key k-one"
        ),
        "{:?}",
        report.failing
    );
    let text = render("autopilot", &spec, &report);
    assert!(
        text.contains("Nodes that would fail, each counted by its command's maxFailures (1):\n  - Node worker-1: not signalled"),
        "{text}"
    );
    let batches: Vec<String> = report.batches.iter().flat_map(|b| b.targets.clone()).collect();
    assert!(!batches.iter().any(|t| t == "Node/worker-1"), "never signalled: {batches:?}");
}

#[test]
fn the_engine_refusals_removed_apis_and_excluded_kinds_are_problems() {
    let mut cluster = cluster();
    cluster.removed_apis = Some(vec![RemovedApiUse {
        group: "flowcontrol.apiserver.k8s.io".to_owned(),
        version: "v1beta3".to_owned(),
        resource: "flowschemas".to_owned(),
        removed_in: "v1.32.0".to_owned(),
        count: 2,
        blocking: true,
    }]);
    let spec = plan("v1.34.3+k0s.0", &[], &WORKERS);
    let report = preview(&spec, &cluster, &policy(), now());
    assert_eq!(report.end_state, "Warning");
    assert!(
        report.problems[0].starts_with("the plan would end Warning: "),
        "{:?}",
        report.problems
    );
    assert!(report.problems[0].contains("flowschemas"), "{:?}", report.problems);

    let excluding = Policy { exclude_workers: true, ..policy() };
    let report = preview(&spec, &self::cluster(), &excluding, now());
    assert_eq!(report.end_state, "Restricted");
    assert!(report.problems[0].contains("--exclude-from-plans"), "{:?}", report.problems);
}

/// The preview's lookups on fixed tables, recording every question.
#[derive(Default)]
struct Recorded {
    pods_asked: Vec<String>,
    probed: Vec<Vec<String>>,
    removed: Vec<Vec<String>>,
    pods: Vec<Pod>,
    readiness: BTreeMap<String, Readiness>,
    uses: Vec<RemovedApiUse>,
    /// Each identity whose access to the Plan was reviewed, in order.
    reviewed: Vec<PlanReader>,
    /// The answer to every review (`None`: allowed).
    access: Option<PlanAccess>,
}

impl Answer for Recorded {
    async fn gate(
        &mut self,
        _query: &autopilot_engine::plan::GateQuery,
    ) -> autopilot_engine::plan::GateAnswer {
        autopilot_engine::plan::GateAnswer::Assumed
    }

    type Error = anyhow::Error;

    async fn probe(&mut self, controllers: &[String]) -> BTreeMap<String, Probe> {
        self.probed.push(controllers.to_vec());
        controllers
            .iter()
            .filter_map(|name| {
                let readiness = self.readiness.get(name)?.clone();
                Some((name.clone(), Probe::without_version(readiness)))
            })
            .collect()
    }

    async fn removed_apis(&mut self, versions: &[String]) -> anyhow::Result<Vec<RemovedApiUse>> {
        self.removed.push(versions.to_vec());
        Ok(self.uses.clone())
    }

    async fn plan_access(&mut self, reader: &PlanReader) -> PlanAccess {
        self.reviewed.push(reader.clone());
        self.access.clone().unwrap_or(PlanAccess::Allowed)
    }

    async fn pods_on(&mut self, node: &str) -> anyhow::Result<Vec<Pod>> {
        self.pods_asked.push(node.to_owned());
        let on_node =
            |pod: &&Pod| pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
        Ok(self.pods.iter().filter(on_node).cloned().collect())
    }
}

/// `run`'s resolve loop over `spec` on `cluster` (with nothing looked up yet).
async fn resolved(spec: &PlanSpec, cluster: &Cluster, answerer: &mut Recorded) -> Report {
    let each_pass = |known: &Answers| {
        pass(What::Plan { spec, allow_skew: None }, cluster, &policy(), now(), known)
    };
    let previewed = resolve::run(Answers::default(), each_pass, answerer).await;
    previewed.expect("no lookup fails").report
}

#[tokio::test]
async fn a_preview_looks_up_each_drained_nodes_pods_the_controllers_and_removed_apis_once() {
    let unread = Cluster { readiness: BTreeMap::new(), removed_apis: None, ..cluster() };
    let web = Pod {
        metadata: ObjectMeta {
            name: Some("web-0".to_owned()),
            namespace: Some("shop".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec { node_name: Some("worker-1".to_owned()), ..PodSpec::default() }),
        ..Pod::default()
    };
    let not_ready = Readiness::NotReady("connection refused".to_owned());
    let mut answerer = Recorded {
        pods: vec![web.clone()],
        readiness: BTreeMap::from([("controller-0".to_owned(), not_ready.clone())]),
        ..Recorded::default()
    };
    let spec = plan("v1.35.0+k0s.0", &["controller-0"], &WORKERS);
    let report = resolved(&spec, &unread, &mut answerer).await;
    assert_eq!(answerer.pods_asked, WORKERS);
    assert_eq!(answerer.probed, [["controller-0"]]);
    assert_eq!(answerer.removed, [["v1.35.0+k0s.0"]]);
    assert_eq!(answerer.reviewed, [PlanReader::worker("worker-0")], "one review for the workers");
    // The report is the one on the cluster with every answer in it.
    let read = Cluster {
        pods: vec![web],
        readiness: BTreeMap::from([("controller-0".to_owned(), not_ready)]),
        removed_apis: Some(Vec::new()),
        ..unread.clone()
    };
    assert_eq!(report, preview(&spec, &read, &policy(), now()));

    // Removed APIs in use stop the plan; nothing more is looked up for the second pass.
    let mut answerer = Recorded {
        uses: vec![RemovedApiUse {
            group: "flowcontrol.apiserver.k8s.io".to_owned(),
            version: "v1beta3".to_owned(),
            resource: "flowschemas".to_owned(),
            removed_in: "v1.32.0".to_owned(),
            count: 2,
            blocking: true,
        }],
        readiness: BTreeMap::from([("controller-0".to_owned(), Readiness::Ready)]),
        ..Recorded::default()
    };
    let spec = plan("v1.34.3+k0s.0", &[], &WORKERS);
    let report = resolved(&spec, &unread, &mut answerer).await;
    assert_eq!(report.end_state, "Warning");
    assert_eq!(answerer.removed.len(), 1);
    assert_eq!(answerer.pods_asked, WORKERS);
    assert_eq!(answerer.probed, [["controller-0"]], "its API server's version, for the skew");
}

/// The Plan `autopilot` with `spec` after its run completed on `cluster` (the engine's dry
/// run, which is what the leader would have written).
fn completed(spec: &PlanSpec, cluster: &Cluster) -> Plan {
    let (control_nodes, nodes) = planner_objects(cluster);
    let readiness = BTreeMap::new();
    let observed = Observed {
        gate_answers: &autopilot_engine::plan::NO_GATE_ANSWERS,
        plan_access: &autopilot_engine::plan::NO_PLAN_ACCESS,
        now: now(),
        term_started: None,
        control_nodes: &control_nodes,
        nodes: &nodes,
        readiness: &readiness,
        api_versions: &autopilot_engine::plan::NO_API_VERSIONS,
        removed_apis: Some(&[]),
        check_pods: CheckPods::NONE,
    };
    let run = rollout::rollout(spec, &observed, &policy());
    assert_eq!(run.end.state, PlanStateType::Completed);
    let mut plan = Plan::new(keys::PLAN_NAME, spec.clone());
    plan.metadata.uid = Some("preview".to_owned());
    plan.metadata.generation = Some(1);
    plan.status = Some(run.end);
    plan
}

#[test]
fn a_rollback_preview_shows_the_nodes_put_back_in_the_engines_order() {
    let spec = plan("v1.35.0+k0s.0", &["controller-0"], &WORKERS);
    let cluster = cluster();
    let live = completed(&spec, &cluster);
    let report = preview_rollback(&live, &cluster, &policy(), now());
    assert!(report.rollback);
    assert_eq!(report.problems, Vec::<String>::new());
    assert!(report.would_run);
    assert_eq!(report.end_state, "RolledBack");
    let batches: Vec<Vec<String>> = report.batches.iter().map(|b| b.targets.clone()).collect();
    assert_eq!(
        batches,
        [
            vec!["Node/worker-1".to_owned(), "Node/worker-2".to_owned()],
            vec!["Node/worker-0".to_owned()],
            vec!["ControlNode/controller-0".to_owned()],
        ],
        "workers first, the last two together; then the controller"
    );
    assert_eq!(report.commands.len(), 1);
    assert_eq!(report.commands[0].kind, "rollback of k0supdate");
    assert_eq!(report.commands[0].version, "v1.34.2+k0s.0", "the version they go back to");
    let text = render(keys::PLAN_NAME, &live.spec, &report);
    assert!(text.starts_with("Rollback of the run of plan autopilot"), "{text}");
    assert!(text.contains("The rollback would run."), "{text}");
}

#[test]
fn a_rollback_preview_of_a_plan_without_a_run_says_there_is_nothing_to_roll_back() {
    let spec = plan("v1.35.0+k0s.0", &[], &WORKERS);
    let live = Plan::new(keys::PLAN_NAME, spec);
    let report = preview_rollback(&live, &cluster(), &policy(), now());
    assert!(!report.would_run);
    assert_eq!(report.problems, ["the plan has no run to roll back"]);
    assert!(report.batches.is_empty());
}

#[test]
fn workers_that_may_not_read_the_plan_are_a_problem_naming_the_identity_and_the_manifest() {
    let mut cluster = cluster();
    let reader = PlanReader::worker("worker-0");
    cluster.plan_access = BTreeMap::from([(reader.clone(), PlanAccess::Denied(String::new()))]);
    let spec = plan("v1.35.0+k0s.0", &["controller-0"], &WORKERS);
    let report = preview(&spec, &cluster, &policy(), now());
    assert_eq!(report.plan_reader, Some(reader));
    assert!(!report.would_run);
    assert_eq!(report.end_state, "Warning");
    assert!(report.batches.is_empty(), "nothing signalled: {:?}", report.batches);
    let [problem] = report.problems.as_slice() else { panic!("{:?}", report.problems) };
    assert!(
        problem.starts_with("the plan would end Warning: the workers may not read"),
        "{problem}"
    );
    assert!(problem.contains("system:node:worker-0 (groups system:nodes"), "{problem}");
    assert!(problem.contains("get plans.autopilot.k0sproject.io \"autopilot\""), "{problem}");
    assert!(problem.contains("kubectl apply -f manifests/rbac/worker.yaml"), "{problem}");
    assert!(render(keys::PLAN_NAME, &spec, &report).contains(problem.as_str()));
}

#[tokio::test]
async fn a_preview_by_someone_who_may_not_review_access_says_it_could_not_check() {
    let why = "this identity may not create subjectaccessreviews.authorization.k8s.io: no";
    let mut answerer =
        Recorded { access: Some(PlanAccess::Unknown(why.to_owned())), ..Recorded::default() };
    let spec = plan("v1.35.0+k0s.0", &["controller-0"], &WORKERS);
    let report = resolved(&spec, &cluster(), &mut answerer).await;
    assert_eq!(answerer.reviewed, [PlanReader::worker("worker-0")]);
    assert!(report.would_run, "not checked is no problem: {:?}", report.problems);
    assert_eq!(report.end_state, "Completed");
    let [line] = report.not_checked.as_slice() else { panic!("{:?}", report.not_checked) };
    assert!(line.starts_with("whether the workers may read Plan autopilot"), "{line}");
    assert!(line.ends_with(why), "{line}");
    let text = render(keys::PLAN_NAME, &spec, &report);
    assert!(text.contains(&format!("Could not check {line}")), "{text}");

    // Allowed: nothing to say.
    let mut answerer = Recorded::default();
    let report = resolved(&spec, &cluster(), &mut answerer).await;
    assert!(report.not_checked.is_empty() && report.would_run, "{report:?}");
}

#[tokio::test]
async fn a_preview_asks_about_the_worker_newplan_asks_about_even_when_the_first_pass_signals_it() {
    // Workers alone, two at a time: the dry run's first pass signals worker-0 and worker-1,
    // and the review is still of worker-0, the identity the leader's NewPlan asks about.
    let mut answerer =
        Recorded { access: Some(PlanAccess::Denied(String::new())), ..Recorded::default() };
    let spec = plan("v1.34.3+k0s.0", &[], &WORKERS);
    let report = resolved(&spec, &cluster(), &mut answerer).await;
    assert_eq!(answerer.reviewed, [PlanReader::worker("worker-0")]);
    assert_eq!(report.end_state, "Warning", "{:?}", report.problems);
    assert!(report.problems[0].contains("system:node:worker-0"), "{:?}", report.problems);
    assert!(report.batches.is_empty());
}
