//! The post-update watch never ends worse than the failure it guards against (issue 46), with
//! a real control plane and three real workers under `--restart exit`, a 90 s
//! `--post-update-watch` and a restarting supervisor that runs the units' `ExecStartPre`
//! guard (the harness's [`integration::Supervised`]):
//! 1. a `forceupdate` that reinstalls worker-0's own version (the same bytes), then three
//!    SIGKILLs in its window: the guard's rollback finds `k0s.prev` with the same bytes and
//!    only reports it; `k0s` and `k0s.prev` stay executable and the worker keeps starting;
//! 2. worker-2 updated to v2 and then put back by a fleet rollback (`k0s autopilot rollback`):
//!    the rollback's binary gets no watch, so nothing can put back the version the operator
//!    removed;
//! 3. worker-1 updated to v2, and the API server killed the moment its plan completes, for
//!    longer than the window: the outage counts for nothing, worker-1 stays on v2 with its
//!    signal `Completed` and is proven once the API server is back; worker-2 stays on v1.
//!
//! And a datastore outage proves nothing (issue 57): etcd stopped right after an update, the
//! API server still answering `/version` and the agent's watch open, for longer than the
//! minute healthy that proves a binary and than the window: the watch counts no time and is
//! not proven while etcd is away, and is proven (by a write of its own read back) once etcd
//! is back.

use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::PlanStateType;
use autopilot_signal::host::{RestartMarker, WatchRecord, WatchState};
use integration::http::FileServer;
use integration::{Supervised, wait_for};
use k8s_openapi::api::core::v1::{Event, Node};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};
use nix::sys::signal::Signal;

use crate::plan_rollback::k0s_autopilot;
use crate::support::*;
use crate::update_post_watch::last_heartbeat;

/// The window of the post-update watch, counted while the API server answers.
const WINDOW: &str = "90s";

/// How long the API server stays away: longer than the window.
const OUTAGE: Duration = Duration::from_secs(100);

/// How long a supervised worker may take to start again after an exit.
const RESTART_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test]
async fn outages_reinstalls_and_fleet_rollbacks_never_end_worse_than_the_failure() {
    let Fleet { cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("update-post-watch-outage")
            .controllers(1)
            .workers(&["worker-0", "worker-1", "worker-2"])
            .agents(Agents::Real)
            .worker_args(&["--restart", "exit", "--post-update-watch", WINDOW])
            .start()
            .await
            .unwrap();
    let v1 = binary_version(workers[0].binary_path());
    let v1_bytes = std::fs::read(workers[0].binary_path()).unwrap();
    let workers: Vec<Supervised> =
        workers.into_iter().map(|w| w.supervise(Duration::from_secs(1))).collect();

    reinstall_then_three_sigkills(&client, &workers[0], &v1, &v1_bytes).await;
    delete_plan(&client).await;

    let (v2_bytes, sha) = v2_build();
    let server = FileServer::start(v2_bytes).await.unwrap();
    update_then_fleet_rollback(&cluster, &client, &workers[2], server.base_url(), &sha, &v1).await;
    delete_plan(&client).await;

    update_then_outage(&cluster, &client, &workers[1], server.base_url(), &sha).await;
    // worker-2 stays on the version it was rolled back to, with no watch to undo it.
    let client = cluster.admin_client().await.unwrap();
    let worker_2 = workers[2].process();
    assert_eq!(version_on_disk(worker_2), v1, "worker-2 stays on v1 after the outage");
    wait_node_version(&client, "worker-2", &v1).await.unwrap();
    assert_eq!(watch_state(worker_2), None, "no watch on worker-2 after its fleet rollback");
    assert!(!worker_2.log_tail(400).contains("rolling back to the previous binary"));
    for name in ["worker-0", "worker-1", "worker-2"] {
        let (cordoned, marked) = node_cordon(&client, name).await.unwrap();
        assert!(!cordoned && !marked, "{name}: nothing cordoned is left");
    }
}

#[tokio::test]
async fn an_etcd_outage_right_after_an_update_proves_nothing_and_rolls_nothing_back() {
    let Fleet { cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("update-post-watch-etcd")
            .controllers(1)
            .workers(&["worker-1"])
            .agents(Agents::Real)
            .worker_args(&["--restart", "exit", "--post-update-watch", WINDOW])
            .start()
            .await
            .unwrap();
    let worker = workers.into_iter().next().expect("worker-1").supervise(Duration::from_secs(1));
    let node = worker.process();
    let (v2_bytes, sha) = v2_build();
    let server = FileServer::start(v2_bytes).await.unwrap();
    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&["worker-1"], 1)));
    create_plan(&client, &plan("autopilot", "etcd-outage", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    wait_plan_state(&client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan ends as expected");
    assert_eq!(watch_state(node), Some(WatchState::Watching), "v2 is watched");
    let exits = worker.exits().len();
    cluster.stop_etcd().await.expect("stopping etcd");
    let down = Instant::now();
    let counted_at_stop = watch_of(node).map(|w| w.answered_secs).unwrap_or_default();
    // Nothing to wait for but the clock: the outage itself is what is tested. The API
    // server answers `/version` all along (without etcd).
    while down.elapsed() < OUTAGE {
        assert!(node.is_running(), "worker-1 exited during the outage:\n{}", node.log_tail(40));
        assert_eq!(
            watch_state(node),
            Some(WatchState::Watching),
            "not proven, not rolled back, {:?} into the etcd outage:\n{}",
            down.elapsed(),
            node.log_tail(60)
        );
        let version =
            tokio::time::timeout(Duration::from_secs(5), client.apiserver_version()).await;
        assert!(matches!(version, Ok(Ok(_))), "the API server answers /version: {version:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // What was counted before the stop may be recorded after it (every 10 s), and a probe
    // interval (5 s, and its 4 s timeout) into the outage, nothing more.
    let counted = watch_of(node).map(|w| w.answered_secs).unwrap_or_default();
    assert!(counted <= counted_at_stop + 25, "counted {counted_at_stop} s, then {counted} s");
    cluster.start_etcd_again().await.expect("starting etcd");
    let back = Instant::now();
    let proven = wait_for(Duration::from_secs(150), "worker-1 proven on v2", || async {
        Ok(watch_state(node).filter(|s| !matches!(s, WatchState::Watching)))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", node.log_tail(80)));
    eprintln!(
        "update_post_watch_outage: worker-1 {proven:?} {:?} after etcd came back",
        back.elapsed()
    );
    assert!(matches!(proven, WatchState::Proven { .. }), "{proven:?}\n{}", node.log_tail(80));
    assert!(back.elapsed() >= Duration::from_secs(55), "a minute healthy after etcd is back");
    assert_eq!(version_on_disk(node), V2);
    assert_eq!(worker.exits().len(), exits, "worker-1 never exited:\n{}", node.log_tail(40));
    // The proof is a write of its own on its Node, read back.
    let nodes: Api<Node> = Api::all(client.clone());
    let published = nodes.get("worker-1").await.expect("reading Node worker-1");
    let proof = published.annotations().get(keys::ANNOTATION_POST_UPDATE_PROOF).cloned();
    let since = watch_of(node).map(|w| w.since).unwrap_or_default();
    assert!(proof.is_some_and(|p| p.starts_with(&format!("{since}-"))), "{published:?}");
}

/// The restart marker's watch on `node`, if it has one.
fn watch_of(node: &integration::K0sProcess) -> Option<WatchRecord> {
    let marker = std::fs::read(node.data_dir().join(autopilot_signal::post_update::MARKER_FILE));
    let marker: RestartMarker = serde_json::from_slice(&marker.ok()?).ok()?;
    marker.watch
}

/// The restart marker's watch state on `node`, if it has one.
fn watch_state(node: &integration::K0sProcess) -> Option<WatchState> {
    watch_of(node).map(|w| w.state)
}

/// How many starts the restart marker's watch on `node` counted.
fn watched_starts(node: &integration::K0sProcess) -> Option<u32> {
    watch_of(node).map(|w| w.starts)
}

fn mode_of(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777).unwrap_or(0)
}

/// Case 1: a forceupdate reinstalls worker-0's own version; then three SIGKILLs in the window.
async fn reinstall_then_three_sigkills(
    client: &kube::Client,
    worker: &Supervised,
    v1: &str,
    v1_bytes: &[u8],
) {
    let node = worker.process();
    let server = FileServer::start(v1_bytes.to_vec()).await.expect("serving v1");
    let mut update = update_to(
        v1,
        server.base_url(),
        &sha256_hex(v1_bytes),
        None,
        Some(static_nodes(&["worker-0"], 1)),
    );
    update.forceupdate = true;
    create_plan(client, &plan("autopilot", "reinstall", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan ends as expected");
    let live = node.binary_path().to_path_buf();
    let prev = live.with_file_name("k0s.prev");
    assert!(std::fs::read(&prev).expect("k0s.prev") == v1_bytes, "k0s.prev holds the same bytes");

    // The update's own restart was one exit (a clean one).
    let exits_before = worker.exits().len();
    for kill in 1..=3u32 {
        // The start before this kill is counted by the watch (the first by the update's own
        // restart), so the kill is an abnormal exit of a watched run.
        wait_for(RESTART_WITHIN, &format!("worker-0's start {kill} counted"), || async {
            Ok((node.is_running() && watched_starts(node) == Some(kill)).then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", node.log_tail(60)));
        node.signal(Signal::SIGKILL).expect("SIGKILL");
        wait_for(RESTART_WITHIN, &format!("the supervisor saw exit {kill}"), || async {
            Ok((worker.exits().len() >= exits_before + kill as usize).then_some(()))
        })
        .await
        .expect("in time");
    }
    // The guard's rollback finds nothing to put back; the binary that starts reports it.
    wait_for(RESTART_WITHIN + Duration::from_secs(30), "the rollback reported", || async {
        let reported =
            matches!(watch_state(node), Some(WatchState::RolledBack { reported: true, .. }));
        Ok((reported && node.is_running()).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", node.log_tail(80)));
    assert_eq!(mode_of(&live), 0o755, "k0s stays executable");
    assert_eq!(mode_of(&prev), 0o755, "k0s.prev stays executable");
    assert!(std::fs::read(&live).expect("k0s") == v1_bytes, "k0s is still v1");
    assert!(!live.with_file_name("k0s.refused").exists(), "nothing was taken out");
    let events: Api<Event> = Api::namespaced(client.clone(), keys::EVENT_NAMESPACE);
    let event = wait_for(Duration::from_secs(30), "the Event on Node worker-0", || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some(autopilot_signal::post_update::EVENT_REASON)
                && e.involved_object.name.as_deref() == Some("worker-0")
        }))
    })
    .await
    .expect("in time");
    let note = event.message.unwrap_or_default();
    assert!(note.contains("the live binary stays: k0s.prev holds the same bytes"), "{note}");

    // It keeps starting and running: a Ready heartbeat after all this, and no exit since.
    let exits = worker.exits().len();
    let killed = worker.exits().iter().filter(|(_, status)| !status.success()).count();
    assert_eq!(exits, exits_before + 3, "three more exits:\n{}", node.log_tail(60));
    assert_eq!(killed, 3, "all three by SIGKILL:\n{}", node.log_tail(60));
    let nodes: Api<Node> = Api::all(client.clone());
    let now = jiff::Timestamp::now();
    wait_for(Duration::from_secs(45), "a heartbeat of worker-0 after the rollback", || async {
        Ok(last_heartbeat(&nodes, "worker-0").await?.filter(|t| *t > now))
    })
    .await
    .expect("in time");
    assert_eq!(worker.exits().len(), exits, "no exit since:\n{}", node.log_tail(40));
    assert!(node.is_running());
}

/// Case 2: worker-2 updated to v2, then the fleet rollback puts v1 back: no watch follows it.
async fn update_then_fleet_rollback(
    cluster: &integration::Cluster,
    client: &kube::Client,
    worker: &Supervised,
    base: &str,
    sha: &str,
    v1: &str,
) {
    let node = worker.process();
    let update = update_to(V2, base, sha, None, Some(static_nodes(&["worker-2"], 1)));
    create_plan(client, &plan("autopilot", "to-roll-back", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan ends as expected");
    assert_eq!(version_on_disk(node), V2);
    assert_eq!(watch_state(node), Some(WatchState::Watching), "v2 is watched");
    let said = k0s_autopilot(cluster, &["rollback"]).await;
    eprintln!("update_post_watch_outage: k0s autopilot rollback said: {said}");
    // The plan is still Completed until the leader takes up the rollback: wait for the end.
    let plans: Api<autopilot_api::v1beta2::Plan> = Api::all(client.clone());
    wait_for(PLAN_TIMEOUT, "the plan to end RolledBack", || async {
        let plan = plans.get(keys::PLAN_NAME).await?;
        Ok((state(&plan) == PlanStateType::RolledBack).then_some(()))
    })
    .await
    .expect("the plan rolled back");
    assert_eq!(version_on_disk(node), v1);
    wait_node_version(client, "worker-2", v1).await.expect("the version published");
    assert_eq!(watch_state(node), None, "the rollback's binary is not watched");
}

/// Case 3: worker-1 updated to v2; the API server goes away the moment the plan completes,
/// for longer than the window.
async fn update_then_outage(
    cluster: &integration::Cluster,
    client: &kube::Client,
    worker: &Supervised,
    base: &str,
    sha: &str,
) {
    let node = worker.process();
    let update = update_to(V2, base, sha, None, Some(static_nodes(&["worker-1"], 1)));
    create_plan(client, &plan("autopilot", "outage", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan ends as expected");
    assert_eq!(watch_state(node), Some(WatchState::Watching), "v2 is watched");
    let exits = worker.exits().len();
    cluster.kill_apiserver(0).await.expect("killing the API server");
    let down = Instant::now();
    // Nothing to wait for but the clock: the outage itself is what is tested.
    while down.elapsed() < OUTAGE {
        assert!(node.is_running(), "worker-1 exited during the outage:\n{}", node.log_tail(40));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(watch_state(node), Some(WatchState::Watching), "not proven yet, not rolled back");
    cluster.start_apiserver(0).await.expect("starting the API server");
    let back = Instant::now();
    // Proven once it was healthy for a minute with the API server answering.
    let proven = wait_for(Duration::from_secs(150), "worker-1 proven on v2", || async {
        Ok(watch_state(node).filter(|s| !matches!(s, WatchState::Watching)))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", node.log_tail(80)));
    eprintln!(
        "update_post_watch_outage: worker-1 {proven:?} {:?} after the API server came back",
        back.elapsed()
    );
    assert!(matches!(proven, WatchState::Proven { .. }), "{proven:?}\n{}", node.log_tail(80));
    assert_eq!(version_on_disk(node), V2);
    assert_eq!(worker.exits().len(), exits, "worker-1 never exited:\n{}", node.log_tail(40));
    let client = cluster.admin_client().await.expect("an admin client");
    wait_node_version(&client, "worker-1", V2).await.expect("the version published");
    let signal = node_signal(&client, "worker-1")
        .await
        .expect("reading the signal")
        .expect("worker-1's signal");
    assert_eq!(signal.phase(), Some(SignalPhase::Completed), "the signal stays Completed");
    let nodes: Api<Node> = Api::all(client.clone());
    let published = nodes.get("worker-1").await.expect("reading Node worker-1");
    assert_eq!(
        published.annotations().get(keys::ANNOTATION_K0S_VERSION).map(String::as_str),
        Some(V2)
    );
}
