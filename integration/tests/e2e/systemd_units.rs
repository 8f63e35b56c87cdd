//! `docs/install.md` followed on the real control plane, and the shipped systemd units work
//! as written. Step 1: each node's credentials are made by the guide's recipe from the
//! cluster CA (the harness has applied `manifests/rbac/`, step 2). Step 3: a controller and a
//! worker are started with exactly the arguments of the `ExecStart` lines of
//! `manifests/systemd/*.service` (paths, the `EnvironmentFile` variable and the host name
//! substituted). Step 5: the first Plan is previewed with `k0s autopilot preview -f`, applied,
//! and both nodes take part in the update with `--restart exit` while the test plays
//! systemd's `Restart=always` (a process that exited is started again). The worker's Node is
//! created by the test first, as the kubelet the unit assumes would. Each step is printed, so
//! the test's output is a transcript of the guide.

use std::ffi::OsString;
use std::path::Path;

use autopilot_api::v1beta2::PlanStateType;
use integration::http::FileServer;
use integration::{K0sProcess, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

/// The words of the unit file's `ExecStart`, its continuation lines joined; the binary
/// first.
fn exec_start(unit: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/systemd").join(unit);
    let text = std::fs::read_to_string(&path).expect("the unit file");
    let mut command = String::new();
    let mut lines = text.lines().skip_while(|line| !line.starts_with("ExecStart="));
    for line in lines.by_ref() {
        let line = line.strip_prefix("ExecStart=").unwrap_or(line);
        match line.trim_end().strip_suffix('\\') {
            Some(continued) => command.push_str(continued),
            None => {
                command.push_str(line);
                break;
            }
        }
        command.push(' ');
    }
    assert!(!command.is_empty(), "{unit} has an ExecStart line");
    command.split_whitespace().map(str::to_owned).collect()
}

/// `words` after the binary, each substituted through `table` (whole words only); a word
/// the table does not know must not look like a host path or a variable.
fn substituted(unit: &str, words: &[String], table: &[(&str, OsString)]) -> Vec<OsString> {
    assert_eq!(words[0], "/usr/local/bin/k0s", "{unit} runs the installed binary");
    words[1..]
        .iter()
        .map(|word| match table.iter().find(|(from, _)| from == word) {
            Some((_, to)) => to.clone(),
            None => {
                assert!(
                    !word.starts_with('/') && !word.contains('$'),
                    "{unit}: {word} has no substitute in the test"
                );
                OsString::from(word)
            }
        })
        .collect()
}

/// Restart every process that exited, as systemd's `Restart=always` would.
async fn supervise(processes: &mut [K0sProcess]) -> anyhow::Result<()> {
    for process in processes.iter_mut() {
        if let Some(status) = process.exit_status() {
            anyhow::ensure!(status.success(), "{} exited with {status:?}", process.node_name());
            process.restart().await?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_shipped_units_start_nodes_that_take_part_in_an_update() {
    let (v2_bytes, v2_sha) = v2_build();
    // The nodes start as the shipped units say, flag for flag: the test starts them.
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("systemd-units")
            .controllers(1)
            .workers(&["worker-0"])
            .unstarted_controllers()
            .unstarted_workers()
            .start()
            .await
            .unwrap();

    // Step 1: credentials, by the guide's recipe, from the cluster CA.
    let work = tempfile::tempdir().unwrap();
    let (controller_kubeconfig, worker_kubeconfig) = credentials(&cluster, work.path());

    let controller_words = exec_start("k0s-controller.service");
    let controller_args = substituted(
        "k0s-controller.service",
        &controller_words,
        &[
            ("/var/lib/k0s/autopilot-controller.kubeconfig", controller_kubeconfig.into()),
            ("/var/lib/k0s", cluster.node_data_dir("controller-0").into()),
            ("${K0S_API_ADDRESS}", cluster.api_address(0).into()),
        ],
    );
    let controller = cluster
        .k0s_node("controller-0", controller_args)
        .env("AUTOPILOT_HOSTNAME", "controller-0")
        .spawn()
        .await
        .unwrap();

    // The kubelet's part: the worker's Node, Ready, with the platform labels.
    kubelets_part(&client).await;

    let worker_words = exec_start("k0s-worker.service");
    let worker_args = substituted(
        "k0s-worker.service",
        &worker_words,
        &[
            ("/var/lib/k0s/kubelet.kubeconfig", worker_kubeconfig.into()),
            ("/var/lib/k0s", cluster.node_data_dir("worker-0").into()),
        ],
    );
    let worker = cluster
        .k0s_node("worker-0", worker_args)
        .env("AUTOPILOT_HOSTNAME", "worker-0")
        .spawn()
        .await
        .unwrap();
    wait_for(STARTUP, "a leader", || leader(&client)).await.unwrap();
    wait_node_version(&client, "worker-0", &version_on_disk(&worker)).await.unwrap();

    let server = FileServer::start(v2_bytes).await.unwrap();
    let update = update_to(
        V2,
        server.base_url(),
        &v2_sha,
        Some(static_nodes(&["controller-0"], 1)),
        Some(static_nodes(&["worker-0"], 1)),
    );
    eprintln!(
        "install.md step 3: controller-0 and worker-0 run the units' ExecStart: {controller_words:?} {worker_words:?}"
    );

    // Step 5: preview, then apply.
    let first = plan("autopilot", "units", vec![k0s_command(update)]);
    let preview = preview(&cluster, work.path(), &first).await;
    let report = String::from_utf8_lossy(&preview.stdout);
    assert!(preview.status.success(), "the first Plan would run:\n{report}");
    eprintln!("install.md step 5: k0s autopilot preview -f plan.yaml\n{report}");
    create_plan(&client, &first).await.unwrap();
    let processes = tokio::sync::Mutex::new([controller, worker]);
    let plans: Api<autopilot_api::v1beta2::Plan> = Api::all(client.clone());
    wait_for(2 * PLAN_TIMEOUT, "the plan to complete under the units' supervision", || async {
        supervise(&mut *processes.lock().await).await?;
        let state = plans.get("autopilot").await?.status.map(|s| s.state);
        Ok((state == Some(PlanStateType::Completed)).then_some(()))
    })
    .await
    .unwrap();
    let [controller, worker] = processes.into_inner();
    assert_eq!(version_on_disk(&controller), V2);
    assert_eq!(version_on_disk(&worker), V2);
    wait_node_version(&client, "worker-0", V2).await.unwrap();
    eprintln!("install.md step 5: the Plan completed; controller-0 and worker-0 run {V2}");
}

/// Step 1: the controller's and the worker's kubeconfigs, by the guide's recipe, from the
/// cluster CA (copied into `work`).
fn credentials(
    cluster: &integration::Cluster,
    work: &Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    std::fs::copy(cluster.ca_cert_path(), work.join("ca.crt")).expect("copying the CA");
    std::fs::copy(cluster.ca_key_path(), work.join("ca.key")).expect("copying the CA key");
    let server = cluster.api_url(0);
    let controller_kubeconfig = crate::docs::make_credentials(work, "controller-0", true, &server);
    let worker_kubeconfig = crate::docs::make_credentials(work, "worker-0", false, &server);
    eprintln!("install.md step 1: made controller-0.kubeconfig and worker-0.kubeconfig");
    (controller_kubeconfig, worker_kubeconfig)
}

/// The kubelet's part: the worker's Node, Ready, with the platform labels.
async fn kubelets_part(client: &kube::Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": "worker-0", "labels": {
            "kubernetes.io/os": autopilot_api::platform::os(),
            "kubernetes.io/arch": autopilot_api::platform::arch(),
            "kubernetes.io/hostname": "worker-0",
        }},
    }))
    .expect("a Node");
    nodes.create(&PostParams::default(), &node).await.expect("creating the Node");
    let ready = json!({ "status": { "conditions": [{
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastHeartbeatTime": jiff::Timestamp::now().to_string(),
    }]}});
    nodes
        .patch_status("worker-0", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .expect("the Node Ready");
}

/// `k0s autopilot preview -f plan.yaml` (written into `work`) of `first`, as the admin.
async fn preview(
    cluster: &integration::Cluster,
    work: &Path,
    first: &autopilot_api::v1beta2::Plan,
) -> std::process::Output {
    let file = work.join("plan.yaml");
    std::fs::write(&file, serde_saphyr::to_string(first).expect("the Plan as YAML"))
        .expect("writing plan.yaml");
    let admin = cluster.admin_kubeconfig(0);
    tokio::task::spawn_blocking(move || {
        integration::run_k0s(&[
            "autopilot",
            "preview",
            "-f",
            &file.to_string_lossy(),
            "--kubeconfig",
            &admin.to_string_lossy(),
        ])
    })
    .await
    .expect("the preview task")
    .expect("k0s autopilot preview runs")
}
