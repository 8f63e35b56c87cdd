//! The node side of autopilot.
//!
//! Its components (see `autopilot_shell::lifecycle`), which `k0s worker` and `k0s
//! controller` declare: [`StatusSocket`] (`k0s status`), [`NodeRegistration`] (with its own
//! node credentials a node registers its `Node` and keeps its `Ready` condition and node
//! lease fresh: there is no kubelet in this distribution's test topology) and
//! [`UpdateAgent`] (acting on update signals).
//!
//! Not here: anything the leader does (that is `autopilot-controller`).

pub mod agent;
pub mod download;
pub mod host;
pub mod metrics;
pub mod node;
mod ownership;
pub mod post_update;
pub mod preflight;
pub mod signature;
pub mod status;
pub mod trial;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::v1beta2::ControlNode;
use autopilot_shell::leadership::Leadership;
use autopilot_shell::lifecycle::{Component, Env, Exit, Idle, Purpose, Running};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// Command-line arguments of `k0s worker`.
#[derive(Clone, Debug, clap::Args)]
pub struct WorkerArgs {
    /// Whether this process registers the Node itself (hosts without a kubelet).
    #[command(flatten)]
    pub registration: RegistrationArgs,

    /// How often the Node's Ready condition and node lease are renewed.
    #[arg(long, default_value = "10s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub heartbeat_interval: Duration,

    /// How long to keep retrying while the API server cannot answer at startup before
    /// giving up with an error; `0s` (the default) keeps retrying for as long as it takes,
    /// so an outage never kills a node. A misconfiguration (TLS trust, credentials) fails at
    /// once either way.
    #[arg(long, default_value = "0s", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub startup_timeout: Duration,

    /// How the worker restarts into a new binary after an update: `exec` re-executes itself
    /// with the same arguments (no supervisor needed); `exit` exits for a supervisor
    /// (systemd `Restart=always` and the like) to start the new binary.
    #[arg(long, value_enum, default_value_t = RestartMode::Exec)]
    pub restart: RestartMode,

    /// How long a new binary may take to become healthy in its trial boot (counted only
    /// while the API server answers) before the node goes back to the binary it ran.
    #[arg(long, default_value = "2m", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub trial_timeout: Duration,

    /// How long a new binary is watched after it passed its trial boot and was swapped in
    /// (counted only while the API server answers: an outage proves nothing): three
    /// abnormal exits within it, or never 60 s healthy in a row (up, its agent's watch of
    /// its own Node established), put the previous binary back. `0s`: no watch.
    #[arg(long, default_value = "10m", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    pub post_update_watch: Duration,

    /// Download limits for update payloads.
    #[command(flatten)]
    pub download: download::DownloadArgs,

    /// Do not act on update signals: this node's binary is managed by other means (plans
    /// that target it wait for someone else to report its progress).
    #[arg(long)]
    pub disable_update_agent: bool,

    /// Act on update signals whose payload comes over plain http without a sha256 (nothing
    /// then verifies what arrives). Off by default: such a signal is refused.
    #[arg(long)]
    pub allow_unverified_payloads: bool,

    /// Which payload signatures this node requires.
    #[command(flatten)]
    pub signing: SigningArgs,
}

/// Whether a node process registers its own `Node` (DESIGN "Test topology": hosts without a
/// kubelet). Off by default: where a kubelet runs, the kubelet owns the Node and its Ready
/// condition, and a second writer would fake health.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RegistrationArgs {
    /// Create this node's `Node` if it is absent and keep its Ready condition and node lease
    /// fresh: the job a kubelet would do, for hosts without one (tests, demos). Leave it off
    /// where a kubelet runs.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, value_name = "BOOL")]
    pub register_node: bool,

    /// With --register-node: create the Node without the `NoSchedule` taint
    /// `autopilot.k0sproject.io/no-kubelet`, so Pods may be scheduled to it (nothing would
    /// run them without a kubelet).
    #[arg(long)]
    pub register_node_schedulable: bool,
}

/// The default keys directory (`--payload-keys`) in a node's data directory.
pub const DEFAULT_KEYS_DIR: &str = "trusted-keys";

/// The flags of a node's payload signature checks (DESIGN §14).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct SigningArgs {
    /// Directory of the public keys payloads must be signed by: cosign ECDSA P-256 keys in
    /// PEM (k0s's `cosign.pub`) and minisign public keys, one per file (or a symlink to
    /// one). With any key, a k0s binary is accepted only with a valid signature by one of
    /// them (the Plan's `signature` or `signatureURL`). The node does not start when the
    /// directory is missing, unreadable or empty, holds anything but key files (a
    /// subdirectory, a dangling symlink, a file that is no key), or when it or a key is not
    /// owned by root (or the user the node runs as) or is writable by its group or others.
    /// Default: `<data-dir>/trusted-keys/`; nothing there: no signature required, unless
    /// the node required signed payloads before (it then refuses every payload until the
    /// keys are back or `<data-dir>/autopilot-payload-keys-required` is removed).
    #[arg(long, value_name = "DIR")]
    pub payload_keys: Option<PathBuf>,

    /// Require airgap bundles to be signed by a key of --payload-keys too (upstream does
    /// not sign them; without this flag a bundle's signature is checked only when the Plan
    /// gives one).
    #[arg(long)]
    pub require_signed_bundles: bool,
}

impl SigningArgs {
    /// The keys and rules these flags give for a node with data directory `data_dir`.
    /// A directory given with --payload-keys must hold keys; the default one may be absent
    /// (no keys: logged). `Err` names the keys directory and what is wrong with it
    /// ([`signature::LoadError`]), or a bundle rule without keys.
    pub fn load(&self, data_dir: &std::path::Path) -> anyhow::Result<host::Signing> {
        let (dir, keys) = match &self.payload_keys {
            Some(dir) => (dir.clone(), signature::TrustedKeys::load(dir)?),
            None => {
                let dir = data_dir.join(DEFAULT_KEYS_DIR);
                let keys = signature::TrustedKeys::load_default(&dir)?.unwrap_or_else(|| {
                    info!(dir = %dir.display(), "no trusted keys directory: payloads need no signature (--payload-keys)");
                    signature::TrustedKeys::default()
                });
                (dir, keys)
            }
        };
        anyhow::ensure!(
            !self.require_signed_bundles || !keys.is_empty(),
            "--require-signed-bundles needs at least one key in {} (--payload-keys)",
            dir.display()
        );
        let refuse_all = keys_rule_at(data_dir, &dir, &keys)?;
        Ok(host::Signing { keys, require_signed_bundles: self.require_signed_bundles, refuse_all })
    }
}

/// Apply [`signature::keys_rule`] for a node with data directory `data_dir` that found
/// `keys` in `dir`: with keys, record that the node requires signed payloads (the marker,
/// written atomically); without, and with the marker, the reason every payload is refused.
fn keys_rule_at(
    data_dir: &std::path::Path,
    dir: &std::path::Path,
    keys: &signature::TrustedKeys,
) -> anyhow::Result<Option<String>> {
    let marker = data_dir.join(signature::KEYS_REQUIRED_MARKER);
    let required_before = std::fs::symlink_metadata(&marker).is_ok();
    match signature::keys_rule(!keys.is_empty(), required_before) {
        signature::KeysRule::Signed => {
            if !required_before {
                let staged = data_dir.join(format!(".{}.tmp", signature::KEYS_REQUIRED_MARKER));
                let text = format!(
                    "this node requires signed payloads (keys in {}); remove this file only to \
                     let it accept unsigned payloads when that directory is gone\n",
                    dir.display()
                );
                std::fs::write(&staged, text)
                    .and_then(|()| std::fs::rename(&staged, &marker))
                    .with_context(|| format!("writing {}", marker.display()))?;
            }
            info!(dir = %dir.display(), keys = ?keys.ids(), "payloads must be signed by one of these keys");
            Ok(None)
        }
        signature::KeysRule::Unsigned => Ok(None),
        signature::KeysRule::RefuseAll => {
            let reason = format!(
                "this node required signed payloads before ({} exists) but its keys \
                 directory {} is missing: every payload is refused. Restore the keys, or \
                 remove {} to accept unsigned payloads deliberately",
                marker.display(),
                dir.display(),
                marker.display()
            );
            tracing::warn!(dir = %dir.display(), marker = %marker.display(), "trusted keys gone: every payload is refused");
            Ok(Some(reason))
        }
    }
}

/// How a node restarts into a new binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RestartMode {
    /// Re-execute the (new) binary in place, same arguments.
    Exec,
    /// Exit; a supervisor starts the new binary.
    Exit,
}

impl WorkerArgs {
    /// Check the flags that need no connection (so mistakes fail before any network I/O).
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.heartbeat_interval.is_zero(),
            "--heartbeat-interval must be greater than zero"
        );
        Ok(())
    }
}

/// The node registration component (see `autopilot_shell::lifecycle`): its start creates
/// this node's `Node` if absent and marks it Ready (within `startup_timeout` while the API
/// server does not answer); its run keeps the Ready condition and node lease fresh every
/// `heartbeat_interval` until stopped. The trial boot of a new binary starts it too.
pub struct NodeRegistration {
    /// How often the Node's Ready condition and node lease are renewed.
    pub heartbeat_interval: Duration,
    /// How long registration retries an unreachable API server (zero: for ever).
    pub startup_timeout: Duration,
    /// Create the Node without the `NoSchedule` taint of a Node no kubelet runs.
    pub schedulable: bool,
}

impl Component for NodeRegistration {
    fn name(&self) -> &'static str {
        "node registration"
    }

    fn in_trial(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>> {
        Box::pin(async move {
            let heartbeat = node::Heartbeat {
                name: env.node_name.clone(),
                version: env.version.to_string(),
                schedulable: self.schedulable,
            };
            match env.purpose {
                Purpose::Run => {
                    heartbeat.register(&env.client, &env.server_url, self.startup_timeout).await?;
                }
                // A binary on trial proves it reaches its Node, and writes nothing.
                Purpose::Trial => {
                    heartbeat.read_own(&env.client, &env.server_url, self.startup_timeout).await?;
                }
            }
            Ok(Box::new(Beating {
                heartbeat,
                client: env.client.clone(),
                interval: self.heartbeat_interval,
            }) as Box<dyn Running>)
        })
    }
}

/// A registered Node whose heartbeat runs.
struct Beating {
    heartbeat: node::Heartbeat,
    client: kube::Client,
    interval: Duration,
}

impl Running for Beating {
    fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
        Box::pin(async move {
            self.heartbeat.run(&self.client, self.interval, stop.cancelled()).await;
            Exit::Stopped
        })
    }
}

/// Which objects a node's update agent acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentOn {
    /// A worker: signals on its own `Node`.
    Worker,
    /// A controller: signals on its own `ControlNode`; with `worker` (`--enable-worker`)
    /// also airgap signals on its own `Node`.
    Controller {
        /// Whether this controller is also a worker node.
        worker: bool,
    },
}

/// The update agent component (see `autopilot_shell::lifecycle`): its start prepares the
/// update host (the data directory's staging area); its run acts on update signals until
/// stopped, or ends with [`Exit::Restart`] once a new binary is in place.
pub struct UpdateAgent {
    /// What it acts on.
    pub on: AgentOn,
    /// Whether it acts at all (`--disable-update-agent` turns it off: it then only waits).
    pub enabled: bool,
    /// Download limits.
    pub download: download::DownloadConfig,
    /// Where it shows the signals it handles (`k0s status`).
    pub board: status::Board,
    /// Where it records its metrics.
    pub metrics: metrics::Metrics,
    /// Act on payloads over plain http without a sha256 (`--allow-unverified-payloads`).
    pub allow_unverified_payloads: bool,
    /// Which payload signatures it requires.
    pub signing: SigningArgs,
    /// What the post-update watch found at the start of this process
    /// ([`post_update::at_start`]): watch this new binary, or report a rollback.
    pub post_update: post_update::AtStart,
    /// The health of the Kubernetes components this process runs (`k0s_components`), if it
    /// runs them: the post-update watch counts the new binary healthy only while they are.
    pub components: Option<autopilot_shell::health::Health>,
    /// This process runs the API server its client talks to: its post-update watch counts
    /// its window whether or not that API server answers (an API server that never comes
    /// back is what the watch is for).
    pub own_api_server: bool,
}

impl Component for UpdateAgent {
    fn name(&self) -> &'static str {
        "update agent"
    }

    fn in_trial(&self) -> bool {
        false
    }

    fn start(self: Box<Self>, env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>> {
        Box::pin(async move {
            let Self {
                on,
                enabled,
                download,
                board,
                metrics,
                allow_unverified_payloads,
                signing,
                post_update,
                components,
                own_api_server,
            } = *self;
            if !enabled {
                info!("update agent disabled: not acting on update signals");
                return Ok(Box::new(Idle) as Box<dyn Running>);
            }
            let signing = signing.load(&env.data_dir)?;
            let ids = || signing.keys.ids().into_iter().map(str::to_owned).collect::<Vec<_>>();
            let required_keys = agent::RequiredKeys {
                payloads: ids(),
                bundles: if signing.require_signed_bundles { ids() } else { Vec::new() },
            };
            let host = host::LinuxHost::new(env.binary.clone(), env.data_dir.clone(), download)
                .context("preparing the update host")?
                .with_metrics(&metrics)
                .with_signing(signing);
            let agent = agent::Agent {
                name: env.node_name.clone(),
                version: env.version.to_string(),
                kubelet: matches!(on, AgentOn::Worker | AgentOn::Controller { worker: true }),
                airgap_only: false,
                board,
                metrics,
                exec_allow_list: preflight::exec::allow_list_path(&env.data_dir),
                allow_unverified_payloads,
                required_keys,
                established: Some(post_update::Established::default()),
            };
            let (watching, report) = match post_update {
                post_update::AtStart::Watched(watching) => (Some(watching), None),
                post_update::AtStart::Report(report) => (None, Some(report)),
                post_update::AtStart::Nothing | post_update::AtStart::RolledBack { .. } => {
                    (None, None)
                }
            };
            let files = post_update::Files::new(env.binary.clone(), env.data_dir.clone());
            Ok(Box::new(Acting {
                on,
                agent,
                host,
                client: env.client.clone(),
                watching,
                report: report.map(|report| (files, report)),
                components,
                own_api_server,
            }) as Box<dyn Running>)
        })
    }
}

/// Runs the post-update watch of this new binary, if it is under one, against its own
/// object (named `own`, read and written with the node's client); returns only after a
/// rollback, with why (then the process restarts into the binary put back).
async fn watch_until_rolled_back(
    watching: Option<post_update::Watching>,
    healthy: autopilot_shell::health::Health,
    (client, own): (kube::Client, String),
    on: AgentOn,
    own_api_server: bool,
) -> String {
    if let Some(watching) = watching {
        let watched = match on {
            AgentOn::Worker => {
                watching.run(healthy, post_update::OwnObject::<Node>::new(client, own)).await
            }
            AgentOn::Controller { .. } => {
                let store = post_update::OwnObject::<ControlNode>::new(client, own);
                let store = if own_api_server { store.counting_without_reads() } else { store };
                watching.run(healthy, store).await
            }
        };
        match watched {
            post_update::Watched::RolledBack { why } => return why,
            post_update::Watched::Over => {}
        }
    }
    std::future::pending::<String>().await
}

/// A started update agent.
struct Acting {
    on: AgentOn,
    agent: agent::Agent,
    host: host::LinuxHost,
    client: kube::Client,
    /// This process is the new binary under the post-update watch.
    watching: Option<post_update::Watching>,
    /// This process is the proven binary back after a rollback it reports.
    report: Option<(post_update::Files, post_update::Report)>,
    /// The health of the components this process runs, if it runs them.
    components: Option<autopilot_shell::health::Health>,
    /// This process runs its client's API server (see [`UpdateAgent::own_api_server`]).
    own_api_server: bool,
}

impl Acting {
    /// Reports a rollback after the update from the binary put back: a log line, the
    /// metric, and (in the background, retried) an Event on this node's own object.
    fn report(&self, files: post_update::Files, report: post_update::Report) {
        let (kind, api_version) = match self.on {
            AgentOn::Worker => ("Node", "v1"),
            AgentOn::Controller { .. } => ("ControlNode", "autopilot.k0sproject.io/v1beta2"),
        };
        tracing::warn!(
            node = %self.agent.name,
            reason = %report.reason,
            from = %report.to,
            to = %report.from,
            why = %report.why,
            "rolled back after the update"
        );
        self.agent.metrics.rolled_back(&report.reason);
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
            name: Some(self.agent.name.clone()),
            ..Default::default()
        };
        let reporter = autopilot_shell::events::Reporter {
            controller: "k0s-autopilot-agent".to_string(),
            instance: self.agent.name.clone(),
        };
        tokio::spawn(post_update::report_event(
            self.client.clone(),
            reporter,
            regarding,
            files,
            report,
        ));
    }
}

impl Running for Acting {
    fn run(mut self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
        Box::pin(async move {
            if let Some((files, report)) = self.report.take() {
                self.report(files, report);
            }
            let Self { on, agent, host, client, watching, report: _, components, own_api_server } =
                *self;
            let watch_health = agent.established.clone().unwrap_or_default();
            let healthy = match components {
                Some(components) => {
                    autopilot_shell::health::Health::all(&[watch_health, components])
                }
                None => watch_health,
            };
            // The watch of this new binary, if it is under one: it ends the run only with a
            // rollback (then the process restarts into the binary put back).
            let rolled_back = watch_until_rolled_back(
                watching,
                healthy,
                (client.clone(), agent.name.clone()),
                on,
                own_api_server,
            );
            let acting = async {
                match on {
                    AgentOn::Worker => {
                        agent::run::<Node, _>(client, agent, &host, stop.cancelled()).await
                    }
                    AgentOn::Controller { worker } => {
                        let own_node = agent::Agent {
                            airgap_only: true,
                            kubelet: true,
                            established: None,
                            ..agent.clone()
                        };
                        let on_control_node = agent::run::<ControlNode, _>(
                            client.clone(),
                            agent,
                            &host,
                            stop.cancelled(),
                        );
                        let on_node = async {
                            if worker {
                                agent::run::<Node, _>(
                                    client.clone(),
                                    own_node,
                                    &host,
                                    stop.cancelled(),
                                )
                                .await
                            } else {
                                stop.cancelled().await;
                                Ok(agent::Outcome::Stopped)
                            }
                        };
                        // Whichever ends first (a restart is due, or it failed) ends the run.
                        tokio::select! {
                            outcome = on_control_node => outcome,
                            outcome = on_node => outcome,
                        }
                    }
                }
            };
            let outcome = tokio::select! {
                outcome = acting => outcome,
                why = rolled_back => {
                    tracing::warn!(%why, "the new binary is rolled back after the update; restarting into the previous one");
                    Ok(agent::Outcome::Restart)
                }
            };
            match outcome {
                Ok(agent::Outcome::Stopped) => Exit::Stopped,
                Ok(agent::Outcome::Restart) => Exit::Restart,
                Err(err) => Exit::Failed(err.context("the signal agent failed")),
            }
        })
    }
}

/// The status socket component (see `autopilot_shell::lifecycle`): serves `k0s status` in
/// the data directory until stopped. A socket that cannot be served is logged, never fatal
/// (the node keeps working without `k0s status`).
pub struct StatusSocket {
    /// The node's role.
    pub role: status::Role,
    /// Whether the update agent acts on signals.
    pub update_agent: bool,
    /// The signals the agent handles.
    pub board: status::Board,
    /// Controllers: whether this one leads.
    pub leadership: Option<Leadership>,
}

impl Component for StatusSocket {
    fn name(&self) -> &'static str {
        "status socket"
    }

    fn in_trial(&self) -> bool {
        false
    }

    fn start(self: Box<Self>, env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>> {
        let Self { role, update_agent, board, leadership } = *self;
        let facts = StatusFacts {
            version: env.version,
            role,
            node_name: env.node_name.clone(),
            binary: env.binary.clone(),
            update_agent,
            board,
            leader: leadership,
        };
        let data_dir = env.data_dir.clone();
        Box::pin(async move { Ok(Box::new(Serving { data_dir, facts }) as Box<dyn Running>) })
    }
}

/// A status socket to serve.
struct Serving {
    data_dir: PathBuf,
    facts: StatusFacts,
}

impl Running for Serving {
    fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
        Box::pin(async move {
            serve_status(self.data_dir, self.facts, stop.cancelled()).await;
            stop.cancelled().await;
            Exit::Stopped
        })
    }
}

/// What the status socket reports about this process, besides what changes.
struct StatusFacts {
    version: &'static str,
    role: status::Role,
    node_name: String,
    binary: PathBuf,
    update_agent: bool,
    board: status::Board,
    leader: Option<Leadership>,
}

/// Serves the status socket in `data_dir` until `shutdown`; a failure is logged, never
/// fatal (the node keeps working without `k0s status`).
async fn serve_status(data_dir: PathBuf, facts: StatusFacts, shutdown: impl Future<Output = ()>) {
    let started = jiff::Timestamp::now().to_string();
    let pid = std::process::id();
    let report = move || status::Report {
        version: facts.version.to_string(),
        pid,
        role: facts.role,
        node_name: facts.node_name.clone(),
        binary: facts.binary.clone(),
        started: started.clone(),
        leader: facts.leader.as_ref().map(Leadership::is_current),
        update_agent: facts.update_agent,
        signals: facts.board.signals(),
    };
    if let Err(err) = status::serve(&data_dir, report, shutdown).await {
        tracing::warn!(error = %format!("{:#}", anyhow::Error::new(err)), "status socket not served; `k0s status` will not work");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(err: &anyhow::Error) -> String {
        format!("{err:#}")
    }

    #[test]
    fn a_payload_keys_directory_given_but_missing_stops_the_node_naming_it() {
        let data_dir = tempfile::tempdir().expect("tempdir");
        let keys = data_dir.path().join("keys");
        let args = SigningArgs { payload_keys: Some(keys.clone()), require_signed_bundles: false };
        let err = args.load(data_dir.path()).expect_err("refused");
        assert_eq!(said(&err), format!("--payload-keys {}: no such directory", keys.display()));
    }

    #[test]
    fn without_the_flag_a_missing_default_directory_means_no_keys() {
        let data_dir = tempfile::tempdir().expect("tempdir");
        let signing = SigningArgs::default().load(data_dir.path()).expect("no keys");
        assert!(signing.keys.is_empty());
        let bundles = SigningArgs { payload_keys: None, require_signed_bundles: true };
        let err = bundles.load(data_dir.path()).expect_err("bundles need a key");
        assert!(said(&err).starts_with("--require-signed-bundles needs at least one key"));
    }

    #[test]
    fn a_node_that_required_signatures_refuses_every_payload_once_its_default_keys_are_gone() {
        let data_dir = tempfile::tempdir().expect("tempdir");
        let keys = data_dir.path().join(DEFAULT_KEYS_DIR);
        let marker = data_dir.path().join(signature::KEYS_REQUIRED_MARKER);
        std::fs::create_dir(&keys).expect("mkdir");
        let key = "untrusted comment: minisign public key\n\
                   RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3\n";
        std::fs::write(keys.join("release.pub"), key).expect("a key");
        let signing = SigningArgs::default().load(data_dir.path()).expect("keys");
        assert!(!signing.keys.is_empty());
        assert_eq!(signing.refuse_all, None);
        assert!(marker.is_file(), "the node records that it requires signatures");

        std::fs::remove_dir_all(&keys).expect("the keys are lost");
        let signing = SigningArgs::default().load(data_dir.path()).expect("the node starts");
        let reason = signing.refuse_all.expect("every payload is refused");
        assert!(reason.contains(&keys.display().to_string()), "{reason}");
        assert!(reason.contains(&format!("remove {}", marker.display())), "{reason}");

        // Removing the marker is the deliberate way back to unsigned payloads.
        std::fs::remove_file(&marker).expect("the administrator removes it");
        let signing = SigningArgs::default().load(data_dir.path()).expect("no keys");
        assert_eq!((signing.keys.is_empty(), signing.refuse_all), (true, None));
    }

    #[test]
    fn without_the_flag_a_default_directory_that_exists_is_checked_like_a_given_one() {
        let data_dir = tempfile::tempdir().expect("tempdir");
        let keys = data_dir.path().join(DEFAULT_KEYS_DIR);
        std::fs::create_dir(&keys).expect("mkdir");
        std::fs::create_dir(keys.join("old")).expect("mkdir");
        let err = SigningArgs::default().load(data_dir.path()).expect_err("refused");
        assert_eq!(
            said(&err),
            format!(
                "--payload-keys {}: {} is a directory, not a key file",
                keys.display(),
                keys.join("old").display()
            )
        );
    }
}
