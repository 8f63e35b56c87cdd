//! A yes/no health signal one part of a node process publishes and others read: the update
//! agent's watch of its own object, the Kubernetes components `k0s` runs; the post-update
//! watch counts a new binary healthy only while every part it is given says yes.

use std::path::Path;
use std::sync::Arc;

/// The file in the data directory where a process on trial says why its components are not
/// healthy yet; the process that runs the trial quotes it when the trial fails.
pub const TRIAL_REASON_FILE: &str = "autopilot-trial-health";

/// The longest reason kept in [`TRIAL_REASON_FILE`].
const MAX_TRIAL_REASON: usize = 1024;

/// Writes (whole, by rename) why this process on trial is not healthy yet, or removes the
/// file once it is (`None`). Best effort: a trial is judged without it.
pub fn write_trial_reason(data_dir: &Path, reason: Option<&str>) {
    let path = data_dir.join(TRIAL_REASON_FILE);
    match reason {
        None => {
            let _ = std::fs::remove_file(&path);
        }
        Some(reason) => {
            let reason = autopilot_api::text::truncate(reason, MAX_TRIAL_REASON);
            let temp = data_dir.join(format!(".{TRIAL_REASON_FILE}.{}.tmp", std::process::id()));
            if std::fs::write(&temp, reason).is_ok() {
                let _ = std::fs::rename(&temp, &path);
            }
        }
    }
}

/// What a process on trial last wrote with [`write_trial_reason`], bounded, and removes it.
pub fn take_trial_reason(data_dir: &Path) -> Option<String> {
    let path = data_dir.join(TRIAL_REASON_FILE);
    let text = std::fs::read(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&text);
    let text = autopilot_api::text::truncate(text.trim(), MAX_TRIAL_REASON);
    (!text.is_empty()).then_some(text)
}

/// A health signal (false until set); cheap to clone, every clone the same signal.
#[derive(Clone, Debug)]
pub struct Health(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Health {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(false)))
    }
}

impl Health {
    /// Records whether it is healthy now.
    pub fn set(&self, healthy: bool) {
        self.0.send_if_modified(|now| std::mem::replace(now, healthy) != healthy);
    }

    /// Whether it is healthy now.
    pub fn get(&self) -> bool {
        *self.0.borrow()
    }

    /// A signal that is healthy while every one of `parts` is; kept current by a task on
    /// the runtime this is called on, which ends when nothing reads the result any more.
    pub fn all(parts: &[Health]) -> Health {
        let all = Health::default();
        let mut receivers: Vec<_> = parts.iter().map(|part| part.0.subscribe()).collect();
        let weak = Arc::downgrade(&all.0);
        tokio::spawn(async move {
            loop {
                let Some(sender) = weak.upgrade() else { return };
                let healthy = receivers.iter_mut().all(|r| *r.borrow_and_update());
                sender.send_if_modified(|now| std::mem::replace(now, healthy) != healthy);
                drop(sender);
                let changed = futures::future::select_all(
                    receivers.iter_mut().map(|r| Box::pin(r.changed())),
                );
                if changed.await.0.is_err() {
                    return;
                }
            }
        });
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_reason_is_written_whole_read_once_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(take_trial_reason(dir.path()), None);
        write_trial_reason(dir.path(), Some("kubelet is not running"));
        assert_eq!(take_trial_reason(dir.path()).as_deref(), Some("kubelet is not running"));
        assert_eq!(take_trial_reason(dir.path()), None, "read once");
        write_trial_reason(dir.path(), Some(&"x".repeat(5000)));
        assert!(take_trial_reason(dir.path()).unwrap().len() <= MAX_TRIAL_REASON + 4);
        write_trial_reason(dir.path(), Some("not yet"));
        write_trial_reason(dir.path(), None);
        assert_eq!(take_trial_reason(dir.path()), None, "healthy: nothing to quote");
    }

    async fn settled(health: &Health, want: bool) -> bool {
        for _ in 0..100 {
            if health.get() == want {
                return true;
            }
            tokio::task::yield_now().await;
        }
        health.get() == want
    }

    #[tokio::test]
    async fn all_is_healthy_only_while_every_part_is() {
        let (watch, components) = (Health::default(), Health::default());
        let all = Health::all(&[watch.clone(), components.clone()]);
        assert!(settled(&all, false).await);
        watch.set(true);
        assert!(settled(&all, false).await, "one part is not healthy yet");
        components.set(true);
        assert!(settled(&all, true).await);
        components.set(false);
        assert!(settled(&all, false).await);
    }
}
