//! Where the pinned binaries of the test topology are cached, and the one recipe every set of
//! them is built and looked up by.
//!
//! A [`CachedSet`] is a directory named after the pinned versions (`~/.cache/k0s-autopilot/
//! <kind>/<versions>/`, see [`dir`]) holding the set's files and a `stamp` file that says
//! what they were built from. The set is there when the stamp says exactly that and every file
//! exists: [`CachedSet::cached`], which is all tests call (building takes minutes, so a test
//! that silently started a build would look hung). [`CachedSet::ensure`] (what `cargo xtask
//! control-plane` runs) builds what is missing:
//!
//! - a stamp of other contents, or none, means the files there are of other versions or of
//!   unknown origin: they are removed and everything is built;
//! - while building, the stamp says which build is unfinished, so a run that is interrupted
//!   is resumed by the next one, which builds only the files still missing (as it does when
//!   a file of a complete set was removed);
//! - each file is put into place whole (built under a temporary name and renamed), and the
//!   stamp that marks the set complete is written last, atomically.

use std::{
    env, fs,
    io::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, bail, ensure};

/// Name of the file in a set's directory that says what its files were built from.
const STAMP_FILE: &str = "stamp";

/// The first line of the stamp while a build is unfinished; the complete stamp follows it.
const UNFINISHED: &str = "unfinished build of:\n";

/// `$XDG_CACHE_HOME/k0s-autopilot`, or `~/.cache/k0s-autopilot`: where the pinned binaries of
/// the test topology are cached. `override_env` names the variable that would have overridden
/// the set's directory (for the error when neither HOME nor it is set).
fn cache_root(override_env: &str) -> anyhow::Result<PathBuf> {
    let base = match env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .with_context(|| format!("neither {override_env} nor HOME is set"))?;
            PathBuf::from(home).join(".cache")
        }
    };
    Ok(base.join("k0s-autopilot"))
}

/// What the environment variable of a set names when it is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Override {
    /// The set's directory itself, versions included.
    Dir,
    /// The directory that holds the set in its `<versions>/`, as `<cache root>/<kind>/` does.
    Parent,
}

impl Override {
    /// The set's directory when the variable says `value`.
    fn dir(self, value: PathBuf, versions: &str) -> PathBuf {
        match self {
            Self::Dir => value,
            Self::Parent => value.join(versions),
        }
    }
}

/// The directory of a set of `kind` at `versions`: `<cache root>/<kind>/<versions>/` (see
/// [`cache_root`]), unless the environment variable `env` is set (non-empty), which then names
/// that directory or its parent as `overrides` says.
pub(crate) fn dir(
    env: &str,
    overrides: Override,
    kind: &str,
    versions: &str,
) -> anyhow::Result<PathBuf> {
    match env::var_os(env).filter(|d| !d.is_empty()) {
        Some(value) => Ok(overrides.dir(PathBuf::from(value), versions)),
        None => Ok(cache_root(env)?.join(kind).join(versions)),
    }
}

/// One set of cached files built together; see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CachedSet {
    /// What the set is called in messages: `control plane`.
    pub(crate) name: String,
    /// What is pinned, for the error when the set is missing: `kube-apiserver v1.35.4, …`.
    pub(crate) pinned: String,
    /// The `--only` value of `cargo xtask control-plane` that builds the set.
    pub(crate) part: &'static str,
    /// The set's directory; its stamp is `<dir>/stamp`.
    pub(crate) dir: PathBuf,
    /// What the stamp of a complete set says: the versions (and whatever else) the files are
    /// built from. A cache whose stamp says anything else is of other versions.
    pub(crate) stamp: String,
    /// The files (or directories) a complete set has, inside [`CachedSet::dir`].
    pub(crate) entries: Vec<PathBuf>,
}

impl CachedSet {
    fn stamp_path(&self) -> PathBuf {
        self.dir.join(STAMP_FILE)
    }

    /// What the stamp says while a build of this set is unfinished.
    fn unfinished_stamp(&self) -> String {
        format!("{UNFINISHED}{}", self.stamp)
    }

    /// The entries that do not exist.
    fn missing(&self) -> Vec<PathBuf> {
        self.entries.iter().filter(|entry| !entry.exists()).cloned().collect()
    }

    /// `Ok` when the set is complete in its directory; never builds. Fails with the hint to run
    /// `cargo xtask control-plane` otherwise.
    pub(crate) fn cached(&self) -> anyhow::Result<()> {
        let stamp = fs::read_to_string(self.stamp_path()).ok();
        if stamp.as_deref() == Some(self.stamp.as_str()) && self.missing().is_empty() {
            return Ok(());
        }
        bail!(
            "no complete build of the pinned {} ({}) in {}: run `cargo xtask control-plane \
             --only {}` first (tests never build it)",
            self.name,
            self.pinned,
            self.dir.display(),
            self.part
        )
    }

    /// Makes the set complete unless it is: `build` gets the entries that are missing (it is
    /// not called when none are) and must create each of them (whole: under a temporary name,
    /// then renamed). The stamp is written once they all exist. See the [module docs](self) for what is kept of an earlier run.
    pub(crate) fn ensure(
        &self,
        build: impl FnOnce(&[PathBuf]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        if self.cached().is_ok() {
            println!("{} cached at {}", self.name, self.dir.display());
            return Ok(());
        }
        let started = Instant::now();
        let stamp_path = self.stamp_path();
        let stamp = fs::read_to_string(&stamp_path).ok();
        let resumable =
            stamp.as_deref().is_some_and(|s| s == self.stamp || s == self.unfinished_stamp());
        if !resumable {
            if stamp.is_some() || self.missing().len() < self.entries.len() {
                println!(
                    "==> {} holds other versions or an unknown build; rebuilding",
                    self.dir.display()
                );
            }
            remove_path(&stamp_path)?;
            for entry in &self.entries {
                remove_path(entry)?;
            }
        }
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        write_atomically(&stamp_path, self.unfinished_stamp().as_bytes())?;
        for entry in self.entries.iter().filter(|entry| entry.exists()) {
            println!("==> {} already built", entry.display());
        }

        let missing = self.missing();
        if !missing.is_empty() {
            build(&missing)?;
        }

        let missing = self.missing();
        ensure!(
            missing.is_empty(),
            "the build of the {} finished but these are missing: {missing:?}",
            self.name
        );
        write_atomically(&stamp_path, self.stamp.as_bytes())?;
        println!("{} built at {} ({:.0?})", self.name, self.dir.display(), started.elapsed());
        Ok(())
    }
}

/// Removes the file or directory at `path`, if there is one.
pub(crate) fn remove_path(path: &Path) -> anyhow::Result<()> {
    let removed = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => Err(err),
    };
    removed.with_context(|| format!("removing {}", path.display()))
}

/// Writes `contents` to `path` through a temporary file and a rename: readers see the old
/// contents or the new ones, never part of them.
fn write_atomically(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    let mut file = fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(contents)?;
    file.sync_all()?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// A set of two files, `bin/a` and `bin/b`, in a fresh temporary directory.
    fn set_in(dir: &Path) -> CachedSet {
        CachedSet {
            name: "test tools".to_owned(),
            pinned: "a v1, b v2".to_owned(),
            part: "test",
            dir: dir.join("v1-v2"),
            stamp: "a=v1\nb=v2\n".to_owned(),
            entries: vec![dir.join("v1-v2/bin/a"), dir.join("v1-v2/bin/b")],
        }
    }

    /// A build that writes `contents` into each missing entry, and records what it was given.
    fn writing<'a>(
        contents: &'a str,
        given: &'a RefCell<Vec<PathBuf>>,
    ) -> impl FnOnce(&[PathBuf]) -> anyhow::Result<()> + 'a {
        move |missing| {
            given.borrow_mut().extend_from_slice(missing);
            for entry in missing {
                fs::create_dir_all(entry.parent().expect("a directory"))?;
                fs::write(entry, contents)?;
            }
            Ok(())
        }
    }

    fn stamp_of(set: &CachedSet) -> String {
        fs::read_to_string(set.dir.join("stamp")).expect("a stamp")
    }

    #[test]
    fn an_empty_cache_is_built_whole_and_then_found() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let set = set_in(tmp.path());
        set.cached().expect_err("nothing is built yet");
        let given = RefCell::new(Vec::new());
        set.ensure(writing("new", &given)).expect("the build");
        assert_eq!(*given.borrow(), set.entries);
        assert_eq!(stamp_of(&set), "a=v1\nb=v2\n");
        set.cached().expect("the set is complete");

        let again = RefCell::new(Vec::new());
        set.ensure(writing("newer", &again)).expect("nothing to build");
        assert!(again.borrow().is_empty(), "a complete set is not built again");
        assert_eq!(fs::read_to_string(&set.entries[0]).expect("a"), "new");
    }

    #[test]
    fn a_stamp_of_other_versions_removes_the_old_files_and_builds_all() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let set = set_in(tmp.path());
        let given = RefCell::new(Vec::new());
        set.ensure(writing("old", &given)).expect("the first build");
        fs::write(set.dir.join("stamp"), "a=v0\nb=v2\n").expect("an old stamp");
        set.cached().expect_err("built from other versions");

        let given = RefCell::new(Vec::new());
        set.ensure(|missing| {
            assert!(set.entries.iter().all(|e| !e.exists()), "the old files are gone first");
            writing("new", &given)(missing)
        })
        .expect("the rebuild");
        assert_eq!(*given.borrow(), set.entries);
        assert_eq!(fs::read_to_string(&set.entries[0]).expect("a"), "new");
        assert_eq!(stamp_of(&set), set.stamp);
    }

    #[test]
    fn a_missing_file_of_a_complete_set_is_rebuilt_alone() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let set = set_in(tmp.path());
        set.ensure(writing("first", &RefCell::new(Vec::new()))).expect("the first build");
        fs::remove_file(&set.entries[1]).expect("b removed");
        set.cached().expect_err("b is missing");

        let given = RefCell::new(Vec::new());
        set.ensure(writing("second", &given)).expect("the rebuild");
        assert_eq!(*given.borrow(), [set.entries[1].clone()]);
        assert_eq!(fs::read_to_string(&set.entries[0]).expect("a"), "first", "a is kept");
        assert_eq!(fs::read_to_string(&set.entries[1]).expect("b"), "second");
        set.cached().expect("complete again");
    }

    #[test]
    fn the_stamp_says_complete_only_after_the_build_and_an_interrupted_build_resumes() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let set = set_in(tmp.path());
        let error = set
            .ensure(|missing| {
                assert_eq!(stamp_of(&set), format!("unfinished build of:\n{}", set.stamp));
                fs::create_dir_all(set.dir.join("bin"))?;
                fs::write(&missing[0], "built")?;
                bail!("interrupted after a")
            })
            .expect_err("the build fails");
        assert!(error.to_string().contains("interrupted after a"), "{error:#}");
        set.cached().expect_err("an unfinished set is not found");

        let given = RefCell::new(Vec::new());
        set.ensure(writing("resumed", &given)).expect("the resumed build");
        assert_eq!(*given.borrow(), [set.entries[1].clone()], "only b is left to build");
        assert_eq!(fs::read_to_string(&set.entries[0]).expect("a"), "built");
        assert_eq!(stamp_of(&set), set.stamp);
    }

    #[test]
    fn a_build_interrupted_after_its_last_file_only_writes_the_stamp() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let set = set_in(tmp.path());
        set.ensure(writing("built", &RefCell::new(Vec::new()))).expect("the first build");
        let unfinished = format!("unfinished build of:\n{}", set.stamp);
        fs::write(set.dir.join("stamp"), unfinished).expect("an unfinished stamp");

        set.ensure(|missing| bail!("nothing is missing, yet the build got {missing:?}"))
            .expect("nothing to build");
        assert_eq!(stamp_of(&set), set.stamp);
        assert_eq!(fs::read_to_string(&set.entries[0]).expect("a"), "built");
    }

    #[test]
    fn files_without_a_stamp_are_of_unknown_origin_and_built_again() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let set = set_in(tmp.path());
        fs::create_dir_all(set.dir.join("bin")).expect("bin/");
        fs::write(&set.entries[0], "unknown").expect("a without a stamp");
        let given = RefCell::new(Vec::new());
        set.ensure(writing("new", &given)).expect("the build");
        assert_eq!(*given.borrow(), set.entries);
        assert_eq!(fs::read_to_string(&set.entries[0]).expect("a"), "new");
    }

    #[test]
    fn a_build_that_leaves_a_file_missing_writes_no_stamp_of_a_complete_set() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let set = set_in(tmp.path());
        let error = set.ensure(|_| Ok(())).expect_err("nothing was built");
        assert!(error.to_string().contains("bin/a"), "{error:#}");
        assert_ne!(stamp_of(&set), set.stamp);
        set.cached().expect_err("still missing");
    }

    #[test]
    fn the_error_of_a_missing_set_names_it_its_directory_and_the_command_that_builds_it() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let set = set_in(tmp.path());
        let error = set.cached().expect_err("nothing is built").to_string();
        assert!(error.contains("the pinned test tools (a v1, b v2)"), "{error}");
        assert!(error.contains(&set.dir.display().to_string()), "{error}");
        assert!(error.contains("run `cargo xtask control-plane --only test` first"), "{error}");
    }

    #[test]
    fn a_directory_entry_of_other_versions_is_removed_whole() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let mut set = set_in(tmp.path());
        let tree = set.dir.join("tree");
        set.entries = vec![tree.clone()];
        fs::create_dir_all(tree.join("inner")).expect("a tree");
        fs::write(tree.join("inner/old"), "x").expect("a file in it");
        fs::write(set.dir.join("stamp"), "a=v0\n").expect("an old stamp");

        set.ensure(|missing| {
            assert_eq!(missing, std::slice::from_ref(&tree));
            assert!(!tree.exists(), "the old tree is gone");
            fs::create_dir_all(tree.join("new"))?;
            Ok(())
        })
        .expect("the rebuild");
        assert!(tree.join("new").is_dir() && !tree.join("inner").exists());
        remove_path(&tree).expect("removed");
        remove_path(&tree).expect("removing what is not there is no error");
    }

    #[test]
    fn the_environment_variable_names_the_directory_or_its_parent() {
        let value = PathBuf::from("/somewhere");
        assert_eq!(Override::Dir.dir(value.clone(), "v1"), Path::new("/somewhere"));
        assert_eq!(Override::Parent.dir(value, "v1"), Path::new("/somewhere/v1"));
    }
}
