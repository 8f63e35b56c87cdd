//! What real nodes leave on the machine, found and removed: processes, mounts, cgroups and
//! the few machine-wide directories a kubelet or containerd writes.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use nix::{
    mount::{MntFlags, umount2},
    sys::signal::{Signal, kill},
    unistd::Pid,
};

/// The cgroup v1 hierarchies (under `/sys/fs/cgroup`) a kubelet with the `cgroupfs` driver
/// creates its Pod cgroups in; its cgroup root must exist in each before it starts.
const HIERARCHIES: [&str; 9] =
    ["cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd"];

/// Where the cgroup hierarchies are mounted.
const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// Whether this machine has the cgroup v1 hierarchies a real node needs.
pub(crate) fn has_cgroup_v1() -> bool {
    HIERARCHIES.iter().all(|h| Path::new(CGROUP_MOUNT).join(h).join("cgroup.procs").is_file())
}

/// Creates the cgroup `root` (e.g. `k0s-it-…-worker-0`) in every hierarchy, copying the
/// machine's CPUs and memory nodes into its cpuset.
pub(crate) fn create_cgroup_root(root: &str) -> anyhow::Result<()> {
    for hierarchy in HIERARCHIES {
        let dir = Path::new(CGROUP_MOUNT).join(hierarchy).join(root);
        fs::create_dir_all(&dir).with_context(|| format!("creating cgroup {}", dir.display()))?;
        if hierarchy == "cpuset" {
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let parent = fs::read_to_string(Path::new(CGROUP_MOUNT).join(hierarchy).join(file))
                    .with_context(|| format!("reading the root cgroup's {file}"))?;
                fs::write(dir.join(file), parent.trim())
                    .with_context(|| format!("writing {}", dir.join(file).display()))?;
            }
        }
    }
    Ok(())
}

/// Every cgroup directory named `root` or under it, in every hierarchy mounted under
/// `/sys/fs/cgroup` (runc may also create some in the unified one).
pub(crate) fn cgroup_dirs(root: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(hierarchies) = fs::read_dir(CGROUP_MOUNT) else { return found };
    for hierarchy in hierarchies.flatten() {
        let top = hierarchy.path().join(root);
        if top.is_dir() {
            collect_dirs(&top, &mut found);
        }
    }
    found
}

fn collect_dirs(dir: &Path, found: &mut Vec<PathBuf>) {
    found.push(dir.to_path_buf());
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                collect_dirs(&entry.path(), found);
            }
        }
    }
}

/// Kills every process in the cgroup `root` (any hierarchy), then removes its cgroups,
/// deepest first; retries for up to 10 s while the killed processes exit.
pub(crate) fn remove_cgroup_root(root: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut dirs = cgroup_dirs(root);
        if dirs.is_empty() {
            return Ok(());
        }
        for dir in &dirs {
            for pid in pids_in(&dir.join("cgroup.procs")) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        // Deepest first: a cgroup can only be removed once its children are.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        let mut failed = None;
        for dir in &dirs {
            if let Err(err) = fs::remove_dir(dir) {
                failed = Some((dir.clone(), err));
            }
        }
        match failed {
            None => return Ok(()),
            Some((dir, err)) if Instant::now() >= deadline => {
                return Err(err).with_context(|| format!("removing cgroup {}", dir.display()));
            }
            Some(_) => pause_between_polls(Duration::from_millis(100)),
        }
    }
}

fn pids_in(procs: &Path) -> Vec<i32> {
    fs::read_to_string(procs)
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The processes whose command line mentions `needle` (a directory of the real nodes: every
/// kubelet, containerd and shim of theirs names a path under it), except this one.
pub(crate) fn processes_mentioning(needle: &str) -> Vec<(i32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if u32::try_from(pid).is_ok_and(|p| p == me) {
            continue;
        }
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push((pid, cmdline.trim().to_owned()));
        }
    }
    found
}

/// SIGKILLs every process [`processes_mentioning`] `needle` finds, until none is left (up to
/// 10 s: containerd's shims daemonize, so they are in no process group the harness kills).
pub(crate) fn kill_processes_mentioning(needle: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_mentioning(needle);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!("processes still running after SIGKILL: {left:?}");
        }
        for (pid, _) in &left {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        pause_between_polls(Duration::from_millis(50));
    }
}

/// The pause between two looks of a teardown loop that waits, with a deadline, for killed
/// processes to be gone. Teardown runs in `Drop` (also while a test unwinds), where there is
/// no runtime to await on.
#[allow(
    clippy::disallowed_methods,
    reason = "a poll interval inside a deadline-bounded condition wait, in synchronous Drop code"
)]
fn pause_between_polls(interval: Duration) {
    std::thread::sleep(interval);
}

/// The mount points at or under `dir`, from `/proc/self/mountinfo` (octal escapes decoded).
pub(crate) fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| PathBuf::from(unescape_mount_point(point)))
        .filter(|point| point.starts_with(dir))
        .collect()
}

/// `\040` and the other octal escapes of a mount point in mountinfo, decoded.
fn unescape_mount_point(point: &str) -> String {
    let bytes = point.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..=i + 3].iter().all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts everything at or under `dir`, deepest first (lazily: a mount still busy goes
/// once its last user does), until nothing is left (a bind mount may be stacked).
pub(crate) fn unmount_all_under(dir: &Path) -> anyhow::Result<()> {
    for _ in 0..16 {
        let mut mounts = mounts_under(dir);
        if mounts.is_empty() {
            return Ok(());
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        for mount in mounts {
            let _ = umount2(&mount, MntFlags::MNT_DETACH);
        }
    }
    let left = mounts_under(dir);
    anyhow::ensure!(left.is_empty(), "mounts left under {}: {left:?}", dir.display());
    Ok(())
}

/// The machine-wide paths a kubelet or containerd writes outside its own directories.
pub(crate) const SHARED_DIRS: [&str; 5] =
    ["/var/log/pods", "/var/log/containers", "/var/lib/kubelet", "/var/lib/cni", "/run/containerd"];

/// What is in the [`SHARED_DIRS`] now (each directory itself, if it exists, and its entries).
pub(crate) fn shared_entries() -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    for dir in SHARED_DIRS {
        let dir = Path::new(dir);
        if !dir.exists() {
            continue;
        }
        found.insert(dir.to_path_buf());
        if let Ok(entries) = fs::read_dir(dir) {
            found.extend(entries.flatten().map(|e| e.path()));
        }
    }
    found
}

/// Removes what is in the [`SHARED_DIRS`] now and was not in `before` (whole trees; what was
/// there before is left alone).
pub(crate) fn remove_new_shared_entries(before: &BTreeSet<PathBuf>) -> anyhow::Result<()> {
    let now = shared_entries();
    // Entries first, then the directories that did not exist before.
    let mut new: Vec<&PathBuf> = now.iter().filter(|p| !before.contains(*p)).collect();
    new.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for path in new {
        unmount_all_under(path)?;
        let removed = if path.is_dir() && !path.is_symlink() {
            fs::remove_dir_all(path)
        } else {
            fs::remove_file(path)
        };
        match removed {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(err).with_context(|| format!("removing {}", path.display())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount_point(r"/tmp/a\040b/c"), "/tmp/a b/c");
        assert_eq!(unescape_mount_point("/plain"), "/plain");
        assert_eq!(unescape_mount_point(r"/end\04"), r"/end\04");
    }
}
