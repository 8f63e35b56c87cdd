//! The updater's `periodic` strategy end to end (issue 5, DESIGN §6): a local update server
//! advertises a newer version on a channel; with the maintenance window open the leader's
//! updater creates the `autopilot` Plan, which runs to Completed (the responder plays the
//! nodes) and an Event `PlanCreated` lands on the UpdateConfig; with the window closed no Plan
//! appears over several periods and the Events say `OutsideWindow`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use autopilot_api::v1beta2::{
    PeriodicUpgradeStrategy, Plan, PlanStateType, UpdateConfig, UpdateConfigSpec, UpgradeStrategy,
    UpgradeStrategyType,
};
use futures::StreamExt as _;
use http_body_util::Full;
use hyper::body::Bytes;
use integration::responder::{Behaviour, Config, Responder};
use integration::{Cluster, ClusterBuilder, K0sProcess, wait_for};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use support::*;

/// The version the server offers; the controller runs [`PLAIN_VERSION`].
const OFFERED: &str = "v1.35.9+k0s.0";

/// The channel the UpdateConfig follows.
const CHANNEL: &str = "stable";

/// `K0S_UPDATE_PERIOD` of the controller under test.
const PERIOD: Duration = Duration::from_secs(2);

/// What the test server answers for `/<CHANNEL>/index.yaml`: status and body.
#[derive(Clone)]
struct UpdateServer {
    answer: Arc<Mutex<(u16, String)>>,
    url: String,
}

impl UpdateServer {
    /// Start serving `index.yaml` for [`CHANNEL`] advertising `version` on 127.0.0.1.
    async fn start(version: &str) -> Self {
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
    #[allow(dead_code)] // used by the server-error scenarios
    fn set(&self, status: u16, body: String) {
        *self.answer.lock().expect("answer lock") = (status, body);
    }
}

fn respond(
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
fn index_yaml(version: &str) -> String {
    let platform = autopilot_api::platform::current();
    let (os, arch) = platform.split_once('-').expect("platform is <os>-<arch>");
    format!(
        "channel: {CHANNEL}\nversion: {version}\ndownloadURLs:\n- os: {os}\n  arch: {arch}\n  \
         k0s: {}\n",
        url(&platform)
    )
}

const ALL_DAYS: [&str; 7] =
    ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// An UpdateConfig on [`CHANNEL`] of `server`, with a window every day at `start_time` for
/// `length`.
fn update_config(
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
async fn start(name: &str) -> anyhow::Result<(Cluster, kube::Client, K0sProcess, Responder)> {
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
async fn events(client: &kube::Client, name: &str, reason: &str) -> anyhow::Result<Vec<String>> {
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
async fn wait_events(
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
fn local_time_in(offset: jiff::SignedDuration) -> String {
    let at = jiff::Zoned::now().checked_add(offset).expect("a representable time");
    format!("{:02}:{:02}", at.hour(), at.minute())
}

#[tokio::test]
async fn window_open_creates_the_plan_which_completes() {
    let server = UpdateServer::start(OFFERED).await;
    let (_cluster, client, controller, _responder) = start("updater-open").await.unwrap();
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    configs
        .create(&PostParams::default(), &update_config("open", &server, "00:00", "24h"))
        .await
        .unwrap();

    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let update = done.spec.commands[0].k0supdate.as_ref().expect("a k0supdate command");
    assert_eq!(update.version, OFFERED, "{}", status_yaml(&done));
    assert!(
        update.platforms.contains_key(&autopilot_api::platform::current()),
        "{}",
        status_yaml(&done)
    );
    let created = wait_events(&client, "open", "PlanCreated", 1).await.unwrap();
    assert!(created[0].contains(&done.spec.id), "{created:?}");
    controller.wait_for_log("created the autopilot plan", STARTUP).await.unwrap();

    // The finalizer is on, and deleting the UpdateConfig does not hang on it.
    let config = configs.get("open").await.unwrap();
    assert!(
        config
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == autopilot_api::keys::UPDATECONFIG_FINALIZER),
        "{:?}",
        config.metadata.finalizers
    );
    configs.delete("open", &Default::default()).await.unwrap();
    wait_for(STARTUP, "the UpdateConfig to be gone", || async {
        Ok(configs.get_opt("open").await?.is_none().then_some(()))
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn window_closed_creates_no_plan_and_says_outside_window() {
    let server = UpdateServer::start(OFFERED).await;
    let (_cluster, client, _controller, _responder) = start("updater-closed").await.unwrap();
    let configs: Api<UpdateConfig> = Api::all(client.clone());
    let start_time = local_time_in(jiff::SignedDuration::from_hours(1));
    configs
        .create(&PostParams::default(), &update_config("closed", &server, &start_time, "30m"))
        .await
        .unwrap();

    let first = wait_events(&client, "closed", "OutsideWindow", 1).await.unwrap();
    assert!(first[0].contains(OFFERED), "{first:?}");

    // Three more periods: every check says outside window, and no Plan ever appears.
    let plans: Api<Plan> = Api::all(client.clone());
    let mut stream = std::pin::pin!(watcher::watch_object(plans, "autopilot"));
    let deadline = tokio::time::Instant::now() + PERIOD * 3 + Duration::from_secs(1);
    while let Ok(Some(seen)) = tokio::time::timeout_at(deadline, stream.next()).await {
        if let Ok(Some(plan)) = seen {
            panic!("a plan appeared with the window closed:\n{}", status_yaml(&plan));
        }
    }
    let later = wait_events(&client, "closed", "OutsideWindow", 3).await.unwrap();
    assert!(later.len() >= 3, "{later:?}");
    assert!(events(&client, "closed", "PlanCreated").await.unwrap().is_empty());
}
