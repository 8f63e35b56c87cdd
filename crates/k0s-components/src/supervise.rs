//! Supervision of one component process (containerd, the kubelet, …): start it, restart it
//! with the [`Backoff`] when it exits, keep its output, and stop it when asked.
//!
//! - **Output:** its stdout and stderr are `<log-dir>/<name>.log` itself (appended), so it
//!   never writes into a pipe that a killed `k0s` closed (a Go program dies of SIGPIPE on
//!   its next log line then). A follower copies each new line into this process's log (the
//!   journal, under the unit) with the field `component`, and moves the file to
//!   `<name>.log.1` at [`MAX_LOG_BYTES`] (copy, then truncate: the component keeps its file
//!   open), so the two files stay bounded. Errors quote the file's last lines.
//! - **Its own process group**, so a Ctrl-C in a terminal reaches `k0s` only, which stops its
//!   components in order.
//! - **A pid file** `<run-dir>/<name>.pid`: a `k0s` that was killed (SIGKILL, a crash) left
//!   its components running; the next start finds them there, stops them (SIGTERM, then
//!   SIGKILL after the grace period) and starts its own. Only a process whose executable is
//!   the component's path is stopped. Containers outlive this: containerd's shims hold them.
//! - **Stop:** SIGTERM, SIGKILL after the grace period.

use std::{
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::Context as _;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::restart::{Backoff, Streak};

/// A log file is moved aside once it is this long.
pub const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;

/// Lines of output quoted in errors.
const KEPT_LINES: usize = 20;

/// The longest line copied whole into this process's log (a longer one is cut).
const MAX_LINE: usize = 16 * 1024;

/// How often the follower looks for new output.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// The most the follower reads at one look.
const FOLLOW_CHUNK: u64 = 1024 * 1024;

/// One component process to supervise.
#[derive(Clone, Debug)]
pub struct Child {
    /// Its name (log file, pid file, the `component` log field).
    pub name: &'static str,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Environment variables set on top of this process's.
    pub env: Vec<(OsString, OsString)>,
    /// Where its log file goes.
    pub log_dir: PathBuf,
    /// Where its pid file goes.
    pub run_dir: PathBuf,
    /// How long it gets to stop after SIGTERM.
    pub stop_grace: Duration,
}

/// What is known of a supervised process, as it runs.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Its pid while it runs.
    pub pid: Option<u32>,
    /// How many times it was started again after an exit.
    pub restarts: u32,
    /// How its last run ended, if it did.
    pub last_exit: Option<String>,
}

/// A supervised component process; [`Supervised::stop`] stops it.
pub struct Supervised {
    name: &'static str,
    observed: tokio::sync::watch::Receiver<Observed>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    follower: tokio::task::JoinHandle<()>,
    log_path: PathBuf,
}

impl Supervised {
    /// Starts `child` (after stopping what a previous `k0s` left running under its pid file)
    /// and keeps it running until [`Supervised::stop`]. Fails only when the first start
    /// fails (the executable cannot be run).
    pub async fn start(child: Child, policy: Backoff) -> anyhow::Result<Self> {
        fs::create_dir_all(&child.log_dir)
            .with_context(|| format!("creating {}", child.log_dir.display()))?;
        fs::create_dir_all(&child.run_dir)
            .with_context(|| format!("creating {}", child.run_dir.display()))?;
        let log_path = child.log_dir.join(format!("{}.log", child.name));
        stop_leftover(&child).await;
        let first = spawn(&child, &log_path)?;
        let (tx, observed) =
            tokio::sync::watch::channel(Observed { pid: first.id(), ..Observed::default() });
        let stop = CancellationToken::new();
        let follower = tokio::spawn(follow(child.name, log_path.clone(), stop.clone()));
        let task = tokio::spawn(supervise(
            child.clone(),
            policy,
            first,
            tx,
            log_path.clone(),
            stop.clone(),
        ));
        Ok(Self { name: child.name, observed, stop, task, follower, log_path })
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What is known of it now.
    pub fn observed(&self) -> Observed {
        self.observed.borrow().clone()
    }

    /// A receiver that sees each change of [`Supervised::observed`].
    pub fn watch(&self) -> tokio::sync::watch::Receiver<Observed> {
        self.observed.clone()
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last lines of its log file, oldest first.
    pub fn last_lines(&self) -> Vec<String> {
        last_lines(&self.log_path)
    }

    /// Stops it (SIGTERM, SIGKILL after its grace period) and waits until it has.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
        let _ = self.follower.await;
    }
}

/// The last [`KEPT_LINES`] lines of the file at `path` (from its last 16 KiB).
fn last_lines(path: &Path) -> Vec<String> {
    use std::io::{Read as _, Seek as _};
    let Ok(mut file) = fs::File::open(path) else { return Vec::new() };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(16 * 1024);
    let mut tail = Vec::new();
    if file.seek(std::io::SeekFrom::Start(from)).is_err() || file.read_to_end(&mut tail).is_err() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&tail);
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    if from > 0 && !lines.is_empty() {
        lines.remove(0); // cut in the middle
    }
    let start = lines.len().saturating_sub(KEPT_LINES);
    lines.split_off(start)
}

/// Starts one run of `child`, its output appended to `log_path`.
fn spawn(child: &Child, log_path: &Path) -> anyhow::Result<tokio::process::Child> {
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let err = out.try_clone().with_context(|| format!("opening {}", log_path.display()))?;
    let mut command = tokio::process::Command::new(&child.program);
    command
        .args(&child.args)
        .envs(child.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(false);
    let process = command
        .spawn()
        .with_context(|| format!("starting {} ({})", child.name, child.program.display()))?;
    if let Some(pid) = process.id() {
        let pid_file = pid_file(child);
        if let Err(err) = fs::write(&pid_file, format!("{pid}\n")) {
            warn!(component = child.name, path = %pid_file.display(), %err, "cannot write the pid file");
        }
        info!(component = child.name, pid, program = %child.program.display(), "started");
    }
    Ok(process)
}

/// Copies each new line of `path` into this process's log until `stop` (then once more),
/// and moves the file aside when it is full.
async fn follow(name: &'static str, path: PathBuf, stop: CancellationToken) {
    let mut follower =
        Follower { offset: fs::metadata(&path).map(|m| m.len()).unwrap_or(0), partial: Vec::new() };
    loop {
        let stopping = tokio::select! {
            () = stop.cancelled() => true,
            () = tokio::time::sleep(FOLLOW_EVERY) => false,
        };
        for line in follower.read_new(&path) {
            info!(target: "k0s::component", component = name, "{line}");
        }
        if stopping {
            return;
        }
        if fs::metadata(&path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
            rotate(&path);
            follower.offset = 0;
            follower.partial.clear();
        }
    }
}

/// Where the follower is in a log file.
struct Follower {
    offset: u64,
    /// The start of a line not ended yet (at most [`MAX_LINE`] bytes).
    partial: Vec<u8>,
}

impl Follower {
    /// The whole lines written since the last look (a file that shrank is read from its
    /// start).
    fn read_new(&mut self, path: &Path) -> Vec<String> {
        use std::io::{Read as _, Seek as _};
        let Ok(mut file) = fs::File::open(path) else { return Vec::new() };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        let mut chunk = Vec::new();
        if file.seek(std::io::SeekFrom::Start(self.offset)).is_err()
            || file.take(FOLLOW_CHUNK).read_to_end(&mut chunk).is_err()
        {
            return Vec::new();
        }
        self.offset += chunk.len() as u64;
        let mut lines = Vec::new();
        for byte in chunk {
            if byte == b'\n' {
                lines.push(String::from_utf8_lossy(&self.partial).into_owned());
                self.partial.clear();
            } else if self.partial.len() < MAX_LINE {
                self.partial.push(byte);
            }
        }
        lines
    }
}

/// Moves a full log file to `<file>.1`: a copy, then the file truncated in place (the
/// component appends to the same open file).
fn rotate(path: &Path) {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".1");
    if fs::copy(path, &aside).is_ok()
        && let Ok(file) = fs::OpenOptions::new().write(true).open(path)
    {
        let _ = file.set_len(0);
    }
}

/// Runs `child` until `stop`: restarts it after each exit, as `policy` says.
async fn supervise(
    child: Child,
    policy: Backoff,
    mut process: tokio::process::Child,
    observed: tokio::sync::watch::Sender<Observed>,
    log_path: PathBuf,
    stop: CancellationToken,
) {
    let mut streak = Streak::default();
    loop {
        let started = tokio::time::Instant::now();
        let status = tokio::select! {
            status = process.wait() => status,
            () = stop.cancelled() => {
                terminate(&child, &mut process).await;
                observed.send_modify(|o| o.pid = None);
                return;
            }
        };
        let exit = match status {
            Ok(status) => status.to_string(),
            Err(err) => format!("cannot wait for it: {err}"),
        };
        let (next, wait) = policy.after_exit(streak, started.elapsed());
        streak = next;
        warn!(component = child.name, %exit, restart_in = ?wait, "exited; restarting");
        observed.send_modify(|o| {
            o.pid = None;
            o.last_exit = Some(exit.clone());
        });
        let _ = fs::remove_file(pid_file(&child));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return,
        }
        loop {
            match spawn(&child, &log_path) {
                Ok(started) => {
                    process = started;
                    observed.send_modify(|o| {
                        o.pid = process.id();
                        o.restarts += 1;
                    });
                    break;
                }
                Err(err) => {
                    let (next, wait) = policy.after_exit(streak, Duration::ZERO);
                    streak = next;
                    warn!(component = child.name, error = %format!("{err:#}"), restart_in = ?wait, "cannot start");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = stop.cancelled() => return,
                    }
                }
            }
        }
    }
}

/// SIGTERM, then SIGKILL after the grace period; reaps it and removes its pid file.
async fn terminate(child: &Child, process: &mut tokio::process::Child) {
    if let Some(pid) = process.id() {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        if tokio::time::timeout(child.stop_grace, process.wait()).await.is_err() {
            warn!(component = child.name, grace = ?child.stop_grace, "did not stop in time; killing it");
            let _ = process.start_kill();
            let _ = process.wait().await;
        }
        info!(component = child.name, pid, "stopped");
    }
    let _ = fs::remove_file(pid_file(child));
}

fn pid_file(child: &Child) -> PathBuf {
    child.run_dir.join(format!("{}.pid", child.name))
}

/// Stops the process a previous run left under `child`'s pid file, if it still runs that
/// component's executable (a pid reused by anything else is left alone).
async fn stop_leftover(child: &Child) {
    let path = pid_file(child);
    let Some(pid) = fs::read_to_string(&path).ok().and_then(|t| t.trim().parse::<i32>().ok())
    else {
        return;
    };
    let _ = fs::remove_file(&path);
    if pid <= 1 || !runs(pid, &child.program) {
        return;
    }
    info!(component = child.name, pid, "stopping the one a previous run left running");
    let pid = Pid::from_raw(pid);
    let _ = nix::sys::signal::kill(pid, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + child.stop_grace;
    while tokio::time::Instant::now() < deadline {
        if nix::sys::signal::kill(pid, None).is_err() || is_zombie(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    warn!(component = child.name, %pid, "did not stop in time; killing it");
    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
}

/// Whether process `pid` runs `program` (its executable, also when it was replaced since).
fn runs(pid: i32, program: &Path) -> bool {
    let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) else { return false };
    let program = fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let exe = exe.to_string_lossy();
    let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
    Path::new(exe) == program
}

fn is_zombie(pid: Pid) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(dir: &Path, name: &'static str, script: &str) -> Child {
        Child {
            name,
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
            log_dir: dir.join("log"),
            run_dir: dir.join("run"),
            stop_grace: Duration::from_secs(2),
        }
    }

    async fn until(deadline: Duration, mut check: impl FnMut() -> bool) -> bool {
        let end = tokio::time::Instant::now() + deadline;
        while tokio::time::Instant::now() < end {
            if check() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        check()
    }

    #[tokio::test]
    async fn a_component_that_exits_is_started_again_and_its_output_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let child = shell(dir.path(), "flaky", "echo started $$; exit 3");
        let policy = Backoff { first: Duration::from_millis(10), ..Backoff::default() };
        let supervised = Supervised::start(child, policy).await.unwrap();
        assert!(until(Duration::from_secs(10), || supervised.observed().restarts >= 2).await);
        let observed = supervised.observed();
        assert_eq!(observed.last_exit.as_deref(), Some("exit status: 3"));
        let log = fs::read_to_string(supervised.log_path()).unwrap();
        assert!(log.lines().filter(|l| l.starts_with("started ")).count() >= 3, "{log}");
        assert!(supervised.last_lines().iter().all(|l| l.starts_with("started ")));
        supervised.stop().await;
    }

    #[tokio::test]
    async fn stop_terminates_it_and_removes_its_pid_file() {
        let dir = tempfile::tempdir().unwrap();
        let child = shell(dir.path(), "sleeper", "exec sleep 600");
        let supervised = Supervised::start(child, Backoff::default()).await.unwrap();
        let pid = supervised.observed().pid.unwrap();
        let pid_file = dir.path().join("run/sleeper.pid");
        assert_eq!(fs::read_to_string(&pid_file).unwrap().trim(), pid.to_string());
        supervised.stop().await;
        assert!(nix::sys::signal::kill(Pid::from_raw(pid as i32), None).is_err(), "still runs");
        assert!(!pid_file.exists());
    }

    #[tokio::test]
    async fn a_component_left_running_by_a_killed_run_is_stopped_before_a_new_one_starts() {
        let dir = tempfile::tempdir().unwrap();
        // What a killed k0s leaves: a component still running, its pid in the pid file.
        let mut leftover = std::process::Command::new("/bin/sleep").arg("600").spawn().unwrap();
        fs::create_dir_all(dir.path().join("run")).unwrap();
        fs::write(dir.path().join("run/sleep.pid"), format!("{}\n", leftover.id())).unwrap();
        let child = Child {
            name: "sleep",
            program: "/bin/sleep".into(),
            args: vec!["600".into()],
            env: Vec::new(),
            log_dir: dir.path().join("log"),
            run_dir: dir.path().join("run"),
            stop_grace: Duration::from_secs(2),
        };
        let supervised = Supervised::start(child, Backoff::default()).await.unwrap();
        let status = leftover.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(15));
        assert_ne!(supervised.observed().pid, Some(leftover.id()));
        supervised.stop().await;
    }

    #[tokio::test]
    async fn a_pid_file_naming_another_program_stops_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut other = std::process::Command::new("/bin/sleep").arg("600").spawn().unwrap();
        fs::create_dir_all(dir.path().join("run")).unwrap();
        fs::write(dir.path().join("run/sh.pid"), format!("{}\n", other.id())).unwrap();
        let supervised =
            Supervised::start(shell(dir.path(), "sh", "exec sleep 600"), Backoff::default())
                .await
                .unwrap();
        assert!(other.try_wait().unwrap().is_none(), "the unrelated process was stopped");
        supervised.stop().await;
        other.kill().unwrap();
        other.wait().unwrap();
    }

    #[test]
    fn a_log_file_is_moved_aside_when_it_is_full_and_the_follower_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.log");
        fs::write(&path, "one\ntwo\nthr").unwrap();
        let mut follower = Follower { offset: 0, partial: Vec::new() };
        assert_eq!(follower.read_new(&path), ["one", "two"]);
        fs::write(&path, "one\ntwo\nthree\n").unwrap();
        assert_eq!(follower.read_new(&path), ["three"], "the partial line completed");
        rotate(&path);
        assert_eq!(fs::read_to_string(dir.path().join("c.log.1")).unwrap(), "one\ntwo\nthree\n");
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        fs::write(&path, "four\n").unwrap();
        assert_eq!(follower.read_new(&path), ["four"], "read from the start after the truncation");
        assert_eq!(last_lines(&path), ["four"]);
    }

    #[tokio::test]
    async fn a_component_outlives_the_end_of_its_supervisor_process() {
        // Its output is its log file, not a pipe: nothing breaks when the supervisor is gone
        // (here: its follower stops reading, as when k0s is killed).
        let dir = tempfile::tempdir().unwrap();
        let child = shell(dir.path(), "talker", "while :; do echo tick; sleep 0.05; done");
        let supervised = Supervised::start(child, Backoff::default()).await.unwrap();
        let pid = supervised.observed().pid.unwrap();
        supervised.follower.abort();
        let log = supervised.log_path().to_path_buf();
        let grew = until(Duration::from_secs(5), || {
            fs::read_to_string(&log).is_ok_and(|t| t.lines().count() >= 20)
        })
        .await;
        assert!(grew, "it goes on writing");
        assert!(nix::sys::signal::kill(Pid::from_raw(pid as i32), None).is_ok(), "it still runs");
        supervised.stop().await;
    }
}
