//! Helpers shared by the `updater_*` scenarios: a local update server on 127.0.0.1, the
//! UpdateConfig builder, a one-controller fleet with a fast update period, and waits on the
//! updater's Events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use autopilot_api::v1beta2::{
    ControlNode, PeriodicUpgradeStrategy, Plan, UpdateConfig, UpdateConfigSpec, UpdateConfigStatus,
    UpgradeStrategy, UpgradeStrategyType,
};
use futures::StreamExt as _;
use http_body_util::Full;
use hyper::body::Bytes;
use integration::{K0sProcess, k0s_binary_with_version, wait_for};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use sha2::Digest as _;

use crate::support::{Agents, FleetBuilder, PLAN_TIMEOUT, STARTUP, status_yaml};

/// The version the server offers; the controller runs [`PLAIN_VERSION`].
pub const OFFERED: &str = "v1.35.9+k0s.0";

/// The channel the UpdateConfig follows.
pub const CHANNEL: &str = "stable";

/// `K0S_UPDATE_PERIOD` of the controller under test.
pub const PERIOD: Duration = Duration::from_secs(2);

/// The test's update server: `/<CHANNEL>/index.yaml` answers what the test set, and
/// `/k0s/<version>/k0s` serves the k0s binaries built for the versions it offers.
#[derive(Clone)]
pub struct UpdateServer {
    state: Arc<Mutex<ServerState>>,
    /// While `true`, binary downloads wait (the index still answers).
    hold: Arc<tokio::sync::watch::Sender<bool>>,
    /// While `true`, `index.yaml` requests wait (a silent update server).
    hold_index: Arc<tokio::sync::watch::Sender<bool>>,
    /// The base URL (`https://127.0.0.1:<port>`).
    pub url: String,
}

/// The TLS identity every [`UpdateServer`] of this test process serves, and the file its
/// certificate is written to: the controllers under test get it as `SSL_CERT_FILE` (their
/// only trusted root), so the updater asks over https, as it must (DESIGN §14), and the
/// token goes over https only.
static IDENTITY: std::sync::LazyLock<(integration::http::TlsIdentity, std::path::PathBuf)> =
    std::sync::LazyLock::new(|| {
        let identity = integration::http::TlsIdentity::self_signed().expect("a TLS identity");
        let file = std::env::temp_dir()
            .join(format!("k0s-e2e-update-server-ca-{}.pem", std::process::id()));
        std::fs::write(&file, &identity.ca_pem).expect("writing the update server's CA");
        (identity, file)
    });

/// The file holding the certificate every [`UpdateServer`] serves.
pub fn update_server_ca_file() -> &'static std::path::Path {
    &IDENTITY.1
}

#[derive(Default)]
struct ServerState {
    /// Status and body of `index.yaml`.
    index: (u16, String),
    /// Status and body of the legacy (cron) endpoint `/<CHANNEL>`.
    legacy: (u16, String),
    /// Query strings the legacy endpoint was asked with, in order.
    legacy_queries: Vec<String>,
    /// Request headers of every `index.yaml` request answered, in order.
    index_headers: Vec<hyper::HeaderMap>,
    /// `index.yaml` requests received so far, answered or held.
    index_arrivals: usize,
    /// Binaries and their sha256 by version.
    binaries: HashMap<String, (Bytes, String)>,
}

impl UpdateServer {
    /// Start serving on 127.0.0.1; `index.yaml` answers 404 until [`UpdateServer::offer`] or
    /// [`UpdateServer::set`].
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let url = format!("https://{}", listener.local_addr().expect("bound address"));
        let acceptor = IDENTITY.0.acceptor.clone();
        let state = Arc::new(Mutex::new(ServerState {
            index: (404, "not yet\n".to_owned()),
            legacy: (404, "not yet\n".to_owned()),
            ..Default::default()
        }));
        let hold = Arc::new(tokio::sync::watch::Sender::new(false));
        let hold_index = Arc::new(tokio::sync::watch::Sender::new(false));
        let server =
            Self { state: state.clone(), hold: hold.clone(), hold_index: hold_index.clone(), url };
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else { return };
                let state = state.clone();
                let hold = hold.clone();
                let hold_index = hold_index.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(socket) = acceptor.accept(socket).await else { return };
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        let mut held = hold.subscribe();
                        let mut index_held = hold_index.subscribe();
                        async move {
                            if request.uri().path().starts_with("/k0s/") {
                                let _ = held.wait_for(|held| !*held).await;
                            }
                            if request.uri().path().ends_with("/index.yaml") {
                                state.lock().expect("server lock").index_arrivals += 1;
                                let _ = index_held.wait_for(|held| !*held).await;
                            }
                            Ok::<_, std::convert::Infallible>(respond(&state, &request))
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(socket);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        server
    }

    /// Build (once per test process) a k0s binary reporting `version` and serve it.
    pub async fn add_version(&self, version: &str) -> anyhow::Result<()> {
        let owned = version.to_owned();
        let path = tokio::task::spawn_blocking(move || k0s_binary_with_version(&owned)).await??;
        let bytes = tokio::fs::read(&path).await?;
        let sha = hex::encode(sha2::Sha256::digest(&bytes));
        self.state
            .lock()
            .expect("server lock")
            .binaries
            .insert(version.to_owned(), (Bytes::from(bytes), sha));
        Ok(())
    }

    /// Offer `version` in `index.yaml` from now on (with its binary's digest if served).
    pub fn offer(&self, version: &str) {
        let mut state = self.state.lock().expect("server lock");
        let sha = state.binaries.get(version).map(|(_, sha)| sha.clone());
        state.index = (200, index_yaml(&self.url, version, sha.as_deref()));
    }

    /// Offer `version` in `index.yaml` from now on, as [`UpdateServer::offer`] does, with
    /// `eolDate: <eol>`.
    pub fn offer_with_eol(&self, version: &str, eol: &str) {
        let mut state = self.state.lock().expect("server lock");
        let sha = state.binaries.get(version).map(|(_, sha)| sha.clone());
        let body = index_yaml(&self.url, version, sha.as_deref());
        state.index = (200, format!("eolDate: {eol:?}\n{body}"));
    }

    /// Offer `version` on the legacy (cron) endpoint from now on, downloadable from
    /// `<base>/k0s/<version>/k0s` (e.g. an https [`integration::http::FileServer`]).
    pub fn offer_legacy_from(&self, version: &str, base: &str) {
        let platform = autopilot_api::platform::current();
        let body = format!(
            "version: {version}\ndownloadURLs:\n  k0s:\n    {platform}: {base}/k0s/{version}/k0s\n"
        );
        self.state.lock().expect("server lock").legacy = (200, body);
    }

    /// The query strings the legacy endpoint was asked with so far.
    pub fn legacy_queries(&self) -> Vec<String> {
        self.state.lock().expect("server lock").legacy_queries.clone()
    }

    /// The headers of every `index.yaml` request so far.
    pub fn index_headers(&self) -> Vec<hyper::HeaderMap> {
        self.state.lock().expect("server lock").index_headers.clone()
    }

    /// Make binary downloads wait until [`UpdateServer::release_downloads`] (a run in
    /// progress that the test controls).
    pub fn hold_downloads(&self) {
        self.hold.send_replace(true);
    }

    /// Let held and future binary downloads proceed.
    pub fn release_downloads(&self) {
        self.hold.send_replace(false);
    }

    /// Make `index.yaml` requests wait without an answer (a silent server) until the server
    /// is dropped.
    pub fn hold_index(&self) {
        self.hold_index.send_replace(true);
    }

    /// How many `index.yaml` requests arrived so far, answered or held.
    pub fn index_arrivals(&self) -> usize {
        self.state.lock().expect("server lock").index_arrivals
    }

    /// Answer `index.yaml` with `status` and `body` from now on.
    pub fn set(&self, status: u16, body: String) {
        self.state.lock().expect("server lock").index = (status, body);
    }
}

fn respond(
    state: &Mutex<ServerState>,
    request: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let path = request.uri().path();
    let mut state = state.lock().expect("server lock");
    let (status, body) = if path == format!("/{CHANNEL}/index.yaml") {
        state.index_headers.push(request.headers().clone());
        (state.index.0, Bytes::from(state.index.1.clone()))
    } else if path == format!("/{CHANNEL}") {
        state.legacy_queries.push(request.uri().query().unwrap_or_default().to_owned());
        (state.legacy.0, Bytes::from(state.legacy.1.clone()))
    } else if let Some(version) = path.strip_prefix("/k0s/").and_then(|p| p.strip_suffix("/k0s")) {
        match state.binaries.get(version) {
            Some((bytes, _)) => (200, bytes.clone()),
            None => (404, Bytes::from_static(b"not found\n")),
        }
    } else {
        (404, Bytes::from_static(b"not found\n"))
    };
    let mut response = hyper::Response::new(Full::new(body));
    *response.status_mut() = hyper::StatusCode::from_u16(status).expect("a valid status");
    response
}

/// An `index.yaml` offering `version` for this machine's platform, downloadable from `base`.
pub fn index_yaml(base: &str, version: &str, sha256: Option<&str>) -> String {
    let platform = autopilot_api::platform::current();
    let (os, arch) = platform.split_once('-').expect("platform is <os>-<arch>");
    let sha = sha256.map(|s| format!("  k0sSha256: {s}\n")).unwrap_or_default();
    format!(
        "channel: {CHANNEL}\nversion: {version}\ndownloadURLs:\n- os: {os}\n  arch: {arch}\n  \
         k0s: {base}/k0s/{version}/k0s\n{sha}"
    )
}

pub const ALL_DAYS: [&str; 7] =
    ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// An UpdateConfig on [`CHANNEL`] of `server`, with a window every day at `start_time` for
/// `length`.
pub fn update_config(
    name: &str,
    server: &UpdateServer,
    start_time: &str,
    length: &str,
) -> UpdateConfig {
    UpdateConfig::new(
        name,
        UpdateConfigSpec {
            channel: CHANNEL.to_owned(),
            update_server: server.url.clone(),
            upgrade_strategy: Some(UpgradeStrategy {
                r#type: Some(UpgradeStrategyType::Periodic),
                cron: None,
                periodic: Some(PeriodicUpgradeStrategy {
                    days: ALL_DAYS.iter().map(|d| (*d).to_owned()).collect(),
                    start_time: Some(start_time.to_owned()),
                    length: Some(length.to_owned()),
                }),
                min_interval: None,
            }),
            plan_spec: None,
        },
    )
}

/// A one-controller fleet, to configure further (more environment variables or flags for the
/// controller) and start, whose controller checks every [`PERIOD`], trusts the update server
/// ([`update_server_ca_file`]) and serves its metrics ([`K0sProcess::metrics_address`]); the
/// controller's own agent applies the updates for real.
pub fn updater_fleet(name: &str) -> FleetBuilder {
    FleetBuilder::new(name)
        .controllers(1)
        // The controller's own update agent stays on: these scenarios update it for real (no
        // responder plays the nodes), so never `Agents::None` here.
        .agents(Agents::Real)
        .controller_env("K0S_UPDATE_PERIOD", format!("{}s", PERIOD.as_secs()))
        .controller_env("SSL_CERT_FILE", update_server_ca_file())
        .controller_metrics()
}

/// The k0s version controller `i` reports on its ControlNode.
pub async fn control_node_version(
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let nodes: Api<ControlNode> = Api::all(client.clone());
    Ok(nodes.get_opt(name).await?.and_then(|n| n.status).and_then(|s| s.k0s_version))
}

/// Events about the UpdateConfig `name` with `reason`, oldest first.
pub async fn events(
    client: &kube::Client,
    name: &str,
    reason: &str,
) -> anyhow::Result<Vec<String>> {
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), "default");
    let mut found: Vec<_> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("UpdateConfig") && r.name.as_deref() == Some(name)
                })
        })
        .collect();
    found.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    Ok(found.into_iter().map(|e| e.note.unwrap_or_default()).collect())
}

/// Waits for at least `count` Events with `reason` on the UpdateConfig `name`.
pub async fn wait_events(
    client: &kube::Client,
    name: &str,
    reason: &str,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    wait_for(PLAN_TIMEOUT, &format!("{count} {reason} events on {name}"), || async {
        let found = events(client, name, reason).await?;
        Ok((found.len() >= count).then_some(found))
    })
    .await
}

/// `HH:MM` of now plus `offset` in the local zone (the controller's zone; same machine).
pub fn local_time_in(offset: jiff::SignedDuration) -> String {
    let at = jiff::Zoned::now().checked_add(offset).expect("a representable time");
    format!("{:02}:{:02}", at.hour(), at.minute())
}

/// Watches the Plan `autopilot` for `window` and fails if it ever exists.
pub async fn assert_no_plan_for(client: &kube::Client, window: Duration) {
    let plans: Api<Plan> = Api::all(client.clone());
    let mut stream = std::pin::pin!(watcher::watch_object(plans, "autopilot"));
    let deadline = tokio::time::Instant::now() + window;
    while let Ok(Some(seen)) = tokio::time::timeout_at(deadline, stream.next()).await {
        if let Ok(Some(plan)) = seen {
            panic!("a plan appeared:\n{}", status_yaml(&plan));
        }
    }
}

/// Scrapes `controller`'s metrics until `done` holds; the error names the last scrape.
pub async fn wait_metrics(
    controller: &K0sProcess,
    what: &str,
    done: impl Fn(&integration::metrics::Scrape) -> bool,
) -> anyhow::Result<integration::metrics::Scrape> {
    let Some(address) = controller.metrics_address() else {
        anyhow::bail!("{} was started without metrics", controller.node_name());
    };
    wait_for(STARTUP, what, || async {
        let scrape = integration::metrics::scrape(address).await?;
        if done(&scrape) {
            Ok(Some(scrape))
        } else {
            Err(anyhow::anyhow!("the last scrape:\n{}", scrape.text))
        }
    })
    .await
}

/// `(status, reason)` of the condition `type_`, if written.
pub fn condition<'a>(status: &'a UpdateConfigStatus, type_: &str) -> Option<(&'a str, &'a str)> {
    let found = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some((found.status.as_str(), found.reason.as_str()))
}

/// `(Ready, Reconciling, Stalled)` condition statuses.
pub fn verdict(status: &UpdateConfigStatus) -> (Option<&str>, Option<&str>, Option<&str>) {
    let get = |t| condition(status, t).map(|(s, _)| s);
    (get("Ready"), get("Reconciling"), get("Stalled"))
}

/// Waits until the UpdateConfig `name`'s status satisfies `done`; the error shows the last.
pub async fn wait_update_config_status(
    configs: &Api<UpdateConfig>,
    name: &str,
    what: &str,
    done: impl Fn(&UpdateConfigStatus) -> bool,
) -> UpdateConfigStatus {
    wait_for(PLAN_TIMEOUT, what, || async {
        let status = configs.get(name).await?.status.unwrap_or_default();
        if done(&status) {
            Ok(Some(status))
        } else {
            Err(anyhow::anyhow!("the last status:\n{}", serde_json::to_string_pretty(&status)?))
        }
    })
    .await
    .expect("the UpdateConfig status")
}
