//! Interrupted downloads continue from the bytes on disk (`Range` + `If-Range`), hashing
//! the kept prefix again; a server that ignores `Range` sends it whole; the partial file is
//! never executable; `rate_limit` holds the pace. Against a raw HTTP/1.1 server on
//! 127.0.0.1 that can cut its answers short.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use autopilot_shell::proxy::Proxies;
use autopilot_signal::download::{DownloadConfig, DownloadError, Downloader, Target};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const ETAG: &str = "\"v2-abc\"";

/// A request as the server saw it, and how many body bytes it sent back.
#[derive(Clone, Debug, Default)]
struct Seen {
    range: Option<String>,
    if_range: Option<String>,
    sent: usize,
}

/// How the server answers.
#[derive(Clone)]
struct Script {
    body: Arc<Vec<u8>>,
    /// The n-th answer stops (the connection is closed) once the body reached this offset.
    cuts: Vec<usize>,
    /// The n-th answer sends this much and then goes silent (the client's stall timeout).
    stalls: Vec<usize>,
    /// Whether `Range` is honoured (with a matching `If-Range`).
    ranges: bool,
    etag: Option<&'static str>,
}

struct Server {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    async fn start(script: Script) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else { return };
                let script = script.clone();
                let log = log.clone();
                tokio::spawn(answer(socket, script, log));
            }
        });
        Self { base, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    fn sent(&self) -> usize {
        self.seen().iter().map(|s| s.sent).sum()
    }
}

async fn answer(mut socket: tokio::net::TcpStream, script: Script, log: Arc<Mutex<Vec<Seen>>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let seen = Seen { range: header("range"), if_range: header("if-range"), sent: 0 };
    let index = {
        let mut log = log.lock().expect("lock");
        log.push(seen.clone());
        log.len() - 1
    };
    let len = script.body.len();
    let from = match (&seen.range, &seen.if_range) {
        (Some(range), Some(if_range))
            if script.ranges && Some(if_range.as_str()) == script.etag =>
        {
            range.trim_start_matches("bytes=").trim_end_matches('-').parse::<usize>().ok()
        }
        _ => None,
    };
    let etag = script.etag.map(|e| format!("ETag: {e}\r\n")).unwrap_or_default();
    let head = match from {
        Some(from) => format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {from}-{}/{len}\r\nContent-Length: {}\r\n{etag}Connection: close\r\n\r\n",
            len - 1,
            len - from
        ),
        None => {
            format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n{etag}Connection: close\r\n\r\n")
        }
    };
    let from = from.unwrap_or(0);
    let stall = script.stalls.get(index).copied().filter(|s| *s > from);
    let end =
        script.cuts.get(index).copied().filter(|c| *c > from).or(stall).unwrap_or(len).min(len);
    if socket.write_all(head.as_bytes()).await.is_err()
        || socket.write_all(&script.body[from..end]).await.is_err()
    {
        return;
    }
    let _ = socket.flush().await;
    log.lock().expect("lock")[index].sent = end - from;
    if stall.is_some() {
        // Silent until the client hangs up.
        let _ = socket.read(&mut buf).await;
    }
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn config() -> DownloadConfig {
    DownloadConfig {
        stall_timeout: Duration::from_millis(500),
        proxies: Proxies::none(),
        ..DownloadConfig::for_version("v9.9.9+k0s.0")
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_download_cut_twice_fetches_only_the_rest_each_time() {
    let body = payload(1 << 20);
    let len = body.len();
    let server = Server::start(Script {
        body: Arc::new(body.clone()),
        cuts: vec![len / 2, len * 3 / 4],
        stalls: vec![],
        ranges: true,
        etag: Some(ETAG),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s.tmp");
    let done = Downloader::new(config())
        .expect("downloader")
        .download(&format!("{}/k0s", server.base), Some(&sha(&body)), Target::File(&dest))
        .await
        .expect("the download completes after two cuts");

    assert_eq!(done.sha256, sha(&body));
    assert_eq!(std::fs::read(&dest).expect("read"), body);
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0].range, None);
    assert_eq!(seen[1].range.as_deref(), Some(format!("bytes={}-", len / 2).as_str()));
    assert_eq!(seen[2].range.as_deref(), Some(format!("bytes={}-", len * 3 / 4).as_str()));
    assert!(seen[1..].iter().all(|s| s.if_range.as_deref() == Some(ETAG)), "{seen:?}");
    assert_eq!(server.sent(), len, "every byte was sent once");
    assert_eq!(listing(dir.path()), ["k0s.tmp"], "no partial file or record is left");
}

#[tokio::test]
async fn a_server_that_ignores_range_sends_it_whole_and_it_is_written_from_zero() {
    let body = payload(256 * 1024);
    let len = body.len();
    let server = Server::start(Script {
        body: Arc::new(body.clone()),
        cuts: vec![len / 2],
        stalls: vec![],
        ranges: false,
        etag: Some(ETAG),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s.tmp");
    let done = Downloader::new(config())
        .expect("downloader")
        .download(&format!("{}/k0s", server.base), Some(&sha(&body)), Target::File(&dest))
        .await
        .expect("the second, whole answer completes it");
    assert_eq!(done.sha256, sha(&body));
    assert_eq!(std::fs::read(&dest).expect("read"), body);
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[1].range.is_some(), "the second request asked for the rest");
    assert_eq!(server.sent(), len / 2 + len, "the rest was not available: all of it again");
}

#[tokio::test]
async fn a_download_stopped_midway_is_kept_never_executable_and_continued_by_another_process() {
    let body = payload(512 * 1024);
    let len = body.len();
    let server = Server::start(Script {
        body: Arc::new(body.clone()),
        cuts: vec![],
        stalls: vec![len / 2],
        ranges: true,
        etag: Some(ETAG),
    })
    .await;
    let url = format!("{}/k0s", server.base);
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s.tmp");

    // The first process gives up (stall) with half of it on disk.
    let err = Downloader::new(config())
        .expect("downloader")
        .download(&url, Some(&sha(&body)), Target::File(&dest))
        .await
        .expect_err("the server stalls");
    assert!(matches!(err, DownloadError::Stalled { .. }), "{err}");
    assert_eq!(listing(dir.path()), [".k0s.tmp.partial", ".k0s.tmp.partial.json"]);
    let partial = dir.path().join(".k0s.tmp.partial");
    assert_eq!(std::fs::metadata(&partial).expect("partial").len(), (len / 2) as u64);
    assert_eq!(std::fs::metadata(&partial).expect("partial").permissions().mode() & 0o777, 0o600);
    let record = std::fs::read_to_string(dir.path().join(".k0s.tmp.partial.json")).expect("record");
    assert!(record.contains(&url) && record.contains("v2-abc"), "{record}");

    // Another downloader (a restarted process) continues from there.
    let done = Downloader::new(config())
        .expect("downloader")
        .download(&url, Some(&sha(&body)), Target::File(&dest))
        .await
        .expect("the second process completes it");
    assert_eq!(done.sha256, sha(&body));
    let seen = server.seen();
    assert_eq!(seen[1].range.as_deref(), Some(format!("bytes={}-", len / 2).as_str()));
    assert_eq!(server.sent(), len, "only the rest was fetched");
    assert_eq!(listing(dir.path()), ["k0s.tmp"]);
    assert_eq!(std::fs::metadata(&dest).expect("dest").permissions().mode() & 0o111, 0);
}

#[tokio::test]
async fn a_corrupted_kept_prefix_is_caught_by_hashing_it_again_and_fetched_whole() {
    let body = payload(256 * 1024);
    let len = body.len();
    let server = Server::start(Script {
        body: Arc::new(body.clone()),
        cuts: vec![],
        stalls: vec![len / 2],
        ranges: true,
        etag: Some(ETAG),
    })
    .await;
    let url = format!("{}/k0s", server.base);
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s.tmp");
    let downloader = Downloader::new(config()).expect("downloader");
    downloader
        .download(&url, Some(&sha(&body)), Target::File(&dest))
        .await
        .expect_err("the server stalls");
    // The kept bytes go bad on disk (a power loss, a bit flip).
    let partial = dir.path().join(".k0s.tmp.partial");
    let mut kept = std::fs::read(&partial).expect("partial");
    kept[10] ^= 0xff;
    std::fs::write(&partial, kept).expect("corrupt");

    let done = downloader
        .download(&url, Some(&sha(&body)), Target::File(&dest))
        .await
        .expect("fetched whole after the continued one failed its digest");
    assert_eq!(std::fs::read(&dest).expect("read"), body);
    assert_eq!(done.sha256, sha(&body));
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[1].range.is_some() && seen[2].range.is_none(), "{seen:?}");
}

#[tokio::test]
async fn a_wrong_digest_removes_the_partial_and_a_server_without_validator_keeps_nothing() {
    let body = payload(64 * 1024);
    let server = Server::start(Script {
        body: Arc::new(body.clone()),
        cuts: vec![],
        stalls: vec![],
        ranges: true,
        etag: Some(ETAG),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s.tmp");
    let err = Downloader::new(config())
        .expect("downloader")
        .download(&format!("{}/k0s", server.base), Some(&sha(b"other")), Target::File(&dest))
        .await
        .expect_err("wrong digest");
    assert!(matches!(err, DownloadError::DigestMismatch { .. }), "{err}");
    assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));

    let unvalidated = Server::start(Script {
        body: Arc::new(body.clone()),
        cuts: vec![],
        stalls: vec![body.len() / 2],
        ranges: true,
        etag: None,
    })
    .await;
    let err = Downloader::new(config())
        .expect("downloader")
        .download(&format!("{}/k0s", unvalidated.base), Some(&sha(&body)), Target::File(&dest))
        .await
        .expect_err("stalls");
    assert!(matches!(err, DownloadError::Stalled { .. }), "{err}");
    assert!(listing(dir.path()).is_empty(), "nothing to continue from: {:?}", listing(dir.path()));
}

#[tokio::test]
async fn a_rate_limited_download_takes_its_size_over_the_rate() {
    let body = payload(512 * 1024);
    let server = Server::start(Script {
        body: Arc::new(body.clone()),
        cuts: vec![],
        stalls: vec![],
        ranges: true,
        etag: Some(ETAG),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("k0s.tmp");
    let config = DownloadConfig { rate_limit: Some(1 << 20), ..config() };
    let started = Instant::now();
    Downloader::new(config)
        .expect("downloader")
        .download(&format!("{}/k0s", server.base), Some(&sha(&body)), Target::File(&dest))
        .await
        .expect("download");
    let took = started.elapsed();
    // 512 KiB at 1 MiB/s: 0.5 s, less the 100 ms the first bytes may run ahead.
    assert!(took >= Duration::from_millis(390), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}
