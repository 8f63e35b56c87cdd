//! The updater's kube shell: watches UpdateConfigs, runs one updater task per UpdateConfig
//! while this controller leads, and turns each check into a Plan write and an Event.
//!
//! The watch runs on every controller, leader or not, so that deleting an UpdateConfig only
//! needs *some* controller up: removing [`keys::UPDATECONFIG_FINALIZER`] is the only thing
//! done on delete. Adding the finalizer, checking the update server and writing Plans happen
//! only while leading.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use autopilot_api::v1beta2::{Plan, PlanSpec, UpdateConfig};
use autopilot_api::{keys, text};
use autopilot_shell::events::{self, Event, EventType, Reporter};
use futures::StreamExt as _;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::core::v1::{Namespace, Node, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::decide::{self, Decision, Inputs, Strategy, reasons};
use crate::source::{self, ClusterInfo, LegacyQuery, RequestOptions, WorkerData};

/// How soon after an updater task starts its first check runs. Short, so an UpdateConfig
/// (or a new leader) acts at once, not a full period later; not zero, so a burst of
/// changes to one object restarts the task before it talks to the server.
const FIRST_CHECK_DELAY: Duration = Duration::from_millis(500);

/// What the updater needs from its process.
#[derive(Clone, Debug)]
pub struct UpdaterProcess {
    /// The version this controller runs (compared with what the server offers).
    pub running_version: String,
    /// The zone windows and cron schedules are evaluated in (the controller's local zone).
    pub tz: TimeZone,
    /// How often the `periodic` strategy checks (`K0S_UPDATE_PERIOD`).
    pub period: Duration,
    /// Send cluster information headers to the update server (operator opt-in).
    pub send_cluster_info: bool,
    /// Plan plain-http downloads without a digest too (`--allow-unverified-payloads`).
    pub allow_unverified_payloads: bool,
    /// Where the updater records its metrics.
    pub metrics: crate::metrics::Metrics,
}

/// Run the updater until `stop` is cancelled. Updater tasks run only while `leading` is true;
/// finalizers of deleted UpdateConfigs are removed whether leading or not.
pub async fn run(
    client: kube::Client,
    process: UpdaterProcess,
    mut leading: watch::Receiver<bool>,
    stop: CancellationToken,
) {
    let process = Arc::new(process);
    let api = Api::<UpdateConfig>::all(client.clone());
    let mut events = std::pin::pin!(watcher(api.clone(), watcher::Config::default()));
    let mut state = Updaters::default();
    let mut is_leader = *leading.borrow_and_update();
    let mut elector_gone = false;
    // Re-creating the stream after an error is what the watcher does itself; back off a bit
    // so a missing CRD or an outage does not spin, but with the short cap every watch of
    // autopilot uses: after an API-server outage the updater sees UpdateConfig changes again
    // within `backoff::CAP` of the server answering (it used to wait up to 10 s).
    let mut backoff = autopilot_api::backoff::Capped::default();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            changed = leading.changed(), if !elector_gone => {
                // The elector gone means nobody will make this process lead again.
                elector_gone = changed.is_err();
                let now_leading = !elector_gone && *leading.borrow_and_update();
                if now_leading != is_leader {
                    is_leader = now_leading;
                    info!(leading = is_leader, "updater leadership changed");
                    if is_leader {
                        state.start_all(&client, &api, &process).await;
                    } else {
                        state.stop_all(&process);
                    }
                }
            }
            event = events.next() => match event {
                Some(Ok(event)) => {
                    backoff.reset();
                    state.apply(event, &client, &api, &process, is_leader).await;
                }
                Some(Err(err)) => {
                    debug!(error = %err, "updateconfig watch failed, retrying");
                    let delay = backoff.next().unwrap_or(autopilot_api::backoff::CAP);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = stop.cancelled() => break,
                    }
                }
                None => break,
            },
        }
    }
    state.stop_all(&process);
}

/// What the watch knows: the latest version of every UpdateConfig and its task, if running.
#[derive(Default)]
struct Updaters {
    configs: HashMap<String, Entry>,
    /// Names seen since the current watch (re)list began.
    init_seen: Option<Vec<String>>,
}

struct Entry {
    config: Arc<UpdateConfig>,
    /// The generation the running task was started for, and the task.
    task: Option<(Option<i64>, JoinHandle<()>)>,
}

impl Updaters {
    async fn apply(
        &mut self,
        event: watcher::Event<UpdateConfig>,
        client: &kube::Client,
        api: &Api<UpdateConfig>,
        process: &Arc<UpdaterProcess>,
        is_leader: bool,
    ) {
        match event {
            watcher::Event::Init => self.init_seen = Some(Vec::new()),
            watcher::Event::InitApply(config) => {
                if let Some(seen) = &mut self.init_seen {
                    seen.push(config.name_any());
                }
                self.upsert(config, client, api, process, is_leader).await;
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.init_seen.take() {
                    let gone: Vec<String> =
                        self.configs.keys().filter(|n| !seen.contains(n)).cloned().collect();
                    for name in gone {
                        self.remove(&name, process);
                    }
                }
            }
            watcher::Event::Apply(config) => {
                self.upsert(config, client, api, process, is_leader).await;
            }
            watcher::Event::Delete(config) => self.remove(&config.name_any(), process),
        }
    }

    async fn upsert(
        &mut self,
        config: UpdateConfig,
        client: &kube::Client,
        api: &Api<UpdateConfig>,
        process: &Arc<UpdaterProcess>,
        is_leader: bool,
    ) {
        let name = config.name_any();
        let has_finalizer = config.finalizers().iter().any(|f| f == keys::UPDATECONFIG_FINALIZER);
        if config.meta().deletion_timestamp.is_some() {
            // Deletion never waits for anything: stop the task, drop the finalizer.
            self.remove(&name, process);
            if has_finalizer {
                remove_finalizer(api, &config).await;
            }
            return;
        }
        if is_leader && !has_finalizer {
            add_finalizer(api, &config).await;
        }
        let config = Arc::new(config);
        let entry = self
            .configs
            .entry(name)
            .or_insert_with(|| Entry { config: config.clone(), task: None });
        entry.config = config;
        if is_leader {
            entry.ensure_task(client, process);
        }
    }

    fn remove(&mut self, name: &str, process: &UpdaterProcess) {
        process.metrics.forget(name);
        if let Some(entry) = self.configs.remove(name)
            && let Some((_, task)) = entry.task
        {
            info!(update_config = name, "stopping updater");
            task.abort();
        }
    }

    /// On becoming leader: the finalizer on every UpdateConfig seen meanwhile, and a task each.
    async fn start_all(
        &mut self,
        client: &kube::Client,
        api: &Api<UpdateConfig>,
        process: &Arc<UpdaterProcess>,
    ) {
        for entry in self.configs.values_mut() {
            if !entry.config.finalizers().iter().any(|f| f == keys::UPDATECONFIG_FINALIZER) {
                add_finalizer(api, &entry.config).await;
            }
            entry.ensure_task(client, process);
        }
    }

    fn stop_all(&mut self, process: &UpdaterProcess) {
        for (name, entry) in &mut self.configs {
            // The new leader's updater shows these.
            process.metrics.forget(name);
            if let Some((_, task)) = entry.task.take() {
                task.abort();
            }
        }
    }
}

impl Entry {
    /// Exactly one task per UpdateConfig, restarted when its generation (its spec) changes.
    fn ensure_task(&mut self, client: &kube::Client, process: &Arc<UpdaterProcess>) {
        let generation = self.config.meta().generation;
        if let Some((running_for, task)) = &self.task {
            if *running_for == generation && !task.is_finished() {
                return;
            }
            task.abort();
        }
        info!(update_config = %self.config.name_any(), ?generation, "starting updater");
        let updater = Updater {
            client: client.clone(),
            process: process.clone(),
            config: self.config.clone(),
        };
        self.task = Some((generation, tokio::spawn(updater.run())));
    }
}

async fn add_finalizer(api: &Api<UpdateConfig>, config: &UpdateConfig) {
    let mut finalizers = config.finalizers().to_vec();
    finalizers.push(keys::UPDATECONFIG_FINALIZER.to_string());
    patch_finalizers(api, config, finalizers, "adding").await;
}

async fn remove_finalizer(api: &Api<UpdateConfig>, config: &UpdateConfig) {
    let finalizers: Vec<String> = config
        .finalizers()
        .iter()
        .filter(|f| *f != keys::UPDATECONFIG_FINALIZER)
        .cloned()
        .collect();
    patch_finalizers(api, config, finalizers, "removing").await;
}

/// Merge-patch the finalizer list, guarded by the resourceVersion it was computed from; a
/// conflict means a newer version is on its way through the watch, which retries.
async fn patch_finalizers(
    api: &Api<UpdateConfig>,
    config: &UpdateConfig,
    finalizers: Vec<String>,
    verb: &str,
) {
    let name = config.name_any();
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": config.resource_version(),
            "finalizers": finalizers,
        }
    });
    match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => debug!(update_config = %name, "{verb} the updateconfig finalizer"),
        Err(err) => {
            warn!(update_config = %name, error = %err, "{verb} the updateconfig finalizer failed")
        }
    }
}

/// One UpdateConfig's updater.
struct Updater {
    client: kube::Client,
    process: Arc<UpdaterProcess>,
    config: Arc<UpdateConfig>,
}

/// What one check ended with, for the Event and the log.
struct Outcome {
    reason: &'static str,
    message: String,
    warning: bool,
    /// When the window opens, if the check found it closed.
    opens_at: Option<Timestamp>,
}

impl Updater {
    async fn run(self) {
        let name = self.config.name_any();
        let strategy = match Strategy::from_spec(self.config.spec.upgrade_strategy.as_ref()) {
            Ok(strategy) => strategy,
            Err(err) => {
                let outcome = Outcome {
                    reason: reasons::INVALID,
                    message: format!("invalid upgradeStrategy: {err}"),
                    warning: true,
                    opens_at: None,
                };
                self.record(&outcome).await;
                // Nothing to do until the object changes (which restarts this task).
                return;
            }
        };
        let source = match source::Client::new() {
            Ok(source) => source,
            Err(err) => {
                warn!(update_config = %name, error = %err, "cannot create the update-server client");
                return;
            }
        };
        // `periodic` checks soon after start; `cron` only when its schedule fires (as k0s).
        let first = match &strategy {
            Strategy::Periodic(_) => Some(FIRST_CHECK_DELAY),
            Strategy::Cron(_) => {
                let now = Timestamp::now();
                strategy
                    .next_check(now, &self.process.tz, self.process.period)
                    .map(|at| Duration::try_from(now.duration_until(at)).unwrap_or(Duration::ZERO))
            }
        };
        let Some(first) = first else {
            info!(update_config = %name, "the cron schedule never fires; no checks");
            return;
        };
        tokio::time::sleep(first).await;
        loop {
            let outcome = self.check(&strategy, &source).await;
            self.record(&outcome).await;
            let now = Timestamp::now();
            let mut next = strategy.next_check(now, &self.process.tz, self.process.period);
            if let (Some(at), Some(opens)) = (next, outcome.opens_at)
                && opens > now
                && opens < at
            {
                next = Some(opens);
            }
            let window_open = match &strategy {
                Strategy::Periodic(window) => window.state_at(now, &self.process.tz).is_open(),
                // The server decides when to update; there is no window to wait for.
                Strategy::Cron(_) => true,
            };
            self.process.metrics.record_schedule(&name, next, window_open);
            let Some(next) = next else {
                info!(update_config = %name, "no further checks are scheduled");
                return;
            };
            let wait = now.duration_until(next);
            let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO);
            debug!(update_config = %name, next = %next, "next update check");
            tokio::time::sleep(wait).await;
        }
    }

    /// One check: token, server answer, current Plan, decision, Plan write.
    async fn check(&self, strategy: &Strategy, source: &source::Client) -> Outcome {
        let spec = &self.config.spec;
        let token = self.read_token().await;
        let plans = Api::<Plan>::all(self.client.clone());
        let plan = match plans.get_opt(keys::PLAN_NAME).await {
            Ok(plan) => plan,
            Err(err) => {
                return Outcome {
                    reason: reasons::SERVER_ERROR,
                    message: format!("cannot read the autopilot plan: {err}"),
                    warning: true,
                    opens_at: None,
                };
            }
        };
        let cluster_info =
            if self.process.send_cluster_info { self.cluster_info().await } else { None };
        let options =
            RequestOptions { token: token.as_deref(), cluster_info: cluster_info.as_ref() };
        let fetched = match strategy {
            Strategy::Periodic(_) => {
                source.fetch_index(&spec.update_server, &spec.channel, options).await
            }
            Strategy::Cron(_) => {
                let query = LegacyQuery {
                    cluster_id: self.kube_system_uid().await.unwrap_or_default(),
                    last_update_status: plan
                        .as_ref()
                        .and_then(|p| p.status.as_ref())
                        .map(|s| s.state.to_string())
                        .unwrap_or_default(),
                    current_version: self.process.running_version.clone(),
                };
                source.fetch_legacy(&spec.update_server, &spec.channel, &query, options).await
            }
        };
        let answer = match fetched {
            Ok(answer) => answer,
            Err(err) => {
                return Outcome {
                    reason: reasons::SERVER_ERROR,
                    message: text::error_chain(&err),
                    warning: true,
                    opens_at: None,
                };
            }
        };
        let decision = decide::decide(&Inputs {
            spec,
            now: Timestamp::now(),
            tz: &self.process.tz,
            running_version: &self.process.running_version,
            answer: &answer,
            plan: plan.as_ref(),
            allow_unverified_payloads: self.process.allow_unverified_payloads,
        });
        let opens_at = match &decision {
            Decision::OutsideWindow { opens_at, .. } => *opens_at,
            _ => None,
        };
        let written = match &decision {
            Decision::CreatePlan(spec) => self.create_plan(&plans, spec).await,
            Decision::ReplacePlan { spec, .. } => match &plan {
                Some(existing) => self.replace_plan(&plans, existing, spec).await,
                None => self.create_plan(&plans, spec).await,
            },
            Decision::UpToDate { .. }
            | Decision::OutsideWindow { .. }
            | Decision::PlanRunning { .. }
            | Decision::AlreadyPlanned { .. }
            | Decision::UnverifiedPayload { .. }
            | Decision::Invalid(_) => Ok(()),
        };
        if let Err(err) = written {
            return Outcome {
                reason: reasons::SERVER_ERROR,
                message: format!("cannot write the autopilot plan: {err}"),
                warning: true,
                opens_at: None,
            };
        }
        Outcome {
            reason: decision.reason(),
            message: decision.message(),
            warning: decision.is_problem(),
            opens_at,
        }
    }

    async fn create_plan(&self, plans: &Api<Plan>, spec: &PlanSpec) -> Result<(), kube::Error> {
        let plan = Plan {
            metadata: ObjectMeta { name: Some(keys::PLAN_NAME.to_string()), ..Default::default() },
            spec: spec.clone(),
            status: None,
        };
        let params = PostParams {
            field_manager: Some(keys::FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        plans.create(&params, &plan).await.map(drop)
    }

    /// Replace the spec of an ended Plan; the read's resourceVersion guards against a
    /// concurrent change (a conflict fails this check; the next one retries).
    async fn replace_plan(
        &self,
        plans: &Api<Plan>,
        existing: &Plan,
        spec: &PlanSpec,
    ) -> Result<(), kube::Error> {
        let mut plan = existing.clone();
        plan.spec = spec.clone();
        let params = PostParams {
            field_manager: Some(keys::FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        plans.replace(keys::PLAN_NAME, &params, &plan).await.map(drop)
    }

    /// The bearer token, if the Secret and its `token` key exist.
    async fn read_token(&self) -> Option<String> {
        let secrets =
            Api::<Secret>::namespaced(self.client.clone(), keys::UPDATE_SERVER_TOKEN_NAMESPACE);
        match secrets.get_opt(keys::UPDATE_SERVER_TOKEN_SECRET).await {
            Ok(secret) => secret
                .and_then(|s| s.data)
                .and_then(|mut data| data.remove(keys::UPDATE_SERVER_TOKEN_KEY))
                .and_then(|bytes| String::from_utf8(bytes.0).ok())
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
            Err(err) => {
                warn!(error = %err, "cannot read the update-server token; checking without it");
                None
            }
        }
    }

    async fn kube_system_uid(&self) -> Option<String> {
        let namespaces = Api::<Namespace>::all(self.client.clone());
        match namespaces.get(keys::CLUSTER_ID_NAMESPACE).await {
            Ok(ns) => ns.metadata.uid,
            Err(err) => {
                warn!(error = %err, "cannot read the kube-system namespace");
                None
            }
        }
    }

    /// Cluster facts for the opt-in headers (REF §11.4); `None` if they cannot be read.
    async fn cluster_info(&self) -> Option<ClusterInfo> {
        let kube_system_uid = self.kube_system_uid().await?;
        let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            self.client.clone(),
            keys::NODE_LEASE_NAMESPACE,
        );
        let control_plane_nodes_count = match leases.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter(|l| l.name_any().starts_with(keys::CONTROLLER_LEASE_PREFIX))
                .count(),
            Err(err) => {
                warn!(error = %err, "cannot list node leases for cluster info");
                return None;
            }
        };
        let mut workers = WorkerData::default();
        match Api::<Node>::all(self.client.clone()).list(&ListParams::default()).await {
            Ok(nodes) => {
                for node in nodes.items {
                    let arch = node.labels().get(keys::LABEL_ARCH).cloned().unwrap_or_default();
                    *workers.archs.entry(arch).or_default() += 1;
                    let info = node.status.and_then(|s| s.node_info);
                    let (os, runtime) =
                        info.map(|i| (i.os_image, i.container_runtime_version)).unwrap_or_default();
                    *workers.oses.entry(os).or_default() += 1;
                    *workers.runtimes.entry(runtime).or_default() += 1;
                }
            }
            Err(err) => {
                warn!(error = %err, "cannot list nodes for cluster info");
                return None;
            }
        }
        Some(ClusterInfo {
            storage_type: "etcd".to_string(),
            kube_system_uid,
            control_plane_nodes_count: u32::try_from(control_plane_nodes_count).unwrap_or(u32::MAX),
            workers,
            version: self.process.running_version.clone(),
            cni_provider: String::new(),
            arch: go_arch().to_string(),
        })
    }

    /// Log the outcome and record it as an Event on the UpdateConfig.
    async fn record(&self, outcome: &Outcome) {
        let name = self.config.name_any();
        self.process.metrics.record_check(&name, Timestamp::now(), outcome.reason);
        if outcome.warning {
            warn!(update_config = %name, reason = outcome.reason, "{}", outcome.message);
        } else {
            info!(update_config = %name, reason = outcome.reason, "{}", outcome.message);
        }
        if let Err(err) = publish_event(&self.client, &self.config, outcome).await {
            warn!(update_config = %name, error = %err, "cannot publish updater event");
        }
    }
}

/// The Event recording `outcome` on `config`, published and awaited, so the Events of one
/// UpdateConfig follow its checks in order.
async fn publish_event(
    client: &kube::Client,
    config: &UpdateConfig,
    outcome: &Outcome,
) -> Result<(), kube::Error> {
    let regarding = ObjectReference {
        api_version: Some(keys::API_VERSION.to_string()),
        kind: Some(keys::KIND_UPDATE_CONFIG.to_string()),
        name: Some(config.name_any()),
        uid: config.uid(),
        resource_version: config.resource_version(),
        ..Default::default()
    };
    let event = Event {
        regarding,
        action: "CheckForUpdate",
        type_: if outcome.warning { EventType::Warning } else { EventType::Normal },
        reason: outcome.reason,
        // Cut short of the publisher's limit, so the note carries no `…` mark.
        note: text::cut(&outcome.message, events::NOTE_MAX_BYTES).to_string(),
    };
    let reporter = Reporter {
        controller: keys::UPDATER_REPORTER.to_string(),
        instance: keys::UPDATER_REPORTER.to_string(),
    };
    events::publish(client, &reporter, &event).await
}

/// This controller's architecture, Go-style as the update server expects.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "riscv64" => "riscv64",
        other => other,
    }
}

impl UpdaterProcess {
    /// An updater for a controller running `running_version`, evaluating windows in the
    /// controller's local zone (as k0s does).
    pub fn local(
        running_version: &str,
        period: Duration,
        send_cluster_info: bool,
        allow_unverified_payloads: bool,
        metrics: crate::metrics::Metrics,
    ) -> Self {
        Self {
            running_version: running_version.to_string(),
            tz: TimeZone::system(),
            period,
            send_cluster_info,
            allow_unverified_payloads,
            metrics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_arch_uses_go_names() {
        let arch = go_arch();
        assert_ne!(arch, "x86_64");
        assert_ne!(arch, "aarch64");
    }
}
