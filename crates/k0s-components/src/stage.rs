//! Staging: the components a role runs, put in `<data-dir>/bin/` from the set the binary
//! carries, or found there or on `PATH` when it carries none.
//!
//! A carried component is written to a temporary file in the same directory, checked
//! against the manifest's size and sha256 while it is written, synced, and renamed over the
//! old file, so `<data-dir>/bin/<name>` is always either the previous file or the new one,
//! complete. A file already there with the carried size and sha256 is left alone (a start
//! on an unchanged node rewrites nothing); any other file under that name (truncated,
//! corrupted, another version) is replaced. A failed staging (disk full) names the
//! component and the path, and leaves the previous file in place.

use std::{
    fs::{self, File},
    io,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

pub use crate::carried::sha256_of;
use crate::carried::{CarriedSet, Component, Decompressor};

/// What staging did with one component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The file there already had the carried digest: nothing written.
    Unchanged,
    /// No file was there: written.
    Written,
    /// A file with another digest or size was there: replaced.
    Replaced,
    /// Not carried: the file found in `<data-dir>/bin/` or on `PATH` is used as it is.
    Found,
}

/// One component ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staged {
    /// Its name.
    pub name: String,
    /// Where it is.
    pub path: PathBuf,
    /// The version the carried set names (`None` for one found on the host).
    pub version: Option<String>,
    /// What staging did.
    pub outcome: Outcome,
}

/// Stages `names` into `bin_dir` from `set` (read from `file`), each carried one by its
/// digest; a name the set does not carry is looked for in `bin_dir`, then on `path` (the
/// value of `PATH`). Fails, naming the component and the path, when one cannot be staged
/// or found.
pub fn stage(
    set: Option<&CarriedSet>,
    file: &mut File,
    names: &[&str],
    bin_dir: &Path,
    path: Option<&std::ffi::OsStr>,
) -> anyhow::Result<Vec<Staged>> {
    fs::create_dir_all(bin_dir).with_context(|| format!("creating {}", bin_dir.display()))?;
    // One context for every component (see `Decompressor`), made at the first one written.
    let mut decompressor = None;
    let mut staged = Vec::new();
    for name in names {
        let dest = bin_dir.join(name);
        let entry = match set.and_then(|set| set.get(name).map(|c| (set, c))) {
            Some((set, component)) => {
                let outcome = stage_one(set, file, component, &dest, &mut decompressor)
                    .with_context(|| format!("staging component {name} at {}", dest.display()))?;
                Staged {
                    name: (*name).to_owned(),
                    path: dest,
                    version: Some(component.version.clone()),
                    outcome,
                }
            }
            None => Staged {
                name: (*name).to_owned(),
                path: find(name, bin_dir, path)?,
                version: None,
                outcome: Outcome::Found,
            },
        };
        staged.push(entry);
    }
    Ok(staged)
}

/// Where a component this binary does not carry is: `bin_dir/<name>`, else the first
/// `<dir>/<name>` on `path`.
fn find(name: &str, bin_dir: &Path, path: Option<&std::ffi::OsStr>) -> anyhow::Result<PathBuf> {
    let candidates = std::iter::once(bin_dir.to_path_buf())
        .chain(path.map(|p| std::env::split_paths(p).collect::<Vec<_>>()).unwrap_or_default());
    for dir in candidates {
        let candidate = dir.join(name);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    bail!(
        "component {name}: this binary does not carry it, and it is neither in {} nor on PATH",
        bin_dir.display()
    )
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn stage_one(
    set: &CarriedSet,
    file: &mut File,
    component: &Component,
    dest: &Path,
    decompressor: &mut Option<Decompressor>,
) -> anyhow::Result<Outcome> {
    let existing = match fs::metadata(dest) {
        Ok(meta) => Some(meta),
        Err(err) if err.kind() == io::ErrorKind::NotFound => None,
        Err(err) => return Err(err).context("reading the staged file"),
    };
    if let Some(meta) = &existing
        && meta.is_file()
        && meta.len() == component.size
        && sha256_of(dest)? == component.sha256
    {
        return Ok(Outcome::Unchanged);
    }
    let dir = dest.parent().context("the staged path has no directory")?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", component.name))
        .suffix(".staging")
        .tempfile_in(dir)
        .context("creating a temporary file")?;
    let decompressor = match decompressor {
        Some(decompressor) => decompressor,
        None => decompressor.insert(Decompressor::new()?),
    };
    set.extract(file, component, tmp.as_file_mut(), decompressor)?;
    let out = tmp.as_file_mut();
    out.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    out.sync_all().context("syncing")?;
    // The rename fails for a directory in the way; anything else is replaced.
    tmp.persist(dest).map_err(|err| err.error).context("renaming into place")?;
    File::open(dir).and_then(|d| d.sync_all()).context("syncing the directory")?;
    Ok(if existing.is_some() { Outcome::Replaced } else { Outcome::Written })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;
    use crate::carried;

    fn set(dir: &Path) -> (File, CarriedSet) {
        let binary = dir.join("bare");
        fs::write(&binary, b"ELF").unwrap();
        let kubelet = dir.join("kubelet-src");
        fs::write(&kubelet, vec![1u8; 100_000]).unwrap();
        let containerd = dir.join("containerd-src");
        fs::write(&containerd, b"containerd").unwrap();
        let out = dir.join("k0s");
        let set = carried::pack(
            &binary,
            &[
                carried::Source { name: "kubelet", version: "v1.35.4", path: &kubelet },
                carried::Source { name: "containerd", version: "v2.2.9", path: &containerd },
            ],
            &out,
        )
        .unwrap();
        (File::open(out).unwrap(), set)
    }

    #[test]
    fn staging_writes_each_component_once_and_an_unchanged_node_rewrites_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut file, set) = set(dir.path());
        let bin = dir.path().join("data/bin");
        let first = stage(Some(&set), &mut file, &["kubelet", "containerd"], &bin, None).unwrap();
        assert!(first.iter().all(|s| s.outcome == Outcome::Written), "{first:?}");
        assert_eq!(fs::read(bin.join("kubelet")).unwrap(), vec![1u8; 100_000]);
        assert_eq!(sha256_of(&bin.join("kubelet")).unwrap(), set.get("kubelet").unwrap().sha256);
        let inode = fs::metadata(bin.join("kubelet")).unwrap().ino();
        let again = stage(Some(&set), &mut file, &["kubelet", "containerd"], &bin, None).unwrap();
        assert!(again.iter().all(|s| s.outcome == Outcome::Unchanged), "{again:?}");
        assert_eq!(fs::metadata(bin.join("kubelet")).unwrap().ino(), inode, "not rewritten");
        // Nothing else is left in the directory.
        let mut names: Vec<String> = fs::read_dir(&bin)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["containerd", "kubelet"]);
    }

    #[test]
    fn a_corrupted_or_truncated_staged_file_is_replaced_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let (mut file, set) = set(dir.path());
        let bin = dir.path().join("bin");
        stage(Some(&set), &mut file, &["kubelet", "containerd"], &bin, None).unwrap();
        let mut corrupted = fs::read(bin.join("kubelet")).unwrap();
        corrupted[500] ^= 0xff;
        fs::write(bin.join("kubelet"), &corrupted).unwrap();
        fs::write(bin.join("containerd"), b"contain").unwrap();
        let staged = stage(Some(&set), &mut file, &["kubelet", "containerd"], &bin, None).unwrap();
        assert!(staged.iter().all(|s| s.outcome == Outcome::Replaced), "{staged:?}");
        assert_eq!(sha256_of(&bin.join("kubelet")).unwrap(), set.get("kubelet").unwrap().sha256);
        assert_eq!(fs::read(bin.join("containerd")).unwrap(), b"containerd");
    }

    #[test]
    fn a_component_that_cannot_be_staged_is_named_with_its_path_and_the_old_file_stays() {
        let dir = tempfile::tempdir().unwrap();
        let (mut file, mut set) = set(dir.path());
        let bin = dir.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        fs::write(bin.join("kubelet"), b"the previous kubelet").unwrap();
        // A manifest digest the bytes do not match stands in for any failed write: the
        // temporary file is removed and the previous file is untouched.
        set.components[0].sha256 = "f".repeat(64);
        let err = stage(Some(&set), &mut file, &["kubelet"], &bin, None).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("staging component kubelet at"), "{text}");
        assert!(text.contains(&bin.join("kubelet").display().to_string()), "{text}");
        assert_eq!(fs::read(bin.join("kubelet")).unwrap(), b"the previous kubelet");
        assert_eq!(fs::read_dir(&bin).unwrap().count(), 1, "no temporary file left");
    }

    #[test]
    fn a_component_not_carried_is_found_in_the_bin_dir_or_on_path_or_named_as_missing() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let mut file = File::open(dir.path()).unwrap();
        let bin = dir.path().join("bin");
        let other = dir.path().join("other");
        fs::create_dir_all(&other).unwrap();
        fs::write(other.join("runc"), b"#!").unwrap();
        fs::set_permissions(other.join("runc"), fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::ffi::OsString::from(format!("/nonexistent:{}", other.display()));
        let staged = stage(None, &mut file, &["runc"], &bin, Some(&path)).unwrap();
        assert_eq!(staged[0].path, other.join("runc"));
        assert_eq!(staged[0].outcome, Outcome::Found);
        let err = stage(None, &mut file, &["kubelet"], &bin, Some(&path)).unwrap_err();
        assert!(
            err.to_string().contains("component kubelet: this binary does not carry it"),
            "{err}"
        );
    }
}
