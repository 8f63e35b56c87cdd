//! `k0s status` against running nodes: every controller and worker serves its version, pid,
//! role and update progress on the status socket in its data directory; a controller started
//! with `--enable-worker` is also a worker node (its Node is registered and Ready).

use std::time::Duration;

use autopilot_signal::status::{Report, Role};
use integration::{K0sProcess, run_k0s, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::support::*;

/// `k0s status -o json` for `process`, once its socket answers.
async fn status_of(process: &K0sProcess) -> Report {
    let data_dir = process.data_dir().to_str().expect("a UTF-8 data dir").to_owned();
    wait_for(Duration::from_secs(30), "the status socket to answer", || async {
        let out = run_k0s(&["status", "--data-dir", &data_dir, "-o", "json"])?;
        if !out.status.success() {
            return Ok(None);
        }
        Ok(Some(serde_json::from_slice::<Report>(&out.stdout)?))
    })
    .await
    .expect("k0s status answers")
}

fn text_status_of(process: &K0sProcess) -> String {
    let data_dir = process.data_dir().to_str().expect("a UTF-8 data dir");
    let out = run_k0s(&["status", "--data-dir", data_dir]).expect("k0s status runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[tokio::test]
async fn workers_and_controllers_report_version_pid_and_role() {
    let Fleet { cluster, client: _client, controllers, workers } = FleetBuilder::new("node-status")
        .controllers(1)
        .workers(&["worker-0"])
        .agents(Agents::Real)
        .controller_args(&["--enable-worker"])
        .worker_args(&[NO_AGENT])
        .start()
        .await
        .unwrap();
    let version = String::from_utf8(run_k0s(&["version"]).unwrap().stdout).unwrap();
    let version = version.trim();

    let worker = status_of(&workers[0]).await;
    assert_eq!(worker.version, version);
    assert_eq!(worker.pid, workers[0].pid());
    assert_eq!(worker.role, Role::Worker);
    assert_eq!(worker.node_name, "worker-0");
    assert_eq!(worker.leader, None, "workers do not elect");
    assert!(!worker.update_agent, "started with {NO_AGENT}");
    assert!(worker.signals.is_empty());

    let controller = status_of(&controllers[0]).await;
    assert_eq!(controller.version, version);
    assert_eq!(controller.pid, controllers[0].pid());
    assert_eq!(controller.role, Role::ControllerWorker);
    assert_eq!(controller.node_name, "controller-0");
    assert!(controller.update_agent);
    assert_eq!(controller.leader, Some(true), "the only controller leads");

    let text = text_status_of(&controllers[0]);
    for line in [
        format!("Version: {version}"),
        format!("Process ID: {}", controllers[0].pid()),
        "Role: controller+worker".to_owned(),
        "Leader: yes".to_owned(),
        "Update agent: enabled".to_owned(),
        "Update: none".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} missing from:\n{text}");
    }

    // A controller+worker is a worker node too: its Node is registered and Ready.
    let nodes: Api<Node> = Api::all(cluster.admin_client().await.unwrap());
    wait_for(STARTUP, "Node controller-0 Ready", || async {
        Ok(nodes.get_opt("controller-0").await?.filter(is_ready).map(|_| ()))
    })
    .await
    .unwrap();

    // The socket goes away with the process.
    workers[0].stop(Duration::from_secs(15)).await.unwrap();
    let data_dir = workers[0].data_dir().to_str().unwrap();
    let out = run_k0s(&["status", "--data-dir", data_dir]).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no k0s process is running"), "{stderr}");
}
