//! The central drain works as `kubectl drain` does (issue 57), on real nodes
//! ([`integration::real_node`]: the scheduler places the Pods, the kubelet runs and stops
//! them); the node side is the test responder acting as an agent with central cordoning
//! (`Behaviour::CompleteWithLeader`).
//!
//! - The drain of a signal evicts the Pods it found when it began, all at once, and waits
//!   for those only: a budget refusing one Pod does not keep the others from being evicted
//!   (the first Pod listed is the refused one); the replacements of a Deployment that
//!   tolerates the cordon land back on the node and are neither evicted nor waited for (a
//!   budget keeps the drain going meanwhile, on a Pod listed after them); a Pod stuck
//!   terminating fails the node at `--drain-timeout`, named, and
//!   `drainOptions.skipWaitForDeleteTimeout` lets the drain go on without it.
//! - A bare Pod and a Pod with `emptyDir` data hold an `Always` drain, each named with what
//!   evicting it would lose, until `--drain-timeout` fails the node (nothing evicted, the
//!   node uncordoned); `IfPossible` goes on without them, naming them; `drainOptions.force`
//!   and `deleteEmptydirData` let them go.

use std::collections::BTreeSet;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    DrainOptions, DrainPolicy, PlanCommandK0sUpdate, PlanStateType, TargetState,
};
use integration::real_node::workload;
use integration::responder::{Behaviour, Config, Responder};
use integration::wait_for;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::real_nodes::{
    budget, pinned_deployment, run_to_completion, wait_app_ready, wait_default_service_account,
};
use crate::support::*;

const NODE: &str = "worker-0";

/// The finalizer that keeps the `c-stuck` Pods terminating once deleted.
const HOLD: &str = "autopilot.test/hold";

/// One real worker whose signals the responder answers, the leader's drain timing out
/// after `drain_timeout`.
async fn one_real_worker(name: &str, drain_timeout: &str) -> (Fleet, Responder) {
    let fleet = FleetBuilder::new(name)
        .workers(&[NODE])
        .real_workers()
        .controller_args(&["--drain-timeout", drain_timeout])
        .start()
        .await
        .expect("the fleet");
    let config = Config::new().default_behaviour(Behaviour::CompleteWithLeader);
    let responder = Responder::start(fleet.client.clone(), config).await.expect("the responder");
    wait_default_service_account(&fleet.client).await.expect("the default ServiceAccount");
    (fleet, responder)
}

/// A forced update of worker-0 alone.
fn update_worker() -> PlanCommandK0sUpdate {
    k0s_update(None, Some(static_nodes(&[NODE], 1)))
}

/// The UIDs of the Pods of `app: app` in `default` (terminating ones included).
async fn uids(pods: &Api<Pod>, app: &str) -> BTreeSet<String> {
    let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await;
    list.expect("listing Pods").items.iter().filter_map(|p| p.metadata.uid.clone()).collect()
}

/// The UIDs of the Pods of `app: app` in `default` that are not being deleted.
async fn live_uids(pods: &Api<Pod>, app: &str) -> BTreeSet<String> {
    let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await;
    let items = list.expect("listing Pods").items;
    items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid.clone())
        .collect()
}

/// worker-0's signal reason once it is in `Cordoning` with a reason containing `text`.
async fn cordoning_with(client: &kube::Client, text: &str) -> String {
    wait_for(PLAN_TIMEOUT, &format!("worker-0 in Cordoning, its reason naming {text}"), || async {
        let status = node_signal(client, NODE).await?.and_then(|s| s.status);
        Ok(status
            .filter(|s| s.status == SignalPhase::Cordoning)
            .and_then(|s| s.reason)
            .filter(|r| r.contains(text)))
    })
    .await
    .expect("worker-0 held in Cordoning")
}

/// The plan's end: `ApplyFailed`, worker-0's target failed with a reason (returned), and no
/// autopilot cordon left.
async fn failed_reason(client: &kube::Client) -> String {
    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed).await;
    let failed = failed.expect("the plan fails");
    let worker = target(&failed, 0, NODE);
    assert_eq!(worker.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    wait_no_autopilot_cordons(client, "autopilot").await.expect("worker-0 uncordoned");
    worker.reason.clone().unwrap_or_default()
}

/// Deployment `name`: `replicas` Pods kept on worker-0 that tolerate its cordon, so the
/// scheduler puts the replacements of evicted ones back on it.
async fn returning_deployment(client: &kube::Client, name: &str, replicas: usize) {
    let mut template = workload::pod_template(name);
    template["spec"]["nodeSelector"] = json!({ "kubernetes.io/hostname": NODE });
    template["spec"]["tolerations"] = json!([{
        "key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule",
    }]);
    workload::deployment(client, name, replicas, template).await.expect("the Deployment");
}

/// Deletes the budget `name` in `default`.
async fn delete_budget(client: &kube::Client, name: &str) {
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    budgets.delete(name, &Default::default()).await.expect("deleting the budget");
}

/// Deletes the budget `name` that held the drain; the plan then completes with the node.
async fn budget_gone_the_plan_completes(client: &kube::Client, name: &str) {
    delete_budget(client, name).await;
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan completes");
    assert_eq!(
        target(&done, 0, NODE).state,
        TargetState::SignalCompleted,
        "{}",
        status_yaml(&done)
    );
}

#[tokio::test]
async fn a_budget_refusing_one_pod_keeps_none_of_the_others_from_being_evicted_on_real_nodes() {
    let (fleet, _responder) = one_real_worker("drain-at-once", "45s").await;
    let client = fleet.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // a-held: one Pod its budget allows no disruption of, listed first ("a-" sorts first);
    // b-free: three Pods no budget protects.
    pinned_deployment(&client, "a-held", NODE, 1).await.unwrap();
    budget(&client, "a-held-budget", "a-held", 1).await.unwrap();
    pinned_deployment(&client, "b-free", NODE, 3).await.unwrap();
    wait_app_ready(&client, "a-held", 1).await.unwrap();
    wait_app_ready(&client, "b-free", 3).await.unwrap();
    let found = uids(&pods, "b-free").await;

    create_plan(&client, &plan("autopilot", "at-once", vec![k0s_command(update_worker())]))
        .await
        .unwrap();
    // The budget refuses a-held's eviction, and the three b-free Pods are evicted all the same
    // (all at once, not one at a time stopping at the first refusal).
    wait_for(PLAN_TIMEOUT, "the b-free Pods evicted while a-held is refused", || async {
        let status = node_signal(&client, NODE).await?.and_then(|s| s.status);
        let refused = status.and_then(|s| s.reason).is_some_and(|r| r.contains("a-held-budget"));
        Ok((refused && live_uids(&pods, "b-free").await.is_disjoint(&found)).then_some(()))
    })
    .await
    .unwrap();
    let status = node_signal(&client, NODE).await.unwrap().and_then(|s| s.status);
    assert_eq!(status.map(|s| s.status), Some(SignalPhase::Cordoning), "a-held holds it");

    budget_gone_the_plan_completes(&client, "a-held-budget").await;
    wait_no_autopilot_cordons(&client, "autopilot").await.unwrap();
}

#[tokio::test]
async fn a_replacement_that_returns_to_the_cordoned_node_is_not_evicted_again_on_real_nodes() {
    let (fleet, _responder) = one_real_worker("drain-found", "45s").await;
    let client = fleet.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // b-back: three Pods whose replacements come back to worker-0. z-held: one Pod its budget
    // allows no disruption of, which keeps the drain going while they do.
    returning_deployment(&client, "b-back", 3).await;
    pinned_deployment(&client, "z-held", NODE, 1).await.unwrap();
    budget(&client, "z-held-budget", "z-held", 1).await.unwrap();
    wait_app_ready(&client, "b-back", 3).await.unwrap();
    wait_app_ready(&client, "z-held", 1).await.unwrap();
    let found = uids(&pods, "b-back").await;

    create_plan(&client, &plan("autopilot", "found", vec![k0s_command(update_worker())]))
        .await
        .unwrap();
    cordoning_with(&client, "z-held-budget").await;
    // The b-back Pods found are evicted; their replacements run on worker-0 again while it
    // drains, and are left alone.
    let replacements = wait_for(PLAN_TIMEOUT, "3 b-back replacements Ready", || async {
        let list = pods.list(&ListParams::default().labels("app=b-back")).await?.items;
        let ready = list.iter().filter(|p| workload::pod_ready(p)).count();
        let now: BTreeSet<String> = list.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        Ok((ready == 3 && now.len() == 3 && now.is_disjoint(&found)).then_some(now))
    })
    .await
    .unwrap();
    let status = node_signal(&client, NODE).await.unwrap().and_then(|s| s.status);
    assert_eq!(status.map(|s| s.status), Some(SignalPhase::Cordoning), "z-held holds it");

    // Without the budget the drain ends: z-held goes, the replacements stay.
    budget_gone_the_plan_completes(&client, "z-held-budget").await;
    assert_eq!(uids(&pods, "b-back").await, replacements, "no replacement was evicted");
    wait_no_autopilot_cordons(&client, "autopilot").await.unwrap();
}

#[tokio::test]
async fn a_pod_stuck_terminating_fails_the_node_at_the_drain_timeout_on_real_nodes() {
    let (fleet, _responder) = one_real_worker("drain-stuck", "20s").await;
    let client = fleet.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // c-stuck: a Pod a finalizer keeps terminating once evicted. The drain waits for it, the
    // wait counting against the drain timeout: the node fails naming it.
    let mut template = workload::pod_template("c-stuck");
    template["metadata"]["finalizers"] = json!([HOLD]);
    template["spec"]["nodeSelector"] = json!({ "kubernetes.io/hostname": NODE });
    workload::deployment(&client, "c-stuck", 1, template).await.unwrap();
    wait_app_ready(&client, "c-stuck", 1).await.unwrap();
    let stuck = pods.list(&ListParams::default().labels("app=c-stuck")).await.unwrap().items;
    let stuck = stuck[0].name_any();
    create_plan(&client, &plan("autopilot", "stuck", vec![k0s_command(update_worker())]))
        .await
        .unwrap();
    cordoning_with(&client, &format!("waiting for pod(s) default/{stuck} to terminate")).await;
    let reason = failed_reason(&client).await;
    assert_eq!(
        reason,
        format!(
            "drain of worker-0 blocked for 20s: waiting for pod(s) default/{stuck} to terminate"
        )
    );
    delete_plan(&client).await;

    // skipWaitForDeleteTimeout: the drain stops waiting for a Pod 5 s past its deletion
    // timestamp (the one still stuck, and its replacement once evicted in turn).
    let update = PlanCommandK0sUpdate {
        drain_options: Some(DrainOptions {
            skip_wait_for_delete_timeout: Some(5),
            ..DrainOptions::default()
        }),
        ..update_worker()
    };
    assert_eq!(run_to_completion(&client, "skip-wait", update).await, None);
    let left = pods.get(&stuck).await.expect("the Pod stuck terminating");
    assert!(left.metadata.deletion_timestamp.is_some(), "{stuck} is still terminating");
    release_stuck(&client).await;
}

/// Deletes Deployment `c-stuck` and lets its Pods go (their finalizer removed).
async fn release_stuck(client: &kube::Client) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments.delete("c-stuck", &Default::default()).await.expect("deleting c-stuck");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let release = json!({ "metadata": { "finalizers": null } });
    let list = pods.list(&ListParams::default().labels("app=c-stuck")).await;
    for pod in list.expect("listing the c-stuck Pods").items {
        let patch = Patch::Merge(&release);
        pods.patch(&pod.name_any(), &PatchParams::default(), &patch).await.expect("releasing");
    }
}

#[tokio::test]
async fn a_bare_pod_and_empty_dir_data_hold_the_drain_until_the_plan_opts_in_on_real_nodes() {
    let (fleet, _responder) = one_real_worker("drain-holds", "15s").await;
    let client = fleet.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // lonely: a bare Pod (gone for good once evicted); cache: a Deployment's Pod with an
    // emptyDir volume (its data lost once evicted).
    let lonely: Pod = serde_json::from_value(json!({
        "metadata": { "name": "lonely", "labels": { "app": "lonely" } },
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 5,
            "containers": [workload::container("app", workload::SERVE)],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &lonely).await.unwrap();
    let mut template = workload::pod_template("cache");
    template["spec"]["nodeSelector"] = json!({ "kubernetes.io/hostname": NODE });
    template["spec"]["volumes"] = json!([{ "name": "scratch", "emptyDir": {} }]);
    template["spec"]["containers"][0]["volumeMounts"] =
        json!([{ "name": "scratch", "mountPath": "/scratch" }]);
    workload::deployment(&client, "cache", 1, template).await.unwrap();
    wait_app_ready(&client, "lonely", 1).await.unwrap();
    let cache = wait_app_ready(&client, "cache", 1).await.unwrap();
    let cache = cache.first().expect("the cache Pod").clone();
    let before = [uids(&pods, "lonely").await, uids(&pods, "cache").await];

    // Always (the default): held before any eviction, each Pod named with what it would lose,
    // until the drain timeout fails the node, which is uncordoned.
    create_plan(&client, &plan("autopilot", "held", vec![k0s_command(update_worker())]))
        .await
        .unwrap();
    let held = cordoning_with(&client, "pod(s) held").await;
    let named = format!(
        "pod(s) held: default/{cache} (emptyDir data that would be lost \
         (drainOptions.deleteEmptydirData evicts it)), default/lonely (no controller, so it \
         would be gone for good (drainOptions.force evicts it))"
    );
    assert_eq!(held, format!("draining worker-0: {named}; retrying"));
    let reason = failed_reason(&client).await;
    assert_eq!(reason, format!("drain of worker-0 blocked for 15s: {named}"));
    let live = [live_uids(&pods, "lonely").await, live_uids(&pods, "cache").await];
    assert_eq!(live, before, "nothing was evicted");
    delete_plan(&client).await;

    // IfPossible: the node goes on without draining them, the note naming them.
    let update = PlanCommandK0sUpdate { drain: Some(DrainPolicy::IfPossible), ..update_worker() };
    let note = run_to_completion(&client, "if-possible", update).await;
    assert_eq!(note, Some(format!("cordoned, not drained of {named} (drain: IfPossible)")));
    let live = [live_uids(&pods, "lonely").await, live_uids(&pods, "cache").await];
    assert_eq!(live, before, "nothing was evicted");

    // Opted in: both go.
    let update = PlanCommandK0sUpdate {
        drain_options: Some(DrainOptions {
            force: true,
            delete_emptydir_data: true,
            ..DrainOptions::default()
        }),
        ..update_worker()
    };
    assert_eq!(run_to_completion(&client, "opted-in", update).await, None);
    assert!(pods.get_opt("lonely").await.unwrap().is_none(), "the bare Pod was evicted");
    assert!(uids(&pods, "cache").await.is_disjoint(&before[1]), "the cache Pod was evicted");
}
