//! The controller side of autopilot.
//!
//! Every `k0s controller --enable-autopilot` process runs the [`Controller`] component: it
//! installs the autopilot CRDs, registers its own `ControlNode`, and joins leader election
//! on the `k0s-autopilot/k0s-autopilot-controller` Lease. Only the elected leader drives
//! Plans.
//!
//! This crate is not the node agent (that is `autopilot-signal`) and does not parse the
//! command line of the whole binary (that is `k0s`). Start with [`Args`] and [`Controller`].

pub mod control_node;
pub mod crds;
pub mod drain;
pub mod effect;
pub mod gates;
pub mod handoff;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod prometheus;
pub mod reconcile;

use std::net::SocketAddr;
use std::time::Duration;

use autopilot_engine::plan;
use autopilot_shell::leadership::{Elector, Leadership};
use autopilot_shell::lifecycle::{Component, Env, Exit, Purpose, Running};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Node kinds an operator may exclude from plans with `--exclude-from-plans`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeKind {
    /// Control-plane nodes, signalled through their `ControlNode`.
    Controller,
    /// Pure worker nodes, signalled through their `Node`.
    Worker,
}

/// Command-line arguments of `k0s controller`.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Run the controller-side autopilot (leader election, Plan engine, ControlNode).
    #[arg(long)]
    pub enable_autopilot: bool,

    /// This controller's API server address; its IP is published as the ControlNode's
    /// InternalIP and probed on `/readyz` before controllers are updated.
    #[arg(long, value_name = "IP:PORT")]
    pub api_address: SocketAddr,

    /// Node kinds that plans must not target; a plan that does ends in `Restricted`.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "controller,worker")]
    pub exclude_from_plans: Vec<NodeKind>,

    /// This controller also runs workloads (controller+worker): it is cordoned and drained
    /// during updates and also takes airgap bundles on its own Node.
    #[arg(long)]
    pub enable_worker: bool,

    /// How long a leader's claim on the lease is valid without renewal (whole seconds):
    /// after the leader is killed, another controller takes over this long after it saw the
    /// last renewal land, counted on its own clock.
    #[arg(long, default_value = "15s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub lease_duration: Duration,

    /// How long the leader goes on leading when it cannot renew its claim (the API server
    /// unreachable): it steps down this long after it sent its last renewal that got
    /// through, before the claim runs out for the others. Longer than `--retry-period`,
    /// shorter than `--lease-duration`.
    #[arg(long, default_value = "10s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub renew_deadline: Duration,

    /// How often every controller reads the lease and the leader renews its claim, and how
    /// long any controller waits before trying a failed lease operation again.
    #[arg(long, default_value = "2s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub retry_period: Duration,

    /// How long to keep retrying while the API server cannot answer at startup before
    /// giving up with an error; `0s` (the default) keeps retrying for as long as it takes,
    /// so an outage never kills a node. A misconfiguration (TLS trust, credentials) fails at
    /// once either way.
    #[arg(long, default_value = "0s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub startup_timeout: Duration,

    /// How long a plan may wait for a not-ready controller (`/readyz` failing) before it
    /// says it is stalled: it stays held (as k0s since 1.35), its `Stalled` condition turns
    /// True with reason `ControllerNotReady`, and a `PlanStalled` Warning Event goes out.
    #[arg(long, default_value = "10m", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub readiness_grace: Duration,

    /// How long a signalled node (controller or worker) may show no progress (its signal
    /// phase unchanged) before it fails with `no progress in <phase> for <duration>` and the
    /// plan ends `ApplyFailed`. A command's `progressTimeout` overrides it for that command.
    #[arg(long, default_value = "15m", value_parser = positive_duration, value_name = "DURATION")]
    pub node_progress_timeout: Duration,

    /// How long the leader's drain of a node may stay blocked (a PodDisruptionBudget refusing
    /// an eviction) before the node fails, naming the blocking pod and budget, and is
    /// uncordoned (its binary not touched yet).
    #[arg(long, default_value = "10m", value_parser = positive_duration, value_name = "DURATION")]
    pub drain_timeout: Duration,

    /// Accept plans whose payloads no node can verify: a platform entry with neither a
    /// `sha256` nor an `https://` URL. Without this flag such a plan ends in `Warning` before
    /// any node is signalled; with it, it runs and each such entry gets a Warning Event.
    #[arg(long)]
    pub allow_unverified_payloads: bool,

    /// The Prometheus a `prometheus` health gate queries when it names no `url` of its own
    /// (for example `http://prometheus.monitoring:9090`). Unset: such a gate refuses the
    /// plan at NewPlan.
    #[arg(long, value_name = "URL")]
    pub prometheus_url: Option<String>,
}

impl Args {
    /// Check the flags that need no connection (so mistakes fail before any network I/O).
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.enable_autopilot,
            "this build runs only the autopilot part of a controller: pass --enable-autopilot"
        );
        leader::Timings::new(self.lease_duration, self.renew_deadline, self.retry_period)?;
        Ok(())
    }

    /// The plan policy these flags give.
    pub fn policy(&self) -> plan::Policy {
        plan::Policy {
            prometheus_url: self.prometheus_url.clone(),
            exclude_controllers: self.exclude_from_plans.contains(&NodeKind::Controller),
            exclude_workers: self.exclude_from_plans.contains(&NodeKind::Worker),
            readiness_grace: self.readiness_grace,
            readiness_recheck: READINESS_RECHECK,
            node_progress_timeout: self.node_progress_timeout,
            drain_timeout: self.drain_timeout,
            allow_unverified_payloads: self.allow_unverified_payloads,
        }
    }

    /// The flags of a controller started with every optional flag at its default (for
    /// tools that reason about what a controller would do, such as `k0s autopilot
    /// preview`).
    pub fn defaults() -> Self {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            args: Args,
        }
        Only::try_parse_from(["k0s", "--api-address", "127.0.0.1:6443"])
            .expect("every flag but --api-address has a default")
            .args
    }
}

/// The controller component (see `autopilot_shell::lifecycle`): its start installs the CRDs
/// and registers this controller's `ControlNode`; its run takes part in leader election and
/// runs the Plan engine while this controller leads, until stopped (the lease is then
/// released).
pub struct Controller {
    args: Args,
    elector: Elector,
    leadership: Leadership,
    metrics: metrics::Metrics,
}

impl Controller {
    /// The controller of node `node_name`, recording its metrics in `metrics` (registered by
    /// the caller when `--metrics-address` is set; otherwise recorded into the void). Fails
    /// on flags that need no connection to be found wrong.
    pub fn new(args: Args, node_name: &str, metrics: metrics::Metrics) -> anyhow::Result<Self> {
        args.validate()?;
        let (elector, leadership) = Leadership::new(leader::identity(node_name));
        Ok(Self { args, elector, leadership, metrics })
    }

    /// Whether this controller leads, for the components that act only while it does (the
    /// updater) and the status socket.
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }
}

impl Component for Controller {
    fn name(&self) -> &'static str {
        "controller"
    }

    fn in_trial(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>> {
        Box::pin(async move {
            let Self { args, elector, leadership, metrics } = *self;
            let timings =
                leader::Timings::new(args.lease_duration, args.renew_deadline, args.retry_period)?;
            info!(
                node.name = %env.node_name,
                api.address = %args.api_address,
                version = env.version,
                excluded = ?args.exclude_from_plans,
                allow_unverified_payloads = args.allow_unverified_payloads,
                "starting autopilot controller"
            );
            start(&env.client, &env.server_url, &env.node_name, &args, env.version, env.purpose)
                .await?;
            let engine = reconcile::Engine::new(
                env.client.clone(),
                env.config.clone(),
                args.api_address,
                args.policy(),
                &env.node_name,
                metrics.clone(),
            )?;
            Ok(Box::new(Leading {
                client: env.client.clone(),
                engine,
                timings,
                elector,
                leadership,
                is_leader: metrics.is_leader,
            }) as Box<dyn Running>)
        })
    }
}

/// The started controller: the election and the engine it runs while leading.
struct Leading {
    client: kube::Client,
    engine: reconcile::Engine,
    timings: leader::Timings,
    elector: Elector,
    leadership: Leadership,
    is_leader: prometheus_client::metrics::gauge::Gauge,
}

impl Running for Leading {
    fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
        Box::pin(async move {
            let Self { client, engine, timings, elector, leadership, is_leader } = *self;
            let identity = leadership.identity().to_owned();
            // The engine stops with the controller: on `stop`, or when the election fails.
            let engine_stop = stop.child_token();
            let engine_task =
                tokio::spawn(engine.run_while_leader(leadership, engine_stop.clone()));
            let result =
                leader::run(client, identity, timings, elector, is_leader, stop.cancelled_owned())
                    .await;
            // The lease is released; the engine finishes its current pass within what is
            // left of the supervisor's grace period.
            engine_stop.cancel();
            match engine_task.await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    warn!(error = %format!("{err:#}"), "plan engine stopped with an error");
                }
                Err(err) => warn!(error = %err, "plan engine task failed"),
            }
            match result {
                Ok(()) => Exit::Stopped,
                Err(err) => Exit::Failed(err),
            }
        })
    }
}

/// The controller's start, up to healthy: every autopilot CRD applied and `Established`,
/// then this controller's `ControlNode` registered (with its mode, API address and
/// `version`), each within `--startup-timeout` while the API server does not answer. The
/// [`Controller`] component starts with it, in a normal start and in the trial boot of a
/// new binary alike, so a binary passes its trial only if the real start works.
pub async fn start(
    client: &kube::Client,
    server_url: &str,
    node_name: &str,
    args: &Args,
    version: &str,
    purpose: Purpose,
) -> anyhow::Result<()> {
    if purpose == Purpose::Trial {
        // A binary on trial changes nothing the live one could not undo (DESIGN §14): its
        // CRDs are applied as a dry run, and it only reads its ControlNode.
        crds::install(client, server_url, args.startup_timeout, crds::Mode::DryRun).await?;
        let api: kube::Api<autopilot_api::v1beta2::ControlNode> = kube::Api::all(client.clone());
        return autopilot_shell::retry::forever("reading the ControlNode", || async {
            api.get(node_name).await.map(drop).map_err(anyhow::Error::from)
        })
        .await;
    }
    crds::install(client, server_url, args.startup_timeout, crds::Mode::Apply).await?;
    let registration = control_node::Registration {
        name: node_name.to_owned(),
        mode: if args.enable_worker {
            control_node::Mode::ControllerWorker
        } else {
            control_node::Mode::Controller
        },
        api_address: args.api_address,
        version: version.to_owned(),
    };
    autopilot_shell::retry::forever("registering the ControlNode", || {
        control_node::register(client, &registration)
    })
    .await
}

/// A duration flag that must not be zero (a zero deadline would fail every node at once).
fn positive_duration(value: &str) -> Result<Duration, String> {
    let duration = autopilot_api::duration::parse(value)?;
    if duration.is_zero() {
        return Err(format!("{value:?} is zero; give a node some time (e.g. 10m)"));
    }
    Ok(duration)
}

/// How soon the plan engine probes again while a command is held by a not-ready controller.
///
/// Readiness is not an event the API server sends, so this is the one timed re-check of the
/// engine; two seconds keeps a recovered controller from waiting long without hammering a
/// failing one.
const READINESS_RECHECK: Duration = Duration::from_secs(2);
