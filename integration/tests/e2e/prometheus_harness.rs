//! A real Prometheus scraping real nodes (issue 25 item 4), queried with the leader's
//! production client (`autopilot_controller::prometheus::instant_query`), as `prometheus`
//! health gates will (DESIGN §15).
//!
//! Two workers serve their `--metrics-address`; the harness Prometheus scrapes both every
//! second. The production client sees one `up` series per node with the labels the harness
//! gave, and a `k0s_autopilot_*` series per node in the CEL-friendly JSON a gate judges. A
//! controller added as a target later (configuration rewritten, `POST /-/reload`) shows up as
//! the leader. A PromQL error comes back as Prometheus's own `bad_data`, and a killed worker
//! turns to `up == 0`: the fact a gate after an update would catch.
//!
//! The Prometheus binary is built by `cargo xtask control-plane`, never by the test: without
//! it the test fails at once, saying so.

use std::time::{Duration, Instant};

use autopilot_controller::prometheus::{QueryError, instant_query};
use autopilot_shell::https::HttpsClientBuilder;
use http::StatusCode;
use integration::prometheus::{self, JOB, Prometheus, ScrapeTarget};
use integration::wait_for;

use crate::support::*;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// How long a query gets to return what the test waits for (a scrape every second).
const QUERY_WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_real_prometheus_scrapes_the_nodes_and_the_leaders_client_reads_them() {
    // Fail at once, with the hint, when the binary is not built (tests never build it).
    let binary = prometheus::binary().unwrap();
    eprintln!("prometheus binary: {}", binary.display());

    // The workers (their agents on) serve metrics; the controller comes later, as a new target.
    let Fleet { cluster, client: _client, controllers: _controllers, workers } =
        FleetBuilder::new("prometheus-harness")
            .workers(&WORKERS)
            .agents(Agents::Real)
            .worker_metrics()
            .unstarted_controllers()
            .start()
            .await
            .unwrap();

    let targets: Vec<ScrapeTarget> =
        workers.iter().map(|w| ScrapeTarget::node(w).unwrap()).collect();
    let started = Instant::now();
    let prom = Prometheus::start(targets).await.unwrap();
    eprintln!(
        "prometheus ready after {:?} (process spawn to /-/ready: {:?}) at {}",
        started.elapsed(),
        prom.startup(),
        prom.base_url()
    );

    // Both workers scraped: `up` is 1 for each.
    prom.wait_for_query_where("up == 1", QUERY_WAIT, |v| v.samples.len() == WORKERS.len())
        .await
        .unwrap();
    eprintln!("both targets up {:?} after start", started.elapsed());

    // The production client, as the leader builds it, over plain http to loopback.
    let http = HttpsClientBuilder::new(rustls::RootCertStore::empty()).build().unwrap();
    let timeout = Duration::from_secs(10);
    check_up(&http, &prom, &workers, timeout).await;

    // A node agent's own series, per node, in the shape a gate's CEL expression sees.
    check_download_series(&prom).await;

    // A target added after the start (the config rewritten and reloaded): a controller, which
    // becomes the leader and says so.
    let controller = cluster
        .k0s_controller(0)
        .args([NO_AGENT])
        .args(FAST_ELECTION)
        .with_metrics()
        .unwrap()
        .spawn()
        .await
        .unwrap();
    prom.add_targets(vec![ScrapeTarget::node(&controller).unwrap()]).await.unwrap();
    let leader = prom
        .wait_for_query(r#"k0s_autopilot_is_leader{node="controller-0"} == 1"#, QUERY_WAIT)
        .await
        .unwrap();
    assert_eq!(leader.samples.len(), 1, "{}", leader.to_cel_json());
    assert_eq!(prom.targets().len(), 3);

    // Bad PromQL: Prometheus's own error, naming the URL asked.
    let err = instant_query(&http, &prom.base_url(), "up +", timeout).await.unwrap_err();
    match &err {
        QueryError::Failed { status, error_type, .. } => {
            assert_eq!(*status, StatusCode::BAD_REQUEST, "{err}");
            assert_eq!(error_type.as_deref(), Some("bad_data"), "{err}");
        }
        other => panic!("expected a bad_data failure, got {other:?}"),
    }
    assert!(err.to_string().contains(&prom.base_url()), "{err}");

    // A worker goes away: its `up` turns 0 within a few scrapes, the other stays 1.
    workers[1].kill().unwrap();
    let down = prom.wait_for_query(r#"up{job="k0s"} == 0"#, QUERY_WAIT).await.unwrap();
    let down: Vec<&str> = down.samples.iter().map(|s| s.metric["node"].as_str()).collect();
    assert_eq!(down, ["worker-1"]);
    let still_up = wait_for(QUERY_WAIT, "worker-0 to be still up", || async {
        let v = instant_query(&http, &prom.base_url(), r#"up{node="worker-0"}"#, timeout).await?;
        Ok(v.samples.first().map(|s| s.value))
    })
    .await
    .unwrap();
    assert_eq!(still_up, 1.0);
}
/// `up` through the production client: 1 for each worker, with its node, instance, job and
/// name.
async fn check_up(
    http: &autopilot_shell::https::HttpsClient,
    prom: &Prometheus,
    workers: &[integration::K0sProcess],
    timeout: Duration,
) {
    let mut up = instant_query(http, &prom.base_url(), "up", timeout).await.expect("the up query");
    assert!(up.warnings.is_empty(), "{:?}", up.warnings);
    up.samples.sort_by(|a, b| a.metric["node"].cmp(&b.metric["node"]));
    assert_eq!(up.samples.len(), WORKERS.len(), "{}", up.to_cel_json());
    for (sample, worker) in up.samples.iter().zip(workers) {
        let address = worker.metrics_address().expect("a metrics address").to_string();
        assert_eq!(sample.value, 1.0, "{sample:?}");
        assert_eq!(sample.metric["node"], worker.node_name(), "{sample:?}");
        assert_eq!(sample.metric["instance"], address, "{sample:?}");
        assert_eq!(sample.metric["job"], JOB, "{sample:?}");
        assert_eq!(sample.metric["__name__"], "up", "{sample:?}");
    }
}

/// A node agent's own series, per node, in the shape a gate's CEL expression sees: nothing
/// downloaded yet, and only the `node` label survives the sum.
async fn check_download_series(prom: &Prometheus) {
    let promql = "sum by (node) (k0s_autopilot_agent_download_bytes_total)";
    let bytes = prom.wait_for_query_where(promql, QUERY_WAIT, |v| v.samples.len() == 2).await;
    let mut bytes = bytes.expect("the series").to_cel_json().as_array().expect("a vector").clone();
    bytes.sort_by_key(|s| s["metric"]["node"].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        serde_json::Value::Array(bytes),
        serde_json::json!([
            {"metric": {"node": "worker-0"}, "value": 0.0},
            {"metric": {"node": "worker-1"}, "value": 0.0},
        ]),
        "nothing downloaded yet, and only the `node` label survives the sum"
    );
}
