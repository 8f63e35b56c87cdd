//! Real nodes for a test cluster: per node a containerd and a kubelet that owns the Node,
//! running real containers; and, for the cluster, the real `kube-controller-manager` and
//! `kube-scheduler` that make ReplicaSets, DaemonSet Pods and budgets work.
//!
//! ```no_run
//! # async fn demo(cluster: &integration::Cluster) -> anyhow::Result<()> {
//! use integration::real_node::RealNodes;
//! let nodes = RealNodes::start(cluster, &["worker-0", "worker-1"]).await?; // Nodes Ready
//! let worker = cluster.k0s_worker_on_kubelet("worker-0").spawn().await?;    // the agent
//! let running = nodes.running_containers("worker-0")?;                        // containerd's view
//! # Ok(()) }
//! ```
//!
//! # What runs where
//!
//! - One network namespace per set of nodes: each node's address
//!   (`10.213.0.<11+i>`) on its loopback interface, each node's CNI bridge (`k0sit<i>`,
//!   Pods in `10.244.<i>.0/24`) and the Pods. The API servers stay on the machine's loopback;
//!   a forwarder makes each reachable inside the namespace on the same address and port.
//!   Nothing outside reaches into the namespace: the API servers cannot reach a kubelet
//!   (no `kubectl logs` or `exec`); what the tests read of a Pod is in its status.
//! - Per node, inside the namespace: `containerd` ([`crate::node_binaries::CONTAINERD_VERSION`],
//!   its own socket, root, state, runc root and CNI configuration; Debian's `runc` and CNI
//!   plugins) and a `kubelet` (own root and certificate directories, cgroup root
//!   `/<set>-<node>` in every v1 hierarchy, `--hostname-override` = the node name, the
//!   cluster's node identity), which registers and owns the Node.
//! - For the cluster, on the machine's loopback: `kube-controller-manager` and
//!   `kube-scheduler` with the admin identity against API server 0.
//! - The k0s agent is the test's: [`crate::Cluster::k0s_worker_on_kubelet`] starts `k0s
//!   worker` without `--register-node`, as it runs beside a kubelet. It runs outside the
//!   namespace (it only talks to the API server and the download server).
//!
//! Both images ([`image::BUSYBOX_IMAGE`], [`image::PAUSE_IMAGE`]) are written by the harness
//! and imported into every node's containerd; Pods use `imagePullPolicy: Never`.
//!
//! # Prerequisites
//!
//! Root, cgroup v1, `ip` and `nsenter`, Debian's `runc`, `containernetworking-plugins` and
//! `busybox-static`, and the node binaries (`cargo xtask control-plane`).
//! [`prerequisites`] says what is missing; `cargo xtask test` leaves the real-node scenarios
//! out, naming them and the reason, where it is, and they fail (never pass) when run anyway.
//!
//! # Teardown
//!
//! Dropping a [`RealNodes`] (also during a panic) removes everything they made: it kills the
//! kubelets and containerds, every process that names the set's directory (the shims, which
//! daemonize) and every process in their cgroups; unmounts everything under the directory
//! (container root filesystems, sandbox `shm`, network namespaces, the kubelets' own bind
//! mounts); removes the cgroups, the namespace with its bridges, and whatever appeared in
//! the machine-wide directories a kubelet or containerd writes (`/var/log/pods`,
//! `/var/log/containers`, `/var/lib/kubelet`, `/var/lib/cni`, `/run/containerd`). One set of
//! real nodes runs at a time on the machine (a second waits: in a test process on a mutex,
//! across test processes on an exclusive lock of [`MACHINE_LOCK`]), so that last step
//! removes only theirs. [`Leftovers`] checks that nothing is left.

mod config;
pub(crate) mod host;
pub mod image;
mod netns;
pub mod workload;

use std::{
    collections::BTreeSet,
    fs,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc, LazyLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

use crate::{
    node_binaries::{self, CNI_BIN_DIR, NodeBinaries},
    process::{GroupRegistry, ProcessSlot, tail},
    wait_for,
};
use config::{NodeLayout, NodeParams};

/// What real nodes need of the control plane they join (the harness's [`crate::Cluster`]
/// implements it): where its files go, its API servers, its CA, and the kubeconfigs of its
/// admin and of each node.
pub trait ControlPlane {
    /// The cluster's directory.
    fn dir(&self) -> &Path;
    /// How many controllers (and API servers) it has.
    fn controllers(&self) -> usize;
    /// Whether `name` has a node identity (a worker, or a controller with one).
    fn has_node_identity(&self, name: &str) -> bool;
    /// API server `i`'s `host:port`.
    fn api_address(&self, i: usize) -> String;
    /// The cluster CA's certificate.
    fn ca_cert_path(&self) -> &Path;
    /// An admin kubeconfig for API server `i`.
    fn admin_kubeconfig(&self, i: usize) -> PathBuf;
    /// Node `name`'s kubeconfig.
    fn node_kubeconfig(&self, name: &str) -> PathBuf;
    /// The data directory a `k0s` process of node `name` gets.
    fn node_data_dir(&self, name: &str) -> PathBuf;
    /// Whether `k0s controller --run-components` runs the cluster's controller-manager and
    /// scheduler (then the real nodes do not start theirs).
    fn workload_controllers_run_by_k0s(&self) -> bool;
    /// The etcd the API servers store the cluster in, when `k0s controller` runs them (a
    /// controller run in the nodes' namespace reaches it there).
    fn etcd_address(&self) -> Option<SocketAddr>;
    /// An admin client.
    fn admin_client(&self) -> impl Future<Output = anyhow::Result<kube::Client>> + Send;
}
use netns::{Forwarder, NetNs};

/// How long [`RealNodes::start`] waits for each node's containerd and for the Nodes to be
/// Ready (measured: a Node is Ready 1.3–2.6 s after its kubelet starts, alone).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Where Debian's `runc` is.
const RUNC: &str = "/usr/sbin/runc";

/// Lines of a log shown in errors.
const ERROR_LOG_LINES: usize = 30;

/// One set of real nodes at a time per test process (see the module docs).
static ONE_AT_A_TIME: LazyLock<Arc<tokio::sync::Mutex<()>>> =
    LazyLock::new(|| Arc::new(tokio::sync::Mutex::new(())));

/// The file whose exclusive lock a set of real nodes holds while it runs, so that sets in
/// other test processes (two checkouts tested at once) wait instead of removing each
/// other's entries in the machine-wide directories.
pub const MACHINE_LOCK: &str = "/run/lock/k0s-it-real-nodes.lock";

/// Waits for the machine-wide lock of [`MACHINE_LOCK`] (held until the returned value drops).
async fn machine_turn() -> anyhow::Result<nix::fcntl::Flock<fs::File>> {
    tokio::task::spawn_blocking(|| {
        let path = Path::new(MACHINE_LOCK);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| anyhow::anyhow!("locking {}: {errno}", path.display()))
    })
    .await?
}

/// Numbers the sets of this process (their namespace and cgroup names).
static SETS: AtomicUsize = AtomicUsize::new(0);

/// What this machine or process lacks for real nodes, if anything (`Err` names it): what
/// [`host_prerequisites`] checks, and the pinned node binaries built.
pub fn prerequisites() -> Result<(), String> {
    let mut missing: Vec<String> = host_prerequisites().err().into_iter().collect();
    if let Err(err) = node_binaries::binaries() {
        missing.push(format!("{err:#}"));
    }
    if missing.is_empty() { Ok(()) } else { Err(missing.join("; ")) }
}

/// What this machine or process lacks for real nodes apart from the node binaries, which
/// `cargo xtask control-plane` builds (the demo builds them when nothing else is missing).
pub fn host_prerequisites() -> Result<(), String> {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root (real nodes mount, make cgroups and network namespaces)".to_owned());
    }
    if !host::has_cgroup_v1() {
        missing.push("the cgroup v1 hierarchies under /sys/fs/cgroup".to_owned());
    }
    for (path, package) in [
        (RUNC, "runc"),
        ("/usr/lib/cni/bridge", "containernetworking-plugins"),
        ("/usr/lib/cni/host-local", "containernetworking-plugins"),
        ("/usr/lib/cni/loopback", "containernetworking-plugins"),
        (image::BUSYBOX, "busybox-static"),
    ] {
        if !Path::new(path).is_file() {
            missing.push(format!("{path} (Debian package {package})"));
        }
    }
    for tool in ["ip", "nsenter"] {
        if !on_path(tool) {
            missing.push(format!("{tool} on PATH"));
        }
    }
    if missing.is_empty() { Ok(()) } else { Err(missing.join("; ")) }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

/// A set of real nodes and the cluster's controller-manager and scheduler; removes
/// everything when dropped (see the module docs).
#[derive(Debug)]
pub struct RealNodes {
    id: String,
    dir: PathBuf,
    binaries: NodeBinaries,
    netns: Option<NetNs>,
    forwarder: Option<Forwarder>,
    /// Forwarders of the machine's loopback services the nodes reach, by address
    /// ([`RealNodes::forward_into_namespace`], and every file server with nodes run by k0s).
    extra_forwarders: Arc<std::sync::Mutex<Vec<(SocketAddr, Forwarder)>>>,
    /// Forwarders of services inside the namespace the tests reach, by address
    /// ([`RealNodes::forward_out_of_namespace`]).
    outward_forwarders: std::sync::Mutex<Vec<(SocketAddr, Forwarder)>>,
    /// The hook that forwards each new file server into the namespace, while it runs.
    forwarding_hook: Option<u64>,
    nodes: Vec<RealNode>,
    controller_manager: ProcessSlot,
    scheduler: ProcessSlot,
    shared_before: BTreeSet<PathBuf>,
    torn_down: bool,
    _turn: tokio::sync::OwnedMutexGuard<()>,
    _machine_turn: nix::fcntl::Flock<fs::File>,
}

#[derive(Debug)]
struct RealNode {
    name: String,
    ip: Ipv4Addr,
    layout: NodeLayout,
    cgroup_root: String,
    containerd: ProcessSlot,
    kubelet: ProcessSlot,
    /// When `k0s worker --run-components` runs this node's containerd and kubelet
    /// ([`RealNodes::start_for_k0s`]): its data directory.
    k0s_data_dir: Option<PathBuf>,
}

/// Adds to `forwarders` the one `start` makes for `address`, unless it has one already.
fn forward_once(
    forwarders: &std::sync::Mutex<Vec<(SocketAddr, Forwarder)>>,
    address: SocketAddr,
    start: impl FnOnce() -> anyhow::Result<Forwarder>,
) -> anyhow::Result<()> {
    let mut all =
        forwarders.lock().map_err(|_| anyhow::anyhow!("the forwarders' lock is poisoned"))?;
    if !all.iter().any(|(forwarded, _)| *forwarded == address) {
        all.push((address, start()?));
    }
    Ok(())
}

impl RealNode {
    /// containerd's socket.
    fn containerd_socket(&self) -> PathBuf {
        match &self.k0s_data_dir {
            Some(data) => data.join("run").join("containerd.sock"),
            None => self.layout.containerd_socket(),
        }
    }

    /// The log of component `name` (`kubelet`, `containerd`).
    fn log(&self, name: &str) -> PathBuf {
        match &self.k0s_data_dir {
            Some(data) => data.join("log").join(format!("{name}.log")),
            None => self.layout.dir.join(format!("{name}.log")),
        }
    }

    /// The pid of component `name` (`kubelet`, `containerd`) while it runs.
    fn pid_of(&self, name: &str, slot: &ProcessSlot) -> Option<u32> {
        match &self.k0s_data_dir {
            Some(data) => {
                let pid = fs::read_to_string(data.join("run").join(format!("{name}.pid"))).ok()?;
                let pid: u32 = pid.trim().parse().ok()?;
                Path::new("/proc").join(pid.to_string()).exists().then_some(pid)
            }
            None => slot.is_running().then(|| slot.pid()).flatten(),
        }
    }
}

/// Who runs the nodes' containerd and kubelet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    /// The harness starts them.
    Harness,
    /// `k0s worker --run-components` does.
    K0s,
}

/// The kubelet flags the harness's nodes need on this machine kind (see
/// `config::kubelet_yaml`): their own cgroup root, no resolv.conf, fast status updates, image
/// garbage collection and node-pressure eviction effectively off.
fn k0s_kubelet_extra_args(cgroup_root: &str) -> String {
    [
        &format!("--cgroup-root=/{cgroup_root}"),
        "--resolv-conf=",
        "--node-status-update-frequency=2s",
        "--sync-frequency=10s",
        "--file-check-frequency=10s",
        "--image-gc-high-threshold=100",
        "--image-gc-low-threshold=99",
        "--eviction-hard=memory.available<1Mi,nodefs.available<1Mi,nodefs.inodesFree<1,imagefs.available<1Mi",
    ]
    .join(" ")
}

impl RealNodes {
    /// Starts the controller-manager and scheduler of `cluster`, then a containerd and a
    /// kubelet for each of `names` (each declared with [`crate::ClusterBuilder::workers`], or a
    /// `controller-<i>` with [`crate::ClusterBuilder::controller_node_identities`]: a real
    /// worker on a controller, whose `k0s controller --enable-worker` then runs with
    /// `--register-node=false`),
    /// and returns once every Node is Ready. On failure everything started is removed again
    /// and the error carries the relevant log tail. [`Cluster::start_real_nodes`] does the
    /// same and keeps them with the cluster.
    pub async fn start(cluster: &impl ControlPlane, names: &[&str]) -> anyhow::Result<Self> {
        Self::start_with(cluster, &names.iter().map(|n| (*n, Runner::Harness)).collect::<Vec<_>>())
            .await
    }

    /// [`RealNodes::start`] for `harness` and [`RealNodes::start_for_k0s`] for `k0s`, in one
    /// set (one namespace): some nodes beside an agent alone, some run by `k0s`.
    pub async fn start_mixed(
        cluster: &impl ControlPlane,
        harness: &[&str],
        k0s: &[&str],
    ) -> anyhow::Result<Self> {
        let nodes: Vec<(&str, Runner)> = harness
            .iter()
            .map(|n| (*n, Runner::Harness))
            .chain(k0s.iter().map(|n| (*n, Runner::K0s)))
            .collect();
        Self::start_with(cluster, &nodes).await
    }

    /// Like [`RealNodes::start`], but the nodes' containerd and kubelet are left to `k0s
    /// worker --run-components`: makes the namespace, the cgroup roots, each node's CNI
    /// network and images, and starts the controller-manager and scheduler; then
    /// [`RealNodes::k0s_worker`] turns a worker's command into one that runs them, and
    /// [`RealNodes::wait_k0s_node`] waits for its containerd (importing the images) and its
    /// Node Ready. Teardown also removes what those wrote under the nodes' data directories.
    pub async fn start_for_k0s(
        cluster: &impl ControlPlane,
        names: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_with(cluster, &names.iter().map(|n| (*n, Runner::K0s)).collect::<Vec<_>>())
            .await
    }

    async fn start_with(
        cluster: &impl ControlPlane,
        nodes: &[(&str, Runner)],
    ) -> anyhow::Result<Self> {
        let names: Vec<&str> = nodes.iter().map(|(name, _)| *name).collect();
        let names = names.as_slice();
        prerequisites().map_err(|missing| anyhow::anyhow!("real nodes cannot run: {missing}"))?;
        ensure!(names.len() <= 200, "at most 200 real nodes per set");
        for name in names {
            ensure!(
                cluster.has_node_identity(name),
                "node {name:?} has no node identity (declare it as a worker, or give the \
                 controllers theirs with ClusterBuilder::controller_node_identities)"
            );
        }
        let binaries = node_binaries::binaries()?;
        let turn = ONE_AT_A_TIME.clone().lock_owned().await;
        let machine_turn = machine_turn().await?;
        let set = SETS.fetch_add(1, Ordering::Relaxed);
        let id = format!("k0s-it-{}-{set}", std::process::id());
        let dir = cluster.dir().join("real");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut set = Self {
            id,
            dir,
            binaries,
            netns: None,
            forwarder: None,
            extra_forwarders: Arc::default(),
            outward_forwarders: std::sync::Mutex::default(),
            forwarding_hook: None,
            nodes: Vec::new(),
            controller_manager: ProcessSlot::new(GroupRegistry::default()),
            scheduler: ProcessSlot::new(GroupRegistry::default()),
            shared_before: host::shared_entries(),
            torn_down: false,
            _turn: turn,
            _machine_turn: machine_turn,
        };
        set.start_all(cluster, nodes).await?;
        Ok(set)
    }

    async fn start_all(
        &mut self,
        cluster: &impl ControlPlane,
        nodes: &[(&str, Runner)],
    ) -> anyhow::Result<()> {
        let [busybox, pause] = image::write_images(&self.dir)?;
        for (index, (name, runner)) in nodes.iter().enumerate() {
            let index = u8::try_from(index)?;
            let node_dir = self.dir.join(name);
            fs::create_dir_all(&node_dir)?;
            self.nodes.push(RealNode {
                name: (*name).to_owned(),
                ip: netns::node_ip(index),
                layout: NodeLayout { dir: node_dir },
                cgroup_root: format!("{}-{name}", self.id),
                containerd: ProcessSlot::new(GroupRegistry::default()),
                kubelet: ProcessSlot::new(GroupRegistry::default()),
                k0s_data_dir: (*runner == Runner::K0s).then(|| cluster.node_data_dir(name)),
            });
        }
        let ips: Vec<Ipv4Addr> = self.nodes.iter().map(|n| n.ip).collect();
        self.netns = Some(NetNs::create(&self.id, &ips)?);
        self.forward_api_servers(cluster)?;

        if !cluster.workload_controllers_run_by_k0s() {
            self.start_controller_manager(cluster)?;
            self.start_scheduler(cluster)?;
        }

        for (index, node) in self.nodes.iter().enumerate() {
            let index = u8::try_from(index)?;
            host::create_cgroup_root(&node.cgroup_root)?;
            let params = NodeParams {
                layout: &node.layout,
                ip: node.ip,
                index,
                cgroup_root: &format!("/{}", node.cgroup_root),
                pause_image: image::PAUSE_IMAGE,
                ca_cert: cluster.ca_cert_path(),
                runc: Path::new(RUNC),
                cni_bin_dir: Path::new(CNI_BIN_DIR),
            };
            if node.k0s_data_dir.is_some() {
                fs::create_dir_all(params.layout.cni_conf_dir())?;
                fs::write(
                    params.layout.cni_conf_dir().join("10-k0s-it.conflist"),
                    config::cni_conflist(&params),
                )?;
                continue;
            }
            write_node_files(&params)?;
            self.start_containerd(node)?;
        }
        if self.nodes.iter().any(|n| n.k0s_data_dir.is_some()) {
            self.forward_file_servers()?;
        }
        for node in self.nodes.iter().filter(|n| n.k0s_data_dir.is_none()) {
            self.wait_containerd(node).await?;
            for archive in [&busybox, &pause] {
                self.ctr(node, &["images", "import", &archive.to_string_lossy()]).with_context(
                    || format!("importing {} into {}", archive.display(), node.name),
                )?;
            }
        }
        for node in self.nodes.iter().filter(|n| n.k0s_data_dir.is_none()) {
            self.start_kubelet(cluster, node)?;
        }
        self.wait_ready(cluster).await
    }

    fn start_controller_manager(&self, cluster: &impl ControlPlane) -> anyhow::Result<()> {
        let pki = cluster.dir().join("pki");
        let mut command = Command::new(&self.binaries.kube_controller_manager);
        command
            .arg(format!("--kubeconfig={}", cluster.admin_kubeconfig(0).display()))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--controllers=*")
            .arg("--use-service-account-credentials=false")
            .arg(format!("--service-account-private-key-file={}", pki.join("sa.key").display()))
            .arg(format!("--root-ca-file={}", cluster.ca_cert_path().display()))
            // Node health is judged fast, so a node that stopped is seen in seconds.
            .arg("--node-monitor-period=2s");
        self.controller_manager
            .start(&mut command, &self.dir.join("kube-controller-manager.log"))?;
        Ok(())
    }

    fn start_scheduler(&self, cluster: &impl ControlPlane) -> anyhow::Result<()> {
        let mut command = Command::new(&self.binaries.kube_scheduler);
        command
            .arg(format!("--kubeconfig={}", cluster.admin_kubeconfig(0).display()))
            .arg("--leader-elect=false")
            .arg("--secure-port=0");
        self.scheduler.start(&mut command, &self.dir.join("kube-scheduler.log"))?;
        Ok(())
    }

    fn netns(&self) -> anyhow::Result<&NetNs> {
        self.netns.as_ref().context("the network namespace is gone")
    }

    fn start_containerd(&self, node: &RealNode) -> anyhow::Result<()> {
        let shim_dir =
            self.binaries.containerd_shim.parent().context("the shim has no directory")?;
        let path = format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            shim_dir.display()
        );
        let mut command = self.netns()?.command(&self.binaries.containerd);
        command.arg("--config").arg(node.layout.containerd_config()).env("PATH", path);
        node.containerd.start(&mut command, &node.layout.dir.join("containerd.log"))?;
        Ok(())
    }

    async fn wait_containerd(&self, node: &RealNode) -> anyhow::Result<()> {
        let what = format!("containerd of {} to answer", node.name);
        let result = wait_for(STARTUP_TIMEOUT, &what, || async {
            if let Some(status) = node.containerd.exit_status() {
                return Ok(Some(Err(anyhow::anyhow!("containerd exited ({status})"))));
            }
            Ok(self.ctr(node, &["version"]).is_ok().then_some(Ok(())))
        })
        .await
        .and_then(|r| r);
        result.map_err(|err| {
            let log = node.layout.dir.join("containerd.log");
            anyhow::anyhow!(
                "{err:#}\nlast lines of {}:\n{}",
                log.display(),
                tail(&log, ERROR_LOG_LINES)
            )
        })
    }

    /// Runs `ctr` against node `node`'s containerd, in the Kubernetes namespace; its stdout.
    fn ctr(&self, node: &RealNode, args: &[&str]) -> anyhow::Result<String> {
        let output = Command::new(&self.binaries.ctr)
            .arg("--address")
            .arg(node.containerd_socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running ctr")?;
        ensure!(
            output.status.success(),
            "ctr {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn start_kubelet(&self, cluster: &impl ControlPlane, node: &RealNode) -> anyhow::Result<()> {
        let root = node.layout.kubelet_dir();
        fs::create_dir_all(&root)?;
        let mut command = self.netns()?.command(&self.binaries.kubelet);
        command
            .arg(format!("--config={}", node.layout.kubelet_config().display()))
            .arg(format!("--kubeconfig={}", cluster.node_kubeconfig(&node.name).display()))
            .arg(format!("--root-dir={}", root.display()))
            .arg(format!("--cert-dir={}", root.join("pki").display()))
            .arg(format!("--hostname-override={}", node.name))
            .arg(format!("--node-ip={}", node.ip));
        node.kubelet.start(&mut command, &node.layout.dir.join("kubelet.log"))?;
        Ok(())
    }

    async fn wait_ready(&self, cluster: &impl ControlPlane) -> anyhow::Result<()> {
        let client = cluster.admin_client().await?;
        let api: Api<Node> = Api::all(client);
        for node in self.nodes.iter().filter(|n| n.k0s_data_dir.is_none()) {
            let what = format!("Node {} Ready (its kubelet)", node.name);
            let result = wait_for(STARTUP_TIMEOUT, &what, || async {
                for (slot, what) in [
                    (&node.kubelet, "kubelet"),
                    (&node.containerd, "containerd"),
                    (&self.controller_manager, "kube-controller-manager"),
                    (&self.scheduler, "kube-scheduler"),
                ] {
                    if let Some(status) = slot.exit_status() {
                        return Ok(Some(Err(anyhow::anyhow!("{what} exited ({status})"))));
                    }
                }
                Ok(api.get_opt(&node.name).await?.filter(workload::node_ready).map(|_| Ok(())))
            })
            .await
            .and_then(|r| r);
            result.map_err(|err| {
                let mut message = format!("{err:#}");
                for log in [
                    node.layout.dir.join("kubelet.log"),
                    node.layout.dir.join("containerd.log"),
                    self.dir.join("kube-controller-manager.log"),
                    self.dir.join("kube-scheduler.log"),
                ] {
                    message.push_str(&format!(
                        "\nlast lines of {}:\n{}",
                        log.display(),
                        tail(&log, ERROR_LOG_LINES)
                    ));
                }
                anyhow::anyhow!(message)
            })?;
        }
        Ok(())
    }

    // --- nodes run by k0s ---

    /// Makes every test file server reachable inside the namespace, on its own address, for the
    /// `k0s` processes that run there: the ones that serve now, and each one started later
    /// (before its `start` returns), until the nodes are torn down.
    fn forward_file_servers(&mut self) -> anyhow::Result<()> {
        let netns = self.netns()?.path();
        let forwarders = self.extra_forwarders.clone();
        let hook = std::sync::Arc::new(move |address: SocketAddr| {
            let Ok(mut all) = forwarders.lock() else { return };
            if all.iter().any(|(forwarded, _)| *forwarded == address) {
                return;
            }
            match Forwarder::start(&netns, &[address]) {
                Ok(forwarder) => all.push((address, forwarder)),
                Err(err) => eprintln!("integration: forwarding {address}: {err:#}"),
            }
        });
        self.forwarding_hook = Some(crate::net::on_loopback_services(hook));
        Ok(())
    }

    /// Makes `address`, a service on the machine's loopback (a download server), reachable
    /// from inside the nodes' namespace on the same address and port, as the API servers
    /// are: for a `k0s` that runs there ([`RealNodes::k0s_worker`]) and downloads from it.
    /// (Every [`crate::http::FileServer`] already is where `k0s` runs the nodes; forwarding
    /// an address twice does nothing.)
    pub fn forward_into_namespace(&self, address: SocketAddr) -> anyhow::Result<()> {
        forward_once(&self.extra_forwarders, address, || {
            Forwarder::start(&self.netns()?.path(), &[address])
        })
    }

    /// Forwards each API server the nodes reach into the namespace; the API server of a
    /// controller that `k0s` runs as one of these nodes (in the namespace) is forwarded out
    /// of it instead, and then the cluster's etcd in.
    fn forward_api_servers(&mut self, cluster: &impl ControlPlane) -> anyhow::Result<()> {
        let netns = self.netns()?.path();
        let (mut inward, mut outward) = (Vec::new(), Vec::new());
        for i in 0..cluster.controllers() {
            let address = cluster.api_address(i);
            let address: SocketAddr =
                address.parse().with_context(|| format!("parsing API server address {address}"))?;
            let name = format!("controller-{i}");
            let here = self.nodes.iter().any(|n| n.name == name && n.k0s_data_dir.is_some());
            if here { &mut outward } else { &mut inward }.push(address);
        }
        if !outward.is_empty() {
            inward.extend(cluster.etcd_address());
        }
        for address in outward {
            self.forward_out_of_namespace(address)?;
        }
        self.forwarder = Some(Forwarder::start(&netns, &inward)?);
        Ok(())
    }

    /// Makes `address`, a service a process inside the nodes' namespace serves (a `k0s`
    /// node's metrics), reachable on the machine's loopback on the same address and port.
    /// Forwarding an address twice does nothing.
    pub fn forward_out_of_namespace(&self, address: SocketAddr) -> anyhow::Result<()> {
        forward_once(&self.outward_forwarders, address, || {
            Forwarder::start_outward(&self.netns()?.path(), &[address])
        })
    }

    /// `command` (a `k0s worker` of one of these nodes, from
    /// [`crate::Cluster::k0s_worker_on_kubelet`]) made to run the node's containerd and
    /// kubelet: `--run-components` with the node's address, CNI network, runc, sandbox image
    /// and kubelet flags, inside the nodes' network namespace. Only for nodes started with
    /// [`RealNodes::start_for_k0s`].
    pub fn k0s_worker(&self, command: crate::K0sCommand) -> anyhow::Result<crate::K0sCommand> {
        Ok(self.in_namespace_with_host_flags(command)?.arg("--run-components"))
    }

    /// `command` run in the nodes' namespace with the flags of its node's containerd and
    /// kubelet (address, CNI network, runc, sandbox image, kubelet flags).
    fn in_namespace_with_host_flags(
        &self,
        command: crate::K0sCommand,
    ) -> anyhow::Result<crate::K0sCommand> {
        let node = self.node(command.node_name())?;
        let data_dir = node.k0s_data_dir.as_ref().with_context(|| {
            format!("{} was started by the harness (RealNodes::start), not for k0s", node.name)
        })?;
        ensure!(
            *data_dir == command.data_dir(),
            "{}: the command's data directory {} is not the one the nodes clean up ({})",
            node.name,
            command.data_dir().display(),
            data_dir.display()
        );
        Ok(command
            .in_network_namespace(self.netns()?.path())
            .arg(format!("--node-ip={}", node.ip))
            .arg(format!("--cni-conf-dir={}", node.layout.cni_conf_dir().display()))
            .arg(format!("--cni-bin-dir={CNI_BIN_DIR}"))
            .arg(format!("--runc={RUNC}"))
            .arg(format!("--pause-image={}", image::PAUSE_IMAGE))
            .arg(format!("--kubelet-extra-args={}", k0s_kubelet_extra_args(&node.cgroup_root))))
    }

    /// `command` (a `k0s controller` of controller `controller-<i>`, one of these nodes,
    /// from [`crate::Cluster::k0s_controller_running_components`]) made a controller+worker
    /// that runs its control plane and its node's containerd and kubelet in the nodes'
    /// namespace: [`RealNodes::k0s_worker`]'s flags, `--enable-worker --register-node=false`
    /// and the node's identity for the kubelet. Its API server is reachable from the machine
    /// on its address, as the others are.
    pub fn k0s_controller_worker(
        &self,
        cluster: &impl ControlPlane,
        command: crate::K0sCommand,
    ) -> anyhow::Result<crate::K0sCommand> {
        let kubeconfig = cluster.node_kubeconfig(command.node_name());
        Ok(self
            .in_namespace_with_host_flags(command)?
            .arg("--enable-worker")
            .arg("--register-node=false")
            .arg(format!("--kubelet-kubeconfig={}", kubeconfig.display())))
    }

    /// Waits until `worker` (made with [`RealNodes::k0s_worker`]) has containerd answering,
    /// imports the nodes' images into it, and waits for its Node Ready. On failure the error
    /// carries the tails of k0s's, containerd's and the kubelet's logs.
    pub async fn wait_k0s_node(
        &self,
        cluster: &impl ControlPlane,
        worker: &crate::K0sProcess,
    ) -> anyhow::Result<()> {
        let node = self.node(worker.node_name())?;
        let images = [self.dir.join(image::BUSYBOX_ARCHIVE), self.dir.join(image::PAUSE_ARCHIVE)];
        let api: Api<Node> = Api::all(cluster.admin_client().await?);
        let result = async {
            wait_for(
                STARTUP_TIMEOUT,
                &format!("containerd of {} (run by k0s)", node.name),
                || async {
                    if let Some(status) = worker.exit_status() {
                        return Ok(Some(Err(anyhow::anyhow!("k0s exited ({status})"))));
                    }
                    Ok(self.ctr(node, &["version"]).is_ok().then_some(Ok(())))
                },
            )
            .await
            .and_then(|r| r)?;
            for archive in &images {
                self.ctr(node, &["images", "import", &archive.to_string_lossy()]).with_context(
                    || format!("importing {} into {}", archive.display(), node.name),
                )?;
            }
            wait_for(
                STARTUP_TIMEOUT,
                &format!("Node {} Ready (its kubelet, run by k0s)", node.name),
                || async {
                    if let Some(status) = worker.exit_status() {
                        return Ok(Some(Err(anyhow::anyhow!("k0s exited ({status})"))));
                    }
                    Ok(api.get_opt(&node.name).await?.filter(workload::node_ready).map(|_| Ok(())))
                },
            )
            .await
            .and_then(|r| r)
        }
        .await;
        result.map_err(|err| {
            let mut message =
                format!("{err:#}\nlast lines of k0s:\n{}", worker.log_tail(ERROR_LOG_LINES));
            for log in [node.log("containerd"), node.log("kubelet")] {
                message.push_str(&format!(
                    "\nlast lines of {}:\n{}",
                    log.display(),
                    tail(&log, ERROR_LOG_LINES)
                ));
            }
            anyhow::anyhow!(message)
        })
    }

    // --- what tests read ---

    /// The nodes, in the order given.
    pub fn names(&self) -> Vec<&str> {
        self.nodes.iter().map(|n| n.name.as_str()).collect()
    }

    /// The address of node `name` (inside the namespace).
    pub fn ip(&self, name: &str) -> anyhow::Result<Ipv4Addr> {
        Ok(self.node(name)?.ip)
    }

    /// The pid of node `name`'s kubelet, while it runs (for a node run by k0s: from its pid
    /// file).
    pub fn kubelet_pid(&self, name: &str) -> anyhow::Result<Option<u32>> {
        let node = self.node(name)?;
        Ok(node.pid_of("kubelet", &node.kubelet))
    }

    /// The pid of node `name`'s containerd, while it runs (for a node run by k0s: from its
    /// pid file).
    pub fn containerd_pid(&self, name: &str) -> anyhow::Result<Option<u32>> {
        let node = self.node(name)?;
        Ok(node.pid_of("containerd", &node.containerd))
    }

    /// The ids of the containers (sandboxes included) whose task is running in node `name`'s
    /// containerd, as containerd itself reports them.
    pub fn running_containers(&self, name: &str) -> anyhow::Result<BTreeSet<String>> {
        let node = self.node(name)?;
        let listing = self.ctr(node, &["tasks", "list"])?;
        Ok(listing
            .lines()
            .skip(1)
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let id = fields.next()?;
                let status = fields.nth(1)?;
                (status == "RUNNING").then(|| id.to_owned())
            })
            .collect())
    }

    /// The pids of node `name`'s containerd shims (each holds a Pod's containers; they
    /// outlive containerd, the kubelet and k0s).
    pub fn shim_pids(&self, name: &str) -> anyhow::Result<BTreeSet<u32>> {
        let node = self.node(name)?;
        let socket = node.containerd_socket();
        Ok(host::processes_mentioning(&socket.to_string_lossy())
            .into_iter()
            .filter(|(_, cmdline)| cmdline.contains("containerd-shim"))
            .filter_map(|(pid, _)| u32::try_from(pid).ok())
            .collect())
    }

    /// The log of node `name`'s kubelet.
    pub fn kubelet_log(&self, name: &str) -> anyhow::Result<PathBuf> {
        Ok(self.node(name)?.log("kubelet"))
    }

    /// What would tell that these nodes left something behind, to check after they are gone.
    pub fn leftovers(&self) -> Leftovers {
        Leftovers {
            dir: self.dir.clone(),
            data_dirs: self.nodes.iter().filter_map(|n| n.k0s_data_dir.clone()).collect(),
            netns: self.id.clone(),
            cgroup_roots: self.nodes.iter().map(|n| n.cgroup_root.clone()).collect(),
            shared_before: self.shared_before.clone(),
        }
    }

    fn node(&self, name: &str) -> anyhow::Result<&RealNode> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .with_context(|| format!("{name:?} is not one of the real nodes {:?}", self.names()))
    }

    // --- teardown ---

    /// Removes everything the nodes made (see the module docs); what `Drop` does, with the
    /// first error returned instead of printed.
    pub fn tear_down(&mut self) -> anyhow::Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut errors = Vec::new();
        let mut note = |result: anyhow::Result<()>| {
            if let Err(err) = result {
                errors.push(format!("{err:#}"));
            }
        };
        for node in &self.nodes {
            node.kubelet.kill_and_reap();
        }
        for node in &self.nodes {
            node.containerd.kill_and_reap();
        }
        note(host::kill_processes_mentioning(&self.dir.to_string_lossy()));
        // Nodes run by k0s: k0s itself, its containerd, kubelet and shims all name the data
        // directory (killed together, so k0s restarts nothing).
        for data in self.nodes.iter().filter_map(|n| n.k0s_data_dir.as_ref()) {
            note(host::kill_processes_mentioning(&data.to_string_lossy()));
        }
        for node in &self.nodes {
            note(host::remove_cgroup_root(&node.cgroup_root));
        }
        self.forwarder = None;
        if let Some(hook) = self.forwarding_hook.take() {
            crate::net::stop_loopback_hook(hook);
        }
        if let Ok(mut extra) = self.extra_forwarders.lock() {
            extra.clear();
        }
        if let Ok(mut outward) = self.outward_forwarders.lock() {
            outward.clear();
        }
        self.controller_manager.kill_and_reap();
        self.scheduler.kill_and_reap();
        note(host::unmount_all_under(&self.dir));
        for data in self.nodes.iter().filter_map(|n| n.k0s_data_dir.as_ref()) {
            note(host::unmount_all_under(data));
        }
        if let Some(mut netns) = self.netns.take() {
            note(netns.delete());
        }
        note(host::remove_new_shared_entries(&self.shared_before));
        for node in &self.nodes {
            // The containers' files and the kubelet's state; the logs and configuration stay
            // with the cluster's directory.
            let k0s_dirs = node
                .k0s_data_dir
                .iter()
                .flat_map(|data| ["containerd", "kubelet", "run"].map(|dir| data.join(dir)));
            let own = [node.layout.containerd_dir(), node.layout.kubelet_dir()];
            for dir in own.into_iter().chain([node.layout.components().run_dir()]).chain(k0s_dirs) {
                if let Err(err) = fs::remove_dir_all(&dir)
                    && err.kind() != std::io::ErrorKind::NotFound
                {
                    errors.push(format!("removing {}: {err}", dir.display()));
                }
            }
        }
        match errors.is_empty() {
            true => Ok(()),
            false => bail!("tearing down the real nodes {}: {}", self.id, errors.join("; ")),
        }
    }
}

impl Drop for RealNodes {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for node in &self.nodes {
                let log = node.log("kubelet");
                eprintln!(
                    "---- last lines of the kubelet of {} ({}) ----\n{}",
                    node.name,
                    log.display(),
                    tail(&log, 15)
                );
            }
        }
        if let Err(err) = self.tear_down() {
            eprintln!("integration: {err:#}");
        }
    }
}

/// Writes node `p`'s containerd, CNI and kubelet configuration.
fn write_node_files(p: &NodeParams<'_>) -> anyhow::Result<()> {
    let layout = p.layout;
    fs::create_dir_all(layout.cni_conf_dir())?;
    fs::create_dir_all(layout.components().etc_dir())?;
    fs::create_dir_all(layout.components().run_dir())?;
    fs::write(layout.containerd_config(), config::containerd_toml(p))?;
    fs::write(layout.cni_conf_dir().join("10-k0s-it.conflist"), config::cni_conflist(p))?;
    fs::write(layout.kubelet_config(), config::kubelet_yaml(p))?;
    Ok(())
}

/// What a set of real nodes could leave behind, checked after it is gone.
#[derive(Debug, Clone)]
pub struct Leftovers {
    dir: PathBuf,
    data_dirs: Vec<PathBuf>,
    netns: String,
    cgroup_roots: Vec<String>,
    shared_before: BTreeSet<PathBuf>,
}

impl Leftovers {
    /// Everything still there: processes naming the nodes' directory, mounts under it, their
    /// cgroups, their network namespace, and new entries in the machine-wide directories.
    /// Empty when the teardown was complete. Waits for its turn like a set of real nodes, so
    /// no other set is writing while it looks.
    pub async fn find(&self) -> Vec<String> {
        let _turn = ONE_AT_A_TIME.lock().await;
        let mut found = Vec::new();
        for dir in std::iter::once(&self.dir).chain(&self.data_dirs) {
            for (pid, cmdline) in host::processes_mentioning(&dir.to_string_lossy()) {
                found.push(format!("process {pid}: {cmdline}"));
            }
            for mount in host::mounts_under(dir) {
                found.push(format!("mount {}", mount.display()));
            }
        }
        for root in &self.cgroup_roots {
            for dir in host::cgroup_dirs(root) {
                found.push(format!("cgroup {}", dir.display()));
            }
        }
        if netns::exists(&self.netns) {
            found.push(format!("network namespace {}", self.netns));
        }
        for entry in host::shared_entries() {
            if !self.shared_before.contains(&entry) {
                found.push(format!("new machine-wide entry {}", entry.display()));
            }
        }
        found
    }
}
