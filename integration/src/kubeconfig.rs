//! Kubeconfig files (CA embedded, bearer token) and `kube::Client`s built from them.

use std::path::Path;

use anyhow::Context as _;
use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Writes a kubeconfig for `user` (authenticating with `token`) against `server`, trusting the
/// PEM CA `ca_pem`.
pub(crate) fn write(
    path: &Path,
    cluster_name: &str,
    server: &str,
    ca_pem: &str,
    user: &str,
    token: &str,
) -> anyhow::Result<()> {
    let yaml = render(cluster_name, server, ca_pem, user, token)?;
    std::fs::write(path, yaml).with_context(|| format!("writing {}", path.display()))
}

/// The YAML of the kubeconfig [`write`] writes.
pub(crate) fn render(
    cluster_name: &str,
    server: &str,
    ca_pem: &str,
    user: &str,
    token: &str,
) -> anyhow::Result<String> {
    let context = format!("{user}@{cluster_name}");
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": cluster_name,
            "cluster": {
                "server": server,
                "certificate-authority-data":
                    base64::engine::general_purpose::STANDARD.encode(ca_pem),
            },
        }],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{ "name": context, "context": { "cluster": cluster_name, "user": user } }],
        "current-context": context,
    });
    Ok(serde_saphyr::to_string(&config)?)
}

/// A `kube::Client` for the current context of the kubeconfig at `path`.
pub async fn client_from_kubeconfig(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    client_from(kubeconfig).await.with_context(|| format!("using kubeconfig {}", path.display()))
}

/// A client that uses the credentials of the kubeconfig at `path` to act as `user` in
/// `groups` (impersonation): the API server authorizes every request as that user, so a
/// test can act as someone with exactly the rights it grants (the admin may impersonate).
pub async fn impersonating_client(
    path: &Path,
    user: &str,
    groups: &[&str],
) -> anyhow::Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|&g| g.to_owned()).collect());
    Ok(kube::Client::try_from(config)?)
}

/// A `kube::Client` for the current context of a kubeconfig given as YAML.
pub(crate) async fn client_from_yaml(yaml: &str) -> anyhow::Result<kube::Client> {
    client_from(Kubeconfig::from_yaml(yaml)?).await
}

async fn client_from(kubeconfig: Kubeconfig) -> anyhow::Result<kube::Client> {
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}
