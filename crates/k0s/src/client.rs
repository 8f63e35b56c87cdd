//! Clients from kubeconfig files, for the node processes and the `k0s autopilot` verbs.

use anyhow::Context as _;

use crate::metrics;

/// A client from a kubeconfig file, with errors that name the file; also the configuration
/// it was made from and the server URL.
pub(crate) async fn connect(
    path: &std::path::Path,
) -> anyhow::Result<(kube::Client, kube::Config, String)> {
    connect_counting_errors(path, metrics::ApiErrors::default()).await
}

/// [`connect`], counting the client's failed requests in `api_errors`.
pub(crate) async fn connect_counting_errors(
    path: &std::path::Path,
    api_errors: metrics::ApiErrors,
) -> anyhow::Result<(kube::Client, kube::Config, String)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text)
        .with_context(|| format!("parsing kubeconfig {}", path.display()))?;
    let explicit_proxy = kubeconfig
        .clusters
        .iter()
        .any(|c| c.cluster.as_ref().is_some_and(|c| c.proxy_url.is_some()));
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    if !explicit_proxy {
        // The kube client takes `HTTPS_PROXY` for every server and checks `NO_PROXY`
        // against the proxy's address, not the server's; decide it as for every other
        // request of this process (`NO_PROXY` against the API server).
        config.proxy_url =
            autopilot_shell::proxy::Proxies::from_env().tunnel_url_for(&config.cluster_url);
    }
    let url = config.cluster_url.to_string();
    let client = kube::client::ClientBuilder::try_from(config.clone())
        .with_context(|| format!("creating a client for {url} from {}", path.display()))?
        .with_layer(&metrics::ApiErrorsLayer(api_errors))
        .build();
    Ok((client, config, url))
}

/// The kubeconfig flag shared by the `k0s autopilot` verbs.
#[derive(clap::Args)]
pub struct Kubeconfig {
    /// Kubeconfig to reach the API server. Default: `$KUBECONFIG` (its first entry), else
    /// `~/.kube/config`, as kubectl.
    #[arg(long = "kubeconfig", value_name = "PATH")]
    path: Option<std::path::PathBuf>,
}

impl Kubeconfig {
    /// The file to read: the flag, else the first entry of `$KUBECONFIG`, else
    /// `$HOME/.kube/config`.
    pub fn resolve(&self) -> anyhow::Result<std::path::PathBuf> {
        if let Some(path) = &self.path {
            return Ok(path.clone());
        }
        if let Some(list) = std::env::var_os("KUBECONFIG")
            && let Some(first) = std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty())
        {
            return Ok(first);
        }
        let home = std::env::var_os("HOME").ok_or_else(|| {
            anyhow::anyhow!("no kubeconfig: pass --kubeconfig, set KUBECONFIG or HOME")
        })?;
        Ok(std::path::PathBuf::from(home).join(".kube").join("config"))
    }
}
