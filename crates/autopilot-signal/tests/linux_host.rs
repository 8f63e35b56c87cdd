//! [`LinuxHost`] on a temp directory: staging, swap with `k0s.prev`, restart marker, bundle.

#[allow(dead_code, reason = "each test file uses a part of the shared support")]
mod support {
    pub mod drive;
}

use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use autopilot_api::signal::{
    CommandAirgapUpdate, CommandK0sUpdate, SignalData, SignalPhase, UpdateRef,
};
use autopilot_engine::trial::Verdict;
use autopilot_signal::download::{DownloadConfig, DownloadError};
use autopilot_signal::host::{
    Host as _, HostError, LinuxHost, RestartState, SignalKey, SignatureSource, TrialState,
};
use autopilot_signal::trial::{Outcome, conclude};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use sha2::{Digest as _, Sha256};

const OLD: &[u8] = b"#!/bin/sh\necho v1.0.0\n";
const NEW: &[u8] = b"#!/bin/sh\necho v2.0.0\n";
/// Served at `/big`: four times the size of the small filesystem of the full-disk test.
const BIG: usize = 4 << 20;

async fn serve() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let response = match req.uri().path() {
                        "/k0s" | "/dist/bundle.tar" => Response::new(Full::new(Bytes::from(NEW))),
                        "/big" => Response::new(Full::new(Bytes::from(vec![7u8; BIG]))),
                        _ => Response::builder()
                            .status(StatusCode::NOT_FOUND)
                            .body(Full::new(Bytes::new()))
                            .expect("response"),
                    };
                    Ok::<_, Infallible>(response)
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

struct Fixture {
    dir: tempfile::TempDir,
    host: LinuxHost,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("bin")).expect("bin");
        let live = dir.path().join("bin/k0s");
        std::fs::write(&live, OLD).expect("write live");
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let host = LinuxHost::new(live, dir.path().join("data"), DownloadConfig::default())
            .expect("host")
            .with_instance("first");
        Self { dir, host }
    }

    fn bin(&self) -> std::path::PathBuf {
        self.dir.path().join("bin")
    }

    fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
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

fn signal() -> SignalData {
    serde_json::from_str(
        r#"{"planId":"id123","created":"2026-11-22T00:00:00Z","command":{"id":0,"k0supdate":{"url":"u","version":"v2.0.0"}}}"#,
    )
    .expect("signal")
}

fn key() -> SignalKey {
    SignalKey::of(&signal())
}

fn k0s(sha256: &str) -> CommandK0sUpdate {
    CommandK0sUpdate {
        url: String::new(),
        version: "v2.0.0".into(),
        sha256: sha256.into(),
        forceupdate: false,
    }
}

#[tokio::test]
async fn a_staged_download_sits_next_to_the_live_binary_until_the_swap() {
    let addr = serve().await;
    let f = Fixture::new();
    let key = SignalKey::of(&signal());
    f.host
        .download(&key, &format!("http://{addr}/k0s"), Some(&sha(NEW)), &SignatureSource::default())
        .await
        .expect("download");
    assert_eq!(listing(&f.bin()), vec!["k0s", "k0s.tmp"]);
    assert_eq!(std::fs::read(f.host.live_path()).expect("live"), OLD);

    let update = k0s(&sha(NEW));
    let observed = f.host.observe(&key, UpdateRef::K0s(&update)).await.expect("observe");
    assert!(observed.staged);
    assert_eq!(observed.live_sha256.as_deref(), Some(sha(OLD).as_str()));
    let other = k0s(&sha(OLD));
    let observed = f.host.observe(&key, UpdateRef::K0s(&other)).await.expect("observe");
    assert!(!observed.staged, "a staged file with another digest is not this signal's");
}

#[tokio::test]
async fn a_failed_download_leaves_only_the_live_binary() {
    let addr = serve().await;
    let f = Fixture::new();
    let err = f
        .host
        .download(
            &key(),
            &format!("http://{addr}/k0s"),
            Some(&sha(OLD)),
            &SignatureSource::default(),
        )
        .await
        .expect_err("digest mismatch");
    assert!(matches!(err, HostError::Download(DownloadError::DigestMismatch { .. })), "{err}");
    let err = f
        .host
        .download(&key(), &format!("http://{addr}/nope"), None, &SignatureSource::default())
        .await
        .expect_err("404");
    assert!(err.reason().ends_with("/nope: 404 Not Found"), "{}", err.reason());
    assert_eq!(listing(&f.bin()), vec!["k0s"]);
}

/// A 1 MiB tmpfs mounted over a directory for the length of a test.
struct SmallFilesystem<'a>(&'a Path);

impl<'a> SmallFilesystem<'a> {
    fn mount(dir: &'a Path) -> Self {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir)
            .status()
            .expect("running mount");
        assert!(status.success(), "mounting a 1 MiB tmpfs on {} failed", dir.display());
        Self(dir)
    }
}

impl Drop for SmallFilesystem<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0).status();
    }
}

#[tokio::test]
async fn a_full_disk_fails_the_download_with_no_space_and_leaves_the_binary_whole() {
    use std::os::unix::fs::MetadataExt as _;
    // Mounting needs root (as on the project's machines and CI); elsewhere say so and stop.
    if std::fs::metadata("/proc/self").expect("/proc/self").uid() != 0 {
        eprintln!("skipped: mounting a small filesystem needs root");
        return;
    }
    let addr = serve().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let _small = SmallFilesystem::mount(&bin);
    let live = bin.join("k0s");
    std::fs::write(&live, OLD).expect("write live");
    let host = LinuxHost::new(live.clone(), dir.path().join("data"), DownloadConfig::default())
        .expect("host")
        .with_instance("first");

    let err = host
        .download(
            &key(),
            &format!("http://{addr}/big"),
            Some(&sha(&vec![7u8; BIG])),
            &SignatureSource::default(),
        )
        .await
        .expect_err("4 MiB cannot fit on 1 MiB");
    assert!(matches!(err, HostError::Download(DownloadError::NoSpace { .. })), "{err}");
    assert!(err.reason().starts_with("no space left on device writing "), "{}", err.reason());
    assert!(err.reason().contains(&bin.display().to_string()), "names where: {}", err.reason());
    assert_eq!(listing(&bin), vec!["k0s"], "the partial download is gone");
    assert_eq!(std::fs::read(&live).expect("live"), OLD, "the binary is untouched");

    // Once space is back (here: a small payload), the same host downloads and stages fine.
    host.download(
        &key(),
        &format!("http://{addr}/k0s"),
        Some(&sha(NEW)),
        &SignatureSource::default(),
    )
    .await
    .expect("download");
    assert_eq!(listing(&bin), vec!["k0s", "k0s.tmp"]);
}

#[tokio::test]
async fn the_swap_keeps_the_previous_binary_and_is_idempotent() {
    let f = Fixture::new();
    std::fs::write(f.host.staged_path(), NEW).expect("stage");
    f.host.swap_binary().expect("swap");
    assert_eq!(listing(&f.bin()), vec!["k0s", "k0s.prev"]);
    assert_eq!(std::fs::read(f.host.live_path()).expect("live"), NEW);
    assert_eq!(std::fs::read(f.host.previous_path()).expect("prev"), OLD);
    let mode = std::fs::metadata(f.host.live_path()).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o755);

    f.host.swap_binary().expect("second swap is a no-op");
    assert_eq!(std::fs::read(f.host.live_path()).expect("live"), NEW);
    assert_eq!(std::fs::read(f.host.previous_path()).expect("prev"), OLD);
}

#[tokio::test]
async fn a_swap_interrupted_after_keeping_the_previous_binary_completes_on_replay() {
    let f = Fixture::new();
    std::fs::write(f.host.staged_path(), NEW).expect("stage");
    // A crash left the half-made previous link behind.
    std::fs::write(f.bin().join("k0s.prev.new"), b"partial").expect("leftover");
    f.host.swap_binary().expect("swap");
    assert_eq!(listing(&f.bin()), vec!["k0s", "k0s.prev"]);
    assert_eq!(std::fs::read(f.host.previous_path()).expect("prev"), OLD);
    assert_eq!(std::fs::read(f.host.live_path()).expect("live"), NEW);
}

#[tokio::test]
async fn the_restart_marker_counts_only_for_the_next_process_and_the_same_signal() {
    let f = Fixture::new();
    let data = signal();
    let key = SignalKey::of(&data);
    let update = k0s("");
    let before = f.host.observe(&key, UpdateRef::K0s(&update)).await.expect("observe");
    assert_eq!(before.restart, RestartState::NotYet);

    f.host.prepare_restart(&key).expect("marker");
    let same = f.host.observe(&key, UpdateRef::K0s(&update)).await.expect("observe");
    assert_eq!(same.restart, RestartState::NotYet, "the process that wrote it has not restarted");

    let next = f.host.clone().with_instance("second");
    let interrupted = next.observe(&key, UpdateRef::K0s(&update)).await.expect("observe");
    assert_eq!(
        interrupted.restart,
        RestartState::NotYet,
        "a trial that never concluded runs again"
    );

    f.host.pass_trial(&key, None).expect("pass");
    let after = next.observe(&key, UpdateRef::K0s(&update)).await.expect("observe");
    assert_eq!(after.restart, RestartState::Done);

    let other = SignalKey { created: "2026-11-23T00:00:00Z".into(), ..key };
    let unrelated = next.observe(&other, UpdateRef::K0s(&update)).await.expect("observe");
    assert_eq!(
        unrelated.restart,
        RestartState::NotYet,
        "a marker for another signal does not count"
    );
}

#[tokio::test]
async fn an_airgap_bundle_lands_in_the_images_directory() {
    let addr = serve().await;
    let f = Fixture::new();
    let path = f
        .host
        .download_bundle(
            &key(),
            &format!("http://{addr}/dist/bundle.tar"),
            Some(&sha(NEW)),
            &SignatureSource::default(),
        )
        .await
        .expect("bundle");
    assert_eq!(path, f.dir.path().join("data/images/bundle.tar"));
    assert_eq!(std::fs::read(&path).expect("bundle"), NEW);
    let update =
        CommandAirgapUpdate { url: String::new(), version: "v2.0.0".into(), sha256: sha(NEW) };
    let key = SignalKey::of(&signal());
    let observed = f.host.observe(&key, UpdateRef::Airgap(&update)).await.expect("observe");
    assert!(!observed.staged && observed.live_sha256.is_none());
    assert_eq!(listing(&f.bin()), vec!["k0s"]);
}

#[tokio::test]
async fn a_download_clears_temp_files_left_by_a_killed_process_but_not_live_ones() {
    let addr = serve().await;
    let f = Fixture::new();
    // Left by a killed process: nobody holds its lock. In progress: its download holds one.
    let dead = f.bin().join(".k0s.tmp.dead01.tmp");
    let live = f.bin().join(".k0s.tmp.live01.tmp");
    std::fs::write(&dead, b"partial").expect("dead");
    std::fs::write(&live, b"partial").expect("live");
    let in_progress = std::fs::File::open(&live).expect("open");
    in_progress.try_lock().expect("lock the live download");
    // Written a moment ago: age does not matter, only whether a live download owns it.
    f.host
        .download(
            &key(),
            &format!("http://{addr}/k0s"),
            Some(&sha(NEW)),
            &SignatureSource::default(),
        )
        .await
        .expect("download");
    assert_eq!(listing(&f.bin()), vec![".k0s.tmp.live01.tmp", "k0s", "k0s.tmp"]);
    drop(in_progress);
}

#[test]
fn a_new_host_clears_leftovers_next_to_the_binary_and_in_the_images_dir() {
    let f = Fixture::new();
    let images = f.data_dir().join("images");
    std::fs::create_dir_all(&images).expect("images dir");
    std::fs::write(f.bin().join(".k0s.tmp.dead02.tmp"), b"partial").expect("binary leftover");
    std::fs::write(images.join(".bundle.tar.dead03.tmp"), b"partial").expect("bundle leftover");
    std::fs::write(images.join("bundle.tar"), b"complete").expect("a finished bundle");
    std::fs::write(f.bin().join(".other.dead04.tmp"), b"not ours").expect("someone else's");
    let _host =
        LinuxHost::new(f.host.live_path().to_path_buf(), f.data_dir(), DownloadConfig::default())
            .expect("host");
    assert_eq!(listing(&f.bin()), vec![".other.dead04.tmp", "k0s"]);
    assert_eq!(listing(&images), vec!["bundle.tar"]);
}

/// The version a test binary claims (its `echo` line).
#[tokio::test]
async fn a_signal_runs_to_completion_on_a_real_disk() {
    let addr = serve().await;
    let f = Fixture::new();
    let mut data = signal();
    data.command.k0supdate =
        Some(CommandK0sUpdate { url: format!("http://{addr}/k0s"), ..k0s(&sha(NEW)) });
    let support::drive::Driven { data, history, running, processes, host } =
        support::drive::run_to_end(&f.host, data).await;
    assert_eq!(data.phase(), Some(SignalPhase::Completed), "{history:?}");
    assert_eq!(processes, 2);
    assert_eq!(running, "v2.0.0");
    assert_eq!(std::fs::read(host.live_path()).expect("live"), NEW);
    assert_eq!(std::fs::read(host.previous_path()).expect("prev"), OLD);
    assert_eq!(listing(&f.bin()), vec!["k0s", "k0s.prev"]);
}

#[tokio::test]
async fn a_staged_binary_that_runs_and_reports_the_version_passes_its_self_test() {
    let addr = serve().await;
    let f = Fixture::new();
    let update = k0s(&sha(NEW));
    f.host
        .download(
            &key(),
            &format!("http://{addr}/k0s"),
            Some(&sha(NEW)),
            &SignatureSource::default(),
        )
        .await
        .expect("download");
    let staged = f.host.observe(&key(), UpdateRef::K0s(&update)).await.expect("observe");
    assert!(staged.staged && !staged.proven, "{staged:?}");
    f.host.self_test(&key(), "v2.0.0", false).await.expect("self-test");
    let proven = f.host.observe(&key(), UpdateRef::K0s(&update)).await.expect("observe");
    assert!(proven.staged && proven.proven, "{proven:?}");
}

#[tokio::test]
async fn a_staged_binary_is_executable_only_during_its_self_test_and_after_the_swap() {
    use std::os::unix::fs::PermissionsExt as _;
    let addr = serve().await;
    let f = Fixture::new();
    let url = format!("http://{addr}/k0s");
    f.host
        .download(&key(), &url, Some(&sha(NEW)), &SignatureSource::default())
        .await
        .expect("download");
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
    };
    assert_eq!(mode(&f.host.staged_path()), 0o600, "downloaded");
    f.host.self_test(&key(), "v2.0.0", false).await.expect("self-test");
    assert_eq!(mode(&f.host.staged_path()), 0o600, "self-tested, waiting for the swap");
    f.host.swap_binary().expect("swap");
    assert_eq!(mode(f.host.live_path()), 0o755, "swapped in");
}

/// Stages `bytes` as if downloaded for [`key`] and self-tests it for version `v2`.
async fn self_test_of(f: &Fixture, bytes: &[u8]) -> HostError {
    std::fs::write(f.host.staged_path(), bytes).expect("stage");
    f.host.self_test(&key(), "v2.0.0", false).await.expect_err("the self-test fails")
}

#[tokio::test]
async fn a_payload_that_is_not_an_executable_fails_its_self_test_and_is_removed() {
    let f = Fixture::new();
    let err = self_test_of(&f, b"<html><body>502 Bad Gateway</body></html>\n").await;
    let reason = err.reason();
    assert!(
        reason.starts_with("the downloaded binary failed its self-test: it cannot be executed"),
        "{reason}"
    );
    assert_eq!(listing(&f.bin()), vec!["k0s"], "the staged file is removed, the live one kept");
    assert_eq!(std::fs::read(f.host.live_path()).expect("live"), OLD);
}

#[tokio::test]
async fn a_binary_reporting_another_version_or_failing_fails_its_self_test_with_its_output() {
    let f = Fixture::new();
    let reason = self_test_of(&f, b"#!/bin/sh\necho v3.0.0\n").await.reason();
    assert!(reason.ends_with("`version` reported \"v3.0.0\", expected v2.0.0"), "{reason}");
    let reason = self_test_of(&f, b"#!/bin/sh\necho oops >&2\nexit 3\n").await.reason();
    assert!(reason.ends_with("`version` exited with status 3: \"oops\""), "{reason}");
    assert_eq!(listing(&f.bin()), vec!["k0s"]);
}

/// A release of `v1.35.1+k0s.0` (a script) carrying a kubelet of version `kubelet`, packed
/// as `cargo xtask dist` packs one.
fn carrying(dir: &Path, kubelet: &str) -> Vec<u8> {
    let script = dir.join("k0s-script");
    std::fs::write(&script, "#!/bin/sh\necho v1.35.1+k0s.0\nexit 0\n").expect("script");
    let component = dir.join("kubelet");
    std::fs::write(&component, "#!/bin/sh\necho kubelet\n").expect("kubelet");
    let out = dir.join("k0s-packed");
    let sources =
        [k0s_components::carried::Source { name: "kubelet", version: kubelet, path: &component }];
    k0s_components::carried::pack(&script, &sources, &out).expect("packing");
    std::fs::read(&out).expect("the packed release")
}

#[tokio::test]
async fn a_payload_carrying_another_kubernetes_minor_is_removed_before_the_swap() {
    let f = Fixture::new();
    let work = tempfile::tempdir().expect("tempdir");
    std::fs::write(f.host.staged_path(), carrying(work.path(), "v1.34.4")).expect("stage");
    let err = f.host.self_test(&key(), "v1.35.1+k0s.0", false).await.expect_err("refused");
    assert!(matches!(err, HostError::Carried { .. }), "{err:?}");
    assert_eq!(
        err.reason(),
        "the downloaded binary was refused before the swap: it carries kubelet v1.34.4, not \
         Kubernetes v1.35 as its k0s version v1.35.1+k0s.0 names"
    );
    assert_eq!(listing(&f.bin()), vec!["k0s"], "the staged file is removed, the live one kept");
    assert_eq!(std::fs::read(f.host.live_path()).expect("live"), OLD);

    // The release that carries the minor its version names passes.
    std::fs::write(f.host.staged_path(), carrying(work.path(), "v1.35.4")).expect("stage");
    f.host.self_test(&key(), "v1.35.1+k0s.0", false).await.expect("self-test");
}

#[tokio::test]
async fn a_swap_never_puts_an_unproven_binary_into_k0s_prev() {
    let f = Fixture::new();
    std::fs::write(f.host.staged_path(), NEW).expect("stage");
    f.host.swap_binary().expect("swap");
    // A second signal swaps again before any restart: the live binary (NEW) never ran, so
    // the last good copy (OLD) stays in k0s.prev.
    std::fs::write(f.host.staged_path(), b"#!/bin/sh\necho v3.0.0\n").expect("stage");
    f.host.swap_binary().expect("swap");
    assert_eq!(std::fs::read(f.host.previous_path()).expect("prev"), OLD);
    assert_eq!(std::fs::read(f.host.live_path()).expect("live"), b"#!/bin/sh\necho v3.0.0\n");
}

#[tokio::test]
async fn a_refused_binary_is_kept_aside_and_the_live_one_is_untouched_repeatably() {
    let f = Fixture::new();
    std::fs::write(f.host.staged_path(), NEW).expect("stage");
    f.host.prepare_restart(&key()).expect("marker");
    for _ in 0..2 {
        let outcome =
            conclude(&f.host, &key(), Verdict::RollBack("it crashed".into()), "v1.0.0", None)
                .expect("roll back");
        assert_eq!(outcome, Outcome::RolledBack("it crashed".into()));
        assert_eq!(listing(&f.bin()), vec!["k0s", "k0s.refused"]);
        assert_eq!(std::fs::read(f.host.live_path()).expect("live"), OLD);
        assert_eq!(std::fs::read(f.host.refused_path()).expect("refused"), NEW);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(f.host.refused_path()).expect("refused").permissions(),
        );
        assert_eq!(mode & 0o111, 0, "k0s.refused is not executable (mode {mode:o})");
    }
    let marker = f.host.read_marker().expect("marker").expect("a marker");
    assert_eq!(
        marker.trial,
        TrialState::RolledBack { to: "v1.0.0".into(), reason: "it crashed".into() }
    );
    let next = f.host.clone().with_instance("second");
    let update = k0s(&sha(NEW));
    let observed = next.observe(&key(), UpdateRef::K0s(&update)).await.expect("observe");
    assert_eq!(
        observed.restart,
        RestartState::RolledBack { to: "v1.0.0".into(), reason: "it crashed".into() }
    );
}

#[tokio::test]
async fn a_corrupt_restart_marker_is_observed_as_unreadable_not_an_error() {
    let f = Fixture::new();
    let key = SignalKey::of(&signal());
    let update = k0s("");
    let marker = f.host.marker_path();
    std::fs::create_dir_all(marker.parent().expect("a data dir")).expect("the data dir");
    std::fs::write(&marker, b"{ not json").expect("corrupt the marker");
    let observed =
        f.host.observe(&key, UpdateRef::K0s(&update)).await.expect("observing still works");
    let RestartState::Unreadable(reason) = observed.restart else {
        panic!("expected an unreadable marker, got {:?}", observed.restart);
    };
    assert!(reason.contains(&f.host.marker_path().display().to_string()), "{reason}");
    // Preparing a restart writes a good marker over it.
    f.host.prepare_restart(&key).expect("marker");
    let next = f.host.clone().with_instance("second");
    let observed = next.observe(&key, UpdateRef::K0s(&update)).await.expect("observe");
    assert_eq!(observed.restart, RestartState::NotYet);
}

/// Serves `NEW` at every path and counts the requests.
async fn counting_serve() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let served = std::sync::Arc::clone(&count);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let served = std::sync::Arc::clone(&served);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    served.fetch_add(1, Ordering::SeqCst);
                    async move { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(NEW)))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, count)
}

#[tokio::test]
async fn a_pre_staged_bundle_is_taken_by_the_update_without_a_second_download() {
    use std::sync::atomic::Ordering;
    let (addr, served) = counting_serve().await;
    let f = Fixture::new();
    let url = format!("http://{addr}/dist/bundle.tar");
    f.host.stage_bundle(&url, Some(&sha(NEW)), &SignatureSource::default()).await.expect("staged");
    assert_eq!(served.load(Ordering::SeqCst), 1);
    assert_eq!(listing(&f.host.staged_bundles_dir()), vec!["bundle.tar"]);
    assert!(f.host.staged_bundle_record_path().exists());
    assert!(!f.data_dir().join("images").exists(), "staging puts nothing in the images dir");

    let path = f
        .host
        .download_bundle(&key(), &url, Some(&sha(NEW)), &SignatureSource::default())
        .await
        .expect("bundle");
    assert_eq!(path, f.data_dir().join("images/bundle.tar"));
    assert_eq!(std::fs::read(&path).expect("bundle"), NEW);
    assert_eq!(served.load(Ordering::SeqCst), 1, "the staged bundle was taken, nothing fetched");
    assert!(listing(&f.host.staged_bundles_dir()).is_empty());
    assert!(!f.host.staged_bundle_record_path().exists(), "the record goes with the file");
}

#[tokio::test]
async fn a_staged_bundle_that_changed_on_disk_or_another_digest_is_downloaded_again() {
    use std::sync::atomic::Ordering;
    let (addr, served) = counting_serve().await;
    let url = format!("http://{addr}/dist/bundle.tar");

    // The staged file no longer has the digest its record names.
    let f = Fixture::new();
    f.host.stage_bundle(&url, Some(&sha(NEW)), &SignatureSource::default()).await.expect("staged");
    std::fs::write(f.host.staged_bundles_dir().join("bundle.tar"), b"tampered").unwrap();
    let path = f
        .host
        .download_bundle(&key(), &url, Some(&sha(NEW)), &SignatureSource::default())
        .await
        .expect("bundle");
    assert_eq!(std::fs::read(&path).expect("bundle"), NEW);
    assert_eq!(served.load(Ordering::SeqCst), 2, "fetched again");

    // Staged without a digest: an update naming the digest takes it once the file hashes
    // to it (the record keeps the digest the download computed).
    let g = Fixture::new();
    g.host.stage_bundle(&url, None, &SignatureSource::default()).await.expect("staged");
    let before = served.load(Ordering::SeqCst);
    g.host
        .download_bundle(&key(), &url, Some(&sha(NEW)), &SignatureSource::default())
        .await
        .expect("bundle");
    assert_eq!(served.load(Ordering::SeqCst), before, "same digest recorded: taken");
}
