//! `cargo xtask demo`: the main job on a local real control plane.
//!
//! Builds the control plane, `k0s` at v1 and a v2 copy (one line per step; the build output
//! goes to a log file whose path it prints), starts etcd and one kube-apiserver per
//! controller, runs the controllers and workers at v1, shows who leads and what registered,
//! serves the v2 build over loopback HTTP with its sha256, applies a Plan, shows the update
//! through the `k0s autopilot status` view until the Plan completes, verifies every node runs
//! v2, and tears everything down.
//!
//! Where the machine can run real nodes (root, the Debian packages `.ci/run` installs; see
//! `integration::real_node::prerequisites`), it runs the distribution and upgrades its
//! Kubernetes: v1 (`v1.34.4+k0s.0`) carries the Kubernetes v1.34.4 components and v2 the
//! pinned v1.35.4 ones; each `k0s controller --run-components` runs its kube-apiserver (on the
//! demo's etcd), kube-controller-manager and kube-scheduler, and each worker is a real node
//! whose containerd and kubelet `k0s worker --run-components` runs. The workers carry a small
//! Deployment (under a budget) and a DaemonSet, and the progress shows their Pods leaving the
//! node being drained and coming back while the update moves every component to v2's. Before
//! and after, it prints the Kubernetes each node runs as the cluster reports it (the API
//! server's `/version`, the kubelet's Node), and checks every node ends on v1.35.4. Otherwise it says in one line why, and the workers are `k0s
//! worker` processes alone beside API servers the demo runs.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_api::v1beta2::ControlNode;
use integration::real_node::workload::node_ready;
use integration::{ClusterBuilder, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::control_plane::Part;

/// Arguments of `cargo xtask demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Number of controllers (each with its own kube-apiserver).
    #[arg(long, default_value_t = 3)]
    controllers: usize,
    /// Number of workers.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// The version to update to (a second build of k0s reporting it).
    #[arg(long, default_value = "v1.35.1+k0s.0")]
    to_version: String,
    /// Workers as `k0s worker` processes alone (no kubelet, no Pods), even where real nodes
    /// could run.
    #[arg(long)]
    process_only: bool,
}

/// The file the demo's build steps write their output to.
struct BuildLog {
    path: std::path::PathBuf,
    file: std::fs::File,
}

impl BuildLog {
    /// `<target>/demo-build.log`, truncated.
    fn create() -> anyhow::Result<Self> {
        let dir = crate::test::target_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("demo-build.log");
        let file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path, file })
    }

    /// Run `command` as the step `what`: one line on the terminal, everything it prints in
    /// the log. Returns its stdout.
    fn step(&self, what: &str, mut command: Command) -> anyhow::Result<String> {
        use std::io::Write as _;
        print!("==> {what} ... ");
        std::io::stdout().flush()?;
        let started = std::time::Instant::now();
        let mut file = &self.file;
        writeln!(file, "\n==> {what}\n$ {command:?}")?;
        let output = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(self.file.try_clone()?)
            .output()
            .with_context(|| format!("running {command:?}"))?;
        file.write_all(&output.stdout)?;
        if !output.status.success() {
            println!("failed");
            anyhow::bail!(
                "{what} failed ({}); its output is in {}",
                output.status,
                self.path.display()
            );
        }
        println!("done ({:.0}s)", started.elapsed().as_secs_f64());
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// How long each stage of the demo may take before it is reported as failed.
const STAGE_TIMEOUT: Duration = Duration::from_secs(90);

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { controllers, workers, to_version, process_only } = args;
    anyhow::ensure!(controllers >= 1, "--controllers must be at least 1");
    let log = BuildLog::create()?;
    println!("==> build output goes to {}", log.path.display());
    let xtask = std::env::current_exe().context("finding the xtask binary")?;
    // Only what the demo runs: the control plane, and the real nodes' binaries when its
    // workers will be real nodes (no Prometheus, no cosign: the tests' parts).
    let real_nodes =
        !process_only && workers > 0 && integration::real_node::host_prerequisites().is_ok();
    let mut control_plane = Command::new(&xtask);
    control_plane.args(["control-plane", "--only", Part::ControlPlane.flag()]);
    let mut what = "building the control plane (kube-apiserver, etcd".to_owned();
    if real_nodes {
        control_plane.args(["--only", Part::Node.flag()]);
        control_plane.args(["--only", Part::PreviousKubernetes.flag()]);
        what.push_str(
            ", and for the real nodes kubelet, kube-controller-manager, kube-scheduler, \
             containerd, and the Kubernetes v1.34 components v1 carries",
        );
    }
    what.push_str("; cached after the first run)");
    log.step(&what, control_plane)?;
    log.step("building k0s", crate::test::build_k0s_command("dev"))?;
    let mut k0s = crate::test::k0s_path("debug");
    if real_nodes {
        // v1 carries the Kubernetes release before the one v2 carries, and is named after it
        // as k0s names its releases.
        let v1_version = v1_version();
        let mut copy = Command::new(&xtask);
        copy.args(["build-k0s-version", &v1_version]);
        let built =
            log.step(&format!("building the {v1_version} copy of k0s to start from"), copy)?;
        k0s = built.lines().last().map(std::path::PathBuf::from).with_context(|| {
            format!("the {v1_version} build printed no path (see {})", log.path.display())
        })?;
    }
    let mut copy = Command::new(&xtask);
    copy.args(["build-k0s-version", &to_version]);
    let built = log.step(&format!("building the {to_version} copy of k0s to update to"), copy)?;
    let v2 = built.lines().last().map(std::path::PathBuf::from).with_context(|| {
        format!("the {to_version} build printed no path (see {})", log.path.display())
    })?;
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(demo(k0s, v2, &to_version, controllers, workers, process_only))
}

async fn demo(
    k0s: std::path::PathBuf,
    v2: std::path::PathBuf,
    to_version: &str,
    controllers: usize,
    workers: usize,
    process_only: bool,
) -> anyhow::Result<()> {
    let worker_names: Vec<String> = (0..workers).map(|i| format!("worker-{i}")).collect();
    let worker_refs: Vec<&str> = worker_names.iter().map(String::as_str).collect();
    let real = real_nodes_here(workers, process_only);
    let Started { cluster, processes, real_nodes, v2 } = if real {
        start_distribution(&k0s, &v2, controllers, &worker_refs).await?
    } else {
        start_process_only(&k0s, v2, controllers, &worker_refs).await?
    };

    let client = cluster.admin_client().await?;
    let holder = await_leader(&client).await?;
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    let registered = wait_for(STAGE_TIMEOUT, "every ControlNode", || async {
        let list = control_nodes.list(&Default::default()).await?;
        Ok((list.items.len() == controllers).then_some(list.items))
    })
    .await?;
    let ready_nodes = await_ready_workers(&client, workers).await?;

    println!();
    println!("autopilot leader (Lease {}/{}): {holder}", keys::NAMESPACE, keys::LEASE_NAME);
    print_control_nodes(&registered);
    print_nodes(&ready_nodes);
    if real {
        workloads::create(&client, workers).await?;
        println!();
        println!(
            "==> workloads: Deployment web ({workers} replicas, budget minAvailable {}), \
             DaemonSet agent",
            workers.saturating_sub(1).max(1)
        );
        print!("{}", workloads::render(&workloads::summary(&client).await?));
        print_kubernetes(&cluster, &processes).await;
    }
    let target = Target { v2: &v2, to_version, controllers, workers: &worker_names };
    update(&cluster, &processes, &target, real_nodes.as_ref()).await?;

    println!();
    println!("==> tearing down");
    drop(processes);
    drop(real_nodes);
    drop(cluster);
    println!("==> done");
    Ok(())
}

/// What the demo started.
struct Started {
    cluster: integration::Cluster,
    /// The controllers, then the workers.
    processes: Vec<integration::K0sProcess>,
    real_nodes: Option<integration::real_node::RealNodes>,
    /// The binary the Plan updates to.
    v2: std::path::PathBuf,
}

/// The version of the build real nodes start from: named after the Kubernetes release it
/// carries, as k0s names its releases (`v1.34.4+k0s.0`).
fn v1_version() -> String {
    format!("{}+k0s.0", integration::control_plane::PREVIOUS.kubernetes)
}

/// Whether the workers will be real nodes; says why not when they will not.
fn real_nodes_here(workers: usize, process_only: bool) -> bool {
    let can_run = if process_only {
        Err("--process-only".to_owned())
    } else {
        integration::real_node::prerequisites()
    };
    match can_run {
        Ok(()) => workers > 0,
        Err(why) => {
            println!("==> workers are k0s processes alone (no kubelet, no Pods): {why}");
            false
        }
    }
}

/// The distribution: `k0s` carrying the pinned components runs each controller's
/// kube-apiserver (on the demo's etcd), kube-controller-manager and kube-scheduler, and each
/// worker's containerd and kubelet (real nodes, in a network namespace of their own); the
/// update to v2 moves all of them.
async fn start_distribution(
    k0s: &std::path::Path,
    v2: &std::path::Path,
    controllers: usize,
    worker_refs: &[&str],
) -> anyhow::Result<Started> {
    use integration::components::{Set, carrying, carrying_at, pinned_at};
    use integration::control_plane::{CURRENT, PREVIOUS};
    let v1_carrying = carrying_at(k0s, Set::All, PREVIOUS)?;
    let v2_carrying = carrying(v2, Set::All)?;
    for (which, release) in [("v1", PREVIOUS), ("v2", CURRENT)] {
        let names: Vec<String> = pinned_at(Set::All, release)?
            .iter()
            .map(|c| format!("{} {}", c.name, c.version))
            .collect();
        println!("==> k0s {which} carries {}", names.join(", "));
    }
    println!("==> starting etcd; k0s runs the {controllers} controllers' control planes");
    let cluster = ClusterBuilder::new("demo")
        .k0s_binary(&v1_carrying)
        .controllers(controllers)
        .workers(worker_refs)
        .control_plane_run_by_k0s()
        .build()
        .await?;
    let mut processes = cluster.start_k0s_control_plane(&[]).await?;
    for i in 0..controllers {
        println!(
            "    controller-{i}: k0s runs kube-apiserver at https://{}, kube-controller-manager, \
             kube-scheduler",
            cluster.api_address(i)
        );
    }
    println!(
        "    manifests/rbac/ applied; controllers run in group {}, not as cluster admin",
        integration::rbac::CONTROLLER_GROUP
    );
    let workers = worker_refs.len();
    println!(
        "==> starting {workers} real workers: k0s runs containerd and the kubelet of each, in a \
         network namespace of their own"
    );
    let nodes = integration::real_node::RealNodes::start_for_k0s(&cluster, worker_refs).await?;
    for name in worker_refs {
        let worker = nodes.k0s_worker(cluster.k0s_worker_on_kubelet(name))?.spawn().await?;
        nodes.wait_k0s_node(&cluster, &worker).await?;
        processes.push(worker);
    }
    Ok(Started { cluster, processes, real_nodes: Some(nodes), v2: v2_carrying })
}

/// Workers as `k0s worker` processes alone, beside a control plane the demo runs.
async fn start_process_only(
    k0s: &std::path::Path,
    v2: std::path::PathBuf,
    controllers: usize,
    worker_refs: &[&str],
) -> anyhow::Result<Started> {
    println!("==> starting etcd and {controllers} kube-apiservers");
    let cluster = ClusterBuilder::new("demo")
        .k0s_binary(k0s)
        .controllers(controllers)
        .workers(worker_refs)
        .build()
        .await?;
    for i in 0..controllers {
        println!("    kube-apiserver {i} at https://{}", cluster.api_address(i));
    }
    println!(
        "    manifests/rbac/ applied; controllers run in group {}, not as cluster admin",
        integration::rbac::CONTROLLER_GROUP
    );
    let mut processes = Vec::new();
    for i in 0..controllers {
        println!("==> starting k0s controller controller-{i}");
        processes.push(cluster.spawn_controller(i, &[]).await?);
    }
    for name in worker_refs {
        println!("==> starting k0s worker {name}");
        processes.push(cluster.spawn_worker(name, &[]).await?);
    }
    Ok(Started { cluster, processes, real_nodes: None, v2 })
}

/// Waits for an autopilot leader; returns the Lease's holder.
async fn await_leader(client: &kube::Client) -> anyhow::Result<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NAMESPACE);
    wait_for(STAGE_TIMEOUT, "an autopilot leader", || async {
        let lease = leases.get_opt(keys::LEASE_NAME).await?;
        Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).filter(|h| !h.is_empty()))
    })
    .await
}

/// Waits until `workers` Nodes are Ready and carry their agent's version; returns them.
async fn await_ready_workers(client: &kube::Client, workers: usize) -> anyhow::Result<Vec<Node>> {
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(STAGE_TIMEOUT, "every worker Node Ready with its version", || async {
        let list = nodes.list(&Default::default()).await?;
        // A kubelet makes its Node Ready on its own: wait for the agent's version too.
        let published = |node: &Node| {
            node.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(keys::ANNOTATION_K0S_VERSION))
        };
        let ready: Vec<Node> =
            list.items.into_iter().filter(|n| node_ready(n) && published(n)).collect();
        Ok((ready.len() == workers).then_some(ready))
    })
    .await
}

/// Prints the ControlNodes: mode, address, platform and version.
fn print_control_nodes(registered: &[ControlNode]) {
    println!();
    println!(
        "{:<16} {:<18} {:<22} {:<14} VERSION",
        "CONTROLNODE", "MODE", "INTERNAL IP", "PLATFORM"
    );
    for node in registered {
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
}

/// Prints the worker Nodes: readiness, platform and published version.
fn print_nodes(ready_nodes: &[Node]) {
    println!();
    println!("{:<16} {:<8} {:<14} VERSION", "NODE", "READY", "PLATFORM");
    for node in ready_nodes {
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
}

/// Where the demo updates to.
struct Target<'a> {
    v2: &'a std::path::Path,
    to_version: &'a str,
    controllers: usize,
    workers: &'a [String],
}

/// Serve v2, apply the Plan, show progress live, verify every node runs v2.
async fn update(
    cluster: &integration::Cluster,
    processes: &[integration::K0sProcess],
    target: &Target<'_>,
    real_nodes: Option<&integration::real_node::RealNodes>,
) -> anyhow::Result<()> {
    use autopilot_api::v1beta2::{Plan, PlanStateType};
    use sha2::Digest as _;

    let Target { v2, to_version, controllers, workers } = *target;
    let real = real_nodes.is_some();
    let bytes = std::fs::read(v2).with_context(|| format!("reading {}", v2.display()))?;
    let sha256 = hex::encode(sha2::Sha256::digest(&bytes));
    let server = integration::http::FileServer::start(bytes).await?;
    if let Some(nodes) = real_nodes {
        let base = server.base_url().trim_start_matches("http://");
        nodes.forward_into_namespace(base.parse().context("the file server's address")?)?;
    }
    let url = format!("{}/k0s-{to_version}", server.base_url());
    println!();
    println!("==> serving {to_version} at {url} (sha256 {sha256})");

    let plan = demo_plan(to_version, &url, &sha256, controllers, workers)?;
    let client = cluster.admin_client().await?;
    let plans: Api<Plan> = Api::all(client.clone());
    // The view's KUBERNETES column: each controller's API server asked for its version.
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.admin_kubeconfig(0))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let prober = autopilot_cli::status::Prober::for_config(config);
    println!(
        "==> applying Plan autopilot: k0supdate to {to_version}, controllers one at a time, workers 2 at a time"
    );
    let started = std::time::Instant::now();
    plans.create(&Default::default(), &plan).await.context("creating the Plan")?;

    let (final_state, progress) = follow(&client, &prober, &plans, started, real).await?;
    println!(
        "==> Plan {} ({progress} node updates) after {:.1}s",
        final_state.as_str(),
        started.elapsed().as_secs_f64()
    );
    anyhow::ensure!(final_state == PlanStateType::Completed, "the update did not complete");

    verify_versions(cluster, processes, to_version, real).await
}

/// The demo's Plan: one `k0supdate` to `to_version` from `url`, of the controllers one at a
/// time and the workers 2 at a time.
fn demo_plan(
    to_version: &str,
    url: &str,
    sha256: &str,
    controllers: usize,
    workers: &[String],
) -> anyhow::Result<autopilot_api::v1beta2::Plan> {
    let controller_names: Vec<String> =
        (0..controllers).map(|i| format!("controller-{i}")).collect();
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": keys::API_VERSION,
        "kind": "Plan",
        "metadata": { "name": keys::PLAN_NAME },
        "spec": {
            "id": "demo",
            "timestamp": "now",
            "commands": [{ "k0supdate": {
                "version": to_version,
                "platforms": { autopilot_api::platform::current(): { "url": url, "sha256": sha256 } },
                "targets": {
                    "controllers": { "discovery": { "static": { "nodes": controller_names } } },
                    "workers": {
                        "discovery": { "static": { "nodes": workers } },
                        "limits": { "concurrent": 2 },
                    },
                },
            }}],
        },
    }))?)
}

/// Follows the update through the `k0s autopilot status` view until the Plan ends: redrawn
/// in place on a terminal, else printed again whenever a node's state or phase changes.
/// Returns the Plan's final state and progress.
async fn follow(
    client: &kube::Client,
    prober: &autopilot_cli::status::Prober,
    plans: &Api<autopilot_api::v1beta2::Plan>,
    started: std::time::Instant,
    real: bool,
) -> anyhow::Result<(autopilot_api::v1beta2::PlanStateType, String)> {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    use std::io::IsTerminal as _;

    let terminal = std::io::stdout().is_terminal();
    // Shown again when a node's state or phase changes, or (real nodes) where the Pods are.
    type Shown = (Vec<(String, String, Option<String>, Option<String>)>, String);
    let mut shown: Option<Shown> = None;
    let config = watcher::Config::default().fields(&format!("metadata.name={}", keys::PLAN_NAME));
    let mut events = watcher(plans.clone(), config).default_backoff().applied_objects().boxed();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    let mut status = None;
    let final_state = loop {
        // Pods move without a Plan event: with real nodes, look again at least every 500 ms.
        let tick = if real { Duration::from_millis(500) } else { Duration::from_secs(600) };
        let wait = tokio::time::Instant::now() + tick;
        match tokio::time::timeout_at(wait.min(deadline), events.next()).await {
            Ok(Some(Ok(plan))) => status = plan.status.or(status),
            Ok(Some(Err(_))) => continue,
            Ok(None) => anyhow::bail!("the Plan watch ended"),
            Err(_) if tokio::time::Instant::now() >= deadline => {
                anyhow::bail!("the plan did not finish within 10 minutes")
            }
            Err(_) => {}
        }
        let Some(status) = status.clone() else { continue };
        // With real nodes k0s restarts each controller's API server during its update: a
        // look that finds this one restarting is skipped, the next tick looks again.
        let Ok(snapshot) = autopilot_cli::status::read(client, Some(prober), keys::PLAN_NAME).await
        else {
            continue;
        };
        let view = autopilot_cli::status::view(&snapshot, jiff::Timestamp::now());
        let nodes: Vec<_> = view
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.state.clone(), n.phase.clone(), n.kubernetes.clone()))
            .collect();
        let pods = if real {
            let Ok(summary) = workloads::summary(client).await else { continue };
            workloads::render(&summary)
        } else {
            String::new()
        };
        let ended = status.state.is_terminal();
        let now = (nodes, pods);
        if terminal {
            print!("{}", autopilot_cli::status::CLEAR);
            print!("{}", autopilot_cli::status::render_view(&view));
            print!("{}", now.1);
        } else if shown.as_ref() != Some(&now) || ended {
            println!("--- +{:.1}s", started.elapsed().as_secs_f64());
            print!("{}", autopilot_cli::status::render_view(&view));
            print!("{}", now.1);
        }
        shown = Some(now);
        if ended {
            break (status.state, status.progress.unwrap_or_default());
        }
    };
    Ok(final_state)
}

/// Prints every node's binary on disk, the previous one, the version it publishes and the
/// Kubernetes it runs, and checks each runs `to_version` from disk (and, on real nodes, the
/// Kubernetes release v2 carries).
async fn verify_versions(
    cluster: &integration::Cluster,
    processes: &[integration::K0sProcess],
    to_version: &str,
    real: bool,
) -> anyhow::Result<()> {
    let client = cluster.admin_client().await?;
    println!();
    println!(
        "{:<16} {:<18} {:<18} {:<22} KUBERNETES",
        "NODE", "BINARY ON DISK", "PREVIOUS", "RUNNING (published)"
    );
    for process in processes {
        let name = process.node_name();
        let on_disk = version_of(process.binary_path())?;
        let previous = version_of(&process.binary_path().with_file_name("k0s.prev"))?;
        let published = published_version(&client, name).await?;
        let kubernetes = kubernetes_version(cluster, name).await;
        println!("{name:<16} {on_disk:<18} {previous:<18} {published:<22} {kubernetes}");
        anyhow::ensure!(on_disk == to_version, "{name} runs {on_disk} from disk");
        let carried = integration::control_plane::CURRENT.kubernetes;
        anyhow::ensure!(
            !real || kubernetes.starts_with(&format!("{carried} ")),
            "{name} runs Kubernetes {kubernetes}"
        );
    }
    Ok(())
}

/// Prints the Kubernetes each node runs (real nodes).
async fn print_kubernetes(cluster: &integration::Cluster, processes: &[integration::K0sProcess]) {
    println!();
    println!("{:<16} KUBERNETES", "NODE");
    for process in processes {
        let name = process.node_name();
        println!("{name:<16} {}", kubernetes_version(cluster, name).await);
    }
}

/// The Kubernetes node `name` runs, as the cluster reports it: a controller's API server
/// `/version`, a worker's kubelet (its Node's `nodeInfo`); `-` when it does not say.
async fn kubernetes_version(cluster: &integration::Cluster, name: &str) -> String {
    let controller = name.strip_prefix("controller-").and_then(|i| i.parse::<usize>().ok());
    let reported = match controller {
        Some(i) => match cluster.admin_client_at(i).await {
            Ok(client) => client
                .apiserver_version()
                .await
                .ok()
                .map(|v| format!("{} (API server)", v.git_version)),
            Err(_) => None,
        },
        None => match cluster.admin_client().await {
            Ok(client) => Api::<Node>::all(client)
                .get(name)
                .await
                .ok()
                .and_then(|n| n.status?.node_info)
                .map(|info| format!("{} (kubelet)", info.kubelet_version)),
            Err(_) => None,
        },
    };
    reported.unwrap_or_else(|| "-".to_owned())
}

fn version_of(binary: &std::path::Path) -> anyhow::Result<String> {
    let out = integration::run_k0s_binary(binary, &["version"], Duration::from_secs(30))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The version a node publishes: ControlNode `status.k0sVersion`, or the Node annotation.
async fn published_version(client: &kube::Client, name: &str) -> anyhow::Result<String> {
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    if let Some(node) = control_nodes.get_opt(name).await? {
        return Ok(node.k0s_version().unwrap_or_default().to_string());
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(name).await?;
    Ok(node
        .metadata
        .annotations
        .unwrap_or_default()
        .get(keys::ANNOTATION_K0S_VERSION)
        .cloned()
        .unwrap_or_default())
}

/// The demo's workloads on real nodes, and where their Pods are.
mod workloads {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use integration::real_node::workload;
    use integration::wait_for;
    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;
    use kube::api::ListParams;

    /// Per node: (app, Ready, not Ready, terminating) counts.
    pub(super) type Summary = BTreeMap<String, BTreeMap<String, (usize, usize, usize)>>;

    /// Deployment `web` (one replica per worker) under a budget that keeps all but one, and
    /// DaemonSet `agent`; returns once every Pod is Ready.
    pub(super) async fn create(client: &kube::Client, workers: usize) -> anyhow::Result<()> {
        workload::wait_default_service_account(client, Duration::from_secs(90)).await?;
        workload::deployment(client, "web", workers, workload::pod_template("web")).await?;
        workload::budget(client, "web", "web", workers.saturating_sub(1).max(1)).await?;
        workload::daemon_set(client, "agent").await?;
        wait_for(Duration::from_secs(120), "every web and agent Pod Ready", || async {
            let summary = summary(client).await?;
            let ready = |app: &str| -> usize {
                summary.values().filter_map(|apps| apps.get(app)).map(|c| c.0).sum()
            };
            Ok((ready("web") == workers && ready("agent") == workers).then_some(()))
        })
        .await
    }

    /// Where the `web` and `agent` Pods are, and in what state.
    pub(super) async fn summary(client: &kube::Client) -> anyhow::Result<Summary> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let mut summary = Summary::new();
        for pod in pods.list(&ListParams::default()).await?.items {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_else(|| "(unscheduled)".to_owned());
            let app = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app").cloned())
                .unwrap_or_default();
            let ready = integration::real_node::workload::pod_ready(&pod);
            let counts = summary.entry(node).or_default().entry(app).or_default();
            if pod.metadata.deletion_timestamp.is_some() {
                counts.2 += 1;
            } else if ready {
                counts.0 += 1;
            } else {
                counts.1 += 1;
            }
        }
        Ok(summary)
    }

    /// `PODS worker-0: web 1 Ready, agent 1 Ready | worker-1: web 1 leaving, …`.
    pub(super) fn render(summary: &Summary) -> String {
        let nodes: Vec<String> = summary
            .iter()
            .map(|(node, apps)| {
                let apps: Vec<String> = apps
                    .iter()
                    .map(|(app, (ready, starting, leaving))| {
                        let mut parts = Vec::new();
                        if *ready > 0 {
                            parts.push(format!("{ready} Ready"));
                        }
                        if *starting > 0 {
                            parts.push(format!("{starting} starting"));
                        }
                        if *leaving > 0 {
                            parts.push(format!("{leaving} leaving"));
                        }
                        format!("{app} {}", parts.join(" + "))
                    })
                    .collect();
                format!("{node}: {}", apps.join(", "))
            })
            .collect();
        format!("PODS  {}\n", nodes.join(" | "))
    }
}
