//! The update-server client: asks what version a channel offers (REF §11.3).
//!
//! Two endpoints, as in k0s:
//!
//! - periodic: `GET <updateServer>/<channel>/index.yaml` (the server's path is kept and the
//!   channel joined onto it), answered by the list format;
//! - cron (legacy): `GET <updateServer with its path replaced by /<channel>>?clusterID=..&
//!   lastUpdateStatus=..&currentVersion=..`, answered by the map format.
//!
//! `https://` is assumed when the server has no scheme. A plain `http://` server is refused
//! unless the client allows it (the controller's `--allow-unverified-payloads`, DESIGN §14):
//! whoever sits on the path could change its answers, sha256 values included. The bearer
//! token (from Secret `kube-system/update-server-token`, read by the shell) is sent as
//! `Authorization: Bearer <token>` when given, and only over https; redirects are never
//! followed (a redirect is an error naming it), so the token cannot follow one to another
//! host. Each request, body included, must finish
//! within the timeout (10 s by default, as k0s). Nothing about the cluster is sent unless
//! the caller passes a [`ClusterInfo`] (the operator opted in): then the REF §11.4 headers
//! go along. Header names are case-insensitive in HTTP; we send them lowercase.
//!
//! A non-200 status, a body that is not the expected YAML, or a timeout is an [`Error`](enum@Error)
//! naming the URL; the shell logs it, records an Event, and retries next period.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_shell::https::{self, HttpsClient, HttpsClientBuilder};
use autopilot_shell::proxy::Proxies;
use base64::Engine as _;
use http::header::{AUTHORIZATION, HeaderName, HeaderValue, USER_AGENT};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Serialize;
use thiserror::Error;
use url::Url;

use autopilot_engine::updater::channel::{self, ChannelAnswer};

/// How long one request may take, body included (k0s' HTTP client timeout).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer we read. Real answers are a few hundred bytes; this only stops a
/// misbehaving server from filling memory.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Why asking the update server failed.
#[derive(Debug, Error)]
pub enum Error {
    /// `updateServer` (plus the channel) is not a usable URL.
    #[error("update server url {url:?} is invalid")]
    BadUrl {
        /// The URL we tried to build.
        url: String,
        /// What the URL parser or the request builder objected to.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The URL's scheme is neither `http` nor `https`.
    #[error("update server url {url:?} must use http or https")]
    BadScheme {
        /// The URL as built.
        url: String,
    },
    /// The server is plain http and the client does not allow it.
    #[error(
        "update server {url:?} is plain http: its answers (versions, URLs, sha256 values) \
         could be changed on the way; use https, or run the controller with \
         --allow-unverified-payloads"
    )]
    PlainHttp {
        /// The URL asked.
        url: String,
    },
    /// The token or a cluster-info value cannot be sent as a header value.
    #[error("header {name} has a value that cannot be sent in HTTP")]
    BadHeader {
        /// The header name.
        name: String,
    },
    /// The TLS client could not be set up.
    #[error("cannot set up tls for the update server client")]
    Tls(#[source] rustls::Error),
    /// Connecting or sending failed.
    #[error("requesting {url} failed")]
    Request {
        /// The URL requested.
        url: String,
        /// The transport error.
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    /// Reading the body failed (or it exceeded the size limit).
    #[error("reading the answer of {url} failed")]
    Body {
        /// The URL requested.
        url: String,
        /// The body error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The request did not finish in time.
    #[error("{url} did not answer within {timeout:?}")]
    Timeout {
        /// The URL requested.
        url: String,
        /// The limit.
        timeout: Duration,
    },
    /// The server answered with a status other than 200.
    #[error("{url} answered {status}")]
    Status {
        /// The URL requested.
        url: String,
        /// The status it answered with.
        status: StatusCode,
    },
    /// The body is not an answer we understand.
    #[error("{url} answered something unusable")]
    Answer {
        /// The URL requested.
        url: String,
        /// What is wrong with the answer.
        #[source]
        source: channel::Error,
    },
}

/// `Result` with this module's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A stable, low-cardinality label for metrics and Event reasons.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::BadUrl { .. }
            | Self::BadScheme { .. }
            | Self::BadHeader { .. }
            | Self::PlainHttp { .. } => "config",
            Self::Tls(_) => "tls",
            Self::Request { .. } | Self::Body { .. } => "transport",
            Self::Timeout { .. } => "timeout",
            Self::Status { .. } => "status",
            Self::Answer { .. } => "answer",
        }
    }
}

/// Cluster facts sent as headers when the operator opts in (REF §11.4). The shell fills it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// Cluster storage type (`etcd`, `kine`).
    pub storage_type: String,
    /// UID of the `kube-system` namespace; sent as `kube-system:<uid>`.
    pub kube_system_uid: String,
    /// Number of live `k0s-ctrl-*` leases in `kube-node-lease`.
    pub control_plane_nodes_count: u32,
    /// Worker statistics over all Nodes.
    pub workers: WorkerData,
    /// The running k0s version.
    pub version: String,
    /// `spec.network.provider` (`kuberouter`, `calico`, ...).
    pub cni_provider: String,
    /// CPU architecture of the controller, Go-style (`amd64`, `arm64`).
    pub arch: String,
}

/// Counts of worker properties, sent base64-encoded as JSON in `K0S_WorkerData`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WorkerData {
    /// Nodes per `kubernetes.io/arch`.
    #[serde(rename = "Archs")]
    pub archs: BTreeMap<String, u32>,
    /// Nodes per `status.nodeInfo.osImage`.
    #[serde(rename = "OSes")]
    pub oses: BTreeMap<String, u32>,
    /// Nodes per `status.nodeInfo.containerRuntimeVersion`.
    #[serde(rename = "Runtimes")]
    pub runtimes: BTreeMap<String, u32>,
}

impl ClusterInfo {
    /// The REF §11.4 headers, in a fixed order.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        // Serialising maps of strings to integers cannot fail.
        let worker_json = serde_json::to_vec(&self.workers).unwrap_or_default();
        vec![
            ("k0s_storagetype", self.storage_type.clone()),
            ("k0s_clusterid", format!("{}:{}", keys::CLUSTER_ID_NAMESPACE, self.kube_system_uid)),
            ("k0s_controlplanenodescount", self.control_plane_nodes_count.to_string()),
            ("k0s_workerdata", base64::engine::general_purpose::STANDARD.encode(worker_json)),
            ("k0s_version", self.version.clone()),
            ("k0s_cniprovider", self.cni_provider.clone()),
            ("k0s_arch", self.arch.clone()),
        ]
    }
}

/// Query parameters of the legacy (cron) endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LegacyQuery {
    /// UID of the `kube-system` namespace.
    pub cluster_id: String,
    /// State of the current `autopilot` Plan, or empty when there is none.
    pub last_update_status: String,
    /// The running k0s version.
    pub current_version: String,
}

/// Optional parts of a request.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestOptions<'a> {
    /// Bearer token, sent as `Authorization: Bearer <token>`.
    pub token: Option<&'a str>,
    /// Cluster facts; headers are sent only when this is set (operator opt-in).
    pub cluster_info: Option<&'a ClusterInfo>,
}

/// The URL of a channel's `index.yaml`: the server's path joined with `<channel>/index.yaml`.
pub fn index_url(update_server: &str, channel: &str) -> Result<Uri> {
    let mut url = server_url(update_server)?;
    let path =
        format!("{}/{}/index.yaml", url.path().trim_end_matches('/'), channel.trim_matches('/'));
    url.set_path(&path);
    to_uri(&url)
}

/// The URL of the legacy endpoint: the server with its path replaced by `/<channel>` and
/// the query parameters of `query` (percent-encoded).
pub fn legacy_url(update_server: &str, channel: &str, query: &LegacyQuery) -> Result<Uri> {
    let mut url = server_url(update_server)?;
    let LegacyQuery { cluster_id, last_update_status, current_version } = query;
    url.set_path(&format!("/{}", channel.trim_matches('/')));
    let pairs = [
        ("clusterID", cluster_id),
        ("lastUpdateStatus", last_update_status),
        ("currentVersion", current_version),
    ];
    let query: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{name}={}", utf8_percent_encode(value, QUERY_VALUE)))
        .collect();
    url.set_query(Some(&query.join("&")));
    to_uri(&url)
}

/// An update-server client; cheap to clone, reuse it across checks.
#[derive(Clone, Debug)]
pub struct Client {
    http: HttpsClient,
    timeout: Duration,
    allow_plain_http: bool,
}

impl Client {
    /// A client trusting the system's certificates, with [`DEFAULT_TIMEOUT`]. Unreadable
    /// system certificates are skipped (HTTPS to a server only they vouch for then fails
    /// verification, with a clear error).
    pub fn new() -> Result<Self> {
        Self::trusting(https::system_roots())
    }

    /// A client trusting only `roots`, with [`DEFAULT_TIMEOUT`], refusing plain http,
    /// through the proxies of the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`).
    pub fn trusting(roots: rustls::RootCertStore) -> Result<Self> {
        Self::trusting_through(roots, Proxies::from_env())
    }

    /// A client trusting only `roots`, with [`DEFAULT_TIMEOUT`], refusing plain http, going
    /// through `proxies` where they say so.
    pub fn trusting_through(roots: rustls::RootCertStore, proxies: Proxies) -> Result<Self> {
        let http =
            HttpsClientBuilder::new(roots).with_proxies(proxies).build().map_err(Error::Tls)?;
        Ok(Self { http, timeout: DEFAULT_TIMEOUT, allow_plain_http: false })
    }

    /// The same client asking plain-http servers too (never with the token).
    #[must_use]
    pub fn allowing_plain_http(mut self, allow: bool) -> Self {
        self.allow_plain_http = allow;
        self
    }

    /// The same client with another per-request timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Ask what `channel` offers, periodic style (`<server>/<channel>/index.yaml`).
    pub async fn fetch_index(
        &self,
        update_server: &str,
        channel: &str,
        options: RequestOptions<'_>,
    ) -> Result<ChannelAnswer> {
        let url = index_url(update_server, channel)?;
        let body = self.get(url.clone(), options).await?;
        ChannelAnswer::from_index_yaml(&body)
            .map_err(|source| Error::Answer { url: url.to_string(), source })
    }

    /// Ask what `channel` offers, legacy (cron) style. Cluster-info headers are sent only if
    /// `options.cluster_info` is set (k0s sends none here; the query already identifies the
    /// cluster).
    pub async fn fetch_legacy(
        &self,
        update_server: &str,
        channel: &str,
        query: &LegacyQuery,
        options: RequestOptions<'_>,
    ) -> Result<ChannelAnswer> {
        let url = legacy_url(update_server, channel, query)?;
        let body = self.get(url.clone(), options).await?;
        ChannelAnswer::from_legacy_yaml(&body)
            .map_err(|source| Error::Answer { url: url.to_string(), source })
    }

    async fn get(&self, url: Uri, options: RequestOptions<'_>) -> Result<String> {
        let shown = url.to_string();
        let plain = url.scheme() == Some(&http::uri::Scheme::HTTP);
        if plain && !self.allow_plain_http {
            return Err(Error::PlainHttp { url: shown });
        }
        let mut request = Request::builder()
            .method(Method::GET)
            .uri(url)
            .header(USER_AGENT, concat!("k0s-autopilot/", env!("CARGO_PKG_VERSION")))
            .body(Empty::<Bytes>::new())
            .map_err(|source| Error::BadUrl { url: shown.clone(), source: source.into() })?;
        let headers = request.headers_mut();
        // A credential never travels in clear text.
        if let Some(token) = options.token.filter(|_| !plain) {
            let mut value = HeaderValue::try_from(format!("Bearer {}", token.trim()))
                .map_err(|_| Error::BadHeader { name: AUTHORIZATION.to_string() })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        if let Some(info) = options.cluster_info {
            for (name, value) in info.headers() {
                let value = HeaderValue::try_from(value)
                    .map_err(|_| Error::BadHeader { name: name.to_owned() })?;
                headers.insert(HeaderName::from_static(name), value);
            }
        }

        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|source| Error::Request { url: shown.clone(), source })?;
            let status = response.status();
            if status != StatusCode::OK {
                return Err(Error::Status { url: shown.clone(), status });
            }
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|source| Error::Body { url: shown.clone(), source })?
                .to_bytes();
            String::from_utf8(body.to_vec())
                .map_err(|e| Error::Body { url: shown.clone(), source: Box::new(e) })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| Error::Timeout { url: shown.clone(), timeout: self.timeout })?
    }
}

/// What a query value keeps as it is: RFC 3986's unreserved characters (letters, digits,
/// `-._~`); everything else is percent-encoded (`+` as `%2B`, space as `%20`).
const QUERY_VALUE: &AsciiSet =
    &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `updateServer` as a URL, `https://` assumed when it has no scheme; only `http` and
/// `https` with a host are accepted.
fn server_url(update_server: &str) -> Result<Url> {
    let trimmed = update_server.trim();
    let text =
        if trimmed.contains("://") { trimmed.to_owned() } else { format!("https://{trimmed}") };
    let mut url =
        Url::parse(&text).map_err(|e| Error::BadUrl { url: text.clone(), source: e.into() })?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err(Error::BadScheme { url: text });
    }
    url.set_fragment(None);
    Ok(url)
}

/// `url` as the `Uri` a request is made with.
fn to_uri(url: &Url) -> Result<Uri> {
    Uri::try_from(url.as_str())
        .map_err(|e| Error::BadUrl { url: url.to_string(), source: http::Error::from(e).into() })
}

#[cfg(test)]
mod tests;
