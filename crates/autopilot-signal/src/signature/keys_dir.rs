//! Reading the directory of trusted keys, fail-closed (issue 46): a node with no keys
//! requires no signature, so a keys directory that is missing, unreadable or empty, that
//! holds anything but key files, or that someone other than root (or this process's user)
//! could write, stops the node instead of leaving it with fewer keys than its administrator
//! gave it. The ownership rule is the exec allow-list's ([`crate::ownership`]).

use std::io;
use std::path::{Path, PathBuf};

use super::{TrustedKey, parse_key};
use crate::ownership;

/// The trusted keys cannot be read: a start error of the node, naming the directory (the
/// cause, a [`Problem`], says what is wrong).
#[derive(Debug, thiserror::Error)]
#[error("--payload-keys {}", dir.display())]
pub struct LoadError {
    /// The keys directory.
    pub dir: PathBuf,
    /// What is wrong with it.
    #[source]
    pub problem: Problem,
}

/// What is wrong with a keys directory.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// Nothing is at the path (or a symlink to nothing).
    #[error("no such directory")]
    NoSuchDirectory,
    /// The path is a file or another non-directory.
    #[error("not a directory")]
    NotADirectory,
    /// The directory cannot be looked at or listed.
    #[error("cannot be read")]
    Unreadable(#[source] io::Error),
    /// The directory holds no entry at all.
    #[error("holds no key file")]
    Empty,
    /// The directory is owned by another user, or writable by its group or others.
    #[error("the directory {0}")]
    UntrustedDirectory(String),
    /// An entry is not a key file this process may trust.
    #[error("{} {refusal}", path.display())]
    Entry {
        /// The entry.
        path: PathBuf,
        /// Why it is refused.
        refusal: Refusal,
    },
    /// An entry cannot be looked at or read.
    #[error("{} cannot be read", .0.display())]
    EntryUnreadable(PathBuf, #[source] io::Error),
    /// A file is not a key (the message names the file).
    #[error("{0}")]
    NotAKey(String),
}

/// Why an entry of the keys directory cannot be a trusted key.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A directory, or a symlink to one.
    #[error("is a directory, not a key file")]
    Directory,
    /// A symlink to nothing.
    #[error("is a dangling symlink")]
    DanglingLink,
    /// A socket, a FIFO, a device.
    #[error("is not a regular file or a symlink to one")]
    NotRegular,
    /// A key file owned by another user, or writable by its group or others.
    #[error("{0}")]
    Untrusted(String),
}

/// What a path is, symlinks followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symlink to nothing.
    DanglingLink,
    /// Anything else (socket, FIFO, device).
    Other,
}

/// What is at a path: its kind, and the owner and permission bits of what it resolves to.
#[derive(Clone, Copy, Debug)]
struct Seen {
    kind: Kind,
    uid: u32,
    mode: u32,
}

/// Why the directory itself (`kind`, owned by `uid` with permission bits `mode`) cannot
/// hold the keys a process running as `euid` trusts; `None` if it can.
pub(crate) fn directory_problem(kind: Kind, uid: u32, mode: u32, euid: u32) -> Option<Problem> {
    match kind {
        Kind::Directory => ownership::problem(uid, mode, euid).map(Problem::UntrustedDirectory),
        Kind::DanglingLink => Some(Problem::NoSuchDirectory),
        Kind::File | Kind::Other => Some(Problem::NotADirectory),
    }
}

/// Why an entry (`kind`, owned by `uid` with permission bits `mode`) cannot be a key a
/// process running as `euid` trusts; `None` if it can.
pub(crate) fn entry_refusal(kind: Kind, uid: u32, mode: u32, euid: u32) -> Option<Refusal> {
    match kind {
        Kind::File => ownership::problem(uid, mode, euid).map(Refusal::Untrusted),
        Kind::Directory => Some(Refusal::Directory),
        Kind::DanglingLink => Some(Refusal::DanglingLink),
        Kind::Other => Some(Refusal::NotRegular),
    }
}

/// What is at `path` (symlinks followed); `Err` when nothing is there or it cannot be
/// looked at.
fn look(path: &Path) -> io::Result<Seen> {
    use std::os::unix::fs::MetadataExt as _;
    match std::fs::metadata(path) {
        Ok(meta) => {
            let kind = if meta.is_file() {
                Kind::File
            } else if meta.is_dir() {
                Kind::Directory
            } else {
                Kind::Other
            };
            Ok(Seen { kind, uid: meta.uid(), mode: meta.mode() })
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            // Nothing there (`Err` again), or a symlink to nothing.
            std::fs::symlink_metadata(path).map(|_| Seen {
                kind: Kind::DanglingLink,
                uid: 0,
                mode: 0,
            })
        }
        Err(err) => Err(err),
    }
}

/// Every key in `dir`, or what is wrong with it.
pub(super) fn read(dir: &Path) -> Result<Vec<TrustedKey>, Problem> {
    let euid = nix::unistd::geteuid().as_raw();
    let seen = look(dir).map_err(|err| match err.kind() {
        io::ErrorKind::NotFound => Problem::NoSuchDirectory,
        _ => Problem::Unreadable(err),
    })?;
    if let Some(problem) = directory_problem(seen.kind, seen.uid, seen.mode, euid) {
        return Err(problem);
    }
    let mut paths = std::fs::read_dir(dir)
        .map_err(Problem::Unreadable)?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(Problem::Unreadable)?;
    paths.sort();
    // Race: an entry is looked at, then read by its path; only who may write the directory
    // (checked above: root or this process's user) could swap it in between.
    let mut keys = Vec::new();
    for path in paths {
        let seen = look(&path).map_err(|err| Problem::EntryUnreadable(path.clone(), err))?;
        if let Some(refusal) = entry_refusal(seen.kind, seen.uid, seen.mode, euid) {
            return Err(Problem::Entry { path, refusal });
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|err| Problem::EntryUnreadable(path.clone(), err))?;
        keys.push(parse_key(&path.display().to_string(), &text).map_err(Problem::NotAKey)?);
    }
    if keys.is_empty() {
        return Err(Problem::Empty);
    }
    Ok(keys)
}
