//! The HTTP(S) client for requests that do not go to the API server: rustls with the `ring`
//! provider and the safe default protocol versions, the system's trust roots (plus any the
//! caller adds), HTTP/1, `http://` allowed, and — where the caller asks for them — the
//! proxies of the environment ([`crate::proxy`]).

use std::time::Duration;

use bytes::Bytes;
use http::header::PROXY_AUTHORIZATION;
use http::{Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::TokioExecutor;
use rustls::RootCertStore;

use crate::proxy::{Proxies, ProxyConnector, Route};

/// A client for bodiless requests (GETs) over `http://` or `https://`, directly or through
/// proxies; cheap to clone.
#[derive(Clone, Debug)]
pub struct HttpsClient {
    client: Client<ProxyConnector, Empty<Bytes>>,
    proxies: Proxies,
}

impl HttpsClient {
    /// Sends `request` (adding the `Proxy-Authorization` a forwarding proxy needs).
    pub fn request(&self, mut request: Request<Empty<Bytes>>) -> ResponseFuture {
        if let Some(auth) = self.proxies.forward_authorization(request.uri()) {
            request.headers_mut().insert(PROXY_AUTHORIZATION, auth);
        }
        self.client.request(request)
    }

    /// `GET uri`.
    pub fn get(&self, uri: Uri) -> ResponseFuture {
        let mut request = Request::new(Empty::new());
        *request.uri_mut() = uri;
        self.request(request)
    }

    /// How a request to `uri` goes out (directly or through which proxy).
    pub fn route(&self, uri: &Uri) -> Route {
        self.proxies.route(uri)
    }
}

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
    proxies: Proxies,
}

impl HttpsClientBuilder {
    /// A client trusting `roots` (see [`system_roots`]), with hyper's defaults: no connect
    /// timeout, idle connections kept for reuse; no proxy.
    pub fn new(roots: RootCertStore) -> Self {
        Self { roots, connect_timeout: None, keep_idle_connections: true, proxies: Proxies::none() }
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

    /// Go through `proxies` (e.g. [`Proxies::from_env`]) where they say so.
    #[must_use]
    pub fn with_proxies(mut self, proxies: Proxies) -> Self {
        self.proxies = proxies;
        self
    }

    /// The client; fails only if rustls cannot provide the protocol versions.
    pub fn build(self) -> Result<HttpsClient, rustls::Error> {
        let Self { roots, connect_timeout, keep_idle_connections, proxies } = self;
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
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let mut client = Client::builder(TokioExecutor::new());
        if !keep_idle_connections {
            client.pool_max_idle_per_host(0);
        }
        let connector = ProxyConnector::new(https, tls, proxies.clone());
        Ok(HttpsClient { client: client.build(connector), proxies })
    }
}
