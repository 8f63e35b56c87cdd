//! Child processes the harness starts: each in its own process group, output to a log file,
//! killed (group-wide) and reaped when its owner goes away.

use std::{
    collections::BTreeSet,
    fs,
    io::{Read as _, Seek as _, SeekFrom, Write as _},
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, bail};
use nix::{
    sys::signal::{self, Signal},
    unistd::Pid,
};
use std::os::unix::process::CommandExt as _;

/// Process groups (by leader pid) that are started and not yet reaped.
///
/// A [`crate::Cluster`] shares one with every `K0sProcess` it spawns, so dropping the cluster
/// kills processes even if their handles were leaked. An entry is removed under this lock in
/// the same step that reaps the leader, so a pid in here can never have been reused.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupRegistry(Arc<Mutex<BTreeSet<i32>>>);

impl GroupRegistry {
    fn lock(&self) -> MutexGuard<'_, BTreeSet<i32>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// SIGKILLs every registered group (the leaders are reaped later by their owners).
    pub(crate) fn kill_all(&self) {
        for pid in self.lock().iter() {
            let _ = signal::killpg(Pid::from_raw(*pid), Signal::SIGKILL);
        }
    }
}

/// The state of one supervised process slot.
#[derive(Debug)]
enum State {
    /// Never started.
    Idle,
    /// Started and not reaped yet (the pid is still ours).
    Running(Child),
    /// Exited and reaped.
    Exited { pid: u32, status: ExitStatus },
}

/// One restartable child process: at most one instance runs at a time.
#[derive(Debug)]
pub(crate) struct ProcessSlot {
    state: Mutex<State>,
    registry: GroupRegistry,
    /// Set while [`ProcessSlot::kill_group_when`] traces the process: its ptrace stops are
    /// reported to every wait of this test process, so nothing else may wait for it then.
    traced: Arc<AtomicBool>,
}

impl ProcessSlot {
    pub(crate) fn new(registry: GroupRegistry) -> Self {
        Self { state: Mutex::new(State::Idle), registry, traced: Arc::new(AtomicBool::new(false)) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts `cmd` in a new process group with stdin from /dev/null and stdout+stderr appended
    /// to `log`, after writing a marker line naming the command. Fails if still running.
    pub(crate) fn start(&self, cmd: &mut Command, log: &Path) -> anyhow::Result<u32> {
        let mut state = self.lock();
        reap(&mut state, &self.registry, &self.traced);
        if let State::Running(child) = &*state {
            bail!("process {} is still running", child.id());
        }
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening log {}", log.display()))?;
        // The program and its arguments, and only the names of the variables set: a value
        // may be a secret (a proxy URL with credentials), which no log may show.
        let env: Vec<String> =
            cmd.get_envs().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        let args: Vec<_> = cmd.get_args().collect();
        writeln!(
            file,
            "==== harness: starting {:?} {args:?} (environment set: {})",
            cmd.get_program(),
            env.join(" ")
        )?;
        let stderr = file.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(file).stderr(stderr).process_group(0);
        let mut registry = self.registry.lock();
        let child = spawn_retrying_busy_text(cmd)
            .with_context(|| format!("starting {:?}", cmd.get_program()))?;
        let pid = child.id();
        registry.insert(pid_i32(pid));
        drop(registry);
        *state = State::Running(child);
        Ok(pid)
    }

    /// The pid of the current or last process.
    pub(crate) fn pid(&self) -> Option<u32> {
        match &*self.lock() {
            State::Idle => None,
            State::Running(child) => Some(child.id()),
            State::Exited { pid, .. } => Some(*pid),
        }
    }

    /// The exit status if the last process has exited (reaping it), `None` while it runs.
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
        let mut state = self.lock();
        reap(&mut state, &self.registry, &self.traced);
        match &*state {
            State::Exited { status, .. } => Some(*status),
            State::Idle | State::Running(_) => None,
        }
    }

    /// Whether a process is running right now.
    pub(crate) fn is_running(&self) -> bool {
        let mut state = self.lock();
        reap(&mut state, &self.registry, &self.traced);
        matches!(&*state, State::Running(_))
    }

    /// Sends `sig` to the process itself (not its group). Fails if it is not running.
    pub(crate) fn signal(&self, sig: Signal) -> anyhow::Result<()> {
        let mut state = self.lock();
        reap(&mut state, &self.registry, &self.traced);
        match &*state {
            State::Running(child) => signal::kill(Pid::from_raw(pid_i32(child.id())), sig)
                .with_context(|| format!("sending {sig} to {}", child.id())),
            State::Idle => bail!("process was never started"),
            State::Exited { pid, status } => bail!("process {pid} already exited ({status})"),
        }
    }

    /// SIGKILLs the whole process group if the leader is running; a no-op otherwise.
    pub(crate) fn kill_group(&self) -> anyhow::Result<()> {
        let mut state = self.lock();
        reap(&mut state, &self.registry, &self.traced);
        if let State::Running(child) = &*state {
            let pid = pid_i32(child.id());
            match signal::killpg(Pid::from_raw(pid), Signal::SIGKILL) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(err) => return Err(err).with_context(|| format!("killing group {pid}")),
            }
        }
        Ok(())
    }

    /// Waits until the process exits, polling with a deadline. Returns the exit status (also
    /// when it had already exited). Fails on timeout or if it was never started.
    pub(crate) async fn wait_exit(&self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut interval = Duration::from_millis(10);
        loop {
            {
                let mut state = self.lock();
                reap(&mut state, &self.registry, &self.traced);
                match &*state {
                    State::Idle => bail!("process was never started"),
                    State::Exited { status, .. } => return Ok(*status),
                    State::Running(child) if tokio::time::Instant::now() >= deadline => {
                        bail!("process {} did not exit within {timeout:?}", child.id())
                    }
                    State::Running(_) => {}
                }
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(Duration::from_millis(100));
        }
    }

    /// Traces the running process's main thread with ptrace(2) and SIGKILLs its process group
    /// at the first system-call stop at which `condition` holds. The process stops on entry to
    /// and exit from each system call, and `condition` is checked while it is stopped, so the
    /// kill lands right after the system call that made `condition` true (when that thread
    /// made it), however loaded the machine is. Returns once the trace is in place; while it
    /// lasts this slot does not reap the process. Other threads of the process run untraced.
    pub(crate) fn kill_group_when(
        &self,
        condition: impl FnMut() -> bool + Send + 'static,
    ) -> anyhow::Result<KillWhen> {
        let pid = match &*self.lock() {
            State::Running(child) => Pid::from_raw(pid_i32(child.id())),
            State::Idle => bail!("process was never started"),
            State::Exited { pid, status } => bail!("process {pid} already exited ({status})"),
        };
        self.traced.store(true, Ordering::Release);
        let traced = self.traced.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new().name(format!("trace-{pid}")).spawn(move || {
            let outcome = trace_until(pid, condition, &ready_tx);
            traced.store(false, Ordering::Release);
            let _ = done_tx.send(outcome);
        });
        if let Err(err) = spawned {
            self.traced.store(false, Ordering::Release);
            return Err(err).context("starting the tracing thread");
        }
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(KillWhen { pid, done: done_rx }),
            Ok(Err(err)) => bail!("tracing process {pid}: {err}"),
            Err(_) => bail!("the thread tracing process {pid} ended before it began"),
        }
    }

    /// Kills the group and reaps the leader, blocking. For `Drop`: SIGKILL cannot be ignored,
    /// so the wait is short.
    pub(crate) fn kill_and_reap(&self) {
        let mut state = self.lock();
        let State::Running(child) = &mut *state else { return };
        let pid = child.id();
        let _ = signal::killpg(Pid::from_raw(pid_i32(pid)), Signal::SIGKILL);
        let _ = child.kill();
        let mut registry = self.registry.lock();
        if let Ok(status) = child.wait() {
            registry.remove(&pid_i32(pid));
            *state = State::Exited { pid, status };
        }
    }
}

impl Drop for ProcessSlot {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

/// Reaps a running process if it has exited, deregistering it in the same critical section.
/// A traced process is left alone: a wait could take one of its ptrace stops for an exit.
fn reap(state: &mut State, registry: &GroupRegistry, traced: &AtomicBool) {
    let State::Running(child) = state else { return };
    if traced.load(Ordering::Acquire) {
        return;
    }
    let pid = child.id();
    let mut registry = registry.lock();
    if let Ok(Some(status)) = child.try_wait() {
        registry.remove(&pid_i32(pid));
        *state = State::Exited { pid, status };
    }
}

/// A kill armed by [`crate::K0sProcess::kill_when`].
#[derive(Debug)]
pub struct KillWhen {
    pid: Pid,
    done: tokio::sync::oneshot::Receiver<anyhow::Result<u64>>,
}

impl KillWhen {
    /// Waits until the condition held and the process group was killed; returns how many
    /// system-call stops of the process came first. Fails if the process ended otherwise, or
    /// after `timeout` (the trace goes on then, until the process ends).
    pub async fn wait(self, timeout: Duration) -> anyhow::Result<u64> {
        let pid = self.pid;
        match tokio::time::timeout(timeout, self.done).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => bail!("the thread tracing process {pid} vanished"),
            Err(_) => bail!("the condition to kill process {pid} did not hold within {timeout:?}"),
        }
    }
}

/// The tracing thread of [`ProcessSlot::kill_group_when`]: attaches (reporting on `ready`),
/// then resumes the process from one system-call stop to the next until `condition` holds.
fn trace_until(
    pid: Pid,
    mut condition: impl FnMut() -> bool,
    ready: &std::sync::mpsc::Sender<Result<(), String>>,
) -> anyhow::Result<u64> {
    use nix::errno::Errno;
    use nix::sys::ptrace::{self, Options};
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};

    // EXITKILL: should this thread end without killing, the process is killed (never left
    // traced with nobody resuming it). TRACEEXEC: an exec stops as an event, not a SIGTRAP.
    let options =
        Options::PTRACE_O_TRACESYSGOOD | Options::PTRACE_O_TRACEEXEC | Options::PTRACE_O_EXITKILL;
    let attached = ptrace::seize(pid, options).and_then(|()| ptrace::interrupt(pid));
    let _ = ready.send(attached.map_err(|err| err.to_string()));
    attached.with_context(|| format!("tracing process {pid}"))?;
    let mut stops = 0_u64;
    loop {
        let status = match waitpid(pid, Some(WaitPidFlag::__WALL)) {
            Ok(status) => status,
            Err(Errno::EINTR) => continue,
            Err(err) => return Err(err).with_context(|| format!("waiting for process {pid}")),
        };
        let deliver = match status {
            WaitStatus::PtraceSyscall(_) => {
                stops += 1;
                None
            }
            // The interrupt that began the trace, an exec, or a group stop.
            WaitStatus::PtraceEvent(..) => None,
            // A signal on its way to the process: it gets it when it resumes.
            WaitStatus::Stopped(_, signal) => Some(signal),
            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                bail!("process {pid} ended ({status:?}) before the condition to kill it held")
            }
            WaitStatus::Continued(_) | WaitStatus::StillAlive => continue,
        };
        if condition() {
            signal::killpg(pid, Signal::SIGKILL).with_context(|| format!("killing group {pid}"))?;
            return Ok(stops);
        }
        ptrace::syscall(pid, deliver).with_context(|| format!("resuming process {pid}"))?;
    }
}

/// Pids always fit in `i32` on Linux (`pid_max` ≤ 2^22).
fn pid_i32(pid: u32) -> i32 {
    i32::try_from(pid).unwrap_or(i32::MAX)
}

/// The last `lines` lines of a log file ("" if it cannot be read).
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    const MAX_BYTES: u64 = 256 * 1024;
    let Ok(mut file) = fs::File::open(path) else { return String::new() };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// How often a spawn that fails with `ETXTBSY` is retried.
///
/// Copying a node's binary leaves, for a moment, a writable descriptor of it in any child
/// that another thread forks during the copy (until that child execs and the descriptor
/// closes). Exec of the fresh copy then fails with "Text file busy". The window is the
/// microseconds between that fork and exec, so an immediate retry succeeds; this bound only
/// keeps a real, lasting problem from spinning forever.
const BUSY_TEXT_RETRIES: usize = 10_000;

fn spawn_retrying_busy_text(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut attempts = 0;
    loop {
        match cmd.spawn() {
            Err(err)
                if err.raw_os_error() == Some(libc::ETXTBSY) && attempts < BUSY_TEXT_RETRIES =>
            {
                attempts += 1;
                std::thread::yield_now();
            }
            result => return result,
        }
    }
}
