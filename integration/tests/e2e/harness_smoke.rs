//! Smoke tests of the harness itself: the real control plane comes up, its apiservers share
//! one etcd, token identities and the Node authorizer work, apiservers stop and start again,
//! and node processes are supervised (with a stand-in script, so no k0s build is needed).

use std::{collections::BTreeMap, os::unix::fs::PermissionsExt as _, path::Path, time::Duration};

use integration::{conditions, wait_for, wait_for_condition};
use k8s_openapi::api::{
    authentication::v1::SelfSubjectReview,
    core::v1::{ConfigMap, Node},
};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};

use crate::support::{Fleet, FleetBuilder};

const TIMEOUT: Duration = Duration::from_secs(30);

async fn readyz(client: &kube::Client) -> anyhow::Result<String> {
    let request = http::Request::get("/readyz").body(Vec::new())?;
    Ok(client.request_text(request).await?)
}

fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        ..Default::default()
    }
}

#[tokio::test]
async fn two_apiservers_share_state_enforce_node_identities_and_restart() {
    let started = std::time::Instant::now();
    let Fleet { cluster, client: _client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("smoke-apiservers")
            .controllers(2)
            .workers(&["worker-0"])
            .unstarted_controllers()
            .unstarted_workers()
            .start()
            .await
            .unwrap();
    eprintln!("cluster with 2 apiservers ready after {:?}", started.elapsed());
    assert_eq!(cluster.api_address(0).split_once(':').unwrap().0, "127.0.0.2");
    assert_eq!(cluster.api_address(1).split_once(':').unwrap().0, "127.0.0.3");

    // Both answer /readyz (CA-verified TLS, admin token).
    let admin0 = cluster.admin_client_at(0).await.unwrap();
    let admin1 = cluster.admin_client_at(1).await.unwrap();
    assert_eq!(readyz(&admin0).await.unwrap(), "ok");
    assert_eq!(readyz(&admin1).await.unwrap(), "ok");

    // One etcd behind both: written through apiserver 0, read through apiserver 1.
    let cm = ConfigMap {
        metadata: ObjectMeta { name: Some("shared".to_owned()), ..Default::default() },
        data: Some(BTreeMap::from([("written-by".to_owned(), "apiserver-0".to_owned())])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(admin0.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let read = Api::<ConfigMap>::namespaced(admin1.clone(), "default").get("shared").await.unwrap();
    assert_eq!(read.data.unwrap()["written-by"], "apiserver-0");

    // The worker's token is its node identity...
    let as_worker = cluster.node_client("worker-0").await.unwrap();
    let review = Api::<SelfSubjectReview>::all(as_worker.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review.status.unwrap().user_info.unwrap();
    assert_eq!(user.username.as_deref(), Some("system:node:worker-0"));
    assert!(user.groups.unwrap_or_default().contains(&"system:nodes".to_owned()));

    // ...so NodeRestriction lets it create its own Node but no other.
    let nodes = Api::<Node>::all(as_worker);
    nodes.create(&PostParams::default(), &node("worker-0")).await.unwrap();
    match nodes.create(&PostParams::default(), &node("worker-1")).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("creating another node's Node must be forbidden, got {other:?}"),
    }

    // Apiserver 1 stops and starts again on the same address, with the same data.
    cluster.stop_apiserver(1).await.unwrap();
    assert!(!cluster.is_apiserver_running(1));
    assert!(readyz(&admin1).await.is_err(), "a stopped apiserver does not answer");
    assert_eq!(readyz(&admin0).await.unwrap(), "ok", "apiserver 0 is unaffected");
    let restarted = std::time::Instant::now();
    cluster.start_apiserver(1).await.unwrap();
    eprintln!("apiserver 1 ready again after {:?}", restarted.elapsed());
    let admin1 = cluster.admin_client_at(1).await.unwrap();
    let configmaps = Api::<ConfigMap>::namespaced(admin1, "default");
    let read = wait_for_condition(
        &configmaps,
        "shared",
        TIMEOUT,
        "the ConfigMap",
        conditions::is_created(),
    )
    .await
    .unwrap()
    .expect("the ConfigMap exists");
    assert_eq!(read.data.unwrap()["written-by"], "apiserver-0");
}

/// A stand-in for k0s: logs its arguments and `$TAG`, exits 0 on SIGTERM.
fn write_fake_k0s(path: &Path, tag: &str) {
    let script = format!(
        "#!/bin/sh\necho \"fake k0s {tag} started: $*\"\n\
         trap 'echo \"fake k0s {tag} got SIGTERM\"; kill $child; exit 0' TERM\n\
         sleep 1000 &\nchild=$!\nwait $child\n"
    );
    std::fs::write(path, script).expect("writing the fake k0s");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn pid_exists(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
}

#[tokio::test]
async fn node_processes_are_logged_stopped_killed_and_restarted_with_the_current_binary() {
    let Fleet { cluster, client: _client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("smoke-processes")
            .workers(&["worker-0"])
            .unstarted_controllers()
            .unstarted_workers()
            .start()
            .await
            .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let fake_v1 = scratch.path().join("k0s-v1");
    write_fake_k0s(&fake_v1, "v1");

    let mut worker =
        cluster.k0s_worker("worker-0").binary(&fake_v1).env("EXTRA", "1").spawn().await.unwrap();
    assert!(worker.binary_path().starts_with(cluster.dir()), "the node runs its own copy");
    assert!(worker.data_dir().is_dir());
    let line = worker.wait_for_log("fake k0s v1 started", TIMEOUT).await.unwrap();
    let expected_args = format!(
        "worker --kubeconfig {} --data-dir {} --node-name worker-0 --register-node --register-node-schedulable",
        cluster.node_kubeconfig("worker-0").display(),
        worker.data_dir().display()
    );
    assert!(line.ends_with(&expected_args), "{line}");

    // SIGTERM: a graceful exit with status 0.
    worker.terminate().unwrap();
    let status = worker.wait_exit(TIMEOUT).await.unwrap();
    assert!(status.success(), "{status:?}");
    assert!(worker.log().contains("fake k0s v1 got SIGTERM"));

    // The node agent replaces its binary in place; a restart runs the new file.
    write_fake_k0s(&scratch.path().join("k0s-v2"), "v2");
    std::fs::rename(scratch.path().join("k0s-v2"), worker.binary_path()).unwrap();
    let mark = worker.log_mark();
    worker.restart().await.unwrap();
    worker.wait_for_log_after(mark, "fake k0s v2 started", TIMEOUT).await.unwrap();
    assert!(
        worker.wait_for_log_after(mark, "fake k0s v1", Duration::from_millis(200)).await.is_err()
    );

    // SIGKILL: a crash, not a success.
    worker.kill().unwrap();
    let status = worker.wait_exit(TIMEOUT).await.unwrap();
    assert!(!status.success(), "{status:?}");
    assert!(worker.restart().await.is_ok());
    assert!(worker.restart().await.is_err(), "restart refuses while running");

    // Dropping the handle kills the process group.
    let pid = worker.pid();
    assert!(pid_exists(pid));
    drop(worker);
    assert!(!pid_exists(pid), "dropping the handle kills and reaps the process");

    // Dropping the cluster kills nodes even if their handles leak.
    let leaked = cluster.k0s_worker("worker-0").spawn().await.unwrap();
    let leaked_pid = leaked.pid();
    leaked.wait_for_log("fake k0s v2 started", TIMEOUT).await.unwrap();
    std::mem::forget(leaked);
    let dir = cluster.dir().to_path_buf();
    drop(cluster);
    wait_for(TIMEOUT, "the leaked node process to die", || async {
        // It is our unreaped child, so it lingers as a zombie: check its state, not existence.
        let stat = std::fs::read_to_string(format!("/proc/{leaked_pid}/stat")).unwrap_or_default();
        Ok((stat.is_empty() || stat.contains(") Z ")).then_some(()))
    })
    .await
    .unwrap();
    if std::env::var("K0S_KEEP_TEST_DIRS").is_err() {
        assert!(!dir.exists(), "the cluster directory is removed");
    }
}
