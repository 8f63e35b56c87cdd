//! `--metrics-address` (issue 12 item 2) on real processes during a real update: two
//! controllers and a worker serve `k0s_autopilot_*` metrics on loopback ports, a Plan updates
//! the worker to v2 with the real node agent, and the scrapes follow the update.
//!
//! A PodDisruptionBudget holds the worker in `Cordoning` after its download, so the test
//! can look at the update in flight without racing it: the worker has counted the payload's
//! bytes and shows its phase, the leader shows the node in flight and the blocked drain.
//! Once the budget is removed the update completes; the leader has counted one completed
//! node update and the signal it wrote, and only the leader says it leads. The worker
//! re-executes itself into v2 and serves its metrics again on the same address (its
//! counters start over with the new process, as Prometheus expects of a restart).
//!
//! Every node logs with `--log-format json` (issue 12 item 5): the lines about the update
//! carry the plan, command, node and phase as fields, from the span of the reconcile pass,
//! drain pass or agent step they were logged in.
//!
//! The worker is a real node ([`integration::real_node`]) that `k0s worker --run-components`
//! runs: its kubelet owns the Node and runs the budget's Pod (a Deployment's), and the
//! controller-manager the controllers run computes the budget.

use autopilot_api::v1beta2::PlanStateType;
use integration::http::FileServer;
use integration::metrics::{Scrape, scrape};
use integration::{K0sProcess, wait_for};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams};

use crate::real_nodes::{budget, pinned_deployment, wait_app_ready, wait_default_service_account};
use crate::support::*;

const WORKER: &str = "worker-0";

#[tokio::test]
async fn scrapes_of_the_leader_a_follower_and_the_worker_follow_a_real_update_on_real_nodes() {
    let (v2_bytes, sha) = v2_build();
    let payload_size = v2_bytes.len() as f64;
    let server = FileServer::start(v2_bytes).await.unwrap();
    // Two controllers (their own update agents off: only the worker updates) and the worker,
    // each serving metrics on a loopback port of its own.
    let Fleet { cluster: _cluster, client, controllers, mut workers } =
        FleetBuilder::new("metrics")
            .controllers(2)
            .workers(&[WORKER])
            // Run by k0s in the nodes' namespace: its metrics are forwarded to the machine.
            .real_workers()
            .agents(Agents::Real)
            .controller_args(&[NO_AGENT, "--log-format", "json"])
            .controller_metrics()
            .worker_args(&["--log-format", "json"])
            .worker_metrics()
            .start()
            .await
            .unwrap();
    let leader_index = wait_for(STARTUP, "a leader", || leader(&client)).await.unwrap();
    let leader = &controllers[leader_index];
    let follower = &controllers[1 - leader_index];
    let worker = workers.remove(0);
    let v1 = binary_version(worker.binary_path());
    wait_node_version(&client, WORKER, &v1).await.unwrap();

    // Before: the leader says so, nothing is counted yet.
    check_before(leader, &worker).await;

    // During: the worker downloaded v2 and is held in Cordoning by the budget.
    hold_in_cordoning(&client, &server, &sha).await;
    check_held(leader, &worker, payload_size).await;

    // After: the budget goes, the update completes.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    budgets.delete("web-budget", &DeleteParams::default()).await.unwrap();
    wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    check_after(leader, follower).await;

    // The re-executed worker serves on the same address and shows its signal completed.
    wait_scrape(&worker, "the updated worker to show Completed", |s| {
        s.value("k0s_autopilot_agent_phase", &[("phase", "Completed")]) == Some(1.0)
    })
    .await;

    check_json_logs(leader, &worker);
}

/// Before: the leader says so, nothing is counted yet.
async fn check_before(leader: &K0sProcess, worker: &K0sProcess) {
    let before = wait_scrape(leader, "the leader to show is_leader 1", |s| {
        s.value("k0s_autopilot_is_leader", &[]) == Some(1.0)
    })
    .await;
    assert_eq!(completed(&before), 0.0, "{}", before.text);
    assert_eq!(signals_written(&before), 0.0, "{}", before.text);
    let worker_before = scrape_of(worker).await;
    assert_eq!(download_bytes(&worker_before), 0.0, "{}", worker_before.text);
}

/// A budget over the worker's one Pod, then the Plan: the worker downloads v2 and is held
/// in Cordoning.
async fn hold_in_cordoning(client: &kube::Client, server: &FileServer, sha: &str) {
    wait_default_service_account(client).await.expect("the default service account");
    pinned_deployment(client, "web", WORKER, 1).await.expect("the Deployment");
    budget(client, "web-budget", "web", 1).await.expect("the budget");
    wait_app_ready(client, "web", 1).await.expect("the Pod ready");
    let update = update_to(V2, server.base_url(), sha, None, Some(static_nodes(&[WORKER], 1)));
    create_plan(client, &plan("autopilot", "v2", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
}

/// During: the leader shows the node in flight and the drain blocked; the worker shows
/// Cordoning with the whole payload counted.
async fn check_held(leader: &K0sProcess, worker: &K0sProcess, payload_size: f64) {
    let held = wait_scrape(leader, "the leader to show the worker's drain blocked", |s| {
        s.value("k0s_autopilot_drain_blocked", &[]) == Some(1.0)
    })
    .await;
    assert_eq!(held.value("k0s_autopilot_nodes_in_flight", &[]), Some(1.0), "{}", held.text);
    assert!(signals_written(&held) >= 1.0, "{}", held.text);
    assert_eq!(completed(&held), 0.0, "{}", held.text);
    assert_eq!(
        held.value(
            "k0s_autopilot_plan_state",
            &[("plan", "autopilot"), ("state", "SchedulableWait")]
        ),
        Some(1.0),
        "{}",
        held.text
    );
    let worker_held = wait_scrape(worker, "the worker to show Cordoning", |s| {
        s.value("k0s_autopilot_agent_phase", &[("phase", "Cordoning")]) == Some(1.0)
    })
    .await;
    assert!(
        download_bytes(&worker_held) >= payload_size,
        "the whole payload ({payload_size} bytes) was counted:\n{}",
        worker_held.text
    );
    assert_eq!(
        worker_held.value("k0s_autopilot_agent_download_failures_total", &[]),
        Some(0.0),
        "{}",
        worker_held.text
    );
}

/// After: the leader counted one completed node update and the signal it wrote; the
/// follower counts nothing and does not lead.
async fn check_after(leader: &K0sProcess, follower: &K0sProcess) {
    let after =
        wait_scrape(leader, "the leader to count the completed node", |s| completed(s) >= 1.0)
            .await;
    assert_eq!(completed(&after), 1.0, "one node updated:\n{}", after.text);
    assert!(signals_written(&after) >= completed(&after), "{}", after.text);
    assert_eq!(
        after.value_or_zero("k0s_autopilot_node_updates_total", &[("result", "failed")]),
        0.0,
        "{}",
        after.text
    );
    assert_eq!(after.value("k0s_autopilot_nodes_in_flight", &[]), Some(0.0), "{}", after.text);
    assert_eq!(after.value("k0s_autopilot_drain_blocked", &[]), Some(0.0), "{}", after.text);
    assert_eq!(
        after.value("k0s_autopilot_plan_state", &[("plan", "autopilot"), ("state", "Completed")]),
        Some(1.0),
        "{}",
        after.text
    );
    assert!(
        after.value_or_zero(
            "k0s_autopilot_node_phase_duration_seconds_count",
            &[("phase", "Cordoning")]
        ) >= 1.0,
        "the time held in Cordoning was observed:\n{}",
        after.text
    );
    assert_eq!(after.value("k0s_autopilot_is_leader", &[]), Some(1.0), "{}", after.text);
    let follower_after = scrape_of(follower).await;
    assert_eq!(
        follower_after.value("k0s_autopilot_is_leader", &[]),
        Some(0.0),
        "{}",
        follower_after.text
    );
    assert_eq!(completed(&follower_after), 0.0, "a follower counts nothing");
}

/// The JSON lines name the plan, command, node and phase.
fn check_json_logs(leader: &K0sProcess, worker: &K0sProcess) {
    // The JSON lines name the plan, command, node and phase. The agent's step: the span of
    // the step that moved the worker from Downloading to Cordoning.
    let agent_line =
        json_line(worker, "signal status written", |l| l["fields"]["to"] == "Cordoning");
    let span = &agent_line["span"];
    assert_eq!(span["name"], "signal", "{agent_line}");
    assert_eq!(span["node"], WORKER, "{agent_line}");
    assert_eq!(span["plan"], "v2", "{agent_line}");
    assert_eq!(span["command"], 0, "{agent_line}");
    assert_eq!(span["phase"], "Downloading", "{agent_line}");
    // The leader's drain pass, refused by the budget.
    let drain_line = json_line(leader, "drain blocked", |l| {
        l["fields"]["blocked"].as_str().is_some_and(|b| b.contains("refused"))
    });
    let span = &drain_line["span"];
    assert_eq!(span["name"], "drain", "{drain_line}");
    assert_eq!(span["node"], WORKER, "{drain_line}");
    assert_eq!(span["plan"], "v2", "{drain_line}");
    assert_eq!(span["command"], 0, "{drain_line}");
    assert_eq!(span["phase"], "Cordoning", "{drain_line}");
    // The leader's reconcile pass, as the node's state changed.
    let plan_line =
        json_line(leader, "node state changed", |l| l["fields"]["to"] == "SignalCompleted");
    assert_eq!(plan_line["span"]["name"], "reconcile", "{plan_line}");
    assert_eq!(plan_line["span"]["plan"], "autopilot", "{plan_line}");
    let fields = &plan_line["fields"];
    assert_eq!(fields["plan"], "autopilot", "{plan_line}");
    assert_eq!(fields["command"], 0, "{plan_line}");
    assert_eq!(fields["node"], WORKER, "{plan_line}");
    assert_eq!(fields["phase"], "Completed", "{plan_line}");
}

/// The first JSON line of `node`'s log with `message` for which `also` holds.
fn json_line(
    node: &K0sProcess,
    message: &str,
    also: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let log = node.log();
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["fields"]["message"] == message && also(line))
        .unwrap_or_else(|| {
            panic!("no JSON line {message:?} in the log of {}:\n{log}", node.node_name())
        })
}

fn completed(scrape: &Scrape) -> f64 {
    scrape.value_or_zero("k0s_autopilot_node_updates_total", &[("result", "completed")])
}

fn signals_written(scrape: &Scrape) -> f64 {
    scrape.value_or_zero("k0s_autopilot_signals_written_total", &[])
}

fn download_bytes(scrape: &Scrape) -> f64 {
    scrape.value_or_zero("k0s_autopilot_agent_download_bytes_total", &[])
}

async fn scrape_of(node: &K0sProcess) -> Scrape {
    let address = node.metrics_address().expect("started with metrics");
    scrape(address).await.unwrap_or_else(|e| panic!("scraping {}: {e:#}", node.node_name()))
}

/// Scrape `node` until `done` holds (a node that restarts may refuse a scrape meanwhile);
/// on timeout the error carries the last scrape.
async fn wait_scrape(node: &K0sProcess, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let address = node.metrics_address().expect("started with metrics");
    let result = wait_for(PLAN_TIMEOUT, what, || async {
        let scrape = scrape(address).await?;
        if done(&scrape) {
            Ok(Some(scrape))
        } else {
            Err(anyhow::anyhow!("the last scrape of {}:\n{}", node.node_name(), scrape.text))
        }
    })
    .await;
    result.unwrap_or_else(|e| panic!("{e:#}"))
}
