//! What the flags every node process shares ([`NodeFlags`]) resolve to before a component
//! starts: the client, this node's name and data directory, and the metrics registry and
//! endpoint; and the start-up step both roles share ([`ResolvedNode::start`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use prometheus_client::registry::Registry;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::cli::NodeFlags;
use crate::role::trial::Trial;
use crate::{VERSION, client, metrics};

/// What `NodeFlags` resolve to before a component starts.
pub(crate) struct ResolvedNode {
    pub(crate) client: kube::Client,
    pub(crate) config: kube::Config,
    pub(crate) server_url: String,
    pub(crate) node_name: String,
    pub(crate) data_dir: PathBuf,
    /// The registry the components register their metrics in (API errors already are).
    pub(crate) registry: Registry,
    /// The bound `--metrics-address`, if set; served once the components registered.
    pub(crate) metrics_listener: Option<tokio::net::TcpListener>,
}

/// A node process whose metrics are registered and served, ready to start its components.
pub(crate) struct Started<B, A> {
    pub(crate) client: kube::Client,
    pub(crate) config: kube::Config,
    pub(crate) server_url: String,
    pub(crate) node_name: String,
    pub(crate) data_dir: PathBuf,
    /// The trial boot of a binary the agent puts in place (run after the process stopped).
    pub(crate) trial: Trial,
    /// The node agent's metrics.
    pub(crate) agent_metrics: autopilot_signal::metrics::Metrics,
    /// The role's own metrics registered before the agent's.
    pub(crate) before_agent: B,
    /// The role's own metrics registered after the agent's.
    pub(crate) after_agent: A,
    /// Serves the metrics (if `--metrics-address` was set) until dropped.
    pub(crate) metrics_server: DropGuard,
}

impl ResolvedNode {
    /// The start-up step of both roles: register the metrics, start serving them and prepare
    /// the trial boot of a new binary (downloads as `download` says, `trial_timeout` to
    /// become healthy).
    ///
    /// A role registers its own metrics in `before_agent` and `after_agent`, around the
    /// agent's, so they are all in the registry before it is served, in the order the
    /// endpoint lists them.
    pub(crate) fn start<B, A>(
        self,
        download: &autopilot_signal::download::DownloadArgs,
        trial_timeout: Duration,
        before_agent: impl FnOnce(&mut Registry) -> B,
        after_agent: impl FnOnce(&mut Registry) -> A,
    ) -> Started<B, A> {
        let Self {
            client,
            config,
            server_url,
            node_name,
            data_dir,
            mut registry,
            metrics_listener,
        } = self;
        let before_agent = before_agent(&mut registry);
        let agent_metrics = autopilot_signal::metrics::Metrics::register(&mut registry);
        let after_agent = after_agent(&mut registry);
        let metrics_server = serve_metrics(metrics_listener, registry);
        let trial = Trial {
            config: config.clone(),
            data_dir: data_dir.clone(),
            download: download.config(VERSION),
            timeout: trial_timeout,
        };
        Started {
            client,
            config,
            server_url,
            node_name,
            data_dir,
            trial,
            agent_metrics,
            before_agent,
            after_agent,
            metrics_server,
        }
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
            node_name,
            data_dir,
            registry,
            metrics_listener,
        })
    }
}

/// Serve `registry` on `listener` (if `--metrics-address` was set) until the returned
/// guard is dropped.
fn serve_metrics(listener: Option<tokio::net::TcpListener>, registry: Registry) -> DropGuard {
    let stop = CancellationToken::new();
    if let Some(listener) = listener {
        tokio::spawn(metrics::serve(
            listener,
            std::sync::Arc::new(registry),
            stop.clone().cancelled_owned(),
        ));
    }
    stop.drop_guard()
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
        }
    }

    #[tokio::test]
    async fn start_registers_the_role_metrics_around_the_agents_and_prepares_the_trial() {
        let config = kube::Config::new("https://127.0.0.1:6443".parse().expect("a URL"));
        let node = ResolvedNode {
            client: kube::Client::try_from(config.clone()).expect("a client"),
            config,
            server_url: "https://127.0.0.1:6443".to_string(),
            node_name: "w1".to_string(),
            data_dir: PathBuf::from("/var/lib/k0s"),
            registry: metrics::registry(),
            metrics_listener: None,
        };
        let download = download_args();
        let started = node.start(
            &download,
            Duration::from_secs(7),
            |registry| registry.register("before", "Before the agent", Counter::<u64>::default()),
            |registry| {
                registry.register("after", "After the agent", Counter::<u64>::default());
                let mut text = String::new();
                prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
                text
            },
        );

        let exposition = &started.after_agent;
        let at = |name: &str| {
            exposition.find(name).unwrap_or_else(|| panic!("{name} missing in {exposition}"))
        };
        assert!(at("k0s_autopilot_before_total") < at("k0s_autopilot_agent_download_bytes_total"));
        assert!(at("k0s_autopilot_agent_verify_failures_total") < at("k0s_autopilot_after_total"));
        let Trial { config, data_dir, download: trial_download, timeout } = &started.trial;
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(data_dir, &PathBuf::from("/var/lib/k0s"));
        assert_eq!(trial_download, &download.config(VERSION));
        assert_eq!(*timeout, Duration::from_secs(7));
    }
}
