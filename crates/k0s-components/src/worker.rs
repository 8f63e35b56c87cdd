//! What `k0s worker --run-components` runs: containerd and the kubelet, from the staged
//! components, with the configuration generated here (pure functions of [`Layout`] and the
//! flags), supervised, the kubelet registering and owning the Node.
//!
//! Everything they write is under the data directory: containerd's root and state, the
//! kubelet's root and certificates, the generated configuration (`<data-dir>/etc/`), the
//! sockets and pid files (`<data-dir>/run/`) and the logs (`<data-dir>/log/`).

use std::{
    ffi::OsString,
    net::IpAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use autopilot_shell::health::Health;
use autopilot_shell::lifecycle::{Component, Env, Exit, Purpose, Running};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::{
    carried,
    health::{self, ComponentSeen, Seen},
    restart::Backoff,
    stage::{self, Staged},
    supervise::{Child, Supervised},
};

/// The components a worker runs, in the order they are staged.
pub const WORKER_COMPONENTS: [&str; 3] = ["containerd", "containerd-shim-runc-v2", "kubelet"];

/// The longest unix socket path (`sun_path` holds 108 bytes with the terminating zero).
const MAX_SOCKET_PATH: usize = 107;

/// How long containerd may take to answer on its socket at start.
const CONTAINERD_STARTUP: Duration = Duration::from_secs(60);

/// How long each component gets to stop after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(4);

/// The flags of `k0s worker` (and `k0s controller --enable-worker`) that set what
/// containerd and the kubelet need of the host, when `--run-components` runs them (each
/// requires it: the flag of the command they are part of).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct WorkerComponentArgs {
    /// The node's address, which the kubelet reports and serves on (its API and health
    /// port). Default: the kubelet's own choice, serving on every address.
    #[arg(long, value_name = "IP", requires = "run_components")]
    pub node_ip: Option<IpAddr>,

    /// The node's Pod subnet: `k0s` writes a bridge network for it (`bridge` and
    /// `host-local` CNI plugins) and containerd uses only that. Without it, containerd reads
    /// the networks in `--cni-conf-dir`.
    #[arg(long, value_name = "CIDR", requires = "run_components", value_parser = parse_ipv4_cidr)]
    pub pod_cidr: Option<String>,

    /// The bridge `--pod-cidr` puts the node's Pods on.
    #[arg(long, default_value = "k0s-br0", value_name = "NAME", requires = "pod_cidr")]
    pub cni_bridge: String,

    /// Where the CNI network configuration is (unless `--pod-cidr` is given).
    #[arg(long, default_value = "/etc/cni/net.d", value_name = "DIR")]
    pub cni_conf_dir: PathBuf,

    /// Where the CNI plugins are (Debian's `containernetworking-plugins` puts them here).
    #[arg(long, default_value = "/usr/lib/cni", value_name = "DIR")]
    pub cni_bin_dir: PathBuf,

    /// The OCI runtime containerd runs containers with (a path, or a name on `PATH`).
    #[arg(long, default_value = "runc", value_name = "PATH")]
    pub runc: PathBuf,

    /// The image every Pod sandbox runs.
    #[arg(long, default_value = "registry.k8s.io/pause:3.10.1", value_name = "IMAGE")]
    pub pause_image: String,

    /// The kubeconfig the kubelet uses: the Node's identity. Default: `--kubeconfig`.
    #[arg(long, value_name = "PATH", requires = "run_components")]
    pub kubelet_kubeconfig: Option<PathBuf>,

    /// Extra arguments for the kubelet, separated by spaces (they come after the ones `k0s`
    /// sets and win over them), e.g. `--kubelet-extra-args='--cgroup-root=/k0s --v=2'`.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true, requires = "run_components")]
    pub kubelet_extra_args: Option<String>,
}

fn parse_ipv4_cidr(text: &str) -> Result<String, String> {
    let (ip, bits) = text.split_once('/').ok_or("expected <IPv4>/<bits>, e.g. 10.244.0.0/24")?;
    ip.parse::<std::net::Ipv4Addr>().map_err(|err| format!("{ip:?}: {err}"))?;
    match bits.parse::<u8>() {
        Ok(bits) if (8..=30).contains(&bits) => Ok(text.to_owned()),
        _ => Err(format!("prefix length {bits:?} is not 8 to 30")),
    }
}

/// Where a node's components keep their files, all under the data directory.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The data directory.
    pub data_dir: PathBuf,
}

impl Layout {
    /// The staged components.
    pub fn bin_dir(&self) -> PathBuf {
        self.data_dir.join("bin")
    }
    /// The generated configuration.
    pub fn etc_dir(&self) -> PathBuf {
        self.data_dir.join("etc")
    }
    /// Sockets and pid files.
    pub fn run_dir(&self) -> PathBuf {
        self.data_dir.join("run")
    }
    /// The components' logs.
    pub fn log_dir(&self) -> PathBuf {
        self.data_dir.join("log")
    }
    /// containerd's root (images, snapshots, content).
    pub fn containerd_root(&self) -> PathBuf {
        self.data_dir.join("containerd")
    }
    /// containerd's state (tasks, network namespaces).
    pub fn containerd_state(&self) -> PathBuf {
        self.run_dir().join("containerd")
    }
    /// containerd's socket.
    pub fn containerd_socket(&self) -> PathBuf {
        self.run_dir().join("containerd.sock")
    }
    /// containerd's configuration.
    pub fn containerd_config(&self) -> PathBuf {
        self.etc_dir().join("containerd.toml")
    }
    /// The generated CNI network (with `--pod-cidr`).
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.etc_dir().join("net.d")
    }
    /// The kubelet's root directory.
    pub fn kubelet_root(&self) -> PathBuf {
        self.data_dir.join("kubelet")
    }
    /// The kubelet's configuration.
    pub fn kubelet_config(&self) -> PathBuf {
        self.etc_dir().join("kubelet.yaml")
    }
    /// The CA the kubelet trusts client certificates of.
    pub fn kubelet_client_ca(&self) -> PathBuf {
        self.etc_dir().join("kubelet-client-ca.crt")
    }
}

/// containerd's configuration (version 3): root, state and socket under the data
/// directory; the CNI plugins and networks; NRI off (it would listen on a machine-wide
/// socket); `restrict_oom_score_adj` (so a host whose bounding set lacks
/// `CAP_SYS_RESOURCE` still runs sandboxes); the streaming server on loopback only.
pub fn containerd_toml(layout: &Layout, args: &WorkerComponentArgs) -> String {
    let q = |path: &Path| toml_string(&path.to_string_lossy());
    let conf_dir = match args.pod_cidr {
        Some(_) => layout.cni_conf_dir(),
        None => args.cni_conf_dir.clone(),
    };
    let socket = layout.containerd_socket();
    format!(
        r#"version = 3
root = {root}
state = {state}
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = {socket}

[ttrpc]
  address = {ttrpc}

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = {pause}

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = {runc}
  Root = {runc_root}
  SystemdCgroup = false

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = [{cni_bin}]
  conf_dir = {conf_dir}
  max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#,
        root = q(&layout.containerd_root()),
        state = q(&layout.containerd_state()),
        socket = q(&socket),
        ttrpc = q(&socket.with_extension("ttrpc")),
        opt = q(&layout.containerd_root().join("opt")),
        pause = toml_string(&args.pause_image),
        runc = q(&args.runc),
        runc_root = q(&layout.run_dir().join("runc")),
        cni_bin = q(&args.cni_bin_dir),
        conf_dir = q(&conf_dir),
    )
}

/// The bridge network `--pod-cidr` asks for.
pub fn cni_conflist(layout: &Layout, bridge: &str, pod_cidr: &str) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "k0s-pod-network",
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "ipMasq": true,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "dataDir": layout.data_dir.join("cni-ipam"),
                "ranges": [[{ "subnet": pod_cidr }]],
            },
        }],
    })
    .to_string()
}

/// The kubelet's configuration: cgroupfs, containerd's socket, cgroup v1 accepted, served on
/// the node address when one is set; clients authenticate with a certificate of the cluster
/// CA or a token, and are authorized by the API server (webhooks).
pub fn kubelet_yaml(layout: &Layout, args: &WorkerComponentArgs) -> String {
    let socket = format!("unix://{}", layout.containerd_socket().display());
    let mut config = serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "readOnlyPort": 0,
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": false,
        "failSwapOn": false,
        "containerRuntimeEndpoint": socket,
        "imageServiceEndpoint": socket,
        "authentication": {
            "anonymous": { "enabled": false },
            "webhook": { "enabled": true },
            "x509": { "clientCAFile": layout.kubelet_client_ca() },
        },
        "authorization": { "mode": "Webhook" },
        "serializeImagePulls": false,
    });
    if let Some(ip) = args.node_ip {
        config["address"] = ip.to_string().into();
        config["healthzBindAddress"] = ip.to_string().into();
    }
    config.to_string()
}

/// The kubelet's command line (`--kubelet-extra-args` last, so they win).
pub fn kubelet_args(
    layout: &Layout,
    args: &WorkerComponentArgs,
    kubeconfig: &Path,
    node_name: &str,
) -> Vec<OsString> {
    let root = layout.kubelet_root();
    let mut out: Vec<OsString> = vec![
        format!("--config={}", layout.kubelet_config().display()).into(),
        format!("--kubeconfig={}", kubeconfig.display()).into(),
        format!("--root-dir={}", root.display()).into(),
        format!("--cert-dir={}", root.join("pki").display()).into(),
        format!("--hostname-override={node_name}").into(),
        // cAdvisor dials containerd's default socket unless told.
        format!("--containerd={}", layout.containerd_socket().display()).into(),
    ];
    if let Some(ip) = args.node_ip {
        out.push(format!("--node-ip={ip}").into());
    }
    if let Some(extra) = &args.kubelet_extra_args {
        out.extend(extra.split_whitespace().map(OsString::from));
    }
    out
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The worker's Kubernetes components as one component of the node process (see
/// `autopilot_shell::lifecycle`): its start stages them, writes their configuration and
/// starts containerd (up to its socket answering) and the kubelet; its run supervises them
/// until stopped; then it stops the kubelet, then containerd (running containers stay: their
/// shims hold them).
pub struct WorkerComponents {
    /// The flags.
    pub args: WorkerComponentArgs,
    /// The node's kubeconfig (the kubelet's identity too, unless `--kubelet-kubeconfig`).
    pub kubeconfig: PathBuf,
    /// The restart policy of each component.
    pub backoff: Backoff,
    /// Where it says whether they are healthy (the post-update watch reads it).
    pub health: Health,
}

impl Component for WorkerComponents {
    fn name(&self) -> &'static str {
        "containerd and kubelet"
    }

    /// A new binary's trial starts them too, and passes only once its kubelet runs the
    /// carried version and the Node is Ready.
    fn in_trial(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>> {
        Box::pin(async move {
            let layout = Layout { data_dir: absolute(&env.data_dir)? };
            let staged = stage_components(&layout, &WORKER_COMPONENTS).await?;
            write_config(&layout, &self.args, &env.config)?;
            let path_of = |name: &str| {
                staged
                    .iter()
                    .find(|s| s.name == name)
                    .map(|s| s.path.clone())
                    .context(name.to_owned())
            };
            let shim_dir = path_of("containerd-shim-runc-v2")?
                .parent()
                .map(Path::to_path_buf)
                .context("the shim has no directory")?;
            let search = search_path(&shim_dir);
            let child = |name: &'static str, program: PathBuf, args: Vec<OsString>| Child {
                name,
                program,
                args,
                env: vec![("PATH".into(), search.clone())],
                log_dir: layout.log_dir(),
                run_dir: layout.run_dir(),
                stop_grace: STOP_GRACE,
            };
            let containerd = Supervised::start(
                child(
                    "containerd",
                    path_of("containerd")?,
                    vec!["--config".into(), layout.containerd_config().into()],
                ),
                self.backoff,
            )
            .await?;
            if let Err(err) = wait_socket(&layout.containerd_socket(), &containerd).await {
                let lines = containerd.last_lines().join("\n");
                containerd.stop().await;
                bail!("{err:#}; last lines of containerd:\n{lines}");
            }
            let kubeconfig =
                absolute(self.args.kubelet_kubeconfig.as_deref().unwrap_or(&self.kubeconfig))?;
            let kubelet = Supervised::start(
                child(
                    "kubelet",
                    path_of("kubelet")?,
                    kubelet_args(&layout, &self.args, &kubeconfig, &env.node_name),
                ),
                self.backoff,
            )
            .await;
            let kubelet = match kubelet {
                Ok(kubelet) => kubelet,
                Err(err) => {
                    containerd.stop().await;
                    return Err(err);
                }
            };
            let carried =
                staged.iter().find(|s| s.name == "kubelet").and_then(|s| s.version.clone());
            let running = RunningWorker {
                kubelet,
                containerd,
                check: NodeCheck {
                    client: env.client.clone(),
                    node_name: env.node_name.clone(),
                    carried,
                    health: self.health.clone(),
                },
            };
            if env.purpose == Purpose::Trial {
                health::until_healthy(&running, &env.data_dir).await;
            }
            Ok(Box::new(running) as Box<dyn Running>)
        })
    }
}

/// The `PATH` containerd and the kubelet run with: the staged shim's directory first
/// (containerd finds its shim there), then this process's `PATH` or the usual one.
fn search_path(shim_dir: &Path) -> OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut search = OsString::from(shim_dir.as_os_str());
    search.push(":");
    search.push(if path.is_empty() {
        OsString::from("/usr/sbin:/usr/bin:/sbin:/bin")
    } else {
        path
    });
    search
}

/// Stages `names` into `<data-dir>/bin/` in the blocking pool, logging what staging did.
pub(crate) async fn stage_components(
    layout: &Layout,
    names: &'static [&'static str],
) -> anyhow::Result<Vec<Staged>> {
    let bin_dir = layout.bin_dir();
    let staged = tokio::task::spawn_blocking(move || {
        let (set, mut file) = carried::of_this_process()?;
        let path = std::env::var_os("PATH");
        stage::stage(set.as_ref(), &mut file, names, &bin_dir, path.as_deref())
    })
    .await
    .context("staging panicked")??;
    for s in &staged {
        info!(component = %s.name, path = %s.path.display(), version = s.version.as_deref().unwrap_or("(not carried)"), outcome = ?s.outcome, "staged");
    }
    Ok(staged)
}

/// Writes containerd's and the kubelet's configuration, the CNI network of `--pod-cidr`,
/// and the CA the kubelet trusts client certificates of (the cluster CA of the node's
/// kubeconfig).
fn write_config(
    layout: &Layout,
    args: &WorkerComponentArgs,
    config: &kube::Config,
) -> anyhow::Result<()> {
    let socket = layout.containerd_socket();
    ensure!(
        socket.as_os_str().len() + ".ttrpc".len() <= MAX_SOCKET_PATH,
        "containerd's socket {} is longer than a unix socket path may be ({MAX_SOCKET_PATH} \
         bytes): use a shorter --data-dir",
        socket.display()
    );
    for dir in [layout.etc_dir(), layout.run_dir(), layout.kubelet_root()] {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let roots = config.root_cert.as_deref().unwrap_or_default();
    ensure!(
        !roots.is_empty(),
        "the node's kubeconfig names no certificate authority; the kubelet needs the cluster \
         CA to trust client certificates"
    );
    let ca: String =
        roots.iter().map(|der| pem::encode(&pem::Pem::new("CERTIFICATE", der.clone()))).collect();
    write_if_changed(&layout.kubelet_client_ca(), &ca)?;
    write_if_changed(&layout.containerd_config(), &containerd_toml(layout, args))?;
    write_if_changed(&layout.kubelet_config(), &kubelet_yaml(layout, args))?;
    if let Some(cidr) = &args.pod_cidr {
        std::fs::create_dir_all(layout.cni_conf_dir())?;
        write_if_changed(
            &layout.cni_conf_dir().join("10-k0s.conflist"),
            &cni_conflist(layout, &args.cni_bridge, cidr),
        )?;
    }
    Ok(())
}

/// Writes `text` to `path` through a temporary file and a rename, unless it is there already.
fn write_if_changed(path: &Path, text: &str) -> anyhow::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let dir = path.parent().context("no directory")?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

/// Waits until containerd accepts connections on its socket (within [`CONTAINERD_STARTUP`]);
/// fails at once when it exited.
async fn wait_socket(socket: &Path, containerd: &Supervised) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + CONTAINERD_STARTUP;
    loop {
        if tokio::net::UnixStream::connect(socket).await.is_ok() {
            return Ok(());
        }
        if let Some(exit) = containerd.observed().last_exit {
            bail!("containerd exited ({exit}) before it answered on {}", socket.display());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "containerd did not answer on {} within {CONTAINERD_STARTUP:?}",
                socket.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How the worker's health is checked: its own Node, with its own credentials.
struct NodeCheck {
    client: kube::Client,
    node_name: String,
    /// The kubelet version the binary carries.
    carried: Option<String>,
    health: Health,
}

/// containerd and the kubelet, running.
struct RunningWorker {
    kubelet: Supervised,
    containerd: Supervised,
    check: NodeCheck,
}

impl health::Judged for RunningWorker {
    fn what(&self) -> &'static str {
        "containerd and the kubelet"
    }

    fn health(&self) -> &Health {
        &self.check.health
    }

    /// What the health check sees now.
    async fn seen(&self) -> Seen {
        let check = &self.check;
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
            kube::Api::all(check.client.clone());
        let (ready, version) = match nodes.get_opt(&check.node_name).await {
            Ok(Some(node)) => {
                let status = node.status.unwrap_or_default();
                let ready = status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let version = status.node_info.map(|info| info.kubelet_version);
                let ready = if ready {
                    Ok(())
                } else {
                    Err(format!("the Node {} is not Ready", check.node_name))
                };
                (ready, version)
            }
            Ok(None) => (Err(format!("the Node {} is not registered yet", check.node_name)), None),
            Err(err) => (Err(format!("cannot read the Node {}: {err}", check.node_name)), None),
        };
        Seen {
            components: vec![seen(&self.containerd), seen(&self.kubelet)],
            ready,
            versioned: "kubelet",
            version,
            carried: check.carried.clone(),
        }
    }
}

/// A supervised component as the health check sees it.
pub(crate) fn seen(component: &Supervised) -> ComponentSeen {
    let observed = component.observed();
    ComponentSeen {
        name: component.name(),
        running: observed.pid.is_some(),
        last_exit: observed.last_exit,
        last_lines: component.last_lines(),
    }
}

impl Running for RunningWorker {
    fn stop_unrun(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let Self { kubelet, containerd, check } = *self;
            check.health.set(false);
            kubelet.stop().await;
            containerd.stop().await;
        })
    }

    fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
        Box::pin(async move {
            health::judge_until(self.as_ref(), &stop).await;
            let Self { kubelet, containerd, check: _ } = *self;
            kubelet.stop().await;
            containerd.stop().await;
            Exit::Stopped
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> WorkerComponentArgs {
        WorkerComponentArgs {
            node_ip: Some("10.213.0.11".parse().unwrap()),
            pod_cidr: None,
            cni_bridge: "k0s-br0".into(),
            cni_conf_dir: "/etc/cni/net.d".into(),
            cni_bin_dir: "/usr/lib/cni".into(),
            runc: "/usr/sbin/runc".into(),
            pause_image: "localhost/pause:1".into(),
            kubelet_kubeconfig: None,
            kubelet_extra_args: Some("--cgroup-root=/k0s-it  --v=2".into()),
        }
    }

    fn layout() -> Layout {
        Layout { data_dir: "/var/lib/k0s".into() }
    }

    #[test]
    fn every_path_containerd_writes_is_under_the_data_directory() {
        let toml = containerd_toml(&layout(), &args());
        for key in ["root", "state", "address", "path", "Root"] {
            let line = toml
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{key} =")))
                .unwrap_or_else(|| panic!("no {key} in\n{toml}"));
            assert!(line.contains("\"/var/lib/k0s/"), "{line}");
        }
        assert!(toml.contains(r#"conf_dir = "/etc/cni/net.d""#));
        assert!(toml.contains(r#"sandbox = "localhost/pause:1""#));
        assert!(toml.contains("restrict_oom_score_adj = true"));
    }

    #[test]
    fn a_pod_cidr_gives_containerd_the_generated_network_only() {
        let mut args = args();
        args.pod_cidr = Some("10.244.3.0/24".into());
        let toml = containerd_toml(&layout(), &args);
        assert!(toml.contains(r#"conf_dir = "/var/lib/k0s/etc/net.d""#), "{toml}");
        let list: serde_json::Value =
            serde_json::from_str(&cni_conflist(&layout(), "k0s-br0", "10.244.3.0/24")).unwrap();
        assert_eq!(list["plugins"][0]["bridge"], "k0s-br0");
        assert_eq!(list["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], "10.244.3.0/24");
    }

    #[test]
    fn the_kubelet_serves_on_the_node_address_and_asks_the_api_server_who_may_call_it() {
        let config: serde_json::Value =
            serde_json::from_str(&kubelet_yaml(&layout(), &args())).unwrap();
        assert_eq!(config["address"], "10.213.0.11");
        assert_eq!(config["healthzBindAddress"], "10.213.0.11");
        assert_eq!(config["authorization"]["mode"], "Webhook");
        assert_eq!(config["authentication"]["anonymous"]["enabled"], false);
        assert_eq!(config["containerRuntimeEndpoint"], "unix:///var/lib/k0s/run/containerd.sock");
        let mut no_ip = args();
        no_ip.node_ip = None;
        let config: serde_json::Value =
            serde_json::from_str(&kubelet_yaml(&layout(), &no_ip)).unwrap();
        assert!(config.get("address").is_none());
    }

    #[test]
    fn extra_kubelet_arguments_come_last() {
        let args = kubelet_args(&layout(), &args(), Path::new("/etc/k0s/node.conf"), "worker-0");
        let args: Vec<String> = args.into_iter().map(|a| a.into_string().unwrap()).collect();
        assert_eq!(args[args.len() - 2..], ["--cgroup-root=/k0s-it", "--v=2"]);
        assert!(args.contains(&"--hostname-override=worker-0".to_owned()));
        assert!(args.contains(&"--node-ip=10.213.0.11".to_owned()));
        assert!(args.contains(&"--kubeconfig=/etc/k0s/node.conf".to_owned()));
    }

    #[test]
    fn a_pod_cidr_must_be_an_ipv4_subnet() {
        assert!(parse_ipv4_cidr("10.244.0.0/24").is_ok());
        for bad in ["10.244.0.0", "10.244.0/24", "10.244.0.0/31", "fd00::/64"] {
            assert!(parse_ipv4_cidr(bad).is_err(), "{bad}");
        }
    }
}
