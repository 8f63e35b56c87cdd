//! What the updater sends to the update server (issue 5, REF §11.3–§11.4): the bearer token
//! from Secret `kube-system/update-server-token` when it exists, and cluster information
//! headers only when the operator opts in (`--send-cluster-info`).

use std::collections::BTreeMap;

use autopilot_api::v1beta2::UpdateConfig;
use integration::wait_for;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::support::*;
use crate::updater_support::*;

/// Waits until the server has seen `count` index requests and returns their headers.
async fn requests(server: &UpdateServer, count: usize) -> Vec<hyper::HeaderMap> {
    wait_for(PLAN_TIMEOUT, &format!("{count} index.yaml requests"), || async {
        let seen = server.index_headers();
        Ok((seen.len() >= count).then_some(seen))
    })
    .await
    .expect("index.yaml requests")
}

#[tokio::test]
async fn the_token_is_sent_when_the_secret_exists_and_cluster_info_is_not_sent_by_default() {
    let server = UpdateServer::start().await;
    server.offer(PLAIN_VERSION);
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        updater_fleet("updater-token").start().await.unwrap();
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    configs
        .create(&PostParams::default(), &update_config("token", &server, "00:00", "24h"))
        .await
        .unwrap();

    let before = requests(&server, 1).await;
    assert!(before[0].get("authorization").is_none(), "{:?}", before[0]);

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let secret = Secret {
        metadata: ObjectMeta { name: Some("update-server-token".to_owned()), ..Default::default() },
        string_data: Some(BTreeMap::from([("token".to_owned(), "s3cret".to_owned())])),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let with_token = wait_for(PLAN_TIMEOUT, "a request with the token", || async {
        Ok(server.index_headers().into_iter().find(|h| h.contains_key("authorization")))
    })
    .await
    .unwrap();
    assert_eq!(with_token["authorization"], "Bearer s3cret");
    for headers in server.index_headers() {
        assert!(!headers.contains_key("k0s_clusterid"), "cluster info sent without opt-in");
    }
}

#[tokio::test]
async fn cluster_info_is_sent_when_the_operator_opts_in() {
    let server = UpdateServer::start().await;
    server.offer(PLAIN_VERSION);
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        updater_fleet("updater-info")
            .controller_env("K0S_SEND_CLUSTER_INFO", "true")
            .start()
            .await
            .unwrap();
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    configs
        .create(&PostParams::default(), &update_config("info", &server, "00:00", "24h"))
        .await
        .unwrap();

    let headers = requests(&server, 1).await.remove(0);
    assert_eq!(headers["k0s_version"], PLAIN_VERSION, "{headers:?}");
    let cluster_id = headers["k0s_clusterid"].to_str().unwrap();
    assert!(cluster_id.starts_with("kube-system:") && cluster_id.len() > 12, "{headers:?}");
    assert!(headers.contains_key("k0s_workerdata"), "{headers:?}");
    assert!(headers.contains_key("k0s_controlplanenodescount"), "{headers:?}");
}
