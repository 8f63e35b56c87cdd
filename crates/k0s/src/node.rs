//! What the flags every node process shares ([`NodeFlags`]) resolve to before a component
//! starts: the client, this node's name and data directory, and the metrics registry and
//! endpoint; the steps both roles share ([`ResolvedNode::register`], [`ResolvedNode::trial`],
//! [`ResolvedNode::into_env`]) and the metrics endpoint component ([`MetricsEndpoint`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use autopilot_shell::lifecycle::{Component, Env, Exit, Running};
use futures::future::BoxFuture;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::cli::NodeFlags;
use crate::{VERSION, client, metrics};

/// What `NodeFlags` resolve to before a component starts.
pub(crate) struct ResolvedNode {
    pub(crate) client: kube::Client,
    pub(crate) config: kube::Config,
    pub(crate) server_url: String,
    /// The `--kubeconfig` it connected with (a kubelet `k0s` runs uses it too by default).
    pub(crate) kubeconfig: PathBuf,
    pub(crate) node_name: String,
    pub(crate) data_dir: PathBuf,
    /// The registry the components register their metrics in (API errors already are).
    pub(crate) registry: Registry,
    /// The bound `--metrics-address`, if set; served once the components registered.
    pub(crate) metrics_listener: Option<tokio::net::TcpListener>,
}

/// What a role's components record their metrics in: the role's own around the agent's.
pub(crate) struct Metrics<B, A> {
    /// The role's own metrics registered before the agent's.
    pub(crate) before_agent: B,
    /// The node agent's metrics.
    pub(crate) agent: autopilot_signal::metrics::Metrics,
    /// The role's own metrics registered after the agent's.
    pub(crate) after_agent: A,
}

impl ResolvedNode {
    /// The trial boot of a binary the agent puts in place (run after the process stopped):
    /// downloads as `download` says, `trial_timeout` to become healthy, then watched for
    /// `post_update_watch`.
    pub(crate) fn trial(
        &self,
        download: &autopilot_signal::download::DownloadArgs,
        trial_timeout: Duration,
        post_update_watch: Duration,
    ) -> Trial {
        Trial {
            config: self.config.clone(),
            data_dir: self.data_dir.clone(),
            download: download.config(VERSION),
            timeout: trial_timeout,
            post_update_watch,
            own_api_server: false,
        }
    }

    /// Register the metrics of a role's components: the role registers its own in
    /// `before_agent` and `after_agent`, around the agent's, so they are all in the registry
    /// before it is served, in the order the endpoint lists them.
    pub(crate) fn register<B, A>(
        &mut self,
        before_agent: impl FnOnce(&mut Registry) -> B,
        after_agent: impl FnOnce(&mut Registry) -> A,
    ) -> Metrics<B, A> {
        let before_agent = before_agent(&mut self.registry);
        let agent = autopilot_signal::metrics::Metrics::register(&mut self.registry);
        let after_agent = after_agent(&mut self.registry);
        Metrics { before_agent, agent, after_agent }
    }

    /// What the components share (`binary`: the running binary, resolved before anything
    /// can replace it), and the metrics endpoint serving everything registered so far.
    pub(crate) fn into_env(self, binary: PathBuf) -> (Env, MetricsEndpoint) {
        let Self {
            client,
            config,
            server_url,
            node_name,
            data_dir,
            registry,
            metrics_listener,
            ..
        } = self;
        let env = Env {
            client,
            config,
            server_url,
            node_name,
            data_dir,
            version: VERSION,
            binary,
            purpose: autopilot_shell::lifecycle::Purpose::Run,
        };
        (env, MetricsEndpoint { listener: metrics_listener, registry })
    }
}

/// The metrics endpoint component (see `autopilot_shell::lifecycle`): serves the registry on
/// the bound `--metrics-address` until stopped (nothing when the flag is not set). Declared
/// last, so every other component has registered its metrics.
pub(crate) struct MetricsEndpoint {
    listener: Option<tokio::net::TcpListener>,
    registry: Registry,
}

impl Component for MetricsEndpoint {
    fn name(&self) -> &'static str {
        "metrics endpoint"
    }

    fn in_trial(&self) -> bool {
        false
    }

    fn start(self: Box<Self>, _env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>> {
        Box::pin(async move { Ok(self as Box<dyn Running>) })
    }
}

impl Running for MetricsEndpoint {
    fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
        Box::pin(async move {
            if let Some(listener) = self.listener {
                metrics::serve(listener, std::sync::Arc::new(self.registry), stop.cancelled())
                    .await;
            }
            stop.cancelled().await;
            Exit::Stopped
        })
    }
}

impl NodeFlags {
    /// The same flags without `--metrics-address`: a trial boot serves no metrics.
    pub(crate) fn without_metrics(self) -> Self {
        Self { metrics_address: None, ..self }
    }

    pub(crate) async fn resolve(self) -> anyhow::Result<ResolvedNode> {
        let NodeFlags { kubeconfig, data_dir, node_name, metrics_address } = self;
        let node_name = resolve_node_name(node_name.as_deref())?;
        let metrics_listener = match metrics_address {
            Some(address) => Some(metrics::bind(address).await?),
            None => None,
        };
        let mut registry = metrics::registry();
        let api_errors = metrics::register_api_errors(&mut registry);
        let (client, config, server_url) =
            client::connect_counting_errors(&kubeconfig, api_errors).await?;
        Ok(ResolvedNode {
            client,
            config,
            server_url,
            kubeconfig,
            node_name,
            data_dir,
            registry,
            metrics_listener,
        })
    }
}

/// The node name: the flag or `AUTOPILOT_HOSTNAME`, else the host name; trimmed and
/// lower-cased like Kubernetes does for node names.
fn resolve_node_name(flag: Option<&str>) -> anyhow::Result<String> {
    let raw = match flag {
        Some(name) => name.to_string(),
        None => nix::unistd::gethostname()
            .context("reading the host name (pass --node-name)")?
            .to_string_lossy()
            .into_owned(),
    };
    let name = raw.trim().to_lowercase();
    anyhow::ensure!(!name.is_empty(), "the node name is empty (pass --node-name)");
    Ok(name)
}

/// What the trial boot of a new binary needs from this process (see
/// `autopilot_signal::trial`).
pub(crate) struct Trial {
    pub(crate) config: kube::Config,
    pub(crate) data_dir: std::path::PathBuf,
    pub(crate) download: autopilot_signal::download::DownloadConfig,
    pub(crate) timeout: std::time::Duration,
    /// `--post-update-watch`: how long the new binary is watched after it passed.
    pub(crate) post_update_watch: std::time::Duration,
    /// The process runs the API server its client talks to (`k0s controller
    /// --run-components`; see `autopilot_signal::trial::TrialConfig::own_api_server`).
    pub(crate) own_api_server: bool,
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    fn download_args() -> autopilot_signal::download::DownloadArgs {
        autopilot_signal::download::DownloadArgs {
            download_stall_timeout: Duration::from_secs(3),
            download_timeout: Duration::from_secs(4),
            download_max_size: 5,
            download_max_redirects: 6,
            download_ca_file: Some(PathBuf::from("/etc/k0s/ca.pem")),
            download_rate_limit: Some(7 << 20),
        }
    }

    #[tokio::test]
    async fn the_role_metrics_go_around_the_agents_and_the_trial_keeps_the_node_settings() {
        let config = kube::Config::new("https://127.0.0.1:6443".parse().expect("a URL"));
        let mut node = ResolvedNode {
            client: kube::Client::try_from(config.clone()).expect("a client"),
            config,
            server_url: "https://127.0.0.1:6443".to_string(),
            kubeconfig: PathBuf::from("/var/lib/k0s/kubelet.conf"),
            node_name: "w1".to_string(),
            data_dir: PathBuf::from("/var/lib/k0s"),
            registry: metrics::registry(),
            metrics_listener: None,
        };
        let download = download_args();
        let trial = node.trial(&download, Duration::from_secs(7), Duration::from_secs(8));
        let registered = node.register(
            |registry| registry.register("before", "Before the agent", Counter::<u64>::default()),
            |registry| {
                registry.register("after", "After the agent", Counter::<u64>::default());
                let mut text = String::new();
                prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
                text
            },
        );

        let exposition = &registered.after_agent;
        let at = |name: &str| {
            exposition.find(name).unwrap_or_else(|| panic!("{name} missing in {exposition}"))
        };
        assert!(at("k0s_autopilot_before_total") < at("k0s_autopilot_agent_download_bytes_total"));
        assert!(at("k0s_autopilot_agent_verify_failures_total") < at("k0s_autopilot_after_total"));
        let Trial {
            config,
            data_dir,
            download: trial_download,
            timeout,
            post_update_watch,
            own_api_server: _,
        } = &trial;
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(data_dir, &PathBuf::from("/var/lib/k0s"));
        assert_eq!(trial_download, &download.config(VERSION));
        assert_eq!(*timeout, Duration::from_secs(7));
        assert_eq!(*post_update_watch, Duration::from_secs(8));
    }
}
