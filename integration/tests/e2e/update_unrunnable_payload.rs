//! Payloads that verify but do not run (DESIGN §11, "self-test before swap"), with the real
//! node agent and the real control plane: a file whose sha256 matches but which is not an
//! executable (an HTML error page a mirror served when the digest was taken), and an
//! executable that reports another version than the plan names. The worker self-tests the
//! staged file before the node is cordoned: the node reports `Failed` with a reason quoting
//! the exit status and the first line of output, the plan ends `ApplyFailed`, and the node
//! is untouched — the same process runs the same v1 binary, nothing is staged next to it,
//! and it was never cordoned.
//!
//! A URL the node could not download from at all (no scheme) never reaches a node: the Plan
//! schema refuses it (`plan_validation.rs`); the agent's own refusal of such a signal is a
//! unit test of its phase machine.
//!
//! One cluster and one worker run every case, each as a new plan (the previous one deleted).

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::K0sProcess;
use integration::http::FileServer;

use crate::support::*;

/// Serves `payload` (with its own, correct digest) as v2 to worker-0, waits for the plan to
/// fail, checks the node is untouched and returns the target's reason.
async fn refused(client: &kube::Client, worker: &K0sProcess, id: &str, payload: Vec<u8>) -> String {
    let sha = sha256_hex(&payload);
    let server = FileServer::start(payload).await.expect("file server");
    let url = format!("{}/k0s", server.base_url());
    let reason = fails(client, worker, id, url, sha).await;
    assert!(server.requests() >= 1, "the worker fetched the payload");
    assert!(reason.starts_with("the downloaded binary failed its self-test: "), "{reason}");
    reason
}

/// Runs plan `id` updating worker-0 to v2 from `url`, waits for it to fail with the node
/// `Failed`, checks the node is untouched and returns the reason; deletes the plan.
async fn fails(
    client: &kube::Client,
    worker: &K0sProcess,
    id: &str,
    url: String,
    sha: String,
) -> String {
    let before = Before::of(worker);
    let mut update = update_to(V2, "", &sha, None, Some(static_nodes(&["worker-0"], 1)));
    for platform in update.platforms.values_mut() {
        platform.url.clone_from(&url);
    }
    create_plan(client, &plan("autopilot", id, vec![k0s_command(update)])).await.expect("plan");
    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed)
        .await
        .expect("the plan fails");
    let target = target(&failed, 0, "worker-0");
    assert_eq!(target.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    assert_eq!(target.phase, Some(SignalPhase::Failed), "{}", status_yaml(&failed));
    let reason = target.reason.clone().unwrap_or_default();

    // Untouched: same process, same binary, nothing staged, never cordoned.
    before.assert_untouched(worker, id);
    let (unschedulable, marked) = node_cordon(client, "worker-0").await.expect("reading the Node");
    assert!(!unschedulable && !marked, "a refused payload never cordons the node ({id})");

    delete_plan(client).await;
    reason
}

#[tokio::test]
async fn payloads_that_verify_but_do_not_run_are_refused_before_the_node_is_cordoned() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("update-unrunnable")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let worker = &workers[0];
    let v1 = binary_version(worker.binary_path());
    assert_ne!(v1, V2);

    // (a) An HTML error page under its own digest: it cannot even be executed.
    let html = b"<html>\n<head><title>502 Bad Gateway</title></head>\n</html>\n".to_vec();
    let reason = refused(&client, worker, "html-page", html).await;
    assert!(reason.contains("it cannot be executed"), "{reason}");
    assert!(reason.contains("Exec format error"), "the OS's word is quoted: {reason}");

    // (b) The node's own v1 build served as "v2": it runs, and says so.
    let v1_bytes = std::fs::read(worker.binary_path()).unwrap();
    let reason = refused(&client, worker, "mislabelled", v1_bytes).await;
    assert_eq!(
        reason,
        format!(
            "the downloaded binary failed its self-test: `version` reported {v1:?}, expected {V2}"
        )
    );

    // (c) A program that fails: the exit status and its first line of output are quoted.
    let failing = b"#!/bin/sh\necho 'unsupported CPU' >&2\nexit 3\n".to_vec();
    let reason = refused(&client, worker, "failing", failing).await;
    assert!(reason.ends_with("`version` exited with status 3: \"unsupported CPU\""), "{reason}");
    assert_eq!(binary_version(worker.binary_path()), v1, "still v1 on disk");
}
