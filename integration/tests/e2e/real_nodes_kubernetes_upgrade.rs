//! Plans upgrade the cluster's Kubernetes (DESIGN §16): controllers whose `k0s controller
//! --run-components` runs their API server, controller-manager and scheduler, and real workers
//! whose `k0s worker --run-components` runs containerd and the kubelet, all on a build carrying
//! Kubernetes v1.34.4 (named `v1.34.4+k0s.0`, as k0s names releases), updated to a build
//! carrying v1.35.4.
//!
//! The upgrade (three controllers, two workers), with a 2-replica Deployment under a
//! `minAvailable: 1` budget and a DaemonSet running throughout, every API server asked for its
//! version every half second:
//! - a Plan of the workers alone ends `Warning` with nothing signalled (kubelets would be newer
//!   than the API servers), naming the rule, the nodes and both versions;
//! - a v2 whose kube-apiserver cannot start: controller-0's trial fails naming it, controller-0
//!   runs v1.34.4 again, the Plan stops with no other node signalled, and the other two API
//!   servers answered throughout;
//! - the Plan to v2: each API server answers v1.35.4 after its turn, one controller at a time
//!   (at no round did two fail to answer; a version never goes back); no worker is signalled
//!   (in the Plan's status, which records a signal before it is sent) while an API server
//!   still answers v1.34.4; each controller-manager, scheduler and kubelet
//!   (`status.nodeInfo.kubeletVersion`) ends at v1.35.4; the budget held, the DaemonSet's
//!   containers kept their ids through the kubelets' restarts, nothing is left cordoned, and
//!   the Plan ends `Completed` and `Ready`; `k0s autopilot status` shows v1.35.4 for every
//!   node (the API servers', the kubelets').
//!
//! A v2 whose kubelet cannot start, on a worker whose controller already runs v1.35.4: the
//! trial fails naming the kubelet and its last lines, and the worker runs v1 and its v1.34.4
//! kubelet again, Ready, with the budget held and the DaemonSet's containers untouched.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::control_plane::{CURRENT, PREVIOUS};
use integration::http::FileServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;

use crate::real_nodes::{
    Sample, assert_same_agents, check_drained, create_workloads, daemon_pods, sample_web,
    wait_default_service_account, wait_workloads_ready,
};
use crate::real_nodes_run_by_k0s::broken_component_build;
use crate::support::*;
use integration::components::Set;

const CONTROLLERS: [&str; 3] = ["controller-0", "controller-1", "controller-2"];
const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// How often every API server is asked for its version during the run.
const VERSIONS_EVERY: Duration = Duration::from_millis(500);

/// How long one API server may take to answer `/version` before it counts as not serving.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the whole upgrade may take: three controllers one at a time (each restarts its
/// control plane), then two workers one at a time (each drained under the budget).
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(600);

/// What a node logs when it stops a component that an earlier process left running.
const LEFT_RUNNING: &str = "stopping the one a previous run left running";

/// The upgrade Plan's id.
const UPGRADE: &str = "kubernetes-v1-35";

/// How long a new binary's components get to be healthy in its trial boot.
const TRIAL_TIMEOUT: &str = "45s";

/// How long a refused v2 may take to end its Plan: its download, its trial's deadline and the
/// rollback.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(240);

#[tokio::test]
async fn a_plan_upgrades_kubernetes_on_real_nodes_controllers_first_one_at_a_time() {
    let (v2_bytes, sha) = v2_carrying_all_build();
    let server = FileServer::start(v2_bytes).await.unwrap();
    let Fleet { cluster, client, controllers, workers } =
        FleetBuilder::new("real-nodes-kubernetes-upgrade")
            .controllers(CONTROLLERS.len())
            .workers(&WORKERS)
            .real_workers()
            .kubernetes(PREVIOUS)
            .agents(Agents::Real)
            .controller_args(FAST_ELECTION)
            .controller_args(&["--trial-timeout", TRIAL_TIMEOUT])
            .worker_args(&["--trial-timeout", TRIAL_TIMEOUT])
            .start()
            .await
            .unwrap();
    let nodes = cluster.real_nodes().expect("the real nodes");
    let mut clients = Vec::new();
    for i in 0..CONTROLLERS.len() {
        clients.push(cluster.admin_client_at(i).await.unwrap());
    }

    // Everything runs v1.34.4: each API server, controller-manager and scheduler, each kubelet.
    for (i, client) in clients.iter().enumerate() {
        let version = client.apiserver_version().await.unwrap().git_version;
        assert_eq!(version, PREVIOUS.kubernetes, "{}'s API server", CONTROLLERS[i]);
    }
    wait_control_planes_at(&controllers, PREVIOUS.kubernetes).await.unwrap();
    wait_kubelets_at(&client, PREVIOUS.kubernetes).await.unwrap();

    // A 2-replica Deployment with a readiness probe under a budget that keeps one Ready, and
    // a DaemonSet on every worker.
    wait_default_service_account(&client).await.unwrap();
    create_workloads(&client).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_workloads_ready(&pods).await.unwrap();
    let agents_before = daemon_pods(&pods, "agent").await.unwrap();
    assert_eq!(agents_before.len(), WORKERS.len(), "one agent Pod per worker: {agents_before:?}");

    // Every API server's version every 500 ms, for the whole run: the refused Plans first,
    // then the upgrade.
    let rounds = Arc::new(Mutex::new(Vec::<Round>::new()));
    let server0 = clients[0].clone();
    let versions = tokio::spawn(sample_versions(clients, rounds.clone()));
    workers_first_is_refused(&client).await;
    a_broken_api_server_is_rolled_back(&client, &server0, &controllers, &rounds).await;

    // The web Pods every 200 ms through the upgrade. (While controller-0's API server was
    // down for its refused trial, the Nodes, whose kubelets talk to it alone, may have gone
    // NotReady: the upgrade starts once the workloads are Ready again.)
    wait_workloads_ready(&pods).await.unwrap();
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let sampler = tokio::spawn(sample_web(pods.clone(), samples.clone()));
    let update = update_to(
        V2,
        server.base_url(),
        &sha,
        Some(static_nodes(&CONTROLLERS, 1)),
        Some(static_nodes(&WORKERS, 1)),
    );
    create_plan(&client, &plan("autopilot", UPGRADE, vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan(&client, "autopilot", UPGRADE_TIMEOUT, "Completed", |p| {
        matches!(state(p), PlanStateType::Completed | PlanStateType::Warning)
    })
    .await
    .unwrap();
    sampler.abort();
    versions.abort();
    assert_eq!(state(&done), PlanStateType::Completed, "{}", status_yaml(&done));
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    assert_plan_ready(&done);

    // `k0s autopilot status` shows every node's Kubernetes: API servers and kubelets v1.35.4.
    assert_status_shows(&cluster, CURRENT.kubernetes).await;

    // The control plane moved one controller at a time, before any worker.
    check_rounds(&rounds.lock().unwrap_or_else(|p| p.into_inner()));
    wait_control_planes_at(&controllers, CURRENT.kubernetes).await.unwrap();

    // A passed trial stops what it started before it exits: the restarted node found none of
    // its components left running (controller-0's refused trial is stopped, so it may have).
    assert_nothing_left_running(controllers[1..].iter().chain(&workers));

    // Every kubelet runs v1.35.4 (the Node says so), every Node Ready and uncordoned.
    wait_kubelets_at(&client, CURRENT.kubernetes).await.unwrap();
    for worker in &workers {
        let name = worker.node_name();
        assert_eq!(binary_version(worker.binary_path()), V2, "{name} on disk");
        assert_eq!(node_cordon(&client, name).await.unwrap(), (false, false), "{name} uncordoned");
    }
    wait_nodes_ready(&client, &WORKERS).await.unwrap();

    // The budget held, and the DaemonSet's containers ran on through the kubelets' restarts.
    check_drained(&samples.lock().unwrap_or_else(|p| p.into_inner()).clone());
    assert_same_agents(nodes, &pods, &agents_before).await;
}

/// A Plan of the workers alone to v2 while every API server runs v1.34.4 (kubelets would be
/// newer than the API servers) ends `Warning` before anything is signalled, naming the rule,
/// the nodes and both versions.
async fn workers_first_is_refused(client: &kube::Client) {
    let (_, sha) = v2_carrying_all_build();
    let update = update_to(V2, "http://127.0.0.1:9", &sha, None, Some(static_nodes(&WORKERS, 1)));
    create_plan(client, &plan("autopilot", "workers-first", vec![k0s_command(update)]))
        .await
        .expect("the plan");
    let ended = wait_plan_state(client, "autopilot", PlanStateType::Warning)
        .await
        .expect("the plan refused");
    let refusal = command(&ended, 0).description.clone().unwrap_or_default();
    for part in ["worker-newer-than-controller", WORKERS[0], V2, "controller-0", "v1.34"] {
        assert!(refusal.contains(part), "the refusal names {part}: {refusal}");
    }
    for name in WORKERS {
        assert_eq!(target(&ended, 0, name).state, TargetState::SignalPending, "{name} signalled");
        let signal = node_signal(client, name).await.expect("the Node");
        assert!(signal.is_none(), "{name} carries a signal: {signal:?}");
    }
    delete_plan(client).await;
}

/// A v2 whose kubelet cannot start, for worker-0 alone: its trial fails naming the kubelet
/// and its last words, the node goes back to v1 and its kubelet v1.34.4, Ready; the
/// DaemonSet's containers run on.
async fn a_broken_kubelet_is_rolled_back(
    client: &kube::Client,
    pods: &Api<Pod>,
    agents_before: &BTreeMap<String, (String, BTreeSet<String>)>,
) {
    let payload = broken_component_build(Set::Worker, "kubelet", "this kubelet cannot start");
    let ended = refused(client, &payload, None, Some(static_nodes(&WORKERS[..1], 1))).await;
    let reason = target(&ended, 0, WORKERS[0]).reason.clone().unwrap_or_default();
    let v1 = k0s_version_carrying(PREVIOUS);
    assert!(reason.starts_with(&format!("rolled back to {v1}: ")), "{reason}");
    assert!(reason.contains("kubelet is not running"), "{reason}");
    assert!(reason.contains("this kubelet cannot start"), "the kubelet's own words: {reason}");
    wait_kubelets_at(client, PREVIOUS.kubernetes).await.expect("the v1.34.4 kubelet back");
    wait_nodes_ready(client, &WORKERS).await.expect("the workers Ready");
    let agents = daemon_pods(pods, "agent").await.expect("the agent Pods");
    assert_eq!(&agents, agents_before, "the agent Pods and containers are the same");
}

/// A v2 whose kube-apiserver cannot start, for every node: controller-0's trial fails naming
/// the API server, it goes back to v1 (its API server answers v1.34.4 again), the Plan stops
/// with no other node signalled, and the other two API servers answered throughout.
async fn a_broken_api_server_is_rolled_back(
    client: &kube::Client,
    server0: &kube::Client,
    controllers: &[integration::K0sProcess],
    rounds: &Mutex<Vec<Round>>,
) {
    let payload =
        broken_component_build(Set::All, "kube-apiserver", "this kube-apiserver cannot start");
    let from = rounds.lock().unwrap_or_else(|p| p.into_inner()).len();
    let ended = refused(
        client,
        &payload,
        Some(static_nodes(&CONTROLLERS, 1)),
        Some(static_nodes(&WORKERS, 1)),
    )
    .await;
    let reason = target(&ended, 0, CONTROLLERS[0]).reason.clone().unwrap_or_default();
    assert!(reason.contains("kube-apiserver"), "{reason}");
    assert!(reason.contains("this kube-apiserver cannot start"), "its own words: {reason}");
    for name in CONTROLLERS[1..].iter().chain(&WORKERS) {
        assert_eq!(target(&ended, 0, name).state, TargetState::SignalPending, "{name} signalled");
    }
    let back = version_once_serving(server0).await.expect("controller-0 serving");
    assert_eq!(back, PREVIOUS.kubernetes, "controller-0's API server after its rollback");
    wait_control_planes_at(controllers, PREVIOUS.kubernetes).await.expect("v1.34.4 back");
    let rounds = rounds.lock().unwrap_or_else(|p| p.into_inner());
    assert!(rounds.len() > from + 10, "the API servers were sampled through the refusal");
    for round in &rounds[from..] {
        assert!(round.versions[1..].iter().all(Result::is_ok), "controllers 1, 2 serve: {round:?}");
    }
}

/// A v2 whose kubelet cannot start, on a real worker whose controller already runs v1.35.4: the
/// worker's trial fails naming the kubelet and its last lines, the worker goes back to v1 and
/// its kubelet v1.34.4 (the Node Ready on it), the budget holds and the DaemonSet's containers
/// run on.
#[tokio::test]
async fn a_v2_whose_kubelet_cannot_start_leaves_the_real_worker_on_its_v1_34_kubelet() {
    let (v2_bytes, sha) = v2_carrying_all_build();
    let server = FileServer::start(v2_bytes).await.unwrap();
    let Fleet { cluster: _cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("real-nodes-kubelet-rollback")
            .workers(&WORKERS)
            .real_workers()
            .kubernetes(PREVIOUS)
            .agents(Agents::Real)
            .controller_args(&["--trial-timeout", TRIAL_TIMEOUT])
            .worker_args(&["--trial-timeout", TRIAL_TIMEOUT])
            .start()
            .await
            .unwrap();
    wait_default_service_account(&client).await.unwrap();
    create_workloads(&client).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_workloads_ready(&pods).await.unwrap();
    let agents_before = daemon_pods(&pods, "agent").await.unwrap();

    // The controller first (a kubelet is never newer than its API server).
    let update =
        update_to(V2, server.base_url(), &sha, Some(static_nodes(&["controller-0"], 1)), None);
    create_plan(&client, &plan("autopilot", "controller", vec![k0s_command(update)]))
        .await
        .unwrap();
    wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    delete_plan(&client).await;
    wait_control_planes_at(&controllers, CURRENT.kubernetes).await.unwrap();

    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let sampler = tokio::spawn(sample_web(pods.clone(), samples.clone()));
    a_broken_kubelet_is_rolled_back(&client, &pods, &agents_before).await;
    sampler.abort();
    let samples = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(samples.len() > 10, "the web Pods were sampled: {}", samples.len());
    let empty = samples.iter().filter(|s| s.ready.is_empty()).count();
    assert_eq!(empty, 0, "no web Pod Ready at {empty} of {} samples", samples.len());
}

/// Runs a Plan to V2 with `payload` on `controllers` and `workers`, waits for it to fail, and
/// deletes it again; the Plan as it ended.
async fn refused(
    client: &kube::Client,
    payload: &[u8],
    controllers: Option<autopilot_api::v1beta2::PlanCommandTarget>,
    workers: Option<autopilot_api::v1beta2::PlanCommandTarget>,
) -> Plan {
    let server = FileServer::start(payload.to_vec()).await.expect("the file server");
    let update = update_to(V2, server.base_url(), &sha256_hex(payload), controllers, workers);
    create_plan(client, &plan("autopilot", "refused", vec![k0s_command(update)]))
        .await
        .expect("the plan");
    let ended = wait_plan(client, "autopilot", REFUSAL_TIMEOUT, "ApplyFailed", |p| {
        state(p) == PlanStateType::ApplyFailed
    })
    .await
    .expect("the plan failed");
    delete_plan(client).await;
    ended
}

/// What the API server of `server` answers on `/version` once it answers (within two
/// minutes: a controller rolled back starts its control plane again).
async fn version_once_serving(server: &kube::Client) -> anyhow::Result<String> {
    integration::wait_for(Duration::from_secs(120), "the API server answering", || async {
        Ok(server.apiserver_version().await.ok().map(|info| info.git_version))
    })
    .await
}

/// One look at the cluster during the run.
#[derive(Debug, Clone)]
struct Round {
    /// The workers the Plan's status shows signalled (read first).
    signalled: Vec<String>,
    /// What each API server answered on `/version`, in controller order (read after).
    versions: Vec<Result<String, String>>,
}

/// Every [`VERSIONS_EVERY`]: the workers the Plan shows signalled, then every API server's
/// `/version` (concurrently, each within [`VERSION_TIMEOUT`]), until aborted.
async fn sample_versions(servers: Vec<kube::Client>, rounds: Arc<Mutex<Vec<Round>>>) {
    loop {
        // The Plan through the first API server that serves it (each restarts once); a round
        // where none does is left out.
        if let Some(plan) = read_plan(&servers).await {
            let signalled = signalled_workers(&plan);
            let asked = servers.iter().map(|server| async move {
                match tokio::time::timeout(VERSION_TIMEOUT, server.apiserver_version()).await {
                    Ok(Ok(info)) => Ok(info.git_version),
                    Ok(Err(err)) => Err(err.to_string()),
                    Err(_) => Err(format!("no answer within {VERSION_TIMEOUT:?}")),
                }
            });
            let versions = futures::future::join_all(asked).await;
            rounds.lock().unwrap_or_else(|p| p.into_inner()).push(Round { signalled, versions });
        }
        tokio::time::sleep(VERSIONS_EVERY).await;
    }
}

/// The Plan as the first of `servers` that answers within [`VERSION_TIMEOUT`] serves it.
async fn read_plan(servers: &[kube::Client]) -> Option<Plan> {
    for server in servers {
        let plans: Api<Plan> = Api::all(server.clone());
        if let Ok(Ok(Some(plan))) =
            tokio::time::timeout(VERSION_TIMEOUT, plans.get_opt("autopilot")).await
        {
            return Some(plan);
        }
    }
    None
}

/// The workers of command 0 that the leader has signalled (or recorded as about to be).
fn signalled_workers(plan: &Plan) -> Vec<String> {
    let Some(update) =
        plan.status.as_ref().and_then(|s| s.commands.first()).and_then(|c| c.k0supdate.as_ref())
    else {
        return Vec::new();
    };
    update
        .workers
        .iter()
        .filter(|t| t.state != TargetState::SignalPending)
        .map(|t| t.name.clone())
        .collect()
}

/// The control plane moved one controller at a time and before any worker: at no round did
/// two API servers fail to answer; no API server's version went back; no worker was signalled
/// while an API server answered v1.34.4; each API server answered v1.35.4 by the end, and
/// v1.34.4 at the start.
fn check_rounds(rounds: &[Round]) {
    assert!(rounds.len() > 20, "the versions were sampled through the run: {}", rounds.len());
    for round in rounds {
        let down = round.versions.iter().filter(|v| v.is_err()).count();
        assert!(down <= 1, "two API servers not serving at once: {round:?}");
        let old = round.versions.iter().any(|v| v.as_deref() == Ok(PREVIOUS.kubernetes));
        assert!(
            round.signalled.is_empty() || !old,
            "workers {:?} signalled while an API server runs {}: {round:?}",
            round.signalled,
            PREVIOUS.kubernetes
        );
    }
    for (i, name) in CONTROLLERS.iter().enumerate() {
        let down = rounds.iter().filter(|r| r.versions[i].is_err()).count();
        let moved = rounds.iter().position(|r| r.versions[i].as_deref() == Ok(CURRENT.kubernetes));
        println!(
            "{name}: not serving at {down} of {} rounds, first at v1.35 at round {moved:?}",
            rounds.len()
        );
        let answered: Vec<&str> =
            rounds.iter().filter_map(|r| r.versions[i].as_deref().ok()).collect();
        let moved = answered.iter().position(|v| *v == CURRENT.kubernetes);
        assert_eq!(answered.first(), Some(&PREVIOUS.kubernetes), "{name} at first");
        let moved = moved.unwrap_or_else(|| panic!("{name} never answered {}", CURRENT.kubernetes));
        assert!(
            answered[moved..].iter().all(|v| *v == CURRENT.kubernetes),
            "{name}'s version went back: {answered:?}"
        );
        assert!(
            answered[..moved].iter().all(|v| *v == PREVIOUS.kubernetes),
            "{name} answered another version: {answered:?}"
        );
    }
}

/// `k0s autopilot status -o json` shows `version` in every node's `kubernetes`.
async fn assert_status_shows(cluster: &integration::Cluster, version: &str) {
    let status = crate::cli_status::status_json(&cluster.admin_kubeconfig(0)).await;
    let shown: Vec<(&str, &str)> = status["nodes"]
        .as_array()
        .expect("the status's nodes")
        .iter()
        .map(|n| (n["name"].as_str().unwrap_or_default(), n["kubernetes"].as_str().unwrap_or("-")))
        .collect();
    let expected: Vec<(&str, &str)> =
        CONTROLLERS.iter().chain(&WORKERS).map(|n| (*n, version)).collect();
    assert_eq!(shown, expected, "the status's KUBERNETES column");
}

/// None of `nodes` logged stopping a component an earlier process left running.
fn assert_nothing_left_running<'a>(nodes: impl Iterator<Item = &'a integration::K0sProcess>) {
    for node in nodes {
        let log = node.log();
        assert!(
            !log.contains(LEFT_RUNNING),
            "{}'s trial left components running:\n{log}",
            node.node_name()
        );
    }
}

/// The Plan's `Ready` condition is `True`.
fn assert_plan_ready(plan: &Plan) {
    let conditions = plan.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let ready = conditions.iter().find(|c| c.type_ == "Ready");
    assert!(ready.is_some_and(|c| c.status == "True"), "Ready: {}", status_yaml(plan));
}

/// Every worker Node's kubelet reports `version` (within a minute: a restarted kubelet
/// updates its Node's status).
async fn wait_kubelets_at(client: &kube::Client, version: &str) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    integration::wait_for(Duration::from_secs(60), &format!("every kubelet at {version}"), || {
        let nodes = nodes.clone();
        async move {
            let mut reported = BTreeMap::new();
            for name in WORKERS {
                let node = nodes.get(name).await?;
                let kubelet = node.status.and_then(|s| s.node_info).map(|i| i.kubelet_version);
                reported.insert(name, kubelet);
            }
            Ok(reported.values().all(|v| v.as_deref() == Some(version)).then_some(()))
        }
    })
    .await
}

/// Each controller's controller-manager and scheduler run from its staged components and
/// report `version` (within a minute: either may be restarting, e.g. after losing its leader
/// election while an API server restarted).
async fn wait_control_planes_at(
    controllers: &[integration::K0sProcess],
    version: &str,
) -> anyhow::Result<()> {
    let expected = format!("Kubernetes {version}");
    let what = format!("every controller-manager and scheduler at {version}");
    integration::wait_for(Duration::from_secs(60), &what, || async {
        for controller in controllers {
            for component in ["kube-controller-manager", "kube-scheduler"] {
                let reported = running_component_version(controller.data_dir(), component);
                if reported.as_deref() != Some(expected.as_str()) {
                    return Ok(None);
                }
            }
        }
        Ok(Some(()))
    })
    .await
}

/// What `<component> --version` prints for the process running `<data_dir>/bin/<component>`
/// (through `/proc/<pid>/exe`: the file it was started from, even once replaced), if one runs.
fn running_component_version(data_dir: &Path, component: &str) -> Option<String> {
    let staged = data_dir.join("bin").join(component);
    let pid = std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let exe = std::fs::read_link(entry.path().join("exe")).ok()?;
        let exe = exe.to_str()?.trim_end_matches(" (deleted)");
        (Path::new(exe) == staged).then_some(pid)
    })?;
    let output = std::process::Command::new(format!("/proc/{pid}/exe")).arg("--version").output();
    Some(String::from_utf8_lossy(&output.ok()?.stdout).trim().to_owned())
}
