//! `exec` checks: executables a node's administrator allow-listed in a node-local file.
//!
//! A Plan names an entry (`{name: etcd-health}`), never a command line: what runs, with
//! which fixed arguments and environment, and how long and how loud it may be, is decided
//! on the node by whoever can write `<data-dir>/preflight-exec.yaml`:
//!
//! ```yaml
//! entries:
//!   - name: etcd-health
//!     path: /usr/local/bin/etcd-health   # absolute
//!     args: ["--quick"]                  # fixed arguments
//!     env: {ETCDCTL_API: "3"}            # the whole environment (nothing is inherited)
//!     timeoutSeconds: 30                 # cap on the check's own timeout (default 60)
//!     outputBytes: 4096                  # cap on stdout and stderr each (default 4096)
//! ```
//!
//! The process runs without a shell, in `/`, with only `env` as its environment, in a
//! process group of its own that is killed whole when it overruns (status code 62). Its exit
//! code is the status code, its stdout lines the result messages.
//!
//! The allow-list file and every executable it names must be owned by root or by the user
//! this process runs as, and writable by their owner only (DESIGN §14): otherwise someone
//! else could choose what the agent runs. A file that breaks this is status code 22, naming
//! the file, and nothing runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use autopilot_api::preflight::{MAX_OUTPUT_BYTES, RawRecord, status_code};
use serde::Deserialize;
use tokio::io::AsyncReadExt as _;

/// The allow-list's file name in the node's data directory.
pub const FILE_NAME: &str = "preflight-exec.yaml";

/// Where a node with data directory `data_dir` keeps its allow-list.
pub fn allow_list_path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE_NAME)
}

/// Default cap on an entry's run time.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The allow-list file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllowList {
    /// The executables, by unique name.
    #[serde(default)]
    pub entries: Vec<Entry>,
}

/// One allow-listed executable.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    /// What a Plan calls it.
    pub name: String,
    /// Absolute path of the executable.
    pub path: PathBuf,
    /// Fixed arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// The whole environment of the process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The longest the entry may run, whatever the check's timeout says (seconds).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// The most bytes of stdout and of stderr kept (at most the record's own cap).
    #[serde(default)]
    pub output_bytes: Option<usize>,
}

impl AllowList {
    /// Parse an allow-list; `Err` names what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let list: Self = autopilot_engine::yaml::from_str(text).map_err(|err| err.to_string())?;
        let mut seen = std::collections::BTreeSet::new();
        for entry in &list.entries {
            if entry.name.trim().is_empty() {
                return Err("an entry has an empty name".into());
            }
            if !seen.insert(entry.name.as_str()) {
                return Err(format!("entry {:?} is listed twice", entry.name));
            }
            if !entry.path.is_absolute() {
                return Err(format!(
                    "entry {:?}: path {} is not absolute",
                    entry.name,
                    entry.path.display()
                ));
            }
            if entry.timeout_seconds == Some(0) {
                return Err(format!("entry {:?}: timeoutSeconds is 0", entry.name));
            }
        }
        Ok(list)
    }

    /// Read the allow-list at `path`: a missing file is an empty list; a file someone other
    /// than root or this process's user could write is refused.
    pub fn read(path: &Path) -> Result<Self, String> {
        match std::fs::metadata(path) {
            Ok(meta) => crate::ownership::check(path, &meta)?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(err) => return Err(format!("reading {}: {err}", path.display())),
        }
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).map_err(|why| format!("{}: {why}", path.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(err) => Err(format!("reading {}: {err}", path.display())),
        }
    }

    /// The entry called `name`.
    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|entry| entry.name == name)
    }
}

/// Run the entry `name` of the allow-list at `allow_list` within `timeout` (capped by the
/// entry's own), and report what happened. Not allow-listed (or an unreadable list) is
/// status code 22: the check asked for something this node does not offer.
pub async fn run(allow_list: &Path, name: &str, timeout: Duration) -> RawRecord {
    let list = match AllowList::read(allow_list) {
        Ok(list) => list,
        Err(why) => {
            return RawRecord::failure(
                status_code::INVALID_ARGUMENT,
                format!("the exec allow-list cannot be used: {why}"),
            );
        }
    };
    let Some(entry) = list.entry(name) else {
        return RawRecord::failure(
            status_code::INVALID_ARGUMENT,
            format!("{name:?} is not allow-listed in {}", allow_list.display()),
        );
    };
    let cap = entry.timeout_seconds.map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    run_entry(entry, timeout.min(cap)).await
}

async fn run_entry(entry: &Entry, timeout: Duration) -> RawRecord {
    match std::fs::metadata(&entry.path) {
        Ok(meta) => {
            if let Err(why) = crate::ownership::check(&entry.path, &meta) {
                return RawRecord::failure(
                    status_code::INVALID_ARGUMENT,
                    format!("entry {:?} cannot run: {why}", entry.name),
                );
            }
        }
        Err(error) => {
            return super::io_failure(&format!("running {}", entry.path.display()), &error);
        }
    }
    let output_cap = entry.output_bytes.unwrap_or(MAX_OUTPUT_BYTES).min(MAX_OUTPUT_BYTES);
    let mut command = tokio::process::Command::new(&entry.path);
    command
        .args(&entry.args)
        .env_clear()
        .envs(&entry.env)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so an overrun kills what it started too.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            return super::io_failure(&format!("running {}", entry.path.display()), &error);
        }
    };
    let group = child.id().and_then(|pid| i32::try_from(pid).ok()).map(nix::unistd::Pid::from_raw);
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return RawRecord::failure(status_code::GENERAL_ERROR, "the process has no output pipes");
    };
    let work = async {
        let (out, err, status) = tokio::join!(
            read_capped(stdout, output_cap),
            read_capped(stderr, output_cap),
            child.wait()
        );
        (out, err, status)
    };
    match tokio::time::timeout(timeout, work).await {
        // Dropping the work kills the child (kill_on_drop); its group goes with it.
        Err(_elapsed) => {
            if let Some(group) = group {
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            }
            super::timed_out(timeout)
        }
        Ok((_, _, Err(error))) => {
            super::io_failure(&format!("waiting for {}", entry.path.display()), &error)
        }
        Ok((stdout, stderr, Ok(status))) => {
            let code = status.code().map_or(status_code::GENERAL_ERROR, i64::from);
            let messages = autopilot_api::preflight::output_lines(&stdout);
            // An exit code is the command's answer (its status code), not an error: `error`
            // is kept for a process that did not end on its own.
            let error =
                match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                    (Some(_), _) => None,
                    (None, Some(signal)) => {
                        Some(format!("{} was killed by signal {signal}", entry.path.display()))
                    }
                    (None, None) => {
                        Some(format!("{} ended without an exit code", entry.path.display()))
                    }
                };
            RawRecord { status_code: code, error, messages, stdout, stderr, duration_ms: 0 }
        }
    }
}

/// Read `reader` to its end, keeping the first `cap` bytes (lossy UTF-8): reading on after
/// the cap keeps a chatty process from blocking on a full pipe.
async fn read_capped(mut reader: impl tokio::io::AsyncRead + Unpin, cap: usize) -> String {
    let mut kept = Vec::new();
    let mut buffer = [0_u8; 8192];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_list(dir: &Path, text: &str) -> PathBuf {
        let path = allow_list_path(dir);
        std::fs::write(&path, text).expect("write the allow-list");
        path
    }

    #[test]
    fn an_allow_list_names_absolute_executables_once() {
        let list = AllowList::parse(
            "entries:\n  - name: a\n    path: /bin/true\n    args: [x]\n    env: {K: v}\n    timeoutSeconds: 5\n",
        )
        .expect("parse");
        assert_eq!(list.entry("a").map(|e| e.args.clone()), Some(vec!["x".to_owned()]));
        assert!(AllowList::parse("entries:\n  - {name: a, path: bin/true}\n").is_err());
        assert!(
            AllowList::parse(
                "entries:\n  - {name: a, path: /bin/true}\n  - {name: a, path: /bin/false}\n"
            )
            .is_err()
        );
        assert!(
            AllowList::parse("entries:\n  - {name: a, path: /bin/true, command: rm}\n").is_err()
        );
    }

    #[tokio::test]
    async fn only_allow_listed_entries_run_and_their_exit_code_is_the_status_code() {
        let dir = tempfile::tempdir().expect("tempdir");
        let list = write_list(
            dir.path(),
            "entries:\n  - name: say\n    path: /bin/sh\n    args: ['-c', 'echo one; echo two; echo oops >&2; exit 3']\n",
        );
        let record = run(&list, "say", Duration::from_secs(10)).await;
        assert_eq!(record.status_code, 3);
        assert_eq!(record.messages, ["one", "two"]);
        assert_eq!(record.stderr, "oops\n");
        assert_eq!(record.error, None, "an exit code is an answer, not an error: {record:?}");

        let refused = run(&list, "rm", Duration::from_secs(10)).await;
        assert_eq!(refused.status_code, status_code::INVALID_ARGUMENT);
        assert!(refused.result().contains("\"rm\" is not allow-listed"), "{refused:?}");

        let missing = run(&dir.path().join("absent.yaml"), "say", Duration::from_secs(1)).await;
        assert_eq!(missing.status_code, status_code::INVALID_ARGUMENT);
    }

    #[tokio::test]
    async fn the_environment_is_only_the_entry_s_and_output_is_capped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let list = write_list(
            dir.path(),
            "entries:\n  - name: env\n    path: /usr/bin/env\n    env: {ONLY: this}\n    outputBytes: 5\n",
        );
        // SAFETY-free check: the parent has PATH; the child must not.
        let record = run(&list, "env", Duration::from_secs(10)).await;
        assert_eq!(record.status_code, 0, "{record:?}");
        assert_eq!(record.stdout, "ONLY=");
    }

    #[tokio::test]
    async fn a_writable_allow_list_or_executable_is_refused_with_22_naming_it() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("check.sh");
        std::fs::write(&script, "#!/bin/sh\necho fine\n").expect("script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let list = write_list(
            dir.path(),
            &format!("entries:\n  - name: ok\n    path: {}\n", script.display()),
        );
        assert_eq!(run(&list, "ok", Duration::from_secs(10)).await.status_code, 0);

        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let record = run(&list, "ok", Duration::from_secs(10)).await;
        assert_eq!(record.status_code, status_code::INVALID_ARGUMENT, "{record:?}");
        assert!(record.result().contains(&format!("{} is writable", script.display())));

        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(&list, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let record = run(&list, "ok", Duration::from_secs(10)).await;
        assert_eq!(record.status_code, status_code::INVALID_ARGUMENT, "{record:?}");
        assert!(record.result().contains(&format!("{} is writable", list.display())));
    }

    #[tokio::test]
    async fn an_overrun_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("child.pid");
        let list = write_list(
            dir.path(),
            &format!(
                "entries:\n  - name: spawner\n    path: /bin/sh\n    args: ['-c', 'sleep 300 & echo $! > {}; wait']\n    timeoutSeconds: 1\n",
                pid_file.display()
            ),
        );
        let record = run(&list, "spawner", Duration::from_secs(20)).await;
        assert_eq!(record.status_code, status_code::TIMEOUT, "{record:?}");
        let pid: i32 =
            std::fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("pid");
        let pid = nix::unistd::Pid::from_raw(pid);
        // The grandchild is gone (reaped by init) or a zombie about to be: never running.
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |stat| stat.split_whitespace().nth(2) == Some("Z"))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !gone() {
            assert!(std::time::Instant::now() < deadline, "the grandchild {pid} still runs");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn an_entry_that_overruns_is_killed_and_reports_62() {
        let dir = tempfile::tempdir().expect("tempdir");
        let list = write_list(
            dir.path(),
            "entries:\n  - name: slow\n    path: /bin/sleep\n    args: ['30']\n    timeoutSeconds: 1\n",
        );
        let started = std::time::Instant::now();
        let record = run(&list, "slow", Duration::from_secs(20)).await;
        assert_eq!(record.status_code, status_code::TIMEOUT, "{record:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "the entry's cap of 1 s applies");
    }
}
