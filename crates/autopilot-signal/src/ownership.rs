//! Who may decide what a node runs (DESIGN §14): a file that does (the exec allow-list and
//! the executables it names, the trusted payload keys and their directory) must be owned by
//! root or by the user this process runs as, and writable by its owner only; otherwise
//! someone else could choose what the agent runs or accepts.

use std::path::Path;

/// `Err` says why the file at `path`, whose metadata is `meta` (symlinks followed), may not
/// decide what this process runs; the sentence starts with the path.
pub(crate) fn check(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    problem(meta.uid(), meta.mode(), nix::unistd::geteuid().as_raw())
        .map_or(Ok(()), |why| Err(format!("{} {why}", path.display())))
}

/// Why a file owned by `uid` with permission bits `mode` may not decide what a process
/// running as `euid` runs, if it may not (a phrase to follow the file's name).
pub(crate) fn problem(uid: u32, mode: u32, euid: u32) -> Option<String> {
    if uid != 0 && uid != euid {
        return Some(format!("is owned by uid {uid}, not by root or this process's user ({euid})"));
    }
    if mode & 0o022 != 0 {
        return Some(format!("is writable by its group or others (mode {:o})", mode & 0o7777));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_or_this_user_may_own_what_decides_what_runs_and_only_they_may_write_it() {
        let me = 1000;
        assert_eq!(problem(0, 0o100_755, me), None);
        assert_eq!(problem(me, 0o100_644, me), None);
        let other = problem(1001, 0o100_644, me).expect("another user's file");
        assert!(other.contains("owned by uid 1001"), "{other}");
        let group = problem(0, 0o100_775, me).expect("group-writable");
        assert!(group.contains("writable by its group or others (mode 775)"), "{group}");
        assert!(problem(me, 0o100_646, me).is_some(), "world-writable");
    }
}
