//! The trial boot of a new binary, and the rollback when it fails (DESIGN §11).
//!
//! The process that prepared the restart (running the old, proven binary) does not hand its
//! place to the new binary blindly. It stops its own work and starts the staged binary as
//! a child with the same arguments and [`TRIAL_ENV`] set: the child boots the node's real
//! startup path (connect, install and register: its `ControlNode` for a controller, its
//! `Node` with a fresh Ready heartbeat for a worker) and, once that worked, writes the token
//! it was given into [`PROOF_FILE`] and exits. Only then is the new binary proven: it is
//! swapped in (the running binary kept as `k0s.prev`), the marker records the pass, and the
//! process re-executes (or exits for its supervisor) into it. If the child exits before that
//! (three times: a crash loop), or is not healthy within the trial deadline counted only
//! while the API server answers, the node goes back to the binary it ran: the new one is
//! kept aside as `k0s.refused`, the marker records why, and the process re-executes (or
//! exits) into the unchanged live binary, whose agent then reports `Failed` with
//! `rolled back to <version>: <why>`. The live binary is never one that has not booted.
//!
//! The verdict is pure (`autopilot_engine::trial::decide`); [`run`] is the shell that spawns,
//! watches and probes.
//! What this cannot catch is written down in `docs/updating-a-cluster.md`.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use tracing::{info, warn};

use autopilot_engine::trial::{Child, Observation, Verdict, decide};

use autopilot_api::text::truncate;

use crate::host::{Host, LinuxHost, SignalKey, TrialState, WatchStart};

/// The environment variable that puts a process on trial: its value is the token the
/// process writes into [`PROOF_FILE`] once it is healthy, before it exits.
pub const TRIAL_ENV: &str = "K0S_AUTOPILOT_TRIAL";

/// The file in the data directory where a process on trial proves it became healthy.
pub const PROOF_FILE: &str = "autopilot-trial-proof";

/// How often the parent looks at the child and probes the API server.
const TICK: Duration = Duration::from_millis(100);

/// How often the API server is probed during a trial.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long a proven child gets to exit by itself before it is stopped: it stops the
/// Kubernetes components it started first, one after the other, each within its own grace
/// (a controller+worker's five take up to 25 s). Stopped earlier, it left them running for
/// the restarted node to find: a trial's API server outlived the trial, and a trial's
/// kubelet ran on while the restarted node started containerd again.
const CHILD_EXIT_GRACE: Duration = Duration::from_secs(40);

/// How long a child asked to stop (SIGTERM) gets before it is killed.
const CHILD_STOP_GRACE: Duration = Duration::from_secs(10);

/// How a trial ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// There was no trial to run (no pending restart marker of this process).
    NoTrial,
    /// The new binary passed; restart into it.
    Passed,
    /// The previous binary is back; restart into it.
    RolledBack(String),
}

/// What the trial needs to know about this process.
#[derive(Clone, Debug)]
pub struct TrialConfig {
    /// The arguments to start it with (this process's own).
    pub args: Vec<std::ffi::OsString>,
    /// How long the new binary may take to become healthy while the API server answers.
    pub deadline: Duration,
    /// The version this process runs (what a rollback puts back).
    pub version: String,
    /// How long the new binary is watched after a pass (`--post-update-watch`; zero: not).
    pub post_update_watch: Duration,
    /// This process runs the API server its client talks to (`k0s controller
    /// --run-components`): that API server is stopped with the process and comes back with
    /// the new binary, so the deadline counts whether or not it answers.
    pub own_api_server: bool,
}

/// Runs the trial boot of the staged binary for the restart this process prepared, then
/// swaps it in (pass) or refuses it (rollback). `client` only probes whether the API server
/// answers. Whatever happens, the live binary is then one that can run: the one this
/// process runs, or the staged one after it passed.
pub async fn run(
    host: &LinuxHost,
    config: &TrialConfig,
    client: &kube::Client,
) -> anyhow::Result<Outcome> {
    let marker = host.read_marker()?;
    let Some(marker) = marker.filter(|m| m.instance == host.instance()) else {
        return Ok(Outcome::NoTrial);
    };
    let signal = marker.signal.clone();
    match marker.trial {
        TrialState::Pending => {}
        TrialState::Passed => return Ok(Outcome::Passed),
        TrialState::RolledBack { reason, .. } => return Ok(Outcome::RolledBack(reason)),
    }
    if !host.has_staged() {
        // Swapped in by an earlier process that passed the trial and died before recording
        // it (this process then runs the new binary), or lost: restart into what is live.
        info!("no staged binary to try; restarting into the live binary");
        return conclude(host, &signal, Verdict::Pass, &config.version, None);
    }
    let post_update = WatchStart {
        window: config.post_update_watch,
        from: config.version.clone(),
        to: host.staged_version(),
    };
    let proof_path = host.data_dir().join(PROOF_FILE);
    let token = format!("{}-{}", host.instance(), std::process::id());
    let staged = host.staged_path();
    executable_for_trial(&staged)?;
    info!(binary = %staged.display(), deadline = ?config.deadline, "trial boot of the new binary");
    let started = tokio::time::Instant::now();
    let verdict = watch(&staged, config, &proof_path, &token, client).await?;
    let _ = std::fs::remove_file(&proof_path);
    info!(took = ?started.elapsed(), ?verdict, "trial boot over");
    let watched = watched(host).then_some(&post_update);
    conclude(host, &signal, verdict, &config.version, watched)
}

/// A staged binary is executable only while it is tried (as in its self-test); the swap or
/// the rollback that follows sets its mode for good.
fn executable_for_trial(staged: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::set_permissions(staged, std::fs::Permissions::from_mode(0o755)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("making {} executable for its trial", staged.display()))
        }
        Ok(()) | Err(_) => Ok(()),
    }
}

/// Whether the staged binary gets a post-update watch once it passed: not when it has
/// `k0s.prev`'s very bytes (a fleet rollback, which stages a copy of `k0s.prev`, or a run
/// back to the version this node ran before). That binary ran here before the one it
/// replaces; a watch would only have the replaced binary to put back, which would undo the
/// rollback the operator asked for.
fn watched(host: &LinuxHost) -> bool {
    let digest = |path: &Path| crate::host::linux::sha256_file(path).ok().flatten();
    let back_to_previous = digest(&host.previous_path())
        .is_some_and(|previous| digest(&host.staged_path()) == Some(previous));
    if back_to_previous {
        info!("the new binary is k0s.prev's: it ran here before, no post-update watch");
    }
    !back_to_previous
}

/// Acts on a trial's verdict: a pass swaps the staged binary in (keeping the running one as
/// `k0s.prev`) and records the pass; a rollback keeps the refused binary aside and records
/// why. A swap that keeps failing turns the pass into a rollback. A pass starts the
/// post-update watch `watch` describes (see `crate::post_update`). Idempotent.
pub fn conclude(
    host: &impl Host,
    signal: &SignalKey,
    verdict: Verdict,
    running_version: &str,
    watch: Option<&WatchStart>,
) -> anyhow::Result<Outcome> {
    let reason = match verdict {
        Verdict::Pass => {
            let mut last = None;
            for _ in 0..3 {
                match host.swap_binary() {
                    Ok(()) => {
                        host.pass_trial(signal, watch).context("recording the passed trial")?;
                        return Ok(Outcome::Passed);
                    }
                    Err(err) => last = Some(err.reason()),
                }
            }
            format!(
                "the new binary passed its trial boot but could not be put in place: {}",
                last.unwrap_or_default()
            )
        }
        Verdict::RollBack(reason) => reason,
        Verdict::Wait | Verdict::StartAgain => anyhow::bail!("the trial has no verdict yet"),
    };
    warn!(%reason, to = running_version, "the new binary is refused; rolling back");
    let reason = truncate(&reason, 512);
    host.roll_back(signal, running_version, &reason).context("refusing the new binary")?;
    Ok(Outcome::RolledBack(reason))
}

/// The token this process is on trial with, if it is (see [`TRIAL_ENV`]).
pub fn token() -> Option<String> {
    std::env::var(TRIAL_ENV).ok().filter(|t| !t.is_empty())
}

/// Proves, as the child of a trial, that this process became healthy: writes `token` into
/// [`PROOF_FILE`] in `data_dir` (whole, by rename). The caller exits afterwards.
pub fn prove(data_dir: &Path, token: &str) -> anyhow::Result<()> {
    let path = data_dir.join(PROOF_FILE);
    let temp = data_dir.join(format!(".{PROOF_FILE}.{}.tmp", std::process::id()));
    std::fs::write(&temp, token).with_context(|| format!("writing {}", temp.display()))?;
    std::fs::rename(&temp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    info!(proof = %path.display(), "healthy on trial; proof written");
    Ok(())
}

/// Spawns and watches the child until a verdict other than wait.
async fn watch(
    binary: &Path,
    config: &TrialConfig,
    proof_path: &Path,
    token: &str,
    client: &kube::Client,
) -> anyhow::Result<Verdict> {
    let _ = std::fs::remove_file(proof_path);
    let mut starts = 1;
    let mut child = spawn(binary, config, token);
    let mut reachable_for = Duration::ZERO;
    let mut answered = false;
    let mut next_probe = tokio::time::Instant::now();
    let mut last_tick = tokio::time::Instant::now();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        // Time counts against the deadline only while the API server answered.
        let now = tokio::time::Instant::now();
        if answered {
            reachable_for += now - last_tick;
        }
        last_tick = now;
        if now >= next_probe {
            answered = config.own_api_server || answers(client).await;
            next_probe = tokio::time::Instant::now() + PROBE_EVERY;
        }
        let state = child.state().await;
        let proof = std::fs::read_to_string(proof_path).is_ok_and(|t| t.trim() == token);
        let seen = Observation { child: state, proof, starts, reachable_for };
        match decide(&seen, config.deadline) {
            Verdict::Wait => {}
            Verdict::StartAgain => {
                warn!(child = ?seen.child, starts, "the new binary exited during its trial; starting it again");
                tokio::time::sleep(Duration::from_millis(500 * u64::from(starts))).await;
                starts += 1;
                child = spawn(binary, config, token);
            }
            verdict @ Verdict::Pass => {
                child.finish(CHILD_EXIT_GRACE).await;
                return Ok(verdict);
            }
            Verdict::RollBack(reason) => {
                child.stop(Duration::from_secs(2)).await;
                // What the child last said of its components (`k0s` runs them), if anything.
                let data_dir = proof_path.parent().unwrap_or(Path::new("."));
                let reason = match autopilot_shell::health::take_trial_reason(data_dir) {
                    Some(components) => format!("{reason}: {components}"),
                    None => reason,
                };
                return Ok(Verdict::RollBack(reason));
            }
        }
    }
}

/// Whether the API server answers at all (any HTTP answer but 5xx/429 counts).
pub(crate) async fn answers(client: &kube::Client) -> bool {
    match tokio::time::timeout(Duration::from_secs(2), client.apiserver_version()).await {
        Ok(Ok(_)) => true,
        Ok(Err(err)) => {
            !autopilot_shell::retry::is_transient(&err) && matches!(err, kube::Error::Api(_))
        }
        Err(_elapsed) => false,
    }
}

/// The child of a trial.
struct TrialChild {
    child: Option<tokio::process::Child>,
    spawn_error: Option<String>,
    last_line: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// The task copying the child's stderr; it ends at the pipe's end.
    forwarder: Option<tokio::task::JoinHandle<()>>,
    exited: Option<String>,
}

/// How long an exited child's last stderr lines may take to be read (the pipe ends when the
/// child exits, unless a process it started still holds it).
const STDERR_DRAIN: Duration = Duration::from_secs(2);

fn spawn(binary: &Path, config: &TrialConfig, token: &str) -> TrialChild {
    let last_line = std::sync::Arc::new(std::sync::Mutex::new(None));
    let spawned = tokio::process::Command::new(binary)
        .args(&config.args)
        .env(TRIAL_ENV, token)
        // The supervisor's watchdog is the parent's: a child on trial never notifies it.
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    match spawned {
        Ok(mut child) => {
            let forwarder = child.stderr.take().map(|stderr| {
                let last = last_line.clone();
                tokio::spawn(forward_stderr(stderr, last))
            });
            TrialChild { child: Some(child), spawn_error: None, last_line, forwarder, exited: None }
        }
        Err(e) => TrialChild {
            child: None,
            spawn_error: Some(format!("cannot be started: {e}")),
            last_line,
            forwarder: None,
            exited: None,
        },
    }
}

/// Copies the child's stderr to ours (the node's log), remembering the last line.
async fn forward_stderr(
    stderr: tokio::process::ChildStderr,
    last: std::sync::Arc<std::sync::Mutex<Option<String>>>,
) {
    use tokio::io::AsyncBufReadExt as _;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        eprintln!("{line}");
        let trimmed = line.trim();
        if !trimmed.is_empty() {
            *last.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(truncate(trimmed, 300));
        }
    }
}

impl TrialChild {
    async fn state(&mut self) -> Child {
        if let Some(error) = &self.spawn_error {
            return Child::Exited { status: error.clone(), last_line: None };
        }
        if self.exited.is_none()
            && let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            self.exited = Some(status.to_string());
            // Its last words may still be in the pipe: read them before quoting them.
            if let Some(forwarder) = self.forwarder.take() {
                let _ = tokio::time::timeout(STDERR_DRAIN, forwarder).await;
            }
        }
        match &self.exited {
            Some(status) => Child::Exited {
                status: status.clone(),
                last_line: self
                    .last_line
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone(),
            },
            None => Child::Running,
        }
    }

    /// Lets a proven child exit by itself within `grace` (it stops what it started first),
    /// then stops it ([`TrialChild::stop`]), and reaps it.
    async fn finish(&mut self, grace: Duration) {
        let Some(child) = self.child.as_mut() else { return };
        if self.exited.is_some() {
            return;
        }
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            return;
        }
        warn!(?grace, "the proven new binary did not exit by itself; stopping it");
        self.stop(CHILD_STOP_GRACE).await;
    }

    /// Asks the child to stop (SIGTERM), kills it after `grace`, and reaps it.
    async fn stop(&mut self, grace: Duration) {
        let Some(child) = self.child.as_mut() else { return };
        if self.exited.is_some() {
            return;
        }
        if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
            // Ask politely first: a healthy child stops its work cleanly on SIGTERM.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            let _ = child.kill().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::download::DownloadConfig;

    #[test]
    fn a_binary_with_k0s_prevs_bytes_gets_no_post_update_watch_any_other_does() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let live = dir.path().join("k0s");
        std::fs::write(&live, b"v2").expect("live");
        let host = LinuxHost::new(live, dir.path().join("data"), DownloadConfig::default())
            .expect("a host");
        std::fs::write(host.previous_path(), b"v1").expect("k0s.prev");
        // A new binary: watched.
        std::fs::write(host.staged_path(), b"v3").expect("staged");
        assert!(watched(&host));
        // A fleet rollback stages a copy of k0s.prev: not watched, so nothing could put
        // back the binary the operator rolled back.
        std::fs::write(host.staged_path(), b"v1").expect("staged");
        assert!(!watched(&host));
        // Without k0s.prev there is nothing to compare: watched.
        std::fs::remove_file(host.previous_path()).expect("remove k0s.prev");
        assert!(watched(&host));
    }
}
