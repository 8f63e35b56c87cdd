//! A tiny loopback HTTP(S) server for update payloads (a v2 k0s binary, a bundle), as the
//! update server of a real installation would serve them — and as a broken one would:
//! [`Serve`] chooses between a good answer, an error status, a redirect, a body that stalls
//! and a body held back until the test releases it. [`FileServer::start_tls`] serves over
//! https with a fresh self-signed certificate for 127.0.0.1 ([`FileServer::ca_pem`] is what
//! a client must trust, e.g. a worker's `--download-ca-file`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a [`FileServer`] answers to every request (any path, any method).
#[derive(Clone, Debug)]
pub enum Serve {
    /// `200 OK` with this body.
    Body(Vec<u8>),
    /// This status (e.g. 404) with a short text body naming it.
    Status(u16),
    /// `302 Found` with this URL as `Location`.
    Redirect(String),
    /// `200 OK` announcing the whole body's `Content-Length`, then the first `after` bytes,
    /// then nothing more: the connection stays open and silent until the client gives up
    /// (or the server is dropped).
    Stall {
        /// The body the headers announce.
        body: Vec<u8>,
        /// How many of its bytes are sent before the stall.
        after: usize,
    },
    /// Like [`Serve::Stall`], but the rest of the body follows once
    /// [`FileServer::release`] is called; requests arriving after that get the whole body
    /// at once.
    HoldUntilReleased {
        /// The body the headers announce.
        body: Vec<u8>,
        /// How many of its bytes are sent before holding.
        after: usize,
    },
    /// `200 OK` with an `ETag`, or `206 Partial Content` for a `Range: bytes=<n>-` whose
    /// `If-Range` is that ETag (a static file server's answers); the n-th answer's
    /// connection is cut once the body reached offset `cuts[n]` (if that is past where the
    /// answer starts). With `hold`, a cut answer instead goes silent there (counted by
    /// [`FileServer::wait_held`]) until the client hangs up (e.g. it is killed).
    Resumable {
        /// The payload.
        body: Vec<u8>,
        /// Where the first, second, … answers are cut off.
        cuts: Vec<usize>,
        /// Hold a cut answer open and silent instead of closing it.
        hold: bool,
    },
}

/// The `ETag` of a [`Serve::Resumable`] body.
pub const RESUMABLE_ETAG: &str = "\"k0s-payload-1\"";

/// What the server has done so far, shared with its connections.
#[derive(Debug)]
struct Shared {
    serve: Serve,
    /// Requests answered (headers read).
    requests: AtomicUsize,
    /// Responses that sent their first part and now stall or hold; bumped on every change.
    held: watch::Sender<usize>,
    /// Whether held responses may go on.
    released: watch::Sender<bool>,
    /// Body bytes sent, over all answers.
    body_bytes: std::sync::atomic::AtomicU64,
    /// The `Range` header of each request, in order.
    ranges: std::sync::Mutex<Vec<Option<String>>>,
}

/// Serves one answer at every path over HTTP/1.1 on 127.0.0.1 (plain, or TLS with
/// [`FileServer::start_tls`]); stops when dropped (which also closes stalled and held
/// connections).
#[derive(Debug)]
pub struct FileServer {
    base: String,
    /// The self-signed certificate (PEM) of a TLS server.
    ca_pem: Option<String>,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    connections: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

impl FileServer {
    /// Start serving `body` with `200 OK`.
    pub async fn start(body: Vec<u8>) -> anyhow::Result<Self> {
        Self::start_with(Serve::Body(body)).await
    }

    /// Start answering every request as `serve` says.
    pub async fn start_with(serve: Serve) -> anyhow::Result<Self> {
        Self::start_on(serve, None).await
    }

    /// Start answering every request as `serve` says, over https with a fresh self-signed
    /// certificate for `127.0.0.1` (see [`FileServer::ca_pem`]).
    pub async fn start_tls(serve: Serve) -> anyhow::Result<Self> {
        let TlsIdentity { acceptor, ca_pem } = TlsIdentity::self_signed()?;
        Self::start_on(serve, Some(Tls { acceptor, ca_pem })).await
    }

    async fn start_on(serve: Serve, tls: Option<Tls>) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base = format!("{scheme}://{}", listener.local_addr()?);
        // Nodes in a network namespace reach it there on the same address.
        crate::net::announce_loopback_service(listener.local_addr()?);
        let ca_pem = tls.as_ref().map(|tls| tls.ca_pem.clone());
        let acceptor = tls.map(|tls| tls.acceptor);
        let shared = Arc::new(Shared {
            serve,
            requests: AtomicUsize::new(0),
            held: watch::Sender::new(0),
            released: watch::Sender::new(false),
            body_bytes: std::sync::atomic::AtomicU64::new(0),
            ranges: std::sync::Mutex::default(),
        });
        let connections: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let task = tokio::spawn({
            let shared = shared.clone();
            let connections = connections.clone();
            async move {
                loop {
                    let Ok((socket, _)) = listener.accept().await else { return };
                    let shared = shared.clone();
                    let acceptor = acceptor.clone();
                    let connection = tokio::spawn(async move {
                        match acceptor {
                            None => answer(socket, shared).await,
                            Some(acceptor) => {
                                // A client that does not trust the certificate hangs up here.
                                if let Ok(stream) = acceptor.accept(socket).await {
                                    answer(stream, shared).await;
                                }
                            }
                        }
                    });
                    let mut all = connections.lock().unwrap_or_else(|p| p.into_inner());
                    all.retain(|c| !c.is_finished());
                    all.push(connection);
                }
            }
        });
        Ok(Self { base, ca_pem, shared, task, connections })
    }

    /// `http://127.0.0.1:<port>`, or `https://…` for a TLS server (any path gets the same
    /// answer).
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The PEM certificate a client must trust to reach a TLS server (`None` for plain
    /// http).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// How many requests the server has answered (started answering) so far.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// How many body bytes the server has sent, over all its answers (what a client
    /// received, unless a connection was cut with bytes in flight).
    pub fn body_bytes_sent(&self) -> u64 {
        self.shared.body_bytes.load(Ordering::SeqCst)
    }

    /// The `Range` header of every request so far, in order (`None`: a plain GET).
    pub fn ranges(&self) -> Vec<Option<String>> {
        self.shared.ranges.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until at least `count` responses have sent their first part and stalled or
    /// are held ([`Serve::Stall`], [`Serve::HoldUntilReleased`]); fails after `timeout`.
    pub async fn wait_held(&self, count: usize, timeout: Duration) -> anyhow::Result<()> {
        let mut held = self.shared.held.subscribe();
        let outcome = tokio::time::timeout(timeout, held.wait_for(|n| *n >= count))
            .await
            .map(|r| r.map(|_| ()));
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => bail!("the file server stopped"),
            Err(_) => bail!(
                "timed out after {timeout:?} waiting for {count} held responses ({} so far, {} requests)",
                *self.shared.held.borrow(),
                self.requests()
            ),
        }
    }

    /// Lets held responses ([`Serve::HoldUntilReleased`]) send the rest of their body, now
    /// and for every later request.
    pub fn release(&self) {
        self.shared.released.send_replace(true);
    }
}

/// A test server's TLS identity: a fresh self-signed certificate for `127.0.0.1`, the
/// acceptor serving it, and the certificate in PEM (what a client must trust).
#[derive(Clone)]
pub struct TlsIdentity {
    /// Wraps an accepted connection in TLS.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The certificate, PEM-encoded.
    pub ca_pem: String,
}

impl TlsIdentity {
    /// A new self-signed identity for `127.0.0.1`.
    pub fn self_signed() -> anyhow::Result<Self> {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])
                .context("generating a test server's certificate")?;
        let key = rustls::pki_types::PrivateKeyDer::try_from(signing_key.serialize_der())
            .map_err(|e| anyhow::anyhow!("a test server's private key: {e}"))?;
        let config = rustls::ServerConfig::builder_with_provider(
            rustls::crypto::ring::default_provider().into(),
        )
        .with_safe_default_protocol_versions()
        .context("tls protocol versions")?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .context("a test server's tls configuration")?;
        Ok(Self { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca_pem: cert.pem() })
    }
}

/// The TLS side of a [`FileServer::start_tls`] server.
struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    ca_pem: String,
}

/// Reads one request's headers and answers it as the server's [`Serve`] says.
async fn answer(mut socket: impl AsyncRead + AsyncWrite + Unpin, shared: Arc<Shared>) {
    let Some(request) = read_head(&mut socket).await else { return };
    let index = shared.requests.fetch_add(1, Ordering::SeqCst);
    let head_text = String::from_utf8_lossy(&request).into_owned();
    let header = |name: &str| header_of(&head_text, name);
    shared.ranges.lock().unwrap_or_else(|p| p.into_inner()).push(header("range"));
    let shut_down = match &shared.serve {
        Serve::Body(body) => {
            let _ = socket.write_all(ok_head(body.len()).as_bytes()).await;
            if socket.write_all(body).await.is_ok() {
                shared.sent(body.len());
            }
            true
        }
        Serve::Resumable { body, cuts, hold } => {
            let from = resumable_start(header("range"), header("if-range"), body.len());
            let cut = cuts.get(index).copied();
            answer_resumable(&mut socket, &shared, body, from, cut, *hold).await
        }
        Serve::Status(code) => {
            let (head, body) = status_answer(*code);
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
            true
        }
        Serve::Redirect(location) => {
            let head = format!(
                "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = socket.write_all(head.as_bytes()).await;
            true
        }
        Serve::Stall { body, after } => {
            stall(&mut socket, &shared, body, *after).await;
            false
        }
        Serve::HoldUntilReleased { body, after } => {
            hold_until_released(&mut socket, &shared, body, *after).await
        }
    };
    if shut_down {
        let _ = socket.shutdown().await;
    }
}

/// Reads a request up to the end of its headers; `None` if the client hung up before.
async fn read_head(socket: &mut (impl AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    Some(request)
}

/// Waits until the client hangs up (or sends something, or the server is dropped).
async fn until_hung_up(socket: &mut (impl AsyncRead + Unpin)) {
    let mut buf = [0u8; 1024];
    let _ = socket.read(&mut buf).await;
}

/// The value of the request header `name` (compared without regard to case).
fn header_of(head_text: &str, name: &str) -> Option<String> {
    head_text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
    })
}

/// The head of a `200 OK` with a body of `len` bytes.
fn ok_head(len: usize) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
    )
}

/// The head and the short text body of an answer with status `code`.
fn status_answer(code: u16) -> (String, String) {
    let reason = http::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Status");
    let body = format!("{code} {reason}\n");
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n",
        body.len()
    );
    (head, body)
}

/// Where a [`Serve::Resumable`] answer starts: the offset of a `Range: bytes=<n>-` within
/// the body whose `If-Range` is [`RESUMABLE_ETAG`], or `None` (the whole body).
fn resumable_start(range: Option<String>, if_range: Option<String>, len: usize) -> Option<usize> {
    match (range, if_range) {
        (Some(range), Some(validator)) if validator == RESUMABLE_ETAG => range
            .strip_prefix("bytes=")
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n < len),
        _ => None,
    }
}

/// The head of a [`Serve::Resumable`] answer: `206 Partial Content` from `from`, or `200
/// OK`, with the ETag.
fn resumable_head(from: Option<usize>, len: usize) -> String {
    match from {
        Some(from) => format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {from}-{}/{len}\r\nContent-Length: {}\r\nETag: {RESUMABLE_ETAG}\r\nConnection: close\r\n\r\n",
            len - 1,
            len - from
        ),
        None => format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nETag: {RESUMABLE_ETAG}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
        ),
    }
}

/// A [`Serve::Resumable`] answer from `from`, cut at `cut` (if past `from`). Returns whether
/// the connection is to be shut down (a cut one is not: it ends short of the announced
/// length or, held, stays silent until the client hangs up).
async fn answer_resumable(
    socket: &mut (impl AsyncRead + AsyncWrite + Unpin),
    shared: &Shared,
    body: &[u8],
    from: Option<usize>,
    cut: Option<usize>,
    hold: bool,
) -> bool {
    let len = body.len();
    let head = resumable_head(from, len);
    let from = from.unwrap_or(0);
    let end = cut.filter(|c| *c > from).unwrap_or(len).min(len);
    if socket.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    if socket.write_all(&body[from..end]).await.is_ok() {
        shared.sent(end - from);
    }
    if end < len {
        // Cut: the connection ends short of the announced length (or, held, stays
        // silent until the client hangs up).
        let _ = socket.flush().await;
        if hold {
            shared.held.send_modify(|n| *n += 1);
            until_hung_up(socket).await;
        }
        return false;
    }
    true
}

/// A [`Serve::Stall`] answer: the whole body announced, its first `after` bytes sent, then
/// silence until the client hangs up (or the server is dropped).
async fn stall(
    socket: &mut (impl AsyncRead + AsyncWrite + Unpin),
    shared: &Shared,
    body: &[u8],
    after: usize,
) {
    let (first, _) = body.split_at(after.min(body.len()));
    if socket.write_all(ok_head(body.len()).as_bytes()).await.is_err()
        || socket.write_all(first).await.is_err()
        || socket.flush().await.is_err()
    {
        return;
    }
    shared.held.send_modify(|n| *n += 1);
    // Silent until the client hangs up (or the server is dropped).
    until_hung_up(socket).await;
}

/// A [`Serve::HoldUntilReleased`] answer: the first `after` bytes, then the rest once
/// released (the whole body at once if it already was). Returns whether the connection is
/// to be shut down (not when the client hung up or a write failed).
async fn hold_until_released(
    socket: &mut (impl AsyncRead + AsyncWrite + Unpin),
    shared: &Shared,
    body: &[u8],
    after: usize,
) -> bool {
    if socket.write_all(ok_head(body.len()).as_bytes()).await.is_err() {
        return false;
    }
    let mut released = shared.released.subscribe();
    let (first, rest) = body.split_at(after.min(body.len()));
    if !*released.borrow_and_update() {
        if socket.write_all(first).await.is_err() || socket.flush().await.is_err() {
            return false;
        }
        shared.held.send_modify(|n| *n += 1);
        tokio::select! {
            _ = released.wait_for(|r| *r) => {}
            // The client hung up (e.g. it was killed) while held.
            () = until_hung_up(socket) => return false,
        }
        let _ = socket.write_all(rest).await;
    } else {
        let _ = socket.write_all(body).await;
    }
    true
}

impl Shared {
    /// Counts `n` body bytes sent.
    fn sent(&self, n: usize) {
        self.body_bytes.fetch_add(n as u64, Ordering::SeqCst);
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.task.abort();
        for connection in self.connections.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            connection.abort();
        }
    }
}
