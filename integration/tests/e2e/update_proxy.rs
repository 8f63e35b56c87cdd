//! Downloads through a real proxy (issue 27, item 1): tinyproxy with its own configuration
//! (CONNECT allowed to the payload server's port only, Basic credentials) and an https
//! payload server. worker-0 has `HTTPS_PROXY=http://k0s:<password>@…` and `NO_PROXY` naming
//! its API server: its payload comes through a CONNECT tunnel, its API traffic does not.
//! worker-1 has the same proxy in lower case (`https_proxy`) and `no_proxy=127.0.0.0/8`: it
//! fetches directly. Both complete at v2; the password appears in no log and no status.

use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::http::{FileServer, Serve};
use integration::proxy::Tinyproxy;

use crate::support::*;

const PASSWORD: &str = "pr0xy-s3cret";

#[tokio::test]
async fn a_worker_fetches_through_the_proxy_and_a_no_proxy_worker_bypasses_it() {
    assert!(Tinyproxy::is_installed(), "tinyproxy is required (.ci/run installs it)");
    let (v2_bytes, v2_sha) = v2_build();
    let server = FileServer::start_tls(Serve::Body(v2_bytes)).await.unwrap();
    let server_port: u16 =
        server.base_url().rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");

    // The workers' proxy settings name the proxy and the CA file the test puts in the
    // cluster's directory: the test starts them.
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("update-proxy")
            .controllers(1)
            .workers(&["worker-0", "worker-1"])
            .agents(Agents::Real)
            .unstarted_workers()
            .start()
            .await
            .unwrap();
    let proxy =
        Tinyproxy::start(&cluster.dir().join("proxy"), &[server_port], Some(("k0s", PASSWORD)))
            .await
            .unwrap();
    let ca = cluster.dir().join("payload-ca.pem");
    std::fs::write(&ca, server.ca_pem().expect("a TLS server")).unwrap();
    let ca = ca.to_str().unwrap().to_owned();
    let api_host = cluster.api_address(0).rsplit_once(':').map(|(h, _)| h.to_owned()).unwrap();

    let proxied = cluster
        .k0s_worker("worker-0")
        .args(["--download-ca-file", &ca])
        .env("HTTPS_PROXY", proxy.url())
        .env("NO_PROXY", format!("localhost,{api_host}"))
        .spawn()
        .await
        .unwrap();
    let direct = cluster
        .k0s_worker("worker-1")
        .args(["--download-ca-file", &ca])
        .env("https_proxy", proxy.url())
        .env("no_proxy", "127.0.0.0/8")
        .spawn()
        .await
        .unwrap();
    wait_nodes_ready(&client, &["worker-0", "worker-1"]).await.unwrap();

    let update = update_to(
        V2,
        server.base_url(),
        &v2_sha,
        None,
        Some(static_nodes(&["worker-0", "worker-1"], 2)),
    );
    create_plan(&client, &plan("autopilot", "proxy", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    for name in ["worker-0", "worker-1"] {
        assert_eq!(target(&done, 0, name).state, TargetState::SignalCompleted, "{name}");
    }
    assert_eq!(version_on_disk(&proxied), V2);
    assert_eq!(version_on_disk(&direct), V2);

    // Exactly one tunnel, to the payload server: worker-0's download. The API server was
    // never asked through the proxy (NO_PROXY), nor was anything of worker-1's.
    let requests = proxy.requests();
    assert_eq!(
        requests,
        [format!("CONNECT 127.0.0.1:{server_port} HTTP/1.1")],
        "tinyproxy saw:\n{}",
        proxy.log()
    );
    assert_eq!(server.requests(), 2, "one download per worker");
    let proxy_shown = format!("proxy=http://127.0.0.1:{}", proxy.url().rsplit(':').next().unwrap());
    assert!(
        proxied.log().contains("downloading through a proxy")
            && proxied.log().contains(&proxy_shown),
        "{}",
        proxied.log_tail(40)
    );
    assert!(!direct.log().contains("downloading through a proxy"), "{}", direct.log_tail(40));

    // The credentials never show.
    for (name, log) in [("worker-0", proxied.log()), ("worker-1", direct.log())] {
        assert!(!log.contains(PASSWORD), "{name}'s log shows the proxy password");
    }
    assert!(!status_yaml(&done).contains(PASSWORD), "the Plan status shows the proxy password");
}
