//! `cargo xtask bench footprint`: idle memory of release `k0s` processes (worker, leading and
//! non-leading controller) on the real control plane.
//!
//! `cargo xtask bench download` runs the node agent's download benchmark
//! (`crates/autopilot-signal/benches/download.rs`); with `--prestage-demo`, the pre-staged
//! 3+3 demo variant instead: the demo's fleet updated on the real control plane with real
//! agents, without and with `prestage`, timing how long worker Nodes stay cordoned.
//!
//! `cargo xtask bench plan`: how fast the Plan engine drives a fleet, on the real control
//! plane. `cargo xtask bench rollback`: the same run, then its rollback (DESIGN §15): how long
//! putting every node back takes against the update itself. `cargo xtask bench scale --workers 100,1000,5000`: the same at growing fleet sizes,
//! with the leader's peak RSS, requests per node update and the Plan's size.
//!
//! Three `k0s controller` processes (each with its own kube-apiserver) and 100 worker Nodes
//! registered Ready; the test-side responder plays every node agent and answers each signal
//! `Completed` in one write (a node already at the requested version), so the figure is the
//! engine's own latency (watch → decide → write), not download time. Reported per run: wall time from creating the Plan to `Completed`, and the API
//! requests the leading controller made in that window, counted by the API servers' audit
//! logs (so nothing the controller does is left out).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_api::v1beta2::{Plan, PlanStateType};
use futures::StreamExt as _;
use integration::responder::{Behaviour, Config, Responder};
use integration::{ClusterBuilder, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args)]
pub struct Args {
    /// What to measure.
    #[command(subcommand)]
    what: What,
    /// Measure this `k0s` binary (for example a build of an earlier commit or of another
    /// profile) instead of building the release one (`plan`, `scale`, `rollback`,
    /// `footprint`).
    #[arg(long, global = true)]
    k0s: Option<PathBuf>,
}

/// The `k0s` to measure: `given`, else the release build (built now).
fn release_k0s(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match given {
        Some(path) => {
            anyhow::ensure!(path.is_file(), "--k0s {}: no such file", path.display());
            Ok(std::fs::canonicalize(&path)?)
        }
        None => crate::test::build_k0s_release(),
    }
}

#[derive(clap::Subcommand)]
enum What {
    /// Drive one k0supdate plan over 3 controllers and many workers with instant responders.
    Plan {
        /// Number of worker Nodes.
        #[arg(long, default_value_t = 100)]
        workers: usize,
        /// `limits.concurrent` for the workers.
        #[arg(long, default_value_t = 10)]
        concurrent: u32,
        /// Number of plan runs (each a new run of the same Plan with a new id).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Another `k0s` binary (for example a release build of an earlier commit) to run
        /// head to head: rounds alternate between this build and that one, each round a fresh
        /// cluster, and the medians are compared with the spread between rounds of one build.
        #[arg(long)]
        against: Option<PathBuf>,
        /// Rounds per binary when `--against` is given.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
    },
    /// The same plan at growing fleet sizes, one fresh cluster each (release build, 3
    /// controllers, workers played by the responder answering at once): time to
    /// `Completed`, the leader's peak RSS, the leader's API requests per node update, the
    /// Plan object's size, and how each grows with the number of workers.
    Scale {
        /// Fleet sizes (worker Nodes), comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [100, 1000, 5000])]
        workers: Vec<usize>,
        /// `limits.concurrent` for the workers.
        #[arg(long, default_value_t = 50)]
        concurrent: u32,
        /// Runs of the plan per fleet size, on the same cluster (each a new run of the Plan):
        /// the run of median time is reported, so one slow run on a busy machine does not
        /// decide the comparison between sizes.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Workers walk the phases of a real agent with central cordoning (`Downloading`,
        /// `Cordoning`, then the leader cordons, drains and uncordons) instead of answering
        /// `Completed` at once: the leader's requests per update with drains. The limits on
        /// requests per update are then reported, not held.
        #[arg(long)]
        drains: bool,
    },
    /// One k0supdate plan over 3 controllers and many workers with instant responders, then
    /// its rollback (`autopilot.k0sproject.io/rollback`): rollback time against update time,
    /// in the same run.
    Rollback {
        /// Number of worker Nodes.
        #[arg(long, default_value_t = 100)]
        workers: usize,
        /// `limits.concurrent` for the workers.
        #[arg(long, default_value_t = 10)]
        concurrent: u32,
    },
    /// Idle memory of release `k0s` processes: a worker, a leading and a non-leading
    /// controller, measured after they settled (RSS from /proc, split into what the process
    /// allocated and what it maps from files).
    Footprint {
        /// How long the processes run before they are measured.
        #[arg(long, default_value = "60s", value_parser = autopilot_api::duration::parse)]
        settle: Duration,
    },
    /// What one node update costs, split into its steps and the orchestration overhead: on
    /// real nodes run by `k0s`, a Kubernetes upgrade (v1.34.4 → v1.35.4) of a controller (its
    /// API server back to `/readyz`) and of a worker carrying N Pods (its kubelet Ready at the
    /// new version); `--process-only`, one `k0s worker` updated to the same binary.
    Node(crate::bench_node::NodeArgs),
    /// Download + verify throughput of the node agent on loopback against
    /// `curl -o f && sync f && sha256sum f` (release build; no control plane needed).
    Download {
        /// Payload size in MiB.
        #[arg(long, default_value_t = 200)]
        mib: usize,
        /// Runs of each (the median is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Instead: the pre-staged 3+3 demo variant. The demo's 3 controllers and 3 workers
        /// (real agents, workers one at a time, every node's downloads held to
        /// `--rate-limit`) update to a second build twice, on fresh clusters, without and
        /// with `prestage`: the time worker Nodes spent cordoned, the window from the first
        /// cordon to the last uncordon, and the rollout's wall time.
        #[arg(long)]
        prestage_demo: bool,
        /// With `--prestage-demo`: every node's `--download-rate-limit` (a slow link).
        #[arg(long, default_value = "32MiB")]
        rate_limit: String,
    },
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { what, k0s: given } = args;
    match what {
        What::Plan { workers, concurrent, runs, against, rounds } => {
            integration::control_plane::ensure_built()?;
            let k0s = release_k0s(given)?;
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            match against {
                None => runtime.block_on(bench_plan(&k0s, workers, concurrent, runs)).map(drop),
                Some(other) => runtime
                    .block_on(bench_plan_against(&k0s, &other, workers, concurrent, runs, rounds)),
            }
        }
        What::Scale { workers, concurrent, runs, drains } => {
            anyhow::ensure!(!workers.is_empty(), "--workers needs at least one fleet size");
            integration::control_plane::ensure_built()?;
            let k0s = release_k0s(given)?;
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(bench_scale(&k0s, &workers, concurrent, runs, drains))
        }
        What::Rollback { workers, concurrent } => {
            integration::control_plane::ensure_built()?;
            let k0s = release_k0s(given)?;
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(bench_rollback(&k0s, workers, concurrent))
        }
        What::Footprint { settle } => {
            integration::control_plane::ensure_built()?;
            let k0s = release_k0s(given)?;
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(bench_footprint(&k0s, settle))
        }
        What::Node(args) => {
            integration::control_plane::ensure_built()?;
            if !args.process_only {
                integration::node_binaries::ensure_built()?;
                integration::release_binaries::ensure_built(integration::control_plane::PREVIOUS)?;
            }
            let k0s = release_k0s(given)?;
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            if args.process_only {
                runtime.block_on(crate::bench_node::run(&k0s, args))
            } else {
                runtime.block_on(crate::bench_upgrade::run(&k0s, args))
            }
        }
        What::Download { .. } if given.is_some() => {
            anyhow::bail!("--k0s does not apply to `bench download` (it benchmarks the library)")
        }
        What::Download { prestage_demo: true, rate_limit, .. } => {
            integration::control_plane::ensure_built()?;
            let status = crate::test::build_k0s_command("dev").status().context("building k0s")?;
            anyhow::ensure!(status.success(), "building k0s failed: {status}");
            let k0s = crate::test::k0s_path("debug");
            let v2 = integration::k0s_binary_with_version(PRESTAGE_DEMO_VERSION)?;
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(bench_prestage_demo(&k0s, &v2, &rate_limit))
        }
        What::Download { mib, runs, prestage_demo: false, rate_limit: _ } => {
            let status = std::process::Command::new(env!("CARGO"))
                .args(["bench", "-p", "autopilot-signal", "--bench", "download", "--"])
                .args([mib.to_string(), runs.to_string()])
                .status()
                .context("running cargo bench")?;
            anyhow::ensure!(status.success(), "the download benchmark failed: {status}");
            Ok(())
        }
    }
}

/// The version the pre-staged demo variant updates to.
const PRESTAGE_DEMO_VERSION: &str = "v1.35.1+k0s.0";

/// What one run of the pre-staged demo variant measured.
struct CordonFigures {
    /// Each worker's time cordoned, by name.
    per_node: Vec<(String, Duration)>,
    /// From the first cordon to the last uncordon.
    window: Duration,
    /// From creating the Plan to `Completed`.
    rollout: Duration,
}

/// `bench download --prestage-demo`: the same 3+3 update without and with `prestage`.
async fn bench_prestage_demo(k0s: &Path, v2: &Path, rate: &str) -> anyhow::Result<()> {
    let bytes = std::fs::read(v2).with_context(|| format!("reading {}", v2.display()))?;
    println!(
        "prestage demo: 3 controllers + 3 workers (concurrent 1), payload {:.0} MiB, every \
         node's downloads at {rate}/s",
        bytes.len() as f64 / f64::from(1 << 20)
    );
    for prestage in [false, true] {
        let figures = prestage_demo_run(k0s, &bytes, rate, prestage).await?;
        let total: Duration = figures.per_node.iter().map(|(_, d)| *d).sum();
        let nodes: Vec<String> = figures
            .per_node
            .iter()
            .map(|(name, d)| format!("{name} {:.1} s", d.as_secs_f64()))
            .collect();
        println!(
            "  prestage {prestage:<5}: workers cordoned {:.1} s in all ({}); first cordon to \
             last uncordon {:.1} s; rollout {:.1} s",
            total.as_secs_f64(),
            nodes.join(", "),
            figures.window.as_secs_f64(),
            figures.rollout.as_secs_f64()
        );
    }
    Ok(())
}

/// One fresh 3+3 cluster updated to [`PRESTAGE_DEMO_VERSION`] with or without `prestage`.
async fn prestage_demo_run(
    k0s: &Path,
    payload: &[u8],
    rate: &str,
    prestage: bool,
) -> anyhow::Result<CordonFigures> {
    use sha2::Digest as _;
    let workers = ["worker-0", "worker-1", "worker-2"];
    let name = if prestage { "bench-prestaged" } else { "bench-not-prestaged" };
    let cluster =
        ClusterBuilder::new(name).k0s_binary(k0s).controllers(3).workers(&workers).build().await?;
    let args = ["--download-rate-limit", rate];
    let mut processes = Vec::new();
    for i in 0..3 {
        processes.push(cluster.spawn_controller(i, &args).await?);
    }
    for worker in workers {
        processes.push(cluster.spawn_worker(worker, &args).await?);
    }
    let client = cluster.admin_client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    await_three_and_three(&client, &nodes).await?;
    let (changes, recorder) = record_cordons(nodes.clone());

    let server = integration::http::FileServer::start(payload.to_vec()).await?;
    let sha256 = hex::encode(sha2::Sha256::digest(payload));
    let url = format!("{}/k0s", server.base_url());
    let plan = prestage_demo_plan(name, prestage, &url, &sha256, &workers)?;
    let plans: Api<Plan> = Api::all(client.clone());
    let started = Instant::now();
    plans.create(&PostParams::default(), &plan).await.context("creating the Plan")?;
    let ended = tokio::time::timeout(
        Duration::from_secs(900),
        await_condition(plans, keys::PLAN_NAME, |plan: Option<&Plan>| {
            plan.and_then(|p| p.status.as_ref()).is_some_and(|s| s.state.is_terminal())
        }),
    )
    .await
    .context("the plan did not end within 15 minutes")??;
    let rollout = started.elapsed();
    let state = ended.and_then(|p| p.status).map(|s| s.state);
    anyhow::ensure!(state == Some(PlanStateType::Completed), "the plan ended {state:?}");
    // The last uncordon may reach the watch just after the plan's status.
    wait_for(Duration::from_secs(30), "every worker uncordoned", || async {
        let changes = changes.lock().unwrap_or_else(|p| p.into_inner());
        let mut last: BTreeMap<&str, bool> = BTreeMap::new();
        for (name, cordoned, _) in changes.iter() {
            last.insert(name, *cordoned);
        }
        Ok(last.values().all(|c| !c).then_some(()))
    })
    .await?;
    recorder.abort();
    let changes = changes.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let (per_node, window) = cordon_times(changes);
    drop(processes);
    drop(cluster);
    Ok(CordonFigures { per_node, window, rollout })
}

/// A worker's cordon change: its name, whether it is now cordoned, and when the watch
/// delivered it.
type CordonChange = (String, bool, Instant);

/// Waits until the 3 controllers registered their ControlNodes and the 3 Nodes are Ready.
async fn await_three_and_three(client: &kube::Client, nodes: &Api<Node>) -> anyhow::Result<()> {
    let control_nodes: Api<autopilot_api::v1beta2::ControlNode> = Api::all(client.clone());
    wait_for(Duration::from_secs(120), "3 ControlNodes and 3 Ready Nodes", || async {
        let registered = control_nodes.list(&Default::default()).await?.items.len();
        let ready = nodes
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|node| {
                node.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        Ok((registered == 3 && ready == 3).then_some(()))
    })
    .await
}

/// Records every change of a worker's `spec.unschedulable`, as the watch delivers it, until
/// the returned task is aborted.
fn record_cordons(
    nodes: Api<Node>,
) -> (std::sync::Arc<std::sync::Mutex<Vec<CordonChange>>>, tokio::task::JoinHandle<()>) {
    let changes: std::sync::Arc<std::sync::Mutex<Vec<CordonChange>>> = Default::default();
    let recorder = {
        let changes = changes.clone();
        tokio::spawn(async move {
            use kube::runtime::{WatchStreamExt as _, watcher};
            let mut events = watcher(nodes, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            let mut last: BTreeMap<String, bool> = BTreeMap::new();
            while let Some(Ok(node)) = events.next().await {
                let name = node.metadata.name.clone().unwrap_or_default();
                let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
                if last.insert(name.clone(), cordoned) != Some(cordoned) {
                    changes.lock().unwrap_or_else(|p| p.into_inner()).push((
                        name,
                        cordoned,
                        Instant::now(),
                    ));
                }
            }
        })
    };
    (changes, recorder)
}

/// The demo's Plan: one `k0supdate` to [`PRESTAGE_DEMO_VERSION`] from `url`, pre-staged or
/// not, of the 3 controllers and the workers one at a time.
fn prestage_demo_plan(
    name: &str,
    prestage: bool,
    url: &str,
    sha256: &str,
    workers: &[&str],
) -> anyhow::Result<Plan> {
    let controllers: Vec<String> = (0..3).map(|i| format!("controller-{i}")).collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": keys::API_VERSION,
        "kind": "Plan",
        "metadata": { "name": keys::PLAN_NAME },
        "spec": {
            "id": name,
            "timestamp": "now",
            "commands": [{ "k0supdate": {
                "version": PRESTAGE_DEMO_VERSION,
                "prestage": prestage,
                "platforms": { autopilot_api::platform::current(): {
                    "url": url,
                    "sha256": sha256,
                } },
                "targets": {
                    "controllers": { "discovery": { "static": { "nodes": controllers } } },
                    "workers": {
                        "discovery": { "static": { "nodes": workers } },
                        "limits": { "concurrent": 1 },
                    },
                },
            }}],
        },
    }))?)
}

/// Each worker's time cordoned, by name, and the window from the first cordon to the last
/// uncordon, from the recorded changes.
fn cordon_times(changes: Vec<CordonChange>) -> (Vec<(String, Duration)>, Duration) {
    let mut per_node: BTreeMap<String, Duration> = BTreeMap::new();
    let mut since: BTreeMap<String, Instant> = BTreeMap::new();
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    for (name, cordoned, at) in changes {
        if cordoned {
            first = Some(first.map_or(at, |f| f.min(at)));
            since.insert(name, at);
        } else if let Some(from) = since.remove(&name) {
            *per_node.entry(name).or_default() += at - from;
            last = Some(last.map_or(at, |l| l.max(at)));
        }
    }
    let window = match (first, last) {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        (None, _) | (_, None) => Duration::ZERO,
    };
    (per_node.into_iter().collect(), window)
}

/// Audit policy: one event per request (at ResponseComplete), metadata only.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
";

/// Run `bench plan` once over `k0s`; returns the median time of its runs.
async fn bench_plan(
    k0s: &Path,
    workers: usize,
    concurrent: u32,
    runs: usize,
) -> anyhow::Result<f64> {
    let driven =
        drive(k0s, "bench-plan", workers, concurrent, runs, false, Behaviour::AlreadyUpToDate)
            .await?;
    let mut times: Vec<f64> = driven.runs.iter().map(|r| r.elapsed.as_secs_f64()).collect();
    times.sort_by(f64::total_cmp);
    println!(
        "plan bench: 3 controllers + {workers} workers, concurrent {concurrent}: median {:.3} s, min {:.3} s, max {:.3} s over {runs} runs",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
    Ok(times[times.len() / 2])
}

/// `bench plan` head to head: `rounds` rounds of each binary, alternating (this build
/// first), each a fresh cluster; prints each round's median, the median of each binary's
/// rounds, their difference and the spread between one binary's rounds (the noise the
/// difference has to beat).
async fn bench_plan_against(
    k0s: &Path,
    other: &Path,
    workers: usize,
    concurrent: u32,
    runs: usize,
    rounds: usize,
) -> anyhow::Result<()> {
    anyhow::ensure!(rounds >= 1, "--rounds must be at least 1");
    anyhow::ensure!(other.is_file(), "--against {}: no such file", other.display());
    let mut this_build = Vec::new();
    let mut that_build = Vec::new();
    for round in 0..rounds {
        for (binary, medians) in [(k0s, &mut this_build), (other, &mut that_build)] {
            println!("==> round {round}: {}", binary.display());
            medians.push(bench_plan(binary, workers, concurrent, runs).await?);
        }
    }
    let summary = |medians: &mut Vec<f64>| {
        medians.sort_by(f64::total_cmp);
        let median = medians[medians.len() / 2];
        let spread = medians[medians.len() - 1] - medians[0];
        (median, spread, medians.iter().map(|m| format!("{m:.3}")).collect::<Vec<_>>())
    };
    let (this_median, this_spread, this_rounds) = summary(&mut this_build);
    let (that_median, that_spread, that_rounds) = summary(&mut that_build);
    println!(
        "plan bench head to head ({rounds} rounds each, {runs} runs per round): this build \
         {this_median:.3} s (rounds {}; spread {this_spread:.3} s), {} {that_median:.3} s \
         (rounds {}; spread {that_spread:.3} s): this build is {:+.3} s ({:+.1} %)",
        this_rounds.join(", "),
        other.display(),
        that_rounds.join(", "),
        this_median - that_median,
        (this_median / that_median - 1.0) * 100.0,
    );
    Ok(())
}

async fn bench_rollback(k0s: &Path, workers: usize, concurrent: u32) -> anyhow::Result<()> {
    let driven =
        drive(k0s, "bench-rollback", workers, concurrent, 1, true, Behaviour::AlreadyUpToDate)
            .await?;
    let run = &driven.runs[0];
    let rollback = run.rollback.context("the run was not rolled back")?;
    println!(
        "rollback bench: 3 controllers + {workers} workers, concurrent {concurrent}: update {:.3} s \
         ({} requests), rollback {:.3} s ({} requests), rollback/update {:.2}",
        run.elapsed.as_secs_f64(),
        run.requests,
        rollback.elapsed.as_secs_f64(),
        rollback.requests,
        rollback.elapsed.as_secs_f64() / run.elapsed.as_secs_f64()
    );
    Ok(())
}

// Limits `bench scale` holds each fleet size to (a miss is reported; the invariants of
// [`drive`] fail the command).

/// The leader's peak RSS: 64 MiB up to 5,000 workers, 96 MiB beyond (up to 10,000).
fn scale_max_leader_rss_mib(workers: usize) -> f64 {
    if workers <= 5_000 { 64.0 } else { 96.0 }
}
/// The leader's API requests per node update (one Event per batch, not per node).
const SCALE_MAX_REQUESTS_PER_UPDATE: f64 = 1.5;
/// etcd's default request limit (1.5 MiB) bounds any one object.
const ETCD_OBJECT_LIMIT_BYTES: usize = 1_572_864;

/// Milliseconds per node update of a run over `workers` workers and the 3 controllers.
fn ms_per_node(workers: usize, elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0 / (workers + 3) as f64
}

async fn bench_scale(
    k0s: &Path,
    sizes: &[usize],
    concurrent: u32,
    runs: usize,
    drains: bool,
) -> anyhow::Result<()> {
    let (nodes, how) = if drains {
        (Behaviour::CompleteWithLeader, "cordoned and drained by the leader")
    } else {
        (Behaviour::AlreadyUpToDate, "answering at once")
    };
    let mut rows = Vec::new();
    for &workers in sizes {
        println!("==> fleet of {workers} workers ({how}), {runs} runs");
        let name = format!("bench-scale-{workers}");
        let driven = drive(k0s, &name, workers, concurrent, runs, false, nodes.clone()).await?;
        let mut times: Vec<f64> = driven.runs.iter().map(|r| r.elapsed.as_secs_f64()).collect();
        let run = median_run(&driven.runs);
        times.sort_by(f64::total_cmp);
        println!(
            "    {workers} workers: median {:.3} s over {runs} runs (min {:.3} s, max {:.3} s)",
            run.elapsed.as_secs_f64(),
            times[0],
            times[times.len() - 1],
        );
        rows.push((workers, run.elapsed, run.requests, driven.leader_peak_kib, run.plan_bytes));
    }
    println!();
    println!(
        "{:>8} {:>10} {:>12} {:>13} {:>14} {:>13} {:>12}",
        "workers", "time s", "ms/node", "leader MiB", "requests", "req/update", "Plan KiB"
    );
    let mut missed = Vec::new();
    for &(workers, elapsed, requests, peak_kib, plan_bytes) in &rows {
        let per_update = requests as f64 / (workers + 3) as f64;
        println!(
            "{workers:>8} {:>10.3} {:>12.2} {:>13.1} {requests:>14} {per_update:>13.2} {:>12.1}",
            elapsed.as_secs_f64(),
            ms_per_node(workers, elapsed),
            mib(peak_kib),
            plan_bytes as f64 / 1024.0,
        );
        missed.extend(size_misses(workers, peak_kib, per_update, plan_bytes, drains));
    }
    missed.extend(growth_misses(&rows));
    if let [(first_n, first_t, ..), .., (last_n, last_t, ..)] = rows.as_slice() {
        let size = *last_n as f64 / *first_n as f64;
        let time = last_t.as_secs_f64() / first_t.as_secs_f64();
        println!(
            "growth {first_n} -> {last_n} workers: x{size:.1} nodes, x{time:.2} time (linear \
             would be x{size:.1})"
        );
    }
    if missed.is_empty() {
        println!("targets: all met");
    } else {
        println!("targets missed:\n  {}", missed.join("\n  "));
    }
    Ok(())
}

/// One row of `bench scale`: the fleet's workers, the median run's time, its leader's
/// requests, the leader's peak RSS (KiB) and the ended Plan's size in bytes.
type ScaleRow = (usize, Duration, usize, u64, usize);

/// The targets one fleet size missed: the leader's peak RSS, its requests per node update
/// (not with drains), and the Plan's size against etcd's limit.
fn size_misses(
    workers: usize,
    peak_kib: u64,
    per_update: f64,
    plan_bytes: usize,
    drains: bool,
) -> Vec<String> {
    let mut missed = Vec::new();
    let max_rss = scale_max_leader_rss_mib(workers);
    if mib(peak_kib) > max_rss {
        missed.push(format!(
            "{workers} workers: leader peak RSS {:.1} MiB > {max_rss} MiB",
            mib(peak_kib)
        ));
    }
    if per_update > SCALE_MAX_REQUESTS_PER_UPDATE && !drains {
        missed.push(format!(
            "{workers} workers: {per_update:.2} requests per node update > \
             {SCALE_MAX_REQUESTS_PER_UPDATE}"
        ));
    }
    // The Plan status's budget (DESIGN §14): half of etcd's limit, spec and metadata
    // included here.
    if plan_bytes * 2 > ETCD_OBJECT_LIMIT_BYTES {
        missed.push(format!(
            "{workers} workers: the Plan is {plan_bytes} bytes, over half of etcd's \
             {ETCD_OBJECT_LIMIT_BYTES}-byte limit"
        ));
    }
    missed
}

/// Time per node must not grow with the fleet: the sizes above 1,000 slower per node than
/// 1,000 (10 % allowed for noise).
fn growth_misses(rows: &[ScaleRow]) -> Vec<String> {
    let mut missed = Vec::new();
    if let Some(&(_, base_t, ..)) = rows.iter().find(|row| row.0 == 1_000) {
        let base = ms_per_node(1_000, base_t);
        for &(workers, elapsed, ..) in rows.iter().filter(|row| row.0 > 1_000) {
            let at = ms_per_node(workers, elapsed);
            if at > base * 1.1 {
                missed.push(format!(
                    "{workers} workers: {at:.2} ms per node > {base:.2} ms at 1,000 (+10 %)"
                ));
            }
        }
    }
    missed
}

/// The run of median time (of an even number, the faster of the middle two).
fn median_run(runs: &[RunFigures]) -> &RunFigures {
    let mut by_time: Vec<&RunFigures> = runs.iter().collect();
    by_time.sort_by_key(|run| run.elapsed);
    by_time[(by_time.len() - 1) / 2]
}

/// One run of [`drive`].
struct RunFigures {
    /// From creating (or changing) the Plan to its `Completed`.
    elapsed: Duration,
    /// API requests the leader made in that window (audit log).
    requests: usize,
    /// The ended Plan as JSON, in bytes.
    plan_bytes: usize,
    /// With a rollback after the run: from the annotation to `RolledBack`, and the leader's
    /// requests in that window.
    rollback: Option<RollbackFigures>,
}

/// The rollback of a run.
#[derive(Clone, Copy)]
struct RollbackFigures {
    elapsed: Duration,
    requests: usize,
}

/// What [`drive`] measured.
struct Driven {
    runs: Vec<RunFigures>,
    /// The leading controller's peak RSS (VmHWM) after the last run.
    leader_peak_kib: u64,
}

/// Start a cluster named `name` with 3 release controllers and `workers` Ready Nodes played
/// by the responder (as `behaviour` says), drive `runs` runs of one k0supdate plan, and
/// check the engine's invariants (no node signalled twice in a run, never more than
/// `concurrent` workers in flight).
async fn drive(
    k0s: &Path,
    name: &str,
    workers: usize,
    concurrent: u32,
    runs: usize,
    roll_back: bool,
    behaviour: Behaviour,
) -> anyhow::Result<Driven> {
    anyhow::ensure!(runs >= 1, "--runs must be at least 1");
    let scratch = tempfile::tempdir().context("creating a scratch dir")?;
    let audit_log = scratch.path().join("audit.log");
    let cluster = audited_cluster(k0s, name, scratch.path(), &audit_log).await?;
    let client = cluster.admin_client().await?;
    let worker_names = register_workers(&client, workers).await?;

    println!("==> starting 3 controllers");
    let mut controllers = Vec::new();
    for i in 0..3 {
        controllers.push(cluster.spawn_controller(i, &["--disable-update-agent"]).await?);
    }
    let (leader_index, leader_user) = find_leader(&client).await?;
    publish_controller_versions(&client).await?;

    let responder =
        Responder::start(client.clone(), Config::new().default_behaviour(behaviour)).await?;
    let bench = BenchRuns {
        plans: Api::all(client.clone()),
        worker_names: &worker_names,
        concurrent,
        audit_log: &audit_log,
        leader_user: &leader_user,
        roll_back,
    };
    let mut results = Vec::new();
    for run in 0..runs {
        results.push(bench.run(run).await?);
    }
    let leader_peak_kib = Memory::of(controllers[leader_index].pid())?.peak_kib;
    check_responder(&responder, concurrent)?;
    drop(controllers);
    Ok(Driven { runs: results, leader_peak_kib })
}

/// Starts etcd and 3 kube-apiservers for [`drive`], auditing every request into
/// `audit_log` (the policy is written into `scratch`).
async fn audited_cluster(
    k0s: &Path,
    name: &str,
    scratch: &Path,
    audit_log: &Path,
) -> anyhow::Result<integration::Cluster> {
    let policy = scratch.join("audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY).context("writing the audit policy")?;

    println!("==> starting etcd and 3 kube-apiservers (audit log {})", audit_log.display());
    ClusterBuilder::new(name)
        .k0s_binary(k0s)
        .controllers(3)
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", audit_log.display()))
        // Never rotated (the default rotates at 100 MB, which the drains of 5,000 workers
        // pass, and the counts would miss what went to the rotated file).
        .apiserver_arg("--audit-log-maxsize=100000")
        .build()
        .await
}

/// Registers `workers` Ready worker Nodes (`worker-0000`, …); returns their names.
async fn register_workers(client: &kube::Client, workers: usize) -> anyhow::Result<Vec<String>> {
    println!("==> registering {workers} Ready worker Nodes");
    let nodes: Api<Node> = Api::all(client.clone());
    let worker_names: Vec<String> = (0..workers).map(|i| format!("worker-{i:04}")).collect();
    // A few at a time: thousands of Nodes one by one would take minutes.
    futures::stream::iter(worker_names.iter().map(|name| register_ready_node(&nodes, name)))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    Ok(worker_names)
}

/// Waits for an autopilot leader; returns its controller's index and API user.
async fn find_leader(client: &kube::Client) -> anyhow::Result<(usize, String)> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let holder = wait_for(Duration::from_secs(90), "an autopilot leader", || async {
        let lease = leases.get_opt(keys::LEASE_NAME).await?;
        Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).filter(|h| !h.is_empty()))
    })
    .await?;
    // The holder is `<node>_<suffix>`; controller `i` runs as the node `controller-<i>`
    // under its own identity.
    let leader_node = holder.split_once('_').map(|(node, _)| node.to_string()).unwrap_or(holder);
    let leader_index: usize = leader_node
        .strip_prefix("controller-")
        .and_then(|i| i.parse().ok())
        .with_context(|| format!("the leader {leader_node:?} is not one of the controllers"))?;
    let leader_user = integration::rbac::controller_user(leader_index);
    println!("    leader: {leader_node} (user {leader_user})");
    Ok((leader_index, leader_user))
}

/// Waits for the three ControlNodes and publishes on each the version a rollback puts
/// back: what a rollback restores is the version each node published when it was
/// signalled; the simulated nodes publish the one before the plan's.
async fn publish_controller_versions(client: &kube::Client) -> anyhow::Result<()> {
    let control_nodes: Api<autopilot_api::v1beta2::ControlNode> = Api::all(client.clone());
    wait_for(Duration::from_secs(90), "three ControlNodes", || async {
        Ok((control_nodes.list(&Default::default()).await?.items.len() == 3).then_some(()))
    })
    .await?;
    for i in 0..3 {
        let published = json!({ "metadata": { "annotations": {
            keys::ANNOTATION_K0S_VERSION: BENCH_FROM_VERSION } } });
        control_nodes
            .patch(&format!("controller-{i}"), &PatchParams::default(), &Patch::Merge(&published))
            .await
            .context("publishing a ControlNode's version")?;
    }
    Ok(())
}

/// What the runs of [`drive`] share: the Plans, the fleet, the limit, and where the
/// leader's requests are counted.
struct BenchRuns<'a> {
    /// The Plans.
    plans: Api<Plan>,
    /// The fleet the Plan targets.
    worker_names: &'a [String],
    /// Workers in flight at once.
    concurrent: u32,
    /// The API servers' audit log, where the leader's requests are counted.
    audit_log: &'a Path,
    /// The leader's API user.
    leader_user: &'a str,
    /// Whether each run is rolled back after it completed.
    roll_back: bool,
}

impl BenchRuns<'_> {
    /// Run `run`: create (or change) the Plan, wait for its end, check it `Completed` and
    /// count the leader's requests of the window; then, if asked, roll it back.
    async fn run(&self, run: usize) -> anyhow::Result<RunFigures> {
        let workers = self.worker_names.len();
        let plan = plan_object(run, self.worker_names, self.concurrent);
        let started = Instant::now();
        let started_at = jiff::Timestamp::now();
        self.start(run, &plan).await?;
        let ended = self.await_end(run).await?;
        let elapsed = started.elapsed();
        let plan_bytes = serde_json::to_vec(&ended).map_or(0, |json| json.len());
        let status = ended.and_then(|p| p.status);
        let completed = status.as_ref().map(|s| s.state).unwrap_or_default();
        println!("    run {run}: created at {started_at}, ended at {}", jiff::Timestamp::now());
        let finished_at = jiff::Timestamp::now();
        anyhow::ensure!(
            completed == PlanStateType::Completed,
            "run {run} ended in {} instead of Completed: {}",
            completed.as_str(),
            status
                .iter()
                .flat_map(|s| &s.commands)
                .filter_map(|c| c.description.as_deref())
                .collect::<Vec<_>>()
                .join("; ")
        );
        // Let the audit backend flush the last events of the window before counting. One
        // count reads the whole audit log, which takes more than 10 s once it is big (the
        // drains of 5,000 workers), hence the generous bound.
        let requests = wait_for(Duration::from_secs(120), "audit events of the run", || async {
            let counts = count_requests(self.audit_log, self.leader_user, started_at, finished_at)?;
            Ok((counts.values().sum::<usize>() > 0).then_some(counts))
        })
        .await?;
        let total: usize = requests.values().sum();
        println!(
            "run {run}: {} nodes Completed in {:.3} s; leader made {total} API requests ({})",
            workers + 3,
            elapsed.as_secs_f64(),
            requests.iter().map(|(verb, n)| format!("{verb} {n}")).collect::<Vec<_>>().join(", ")
        );
        let rollback = if self.roll_back {
            Some(roll_back_run(&self.plans, run, workers, self.audit_log, self.leader_user).await?)
        } else {
            None
        };
        Ok(RunFigures { elapsed, requests: total, plan_bytes, rollback })
    }

    /// Create the Plan (run 0) or change its spec for run `run`.
    async fn start(&self, run: usize, plan: &Plan) -> anyhow::Result<()> {
        if run == 0 {
            self.plans.create(&PostParams::default(), plan).await.context("creating the Plan")?;
        } else {
            let patch = json!({ "spec": plan.spec });
            self.plans
                .patch(keys::PLAN_NAME, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .context("changing the Plan for a new run")?;
        }
        Ok(())
    }

    /// Watch (not poll) for the end of run `run`, so the measurement has no poll latency;
    /// returns the ended Plan.
    async fn await_end(&self, run: usize) -> anyhow::Result<Option<Plan>> {
        let plan_id = format!("bench-{run}");
        let ended = move |plan: Option<&Plan>| {
            plan.and_then(|p| p.status.as_ref()).is_some_and(|status| {
                status.plan_id.as_deref() == Some(plan_id.as_str()) && status.state.is_terminal()
            })
        };
        // Generous for big fleets; the bench reports the time, this only bounds it.
        let limit = Duration::from_secs(300 + self.worker_names.len() as u64 / 5);
        tokio::time::timeout(limit, await_condition(self.plans.clone(), keys::PLAN_NAME, ended))
            .await
            .with_context(|| format!("the plan did not end within {}", humantime(limit)))?
            .context("watching the plan")
    }
}

/// A fast wrong answer is no answer: the runs only count if the engine kept its promises
/// (no node signalled twice within a run, never more than `concurrent` workers in flight).
fn check_responder(responder: &Responder, concurrent: u32) -> anyhow::Result<()> {
    let log = responder.log();
    let max_in_flight = log.max_in_flight_of(Some(integration::responder::ObjectKind::Node));
    let duplicates = log.duplicate_signals();
    println!(
        "responder: max workers in flight {max_in_flight}, duplicate signals {}",
        duplicates.len()
    );
    anyhow::ensure!(
        duplicates.is_empty(),
        "nodes were signalled twice within a run:\n{}",
        duplicates.join("\n")
    );
    anyhow::ensure!(
        max_in_flight <= concurrent as usize,
        "{max_in_flight} workers were in flight at once (limit {concurrent})"
    );
    Ok(())
}

/// The version the simulated nodes run before the bench plan (what a rollback puts back).
const BENCH_FROM_VERSION: &str = "v1.35.8+k0s.0";

/// Roll back run `run` (the annotation, as `k0s autopilot rollback` writes it) and time it
/// to `RolledBack`, with every node back.
async fn roll_back_run(
    plans: &Api<Plan>,
    run: usize,
    workers: usize,
    audit_log: &Path,
    leader_user: &str,
) -> anyhow::Result<RollbackFigures> {
    let plan_id = format!("bench-{run}");
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    let patch = json!({ "metadata": { "annotations": { keys::ANNOTATION_ROLLBACK: plan_id } } });
    plans
        .patch(keys::PLAN_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("annotating the Plan for a rollback")?;
    let rolled_back = |plan: Option<&Plan>| {
        plan.and_then(|p| p.status.as_ref())
            .is_some_and(|status| status.state == PlanStateType::RolledBack)
    };
    let limit = Duration::from_secs(300 + workers as u64 / 5);
    let ended =
        tokio::time::timeout(limit, await_condition(plans.clone(), keys::PLAN_NAME, rolled_back))
            .await
            .with_context(|| format!("the rollback did not end within {}", humantime(limit)))?
            .context("watching the plan")?;
    let elapsed = started.elapsed();
    let finished_at = jiff::Timestamp::now();
    let status = ended.and_then(|p| p.status).unwrap_or_default();
    let back: usize = status
        .commands
        .iter()
        .filter_map(|c| c.rollback.as_ref())
        .flat_map(|r| r.controllers.iter().chain(&r.workers))
        .filter(|t| t.state == autopilot_api::v1beta2::TargetState::SignalCompleted)
        .count();
    anyhow::ensure!(
        back == workers + 3,
        "{back} of {} nodes were put back: {}",
        workers + 3,
        status
            .commands
            .iter()
            .filter_map(|c| c.description.as_deref())
            .collect::<Vec<_>>()
            .join("; ")
    );
    let requests = wait_for(Duration::from_secs(10), "audit events of the rollback", || async {
        let counts = count_requests(audit_log, leader_user, started_at, finished_at)?;
        Ok((counts.values().sum::<usize>() > 0).then_some(counts))
    })
    .await?;
    let total: usize = requests.values().sum();
    println!(
        "run {run} rolled back: {back} nodes put back in {:.3} s; leader made {total} API requests",
        elapsed.as_secs_f64()
    );
    Ok(RollbackFigures { elapsed, requests: total })
}

/// The worker that `bench footprint` runs with `--run-components` (a real node), where the
/// machine can run one.
const RUN_COMPONENTS_WORKER: &str = "worker-kubelet";

/// How much more a worker that runs containerd and the kubelet may hold itself (its
/// children not counted) than one that runs the agent alone, MiB.
const FOOTPRINT_MAX_RUN_COMPONENTS_EXTRA_MIB: f64 = 2.0;

/// The idle worker's RSS target of `bench footprint`, MiB.
const FOOTPRINT_MAX_WORKER_MIB: f64 = 12.0;
/// The release binary's size target, bytes (20 MB).
const FOOTPRINT_MAX_BINARY_BYTES: u64 = 20_000_000;

/// `cargo xtask bench footprint`: 2 controllers (one leads) and 1 worker, all release builds
/// with their default flags, idle on the real control plane for `settle`; then each one's
/// memory from `/proc/<pid>/status`.
async fn bench_footprint(k0s: &Path, settle: Duration) -> anyhow::Result<()> {
    let Idle { cluster, controllers, worker, leader } = start_idle(k0s, settle).await?;
    let measured = [
        ("k0s worker", worker.pid()),
        ("k0s controller (leading)", controllers[leader].pid()),
        ("k0s controller (not leading)", controllers[1 - leader].pid()),
    ];
    println!(
        "{:<30} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "process", "RSS MiB", "anon MiB", "file MiB", "peak MiB", "threads"
    );
    let mut worker_kib = 0;
    for (what, pid) in measured {
        let memory = Memory::of(pid)?;
        if pid == worker.pid() {
            worker_kib = memory.rss_kib;
        }
        println!(
            "{what:<30} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8}",
            mib(memory.rss_kib),
            mib(memory.anon_kib),
            mib(memory.file_kib),
            mib(memory.peak_kib),
            memory.threads
        );
    }
    // Where each process's resident pages are. The kernel maps a file's cached pages into a
    // process by whole windows and folios (64 KiB and up; the disk's read-ahead makes them
    // larger) around each page it runs, so the text resident is set by how the code that runs
    // is laid out (crates/k0s/hot-functions.txt) and by the read-ahead printed below.
    println!(
        "{:<30} {:>9} {:>9} {:>9} {:>9}",
        "resident, by mapping (MiB)", "k0s text", "k0s data", "libs", "anon"
    );
    for (what, pid) in measured {
        let parts = Mapped::of(pid)?;
        println!(
            "{what:<30} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            mib(parts.text_kib),
            mib(parts.data_kib),
            mib(parts.libs_kib),
            mib(parts.anon_kib)
        );
    }
    // The processes may run a copy of `k0s`; the worker's executable is the one measured.
    let exe = std::fs::read_link(format!("/proc/{}/exe", worker.pid()))?;
    match read_ahead_kib(&exe) {
        Some(kib) => println!("    read-ahead of the disk holding {}: {kib} KiB", exe.display()),
        None => println!("    read-ahead of the disk holding {}: unknown", exe.display()),
    }
    let (size, carrying_dir) = binary_sizes(k0s)?;
    let carrying = carrying_dir.path().join("k0s");
    // Issue 28's targets, reported like `bench scale`'s (a build without the hot-function
    // order, or with a list far older than the code, misses the first).
    let mut missed = Vec::new();
    if mib(worker_kib) > FOOTPRINT_MAX_WORKER_MIB {
        missed.push(format!(
            "idle worker RSS {:.1} MiB > {FOOTPRINT_MAX_WORKER_MIB} MiB (is \
             crates/k0s/hot-functions.txt current? `cargo xtask hot-functions`)",
            mib(worker_kib)
        ));
    }
    if size > FOOTPRINT_MAX_BINARY_BYTES {
        missed.push(format!("binary {size} bytes > {FOOTPRINT_MAX_BINARY_BYTES}"));
    }
    if let Some(own_kib) = run_components_worker(&cluster, &carrying).await? {
        let limit = mib(worker_kib) + FOOTPRINT_MAX_RUN_COMPONENTS_EXTRA_MIB;
        if mib(own_kib) > limit {
            missed.push(format!(
                "worker running its components holds {:.1} MiB itself > {limit:.1} MiB (the \
                 agent alone + {FOOTPRINT_MAX_RUN_COMPONENTS_EXTRA_MIB} MiB)",
                mib(own_kib)
            ));
        }
    }
    if missed.is_empty() {
        println!("targets: all met");
    } else {
        println!("targets missed:\n  {}", missed.join("\n  "));
    }
    drop(worker);
    drop(controllers);
    Ok(())
}

/// Prints the size of `k0s` and of a copy carrying the pinned components (written into the
/// returned directory as `k0s`); returns the bare size.
fn binary_sizes(k0s: &Path) -> anyhow::Result<(u64, tempfile::TempDir)> {
    let size = std::fs::metadata(k0s).with_context(|| format!("reading {}", k0s.display()))?.len();
    println!("    binary: {size} bytes ({:.2} MB)", size as f64 / 1e6);
    let carrying_dir = tempfile::tempdir()?;
    let carrying = carrying_dir.path().join("k0s");
    let set = integration::components::pack(k0s, integration::components::Set::All, &carrying)?;
    let carrying_size = std::fs::metadata(&carrying)?.len();
    let names: Vec<String> =
        set.components.iter().map(|c| format!("{} {}", c.name, c.version)).collect();
    println!(
        "    binary carrying the pinned components: {carrying_size} bytes ({:.2} MB: {})",
        carrying_size as f64 / 1e6,
        names.join(", ")
    );
    Ok((size, carrying_dir))
}

/// Where this machine can run a real node: a worker running containerd and the kubelet
/// (`k0s worker --run-components`, the `carrying` binary), idle with its Node Ready for 10 s;
/// prints its own memory (its children not counted) and theirs. Returns its own RSS in KiB,
/// or `None` (saying why) where real nodes cannot run.
async fn run_components_worker(
    cluster: &integration::Cluster,
    carrying: &Path,
) -> anyhow::Result<Option<u64>> {
    let Some((nodes, worker)) = start_run_components_worker(cluster, carrying).await? else {
        return Ok(None);
    };
    // The figure is defined as the memory after this long idle with the Node Ready.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let own = Memory::of(worker.pid())?;
    println!(
        "{:<30} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8}",
        "k0s worker --run-components",
        mib(own.rss_kib),
        mib(own.anon_kib),
        mib(own.file_kib),
        mib(own.peak_kib),
        own.threads
    );
    for (name, pid) in [
        ("  its kubelet", nodes.kubelet_pid(RUN_COMPONENTS_WORKER)?),
        ("  its containerd", nodes.containerd_pid(RUN_COMPONENTS_WORKER)?),
    ] {
        let rss = pid.map(Memory::of).transpose()?.map_or(0, |m| m.rss_kib);
        println!("{name:<30} {:>9.1}   (not counted in the worker's own)", mib(rss));
    }
    drop(worker);
    drop(nodes);
    Ok(Some(own.rss_kib))
}

/// [`RUN_COMPONENTS_WORKER`] (declared by [`start_idle`]) as a real node running `k0s worker
/// --run-components` from `binary` (one carrying the worker's components, or a wrapper that
/// runs one), its Node Ready; `None` (saying why) where this machine cannot run real nodes.
pub(crate) async fn start_run_components_worker(
    cluster: &integration::Cluster,
    binary: &Path,
) -> anyhow::Result<Option<(integration::real_node::RealNodes, integration::K0sProcess)>> {
    use integration::real_node::{RealNodes, prerequisites};
    if let Err(missing) = prerequisites() {
        println!("    k0s worker --run-components: not run (real nodes cannot run: {missing})");
        return Ok(None);
    }
    println!(
        "==> starting a worker that runs containerd and the kubelet ({RUN_COMPONENTS_WORKER})"
    );
    let nodes = RealNodes::start_for_k0s(cluster, &[RUN_COMPONENTS_WORKER]).await?;
    let command = cluster.k0s_worker_on_kubelet(RUN_COMPONENTS_WORKER).binary(binary);
    let worker = nodes.k0s_worker(command)?.spawn().await?;
    nodes.wait_k0s_node(cluster, &worker).await?;
    Ok(Some((nodes, worker)))
}

/// A process's resident memory by mapping, from `/proc/<pid>/smaps`: its executable's
/// executable text, the rest of the binary (read-only data, relocations, and its writable
/// data once copied), shared libraries, and anonymous memory (heap, stacks).
#[derive(Default)]
struct Mapped {
    text_kib: u64,
    data_kib: u64,
    libs_kib: u64,
    anon_kib: u64,
}

impl Mapped {
    fn of(pid: u32) -> anyhow::Result<Self> {
        // The cluster may run a copy of the binary it was given: the executable is what
        // counts.
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| format!("reading /proc/{pid}/exe"))?;
        let binary = exe.to_string_lossy();
        let path = format!("/proc/{pid}/smaps");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let mut mapped = Self::default();
        let mut current: Option<&mut u64> = None;
        for line in text.lines() {
            if let Some(kib) = line.strip_prefix("Rss:") {
                let kib: u64 = kib
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .with_context(|| format!("{path}: cannot read the Rss line {line:?}"))?;
                if let Some(slot) = current.take() {
                    *slot += kib;
                }
                continue;
            }
            // A mapping's header: `start-end perms offset dev inode [path]`.
            let fields: Vec<&str> = line.split_whitespace().collect();
            let is_header = fields.first().is_some_and(|range| {
                range.contains('-') && range.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
            });
            if !is_header || fields.len() < 5 {
                continue;
            }
            let (perms, inode, name) = (fields[1], fields[4], fields.get(5).copied());
            current = Some(match name {
                Some(name) if name == &*binary && perms.contains('x') => &mut mapped.text_kib,
                Some(name) if name == &*binary => &mut mapped.data_kib,
                Some(_) if inode != "0" => &mut mapped.libs_kib,
                _ => &mut mapped.anon_kib,
            });
        }
        Ok(mapped)
    }
}

/// The read-ahead window, in KiB, of the block device holding `file` (`None` when the file is
/// not on a block device, for example on tmpfs or overlayfs).
fn read_ahead_kib(file: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(file).ok()?.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let device = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition's queue is its disk's.
    ["queue/read_ahead_kb", "../queue/read_ahead_kb"]
        .iter()
        .find_map(|rel| std::fs::read_to_string(device.join(rel)).ok())
        .and_then(|kib| kib.trim().parse().ok())
}

/// The idle deployment `bench footprint` measures and `hot-functions` profiles: etcd, 2 API
/// servers, 2 controllers (one leads) and 1 worker, all running `k0s` with default flags.
pub(crate) struct Idle {
    pub cluster: integration::Cluster,
    pub controllers: [integration::K0sProcess; 2],
    pub worker: integration::K0sProcess,
    /// Which of `controllers` leads.
    pub leader: usize,
}

/// Starts [`Idle`], waits for a leader and the worker's Node, then lets it idle for `settle`.
pub(crate) async fn start_idle(k0s: &Path, settle: Duration) -> anyhow::Result<Idle> {
    println!("==> starting etcd and 2 kube-apiservers");
    let cluster = ClusterBuilder::new("bench-footprint")
        .k0s_binary(k0s)
        .controllers(2)
        .workers(&["worker-0", RUN_COMPONENTS_WORKER])
        .build()
        .await?;
    let client = cluster.admin_client().await?;
    println!("==> starting 2 controllers and 1 worker ({k0s})", k0s = k0s.display());
    let controllers =
        [cluster.spawn_controller(0, &[]).await?, cluster.spawn_controller(1, &[]).await?];
    let worker = cluster.spawn_worker("worker-0", &[]).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let holder = wait_for(Duration::from_secs(180), "an autopilot leader", || async {
        let lease = leases.get_opt(keys::LEASE_NAME).await?;
        Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).filter(|h| !h.is_empty()))
    })
    .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(Duration::from_secs(180), "worker-0 registered", || async {
        Ok(nodes.get_opt("worker-0").await?.map(|_| ()))
    })
    .await?;
    let leader = usize::from(!holder.starts_with("controller-0_"));
    println!("    leader: controller-{leader}; idling for {}", humantime(settle));
    // The figure is defined as the memory after this long idle; nothing to wait for.
    tokio::time::sleep(settle).await;
    Ok(Idle { cluster, controllers, worker, leader })
}

/// A process's memory as `/proc/<pid>/status` reports it.
struct Memory {
    rss_kib: u64,
    anon_kib: u64,
    file_kib: u64,
    peak_kib: u64,
    threads: u64,
}

impl Memory {
    fn of(pid: u32) -> anyhow::Result<Self> {
        anyhow::ensure!(pid != 0, "the process is not running");
        let path = format!("/proc/{pid}/status");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let field = |name: &str| -> anyhow::Result<u64> {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|value| value.split_whitespace().next()?.parse().ok())
                .with_context(|| format!("{path} has no {name}"))
        };
        Ok(Self {
            rss_kib: field("VmRSS")?,
            anon_kib: field("RssAnon")?,
            file_kib: field("RssFile")?,
            peak_kib: field("VmHWM")?,
            threads: field("Threads")?,
        })
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn humantime(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64())
}

/// A Ready worker Node, created through the admin client (no kubelet, no worker process: the
/// responder plays the node agent).
async fn register_ready_node(nodes: &Api<Node>, name: &str) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": { keys::ANNOTATION_K0S_VERSION: BENCH_FROM_VERSION },
            "labels": {
                keys::LABEL_HOSTNAME: name,
                keys::LABEL_OS: autopilot_api::platform::os(),
                keys::LABEL_ARCH: autopilot_api::platform::arch(),
            },
        },
    }))?;
    nodes
        .create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("creating {name}"))?;
    let status = json!({
        "status": { "conditions": [{
            "type": "Ready", "status": "True", "reason": "Bench",
            "lastHeartbeatTime": jiff::Timestamp::now().to_string(),
            "lastTransitionTime": jiff::Timestamp::now().to_string(),
        }]},
    });
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("marking {name} Ready"))?;
    Ok(())
}

fn plan_object(run: usize, workers: &[String], concurrent: u32) -> Plan {
    let platform = autopilot_api::platform::current();
    serde_json::from_value(json!({
        "apiVersion": keys::API_VERSION,
        "kind": "Plan",
        "metadata": { "name": keys::PLAN_NAME },
        "spec": {
            "id": format!("bench-{run}"),
            "timestamp": "now",
            "commands": [{
                "k0supdate": {
                    "version": "v1.35.9+k0s.0",
                    // Never downloaded (simulated nodes), but a plain-http payload needs
                    // a digest or the controller refuses the plan.
                    "platforms": { platform: {
                        "url": "http://127.0.0.1:9/k0s",
                        "sha256": "0".repeat(64),
                    } },
                    "targets": {
                        "controllers": { "discovery": { "static": {
                            "nodes": ["controller-0", "controller-1", "controller-2"] } } },
                        "workers": {
                            "discovery": { "static": { "nodes": workers } },
                            "limits": { "concurrent": concurrent },
                        },
                    },
                },
            }],
        },
    }))
    .expect("the bench plan literal is a valid Plan")
}

/// Requests by `user` received within `[from, to]`, by verb and resource (`get nodes`,
/// `update plans/status`), from the audit log.
fn count_requests(
    audit_log: &Path,
    user: &str,
    from: jiff::Timestamp,
    to: jiff::Timestamp,
) -> anyhow::Result<BTreeMap<String, usize>> {
    let text = std::fs::read_to_string(audit_log)
        .with_context(|| format!("reading {}", audit_log.display()))?;
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if event["user"]["username"].as_str() != Some(user) {
            continue;
        }
        let Some(received) = event["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        else {
            continue;
        };
        if received < from || received > to {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or("?");
        let object = &event["objectRef"];
        let mut resource = object["resource"].as_str().unwrap_or("?").to_owned();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        *counts.entry(format!("{verb} {resource}")).or_insert(0) += 1;
    }
    Ok(counts)
}
