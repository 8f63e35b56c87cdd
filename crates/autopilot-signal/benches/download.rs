//! Download + verify throughput on loopback (`cargo xtask bench download`, or
//! `cargo bench -p autopilot-signal --bench download -- [MiB] [runs]`).
//!
//! Serves a pseudo-random payload (default 200 MiB) from 127.0.0.1 and measures, per run,
//! the agent's [`Downloader`] writing it next to a target file — streaming, hashing while it
//! writes, fsync, digest check, rename — against the hash-bound limit (`openssl dgst
//! -sha256` of the same bytes from the page cache: no download can verify faster) and the
//! shell baseline `curl -o f && sync f && sha256sum f` (same payload, same server, same
//! disk). Then the resume case: a download whose connection is cut at 50 % (the agent
//! continues with `Range` + `If-Range`) against a clean one. Prints per-run times and the
//! median of each, in MiB/s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use autopilot_signal::download::{DownloadConfig, Downloader, Target};
use sha2::Digest as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn payload(mib: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut out = Vec::with_capacity(mib << 20);
    while out.len() < mib << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(mib << 20);
    out
}

/// The payload's ETag (the server honours `Range` with a matching `If-Range`).
const ETAG: &str = "\"bench\"";

/// Serves `body` at any path; a path ending in `/cut` answers a plain GET with half the body
/// and then closes the connection.
async fn serve(body: Arc<Vec<u8>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let base = format!("http://{}", listener.local_addr().expect("local addr"));
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&request).into_owned();
                let cut = head.lines().next().is_some_and(|l| l.contains("/cut "));
                let from = head
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("Range: bytes=").or(l.strip_prefix("range: bytes="))
                    })
                    .and_then(|r| r.trim().trim_end_matches('-').parse::<usize>().ok())
                    .filter(|_| {
                        head.to_ascii_lowercase()
                            .contains(&format!("if-range: {}", ETAG.to_ascii_lowercase()))
                    });
                let len = body.len();
                let (status, end) = match from {
                    Some(from) => (
                        format!(
                            "206 Partial Content\r\nContent-Range: bytes {from}-{}/{len}",
                            len - 1
                        ),
                        len,
                    ),
                    None if cut => ("200 OK".to_owned(), len / 2),
                    None => ("200 OK".to_owned(), len),
                };
                let from = from.unwrap_or(0);
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nETag: {ETAG}\r\nConnection: close\r\n\r\n",
                    len - from
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body[from..end]).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    base
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn mib_per_s(mib: usize, time: Duration) -> f64 {
    mib as f64 / time.as_secs_f64()
}

/// The agent's downloader as the bench times it: on its runtime, into `dir`, checked
/// against `sha`.
struct Agent<'a> {
    /// The agent's single-thread runtime.
    runtime: &'a tokio::runtime::Runtime,
    /// The downloader under test.
    downloader: &'a Downloader,
    /// The scratch directory the target file is written in.
    dir: &'a std::path::Path,
    /// The payload's sha256.
    sha: &'a str,
}

impl Agent<'_> {
    /// Download `url` into the target file once, check its digest and remove the file;
    /// returns the time taken.
    fn timed_download(&self, url: &str, expect: &str) -> Duration {
        let target = self.dir.join("k0s.tmp");
        let started = Instant::now();
        let done = self
            .runtime
            .block_on(self.downloader.download(url, Some(self.sha), Target::File(&target)))
            .expect(expect);
        let took = started.elapsed();
        assert_eq!(done.sha256, self.sha);
        std::fs::remove_file(&target).expect("remove");
        took
    }

    /// `runs` clean downloads of `url`, each printed.
    fn clean_runs(&self, url: &str, mib: usize, runs: usize) -> Vec<Duration> {
        let mut ours = Vec::new();
        for run in 0..runs {
            let took = self.timed_download(url, "download succeeds");
            println!(
                "  agent run {run}: {:.3} s ({:.0} MiB/s)",
                took.as_secs_f64(),
                mib_per_s(mib, took)
            );
            ours.push(took);
        }
        ours
    }

    /// The resume case: `runs` downloads of `cut_url` (cut at 50 %, continued at once from
    /// the bytes on disk), each printed.
    fn cut_runs(&self, cut_url: &str, runs: usize) -> Vec<Duration> {
        let mut resumed = Vec::new();
        for run in 0..runs {
            let took = self.timed_download(cut_url, "the cut download completes");
            println!("  agent run {run}, cut at 50 %: {:.3} s", took.as_secs_f64());
            resumed.push(took);
        }
        resumed
    }
}

fn main() {
    let numbers: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let mib = numbers.first().copied().unwrap_or(200);
    let runs = numbers.get(1).copied().unwrap_or(5).max(1);
    // The server has a runtime of its own (it stands for a remote host); the agent runs on
    // one thread, as in the k0s process (`k0s::runtime`).
    let server = tokio::runtime::Runtime::new().expect("server runtime");
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("agent runtime");
    let body = Arc::new(payload(mib));
    let sha = hex::encode(sha2::Sha256::digest(body.as_slice()));
    let base = server.block_on(serve(body));
    let url = format!("{base}/k0s");
    let dir = tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| ".".into()))
        .expect("scratch dir");
    let config = DownloadConfig {
        max_size: (mib as u64 + 1) << 20,
        proxies: autopilot_shell::proxy::Proxies::none(),
        ..DownloadConfig::default()
    };
    let downloader = Downloader::new(config).expect("downloader");
    println!(
        "download + verify of {mib} MiB over loopback into {}, {runs} runs",
        dir.path().display()
    );

    let agent = Agent { runtime: &runtime, downloader: &downloader, dir: dir.path(), sha: &sha };
    let ours = agent.clean_runs(&url, mib, runs);

    let openssl = openssl_runs(&body_file(dir.path(), &runtime, &url), &sha, mib, runs);
    let shell = curl_runs(dir.path(), &url, &sha, mib, runs);

    // The resume case: cut at 50 %, continued at once from the bytes on disk.
    let resumed = agent.cut_runs(&format!("{base}/cut"), runs);

    let ours = median(ours);
    println!("agent:  median {:.3} s = {:.0} MiB/s", ours.as_secs_f64(), mib_per_s(mib, ours));
    if !openssl.is_empty() {
        let openssl = median(openssl);
        println!(
            "openssl dgst -sha256 (hash only, page cache):  median {:.3} s = {:.0} MiB/s; the agent reaches {:.0} % of it",
            openssl.as_secs_f64(),
            mib_per_s(mib, openssl),
            100.0 * openssl.as_secs_f64() / ours.as_secs_f64()
        );
    }
    breakdown(&runtime, dir.path(), &base, mib, runs, ours);
    let resumed = median(resumed);
    println!(
        "agent, connection cut at 50 % and continued:  median {:.3} s ({:.2}x the clean download)",
        resumed.as_secs_f64(),
        resumed.as_secs_f64() / ours.as_secs_f64()
    );
    if !shell.is_empty() {
        let shell = median(shell);
        println!(
            "curl -o f && sync f && sha256sum f:  median {:.3} s = {:.0} MiB/s ({:.2}x the agent's time)",
            shell.as_secs_f64(),
            mib_per_s(mib, shell),
            shell.as_secs_f64() / ours.as_secs_f64()
        );
    }
}

/// The parts of a download on their own, each the median of `runs`: receiving the body
/// (raw socket reads, discarded), writing it to a file, the fsync, and hashing it in
/// memory; the agent overlaps all of them (receiving, writing and hashing on threads of
/// their own, the disk's writeback on a fourth as the file grows), so its floor is the
/// slowest of receiving, hashing, and writing followed by its fsync.
fn breakdown(
    runtime: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    base: &str,
    mib: usize,
    runs: usize,
    agent: Duration,
) {
    let body = payload(mib);
    let (mut receive, mut write, mut sync, mut hash) = (vec![], vec![], vec![], vec![]);
    let addr = base.trim_start_matches("http://").to_owned();
    for _ in 0..runs {
        let started = Instant::now();
        let got = runtime.block_on(async {
            let mut socket = tokio::net::TcpStream::connect(&addr).await.expect("connect");
            socket.write_all(b"GET /k0s HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("request");
            let mut buf = vec![0u8; 1 << 20];
            let mut total = 0usize;
            loop {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break total,
                    Ok(n) => total += n,
                }
            }
        });
        receive.push(started.elapsed());
        assert!(got >= body.len(), "received the body");

        let path = dir.join("write-test");
        let started = Instant::now();
        let mut file = std::fs::File::create(&path).expect("create");
        for chunk in body.chunks(256 * 1024) {
            std::io::Write::write_all(&mut file, chunk).expect("write");
        }
        write.push(started.elapsed());
        let started = Instant::now();
        file.sync_all().expect("sync");
        sync.push(started.elapsed());
        drop(file);
        std::fs::remove_file(&path).expect("remove");

        let started = Instant::now();
        let digest = sha2::Sha256::digest(&body);
        hash.push(started.elapsed());
        assert_eq!(digest.len(), 32);
    }
    let (receive, write, sync, hash) = (median(receive), median(write), median(sync), median(hash));
    let floor = receive.max(write + sync).max(hash);
    println!(
        "breakdown (each alone, median): receive {:.3} s, write {:.3} s, fsync {:.3} s, sha256 {:.3} s; \
         overlapped floor = max(receive, write + fsync, sha256) = {:.3} s; the agent takes {:.2}x the floor",
        receive.as_secs_f64(),
        write.as_secs_f64(),
        sync.as_secs_f64(),
        hash.as_secs_f64(),
        floor.as_secs_f64(),
        agent.as_secs_f64() / floor.as_secs_f64()
    );
}

/// Writes the payload (fetched from `url`) to `dir/payload` for the hash-only baseline.
fn body_file(
    dir: &std::path::Path,
    runtime: &tokio::runtime::Runtime,
    url: &str,
) -> std::path::PathBuf {
    let config = DownloadConfig {
        max_size: u64::MAX,
        proxies: autopilot_shell::proxy::Proxies::none(),
        ..DownloadConfig::default()
    };
    let target = dir.join("payload");
    runtime
        .block_on(Downloader::new(config).expect("downloader").download(
            url,
            None,
            Target::File(&target),
        ))
        .expect("payload");
    target
}

/// `runs` of `openssl dgst -sha256 <file>` (the file is in the page cache: hashing only);
/// none when openssl cannot run here.
fn openssl_runs(file: &std::path::Path, sha: &str, mib: usize, runs: usize) -> Vec<Duration> {
    let mut times = Vec::new();
    for run in 0..runs {
        let started = Instant::now();
        let out =
            std::process::Command::new("openssl").arg("dgst").arg("-sha256").arg(file).output();
        let took = started.elapsed();
        match out {
            Ok(out) if out.status.success() => {
                assert!(
                    String::from_utf8_lossy(&out.stdout).contains(sha),
                    "openssl hashed the payload"
                );
                println!(
                    "  openssl run {run}: {:.3} s ({:.0} MiB/s)",
                    took.as_secs_f64(),
                    mib_per_s(mib, took)
                );
                times.push(took);
            }
            Ok(out) => {
                println!(
                    "  openssl baseline failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                break;
            }
            Err(err) => {
                println!("  openssl baseline not run: {err}");
                break;
            }
        }
    }
    let _ = std::fs::remove_file(file);
    times
}

/// `runs` of the `curl -o f && sync f && sha256sum f` baseline into `dir`; fewer (none)
/// when it cannot run here.
fn curl_runs(
    dir: &std::path::Path,
    url: &str,
    sha: &str,
    mib: usize,
    runs: usize,
) -> Vec<Duration> {
    let mut shell = Vec::new();
    let file = dir.join("f");
    let script =
        format!("curl -sS -o '{f}' '{url}' && sync '{f}' && sha256sum '{f}'", f = file.display());
    for run in 0..runs {
        let started = Instant::now();
        let out = std::process::Command::new("sh").arg("-c").arg(&script).output();
        let took = started.elapsed();
        match out {
            Ok(out) if out.status.success() => {
                assert!(
                    String::from_utf8_lossy(&out.stdout).starts_with(sha),
                    "curl got the payload"
                );
                println!(
                    "  curl run {run}: {:.3} s ({:.0} MiB/s)",
                    took.as_secs_f64(),
                    mib_per_s(mib, took)
                );
                shell.push(took);
            }
            Ok(out) => {
                println!("  curl baseline failed: {}", String::from_utf8_lossy(&out.stderr).trim());
                break;
            }
            Err(err) => {
                println!("  curl baseline not run: {err}");
                break;
            }
        }
        let _ = std::fs::remove_file(&file);
    }

    shell
}
