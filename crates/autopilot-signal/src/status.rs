//! The local status socket: `<data-dir>/status.sock`, read by `k0s status`.
//!
//! Every running `k0s controller` and `k0s worker` serves one JSON document ([`Report`]) per
//! connection on a Unix socket in its data directory: its version, pid, role and what its
//! update agent is doing. The socket is local (file permissions decide who may read it) and
//! read-only: a client connects, reads to EOF and is done.
//!
//! Not here: rendering for humans (the `k0s` binary does that).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use autopilot_api::signal::{SignalData, UpdateRef};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

/// The socket's file name inside the data directory.
pub const SOCKET_NAME: &str = "status.sock";

/// How long a client waits for the whole report.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest report a client accepts.
const MAX_REPORT: u64 = 1 << 20;

/// Longest socket path `bind(2)`/`connect(2)` take directly (`sun_path` is 108 bytes with
/// the terminating NUL); longer paths go through `/proc/self/fd/<dir fd>/`.
const MAX_SUN_PATH: usize = 107;

/// The socket path for `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET_NAME)
}

/// What kind of node this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// `k0s controller`.
    Controller,
    /// `k0s controller --enable-worker`.
    #[serde(rename = "controller+worker")]
    ControllerWorker,
    /// `k0s worker`.
    Worker,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Controller => "controller",
            Self::ControllerWorker => "controller+worker",
            Self::Worker => "worker",
        })
    }
}

/// What `k0s status` shows: one document per connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The running k0s version.
    pub version: String,
    /// The process id.
    pub pid: u32,
    /// What this node is.
    pub role: Role,
    /// The node's name (Node / ControlNode).
    pub node_name: String,
    /// The running binary's path.
    pub binary: PathBuf,
    /// When this process (instance) started, RFC 3339.
    pub started: String,
    /// Controllers: whether this one holds the leader lease now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<bool>,
    /// Whether the update agent acts on signals (`--disable-update-agent` turns it off).
    pub update_agent: bool,
    /// The signals the agent last saw on its objects (one per watched object).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<SignalView>,
}

/// A signal as the agent last saw or wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalView {
    /// The object carrying it, `Kind/name`.
    pub object: String,
    /// The plan's `spec.id`.
    pub plan_id: String,
    /// The command index.
    pub command_id: u32,
    /// `k0supdate`, `airgapupdate`, `rollback of k0s` or `rollback of airgap`.
    pub command: String,
    /// The version the command updates to (for a rollback: the version put back).
    pub version: String,
    /// The node-side phase (`None`: not reacted yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the phase was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Why, for failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl SignalView {
    /// The view of `data` on `object` (`Kind/name`); `None` for a signal without an update
    /// command.
    pub fn of(object: String, data: &SignalData) -> Option<Self> {
        let (command, version) = match data.command.update()? {
            UpdateRef::K0s(u) => ("k0supdate", u.version.clone()),
            UpdateRef::Airgap(u) => ("airgapupdate", u.version.clone()),
            UpdateRef::Rollback(r) => match r.of {
                autopilot_api::signal::RollbackOf::K0s => ("rollback of k0s", r.version.clone()),
                autopilot_api::signal::RollbackOf::Airgap => {
                    ("rollback of airgap", r.version.clone())
                }
            },
        };
        Some(Self {
            object,
            plan_id: data.plan_id.clone(),
            command_id: data.command.id,
            command: command.to_owned(),
            version,
            phase: data.status.as_ref().map(|s| s.status.to_string()),
            since: data.status.as_ref().map(|s| s.timestamp.clone()),
            reason: data.status.as_ref().and_then(|s| s.reason.clone()),
        })
    }
}

/// Where agents publish what they see; shared by every agent of a process and read by the
/// socket server. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Board(Arc<std::sync::Mutex<Vec<SignalView>>>);

impl Board {
    /// Records `view` as the current signal of its object.
    pub fn publish(&self, view: SignalView) {
        let mut views = self.lock();
        match views.iter_mut().find(|v| v.object == view.object) {
            Some(slot) => *slot = view,
            None => views.push(view),
        }
    }

    /// Forgets the signal of `object` (it was removed).
    pub fn clear(&self, object: &str) {
        self.lock().retain(|v| v.object != object);
    }

    /// The current signals, sorted by object.
    pub fn signals(&self) -> Vec<SignalView> {
        let mut views = self.lock().clone();
        views.sort_by(|a, b| a.object.cmp(&b.object));
        views
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SignalView>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why the status socket could not be served or read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Another live process answers on the socket.
    #[error("another k0s process serves {0} (two processes share this data directory?)")]
    InUse(PathBuf),
    /// Nothing answers on the socket.
    #[error("no k0s process is running with this data directory ({path})")]
    NotRunning {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Any other I/O failure.
    #[error("{action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The process answered with something that is not a report.
    #[error("the status from {path} is not valid")]
    Invalid {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The process did not answer in time.
    #[error("no status from {0} within {QUERY_TIMEOUT:?}")]
    Timeout(PathBuf),
}

/// A socket address usable with `bind`/`connect` for `path`, even when `path` is longer
/// than `sun_path`: then it goes through the open parent directory (`_dir` keeps it open).
struct ShortPath {
    path: PathBuf,
    _dir: Option<std::fs::File>,
}

fn short_path(path: &Path) -> io::Result<ShortPath> {
    if path.as_os_str().len() <= MAX_SUN_PATH {
        return Ok(ShortPath { path: path.to_path_buf(), _dir: None });
    }
    use std::os::fd::AsRawFd as _;
    let parent = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default();
    let dir = std::fs::File::open(parent)?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    Ok(ShortPath { path, _dir: Some(dir) })
}

/// Serves `report()` on the socket in `data_dir` until `shutdown` resolves, then removes
/// the socket. A stale socket (left by a killed process) is replaced; a socket another live
/// process answers on is an error.
pub async fn serve(
    data_dir: &Path,
    report: impl Fn() -> Report + Send + Sync + 'static,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), StatusError> {
    let path = socket_path(data_dir);
    let listener = bind(&path).await?;
    debug!(socket = %path.display(), "status socket listening");
    let report = Arc::new(report);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut stream, _)) => {
                    let body = serde_json::to_vec(&report()).unwrap_or_default();
                    tokio::spawn(async move {
                        let write = async {
                            stream.write_all(&body).await?;
                            stream.shutdown().await
                        };
                        if let Ok(Err(err)) = tokio::time::timeout(QUERY_TIMEOUT, write).await {
                            debug!(error = %err, "status client went away");
                        }
                    });
                }
                Err(err) => {
                    warn!(error = %err, "status socket accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

async fn bind(path: &Path) -> Result<UnixListener, StatusError> {
    let io_err = |action, source| StatusError::Io { action, path: path.to_path_buf(), source };
    let short = short_path(path).map_err(|e| io_err("opening the directory of", e))?;
    match UnixListener::bind(&short.path) {
        Ok(listener) => return Ok(listener),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {}
        Err(e) => return Err(io_err("binding", e)),
    }
    // The file exists: in use by a live process, or left behind by one that died.
    if UnixStream::connect(&short.path).await.is_ok() {
        return Err(StatusError::InUse(path.to_path_buf()));
    }
    std::fs::remove_file(path).map_err(|e| io_err("removing the stale socket", e))?;
    UnixListener::bind(&short.path).map_err(|e| io_err("binding", e))
}

/// Reads the report of the process running with `data_dir`.
pub async fn query(data_dir: &Path) -> Result<Report, StatusError> {
    let path = socket_path(data_dir);
    let read =
        async {
            let short = short_path(&path)
                .map_err(|source| StatusError::NotRunning { path: path.clone(), source })?;
            let mut stream = UnixStream::connect(&short.path)
                .await
                .map_err(|source| StatusError::NotRunning { path: path.clone(), source })?;
            let mut body = Vec::new();
            (&mut stream).take(MAX_REPORT).read_to_end(&mut body).await.map_err(|source| {
                StatusError::Io { action: "reading", path: path.clone(), source }
            })?;
            serde_json::from_slice(&body)
                .map_err(|source| StatusError::Invalid { path: path.clone(), source })
        };
    tokio::time::timeout(QUERY_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| Err(StatusError::Timeout(path.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(pid: u32) -> Report {
        Report {
            version: "v1.35.0+k0s.0".into(),
            pid,
            role: Role::ControllerWorker,
            node_name: "node-a".into(),
            binary: "/usr/local/bin/k0s".into(),
            started: "2026-11-22T06:00:00Z".into(),
            leader: Some(true),
            update_agent: true,
            signals: vec![],
        }
    }

    #[test]
    fn the_report_has_stable_field_names() {
        let json = serde_json::to_value(report(42)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "version": "v1.35.0+k0s.0",
                "pid": 42,
                "role": "controller+worker",
                "nodeName": "node-a",
                "binary": "/usr/local/bin/k0s",
                "started": "2026-11-22T06:00:00Z",
                "leader": true,
                "updateAgent": true,
            })
        );
    }

    #[test]
    fn the_board_keeps_one_signal_per_object() {
        let board = Board::default();
        let view = |object: &str, phase: &str| SignalView {
            object: object.into(),
            plan_id: "id".into(),
            command_id: 0,
            command: "k0supdate".into(),
            version: "v2".into(),
            phase: Some(phase.into()),
            since: None,
            reason: None,
        };
        board.publish(view("Node/b", "Downloading"));
        board.publish(view("ControlNode/a", "Cordoning"));
        board.publish(view("Node/b", "Completed"));
        let phases: Vec<_> = board.signals().into_iter().map(|v| (v.object, v.phase)).collect();
        assert_eq!(
            phases,
            [
                ("ControlNode/a".to_owned(), Some("Cordoning".to_owned())),
                ("Node/b".to_owned(), Some("Completed".to_owned())),
            ]
        );
        board.clear("Node/b");
        assert_eq!(board.signals().len(), 1);
    }

    async fn serve_in(
        dir: PathBuf,
        pid: u32,
    ) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Result<(), StatusError>>) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            serve(&dir, move || report(pid), async {
                let _ = stopped.await;
            })
            .await
        });
        (stop, task)
    }

    async fn query_until_up(dir: &Path) -> Report {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match query(dir).await {
                Ok(report) => return report,
                Err(err) if tokio::time::Instant::now() < deadline => {
                    debug!(error = %err, "not up yet");
                    tokio::task::yield_now().await;
                }
                Err(err) => panic!("status socket never answered: {err}"),
            }
        }
    }

    #[tokio::test]
    async fn serves_the_report_and_removes_the_socket_on_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let (stop, task) = serve_in(dir.path().to_path_buf(), 7).await;
        assert_eq!(query_until_up(dir.path()).await, report(7));
        assert_eq!(query(dir.path()).await.unwrap(), report(7), "answers every connection");
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        assert!(!socket_path(dir.path()).exists(), "socket removed");
        let err = query(dir.path()).await.unwrap_err();
        assert!(matches!(err, StatusError::NotRunning { .. }), "{err}");
        assert!(err.to_string().contains("no k0s process is running"), "{err}");
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // A socket file nobody listens on, as a killed process leaves it.
        drop(std::os::unix::net::UnixListener::bind(socket_path(dir.path())).unwrap());
        assert!(socket_path(dir.path()).exists());
        let (stop, task) = serve_in(dir.path().to_path_buf(), 1).await;
        assert_eq!(query_until_up(dir.path()).await.pid, 1);

        let second = serve(dir.path(), || report(2), std::future::pending()).await;
        assert!(matches!(second, Err(StatusError::InUse(_))), "{second:?}");
        assert_eq!(query(dir.path()).await.unwrap().pid, 1, "the first one still serves");
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_data_dir_longer_than_a_socket_address_works() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a-rather-long-directory-name-".repeat(5)).join("data");
        std::fs::create_dir_all(&deep).unwrap();
        assert!(socket_path(&deep).as_os_str().len() > MAX_SUN_PATH);
        let (stop, task) = serve_in(deep.clone(), 3).await;
        assert_eq!(query_until_up(&deep).await.pid, 3);
        assert!(socket_path(&deep).exists(), "the socket is in the data dir itself");
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn garbage_on_the_socket_is_reported_as_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(socket_path(dir.path())).unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            stream.write_all(b"not json").await.unwrap();
        });
        let err = query(dir.path()).await.unwrap_err();
        assert!(matches!(err, StatusError::Invalid { .. }), "{err}");
    }
}
