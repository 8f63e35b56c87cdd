//! Outbound HTTP proxies from the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
//! `NO_PROXY`, each also in lower case), and the connector that goes through them: a plain
//! `http://` request is forwarded by the proxy (absolute-form request line), an `https://` one
//! is tunnelled with `CONNECT` and TLS runs end to end inside the tunnel.
//!
//! Matching is hyper-util's (`client-proxy`), which follows curl: `NO_PROXY` takes host
//! names (a name matches itself and its subdomains; a leading dot is the same), IP
//! addresses, CIDRs (`10.0.0.0/8`) and `*`. A proxy's `user:password@` is sent as
//! `Proxy-Authorization: Basic` and never shown: [`Proxies`]' `Debug`, [`Route`] and every
//! message name the proxy without its credentials.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Uri};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::{Intercept, Matcher};

/// The error type of connectors (what hyper-util's client boxes).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The environment variables read, in order of precedence for each role.
const HTTP_VARS: [&str; 2] = ["HTTP_PROXY", "http_proxy"];
const HTTPS_VARS: [&str; 2] = ["HTTPS_PROXY", "https_proxy"];
const ALL_VARS: [&str; 2] = ["ALL_PROXY", "all_proxy"];
const NO_VARS: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// Which proxies to use for which destination; cheap to clone. [`Proxies::none`] connects
/// directly everywhere.
#[derive(Clone, Default)]
pub struct Proxies {
    inner: Option<Arc<Configured>>,
}

/// The raw settings (kept to compare and to hand the API-server client its proxy URL) and
/// the matcher built from them.
struct Configured {
    http: String,
    https: String,
    no: String,
    matcher: Matcher,
}

/// How a request to one destination goes out.
#[derive(Clone, Debug)]
pub enum Route {
    /// Straight to the destination.
    Direct,
    /// A plain `http://` destination, through this forwarding proxy.
    Forward(Intercept),
    /// An `https://` destination, through a `CONNECT` tunnel of this proxy.
    Tunnel(Intercept),
    /// The environment names a proxy of a kind this client cannot use (e.g. `socks5://`).
    Unsupported {
        /// The proxy's scheme.
        scheme: String,
    },
}

impl Route {
    /// The proxy, without credentials, for messages and logs (`None` for a direct route).
    pub fn proxy(&self) -> Option<String> {
        match self {
            Self::Direct => None,
            Self::Forward(intercept) | Self::Tunnel(intercept) => Some(display(intercept.uri())),
            Self::Unsupported { scheme } => Some(format!("{scheme}://…")),
        }
    }
}

impl Proxies {
    /// No proxy anywhere.
    pub fn none() -> Self {
        Self { inner: None }
    }

    /// The proxies the process environment names (upper-case variables first, then lower
    /// case: `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` for both, `NO_PROXY`).
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The proxies the variables `lookup` returns would name (for tests: no process
    /// environment involved). An empty value counts as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let first = |names: [&str; 2]| {
            names.iter().find_map(|name| lookup(name).filter(|v| !v.trim().is_empty()))
        };
        let all = first(ALL_VARS);
        let http = first(HTTP_VARS).or_else(|| all.clone()).unwrap_or_default();
        let https = first(HTTPS_VARS).or(all).unwrap_or_default();
        let no = first(NO_VARS).unwrap_or_default();
        Self::with(http, https, no)
    }

    /// Explicit settings: the proxy for `http://` destinations, for `https://` ones (either
    /// may be empty: none) and the `NO_PROXY` list.
    pub fn with(http: String, https: String, no: String) -> Self {
        if http.trim().is_empty() && https.trim().is_empty() {
            return Self::none();
        }
        let matcher =
            Matcher::builder().http(http.clone()).https(https.clone()).no(no.clone()).build();
        Self { inner: Some(Arc::new(Configured { http, https, no, matcher })) }
    }

    /// Whether any proxy is configured.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// How a request to `dst` goes out.
    pub fn route(&self, dst: &Uri) -> Route {
        let Some(configured) = &self.inner else { return Route::Direct };
        let Some(intercept) = configured.matcher.intercept(dst) else { return Route::Direct };
        match intercept.uri().scheme_str() {
            Some("http" | "https") => {}
            Some(other) => return Route::Unsupported { scheme: other.to_owned() },
            None => return Route::Unsupported { scheme: String::new() },
        }
        let https = dst.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https"));
        if https { Route::Tunnel(intercept) } else { Route::Forward(intercept) }
    }

    /// The full proxy URL (credentials included) an `https://` API server at `server`
    /// should be reached through, for a client that tunnels by itself (the kube client):
    /// `None` when `NO_PROXY` exempts it or no proxy is set.
    pub fn tunnel_url_for(&self, server: &Uri) -> Option<Uri> {
        let configured = self.inner.as_ref()?;
        match self.route(server) {
            Route::Tunnel(_) | Route::Forward(_) => {}
            Route::Direct | Route::Unsupported { .. } => return None,
        }
        let https = server.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https"));
        let raw = if https { &configured.https } else { &configured.http };
        let raw = raw.trim();
        let with_scheme =
            if raw.contains("://") { raw.to_owned() } else { format!("http://{raw}") };
        with_scheme.parse().ok()
    }

    /// The `Proxy-Authorization` a request to `dst` must carry: only a request forwarded by
    /// a proxy with credentials (a tunnel sends them in its `CONNECT`).
    pub fn forward_authorization(&self, dst: &Uri) -> Option<HeaderValue> {
        match self.route(dst) {
            Route::Forward(intercept) => intercept.basic_auth().cloned(),
            Route::Direct | Route::Tunnel(_) | Route::Unsupported { .. } => None,
        }
    }
}

impl PartialEq for Proxies {
    fn eq(&self, other: &Self) -> bool {
        match (&self.inner, &other.inner) {
            (None, None) => true,
            (Some(a), Some(b)) => (&a.http, &a.https, &a.no) == (&b.http, &b.https, &b.no),
            (None, Some(_)) | (Some(_), None) => false,
        }
    }
}

impl Eq for Proxies {}

impl fmt::Debug for Proxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(configured) = &self.inner else { return f.write_str("Proxies(none)") };
        f.debug_struct("Proxies")
            .field("http", &redact(&configured.http))
            .field("https", &redact(&configured.https))
            .field("no", &configured.no)
            .finish()
    }
}

/// A proxy URL without its `user:password@` (for `Debug` and messages).
pub fn redact(proxy: &str) -> String {
    let trimmed = proxy.trim();
    let (scheme, rest) = match trimmed.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, trimmed),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_owned(),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{authority}{path}"),
        None => format!("{authority}{path}"),
    }
}

/// `scheme://host:port` of a proxy URI (hyper-util keeps no credentials in it).
fn display(uri: &Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("http");
    let authority = uri.authority().map_or("", |a| a.as_str());
    redact(&format!("{scheme}://{authority}"))
}

// === impl ProxyConnector ===

/// Connects directly, through a forwarding proxy or through a `CONNECT` tunnel, as
/// [`Proxies::route`] says for each destination.
#[derive(Clone)]
pub struct ProxyConnector {
    /// TLS-or-plain TCP to a host: the direct route, and the way to a proxy itself.
    direct: HttpsConnector<HttpConnector>,
    /// What TLS to a destination inside a tunnel uses.
    tls: Arc<rustls::ClientConfig>,
    proxies: Proxies,
}

impl fmt::Debug for ProxyConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyConnector").field("proxies", &self.proxies).finish_non_exhaustive()
    }
}

impl ProxyConnector {
    /// A connector using `direct` for direct connections and to reach proxies, `tls` for
    /// TLS inside tunnels.
    pub fn new(
        direct: HttpsConnector<HttpConnector>,
        tls: rustls::ClientConfig,
        proxies: Proxies,
    ) -> Self {
        Self { direct, tls: Arc::new(tls), proxies }
    }
}

/// The proxy URL names a proxy of a kind this client cannot use.
#[derive(Debug, thiserror::Error)]
#[error("the proxy {proxy} for {dst} is not an http:// or https:// proxy")]
pub struct UnsupportedProxy {
    /// The proxy, without credentials.
    pub proxy: String,
    /// The destination.
    pub dst: String,
}

impl tower_service::Service<Uri> for ProxyConnector {
    type Response = ProxyStream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<ProxyStream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Every route uses a fresh clone of a connector that is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let route = self.proxies.route(&dst);
        let mut direct = self.direct.clone();
        match route {
            Route::Direct => Box::pin(async move {
                let stream = tower_service::Service::call(&mut direct, dst).await?;
                Ok(ProxyStream { io: Box::new(stream), forwarded: false })
            }),
            Route::Forward(intercept) => Box::pin(async move {
                let stream =
                    tower_service::Service::call(&mut direct, intercept.uri().clone()).await?;
                Ok(ProxyStream { io: Box::new(stream), forwarded: true })
            }),
            Route::Tunnel(intercept) => {
                let mut tunnel = Tunnel::new(intercept.uri().clone(), direct);
                if let Some(auth) = intercept.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config((*self.tls).clone())
                    .https_only()
                    .enable_http1()
                    .wrap_connector(tunnel);
                Box::pin(async move {
                    let stream = tower_service::Service::call(&mut tls, dst).await?;
                    Ok(ProxyStream { io: Box::new(stream), forwarded: false })
                })
            }
            unsupported @ Route::Unsupported { .. } => {
                let error = UnsupportedProxy {
                    proxy: unsupported.proxy().unwrap_or_default(),
                    dst: dst.to_string(),
                };
                Box::pin(async move { Err(error.into()) })
            }
        }
    }
}

// === impl ProxyStream ===

/// What a connection is, whichever route it took.
trait Io: Read + Write + Connection + Send + Unpin {}

impl<T: Read + Write + Connection + Send + Unpin> Io for T {}

/// A connection made by [`ProxyConnector`]: to the destination, to a forwarding proxy
/// (requests then go in absolute form), or through a tunnel.
pub struct ProxyStream {
    io: Box<dyn Io>,
    forwarded: bool,
}

impl fmt::Debug for ProxyStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyStream").field("forwarded", &self.forwarded).finish_non_exhaustive()
    }
}

impl Connection for ProxyStream {
    fn connected(&self) -> Connected {
        let connected = self.io.connected();
        if self.forwarded { connected.proxy(true) } else { connected }
    }
}

impl Read for ProxyStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_read(cx, buf)
    }
}

impl Write for ProxyStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Proxies {
        let vars: Vec<(String, String)> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Proxies::from_lookup(move |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    fn uri(s: &str) -> Uri {
        s.parse().expect("a uri")
    }

    fn proxy_of(route: Route) -> Option<String> {
        route.proxy()
    }

    #[test]
    fn https_destinations_are_tunnelled_and_http_ones_forwarded() {
        let p = env(&[("HTTPS_PROXY", "http://p:3128"), ("HTTP_PROXY", "http://q:8080")]);
        assert!(matches!(p.route(&uri("https://h/k0s")), Route::Tunnel(_)));
        assert!(matches!(p.route(&uri("http://h/k0s")), Route::Forward(_)));
        assert_eq!(proxy_of(p.route(&uri("https://h/k0s"))).as_deref(), Some("http://p:3128"));
        assert_eq!(proxy_of(p.route(&uri("http://h/k0s"))).as_deref(), Some("http://q:8080"));
    }

    #[test]
    fn lower_case_variables_count_and_upper_case_ones_win() {
        let lower = env(&[("https_proxy", "http://low:1"), ("no_proxy", "h")]);
        assert_eq!(proxy_of(lower.route(&uri("https://x/"))).as_deref(), Some("http://low:1"));
        assert!(matches!(lower.route(&uri("https://h/")), Route::Direct));
        let both = env(&[("https_proxy", "http://low:1"), ("HTTPS_PROXY", "http://up:2")]);
        assert_eq!(proxy_of(both.route(&uri("https://x/"))).as_deref(), Some("http://up:2"));
    }

    #[test]
    fn all_proxy_serves_both_schemes_unless_one_is_named() {
        let p = env(&[("ALL_PROXY", "http://all:1"), ("HTTP_PROXY", "http://plain:2")]);
        assert_eq!(proxy_of(p.route(&uri("https://x/"))).as_deref(), Some("http://all:1"));
        assert_eq!(proxy_of(p.route(&uri("http://x/"))).as_deref(), Some("http://plain:2"));
    }

    #[test]
    fn no_proxy_takes_cidrs_addresses_and_domain_suffixes() {
        let p = env(&[
            ("HTTPS_PROXY", "http://p:3128"),
            ("NO_PROXY", "10.0.0.0/8, 192.168.1.7,.internal.example, corp.example"),
        ]);
        for direct in [
            "https://10.1.2.3/k0s",
            "https://192.168.1.7:8443/k0s",
            "https://a.internal.example/k0s",
            "https://internal.example/k0s",
            "https://corp.example/k0s",
            "https://mirror.corp.example/k0s",
        ] {
            assert!(matches!(p.route(&uri(direct)), Route::Direct), "{direct} bypasses");
        }
        for proxied in ["https://11.0.0.1/k0s", "https://192.168.1.8/", "https://notcorp.example/"]
        {
            assert!(matches!(p.route(&uri(proxied)), Route::Tunnel(_)), "{proxied} is proxied");
        }
    }

    #[test]
    fn no_variables_mean_direct_everywhere() {
        let p = env(&[("NO_PROXY", "x")]);
        assert!(p.is_empty());
        assert!(matches!(p.route(&uri("https://x/")), Route::Direct));
        assert_eq!(p, Proxies::none());
    }

    #[test]
    fn credentials_never_show_in_debug_or_routes() {
        let p = env(&[("HTTPS_PROXY", "http://k0s:s3cret@p:3128"), ("HTTP_PROXY", "u:pw@q:1")]);
        let debug =
            format!("{p:?} {:?} {:?}", p.route(&uri("https://x/")), p.route(&uri("http://x/")));
        assert!(!debug.contains("s3cret") && !debug.contains("pw@"), "{debug}");
        assert_eq!(proxy_of(p.route(&uri("https://x/"))).as_deref(), Some("http://p:3128"));
        assert_eq!(redact("http://a:b@h:1/x"), "http://***@h:1/x");
        assert_eq!(redact("a:b@h:1"), "***@h:1");
    }

    #[test]
    fn only_forwarded_requests_carry_proxy_authorization() {
        let p = env(&[
            ("HTTPS_PROXY", "http://k0s:s3cret@p:1"),
            ("HTTP_PROXY", "http://k0s:s3cret@p:1"),
        ]);
        assert!(p.forward_authorization(&uri("https://x/")).is_none(), "the CONNECT carries it");
        let auth = p.forward_authorization(&uri("http://x/")).expect("a forwarded request");
        assert_eq!(auth, "Basic azBzOnMzY3JldA==");
        assert!(auth.is_sensitive());
    }

    #[test]
    fn the_api_server_gets_the_full_proxy_url_unless_exempt() {
        let p = env(&[("HTTPS_PROXY", "k0s:s3cret@p:3128"), ("NO_PROXY", "10.0.0.1")]);
        assert_eq!(
            p.tunnel_url_for(&uri("https://10.0.0.2:6443")).map(|u| u.to_string()),
            Some("http://k0s:s3cret@p:3128/".to_owned())
        );
        assert_eq!(p.tunnel_url_for(&uri("https://10.0.0.1:6443")), None);
        assert_eq!(Proxies::none().tunnel_url_for(&uri("https://10.0.0.2:6443")), None);
    }

    #[test]
    fn socks_proxies_are_named_unsupported() {
        let p = env(&[("HTTPS_PROXY", "socks5://p:1080")]);
        assert!(
            matches!(p.route(&uri("https://x/")), Route::Unsupported { scheme } if scheme == "socks5")
        );
    }
}
