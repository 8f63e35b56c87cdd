//! Small filesystems for "disk full" scenarios: a size-limited tmpfs mounted over a
//! directory for the length of a test. Mounting needs root (the project's machines and CI
//! run tests as root); [`SmallFilesystem::can_mount`] tells a test whether it may try.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, ensure};

/// A tmpfs of a fixed size mounted over a directory; unmounted on drop.
#[derive(Debug)]
pub struct SmallFilesystem {
    dir: PathBuf,
}

impl SmallFilesystem {
    /// Whether this process may mount filesystems (it runs as root).
    pub fn can_mount() -> bool {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }

    /// Creates `dir` if needed and mounts a tmpfs of `bytes` bytes over it (rounded up to
    /// whole pages by the kernel).
    pub fn mount(dir: impl Into<PathBuf>, bytes: u64) -> anyhow::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes},mode=0755"))
            .arg("tmpfs")
            .arg(&dir)
            .status()
            .context("running mount")?;
        ensure!(status.success(), "mounting a {bytes}-byte tmpfs on {} failed", dir.display());
        Ok(Self { dir })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        // Lazy: a process killed just before may still hold a file open for a moment.
        let _ = Command::new("umount").arg("--lazy").arg(&self.dir).status();
    }
}
