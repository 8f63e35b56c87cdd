//! [`LinuxHost`] on a temp directory for rollback signals (DESIGN §15): `k0s.prev` staged
//! and self-tested without a download, refused when it is missing or runs another version,
//! and the airgap bundle a run replaced put back.

#[allow(dead_code, reason = "each test file uses a part of the shared support")]
mod support {
    pub mod drive;
}

use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use autopilot_api::signal::{
    CommandRollback, RollbackOf, SignalCommand, SignalData, SignalPhase, UpdateRef,
};
use autopilot_signal::download::DownloadConfig;
use autopilot_signal::host::{Host as _, HostError, LinuxHost, SignalKey, SignatureSource};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use sha2::{Digest as _, Sha256};

/// What the node ran before the run (`k0s.prev`).
const OLD: &[u8] = b"#!/bin/sh\necho v1.0.0\n";
/// What the run's update put in place (live).
const NEW: &[u8] = b"#!/bin/sh\necho v2.0.0\n";

/// A node that completed an update from v1 to v2: live `bin/k0s` runs v2, `bin/k0s.prev`
/// v1 (when given).
struct Node {
    dir: tempfile::TempDir,
    host: LinuxHost,
}

impl Node {
    fn new(previous_bytes: Option<&[u8]>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("bin")).expect("bin");
        let live = dir.path().join("bin/k0s");
        let previous = dir.path().join("bin/k0s.prev");
        for (path, bytes) in [(&live, Some(NEW)), (&previous, previous_bytes)] {
            let Some(bytes) = bytes else { continue };
            std::fs::write(path, bytes).expect("write");
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let host = LinuxHost::new(live, dir.path().join("data"), DownloadConfig::default())
            .expect("host")
            .with_instance("first");
        Self { dir, host }
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn images(&self) -> PathBuf {
        self.dir.path().join("data/images")
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

/// The version a test binary claims (its `echo` line).
/// The rollback of command `command` of `run` (`of`, back to `version`).
fn rollback(run: &str, command: u32, of: RollbackOf, version: &str) -> SignalData {
    SignalData {
        plan_id: "id123".into(),
        created: "2026-11-26T01:00:00Z".into(),
        command: SignalCommand {
            id: command,
            k0supdate: None,
            airgapupdate: None,
            preflight: None,
            rollback: Some(CommandRollback { version: version.into(), of }),
        },
        status: None,
        run_id: Some(run.into()),
    }
}

/// The airgap update signal of command `command` of `run` that brought a bundle.
fn bundle_key(run: &str, command: u32) -> SignalKey {
    SignalKey {
        plan_id: "id123".into(),
        created: "2026-11-26T00:00:00Z".into(),
        command_id: command,
        run_id: Some(run.into()),
    }
}

/// Runs `data` through the phase machine on `host` (the leader's part done at once, a
/// passed trial at the restart) until it is done; returns the signal, the phases written
/// and the version running at the end.
async fn run_to_end(host: &LinuxHost, data: SignalData) -> (SignalData, Vec<SignalPhase>, String) {
    let driven = support::drive::run_to_end(host, data).await;
    (driven.data, driven.history, driven.running)
}

fn reason(data: &SignalData) -> String {
    data.status.as_ref().and_then(|s| s.reason.clone()).unwrap_or_default()
}

#[tokio::test]
async fn k0s_prev_is_staged_and_self_tested_without_a_download_and_stays_in_place() {
    let node = Node::new(Some(OLD));
    let data = rollback("uid/2", 0, RollbackOf::K0s, "v1.0.0");
    let key = SignalKey::of(&data);
    let update = data.command.update().expect("valid");
    let before = node.host.observe(&key, update).await.expect("observe");
    assert!(!before.staged && !before.proven, "{before:?}");

    node.host.stage_previous(&key, "v1.0.0").await.expect("staged");
    assert_eq!(std::fs::read(node.host.staged_path()).expect("staged"), OLD);
    assert_eq!(std::fs::read(node.host.previous_path()).expect("prev"), OLD, "k0s.prev stays");
    assert_eq!(std::fs::read(node.host.live_path()).expect("live"), NEW);
    assert_eq!(listing(&node.bin()), vec!["k0s", "k0s.prev", "k0s.tmp"], "no temp file left");
    let after = node.host.observe(&key, update).await.expect("observe");
    assert!(after.staged && after.proven, "{after:?}");
    // The digest ties the copy to `k0s.prev`, not to a version: another signal's self-test
    // of the same bytes proves nothing for this one.
    let mut other = rollback("uid/3", 0, RollbackOf::K0s, "v1.0.0");
    other.created = "2026-11-27T00:00:00Z".into();
    let other_key = SignalKey::of(&other);
    let seen = node.host.observe(&other_key, other.command.update().expect("valid")).await;
    let seen = seen.expect("observe");
    assert!(seen.staged && !seen.proven, "{seen:?}");
    // Staging again (after a crash before the phase was written) converges.
    node.host.stage_previous(&key, "v1.0.0").await.expect("staged again");
    assert!(node.host.observe(&key, update).await.expect("observe").proven);
}

#[tokio::test]
async fn a_k0s_rollback_runs_to_completion_on_a_real_disk() {
    let node = Node::new(Some(OLD));
    let (data, history, running) =
        run_to_end(&node.host, rollback("uid/2", 0, RollbackOf::K0s, "v1.0.0")).await;
    assert_eq!(data.phase(), Some(SignalPhase::Completed), "{history:?} {}", reason(&data));
    assert_eq!(
        history,
        vec![
            SignalPhase::Downloading,
            SignalPhase::Cordoning,
            SignalPhase::ApplyingUpdate,
            SignalPhase::Restarting,
            SignalPhase::Uncordoning,
            SignalPhase::Completed,
        ]
    );
    assert_eq!(running, "v1.0.0");
    assert_eq!(std::fs::read(node.host.live_path()).expect("live"), OLD);
    // The fallback stays the proven binary the node runs again; the version rolled back is
    // kept to look at and can never run (the units run `k0s.prev post-update-guard`).
    assert_eq!(std::fs::read(node.host.previous_path()).expect("prev"), OLD);
    assert_eq!(mode(&node.host.previous_path()), 0o755);
    assert_eq!(std::fs::read(node.host.rejected_path()).expect("rejected"), NEW);
    assert_eq!(mode(&node.host.rejected_path()), 0o644, "the rejected binary has no execute bit");
    assert_eq!(listing(&node.bin()), vec!["k0s", "k0s.prev", "k0s.rejected"]);
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

#[tokio::test]
async fn a_swap_back_to_k0s_prev_killed_after_any_step_ends_with_the_rejected_binary_not_executable()
 {
    // Killed after linking the live binary aside, before the rename: the next swap starts
    // over; the link, still the live binary, is never made non-executable.
    let node = Node::new(Some(OLD));
    std::fs::copy(node.host.previous_path(), node.host.staged_path()).expect("staged");
    std::fs::hard_link(node.host.live_path(), node.bin().join("k0s.rejected.new")).expect("link");
    node.host.swap_binary().expect("swapped");
    assert_eq!(std::fs::read(node.host.live_path()).expect("live"), OLD);
    assert_eq!(mode(node.host.live_path()), 0o755);
    assert_eq!(std::fs::read(node.host.previous_path()).expect("prev"), OLD);
    assert_eq!(mode(&node.host.rejected_path()), 0o644);
    assert_eq!(listing(&node.bin()), vec!["k0s", "k0s.prev", "k0s.rejected"]);

    // Killed after the rename, before the rejected binary was made non-executable: the next
    // swap (nothing staged any more) finishes it.
    let node = Node::new(Some(OLD));
    std::fs::rename(node.host.live_path(), node.bin().join("k0s.rejected.new")).expect("aside");
    std::fs::copy(node.host.previous_path(), node.host.live_path()).expect("live");
    node.host.swap_binary().expect("finished");
    assert_eq!(std::fs::read(node.host.rejected_path()).expect("rejected"), NEW);
    assert_eq!(mode(&node.host.rejected_path()), 0o644);
    assert_eq!(listing(&node.bin()), vec!["k0s", "k0s.prev", "k0s.rejected"]);
}

#[tokio::test]
async fn a_k0s_prev_of_another_version_is_refused_with_both_versions_and_nothing_staged() {
    let node = Node::new(Some(b"#!/bin/sh\necho v3.0.0\n"));
    let data = rollback("uid/2", 0, RollbackOf::K0s, "v1.0.0");
    let err = node.host.stage_previous(&SignalKey::of(&data), "v1.0.0").await.expect_err("refused");
    assert!(matches!(err, HostError::Rollback { .. }), "{err:?}");
    assert_eq!(
        err.reason(),
        "k0s.prev runs v3.0.0, not the version this node ran before the run (v1.0.0)"
    );
    assert_eq!(listing(&node.bin()), vec!["k0s", "k0s.prev"]);

    let (data, history, running) = run_to_end(&node.host, data).await;
    assert_eq!(history, vec![SignalPhase::Downloading, SignalPhase::Failed]);
    assert_eq!(
        reason(&data),
        "k0s.prev runs v3.0.0, not the version this node ran before the run (v1.0.0)"
    );
    assert_eq!(running, "v2.0.0");
    assert_eq!(std::fs::read(node.host.live_path()).expect("live"), NEW);
}

#[tokio::test]
async fn a_k0s_prev_that_does_not_run_is_refused_with_its_output() {
    let node = Node::new(Some(b"#!/bin/sh\necho broken >&2\nexit 4\n"));
    let data = rollback("uid/2", 0, RollbackOf::K0s, "v1.0.0");
    let err = node.host.stage_previous(&SignalKey::of(&data), "v1.0.0").await.expect_err("refused");
    assert_eq!(err.reason(), "k0s.prev does not run: `version` exited with status 4: \"broken\"");
    assert_eq!(listing(&node.bin()), vec!["k0s", "k0s.prev"]);
}

#[tokio::test]
async fn without_k0s_prev_the_rollback_fails_and_nothing_is_guessed() {
    let node = Node::new(None);
    let (data, history, _) =
        run_to_end(&node.host, rollback("uid/2", 0, RollbackOf::K0s, "v1.0.0")).await;
    assert_eq!(history, vec![SignalPhase::Downloading, SignalPhase::Failed]);
    assert_eq!(reason(&data), "no k0s.prev to roll back to");
    assert_eq!(listing(&node.bin()), vec!["k0s"]);
}

#[tokio::test]
async fn a_node_already_on_the_from_version_completes_the_rollback_at_once() {
    let node = Node::new(Some(OLD));
    let (data, history, _) =
        run_to_end(&node.host, rollback("uid/2", 0, RollbackOf::K0s, "v2.0.0")).await;
    assert_eq!(data.phase(), Some(SignalPhase::Completed));
    assert_eq!(history, vec![SignalPhase::Completed]);
    assert_eq!(listing(&node.bin()), vec!["k0s", "k0s.prev"]);
    assert_eq!(std::fs::read(node.host.live_path()).expect("live"), NEW);
}

/// Serves whatever `body` holds at `/dist/bundle.tar`.
async fn serve(body: Arc<Mutex<Vec<u8>>>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let body = body.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let bytes = body.lock().expect("body").clone();
                    async move {
                        let response = match req.uri().path() {
                            "/dist/bundle.tar" => Response::new(Full::new(Bytes::from(bytes))),
                            _ => Response::builder()
                                .status(StatusCode::NOT_FOUND)
                                .body(Full::new(Bytes::new()))
                                .expect("response"),
                        };
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[tokio::test]
async fn an_airgap_rollback_puts_back_the_bundle_the_run_replaced() {
    let served = Arc::new(Mutex::new(b"bundle v1".to_vec()));
    let addr = serve(served.clone()).await;
    let url = format!("http://{addr}/dist/bundle.tar");
    let node = Node::new(Some(OLD));
    let none = SignatureSource::default();
    node.host.download_bundle(&bundle_key("uid/1", 0), &url, None, &none).await.expect("v1.0.0");
    *served.lock().expect("body") = b"bundle v2".to_vec();
    let sha2 = sha(b"bundle v2");
    let path = node.host.download_bundle(&bundle_key("uid/2", 1), &url, Some(&sha2), &none).await;
    let path = path.expect("v2.0.0");
    assert_eq!(path, node.images().join("bundle.tar"));
    // Downloaded again for the same signal (a crash before its answer): what was kept is
    // still the bundle it replaced, not itself.
    node.host
        .download_bundle(&bundle_key("uid/2", 1), &url, Some(&sha2), &none)
        .await
        .expect("again");
    assert_eq!(std::fs::read(&path).expect("bundle"), b"bundle v2");
    assert_eq!(listing(&node.images()), vec!["bundle.tar"], "only bundles in images/");

    let data = rollback("uid/2", 1, RollbackOf::Airgap, "v1.0.0");
    let key = SignalKey::of(&data);
    let observed = node
        .host
        .observe(&key, UpdateRef::Rollback(data.command.rollback.as_ref().expect("rollback")))
        .await;
    assert!(!observed.expect("observe").staged, "an airgap rollback stages no binary");
    let (done, history, _) = run_to_end(&node.host, data).await;
    assert_eq!(
        history,
        vec![SignalPhase::Downloading, SignalPhase::Completed],
        "{}",
        reason(&done)
    );
    assert_eq!(std::fs::read(&path).expect("bundle"), b"bundle v1");
    // Restoring again is harmless, and what was kept stays kept.
    node.host.restore_bundle(&key).expect("again");
    assert_eq!(std::fs::read(&path).expect("bundle"), b"bundle v1");
    assert_eq!(listing(&node.images()), vec!["bundle.tar"]);
    assert_eq!(listing(&node.bin()), vec!["k0s", "k0s.prev"], "the binary is untouched");

    // Only the last bundle's predecessor is kept: the earlier run cannot be rolled back.
    let earlier = rollback("uid/1", 0, RollbackOf::Airgap, "v1.0.0");
    let err = node.host.restore_bundle(&SignalKey::of(&earlier)).expect_err("not kept");
    assert_eq!(
        err.reason(),
        "the airgap bundle this node kept is from command 1 of run uid/2, not from command 0 \
         of run uid/1: nothing to roll back to"
    );
}

#[tokio::test]
async fn an_airgap_rollback_removes_a_bundle_the_run_added_and_fails_without_a_kept_one() {
    let served = Arc::new(Mutex::new(b"bundle v2".to_vec()));
    let addr = serve(served).await;
    let url = format!("http://{addr}/dist/bundle.tar");
    let node = Node::new(Some(OLD));
    let data = rollback("uid/2", 1, RollbackOf::Airgap, "v1.0.0");
    let (failed, history, _) = run_to_end(&node.host, data.clone()).await;
    assert_eq!(history, vec![SignalPhase::Downloading, SignalPhase::Failed]);
    assert_eq!(reason(&failed), "no previous airgap bundle to roll back to: this node kept none");

    let none = SignatureSource::default();
    node.host.download_bundle(&bundle_key("uid/2", 1), &url, None, &none).await.expect("bundle");
    assert_eq!(listing(&node.images()), vec!["bundle.tar"]);
    let (done, _, _) = run_to_end(&node.host, data).await;
    assert_eq!(done.phase(), Some(SignalPhase::Completed), "{}", reason(&done));
    assert!(listing(&node.images()).is_empty(), "the bundle the run added is gone");
}
