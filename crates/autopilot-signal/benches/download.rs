//! Download + verify throughput on loopback (`cargo xtask bench download`, or
//! `cargo bench -p autopilot-signal --bench download -- [MiB] [runs]`).
//!
//! Serves a pseudo-random payload (default 200 MiB) from 127.0.0.1 and measures, per run,
//! the agent's [`Downloader`] writing it next to a target file — streaming, hashing while it
//! writes, fsync, digest check, rename — against the shell baseline
//! `curl -o f && sync f && sha256sum f` (same payload, same server, same disk). Prints
//! per-run times and the median of each, in MiB/s.

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
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
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
    let config = DownloadConfig { max_size: (mib as u64 + 1) << 20, ..DownloadConfig::default() };
    let downloader = Downloader::new(config).expect("downloader");
    println!(
        "download + verify of {mib} MiB over loopback into {}, {runs} runs",
        dir.path().display()
    );

    let mut ours = Vec::new();
    for run in 0..runs {
        let target = dir.path().join("k0s.tmp");
        let started = Instant::now();
        let done = runtime
            .block_on(downloader.download(&url, Some(&sha), Target::File(&target)))
            .expect("download succeeds");
        let took = started.elapsed();
        assert_eq!(done.sha256, sha);
        std::fs::remove_file(&target).expect("remove");
        println!(
            "  agent run {run}: {:.3} s ({:.0} MiB/s)",
            took.as_secs_f64(),
            mib_per_s(mib, took)
        );
        ours.push(took);
    }

    let shell = curl_runs(dir.path(), &url, &sha, mib, runs);

    let ours = median(ours);
    println!("agent:  median {:.3} s = {:.0} MiB/s", ours.as_secs_f64(), mib_per_s(mib, ours));
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
