//! Real `k0s` node processes: where the binary comes from, how a node is started, and the
//! [`K0sProcess`] handle tests use to stop, crash, restart and read a node.

use std::{
    collections::BTreeMap,
    ffi::{OsStr, OsString},
    fs,
    io::{Read as _, Seek as _, SeekFrom},
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Output, Stdio},
    sync::{Mutex, OnceLock},
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use nix::sys::signal::Signal;
use std::os::unix::process::CommandExt as _;

use crate::process::{GroupRegistry, KillWhen, ProcessSlot, tail};

/// Environment variable naming a prebuilt k0s binary; when unset the harness builds one.
pub const K0S_BIN_ENV: &str = "K0S_BIN";

/// How long [`run_k0s`] lets a command run before killing it.
pub const RUN_K0S_TIMEOUT: Duration = Duration::from_secs(60);

/// Lines of a node's log printed to stderr when its handle is dropped during a panic.
const PANIC_LOG_LINES: usize = 60;

/// The k0s binary under test: `$K0S_BIN` if set, otherwise `cargo build -p k0s --bin k0s` of
/// this workspace (default `K0S_VERSION`), built once per test process.
///
/// Blocks while cargo builds; the outcome (also a failure) is cached for the process.
pub fn k0s_binary() -> anyhow::Result<PathBuf> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let cached = BINARY.get_or_init(|| {
        if let Some(path) = std::env::var_os(K0S_BIN_ENV).filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(format!("{K0S_BIN_ENV}={} is not a file", path.display()))
            };
        }
        cargo_build_k0s(None, None).map_err(|err| format!("{err:#}"))
    });
    cached.clone().map_err(anyhow::Error::msg)
}

/// A k0s binary that reports `version` (built with `K0S_VERSION=<version>`), for upgrade tests.
///
/// Built once per version and test process, in the separate target directory
/// `<target>/k0s-versions` so it never disturbs the default build, then copied to
/// `<target>/k0s-versions/bin/<version>/k0s` and checked with `k0s version`. The first call
/// compiles the dependencies a second time (a few minutes); later ones only the k0s crate.
pub fn k0s_binary_with_version(version: &str) -> anyhow::Result<PathBuf> {
    static BY_VERSION: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut by_version = BY_VERSION.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = by_version.get(version) {
        return Ok(path.clone());
    }
    ensure!(
        !version.is_empty() && !version.contains(['/', '\0']) && version != "." && version != "..",
        "{version:?} cannot be used as a version"
    );
    let target_dir = versions_target_dir()?;
    let dest_dir = target_dir.join("bin").join(version);
    fs::create_dir_all(&dest_dir)?;
    let dest = dest_dir.join("k0s");
    // Other test processes may build another version in the same target directory at the same
    // time; a copy that reports the wrong version lost that race and is built again.
    for _ in 0..3 {
        let built = cargo_build_k0s(Some(version), Some(&target_dir))?;
        copy_atomically(&built, &dest)?;
        let reported = run_k0s_binary(&dest, &["version"], RUN_K0S_TIMEOUT)?;
        if String::from_utf8_lossy(&reported.stdout).contains(version) {
            by_version.insert(version.to_owned(), dest.clone());
            return Ok(dest);
        }
    }
    bail!("built k0s with K0S_VERSION={version}, but `k0s version` keeps reporting another version")
}

/// Runs the k0s binary under test once with `args` and returns its output. The command gets
/// [`RUN_K0S_TIMEOUT`]; after that it is killed and this fails, showing what it printed.
pub fn run_k0s(args: &[&str]) -> anyhow::Result<Output> {
    run_k0s_binary(&k0s_binary()?, args, RUN_K0S_TIMEOUT)
}

/// Runs `binary` with `args`, killing it after `timeout`.
pub fn run_k0s_binary(binary: &Path, args: &[&str], timeout: Duration) -> anyhow::Result<Output> {
    let mut cmd = Command::new(binary);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("NO_COLOR", "1")
        .process_group(0);
    // A binary written a moment ago may be busy (ETXTBSY) for an instant: another thread of
    // a test process that forked meanwhile holds a copy of its write descriptor until that
    // child execs (close-on-exec). Spawning again soon succeeds.
    let busy_until = std::time::Instant::now() + Duration::from_secs(2);
    let child = loop {
        match cmd.spawn() {
            Err(err)
                if err.raw_os_error() == Some(nix::errno::Errno::ETXTBSY as i32)
                    && std::time::Instant::now() < busy_until =>
            {
                std::thread::yield_now();
            }
            spawned => break spawned.with_context(|| format!("starting {cmd:?}"))?,
        }
    };
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(output) => Ok(output.with_context(|| format!("waiting for {cmd:?}"))?),
        Err(_) => {
            // The waiting thread has not reaped the child, so the pid is still ours.
            let _ = nix::sys::signal::killpg(pid, Signal::SIGKILL);
            let output = rx.recv().context("the waiting thread vanished")??;
            bail!(
                "{cmd:?} did not finish within {timeout:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        }
    }
}

/// The workspace this crate belongs to.
fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// `$CARGO_TARGET_DIR` or `<workspace>/target`.
pub(crate) fn target_dir() -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => workspace_root().join("target"),
    };
    Ok(if dir.is_absolute() { dir } else { workspace_root().join(dir) })
}

/// `cargo build -p k0s --bin k0s`, returning the executable cargo reports.
fn cargo_build_k0s(version: Option<&str>, target_dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    cargo_build_k0s_with(version, target_dir, &[])
}

/// The target directory of the builds that report another version than the default
/// ([`k0s_binary_with_version`], `cargo xtask dist`): `<target>/k0s-versions`, so that
/// setting `K0S_VERSION` never makes the default build's k0s crate stale.
pub(crate) fn versions_target_dir() -> anyhow::Result<PathBuf> {
    Ok(target_dir()?.join("k0s-versions"))
}

/// `cargo build -p k0s --bin k0s <extra>` (e.g. `--profile release --target <triple>`),
/// returning the executable cargo reports.
pub(crate) fn cargo_build_k0s_with(
    version: Option<&str>,
    target_dir: Option<&Path>,
    extra: &[&str],
) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(OsString::from))
        .unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "-p", "k0s", "--bin", "k0s", "--message-format=json-render-diagnostics"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    match version {
        Some(version) => cmd.env("K0S_VERSION", version),
        None => cmd.env_remove("K0S_VERSION"),
    };
    if let Some(target_dir) = target_dir {
        cmd.env("CARGO_TARGET_DIR", target_dir);
    }
    eprintln!("integration: building k0s ({cmd:?})");
    let output = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(output.status.success(), "{cmd:?} failed: {}", output.status);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let executable = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| message["target"]["name"] == "k0s")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from));
    executable.with_context(|| format!("{cmd:?} reported no k0s executable"))
}

/// Copies `from` to `to` via a temporary file and a rename, so a running `to` is never
/// written to (that would fail with ETXTBSY) and readers never see half a binary.
pub(crate) fn copy_atomically(from: &Path, to: &Path) -> anyhow::Result<()> {
    let file_name = to.file_name().context("destination has no file name")?.to_string_lossy();
    let tmp = to.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    fs::copy(from, &tmp)
        .with_context(|| format!("copying {} to {}", from.display(), tmp.display()))?;
    fs::rename(&tmp, to).with_context(|| format!("moving {} to {}", tmp.display(), to.display()))
}

// === impl K0sCommand ===

/// A k0s node process about to be started; made by [`crate::Cluster::k0s_controller`] and
/// [`crate::Cluster::k0s_worker`], started with [`K0sCommand::spawn`].
///
/// The node's directory is `<cluster dir>/nodes/<node name>/` with the binary copy `k0s`, the
/// data dir `data/` and the log `k0s.log`. Spawning the same node again (after dropping the
/// old handle) reuses that directory and keeps the binary that is in it, like a machine
/// rebooting into whatever was installed; [`K0sCommand::binary`] replaces it explicitly.
#[derive(Debug)]
#[must_use = "a K0sCommand does nothing until spawned"]
pub struct K0sCommand {
    pub(crate) node_name: String,
    pub(crate) dir: PathBuf,
    /// The subcommand and its fixed flags (everything before the extra arguments).
    pub(crate) args: Vec<OsString>,
    pub(crate) extra_args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) binary: Option<PathBuf>,
    /// Where the binary is installed instead of `<node dir>/k0s` ([`K0sCommand::install_at`]).
    pub(crate) install_path: Option<PathBuf>,
    /// A symlink to the installed binary that the process is started through.
    pub(crate) launch_link: Option<PathBuf>,
    /// What a node without a binary gets ([`crate::ClusterBuilder::k0s_binary`]).
    pub(crate) default_binary: Option<PathBuf>,
    pub(crate) registry: GroupRegistry,
    /// The `--metrics-address` passed ([`K0sCommand::with_metrics`]).
    pub(crate) metrics_address: Option<std::net::SocketAddr>,
    /// The network namespace the process runs in ([`K0sCommand::in_network_namespace`]).
    pub(crate) netns: Option<PathBuf>,
}

impl K0sCommand {
    /// Runs the process (and every restart of it) inside the network namespace at `path`
    /// (`/run/netns/<name>`), through `nsenter`, which executes k0s in its place (same pid).
    pub fn in_network_namespace(mut self, path: impl Into<PathBuf>) -> Self {
        self.netns = Some(path.into());
        self
    }

    /// The data directory the process gets (`<node dir>/data`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// Serves the node's metrics on a free loopback port: passes `--metrics-address
    /// 127.0.0.1:<port>` (kept across restarts, so a re-executed node serves on the same
    /// address); [`K0sProcess::metrics_address`] tells where, [`crate::metrics::scrape`]
    /// reads them.
    pub fn with_metrics(mut self) -> anyhow::Result<Self> {
        let ip = std::net::Ipv4Addr::LOCALHOST;
        let address = std::net::SocketAddr::from((ip, crate::net::free_port(ip)?));
        self.extra_args.push("--metrics-address".into());
        self.extra_args.push(address.to_string().into());
        self.metrics_address = Some(address);
        Ok(self)
    }

    /// Appends one extra argument (after the harness's own flags).
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.extra_args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends extra arguments (after the harness's own flags).
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.extra_args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable for the process (also on every restart).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Installs a copy of `binary` as this node's k0s, replacing whatever the node had,
    /// instead of the default [`k0s_binary`].
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Installs the binary at `path` (any directory, any file name; created if missing)
    /// instead of `<node dir>/k0s`, as an operator might put it under `/opt/...`.
    pub fn install_at(mut self, path: impl Into<PathBuf>) -> Self {
        self.install_path = Some(path.into());
        self
    }

    /// Starts the process through a symlink at `link` pointing to the installed binary (as
    /// `/usr/local/bin/k0s -> /opt/k0s/bin/k0s`); created or replaced on spawn.
    pub fn launch_via_symlink(mut self, link: impl Into<PathBuf>) -> Self {
        self.launch_link = Some(link.into());
        self
    }

    /// Prepares the node directory and starts the process.
    pub async fn spawn(self) -> anyhow::Result<K0sProcess> {
        let Self {
            node_name,
            dir,
            args,
            extra_args,
            env,
            binary,
            install_path,
            launch_link,
            default_binary,
            registry,
            metrics_address,
            netns,
        } = self;
        let data_dir = dir.join("data");
        fs::create_dir_all(&data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let installed = install_path.unwrap_or_else(|| dir.join("k0s"));
        if let Some(parent) = installed.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let source = match (binary, default_binary) {
            (Some(explicit), _) => Some(explicit),
            (None, _) if installed.is_file() => None,
            (None, Some(default)) => Some(default),
            (None, None) => Some(tokio::task::spawn_blocking(k0s_binary).await??),
        };
        if let Some(source) = source {
            copy_atomically(&source, &installed)?;
        }
        if let Some(link) = &launch_link {
            if let Some(parent) = link.parent() {
                fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            let _ = fs::remove_file(link);
            std::os::unix::fs::symlink(&installed, link).with_context(|| {
                format!("linking {} to {}", link.display(), installed.display())
            })?;
        }
        let mut all_args = args;
        all_args.extend(extra_args);
        // A controller that is also a worker registers its Node itself, as `Cluster::k0s_worker`
        // does, unless the test says otherwise (`--register-node=false` beside a real kubelet).
        let enable_worker = all_args.iter().any(|a| a == "--enable-worker");
        if enable_worker
            && !all_args.iter().any(|a| a.to_string_lossy().starts_with("--register-node"))
        {
            all_args.extend(["--register-node".into(), "--register-node-schedulable".into()]);
        }
        let process = K0sProcess {
            node_name,
            log_path: dir.join("k0s.log"),
            launch: launch_link.unwrap_or_else(|| installed.clone()),
            binary: installed,
            data_dir,
            dir,
            args: all_args,
            env,
            slot: ProcessSlot::new(registry),
            metrics_address,
            netns,
        };
        process.start()?;
        Ok(process)
    }
}

// === impl K0sProcess ===

/// A position in a node's log; see [`K0sProcess::log_mark`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogMark(u64);

/// A running (or exited) k0s node process started by the harness.
///
/// Dropping it SIGKILLs the process group and reaps it; during a panic it also prints the
/// tail of the node's log to stderr. The node directory is owned by the cluster and removed
/// with it.
#[derive(Debug)]
pub struct K0sProcess {
    node_name: String,
    dir: PathBuf,
    binary: PathBuf,
    /// What is executed: the binary, or a symlink to it.
    launch: PathBuf,
    data_dir: PathBuf,
    log_path: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    slot: ProcessSlot,
    metrics_address: Option<std::net::SocketAddr>,
    netns: Option<PathBuf>,
}

impl K0sProcess {
    fn start(&self) -> anyhow::Result<()> {
        self.start_with(&[])
    }

    /// Starts the process with `extra` in its environment too.
    fn start_with(&self, extra: &[(OsString, OsString)]) -> anyhow::Result<()> {
        let mut cmd = match &self.netns {
            Some(netns) => {
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--net={}", netns.display())).arg("--").arg(&self.launch);
                cmd
            }
            None => Command::new(&self.launch),
        };
        cmd.args(&self.args).current_dir(&self.dir).env_remove("KUBECONFIG").env("NO_COLOR", "1");
        let rust_log = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned());
        let k0s_log = std::env::var("K0S_LOG").unwrap_or_else(|_| rust_log.clone());
        cmd.env("RUST_LOG", rust_log).env("K0S_LOG", k0s_log);
        cmd.envs(self.env.iter().chain(extra).map(|(k, v)| (k, v)));
        self.slot.start(&mut cmd, &self.log_path)?;
        Ok(())
    }

    /// Where the node serves its metrics, if it was started [`K0sCommand::with_metrics`].
    pub fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        self.metrics_address
    }

    /// The node name (`controller-<i>` or the worker's name).
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The pid of the current process (or of the last one, once it exited).
    pub fn pid(&self) -> u32 {
        self.slot.pid().unwrap_or_default()
    }

    /// Whether the process is running right now.
    pub fn is_running(&self) -> bool {
        self.slot.is_running()
    }

    /// The exit status, if the process has exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.slot.exit_status()
    }

    /// Sends SIGTERM to the process (a graceful stop). Fails if it is not running.
    pub fn terminate(&self) -> anyhow::Result<()> {
        self.signal(Signal::SIGTERM)
    }

    /// Sends `signal` to the process. Fails if it is not running.
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        self.slot.signal(signal).with_context(|| format!("signalling {}", self.node_name))
    }

    /// SIGKILLs the process and everything in its process group (a crash). Succeeds (doing
    /// nothing) if it already exited. Use [`K0sProcess::wait_exit`] to reap it.
    pub fn kill(&self) -> anyhow::Result<()> {
        self.slot.kill_group().with_context(|| format!("killing {}", self.node_name))
    }

    /// Arms a crash at an exact point: the process's main thread is traced (ptrace(2)) and
    /// the process group is SIGKILLed at the first of its system-call stops at which
    /// `condition` holds, i.e. right after the system call that made it true. Returns once
    /// the trace is in place; [`KillWhen::wait`] waits for the kill. Until then the handle
    /// does not reap the process ([`K0sProcess::is_running`] stays true).
    pub fn kill_when(
        &self,
        condition: impl FnMut() -> bool + Send + 'static,
    ) -> anyhow::Result<KillWhen> {
        self.slot
            .kill_group_when(condition)
            .with_context(|| format!("arming a kill of {}", self.node_name))
    }

    /// Waits for the process to exit and returns its status; fails after `timeout`.
    pub async fn wait_exit(&self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        self.slot.wait_exit(timeout).await.with_context(|| {
            format!("waiting for {} to exit; log tail:\n{}", self.node_name, self.log_tail(30))
        })
    }

    /// Stops the process: SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop(&self, grace: Duration) -> anyhow::Result<ExitStatus> {
        if self.is_running() {
            self.terminate()?;
            if let Ok(status) = self.slot.wait_exit(grace).await {
                return Ok(status);
            }
            self.kill()?;
        }
        self.wait_exit(Duration::from_secs(10)).await
    }

    /// Starts the same command again after the process exited, like a supervisor would: same
    /// arguments and environment, and whatever binary file is in the node directory now (the
    /// node agent may have replaced it). Fails if the process is still running.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            bail!(
                "{} is still running (pid {}); stop or kill it first",
                self.node_name,
                self.pid()
            );
        }
        self.start()
    }

    /// The node's k0s binary (the file the node agent replaces on update).
    pub fn binary_path(&self) -> &Path {
        &self.binary
    }

    /// The node's `--data-dir`.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The node directory (binary, data dir and log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log file (stdout and stderr of every start, each run introduced by a
    /// `==== harness: starting ...` line).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole log, across restarts.
    pub fn log(&self) -> String {
        fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The log written after `mark` (see [`K0sProcess::log_mark`]).
    pub fn log_after(&self, mark: LogMark) -> String {
        let mut bytes = Vec::new();
        if let Ok(mut file) = fs::File::open(&self.log_path)
            && file.seek(SeekFrom::Start(mark.0)).is_ok()
        {
            let _ = file.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path, lines)
    }

    /// The current end of the log, to wait only for lines written after this point with
    /// [`K0sProcess::wait_for_log_after`] (e.g. taken just before a restart).
    pub fn log_mark(&self) -> LogMark {
        LogMark(fs::metadata(&self.log_path).map(|m| m.len()).unwrap_or(0))
    }

    /// Waits until a log line contains `pattern` (anywhere in the log) and returns that line.
    /// Fails after `timeout`, or early if the process exits first, showing the log tail.
    pub async fn wait_for_log(&self, pattern: &str, timeout: Duration) -> anyhow::Result<String> {
        self.wait_for_log_after(LogMark(0), pattern, timeout).await
    }

    /// Like [`K0sProcess::wait_for_log`], but only considers the log after `mark`.
    pub async fn wait_for_log_after(
        &self,
        mark: LogMark,
        pattern: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut interval = Duration::from_millis(20);
        loop {
            // Check for exit before reading, so a line written just before exiting is seen.
            let exited = self.exit_status();
            if let Some(line) = self.find_in_log(mark, pattern) {
                return Ok(line);
            }
            if let Some(status) = exited {
                bail!(
                    "{} exited ({status}) before logging {pattern:?}; log tail:\n{}",
                    self.node_name,
                    self.log_tail(40)
                );
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "timed out after {timeout:?} waiting for {} to log {pattern:?}; log tail:\n{}",
                    self.node_name,
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(Duration::from_millis(250));
        }
    }

    fn find_in_log(&self, mark: LogMark, pattern: &str) -> Option<String> {
        let mut file = fs::File::open(&self.log_path).ok()?;
        file.seek(SeekFrom::Start(mark.0)).ok()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        let text = String::from_utf8_lossy(&bytes);
        text.lines().find(|line| line.contains(pattern)).map(str::to_owned)
    }
}

impl Drop for K0sProcess {
    fn drop(&mut self) {
        self.slot.kill_and_reap();
        if std::thread::panicking() {
            eprintln!(
                "---- last {PANIC_LOG_LINES} lines of {} ({}) ----\n{}\n---- end of {} log ----",
                self.node_name,
                self.log_path.display(),
                self.log_tail(PANIC_LOG_LINES),
                self.node_name
            );
        }
    }
}

// === impl Supervised ===

/// A node process under a restarting supervisor that behaves like the shipped systemd units
/// (`manifests/systemd/*.service`, `Restart=always`): whenever the process exits, it runs the
/// units' `ExecStartPre` guard from the proven binary (`<dir>/k0s.prev post-update-guard
/// --data-dir <data> --binary <k0s>`, its failure ignored, as the `-` prefix does; its output
/// goes to the node's log), waits `restart_delay` (`RestartSec`) and starts the live binary
/// again with the same arguments. Made by [`K0sProcess::supervise`]; dropping it stops the
/// supervisor, then kills the process. With [`K0sProcess::supervise_with_watchdog`] it also
/// plays the units' `WatchdogSec=` (see [`Watchdog`]).
#[derive(Debug)]
pub struct Supervised {
    process: std::sync::Arc<K0sProcess>,
    exits: std::sync::Arc<Mutex<Vec<(std::time::Instant, ExitStatus)>>>,
    task: tokio::task::JoinHandle<()>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
}

impl K0sProcess {
    /// Puts the (running) process under a restarting supervisor; see [`Supervised`].
    pub fn supervise(self, restart_delay: Duration) -> Supervised {
        let process = std::sync::Arc::new(self);
        let exits = std::sync::Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(supervise(process.clone(), exits.clone(), restart_delay, None));
        Supervised { process, exits, task, watchdog: None }
    }

    /// [`K0sProcess::supervise`] with the units' watchdog of `interval` (`WatchdogSec=`):
    /// every start the supervisor makes gets `NOTIFY_SOCKET` and `WATCHDOG_USEC`, and a
    /// process that sends no `WATCHDOG=1` for `interval` after its start or its last one is
    /// sent SIGABRT (its process group SIGKILL 5 s later if it is still there), as systemd
    /// does. The process running when it is put under the supervisor is not watched (it was
    /// started without the variables).
    pub fn supervise_with_watchdog(
        self,
        restart_delay: Duration,
        interval: Duration,
    ) -> anyhow::Result<Supervised> {
        let socket = self.dir.join("notify.sock");
        let _ = fs::remove_file(&socket);
        let listener = tokio::net::UnixDatagram::bind(&socket)
            .with_context(|| format!("binding {}", socket.display()))?;
        let process = std::sync::Arc::new(self);
        let watchdog =
            Watchdog { socket, interval, started: std::sync::Arc::new(Mutex::new(None)) };
        let watching =
            tokio::spawn(watch_notifications(process.clone(), watchdog.clone(), listener));
        let exits = std::sync::Arc::new(Mutex::new(Vec::new()));
        let task =
            tokio::spawn(supervise(process.clone(), exits.clone(), restart_delay, Some(watchdog)));
        Ok(Supervised { process, exits, task, watchdog: Some(watching) })
    }
}

/// The units' watchdog as the harness's supervisor plays it.
#[derive(Clone, Debug)]
struct Watchdog {
    socket: PathBuf,
    interval: Duration,
    /// When the supervisor last started the process (with the variables): the watchdog runs
    /// from then on.
    started: std::sync::Arc<Mutex<Option<std::time::Instant>>>,
}

impl Watchdog {
    fn env(&self) -> [(OsString, OsString); 2] {
        [
            ("NOTIFY_SOCKET".into(), self.socket.clone().into_os_string()),
            ("WATCHDOG_USEC".into(), self.interval.as_micros().to_string().into()),
        ]
    }
}

/// Receives the process's notifications and aborts it when `WATCHDOG=1` does not come for
/// the interval.
async fn watch_notifications(
    process: std::sync::Arc<K0sProcess>,
    watchdog: Watchdog,
    listener: tokio::net::UnixDatagram,
) {
    let mut buffer = [0u8; 4096];
    let mut last_ping: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            received = listener.recv(&mut buffer) => {
                let Ok(n) = received else { continue };
                if String::from_utf8_lossy(&buffer[..n]).lines().any(|l| l == "WATCHDOG=1") {
                    last_ping = Some(std::time::Instant::now());
                }
            }
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        let started = *watchdog.started.lock().unwrap_or_else(|p| p.into_inner());
        let Some(started) = started else { continue };
        let since = last_ping.filter(|p| *p > started).unwrap_or(started);
        if since.elapsed() < watchdog.interval || !process.is_running() {
            continue;
        }
        append_log(
            &process.log_path,
            &format!(
                "==== harness supervisor: watchdog timeout ({:?} without WATCHDOG=1): SIGABRT",
                watchdog.interval
            ),
        );
        let _ = process.signal(Signal::SIGABRT);
        if process.slot.wait_exit(Duration::from_secs(5)).await.is_err() {
            let _ = process.kill();
        }
        // Not again for this start.
        *watchdog.started.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The supervisor loop of [`Supervised`].
async fn supervise(
    process: std::sync::Arc<K0sProcess>,
    exits: std::sync::Arc<Mutex<Vec<(std::time::Instant, ExitStatus)>>>,
    restart_delay: Duration,
    watchdog: Option<Watchdog>,
) {
    loop {
        let Ok(status) = process.slot.wait_exit(Duration::from_secs(3600)).await else {
            continue;
        };
        exits.lock().unwrap_or_else(|p| p.into_inner()).push((std::time::Instant::now(), status));
        let guard = process.binary.with_file_name(format!(
            "{}.prev",
            process.binary.file_name().unwrap_or_default().to_string_lossy()
        ));
        let mut line = format!("==== harness supervisor: {} exited ({status})", process.node_name);
        if guard.is_file() {
            let data_dir = process.data_dir.to_string_lossy().into_owned();
            let binary = process.binary.to_string_lossy().into_owned();
            let ran = tokio::task::spawn_blocking(move || {
                let args = ["post-update-guard", "--data-dir", &data_dir, "--binary", &binary];
                run_k0s_binary(&guard, &args, Duration::from_secs(30))
            })
            .await;
            match ran {
                Ok(Ok(output)) => {
                    line.push_str(&format!(
                        "; ExecStartPre guard: {}\n{}{}",
                        output.status,
                        String::from_utf8_lossy(&output.stdout),
                        String::from_utf8_lossy(&output.stderr)
                    ));
                }
                Ok(Err(err)) => line.push_str(&format!("; ExecStartPre guard failed: {err:#}")),
                Err(err) => line.push_str(&format!("; ExecStartPre guard failed: {err}")),
            }
        }
        append_log(&process.log_path, &line);
        tokio::time::sleep(restart_delay).await;
        let started = match &watchdog {
            Some(watchdog) => process.start_with(&watchdog.env()).inspect(|()| {
                *watchdog.started.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(std::time::Instant::now());
            }),
            None => process.start(),
        };
        if let Err(err) = started {
            append_log(
                &process.log_path,
                &format!("==== harness supervisor: cannot start: {err:#}"),
            );
            return;
        }
    }
}

fn append_log(path: &Path, line: &str) {
    use std::io::Write as _;
    if let Ok(mut file) = fs::OpenOptions::new().append(true).create(true).open(path) {
        let _ = writeln!(file, "{}", line.trim_end());
    }
}

impl Supervised {
    /// The supervised process (its current run).
    pub fn process(&self) -> &K0sProcess {
        &self.process
    }

    /// Every exit the supervisor saw so far, with when it saw it.
    pub fn exits(&self) -> Vec<(std::time::Instant, ExitStatus)> {
        self.exits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(watchdog) = &self.watchdog {
            watchdog.abort();
        }
    }
}
