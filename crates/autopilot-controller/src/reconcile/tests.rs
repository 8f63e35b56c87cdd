//! The reconcile shell's contract, without a cluster: a pass runs against caches filled by
//! hand and a client whose API server is a recording function. What the pure machine decides
//! is tested in `plan/`; these tests check how the shell carries a decision out (the status
//! first, then each signal with the resourceVersion of the snapshot the decision was made
//! on, nothing after a failed status write) and what its trigger filter lets through.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use autopilot_api::keys;
use autopilot_api::v1beta2::{ControlNode, Plan, TargetState};
use autopilot_engine::snapshot::SlimNode;
use autopilot_shell::fake_api::{self, FakeApiServer, Request as Seen};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::context::{CACHE_READY_TIMEOUT, CONFLICT_RETRY, StatusMemory, Views};
use super::*;
use autopilot_shell::events::{EventPublisher, Reporter};

/// The fake API server: records every request; a Plan status write is answered with a new
/// resourceVersion (or `409 Conflict` when `conflict` is set), a Node patch with the Node
/// (or `409 Conflict` for the Node named `refused`), an Event with itself, an access review
/// with "allowed" (the workers may read the Plan), every read with `404` (no removed API is
/// served).
#[derive(Clone, Default)]
struct FakeApi {
    server: FakeApiServer,
    conflict: bool,
    refused: Option<&'static str>,
}

impl FakeApi {
    fn client(&self) -> kube::Client {
        let (conflict, refused) = (self.conflict, self.refused);
        self.server.client(move |seen, before| answer(seen, before, conflict, refused))
    }

    fn requests(&self, method: &str) -> Vec<Seen> {
        self.server.requests_with(method)
    }

    /// The writes (everything but reads, access reviews, which store nothing, and Events,
    /// which are published in the background), in order.
    fn writes(&self) -> Vec<Seen> {
        let seen = self.server.requests();
        seen.into_iter()
            .filter(|s| s.method != "GET" && !s.path.ends_with("/events"))
            .filter(|s| !s.path.ends_with("/subjectaccessreviews"))
            .collect()
    }
}

/// What [`FakeApi`] answers to `seen`, after the requests `before` it.
fn answer(seen: &Seen, before: &[Seen], conflict: bool, refused: Option<&str>) -> (u16, Value) {
    match seen.method.as_str() {
        "PUT" if seen.path.ends_with("/plans/autopilot/status") => {
            if conflict {
                return (409, fake_api::status(409, "Conflict"));
            }
            let written = before.iter().filter(|s| s.method == "PUT").count() + 1;
            let mut plan = seen.body.clone();
            plan["metadata"]["resourceVersion"] = json!(format!("plan-rv-{written}"));
            (200, plan)
        }
        "PATCH" if seen.path.starts_with("/api/v1/nodes/") => {
            let name = seen.path.trim_start_matches("/api/v1/nodes/");
            if refused == Some(name) {
                return (409, fake_api::status(409, "Conflict"));
            }
            (200, json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
        }
        "POST" if seen.path.ends_with("/events") => (201, seen.body.clone()),
        "POST" if seen.path.ends_with("/subjectaccessreviews") => {
            let mut review = seen.body.clone();
            review["status"] = json!({"allowed": true});
            (201, review)
        }
        _ => (404, fake_api::status(404, "NotFound")),
    }
}

fn worker(name: &str) -> SlimNode {
    serde_json::from_value(worker_json(name)).expect("a Node")
}

/// A ready worker `name` as the API server sends it.
fn worker_json(name: &str) -> Value {
    json!({
        "metadata": {
            "name": name,
            "uid": format!("uid-{name}"),
            "resourceVersion": format!("node-rv-{name}"),
            "labels": {
                keys::LABEL_HOSTNAME: name,
                keys::LABEL_OS: autopilot_api::platform::os(),
                keys::LABEL_ARCH: autopilot_api::platform::arch(),
            },
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn plan(workers: &[&str]) -> Plan {
    serde_json::from_value(json!({
        "apiVersion": keys::API_VERSION,
        "kind": "Plan",
        "metadata": {"name": keys::PLAN_NAME, "uid": "plan-uid", "generation": 1,
                     "resourceVersion": "plan-rv-0"},
        "spec": {
            "id": "shell",
            "timestamp": "now",
            "commands": [{"k0supdate": {
                "version": "v1.35.9+k0s.0",
                "platforms": {autopilot_api::platform::current(): {
                    "url": "http://127.0.0.1:9/k0s", "sha256": "0".repeat(64)}},
                "targets": {"workers": {
                    "discovery": {"static": {"nodes": workers}},
                    "limits": {"concurrent": workers.len()},
                }},
            }}],
        },
    }))
    .expect("a Plan")
}

/// A filled store of `objects`.
fn store<K>(objects: Vec<K>) -> Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (store, mut writer) = reflector::store::<K>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    // The store stays readable after its writer is gone.
    drop(writer);
    store
}

fn context(client: kube::Client, nodes: Vec<SlimNode>) -> Arc<Context> {
    context_with_nodes(client, store(nodes))
}

fn context_with_nodes(client: kube::Client, nodes: Store<SlimNode>) -> Arc<Context> {
    Arc::new(new_context(client, nodes))
}

/// A context of a leader term that began just now, with `nodes` and every other cache
/// filled and empty.
fn new_context(client: kube::Client, nodes: Store<SlimNode>) -> Context {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
    let policy = Policy {
        prometheus_url: None,
        exclude_controllers: false,
        exclude_workers: false,
        readiness_grace: Duration::from_secs(60),
        readiness_recheck: Duration::from_secs(5),
        node_progress_timeout: Duration::from_secs(600),
        drain_timeout: Duration::from_secs(300),
        allow_unverified_payloads: false,
    };
    let metrics =
        crate::metrics::Metrics::register(&mut prometheus_client::registry::Registry::default());
    let engine = Engine::new(
        client.clone(),
        config,
        "127.0.0.1:9".parse().expect("an address"),
        policy,
        "controller-0",
        metrics,
    )
    .expect("an engine");
    Context {
        events: EventPublisher::start(
            client.clone(),
            Reporter {
                controller: keys::FIELD_MANAGER.to_string(),
                instance: "controller-0".to_string(),
            },
            "plan",
        ),
        engine,
        plans: Api::all(client),
        control_nodes: store::<ControlNode>(Vec::new()),
        nodes,
        check_pods: store(Vec::new()),
        pod_templates: store(Vec::new()),
        written: Mutex::new(BTreeMap::new()),
        created_pods: Mutex::new(BTreeMap::new()),
        handoff: crate::handoff::Handoff::new().0,
        errors: Mutex::new(autopilot_api::backoff::Capped::default()),
        views: Mutex::new(Views::default()),
        started: Instant::now(),
        term_started: jiff::Timestamp::now(),
        status: std::sync::Mutex::new(StatusMemory::default()),
        pace: pace::Pace::DEFAULT,
    }
}

/// The Plan as the last status write left it (the fake server's answer), or `plan` if
/// nothing was written.
fn as_written(api: &FakeApi, plan: Plan) -> Plan {
    match api.requests("PUT").last() {
        Some(put) => {
            let mut body = put.body.clone();
            let written = api.requests("PUT").len();
            body["metadata"]["resourceVersion"] = json!(format!("plan-rv-{written}"));
            serde_json::from_value(body).expect("the written Plan")
        }
        None => plan,
    }
}

#[tokio::test]
async fn the_status_is_written_before_the_signals_each_with_the_snapshots_resource_version() {
    let api = FakeApi::default();
    let ctx = context(api.client(), vec![worker("w1"), worker("w2")]);
    let mut current = plan(&["w1", "w2"]);
    // The machine may take a pass or two (NewPlan, then scheduling) before it signals.
    let mut passes = 0;
    while api.requests("PATCH").is_empty() {
        passes += 1;
        assert!(passes <= 5, "no signal after 5 passes: {:#?}", api.writes());
        let before = api.writes().len();
        reconcile(Arc::new(current.clone()), ctx.clone()).await.expect("the pass completes");
        let pass: Vec<Seen> = api.writes().into_iter().skip(before).collect();
        let first_signal = pass.iter().position(|s| s.method == "PATCH");
        let status_write = pass.iter().position(|s| s.method == "PUT");
        if let Some(first_signal) = first_signal {
            // The status recording the signals is written first, on the Plan the pass read.
            let status_write = status_write.expect("a pass that signals writes the status");
            assert!(status_write < first_signal, "status after a signal: {pass:#?}");
            assert_eq!(
                pass[status_write].body["metadata"]["resourceVersion"],
                json!(current.metadata.resource_version),
                "the status write carries the resourceVersion of the Plan the pass read"
            );
            let recorded =
                &pass[status_write].body["status"]["commands"][0]["k0supdate"]["workers"];
            for signal in pass.iter().filter(|s| s.method == "PATCH") {
                let name = signal.path.trim_start_matches("/api/v1/nodes/");
                assert_eq!(
                    signal.body["metadata"]["resourceVersion"],
                    json!(format!("node-rv-{name}")),
                    "the signal to {name} carries its resourceVersion in the snapshot"
                );
                assert!(
                    signal.body["metadata"]["annotations"][keys::ANNOTATION_SIGNAL_DATA]
                        .is_string(),
                    "a signal patch writes the signal data: {signal:#?}"
                );
                let entry = recorded
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|target| target["name"] == json!(name))
                    .unwrap_or_else(|| panic!("{name} is not in the status written first"));
                assert_eq!(entry["state"], json!(TargetState::SignalSent));
            }
        }
        current = as_written(&api, current);
    }
    let mut signalled = signalled_in(&api.requests("PATCH"));
    // One pass's signals are written together, so they may reach the server in any order.
    signalled.sort();
    assert_eq!(signalled, ["w1", "w2"], "both workers signalled once");
}

#[tokio::test]
async fn a_refused_signal_fails_the_pass_after_the_others_of_its_batch_are_written() {
    let workers = ["w1", "w2", "w3"];
    let api = FakeApi { refused: Some("w2"), ..FakeApi::default() };
    let ctx = context(api.client(), workers.iter().map(|name| worker(name)).collect());
    let mut current = plan(&workers);
    let mut passes = 0;
    let outcome = loop {
        passes += 1;
        assert!(passes <= 5, "no signal after 5 passes: {:#?}", api.writes());
        let outcome = reconcile(Arc::new(current.clone()), ctx.clone()).await;
        if !api.requests("PATCH").is_empty() {
            break outcome;
        }
        outcome.expect("a pass before the signals completes");
        current = as_written(&api, current);
    };
    assert!(outcome.is_err(), "the refused signal fails the pass");
    let mut signalled = signalled_in(&api.requests("PATCH"));
    signalled.sort();
    assert_eq!(signalled, workers, "every signal of the batch was attempted, each once");
    // What was written is remembered (the next pass does not write it again before the
    // cache shows it); the refused one is not.
    let written = ctx.written.lock().expect("not poisoned");
    let mut remembered: Vec<&str> = written.keys().map(|target| target.name.as_str()).collect();
    remembered.sort_unstable();
    assert_eq!(remembered, ["w1", "w3"]);
}

#[tokio::test]
async fn a_pass_whose_status_write_conflicts_writes_no_signal() {
    // The Plan as it is before the pass that signals.
    let api = FakeApi::default();
    let ctx = context(api.client(), vec![worker("w1")]);
    let mut current = plan(&["w1"]);
    let mut passes = 0;
    let signalling = loop {
        passes += 1;
        assert!(passes <= 5, "no signal after 5 passes");
        reconcile(Arc::new(current.clone()), ctx.clone()).await.expect("the pass completes");
        if !api.requests("PATCH").is_empty() {
            break current;
        }
        current = as_written(&api, current);
    };

    // The same pass against a server that refuses the status write (a newer status exists).
    let refusing = FakeApi { conflict: true, ..FakeApi::default() };
    let result =
        reconcile(Arc::new(signalling), context(refusing.client(), vec![worker("w1")])).await;
    assert!(result.is_err(), "a refused status write fails the pass");
    let writes = refusing.writes();
    assert_eq!(writes.len(), 1, "only the refused status write, no signal: {writes:#?}");
    assert_eq!(writes[0].method, "PUT");
}

#[tokio::test]
async fn a_pass_before_the_caches_are_filled_comes_back_shortly_without_waiting_for_them() {
    let api = FakeApi::default();
    // The Node watch has not finished its first list: its cache is not filled.
    let (nodes, _writer) = reflector::store::<SlimNode>();
    let ctx = context_with_nodes(api.client(), nodes);
    // Well under the 5 s a pass used to wait at the start of every leader term.
    let pass =
        tokio::time::timeout(Duration::from_secs(1), reconcile(Arc::new(plan(&["w1"])), ctx))
            .await
            .expect("the pass does not wait for the caches");
    assert_eq!(pass.expect("the pass completes"), Action::requeue(CONFLICT_RETRY));
    assert!(api.writes().is_empty(), "nothing decided on unfilled caches: {:#?}", api.writes());
}

/// A plan updating `workers` behind a `scheduler` check on them (template `probe`).
fn plan_with_a_scheduler_check(workers: &[&str]) -> Plan {
    let mut plan = plan(workers);
    let check = json!({"commands": [{"preflight": {"checks": [{
        "id": "probe",
        "targets": {"workers": {"discovery": {"static": {"nodes": workers}}}},
        "command": {"id": "scheduler", "data": {"kubernetes": {"podName": "probe"}}},
    }]}}]});
    let preflight = serde_json::from_value(check["commands"][0].clone()).expect("a command");
    plan.spec.commands.insert(0, preflight);
    plan
}

#[tokio::test]
async fn a_pass_needing_check_pods_does_not_wait_for_their_caches_either() {
    let api = FakeApi::default();
    let mut ctx = new_context(api.client(), store(vec![worker("w1")]));
    // The check Pod watch has not finished its first list.
    let (check_pods, _writer) = reflector::store::<Pod>();
    ctx.check_pods = check_pods;
    let pass = tokio::time::timeout(
        Duration::from_secs(1),
        reconcile(Arc::new(plan_with_a_scheduler_check(&["w1"])), Arc::new(ctx)),
    )
    .await
    .expect("the pass does not wait for the check Pod cache");
    assert_eq!(pass.expect("the pass completes"), Action::requeue(CONFLICT_RETRY));
    assert!(api.writes().is_empty(), "nothing decided on unfilled caches: {:#?}", api.writes());
}

#[tokio::test]
async fn caches_still_unfilled_late_in_a_term_bring_the_pass_back_slowly() {
    let api = FakeApi::default();
    let (nodes, _writer) = reflector::store::<SlimNode>();
    let mut ctx = new_context(api.client(), nodes);
    // The term began longer ago than the first lists take: something keeps them from
    // completing (RBAC, an API server that does not answer). No busy loop of passes.
    ctx.started = Instant::now()
        .checked_sub(CACHE_READY_TIMEOUT + Duration::from_secs(1))
        .expect("the clock is past the timeout");
    let pass = reconcile(Arc::new(plan(&["w1"])), Arc::new(ctx)).await;
    assert_eq!(pass.expect("the pass completes"), Action::requeue(CACHE_READY_TIMEOUT));
    assert!(api.writes().is_empty(), "nothing decided on unfilled caches: {:#?}", api.writes());
}

fn node_event(name: &str, edit: impl FnOnce(&mut SlimNode)) -> SlimNode {
    let mut node = worker(name);
    edit(&mut node);
    node
}

/// Runs `events` through the trigger filter and returns the names it passed on.
async fn triggered(events: Vec<watcher::Event<SlimNode>>) -> Vec<String> {
    let stream = futures::stream::iter(events.into_iter().map(Ok));
    triggers(stream, node_fingerprint)
        .map(|object| object.expect("no error").metadata.name.unwrap_or_default())
        .collect()
        .await
}

#[tokio::test]
async fn the_trigger_filter_passes_what_a_decision_reads_and_drops_heartbeats() {
    // A kubelet heartbeat as the watch decodes it: a new resourceVersion and heartbeat time.
    let mut heartbeat = worker_json("w1");
    heartbeat["metadata"]["resourceVersion"] = json!("later");
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = json!("2026-11-27T12:00:00Z");
    let heartbeat: SlimNode = serde_json::from_value(heartbeat).expect("a Node");
    let passed = triggered(vec![
        watcher::Event::Init,
        watcher::Event::InitApply(worker("w1")),
        watcher::Event::InitApply(worker("w2")),
        watcher::Event::InitDone,
        // A kubelet heartbeat changes nothing a decision reads.
        watcher::Event::Apply(heartbeat),
        // A label (selectors, platform), a signal and readiness do.
        watcher::Event::Apply(node_event("w1", |node| {
            node.metadata.labels.get_or_insert_default().insert("role".into(), "db".into());
        })),
        watcher::Event::Apply(node_event("w2", |node| {
            node.metadata
                .annotations
                .get_or_insert_default()
                .insert(keys::ANNOTATION_SIGNAL_DATA.into(), "{}".into());
        })),
        watcher::Event::Apply(node_event("w2", |node| {
            node.metadata
                .annotations
                .get_or_insert_default()
                .insert(keys::ANNOTATION_SIGNAL_DATA.into(), "{}".into());
            node.ready = false;
        })),
        // A deletion always passes; the same object coming back passes again.
        watcher::Event::Delete(worker("w1")),
        watcher::Event::Apply(worker("w1")),
    ])
    .await;
    assert_eq!(passed, ["w1", "w2", "w1", "w2", "w2", "w1", "w1"]);
}

#[tokio::test]
async fn a_relist_passes_every_object_again() {
    let passed = triggered(vec![
        watcher::Event::Init,
        watcher::Event::InitApply(worker("w1")),
        watcher::Event::InitDone,
        watcher::Event::Apply(worker("w1")),
        watcher::Event::Init,
        watcher::Event::InitApply(worker("w1")),
        watcher::Event::InitDone,
    ])
    .await;
    assert_eq!(passed, ["w1", "w1"], "an unchanged update is dropped, a re-list is not");
}

#[tokio::test]
async fn only_signalled_objects_are_fed_to_the_drain() {
    let (feed, fed) = futures::channel::mpsc::unbounded();
    let signalled = node_event("w2", |node| {
        node.metadata
            .annotations
            .get_or_insert_default()
            .insert(keys::ANNOTATION_SIGNAL_DATA.into(), "{}".into());
    });
    let events = vec![
        Ok(watcher::Event::Init),
        Ok(watcher::Event::InitApply(worker("w1"))),
        Ok(watcher::Event::InitApply(signalled.clone())),
        Ok(watcher::Event::InitDone),
        Ok(watcher::Event::Apply(signalled)),
        Ok(watcher::Event::Delete(worker("w1"))),
    ];
    let passed = feed_signalled(futures::stream::iter(events), feed).count().await;
    assert_eq!(passed, 6, "the watch's own events are unchanged");
    let fed: Vec<String> =
        fed.map(|node: SlimNode| node.metadata.name.unwrap_or_default()).collect().await;
    assert_eq!(fed, ["w2", "w2"]);
}

/// `plan(workers)` signalling `concurrent` workers at a time.
fn plan_limited(workers: &[&str], concurrent: usize) -> Plan {
    let mut plan = serde_json::to_value(plan(workers)).expect("a Plan as JSON");
    plan["spec"]["commands"][0]["k0supdate"]["targets"]["workers"]["limits"]["concurrent"] =
        json!(concurrent);
    serde_json::from_value(plan).expect("a Plan")
}

/// The worker a signal `patch` went to, reporting `Completed` on that signal.
fn completed(patch: &Seen) -> SlimNode {
    reporting(patch, autopilot_api::signal::SignalPhase::Completed)
}

/// The Node of the signal `patch` wrote, its node reporting `phase` on it.
fn reporting(patch: &Seen, phase: autopilot_api::signal::SignalPhase) -> SlimNode {
    let name = patch.path.trim_start_matches("/api/v1/nodes/");
    let data = signal_of(patch);
    let mut data = data;
    data.status = Some(autopilot_api::signal::SignalStatus::new(phase, jiff::Timestamp::now()));
    let mut node = worker(name);
    node.metadata.resource_version = Some(format!("node-rv-{name}-{phase}"));
    node.metadata.annotations = Some(autopilot_api::signal::to_annotations(&data));
    node
}

/// The signal a signal `patch` wrote.
fn signal_of(patch: &Seen) -> autopilot_api::signal::SignalData {
    let annotations = &patch.body["metadata"]["annotations"];
    let version = annotations[keys::ANNOTATION_SIGNAL_VERSION].as_str().expect("a version");
    let data = annotations[keys::ANNOTATION_SIGNAL_DATA].as_str().expect("signal data");
    autopilot_api::signal::decode(version, data).expect("a valid signal")
}

/// The workers signalled by the signal patches among `requests`.
fn signalled_in(requests: &[Seen]) -> Vec<String> {
    requests
        .iter()
        .filter(|s| s.method == "PATCH")
        .map(|s| s.path.trim_start_matches("/api/v1/nodes/").to_owned())
        .collect()
}

/// A run over the workers `names`, `concurrent` at a time, whose every status counts as big
/// and waits an hour to be written, driven up to the pass that signals the first batch.
struct PacedRun {
    api: FakeApi,
    /// Fills the Node cache the passes read.
    nodes: reflector::store::Writer<SlimNode>,
    ctx: Arc<Context>,
    /// The Plan as the last status write left it.
    current: Plan,
}

impl PacedRun {
    async fn to_first_batch(names: &[&str], concurrent: usize) -> Self {
        let api = FakeApi::default();
        let (store, mut nodes) = reflector::store::<SlimNode>();
        nodes.apply_watcher_event(&watcher::Event::Init);
        for name in names {
            nodes.apply_watcher_event(&watcher::Event::InitApply(worker(name)));
        }
        nodes.apply_watcher_event(&watcher::Event::InitDone);
        let ctx = Arc::new(Context {
            pace: pace::Pace {
                from_bytes: 0,
                bytes_per_second: 1,
                max_delay: Duration::from_secs(3600),
            },
            ..new_context(api.client(), store)
        });
        let mut run = Self { api, nodes, ctx, current: plan_limited(names, concurrent) };
        let mut passes = 0;
        while run.api.requests("PATCH").is_empty() {
            passes += 1;
            assert!(passes <= 5, "no signal after 5 passes: {:#?}", run.api.writes());
            run.pass().await;
            run.current = as_written(&run.api, run.current);
        }
        run
    }

    /// A pass over `current`.
    async fn pass(&self) -> Action {
        reconcile(Arc::new(self.current.clone()), self.ctx.clone())
            .await
            .expect("the pass completes")
    }

    /// Every signalled worker after the first `skip` reports `Completed`.
    fn complete_signalled(&mut self, skip: usize) {
        for patch in self.api.requests("PATCH").iter().skip(skip) {
            self.nodes.apply_watcher_event(&watcher::Event::Apply(completed(patch)));
        }
    }
}

#[tokio::test]
async fn a_big_statuss_progress_waits_for_its_pace_while_each_batch_is_recorded_before_its_signals()
{
    let mut run = PacedRun::to_first_batch(&["w1", "w2", "w3", "w4", "w5", "w6"], 2).await;
    let api = run.api.clone();
    assert_eq!(signalled_in(&api.writes()), ["w1", "w2"]);
    let writes = api.requests("PUT").len();

    // The first batch reports its progress: kept, not written yet.
    for patch in api.requests("PATCH") {
        let phase = autopilot_api::signal::SignalPhase::Downloading;
        run.nodes.apply_watcher_event(&watcher::Event::Apply(reporting(&patch, phase)));
    }
    let action = run.pass().await;
    assert_eq!(api.requests("PUT").len(), writes, "progress only: not written yet");
    assert_ne!(action, Action::await_change(), "the pass comes back to write it");

    // Each next batch: its signals are recorded in a status written at once, before them.
    for (batch, names) in [(1, ["w3", "w4"]), (2, ["w5", "w6"])] {
        run.complete_signalled(2 * (batch - 1));
        let before = api.writes().len();
        run.pass().await;
        let new_writes: Vec<Seen> = api.writes().into_iter().skip(before).collect();
        assert_eq!(signalled_in(&new_writes), names, "batch {batch}");
        assert_eq!(new_writes[0].method, "PUT", "batch {batch}: the status goes first");
        assert_eq!(api.requests("PUT").len(), writes + batch, "batch {batch}: one status write");
        let status = &new_writes[0].body["status"]["commands"][0]["k0supdate"]["workers"];
        for patch in new_writes.iter().filter(|s| s.method == "PATCH") {
            let name = patch.path.trim_start_matches("/api/v1/nodes/");
            let target = status
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["name"] == json!(name))
                .expect("the target is listed");
            assert_eq!(target["signalled"], json!(signal_of(patch).created), "{name}");
        }
        run.current = as_written(&api, run.current.clone());
    }

    // The last batch completes: the command's end is a milestone, written at once, with
    // every node's progress.
    run.complete_signalled(4);
    run.pass().await;
    let puts = api.requests("PUT");
    assert_eq!(puts.len(), writes + 3, "the end is written at once");
    let status = &puts.last().expect("a status write").body["status"];
    assert_eq!(status["state"], json!("Completed"), "{status:#}");
    let workers = status["commands"][0]["k0supdate"]["workers"].as_array();
    let grouped = &status["commands"][0]["k0supdate"]["groupedWorkers"];
    assert!(
        workers.into_iter().flatten().all(|t| t["state"] == json!(TargetState::SignalCompleted))
            && status["progress"] == json!("6/6"),
        "every node's progress is written: {status:#} {grouped:#}"
    );
}

#[tokio::test]
async fn a_kept_status_gives_way_to_one_someone_else_wrote() {
    let mut run = PacedRun::to_first_batch(&["w1", "w2", "w3", "w4"], 1).await;
    let api = run.api.clone();
    run.complete_signalled(0);
    run.pass().await;
    let writes = api.requests("PUT").len();
    assert_eq!(signalled_in(&api.writes()), ["w1", "w2"], "w2 signalled, its progress kept");

    // Someone else writes the status (an operator, or a leader this one does not know of):
    // the next pass goes on from it and writes at once, under its resourceVersion.
    let mut foreign = run.current.clone();
    foreign.metadata.resource_version = Some("plan-rv-foreign".to_owned());
    if let Some(status) = foreign.status.as_mut() {
        status.progress = Some("written elsewhere".to_owned());
    }
    reconcile(Arc::new(foreign), run.ctx.clone()).await.expect("the pass completes");
    let puts = api.requests("PUT");
    assert_eq!(puts.len(), writes + 1, "written at once over the foreign status");
    assert_eq!(
        puts.last().expect("a status write").body["metadata"]["resourceVersion"],
        json!("plan-rv-foreign")
    );
}
