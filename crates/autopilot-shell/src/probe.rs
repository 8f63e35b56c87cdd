//! Probing plan controllers' API servers (`GET /readyz`) before a controller is signalled.
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

use autopilot_engine::plan::Readiness;

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

    /// Probe every named controller concurrently.
    pub async fn probe_all(
        &self,
        names: &[String],
        control_nodes: &Store<ControlNode>,
    ) -> BTreeMap<String, Readiness> {
        let probes = names.iter().map(|name| async move {
            let readiness = match control_nodes.get(&ObjectRef::new(name)) {
                None => Readiness::NotReady(format!("ControlNode {name} does not exist")),
                Some(control_node) => self.probe(&control_node).await,
            };
            (name.clone(), readiness)
        });
        join_all(probes).await.into_iter().collect()
    }

    /// Probe one controller.
    pub async fn probe(&self, control_node: &ControlNode) -> Readiness {
        let Some(address) = self.address_of(control_node) else {
            return Readiness::NotReady("its ControlNode has no InternalIP address".to_string());
        };
        let url = format!("https://{address}");
        let mut config = self.config.clone();
        config.cluster_url = match url.parse() {
            Ok(uri) => uri,
            Err(err) => return Readiness::NotReady(format!("bad address {url}: {err}")),
        };
        config.connect_timeout = Some(PROBE_TIMEOUT);
        config.read_timeout = Some(PROBE_TIMEOUT);
        let client = match kube::Client::try_from(config) {
            Ok(client) => client,
            Err(err) => {
                return Readiness::NotReady(format!("cannot build a client for {url}: {err}"));
            }
        };
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

/// The first line of an error chain, for a status reason.
fn short(err: &kube::Error) -> String {
    autopilot_api::text::error_chain(err).lines().next().unwrap_or_default().to_string()
}
