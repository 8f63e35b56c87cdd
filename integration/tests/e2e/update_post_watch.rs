//! The post-update watch (DESIGN §15) with a real control plane and a real worker under
//! `--restart exit` and a restarting supervisor that runs the units' `ExecStartPre` guard
//! (the harness's [`integration::Supervised`]). The "v2" passes its trial boot (it is the
//! real v2 build then) but dies 8 s into every normal run; after its third abnormal exit the
//! guard, run from `k0s.prev`, puts v1 back before the next start, and v1 reports: an Event
//! on its Node, `k0s_autopilot_rollbacks_total{reason="crashed"}` and the signal `Failed`.
//!
//! A "v2" that hangs after its start (issue 57): it passes its trial boot, then blocks
//! forever in each normal run without running a line of k0s. The supervisor plays the
//! units' watchdog (`WatchdogSec=30s`): it kills each hung run, the guard counts each start
//! and each kill, and after the third it puts v1 back, within the bound the docs state.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use integration::wait_for;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};

use crate::support::*;

/// How long after the first crash the node must run v1 again.
const BACK_ON_V1_WITHIN: Duration = Duration::from_secs(60);

/// A "v2" that answers `version` as v2 and is the real v2 on trial (so it passes), but in a
/// normal run starts the real v2 and kills it (SIGKILL, no clean stop) 8 s later, exiting 1.
pub(crate) fn dying_v2(real: &std::path::Path) -> Vec<u8> {
    let real = real.display();
    format!(
        "#!/bin/sh\n\
         if [ \"$1\" = version ]; then echo {V2}; exit 0; fi\n\
         if [ -n \"$K0S_AUTOPILOT_TRIAL\" ]; then exec {real} \"$@\"; fi\n\
         {real} \"$@\" &\n\
         child=$!\n\
         sleep 8\n\
         kill -9 $child\n\
         echo 'k0s {V2} (test payload): killed 8s into the run' >&2\n\
         exit 1\n"
    )
    .into_bytes()
}

/// The time of the Node's last Ready heartbeat.
pub(crate) async fn last_heartbeat(
    nodes: &Api<Node>,
    name: &str,
) -> anyhow::Result<Option<jiff::Timestamp>> {
    let node = nodes.get(name).await?;
    Ok(node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_heartbeat_time)
        .map(|t| t.0))
}

/// A controller and worker-0 with real agents; the worker exits to be restarted
/// (`--restart exit`) and serves metrics.
async fn one_worker_exiting_to_restart(name: &str) -> Fleet {
    FleetBuilder::new(name)
        .controllers(1)
        .workers(&["worker-0"])
        .agents(Agents::Real)
        .worker_args(&["--restart", "exit"])
        .worker_metrics()
        .start()
        .await
        .expect("the fleet")
}

#[tokio::test]
async fn a_v2_that_keeps_crashing_after_its_update_is_rolled_back_to_v1_by_the_guard() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        one_worker_exiting_to_restart("update-post-watch").await;
    let worker = workers.remove(0);
    let v1_bytes = std::fs::read(worker.binary_path()).unwrap();
    let v1 = binary_version(worker.binary_path());
    assert_ne!(v1, V2);

    // The real v2 lives outside the node's binary directory; the payload runs it.
    let payload = payload_running_v2_from(&worker.dir().join("v2-real").join("k0s"));
    let server = integration::http::FileServer::start(payload.clone()).await.unwrap();

    let worker = worker.supervise(Duration::from_secs(1));
    let update = update_to(
        V2,
        server.base_url(),
        &sha256_hex(&payload),
        None,
        Some(static_nodes(&["worker-0"], 1)),
    );
    create_plan(&client, &plan("autopilot", "post-watch", vec![k0s_command(update)]))
        .await
        .unwrap();

    // The trial passes, the worker exits for its supervisor (status 0), v2 starts, and then
    // it dies 8 s into each run.
    let first_crash =
        wait_for(PLAN_TIMEOUT + BACK_ON_V1_WITHIN, "the first crash of v2", || async {
            Ok(worker.exits().into_iter().find(|(_, status)| !status.success()).map(|(at, _)| at))
        })
        .await
        .unwrap();
    let node = worker.process();
    let nodes: Api<Node> = Api::all(client.clone());
    let waited = BACK_ON_V1_WITHIN.saturating_sub(first_crash.elapsed());
    wait_for(waited, "worker-0 back on v1 (on disk and published)", || async {
        let on_disk = std::fs::read(node.binary_path())?;
        let published = nodes.get("worker-0").await?;
        let version = published.annotations().get(keys::ANNOTATION_K0S_VERSION).cloned();
        Ok((on_disk == v1_bytes && version.as_deref() == Some(v1.as_str())).then_some(()))
    })
    .await
    .unwrap();
    let took = first_crash.elapsed();
    let crashes = worker.exits().iter().filter(|(_, s)| !s.success()).count();
    eprintln!(
        "post-update watch: first crash of v2 → worker-0 on v1 (on disk and published) in {took:?}, after {crashes} crashes"
    );
    assert!(took < BACK_ON_V1_WITHIN, "back on v1 in {took:?}");
    assert_eq!(crashes, 3, "rolled back after the third abnormal exit:\n{}", node.log_tail(60));
    assert_eq!(binary_version(node.binary_path()), v1);

    // The rollback is reported: the metric, an Event on the Node, the signal.
    rollback_reported(&client, node, &v1).await;
    plan_no_longer_ready(&client).await;

    // What is on disk: v1 live and as k0s.prev, the payload refused and not executable.
    check_disk(node, &payload, &v1_bytes);

    // It stays on v1: a Ready heartbeat written after all this, and no exit since.
    let exits = worker.exits().len();
    let now = jiff::Timestamp::now();
    wait_for(Duration::from_secs(45), "a heartbeat of v1 after the rollback", || async {
        Ok(last_heartbeat(&nodes, "worker-0").await?.filter(|t| *t > now))
    })
    .await
    .unwrap();
    assert_eq!(worker.exits().len(), exits, "no exit since the rollback:\n{}", node.log_tail(40));
    assert!(node.is_running());
    assert!(std::fs::read(node.binary_path()).unwrap() == v1_bytes, "still v1 on disk");
    let (cordoned, marked) = node_cordon(&client, "worker-0").await.unwrap();
    assert!(!cordoned && !marked, "nothing cordoned is left");
}

/// The real v2 written at `real` (outside the node's binary directory), and the payload
/// that runs it and dies 8 s into each run.
fn payload_running_v2_from(real: &std::path::Path) -> Vec<u8> {
    write_real_v2(real);
    dying_v2(real)
}

fn write_real_v2(real: &std::path::Path) {
    let (v2_bytes, _) = v2_build();
    std::fs::create_dir_all(real.parent().expect("a directory")).expect("its directory");
    std::fs::write(real, &v2_bytes).expect("the real v2");
    std::fs::set_permissions(real, std::fs::Permissions::from_mode(0o755))
        .expect("the real v2 executable");
}

/// A "v2" that answers `version` as v2 and is the real v2 on trial (so it passes), but in a
/// normal run blocks forever before any k0s code runs: it never records a start, never
/// notifies the watchdog, never exits by itself.
fn hanging_v2(real: &std::path::Path) -> Vec<u8> {
    let real = real.display();
    format!(
        "#!/bin/sh\n\
         if [ \"$1\" = version ]; then echo {V2}; exit 0; fi\n\
         if [ -n \"$K0S_AUTOPILOT_TRIAL\" ]; then exec {real} \"$@\"; fi\n\
         echo 'k0s {V2} (test payload): hanging' >&2\n\
         exec sleep 100000\n"
    )
    .into_bytes()
}

/// The shipped units' watchdog and restart delay (checked against the worker unit below).
const WATCHDOG: Duration = Duration::from_secs(30);
const RESTART_SEC: Duration = Duration::from_secs(2);

/// The bound docs/updating-a-cluster.md states for a hung new binary: three watchdog
/// intervals and restart delays, plus the start of v1 and its report (30 s).
const HUNG_BACK_ON_V1_WITHIN: Duration = Duration::from_secs(3 * (30 + 2) + 30);

#[tokio::test]
async fn a_v2_that_hangs_after_its_start_is_killed_by_the_watchdog_and_rolled_back_to_v1() {
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../manifests/systemd/k0s-worker.service"),
    )
    .unwrap();
    assert!(unit.contains("WatchdogSec=30s") && unit.contains("RestartSec=2s"), "{unit}");
    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        one_worker_exiting_to_restart("update-post-watch-hang").await;
    let worker = workers.remove(0);
    let v1_bytes = std::fs::read(worker.binary_path()).unwrap();
    let v1 = binary_version(worker.binary_path());
    let real = worker.dir().join("v2-real").join("k0s");
    write_real_v2(&real);
    let payload = hanging_v2(&real);
    let server = integration::http::FileServer::start(payload.clone()).await.unwrap();

    let worker = worker.supervise_with_watchdog(RESTART_SEC, WATCHDOG).unwrap();
    let update = update_to(
        V2,
        server.base_url(),
        &sha256_hex(&payload),
        None,
        Some(static_nodes(&["worker-0"], 1)),
    );
    create_plan(&client, &plan("autopilot", "post-watch-hang", vec![k0s_command(update)]))
        .await
        .unwrap();

    // The trial passes and v1 exits for its supervisor (status 0): v2 starts and hangs.
    let hung_start = wait_for(PLAN_TIMEOUT, "v1's exit into v2", || async {
        Ok(worker.exits().into_iter().find(|(_, status)| status.success()).map(|(at, _)| at))
    })
    .await
    .unwrap();
    let node = worker.process();
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(HUNG_BACK_ON_V1_WITHIN, "worker-0 back on v1 (on disk and published)", || async {
        let on_disk = std::fs::read(node.binary_path())?;
        let published = nodes.get("worker-0").await?;
        let version = published.annotations().get(keys::ANNOTATION_K0S_VERSION).cloned();
        Ok((on_disk == v1_bytes && version.as_deref() == Some(v1.as_str())).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", node.log_tail(80)));
    let took = hung_start.elapsed();
    let aborted = worker.exits().iter().filter(|(_, s)| !s.success()).count();
    eprintln!(
        "post-update watch: hung v2 started → worker-0 on v1 (on disk and published) in {took:?}, after {aborted} watchdog kills"
    );
    assert_eq!(aborted, 3, "rolled back after the third kill:\n{}", node.log_tail(80));
    let log = node.log();
    assert_eq!(log.matches("watchdog timeout").count(), 3, "three watchdog kills:\n{log}");

    // Reported like any rollback after the update; the hung payload is kept, not executable.
    rollback_reported(&client, node, &v1).await;
    check_disk(node, &payload, &v1_bytes);
    let (cordoned, marked) = node_cordon(&client, "worker-0").await.unwrap();
    assert!(!cordoned && !marked, "nothing cordoned is left");
}

/// The Plan is no longer Ready after the rollback: it ended `ApplyFailed` if the signal said
/// `Failed` while it ran, or it stays `Completed` and says the update was rolled back since
/// (`Stalled`, reason `RolledBackAfterUpdate`).
async fn plan_no_longer_ready(client: &kube::Client) {
    // The plan may show `Completed` (and `Ready`) until the leader has seen the signal's
    // `Failed`: a state that ended is no answer here, only the condition is.
    let plans: Api<autopilot_api::v1beta2::Plan> = Api::all(client.clone());
    let stalled = wait_for(PLAN_TIMEOUT, "the plan Stalled", || async {
        let plan = plans.get("autopilot").await?;
        let stalled = plan.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == "Stalled" && c.status == "True")
        });
        Ok(stalled.then_some(plan))
    })
    .await
    .expect("the plan Stalled");
    let found = stalled.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let stalled_reason =
        found.iter().find(|c| c.type_ == "Stalled").map(|c| c.reason.clone()).unwrap_or_default();
    let expected = match state(&stalled) {
        autopilot_api::v1beta2::PlanStateType::Completed => "RolledBackAfterUpdate",
        other => other.as_str(),
    };
    eprintln!("post-update watch: the plan is {} and Stalled: {stalled_reason}", state(&stalled));
    assert_eq!(stalled_reason, expected, "{}", status_yaml(&stalled));
    assert!(found.iter().any(|c| c.type_ == "Ready" && c.status == "False"), "{found:#?}");
}

/// The rollback is reported: the metric, an Event on the Node, the signal.
async fn rollback_reported(client: &kube::Client, node: &integration::K0sProcess, v1: &str) {
    let address = node.metrics_address().expect("metrics address");
    wait_for(
        Duration::from_secs(30),
        "k0s_autopilot_rollbacks_total{reason=crashed} = 1",
        || async {
            let scrape = integration::metrics::scrape(address).await?;
            let crashed =
                scrape.value_or_zero("k0s_autopilot_rollbacks_total", &[("reason", "crashed")]);
            let unhealthy =
                scrape.value_or_zero("k0s_autopilot_rollbacks_total", &[("reason", "unhealthy")]);
            let trial = scrape.value("k0s_autopilot_rollbacks_total", &[("reason", "trial")]);
            Ok((crashed == 1.0 && unhealthy == 0.0 && trial == Some(0.0)).then_some(()))
        },
    )
    .await
    .expect("the rollback counted");
    let events: Api<Event> = Api::namespaced(client.clone(), keys::EVENT_NAMESPACE);
    let event =
        wait_for(Duration::from_secs(30), "the rollback Event on Node worker-0", || async {
            let list = events.list(&ListParams::default()).await?;
            Ok(list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(autopilot_signal::post_update::EVENT_REASON)
                    && e.involved_object.name.as_deref() == Some("worker-0")
                    && e.involved_object.kind.as_deref() == Some("Node")
            }))
        })
        .await
        .expect("the rollback Event");
    let note = event.message.unwrap_or_default();
    assert!(
        note.contains(&format!("rolled back from {V2} to {v1} after the update"))
            && note.contains("exited abnormally 3 times"),
        "{note}"
    );
    let signal =
        wait_for(Duration::from_secs(30), "the signal Failed after the rollback", || async {
            let signal = node_signal(client, "worker-0").await?;
            Ok(signal.filter(|s| s.phase() == Some(SignalPhase::Failed)))
        })
        .await
        .expect("the signal Failed");
    let reason = signal.status.and_then(|s| s.reason).unwrap_or_default();
    assert!(
        reason
            .starts_with("rolled back after the update: the new binary exited abnormally 3 times"),
        "{reason}"
    );
}

/// What is on disk: v1 live and as k0s.prev, the payload refused and not executable.
fn check_disk(node: &integration::K0sProcess, payload: &[u8], v1_bytes: &[u8]) {
    let refused = node.binary_path().with_file_name("k0s.refused");
    assert!(
        std::fs::read(&refused).expect("k0s.refused") == payload,
        "k0s.refused is the v2 payload"
    );
    let mode = std::fs::metadata(&refused).expect("k0s.refused").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let prev = std::fs::read(node.binary_path().with_file_name("k0s.prev")).expect("k0s.prev");
    assert!(prev == v1_bytes, "k0s.prev keeps v1");
}
