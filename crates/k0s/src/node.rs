//! What the flags every node process shares ([`NodeFlags`]) resolve to before a component
//! starts: the client, this node's name and data directory, and the metrics registry and
//! endpoint.

use std::path::PathBuf;

use anyhow::Context as _;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::cli::NodeFlags;
use crate::{client, metrics};

/// What `NodeFlags` resolve to before a component starts.
pub(crate) struct ResolvedNode {
    pub(crate) client: kube::Client,
    pub(crate) config: kube::Config,
    pub(crate) server_url: String,
    pub(crate) node_name: String,
    pub(crate) data_dir: PathBuf,
    /// The registry the components register their metrics in (API errors already are).
    pub(crate) registry: prometheus_client::registry::Registry,
    /// The bound `--metrics-address`, if set; served once the components registered.
    pub(crate) metrics_listener: Option<tokio::net::TcpListener>,
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
pub(crate) fn serve_metrics(
    listener: Option<tokio::net::TcpListener>,
    registry: prometheus_client::registry::Registry,
) -> DropGuard {
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
