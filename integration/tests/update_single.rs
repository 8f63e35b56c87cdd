//! A single controller updates itself (REF §14 "single"), installed the way an operator
//! might: the binary in a directory whose path has spaces and non-ASCII characters, started
//! through a symlink elsewhere (`…/usr/local/bin/k0s -> …/opt/My Apps/k0s ünï/bin/k0s`). The
//! update replaces the real file (not the symlink), keeps `k0s.prev` beside it, leaves
//! nothing beside the symlink, and the controller comes back at v2 and completes its own plan.

mod support;

use std::time::Duration;

use autopilot_api::v1beta2::{
    ControlNode, PlanCommandK0sUpdate, PlanCommandTargets, PlanResourceUrl, PlanStateType,
    TargetState,
};
use autopilot_signal::status::Report;
use integration::{ClusterBuilder, k0s_binary_with_version, run_k0s, run_k0s_binary, wait_for};
use kube::Api;
use sha2::Digest as _;
use support::*;

const V2: &str = "v1.35.1+k0s.0";

fn version_of(path: &std::path::Path) -> String {
    let out = run_k0s_binary(path, &["version"], Duration::from_secs(30)).expect("k0s runs");
    String::from_utf8(out.stdout).expect("utf-8").trim().to_string()
}

fn file_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the directory is readable")
        .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_single_controller_installed_under_an_unusual_path_updates_itself() {
    let v2 = std::fs::read(k0s_binary_with_version(V2).unwrap()).unwrap();
    let sha = hex::encode(sha2::Sha256::digest(&v2));
    let server = integration::http::FileServer::start(v2).await.unwrap();

    let cluster = ClusterBuilder::new("update-single").controllers(1).build().await.unwrap();
    let client = cluster.admin_client().await.unwrap();
    let install_dir = cluster.dir().join("opt").join("My Apps").join("k0s ünï").join("bin");
    let real = install_dir.join("k0s");
    let link_dir = cluster.dir().join("usr").join("local").join("bin");
    let link = link_dir.join("k0s");
    let controller = cluster
        .k0s_controller(0)
        .install_at(&real)
        .launch_via_symlink(&link)
        .spawn()
        .await
        .unwrap();
    wait_for(STARTUP, "a leader", || leader(&client)).await.unwrap();
    let v1 = version_of(&real);
    assert_ne!(v1, V2);
    let pid = controller.pid();

    let update = PlanCommandK0sUpdate {
        version: V2.to_owned(),
        forceupdate: false,
        platforms: [(
            autopilot_api::platform::current(),
            PlanResourceUrl { url: format!("{}/k0s", server.base_url()), sha256: Some(sha) },
        )]
        .into(),
        targets: PlanCommandTargets {
            controllers: Some(static_nodes(&["controller-0"], 1)),
            workers: None,
        },
    };
    create_plan(&client, &plan("autopilot", "single-v2", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(target(&done, 0, "controller-0").state, TargetState::SignalCompleted);

    // The real file was replaced; the symlink still points to it; the old one is kept beside
    // the real file; nothing else is left in either directory.
    assert_eq!(version_of(&real), V2);
    assert_eq!(std::fs::read_link(&link).unwrap(), real, "the symlink is untouched");
    assert_eq!(version_of(&install_dir.join("k0s.prev")), v1);
    assert_eq!(file_names(&install_dir), ["k0s", "k0s.prev"]);
    assert_eq!(file_names(&link_dir), ["k0s"]);

    // The same process re-executed into v2 and says so.
    assert!(controller.is_running() && controller.pid() == pid, "re-executed in place");
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    wait_for(Duration::from_secs(30), "controller-0 to publish v2", || async {
        Ok((control_nodes.get("controller-0").await?.k0s_version() == Some(V2)).then_some(()))
    })
    .await
    .unwrap();
    let data_dir = controller.data_dir().to_str().unwrap().to_owned();
    let report = wait_for(Duration::from_secs(30), "k0s status from v2", || async {
        let out = run_k0s(&["status", "--data-dir", &data_dir, "-o", "json"])?;
        let report = serde_json::from_slice::<Report>(&out.stdout).ok();
        Ok(report.filter(|r| r.version == V2))
    })
    .await
    .unwrap();
    assert_eq!(report.pid, pid);
    assert_eq!(report.binary, real, "runs the real file, not the symlink");
}
