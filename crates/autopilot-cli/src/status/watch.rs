//! The I/O shell of the status view: read a [`Snapshot`] once, or keep one current from
//! watches and redraw.
//!
//! `--watch` runs one kube-runtime watcher (with a reflector store) each for the Plan, the
//! Nodes, the ControlNodes, the Events in [`EVENTS_NAMESPACE`] and the UpdateConfigs, and
//! redraws whenever one of
//! them reports a change. A one-second timer also redraws, only so that "time in phase" and
//! the ages of Events move on between changes. Nothing is polled from the API server but each
//! controller's API server `/version` (the KUBERNETES column), asked every
//! [`VERSIONS_EVERY`] at its ControlNode's address.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::v1beta2::{ControlNode, Plan, UpdateConfig};
use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};

use autopilot_shell::probe::Prober;

use super::{EVENTS_NAMESPACE, Snapshot, render, view};

/// How long a one-shot read may take before the command gives up (an API server that
/// accepts connections but never answers must not hang it).
const API_TIMEOUT: Duration = Duration::from_secs(30);

/// How often `--watch` redraws without a change, to move "time in phase" on.
const CLOCK: Duration = Duration::from_secs(1);

/// How often `--watch` asks the controllers' API servers for their versions.
const VERSIONS_EVERY: Duration = Duration::from_secs(5);

/// Clears the terminal and puts the cursor top left (ANSI), before each `--watch` frame.
pub const CLEAR: &str = "\x1b[H\x1b[2J";

/// How the status is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The screen ([`super::render`]).
    Text,
    /// The [`super::View`] as pretty JSON, one document (with `--watch`, one per change).
    Json,
}

/// Print the status of the Plan `plan_name` once, or with `watch` redraw it on every change
/// until the process is stopped; `prober` asks the controllers' API servers their versions.
pub async fn run(
    client: kube::Client,
    prober: Option<Prober>,
    plan_name: &str,
    watch: bool,
    output: Output,
    mut out: impl Write,
) -> anyhow::Result<()> {
    if !watch {
        let snapshot = read(&client, prober.as_ref(), plan_name).await?;
        let now = jiff::Timestamp::now();
        out.write_all(frame(&snapshot, now, output)?.as_bytes())?;
        return Ok(());
    }
    let mut watches = Watches::start(&client, plan_name);
    let _versions = prober.map(|prober| watches.ask_versions(prober));
    let mut last_error: Option<String> = None;
    let mut listed = [false; WATCHES];
    loop {
        let tick = watches.changes.next().await;
        match tick {
            Some(Tick::Changed) => {}
            // The clock only moves times on; a JSON document per second would say nothing new.
            Some(Tick::Clock) if output == Output::Json => continue,
            Some(Tick::Clock) => {}
            // A (re)list in progress: its store changes at `Listed`.
            Some(Tick::Listing) => continue,
            Some(Tick::Listed(which)) => {
                listed[which] = true;
                last_error = None;
            }
            Some(Tick::Error(error)) => last_error = Some(error),
            None => anyhow::bail!("the watches ended"),
        }
        // Before every watch has listed once, the screen would be incomplete.
        if !listed.iter().all(|done| *done) {
            continue;
        }
        let snapshot = watches.snapshot(plan_name);
        let now = jiff::Timestamp::now();
        let mut text = frame(&snapshot, now, output)?;
        if let Some(error) = &last_error {
            text.push_str(&format!("\n(watch error, retrying: {error})\n"));
        }
        match output {
            Output::Text => write!(out, "{CLEAR}{text}")?,
            Output::Json => out.write_all(text.as_bytes())?,
        }
        out.flush()?;
    }
}

/// One printed frame.
fn frame(snapshot: &Snapshot, now: jiff::Timestamp, output: Output) -> anyhow::Result<String> {
    Ok(match output {
        Output::Text => render(snapshot, now),
        Output::Json => format!("{}\n", serde_json::to_string_pretty(&view(snapshot, now))?),
    })
}

/// Read everything the view needs, once (with a `prober`, the controllers' API server
/// versions too).
pub async fn read(
    client: &kube::Client,
    prober: Option<&Prober>,
    plan_name: &str,
) -> anyhow::Result<Snapshot> {
    let plans: Api<Plan> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    let events: Api<Event> = Api::namespaced(client.clone(), EVENTS_NAMESPACE);
    let update_configs: Api<UpdateConfig> = Api::all(client.clone());
    let all = ListParams::default();
    let reads = async {
        let plan = plans.get_opt(plan_name).await.context("reading the Plan")?;
        let nodes = nodes.list(&all).await.context("listing Nodes")?.items;
        let control_nodes = control_nodes.list(&all).await.context("listing ControlNodes")?.items;
        let events = events
            .list(&all)
            .await
            .with_context(|| format!("listing Events in {EVENTS_NAMESPACE}"))?
            .items;
        let update_configs =
            update_configs.list(&all).await.context("listing UpdateConfigs")?.items;
        let api_versions = match prober {
            Some(prober) => prober.versions(&control_nodes).await,
            None => BTreeMap::new(),
        };
        anyhow::Ok(Snapshot {
            plan_name: plan_name.to_owned(),
            plan,
            nodes,
            control_nodes,
            events,
            update_configs,
            time_zone: jiff::tz::TimeZone::system(),
            api_versions,
        })
    };
    tokio::time::timeout(API_TIMEOUT, reads)
        .await
        .map_err(|_| anyhow::anyhow!("no answer from the API server in {API_TIMEOUT:?}"))?
}

/// What wakes the `--watch` loop.
enum Tick {
    /// A watched object changed.
    Changed,
    /// A watch is (re)listing; its store is swapped in when it is done.
    Listing,
    /// Watch number `.0` has listed everything (its store is complete).
    Listed(usize),
    /// The redraw timer.
    Clock,
    /// A watch failed; it retries with backoff.
    Error(String),
}

/// How many watches `--watch` runs (Plan, Nodes, ControlNodes, Events, UpdateConfigs).
const WATCHES: usize = 5;

/// The reflector stores and the merged stream of their changes.
struct Watches {
    plans: Store<Plan>,
    nodes: Store<Node>,
    control_nodes: Store<ControlNode>,
    events: Store<Event>,
    update_configs: Store<UpdateConfig>,
    changes: futures::stream::BoxStream<'static, Tick>,
    /// The controllers' API server versions, as last asked ([`Watches::ask_versions`]).
    api_versions: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Watches {
    fn start(client: &kube::Client, plan_name: &str) -> Self {
        let by_name = watcher::Config::default().fields(&format!("metadata.name={plan_name}"));
        let (plans, plan_changes) = reflect(0, Api::all(client.clone()), by_name);
        let (nodes, node_changes) =
            reflect(1, Api::all(client.clone()), watcher::Config::default());
        let (control_nodes, control_node_changes) =
            reflect(2, Api::all(client.clone()), watcher::Config::default());
        let (events, event_changes) = reflect(
            3,
            Api::namespaced(client.clone(), EVENTS_NAMESPACE),
            watcher::Config::default(),
        );
        let (update_configs, update_config_changes) =
            reflect(4, Api::all(client.clone()), watcher::Config::default());
        let clock = futures::stream::unfold(tokio::time::interval(CLOCK), |mut interval| async {
            interval.tick().await;
            Some((Tick::Clock, interval))
        });
        let changes = futures::stream::select_all([
            plan_changes,
            node_changes,
            control_node_changes,
            event_changes,
            update_config_changes,
            clock.boxed(),
        ])
        .boxed();
        let api_versions = Arc::default();
        Self { plans, nodes, control_nodes, events, update_configs, changes, api_versions }
    }

    /// Asks the API server of every ControlNode in the store for its version every
    /// [`VERSIONS_EVERY`], until the returned task is dropped.
    fn ask_versions(&self, prober: Prober) -> AbortOnDrop {
        let control_nodes = self.control_nodes.clone();
        let api_versions = self.api_versions.clone();
        AbortOnDrop(tokio::spawn(async move {
            let mut every = tokio::time::interval(VERSIONS_EVERY);
            loop {
                every.tick().await;
                let known: Vec<ControlNode> =
                    control_nodes.state().iter().map(|n| (**n).clone()).collect();
                let versions = prober.versions(&known).await;
                *api_versions.lock().unwrap_or_else(|p| p.into_inner()) = versions;
            }
        }))
    }

    fn snapshot(&self, plan_name: &str) -> Snapshot {
        Snapshot {
            plan_name: plan_name.to_owned(),
            plan: self
                .plans
                .state()
                .into_iter()
                .find(|p| p.metadata.name.as_deref() == Some(plan_name))
                .map(|p| (*p).clone()),
            nodes: self.nodes.state().iter().map(|n| (**n).clone()).collect(),
            control_nodes: self.control_nodes.state().iter().map(|n| (**n).clone()).collect(),
            events: self.events.state().iter().map(|e| (**e).clone()).collect(),
            update_configs: self.update_configs.state().iter().map(|u| (**u).clone()).collect(),
            time_zone: jiff::tz::TimeZone::system(),
            api_versions: self.api_versions.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

/// A task aborted when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A reflector over `api` and the stream of its changes as [`Tick`]s (watch number `which`).
fn reflect<K>(
    which: usize,
    api: Api<K>,
    config: watcher::Config,
) -> (Store<K>, futures::stream::BoxStream<'static, Tick>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    (reader, ticks(which, stream).boxed())
}

fn ticks<K>(
    which: usize,
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> impl Stream<Item = Tick> + Send + 'static {
    stream.map(move |event| match event {
        Ok(watcher::Event::InitDone) => Tick::Listed(which),
        Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Tick::Listing,
        Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => Tick::Changed,
        Err(error) => Tick::Error(error.to_string()),
    })
}
