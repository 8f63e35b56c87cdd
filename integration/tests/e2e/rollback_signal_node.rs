//! The node side of a rollback (DESIGN §15) with the real node agent and the real control
//! plane: a worker updated to v2 by a real run, then signalled to roll that run back. The
//! Plan engine's rollback is not in this scenario: once the update completed, the controller
//! is stopped and the test writes what the leader would (the run's `status.rollback`, the
//! worker's `from` and the command's rollback list recording the signal, then the signal)
//! and plays its part in the phases (drain and uncordon are not needed on a node without
//! pods; the drain is recorded in the status before `ApplyingUpdate`, as the leader does).
//!
//! The worker copies its `k0s.prev` into place with no download, self-tests it for the
//! version it ran before the run, trial-boots it, swaps it in (`k0s.prev` stays v1, the
//! proven fallback; v2 is kept as `k0s.rejected`, mode 0644, so nothing runs it again),
//! re-executes into it and completes. A rollback to a version `k0s.prev` does not run fails
//! before the node is cordoned, with both versions in the reason.

use std::time::Duration;

use autopilot_api::signal::{self, SignalData, SignalPhase, SignalStatus};
use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::wait_for;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::*;

/// How long each phase of the node may take.
const PHASE: Duration = Duration::from_secs(90);

/// Marks the current run of Plan `autopilot` as rolled back, the way the leader does before
/// it signals: `status.rollback` (the ended run running again), `from` on the worker's
/// target of command 0, and the
/// command's rollback list with the worker in `SignalSent`, recording the signal created
/// `created` that follows.
async fn write_rollback_status(
    client: &kube::Client,
    node: &str,
    from: &str,
    created: &str,
) -> Plan {
    let plans: Api<Plan> = Api::all(client.clone());
    let plan = plans.get("autopilot").await.expect("the Plan");
    let status = plan.status.as_ref().expect("a status");
    let mut status = serde_json::to_value(status).expect("a status as JSON");
    status["rollback"] =
        json!({ "reason": "requested by an operator", "since": "2026-11-26T00:00:00Z" });
    // The run that ended runs again, to put its nodes back.
    status["state"] = json!(PlanStateType::SchedulableWait);
    let command = &mut status["commands"][0];
    let workers = command["k0supdate"]["workers"].as_array_mut().expect("worker targets");
    let target = workers.iter_mut().find(|t| t["name"] == node).expect("the worker's target");
    target["from"] = json!(from);
    let mut back = target.clone();
    back["state"] = json!(TargetState::SignalSent.as_str());
    back["signalled"] = json!(created);
    let back_fields = back.as_object_mut().expect("a target");
    back_fields.remove("phase");
    back_fields.remove("drained");
    command["rollback"] = json!({ "controllers": [], "workers": [back] });
    let patch = json!({ "status": status });
    plans
        .patch_status("autopilot", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("writing the rollback into the Plan status")
}

/// Records in the Plan status that the leader finished the drain of the worker's rollback
/// signal created `created`, the way the leader does before it writes `ApplyingUpdate`.
async fn record_drain(client: &kube::Client, created: &str) {
    let plans: Api<Plan> = Api::all(client.clone());
    let plan = plans.get("autopilot").await.expect("the Plan");
    let mut status = serde_json::to_value(plan.status.as_ref().expect("a status")).expect("JSON");
    let back = &mut status["commands"][0]["rollback"]["workers"][0];
    back["drained"] = json!(created);
    plans
        .patch_status(
            "autopilot",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .expect("recording the drain in the Plan status");
}

/// Writes `data` as the signal on Node `name`.
async fn write_signal(client: &kube::Client, name: &str, data: &SignalData) {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = json!({ "metadata": { "annotations": signal::to_annotations(data) } });
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("signalling Node {name}: {e}"));
}

/// The rollback signal of command 0 of `plan`'s run: back to `version`.
fn rollback_signal(plan: &Plan, version: &str, created: &str) -> SignalData {
    let status = plan.status.as_ref().expect("a status");
    let data: Value = json!({
        "planId": status.plan_id,
        "created": created,
        "runId": status.run_id,
        "command": { "id": 0, "rollback": { "version": version, "of": "k0s" } },
    });
    serde_json::from_value(data).expect("a rollback signal")
}

/// Waits until the worker's signal written at `created` shows `phase`; returns it.
async fn wait_phase(
    client: &kube::Client,
    node: &str,
    created: &str,
    phase: SignalPhase,
) -> SignalData {
    wait_for(PHASE, &format!("{node} in {phase}"), || async {
        let data = node_signal(client, node).await?.filter(|d| d.created == created);
        if let Some(data) = &data
            && data.phase() == Some(SignalPhase::Failed)
            && phase != SignalPhase::Failed
        {
            anyhow::bail!("{node} failed: {:?}", data.status);
        }
        Ok(data.filter(|d| d.phase() == Some(phase)))
    })
    .await
    .expect("the phase")
}

/// Writes the leader's phase `phase` on the worker's current signal.
async fn advance(client: &kube::Client, node: &str, data: SignalData, phase: SignalPhase) {
    let next = data.with_status(SignalStatus::new(phase, jiff::Timestamp::now()));
    write_signal(client, node, &next).await;
}

#[tokio::test]
async fn a_worker_rolls_its_run_back_to_k0s_prev_without_a_download() {
    let (v2_bytes, sha) = v2_build();
    let server = integration::http::FileServer::start(v2_bytes.clone()).await.unwrap();
    let Fleet { cluster: _cluster, client, controllers, workers } =
        FleetBuilder::new("rollback-signal-node")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let worker = &workers[0];
    let node = worker.node_name();
    let pid = worker.pid();
    let v1_bytes = std::fs::read(worker.binary_path()).unwrap();
    let v1 = binary_version(worker.binary_path());
    assert_ne!(v1, V2);

    // A real run updates the worker to v2.
    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&[node], 1)));
    create_plan(&client, &plan("autopilot", "v2", vec![k0s_command(update)])).await.unwrap();
    wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    wait_node_version(&client, node, V2).await.unwrap();
    let prev = worker.binary_path().with_file_name("k0s.prev");
    assert_eq!(binary_version(&prev), v1);

    // From here on the test is the leader.
    for controller in &controllers {
        controller.stop(Duration::from_secs(30)).await.unwrap();
    }
    drop(server);
    let created = "2026-11-26T01:00:00Z";
    let plan = write_rollback_status(&client, node, &v1, created).await;

    // (a) A signal for another version than the node's recorded "from": refused by the
    // agent's authorization, nothing staged, the node stays on v2.
    let wrong = "v1.34.9+k0s.0";
    let run = plan.status.as_ref().and_then(|s| s.run_id.clone()).unwrap_or_default();
    write_signal(&client, node, &rollback_signal(&plan, wrong, created)).await;
    let failed = wait_phase(&client, node, created, SignalPhase::Failed).await;
    assert_eq!(
        failed.status.and_then(|s| s.reason).unwrap_or_default(),
        format!(
            "refused: command 0 of run {run}: version is \"{wrong}\", its rollback records \
             {node} ran \"{v1}\" before the run"
        )
    );

    // (b) The Plan says the node ran a version its k0s.prev does not run: the agent stages
    // and self-tests k0s.prev, which reports another version, and fails before any cordon.
    let created = "2026-11-26T02:00:00Z";
    let plan = write_rollback_status(&client, node, wrong, created).await;
    write_signal(&client, node, &rollback_signal(&plan, wrong, created)).await;
    let failed = wait_phase(&client, node, created, SignalPhase::Failed).await;
    assert_eq!(
        failed.status.and_then(|s| s.reason).unwrap_or_default(),
        format!("k0s.prev runs {v1}, not the version this node ran before the run ({wrong})")
    );
    assert_eq!(binary_version(worker.binary_path()), V2);
    assert!(!worker.binary_path().with_file_name("k0s.tmp").exists(), "nothing stays staged");

    // (c) The rollback the Plan authorizes: k0s.prev goes back in place.
    let created = "2026-11-26T03:00:00Z";
    let plan = write_rollback_status(&client, node, &v1, created).await;
    let mark = worker.log_mark();
    write_signal(&client, node, &rollback_signal(&plan, &v1, created)).await;
    let cordoning = wait_phase(&client, node, created, SignalPhase::Cordoning).await;
    let staged = worker.binary_path().with_file_name("k0s.tmp");
    assert_eq!(std::fs::read(&staged).unwrap(), v1_bytes, "k0s.prev copied, self-tested");
    assert_eq!(binary_version(&prev), v1, "k0s.prev stays until the swap");
    record_drain(&client, created).await;
    advance(&client, node, cordoning, SignalPhase::ApplyingUpdate).await;
    let uncordoning = wait_phase(&client, node, created, SignalPhase::Uncordoning).await;
    advance(&client, node, uncordoning, SignalPhase::Completed).await;

    wait_node_version(&client, node, &v1).await.unwrap();
    assert!(
        worker.is_running() && worker.pid() == pid,
        "re-executed in place:\n{}",
        worker.log_tail(40)
    );
    assert_eq!(std::fs::read(worker.binary_path()).unwrap(), v1_bytes, "v1 is live again");
    // The fallback is the proven v1, and the rejected v2 can never run again: the units run
    // `k0s.prev post-update-guard` as root before every start.
    assert_eq!(std::fs::read(&prev).unwrap(), v1_bytes, "k0s.prev stays the proven v1");
    let rejected = worker.binary_path().with_file_name("k0s.rejected");
    assert_eq!(std::fs::read(&rejected).unwrap(), v2_bytes, "v2 kept as k0s.rejected");
    let mode = {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(&rejected).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode, 0o644, "the rejected v2 has no execute bit");
    assert!(!staged.exists());
    let log = worker.log_after(mark);
    assert!(log.contains("StagePrevious"), "k0s.prev was staged:\n{log}");
    assert!(!log.contains("action=Download"), "nothing was downloaded:\n{log}");
}
