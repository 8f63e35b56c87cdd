//! What each fake node does with its signals: its [`Behaviour`], the [`Release`] latch a
//! test opens to let [`Behaviour::CompleteAfter`] nodes finish, and the per-node [`Config`].

use std::collections::BTreeMap;
use std::sync::Arc;

use autopilot_api::signal::SignalPhase;
use tokio::sync::watch;

/// What one node does with the signals it receives.
#[derive(Clone, Debug, Default)]
pub enum Behaviour {
    /// Walk through every phase at once and end `Completed`.
    #[default]
    Complete,
    /// Answer `Completed` in one write, as a node that already runs the requested version
    /// does (REF §7.3); the fastest possible node, for benchmarks of the engine itself.
    AlreadyUpToDate,
    /// Walk the phases as a real agent does with central cordoning (DESIGN §5): write
    /// `Downloading` and `Cordoning`, wait until the leader has cordoned and drained the node
    /// and written `ApplyingUpdate`, write `Restart` and `UnCordoning`, and leave `Completed`
    /// to the leader. (Airgap signals complete as with [`Behaviour::Complete`].)
    CompleteWithLeader,
    /// Report `Downloading`, then fail: with `FailedDownload` right away, or with any other
    /// `phase` (normally `Failed`) after `Cordoning` and `ApplyingUpdate` (k0supdate). The
    /// `reason` goes into the status.
    Fail {
        /// The terminal phase to end in (`FailedDownload` or `Failed`).
        phase: SignalPhase,
        /// Why, as the node would explain it (`status.reason`).
        reason: String,
    },
    /// Never answer: the signal stays without a status, so the node stays in flight until the
    /// behaviour is changed with [`Responder::set_behaviour`](super::Responder::set_behaviour).
    Hold,
    /// Report `Downloading` at once, then wait until the [`Release`] is released and walk
    /// through the remaining phases to `Completed`.
    CompleteAfter(Release),
}

impl Behaviour {
    /// [`Behaviour::Fail`] with `phase` and `reason`.
    pub fn fail(phase: SignalPhase, reason: impl Into<String>) -> Self {
        Self::Fail { phase, reason: reason.into() }
    }
}

/// A latch a test opens to let [`Behaviour::CompleteAfter`] nodes finish. Once released it
/// stays released; clones share the latch, so one release can gate many nodes.
#[derive(Clone, Debug)]
pub struct Release(Arc<watch::Sender<bool>>);

impl Release {
    /// A closed latch.
    pub fn new() -> Self {
        Self(Arc::new(watch::Sender::new(false)))
    }

    /// Opens the latch: every node waiting on it (now or later) goes on.
    pub fn release(&self) {
        self.0.send_replace(true);
    }

    /// Whether [`Release::release`] was called.
    pub fn is_released(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the latch is open.
    pub async fn released(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail with "sender dropped".
        let _ = rx.wait_for(|open| *open).await;
    }
}

impl Default for Release {
    fn default() -> Self {
        Self::new()
    }
}

/// How a [`Responder`](super::Responder) behaves, per node name.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub(super) default: Behaviour,
    pub(super) nodes: BTreeMap<String, Behaviour>,
    pub(super) adopt_in_progress: bool,
}

impl Config {
    /// Every node [`Behaviour::Complete`]s; signals that already have a status are left alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// The behaviour of the node (Node and/or ControlNode) named `name`.
    pub fn node(mut self, name: impl Into<String>, behaviour: Behaviour) -> Self {
        self.nodes.insert(name.into(), behaviour);
        self
    }

    /// The behaviour of every node without its own [`Config::node`] entry.
    pub fn default_behaviour(mut self, behaviour: Behaviour) -> Self {
        self.default = behaviour;
        self
    }

    /// Also take over signals that already carry a non-terminal status when the responder
    /// first sees them (e.g. written by an earlier responder of the same test), continuing
    /// after that phase. Off by default: such signals belong to someone else.
    pub fn adopt_in_progress(mut self, adopt: bool) -> Self {
        self.adopt_in_progress = adopt;
        self
    }

    pub(super) fn behaviour(&self, name: &str) -> Behaviour {
        self.nodes.get(name).unwrap_or(&self.default).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_release_lets_current_and_later_waiters_through() {
        let release = Release::new();
        let waiter = tokio::spawn({
            let release = release.clone();
            async move { release.released().await }
        });
        assert!(!release.is_released());
        release.release();
        waiter.await.unwrap();
        release.released().await;
    }
}
