//! The client against a real HTTP server on `127.0.0.1:0`, plus the pure URL builders.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, Response};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::*;

const INDEX: &str = "channel: stable\nversion: v1.35.2+k0s.0\ndownloadURLs:\n\
                     - os: linux\n  arch: amd64\n  k0s: http://127.0.0.1/k0s\n";

const LEGACY: &str =
    "version: v1.35.2+k0s.0\ndownloadURLs:\n  k0s:\n    linux-amd64: http://127.0.0.1/k0s\n";

/// What the server saw of one request.
#[derive(Clone, Debug)]
struct Seen {
    uri: Uri,
    headers: HeaderMap,
}

/// A one-route server: every request gets `status` and `body`, after `delay`; over https
/// when it has a certificate (see [`TestServer::tls`]).
struct TestServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
    /// The self-signed certificate of an https server.
    cert: Option<rustls::pki_types::CertificateDer<'static>>,
}

impl TestServer {
    async fn start(status: StatusCode, body: &'static str, delay: Duration) -> Self {
        Self::serve(status, body, delay, None, Vec::new()).await
    }

    /// An https server answering `status` with `headers` and `body` at once.
    async fn tls(
        status: StatusCode,
        body: &'static str,
        headers: Vec<(&'static str, String)>,
    ) -> Self {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::try_from(signing_key.serialize_der()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(
            rustls::crypto::ring::default_provider().into(),
        )
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let mut server = Self::serve(status, body, Duration::ZERO, Some(acceptor), headers).await;
        server.cert = Some(cert.der().clone());
        server
    }

    async fn serve(
        status: StatusCode,
        body: &'static str,
        delay: Duration,
        tls: Option<tokio_rustls::TlsAcceptor>,
        headers: Vec<(&'static str, String)>,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let recorded = recorded.clone();
                let tls = tls.clone();
                let headers = headers.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        recorded
                            .lock()
                            .unwrap()
                            .push(Seen { uri: req.uri().clone(), headers: req.headers().clone() });
                        let headers = headers.clone();
                        async move {
                            tokio::time::sleep(delay).await;
                            let mut response = Response::builder().status(status);
                            for (name, value) in headers {
                                response = response.header(name, value);
                            }
                            let response = response
                                .body(Full::new(Bytes::from_static(body.as_bytes())))
                                .unwrap();
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    });
                    let connection = http1::Builder::new();
                    match tls {
                        Some(tls) => {
                            let Ok(stream) = tls.accept(stream).await else { return };
                            let _ =
                                connection.serve_connection(TokioIo::new(stream), service).await;
                        }
                        None => {
                            let _ =
                                connection.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                });
            }
        });
        Self { addr, seen, task, cert: None }
    }

    /// A client trusting this https server only.
    fn trusting_client(&self) -> Client {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.clone().expect("an https server")).unwrap();
        Client::trusting(roots).unwrap()
    }

    async fn ok(body: &'static str) -> Self {
        Self::start(StatusCode::OK, body, Duration::ZERO).await
    }

    fn url(&self) -> String {
        let scheme = if self.cert.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A client that asks the plain-http test servers (as `--allow-unverified-payloads` does).
fn client() -> Client {
    Client::new().unwrap().allowing_plain_http(true)
}

fn cluster_info() -> ClusterInfo {
    ClusterInfo {
        storage_type: "etcd".to_owned(),
        kube_system_uid: "0000-1111".to_owned(),
        control_plane_nodes_count: 3,
        workers: WorkerData {
            archs: BTreeMap::from([("amd64".to_owned(), 2)]),
            oses: BTreeMap::from([("Debian GNU/Linux 13".to_owned(), 2)]),
            runtimes: BTreeMap::from([("containerd://2.1.0".to_owned(), 2)]),
        },
        version: "v1.35.1+k0s.0".to_owned(),
        cni_provider: "kuberouter".to_owned(),
        arch: "amd64".to_owned(),
    }
}

// === against a server ===

#[tokio::test]
async fn index_yaml_is_fetched_from_the_channel_path_and_parsed() {
    let server = TestServer::ok(INDEX).await;
    let answer =
        client().fetch_index(&server.url(), "stable", RequestOptions::default()).await.unwrap();
    assert_eq!(answer.version, "v1.35.2+k0s.0");
    assert_eq!(answer.k0s["linux-amd64"].url, "http://127.0.0.1/k0s");
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uri.path(), "/stable/index.yaml");
}

#[tokio::test]
async fn server_error_status_is_an_error_naming_it() {
    let server = TestServer::start(StatusCode::INTERNAL_SERVER_ERROR, "boom", Duration::ZERO).await;
    let err =
        client().fetch_index(&server.url(), "stable", RequestOptions::default()).await.unwrap_err();
    assert!(
        matches!(err, Error::Status { status: StatusCode::INTERNAL_SERVER_ERROR, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("500"), "{err}");
    assert_eq!(err.metric_label(), "status");
}

#[tokio::test]
async fn garbage_yaml_is_an_error_naming_the_problem() {
    let server = TestServer::ok("version: [this is not\n  closed").await;
    let err =
        client().fetch_index(&server.url(), "stable", RequestOptions::default()).await.unwrap_err();
    assert!(matches!(err, Error::Answer { .. }), "{err:?}");
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(source.contains("malformed") && source.contains("line"), "{source}");
}

#[tokio::test]
async fn bearer_token_is_sent_when_given_over_https() {
    let server = TestServer::tls(StatusCode::OK, INDEX, Vec::new()).await;
    let options = RequestOptions { token: Some("s3cret\n"), cluster_info: None };
    server.trusting_client().fetch_index(&server.url(), "stable", options).await.unwrap();
    let seen = server.seen();
    assert_eq!(seen[0].headers[AUTHORIZATION], "Bearer s3cret");
}

#[tokio::test]
async fn a_plain_http_server_is_refused_unless_allowed_and_never_gets_the_token() {
    let server = TestServer::ok(INDEX).await;
    let options = || RequestOptions { token: Some("s3cret"), cluster_info: None };
    let refused = Client::new()
        .unwrap()
        .fetch_index(&server.url(), "stable", options())
        .await
        .expect_err("plain http is refused by default");
    assert!(matches!(refused, Error::PlainHttp { .. }), "{refused:?}");
    assert!(refused.to_string().contains("--allow-unverified-payloads"), "{refused}");
    assert!(server.seen().is_empty(), "nothing was sent");
    // Allowed: asked, but without the token.
    client().fetch_index(&server.url(), "stable", options()).await.unwrap();
    assert!(server.seen()[0].headers.get(AUTHORIZATION).is_none(), "no token over http");
}

#[tokio::test]
async fn a_redirect_is_not_followed_so_the_token_stays_with_the_server_it_was_meant_for() {
    let elsewhere = TestServer::ok(INDEX).await;
    let location = format!("{}/stable/index.yaml", elsewhere.url());
    let server = TestServer::tls(StatusCode::FOUND, "", vec![("location", location)]).await;
    let options = RequestOptions { token: Some("s3cret"), cluster_info: None };
    let err = server
        .trusting_client()
        .allowing_plain_http(true)
        .fetch_index(&server.url(), "stable", options)
        .await
        .expect_err("a redirect is an error");
    assert!(matches!(err, Error::Status { status: StatusCode::FOUND, .. }), "{err:?}");
    assert!(elsewhere.seen().is_empty(), "the redirect's target was never asked");
}

#[tokio::test]
async fn no_token_and_no_cluster_headers_by_default() {
    let server = TestServer::ok(INDEX).await;
    client().fetch_index(&server.url(), "stable", RequestOptions::default()).await.unwrap();
    let headers = &server.seen()[0].headers;
    assert!(headers.get(AUTHORIZATION).is_none());
    let leaked: Vec<_> = headers.keys().filter(|name| name.as_str().starts_with("k0s_")).collect();
    assert!(leaked.is_empty(), "cluster headers sent without opt-in: {leaked:?}");
}

#[tokio::test]
async fn cluster_headers_are_sent_when_opted_in() {
    let server = TestServer::ok(INDEX).await;
    let info = cluster_info();
    let options = RequestOptions { token: None, cluster_info: Some(&info) };
    client().fetch_index(&server.url(), "stable", options).await.unwrap();
    let headers = &server.seen()[0].headers;
    assert_eq!(headers["K0S_StorageType"], "etcd");
    assert_eq!(headers["K0S_ClusterID"], "kube-system:0000-1111");
    assert_eq!(headers["K0S_ControlPlaneNodesCount"], "3");
    assert_eq!(headers["K0S_Version"], "v1.35.1+k0s.0");
    assert_eq!(headers["K0S_CNIProvider"], "kuberouter");
    assert_eq!(headers["K0S_Arch"], "amd64");
    let data = base64::engine::general_purpose::STANDARD
        .decode(headers["K0S_WorkerData"].as_bytes())
        .unwrap();
    let data: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(
        data,
        serde_json::json!({
            "Archs": { "amd64": 2 },
            "OSes": { "Debian GNU/Linux 13": 2 },
            "Runtimes": { "containerd://2.1.0": 2 },
        })
    );
}

#[tokio::test]
async fn legacy_endpoint_sends_the_query_and_parses_the_map_answer() {
    let server = TestServer::ok(LEGACY).await;
    let query = LegacyQuery {
        cluster_id: "0000-1111".to_owned(),
        last_update_status: "Completed".to_owned(),
        current_version: "v1.35.1+k0s.0".to_owned(),
    };
    let options = RequestOptions { token: None, cluster_info: None };
    let answer = client()
        .fetch_legacy(&format!("{}/ignored/path", server.url()), "stable", &query, options)
        .await
        .unwrap();
    assert_eq!(answer.version, "v1.35.2+k0s.0");
    assert_eq!(answer.k0s["linux-amd64"].sha256, None);
    let seen = server.seen();
    assert_eq!(seen[0].uri.path(), "/stable");
    assert_eq!(
        seen[0].uri.query(),
        Some("clusterID=0000-1111&lastUpdateStatus=Completed&currentVersion=v1.35.1%2Bk0s.0")
    );
    assert!(seen[0].headers.get("k0s_clusterid").is_none());
}

#[tokio::test]
async fn slow_server_times_out() {
    let server = TestServer::start(StatusCode::OK, INDEX, Duration::from_secs(30)).await;
    let timeout = Duration::from_millis(200);
    let err = client()
        .with_timeout(timeout)
        .fetch_index(&server.url(), "stable", RequestOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { timeout: t, .. } if t == timeout), "{err:?}");
}

#[tokio::test]
async fn unreachable_server_is_a_request_error() {
    // Bind and drop, so nothing listens on the port.
    let addr = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let err = client()
        .fetch_index(&format!("http://{addr}"), "stable", RequestOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Request { .. }), "{err:?}");
    assert_eq!(err.metric_label(), "transport");
}

// === URL building ===

#[test]
fn index_url_joins_the_server_path_and_channel() {
    let url = |server: &str, channel: &str| index_url(server, channel).unwrap().to_string();
    assert_eq!(
        url("https://updates.k0sproject.io/", "stable"),
        "https://updates.k0sproject.io/stable/index.yaml"
    );
    assert_eq!(
        url("updates.example.com", "edge_release"),
        "https://updates.example.com/edge_release/index.yaml"
    );
    assert_eq!(
        url("http://127.0.0.1:8080/base", "stable"),
        "http://127.0.0.1:8080/base/stable/index.yaml"
    );
}

#[test]
fn legacy_url_replaces_the_path_and_encodes_the_query() {
    let query = LegacyQuery {
        cluster_id: "abc".to_owned(),
        last_update_status: String::new(),
        current_version: "v1.35.1+k0s.0".to_owned(),
    };
    let url = legacy_url("updates.example.com/some/path", "stable", &query).unwrap();
    assert_eq!(
        url.to_string(),
        "https://updates.example.com/stable?clusterID=abc&lastUpdateStatus=&currentVersion=v1.35.1%2Bk0s.0"
    );
}

#[test]
fn legacy_query_values_keep_only_unreserved_characters() {
    let query = LegacyQuery {
        cluster_id: "a~b_c".to_owned(),
        last_update_status: "two words".to_owned(),
        current_version: "v1*/é".to_owned(),
    };
    let url = legacy_url("http://127.0.0.1:8080/x?old=1#frag", "/edge/", &query).unwrap();
    assert_eq!(
        url.to_string(),
        "http://127.0.0.1:8080/edge?clusterID=a~b_c&lastUpdateStatus=two%20words&currentVersion=v1%2A%2F%C3%A9"
    );
}

#[test]
fn index_url_keeps_the_server_query() {
    let url = index_url("http://127.0.0.1:8080/base/?token=x", "/stable/").unwrap();
    assert_eq!(url.to_string(), "http://127.0.0.1:8080/base/stable/index.yaml?token=x");
}

#[test]
fn unusable_server_urls_are_errors() {
    assert!(matches!(index_url("ftp://example.com", "stable"), Err(Error::BadScheme { .. })));
    assert!(index_url("http://exa mple.com", "stable").is_err());
}
