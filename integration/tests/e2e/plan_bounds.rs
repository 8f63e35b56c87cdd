//! Bounds on what nodes and Plan authors can write (DESIGN §14), on the real control plane
//! with real agents. One cluster: a controller and six workers with their agents, and a
//! seventh worker without one. One Plan, edited from run to run:
//!
//! 1. a check whose every node reports 16 KiB of output into its message (`{{ .Results }}`):
//!    the plan ends `PreflightFailed`, each verdict message is at most 1 KiB and the Plan
//!    object stays under 1 MiB;
//! 2. a worker without an agent carries a signal of the Plan's earlier run dated in the year
//!    2999, in `Downloading`: it holds the next run's only slot (`concurrent: 1`) while
//!    counted, and stops counting once the run's `progressTimeout` of 30 s passed on the
//!    leader's clock: the target is signalled within [`AGED_OUT`] of the run's start;
//! 3. an expensive `boolExpr`: the plan ends within 30 s, refused with the limit named,
//!    while the leader renews its Lease and `k0s status` answers on the controller.

use std::time::{Duration, Instant};

use autopilot_api::keys;
use autopilot_api::signal::{self, SignalData, SignalPhase, SignalStatus};
use autopilot_api::v1beta2::{CheckStatus, Plan, PlanCommand, PlanCommandPreflight, PlanStateType};
use integration::{K0sProcess, run_k0s, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::*;

const WORKERS: [&str; 6] = ["worker-0", "worker-1", "worker-2", "worker-3", "worker-4", "worker-5"];

/// The worker without an agent.
const SILENT: &str = "worker-6";

/// How long after the run starts its target must be signalled despite the future-dated
/// signal: the 30 s progress timeout plus a pass's slack.
const AGED_OUT: Duration = Duration::from_secs(50);

/// The largest verdict message kept in the Plan status.
const MAX_MESSAGE: usize = 1024;

fn preflight(value: serde_json::Value) -> PlanCommand {
    let preflight: PlanCommandPreflight =
        serde_json::from_value(value).expect("a valid preflight command");
    PlanCommand { k0supdate: None, airgapupdate: None, preflight: Some(preflight) }
}

/// Writes the node-local `exec` allow-list of `worker`.
fn allow_list(worker: &K0sProcess, yaml: &str) {
    std::fs::write(worker.data_dir().join("preflight-exec.yaml"), yaml).expect("allow-list");
}

/// Replace the Plan's spec (a new run starts once the current one ended).
async fn replace_spec(client: &kube::Client, id: &str, commands: Vec<PlanCommand>) {
    let spec = plan("autopilot", id, commands).spec;
    Api::<Plan>::all(client.clone())
        .patch("autopilot", &PatchParams::default(), &Patch::Merge(&json!({ "spec": spec })))
        .await
        .expect("replacing the Plan's spec");
}

/// The Plan once its run of `id` ended.
async fn ended(client: &kube::Client, id: &str, within: Duration) -> Plan {
    let plans: Api<Plan> = Api::all(client.clone());
    wait_for(within, &format!("run {id} to end"), || async {
        let plan = plans.get("autopilot").await?;
        let ended = plan
            .status
            .as_ref()
            .is_some_and(|s| s.plan_id.as_deref() == Some(id) && s.state.is_terminal());
        Ok(ended.then_some(plan))
    })
    .await
    .expect("the run ends")
}

#[tokio::test]
async fn node_output_node_clocks_and_plan_expressions_are_bounded() {
    // Real agents, but the silent worker's stays off.
    let Fleet { cluster: _cluster, client, controllers, mut workers } =
        FleetBuilder::new("plan-bounds")
            .controllers(1)
            .workers(&[&WORKERS[..], &[SILENT]].concat())
            .agents(Agents::Real)
            .node_args(SILENT, &[NO_AGENT])
            .start()
            .await
            .unwrap();
    let client = &client;
    let _silent = workers.pop().expect("the silent worker");
    let plans: Api<Plan> = Api::all(client.clone());

    // 1. Large check output on six nodes.
    let done = large_check_output(client, &workers, &plans).await;
    // 2. A future-dated signal of the earlier run on the silent worker.
    forged_future_signal(client, &plans, &done).await;
    // 3. An expensive boolExpr, while the leader keeps its Lease and `k0s status` answers.
    expensive_bool_expr(client, &controllers).await;
    delete_plan(client).await;
}

/// Step 1: large check output on six nodes; returns the ended plan.
async fn large_check_output(
    client: &kube::Client,
    workers: &[K0sProcess],
    plans: &Api<Plan>,
) -> Plan {
    for worker in workers {
        allow_list(
            worker,
            "entries:\n  - name: loud\n    path: /bin/sh\n    outputBytes: 16384\n    \
             args: ['-c', 'yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | head -c 20000']\n",
        );
    }
    let loud = preflight(json!({
        "checks": [{
            "id": "loud",
            "targets": { "workers": serde_json::to_value(static_nodes(&WORKERS, 1)).expect("targets as JSON") },
            "command": {"id": "exec", "data": {"name": "loud"}},
            "results": [{"status": "error", "message": "said {{ .Results }}"}]
        }]
    }));
    create_plan(client, &plan("autopilot", "loud", vec![loud])).await.expect("creating the plan");
    let done = ended(client, "loud", PLAN_TIMEOUT).await;
    assert_eq!(state(&done), PlanStateType::PreflightFailed, "{}", status_yaml(&done));
    let checks = &command(&done, 0).preflight.as_ref().expect("verdicts").checks;
    assert_eq!(checks[0].nodes.len(), WORKERS.len(), "{}", status_yaml(&done));
    for node in &checks[0].nodes {
        assert_eq!(node.status, CheckStatus::Error);
        assert!(node.message.starts_with("said xxx"), "{}: {:.40}", node.name, node.message);
        assert!(node.message.len() <= MAX_MESSAGE, "{}: {} bytes", node.name, node.message.len());
    }
    let stored = plans.get("autopilot").await.expect("reading the Plan");
    let bytes = serde_json::to_vec(&stored).expect("the Plan as JSON").len();
    assert!(bytes < 1024 * 1024, "the Plan is {bytes} bytes");
    done
}

/// Step 2: a future-dated signal of the earlier run (`done`'s) on the silent worker ages
/// out within the command's progress deadline.
async fn forged_future_signal(client: &kube::Client, plans: &Api<Plan>, done: &Plan) {
    let earlier = done.status.as_ref().and_then(|s| s.run_id.clone()).expect("a run id");
    let future: jiff::Timestamp = "2999-01-01T00:00:00Z".parse().expect("a timestamp");
    let forged = SignalData {
        plan_id: "loud".to_owned(),
        created: signal::format_timestamp(future),
        command: autopilot_api::signal::SignalCommand {
            rollback: None,
            id: 0,
            k0supdate: None,
            airgapupdate: None,
            preflight: Some(autopilot_api::signal::CommandPreflight {
                checks: vec!["loud".to_owned()],
            }),
        },
        status: Some(SignalStatus::new(SignalPhase::Downloading, future)),
        run_id: Some(earlier),
    };
    let patch = json!({ "metadata": { "annotations": signal::to_annotations(&forged) } });
    Api::<Node>::all(client.clone())
        .patch(SILENT, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("forging the signal");
    let mut update = k0s_update(None, Some(static_nodes(&["worker-0"], 1)));
    // worker-0 already runs this version: signalled, it answers Completed at once.
    update.version = PLAIN_VERSION.to_owned();
    update.forceupdate = false;
    update.rollout.progress_timeout = Some("30s".to_owned());
    let started = Instant::now();
    replace_spec(client, "aged", vec![k0s_command(update)]).await;
    let held = wait_for(PLAN_TIMEOUT, "the hold for worker-6", || async {
        let plan = plans.get("autopilot").await?;
        let holding = plan.status.as_ref().is_some_and(|s| s.plan_id.as_deref() == Some("aged"))
            && command(&plan, 0).reason.as_deref().is_some_and(|r| r.contains(SILENT));
        Ok(holding.then_some(plan))
    })
    .await
    .expect("the hold");
    let reason = command(&held, 0).reason.clone().unwrap_or_default();
    assert!(reason.contains("earlier run; 1 node(s): worker-6 (Downloading)"), "{reason}");
    assert!(
        node_signal(client, "worker-0")
            .await
            .expect("worker-0's signal")
            .is_some_and(|s| s.plan_id != "aged")
    );
    let done = ended(client, "aged", AGED_OUT).await;
    assert_eq!(state(&done), PlanStateType::Completed, "{}", status_yaml(&done));
    assert!(started.elapsed() < AGED_OUT, "{:?}", started.elapsed());
}

/// Step 3: an expensive boolExpr, while the leader keeps its Lease and `k0s status` answers.
async fn expensive_bool_expr(client: &kube::Client, controllers: &[K0sProcess]) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let renewed = |lease: &Lease| lease.spec.as_ref().and_then(|s| s.renew_time.clone());
    let before = renewed(&leases.get(keys::LEASE_NAME).await.expect("the Lease"));
    let expensive = format!("[stdout]{}.all(s, s.contains(\"x\"))", ".map(s, s + s)".repeat(12));
    let costly = preflight(json!({
        "checks": [{
            "id": "costly",
            "targets": { "workers": serde_json::to_value(static_nodes(&WORKERS, 1)).expect("targets as JSON") },
            "command": {"id": "exec", "data": {"name": "loud"}},
            "results": [
                {"status": "success", "condition": {"boolExpr": &expensive}, "message": "ok"},
                {"status": "error", "message": "not ok"}
            ]
        }]
    }));
    let started = Instant::now();
    replace_spec(client, "costly", vec![costly]).await;
    let status_dir = controllers[0].data_dir().display().to_string();
    let status = run_k0s(&["status", "--data-dir", &status_dir]).expect("k0s status runs");
    assert!(status.status.success(), "k0s status answers: {status:?}");
    let done = ended(client, "costly", Duration::from_secs(30)).await;
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    let description = command(&done, 0).description.clone().unwrap_or_default();
    assert!(description.contains("boolExpr"), "{}", status_yaml(&done));
    assert!(description.contains("cost"), "the limit is named: {description}");
    wait_for(Duration::from_secs(30), "a Lease renewal after the run", || async {
        let now = renewed(&leases.get(keys::LEASE_NAME).await?);
        Ok((now != before).then_some(()))
    })
    .await
    .expect("a Lease renewal");
}
