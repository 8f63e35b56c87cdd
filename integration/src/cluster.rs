//! A real control plane per test: one etcd and one kube-apiserver per controller on its own
//! loopback address, with generated TLS and token identities; plus the k0s nodes started on it.

use std::{
    collections::BTreeMap,
    ffi::OsString,
    fmt::Write as _,
    fs,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::{client::legacy::Client as HttpClient, rt::TokioExecutor};
use nix::sys::signal::Signal;

use crate::{
    control_plane::{self, Binaries},
    k0s::{K0sCommand, K0sProcess},
    kubeconfig::{self, client_from_kubeconfig},
    net, pki,
    process::{GroupRegistry, ProcessSlot, tail},
    rbac,
    real_node::{ControlPlane, RealNodes},
    wait::wait_for,
};

/// Environment variable: set to `1` to keep each cluster's directory (logs, kubeconfigs, node
/// data) after the test instead of deleting it. The path is printed either way on failure.
pub const KEEP_TEST_DIRS_ENV: &str = "K0S_KEEP_TEST_DIRS";

/// How long [`ClusterBuilder::build`] and [`Cluster::start_apiserver`] wait for `/readyz` by
/// default. One apiserver typically needs 5–15 s on a 2-core machine; several starting at
/// once, next to other tests, need more.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// How long [`Cluster::stop_apiserver`] waits after SIGTERM before it SIGKILLs.
const APISERVER_STOP_GRACE: Duration = Duration::from_secs(30);

/// How often a server that lost a race for its port is started again on a new port.
const PORT_ATTEMPTS: usize = 5;

/// Lines of a server log shown in startup errors.
const ERROR_LOG_LINES: usize = 40;

/// The `--service-cluster-ip-range` (configuration only: nothing ever contacts it).
const SERVICE_CLUSTER_IP_RANGE: &str = "10.96.0.0/16";

/// The `--service-account-issuer`.
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Token user name of the admin identity (group `system:masters`).
pub const ADMIN_USER: &str = "admin";

/// Token user name of the viewer identity (group [`VIEWER_GROUP`]): no permission until a
/// test binds a role to the group, for tools that must work read-only.
pub const VIEWER_USER: &str = "viewer";

/// The group of [`VIEWER_USER`]; nothing is bound to it by the harness.
pub const VIEWER_GROUP: &str = "k0s-viewers";

/// Configures and starts a [`Cluster`].
#[derive(Debug, Clone)]
#[must_use = "a ClusterBuilder does nothing until built"]
pub struct ClusterBuilder {
    test_name: String,
    controllers: usize,
    workers: Vec<String>,
    startup_timeout: Duration,
    apiserver_args: Vec<String>,
    k0s_binary: Option<PathBuf>,
    controller_node_identities: bool,
    /// Files of `manifests/rbac/` not applied ([`ClusterBuilder::without_rbac`]).
    without_rbac: Vec<String>,
    /// The API servers, controller-managers and schedulers are `k0s controller
    /// --run-components`'s ([`ClusterBuilder::control_plane_run_by_k0s`]).
    k0s_control_plane: bool,
}

impl ClusterBuilder {
    /// The controllers' kube-apiserver, kube-controller-manager and kube-scheduler are run by
    /// `k0s controller --run-components` (DESIGN §16), not by the harness: `build` starts only
    /// etcd and prepares each controller's certificates and address;
    /// [`Cluster::start_k0s_control_plane`] starts the controllers, waits for every API
    /// server and applies `manifests/rbac/`.
    pub fn control_plane_run_by_k0s(mut self) -> Self {
        self.k0s_control_plane = true;
        self
    }

    /// A cluster for the test `test_name` (used in directory names and certificate subjects)
    /// with one controller and no workers.
    pub fn new(test_name: impl Into<String>) -> Self {
        Self {
            test_name: test_name.into(),
            controllers: 1,
            workers: Vec::new(),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            apiserver_args: Vec::new(),
            k0s_binary: None,
            controller_node_identities: false,
            without_rbac: Vec::new(),
            k0s_control_plane: false,
        }
    }

    /// Leave the file `manifests/rbac/<file>` (one of [`rbac::MANIFESTS`]) unapplied, as an
    /// installation that forgot it (e.g. `worker.yaml`: the workers may not read the Plan).
    /// `build` fails for a file that is not one of them.
    pub fn without_rbac(mut self, file: &str) -> Self {
        self.without_rbac.push(file.to_owned());
        self
    }

    /// Give every controller a node identity too (`system:node:controller-<i>` in
    /// `system:nodes`, [`Cluster::node_kubeconfig`]`("controller-<i>")`): for a kubelet on a
    /// controller+worker ([`crate::real_node`]), which registers the controller's Node as a
    /// kubelet does on any host.
    pub fn controller_node_identities(mut self) -> Self {
        self.controller_node_identities = true;
        self
    }

    /// Number of controllers, i.e. of kube-apiservers (at least 1; default 1). Controller `i`
    /// is named `controller-<i>` and its apiserver listens on 127.0.0.(2+i).
    pub fn controllers(mut self, count: usize) -> Self {
        self.controllers = count;
        self
    }

    /// Worker node names that get a node identity (`system:node:<name>` in `system:nodes`).
    pub fn workers(mut self, names: &[&str]) -> Self {
        self.workers = names.iter().map(|name| (*name).to_owned()).collect();
        self
    }

    /// How long to wait for each apiserver's `/readyz` (default [`DEFAULT_STARTUP_TIMEOUT`]).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// An extra kube-apiserver flag (`--name=value`), appended after the harness's own.
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// The k0s binary nodes of this cluster start with (copied into each node directory),
    /// instead of the default [`crate::k0s_binary`].
    pub fn k0s_binary(mut self, binary: impl AsRef<Path>) -> Self {
        self.k0s_binary = Some(binary.as_ref().to_path_buf());
        self
    }

    /// Starts etcd and the apiservers and waits until every apiserver is ready.
    ///
    /// Needs the cached control plane (`cargo xtask control-plane`). On failure everything
    /// started so far is killed again and the error carries the relevant log tail.
    pub async fn build(self) -> anyhow::Result<Cluster> {
        let Self {
            test_name,
            controllers,
            workers,
            startup_timeout,
            apiserver_args,
            k0s_binary,
            controller_node_identities,
            without_rbac,
            k0s_control_plane,
        } = self;
        ensure!(controllers >= 1, "a cluster needs at least one controller");
        check_worker_names(&workers)?;
        let binaries = control_plane::binaries()?;

        let dir = cluster_dir(&test_name)?;
        let root = dir.path().to_path_buf();
        let keep_dir = std::env::var(KEEP_TEST_DIRS_ENV).is_ok_and(|v| v == "1" || v == "true");

        // Identities and key material.
        let ca = pki::Ca::generate(&test_name)?;
        let pki_dir = root.join("pki");
        let ca_cert = write_key_material(&pki_dir, &ca)?;
        let tokens = Tokens::generate(controllers, &workers, controller_node_identities);
        fs::write(pki_dir.join("tokens.csv"), tokens.csv()?)?;

        let mut cluster = Cluster {
            name: test_name,
            root,
            dir: Some(dir),
            keep_dir,
            binaries,
            ca_pem: ca.cert_pem().to_owned(),
            ca_cert,
            admin_token: tokens.admin,
            viewer_token: tokens.viewer,
            controller_tokens: tokens.controllers,
            worker_tokens: tokens.workers,
            node_identities: tokens.node_identities,
            startup_timeout,
            etcd: Etcd {
                client_port: 0,
                peer_port: 0,
                slot: ProcessSlot::new(GroupRegistry::default()),
            },
            apiservers: Vec::new(),
            k0s_registry: GroupRegistry::default(),
            k0s_binary,
            real_nodes: None,
            k0s_control_plane: k0s_control_plane.then(|| without_rbac.clone()),
        };
        cluster.start_etcd().await?;
        for i in 0..controllers {
            cluster.add_apiserver(&ca, i, &apiserver_args)?;
        }
        if k0s_control_plane {
            for apiserver in &mut cluster.apiservers {
                apiserver.port = net::free_port(apiserver.ip)?;
            }
            cluster.write_kubeconfigs()?;
            return Ok(cluster);
        }
        // Start them all at once: startup is mostly waiting on etcd and on bootstrap hooks,
        // so overlapping it saves most of the wall time of a multi-controller cluster.
        let ports = futures::future::try_join_all(
            cluster.apiservers.iter().map(|apiserver| cluster.first_start(apiserver)),
        )
        .await?;
        for (apiserver, port) in cluster.apiservers.iter_mut().zip(ports) {
            apiserver.port = port;
        }
        cluster.write_kubeconfigs()?;
        cluster.apply_rbac(&without_rbac).await?;
        Ok(cluster)
    }
}

/// A running test control plane. Dropping it kills every process it started (etcd, the
/// apiservers, all k0s nodes, also leaked ones, and its real nodes) and deletes its directory
/// unless `K0S_KEEP_TEST_DIRS=1`.
///
/// Directory layout: `pki/` (CA, service-account keys, `tokens.csv`), `etcd/`,
/// `apiserver-<i>/` (serving cert, `kube-apiserver.log`), `kubeconfigs/`, `nodes/<node>/`.
#[derive(Debug)]
pub struct Cluster {
    name: String,
    root: PathBuf,
    dir: Option<tempfile::TempDir>,
    keep_dir: bool,
    binaries: Binaries,
    ca_pem: String,
    ca_cert: PathBuf,
    admin_token: String,
    viewer_token: String,
    controller_tokens: Vec<String>,
    worker_tokens: BTreeMap<String, String>,
    /// Every node identity: the workers' and, with
    /// [`ClusterBuilder::controller_node_identities`], the controllers'.
    node_identities: BTreeMap<String, String>,
    startup_timeout: Duration,
    etcd: Etcd,
    apiservers: Vec<ApiServer>,
    /// Process groups of the k0s nodes, killed when the cluster is dropped.
    k0s_registry: GroupRegistry,
    /// The binary new nodes start with; `None`: [`crate::k0s_binary`].
    k0s_binary: Option<PathBuf>,
    /// The real nodes of [`Cluster::start_real_nodes`], torn down with the cluster.
    real_nodes: Option<RealNodes>,
    /// With [`ClusterBuilder::control_plane_run_by_k0s`]: the files of `manifests/rbac/`
    /// [`Cluster::start_k0s_control_plane`] leaves out.
    k0s_control_plane: Option<Vec<String>>,
}

/// Refuses worker names that are not node names, look like a controller's, or repeat.
fn check_worker_names(workers: &[String]) -> anyhow::Result<()> {
    for (i, name) in workers.iter().enumerate() {
        ensure!(is_dns_label(name), "worker name {name:?} is not a valid node name");
        ensure!(!name.starts_with("controller-"), "worker name {name:?} looks like a controller");
        ensure!(!workers[..i].contains(name), "worker {name:?} is declared twice");
    }
    Ok(())
}

/// The cluster's temporary directory, named after the test (`k0s-it-<short name>-…`).
fn cluster_dir(test_name: &str) -> anyhow::Result<tempfile::TempDir> {
    let short_name: String = test_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
        .take(24)
        .collect();
    tempfile::Builder::new()
        .prefix(&format!("k0s-it-{short_name}-"))
        .tempdir()
        .context("creating the cluster directory")
}

/// Writes the CA (certificate and key) and the service-account key pair into `pki_dir`;
/// returns the CA certificate's path.
fn write_key_material(pki_dir: &Path, ca: &pki::Ca) -> anyhow::Result<PathBuf> {
    fs::create_dir_all(pki_dir)?;
    let ca_cert = pki_dir.join("ca.crt");
    fs::write(&ca_cert, ca.cert_pem())?;
    // The CA key, for tests that make client certificates as an operator would.
    let ca_key = pki_dir.join("ca.key");
    fs::write(&ca_key, ca.key_pem())?;
    fs::set_permissions(&ca_key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let (sa_private, sa_public) = pki::service_account_keys()?;
    fs::write(pki_dir.join("sa.key"), sa_private)?;
    fs::write(pki_dir.join("sa.pub"), sa_public)?;
    Ok(ca_cert)
}

/// The token of every identity of a new cluster.
struct Tokens {
    /// The admin's (`system:masters`).
    admin: String,
    /// The viewer's ([`VIEWER_GROUP`]).
    viewer: String,
    /// One per controller (the least-privilege controller identity).
    controllers: Vec<String>,
    /// One per worker, by name.
    workers: BTreeMap<String, String>,
    /// Every node identity (`system:node:<name>`): the workers' and, if asked for, the
    /// controllers'.
    node_identities: BTreeMap<String, String>,
}

impl Tokens {
    /// Fresh random tokens for `controllers` controllers and the named workers.
    fn generate(controllers: usize, workers: &[String], controller_node_identities: bool) -> Self {
        let admin = random_token();
        let viewer = random_token();
        let controller_tokens: Vec<String> = (0..controllers).map(|_| random_token()).collect();
        let worker_tokens: BTreeMap<String, String> =
            workers.iter().map(|name| (name.clone(), random_token())).collect();
        let mut node_identities = worker_tokens.clone();
        if controller_node_identities {
            node_identities
                .extend((0..controllers).map(|i| (format!("controller-{i}"), random_token())));
        }
        Self {
            admin,
            viewer,
            controllers: controller_tokens,
            workers: worker_tokens,
            node_identities,
        }
    }

    /// The apiserver's `--token-auth-file`: one line per identity.
    fn csv(&self) -> anyhow::Result<String> {
        let Self { admin, viewer, controllers, node_identities, .. } = self;
        let mut tokens_csv = format!("{admin},{ADMIN_USER},{ADMIN_USER},system:masters\n");
        // Controllers get the least-privilege identity of `manifests/rbac/`, not admin: a
        // verb missing there fails the test that needs it.
        for (i, token) in controllers.iter().enumerate() {
            let user = rbac::controller_user(i);
            writeln!(tokens_csv, "{token},{user},controller-{i},{}", rbac::CONTROLLER_GROUP)?;
        }
        for (name, token) in node_identities {
            writeln!(tokens_csv, "{token},system:node:{name},node-{name},system:nodes")?;
        }
        writeln!(tokens_csv, "{viewer},{VIEWER_USER},{VIEWER_USER},{VIEWER_GROUP}")?;
        Ok(tokens_csv)
    }
}

#[derive(Debug)]
struct Etcd {
    client_port: u16,
    peer_port: u16,
    slot: ProcessSlot,
}

#[derive(Debug)]
struct ApiServer {
    index: usize,
    ip: Ipv4Addr,
    /// Fixed after the first successful start; restarts reuse it.
    port: u16,
    dir: PathBuf,
    log: PathBuf,
    extra_args: Vec<String>,
    slot: ProcessSlot,
}

impl ApiServer {
    fn address(&self, port: u16) -> String {
        format!("{}:{port}", self.ip)
    }
}

impl Cluster {
    // --- accessors ---

    /// The test name the cluster was built for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cluster directory (see the type docs for its layout).
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// Number of controllers (apiservers).
    pub fn controllers(&self) -> usize {
        self.apiservers.len()
    }

    /// Whether node `name` has a node identity (a declared worker, or a controller with
    /// [`ClusterBuilder::controller_node_identities`]).
    pub fn has_node_identity(&self, name: &str) -> bool {
        self.node_identities.contains_key(name)
    }

    /// The declared worker names, sorted.
    pub fn workers(&self) -> Vec<&str> {
        self.worker_tokens.keys().map(String::as_str).collect()
    }

    /// The control-plane binaries in use.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// etcd's client URL (`http://127.0.0.1:PORT`).
    pub fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd.client_port)
    }

    /// `HOST:PORT` of apiserver `i`, e.g. `127.0.0.2:36125`.
    ///
    /// # Panics
    /// If there is no controller `i`.
    pub fn api_address(&self, i: usize) -> String {
        let apiserver = self.apiserver(i);
        apiserver.address(apiserver.port)
    }

    /// `https://HOST:PORT` of apiserver `i`.
    ///
    /// # Panics
    /// If there is no controller `i`.
    pub fn api_url(&self, i: usize) -> String {
        format!("https://{}", self.api_address(i))
    }

    /// The cluster CA certificate (PEM), which signed every apiserver's serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Path of the cluster CA certificate.
    pub fn ca_cert_path(&self) -> &Path {
        &self.ca_cert
    }

    /// Path of the cluster CA's private key (PKCS#8 PEM; the API servers trust client
    /// certificates it signs).
    pub fn ca_key_path(&self) -> PathBuf {
        self.ca_cert.with_file_name("ca.key")
    }

    /// The admin bearer token (user [`ADMIN_USER`], group `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The bearer token of worker `name` (`system:node:<name>`, group `system:nodes`).
    ///
    /// # Panics
    /// If `name` was not declared with [`ClusterBuilder::workers`].
    pub fn node_token(&self, name: &str) -> &str {
        self.worker_token(name)
    }

    /// The log file of apiserver `i`.
    ///
    /// # Panics
    /// If there is no controller `i`.
    pub fn apiserver_log_path(&self, i: usize) -> PathBuf {
        self.apiserver(i).log.clone()
    }

    // --- kubeconfigs and clients ---

    /// Kubeconfig of the admin identity against apiserver `i`.
    ///
    /// # Panics
    /// If there is no controller `i`.
    pub fn admin_kubeconfig(&self, i: usize) -> PathBuf {
        self.apiserver(i);
        self.kubeconfig_dir().join(format!("admin-{i}.kubeconfig"))
    }

    /// Kubeconfig of the viewer identity ([`VIEWER_USER`], only in group [`VIEWER_GROUP`],
    /// which nothing is bound to unless the test binds it) against apiserver `i`.
    ///
    /// # Panics
    /// If there is no controller `i`.
    pub fn viewer_kubeconfig(&self, i: usize) -> PathBuf {
        self.apiserver(i);
        self.kubeconfig_dir().join(format!("viewer-{i}.kubeconfig"))
    }

    /// Kubeconfig of controller `i`'s own identity ([`rbac::controller_user`]`(i)`, only in
    /// group [`rbac::CONTROLLER_GROUP`], so limited to `manifests/rbac/`) against apiserver
    /// `i`; what [`Cluster::spawn_controller`] uses.
    ///
    /// # Panics
    /// If there is no controller `i`.
    pub fn controller_kubeconfig(&self, i: usize) -> PathBuf {
        self.apiserver(i);
        self.kubeconfig_dir().join(format!("controller-{i}.kubeconfig"))
    }

    /// Kubeconfig of worker `name` (`system:node:<name>`) against apiserver 0.
    ///
    /// # Panics
    /// If `name` was not declared with [`ClusterBuilder::workers`].
    pub fn node_kubeconfig(&self, name: &str) -> PathBuf {
        self.node_kubeconfig_at(name, 0)
    }

    /// Kubeconfig of worker `name` against apiserver `i`.
    ///
    /// # Panics
    /// If `name` was not declared or there is no controller `i`.
    pub fn node_kubeconfig_at(&self, name: &str, i: usize) -> PathBuf {
        self.worker_token(name);
        self.apiserver(i);
        self.kubeconfig_dir().join(format!("node-{name}-{i}.kubeconfig"))
    }

    /// An admin client against apiserver 0.
    pub async fn admin_client(&self) -> anyhow::Result<kube::Client> {
        self.admin_client_at(0).await
    }

    /// An admin client against apiserver `i`.
    pub async fn admin_client_at(&self, i: usize) -> anyhow::Result<kube::Client> {
        self.check_index(i)?;
        client_from_kubeconfig(&self.admin_kubeconfig(i)).await
    }

    /// A client acting as `user` in `groups` against apiserver 0 (the admin impersonating
    /// them): it has exactly the rights the test grants that user or those groups.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> anyhow::Result<kube::Client> {
        crate::kubeconfig::impersonating_client(&self.admin_kubeconfig(0), user, groups).await
    }

    /// A client with controller `i`'s least-privilege identity against apiserver `i`.
    pub async fn controller_client(&self, i: usize) -> anyhow::Result<kube::Client> {
        self.check_index(i)?;
        client_from_kubeconfig(&self.controller_kubeconfig(i)).await
    }

    /// A client with worker `name`'s node identity against apiserver 0.
    pub async fn node_client(&self, name: &str) -> anyhow::Result<kube::Client> {
        self.node_client_at(name, 0).await
    }

    /// A client with worker `name`'s node identity against apiserver `i`.
    pub async fn node_client_at(&self, name: &str, i: usize) -> anyhow::Result<kube::Client> {
        self.check_index(i)?;
        ensure!(self.node_identities.contains_key(name), "node {name:?} has no node identity");
        client_from_kubeconfig(&self.node_kubeconfig_at(name, i)).await
    }

    // --- apiserver lifecycle ---

    /// Whether apiserver `i` is running.
    pub fn is_apiserver_running(&self, i: usize) -> bool {
        self.apiservers.get(i).is_some_and(|a| a.slot.is_running())
    }

    /// Stops apiserver `i` gracefully (SIGTERM; SIGKILL after 30 s) and waits for it to exit.
    pub async fn stop_apiserver(&self, i: usize) -> anyhow::Result<()> {
        self.check_index(i)?;
        let apiserver = &self.apiservers[i];
        if !apiserver.slot.is_running() {
            return Ok(());
        }
        apiserver.slot.signal(Signal::SIGTERM)?;
        if apiserver.slot.wait_exit(APISERVER_STOP_GRACE).await.is_err() {
            apiserver.slot.kill_group()?;
        }
        apiserver.slot.wait_exit(Duration::from_secs(10)).await?;
        Ok(())
    }

    /// Kills apiserver `i` (SIGKILL, like a crash) and waits for it to exit.
    pub async fn kill_apiserver(&self, i: usize) -> anyhow::Result<()> {
        self.check_index(i)?;
        let apiserver = &self.apiservers[i];
        apiserver.slot.kill_group()?;
        if apiserver.slot.pid().is_some() {
            apiserver.slot.wait_exit(Duration::from_secs(10)).await?;
        }
        Ok(())
    }

    /// Starts apiserver `i` again (same address, port, flags and certificates) and waits for
    /// `/readyz`. Fails if it is running.
    pub async fn start_apiserver(&self, i: usize) -> anyhow::Result<()> {
        self.check_index(i)?;
        let apiserver = &self.apiservers[i];
        ensure!(!apiserver.slot.is_running(), "apiserver {i} is already running");
        self.spawn_apiserver(apiserver, apiserver.port)?;
        self.await_ready(apiserver, apiserver.port).await
    }

    /// Waits until apiserver `i` answers `/readyz` with `ok` (admin token, CA-verified TLS).
    pub async fn wait_apiserver_ready(&self, i: usize) -> anyhow::Result<()> {
        self.check_index(i)?;
        let apiserver = &self.apiservers[i];
        self.await_ready(apiserver, apiserver.port).await
    }

    // --- a control plane run by k0s ---

    /// Whether `k0s controller --run-components` runs this cluster's API servers,
    /// controller-managers and schedulers ([`ClusterBuilder::control_plane_run_by_k0s`]).
    pub fn control_plane_run_by_k0s(&self) -> bool {
        self.k0s_control_plane.is_some()
    }

    /// [`Cluster::k0s_controller`] for controller `i` of a cluster whose control plane k0s
    /// runs: `--run-components` against the harness's etcd, with the certificates the
    /// harness made (copied into `<data-dir>/pki` under k0s's names), the admin identity for
    /// the controller-manager and the scheduler, and the harness's API server flags (token
    /// identities, no endpoint reconciler, no priority and fairness).
    pub fn k0s_controller_running_components(&self, i: usize) -> anyhow::Result<K0sCommand> {
        ensure!(self.control_plane_run_by_k0s(), "cluster {} runs its own API servers", self.name);
        self.check_index(i)?;
        let apiserver = &self.apiservers[i];
        let pki = self.root.join("pki");
        let node_pki = self.node_data_dir(&format!("controller-{i}")).join("pki");
        fs::create_dir_all(&node_pki)?;
        for (from, to) in [
            (pki.join("ca.crt"), "ca.crt"),
            (pki.join("ca.key"), "ca.key"),
            (pki.join("sa.key"), "sa.key"),
            (pki.join("sa.pub"), "sa.pub"),
            (apiserver.dir.join("serving.crt"), "server.crt"),
            (apiserver.dir.join("serving.key"), "server.key"),
        ] {
            fs::copy(&from, node_pki.join(to)).with_context(|| {
                format!("copying {} into {}", from.display(), node_pki.display())
            })?;
        }
        let mut apiserver_args = vec![
            format!("--token-auth-file={}", pki.join("tokens.csv").display()),
            "--endpoint-reconciler-type=none".to_owned(),
            "--enable-priority-and-fairness=false".to_owned(),
            "--profiling=false".to_owned(),
        ];
        apiserver_args.extend(apiserver.extra_args.iter().cloned());
        let admin = self.admin_kubeconfig(i);
        Ok(self
            .k0s_controller(i)
            .arg("--run-components")
            .arg(format!("--etcd-servers={}", self.etcd_url()))
            .arg(format!("--pki-dir={}", node_pki.display()))
            .arg(format!("--service-cidr={SERVICE_CLUSTER_IP_RANGE}"))
            .arg(format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"))
            .arg(format!("--controller-manager-kubeconfig={}", admin.display()))
            .arg(format!("--scheduler-kubeconfig={}", admin.display()))
            .arg(format!("--apiserver-extra-args={}", apiserver_args.join(" ")))
            // Several run on this one machine: no fixed ports; node health judged fast.
            .arg("--controller-manager-extra-args=--secure-port=0 --node-monitor-period=2s")
            .arg("--scheduler-extra-args=--secure-port=0"))
    }

    /// Starts every controller of a cluster whose control plane k0s runs
    /// ([`Cluster::k0s_controller_running_components`], each with `extra_args`), waits for
    /// each API server's `/readyz`, then applies `manifests/rbac/` (which the controllers'
    /// autopilot waits for). On failure the error carries the controllers' log tails.
    pub async fn start_k0s_control_plane(
        &self,
        extra_args: &[&str],
    ) -> anyhow::Result<Vec<K0sProcess>> {
        let commands = (0..self.apiservers.len())
            .map(|i| Ok(self.k0s_controller_running_components(i)?.args(extra_args)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        self.start_k0s_control_plane_with(commands).await
    }

    /// [`Cluster::start_k0s_control_plane`] with the controllers' commands as given (one per
    /// controller, in order, each from [`Cluster::k0s_controller_running_components`]).
    pub async fn start_k0s_control_plane_with(
        &self,
        commands: Vec<K0sCommand>,
    ) -> anyhow::Result<Vec<K0sProcess>> {
        let without_rbac = self
            .k0s_control_plane
            .clone()
            .with_context(|| format!("cluster {} runs its own API servers", self.name))?;
        ensure!(commands.len() == self.apiservers.len(), "one command per controller");
        let mut controllers = Vec::new();
        for command in commands {
            controllers.push(command.spawn().await?);
        }
        let ready = futures::future::try_join_all(
            self.apiservers.iter().map(|apiserver| self.await_ready(apiserver, apiserver.port)),
        )
        .await;
        if let Err(err) = ready {
            let mut message = format!("{err:#}");
            for controller in &controllers {
                let log = controller.data_dir().join("log").join("kube-apiserver.log");
                message.push_str(&format!(
                    "\n---- {} ----\n{}\n---- {} ----\n{}",
                    controller.log_path().display(),
                    controller.log_tail(ERROR_LOG_LINES),
                    log.display(),
                    tail(&log, ERROR_LOG_LINES)
                ));
            }
            bail!(message);
        }
        self.apply_rbac(&without_rbac).await?;
        Ok(controllers)
    }

    // --- real nodes ---

    /// Starts real nodes for `names` ([`RealNodes::start`]: a containerd and a kubelet each,
    /// and the cluster's controller-manager and scheduler) and keeps them with the cluster:
    /// dropping the cluster tears them down after its k0s nodes and before its API servers.
    /// Fails if the cluster has real nodes already.
    pub async fn start_real_nodes(&mut self, names: &[&str]) -> anyhow::Result<&RealNodes> {
        ensure!(self.real_nodes.is_none(), "cluster {} has real nodes already", self.name);
        let nodes = RealNodes::start(self, names).await?;
        Ok(self.real_nodes.insert(nodes))
    }

    /// [`RealNodes::start_mixed`] with this cluster, kept with it like
    /// [`Cluster::start_real_nodes`]: `harness` beside an agent alone, `k0s` run by `k0s
    /// worker --run-components` ([`RealNodes::k0s_worker`]).
    pub async fn start_real_nodes_mixed(
        &mut self,
        harness: &[&str],
        k0s: &[&str],
    ) -> anyhow::Result<&RealNodes> {
        ensure!(self.real_nodes.is_none(), "cluster {} has real nodes already", self.name);
        let nodes = RealNodes::start_mixed(self, harness, k0s).await?;
        Ok(self.real_nodes.insert(nodes))
    }

    /// The real nodes of [`Cluster::start_real_nodes`], if started.
    pub fn real_nodes(&self) -> Option<&RealNodes> {
        self.real_nodes.as_ref()
    }

    // --- k0s nodes ---

    /// A k0s controller for controller `i`, to configure further and [`K0sCommand::spawn`]:
    /// `k0s controller --enable-autopilot --kubeconfig <controller kubeconfig i> --data-dir
    /// <node dir>/data --node-name controller-<i> --api-address <api_address(i)>`.
    ///
    /// # Panics
    /// If there is no controller `i`.
    pub fn k0s_controller(&self, i: usize) -> K0sCommand {
        let node_name = format!("controller-{i}");
        let dir = self.node_dir(&node_name);
        let args: Vec<OsString> = vec![
            "controller".into(),
            "--enable-autopilot".into(),
            "--kubeconfig".into(),
            self.controller_kubeconfig(i).into(),
            "--data-dir".into(),
            dir.join("data").into(),
            "--node-name".into(),
            node_name.clone().into(),
            "--api-address".into(),
            self.api_address(i).into(),
        ];
        self.k0s_command(node_name, dir, args)
    }

    /// A k0s worker named `name`, to configure further and [`K0sCommand::spawn`]:
    /// `k0s worker --kubeconfig <node kubeconfig> --data-dir <node dir>/data --node-name <name>
    /// --register-node --register-node-schedulable`: a node without a kubelet, whose Node the
    /// process registers and keeps Ready itself. For a node with a kubelet see
    /// [`Cluster::k0s_worker_on_kubelet`] and [`crate::real_node`].
    ///
    /// # Panics
    /// If `name` was not declared with [`ClusterBuilder::workers`].
    pub fn k0s_worker(&self, name: &str) -> K0sCommand {
        self.k0s_worker_on_kubelet(name).args(["--register-node", "--register-node-schedulable"])
    }

    /// A k0s worker named `name` beside a kubelet that owns its Node (see
    /// [`crate::real_node`]), as `k0s worker` runs by default: `k0s worker --kubeconfig <node
    /// kubeconfig> --data-dir <node dir>/data --node-name <name>`, no `--register-node`.
    ///
    /// # Panics
    /// If `name` was not declared with [`ClusterBuilder::workers`].
    pub fn k0s_worker_on_kubelet(&self, name: &str) -> K0sCommand {
        let dir = self.node_dir(name);
        let args: Vec<OsString> = vec![
            "worker".into(),
            "--kubeconfig".into(),
            self.node_kubeconfig(name).into(),
            "--data-dir".into(),
            dir.join("data").into(),
            "--node-name".into(),
            name.into(),
        ];
        self.k0s_command(name.to_owned(), dir, args)
    }

    /// A k0s process for the node `name` (its directory, log and binary as for the others)
    /// with exactly `args` (the subcommand first): for starting a node as a unit file or an
    /// operator would, flag for flag. See [`Cluster::node_data_dir`].
    pub fn k0s_node<I, S>(&self, name: &str, args: I) -> K0sCommand
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let dir = self.node_dir(name);
        self.k0s_command(name.to_owned(), dir, args.into_iter().map(Into::into).collect())
    }

    /// The data directory the harness gives node `name` (`<node dir>/data`).
    pub fn node_data_dir(&self, name: &str) -> PathBuf {
        self.node_dir(name).join("data")
    }

    /// Starts controller `i`'s k0s with `extra_args`; see [`Cluster::k0s_controller`].
    pub async fn spawn_controller(
        &self,
        i: usize,
        extra_args: &[&str],
    ) -> anyhow::Result<crate::K0sProcess> {
        self.check_index(i)?;
        self.k0s_controller(i).args(extra_args).spawn().await
    }

    /// Starts worker `name`'s k0s with `extra_args`; see [`Cluster::k0s_worker`].
    pub async fn spawn_worker(
        &self,
        name: &str,
        extra_args: &[&str],
    ) -> anyhow::Result<crate::K0sProcess> {
        ensure!(self.worker_tokens.contains_key(name), "worker {name:?} was not declared");
        self.k0s_worker(name).args(extra_args).spawn().await
    }

    // --- internals ---

    fn apiserver(&self, i: usize) -> &ApiServer {
        match self.apiservers.get(i) {
            Some(apiserver) => apiserver,
            None => panic!("the cluster has {} controllers, not {}", self.apiservers.len(), i + 1),
        }
    }

    fn check_index(&self, i: usize) -> anyhow::Result<()> {
        ensure!(
            i < self.apiservers.len(),
            "the cluster has {} controllers, not {}",
            self.apiservers.len(),
            i + 1
        );
        Ok(())
    }

    fn worker_token(&self, name: &str) -> &str {
        match self.node_identities.get(name) {
            Some(token) => token,
            None => panic!(
                "worker {name:?} was not declared with ClusterBuilder::workers (have {:?})",
                self.workers()
            ),
        }
    }

    fn kubeconfig_dir(&self) -> PathBuf {
        self.root.join("kubeconfigs")
    }

    fn node_dir(&self, node_name: &str) -> PathBuf {
        self.root.join("nodes").join(node_name)
    }

    fn k0s_command(&self, node_name: String, dir: PathBuf, args: Vec<OsString>) -> K0sCommand {
        K0sCommand {
            node_name,
            dir,
            args,
            extra_args: Vec::new(),
            env: Vec::new(),
            binary: None,
            install_path: None,
            launch_link: None,
            default_binary: self.k0s_binary.clone(),
            registry: self.k0s_registry.clone(),
            metrics_address: None,
            netns: None,
        }
    }

    /// Applies `manifests/rbac/` but the files `without` as admin and waits until every
    /// apiserver enforces it.
    async fn apply_rbac(&self, without: &[String]) -> anyhow::Result<()> {
        let admin = self.admin_client().await?;
        rbac::apply_all_but(&admin, without)
            .await
            .with_context(|| format!("cluster {}", self.name))?;
        for i in 0..self.apiservers.len() {
            let admin = self.admin_client_at(i).await?;
            rbac::wait_authorized(&admin, i, self.startup_timeout).await?;
        }
        Ok(())
    }

    fn write_kubeconfigs(&self) -> anyhow::Result<()> {
        let dir = self.kubeconfig_dir();
        fs::create_dir_all(&dir)?;
        for i in 0..self.apiservers.len() {
            let server = self.api_url(i);
            let write = |path: PathBuf, user: &str, token: &str| {
                kubeconfig::write(&path, &self.name, &server, &self.ca_pem, user, token)
            };
            write(self.admin_kubeconfig(i), ADMIN_USER, &self.admin_token)?;
            write(self.viewer_kubeconfig(i), VIEWER_USER, &self.viewer_token)?;
            write(
                self.controller_kubeconfig(i),
                &rbac::controller_user(i),
                &self.controller_tokens[i],
            )?;
            for (name, token) in &self.node_identities {
                write(self.node_kubeconfig_at(name, i), &format!("system:node:{name}"), token)?;
            }
        }
        Ok(())
    }

    /// Adds apiserver `i` (not started): its directory with a serving certificate from
    /// `ca` for its address, and the extra flags.
    fn add_apiserver(
        &mut self,
        ca: &pki::Ca,
        i: usize,
        extra_args: &[String],
    ) -> anyhow::Result<()> {
        let ip = net::controller_ip(i)?;
        let serving = ca.serving_cert(ip)?;
        let dir = self.root.join(format!("apiserver-{i}"));
        fs::create_dir_all(&dir)?;
        fs::write(dir.join("serving.crt"), &serving.cert_pem)?;
        fs::write(dir.join("serving.key"), &serving.key_pem)?;
        self.apiservers.push(ApiServer {
            index: i,
            ip,
            port: 0,
            log: dir.join("kube-apiserver.log"),
            dir,
            extra_args: extra_args.to_vec(),
            slot: ProcessSlot::new(GroupRegistry::default()),
        });
        Ok(())
    }

    async fn start_etcd(&mut self) -> anyhow::Result<()> {
        let dir = self.root.join("etcd");
        fs::create_dir_all(&dir)?;
        let log = dir.join("etcd.log");
        for attempt in 1..=PORT_ATTEMPTS {
            let client_port = net::free_port(Ipv4Addr::LOCALHOST)?;
            let peer_port = net::free_port(Ipv4Addr::LOCALHOST)?;
            let client_url = format!("http://127.0.0.1:{client_port}");
            self.etcd.slot.start(&mut self.etcd_command(client_port, peer_port), &log)?;
            match wait_etcd_healthy(&self.etcd.slot, &client_url, &log, self.startup_timeout).await
            {
                Ok(()) => {
                    self.etcd.client_port = client_port;
                    self.etcd.peer_port = peer_port;
                    return Ok(());
                }
                Err(err) if attempt < PORT_ATTEMPTS && net::lost_port_race(&tail(&log, 20)) => {
                    eprintln!("integration: etcd lost a port race, retrying: {err:#}");
                    self.etcd.slot.kill_and_reap();
                }
                Err(err) => {
                    self.etcd.slot.kill_and_reap();
                    let name = &self.name;
                    bail!("etcd of cluster {name} did not start: {err:#}");
                }
            }
        }
        bail!("etcd could not get a port after {PORT_ATTEMPTS} attempts")
    }

    fn etcd_command(&self, client_port: u16, peer_port: u16) -> Command {
        let dir = self.root.join("etcd");
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut cmd = Command::new(&self.binaries.etcd);
        cmd.arg("--name=default")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=default={peer_url}"))
            .arg("--initial-cluster-state=new")
            .arg("--log-level=warn")
            // Test data is thrown away anyway, and fsync dominates etcd latency on CI disks.
            .arg("--unsafe-no-fsync");
        cmd
    }

    /// Restarts etcd under the API servers: SIGTERM (SIGKILL after 30 s), then the same
    /// ports and data again; returns once it is healthy. The API servers keep running and
    /// reconnect on their own.
    pub async fn restart_etcd(&self) -> anyhow::Result<()> {
        self.stop_etcd().await?;
        self.start_etcd_again().await
    }

    /// Stops etcd under the API servers (SIGTERM, SIGKILL after 30 s): they keep running and
    /// answer `/version`, but no request that needs the datastore succeeds until
    /// [`Cluster::start_etcd_again`].
    pub async fn stop_etcd(&self) -> anyhow::Result<()> {
        let slot = &self.etcd.slot;
        if slot.is_running() {
            slot.signal(Signal::SIGTERM)?;
            if slot.wait_exit(APISERVER_STOP_GRACE).await.is_err() {
                slot.kill_group()?;
            }
            slot.wait_exit(Duration::from_secs(10)).await?;
        }
        Ok(())
    }

    /// Starts etcd again after [`Cluster::stop_etcd`] (same ports and data); returns once it
    /// is healthy.
    pub async fn start_etcd_again(&self) -> anyhow::Result<()> {
        let slot = &self.etcd.slot;
        let log = self.root.join("etcd").join("etcd.log");
        slot.start(&mut self.etcd_command(self.etcd.client_port, self.etcd.peer_port), &log)?;
        wait_etcd_healthy(slot, &self.etcd_url(), &log, self.startup_timeout).await
    }

    /// The first start of an apiserver: picks a port, retrying on port races. Returns the port.
    async fn first_start(&self, apiserver: &ApiServer) -> anyhow::Result<u16> {
        for attempt in 1..=PORT_ATTEMPTS {
            let port = net::free_port(apiserver.ip)?;
            self.spawn_apiserver(apiserver, port)?;
            match self.await_ready(apiserver, port).await {
                Ok(()) => return Ok(port),
                Err(err)
                    if attempt < PORT_ATTEMPTS
                        && !apiserver.slot.is_running()
                        && net::lost_port_race(&tail(&apiserver.log, 20)) =>
                {
                    eprintln!(
                        "integration: apiserver {} lost a port race, retrying: {err:#}",
                        apiserver.index
                    );
                }
                Err(err) => {
                    apiserver.slot.kill_and_reap();
                    return Err(err);
                }
            }
        }
        bail!("apiserver {} could not get a port after {PORT_ATTEMPTS} attempts", apiserver.index)
    }

    fn spawn_apiserver(&self, apiserver: &ApiServer, port: u16) -> anyhow::Result<()> {
        let pki = self.root.join("pki");
        let ip = apiserver.ip;
        let mut cmd = Command::new(&self.binaries.kube_apiserver);
        cmd.arg(format!("--etcd-servers={}", self.etcd_url()))
            .arg(format!("--bind-address={ip}"))
            .arg(format!("--advertise-address={ip}"))
            .arg(format!("--secure-port={port}"))
            .arg(format!("--tls-cert-file={}", apiserver.dir.join("serving.crt").display()))
            .arg(format!("--tls-private-key-file={}", apiserver.dir.join("serving.key").display()))
            .arg(format!("--client-ca-file={}", self.ca_cert.display()))
            .arg(format!("--token-auth-file={}", pki.join("tokens.csv").display()))
            .arg("--authorization-mode=Node,RBAC")
            .arg("--enable-admission-plugins=NodeRestriction")
            // As k0s runs it: privileged Pods are allowed by the API server, so only Pod
            // Security (and our own checks) stand between a Pod and its node.
            .arg("--allow-privileged=true")
            .arg(format!("--service-account-key-file={}", pki.join("sa.pub").display()))
            .arg(format!("--service-account-signing-key-file={}", pki.join("sa.key").display()))
            .arg(format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"))
            .arg(format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"))
            // Several apiservers share one etcd but are not reachable as a Service: don't let
            // them fight over the `kubernetes` Endpoints.
            .arg("--endpoint-reconciler-type=none")
            // Saves startup work and CPU; the tests don't exercise API priority and fairness.
            .arg("--enable-priority-and-fairness=false")
            .arg("--profiling=false")
            .args(&apiserver.extra_args);
        apiserver.slot.start(&mut cmd, &apiserver.log)?;
        Ok(())
    }

    async fn await_ready(&self, apiserver: &ApiServer, port: u16) -> anyhow::Result<()> {
        let i = apiserver.index;
        let kubeconfig = kubeconfig::render(
            &self.name,
            &format!("https://{}", apiserver.address(port)),
            &self.ca_pem,
            ADMIN_USER,
            &self.admin_token,
        )?;
        let client = kubeconfig::client_from_yaml(&kubeconfig).await?;
        let what = format!("apiserver {i} at {} to be ready", apiserver.address(port));
        let result = wait_for(self.startup_timeout, &what, || {
            let client = client.clone();
            async move {
                if let Some(status) = apiserver.slot.exit_status() {
                    return Ok(Some(Err(anyhow::anyhow!("apiserver {i} exited ({status})"))));
                }
                let request = http::Request::get("/readyz").body(Vec::new())?;
                let body = client.request_text(request).await?;
                Ok((body.trim() == "ok").then_some(Ok(())))
            }
        })
        .await
        .and_then(|exited| exited);
        result.map_err(|err| {
            anyhow::anyhow!(
                "apiserver {i} of cluster {} did not become ready: {err:#}\nlast lines of {}:\n{}",
                self.name,
                apiserver.log.display(),
                tail(&apiserver.log, ERROR_LOG_LINES)
            )
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Nodes first (they talk to the apiservers): the k0s nodes, then the real nodes
        // (kubelets, containerds, controller-manager, scheduler); then the apiservers, then etcd.
        self.k0s_registry.kill_all();
        // What a SIGKILLed `k0s controller --run-components` leaves running (its API server,
        // controller-manager and scheduler run in process groups of their own, and from its
        // data directory).
        if self.control_plane_run_by_k0s() {
            for i in 0..self.apiservers.len() {
                let data = self.node_data_dir(&format!("controller-{i}"));
                let killed =
                    crate::real_node::host::kill_processes_mentioning(&data.to_string_lossy());
                if let Err(err) = killed {
                    eprintln!("integration: stopping what controller-{i} ran: {err:#}");
                }
            }
        }
        drop(self.real_nodes.take());
        for apiserver in &self.apiservers {
            apiserver.slot.kill_and_reap();
        }
        self.etcd.slot.kill_and_reap();
        let panicking = std::thread::panicking();
        if panicking {
            for apiserver in &self.apiservers {
                eprintln!(
                    "---- last lines of apiserver {} ({}) ----\n{}",
                    apiserver.index,
                    apiserver.log.display(),
                    tail(&apiserver.log, 15)
                );
            }
        }
        if let Some(dir) = self.dir.take() {
            if self.keep_dir {
                let path = dir.keep();
                eprintln!("integration: kept cluster directory {}", path.display());
            } else if panicking {
                eprintln!(
                    "integration: removing cluster directory {} (set {KEEP_TEST_DIRS_ENV}=1 to \
                     keep it)",
                    self.root.display()
                );
            }
        }
    }
}

/// Waits until etcd's `/health` says `"health":"true"`, or fails early if etcd exited.
async fn wait_etcd_healthy(
    slot: &ProcessSlot,
    client_url: &str,
    log: &Path,
    timeout: Duration,
) -> anyhow::Result<()> {
    let client = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let uri: http::Uri = format!("{client_url}/health").parse()?;
    let result = wait_for(timeout, &format!("etcd at {client_url} to be healthy"), || {
        let client = client.clone();
        let uri = uri.clone();
        async move {
            if let Some(status) = slot.exit_status() {
                return Ok(Some(Err(anyhow::anyhow!("etcd exited ({status})"))));
            }
            let response = client.get(uri).await?;
            let body = response.into_body().collect().await?.to_bytes();
            Ok(String::from_utf8_lossy(&body).contains(r#""health":"true""#).then_some(Ok(())))
        }
    })
    .await
    .and_then(|exited| exited);
    result.map_err(|err| {
        anyhow::anyhow!("{err:#}\nlast lines of {}:\n{}", log.display(), tail(log, ERROR_LOG_LINES))
    })
}

/// A random 32-hex-digit bearer token.
fn random_token() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `name` is a DNS-1123 label (what node names and our file names need).
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

impl ControlPlane for Cluster {
    fn dir(&self) -> &Path {
        Cluster::dir(self)
    }

    fn controllers(&self) -> usize {
        Cluster::controllers(self)
    }

    fn has_node_identity(&self, name: &str) -> bool {
        Cluster::has_node_identity(self, name)
    }

    fn api_address(&self, i: usize) -> String {
        Cluster::api_address(self, i)
    }

    fn ca_cert_path(&self) -> &Path {
        Cluster::ca_cert_path(self)
    }

    fn admin_kubeconfig(&self, i: usize) -> PathBuf {
        Cluster::admin_kubeconfig(self, i)
    }

    fn node_kubeconfig(&self, name: &str) -> PathBuf {
        Cluster::node_kubeconfig(self, name)
    }

    fn node_data_dir(&self, name: &str) -> PathBuf {
        Cluster::node_data_dir(self, name)
    }

    fn workload_controllers_run_by_k0s(&self) -> bool {
        self.control_plane_run_by_k0s()
    }

    fn etcd_address(&self) -> Option<std::net::SocketAddr> {
        self.control_plane_run_by_k0s()
            .then(|| std::net::SocketAddr::from(([127, 0, 0, 1], self.etcd.client_port)))
    }

    fn admin_client(&self) -> impl Future<Output = anyhow::Result<kube::Client>> + Send {
        Cluster::admin_client(self)
    }
}
