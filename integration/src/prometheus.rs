//! A real Prometheus for tests: the pinned binary, built once and cached like the control
//! plane, and a harness process that scrapes the nodes' `--metrics-address` endpoints.
//!
//! # The binary
//!
//! [`ensure_built`] (run by `cargo xtask control-plane`, so by `.ci/run` and `cargo xtask
//! test` too) builds `github.com/prometheus/prometheus/cmd/prometheus` at
//! [`PROMETHEUS_MODULE_VERSION`] with `go build` in a throw-away wrapper module outside the
//! repository, and moves it into [`cache_dir`]`/bin/prometheus` with a stamp. It has its own
//! wrapper module: Prometheus needs a newer `k8s.io/client-go` than the one pinned with the
//! API server, so the two cannot share one. The build uses:
//!
//! - `-tags remove_all_sd`: none of the service-discovery plugins (AWS, Azure, Kubernetes,
//!   ...); the harness lists its targets in `static_configs`. This is the only tag needed.
//! - no `builtinassets` tag: the web UI's assets are not embedded (they need a Node.js build
//!   of `web/ui`). The HTTP API (`/api/v1/*`, `/-/ready`, `/-/reload`) does not use them; only
//!   the UI's pages would answer "not found".
//! - `-ldflags -X github.com/prometheus/common/version.Version=<release>`, since a module
//!   build has no VCS stamp: `prometheus --version` then says `version 3.16.0`. The build is
//!   checked with `--version` and with `go version -m` (module version and tags) before it is
//!   moved into place.
//!
//! Tests only call [`binary`], which never builds and fails with the hint to run `cargo xtask
//! control-plane`.
//!
//! # The harness process
//!
//! [`Prometheus::start`] runs the binary on a free loopback port with a generated
//! configuration: one job, `k0s`, scraping the given [`ScrapeTarget`]s every second, storage in
//! a temporary directory, `--web.enable-lifecycle` so that [`Prometheus::add_targets`] can
//! rewrite the configuration and `POST /-/reload`. It returns once `/-/ready` answers 200.
//! [`Prometheus::query`] runs an instant query with the production client
//! ([`autopilot_controller::prometheus::instant_query`]) and [`Prometheus::wait_for_query`]
//! waits until one returns samples. Dropping the handle SIGKILLs and reaps the process (and
//! prints its log tail during a panic).

use std::{
    collections::BTreeMap,
    env, fs,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use autopilot_controller::prometheus::{InstantVector, instant_query};
use autopilot_shell::https::{HttpsClient, HttpsClientBuilder};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::cache::{self, CachedSet, Override};
use crate::go::{self, run};
use crate::process::{GroupRegistry, ProcessSlot, tail};
use crate::{K0sProcess, wait_for};

/// The Go module Prometheus is built from.
pub const PROMETHEUS_MODULE: &str = "github.com/prometheus/prometheus";

/// The pinned version of [`PROMETHEUS_MODULE`]. Prometheus tags its Go module `v0.X0Y.Z` for
/// release `X.Y.Z` (see [`PROMETHEUS_RELEASE`]).
pub const PROMETHEUS_MODULE_VERSION: &str = "v0.316.0";

/// The Prometheus release of [`PROMETHEUS_MODULE_VERSION`], as `prometheus --version` reports
/// it (stamped in with `-ldflags -X`).
pub const PROMETHEUS_RELEASE: &str = "3.16.0";

/// The Go version Prometheus's go.mod asks for, written into the wrapper module's `go` line: an
/// older `go` (1.21 or newer) then fetches this toolchain from the module proxy by itself
/// (unless `GOTOOLCHAIN=local`, when it fails saying which version it needs).
pub const GO_VERSION: &str = "1.26.7";

/// The package of the server binary.
const PACKAGE: &str = "github.com/prometheus/prometheus/cmd/prometheus";

/// Build tags: leave out every service-discovery plugin (the harness uses static targets).
pub const BUILD_TAGS: &str = "remove_all_sd";

/// Environment variable that overrides [`cache_dir`] (the whole directory, version included).
pub const CACHE_DIR_ENV: &str = "K0S_PROMETHEUS_CACHE";

/// How often the harness Prometheus scrapes, and how often it evaluates.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// The job name of every scrape target (the `job` label of the series).
pub const JOB: &str = "k0s";

/// How long [`Prometheus::start`] waits for `/-/ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a start that lost the race for its port is retried on another one.
const PORT_ATTEMPTS: usize = 5;

/// How long one query of the harness may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one request to `/-/ready` or `/-/reload` may take.
const LIFECYCLE_TIMEOUT: Duration = Duration::from_secs(10);

// === the cached binary ===

/// The cache directory for the pinned version: `$K0S_PROMETHEUS_CACHE` if set, otherwise
/// `~/.cache/k0s-autopilot/prometheus/<module version>/` (`$XDG_CACHE_HOME` is honoured).
/// The binary lives in its `bin/`.
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    cache::dir(CACHE_DIR_ENV, Override::Dir, "prometheus", PROMETHEUS_MODULE_VERSION)
}

/// What the stamp file says: the module version and the tags the cached binary was built with.
fn stamp_contents() -> String {
    format!("{PROMETHEUS_MODULE}={PROMETHEUS_MODULE_VERSION}\ntags={BUILD_TAGS}\n")
}

/// The cached set of the one binary, and its path.
fn cached_set() -> anyhow::Result<(CachedSet, PathBuf)> {
    let dir = cache_dir()?;
    let binary = dir.join("bin").join("prometheus");
    let set = CachedSet {
        name: "prometheus".to_owned(),
        pinned: format!("{PROMETHEUS_MODULE} {PROMETHEUS_MODULE_VERSION}"),
        part: "prometheus",
        dir,
        stamp: stamp_contents(),
        entries: vec![binary.clone()],
    };
    Ok((set, binary))
}

/// The cached binary, without building anything.
///
/// Fails with a message telling the reader to run `cargo xtask control-plane` when it is
/// missing or was built from another version.
pub fn binary() -> anyhow::Result<PathBuf> {
    let (set, binary) = cached_set()?;
    set.cached()?;
    Ok(binary)
}

/// Builds the pinned binary into [`cache_dir`] unless it is already there, and returns it.
///
/// Needs `go` on `PATH` and access to the Go module proxy; the toolchain's output streams to
/// this process's stdout/stderr. The binary is built under a temporary name, checked, and
/// renamed into place; the stamp is written last, so an interrupted run leaves nothing
/// half-written behind.
pub fn ensure_built() -> anyhow::Result<PathBuf> {
    let (set, binary) = cached_set()?;
    set.ensure(|_| build(&binary))?;
    Ok(binary)
}

/// Builds the pinned binary into `dest`, checked with `--version` and `go version -m`.
fn build(dest: &Path) -> anyhow::Result<()> {
    go::check_installed()?;
    let work = go::work_dir("prometheus")?;
    let work = work.path();
    println!(
        "==> building prometheus {PROMETHEUS_RELEASE} ({PROMETHEUS_MODULE} \
         {PROMETHEUS_MODULE_VERSION}, tags {BUILD_TAGS}) in {} (this takes a few minutes)",
        work.display()
    );
    let go_mod = format!(
        "module k0sautopilot/testing/prometheus\n\ngo {GO_VERSION}\n\n\
         require {PROMETHEUS_MODULE} {PROMETHEUS_MODULE_VERSION}\n"
    );
    fs::write(work.join("go.mod"), go_mod)?;
    fs::write(work.join("tools.go"), go::tools_file(&[PACKAGE]))?;
    run(go::command(work).args(["mod", "tidy"]), "go mod tidy (prometheus)")?;
    let flags = ["-trimpath", "-tags", BUILD_TAGS, "-ldflags", &ldflags()];
    go::build(work, PACKAGE, &flags, dest, |binary| {
        let version =
            go::reports(binary, &["--version"], &format!("version {PROMETHEUS_RELEASE} "))?;
        check_build_info(&go::build_info(work, binary)?)?;
        Ok(version)
    })
}

/// `-s -w` plus the version variables `prometheus --version` prints.
fn ldflags() -> String {
    let var = "github.com/prometheus/common/version";
    format!(
        "-s -w -X {var}.Version={PROMETHEUS_RELEASE} -X {var}.Branch=HEAD \
         -X {var}.BuildUser=k0s-autopilot"
    )
}

/// Checks that `go version -m` says the binary is [`PROMETHEUS_MODULE`] at the pinned version,
/// built with [`BUILD_TAGS`].
fn check_build_info(info: &str) -> anyhow::Result<()> {
    ensure!(
        go::shows_module(info, PROMETHEUS_MODULE, PROMETHEUS_MODULE_VERSION),
        "go version -m does not show {PROMETHEUS_MODULE} {PROMETHEUS_MODULE_VERSION}:\n{info}"
    );
    let tags = format!("-tags={BUILD_TAGS}");
    ensure!(
        info.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.first() == Some(&"build") && fields.get(1) == Some(&tags.as_str())
        }),
        "go version -m does not show the build setting {tags}:\n{info}"
    );
    Ok(())
}

// === scrape targets ===

/// One `host:port` Prometheus scrapes (`/metrics`), with labels added to its series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrapeTarget {
    /// The endpoint.
    pub address: SocketAddr,
    /// Labels attached to every series scraped from it (besides `job` and `instance`).
    pub labels: BTreeMap<String, String>,
}

impl ScrapeTarget {
    /// `address` without extra labels.
    pub fn new(address: SocketAddr) -> Self {
        Self { address, labels: BTreeMap::new() }
    }

    /// The node's metrics endpoint, labelled `node="<node name>"`. Fails unless the node was
    /// started [`crate::K0sCommand::with_metrics`].
    pub fn node(node: &K0sProcess) -> anyhow::Result<Self> {
        let address = node.metrics_address().with_context(|| {
            format!("node {} serves no metrics (start it with_metrics())", node.node_name())
        })?;
        Ok(Self::new(address).label("node", node.node_name()))
    }

    /// Adds the label `name="value"`.
    #[must_use]
    pub fn label(mut self, name: &str, value: &str) -> Self {
        self.labels.insert(name.to_owned(), value.to_owned());
        self
    }
}

/// The configuration file for `targets`: one static config per target, so each carries its
/// own labels.
fn config_yaml(targets: &[ScrapeTarget]) -> anyhow::Result<String> {
    let interval = format!("{}s", SCRAPE_INTERVAL.as_secs());
    let static_configs: Vec<serde_json::Value> = targets
        .iter()
        .map(|t| serde_json::json!({"targets": [t.address.to_string()], "labels": t.labels}))
        .collect();
    let config = serde_json::json!({
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "scrape_configs": [{"job_name": JOB, "static_configs": static_configs}],
    });
    serde_saphyr::to_string(&config).context("writing the Prometheus configuration")
}

// === the process ===

/// A running Prometheus on `127.0.0.1:<free port>`; see the [module docs](self).
#[derive(Debug)]
pub struct Prometheus {
    address: SocketAddr,
    dir: Option<tempfile::TempDir>,
    config: PathBuf,
    log: PathBuf,
    targets: Mutex<Vec<ScrapeTarget>>,
    client: HttpsClient,
    slot: ProcessSlot,
    startup: Duration,
}

impl Prometheus {
    /// Starts the cached binary ([`binary`]) scraping `targets` and waits until it is ready.
    pub async fn start(targets: Vec<ScrapeTarget>) -> anyhow::Result<Self> {
        let binary = binary()?;
        let dir = tempfile::Builder::new()
            .prefix("k0s-prometheus-")
            .tempdir()
            .context("creating the Prometheus directory")?;
        let config = dir.path().join("prometheus.yml");
        let log = dir.path().join("prometheus.log");
        fs::write(&config, config_yaml(&targets)?)
            .with_context(|| format!("writing {}", config.display()))?;
        let client = HttpsClientBuilder::new(rustls::RootCertStore::empty())
            .build()
            .context("building the query client")?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let ip = Ipv4Addr::LOCALHOST;
            let address = SocketAddr::from((ip, crate::net::free_port(ip)?));
            let slot = ProcessSlot::new(GroupRegistry::default());
            let mut cmd = Command::new(&binary);
            cmd.current_dir(dir.path())
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
                .arg(format!("--web.listen-address={address}"))
                .arg("--web.enable-lifecycle")
                // Apply target changes within a second, not the default 5 s (a hidden flag).
                .arg("--scrape.discovery-reload-interval=1s");
            let started = Instant::now();
            slot.start(&mut cmd, &log)?;
            match wait_ready(address, &slot).await {
                Ok(()) => {
                    return Ok(Self {
                        address,
                        dir: Some(dir),
                        config,
                        log,
                        targets: Mutex::new(targets),
                        client,
                        slot,
                        startup: started.elapsed(),
                    });
                }
                Err(_)
                    if attempt < PORT_ATTEMPTS && crate::net::lost_port_race(&tail(&log, 20)) =>
                {
                    slot.kill_and_reap();
                }
                Err(err) => {
                    slot.kill_and_reap();
                    return Err(err.context(format!(
                        "starting prometheus; the last lines of {}:\n{}",
                        log.display(),
                        tail(&log, 20)
                    )));
                }
            }
        }
    }

    /// `http://127.0.0.1:<port>`, the base URL of its HTTP API.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// How long it took from spawning the process to `/-/ready` answering 200.
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// The targets it scrapes.
    pub fn targets(&self) -> Vec<ScrapeTarget> {
        self.targets.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Adds scrape targets: rewrites the configuration and reloads it (`POST /-/reload`,
    /// which answers once the new configuration is applied). The first scrape of a new target
    /// follows within about two seconds; wait for its `up` series to see it.
    pub async fn add_targets(&self, targets: Vec<ScrapeTarget>) -> anyhow::Result<()> {
        let yaml = {
            let mut all = self.targets.lock().unwrap_or_else(|p| p.into_inner());
            all.extend(targets);
            config_yaml(&all)?
        };
        let tmp = self.config.with_extension("yml.tmp");
        fs::write(&tmp, yaml).with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &self.config)
            .with_context(|| format!("writing {}", self.config.display()))?;
        let (status, body) = request(self.address, "POST", "/-/reload").await?;
        ensure!(status == 200, "POST /-/reload answered {status}: {body}");
        Ok(())
    }

    /// Runs the instant query `promql` with the production client.
    pub async fn query(&self, promql: &str) -> anyhow::Result<InstantVector> {
        Ok(instant_query(&self.client, &self.base_url(), promql, QUERY_TIMEOUT).await?)
    }

    /// Polls the instant query `promql` until it returns at least one sample, and returns
    /// that answer. The timeout error names the query and the last error or answer.
    pub async fn wait_for_query(
        &self,
        promql: &str,
        timeout: Duration,
    ) -> anyhow::Result<InstantVector> {
        self.wait_for_query_where(promql, timeout, |v| !v.samples.is_empty()).await
    }

    /// Polls the instant query `promql` until `accept` holds for its answer, and returns it.
    pub async fn wait_for_query_where(
        &self,
        promql: &str,
        timeout: Duration,
        accept: impl FnMut(&InstantVector) -> bool,
    ) -> anyhow::Result<InstantVector> {
        let what = format!("prometheus query `{promql}` to return what the test waits for");
        let last = std::cell::RefCell::new(None);
        let accept = std::cell::RefCell::new(accept);
        let result = wait_for(timeout, &what, || async {
            let answer = self.query(promql).await?;
            let ok = (accept.borrow_mut())(&answer);
            *last.borrow_mut() = Some(answer.to_cel_json());
            Ok(ok.then_some(answer))
        })
        .await;
        result.with_context(|| match &*last.borrow() {
            Some(answer) => format!("its last answer: {answer}"),
            None => "it never answered".to_owned(),
        })
    }

    /// The log so far (stdout and stderr).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.slot.kill_and_reap();
        if std::thread::panicking() {
            eprintln!(
                "---- last lines of prometheus ({}) ----\n{}",
                self.log.display(),
                tail(&self.log, 20)
            );
        }
        let keep = env::var(crate::KEEP_TEST_DIRS_ENV).is_ok_and(|v| v == "1" || v == "true");
        if let Some(dir) = self.dir.take()
            && keep
        {
            eprintln!("integration: kept prometheus directory {}", dir.keep().display());
        }
    }
}

/// Waits until `/-/ready` answers 200, failing at once if the process exits first.
async fn wait_ready(address: SocketAddr, slot: &ProcessSlot) -> anyhow::Result<()> {
    let what = format!("prometheus on {address} to be ready");
    let exited = wait_for(READY_TIMEOUT, &what, || async {
        if let Some(status) = slot.exit_status() {
            return Ok(Some(Some(status)));
        }
        match request(address, "GET", "/-/ready").await {
            Ok((200, _)) => Ok(Some(None)),
            Ok(_) | Err(_) => Ok(None),
        }
    })
    .await?;
    match exited {
        Some(status) => bail!("prometheus exited ({status}) before it was ready"),
        None => Ok(()),
    }
}

/// One plain HTTP/1.1 request without a body; returns the status code and the body's text.
async fn request(address: SocketAddr, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .with_context(|| format!("connecting to {address}"))?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status_line = answer.lines().next().unwrap_or_default();
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .with_context(|| format!("{method} {path} on {address}: answer {status_line:?}"))?;
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.trim().to_owned());
        Ok((status, body.unwrap_or_default()))
    };
    tokio::time::timeout(LIFECYCLE_TIMEOUT, exchange).await.with_context(|| {
        format!("{method} {path} on {address}: no answer in {LIFECYCLE_TIMEOUT:?}")
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_version_is_the_release_in_go_module_form() {
        // Prometheus tags release X.Y.Z as Go module v0.(X*100+Y).Z.
        let mut parts = PROMETHEUS_RELEASE.split('.').map(|p| p.parse::<u32>().unwrap());
        let (major, minor, patch) =
            (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        assert_eq!(PROMETHEUS_MODULE_VERSION, format!("v0.{}.{patch}", major * 100 + minor));
    }

    #[test]
    fn the_build_info_must_show_the_pinned_module_and_tags() {
        let good = "/tmp/prometheus: go1.26.8\n\tpath\tgithub.com/prometheus/prometheus/cmd/prometheus\n\
                    \tmod\tgithub.com/prometheus/prometheus\tv0.316.0\th1:abc=\n\
                    \tbuild\t-tags=remove_all_sd\n\tbuild\tCGO_ENABLED=0\n";
        check_build_info(good).unwrap();
        let old = good.replace("v0.316.0", "v0.315.0");
        assert!(check_build_info(&old).is_err());
        let untagged = good.replace("\tbuild\t-tags=remove_all_sd\n", "");
        assert!(check_build_info(&untagged).is_err());
    }

    #[test]
    fn the_config_scrapes_each_target_with_its_labels_every_second() {
        let targets = [
            ScrapeTarget::new("127.0.0.1:1001".parse().unwrap()).label("node", "worker-0"),
            ScrapeTarget::new("127.0.0.1:1002".parse().unwrap()),
        ];
        let config: serde_json::Value = serde_saphyr::from_str(&config_yaml(&targets).unwrap())
            .expect("the configuration is YAML");
        assert_eq!(config["global"]["scrape_interval"], "1s");
        let job = &config["scrape_configs"][0];
        assert_eq!(job["job_name"], JOB);
        assert_eq!(
            job["static_configs"],
            serde_json::json!([
                {"targets": ["127.0.0.1:1001"], "labels": {"node": "worker-0"}},
                {"targets": ["127.0.0.1:1002"], "labels": {}},
            ])
        );
    }

    #[test]
    fn the_stamp_names_version_and_tags() {
        assert_eq!(
            stamp_contents(),
            "github.com/prometheus/prometheus=v0.316.0\ntags=remove_all_sd\n"
        );
    }
}
