//! `--metrics-address`: the node process's Prometheus metrics, served as OpenMetrics text on
//! `GET /metrics` (DESIGN §12).
//!
//! The components own their metrics (`autopilot_controller::metrics`,
//! `autopilot_signal::metrics`, `autopilot_updater::metrics`) and register them in the one
//! [`Registry`] made here; this module adds the API errors every component's client sees
//! ([`ApiErrorsLayer`]) and the small HTTP server. Nothing is served unless the flag is set.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The prefix of every metric name.
pub const PREFIX: &str = "k0s_autopilot";

/// The `Content-Type` of the answer: what `prometheus_client`'s text encoder writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A new registry whose metrics are named `k0s_autopilot_*`.
pub fn registry() -> Registry {
    Registry::with_prefix(PREFIX)
}

// === API errors ===

/// Labels of [`ApiErrors`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiErrorLabels {
    /// The Kubernetes verb of the request (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`).
    pub verb: &'static str,
    /// The HTTP status code of the answer, or `none` when no answer came (connection
    /// refused, timeout).
    pub code: String,
}

/// `api_errors_total{verb,code}`: API requests that failed. `404 Not Found` is not counted:
/// autopilot asks for objects that may be absent, and absent is an answer, not an error.
pub type ApiErrors = Family<ApiErrorLabels, Counter>;

/// Register [`ApiErrors`] in `registry`.
pub fn register_api_errors(registry: &mut Registry) -> ApiErrors {
    let errors = ApiErrors::default();
    registry.register(
        "api_errors",
        "Kubernetes API requests that failed, by verb and HTTP status (none: no answer)",
        errors.clone(),
    );
    errors
}

/// A `tower` layer for the kube client that counts failed requests in [`ApiErrors`].
#[derive(Clone)]
pub struct ApiErrorsLayer(pub ApiErrors);

impl<S> tower::Layer<S> for ApiErrorsLayer {
    type Service = CountErrors<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountErrors { inner, errors: self.0.clone() }
    }
}

/// The service of [`ApiErrorsLayer`].
#[derive(Clone)]
pub struct CountErrors<S> {
    inner: S,
    errors: ApiErrors,
}

impl<S, B, R> tower::Service<Request<B>> for CountErrors<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let verb = verb(request.method(), request.uri());
        let errors = self.errors.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            let code = match &answer {
                Ok(response) if is_error(response.status()) => {
                    Some(response.status().as_u16().to_string())
                }
                Ok(_) => None,
                Err(_) => Some("none".to_string()),
            };
            if let Some(code) = code {
                errors.get_or_create(&ApiErrorLabels { verb, code }).inc();
            }
            answer
        })
    }
}

/// Whether an answer counts as an API error (see [`ApiErrors`]).
fn is_error(status: StatusCode) -> bool {
    (status.is_client_error() || status.is_server_error()) && status != StatusCode::NOT_FOUND
}

/// The Kubernetes verb of a request, from its method and path as the API server derives it:
/// a `GET` of a collection is `list` (`watch` with `watch=true`), of a named object `get`.
fn verb(method: &Method, uri: &Uri) -> &'static str {
    match *method {
        Method::GET => {
            let watch = uri
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
            if watch {
                "watch"
            } else if is_collection(uri.path()) {
                "list"
            } else {
                "get"
            }
        }
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// Whether `path` names a collection (`/api/v1/nodes`, `/apis/g/v/namespaces/ns/pods`)
/// rather than an object or discovery document.
fn is_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return false,
    };
    let rest = match rest {
        ["namespaces", _namespace, resource @ ..] if !resource.is_empty() => resource,
        other => other,
    };
    rest.len() == 1
}

// === Serving ===

/// Bind `address` for the metrics endpoint; failing here (address in use, not local) stops
/// the node before it starts anything, because an operator asked for metrics.
pub async fn bind(address: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding --metrics-address {address}"))
}

/// Serve `registry` on `listener` until `shutdown` resolves: `GET /metrics` answers the
/// metrics as OpenMetrics text; any other path is 404, any other method 405. Bounded as
/// [`LIMITS`] says.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()>,
) {
    serve_within(listener, registry, shutdown, LIMITS).await;
}

/// What one scraper (or anyone who reaches the address) may hold of the endpoint.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// Connections served at once; one more is closed at once.
    connections: usize,
    /// How long a connection may take to send a request's headers.
    header_read: std::time::Duration,
    /// How long a connection may stay open in all (a client that never reads its answer
    /// is cut off too).
    lifetime: std::time::Duration,
}

/// The endpoint's limits: a Prometheus scrape is one short request on one or two
/// connections; these leave room for several scrapers and keep a slow or idle client from
/// holding sockets and memory.
const LIMITS: Limits = Limits {
    connections: 16,
    header_read: std::time::Duration::from_secs(10),
    lifetime: std::time::Duration::from_secs(60),
};

async fn serve_within(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) {
    let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(metrics.address = %address, "serving metrics on /metrics");
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(err) => {
                    // Out of file descriptors and the like: wait a little instead of spinning.
                    tracing::warn!(error = %err, "accepting a metrics connection failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!(
                limit = limits.connections,
                "too many metrics connections, closing one"
            );
            drop(stream);
            continue;
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<_>| {
                let answer = answer(request.method(), request.uri().path(), &registry);
                async move { Ok::<_, Infallible>(answer) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(limits.lifetime, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    tracing::debug!(error = %err, "metrics connection ended with an error");
                }
                Err(_) => tracing::debug!("metrics connection open too long, closed"),
            }
            drop(permit);
        });
    }
}

/// How long to wait after a failed `accept` before the next one.
const ACCEPT_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// The answer to `method path`.
fn answer(method: &Method, path: &str, registry: &Registry) -> Response<Full<Bytes>> {
    let plain = |status: StatusCode, text: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *response.status_mut() = status;
        response
    };
    if path != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "not found: metrics are served on /metrics\n");
    }
    if method != Method::GET {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "only GET is allowed\n");
    }
    let mut text = String::new();
    if let Err(err) = prometheus_client::encoding::text::encode(&mut text, registry) {
        tracing::warn!(error = %err, "encoding the metrics failed");
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "encoding the metrics failed\n");
    }
    let mut response = Response::new(Full::new(Bytes::from(text)));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(OPENMETRICS));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the server closes `stream` (a read returns end of file or an error) within
    /// `deadline`.
    async fn closed_within(
        stream: &mut tokio::net::TcpStream,
        deadline: std::time::Duration,
    ) -> bool {
        use tokio::io::AsyncReadExt as _;
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(deadline, stream.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }

    #[tokio::test]
    async fn idle_and_surplus_connections_are_closed_and_a_scrape_still_answers() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("an address");
        let limits = Limits {
            connections: 2,
            header_read: std::time::Duration::from_secs(2),
            lifetime: std::time::Duration::from_secs(30),
        };
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(serve_within(
            listener,
            Arc::new(registry()),
            stop.clone().cancelled_owned(),
            limits,
        ));

        // Two idle connections take both places; a third is closed at once (well before the
        // header timeout would close it).
        let mut idle = [
            tokio::net::TcpStream::connect(address).await.expect("connects"),
            tokio::net::TcpStream::connect(address).await.expect("connects"),
        ];
        let mut surplus = tokio::net::TcpStream::connect(address).await.expect("connects");
        assert!(closed_within(&mut surplus, std::time::Duration::from_secs(1)).await);
        // The idle ones send no headers: closed after the header timeout.
        for stream in &mut idle {
            assert!(closed_within(stream, std::time::Duration::from_secs(5)).await);
        }
        // Their places are free again: a scrape answers.
        let mut scrape = tokio::net::TcpStream::connect(address).await.expect("connects");
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("writes");
        let mut answer = String::new();
        tokio::time::timeout(std::time::Duration::from_secs(5), scrape.read_to_string(&mut answer))
            .await
            .expect("answers in time")
            .expect("reads");
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("# EOF\n"), "{answer}");
        stop.cancel();
    }

    fn uri(text: &str) -> Uri {
        text.parse().unwrap()
    }

    #[test]
    fn verbs_are_derived_as_the_api_server_does() {
        assert_eq!(verb(&Method::GET, &uri("/api/v1/nodes")), "list");
        assert_eq!(verb(&Method::GET, &uri("/api/v1/nodes/w1")), "get");
        assert_eq!(verb(&Method::GET, &uri("/api/v1/nodes?watch=true&rv=1")), "watch");
        assert_eq!(verb(&Method::GET, &uri("/api/v1/namespaces")), "list");
        assert_eq!(verb(&Method::GET, &uri("/api/v1/namespaces/default")), "get");
        assert_eq!(verb(&Method::GET, &uri("/api/v1/namespaces/default/pods")), "list");
        assert_eq!(
            verb(&Method::GET, &uri("/apis/autopilot.k0sproject.io/v1beta2/plans/autopilot")),
            "get"
        );
        assert_eq!(verb(&Method::GET, &uri("/apis")), "get");
        assert_eq!(verb(&Method::PATCH, &uri("/api/v1/nodes/w1")), "patch");
        assert_eq!(verb(&Method::POST, &uri("/api/v1/namespaces/d/pods/p/eviction")), "create");
    }

    #[test]
    fn absent_objects_are_not_errors_but_refusals_and_outages_are() {
        assert!(!is_error(StatusCode::OK));
        assert!(!is_error(StatusCode::NOT_FOUND));
        assert!(is_error(StatusCode::CONFLICT));
        assert!(is_error(StatusCode::TOO_MANY_REQUESTS));
        assert!(is_error(StatusCode::SERVICE_UNAVAILABLE));
    }

    #[tokio::test]
    async fn only_get_of_metrics_answers_with_the_metrics() {
        use http_body_util::BodyExt as _;
        let mut registry = registry();
        let errors = register_api_errors(&mut registry);
        errors.get_or_create(&ApiErrorLabels { verb: "patch", code: "409".into() }).inc();
        let ok = answer(&Method::GET, "/metrics", &registry);
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[http::header::CONTENT_TYPE], OPENMETRICS);
        let body = ok.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            body.contains("k0s_autopilot_api_errors_total{verb=\"patch\",code=\"409\"} 1\n"),
            "{body}"
        );
        assert!(body.ends_with("# EOF\n"), "{body}");
        assert_eq!(answer(&Method::GET, "/", &registry).status(), StatusCode::NOT_FOUND);
        assert_eq!(
            answer(&Method::POST, "/metrics", &registry).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
