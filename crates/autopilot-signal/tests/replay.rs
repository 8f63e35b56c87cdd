//! The phase machine replayed against [`FakeHost`]: a crash at every mutation and a failure
//! injected at every action; the live binary is always complete and the signal converges.

use autopilot_api::signal::{
    CommandAirgapUpdate, CommandK0sUpdate, CommandRollback, RollbackOf, SignalCommand, SignalData,
    SignalPhase, SignalStatus,
};
use autopilot_engine::agent::{ActionKind, HostAction, OnFailure, Step, next};
use autopilot_engine::trial::Verdict;
use autopilot_signal::host::Host as _;
use autopilot_signal::host::fake::{self, FakeHost, sha256_hex};
use autopilot_signal::host::{HostError, SignalKey, perform};
use autopilot_signal::trial::conclude;

const V1: &str = "v1.35.0+k0s.0";
const V2: &str = "v1.35.1+k0s.0";
const URL: &str = "http://127.0.0.1:8080/k0s";

/// A "runnable" fake binary: a header naming its version, then a body.
fn binary(version: &str) -> Vec<u8> {
    format!("#!k0s {version}\n{}", "x".repeat(4096)).into_bytes()
}

/// A fake binary that answers `version` but exits at startup (fails its trial boot).
fn crashing(version: &str) -> Vec<u8> {
    format!("#!k0s-crash {version}\n{}", "x".repeat(4096)).into_bytes()
}

fn version_of(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let header = text.lines().next().unwrap_or_default();
    header.strip_prefix("#!k0s ").unwrap_or("corrupt").to_string()
}

fn k0s_signal(version: &str, sha256: &str, forceupdate: bool) -> SignalData {
    SignalData {
        plan_id: "id123".into(),
        created: "2026-11-22T00:00:00Z".into(),
        command: SignalCommand {
            rollback: None,
            preflight: None,
            id: 0,
            k0supdate: Some(CommandK0sUpdate {
                url: URL.into(),
                version: version.into(),
                sha256: sha256.into(),
                forceupdate,
            }),
            airgapupdate: None,
        },
        status: None,
        run_id: None,
    }
}

enum Exit {
    Done,
    Crashed,
    Restart,
}

/// One node: the fake disk, the signal as the API server holds it, the running process.
struct World {
    host: FakeHost,
    signal: SignalData,
    running: String,
    kubelet: bool,
    history: Vec<SignalPhase>,
    restarts: usize,
    crashes: usize,
}

impl World {
    fn new(signal: SignalData) -> Self {
        let host = FakeHost::new(&binary(V1));
        host.serve(URL, &binary(V2));
        Self {
            host,
            signal,
            running: V1.into(),
            kubelet: true,
            history: Vec::new(),
            restarts: 0,
            crashes: 0,
        }
    }

    fn write(&mut self, phase: SignalPhase, reason: Option<String>) -> Result<(), HostError> {
        self.host.external_effect(&format!("status {phase}"))?;
        let mut status = SignalStatus::new(phase, jiff::Timestamp::UNIX_EPOCH);
        status.reason = reason;
        self.signal.status = Some(status);
        self.history.push(phase);
        Ok(())
    }

    fn check_binary_is_complete(&self) {
        let live = self.host.file(fake::LIVE).expect("the live binary always exists");
        assert!(
            live == binary(V1)
                || live == binary(V2)
                || live == binary("v1.35.9+k0s.0")
                || live == carrying(V2, "v1.35.4"),
            "live binary is not a complete known build that boots"
        );
        if let Some(previous) = self.host.file(fake::PREVIOUS) {
            assert!(fake::boots(&previous), "k0s.prev holds a binary that does not boot");
        }
    }

    /// Runs one process until it is done, crashes or re-execs.
    async fn run_process(&mut self) -> Exit {
        for _ in 0..50 {
            self.check_binary_is_complete();
            let signal = self.signal.clone();
            let key = SignalKey::of(&signal);
            let update = signal.command.update().expect("valid command");
            let observed = match self.host.observe(&key, update).await {
                Ok(observed) => observed,
                Err(HostError::Crashed) => return Exit::Crashed,
                Err(e) => panic!("observe: {}", e.reason()),
            };
            // The leader recorded the drain: crash safety is what is replayed here.
            let facts = observed.facts(update, &self.running, self.kubelet, true);
            let written = match next(signal.phase(), &facts) {
                Step::Report { phase, reason } => self.write(phase, reason),
                Step::Run { action, on_success, on_failure } => {
                    match perform(&self.host, &action, &key, &Default::default()).await {
                        Ok(()) if action == HostAction::Restart => {
                            // The restart's trial boot of the staged binary, then its verdict.
                            let verdict = match self.host.file(fake::STAGED) {
                                Some(staged) if !fake::boots(&staged) => Verdict::RollBack(
                                    "the new binary exited 3 times before it was healthy".into(),
                                ),
                                Some(_) | None => Verdict::Pass,
                            };
                            return match conclude(&self.host, &key, verdict, &self.running, None) {
                                Ok(_) => Exit::Restart,
                                Err(_) if self.host.crashed() => Exit::Crashed,
                                Err(e) => panic!("concluding the trial: {e:#}"),
                            };
                        }
                        Ok(()) if signal.phase() == Some(on_success) => Ok(()),
                        Ok(()) => self.write(on_success, None),
                        Err(HostError::Crashed) => return Exit::Crashed,
                        Err(e) => match on_failure {
                            OnFailure::Report(phase) => self.write(phase, Some(e.reason())),
                            OnFailure::Retry => Ok(()),
                        },
                    }
                }
                // The leader's part, done at once.
                Step::Wait(_) => match signal.phase() {
                    Some(SignalPhase::Cordoning) => self.write(SignalPhase::ApplyingUpdate, None),
                    Some(SignalPhase::Uncordoning) => self.write(SignalPhase::Completed, None),
                    other => panic!("waiting in {other:?}"),
                },
                Step::Done => return Exit::Done,
            };
            if let Err(e) = written {
                assert!(matches!(e, HostError::Crashed), "{e}");
                return Exit::Crashed;
            }
        }
        panic!("no progress within 50 steps; history {:?}", self.history);
    }

    /// Runs processes (restarting after each crash or re-exec) until the signal is done.
    async fn run_to_end(&mut self) {
        for _ in 0..20 {
            match self.run_process().await {
                Exit::Done => {
                    self.check_binary_is_complete();
                    return;
                }
                Exit::Crashed => self.crashes += 1,
                Exit::Restart => self.restarts += 1,
            }
            self.host.restart_process();
            let live = self.host.file(fake::LIVE).expect("live binary");
            self.running = version_of(&live);
        }
        panic!("did not converge; history {:?}", self.history);
    }

    fn phase(&self) -> Option<SignalPhase> {
        self.signal.phase()
    }

    fn reason(&self) -> String {
        self.signal.status.as_ref().and_then(|s| s.reason.clone()).unwrap_or_default()
    }

    fn assert_history_in_order(&self) {
        assert!(
            self.history.windows(2).all(|w| w[0] <= w[1]),
            "phases out of order: {:?}",
            self.history
        );
    }

    fn assert_updated(&self) {
        assert_eq!(self.phase(), Some(SignalPhase::Completed), "{:?}", self.history);
        assert_eq!(self.host.file(fake::LIVE), Some(binary(V2)));
        assert_eq!(self.host.file(fake::PREVIOUS), Some(binary(V1)));
        assert_eq!(self.host.file(fake::STAGED), None);
        assert_eq!(self.running, V2);
        self.assert_history_in_order();
    }
}

fn update_signal() -> SignalData {
    k0s_signal(V2, &sha256_hex(&binary(V2)), false)
}

/// How many crash points a clean run of `signal` has.
async fn crash_points(signal: SignalData) -> usize {
    let mut world = World::new(signal);
    world.run_to_end().await;
    world.host.mutations()
}

#[tokio::test]
async fn a_clean_update_walks_every_phase_once_and_restarts_once() {
    let mut world = World::new(update_signal());
    world.run_to_end().await;
    world.assert_updated();
    assert_eq!(
        world.history,
        vec![
            SignalPhase::Downloading,
            SignalPhase::Cordoning,
            SignalPhase::ApplyingUpdate,
            SignalPhase::Restarting,
            SignalPhase::Uncordoning,
            SignalPhase::Completed,
        ]
    );
    assert_eq!(world.restarts, 1);
}

#[tokio::test]
async fn a_crash_at_every_point_still_converges_to_the_new_binary() {
    let points = crash_points(update_signal()).await;
    assert!(points >= 10, "{points}");
    for n in 0..=points {
        let mut world = World::new(update_signal());
        world.host.crash_after(n);
        world.run_to_end().await;
        world.assert_updated();
        assert_eq!(world.crashes, usize::from(n < points), "crash after {n}");
    }
}

#[tokio::test]
async fn a_crash_at_every_point_converges_without_a_digest_too() {
    let signal = k0s_signal(V2, "", false);
    let points = crash_points(signal.clone()).await;
    for n in 0..=points {
        let mut world = World::new(signal.clone());
        world.host.crash_after(n);
        world.run_to_end().await;
        world.assert_updated();
    }
}

#[tokio::test]
async fn failed_swaps_and_restarts_are_retried_at_every_crash_point() {
    for kind in [ActionKind::Swap, ActionKind::Restart] {
        let points = crash_points(update_signal()).await;
        for n in 0..=points {
            let mut world = World::new(update_signal());
            world.host.fail_next(kind);
            world.host.fail_next(kind);
            world.host.crash_after(n);
            world.run_to_end().await;
            world.assert_updated();
        }
    }
}

#[tokio::test]
async fn a_failed_download_ends_in_failed_download_with_the_old_binary_in_place() {
    let points = crash_points(update_signal()).await;
    for n in 0..=points {
        let mut world = World::new(update_signal());
        world.host.fail_next(ActionKind::Download);
        world.host.crash_after(n);
        world.run_to_end().await;
        world.assert_history_in_order();
        match world.phase() {
            // The crash came before the download was attempted: it then succeeded.
            Some(SignalPhase::Completed) => world.assert_updated(),
            Some(SignalPhase::FailedDownload) => {
                assert_eq!(world.reason(), "injected failure of Download");
                assert_eq!(world.host.file(fake::LIVE), Some(binary(V1)));
                assert_eq!(world.host.file(fake::STAGED), None);
                assert_eq!(world.running, V1);
            }
            other => panic!("crash after {n}: ended in {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_wrong_digest_fails_the_download_with_both_digests() {
    let wrong = "0".repeat(64);
    let mut world = World::new(k0s_signal(V2, &wrong, false));
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::FailedDownload));
    let reason = world.reason();
    assert!(reason.contains(&wrong) && reason.contains(&sha256_hex(&binary(V2))), "{reason}");
    assert_eq!(world.host.file(fake::LIVE), Some(binary(V1)));
    assert_eq!(world.restarts, 0);
}

#[tokio::test]
async fn a_missing_artifact_fails_the_download_with_the_status() {
    let mut world = World::new(update_signal());
    world.host.serve(URL, b"");
    let mut signal = update_signal();
    if let Some(k0s) = signal.command.k0supdate.as_mut() {
        k0s.url = "http://127.0.0.1:8080/missing".into();
    }
    world.signal = signal;
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::FailedDownload));
    assert_eq!(world.reason(), "GET http://127.0.0.1:8080/missing: 404 Not Found");
}

/// Runs `payload` (served with its own digest) to the end with a crash at every point and
/// checks each run ends `Failed` with `reason`, the node on V1 with nothing staged.
async fn fails_at_every_crash_point(payload: &[u8], check: impl Fn(&World)) {
    let signal = k0s_signal(V2, &sha256_hex(payload), false);
    let mut clean = World::new(signal.clone());
    clean.host.serve(URL, payload);
    clean.run_to_end().await;
    let points = clean.host.mutations();
    for n in 0..=points {
        let mut world = World::new(signal.clone());
        world.host.serve(URL, payload);
        world.host.crash_after(n);
        world.run_to_end().await;
        assert_eq!(
            world.phase(),
            Some(SignalPhase::Failed),
            "crash after {n}: {:?}",
            world.history
        );
        assert!(world.host.file(fake::LIVE) == Some(binary(V1)), "crash after {n}: live is not v1");
        assert!(world.host.file(fake::STAGED).is_none(), "crash after {n}: a staged file is left");
        assert_eq!(world.running, V1);
        world.assert_history_in_order();
        check(&world);
    }
}

#[tokio::test]
async fn a_binary_of_another_version_fails_its_self_test_before_the_node_is_cordoned() {
    fails_at_every_crash_point(&binary("v1.35.9+k0s.0"), |world| {
        assert_eq!(
            world.reason(),
            format!(
                "the downloaded binary failed its self-test: `version` reported \"v1.35.9+k0s.0\", expected {V2}"
            )
        );
        assert!(!world.history.contains(&SignalPhase::Cordoning), "{:?}", world.history);
        assert_eq!(world.restarts, 0);
    })
    .await;
}

/// A fake release of `version` carrying Kubernetes components of `kubernetes`.
fn carrying(version: &str, kubernetes: &str) -> Vec<u8> {
    format!(
        "#!k0s {version}\n#carries containerd v2.1.4\n#carries kubelet {kubernetes}\n\
         #carries kube-apiserver {kubernetes}\n{}",
        "x".repeat(4096)
    )
    .into_bytes()
}

#[tokio::test]
async fn a_payload_carrying_another_kubernetes_minor_fails_before_the_swap() {
    fails_at_every_crash_point(&carrying(V2, "v1.34.4"), |world| {
        assert_eq!(
            world.reason(),
            format!(
                "the downloaded binary was refused before the swap: it carries kubelet v1.34.4, \
                 kube-apiserver v1.34.4, not Kubernetes v1.35 as its k0s version {V2} names"
            )
        );
        assert!(!world.history.contains(&SignalPhase::Cordoning), "{:?}", world.history);
        assert_eq!(world.restarts, 0);
    })
    .await;
}

#[tokio::test]
async fn a_payload_carrying_the_kubernetes_minor_its_version_names_updates() {
    let payload = carrying(V2, "v1.35.4");
    let mut world = World::new(k0s_signal(V2, &sha256_hex(&payload), false));
    world.host.serve(URL, &payload);
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::Completed), "{:?}", world.history);
    assert!(world.host.file(fake::LIVE) == Some(payload), "swapped in");
}

#[tokio::test]
async fn a_payload_that_does_not_run_fails_its_self_test_with_its_output() {
    fails_at_every_crash_point(b"<html>502 Bad Gateway</html>", |world| {
        let reason = world.reason();
        assert!(reason.contains("`version` exited with status 126"), "{reason}");
        assert!(!world.history.contains(&SignalPhase::Cordoning), "{:?}", world.history);
    })
    .await;
}

#[tokio::test]
async fn a_binary_that_fails_its_trial_boot_is_refused_and_the_node_stays_on_v1() {
    fails_at_every_crash_point(&crashing(V2), |world| {
        assert_eq!(
            world.reason(),
            format!("rolled back to {V1}: the new binary exited 3 times before it was healthy")
        );
        assert!(world.host.file(fake::REFUSED) == Some(crashing(V2)), "kept for inspection");
        assert!(world.host.file(fake::PREVIOUS).is_none(), "nothing unproven became k0s.prev");
        assert!(world.history.contains(&SignalPhase::Restarting), "{:?}", world.history);
    })
    .await;
}

#[tokio::test]
async fn a_second_update_keeps_the_proven_binary_as_k0s_prev() {
    // v1 → v2 (proven by its trial), then v2 → a v3 that fails its trial: the node stays on
    // v2 and k0s.prev holds v1, the last binary proven before v2 (never the refused one).
    let mut world = World::new(update_signal());
    world.run_to_end().await;
    world.assert_updated();
    let v3 = "v1.35.2+k0s.0";
    let mut signal = k0s_signal(v3, &sha256_hex(&crashing(v3)), false);
    signal.created = "2026-11-23T00:00:00Z".into();
    world.host.serve(URL, &crashing(v3));
    world.signal = signal;
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::Failed));
    assert!(world.host.file(fake::LIVE) == Some(binary(V2)), "the node stays on v2");
    assert!(world.host.file(fake::PREVIOUS) == Some(binary(V1)), "k0s.prev is still v1");
    assert!(world.host.file(fake::REFUSED) == Some(crashing(v3)), "v3 is kept aside");
    assert_eq!(world.running, V2);
}

#[tokio::test]
async fn a_forced_update_to_the_running_version_swaps_and_restarts() {
    let mut world = World::new(k0s_signal(V2, "", true));
    world.running = V2.into();
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::Completed));
    assert_eq!(world.restarts, 1);
    assert_eq!(world.host.file(fake::LIVE), Some(binary(V2)));
}

#[tokio::test]
async fn an_update_to_the_running_version_completes_without_touching_the_disk() {
    let mut world = World::new(update_signal());
    world.running = V2.into();
    world.run_to_end().await;
    assert_eq!(world.history, vec![SignalPhase::Completed]);
    assert_eq!(world.host.files(), vec![fake::LIVE.to_string()]);
}

#[tokio::test]
async fn a_staged_file_lost_before_the_swap_fails_instead_of_claiming_success() {
    let mut world = World::new(update_signal());
    let key = SignalKey::of(&world.signal);
    world.write(SignalPhase::ApplyingUpdate, None).expect("write");
    let observed = world
        .host
        .observe(&key, world.signal.command.update().expect("valid"))
        .await
        .expect("observe");
    assert!(!observed.staged);
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::Failed));
    assert!(world.reason().starts_with("staged binary is gone"), "{}", world.reason());
    assert_eq!(world.host.file(fake::LIVE), Some(binary(V1)));
}

#[tokio::test]
async fn an_airgap_bundle_is_stored_under_images_without_a_restart() {
    let url = "http://127.0.0.1:8080/dist/bundle.tar";
    let bundle = b"images".to_vec();
    let signal = SignalData {
        command: SignalCommand {
            rollback: None,
            preflight: None,
            id: 1,
            k0supdate: None,
            airgapupdate: Some(CommandAirgapUpdate {
                url: url.into(),
                version: V2.into(),
                sha256: sha256_hex(&bundle),
            }),
        },
        ..update_signal()
    };
    // A clean run has three crash points: Downloading, the bundle, Completed.
    for n in 0..=4 {
        let mut world = World::new(signal.clone());
        world.host.serve(url, &bundle);
        world.host.fail_next(ActionKind::DownloadBundle);
        world.host.crash_after(n);
        world.run_to_end().await;
        assert_eq!(world.restarts, 0);
        assert_eq!(world.host.file(fake::LIVE), Some(binary(V1)));
        match world.phase() {
            Some(SignalPhase::Completed) => {
                assert_eq!(world.host.file("images/bundle.tar"), Some(bundle.clone()));
            }
            Some(SignalPhase::FailedDownload) => {
                assert_eq!(world.host.file("images/bundle.tar"), None);
            }
            other => panic!("crash after {n}: ended in {other:?}"),
        }
    }
}

// === Rollback (DESIGN §15) ===

/// The rollback the leader signals for command 0 of the update's run: put back `version`.
fn rollback_signal(of: RollbackOf, version: &str) -> SignalData {
    SignalData {
        created: "2026-11-23T00:00:00Z".into(),
        command: SignalCommand {
            rollback: Some(CommandRollback { version: version.into(), of }),
            preflight: None,
            id: 0,
            k0supdate: None,
            airgapupdate: None,
        },
        ..update_signal()
    }
}

/// A node that completed the update to V2 (so `k0s.prev` is V1) and is now signalled to
/// roll it back to `version`.
async fn updated_then_signalled_back(version: &str) -> World {
    let mut world = World::new(update_signal());
    world.run_to_end().await;
    world.assert_updated();
    world.signal = rollback_signal(RollbackOf::K0s, version);
    world.history.clear();
    world.restarts = 0;
    world
}

fn assert_rolled_back(world: &World) {
    assert_eq!(world.phase(), Some(SignalPhase::Completed), "{:?}", world.history);
    assert_eq!(world.host.file(fake::LIVE), Some(binary(V1)));
    // The swap keeps the binary it replaces, as after any update.
    assert_eq!(world.host.file(fake::PREVIOUS), Some(binary(V2)));
    assert_eq!(world.host.file(fake::STAGED), None);
    assert_eq!(world.running, V1);
    world.assert_history_in_order();
}

#[tokio::test]
async fn a_clean_rollback_walks_the_updates_phases_and_puts_k0s_prev_back_without_a_download() {
    let mut world = updated_then_signalled_back(V1).await;
    let before = world.host.log().len();
    world.run_to_end().await;
    assert_rolled_back(&world);
    assert_eq!(
        world.history,
        vec![
            SignalPhase::Downloading,
            SignalPhase::Cordoning,
            SignalPhase::ApplyingUpdate,
            SignalPhase::Restarting,
            SignalPhase::Uncordoning,
            SignalPhase::Completed,
        ]
    );
    assert_eq!(world.restarts, 1);
    let log = world.host.log()[before..].to_vec();
    assert!(log.iter().all(|line| !line.starts_with("stage ")), "nothing downloaded: {log:?}");
    assert!(log.contains(&"copy k0s.prev to k0s.tmp".to_string()), "{log:?}");
}

#[tokio::test]
async fn a_crash_at_every_point_of_a_rollback_still_converges_to_the_previous_binary() {
    let points = {
        let mut world = updated_then_signalled_back(V1).await;
        let before = world.host.mutations();
        world.run_to_end().await;
        world.host.mutations() - before
    };
    assert!(points >= 6, "a rollback has a few crash points: {points}");
    for n in 0..points {
        let mut world = updated_then_signalled_back(V1).await;
        world.host.crash_after(n);
        world.run_to_end().await;
        assert_rolled_back(&world);
    }
}

#[tokio::test]
async fn a_rollback_whose_k0s_prev_runs_another_version_fails_before_the_node_is_cordoned() {
    let before = "v1.34.9+k0s.0";
    let mut world = updated_then_signalled_back(before).await;
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::Failed));
    assert_eq!(
        world.reason(),
        format!("k0s.prev runs {V1}, not the version this node ran before the run ({before})")
    );
    assert_eq!(world.history, vec![SignalPhase::Downloading, SignalPhase::Failed]);
    assert_eq!(world.host.file(fake::LIVE), Some(binary(V2)), "the live binary is untouched");
    assert_eq!(world.host.file(fake::PREVIOUS), Some(binary(V1)));
    assert_eq!(world.host.file(fake::STAGED), None, "nothing stays staged");
    assert_eq!(world.restarts, 0);
}

#[tokio::test]
async fn a_rollback_without_k0s_prev_fails_naming_what_is_missing() {
    // A node that never updated: no `k0s.prev`, and it runs V1, not the version asked for.
    let mut world = World::new(rollback_signal(RollbackOf::K0s, "v1.34.9+k0s.0"));
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::Failed));
    assert_eq!(world.reason(), "no k0s.prev to roll back to");
    assert_eq!(world.host.file(fake::LIVE), Some(binary(V1)));
    assert_eq!(world.host.files(), vec![fake::LIVE.to_string()], "nothing written");
}

#[tokio::test]
async fn a_rollback_on_a_node_that_already_runs_the_from_version_completes_at_once() {
    let mut world = World::new(rollback_signal(RollbackOf::K0s, V1));
    world.run_to_end().await;
    assert_eq!(world.history, vec![SignalPhase::Completed]);
    assert_eq!(world.host.files(), vec![fake::LIVE.to_string()]);
    // After a completed rollback too: the same signal again is a no-op.
    let mut world = updated_then_signalled_back(V1).await;
    world.run_to_end().await;
    let files = world.host.files();
    world.signal.status = None;
    world.history.clear();
    world.run_to_end().await;
    assert_eq!(world.history, vec![SignalPhase::Completed]);
    assert_eq!(world.host.files(), files);
}

/// An airgap update of `run` (command 0) bringing the bundle served at `url`.
fn bundle_signal(run: &str, url: &str, bundle: &[u8]) -> SignalData {
    SignalData {
        command: SignalCommand {
            rollback: None,
            preflight: None,
            id: 0,
            k0supdate: None,
            airgapupdate: Some(CommandAirgapUpdate {
                url: url.into(),
                version: V2.into(),
                sha256: sha256_hex(bundle),
            }),
        },
        run_id: Some(run.into()),
        ..update_signal()
    }
}

fn airgap_rollback(run: &str) -> SignalData {
    SignalData { run_id: Some(run.into()), ..rollback_signal(RollbackOf::Airgap, V1) }
}

#[tokio::test]
async fn an_airgap_rollback_puts_back_the_bundle_the_run_replaced_at_every_crash_point() {
    let url = "http://127.0.0.1:8080/dist/bundle.tar";
    let (old, new) = (b"images v1".to_vec(), b"images v2".to_vec());
    let stored = |world: &World| world.host.file("images/bundle.tar");
    for n in 0..=4 {
        let mut world = World::new(bundle_signal("uid/1", url, &old));
        world.host.serve(url, &old);
        world.run_to_end().await;
        world.signal = bundle_signal("uid/2", url, &new);
        world.host.serve(url, &new);
        world.run_to_end().await;
        assert_eq!(stored(&world), Some(new.clone()));

        world.signal = airgap_rollback("uid/2");
        world.history.clear();
        world.host.crash_after(n);
        world.run_to_end().await;
        assert_eq!(world.phase(), Some(SignalPhase::Completed), "crash after {n}");
        assert_eq!(stored(&world), Some(old.clone()), "crash after {n}");
        assert_eq!(world.restarts, 0);
        assert_eq!(world.host.file(fake::LIVE), Some(binary(V1)));

        // Only the last run's bundle was kept: the earlier run cannot be rolled back.
        world.signal = airgap_rollback("uid/1");
        world.run_to_end().await;
        assert_eq!(world.phase(), Some(SignalPhase::Failed));
        assert!(world.reason().contains("is from command 0 of run uid/2"), "{}", world.reason());
        assert_eq!(stored(&world), Some(old.clone()));
    }
}

#[tokio::test]
async fn an_airgap_rollback_removes_a_bundle_the_run_added_and_fails_without_a_kept_one() {
    let url = "http://127.0.0.1:8080/dist/bundle.tar";
    let bundle = b"images v2".to_vec();
    let mut world = World::new(airgap_rollback("uid/1"));
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::Failed));
    assert_eq!(world.reason(), "no previous airgap bundle to roll back to: this node kept none");

    let mut world = World::new(bundle_signal("uid/1", url, &bundle));
    world.host.serve(url, &bundle);
    world.run_to_end().await;
    assert_eq!(world.host.file("images/bundle.tar"), Some(bundle));
    world.signal = airgap_rollback("uid/1");
    world.run_to_end().await;
    assert_eq!(world.phase(), Some(SignalPhase::Completed));
    assert_eq!(world.host.file("images/bundle.tar"), None);
}
