//! `cargo xtask demo`: the main job on a local real control plane.
//!
//! Today: build `k0s`, start etcd and three kube-apiservers, run three controllers and two
//! workers, show who leads and what registered, tear everything down. Later issues extend it
//! to a full v1 → v2 cluster update.

use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_api::v1beta2::ControlNode;
use integration::{ClusterBuilder, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

/// Arguments of `cargo xtask demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Number of controllers (each with its own kube-apiserver).
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// Number of workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

/// How long each stage of the demo may take before it is reported as failed.
const STAGE_TIMEOUT: Duration = Duration::from_secs(90);

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { controllers, workers } = args;
    anyhow::ensure!(controllers >= 1, "--controllers must be at least 1");
    integration::control_plane::ensure_built()?;
    let k0s = crate::test::build_k0s()?;
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(demo(k0s, controllers, workers))
}

async fn demo(k0s: std::path::PathBuf, controllers: usize, workers: usize) -> anyhow::Result<()> {
    let worker_names: Vec<String> = (0..workers).map(|i| format!("worker-{i}")).collect();
    let worker_refs: Vec<&str> = worker_names.iter().map(String::as_str).collect();
    println!("==> starting etcd and {controllers} kube-apiservers");
    let cluster = ClusterBuilder::new("demo")
        .k0s_binary(&k0s)
        .controllers(controllers)
        .workers(&worker_refs)
        .build()
        .await?;
    for i in 0..controllers {
        println!("    kube-apiserver {i} at https://{}", cluster.api_address(i));
    }
    let mut processes = Vec::new();
    for i in 0..controllers {
        println!("==> starting k0s controller controller-{i}");
        processes.push(cluster.spawn_controller(i, &[]).await?);
    }
    for name in &worker_names {
        println!("==> starting k0s worker {name}");
        processes.push(cluster.spawn_worker(name, &[]).await?);
    }

    let client = cluster.admin_client().await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let holder = wait_for(STAGE_TIMEOUT, "an autopilot leader", || async {
        let lease = leases.get_opt(keys::LEASE_NAME).await?;
        Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).filter(|h| !h.is_empty()))
    })
    .await?;
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    let registered = wait_for(STAGE_TIMEOUT, "every ControlNode", || async {
        let list = control_nodes.list(&Default::default()).await?;
        Ok((list.items.len() == controllers).then_some(list.items))
    })
    .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let ready_nodes = wait_for(STAGE_TIMEOUT, "every worker Node Ready", || async {
        let list = nodes.list(&Default::default()).await?;
        let ready: Vec<Node> = list.items.into_iter().filter(is_ready).collect();
        Ok((ready.len() == workers).then_some(ready))
    })
    .await?;

    println!();
    println!("autopilot leader (Lease {}/{}): {holder}", keys::NAMESPACE, keys::LEASE_NAME);
    println!();
    println!(
        "{:<16} {:<18} {:<22} {:<14} VERSION",
        "CONTROLNODE", "MODE", "INTERNAL IP", "PLATFORM"
    );
    for node in &registered {
        let name = node.metadata.name.clone().unwrap_or_default();
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let platform = format!(
            "{}-{}",
            labels.get(keys::LABEL_OS).cloned().unwrap_or_default(),
            labels.get(keys::LABEL_ARCH).cloned().unwrap_or_default()
        );
        println!(
            "{:<16} {:<18} {:<22} {:<14} {}",
            name,
            annotations.get(keys::ANNOTATION_MODE).cloned().unwrap_or_default(),
            node.internal_ip().unwrap_or("-"),
            platform,
            node.status.as_ref().and_then(|s| s.k0s_version.clone()).unwrap_or_default(),
        );
    }
    println!();
    println!("{:<16} {:<8} {:<14} VERSION", "NODE", "READY", "PLATFORM");
    for node in &ready_nodes {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        println!(
            "{:<16} {:<8} {:<14} {}",
            node.metadata.name.clone().unwrap_or_default(),
            "True",
            format!(
                "{}-{}",
                labels.get(keys::LABEL_OS).cloned().unwrap_or_default(),
                labels.get(keys::LABEL_ARCH).cloned().unwrap_or_default()
            ),
            annotations.get(keys::ANNOTATION_K0S_VERSION).cloned().unwrap_or_default(),
        );
    }
    println!();
    println!("==> tearing down");
    drop(processes);
    drop(cluster);
    println!("==> done");
    Ok(())
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
