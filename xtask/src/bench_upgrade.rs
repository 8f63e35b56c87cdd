//! `cargo xtask bench node` on real nodes: what a Kubernetes upgrade costs per node, split
//! into its steps, for a worker and for a controller (issue 56, item 6).
//!
//! The fleet: one controller whose `k0s controller --run-components` runs its API server,
//! controller-manager and scheduler, and two real workers whose `k0s worker --run-components`
//! runs containerd and the kubelet, all from the bench's k0s binary carrying Kubernetes
//! v1.34.4 (`integration::components::carrying_at`, `PREVIOUS`). Each measured run is one
//! Plan to the same binary carrying v1.35.4 (`CURRENT`; `forceupdate`, since the k0s version
//! is the same; served over loopback with its sha256). The controller goes first (a kubelet is
//! never newer than its API server), then worker-0 with `--pods N` replicas of a Deployment on
//! it (worker-1 takes them when it is drained) and a DaemonSet on both.
//!
//! Between runs, not timed, the node is put back on the v1.34.4 build by hand: stopped (its
//! components stop with it), the v1.34.4 build put in its binary's place, started again, and
//! its kubelet, or its API server, waited for at v1.34.4. Not by a Plan: both builds report
//! the bench binary's k0s version, and a Plan from it to a build carrying an older minor is
//! refused, by the skew rules and by the node's check of what a payload carries. A warm-up
//! Plan to v1.35.4, not timed (and put back), comes first, and again after the controller's
//! runs: the first Plan after the leader took the lease waits for its watches to fill, which
//! no later run pays (see `bench_node`).
//!
//! Worker-0's steps (its signal watched on its Node):
//!
//! | step | from | to |
//! |---|---|---|
//! | signal | the Plan is created | the leader's signal is on the Node |
//! | download + verify | the signal | `Cordoning` (downloaded, verified, self-tested) |
//! | drain | `Cordoning` | `ApplyingUpdate` (within it, the kubelet stopping the evicted Pods) |
//! | swap + trial | `ApplyingUpdate` | the agent's restart: the `k0s` process re-executed into the new binary (its `/proc/<pid>/exe` another file), after stopping its components, the trial boot (the new containerd and kubelet started, the kubelet at v1.35.4 and the Node Ready) and the swap |
//! | restart to Ready | the agent's restart | the kubelet the restarted process started (its pid file names a new process) reports v1.35.4 in `status.nodeInfo` and the Node is Ready: a Ready heartbeat newer than the one when that kubelet started (heartbeats are in whole seconds, every 2 s, so this may read up to 2 s late) |
//! | uncordon | `Uncordoning` | the node's `Completed` |
//! | complete | the node's `Completed` | the Plan's `Completed` |
//!
//! The agent reports `Uncordoning` once its restart is done, without waiting for the
//! kubelet: "restart to Ready" overlaps uncordon and complete, and may end after the Plan
//! completed (printed too). The total is the Plan's (created → `Completed`); the
//! orchestration overhead is signal + uncordon + complete.
//!
//! The controller's steps are the same up to the drain, which for a controller is the
//! leader's no-op cordon; "restart to `/readyz`" ends when the API server the restarted
//! process started (a new pid in its pid file: the trial's may still answer for a moment,
//! until the new process stops it) answers `/readyz` and `/version` says v1.35.4. Its signal,
//! on its ControlNode, is polled every 50 ms (its own API server restarts in the run), as are
//! the process, the pid files and the API server.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use autopilot_api::signal::SignalPhase;
use integration::components::{Set, carrying_at};
use integration::control_plane::{CURRENT, PREVIOUS, Release};
use integration::http::FileServer;
use integration::real_node::RealNodes;
use integration::real_node::workload::node_ready;
use integration::{Cluster, ClusterBuilder, K0sProcess, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::bench_node::{
    self, CONTROLLER, NodeArgs, OTHER, Phases, SAMPLE, SAMPLE_TIMEOUT, Steps, TIMEOUT, Target,
    UPDATED, secs,
};

/// A build carrying one Kubernetes release, served over loopback.
struct Build {
    server: FileServer,
    sha: String,
}

/// The build the Plans update to (carrying v1.35.4) and the k0s version it reports.
struct Builds {
    version: String,
    current: Build,
}

impl Builds {
    /// A Plan of run `id` that updates `target` to the build carrying v1.35.4.
    fn plan(&self, id: &str, target: Target) -> anyhow::Result<autopilot_api::v1beta2::Plan> {
        let build = &self.current;
        bench_node::update_plan(id, &self.version, build.server.base_url(), &build.sha, target)
    }
}

/// One measured run: the Plan's steps and what the bench saw of the node's restart.
#[derive(Debug, Clone)]
struct Upgrade {
    steps: Steps,
    /// `ApplyingUpdate` → the agent's restart.
    swap_trial: Duration,
    /// The agent's restart → the new components healthy at v1.35.4 (the kubelet Ready, the
    /// API server `/readyz`).
    to_ready: Duration,
    /// The agent's restart → `Uncordoning` seen.
    to_uncordoning: Duration,
    /// How long after the Plan's `Completed` the new components were healthy (negative:
    /// before).
    healthy_after_plan: f64,
}

/// Runs the Kubernetes upgrade bench with `k0s` (the release build): the controller's runs,
/// then worker-0's for each Pod count.
pub async fn run(k0s: &Path, args: NodeArgs) -> anyhow::Result<()> {
    let NodeArgs { pods, process_only, runs } = args;
    bench_node::check_args(&pods, process_only, runs)?;
    anyhow::ensure!(!process_only, "--process-only: bench_node runs it");
    let version = integration::run_k0s_binary(k0s, &["version"], Duration::from_secs(30))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let previous = pack(k0s, PREVIOUS).await?;
    let current = pack(k0s, CURRENT).await?;

    let cluster = ClusterBuilder::new("bench-node")
        .workers(&[UPDATED, OTHER])
        .control_plane_run_by_k0s()
        .k0s_binary(&previous)
        .build()
        .await?;
    let mut controllers = cluster.start_k0s_control_plane(&[]).await?;
    let mut controller = controllers.pop().context("the controller")?;
    let client = cluster.admin_client().await?;
    let nodes = RealNodes::start_for_k0s(&cluster, &[UPDATED, OTHER]).await?;
    let builds = Builds { version, current: serve(&current).await? };
    let mut workers = start_workers(&cluster, &nodes, &previous).await?;
    bench_node::create_daemon_set(&client).await?;
    println!(
        "node bench: real nodes run by k0s, 1 controller + 2 workers, Kubernetes {} → {} (the \
         release binary carrying each, {} MiB), one Plan per node; {runs} run(s) each",
        PREVIOUS.kubernetes,
        CURRENT.kubernetes,
        std::fs::metadata(&current)?.len() / (1 << 20)
    );
    let mut ids = 0..;
    let mut next_id = || format!("bench-node-{}", ids.next().unwrap_or_default());
    warm_up(&client, &builds, &next_id(), &previous, &mut controller, Target::Controller).await?;
    let mut measured = Vec::new();
    for run in 0..runs {
        if run > 0 {
            back(&client, &previous, &mut controller, Target::Controller).await?;
        }
        let upgrade = controller_run(&client, &builds, &next_id(), &controller).await?;
        print_run("controller", &upgrade);
        measured.push(upgrade);
    }
    let controller_median = median(measured);
    let worker = workers.first_mut().context("worker-0")?;
    warm_up(&client, &builds, &next_id(), &previous, worker, Target::Worker).await?;
    let mut results = Vec::new();
    for &count in &pods {
        let mut measured = Vec::new();
        for _ in 0..runs {
            bench_node::place_pods(&client, count).await?;
            let upgrade = worker_run(&client, &builds, &next_id(), worker).await?;
            print_run(&format!("{UPDATED}, {count} Pods"), &upgrade);
            measured.push(upgrade);
            back(&client, &previous, worker, Target::Worker).await?;
        }
        results.push((count, median(measured)));
    }
    print_worker_table(&results);
    print_controller_table(&controller_median);
    drop((workers, controller, nodes, cluster));
    Ok(())
}

/// A copy of `k0s` carrying every component of `release`.
async fn pack(k0s: &Path, release: Release) -> anyhow::Result<PathBuf> {
    let k0s = k0s.to_path_buf();
    tokio::task::spawn_blocking(move || carrying_at(&k0s, Set::All, release)).await?
}

/// `path` served over loopback, with its sha256.
async fn serve(path: &Path) -> anyhow::Result<Build> {
    let payload = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&payload));
    Ok(Build { server: FileServer::start(payload).await?, sha })
}

/// Starts both workers from `binary` (their containerd and kubelet run by `k0s worker
/// --run-components`) and waits for each Node Ready.
async fn start_workers(
    cluster: &Cluster,
    nodes: &RealNodes,
    binary: &Path,
) -> anyhow::Result<Vec<K0sProcess>> {
    let mut workers = Vec::new();
    for name in [UPDATED, OTHER] {
        let command = nodes.k0s_worker(cluster.k0s_worker_on_kubelet(name).binary(binary))?;
        let worker = command.spawn().await?;
        nodes.wait_k0s_node(cluster, &worker).await?;
        workers.push(worker);
    }
    Ok(workers)
}

/// A Plan, not timed, of `target` (`node`) to v1.35.4, and `node` put back on v1.34.4: the
/// leader's first pass.
async fn warm_up(
    client: &kube::Client,
    builds: &Builds,
    id: &str,
    previous: &Path,
    node: &mut K0sProcess,
    target: Target,
) -> anyhow::Result<()> {
    bench_node::place_pods(client, 0).await?;
    let plan = builds.plan(id, target)?;
    bench_node::one_run(client, plan, target, true).await.context("the warm-up run")?;
    back(client, previous, node, target).await
}

/// Puts `node` (`target`) back on the v1.34.4 build, not timed: stops it (its components stop
/// with it), puts `previous` in its binary's place, starts it again, and waits for its
/// kubelet (Ready) or its API server to report v1.34.4.
async fn back(
    client: &kube::Client,
    previous: &Path,
    node: &mut K0sProcess,
    target: Target,
) -> anyhow::Result<()> {
    node.stop(Duration::from_secs(60)).await.context("stopping the node")?;
    let binary = node.binary_path().to_path_buf();
    let temp = binary.with_file_name(".k0s.bench-back.tmp");
    std::fs::copy(previous, &temp).with_context(|| format!("copying to {}", temp.display()))?;
    std::fs::rename(&temp, &binary).with_context(|| format!("replacing {}", binary.display()))?;
    node.restart().await.context("starting the node again")?;
    let what = format!("{target:?} back at {}", PREVIOUS.kubernetes);
    wait_for(TIMEOUT, &what, || async {
        let at = match target {
            Target::Worker => kubelet_ready_at(client, PREVIOUS.kubernetes).await?.is_some(),
            Target::Controller => api_server_at(client, PREVIOUS.kubernetes).await,
        };
        Ok(at.then_some(()))
    })
    .await
}

/// One measured run of worker-0 to v1.35.4.
async fn worker_run(
    client: &kube::Client,
    builds: &Builds,
    id: &str,
    worker: &K0sProcess,
) -> anyhow::Result<Upgrade> {
    let restart = Restart::of(worker, "kubelet")?;
    let client2 = client.clone();
    let ready = tokio::spawn(async move {
        let (restarted, kubelet) = restart.wait().await?;
        kubelet.started().await;
        // The Ready heartbeat when its kubelet started; one newer is that kubelet's.
        let nodes: Api<Node> = Api::all(client2.clone());
        let mut tick = sampler();
        let before = loop {
            tick.tick().await;
            if let Ok(Ok(node)) = tokio::time::timeout(SAMPLE_TIMEOUT, nodes.get(UPDATED)).await {
                break ready_heartbeat(&node);
            }
        };
        loop {
            tick.tick().await;
            let Ok(Some(seen)) = kubelet_ready_at(&client2, CURRENT.kubernetes).await else {
                continue;
            };
            if seen > before {
                return anyhow::Ok((restarted, Instant::now()));
            }
        }
    });
    let plan = builds.plan(id, Target::Worker)?;
    let (steps, phases) = bench_node::one_run(client, plan, Target::Worker, true).await?;
    let (restarted, healthy) = joined(ready, "worker-0's kubelet at the new version").await?;
    Ok(upgrade(steps, &phases, restarted, healthy))
}

/// One measured run of the controller to v1.35.4.
async fn controller_run(
    client: &kube::Client,
    builds: &Builds,
    id: &str,
    controller: &K0sProcess,
) -> anyhow::Result<Upgrade> {
    let restart = Restart::of(controller, "kube-apiserver")?;
    let client2 = client.clone();
    let ready = tokio::spawn(async move {
        let (restarted, api_server) = restart.wait().await?;
        api_server.started().await;
        let mut tick = sampler();
        loop {
            tick.tick().await;
            if api_server_at(&client2, CURRENT.kubernetes).await {
                return anyhow::Ok((restarted, Instant::now()));
            }
        }
    });
    let plan = builds.plan(id, Target::Controller)?;
    let (steps, phases) = bench_node::one_run(client, plan, Target::Controller, true).await?;
    let (restarted, healthy) = joined(ready, "the API server at the new version").await?;
    Ok(upgrade(steps, &phases, restarted, healthy))
}

/// Waits (within [`TIMEOUT`]) for `task`, which watches for `what`.
async fn joined(
    task: tokio::task::JoinHandle<anyhow::Result<(Instant, Instant)>>,
    what: &str,
) -> anyhow::Result<(Instant, Instant)> {
    tokio::time::timeout(TIMEOUT, task)
        .await
        .with_context(|| format!("waiting for {what}"))?
        .with_context(|| format!("the watch for {what}"))?
}

fn upgrade(steps: Steps, phases: &Phases, restarted: Instant, healthy: Instant) -> Upgrade {
    let applying = phases.at(Some(SignalPhase::ApplyingUpdate));
    let uncordoning = phases.at(Some(SignalPhase::Uncordoning));
    let completed = phases.at(Some(SignalPhase::Completed)) + steps.complete;
    let healthy_after_plan = if healthy >= completed {
        healthy.duration_since(completed).as_secs_f64()
    } else {
        -completed.duration_since(healthy).as_secs_f64()
    };
    Upgrade {
        healthy_after_plan,
        steps,
        swap_trial: restarted.saturating_duration_since(applying),
        to_ready: healthy.saturating_duration_since(restarted),
        to_uncordoning: uncordoning.saturating_duration_since(restarted),
    }
}

/// A ticker every [`SAMPLE`] that does not catch up on missed ticks.
fn sampler() -> tokio::time::Interval {
    let mut tick = tokio::time::interval(SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// A node process's executable, to see it re-execute into another binary, and the pid file
/// of one of its components.
struct Restart {
    exe: PathBuf,
    before: u64,
    pid_file: PathBuf,
}

impl Restart {
    /// The executable `process` runs now (which must be its node's binary), and its
    /// `component`'s pid file (`<data-dir>/run/<component>.pid`).
    fn of(process: &K0sProcess, component: &str) -> anyhow::Result<Self> {
        let exe = PathBuf::from(format!("/proc/{}/exe", process.pid()));
        let before = std::fs::metadata(&exe).with_context(|| format!("{}", exe.display()))?.ino();
        let binary = std::fs::metadata(process.binary_path())?.ino();
        anyhow::ensure!(
            before == binary,
            "{}: pid {} does not run {}",
            process.node_name(),
            process.pid(),
            process.binary_path().display()
        );
        let pid_file = process.data_dir().join("run").join(format!("{component}.pid"));
        Ok(Self { exe, before, pid_file })
    }

    /// When the process runs another file than it did (looking every [`SAMPLE`]), and its
    /// component as it was then.
    async fn wait(self) -> anyhow::Result<(Instant, Component)> {
        let mut tick = sampler();
        loop {
            tick.tick().await;
            let now = std::fs::metadata(&self.exe)
                .with_context(|| format!("{}: the process is gone", self.exe.display()))?;
            if now.ino() != self.before {
                let at = Instant::now();
                let before = running_pid(&self.pid_file);
                return Ok((at, Component { pid_file: self.pid_file, before }));
            }
        }
    }
}

/// A component of a restarted node process: its pid file and the process it named at the
/// restart (a trial's component may outlive the trial until the new process stops it).
struct Component {
    pid_file: PathBuf,
    before: Option<u32>,
}

impl Component {
    /// Once the pid file names a running process other than the one it named at the restart:
    /// the one the restarted process started.
    async fn started(&self) {
        let mut tick = sampler();
        loop {
            tick.tick().await;
            if running_pid(&self.pid_file).is_some_and(|pid| Some(pid) != self.before) {
                return;
            }
        }
    }
}

/// The pid `pid_file` names, if that process runs.
fn running_pid(pid_file: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()?;
    Path::new("/proc").join(pid.to_string()).exists().then_some(pid)
}

/// Worker-0's Ready heartbeat (the Ready condition's `lastHeartbeatTime`) if its kubelet
/// reports `version` and the Node is Ready.
async fn kubelet_ready_at(
    client: &kube::Client,
    version: &str,
) -> anyhow::Result<Option<Option<String>>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let Ok(node) = tokio::time::timeout(SAMPLE_TIMEOUT, nodes.get(UPDATED)).await else {
        return Ok(None);
    };
    let node = node?;
    let kubelet = node.status.as_ref().and_then(|s| s.node_info.as_ref());
    let at = kubelet.is_some_and(|i| i.kubelet_version == version);
    Ok((at && node_ready(&node)).then(|| ready_heartbeat(&node)))
}

/// The Node's Ready heartbeat, RFC 3339 in whole seconds (so comparable as strings).
fn ready_heartbeat(node: &Node) -> Option<String> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
    ready.last_heartbeat_time.as_ref().map(|t| t.0.to_string())
}

/// Whether the API server answers `/readyz` and its `/version` is `version` (each within
/// [`SAMPLE_TIMEOUT`]).
async fn api_server_at(client: &kube::Client, version: &str) -> bool {
    let readyz = async {
        let request = http::Request::get("/readyz").body(Vec::new())?;
        anyhow::Ok(client.request_text(request).await?)
    };
    let ready = tokio::time::timeout(SAMPLE_TIMEOUT, readyz).await;
    if !matches!(ready, Ok(Ok(ref body)) if body.trim() == "ok") {
        return false;
    }
    let answered = tokio::time::timeout(SAMPLE_TIMEOUT, client.apiserver_version()).await;
    matches!(answered, Ok(Ok(info)) if info.git_version == version)
}

/// The run of median total.
fn median(mut measured: Vec<Upgrade>) -> Upgrade {
    measured.sort_by_key(|u| u.steps.total);
    measured.swap_remove(measured.len() / 2)
}

fn print_run(what: &str, u: &Upgrade) {
    let s = &u.steps;
    println!(
        "  {what}: signal {}, download + verify {}, drain {} (Pods stopping {}), swap + trial \
         {}, restart to Ready {} (Uncordoning after {}), uncordon {}, complete {}; total {}; \
         Ready {:+.2} s after the Plan completed",
        secs(s.signal),
        secs(s.download),
        secs(s.drain),
        secs(s.pods_gone),
        secs(u.swap_trial),
        secs(u.to_ready),
        secs(u.to_uncordoning),
        secs(s.uncordon),
        secs(s.complete),
        secs(s.total),
        u.healthy_after_plan
    );
}

fn overhead(s: &Steps) -> String {
    let share = 100.0 * s.overhead().as_secs_f64() / s.total.as_secs_f64().max(1e-9);
    format!("{} ({share:.0} %)", secs(s.overhead()))
}

fn print_worker_table(results: &[(usize, Upgrade)]) {
    println!(
        "\n{UPDATED}, Kubernetes {} → {}, the run of median total per Pod count:",
        PREVIOUS.kubernetes, CURRENT.kubernetes
    );
    println!(
        "| Pods | signal | download + verify | drain (Pods stopping) | swap + trial | restart to \
         Ready at {} | uncordon | complete | total | overhead |",
        CURRENT.kubernetes
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (count, u) in results {
        let s = &u.steps;
        println!(
            "| {count} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} |",
            secs(s.signal),
            secs(s.download),
            secs(s.drain),
            secs(s.pods_gone),
            secs(u.swap_trial),
            secs(u.to_ready),
            secs(s.uncordon),
            secs(s.complete),
            secs(s.total),
            overhead(s)
        );
    }
    for (count, u) in results {
        println!(
            "worker, {count} Pods: {} per update, of which the drain {}, swap + trial {}; the \
             kubelet Ready at {} {} after the restart ({:+.2} s after the Plan completed); \
             overhead {}",
            secs(u.steps.total),
            secs(u.steps.drain),
            secs(u.swap_trial),
            CURRENT.kubernetes,
            secs(u.to_ready),
            u.healthy_after_plan,
            overhead(&u.steps)
        );
    }
}

fn print_controller_table(u: &Upgrade) {
    let s = &u.steps;
    println!(
        "\n{CONTROLLER}, Kubernetes {} → {}, the run of median total:",
        PREVIOUS.kubernetes, CURRENT.kubernetes
    );
    println!(
        "| signal | download + verify | cordon | swap + trial | restart to /readyz at {} | \
         uncordon | complete | total | overhead |",
        CURRENT.kubernetes
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        secs(s.signal),
        secs(s.download),
        secs(s.drain),
        secs(u.swap_trial),
        secs(u.to_ready),
        secs(s.uncordon),
        secs(s.complete),
        secs(s.total),
        overhead(s)
    );
    println!(
        "controller: {} per update, of which swap + trial {}; its API server at /readyz and {} \
         {} after the restart ({:+.2} s after the Plan completed); overhead {}",
        secs(s.total),
        secs(u.swap_trial),
        CURRENT.kubernetes,
        secs(u.to_ready),
        u.healthy_after_plan,
        overhead(s)
    );
}
