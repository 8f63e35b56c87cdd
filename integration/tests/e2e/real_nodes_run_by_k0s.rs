//! A real node whose containerd and kubelet `k0s worker --run-components` runs, from the
//! components its binary carries ([`integration::components`]): staged by digest, supervised
//! (a killed kubelet is started again), taken back by a restarted `k0s` (a SIGKILLed one
//! leaves them running), stopped with `k0s`, and the containers outlive all of it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use integration::components::{self, Set};
use integration::real_node::{RealNodes, workload};
use integration::{K0sProcess, wait_for};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::real_nodes::{WORKLOAD_TIMEOUT, daemon_pods, wait_default_service_account};
use crate::support::*;

const NODE: &str = "worker-0";

/// How long `k0s` may take to have a SIGKILLed kubelet running and the Node Ready again.
const KUBELET_BACK: Duration = Duration::from_secs(30);

#[tokio::test]
async fn k0s_runs_the_real_nodes_kubelet_restarts_it_and_takes_it_back_after_its_own_kill() {
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("real-nodes-k0s")
            .workers(&[NODE])
            .unstarted_controllers()
            .unstarted_workers()
            .start()
            .await
            .unwrap();
    let nodes = RealNodes::start_for_k0s(&cluster, &[NODE]).await.unwrap();
    let bare = tokio::task::spawn_blocking(integration::k0s_binary).await.unwrap().unwrap();
    let carrying = components::carrying(&bare, Set::Worker).unwrap();
    let command = nodes.k0s_worker(cluster.k0s_worker_on_kubelet(NODE).binary(&carrying)).unwrap();
    let mut worker = command.spawn().await.unwrap();
    nodes.wait_k0s_node(&cluster, &worker).await.unwrap();

    // The kubelet that owns the Node is the carried one, staged by digest.
    let nodes_api: Api<Node> = Api::all(client.clone());
    assert_staged_as_listed(&worker, &nodes_api).await;

    // A DaemonSet's Pod runs on the node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let before = agent_daemon_set(&client, &pods).await;
    let (_, ids) = &before[NODE];
    let shims = nodes.shim_pids(NODE).unwrap();
    assert!(!shims.is_empty(), "the Pod's shim runs");

    // The kubelet is SIGKILLed: k0s starts it again and the Node reports Ready from it
    // within 30 s; the containers never noticed.
    let kubelet = nodes.kubelet_pid(NODE).unwrap().expect("the kubelet runs");
    let killed = jiff::Timestamp::now();
    let started = Instant::now();
    kill(Pid::from_raw(kubelet as i32), Signal::SIGKILL).unwrap();
    wait_kubelet_back(&nodes, &nodes_api, kubelet, killed, KUBELET_BACK).await;
    println!("kubelet SIGKILLed: running again and the Node Ready after {:?}", started.elapsed());
    assert!(worker.log().contains("exited; restarting"), "k0s logged the kubelet's exit");
    assert_same_containers(&nodes, &pods, &before).await;

    // k0s itself is SIGKILLed (its kubelet and containerd stay behind) and started again as a
    // unit would: it stops the ones it left and runs its own, and the containers stay.
    let kubelet = nodes.kubelet_pid(NODE).unwrap().expect("the kubelet runs");
    let containerd = nodes.containerd_pid(NODE).unwrap().expect("containerd runs");
    worker.kill().unwrap();
    worker.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert!(alive(kubelet) && alive(containerd), "a SIGKILLed k0s leaves its components running");
    let killed = jiff::Timestamp::now();
    worker.restart().await.unwrap();
    wait_kubelet_back(&nodes, &nodes_api, kubelet, killed, WORKLOAD_TIMEOUT).await;
    wait_for(Duration::from_secs(10), "the components the killed k0s left to be gone", || async {
        Ok((!alive(kubelet) && !alive(containerd)).then_some(()))
    })
    .await
    .unwrap();
    let new_containerd = nodes.containerd_pid(NODE).unwrap().expect("containerd runs");
    assert_ne!(new_containerd, containerd, "the restarted k0s runs its own containerd");
    assert!(
        worker.log().contains("stopping the one a previous run left running"),
        "{}",
        worker.log_tail(40)
    );
    assert_same_containers(&nodes, &pods, &before).await;
    for shim in &shims {
        assert!(alive(*shim), "shim {shim} kept running");
    }

    // k0s stopped (SIGTERM): it stops the kubelet and containerd, not the containers.
    let kubelet = nodes.kubelet_pid(NODE).unwrap().expect("the kubelet runs");
    let status = worker.stop(Duration::from_secs(20)).await.unwrap();
    assert!(status.success(), "k0s stopped cleanly: {status}");
    assert!(!alive(kubelet) && !alive(new_containerd), "k0s stopped its components");
    assert_eq!(nodes.kubelet_pid(NODE).unwrap(), None);
    for shim in &shims {
        assert!(alive(*shim), "shim {shim} (the Pod's containers) outlives k0s");
    }
    assert!(!ids.is_empty());

    // Dropping the nodes removes what the k0s-run containerd and kubelet made too.
    let leftovers = nodes.leftovers();
    drop(nodes);
    let left = leftovers.find().await;
    assert!(left.is_empty(), "the nodes run by k0s left behind: {left:#?}");
}

/// `k0s components` lists what `sha256sum` finds on the staged files and what the pinned
/// builds are, and the Node's kubelet reports the listed version.
async fn assert_staged_as_listed(worker: &K0sProcess, nodes_api: &Api<Node>) {
    let listed = listed_components(worker);
    let pinned = components::pinned(Set::Worker).expect("the pinned set");
    assert_eq!(listed.len(), pinned.len(), "{listed:?}");
    for component in &pinned {
        let staged = worker.data_dir().join("bin").join(component.name);
        let (listed_version, listed_sha) = &listed[component.name];
        assert_eq!(listed_version, component.version);
        assert_eq!(*listed_sha, sha256sum(&staged), "{} as staged", component.name);
        assert_eq!(*listed_sha, sha256sum(&component.path), "{} as built", component.name);
    }
    let node = nodes_api.get(NODE).await.expect("the Node");
    let info = node.status.and_then(|s| s.node_info).expect("the Node's info");
    assert_eq!(info.kubelet_version, listed["kubelet"].0, "the Node's kubelet is the carried one");
}

/// `k0s components -o json` of the worker's binary: version and sha256 by name.
fn listed_components(worker: &K0sProcess) -> BTreeMap<String, (String, String)> {
    let output = integration::run_k0s_binary(
        worker.binary_path(),
        &["components", "-o", "json"],
        integration::k0s::RUN_K0S_TIMEOUT,
    )
    .expect("k0s components");
    assert!(output.status.success(), "{output:?}");
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    doc["components"]
        .as_array()
        .expect("a list of components")
        .iter()
        .map(|c| {
            let text = |key: &str| c[key].as_str().expect(key).to_owned();
            (text("name"), (text("version"), text("sha256")))
        })
        .collect()
}

/// What `sha256sum` says of `path`.
fn sha256sum(path: &std::path::Path) -> String {
    let output = std::process::Command::new("sha256sum").arg(path).output().expect("sha256sum");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    text.split_whitespace().next().expect("a digest").to_owned()
}

/// Whether process `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

/// Waits until a kubelet other than `old` runs on the node and the Node's Ready condition
/// was reported True at or after `since` (by that kubelet; the API keeps whole seconds).
async fn wait_kubelet_back(
    nodes: &RealNodes,
    api: &Api<Node>,
    old: u32,
    since: jiff::Timestamp,
    within: Duration,
) {
    let since = since
        .round(
            jiff::TimestampRound::new().smallest(jiff::Unit::Second).mode(jiff::RoundMode::Trunc),
        )
        .expect("a whole second");
    wait_for(within, "a new kubelet, and the Node Ready from it", || async {
        let Some(pid) = nodes.kubelet_pid(NODE)? else { return Ok(None) };
        if pid == old {
            return Ok(None);
        }
        let node = api.get(NODE).await?;
        let fresh = node.status.and_then(|s| s.conditions).is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.type_ == "Ready"
                    && c.status == "True"
                    && c.last_heartbeat_time.as_ref().is_some_and(|t| t.0 >= since)
            })
        });
        Ok(fresh.then_some(()))
    })
    .await
    .expect("the kubelet back");
}

/// The DaemonSet's Pod is the one of `before`: same UID, same containers, no restart, and
/// containerd still runs them.
async fn assert_same_containers(
    nodes: &RealNodes,
    pods: &Api<Pod>,
    before: &BTreeMap<String, (String, std::collections::BTreeSet<String>)>,
) {
    let after = daemon_pods(pods, "agent").await.expect("the agent Pods");
    assert_eq!(&after, before, "same Pod, same containers, no restarts");
    let running = nodes.running_containers(NODE).expect("containerd's containers");
    for id in &before[NODE].1 {
        assert!(running.contains(id), "container {id} still runs: {running:?}");
    }
}

/// Three controllers whose kube-apiserver, kube-controller-manager and kube-scheduler `k0s
/// controller --run-components` runs against the harness's etcd, from the carried set: each
/// API server reports the carried version, the controller-managers and schedulers elect a
/// leader, a killed API server is started again and answers `/readyz`, and a real worker run
/// by `k0s worker` gets its DaemonSet Pod (made by the k0s-run controller-manager, placed by
/// the k0s-run scheduler).
#[tokio::test]
async fn k0s_controllers_run_the_control_plane_and_restart_a_killed_api_server() {
    let bare = tokio::task::spawn_blocking(integration::k0s_binary).await.unwrap().unwrap();
    let carrying = components::carrying(&bare, Set::All).unwrap();
    let cluster = integration::ClusterBuilder::new("real-nodes-k0s-control-plane")
        .controllers(3)
        .workers(&[NODE])
        .k0s_binary(&carrying)
        .control_plane_run_by_k0s()
        .build()
        .await
        .unwrap();
    let controllers = cluster.start_k0s_control_plane(&[]).await.unwrap();
    let client = cluster.admin_client().await.unwrap();

    // Each API server is the carried one.
    let listed = listed_components(&controllers[0]);
    for (i, controller) in controllers.iter().enumerate() {
        let version = cluster.admin_client_at(i).await.unwrap().apiserver_version().await.unwrap();
        assert_eq!(version.git_version, listed["kube-apiserver"].0, "API server {i}");
        let staged = controller.data_dir().join("bin/kube-apiserver");
        assert_eq!(sha256sum(&staged), listed["kube-apiserver"].1, "controller-{i}'s staged file");
    }

    // The controller-managers and the schedulers elect one leader each; the autopilot of
    // every controller registered its ControlNode once its access was applied.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-system");
    for name in ["kube-controller-manager", "kube-scheduler"] {
        wait_for(WORKLOAD_TIMEOUT, &format!("a {name} leader"), || async {
            let lease = leases.get_opt(name).await?;
            Ok(lease.and_then(|l| l.spec?.holder_identity).filter(|h| !h.is_empty()))
        })
        .await
        .unwrap();
    }
    let control_nodes: Api<autopilot_api::v1beta2::ControlNode> = Api::all(client.clone());
    wait_for(WORKLOAD_TIMEOUT, "the three ControlNodes", || async {
        Ok((control_nodes.list(&Default::default()).await?.items.len() == 3).then_some(()))
    })
    .await
    .unwrap();

    // Controller 1's API server is SIGKILLed: k0s starts it again and it answers /readyz.
    let pid_file = controllers[1].data_dir().join("run/kube-apiserver.pid");
    let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let started = Instant::now();
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    wait_for(Duration::from_secs(60), "a new kube-apiserver on controller-1", || async {
        let now =
            std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse::<u32>().ok());
        Ok(now.filter(|now| *now != pid && alive(*now)).map(|_| ()))
    })
    .await
    .unwrap();
    cluster.wait_apiserver_ready(1).await.unwrap();
    println!("kube-apiserver SIGKILLed: answering /readyz again after {:?}", started.elapsed());

    // A real worker run by k0s gets its DaemonSet Pod from the k0s-run control plane.
    let nodes = RealNodes::start_for_k0s(&cluster, &[NODE]).await.unwrap();
    let worker =
        nodes.k0s_worker(cluster.k0s_worker_on_kubelet(NODE)).unwrap().spawn().await.unwrap();
    nodes.wait_k0s_node(&cluster, &worker).await.unwrap();
    wait_default_service_account(&client).await.unwrap();
    workload::daemon_set(&client, "agent").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_for(WORKLOAD_TIMEOUT, "the agent Pod Ready on the real worker", || async {
        let all = pods.list(&Default::default()).await?.items;
        Ok(all.iter().any(workload::pod_ready).then_some(()))
    })
    .await
    .unwrap();
    drop(worker);
    drop(nodes);
    drop(controllers);
}

/// A real worker whose containerd and kubelet `k0s` runs, updated by Plans: a v2 whose
/// carried kubelet cannot start fails its trial boot (the kubelet's own last lines in the
/// reason) and the node goes back to v1 with its kubelet running again; a v2 with a working
/// set passes its trial only once its kubelet runs the carried version and the Node is Ready,
/// and the DaemonSet's containers run on through both.
#[tokio::test]
async fn a_k0s_run_worker_takes_a_good_update_and_refuses_a_broken_kubelet() {
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("real-nodes-k0s-update")
            .workers(&[NODE])
            .unstarted_workers()
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let nodes = RealNodes::start_for_k0s(&cluster, &[NODE]).await.unwrap();
    let bare = tokio::task::spawn_blocking(integration::k0s_binary).await.unwrap().unwrap();
    let v1_binary = components::carrying(&bare, Set::Worker).unwrap();
    let command =
        cluster.k0s_worker_on_kubelet(NODE).binary(&v1_binary).args(["--trial-timeout", "30s"]);
    let worker = nodes.k0s_worker(command).unwrap().spawn().await.unwrap();
    nodes.wait_k0s_node(&cluster, &worker).await.unwrap();
    let v1 = binary_version(worker.binary_path());
    wait_node_version(&client, NODE, &v1).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let before = agent_daemon_set(&client, &pods).await;

    // v2 with a kubelet that cannot start: refused at its trial, v1 back, its kubelet too.
    let broken = broken_kubelet_build();
    let reason = update_fails(&client, &nodes, &broken).await;
    assert!(reason.starts_with(&format!("rolled back to {v1}: ")), "{reason}");
    assert!(reason.contains("kubelet is not running"), "{reason}");
    assert!(reason.contains("this kubelet cannot start"), "the kubelet's own words: {reason}");
    assert_eq!(binary_version(worker.binary_path()), v1);
    wait_for(WORKLOAD_TIMEOUT, "the v1 kubelet back and the Node Ready", || async {
        let node = Api::<Node>::all(client.clone()).get(NODE).await?;
        Ok((workload::node_ready(&node) && nodes.kubelet_pid(NODE)?.is_some()).then_some(()))
    })
    .await
    .unwrap();
    assert_same_containers(&nodes, &pods, &before).await;

    // v2 with the working set: its trial sees its kubelet healthy, and it runs.
    let (v2_bytes, sha) = v2_carrying_build();
    let server = integration::http::FileServer::start(v2_bytes).await.unwrap();
    nodes.forward_into_namespace(address_of(&server)).unwrap();
    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&[NODE], 1)));
    create_plan(&client, &plan("autopilot", "good", vec![k0s_command(update)])).await.unwrap();
    wait_plan_state(&client, "autopilot", autopilot_api::v1beta2::PlanStateType::Completed)
        .await
        .unwrap();
    assert_eq!(binary_version(worker.binary_path()), V2);
    wait_node_version(&client, NODE, V2).await.unwrap();
    assert!(worker.log().contains("trial boot healthy"), "the trial passed");
    assert!(
        worker.log().contains("containerd and the kubelet are healthy"),
        "the trial judged the components"
    );
    assert_same_containers(&nodes, &pods, &before).await;
    drop(worker);
    drop(nodes);
}

/// Creates the DaemonSet `agent` and waits for its Pod Ready on [`NODE`]; its Pods by node.
async fn agent_daemon_set(
    client: &kube::Client,
    pods: &Api<Pod>,
) -> BTreeMap<String, (String, std::collections::BTreeSet<String>)> {
    wait_default_service_account(client).await.expect("the default ServiceAccount");
    workload::daemon_set(client, "agent").await.expect("the DaemonSet");
    wait_for(WORKLOAD_TIMEOUT, "the agent Pod Ready", || async {
        let agents = daemon_pods(pods, "agent").await?;
        let ready = pods.list(&Default::default()).await?.items.iter().any(workload::pod_ready);
        Ok(agents.get(NODE).filter(|(_, ids)| ready && !ids.is_empty()).map(|_| agents.clone()))
    })
    .await
    .expect("the agent Pod Ready")
}

/// The address of a loopback file server (`http://127.0.0.1:<port>`).
fn address_of(server: &integration::http::FileServer) -> std::net::SocketAddr {
    let base = server.base_url();
    base.trim_start_matches("http://").parse().unwrap_or_else(|_| panic!("{base}"))
}

/// The V2 build carrying the real containerd and shim but a kubelet that cannot start.
fn broken_kubelet_build() -> Vec<u8> {
    broken_component_build(Set::Worker, "kubelet", "this kubelet cannot start")
}

/// The V2 build carrying `set` (at the current release) with `component` replaced by one that
/// answers `--version` as the real one does and otherwise says `words` on stderr and exits 1.
pub(crate) fn broken_component_build(set: Set, component: &str, words: &str) -> Vec<u8> {
    let bare = integration::k0s_binary_with_version(V2).expect("the v2 build");
    let dir = tempfile::tempdir().expect("a directory");
    let broken = dir.path().join(component);
    let version = integration::control_plane::CURRENT.kubernetes;
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Kubernetes {version}'; exit 0; fi\n\
         echo '{words}' >&2\nexit 1\n"
    );
    std::fs::write(&broken, script).expect("the broken component");
    let pinned = components::pinned(set).expect("the pinned set");
    let sources: Vec<k0s_components::carried::Source<'_>> = pinned
        .iter()
        .map(|p| k0s_components::carried::Source {
            name: p.name,
            version: p.version,
            path: if p.name == component { &broken } else { &p.path },
        })
        .collect();
    let out = dir.path().join("k0s");
    k0s_components::carried::pack(&bare, &sources, &out).expect("packing");
    std::fs::read(&out).expect("the packed build")
}

/// Runs a Plan to V2 with `payload` on the node and waits for it to fail; the node's reason.
async fn update_fails(client: &kube::Client, nodes: &RealNodes, payload: &[u8]) -> String {
    let sha = sha256_hex(payload);
    let server = integration::http::FileServer::start(payload.to_vec()).await.expect("server");
    nodes.forward_into_namespace(address_of(&server)).expect("forwarding");
    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&[NODE], 1)));
    create_plan(client, &plan("autopilot", "broken", vec![k0s_command(update)]))
        .await
        .expect("plan");
    let failed =
        wait_plan_state(client, "autopilot", autopilot_api::v1beta2::PlanStateType::ApplyFailed)
            .await
            .expect("the plan fails");
    let reason = target(&failed, 0, NODE).reason.clone().unwrap_or_default();
    delete_plan(client).await;
    reason
}
