//! A real update of two workers whose drain is held by a PodDisruptionBudget (DESIGN §5,
//! REF §14 "controller+worker with a PDB"), with the real node agents: worker-0 runs pods
//! a budget protects, so the leader cordons it and keeps it in `Cordoning` — the reason
//! naming the refused pod and the budget, the binary still v1 — until the budget is
//! removed; then worker-0 and worker-1 update to v2. worker-1 was cordoned by an
//! administrator before the plan: it updates, and stays cordoned afterwards.
//!
//! On real nodes ([`integration::real_node`]): the web Pods are a Deployment's, kept on
//! worker-0 by a node selector and running real containers; the budget's `disruptionsAllowed`
//! is the controller-manager's, and the evicted Pods' containers are stopped by the kubelet.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::http::FileServer;
use integration::{K0sProcess, wait_for};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::real_nodes::{budget, pinned_deployment, wait_app_ready, wait_default_service_account};
use crate::support::*;

/// How long the test watches the held node before it removes the budget.
const HELD_WINDOW: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_budget_holds_a_real_update_in_cordoning_until_it_is_removed_on_real_nodes() {
    let (v2_bytes, sha) = v2_build();
    let server = FileServer::start(v2_bytes).await.unwrap();

    let names = ["worker-0", "worker-1"];
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("update-drain-pdb")
            .workers(&names)
            .real_workers()
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let v1 = binary_version(workers[0].binary_path());
    assert_ne!(v1, V2);
    for name in names {
        wait_node_version(&client, name, &v1).await.unwrap();
    }
    let pids: Vec<u32> = workers.iter().map(|w| w.pid()).collect();

    // Two web Pods on worker-0, Running and Ready, and a budget that needs both of them.
    wait_default_service_account(&client).await.unwrap();
    pinned_deployment(&client, "web", "worker-0", 2).await.unwrap();
    budget(&client, "web-budget", "web", 2).await.unwrap();
    let before = wait_app_ready(&client, "web", 2).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    // An administrator cordoned worker-1 before the update.
    let nodes: Api<Node> = Api::all(client.clone());
    let cordon = json!({ "spec": { "unschedulable": true } });
    nodes.patch("worker-1", &PatchParams::default(), &Patch::Merge(&cordon)).await.unwrap();

    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&names, 1)));
    create_plan(&client, &plan("autopilot", "v2", vec![k0s_command(update)])).await.unwrap();

    // worker-0 downloaded v2 and is held in Cordoning by the budget, which its reason names
    // together with the refused pod.
    held_in_cordoning(&client).await;

    // It stays held while the budget exists: the plan shows worker-0 in Cordoning with the
    // budget named on its target, worker-1 waits its turn, no pod is evicted and worker-0
    // still runs v1 from an unswapped binary.
    stays_held(&client, before.clone(), &workers[0], &v1).await;

    // Remove the budget: worker-0 is drained and updates, then worker-1.
    pdbs.delete("web-budget", &DeleteParams::default()).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    for target in targets(command(&done, 0)) {
        assert_eq!(target.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    let remaining: Vec<String> =
        pods.list(&Default::default()).await.unwrap().items.iter().map(|p| p.name_any()).collect();
    assert!(
        before.iter().all(|pod| !remaining.contains(pod)),
        "the web pods {before:?} were evicted: {remaining:?}"
    );
    // Their replacements run on worker-0 again once it is back.
    let after = wait_app_ready(&client, "web", 2).await.unwrap();
    assert!(after.is_disjoint(&before), "new web Pods {after:?}");

    for (worker, pid) in workers.iter().zip(pids) {
        let name = worker.node_name();
        assert_eq!(binary_version(worker.binary_path()), V2, "{name} on disk");
        assert!(worker.is_running() && worker.pid() == pid, "{name} re-executed in place");
        wait_node_version(&client, name, V2).await.unwrap();
        let signal = node_signal(&client, name).await.unwrap().unwrap();
        assert_eq!(signal.phase(), Some(SignalPhase::Completed), "{name}");
    }
    assert_eq!(
        node_cordon(&client, "worker-0").await.unwrap(),
        (false, false),
        "worker-0 uncordoned after its update"
    );
    assert_eq!(
        node_cordon(&client, "worker-1").await.unwrap(),
        (true, false),
        "the administrator's cordon on worker-1 stays, never claimed by autopilot"
    );
}

/// worker-0 downloaded v2 and is held in Cordoning by the budget, which its reason names
/// together with the refused pod; autopilot cordoned it.
async fn held_in_cordoning(client: &kube::Client) {
    let reason = wait_for(PLAN_TIMEOUT, "worker-0 held in Cordoning by the budget", || async {
        let status = node_signal(client, "worker-0").await?.and_then(|s| s.status);
        Ok(status
            .filter(|s| s.status == SignalPhase::Cordoning)
            .and_then(|s| s.reason)
            .filter(|r| r.contains("refused")))
    })
    .await
    .expect("worker-0 held in Cordoning by the budget");
    assert!(reason.contains("default/web-"), "the refused pod is named: {reason}");
    assert!(reason.contains("web-budget"), "the budget is named: {reason}");
    assert_eq!(
        node_cordon(client, "worker-0").await.expect("reading the cordon"),
        (true, true),
        "cordoned by autopilot"
    );
}

/// worker-0 stays held while the budget exists: the plan shows it in Cordoning with the
/// budget named on its target, worker-1 waits its turn, no pod (of `before`) is evicted and
/// worker-0 still runs `v1` from an unswapped binary.
async fn stays_held(
    client: &kube::Client,
    before: std::collections::BTreeSet<String>,
    worker_0: &K0sProcess,
    v1: &str,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let moved_on = wait_for(HELD_WINDOW, "worker-0 to leave Cordoning", || async {
        let status = node_signal(client, "worker-0").await?.and_then(|s| s.status);
        Ok(status.filter(|s| s.status != SignalPhase::Cordoning))
    })
    .await;
    assert!(moved_on.is_err(), "worker-0 passed Cordoning while the budget forbade eviction");
    let held = wait_plan(
        client,
        "autopilot",
        PLAN_TIMEOUT,
        "worker-0 held by the budget on the plan",
        |p| {
            let commands = p.status.as_ref().map(|s| s.commands.as_slice()).unwrap_or_default();
            commands.first().is_some_and(|c| {
                targets(c).iter().any(|t| {
                    t.name == "worker-0"
                        && t.phase == Some(SignalPhase::Cordoning)
                        && t.reason.as_deref().is_some_and(|r| r.contains("web-budget"))
                })
            })
        },
    )
    .await
    .expect("worker-0 held by the budget on the plan");
    // Running (`SchedulableWait`), not held for readiness and not failed.
    assert_eq!(state(&held), PlanStateType::SchedulableWait, "{}", status_yaml(&held));
    assert_eq!(
        target(&held, 0, "worker-0").state,
        TargetState::SignalSent,
        "{}",
        status_yaml(&held)
    );
    assert_eq!(
        target(&held, 0, "worker-1").state,
        TargetState::SignalPending,
        "{}",
        status_yaml(&held)
    );
    let now: std::collections::BTreeSet<String> = pods
        .list(&Default::default())
        .await
        .expect("listing Pods")
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(now, before, "no pod evicted");
    assert_eq!(binary_version(worker_0.binary_path()), v1, "no swap before the drain");
    assert!(
        !worker_0.binary_path().with_file_name("k0s.prev").exists(),
        "no swap before the drain"
    );
}
