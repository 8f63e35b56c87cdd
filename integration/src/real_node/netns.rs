//! The network namespace real nodes live in, and the forwarders that let them reach the API
//! servers.
//!
//! A kubelet refuses a loopback or link-local node address, and the harness never uses the
//! machine's own. So every set of real nodes gets a network namespace the harness creates
//! (`ip netns add`) and deletes: the node addresses are put on its loopback interface, the
//! nodes' bridges and Pods live in it, and nothing in it can reach any other address. The API
//! servers stay on the machine's loopback; for each one a [`Forwarder`] listens on the same
//! address and port inside the namespace (127.0.0.0/8 is the namespace's own loopback) and
//! connects each accepted connection to the real one. A kubelet's kubeconfig therefore is the
//! node kubeconfig every other test uses.

use std::{
    fs::File,
    net::{Ipv4Addr, SocketAddr},
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context as _, ensure};
use nix::sched::{CloneFlags, setns};

/// Where `ip netns` keeps the namespaces it names.
const NETNS_DIR: &str = "/run/netns";

/// A network namespace made by the harness; deleted when dropped.
#[derive(Debug)]
pub(crate) struct NetNs {
    name: String,
    deleted: bool,
}

impl NetNs {
    /// Creates the namespace `name` with its loopback up and `addresses` on it.
    pub(crate) fn create(name: &str, addresses: &[Ipv4Addr]) -> anyhow::Result<Self> {
        ip(&["netns", "add", name])?;
        let netns = Self { name: name.to_owned(), deleted: false };
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        for address in addresses {
            ip(&["-n", name, "address", "add", &format!("{address}/32"), "dev", "lo"])?;
        }
        Ok(netns)
    }

    /// The file that names the namespace (what `setns` and `nsenter --net=` take).
    pub(crate) fn path(&self) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(&self.name)
    }

    /// `program` run inside the namespace (through `nsenter --net`, which joins the network
    /// namespace only: mounts the program makes are the machine's, as containerd and the
    /// kubelet need to see each other's).
    pub(crate) fn command(&self, program: &std::path::Path) -> Command {
        let mut command = Command::new("nsenter");
        command.arg(format!("--net={}", self.path().display())).arg("--").arg(program);
        command
    }

    /// Deletes the namespace (its links go with it once nothing holds it).
    pub(crate) fn delete(&mut self) -> anyhow::Result<()> {
        if !self.deleted {
            ip(&["netns", "delete", &self.name])?;
            self.deleted = true;
        }
        Ok(())
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(err) = self.delete() {
            eprintln!("integration: deleting network namespace {}: {err:#}", self.name);
        }
    }
}

/// Whether the namespace `name` exists.
pub(crate) fn exists(name: &str) -> bool {
    PathBuf::from(NETNS_DIR).join(name).exists()
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    ensure!(
        output.status.success(),
        "ip {} failed ({}): {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// Forwards connections made inside a namespace to the same addresses on the machine's
/// loopback, on a thread of its own (so a test that blocks its runtime never stalls the
/// nodes' API traffic). Stops when dropped.
#[derive(Debug)]
pub(crate) struct Forwarder {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Where a forwarder connects to: the machine's loopback, or inside a namespace.
#[derive(Debug, Clone)]
enum Dial {
    Machine,
    Namespace(PathBuf),
}

impl Forwarder {
    /// Listens on each of `addresses` inside the namespace at `netns` and forwards to the
    /// same address outside.
    pub(crate) fn start(netns: &std::path::Path, addresses: &[SocketAddr]) -> anyhow::Result<Self> {
        let listeners = addresses
            .iter()
            .map(|address| listen_in(netns, *address))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Self::run(listeners, Dial::Machine)
    }

    /// The other way: listens on each of `addresses` on the machine's loopback and forwards
    /// to the same address inside the namespace at `netns` (a service a node serves there,
    /// such as its metrics, for the tests to reach).
    pub(crate) fn start_outward(
        netns: &std::path::Path,
        addresses: &[SocketAddr],
    ) -> anyhow::Result<Self> {
        let listeners = addresses
            .iter()
            .map(|address| {
                let listener = std::net::TcpListener::bind(address)
                    .with_context(|| format!("binding {address} on the machine"))?;
                listener.set_nonblocking(true)?;
                Ok((listener, *address))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Self::run(listeners, Dial::Namespace(netns.to_path_buf()))
    }

    fn run(
        listeners: Vec<(std::net::TcpListener, SocketAddr)>,
        dial: Dial,
    ) -> anyhow::Result<Self> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("netns-forwarder".to_owned())
            .spawn(move || {
                let runtime =
                    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        Ok(runtime) => runtime,
                        Err(err) => {
                            eprintln!("integration: forwarder runtime: {err}");
                            return;
                        }
                    };
                runtime.block_on(async move {
                    let mut tasks = tokio::task::JoinSet::new();
                    for (listener, target) in listeners {
                        tasks.spawn(forward(listener, target, dial.clone()));
                    }
                    let _ = stopped.await;
                    tasks.abort_all();
                });
            })
            .context("starting the forwarder thread")?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A listener bound to `address` inside the namespace at `netns`: a short-lived thread joins
/// the namespace (only that thread changes namespace), binds, and hands the socket back.
fn listen_in(
    netns: &std::path::Path,
    address: SocketAddr,
) -> anyhow::Result<(std::net::TcpListener, SocketAddr)> {
    let file = File::open(netns).with_context(|| format!("opening {}", netns.display()))?;
    let listener = std::thread::scope(|scope| {
        scope
            .spawn(|| -> anyhow::Result<std::net::TcpListener> {
                setns(&file, CloneFlags::CLONE_NEWNET).context("joining the network namespace")?;
                let listener = std::net::TcpListener::bind(address)
                    .with_context(|| format!("binding {address} in the namespace"))?;
                listener.set_nonblocking(true)?;
                Ok(listener)
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the thread binding {address} panicked"))?
    })?;
    Ok((listener, address))
}

async fn forward(listener: std::net::TcpListener, target: SocketAddr, dial: Dial) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("integration: forwarder for {target}: {err}");
            return;
        }
    };
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else { continue };
        let dial = dial.clone();
        connections.spawn(async move {
            // An API server that is down (a test stopped it) refuses: so does the forwarder,
            // by closing the connection.
            if let Ok(mut outbound) = connect(&dial, target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

/// A connection to `target` on the side `dial` names. Inside a namespace, a short-lived
/// thread joins it (only that thread changes namespace) and connects: the socket stays in
/// the namespace it was made in.
async fn connect(dial: &Dial, target: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let netns = match dial {
        Dial::Machine => return tokio::net::TcpStream::connect(target).await,
        Dial::Namespace(netns) => netns.clone(),
    };
    let (sent, received) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("netns-dial".to_owned()).spawn(move || {
        let connected = File::open(&netns).and_then(|file| {
            setns(&file, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            std::net::TcpStream::connect_timeout(&target, std::time::Duration::from_secs(5))
        });
        let _ = sent.send(connected);
    })?;
    let stream = received.await.map_err(std::io::Error::other)??;
    stream.set_nonblocking(true)?;
    tokio::net::TcpStream::from_std(stream)
}

/// The address of real node `index` inside its set's namespace: `10.213.0.<11+index>` (each
/// set has its own namespace, so sets may share addresses).
pub(crate) fn node_ip(index: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 213, 0, 11 + index)
}
