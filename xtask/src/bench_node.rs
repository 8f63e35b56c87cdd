//! `cargo xtask bench node`: what one node update costs, split into its steps. On real
//! nodes it measures a Kubernetes upgrade ([`crate::bench_upgrade`], which uses this
//! module's runs); with `--process-only` (the `k0s worker` alone registers its Node, nothing
//! runs on it) an update to the same binary, here.
//!
//! The process-only fleet: one controller and two workers, all the release build. Each run is
//! one Plan: worker-0 to the same release binary (`forceupdate`, served over loopback with its
//! sha256). The bench watches worker-0's signal and times each step from what it sees:
//!
//! | step | from | to |
//! |---|---|---|
//! | signal | the Plan is created | the leader's signal is on the Node |
//! | download | the signal | `Cordoning` (the agent took it, downloaded, verified and self-tested the binary) |
//! | drain | `Cordoning` | `ApplyingUpdate` (cordoned, every Pod evicted and gone) |
//! | swap + restart | `ApplyingUpdate` | `Uncordoning` (swapped, trial boot, restarted, the new binary answering) |
//! | uncordon | `Uncordoning` | `Completed` |
//! | complete | the node's `Completed` | the Plan's `Completed` |
//! | settle | the node's `Completed` | the Node Ready and its DaemonSet Pods Ready (real nodes) |
//!
//! Within the drain (real nodes), "Pods stopping" is the kubelet's part: from the first
//! evicted Pod seen deleting to the last one gone. A first run, not reported, warms the leader
//! up.
//!
//! The orchestration overhead is what only autopilot's own control loop spends, with no
//! payload, Pod or process in the way: signal + uncordon + complete, as a share of the total
//! (Plan created → Plan `Completed`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_api::signal::{self, SignalPhase};
use autopilot_api::v1beta2::{ControlNode, Plan, PlanStateType};
use futures::StreamExt as _;
use integration::http::FileServer;
use integration::real_node::workload::{self, pod_ready, pod_template};
use integration::{Cluster, ClusterBuilder, K0sProcess, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;

/// The worker the bench updates; the other takes its Pods.
pub(crate) const UPDATED: &str = "worker-0";
pub(crate) const OTHER: &str = "worker-1";

/// The controller (real nodes: the one whose update is measured too).
pub(crate) const CONTROLLER: &str = "controller-0";

/// How long Pods, Nodes and one run may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(300);

/// How often the bench looks at what it polls (a ControlNode, a process, an API server).
pub(crate) const SAMPLE: Duration = Duration::from_millis(50);

/// How long one of those looks may take before it counts as not answered.
pub(crate) const SAMPLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Arguments of `cargo xtask bench node`.
#[derive(clap::Args)]
pub struct NodeArgs {
    /// Pods of the Deployment on the updated node, one run each (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [0, 10, 30])]
    pub pods: Vec<usize>,
    /// Process-only nodes: the `k0s worker` registers its Node, no kubelet, no Pods.
    #[arg(long)]
    pub process_only: bool,
    /// Runs per Pod count (the run of median total is reported).
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
}

/// The times of one run's steps.
#[derive(Debug, Clone, Default)]
pub(crate) struct Steps {
    pub(crate) signal: Duration,
    pub(crate) download: Duration,
    pub(crate) drain: Duration,
    pub(crate) swap_restart: Duration,
    pub(crate) uncordon: Duration,
    pub(crate) complete: Duration,
    pub(crate) settle: Duration,
    pub(crate) total: Duration,
    /// Within the drain: from the first evicted Pod's deletion to the last one gone (the
    /// kubelet stopping the containers and confirming).
    pub(crate) pods_gone: Duration,
}

impl Steps {
    /// What autopilot's own control loop spent: signal + uncordon + complete.
    pub(crate) fn overhead(&self) -> Duration {
        self.signal + self.uncordon + self.complete
    }
}

/// Runs the process-only bench with `k0s` (the release build); real nodes:
/// [`crate::bench_upgrade::run`].
pub async fn run(k0s: &Path, args: NodeArgs) -> anyhow::Result<()> {
    let NodeArgs { pods, process_only, runs } = args;
    check_args(&pods, process_only, runs)?;
    anyhow::ensure!(process_only, "real nodes: the Kubernetes upgrade bench runs them");
    let payload = std::fs::read(k0s).with_context(|| format!("reading {}", k0s.display()))?;
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&payload));
    let version = integration::run_k0s_binary(k0s, &["version"], Duration::from_secs(30))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let server = FileServer::start(payload).await?;

    let cluster = ClusterBuilder::new("bench-node")
        .workers(&[UPDATED, OTHER])
        .k0s_binary(k0s)
        .build()
        .await?;
    let client = cluster.admin_client().await?;
    let _controller = cluster.spawn_controller(0, &[]).await?;
    let _workers = start_workers(&cluster, &client, &version).await?;

    println!(
        "node bench: process-only nodes, 1 controller + 2 workers, {UPDATED} updated to the \
         same release binary ({} MiB) by one Plan; {runs} run(s)",
        std::fs::metadata(k0s)?.len() / (1 << 20)
    );
    let plan = |run: usize| {
        update_plan(&format!("bench-node-{run}"), &version, server.base_url(), &sha, Target::Worker)
    };
    // A first run, not reported: the leader's first pass over a new Plan right after it took
    // the lease waits for its watches to fill (measured 1.7-2.1 s), which no later run pays.
    one_run(&client, plan(0)?, Target::Worker, false).await.context("the warm-up run")?;
    let mut measured = Vec::new();
    for run in 1..=runs {
        let (steps, _) = one_run(&client, plan(run)?, Target::Worker, false)
            .await
            .with_context(|| format!("run {run}"))?;
        print_row(0, &steps);
        measured.push(steps);
    }
    measured.sort_by_key(|s| s.total);
    print_summary("process-only", &[(0, measured[measured.len() / 2].clone())]);
    Ok(())
}

/// Refuses arguments the bench cannot run with (and real nodes where they cannot run).
pub(crate) fn check_args(pods: &[usize], process_only: bool, runs: usize) -> anyhow::Result<()> {
    anyhow::ensure!(runs >= 1, "--runs must be at least 1");
    anyhow::ensure!(!pods.is_empty(), "--pods needs at least one count");
    if process_only {
        anyhow::ensure!(pods == [0], "--process-only nodes run no Pods: give --pods 0");
    } else {
        integration::real_node::prerequisites()
            .map_err(|why| anyhow::anyhow!("real nodes cannot run here: {why}"))?;
    }
    Ok(())
}

/// Prints the table of the run of median total per Pod count.
pub(crate) fn print_summary(kind: &str, results: &[(usize, Steps)]) {
    println!("\nnode bench ({kind} nodes), the run of median total per Pod count:");
    println!(
        "| Pods | signal | download | drain (Pods stopping) | swap + restart | uncordon | complete | total | settle | overhead |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (count, steps) in results {
        println!(
            "| {count} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} ({:.0} %) |",
            secs(steps.signal),
            secs(steps.download),
            secs(steps.drain),
            secs(steps.pods_gone),
            secs(steps.swap_restart),
            secs(steps.uncordon),
            secs(steps.complete),
            secs(steps.total),
            secs(steps.settle),
            secs(steps.overhead()),
            100.0 * steps.overhead().as_secs_f64() / steps.total.as_secs_f64().max(1e-9),
        );
    }
}

pub(crate) fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

pub(crate) fn print_row(count: usize, s: &Steps) {
    println!(
        "  {count} Pods: signal {}, download {}, drain {} (Pods stopping {}), swap + restart {}, uncordon {}, complete {}; total {}; settle {}",
        secs(s.signal),
        secs(s.download),
        secs(s.drain),
        secs(s.pods_gone),
        secs(s.swap_restart),
        secs(s.uncordon),
        secs(s.complete),
        secs(s.total),
        secs(s.settle)
    );
}

/// Starts both workers (process-only: each registers its Node) and waits until they publish
/// `version`.
async fn start_workers(
    cluster: &Cluster,
    client: &kube::Client,
    version: &str,
) -> anyhow::Result<Vec<K0sProcess>> {
    let mut workers = Vec::new();
    for name in [UPDATED, OTHER] {
        workers.push(cluster.spawn_worker(name, &[]).await?);
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for name in [UPDATED, OTHER] {
        wait_for(TIMEOUT, &format!("{name} publishing {version}"), || async {
            let node = nodes.get_opt(name).await?;
            let published = node
                .and_then(|n| n.metadata.annotations)
                .and_then(|a| a.get(keys::ANNOTATION_K0S_VERSION).cloned());
            Ok((published.as_deref() == Some(version)).then_some(()))
        })
        .await?;
    }
    Ok(workers)
}

/// The `default` ServiceAccount (made by the controller-manager) and DaemonSet `agent`.
pub(crate) async fn create_daemon_set(client: &kube::Client) -> anyhow::Result<()> {
    workload::wait_default_service_account(client, TIMEOUT).await?;
    workload::daemon_set(client, "agent").await
}

/// Deployment `web` with `count` replicas, all on [`UPDATED`]: scaled to 0, [`OTHER`]
/// cordoned, scaled to `count`, every replica Ready, [`OTHER`] uncordoned (it takes them
/// when [`UPDATED`] is drained).
pub(crate) async fn place_pods(client: &kube::Client, count: usize) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    if deployments.get_opt("web").await?.is_none() {
        workload::deployment(client, "web", 0, pod_template("web")).await?;
    }
    let scale = |replicas: usize| json!({ "spec": { "replicas": replicas } });
    deployments.patch("web", &PatchParams::default(), &Patch::Merge(&scale(0))).await?;
    wait_for(TIMEOUT, "no web Pod left", || async {
        Ok(pods
            .list(&ListParams::default().labels("app=web"))
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await?;
    let cordon = |on: bool| json!({ "spec": { "unschedulable": on } });
    nodes.patch(OTHER, &PatchParams::default(), &Patch::Merge(&cordon(true))).await?;
    deployments.patch("web", &PatchParams::default(), &Patch::Merge(&scale(count))).await?;
    wait_for(TIMEOUT, &format!("{count} web Pods Ready on {UPDATED}"), || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await?.items;
        let ready = list
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(UPDATED))
            .filter(|p| pod_ready(p))
            .count();
        Ok((ready == count).then_some(()))
    })
    .await?;
    nodes.patch(OTHER, &PatchParams::default(), &Patch::Merge(&cordon(false))).await?;
    Ok(())
}

/// One run of `plan` (a `k0supdate` of `target` alone, [`update_plan`]); its steps and when
/// each phase of the target's signal was first seen.
pub(crate) async fn one_run(
    client: &kube::Client,
    plan: Plan,
    target: Target,
    real: bool,
) -> anyhow::Result<(Steps, Phases)> {
    let plans: Api<Plan> = Api::all(client.clone());
    let _ = plans.delete(keys::PLAN_NAME, &DeleteParams::default()).await;
    wait_for(TIMEOUT, "the previous Plan gone", || async {
        Ok(plans.get_opt(keys::PLAN_NAME).await?.is_none().then_some(()))
    })
    .await?;
    let id = plan.spec.id.clone();
    let seen: Arc<Mutex<BTreeMap<Option<SignalPhase>, Instant>>> = Arc::default();
    let watch = match target {
        Target::Worker => tokio::spawn(watch_phases(client.clone(), id.clone(), seen.clone())),
        Target::Controller => tokio::spawn(poll_phases(client.clone(), id.clone(), seen.clone())),
    };
    let evictions: Arc<Mutex<Evictions>> = Arc::default();
    let pod_watch = tokio::spawn(watch_evictions(client.clone(), evictions.clone()));

    let created = Instant::now();
    plans.create(&PostParams::default(), &plan).await?;
    let done = tokio::time::timeout(TIMEOUT, plan_end(&plans))
        .await
        .with_context(|| format!("{id}: the Plan did not end within {TIMEOUT:?}"))?;
    anyhow::ensure!(done.0 == PlanStateType::Completed, "the Plan ended {:?}", done.0);
    let completed = done.1;
    let settled =
        if real && target == Target::Worker { wait_settled(client).await? } else { completed };
    watch.abort();
    pod_watch.abort();
    let evictions = evictions.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let pods_gone = match (evictions.first_deleting, evictions.last_gone) {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        _ => Duration::ZERO,
    };

    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let phases = Phases::of(&seen, completed);
    Ok((steps_of(&phases, Moments { created, completed, settled }, pods_gone), phases))
}

/// When the Plan ends, and how: looked at every [`SAMPLE`] (a fixed pace, so the step
/// before it is not stretched by a growing poll interval; a look the API server does not
/// answer within [`SAMPLE_TIMEOUT`] is skipped).
async fn plan_end(plans: &Api<Plan>) -> (PlanStateType, Instant) {
    let mut tick = tokio::time::interval(SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Ok(Ok(plan)) = tokio::time::timeout(SAMPLE_TIMEOUT, plans.get(keys::PLAN_NAME)).await
        else {
            continue;
        };
        if let Some(state) = plan.status.map(|s| s.state).filter(|s| s.is_terminal()) {
            return (state, Instant::now());
        }
    }
}

/// Which node a run updates: [`UPDATED`] or [`CONTROLLER`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The worker [`UPDATED`] (its signal on its Node, watched).
    Worker,
    /// The controller [`CONTROLLER`] (its signal on its ControlNode, polled: its own API
    /// server restarts in the run, which a watch would see late, after its backoff).
    Controller,
}

/// The Plan of run `id`: a forced `k0supdate` of `target` to `version`, from the payload
/// server at `base_url`.
pub(crate) fn update_plan(
    id: &str,
    version: &str,
    base_url: &str,
    sha: &str,
    target: Target,
) -> anyhow::Result<Plan> {
    let platform = autopilot_api::platform::current();
    let (group, node) = match target {
        Target::Worker => ("workers", UPDATED),
        Target::Controller => ("controllers", CONTROLLER),
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": keys::API_VERSION,
        "kind": "Plan",
        "metadata": { "name": keys::PLAN_NAME },
        "spec": {
            "id": id,
            "timestamp": "now",
            "commands": [{ "k0supdate": {
                "version": version,
                "forceupdate": true,
                "platforms": { platform: { "url": format!("{base_url}/k0s"), "sha256": sha } },
                "targets": { group: {
                    "discovery": { "static": { "nodes": [node] } },
                    "limits": { "concurrent": 1 },
                } },
            } }],
        },
    }))?)
}

/// When a run's Plan was created, when it `Completed`, and when the node settled.
struct Moments {
    /// When the Plan was created.
    created: Instant,
    /// When the Plan was seen `Completed`.
    completed: Instant,
    /// When the node's Pods settled (real nodes; `completed` otherwise).
    settled: Instant,
}

/// When each phase of a run's signal was first seen (a phase not seen, two writes between
/// two looks, takes the next one's time; `Completed` not seen, the Plan's).
#[derive(Debug, Clone)]
pub(crate) struct Phases {
    at: BTreeMap<Option<SignalPhase>, Instant>,
}

impl Phases {
    /// Every phase of a k0s update, in order (`None`: signalled, not answered yet).
    const ORDER: [Option<SignalPhase>; 7] = [
        None,
        Some(SignalPhase::Downloading),
        Some(SignalPhase::Cordoning),
        Some(SignalPhase::ApplyingUpdate),
        Some(SignalPhase::Restarting),
        Some(SignalPhase::Uncordoning),
        Some(SignalPhase::Completed),
    ];

    fn of(seen: &BTreeMap<Option<SignalPhase>, Instant>, completed: Instant) -> Self {
        let mut at = BTreeMap::new();
        let mut next = completed;
        for phase in Self::ORDER.iter().rev() {
            if let Some(time) = seen.get(phase) {
                next = (*time).min(next);
            }
            at.insert(*phase, next);
        }
        Self { at }
    }

    /// When `phase` was first seen.
    pub(crate) fn at(&self, phase: Option<SignalPhase>) -> Instant {
        self.at[&phase]
    }
}

/// A run's steps from the times each signal phase was first seen.
fn steps_of(phases: &Phases, moments: Moments, pods_gone: Duration) -> Steps {
    let Moments { created, completed, settled } = moments;
    let time = |phase: Option<SignalPhase>| phases.at(phase);
    let node_completed = time(Some(SignalPhase::Completed));
    Steps {
        signal: time(None).saturating_duration_since(created),
        download: time(Some(SignalPhase::Cordoning)).saturating_duration_since(time(None)),
        drain: time(Some(SignalPhase::ApplyingUpdate))
            .saturating_duration_since(time(Some(SignalPhase::Cordoning))),
        swap_restart: time(Some(SignalPhase::Uncordoning))
            .saturating_duration_since(time(Some(SignalPhase::ApplyingUpdate))),
        uncordon: node_completed.saturating_duration_since(time(Some(SignalPhase::Uncordoning))),
        complete: completed.saturating_duration_since(node_completed),
        settle: settled.saturating_duration_since(node_completed),
        total: completed.saturating_duration_since(created),
        pods_gone,
    }
}

/// When the web Pods on [`UPDATED`] were seen deleting (first) and gone (last).
#[derive(Debug, Clone, Default)]
struct Evictions {
    first_deleting: Option<Instant>,
    last_gone: Option<Instant>,
}

async fn watch_evictions(client: kube::Client, evictions: Arc<Mutex<Evictions>>) {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let config = watcher::Config::default().labels("app=web");
    let mut events = watcher(pods, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let Ok(event) = event else { continue };
        let now = Instant::now();
        let on_node =
            |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(UPDATED);
        let mut seen = evictions.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)
                if on_node(&pod) && pod.metadata.deletion_timestamp.is_some() =>
            {
                seen.first_deleting.get_or_insert(now);
            }
            watcher::Event::Delete(pod) if on_node(&pod) => {
                seen.first_deleting.get_or_insert(now);
                seen.last_gone = Some(now);
            }
            _ => {}
        }
    }
}

/// Records when each phase of run `id`'s signal on [`UPDATED`] is first seen (`None`: the
/// signal, not answered yet).
async fn watch_phases(
    client: kube::Client,
    id: String,
    seen: Arc<Mutex<BTreeMap<Option<SignalPhase>, Instant>>>,
) {
    let nodes: Api<Node> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={UPDATED}"));
    let mut events = watcher(nodes, config).default_backoff().applied_objects().boxed();
    while let Some(event) = events.next().await {
        let Ok(node) = event else { continue };
        let Ok(Some(signal)) = signal::from_meta(&node.metadata) else { continue };
        if signal.plan_id != id {
            continue;
        }
        let now = Instant::now();
        let phase = signal.phase();
        seen.lock().unwrap_or_else(|p| p.into_inner()).entry(phase).or_insert(now);
    }
}

/// Records when each phase of run `id`'s signal on [`CONTROLLER`]'s ControlNode is first
/// seen, looking every [`SAMPLE`] (a look its restarting API server does not answer within
/// [`SAMPLE_TIMEOUT`] is skipped).
async fn poll_phases(
    client: kube::Client,
    id: String,
    seen: Arc<Mutex<BTreeMap<Option<SignalPhase>, Instant>>>,
) {
    let nodes: Api<ControlNode> = Api::all(client);
    let mut tick = tokio::time::interval(SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Ok(Ok(node)) = tokio::time::timeout(SAMPLE_TIMEOUT, nodes.get(CONTROLLER)).await else {
            continue;
        };
        let Ok(Some(signal)) = signal::from_meta(&node.metadata) else { continue };
        if signal.plan_id != id {
            continue;
        }
        let now = Instant::now();
        let phase = signal.phase();
        seen.lock().unwrap_or_else(|p| p.into_inner()).entry(phase).or_insert(now);
    }
}

/// When [`UPDATED`] is Ready with every DaemonSet Pod on it Ready.
async fn wait_settled(client: &kube::Client) -> anyhow::Result<Instant> {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_for(TIMEOUT, &format!("{UPDATED} settled"), || async {
        let ready = integration::real_node::workload::node_ready(&nodes.get(UPDATED).await?);
        let params = ListParams::default().labels("app=agent");
        let agents = pods.list(&params).await?.items;
        let on_node: Vec<&Pod> = agents
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(UPDATED))
            .collect();
        Ok((ready && !on_node.is_empty() && on_node.iter().all(|p| pod_ready(p)))
            .then(Instant::now))
    })
    .await
}
