//! An airgap bundle, then the k0s binary (issue 4): on a controller started with
//! `--enable-worker` and a worker, command 0 (`airgapupdate`) puts the verified bundle into
//! each node's `<data-dir>/images/` without a restart — the controller+worker receives it on
//! its own Node — and command 1 (`k0supdate`) then updates both nodes to v2.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::v1beta2::{
    ControlNode, PlanCommand, PlanCommandAirgapUpdate, PlanCommandRollout, PlanResourceUrl,
    PlanStateType, TargetState,
};
use autopilot_signal::status::Report;
use integration::{K0sProcess, run_k0s, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt as _};

use crate::support::*;

const V2: &str = "v1.35.1+k0s.0";
const BUNDLE: &str = "k0s-airgap-bundle-v1.35.1.tar";

/// A bundle-sized payload that is not all zeros (so a digest mix-up would show).
fn bundle_bytes() -> Vec<u8> {
    (0..4u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

#[tokio::test]
async fn airgap_bundle_then_binary_on_a_controller_worker_and_a_worker() {
    let (v2, v2_sha) = v2_build();
    let binary_server = integration::http::FileServer::start(v2).await.unwrap();
    let bundle = bundle_bytes();
    let bundle_sha = sha256_hex(&bundle);
    let bundle_server = integration::http::FileServer::start(bundle).await.unwrap();

    let Fleet { cluster: _cluster, client, controllers, workers } =
        FleetBuilder::new("update-airgap")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .controller_args(&["--enable-worker"])
            .start()
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(STARTUP, "the controller+worker's Node Ready", || async {
        Ok(nodes.get_opt("controller-0").await?.filter(is_ready).map(|_| ()))
    })
    .await
    .unwrap();

    let commands = airgap_then_k0s(
        (binary_server.base_url(), &v2_sha),
        (bundle_server.base_url(), &bundle_sha),
    );
    let pids: Vec<u32> = controllers.iter().chain(&workers).map(K0sProcess::pid).collect();
    create_plan(&client, &plan("autopilot", "airgap-then-k0s", commands)).await.unwrap();

    // Command 0 completes while every node still runs v1: the bundle needs no restart.
    let after_airgap = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "the airgap command", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.commands.first())
            .is_some_and(|c| c.state == PlanStateType::Completed)
    })
    .await
    .unwrap();
    for name in ["controller-0", "worker-0"] {
        assert_eq!(
            target(&after_airgap, 0, name).state,
            TargetState::SignalCompleted,
            "{}",
            status_yaml(&after_airgap)
        );
    }
    check_bundles(controllers.iter().chain(&workers), &bundle_sha);

    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    for t in targets(command(&done, 1)) {
        assert_eq!(t.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
    }
    // Both nodes run v2 from disk, in the same (re-executed) processes, and publish it.
    for (process, pid) in controllers.iter().chain(&workers).zip(pids) {
        assert_eq!(version_on_disk(process), V2, "{}", process.node_name());
        assert!(process.is_running() && process.pid() == pid, "{} in place", process.node_name());
    }
    published_and_uncordoned(&client, &nodes).await;

    // `k0s status` on the controller+worker shows both signals it acted on, completed.
    let data_dir = controllers[0].data_dir().to_str().unwrap().to_owned();
    let report = wait_for(Duration::from_secs(30), "k0s status to show both signals", || async {
        let out = run_k0s(&["status", "--data-dir", &data_dir, "-o", "json"])?;
        if !out.status.success() {
            return Ok(None);
        }
        let report: Report = serde_json::from_slice(&out.stdout)?;
        Ok((report.signals.len() == 2).then_some(report))
    })
    .await
    .unwrap();
    assert_eq!(report.version, V2);
    let seen: Vec<_> = report
        .signals
        .iter()
        .map(|s| (s.object.as_str(), s.command.as_str(), s.phase.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("ControlNode/controller-0", "k0supdate", Some("Completed")),
            ("Node/controller-0", "airgapupdate", Some("Completed")),
        ]
    );
}

/// The plan's commands: the airgap bundle (from `bundle`: base URL and sha256) on both
/// nodes, then k0s v2 (from `binary`) on the controller, then the worker.
fn airgap_then_k0s(binary: (&str, &str), bundle: (&str, &str)) -> Vec<PlanCommand> {
    let platform = autopilot_api::platform::current();
    let airgap = PlanCommandAirgapUpdate {
        version: V2.to_owned(),
        platforms: BTreeMap::from([(
            platform,
            PlanResourceUrl {
                url: format!("{}/bundles/{BUNDLE}", bundle.0),
                sha256: Some(bundle.1.to_owned()),
                ..Default::default()
            },
        )]),
        workers: static_nodes(&["controller-0", "worker-0"], 2),
        rollout: PlanCommandRollout::default(),
    };
    let k0s = update_to(
        V2,
        binary.0,
        binary.1,
        Some(static_nodes(&["controller-0"], 1)),
        Some(static_nodes(&["worker-0"], 1)),
    );
    vec![
        PlanCommand { k0supdate: None, airgapupdate: Some(airgap), preflight: None },
        PlanCommand { k0supdate: Some(k0s), airgapupdate: None, preflight: None },
    ]
}

/// Every node has the bundle in `images/`, whole, and nothing else there.
fn check_bundles<'a>(processes: impl Iterator<Item = &'a K0sProcess>, bundle_sha: &str) {
    for process in processes {
        let path = process.data_dir().join("images").join(BUNDLE);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: bundle {}: {e}", process.node_name(), path.display()));
        assert_eq!(sha256_hex(&bytes), bundle_sha, "{}", path.display());
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().expect("images/"))
            .expect("reading images/")
            .map(|e| e.expect("an entry of images/").file_name().to_string_lossy().into_owned())
            .filter(|n| n != BUNDLE)
            .collect();
        assert!(leftovers.is_empty(), "only the bundle in images/: {leftovers:?}");
    }
}

/// Both nodes publish v2 and are uncordoned.
async fn published_and_uncordoned(client: &kube::Client, nodes: &Api<Node>) {
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    wait_for(Duration::from_secs(30), "controller-0 to publish v2", || async {
        Ok((control_nodes.get("controller-0").await?.k0s_version() == Some(V2)).then_some(()))
    })
    .await
    .expect("controller-0 publishes v2");
    wait_for(Duration::from_secs(30), "worker-0 to publish v2", || async {
        let node = nodes.get("worker-0").await?;
        Ok((node.annotations().get(keys::ANNOTATION_K0S_VERSION).map(String::as_str) == Some(V2))
            .then_some(()))
    })
    .await
    .expect("worker-0 publishes v2");
    for name in ["controller-0", "worker-0"] {
        let node = nodes.get(name).await.expect("reading the Node");
        let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        assert!(!unschedulable, "{name} uncordoned after the update");
    }
}
