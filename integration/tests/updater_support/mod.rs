//! Helpers shared by the `updater_*` scenarios: a local update server on 127.0.0.1, the
//! UpdateConfig builder, a one-controller cluster with a fast update period, and waits on the
//! updater's Events.

#![allow(dead_code, reason = "each scenario file uses a different subset of the helpers")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use autopilot_api::v1beta2::{
    PeriodicUpgradeStrategy, Plan, UpdateConfig, UpdateConfigSpec, UpgradeStrategy,
    UpgradeStrategyType,
};
use futures::StreamExt as _;
use http_body_util::Full;
use hyper::body::Bytes;
use integration::responder::{Behaviour, Config, Responder};
use integration::{Cluster, ClusterBuilder, K0sProcess, wait_for};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;

use super::support::{PLAN_TIMEOUT, STARTUP, leader, status_yaml, url};

/// The version the server offers; the controller runs [`PLAIN_VERSION`].
pub const OFFERED: &str = "v1.35.9+k0s.0";

/// The channel the UpdateConfig follows.
pub const CHANNEL: &str = "stable";

/// `K0S_UPDATE_PERIOD` of the controller under test.
pub const PERIOD: Duration = Duration::from_secs(2);

/// What the test server answers for `/<CHANNEL>/index.yaml`: status and body.
#[derive(Clone)]
pub struct UpdateServer {
    answer: Arc<Mutex<(u16, String)>>,
    /// The base URL (`http://127.0.0.1:<port>`).
    pub url: String,
}

impl UpdateServer {
    /// Start serving `index.yaml` for [`CHANNEL`] advertising `version` on 127.0.0.1.
    pub async fn start(version: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("bound address"));
        let server = Self { answer: Arc::new(Mutex::new((200, index_yaml(version)))), url };
        let answer = server.answer.clone();
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else { return };
                let answer = answer.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let answer = answer.clone();
                        async move { Ok::<_, std::convert::Infallible>(respond(&answer, &request)) }
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

    /// Answer with `status` and `body` from now on.
    pub fn set(&self, status: u16, body: String) {
        *self.answer.lock().expect("answer lock") = (status, body);
    }
}

pub fn respond(
    answer: &Mutex<(u16, String)>,
    request: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let (status, body) = if request.uri().path() == format!("/{CHANNEL}/index.yaml") {
        answer.lock().expect("answer lock").clone()
    } else {
        (404, "not found\n".to_owned())
    };
    let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = hyper::StatusCode::from_u16(status).expect("a valid status");
    response
}

/// An `index.yaml` offering `version` for this machine's platform.
pub fn index_yaml(version: &str) -> String {
    let platform = autopilot_api::platform::current();
    let (os, arch) = platform.split_once('-').expect("platform is <os>-<arch>");
    format!(
        "channel: {CHANNEL}\nversion: {version}\ndownloadURLs:\n- os: {os}\n  arch: {arch}\n  \
         k0s: {}\n",
        url(&platform)
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
            }),
            plan_spec: None,
        },
    )
}

/// A one-controller cluster whose controller checks every [`PERIOD`], with a responder
/// answering every signal as a node that already runs the version.
pub async fn start(name: &str) -> anyhow::Result<(Cluster, kube::Client, K0sProcess, Responder)> {
    let cluster = ClusterBuilder::new(name).controllers(1).build().await?;
    let client = cluster.admin_client().await?;
    let controller = cluster
        .k0s_controller(0)
        .env("K0S_UPDATE_PERIOD", format!("{}s", PERIOD.as_secs()))
        .spawn()
        .await?;
    wait_for(STARTUP, "a leader", || leader(&client)).await?;
    let config = Config::new().default_behaviour(Behaviour::AlreadyUpToDate);
    let responder = Responder::start(client.clone(), config).await?;
    Ok((cluster, client, controller, responder))
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
