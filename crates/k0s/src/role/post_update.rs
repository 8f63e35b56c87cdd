//! The post-update watch from the process's side (`autopilot_signal::post_update` has the
//! marker and the files): [`at_start`], first thing in `k0s worker` and `k0s controller`,
//! and [`guard`], `k0s post-update-guard`, which the units run from `k0s.prev` before every
//! start.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use autopilot_signal::RestartMode;
use autopilot_signal::post_update::{self, AtStart, Files, Guarded};

use crate::VERSION;

/// `k0s post-update-guard`: puts `k0s.prev` back before the new binary starts if the watch
/// says so. Succeeds doing nothing without a marker, a watch or a `k0s.prev`.
pub fn guard(data_dir: &Path, binary: Option<&Path>) -> anyhow::Result<()> {
    let live = match binary {
        Some(binary) => binary.to_path_buf(),
        None => live_of(&std::env::current_exe().context("finding this binary")?),
    };
    match post_update::guard(&Files::new(live.clone(), data_dir.to_path_buf()), post_update::now())?
    {
        Guarded::Nothing => {
            tracing::debug!(binary = %live.display(), "post-update guard: nothing to do")
        }
        Guarded::Counted { starts, abnormal_exits } => {
            tracing::info!(binary = %live.display(), starts, abnormal_exits, "post-update guard: this start of the new binary is counted");
        }
        Guarded::RolledBack { why } => {
            tracing::warn!(binary = %live.display(), %why, "post-update guard: the previous binary is live again");
        }
        Guarded::Kept { why } => {
            tracing::warn!(binary = %live.display(), %why, "post-update guard: a rollback was due, but the live binary stays (k0s.prev holds the same bytes, or it is not the file the update put in place); only reported");
        }
    }
    Ok(())
}

/// The live binary next to `exe`: `exe` without a `.prev` suffix.
fn live_of(exe: &Path) -> PathBuf {
    let name = exe.file_name().unwrap_or_default().to_string_lossy();
    match name.strip_suffix(".prev") {
        Some(live) => exe.with_file_name(live),
        None => exe.to_path_buf(),
    }
}

/// The post-update watch's check first thing at the start of a node process running
/// `binary` with `data_dir`: what the update agent must do about it (watch this binary,
/// report a rollback). When the new binary rolled itself back just now, restarts into the
/// binary put back (`mode`) and returns `None`: the caller returns at once. A marker that
/// cannot be read is logged; the process starts as without a watch.
pub(crate) fn at_start(
    binary: &Path,
    data_dir: &Path,
    mode: RestartMode,
) -> anyhow::Result<Option<AtStart>> {
    let files = Files::new(binary.to_path_buf(), data_dir.to_path_buf());
    match post_update::at_start(&files, VERSION, post_update::now()) {
        Ok(AtStart::RolledBack { why }) => {
            tracing::warn!(%why, "the new binary is rolled back after the update; restarting into the previous one");
            super::restart(binary, mode)?;
            Ok(None)
        }
        Ok(found @ AtStart::Watched(_)) => {
            if mode == RestartMode::Exec {
                tracing::warn!(
                    "the post-update watch counts crashes only under a supervisor that restarts \
                     the process (--restart exit under systemd or OpenRC); with --restart exec \
                     a crash is not restarted, and only a binary never healthy within the window \
                     is rolled back"
                );
            }
            Ok(Some(found))
        }
        Ok(found @ (AtStart::Nothing | AtStart::Report(_))) => Ok(Some(found)),
        Err(err) => {
            tracing::warn!(error = %format!("{err:#}"), "post-update watch: cannot check the restart marker");
            Ok(Some(AtStart::Nothing))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_run_as_k0s_prev_guards_the_k0s_next_to_it() {
        assert_eq!(live_of(Path::new("/usr/local/bin/k0s.prev")), Path::new("/usr/local/bin/k0s"));
        assert_eq!(live_of(Path::new("/opt/k0s/k0s")), Path::new("/opt/k0s/k0s"));
    }
}
