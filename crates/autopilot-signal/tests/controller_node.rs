//! The node side of a controller+worker (status socket, Node registration, update agent,
//! supervised as `k0s controller` declares them) against a fake API server: it ends (with an
//! error) when its update host cannot be prepared, instead of keeping the heartbeat and the
//! status socket running with no agent.

use std::time::Duration;

use autopilot_shell::fake_api::{self, FakeApiServer, Request};
use autopilot_shell::leadership::Leadership;
use autopilot_shell::lifecycle::{Ended, Env, Supervisor};
use autopilot_signal::download::DownloadConfig;
use autopilot_signal::{AgentOn, NodeRegistration, StatusSocket, UpdateAgent, metrics, status};
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
    let api = FakeApiServer::default();
    let client = api.client(answer);
    let env = Env {
        client: client.clone(),
        config: kube::Config::new("https://fake".parse().expect("a URL")),
        server_url: "https://fake".to_string(),
        node_name: "c1".to_string(),
        data_dir,
        version: "v1.35.0+k0s.0",
        binary: dir.path().join("k0s"),
        purpose: autopilot_shell::lifecycle::Purpose::Run,
    };
    let board = status::Board::default();
    // A controller+worker: it registers its Node and runs the heartbeat next to the agents.
    let supervisor = Supervisor::new(Duration::from_secs(5))
        .with(StatusSocket {
            role: status::Role::ControllerWorker,
            update_agent: true,
            board: board.clone(),
            leadership: Some(Leadership::never("c1_00000000")),
        })
        .with(NodeRegistration {
            heartbeat_interval: Duration::from_millis(100),
            startup_timeout: Duration::from_secs(5),
            schedulable: true,
        })
        .with(UpdateAgent {
            on: AgentOn::Controller { worker: true },
            enabled: true,
            download,
            board,
            metrics: metrics::Metrics::default(),
            allow_unverified_payloads: false,
            signing: Default::default(),
            post_update: autopilot_signal::post_update::AtStart::Nothing,
            components: None,
            own_api_server: false,
        });
    // Never cancelled: the node side must end on its own.
    let shutdown = CancellationToken::new();

    let ended = tokio::time::timeout(BOUND, supervisor.run(&env, shutdown)).await;

    // The Node was registered before the agent's start failed.
    assert!(api.saw("POST", "/api/v1/nodes"), "the Node was not registered");
    assert!(api.saw("PATCH", "/api/v1/nodes/c1/status"), "the Node was not marked Ready");
    let ended = ended.unwrap_or_else(|_| panic!("the node side still runs after {BOUND:?}"));
    let Ended::Failed(err) = ended else {
        panic!("the node side cannot run without its update host: {ended:?}")
    };
    let chain = format!("{err:#}");
    assert!(chain.contains("preparing the update host"), "unexpected error: {chain}");
}

#[tokio::test]
async fn a_node_whose_payload_keys_directory_is_missing_does_not_start_and_says_which() {
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = dir.path().join("keys-not-mounted");
    let api = FakeApiServer::default();
    let env = Env {
        client: api.client(answer),
        config: kube::Config::new("https://fake".parse().expect("a URL")),
        server_url: "https://fake".to_string(),
        node_name: "w1".to_string(),
        data_dir: dir.path().join("data"),
        version: "v1.35.0+k0s.0",
        binary: dir.path().join("k0s"),
        purpose: autopilot_shell::lifecycle::Purpose::Run,
    };
    let supervisor = Supervisor::new(Duration::from_secs(5)).with(UpdateAgent {
        on: AgentOn::Worker,
        enabled: true,
        download: DownloadConfig::default(),
        board: status::Board::default(),
        metrics: metrics::Metrics::default(),
        allow_unverified_payloads: false,
        signing: autopilot_signal::SigningArgs {
            payload_keys: Some(keys.clone()),
            require_signed_bundles: false,
        },
        post_update: autopilot_signal::post_update::AtStart::Nothing,
        components: None,
        own_api_server: false,
    });

    let ended = tokio::time::timeout(BOUND, supervisor.run(&env, CancellationToken::new()))
        .await
        .unwrap_or_else(|_| panic!("the node still starts after {BOUND:?}"));
    let Ended::Failed(err) = ended else { panic!("started without its keys: {ended:?}") };
    assert_eq!(
        format!("{err:#}"),
        format!("update agent cannot start: --payload-keys {}: no such directory", keys.display())
    );
}
