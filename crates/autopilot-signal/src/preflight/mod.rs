//! Built-in preflight probes: thin I/O that turns what the OS says into a [`RawRecord`]
//! with seed 004's status codes. No shell, no judgement (the controller judges records).
//!
//! [`run`] takes a check's command (`id` + `data`) and its timeout; invalid data is status
//! code 22 before anything runs, a probe that overruns its timeout is 62, and OS errors map
//! through [`status_code_for`] (`ECONNREFUSED` → 111, `EADDRINUSE` → 98, …). How the agent
//! learns which checks to run is described in `autopilot_engine::preflight`.

pub mod exec;

use std::io;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use autopilot_api::keys;
use autopilot_api::preflight::request::{DiskSpace, FileExists, HttpGet, PortAvailable, Request};
use autopilot_api::preflight::{RawRecord, check_timeout, status_code};
use autopilot_api::signal::SignalData;
use autopilot_api::v1beta2::{Plan, PreflightCheck, PreflightCommand};
use autopilot_shell::https::{self, HttpsClientBuilder};

/// What a probe needs to know about the node it runs on.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// The k0s version this binary runs (`k0sVersion`'s answer).
    pub k0s_version: &'a str,
    /// The node-local allow-list file of `exec` checks.
    pub exec_allow_list: &'a std::path::Path,
}

/// The definitions of the checks a preflight signal names, from the Plan's frozen copy of
/// the signal's command (never from the signal: a signal only refers to checks). `Err`
/// says why they cannot be found: no Plan, another run, a command that is not a preflight
/// command, or a check id the command does not have.
pub fn definitions(
    plan: Option<&Plan>,
    signal: &SignalData,
    wanted: &[String],
) -> Result<Vec<PreflightCheck>, String> {
    let index = signal.command.id;
    let Some(plan) = plan else {
        return Err(format!("Plan {} does not exist", keys::PLAN_NAME));
    };
    let status = plan.status.as_ref();
    let run = status.and_then(|status| status.run_id.as_deref());
    if signal.run_id.is_none() || run != signal.run_id.as_deref() {
        return Err(format!(
            "Plan {} is on run {}, not on the signal's run {}",
            keys::PLAN_NAME,
            run.unwrap_or("(none)"),
            signal.run_id.as_deref().unwrap_or("(none)")
        ));
    }
    let preflight = status
        .and_then(|status| status.commands.iter().find(|command| command.id == index))
        .and_then(|command| command.frozen.as_ref())
        .and_then(|frozen| frozen.preflight.as_ref())
        .ok_or_else(|| {
            format!("command {index} of Plan {} is not a preflight command", keys::PLAN_NAME)
        })?;
    wanted
        .iter()
        .map(|id| {
            preflight.checks.iter().find(|check| &check.id == id).cloned().ok_or_else(|| {
                format!("command {index} of Plan {} has no check {id:?}", keys::PLAN_NAME)
            })
        })
        .collect()
}

/// The seed 004 status code for an OS error: connection refused 111, address in use 98,
/// timed out 62, invalid input 22, anything else 1.
pub fn status_code_for(kind: io::ErrorKind) -> i64 {
    match kind {
        io::ErrorKind::ConnectionRefused => status_code::CONNECTION_REFUSED,
        io::ErrorKind::AddrInUse => status_code::ADDRESS_IN_USE,
        io::ErrorKind::TimedOut => status_code::TIMEOUT,
        io::ErrorKind::InvalidInput => status_code::INVALID_ARGUMENT,
        // io::ErrorKind is non-exhaustive: every other OS error is seed 004's catch-all.
        _ => status_code::GENERAL_ERROR,
    }
}

/// The record of a probe that failed with `error` while doing `what` (for example
/// `dial 127.0.0.1:6443`).
pub fn io_failure(what: &str, error: &io::Error) -> RawRecord {
    RawRecord::failure(status_code_for(error.kind()), format!("{what}: {error}"))
}

/// The record of a command whose data the node cannot use (status code 22).
pub fn invalid_data(problem: &str) -> RawRecord {
    RawRecord::failure(status_code::INVALID_ARGUMENT, format!("invalid data: {problem}"))
}

/// The record of a probe stopped at its timeout (status code 62).
pub fn timed_out(timeout: Duration) -> RawRecord {
    RawRecord::failure(
        status_code::TIMEOUT,
        format!("timed out after {}", autopilot_api::duration::format(timeout)),
    )
}

/// Run one check's command on this node and report what happened, bounded
/// ([`RawRecord::bounded`]) and with its duration.
pub async fn run(command: &PreflightCommand, facts: Facts<'_>) -> RawRecord {
    let PreflightCommand { id, timeout, data } = command;
    let started = Instant::now();
    let record = match (Request::parse(*id, data.as_ref()), check_timeout(*timeout)) {
        (Err(problem), _) | (Ok(_), Err(problem)) => invalid_data(&problem),
        (Ok(request), Ok(timeout)) => {
            match tokio::time::timeout(timeout, probe(&request, facts, timeout)).await {
                Ok(record) => record,
                Err(_elapsed) => timed_out(timeout),
            }
        }
    };
    record.with_duration(started.elapsed()).bounded()
}

/// One probe, stopped by the caller at `timeout` (an `exec` entry may have a shorter cap).
async fn probe(request: &Request, facts: Facts<'_>, timeout: Duration) -> RawRecord {
    match request {
        Request::DiskSpaceAvailable(disk) => off_thread(disk.clone(), disk_space).await,
        Request::TcpDial(dial) => {
            let target = format!("{}:{}", dial.host, dial.port);
            match tokio::net::TcpStream::connect((dial.host.as_str(), dial.port)).await {
                Ok(_stream) => RawRecord::success(vec![format!("connected to {target}")]),
                Err(error) => io_failure(&format!("dial {target}"), &error),
            }
        }
        Request::PortAvailable(port) => off_thread(port.clone(), port_available).await,
        Request::HttpGet(get) => http_get(get).await,
        Request::FileExists(file) => off_thread(file.clone(), file_exists).await,
        Request::K0sVersion => RawRecord::success(vec![facts.k0s_version.to_owned()]),
        Request::Exec(entry) => exec::run(facts.exec_allow_list, &entry.name, timeout).await,
        Request::Scheduler(_) => RawRecord::failure(
            status_code::GENERAL_ERROR,
            "scheduler checks run Pods through the leader, not on the node agent",
        ),
    }
}

/// Run a probe that makes blocking system calls (`stat`, `statvfs`, `bind`) on the blocking
/// pool, never on the runtime thread: a path on a hung network filesystem blocks that call
/// for as long as the mount hangs, and the runtime thread also keeps the node's heartbeat
/// and answers SIGTERM. The caller's timeout still ends the wait (the thread is abandoned).
async fn off_thread<T: Send + 'static>(input: T, probe: fn(&T) -> RawRecord) -> RawRecord {
    match tokio::task::spawn_blocking(move || probe(&input)).await {
        Ok(record) => record,
        Err(error) => RawRecord::failure(
            status_code::GENERAL_ERROR,
            format!("the probe did not finish: {error}"),
        ),
    }
}

/// Binds and releases the port: free is 0 (`"<address>:<port> is free"`), taken 98.
fn port_available(request: &PortAvailable) -> RawRecord {
    let address = (request.address, request.port);
    let shown = std::net::SocketAddr::from(address);
    match TcpListener::bind(address) {
        Ok(listener) => {
            drop(listener);
            RawRecord::success(vec![format!("{shown} is free")])
        }
        Err(error) => io_failure(&format!("bind {shown}"), &error),
    }
}

/// Present is 0 (`"<path> exists"`); absent is 1 without an error (the probe worked, the
/// answer is no); any other failure (permissions) is an error.
fn file_exists(request: &FileExists) -> RawRecord {
    match Path::new(&request.path).symlink_metadata() {
        Ok(_) => RawRecord::success(vec![format!("{} exists", request.path)]),
        Err(error) if error.kind() == io::ErrorKind::NotFound => RawRecord {
            status_code: status_code::GENERAL_ERROR,
            messages: vec![format!("{} does not exist", request.path)],
            ..RawRecord::default()
        },
        Err(error) => io_failure(&format!("stat {}", request.path), &error),
    }
}

/// The first message is the free bytes (for `boolExpr: int(result) > …`); below `minBytes`
/// is 1 without an error.
fn disk_space(request: &DiskSpace) -> RawRecord {
    let stats = match nix::sys::statvfs::statvfs(request.path.as_str()) {
        Ok(stats) => stats,
        Err(errno) => {
            return io_failure(&format!("statvfs {}", request.path), &io::Error::from(errno));
        }
    };
    let free = stats.blocks_available().saturating_mul(stats.fragment_size());
    let mut record = RawRecord::success(vec![
        free.to_string(),
        format!("{free} bytes available at {}", request.path),
    ]);
    if let Some(min) = request.min_bytes
        && free < min
    {
        record.status_code = status_code::GENERAL_ERROR;
        record.messages[1] = format!("{free} bytes available at {}, less than {min}", request.path);
    }
    record
}

/// The first message is the HTTP status code (`"200"`), the second the status line; any
/// status is 0 (the results judge it), a failed connection maps like any OS error.
async fn http_get(request: &HttpGet) -> RawRecord {
    let uri: http::Uri = match request.url.parse() {
        Ok(uri) => uri,
        Err(error) => return invalid_data(&format!("url {:?}: {error}", request.url)),
    };
    let client = match HttpsClientBuilder::new(https::system_roots()).build() {
        Ok(client) => client,
        Err(error) => {
            return RawRecord::failure(status_code::GENERAL_ERROR, format!("tls: {error}"));
        }
    };
    match client.get(uri).await {
        Ok(response) => {
            let status = response.status();
            RawRecord::success(vec![status.as_u16().to_string(), status.to_string()])
        }
        Err(error) => {
            let kind = io_kind_in(&error).unwrap_or(io::ErrorKind::Other);
            RawRecord::failure(
                status_code_for(kind),
                format!("GET {}: {}", request.url, chain(&error)),
            )
        }
    }
}

/// The kind of the first `io::Error` in `error`'s source chain.
fn io_kind_in(error: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        current = error.source();
    }
    None
}

/// `error` and its causes, joined with `: `.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut current = error.source();
    while let Some(cause) = current {
        text.push_str(&format!(": {cause}"));
        current = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use autopilot_api::v1beta2::PreflightCommandId;

    use super::*;

    fn facts() -> Facts<'static> {
        Facts {
            k0s_version: "v1.33.4+k0s.0",
            exec_allow_list: Path::new("/nonexistent/preflight-exec.yaml"),
        }
    }

    fn command(
        id: PreflightCommandId,
        timeout: i64,
        data: Option<serde_json::Value>,
    ) -> PreflightCommand {
        PreflightCommand { id, timeout, data }
    }

    async fn check(id: PreflightCommandId, data: serde_json::Value) -> RawRecord {
        run(&command(id, 5, Some(data)), facts()).await
    }

    #[test]
    fn os_errors_map_to_seed_status_codes() {
        let cases = [
            (io::ErrorKind::ConnectionRefused, 111),
            (io::ErrorKind::AddrInUse, 98),
            (io::ErrorKind::TimedOut, 62),
            (io::ErrorKind::InvalidInput, 22),
            (io::ErrorKind::PermissionDenied, 1),
            (io::ErrorKind::NotFound, 1),
        ];
        for (kind, code) in cases {
            assert_eq!(status_code_for(kind), code, "{kind:?}");
        }
        let record = io_failure("dial x", &io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(record.status_code, 111);
        assert!(record.error.as_deref().is_some_and(|e| e.starts_with("dial x: ")));
        assert_eq!(timed_out(Duration::from_secs(15)).status_code, 62);
        assert_eq!(timed_out(Duration::from_secs(15)).result(), "timed out after 15s");
    }

    #[tokio::test]
    async fn invalid_data_or_timeout_is_status_code_22_before_anything_runs() {
        let record = check(PreflightCommandId::PortAvailable, json!({"port": "six"})).await;
        assert_eq!(record.status_code, status_code::INVALID_ARGUMENT);
        assert!(record.is_error());
        assert!(record.result().starts_with("invalid data: portAvailable data:"), "{record:?}");
        let record = run(&command(PreflightCommandId::K0sVersion, 0, None), facts()).await;
        assert_eq!(record.status_code, status_code::INVALID_ARGUMENT);
        assert_eq!(
            record.result(),
            "invalid data: 0 is neither -1 (no timeout) nor a number of seconds from 1"
        );
    }

    #[tokio::test]
    async fn port_available_reports_98_for_a_bound_port_and_0_for_a_free_one() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let data = json!({"port": port, "address": "127.0.0.1"});
        let record = check(PreflightCommandId::PortAvailable, data.clone()).await;
        assert_eq!(record.status_code, status_code::ADDRESS_IN_USE, "{record:?}");
        assert!(record.is_error());
        drop(listener);
        let record = check(PreflightCommandId::PortAvailable, data).await;
        assert_eq!(record.status_code, status_code::SUCCESS, "{record:?}");
        assert_eq!(record.result(), format!("127.0.0.1:{port} is free"));
    }

    #[tokio::test]
    async fn tcp_dial_reports_111_for_a_closed_port_and_0_for_a_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let data = json!({"host": "127.0.0.1", "port": port});
        let record = check(PreflightCommandId::TcpDial, data.clone()).await;
        assert_eq!(record.status_code, status_code::SUCCESS, "{record:?}");
        assert_eq!(record.result(), format!("connected to 127.0.0.1:{port}"));
        drop(listener);
        let record = check(PreflightCommandId::TcpDial, data).await;
        assert_eq!(record.status_code, status_code::CONNECTION_REFUSED, "{record:?}");
        assert!(record.is_error());
    }

    #[tokio::test]
    async fn http_get_reports_the_response_status_or_111() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let server = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut request = [0u8; 1024];
            let _read = stream.read(&mut request).await.expect("read");
            stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
                .await
                .expect("write");
        });
        let url = format!("http://127.0.0.1:{port}/readyz");
        let record = check(PreflightCommandId::HttpGet, json!({"url": url})).await;
        server.await.expect("server");
        assert_eq!(record.status_code, status_code::SUCCESS, "{record:?}");
        assert_eq!(record.messages, ["503", "503 Service Unavailable"]);

        let record = check(PreflightCommandId::HttpGet, json!({"url": url})).await;
        assert_eq!(record.status_code, status_code::CONNECTION_REFUSED, "{record:?}");
    }

    /// A probe stuck in a blocking call (as `stat` on a hung NFS mount is) neither stops the
    /// runtime thread nor outlives its timeout.
    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_probe_leaves_the_runtime_thread_free_and_times_out() {
        // Blocks until the test releases it, as a system call on a hung mount would.
        fn stuck(release: &std::sync::Mutex<std::sync::mpsc::Receiver<()>>) -> RawRecord {
            let _ = release.lock().map(|release| release.recv());
            RawRecord::success(vec!["late".to_owned()])
        }
        let (release, held) = std::sync::mpsc::channel();
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let ticker = tokio::spawn({
            let ticks = std::sync::Arc::clone(&ticks);
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        });
        let started = Instant::now();
        let probe = off_thread(std::sync::Mutex::new(held), stuck);
        let outcome = tokio::time::timeout(Duration::from_millis(300), probe).await;
        assert!(outcome.is_err(), "the probe was cut at its timeout");
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        // Other tasks ran on the runtime thread while the probe was stuck.
        assert!(ticks.load(std::sync::atomic::Ordering::SeqCst) >= 5);
        ticker.abort();
        release.send(()).expect("the stuck probe still waits");
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_overruns_its_timeout_reports_62() {
        // Connections to this listener are queued by the kernel and never answered, so the
        // GET waits until the check's timeout (virtual time: no real second passes).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let data = json!({"url": format!("http://127.0.0.1:{port}/")});
        let record = run(&command(PreflightCommandId::HttpGet, 1, Some(data)), facts()).await;
        assert_eq!(record.status_code, status_code::TIMEOUT, "{record:?}");
        assert_eq!(record.error.as_deref(), Some("timed out after 1s"));
        drop(listener);
    }

    #[tokio::test]
    async fn file_exists_is_0_when_present_and_1_without_error_when_absent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("k0s.yaml");
        std::fs::write(&path, "x").expect("write");
        let data = json!({"path": path.to_str().expect("utf-8")});
        let record = check(PreflightCommandId::FileExists, data).await;
        assert_eq!(record.status_code, status_code::SUCCESS);
        let missing = dir.path().join("missing");
        let data = json!({"path": missing.to_str().expect("utf-8")});
        let record = check(PreflightCommandId::FileExists, data).await;
        assert_eq!(record.status_code, status_code::GENERAL_ERROR);
        assert!(!record.is_error(), "the probe worked; the answer is no");
        assert!(record.result().ends_with("missing does not exist"));
    }

    #[tokio::test]
    async fn disk_space_reports_free_bytes_and_1_below_the_minimum() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_str().expect("utf-8").to_owned();
        let record = check(PreflightCommandId::DiskSpaceAvailable, json!({"path": path})).await;
        assert_eq!(record.status_code, status_code::SUCCESS, "{record:?}");
        assert!(record.result().parse::<u64>().is_ok(), "{record:?}");
        let data = json!({"path": path, "minBytes": u64::MAX});
        let record = check(PreflightCommandId::DiskSpaceAvailable, data).await;
        assert_eq!(record.status_code, status_code::GENERAL_ERROR);
        assert!(!record.is_error());
        let record =
            check(PreflightCommandId::DiskSpaceAvailable, json!({"path": "/no/such/dir"})).await;
        assert_eq!(record.status_code, status_code::GENERAL_ERROR);
        assert!(record.is_error());
    }

    #[tokio::test]
    async fn k0s_version_reports_the_running_version() {
        let record = run(&command(PreflightCommandId::K0sVersion, 15, None), facts()).await;
        assert_eq!(record.messages, ["v1.33.4+k0s.0"]);
        assert_eq!(record.status_code, 0);
    }

    #[tokio::test]
    async fn scheduler_is_not_a_node_probe_and_exec_needs_an_allow_list() {
        let data = json!({"kubernetes": {"podName": "p", "global": true}});
        let record = check(PreflightCommandId::Scheduler, data).await;
        assert_eq!(record.status_code, status_code::GENERAL_ERROR);
        assert!(record.is_error());
        let record = check(PreflightCommandId::Exec, json!({"name": "anything"})).await;
        assert_eq!(record.status_code, status_code::INVALID_ARGUMENT, "{record:?}");
    }
}
