//! Helpers shared by the scenarios: every scenario's cluster and nodes ([`FleetBuilder`]),
//! building plans, and waiting on plan states with deadlines (printing the plan status when a
//! wait fails).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::signal::{self, SignalData, SignalPhase};
use autopilot_api::v1beta2::{
    Concurrency, ControlNode, Plan, PlanCommand, PlanCommandAirgapUpdate, PlanCommandK0sUpdate,
    PlanCommandRollout, PlanCommandStatus, PlanCommandTarget, PlanCommandTargets, PlanResourceUrl,
    PlanSpec, PlanStateType, TargetState, TargetStatus,
};
use autopilot_api::{fixtures, keys};
use futures::StreamExt as _;
use integration::control_plane::Release;
use integration::responder::{Event, Log, ObjectKind, ObjectRef};
use integration::{
    Cluster, ClusterBuilder, K0sCommand, K0sProcess, conditions, wait_for, wait_for_condition,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};

/// How long nodes get to start and register (apiservers are already up).
pub const STARTUP: Duration = Duration::from_secs(60);

/// How long a plan gets to reach the state a scenario expects.
pub const PLAN_TIMEOUT: Duration = Duration::from_secs(90);

/// Fast election timings, so a failover takes seconds (as in `controller_startup.rs`).
pub const FAST_ELECTION: &[&str] =
    &["--lease-duration", "6s", "--renew-deadline", "4s", "--retry-period", "1s"];

/// The version forced updates go to: the version the fleet's nodes run (the default build's),
/// so a plan of any nodes keeps to the version skew rules. The responder plays the nodes, so
/// nothing else checks it; forcing keeps the removed-API check out of scenarios that are not
/// about it.
pub const FORCED_VERSION: &str = "v1.35.0+k0s.0";

/// A version newer than every API removal the cluster could hit (the control plane serves
/// Kubernetes 1.35, which no longer serves any API in the removed-API table below v99).
pub const PLAIN_VERSION: &str = "v1.35.0+k0s.0";

/// The download URL of `platform` in every plan: never fetched (the responder plays the
/// nodes), but unique per platform so tests can tell which one a node was given.
pub fn url(platform: &str) -> String {
    format!("http://127.0.0.1:9/k0s/{platform}/k0s")
}

/// The sha256 every plan of the responder scenarios names. Nothing is downloaded (the
/// responder plays the nodes), but the controller refuses a plain-http payload without a
/// digest (DESIGN §11), so these plans carry one.
pub const PLACEHOLDER_SHA256: &str =
    "0000000000000000000000000000000000000000000000000000000000000000";

/// `platforms` with only this machine's platform.
pub fn current_platforms() -> BTreeMap<String, PlanResourceUrl> {
    platforms(&[&autopilot_api::platform::current()])
}

/// `platforms` with one entry per name, each with its own [`url`].
pub fn platforms(names: &[&str]) -> BTreeMap<String, PlanResourceUrl> {
    names
        .iter()
        .map(|p| {
            let entry = PlanResourceUrl {
                url: url(p),
                sha256: Some(PLACEHOLDER_SHA256.to_owned()),
                ..Default::default()
            };
            ((*p).to_owned(), entry)
        })
        .collect()
}

/// A target group listing `names`, at most `concurrent` at a time.
pub fn static_nodes(names: &[&str], concurrent: u32) -> PlanCommandTarget {
    let mut target = fixtures::static_target(names);
    target.limits.concurrent = Concurrency::Count(concurrent);
    target
}

/// A target group found by a label and/or field selector.
pub fn selected(labels: Option<&str>, fields: Option<&str>) -> PlanCommandTarget {
    fixtures::selector_target(labels, fields)
}

/// A forced `k0supdate` to [`FORCED_VERSION`] for this machine's platform.
pub fn k0s_update(
    controllers: Option<PlanCommandTarget>,
    workers: Option<PlanCommandTarget>,
) -> PlanCommandK0sUpdate {
    PlanCommandK0sUpdate {
        drain: None,
        drain_options: None,
        version: FORCED_VERSION.to_owned(),
        forceupdate: true,
        platforms: current_platforms(),
        targets: PlanCommandTargets { controllers, workers },
        rollout: PlanCommandRollout::default(),
    }
}

/// A plan command running `update`.
pub fn k0s_command(update: PlanCommandK0sUpdate) -> PlanCommand {
    PlanCommand { k0supdate: Some(update), airgapupdate: None, preflight: None }
}

/// An `airgapupdate` of `workers` to [`PLAIN_VERSION`], bundle URL per this platform.
pub fn airgap_command(workers: PlanCommandTarget) -> PlanCommand {
    let platform = autopilot_api::platform::current();
    PlanCommand {
        k0supdate: None,
        airgapupdate: Some(PlanCommandAirgapUpdate {
            version: PLAIN_VERSION.to_owned(),
            platforms: BTreeMap::from([(
                platform.clone(),
                PlanResourceUrl {
                    url: format!("{}.tar", url(&platform)),
                    sha256: Some(PLACEHOLDER_SHA256.to_owned()),
                    ..Default::default()
                },
            )]),
            workers,
            rollout: PlanCommandRollout::default(),
        }),
        preflight: None,
    }
}

/// A Plan named `name` with spec id `id`.
pub fn plan(name: &str, id: &str, commands: Vec<PlanCommand>) -> Plan {
    Plan::new(
        name,
        PlanSpec {
            download_window: Default::default(),
            window: Default::default(),
            windows: Default::default(),
            id: id.to_owned(),
            timestamp: "now".to_owned(),
            commands,
        },
    )
}

/// Deletes the Plan named `autopilot` and waits until it is gone (to make room for the next
/// case of a scenario).
pub async fn delete_plan(client: &kube::Client) {
    let plans: Api<Plan> = Api::all(client.clone());
    plans
        .delete(autopilot_api::keys::PLAN_NAME, &kube::api::DeleteParams::default())
        .await
        .expect("deleting the plan");
    wait_for(Duration::from_secs(30), "the plan to be deleted", || async {
        Ok(plans.get_opt(autopilot_api::keys::PLAN_NAME).await?.is_none().then_some(()))
    })
    .await
    .expect("the plan is deleted");
}

/// Creates `plan`.
pub async fn create_plan(client: &kube::Client, plan: &Plan) -> anyhow::Result<Plan> {
    let plans: Api<Plan> = Api::all(client.clone());
    plans.create(&PostParams::default(), plan).await.context("creating the plan")
}

/// Installs the CRD `name` (one of `keys::CRD_*`) exactly as committed in
/// `manifests/crds/` and waits until it is served.
pub async fn install_crd(client: &kube::Client, name: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests/crds")
        .join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).expect("the generated CRD");
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).expect("a CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("creating the CRD {name}: {e}"));
    wait_for_condition(
        &crds,
        name,
        Duration::from_secs(30),
        &format!("the CRD {name} to be established"),
        conditions::is_crd_established(),
    )
    .await
    .unwrap_or_else(|e| panic!("the CRD {name} is established: {e}"));
}

/// Writes `plan` as YAML to `file` in the cluster directory and runs `k0s autopilot preview
/// -f` on it with `kubeconfig` (the identity the preview's access checks are made as).
pub async fn preview_plan(
    cluster: &Cluster,
    file: &str,
    plan: &Plan,
    kubeconfig: std::path::PathBuf,
) -> std::process::Output {
    let path = cluster.dir().join(file);
    std::fs::write(&path, serde_saphyr::to_string(plan).expect("YAML")).expect("writing the plan");
    tokio::task::spawn_blocking(move || {
        let path = path.to_string_lossy().into_owned();
        let kubeconfig = kubeconfig.to_string_lossy().into_owned();
        integration::run_k0s(&["autopilot", "preview", "-f", &path, "--kubeconfig", &kubeconfig])
            .expect("k0s runs")
    })
    .await
    .expect("the k0s run")
}

/// The plan's status as YAML, for failure messages.
pub fn status_yaml(plan: &Plan) -> String {
    match &plan.status {
        Some(status) => serde_saphyr::to_string(status).unwrap_or_else(|e| format!("{e}")),
        None => "(no status)".to_owned(),
    }
}

/// The plan-level state (`NewPlan` without a status).
pub fn state(plan: &Plan) -> PlanStateType {
    plan.status.as_ref().map(|s| s.state).unwrap_or_default()
}

/// Watches the plan `name` until `done` holds and returns it. Fails early, with the status,
/// if the plan reaches a terminal state for which `done` is false; on timeout the error
/// carries the last status seen.
pub async fn wait_plan(
    client: &kube::Client,
    name: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Plan) -> bool,
) -> anyhow::Result<Plan> {
    let plans: Api<Plan> = Api::all(client.clone());
    // With a backoff: a restarting API server refuses connections for seconds.
    let watch = watcher::watch_object(plans.clone(), name).default_backoff();
    let mut stream = std::pin::pin!(watch);
    let mut last: Option<Plan> = None;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => break,
            Ok(None) => anyhow::bail!("the watch on plan {name} ended while waiting for {what}"),
            Ok(Some(Err(err))) => eprintln!("watch on plan {name}: {err} (retrying)"),
            Ok(Some(Ok(Some(plan)))) => {
                if done(&plan) {
                    if state(&plan).is_terminal() {
                        // DESIGN §11: a plan that ended leaves no node cordoned by autopilot.
                        wait_no_autopilot_cordons(client, name).await?;
                    }
                    return Ok(plan);
                }
                if state(&plan).is_terminal() {
                    anyhow::bail!(
                        "plan {name} ended in {} while waiting for {what}; status:\n{}",
                        state(&plan),
                        status_yaml(&plan)
                    );
                }
                last = Some(plan);
            }
            Ok(Some(Ok(None))) => last = None,
        }
    }
    let last = match plans.get_opt(name).await {
        Ok(Some(plan)) => status_yaml(&plan),
        Ok(None) => "(plan does not exist)".to_owned(),
        Err(err) => format!(
            "(could not read the plan: {err}; last seen: {})",
            last.as_ref().map_or("none".to_owned(), status_yaml)
        ),
    };
    anyhow::bail!("timed out after {timeout:?} waiting for {what}; plan {name} status:\n{last}")
}

/// How long after a plan ended a node autopilot cordoned may take to be uncordoned (the
/// leader's drain uncordons a node once its signal says `Completed` or `Failed`, which may be
/// written just after the plan's last status).
pub const UNCORDON_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits until no Node carries autopilot's cordon (its cordoned annotation, or
/// `spec.unschedulable` together with it) and fails naming the Nodes that still do after
/// [`UNCORDON_TIMEOUT`]. Called by [`wait_plan`] whenever the plan it returns has ended, so
/// every scenario that ends checks DESIGN §11's invariant.
pub async fn wait_no_autopilot_cordons(client: &kube::Client, plan: &str) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let cordoned = || async {
        let list = nodes.list(&ListParams::default()).await?;
        Ok::<_, anyhow::Error>(
            list.items
                .into_iter()
                .filter(|node| {
                    node.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(keys::ANNOTATION_CORDONED))
                })
                .map(|node| node.metadata.name.unwrap_or_default())
                .collect::<Vec<String>>(),
        )
    };
    let what = format!("plan {plan} ended: no node left cordoned by autopilot");
    let waited = wait_for(UNCORDON_TIMEOUT, &what, || async {
        Ok(cordoned().await?.is_empty().then_some(()))
    })
    .await;
    if waited.is_err() {
        anyhow::bail!(
            "plan {plan} ended but autopilot's cordon is still on {:?} after {UNCORDON_TIMEOUT:?}",
            cordoned().await?
        );
    }
    Ok(())
}

/// Waits until the plan `name` is in `wanted` (failing early on another terminal state).
pub async fn wait_plan_state(
    client: &kube::Client,
    name: &str,
    wanted: PlanStateType,
) -> anyhow::Result<Plan> {
    wait_plan(client, name, PLAN_TIMEOUT, &format!("plan {name} to be {wanted}"), |p| {
        state(p) == wanted
    })
    .await
}

/// Watches the plan `name` for `window` and fails, with the status, the first time `check`
/// returns an error for a version of it.
pub async fn watch_plan_for(
    client: &kube::Client,
    name: &str,
    window: Duration,
    check: impl Fn(&Plan) -> Result<(), String>,
) -> anyhow::Result<Plan> {
    let plans: Api<Plan> = Api::all(client.clone());
    let mut stream = std::pin::pin!(watcher::watch_object(plans.clone(), name));
    let deadline = tokio::time::Instant::now() + window;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => break,
            Ok(None) => anyhow::bail!("the watch on plan {name} ended"),
            Ok(Some(Err(err))) => eprintln!("watch on plan {name}: {err} (retrying)"),
            Ok(Some(Ok(plan))) => {
                let Some(plan) = plan else { anyhow::bail!("plan {name} disappeared") };
                if let Err(problem) = check(&plan) {
                    anyhow::bail!("{problem}; plan {name} status:\n{}", status_yaml(&plan));
                }
                last = Some(plan);
            }
        }
    }
    match last {
        Some(plan) => Ok(plan),
        None => plans.get(name).await.context("reading the plan after the window"),
    }
}

/// Status of command `i`, panicking with the plan status if it has none.
pub fn command(plan: &Plan, i: usize) -> &PlanCommandStatus {
    plan.status
        .as_ref()
        .and_then(|s| s.commands.get(i))
        .unwrap_or_else(|| panic!("plan has no status for command {i}:\n{}", status_yaml(plan)))
}

/// Every target of a command status: k0supdate controllers, then workers, then airgap
/// workers.
pub fn targets(command: &PlanCommandStatus) -> Vec<&TargetStatus> {
    let mut all = Vec::new();
    if let Some(k0s) = &command.k0supdate {
        all.extend(k0s.controllers.iter());
        all.extend(k0s.workers.iter());
    }
    if let Some(airgap) = &command.airgapupdate {
        all.extend(airgap.workers.iter());
    }
    all
}

/// How many targets of any command are in `state` (0 before the plan has a status).
pub fn count_targets(plan: &Plan, state: TargetState) -> usize {
    let commands = plan.status.as_ref().map(|s| s.commands.as_slice()).unwrap_or_default();
    commands.iter().flat_map(targets).filter(|t| t.state == state).count()
}

/// The names of a command's k0supdate controller targets, in status order.
pub fn controller_names(command: &PlanCommandStatus) -> Vec<&str> {
    command.k0supdate.iter().flat_map(|k| &k.controllers).map(|t| t.name.as_str()).collect()
}

/// The names of a command's worker targets (k0supdate or airgap), in status order.
pub fn worker_names(command: &PlanCommandStatus) -> Vec<&str> {
    let k0s = command.k0supdate.iter().flat_map(|k| &k.workers);
    let airgap = command.airgapupdate.iter().flat_map(|a| &a.workers);
    k0s.chain(airgap).map(|t| t.name.as_str()).collect()
}

/// The target `name` of command `i`, panicking with the plan status if absent.
pub fn target<'a>(plan: &'a Plan, i: usize, name: &str) -> &'a TargetStatus {
    targets(command(plan, i))
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("command {i} has no target {name}:\n{}", status_yaml(plan)))
}

/// The flag that keeps a node's real update agent off (the responder answers instead).
pub const NO_AGENT: &str = "--disable-update-agent";

/// Debian's libfaketime (package `faketime`), for `LD_PRELOAD`: a process started with it and
/// `FAKETIME=+3h` (or `-1h`) reads a wall clock that far off.
pub fn libfaketime() -> std::path::PathBuf {
    let found = ["x86_64-linux-gnu", "aarch64-linux-gnu"]
        .iter()
        .map(|triple| {
            std::path::PathBuf::from(format!("/usr/lib/{triple}/faketime/libfaketime.so.1"))
        })
        .find(|path| path.is_file());
    found.expect("libfaketime (Debian package faketime; .ci/run installs it)")
}

/// The flags of a controller that is also a real worker ([`FleetBuilder::real_controllers`]):
/// a kubelet owns its Node, so the controller runs the worker's agent without registering
/// the Node itself.
/// Whether the nodes of a [`Fleet`] run their real update agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agents {
    /// Real updates: every node's update agent is on (a node whose flags include
    /// [`NO_AGENT`] keeps its own off).
    Real,
    /// Every node runs with [`NO_AGENT`] (after its other flags) and the test's responder
    /// plays the agents, so that only one peer answers each signal.
    None,
}

/// The prologue every scenario shares, started: a cluster (with its real nodes, if any), an
/// admin client, its controllers (each ControlNode registered, a leader elected), then its
/// workers (each Node Ready).
///
/// `FleetBuilder::new(name).controllers(3).workers(&W).agents(Agents::Real)
/// .controller_args(FAST_ELECTION).start()` does, in this order,
/// `ClusterBuilder::new(name).controllers(3).workers(&W).build()`, `cluster.admin_client()`,
/// `cluster.spawn_controller(i, FAST_ELECTION)` for each `i`, [`wait_controllers_ready`]`(3)`,
/// `cluster.spawn_worker(w, &[])` for each `w` and [`wait_nodes_ready`]`(&W)`. A scenario that
/// starts some nodes itself (with arguments that depend on the cluster, through unit files, or
/// because their start is what it tests) leaves them unstarted
/// ([`FleetBuilder::unstarted_controllers`], [`FleetBuilder::unstarted_workers`]) and starts
/// them in the test.
///
/// Bind every field when destructuring (`controllers: _controllers`, not `..` or `_`): a
/// field left in the temporary is dropped at the end of the `let`, and dropping a
/// [`K0sProcess`] or the [`Cluster`] kills the processes.
pub struct Fleet {
    /// The cluster (etcd and the API servers), and its real nodes
    /// ([`FleetBuilder::real_workers`], [`FleetBuilder::real_controllers`];
    /// [`Cluster::real_nodes`]).
    pub cluster: Cluster,
    /// An admin client of API server 0.
    pub client: kube::Client,
    /// The controllers started, `controller-<i>` at index `i` (empty when unstarted).
    pub controllers: Vec<K0sProcess>,
    /// The workers started, in the order named (empty without workers or when unstarted).
    pub workers: Vec<K0sProcess>,
}

/// Configures a [`Fleet`]; nothing starts before [`FleetBuilder::start`].
#[derive(Debug, Clone)]
#[must_use = "a FleetBuilder starts nothing until `start`"]
pub struct FleetBuilder {
    name: String,
    controllers: usize,
    workers: Vec<String>,
    agents: Agents,
    /// How the controllers start.
    controller: Role,
    /// How the workers start.
    worker: Role,
    /// Extra flags of single nodes, by node name.
    node_args: BTreeMap<String, Vec<String>>,
    /// `manifests/rbac/worker.yaml` is not applied ([`FleetBuilder::without_worker_rbac`]).
    without_worker_rbac: bool,
    /// The Kubernetes release the nodes that run their components start on
    /// ([`FleetBuilder::kubernetes`]).
    kubernetes: Release,
}

/// How the nodes of one role (the controllers or the workers) start.
#[derive(Debug, Clone, Default)]
struct Role {
    /// Extra flags for each, before its own ([`FleetBuilder::node_args`]).
    args: Vec<String>,
    /// Environment variables for each.
    env: Vec<(String, OsString)>,
    /// Each serves its metrics on a loopback port of its own.
    metrics: bool,
    /// Each is a real node ([`Cluster::start_real_nodes`]).
    real: bool,
    /// With `real`: `k0s worker --run-components` runs each one's containerd and kubelet
    /// ([`integration::real_node::RealNodes::k0s_worker`]), not the harness.
    run_by_k0s: bool,
    /// The test starts them, not [`FleetBuilder::start`].
    unstarted: bool,
}

impl FleetBuilder {
    /// A fleet for the test `name`: one controller, no workers, agents off ([`Agents::None`]),
    /// no extra flags, no real nodes, every node started.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            controllers: 1,
            workers: Vec::new(),
            agents: Agents::None,
            controller: Role::default(),
            worker: Role::default(),
            node_args: BTreeMap::new(),
            without_worker_rbac: false,
            kubernetes: integration::control_plane::CURRENT,
        }
    }

    /// The Kubernetes release that the nodes running their components (real workers and
    /// controllers, a control plane `k0s` runs) start on (default
    /// [`integration::control_plane::CURRENT`]). Another release starts them from a build
    /// named as k0s names releases, `<kubernetes>+k0s.0` ([`k0s_version_carrying`]),
    /// carrying that release's components.
    pub fn kubernetes(mut self, release: Release) -> Self {
        self.kubernetes = release;
        self
    }

    /// The cluster is built without `manifests/rbac/worker.yaml` (an installation that
    /// forgot it): the workers may not read the Plan ([`ClusterBuilder::without_rbac`]).
    pub fn without_worker_rbac(mut self) -> Self {
        self.without_worker_rbac = true;
        self
    }

    /// How many controllers (API servers) the cluster has and the fleet starts (default 1).
    pub fn controllers(mut self, count: usize) -> Self {
        self.controllers = count;
        self
    }

    /// The workers the cluster has and the fleet starts, in this order (default none).
    pub fn workers(mut self, names: &[&str]) -> Self {
        self.workers = names.iter().map(|name| (*name).to_owned()).collect();
        self
    }

    /// Whether the nodes run their real update agents (default [`Agents::None`]).
    pub fn agents(mut self, agents: Agents) -> Self {
        self.agents = agents;
        self
    }

    /// Extra flags for every controller (e.g. [`FAST_ELECTION`]), before its own
    /// ([`FleetBuilder::node_args`]) and [`NO_AGENT`].
    pub fn controller_args(mut self, args: &[&str]) -> Self {
        self.controller.args.extend(args.iter().map(|arg| (*arg).to_owned()));
        self
    }

    /// Extra flags for every worker, before its own ([`FleetBuilder::node_args`]) and
    /// [`NO_AGENT`].
    pub fn worker_args(mut self, args: &[&str]) -> Self {
        self.worker.args.extend(args.iter().map(|arg| (*arg).to_owned()));
        self
    }

    /// Extra flags for the node `name` alone (`controller-<i>` or a worker), after its
    /// role's flags and before [`NO_AGENT`]; e.g. [`NO_AGENT`] itself for one worker whose
    /// agent stays off among real ones. `start` fails if the fleet has no node `name`.
    pub fn node_args(mut self, name: &str, args: &[&str]) -> Self {
        let own = self.node_args.entry(name.to_owned()).or_default();
        own.extend(args.iter().map(|arg| (*arg).to_owned()));
        self
    }

    /// An environment variable for every controller (also on every restart).
    pub fn controller_env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.controller.env.push((key.to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Every controller serves its metrics on a loopback port of its own
    /// ([`K0sCommand::with_metrics`]; [`K0sProcess::metrics_address`] says where).
    pub fn controller_metrics(mut self) -> Self {
        self.controller.metrics = true;
        self
    }

    /// Every worker serves its metrics on a loopback port of its own
    /// ([`K0sCommand::with_metrics`]; [`K0sProcess::metrics_address`] says where).
    pub fn worker_metrics(mut self) -> Self {
        self.worker.metrics = true;
        self
    }

    /// Every worker is a real node whose containerd and kubelet `k0s worker --run-components`
    /// runs (DESIGN §16): `start` prepares the nodes (and starts the cluster's
    /// controller-manager and scheduler, [`Cluster::start_real_nodes_mixed`]), then starts each
    /// worker with the pinned worker components packed onto its binary
    /// ([`integration::components`]), inside the nodes' network namespace, and waits for its
    /// Node Ready (the kubelet registers it). The test file servers are reachable there.
    pub fn real_workers(mut self) -> Self {
        self.worker.real = true;
        self.worker.run_by_k0s = true;
        self
    }

    /// Every worker is a real node whose containerd and kubelet the harness runs, with `k0s
    /// worker` beside them running the autopilot alone (an installation without
    /// `--run-components`, where something else runs the kubelet;
    /// [`Cluster::k0s_worker_on_kubelet`]: the kubelet registers the Node).
    pub fn real_workers_beside_agents(mut self) -> Self {
        self.worker.real = true;
        self.worker.run_by_k0s = false;
        self
    }

    /// Every controller is also a real worker, as a k0s controller+worker: the controllers
    /// get node identities ([`ClusterBuilder::controller_node_identities`]), `start` prepares
    /// the real nodes first, then runs each `k0s controller --run-components --enable-worker`
    /// in the nodes' namespace ([`integration::real_node::RealNodes::k0s_controller_worker`]):
    /// it runs its API server, controller-manager and scheduler, and its node's containerd
    /// and kubelet (which registers the Node), from the build carrying them all.
    pub fn real_controllers(mut self) -> Self {
        self.controller.real = true;
        self
    }

    /// `start` builds the controllers' API servers and identities but starts no `k0s
    /// controller` (and waits for none): the test starts them itself (through
    /// [`Cluster::k0s_controller`], [`Cluster::k0s_node`] or [`Cluster::spawn_controller`]), or
    /// uses the cluster without them.
    pub fn unstarted_controllers(mut self) -> Self {
        self.controller.unstarted = true;
        self
    }

    /// `start` declares the workers (their identities and kubeconfigs) but starts no `k0s
    /// worker` (and waits for none): the test starts them itself, or uses the cluster without
    /// them.
    pub fn unstarted_workers(mut self) -> Self {
        self.worker.unstarted = true;
        self
    }

    /// Builds the cluster and an admin client, then starts its real nodes (if any), then the
    /// controllers and waits for them ([`wait_controllers_ready`]), then the workers and waits
    /// for them ([`wait_nodes_ready`]); unstarted roles are skipped.
    pub async fn start(self) -> anyhow::Result<Fleet> {
        let Self {
            name,
            controllers: count,
            workers: names,
            agents,
            controller,
            worker,
            node_args,
            without_worker_rbac,
            kubernetes,
        } = self;
        let controller_names: Vec<String> = (0..count).map(|i| format!("controller-{i}")).collect();
        let unknown =
            node_args.keys().find(|n| !controller_names.contains(n) && !names.contains(n));
        anyhow::ensure!(unknown.is_none(), "node_args for {unknown:?}, not a node of the fleet");
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // Workers that run their components get controllers that run theirs too: `k0s
        // controller --run-components` runs each API server, controller-manager and scheduler
        // (a controller the test starts keeps the harness's). Real controllers run theirs,
        // and their node's, in the nodes' namespace.
        let k0s_control_plane =
            !controller.unstarted && (controller.real || (worker.real && worker.run_by_k0s));
        let mut builder = ClusterBuilder::new(name).controllers(count).workers(&names);
        if controller.real {
            builder = builder.controller_node_identities();
        }
        if without_worker_rbac {
            builder = builder.without_rbac("worker.yaml");
        }
        // What nodes that run their components start from: the build carrying them.
        let carrying = if k0s_control_plane || (worker.real && worker.run_by_k0s) {
            Some(tokio::task::spawn_blocking(move || carrying_build(kubernetes)).await??)
        } else {
            None
        };
        if k0s_control_plane && let Some(carrying) = &carrying {
            builder = builder.control_plane_run_by_k0s().k0s_binary(carrying);
        }
        let mut cluster = builder.build().await?;
        let client = cluster.admin_client().await?;
        let own = |name: &str| node_args.get(name).map(Vec::as_slice).unwrap_or_default();
        let (harness, by_k0s) = real_nodes_of(&controller, &worker, &controller_names, &names);
        // Real controllers live in the nodes' namespace: it comes first.
        let start_nodes = !harness.is_empty() || !by_k0s.is_empty();
        if start_nodes && controller.real {
            cluster.start_real_nodes_mixed(&harness, &by_k0s).await?;
        }
        let mut controllers = Vec::new();
        if k0s_control_plane {
            controllers = controller
                .start_k0s_controllers(&cluster, &controller_names, &node_args, agents)
                .await?;
        }
        if start_nodes && !controller.real {
            cluster.start_real_nodes_mixed(&harness, &by_k0s).await?;
        }
        if k0s_control_plane {
            wait_controllers_ready(&client, count).await?;
        } else if !controller.unstarted {
            for (i, name) in controller_names.iter().enumerate() {
                let command = controller.command(cluster.k0s_controller(i), own(name), &[], agents);
                controllers.push(command?.spawn().await?);
            }
            wait_controllers_ready(&client, count).await?;
        }
        let mut workers = Vec::new();
        if !worker.unstarted {
            for name in &names {
                let spawned = worker
                    .start_worker(&cluster, name, own(name), agents, carrying.as_deref())
                    .await?;
                workers.push(spawned);
            }
            wait_nodes_ready(&client, &names).await?;
        }
        Ok(Fleet { cluster, client, controllers, workers })
    }
}

/// A fleet's real nodes: those whose containerd and kubelet the harness runs (beside an
/// agent alone, or a controller+worker's), and those `k0s` runs.
fn real_nodes_of<'a>(
    controller: &Role,
    worker: &Role,
    controllers: &'a [String],
    workers: &[&'a str],
) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut harness: Vec<&str> = Vec::new();
    let mut by_k0s: Vec<&str> = Vec::new();
    if controller.real {
        by_k0s.extend(controllers.iter().map(String::as_str));
    }
    if worker.real {
        if worker.run_by_k0s { &mut by_k0s } else { &mut harness }.extend(workers);
    }
    (harness, by_k0s)
}

impl Role {
    /// Starts the controllers `names` of a cluster whose control plane `k0s` runs, each with
    /// its own flags from `node_args`; real ones as controller+workers in the nodes'
    /// namespace, waiting for their Nodes too.
    async fn start_k0s_controllers(
        &self,
        cluster: &Cluster,
        names: &[String],
        node_args: &BTreeMap<String, Vec<String>>,
        agents: Agents,
    ) -> anyhow::Result<Vec<K0sProcess>> {
        let nodes = cluster.real_nodes().filter(|_| self.real);
        let commands = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut base = cluster.k0s_controller_running_components(i)?;
                if let Some(nodes) = nodes {
                    base = nodes.k0s_controller_worker(cluster, base)?;
                }
                let own = node_args.get(name).map(Vec::as_slice).unwrap_or_default();
                self.command(base, own, &[], agents)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let controllers = cluster.start_k0s_control_plane_with(commands).await?;
        if let Some(nodes) = nodes {
            for started in &controllers {
                nodes.wait_k0s_node(cluster, started).await?;
            }
        }
        Ok(controllers)
    }

    /// Starts worker `name` of this role: a real node run by k0s (from `carrying`), one
    /// beside a kubelet the harness runs, or a process registering its Node.
    async fn start_worker(
        &self,
        cluster: &Cluster,
        name: &str,
        own: &[String],
        agents: Agents,
        carrying: Option<&std::path::Path>,
    ) -> anyhow::Result<K0sProcess> {
        let command = match (carrying, cluster.real_nodes()) {
            (Some(carrying), Some(nodes)) if self.real => {
                nodes.k0s_worker(cluster.k0s_worker_on_kubelet(name).binary(carrying))?
            }
            _ if self.real => cluster.k0s_worker_on_kubelet(name),
            _ => cluster.k0s_worker(name),
        };
        let spawned = self.command(command, own, &[], agents)?.spawn().await?;
        if let (Some(_), Some(nodes)) = (carrying, cluster.real_nodes()) {
            // Its metrics, served inside the nodes' namespace, scraped from here.
            if let Some(metrics) = spawned.metrics_address() {
                nodes.forward_out_of_namespace(metrics)?;
            }
            nodes.wait_k0s_node(cluster, &spawned).await?;
        }
        Ok(spawned)
    }
}

impl Role {
    /// The harness's command for a node of this role (`base`) with, in this order, the
    /// role's flags, the node's own (`own`), `extra` (a real controller's flags), [`NO_AGENT`]
    /// (without agents), the role's environment and a metrics address.
    fn command(
        &self,
        base: K0sCommand,
        own: &[String],
        extra: &[&str],
        agents: Agents,
    ) -> anyhow::Result<K0sCommand> {
        let Self { args, env, metrics, real: _, run_by_k0s: _, unstarted: _ } = self;
        let mut command = base.args(args).args(own).args(extra);
        if agents == Agents::None {
            command = command.arg(NO_AGENT);
        }
        for (key, value) in env {
            command = command.env(key, value);
        }
        if *metrics {
            command = command.with_metrics()?;
        }
        Ok(command)
    }
}

/// Waits until `count` ControlNodes are registered (each with a status naming its version)
/// and a leader holds the lease.
pub async fn wait_controllers_ready(client: &kube::Client, count: usize) -> anyhow::Result<()> {
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    wait_for(STARTUP, &format!("{count} registered ControlNodes"), || async {
        let list = control_nodes.list(&ListParams::default()).await?;
        let registered = list
            .items
            .iter()
            .filter(|n| n.status.as_ref().is_some_and(|s| s.k0s_version.is_some()))
            .count();
        Ok((registered >= count).then_some(()))
    })
    .await?;
    wait_for(STARTUP, "a leader", || leader(client)).await?;
    Ok(())
}

/// Waits until each named Node exists and is Ready.
pub async fn wait_nodes_ready(client: &kube::Client, names: &[&str]) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for name in names {
        wait_for(STARTUP, &format!("Node {name} Ready"), || async {
            Ok(nodes.get_opt(name).await?.filter(is_ready).map(|_| ()))
        })
        .await?;
    }
    Ok(())
}

/// Whether a Node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The index of the controller holding the leader lease, if any.
pub async fn leader(client: &kube::Client) -> anyhow::Result<Option<usize>> {
    Ok(leader_identity(client).await?.and_then(|holder| {
        let (name, _) = holder.split_once('_')?;
        name.strip_prefix("controller-")?.parse().ok()
    }))
}

/// The identity holding the leader lease, if any.
pub async fn leader_identity(client: &kube::Client) -> anyhow::Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let lease = leases.get_opt(keys::LEASE_NAME).await?;
    Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).filter(|h| !h.is_empty()))
}

/// Every Node and ControlNode that carries signal annotations, as `Kind/name`.
pub async fn objects_with_signals(client: &kube::Client) -> anyhow::Result<BTreeSet<String>> {
    let mut found = BTreeSet::new();
    let nodes: Api<Node> = Api::all(client.clone());
    for node in nodes.list(&ListParams::default()).await? {
        if has_signal(&node.metadata) {
            found.insert(format!("Node/{}", node.metadata.name.unwrap_or_default()));
        }
    }
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    for node in control_nodes.list(&ListParams::default()).await? {
        if has_signal(&node.metadata) {
            found.insert(format!("ControlNode/{}", node.metadata.name.unwrap_or_default()));
        }
    }
    Ok(found)
}

fn has_signal(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations.as_ref().is_some_and(|a| {
        a.contains_key(keys::ANNOTATION_SIGNAL_VERSION)
            || a.contains_key(keys::ANNOTATION_SIGNAL_DATA)
    })
}

/// The signal currently on the ControlNode `name`.
pub async fn control_node_signal(
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<Option<SignalData>> {
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    let node = control_nodes.get(name).await?;
    Ok(signal::from_meta(&node.metadata)?)
}

/// The signal currently on the Node `name`.
pub async fn node_signal(client: &kube::Client, name: &str) -> anyhow::Result<Option<SignalData>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(name).await?;
    Ok(signal::from_meta(&node.metadata)?)
}

/// The objects in the order they were admitted, where signals admitted together (no
/// terminal write or ended signal between them, as when one pass fills several free slots)
/// are sorted by name: the engine picks targets in name order but may write one pass's
/// signals in any order.
pub fn admission_order(log: &Log, kind: Option<ObjectKind>) -> Vec<ObjectRef> {
    let mut order = Vec::new();
    let mut batch: Vec<ObjectRef> = Vec::new();
    for o in log.entries().iter().filter(|o| kind.is_none_or(|k| o.object.kind == k)) {
        match &o.event {
            Event::Signalled { .. } => batch.push(o.object.clone()),
            Event::Wrote { phase, .. } if !phase.is_terminal() => {}
            Event::Wrote { .. } | Event::Ended { .. } | Event::Saw { .. } => {
                batch.sort();
                order.append(&mut batch);
            }
        }
    }
    batch.sort();
    order.append(&mut batch);
    order
}

// --- Real updates by the real node agents (`update_*` scenarios) ---

/// What `k0s version` prints for the binary at `path` (trimmed).
pub fn binary_version(path: &std::path::Path) -> String {
    let out = integration::run_k0s_binary(path, &["version"], Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("running {} version: {e:#}", path.display()));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The files an update may leave behind for a node whose binary is `binary`: anything in
/// the binary's directory besides the binary, `k0s.prev`, the data dir and the log (the
/// staged `k0s.tmp`, download temp files `.k0s.tmp.<random>.tmp`, `k0s.prev.new`), and
/// temp files (`*.tmp`) at the top of the data dir (`.autopilot-restart.<random>.tmp`).
pub fn update_leftovers(binary: &std::path::Path, data_dir: &std::path::Path) -> Vec<String> {
    let dir = binary.parent().expect("the binary is in a directory");
    let name = binary.file_name().expect("the binary has a name").to_string_lossy();
    let expected: BTreeSet<String> = [
        name.to_string(),
        format!("{name}.prev"),
        data_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        "k0s.log".to_owned(),
    ]
    .into();
    let list = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    let mut leftovers: Vec<String> = list(dir)
        .into_iter()
        .filter(|n| !expected.contains(n))
        .map(|n| dir.join(n).display().to_string())
        .collect();
    leftovers.extend(
        list(data_dir)
            .into_iter()
            .filter(|n| n.ends_with(".tmp"))
            .map(|n| data_dir.join(n).display().to_string()),
    );
    leftovers.sort();
    leftovers
}

/// Waits until the Node `name` publishes `version` in its k0s-version annotation.
pub async fn wait_node_version(
    client: &kube::Client,
    name: &str,
    version: &str,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(STARTUP, &format!("Node {name} to publish k0s version {version}"), || async {
        let node = nodes.get(name).await?;
        let annotations = node.metadata.annotations.unwrap_or_default();
        Ok(annotations.get(keys::ANNOTATION_K0S_VERSION).filter(|v| *v == version).map(|_| ()))
    })
    .await
}

/// Whether the Node `name` is cordoned (`spec.unschedulable`), and whether autopilot says it
/// did that (its cordoned annotation).
pub async fn node_cordon(client: &kube::Client, name: &str) -> anyhow::Result<(bool, bool)> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(name).await?;
    let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    let marked =
        node.metadata.annotations.is_some_and(|a| a.contains_key(keys::ANNOTATION_CORDONED));
    Ok((unschedulable, marked))
}

/// The version the update scenarios go to: a second build of this workspace
/// ([`integration::k0s_binary_with_version`]).
pub const V2: &str = "v1.35.1+k0s.0";

/// Every phase a node passes through in a normal k0s update, in order (`None`: signalled,
/// not answered yet).
pub const UPDATE_PHASES: [Option<SignalPhase>; 7] = [
    None,
    Some(SignalPhase::Downloading),
    Some(SignalPhase::Cordoning),
    Some(SignalPhase::ApplyingUpdate),
    Some(SignalPhase::Restarting),
    Some(SignalPhase::Uncordoning),
    Some(SignalPhase::Completed),
];

/// The [`V2`] build: its bytes and their sha256 (built on first use).
pub fn v2_build() -> (Vec<u8>, String) {
    let path = integration::k0s_binary_with_version(V2).expect("the v2 build");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let sha = sha256_hex(&bytes);
    (bytes, sha)
}

/// The k0s version of a build carrying Kubernetes `release`, as k0s names its releases
/// (`v1.34.4+k0s.0` carries Kubernetes v1.34.4).
pub fn k0s_version_carrying(release: Release) -> String {
    format!("{}+k0s.0", release.kubernetes)
}

/// The build a fleet's nodes that run their components start from: this workspace's build
/// carrying every component of `release` (for another release than the current one, a build
/// named [`k0s_version_carrying`] it).
fn carrying_build(release: Release) -> anyhow::Result<std::path::PathBuf> {
    let bare = if release == integration::control_plane::CURRENT {
        integration::k0s_binary()?
    } else {
        integration::k0s_binary_with_version(&k0s_version_carrying(release))?
    };
    integration::components::carrying_at(&bare, integration::components::Set::All, release)
}

/// The [`V2`] build carrying every pinned component (the control plane's and the worker's):
/// its bytes and their sha256 (built and packed on first use).
pub fn v2_carrying_all_build() -> (Vec<u8>, String) {
    let bare = integration::k0s_binary_with_version(V2).expect("the v2 build");
    let path = integration::components::carrying(&bare, integration::components::Set::All)
        .expect("the v2 build with every component");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let sha = sha256_hex(&bytes);
    (bytes, sha)
}

/// The [`V2`] build carrying the pinned worker components (containerd, its shim, the
/// kubelet: `integration::components`), as a release carries them: its bytes and their
/// sha256 (built and packed on first use).
pub fn v2_carrying_build() -> (Vec<u8>, String) {
    let bare = integration::k0s_binary_with_version(V2).expect("the v2 build");
    let path = integration::components::carrying(&bare, integration::components::Set::Worker)
        .expect("the v2 build with the worker's components");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let sha = sha256_hex(&bytes);
    (bytes, sha)
}

/// Makes `dir` a keys directory (`--payload-keys`) as an administrator would, whatever this
/// process's umask: the directory and its subdirectories mode 755, every file in it 644 (a
/// node refuses keys that its group or others could write).
pub fn seal_keys_dir(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |path: &std::path::Path| if path.is_dir() { 0o755 } else { 0o644 };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for entry in std::fs::read_dir(dir).expect("the keys directory") {
        let path = entry.expect("an entry").path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode(&path)))
            .expect("chmod");
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A `k0supdate` to `version`, not forced, downloading `<base>/k0s` with `sha256` on this
/// machine's platform.
pub fn update_to(
    version: &str,
    base: &str,
    sha256: &str,
    controllers: Option<PlanCommandTarget>,
    workers: Option<PlanCommandTarget>,
) -> PlanCommandK0sUpdate {
    PlanCommandK0sUpdate {
        drain: None,
        drain_options: None,
        version: version.to_owned(),
        forceupdate: false,
        platforms: BTreeMap::from([(
            autopilot_api::platform::current(),
            PlanResourceUrl {
                url: format!("{base}/k0s"),
                sha256: Some(sha256.to_owned()),
                ..Default::default()
            },
        )]),
        targets: PlanCommandTargets { controllers, workers },
        rollout: PlanCommandRollout::default(),
    }
}

/// What a node had before a scenario's plans: its process and its binary.
pub struct Before {
    /// The node process's pid.
    pub pid: u32,
    /// The binary's bytes.
    pub bytes: Vec<u8>,
    /// What the binary's `version` printed.
    pub version: String,
}

impl Before {
    /// What `worker` has now.
    pub fn of(worker: &K0sProcess) -> Self {
        Self {
            pid: worker.pid(),
            bytes: std::fs::read(worker.binary_path()).expect("reading the binary"),
            version: binary_version(worker.binary_path()),
        }
    }

    /// The same process still runs the same binary, with nothing staged next to it.
    pub fn assert_untouched(&self, worker: &K0sProcess, case: &str) {
        assert!(worker.is_running(), "{case}: the worker exited:\n{}", worker.log_tail(40));
        assert_eq!(worker.pid(), self.pid, "{case}: the same worker process runs");
        let on_disk = std::fs::read(worker.binary_path()).expect("reading the binary");
        assert!(on_disk == self.bytes, "{case}: the binary on disk changed");
        assert_eq!(binary_version(worker.binary_path()), self.version, "{case}");
        let leftovers = update_leftovers(worker.binary_path(), worker.data_dir());
        assert!(leftovers.is_empty(), "{case}: files left behind: {leftovers:?}");
    }
}

/// What `k0s version` of `process`'s binary on disk prints.
pub fn version_on_disk(process: &K0sProcess) -> String {
    binary_version(process.binary_path())
}

/// A ConfigMap in `k0s-autopilot` holding a check Pod template that runs `script` with
/// `/bin/sh -c` in the real nodes' busybox image ([`integration::real_node::image`]).
pub fn pod_template(name: &str, script: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{
        "name": "check", "image": integration::real_node::image::BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script]}]}});
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": autopilot_api::keys::NAMESPACE},
        "data": {"pod.yaml": serde_saphyr::to_string(&pod).expect("YAML")},
    }))
    .expect("a ConfigMap")
}

/// Waits until an Event with `reason` about the Plan `autopilot` exists, and returns its note.
pub async fn wait_plan_event(client: &kube::Client, reason: &str) -> anyhow::Result<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    integration::wait_for(
        Duration::from_secs(30),
        &format!("a {reason} Event on the plan"),
        || async {
            let list = events.list(&Default::default()).await?;
            Ok(list.items.into_iter().find_map(|e| {
                let about_plan = e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Plan") && r.name.as_deref() == Some(keys::PLAN_NAME)
                });
                (about_plan && e.reason.as_deref() == Some(reason))
                    .then(|| e.note.unwrap_or_default())
            }))
        },
    )
    .await
}

/// Creates DaemonSet `name` in `namespace` (unless it exists) that selects no node (a node
/// selector no node carries), so that hand-made Pods whose controller reference names it are
/// the Pods of a DaemonSet that exists: drains leave them in place, as they leave any
/// DaemonSet's Pods (a Pod whose DaemonSet does not exist holds the drain, as a bare Pod).
pub async fn inert_daemon_set(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let daemon_set: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "selector": { "matchLabels": { "inert": name } },
            "template": {
                "metadata": { "labels": { "inert": name } },
                "spec": {
                    "nodeSelector": { "autopilot.test/no-node": "true" },
                    "containers": [{ "name": "none", "image": "example.invalid/none:1" }],
                },
            },
        },
    }))?;
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    match daemon_sets.create(&PostParams::default(), &daemon_set).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error).with_context(|| format!("creating DaemonSet {name}")),
    }
}
