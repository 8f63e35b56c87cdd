//! Probing controllers' API servers: `GET /readyz` before a controller is signalled, and
//! alongside it `GET /version`, the Kubernetes version the version skew rules judge a
//! controller by (`autopilot_engine::plan::skew`).
//!
//! The address is the ControlNode's `InternalIP` with the port from its
//! `autopilot.k0sproject.io/api-address` annotation (falling back to this controller's own
//! port, as k0s assumes uniform ports). TLS and credentials are this controller's own admin
//! kubeconfig, so a probe proves the API server is up *and* serving this cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::v1beta2::ControlNode;
use futures::future::join_all;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;

use autopilot_engine::plan::{Probe, Readiness};

/// How long one probe may take. A healthy API server answers `/readyz` in milliseconds; a
/// few seconds tolerate a loaded one without holding the plan long on a dead one.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Probes controllers' API servers with this controller's credentials.
#[derive(Clone)]
pub struct Prober {
    config: kube::Config,
    own_address: SocketAddr,
}

impl Prober {
    /// A prober reusing `config`'s TLS settings and credentials; `own_address` supplies the
    /// port when a ControlNode does not publish its API address.
    pub fn new(config: kube::Config, own_address: SocketAddr) -> Self {
        Self { config, own_address }
    }

    /// A prober for the cluster a client made from `config` (a kubeconfig's) talks to: the
    /// port of its server stands in for a ControlNode that publishes no API address.
    pub fn for_config(config: kube::Config) -> Self {
        let own_address = config
            .cluster_url
            .authority()
            .and_then(|a| {
                let port = a.port_u16().unwrap_or(443);
                format!("127.0.0.1:{port}").parse().ok()
            })
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 6443)));
        Self::new(config, own_address)
    }

    /// What the API server of each of `control_nodes` answers on `/version`, asked
    /// concurrently; those that do not answer are left out.
    pub async fn versions(&self, control_nodes: &[ControlNode]) -> BTreeMap<String, String> {
        let asked = control_nodes.iter().map(|control_node| async move {
            let name = control_node.metadata.name.clone()?;
            let probing = self.client_for(control_node).ok()?;
            Some((name, version(&probing).await?))
        });
        join_all(asked).await.into_iter().flatten().collect()
    }

    /// Probe every named controller concurrently.
    pub async fn probe_all(
        &self,
        names: &[String],
        control_nodes: &Store<ControlNode>,
    ) -> BTreeMap<String, Probe> {
        let probes = names.iter().map(|name| async move {
            let probe = match control_nodes.get(&ObjectRef::new(name)) {
                None => Probe::without_version(Readiness::NotReady(format!(
                    "ControlNode {name} does not exist"
                ))),
                Some(control_node) => self.probe(&control_node).await,
            };
            (name.clone(), probe)
        });
        join_all(probes).await.into_iter().collect()
    }

    /// Probe one controller: its `/readyz` and its `/version`, concurrently, with one client.
    pub async fn probe(&self, control_node: &ControlNode) -> Probe {
        let client = match self.client_for(control_node) {
            Ok(client) => client,
            Err(why) => return Probe::without_version(Readiness::NotReady(why)),
        };
        let (readiness, version) = futures::join!(readyz(&client), version(&client));
        Probe { readiness, version }
    }

    /// A client for the API server of `control_node`, with the probe's timeouts; `Err` says
    /// why there is none.
    fn client_for(&self, control_node: &ControlNode) -> Result<Probing, String> {
        let Some(address) = self.address_of(control_node) else {
            return Err("its ControlNode has no InternalIP address".to_string());
        };
        let url = format!("https://{address}");
        let mut config = self.config.clone();
        config.cluster_url = url.parse().map_err(|err| format!("bad address {url}: {err}"))?;
        config.connect_timeout = Some(PROBE_TIMEOUT);
        config.read_timeout = Some(PROBE_TIMEOUT);
        let client = kube::Client::try_from(config)
            .map_err(|err| format!("cannot build a client for {url}: {err}"))?;
        Ok(Probing { client, url })
    }

    fn address_of(&self, control_node: &ControlNode) -> Option<SocketAddr> {
        let ip = control_node.internal_ip()?.parse().ok()?;
        let port = control_node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::ANNOTATION_API_ADDRESS))
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .map_or(self.own_address.port(), |a| a.port());
        Some(SocketAddr::new(ip, port))
    }
}

/// A client for one controller's API server, and its URL (for reasons).
struct Probing {
    client: kube::Client,
    url: String,
}

/// `GET /readyz`: 2xx within [`PROBE_TIMEOUT`] is ready.
async fn readyz(probing: &Probing) -> Readiness {
    let Probing { client, url } = probing;
    let request = match http::Request::get("/readyz").body(Vec::new()) {
        Ok(request) => request,
        Err(err) => return Readiness::NotReady(format!("cannot build the request: {err}")),
    };
    match tokio::time::timeout(PROBE_TIMEOUT, client.request_text(request)).await {
        Ok(Ok(_)) => Readiness::Ready,
        Ok(Err(err)) => Readiness::NotReady(format!("{url}/readyz: {}", short(&err))),
        Err(_) => Readiness::NotReady(format!(
            "{url}/readyz: no answer within {}s",
            PROBE_TIMEOUT.as_secs()
        )),
    }
}

/// `GET /version`: the `gitVersion` the API server answers within [`PROBE_TIMEOUT`]
/// (`None`: no answer, or none that names a version; the skew rules then fall back).
async fn version(probing: &Probing) -> Option<String> {
    let answer = tokio::time::timeout(PROBE_TIMEOUT, probing.client.apiserver_version()).await;
    match answer {
        Ok(Ok(info)) => git_version(&info.git_version),
        Ok(Err(err)) => {
            tracing::debug!(url = %probing.url, error = %short(&err), "no /version answer");
            None
        }
        Err(_) => None,
    }
}

/// A `gitVersion` as the rules may read it: trimmed, not empty, not oversized.
fn git_version(version: &str) -> Option<String> {
    let version = version.trim();
    (!version.is_empty() && version.len() <= 128).then(|| version.to_owned())
}

/// The first line of an error chain, for a status reason.
fn short(err: &kube::Error) -> String {
    autopilot_api::text::error_chain(err).lines().next().unwrap_or_default().to_string()
}
