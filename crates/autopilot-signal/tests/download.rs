//! Downloads against a local hyper server on 127.0.0.1: success, and every failure leaves
//! neither the destination nor a temp file behind.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use autopilot_signal::download::{self, DownloadConfig, DownloadError, Downloader, Target};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::{Body, Frame, Incoming};
use sha2::{Digest as _, Sha256};

const PAYLOAD: &[u8] = b"#!/bin/sh\necho k0s v2\n";

/// A response body: some chunks, then either the end or silence forever.
struct TestBody {
    chunks: Vec<Bytes>,
    stall: bool,
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if !self.chunks.is_empty() {
            let chunk = self.chunks.remove(0);
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if self.stall { Poll::Pending } else { Poll::Ready(None) }
    }
}

fn body(data: &[u8]) -> TestBody {
    TestBody { chunks: vec![Bytes::copy_from_slice(data)], stall: false }
}

fn respond(req: &Request<Incoming>) -> Response<TestBody> {
    let ua = req.headers().get(http::header::USER_AGENT).and_then(|v| v.to_str().ok());
    let path = req.uri().path();
    let builder = Response::builder();
    let response = match path {
        "/k0s" | "/dir/k0s" => builder.header("content-length", PAYLOAD.len()).body(body(PAYLOAD)),
        "/ua" => builder.body(body(ua.unwrap_or_default().as_bytes())),
        "/missing" => builder.status(StatusCode::NOT_FOUND).body(body(b"no")),
        "/stall" => builder
            .header("content-length", PAYLOAD.len() * 2)
            .body(TestBody { chunks: vec![Bytes::from_static(PAYLOAD)], stall: true }),
        "/big" => builder.header("content-length", 4096).body(body(&[7u8; 4096])),
        "/big-chunked" => builder
            .body(TestBody { chunks: vec![Bytes::from_static(&[7u8; 1024]); 4], stall: false }),
        "/loop" => builder.status(StatusCode::FOUND).header("location", "/loop").body(body(b"")),
        "/hop" => builder.status(StatusCode::FOUND).header("location", "dir/k0s").body(body(b"")),
        "/bundle-cd" => builder
            .header("content-disposition", "attachment; filename=\"images v2.tar\"")
            .body(body(PAYLOAD)),
        "/dist/bundle.tar" => builder.body(body(PAYLOAD)),
        // `/to-http/<host:port>`: a redirect to `http://<host:port>/k0s`.
        _ if path.starts_with("/to-http/") => {
            let authority = path.trim_start_matches("/to-http/");
            builder
                .status(StatusCode::FOUND)
                .header("location", format!("http://{authority}/k0s"))
                .body(body(b""))
        }
        // `/to-https/<host:port>`: a redirect to `https://<host:port>/k0s`.
        _ if path.starts_with("/to-https/") => {
            let authority = path.trim_start_matches("/to-https/");
            builder
                .status(StatusCode::FOUND)
                .header("location", format!("https://{authority}/k0s"))
                .body(body(b""))
        }
        _ => builder.status(StatusCode::INTERNAL_SERVER_ERROR).body(body(b"")),
    };
    response.expect("valid response")
}

async fn serve() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    Ok::<_, Infallible>(respond(&req))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn config() -> DownloadConfig {
    DownloadConfig {
        stall_timeout: Duration::from_millis(300),
        proxies: autopilot_shell::proxy::Proxies::none(),
        ..DownloadConfig::for_version("v9.9.9+k0s.0")
    }
}

/// The names of the files in `dir`.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Downloads `path` into `<tmp>/k0s` and asserts it failed without leaving anything.
async fn fails(path: &str, sha256: Option<&str>, config: DownloadConfig) -> DownloadError {
    let addr = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s");
    let url = format!("http://{addr}{path}");
    let err = download::download(&url, sha256, Target::File(&dest), config)
        .await
        .expect_err("download should fail");
    assert_eq!(listing(dir.path()), Vec::<String>::new(), "after {err}");
    err
}

#[tokio::test]
async fn a_verified_download_lands_atomically_at_the_destination() {
    let addr = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s");
    let url = format!("http://{addr}/k0s");
    let done = download::download(&url, Some(&sha(PAYLOAD)), Target::File(&dest), config())
        .await
        .expect("download");
    assert_eq!(std::fs::read(&dest).expect("read"), PAYLOAD);
    assert_eq!(done.sha256, sha(PAYLOAD));
    assert_eq!(done.size, PAYLOAD.len() as u64);
    assert_eq!(listing(dir.path()), vec!["k0s".to_string()]);
}

#[tokio::test]
async fn the_user_agent_names_the_k0s_version() {
    let addr = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("ua");
    Downloader::new(config())
        .expect("client")
        .download(&format!("http://{addr}/ua"), None, Target::File(&dest))
        .await
        .expect("download");
    assert_eq!(std::fs::read_to_string(&dest).expect("read"), "k0s/v9.9.9+k0s.0");
}

#[tokio::test]
async fn a_digest_mismatch_names_both_digests_and_leaves_nothing() {
    let wrong = "AB".repeat(32);
    let err = fails("/k0s", Some(&wrong), config()).await;
    let message = err.to_string();
    assert!(matches!(err, DownloadError::DigestMismatch { .. }), "{message}");
    assert!(message.contains(&"ab".repeat(32)), "{message}");
    assert!(message.contains(&sha(PAYLOAD)), "{message}");
}

#[tokio::test]
async fn a_404_is_reported_with_url_and_status() {
    let err = fails("/missing", None, config()).await;
    let message = err.to_string();
    assert!(message.starts_with("GET http://127.0.0.1:"), "{message}");
    assert!(message.ends_with("/missing: 404 Not Found"), "{message}");
}

#[tokio::test]
async fn a_server_that_stops_sending_trips_the_stall_timeout() {
    let err = fails("/stall", None, config()).await;
    assert!(matches!(err, DownloadError::Stalled { .. }), "{err}");
}

#[tokio::test]
async fn the_overall_timeout_bounds_a_download_that_is_not_yet_stalled() {
    let config = DownloadConfig {
        stall_timeout: Duration::from_secs(30),
        overall_timeout: Duration::from_millis(300),
        ..config()
    };
    let err = fails("/stall", None, config).await;
    assert!(matches!(err, DownloadError::TimedOut { .. }), "{err}");
}

#[tokio::test]
async fn a_body_announced_larger_than_the_cap_is_refused() {
    let err = fails("/big", None, DownloadConfig { max_size: 1000, ..config() }).await;
    assert!(matches!(err, DownloadError::TooLarge { limit: 1000, .. }), "{err}");
}

#[tokio::test]
async fn a_chunked_body_growing_past_the_cap_is_cut_off() {
    let err = fails("/big-chunked", None, DownloadConfig { max_size: 1500, ..config() }).await;
    assert!(matches!(err, DownloadError::TooLarge { limit: 1500, .. }), "{err}");
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_is_truncated() {
    // hyper refuses to serve a short body, so this server speaks raw HTTP/1.1.
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request).await;
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", PAYLOAD.len() + 100);
        stream.write_all(head.as_bytes()).await.expect("write head");
        stream.write_all(PAYLOAD).await.expect("write body");
        stream.shutdown().await.expect("close");
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s");
    let err = download::download(
        &format!("http://{addr}/truncated"),
        None,
        Target::File(&dest),
        config(),
    )
    .await
    .expect_err("short body");
    assert!(
        matches!(err, DownloadError::Truncated { received, expected, .. }
            if received == PAYLOAD.len() as u64 && expected == PAYLOAD.len() as u64 + 100),
        "{err}"
    );
    assert!(listing(dir.path()).is_empty());
}

#[tokio::test]
async fn a_redirect_loop_is_detected() {
    let err = fails("/loop", None, config()).await;
    assert!(matches!(err, DownloadError::RedirectLoop { .. }), "{err}");
    assert!(err.to_string().ends_with("/loop: redirect loop"), "{err}");
}

#[tokio::test]
async fn redirects_beyond_the_limit_are_refused() {
    let err = fails("/hop", None, DownloadConfig { max_redirects: 0, ..config() }).await;
    assert!(matches!(err, DownloadError::TooManyRedirects { limit: 0, .. }), "{err}");
}

#[tokio::test]
async fn a_relative_redirect_is_followed() {
    let addr = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s");
    let done = download::download(
        &format!("http://{addr}/hop"),
        Some(&sha(PAYLOAD)),
        Target::File(&dest),
        config(),
    )
    .await
    .expect("download");
    assert_eq!(done.url, format!("http://{addr}/dir/k0s"));
    assert_eq!(std::fs::read(&dest).expect("read"), PAYLOAD);
}

#[tokio::test]
async fn only_http_and_https_are_downloaded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s");
    let err = download::download("ftp://127.0.0.1/k0s", None, Target::File(&dest), config())
        .await
        .expect_err("ftp refused");
    assert_eq!(
        err.to_string(),
        "unsupported url scheme \"ftp\" in ftp://127.0.0.1/k0s (only http and https)"
    );
    assert!(listing(dir.path()).is_empty());
}

#[tokio::test]
async fn an_invalid_expected_digest_fails_before_any_request() {
    let err = fails("/k0s", Some("not-hex"), config()).await;
    assert!(matches!(err, DownloadError::InvalidSha256 { .. }), "{err}");
}

#[tokio::test]
async fn a_bundle_is_named_by_content_disposition() {
    let addr = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let done = download::download(
        &format!("http://{addr}/bundle-cd"),
        Some(&sha(PAYLOAD)),
        Target::Directory(dir.path()),
        config(),
    )
    .await
    .expect("download");
    assert_eq!(done.path, dir.path().join("images v2.tar"));
    assert_eq!(listing(dir.path()), vec!["images v2.tar".to_string()]);
}

#[tokio::test]
async fn a_bundle_without_content_disposition_is_named_by_the_url() {
    let addr = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let done = download::download(
        &format!("http://{addr}/dist/bundle.tar"),
        None,
        Target::Directory(dir.path()),
        config(),
    )
    .await
    .expect("download");
    assert_eq!(done.path, dir.path().join("bundle.tar"));
    assert_eq!(std::fs::read(&done.path).expect("read"), PAYLOAD);
}

/// An HTTPS server on 127.0.0.1 with a fresh self-signed certificate; returns its address
/// and the certificate's PEM.
async fn serve_tls() -> (SocketAddr, String) {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("cert");
    let key = rustls::pki_types::PrivateKeyDer::try_from(signing_key.serialize_der())
        .expect("private key");
    let tls = rustls::ServerConfig::builder_with_provider(
        rustls::crypto::ring::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else { return };
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    Ok::<_, Infallible>(respond(&req))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, cert.pem())
}

#[tokio::test]
async fn https_works_with_a_trusted_root_and_fails_without_it() {
    let (addr, pem) = serve_tls().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("https://{addr}/k0s");

    let untrusted = dir.path().join("untrusted");
    let err = download::download(&url, None, Target::File(&untrusted), config())
        .await
        .expect_err("unknown issuer");
    assert!(matches!(err, DownloadError::Request { .. }), "{err}");
    assert!(!untrusted.exists());

    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, pem).expect("write ca");
    let dest = dir.path().join("k0s");
    let config = DownloadConfig { ca_file: Some(ca), ..config() };
    download::download(&url, Some(&sha(PAYLOAD)), Target::File(&dest), config)
        .await
        .expect("download over https");
    assert_eq!(std::fs::read(&dest).expect("read"), PAYLOAD);
}

#[tokio::test]
async fn a_redirect_from_https_to_http_is_refused_naming_both_urls() {
    let (tls_addr, pem) = serve_tls().await;
    let plain_addr = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, pem).expect("write ca");
    let config = DownloadConfig { ca_file: Some(ca), ..config() };
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let dest = work.join("k0s");

    // The plain URL itself serves the payload: only the redirect is refused.
    download::download(
        &format!("http://{plain_addr}/k0s"),
        Some(&sha(PAYLOAD)),
        Target::File(&dest),
        config.clone(),
    )
    .await
    .expect("the http URL works on its own");
    std::fs::remove_file(&dest).expect("remove");

    let from = format!("https://{tls_addr}/to-http/{plain_addr}");
    let to = format!("http://{plain_addr}/k0s");
    let err = download::download(&from, Some(&sha(PAYLOAD)), Target::File(&dest), config)
        .await
        .expect_err("https -> http refused");
    assert!(
        matches!(&err, DownloadError::InsecureRedirect { from: f, to: t } if *f == from && *t == to),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("GET {from}: refusing the redirect to {to}: it leaves https for plain http")
    );
    assert_eq!(err.metric_label(), "insecure_redirect");
    assert!(listing(&work).is_empty(), "nothing left behind");
}

#[tokio::test]
async fn a_redirect_from_http_to_https_is_followed() {
    let (tls_addr, pem) = serve_tls().await;
    let plain_addr = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, pem).expect("write ca");
    let dest = dir.path().join("k0s");
    let config = DownloadConfig { ca_file: Some(ca), ..config() };
    let done = download::download(
        &format!("http://{plain_addr}/to-https/{tls_addr}"),
        Some(&sha(PAYLOAD)),
        Target::File(&dest),
        config,
    )
    .await
    .expect("http -> https is an upgrade");
    assert_eq!(done.url, format!("https://{tls_addr}/k0s"));
    assert_eq!(std::fs::read(&dest).expect("read"), PAYLOAD);
}
