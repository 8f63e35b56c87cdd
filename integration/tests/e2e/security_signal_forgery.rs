//! Forged signals (DESIGN §14): someone who may only patch Nodes writes update signals on
//! workers, with the real control plane, the real leader and real node agents. A signal is a
//! pointer, not an authorization: the agents compare each one with the frozen command of the
//! Plan run it names, and the leader drains only for signals of the Plan's run that match.
//!
//! One cluster: a controller with its agent; worker-0 and worker-1 with agents; worker-2
//! without one (a Plan that targets it stays in progress, so its run is current while the
//! forgeries are written). The forger (user `node-patcher`, rights: get/list/watch/patch
//! Nodes, nothing else) writes in turn:
//!
//! - (a) with no Plan at all: a plain-http, sha-less update signal naming no run, on
//!   worker-0, and the same signal already in `Cordoning` on worker-1;
//! - (b) with a Plan running: a copy of the Plan's own signal for worker-2 on worker-0 (not
//!   a target), the same with the URL swapped on worker-1, and the copy in `Cordoning` on
//!   worker-1.
//!
//! Each is answered `Failed` with a `refused: …` (agent) or `not drained: …` (leader) reason
//! within [`ANSWERED`]; no request reaches either payload server; the workers keep their
//! process and binary; no Node is ever cordoned (a watch on the Nodes records every change).
//!
//! Copies of the leader's own signal (the signal is valid for the run; only the Plan status's
//! record of it says whom the leader signalled, DESIGN §14), each in its own cluster:
//!
//! - during a plan over three workers with `concurrent: 1`, the in-flight node's signal
//!   copied onto both pending targets: refused (`not signalled by the leader`), nothing
//!   fetched or cordoned, and the plan still completes one node at a time;
//! - the same after `k0s autopilot abort`: refused (`the plan has ended`), the plan stays
//!   `Aborted`;
//! - on a real node whose drain a PodDisruptionBudget blocks, the signal's phase rewritten to
//!   `ApplyingUpdate`: the agent goes back to `Cordoning`, nothing restarts or is evicted
//!   until the drain ends.

use std::sync::Arc;
use std::time::Duration;

use autopilot_api::signal::{
    self, CommandK0sUpdate, SignalCommand, SignalData, SignalPhase, SignalStatus,
};
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use futures::StreamExt as _;
use integration::http::{FileServer, Serve};
use integration::wait_for;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;

use crate::support::*;

/// How long a forged signal may stay unanswered.
const ANSWERED: Duration = Duration::from_secs(60);

/// The forger's user name.
const FORGER: &str = "node-patcher";

/// Grants [`FORGER`] get, list, watch and patch on Nodes, and nothing else.
async fn grant_node_patching(admin: &kube::Client) {
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": FORGER },
        "rules": [{ "apiGroups": [""], "resources": ["nodes"],
                    "verbs": ["get", "list", "watch", "patch"] }],
    }))
    .expect("a valid ClusterRole");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": FORGER },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": FORGER },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": FORGER }],
    }))
    .expect("a valid ClusterRoleBinding");
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("creating the forger's ClusterRole");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding the forger's ClusterRole");
}

/// Writes `data` as the signal on Node `name`, as the forger.
async fn forge(forger: &kube::Client, name: &str, data: &SignalData) {
    let nodes: Api<Node> = Api::all(forger.clone());
    let patch = json!({ "metadata": { "annotations": signal::to_annotations(data) } });
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("the forger patches Node {name}: {e}"));
}

/// A k0s update signal to [`V2`] from `url` without sha256 or run, as k0s writes them.
fn unmarked(url: &str) -> SignalData {
    SignalData {
        plan_id: "forged".to_owned(),
        created: signal::format_timestamp(jiff::Timestamp::now()),
        command: SignalCommand {
            rollback: None,
            id: 0,
            k0supdate: Some(CommandK0sUpdate {
                url: url.to_owned(),
                version: V2.to_owned(),
                sha256: String::new(),
                forceupdate: true,
            }),
            airgapupdate: None,
            preflight: None,
        },
        status: None,
        run_id: None,
    }
}

/// `data` as the node would show it in `Cordoning` (the phase the leader drains in).
fn cordoning(data: SignalData) -> SignalData {
    data.with_status(SignalStatus::new(SignalPhase::Cordoning, jiff::Timestamp::now()))
}

/// Waits until Node `name`'s signal (the one with `created`) is `Failed`; returns its reason.
async fn failed_reason(client: &kube::Client, name: &str, created: &str) -> String {
    wait_for(ANSWERED, &format!("the forged signal on {name} to be answered Failed"), || async {
        let Some(data) = node_signal(client, name).await? else { return Ok(None) };
        Ok((data.created == created && data.phase() == Some(SignalPhase::Failed))
            .then(|| data.status.and_then(|s| s.reason).unwrap_or_default()))
    })
    .await
    .expect("the forged signal is answered")
}

fn assert_refused(reason: &str, because: &str) {
    assert!(
        (reason.starts_with("refused: ") || reason.starts_with("not drained: "))
            && reason.contains(because),
        "{reason:?} should refuse because {because:?}"
    );
}

/// (a) No Plan: an unverified update naming no run, fresh and already in Cordoning.
async fn forgeries_without_a_plan(admin: &kube::Client, forger: &kube::Client, evil_url: &str) {
    let fresh = unmarked(evil_url);
    forge(forger, "worker-0", &fresh).await;
    let reason = failed_reason(admin, "worker-0", &fresh.created).await;
    assert_refused(&reason, "names no plan run");
    let at_drain = cordoning(unmarked(evil_url));
    forge(forger, "worker-1", &at_drain).await;
    let reason = failed_reason(admin, "worker-1", &at_drain.created).await;
    assert_refused(&reason, "names no plan run");
}

/// (b) A Plan runs (its only target, worker-2, has no agent: it stays in progress); its
/// signal copied onto a node that is not a target, with the URL swapped, and in Cordoning.
async fn forgeries_beside_a_running_plan(
    admin: &kube::Client,
    forger: &kube::Client,
    evil_url: &str,
    payloads: &str,
    v2_sha: &str,
) {
    let update = update_to(V2, payloads, v2_sha, None, Some(static_nodes(&["worker-2"], 1)));
    create_plan(admin, &plan("autopilot", "held", vec![k0s_command(update)]))
        .await
        .expect("the plan");
    let real = wait_for(PLAN_TIMEOUT, "the Plan's signal on worker-2", || async {
        node_signal(admin, "worker-2").await
    })
    .await
    .expect("worker-2 is signalled");
    assert!(real.run_id.is_some(), "the Plan's own signal names its run");
    // Its exact copy on a node that is not a target.
    let copy =
        SignalData { created: signal::format_timestamp(jiff::Timestamp::now()), ..real.clone() };
    forge(forger, "worker-0", &copy).await;
    let reason = failed_reason(admin, "worker-0", &copy.created).await;
    assert_refused(&reason, "worker-0 is not one of its workers");
    // The copy with the URL swapped.
    let mut swapped =
        SignalData { created: signal::format_timestamp(jiff::Timestamp::now()), ..real.clone() };
    if let Some(update) = swapped.command.k0supdate.as_mut() {
        evil_url.clone_into(&mut update.url);
    }
    forge(forger, "worker-1", &swapped).await;
    let reason = failed_reason(admin, "worker-1", &swapped.created).await;
    assert_refused(&reason, &format!("url {evil_url:?}"));
    // The copy in Cordoning, where the leader would drain.
    let copy_at_drain = cordoning(SignalData {
        created: signal::format_timestamp(jiff::Timestamp::now()),
        ..real.clone()
    });
    forge(forger, "worker-1", &copy_at_drain).await;
    let reason = failed_reason(admin, "worker-1", &copy_at_drain.created).await;
    assert_refused(&reason, "worker-1 is not one of its workers");
}

#[tokio::test]
async fn forged_signals_are_refused_and_nothing_is_fetched_or_cordoned() {
    let (v2_bytes, v2_sha) = v2_build();
    let evil = FileServer::start(v2_bytes.clone()).await.unwrap();
    let evil_url = format!("{}/k0s", evil.base_url());
    let payloads = FileServer::start(v2_bytes).await.unwrap();

    // Real agents, but worker-2's stays off: its signal stays in progress.
    let Fleet { cluster, client: admin, controllers: _controllers, mut workers } =
        FleetBuilder::new("security-signal-forgery")
            .controllers(1)
            .workers(&["worker-0", "worker-1", "worker-2"])
            .agents(Agents::Real)
            .node_args("worker-2", &[NO_AGENT])
            .start()
            .await
            .unwrap();
    let _held = workers.pop().expect("worker-2");
    let before: Vec<Before> = workers.iter().map(Before::of).collect();

    // Every change of every Node is looked at: none may ever be unschedulable.
    let (cordons, watch) = watch_cordons(&admin);
    let forger = forger_of(&cluster, &admin).await;
    // The forger can do nothing else: not even read the Plan.
    let plans: Api<autopilot_api::v1beta2::Plan> = Api::all(forger.clone());
    let denied = plans.get_opt("autopilot").await.expect_err("the forger may not read Plans");
    assert!(matches!(denied, kube::Error::Api(ref r) if r.code == 403), "{denied}");

    forgeries_without_a_plan(&admin, &forger, &evil_url).await;
    forgeries_beside_a_running_plan(&admin, &forger, &evil_url, payloads.base_url(), &v2_sha).await;

    // Nothing was fetched, nothing cordoned, the workers untouched; the Plan still runs.
    assert_eq!(evil.requests(), 0, "no request reached the forger's server");
    assert_eq!(payloads.requests(), 0, "no request reached the Plan's payload server");
    for (worker, before) in workers.iter().zip(&before) {
        before.assert_untouched(worker, "after the forgeries");
    }
    for name in ["worker-0", "worker-1", "worker-2"] {
        assert_eq!(node_cordon(&admin, name).await.unwrap(), (false, false), "{name}");
    }
    let ever = cordons.lock().map(|cordons| cordons.ever.clone()).unwrap_or_default();
    assert!(ever.is_empty(), "a Node was cordoned at some point: {ever:?}");
    let plan =
        Api::<autopilot_api::v1beta2::Plan>::all(admin.clone()).get("autopilot").await.unwrap();
    assert!(
        matches!(state(&plan), PlanStateType::Schedulable | PlanStateType::SchedulableWait),
        "the Plan still runs, waiting for worker-2:\n{}",
        status_yaml(&plan)
    );
    watch.abort();
    delete_plan(&admin).await;
}

/// Every Node that became unschedulable while the watch ran, and the most at once.
#[derive(Debug, Default)]
struct Cordons {
    /// The Nodes unschedulable now.
    now: std::collections::BTreeSet<String>,
    /// Every Node that was unschedulable at some point.
    ever: std::collections::BTreeSet<String>,
    /// The most Nodes unschedulable at once.
    most_at_once: usize,
}

/// Watches every change of every Node into [`Cordons`]; stops when the task is aborted.
fn watch_cordons(
    admin: &kube::Client,
) -> (Arc<std::sync::Mutex<Cordons>>, tokio::task::JoinHandle<()>) {
    let cordons = Arc::new(std::sync::Mutex::new(Cordons::default()));
    let nodes: Api<Node> = Api::all(admin.clone());
    let seen = Arc::clone(&cordons);
    let task = tokio::spawn(async move {
        let mut events = watcher(nodes, watcher::Config::default()).applied_objects().boxed();
        while let Some(event) = events.next().await {
            let Ok(node) = event else { continue };
            let name = node.metadata.name.clone().unwrap_or_default();
            let cordoned = node.spec.as_ref().and_then(|spec| spec.unschedulable) == Some(true);
            let mut cordons = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if cordoned {
                cordons.now.insert(name.clone());
                cordons.ever.insert(name);
            } else {
                cordons.now.remove(&name);
            }
            cordons.most_at_once = cordons.most_at_once.max(cordons.now.len());
        }
    });
    (cordons, task)
}

/// The in-flight node's signal, copied verbatim (status dropped, a fresh `created`) onto the
/// pending targets `onto` by someone who may only patch Nodes; waits until each copy is
/// answered `Failed` and returns the reasons.
async fn copy_onto(
    admin: &kube::Client,
    forger: &kube::Client,
    real: &SignalData,
    onto: &[&str],
) -> Vec<String> {
    let copy = SignalData {
        created: signal::format_timestamp(jiff::Timestamp::now() + Duration::from_secs(1)),
        status: None,
        ..real.clone()
    };
    for name in onto {
        forge(forger, name, &copy).await;
    }
    let mut reasons = Vec::new();
    for name in onto {
        reasons.push(failed_reason(admin, name, &copy.created).await);
    }
    reasons
}

/// Grants the forger its rights and returns its client, once they took effect.
async fn forger_of(cluster: &integration::Cluster, admin: &kube::Client) -> kube::Client {
    grant_node_patching(admin).await;
    let forger = cluster
        .client_as(FORGER, &["system:authenticated"])
        .await
        .expect("a client for the forger");
    wait_for(Duration::from_secs(30), "the forger's rights to take effect", || async {
        Ok(Api::<Node>::all(forger.clone()).get("worker-0").await.ok())
    })
    .await
    .expect("the forger may read Nodes");
    forger
}

const THREE: [&str; 3] = ["worker-0", "worker-1", "worker-2"];

#[tokio::test]
async fn a_copy_of_the_in_flight_signal_bypasses_no_limit_during_a_run_or_after_an_abort() {
    let (v2, sha) = v2_build();
    let Fleet { cluster, client: admin, controllers: _controllers, workers } =
        FleetBuilder::new("signal-copies")
            .controllers(1)
            .workers(&THREE)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let forger = forger_of(&cluster, &admin).await;
    let (cordons, watch) = watch_cordons(&admin);

    // (a) One worker at a time; worker-0 downloads (held part-way) when its signal is copied
    // onto worker-1 and worker-2.
    let held =
        FileServer::start_with(Serve::HoldUntilReleased { body: v2.clone(), after: 1 << 20 })
            .await
            .unwrap();
    let update = update_to(V2, held.base_url(), &sha, None, Some(static_nodes(&THREE, 1)));
    create_plan(&admin, &plan("autopilot", "copies", vec![k0s_command(update)])).await.unwrap();
    held.wait_held(1, PLAN_TIMEOUT).await.unwrap();
    let real = node_signal(&admin, "worker-0").await.unwrap().expect("worker-0's signal");
    for reason in copy_onto(&admin, &forger, &real, &["worker-1", "worker-2"]).await {
        assert_refused(&reason, "not signalled by the leader");
    }
    assert_eq!(held.requests(), 1, "only worker-0 asked for the payload");
    {
        let cordons = cordons.lock().unwrap();
        assert!(
            !cordons.ever.contains("worker-1") && !cordons.ever.contains("worker-2"),
            "{cordons:?}"
        );
    }
    held.release();
    let done = wait_plan(&admin, "autopilot", Duration::from_secs(240), "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    assert!(targets(command(&done, 0)).iter().all(|t| t.state == TargetState::SignalCompleted));
    for worker in &workers {
        assert_eq!(version_on_disk(worker), V2, "{}", worker.node_name());
    }
    assert_eq!(held.requests(), 3, "each worker downloaded once, when the leader signalled it");
    assert_eq!(cordons.lock().unwrap().most_at_once, 1, "one node at a time: {cordons:?}");
    wait_no_autopilot_cordons(&admin, "copies").await.unwrap();
    delete_plan(&admin).await;

    // (b) The same copy after an abort: worker-0 finishes, the plan ends Aborted, and its
    // signal copied onto the others starts nothing.
    let held = FileServer::start_with(Serve::HoldUntilReleased { body: v2, after: 1 << 20 })
        .await
        .unwrap();
    let mut update = update_to(V2, held.base_url(), &sha, None, Some(static_nodes(&THREE, 1)));
    update.forceupdate = true;
    create_plan(&admin, &plan("autopilot", "aborted", vec![k0s_command(update)])).await.unwrap();
    held.wait_held(1, PLAN_TIMEOUT).await.unwrap();
    let plans: Api<autopilot_api::v1beta2::Plan> = Api::all(admin.clone());
    let abort =
        json!({ "metadata": { "annotations": { autopilot_api::keys::ANNOTATION_ABORT: "true" } } });
    plans.patch("autopilot", &PatchParams::default(), &Patch::Merge(&abort)).await.unwrap();
    held.release();
    wait_plan(&admin, "autopilot", PLAN_TIMEOUT, "Aborted", |p| state(p) == PlanStateType::Aborted)
        .await
        .unwrap();
    cordons.lock().unwrap().ever.clear();
    let real = node_signal(&admin, "worker-0").await.unwrap().expect("worker-0's signal");
    for reason in copy_onto(&admin, &forger, &real, &["worker-1", "worker-2"]).await {
        assert_refused(&reason, "the plan has ended (Aborted)");
    }
    assert_eq!(held.requests(), 1, "nothing downloads after the abort");
    assert!(cordons.lock().unwrap().ever.is_empty(), "nothing cordoned: {cordons:?}");
    let plan = plans.get("autopilot").await.unwrap();
    assert_eq!(state(&plan), PlanStateType::Aborted, "{}", status_yaml(&plan));
    watch.abort();
    delete_plan(&admin).await;
}

/// (c) On a real node whose drain a PodDisruptionBudget blocks: the forger rewrites the
/// in-flight signal's phase from `Cordoning` to `ApplyingUpdate`. The agent goes back to
/// `Cordoning` (the Plan records no drain), the node does not restart and its Pod is not
/// evicted; once the budget goes, the drain ends and only then the node updates.
#[tokio::test]
async fn a_forged_applying_update_restarts_nothing_before_the_drain_ends_on_real_nodes() {
    const NODE: &str = "worker-0";
    let (v2, sha) = v2_build();
    let server = FileServer::start(v2).await.unwrap();
    let Fleet { cluster, client: admin, controllers: _controllers, mut workers } =
        FleetBuilder::new("forged-phase")
            .workers(&[NODE])
            .real_workers()
            .agents(Agents::Real)
            .controller_args(&["--drain-timeout", "5m"])
            .start()
            .await
            .unwrap();
    let worker = workers.remove(0);
    wait_node_version(&admin, NODE, &binary_version(worker.binary_path())).await.unwrap();
    let forger = forger_of(&cluster, &admin).await;

    crate::real_nodes::wait_default_service_account(&admin).await.unwrap();
    let template = integration::real_node::workload::pod_template("web");
    integration::real_node::workload::deployment(&admin, "web", 1, template).await.unwrap();
    integration::real_node::workload::budget(&admin, "web-budget", "web", 1).await.unwrap();
    let web = crate::real_nodes::wait_app_ready(&admin, "web", 1).await.unwrap();
    let before = Before::of(&worker);

    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&[NODE], 1)));
    create_plan(&admin, &plan("autopilot", "forged-phase", vec![k0s_command(update)]))
        .await
        .unwrap();
    // The drain is blocked: the leader names the budget on the signal.
    let blocked = wait_for(PLAN_TIMEOUT, "the drain blocked by the budget", || async {
        let data = node_signal(&admin, NODE).await?;
        Ok(data.filter(|d| {
            d.phase() == Some(SignalPhase::Cordoning)
                && d.status
                    .as_ref()
                    .and_then(|s| s.reason.as_deref())
                    .is_some_and(|r| r.contains("web-budget"))
        }))
    })
    .await
    .unwrap();

    let forged = blocked
        .clone()
        .with_status(SignalStatus::new(SignalPhase::ApplyingUpdate, jiff::Timestamp::now()));
    forge(&forger, NODE, &forged).await;
    // Only the agent writes `Cordoning`: the leader's drain never does.
    wait_for(ANSWERED, "the agent to go back to Cordoning", || async {
        let data = node_signal(&admin, NODE).await?;
        Ok(data
            .filter(|d| d.created == blocked.created && d.phase() == Some(SignalPhase::Cordoning)))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", worker.log_tail(60)));
    let log = worker.log_tail(400);
    assert!(log.contains("does not record the drain of worker-0"), "the agent says why:\n{log}");
    // Staged (downloaded and self-tested before the drain), not swapped or restarted.
    assert!(worker.is_running(), "the worker runs:\n{}", worker.log_tail(40));
    assert_eq!(worker.pid(), before.pid, "the same worker process runs");
    assert!(std::fs::read(worker.binary_path()).unwrap() == before.bytes, "the binary is the same");
    assert_eq!(
        crate::real_nodes::wait_app_ready(&admin, "web", 1).await.unwrap(),
        web,
        "not evicted"
    );

    // The budget goes: the drain ends, and only then the node updates.
    Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(admin.clone(), "default")
        .delete("web-budget", &Default::default())
        .await
        .unwrap();
    let done = wait_plan(&admin, "autopilot", PLAN_TIMEOUT, "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    let target = target(&done, 0, NODE);
    assert_eq!(target.drained.as_deref(), Some(blocked.created.as_str()), "{}", status_yaml(&done));
    assert_eq!(version_on_disk(&worker), V2);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), "default");
    for name in &web {
        assert!(
            pods.get_opt(name).await.unwrap().is_none(),
            "{name} was evicted before the update"
        );
    }
    wait_no_autopilot_cordons(&admin, "autopilot").await.unwrap();
}

/// Whether the Plan records `name` as `SignalCompleted` in its first command.
fn recorded_completed(plan: &autopilot_api::v1beta2::Plan, name: &str) -> bool {
    plan.status.as_ref().and_then(|status| status.commands.first()).is_some_and(|command| {
        targets(command).iter().any(|t| t.name == name && t.state == TargetState::SignalCompleted)
    })
}

/// The forger writes a finished node's own signal back to `phase` (same `created`, same
/// command: only the phase moves back); waits until it is answered `Failed` and returns the
/// reason.
async fn rewind(
    admin: &kube::Client,
    forger: &kube::Client,
    name: &str,
    phase: SignalPhase,
) -> String {
    let finished = node_signal(admin, name).await.expect("reading the Node").expect("a signal");
    assert_eq!(finished.phase(), Some(SignalPhase::Completed), "{name}: {finished:?}");
    let rewound = finished.clone().with_status(SignalStatus::new(phase, jiff::Timestamp::now()));
    forge(forger, name, &rewound).await;
    failed_reason(admin, name, &finished.created).await
}

/// Whether `reason` refuses a rewind: the agent's (`refused: rewound: …`) or the drain's
/// (`not drained: refused: rewound: …`) answer.
fn assert_rewind_refused(reason: &str) {
    assert!(
        reason.starts_with("refused: rewound: ")
            || reason.starts_with("not drained: refused: rewound: "),
        "{reason:?} should refuse a rewind"
    );
}

/// Whether the plan's `Ready` condition is `True`.
fn ready(plan: &autopilot_api::v1beta2::Plan) -> bool {
    plan.status.as_ref().is_some_and(|status| {
        status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// A finished node's signal written back to an earlier phase by someone who may patch Nodes
/// (DESIGN §14: a target that ended accepts only its terminal phase):
///
/// - after a run completed, worker-0 rewound to `Cordoning` and worker-1 to `Downloading`:
///   both answered `Failed` with a rewind refusal, nothing downloaded, cordoned or restarted,
///   and the Plan stays `Completed` with `Ready=True` (watched for [`STAYS_READY`]);
/// - during a run (`concurrent: 1`, worker-2 without an agent holds the run open after
///   worker-0 and worker-1 completed), worker-0 rewound to `Cordoning`: refused the same
///   way, never cordoned again, nothing downloaded, the workers keep their process.
#[tokio::test]
async fn a_finished_nodes_signal_written_back_is_refused_during_and_after_a_run() {
    const STAYS_READY: Duration = Duration::from_secs(15);
    let (v2, sha) = v2_build();
    let payloads = FileServer::start(v2).await.unwrap();
    let Fleet { cluster, client: admin, controllers: _controllers, mut workers } =
        FleetBuilder::new("signal-rewind")
            .controllers(1)
            .workers(&THREE)
            .agents(Agents::Real)
            .node_args("worker-2", &[NO_AGENT])
            .start()
            .await
            .unwrap();
    let _without_agent = workers.pop().expect("worker-2");
    let forger = forger_of(&cluster, &admin).await;
    let (cordons, watch) = watch_cordons(&admin);

    // After a run: worker-0 and worker-1 update, the Plan completes.
    let two = static_nodes(&["worker-0", "worker-1"], 2);
    let update = update_to(V2, payloads.base_url(), &sha, None, Some(two));
    create_plan(&admin, &plan("autopilot", "rewind-after", vec![k0s_command(update)]))
        .await
        .unwrap();
    wait_plan(&admin, "autopilot", PLAN_TIMEOUT, "Completed and Ready", |p| {
        state(p) == PlanStateType::Completed && ready(p)
    })
    .await
    .unwrap();
    wait_no_autopilot_cordons(&admin, "rewind-after").await.unwrap();
    let before: Vec<Before> = workers.iter().map(Before::of).collect();
    let downloads = payloads.requests();
    cordons.lock().unwrap().ever.clear();
    assert_rewind_refused(&rewind(&admin, &forger, "worker-0", SignalPhase::Cordoning).await);
    assert_rewind_refused(&rewind(&admin, &forger, "worker-1", SignalPhase::Downloading).await);
    let after = watch_plan_for(&admin, "autopilot", STAYS_READY, |p| {
        (state(p) == PlanStateType::Completed && ready(p))
            .then_some(())
            .ok_or_else(|| "the completed Plan is no longer Ready".to_owned())
    })
    .await
    .unwrap();
    assert!(ready(&after), "{}", status_yaml(&after));
    assert_eq!(payloads.requests(), downloads, "nothing downloaded again");
    assert!(cordons.lock().unwrap().ever.is_empty(), "nothing cordoned: {cordons:?}");
    for (worker, before) in workers.iter().zip(&before) {
        assert_eq!(worker.pid(), before.pid, "{}: the same process runs", worker.node_name());
        assert_eq!(version_on_disk(worker), V2, "{}", worker.node_name());
    }
    delete_plan(&admin).await;

    // During a run: all three, one at a time (forced: they run v2 already); worker-2 never
    // answers, so the run stays open once worker-0 and worker-1 completed.
    let mut update = update_to(V2, payloads.base_url(), &sha, None, Some(static_nodes(&THREE, 1)));
    update.forceupdate = true;
    create_plan(&admin, &plan("autopilot", "rewind-during", vec![k0s_command(update)]))
        .await
        .unwrap();
    let running = wait_plan(&admin, "autopilot", PLAN_TIMEOUT, "worker-0 and worker-1 done", |p| {
        recorded_completed(p, "worker-0") && recorded_completed(p, "worker-1")
    })
    .await
    .unwrap();
    assert!(!state(&running).is_terminal(), "the run goes on:\n{}", status_yaml(&running));
    wait_no_autopilot_cordons(&admin, "rewind-during").await.unwrap();
    let before: Vec<Before> = workers.iter().map(Before::of).collect();
    let downloads = payloads.requests();
    cordons.lock().unwrap().ever.clear();
    assert_rewind_refused(&rewind(&admin, &forger, "worker-0", SignalPhase::Cordoning).await);
    // The drain and the agent both looked at it (either answered); the next pass of each
    // sees it `Failed`: a rewind that was acted on would show as a cordon by now.
    let during = watch_plan_for(&admin, "autopilot", STAYS_READY, |p| {
        (!state(p).is_terminal())
            .then_some(())
            .ok_or_else(|| "the run ended while worker-2 never answered".to_owned())
    })
    .await
    .unwrap();
    assert!(recorded_completed(&during, "worker-0"), "{}", status_yaml(&during));
    assert!(cordons.lock().unwrap().ever.is_empty(), "worker-0 cordoned again: {cordons:?}");
    assert_eq!(payloads.requests(), downloads, "nothing downloaded again");
    for (worker, before) in workers.iter().zip(&before) {
        assert_eq!(worker.pid(), before.pid, "{}: the same process runs", worker.node_name());
    }
    watch.abort();
    delete_plan(&admin).await;
}
