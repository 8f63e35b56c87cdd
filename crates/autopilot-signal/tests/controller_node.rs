//! [`run_controller_node`] of a controller+worker against a fake API server: the node side
//! ends (with an error) when its update host cannot be prepared, instead of keeping the
//! heartbeat and the status socket running with no agent.

use std::time::Duration;

use autopilot_shell::fake_api::{self, FakeApiServer, Request};
use autopilot_signal::download::DownloadConfig;
use autopilot_signal::{ControllerNode, metrics, run_controller_node};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// How long the failing node side may take to return: it needs no network and no timer,
/// so anything near this bound means it hangs.
const BOUND: Duration = Duration::from_secs(10);

/// What the fake API server answers: every Node and Lease write is accepted, anything else
/// is not found.
fn answer(request: &Request, _before: &[Request]) -> (u16, Value) {
    let path = request.path.as_str();
    match request.method.as_str() {
        "POST" if path == "/api/v1/nodes" => (201, request.body.clone()),
        "PATCH" if path.contains("/leases/") => (
            200,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "c1", "namespace": "kube-node-lease"}}),
        ),
        "PATCH" if path.starts_with("/api/v1/nodes/") => {
            (200, json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "c1"}}))
        }
        _ => (404, fake_api::status(404, "NotFound")),
    }
}

#[tokio::test]
async fn controller_worker_fails_when_its_update_host_cannot_be_prepared() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("data");
    // Trust roots that cannot be read: the update host's downloader cannot be built.
    let download =
        DownloadConfig { ca_file: Some(dir.path().join("missing-ca.pem")), ..Default::default() };
    let (_leading_tx, leading) = tokio::sync::watch::channel(false);
    let node = ControllerNode {
        name: "c1".to_string(),
        version: "v1.35.0+k0s.0",
        binary: dir.path().join("k0s"),
        data_dir,
        // A controller+worker: it registers its Node and runs the heartbeat next to the agents.
        worker: true,
        update_agent: true,
        download,
        heartbeat_interval: Duration::from_millis(100),
        startup_timeout: Duration::from_secs(5),
        leading,
        metrics: metrics::Metrics::default(),
    };
    let api = FakeApiServer::default();
    // Never cancelled: the node side must end on its own.
    let shutdown = CancellationToken::new();

    let run = run_controller_node(api.client(answer), "https://fake", node, shutdown);
    let ended = tokio::time::timeout(BOUND, run).await;

    // The Node was registered: the heartbeat was running when the agents failed.
    assert!(api.saw("POST", "/api/v1/nodes"), "the Node was not registered");
    assert!(api.saw("PATCH", "/api/v1/nodes/c1/status"), "the Node was not marked Ready");
    let result = ended.unwrap_or_else(|_| panic!("the node side still runs after {BOUND:?}"));
    let err = result.expect_err("the node side cannot run without its update host");
    let chain = format!("{err:#}");
    assert!(chain.contains("preparing the update host"), "unexpected error: {chain}");
}
