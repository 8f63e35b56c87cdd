//! A single controller updates itself (REF §14 "single"), installed the way an operator
//! might: the binary in a directory whose path has spaces and non-ASCII characters, started
//! through a symlink elsewhere (`…/usr/local/bin/k0s -> …/opt/My Apps/k0s ünï/bin/k0s`). The
//! update replaces the real file (not the symlink), keeps `k0s.prev` beside it, leaves
//! nothing beside the symlink, and the controller comes back at v2 and completes its own plan.

use std::time::Duration;

use autopilot_api::v1beta2::{ControlNode, PlanStateType, TargetState};
use autopilot_signal::status::Report;
use integration::{run_k0s, wait_for};
use kube::Api;

use crate::support::*;

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
    let (v2, sha) = v2_build();
    let server = integration::http::FileServer::start(v2).await.unwrap();

    // The controller is installed under a path in the cluster's directory: the test starts it.
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("update-single")
            .controllers(1)
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
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
    let v1 = binary_version(&real);
    assert_ne!(v1, V2);
    let pid = controller.pid();

    let update =
        update_to(V2, server.base_url(), &sha, Some(static_nodes(&["controller-0"], 1)), None);
    create_plan(&client, &plan("autopilot", "single-v2", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(target(&done, 0, "controller-0").state, TargetState::SignalCompleted);

    // The real file was replaced; the symlink still points to it; the old one is kept beside
    // the real file; nothing else is left in either directory.
    assert_eq!(binary_version(&real), V2);
    assert_eq!(std::fs::read_link(&link).unwrap(), real, "the symlink is untouched");
    assert_eq!(binary_version(&install_dir.join("k0s.prev")), v1);
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
