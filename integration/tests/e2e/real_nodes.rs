//! Scenarios on real nodes ([`integration::real_node`]): each worker is a `k0s worker
//! --run-components` whose containerd and kubelet own its Node and run real containers, and
//! the controllers run the real API servers, kube-controller-manager and kube-scheduler, so
//! Deployments, DaemonSets and PodDisruptionBudgets behave as in production. One scenario
//! keeps an agent beside a kubelet the harness runs: what an update does to that mode.
//!
//! They need root and a few Debian packages ([`integration::real_node::prerequisites`]);
//! `cargo xtask test` leaves them out, naming them and the reason, where those are missing.
//! Run anyway, they fail saying what is missing: they never pass without real nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use autopilot_api::v1beta2::{
    DrainPolicy, Gate, GateAfter, GateOnFailure, KubernetesGate, PlanStateType, TargetState,
};
use integration::http::FileServer;
use integration::real_node::RealNodes;
use integration::{K0sProcess, wait_for};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::support::*;

/// How long workloads get to be Ready on real nodes (a Pod is Ready 2–4 s after creation
/// on an idle machine; the tests run next to others).
pub(crate) const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// How often the availability probe samples the Deployment's Pods.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

pub(crate) use integration::real_node::workload::{self, SERVE, container, pod_ready};

/// A fleet of one controller and the real workers `names`, each a `k0s worker
/// --run-components` that runs its node's containerd and kubelet, the controller running its
/// API server, controller-manager and scheduler: what the update scenarios below start with
/// (to configure further, then start).
fn real_fleet(name: &str, names: &[&str]) -> FleetBuilder {
    FleetBuilder::new(name).workers(names).real_workers().agents(Agents::Real)
}

#[tokio::test]
async fn a_dropped_set_of_real_nodes_leaves_nothing_behind_even_after_a_failure() {
    // The set of real nodes is what this test drops, so it starts them itself.
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("real-nodes-teardown")
            .workers(&["worker-0"])
            .unstarted_controllers()
            .unstarted_workers()
            .start()
            .await
            .unwrap();
    let nodes = RealNodes::start(&cluster, &["worker-0"]).await.unwrap();

    // A real container runs on the node: a Pod the kubelet started through containerd.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "sleeper" },
        "spec": {
            "nodeName": "worker-0",
            "terminationGracePeriodSeconds": 1,
            "containers": [container("sleep", SERVE)],
        },
    }))
    .unwrap();
    wait_default_service_account(&client).await.unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let id = wait_for(WORKLOAD_TIMEOUT, "the sleeper's container running", || async {
        let pod = pods.get("sleeper").await?;
        Ok(container_ids(&pod).into_iter().next().filter(|_| pod_ready(&pod)))
    })
    .await
    .unwrap();
    let running = nodes.running_containers("worker-0").unwrap();
    assert!(running.contains(&id), "containerd runs {id}: {running:?}");
    assert!(running.len() >= 2, "the container and its sandbox run: {running:?}");

    // The test that owns them fails: the nodes are dropped while it unwinds.
    let leftovers = nodes.leftovers();
    let failed = tokio::spawn(async move {
        let _nodes = nodes;
        panic!("a scenario failed with real nodes running");
    })
    .await;
    assert!(failed.is_err_and(|e| e.is_panic()), "the owner panicked");
    let left = leftovers.find().await;
    assert!(left.is_empty(), "the real nodes left behind: {left:#?}");
}

/// Nodes that `k0s` runs, updated to a v2 that carries the worker's components (as a
/// release does): each is drained under the budget, restarts its kubelet and containerd from
/// v2, and the DaemonSet's containers run on through it.
#[tokio::test]
async fn an_update_drains_real_workloads_under_a_budget_and_leaves_running_containers_alone() {
    let (v2_bytes, sha) = v2_carrying_build();
    let server = FileServer::start(v2_bytes).await.unwrap();
    let names = ["worker-0", "worker-1"];
    let Fleet { cluster, client, controllers: _controllers, workers } =
        real_fleet("real-nodes-update", &names).start().await.unwrap();
    let nodes = cluster.real_nodes().expect("the real nodes");
    for name in names {
        wait_node_version(&client, name, &binary_version(workers[0].binary_path())).await.unwrap();
    }
    let pids: Vec<u32> = workers.iter().map(K0sProcess::pid).collect();

    // A 2-replica Deployment with a readiness probe under a budget that keeps one Ready, and
    // a DaemonSet on every worker.
    wait_default_service_account(&client).await.unwrap();
    create_workloads(&client).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_workloads_ready(&pods).await.unwrap();
    let agents_before = daemon_pods(&pods, "agent").await.unwrap();
    assert_eq!(agents_before.len(), 2, "one agent Pod per worker: {agents_before:?}");
    let kubelets: Vec<Option<u32>> = names.iter().map(|n| nodes.kubelet_pid(n).unwrap()).collect();
    let containerds: Vec<Option<u32>> =
        names.iter().map(|n| nodes.containerd_pid(n).unwrap()).collect();

    // Sample the web Pods every 200 ms for the whole update.
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let sampler = tokio::spawn(sample_web(pods.clone(), samples.clone()));

    // After each node: its DaemonSet Pod Ready again (settle), and the Deployment back to
    // both replicas available (a kubernetes gate, which the controllers may list once the
    // example grant is applied), before the next node is signalled.
    integration::rbac::apply_file(&client, "gates-example.yaml", GATES_EXAMPLE).await.unwrap();
    let mut update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&names, 1)));
    update.rollout.gates = gates_after_each_node();
    create_plan(&client, &plan("autopilot", "v2", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    sampler.abort();
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    assert_eq!(
        command(&done, 0).gates_passed,
        2,
        "both nodes' gates passed: {}",
        status_yaml(&done)
    );

    // Each worker restarted into v2 in place, and is uncordoned.
    for (worker, pid) in workers.iter().zip(&pids) {
        let name = worker.node_name();
        assert_eq!(binary_version(worker.binary_path()), V2, "{name} on disk");
        assert!(worker.is_running() && worker.pid() == *pid, "{name} re-executed in place");
        wait_node_version(&client, name, V2).await.unwrap();
        assert_eq!(node_cordon(&client, name).await.unwrap(), (false, false), "{name} uncordoned");
    }

    // Each node was drained for real: every web Pod that ran before the plan was evicted (its
    // containers stopped), and at no sample were no web Pods Ready.
    check_drained(&samples.lock().unwrap().clone());

    // The DaemonSet's Pods were not evicted and their containers kept running through the
    // restarts: same Pods, same containers, no restart, still running in containerd; the
    // kubelets and containerds never restarted either.
    assert_same_agents(nodes, &pods, &agents_before).await;
    // The kubelets and containerds are the updated k0s's: stopped with v1, started again by
    // v2 from what it staged, and the Nodes Ready from them.
    for (i, name) in names.iter().enumerate() {
        let kubelet = nodes.kubelet_pid(name).unwrap();
        assert!(kubelet.is_some() && kubelet != kubelets[i], "{name}'s kubelet: {kubelet:?}");
        let containerd = nodes.containerd_pid(name).unwrap();
        assert!(
            containerd.is_some() && containerd != containerds[i],
            "{name}'s containerd is v2's: {containerd:?}"
        );
        assert!(workers[i].data_dir().join("bin/kubelet").is_file(), "{name} staged its kubelet");
        wait_nodes_ready(&client, &[name]).await.unwrap();
    }
}

/// An update never flips a node's mode: an agent that runs beside a kubelet someone else runs
/// (today's units, without `--run-components`), updated to a v2 that carries the worker's
/// components, still runs the agent alone: nothing staged, no second kubelet or containerd,
/// the node's own kubelet and containerd untouched.
#[tokio::test]
async fn an_agent_only_node_stays_agent_only_through_an_update_to_a_carrying_build() {
    const NODE: &str = "worker-0";
    let (v2_bytes, sha) = v2_carrying_build();
    let server = FileServer::start(v2_bytes).await.unwrap();
    let Fleet { cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("real-nodes-agent-only")
            .workers(&[NODE])
            .real_workers_beside_agents()
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let nodes = cluster.real_nodes().expect("the real node");
    wait_node_version(&client, NODE, &binary_version(workers[0].binary_path())).await.unwrap();
    let kubelet = nodes.kubelet_pid(NODE).unwrap();
    let containerd = nodes.containerd_pid(NODE).unwrap();
    assert!(kubelet.is_some() && containerd.is_some(), "the harness runs the node");

    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&[NODE], 1)));
    create_plan(&client, &plan("autopilot", "v2", vec![k0s_command(update)])).await.unwrap();
    wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    wait_node_version(&client, NODE, V2).await.unwrap();
    assert_eq!(binary_version(workers[0].binary_path()), V2, "updated on disk");

    assert_agent_only(&workers);
    assert_eq!(nodes.kubelet_pid(NODE).unwrap(), kubelet, "the node's kubelet kept running");
    assert_eq!(nodes.containerd_pid(NODE).unwrap(), containerd, "its containerd kept running");
    wait_no_autopilot_cordons(&client, "autopilot").await.unwrap();
}

/// Each agent still runs alone after its update to a build that carries components: nothing
/// staged, no component started.
fn assert_agent_only(workers: &[K0sProcess]) {
    for worker in workers {
        let (name, data) = (worker.node_name(), worker.data_dir());
        for left in ["bin/kubelet", "bin/containerd", "run/kubelet.pid", "run/containerd.pid"] {
            assert!(!data.join(left).exists(), "{name}: the agent-only node has {left}");
        }
        assert!(!worker.log().contains("component=\"kubelet\""), "{name} ran a kubelet");
    }
}

/// After each node: its DaemonSet Pod Ready again (settle), and the Deployment back to both
/// replicas available (a kubernetes gate).
fn gates_after_each_node() -> Vec<Gate> {
    vec![
        Gate { settle: Some("90s".to_owned()), timeout: None, ..gate("settled") },
        Gate {
            kubernetes: Some(KubernetesGate {
                api_version: "apps/v1".to_owned(),
                kind: "Deployment".to_owned(),
                namespace: Some("default".to_owned()),
                label_selector: None,
                field_selector: Some("metadata.name=web".to_owned()),
                condition: "objects.size() == 1 && objects.all(d, has(d.status.availableReplicas) \
                            && d.status.availableReplicas == 2)"
                    .to_owned(),
            }),
            ..gate("web-available")
        },
    ]
}

/// Every web Pod that ran before the plan was evicted (its containers stopped), and at no
/// sample were no web Pods Ready.
pub(crate) fn check_drained(samples: &[Sample]) {
    assert!(samples.len() > 10, "the probe sampled the update: {} samples", samples.len());
    let first = &samples[0];
    let evicted: BTreeSet<&String> = samples.iter().flat_map(|s| s.terminating.iter()).collect();
    for pod in &first.ready {
        assert!(evicted.contains(pod), "web Pod {pod} was evicted by a drain");
    }
    let empty: Vec<&Sample> = samples.iter().filter(|s| s.ready.is_empty()).collect();
    assert!(
        empty.is_empty(),
        "no web Pod was Ready at {} samples: {:?}",
        empty.len(),
        empty.first()
    );
}

/// The example grant of what gates list (Deployments among them).
const GATES_EXAMPLE: &str = include_str!("../../../manifests/rbac/gates-example.yaml");

/// A gate `id` after each node, halting the plan when it fails within 3 minutes.
fn gate(id: &str) -> Gate {
    Gate {
        id: id.to_owned(),
        after: GateAfter::Node,
        timeout: Some("3m".to_owned()),
        on_failure: GateOnFailure::Halt,
        ..Gate::default()
    }
}

/// One look at the web Pods.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// Ready and not terminating.
    pub(crate) ready: BTreeSet<String>,
    /// Terminating (evicted).
    terminating: BTreeSet<String>,
}

pub(crate) async fn sample_web(pods: Api<Pod>, samples: Arc<Mutex<Vec<Sample>>>) {
    let params = ListParams::default().labels("app=web");
    loop {
        if let Ok(list) = pods.list(&params).await {
            let mut sample = Sample { ready: BTreeSet::new(), terminating: BTreeSet::new() };
            for pod in &list.items {
                if pod.metadata.deletion_timestamp.is_some() {
                    sample.terminating.insert(pod.name_any());
                } else if pod_ready(pod) {
                    sample.ready.insert(pod.name_any());
                }
            }
            samples.lock().unwrap_or_else(|p| p.into_inner()).push(sample);
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

/// The Pods of DaemonSet `app` by node: their UID and their containers' ids.
pub(crate) async fn daemon_pods(
    pods: &Api<Pod>,
    app: &str,
) -> anyhow::Result<BTreeMap<String, (String, BTreeSet<String>)>> {
    let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await?;
    Ok(list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let node = p.spec.as_ref()?.node_name.clone()?;
            let restarts: i32 = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .map(|c| c.restart_count)
                .sum();
            let uid = format!("{} restarts={restarts}", p.uid()?);
            Some((node, (uid, container_ids(p))))
        })
        .collect())
}

/// The DaemonSet `agent`'s Pods are `before` (same Pods, same containers, no restart), and
/// containerd still runs each of those containers.
pub(crate) async fn assert_same_agents(
    nodes: &RealNodes,
    pods: &Api<Pod>,
    before: &BTreeMap<String, (String, BTreeSet<String>)>,
) {
    let after = daemon_pods(pods, "agent").await.expect("the agent Pods");
    assert_eq!(&after, before, "the agent Pods and containers are the same");
    for (node, (_, ids)) in &after {
        let running = nodes.running_containers(node).expect("containerd's containers");
        for id in ids {
            assert!(running.contains(id), "{node}: container {id} still runs: {running:?}");
        }
    }
}

/// The ids of a Pod's running containers, as containerd knows them (without `containerd://`).
pub(crate) fn container_ids(pod: &Pod) -> BTreeSet<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|statuses| {
            statuses
                .iter()
                .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
                .filter_map(|c| c.container_id.as_deref())
                .map(|id| id.trim_start_matches("containerd://").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The `default` ServiceAccount, which the controller-manager creates shortly after start
/// (Pods are refused without it).
pub(crate) async fn wait_default_service_account(client: &kube::Client) -> anyhow::Result<()> {
    workload::wait_default_service_account(client, WORKLOAD_TIMEOUT).await
}

/// Deployment `web` (2 replicas), its budget `web-budget` (`minAvailable: 1`) and DaemonSet
/// `agent`, all in `default`.
pub(crate) async fn create_workloads(client: &kube::Client) -> anyhow::Result<()> {
    workload::deployment(client, "web", 2, workload::pod_template("web")).await?;
    workload::budget(client, "web-budget", "web", 1).await?;
    workload::daemon_set(client, "agent").await
}

/// Both web Pods and both agent Pods of [`create_workloads`] Ready.
pub(crate) async fn wait_workloads_ready(pods: &Api<Pod>) -> anyhow::Result<()> {
    wait_for(WORKLOAD_TIMEOUT, "2 web and 2 agent Pods Ready", || async {
        let all = pods.list(&ListParams::default()).await?.items;
        let ready =
            |app: &str| all.iter().filter(|p| label(p, "app") == Some(app) && pod_ready(p)).count();
        Ok((ready("web") == 2 && ready("agent") == 2).then_some(()))
    })
    .await
}

/// One real worker with one web Pod and nowhere else to move it: a budget that needs the Pod
/// holds `drain: Always` until `--drain-timeout` fails the node (not evicted, uncordoned,
/// binary untouched); `IfPossible` and `Never` update without evicting it, the same container
/// running throughout; `Always` without the budget evicts it, its container stops, and the
/// replacement runs once the node is uncordoned.
#[tokio::test]
async fn drain_policies_on_a_real_worker_with_nowhere_to_move_its_pods() {
    let (v2_bytes, sha) = v2_build();
    let server = FileServer::start(v2_bytes).await.unwrap();
    const NODE: &str = "worker-0";
    let Fleet { cluster, client, controllers: _controllers, mut workers } =
        real_fleet("real-nodes-drain", &[NODE])
            .controller_args(&["--drain-timeout", "10s"])
            .start()
            .await
            .unwrap();
    let nodes = cluster.real_nodes().expect("the real node");
    let worker = workers.remove(0);
    let v1 = binary_version(worker.binary_path());
    wait_node_version(&client, NODE, &v1).await.unwrap();

    wait_default_service_account(&client).await.unwrap();
    workload::deployment(&client, "web", 1, workload::pod_template("web")).await.unwrap();
    workload::budget(&client, "web-budget", "web", 1).await.unwrap();
    let budgets = Api::<PodDisruptionBudget>::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let web = wait_web_running(&pods).await.unwrap();
    let only_node = Some(static_nodes(&[NODE], 1));

    // Always, held by the budget: the node fails after the drain timeout, naming the Pod and
    // the budget; nothing was evicted or swapped, and the node is uncordoned.
    let update = update_to(V2, server.base_url(), &sha, None, only_node.clone());
    create_plan(&client, &plan("autopilot", "held", vec![k0s_command(update)])).await.unwrap();
    let failed = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    let reason = target(&failed, 0, NODE).reason.clone().unwrap_or_default();
    assert!(reason.starts_with("drain of worker-0 blocked for 10s: "), "{reason}");
    assert!(reason.contains(&format!("default/{}", web.0)), "the Pod is named: {reason}");
    assert!(reason.contains("web-budget"), "the budget is named: {reason}");
    wait_no_autopilot_cordons(&client, "autopilot").await.unwrap();
    assert_eq!(binary_version(worker.binary_path()), v1, "no swap without a drain");
    assert_still_running(nodes, &pods, &web).await;
    delete_plan(&client).await;

    // IfPossible: nowhere to go, so cordoned, not drained, updated.
    let update = autopilot_api::v1beta2::PlanCommandK0sUpdate {
        drain: Some(DrainPolicy::IfPossible),
        ..update_to(V2, server.base_url(), &sha, None, only_node.clone())
    };
    let note = run_to_completion(&client, "if-possible", update).await;
    let note = note.expect("the target's drain note");
    assert!(
        note.starts_with(&format!("cordoned, not drained of pod(s) default/{}", web.0)),
        "{note}"
    );
    assert_eq!(binary_version(worker.binary_path()), V2);
    assert_still_running(nodes, &pods, &web).await;

    // Never: cordoned, nothing evicted.
    let update = autopilot_api::v1beta2::PlanCommandK0sUpdate {
        drain: Some(DrainPolicy::Never),
        forceupdate: true,
        ..update_to(V2, server.base_url(), &sha, None, only_node.clone())
    };
    let note = run_to_completion(&client, "never", update).await;
    assert_eq!(note.as_deref(), Some("cordoned, not drained: the command's drain is Never"));
    assert_still_running(nodes, &pods, &web).await;

    // Always without the budget: the Pod is evicted and its container stops; the
    // replacement runs on the node once it is uncordoned.
    budgets.delete("web-budget", &Default::default()).await.unwrap();
    let update = autopilot_api::v1beta2::PlanCommandK0sUpdate {
        forceupdate: true,
        ..update_to(V2, server.base_url(), &sha, None, only_node)
    };
    let note = run_to_completion(&client, "always", update).await;
    assert_eq!(note, None);
    assert!(pods.get_opt(&web.0).await.unwrap().is_none(), "{} was evicted", web.0);
    let running = nodes.running_containers(NODE).unwrap();
    assert!(!running.contains(&web.1), "the evicted container stopped: {running:?}");
    let replacement = wait_web_running(&pods).await.unwrap();
    assert_ne!(replacement.0, web.0, "a new Pod replaced the evicted one");
}

/// Runs one plan of `update` to `Completed` (no autopilot cordon left), deletes it, and
/// returns its only target's `drain` note.
pub(crate) async fn run_to_completion(
    client: &kube::Client,
    id: &str,
    update: autopilot_api::v1beta2::PlanCommandK0sUpdate,
) -> Option<String> {
    create_plan(client, &plan("autopilot", id, vec![k0s_command(update)])).await.expect("the plan");
    let done =
        wait_plan(client, "autopilot", PLAN_TIMEOUT, "the plan to end", |p| state(p).is_terminal())
            .await
            .expect("the plan ends");
    let status = status_yaml(&done);
    assert_eq!(state(&done), PlanStateType::Completed, "{id}: {status}");
    let target = &targets(command(&done, 0))[0];
    assert_eq!(target.state, TargetState::SignalCompleted, "{id}: {status}");
    wait_no_autopilot_cordons(client, "autopilot").await.expect("no cordon left");
    let drain = target.drain.clone();
    delete_plan(client).await;
    drain
}

/// The one web Pod once it runs and is Ready: its name and its container's id.
async fn wait_web_running(pods: &Api<Pod>) -> anyhow::Result<(String, String)> {
    wait_for(WORKLOAD_TIMEOUT, "a web Pod Ready", || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await?;
        Ok(list
            .items
            .iter()
            .find(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
            .and_then(|p| Some((p.name_any(), container_ids(p).into_iter().next()?))))
    })
    .await
}

/// The Pod `web` still exists with the same running container, which containerd runs.
async fn assert_still_running(nodes: &RealNodes, pods: &Api<Pod>, web: &(String, String)) {
    let pod = pods.get(&web.0).await.expect("reading the web Pod");
    assert!(pod.metadata.deletion_timestamp.is_none(), "{} was not evicted", web.0);
    assert_eq!(container_ids(&pod), BTreeSet::from([web.1.clone()]), "the same container runs");
    let running = nodes.running_containers("worker-0").expect("asking containerd");
    assert!(running.contains(&web.1), "containerd runs {}: {running:?}", web.1);
}

/// The post-update watch on a real node that `k0s` runs: a "v2" that passes its trial boot
/// but dies (SIGKILL) 8 s into every run is put back to v1 after its third crash, while the
/// node's DaemonSet container runs on untouched; v1 runs the node's kubelet and containerd
/// again, and the Node is Ready from them.
#[tokio::test]
async fn the_post_update_watch_rolls_a_crashing_binary_back_with_the_containers_left_running() {
    const NODE: &str = "worker-0";
    let Fleet { cluster, client, controllers: _controllers, mut workers } =
        real_fleet("real-nodes-post-watch", &[NODE])
            .worker_args(&["--restart", "exit"])
            .start()
            .await
            .unwrap();
    let nodes = cluster.real_nodes().expect("the real node");
    let worker = workers.remove(0);
    let v1_bytes = std::fs::read(worker.binary_path()).unwrap();
    let v1 = binary_version(worker.binary_path());
    wait_node_version(&client, NODE, &v1).await.unwrap();

    wait_default_service_account(&client).await.unwrap();
    workload::daemon_set(&client, "agent").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_for(WORKLOAD_TIMEOUT, "the agent Pod Ready", || async {
        let list = pods.list(&ListParams::default().labels("app=agent")).await?;
        Ok(list.items.iter().any(pod_ready).then_some(()))
    })
    .await
    .unwrap();
    let agents_before = daemon_pods(&pods, "agent").await.unwrap();
    let kubelet = nodes.kubelet_pid(NODE).unwrap();
    let containerd = nodes.containerd_pid(NODE).unwrap();

    let payload = dying_payload(&worker).unwrap();
    let server = FileServer::start(payload.clone()).await.unwrap();
    let worker = worker.supervise(Duration::from_secs(1));
    let update = update_to(
        V2,
        server.base_url(),
        &sha256_hex(&payload),
        None,
        Some(static_nodes(&[NODE], 1)),
    );
    create_plan(&client, &plan("autopilot", "post-watch", vec![k0s_command(update)]))
        .await
        .unwrap();

    wait_for(PLAN_TIMEOUT + Duration::from_secs(90), "worker-0 back on v1", || async {
        let node = worker.process();
        let on_disk = std::fs::read(node.binary_path())?;
        let crashes = worker.exits().iter().filter(|(_, s)| !s.success()).count();
        Ok((on_disk == v1_bytes && crashes >= 3).then_some(()))
    })
    .await
    .unwrap();
    let signal =
        wait_for(Duration::from_secs(60), "the signal Failed after the rollback", || async {
            let signal = node_signal(&client, NODE).await?;
            Ok(signal.filter(|s| s.phase() == Some(autopilot_api::signal::SignalPhase::Failed)))
        })
        .await
        .unwrap();
    let reason = signal.status.and_then(|s| s.reason).unwrap_or_default();
    assert!(
        reason
            .starts_with("rolled back after the update: the new binary exited abnormally 3 times"),
        "{reason}"
    );
    wait_node_version(&client, NODE, &v1).await.unwrap();
    assert_eq!(binary_version(worker.process().binary_path()), v1);

    // Through three crashes and the rollback, the node's workload ran on: the same Pod and
    // container, no restart, still running in containerd; the kubelet and containerd that
    // run now are v1's (each start takes them back from the run before).
    assert_eq!(
        daemon_pods(&pods, "agent").await.unwrap(),
        agents_before,
        "the agent Pod is the same"
    );
    let running = nodes.running_containers(NODE).unwrap();
    for (_, ids) in agents_before.values() {
        for id in ids {
            assert!(running.contains(id), "container {id} still runs: {running:?}");
        }
    }
    let now = (nodes.kubelet_pid(NODE).unwrap(), nodes.containerd_pid(NODE).unwrap());
    assert!(now.0.is_some() && now.0 != kubelet, "v1 runs the kubelet again: {now:?}");
    assert!(now.1.is_some() && now.1 != containerd, "v1 runs containerd again: {now:?}");
    wait_nodes_ready(&client, &[NODE]).await.unwrap();
    wait_no_autopilot_cordons(&client, "autopilot").await.unwrap();
}

/// The payload for `worker`: answers `version` as v2, is the real v2 (carrying the worker's
/// components) on trial, and in a normal run starts the real v2 and kills it 8 s later,
/// exiting 1.
fn dying_payload(worker: &K0sProcess) -> anyhow::Result<Vec<u8>> {
    use std::os::unix::fs::PermissionsExt as _;
    let (v2_bytes, _) = v2_carrying_build();
    let dir = worker.dir().join("v2-real");
    let real = dir.join("k0s");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(&real, &v2_bytes)?;
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755))?;
    Ok(crate::update_post_watch::dying_v2(&real))
}

/// Deployment `name` (`app: name`) with `replicas` busybox Pods kept on `node` (a node
/// selector: evicted ones wait there for the node to come back), in `default`.
pub(crate) async fn pinned_deployment(
    client: &kube::Client,
    name: &str,
    node: &str,
    replicas: usize,
) -> anyhow::Result<()> {
    let mut template = workload::pod_template(name);
    template["spec"]["nodeSelector"] = json!({ "kubernetes.io/hostname": node });
    workload::deployment(client, name, replicas, template).await
}

pub(crate) use integration::real_node::workload::budget;

/// The names of the Pods of `app: app` in `default` once `count` of them are Ready (and none
/// is terminating).
pub(crate) async fn wait_app_ready(
    client: &kube::Client,
    app: &str,
    count: usize,
) -> anyhow::Result<BTreeSet<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_for(WORKLOAD_TIMEOUT, &format!("{count} {app} Pods Ready"), || async {
        let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await?.items;
        let ready: BTreeSet<String> = list
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
            .map(kube::ResourceExt::name_any)
            .collect();
        Ok((ready.len() == count && list.len() == count).then_some(ready))
    })
    .await
}
