//! The HTTP(S) client for requests that do not go to the API server: rustls with the `ring`
//! provider and the safe default protocol versions, the system's trust roots (plus any the
//! caller adds), HTTP/1, `http://` allowed.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::RootCertStore;

/// A client for bodiless requests (GETs) over `http://` or `https://`; cheap to clone.
pub type HttpsClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// The system's trust roots. Unreadable system certificates are skipped: HTTPS to a server
/// only they would have vouched for then fails verification, with a clear error.
pub fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let (_added, _ignored) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    roots
}

/// Builds an [`HttpsClient`].
#[derive(Debug)]
pub struct HttpsClientBuilder {
    roots: RootCertStore,
    connect_timeout: Option<Duration>,
    keep_idle_connections: bool,
}

impl HttpsClientBuilder {
    /// A client trusting `roots` (see [`system_roots`]), with hyper's defaults: no connect
    /// timeout, idle connections kept for reuse.
    pub fn new(roots: RootCertStore) -> Self {
        Self { roots, connect_timeout: None, keep_idle_connections: true }
    }

    /// Give up connecting after `timeout`.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Close each connection after its response instead of keeping it for the next request
    /// (for requests far apart, such as one download per update).
    #[must_use]
    pub fn without_idle_connections(mut self) -> Self {
        self.keep_idle_connections = false;
        self
    }

    /// The client; fails only if rustls cannot provide the protocol versions.
    pub fn build(self) -> Result<HttpsClient, rustls::Error> {
        let Self { roots, connect_timeout, keep_idle_connections } = self;
        let tls = rustls::ClientConfig::builder_with_provider(
            rustls::crypto::ring::default_provider().into(),
        )
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(connect_timeout);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let mut client = Client::builder(TokioExecutor::new());
        if !keep_idle_connections {
            client.pool_max_idle_per_host(0);
        }
        Ok(client.build(https))
    }
}
