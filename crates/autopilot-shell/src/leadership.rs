//! Leadership as a handle: who holds the leader lease and until when, as this process last
//! saw it, and whether that is this process now ([`Leadership::is_current`]).
//!
//! The elector (the controller's leader election) publishes every [`Claim`] it sees through
//! an [`Elector`]; the components that act only while this process leads (the Plan engine,
//! the updater) and the status socket hold [`Leadership`] clones. A claim carries its
//! expiry on this process's own clock (the time the claim's last renewal was seen plus the
//! lease duration), so a leader whose renewals stop being seen stops counting as the leader
//! when its claim runs out, even if the elector has not noticed yet.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// A claim on the leader lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The holder's identity (`<node-name>_<suffix>`).
    pub holder: String,
    /// When the claim runs out unless renewed, on this process's clock.
    pub expiry: Instant,
}

impl Claim {
    /// A claim by `holder` whose last renewal was seen at `seen` and which lasts `duration`.
    pub fn renewed(holder: impl Into<String>, seen: Instant, duration: Duration) -> Self {
        Self { holder: holder.into(), expiry: seen + duration }
    }

    /// Whether it is still valid at `now`.
    pub fn is_valid_at(&self, now: Instant) -> bool {
        now < self.expiry
    }
}

/// The publishing side of [`Leadership`]: held by the leader election.
pub struct Elector {
    claim: watch::Sender<Option<Claim>>,
}

impl Elector {
    /// Publish the claim now seen (`None`: nobody holds the lease, or it is not known).
    pub fn publish(&self, claim: Option<Claim>) {
        self.claim.send_if_modified(|current| {
            let changed = *current != claim;
            *current = claim;
            changed
        });
    }
}

/// Whether, and until when, this process leads (cheap to clone).
#[derive(Clone, Debug)]
pub struct Leadership {
    identity: Arc<str>,
    claim: watch::Receiver<Option<Claim>>,
}

impl Leadership {
    /// A handle for the process whose lease identity is `identity`, and the elector that
    /// feeds it; nobody holds the lease until the elector says so.
    pub fn new(identity: impl Into<Arc<str>>) -> (Elector, Self) {
        let (claim, rx) = watch::channel(None);
        (Elector { claim }, Self { identity: identity.into(), claim: rx })
    }

    /// A handle that never leads (for processes without an election).
    pub fn never(identity: impl Into<Arc<str>>) -> Self {
        Self::new(identity).1
    }

    /// This process's lease identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The claim last seen, whoever holds it.
    pub fn claim(&self) -> Option<Claim> {
        self.claim.borrow().clone()
    }

    /// Whether this process holds an unexpired claim now (never once the elector is gone:
    /// nobody renews the claim any more).
    pub fn is_current(&self) -> bool {
        self.current_until().is_some()
    }

    /// The expiry of this process's claim, if it holds an unexpired one now.
    fn current_until(&self) -> Option<Instant> {
        if self.claim.has_changed().is_err() {
            return None;
        }
        let now = Instant::now();
        self.claim
            .borrow()
            .as_ref()
            .filter(|claim| *claim.holder == *self.identity && claim.is_valid_at(now))
            .map(|claim| claim.expiry)
    }

    /// Wait until this process leads; `false` when the elector is gone first (nobody will
    /// make it lead again).
    pub async fn acquired(&mut self) -> bool {
        loop {
            if self.is_current() {
                return true;
            }
            if self.claim.changed().await.is_err() {
                return false;
            }
        }
    }

    /// Wait until this process no longer leads: its claim changed to another holder or to
    /// none, ran out without a renewal, or the elector is gone.
    pub async fn lost(&mut self) {
        loop {
            let Some(expiry) = self.current_until() else { return };
            tokio::select! {
                changed = self.claim.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(expiry) => {}
            }
        }
    }

    /// Wait until leading starts or stops (from what [`Self::is_current`] says now), and
    /// return whether this process leads then; `None` once the elector is gone.
    pub async fn next_change(&mut self) -> Option<bool> {
        if self.is_current() {
            self.lost().await;
            (self.claim.has_changed().is_ok()).then_some(false)
        } else {
            self.acquired().await.then_some(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(15);

    #[tokio::test(start_paused = true)]
    async fn a_claim_counts_only_for_its_holder_and_only_until_it_runs_out() {
        let (elector, mut leadership) = Leadership::new("c1_0000abcd");
        assert!(!leadership.is_current());
        elector.publish(Some(Claim::renewed("c2_00001234", Instant::now(), LEASE)));
        assert!(!leadership.is_current(), "another controller's claim");
        elector.publish(Some(Claim::renewed("c1_0000abcd", Instant::now(), LEASE)));
        assert!(leadership.is_current());
        assert!(leadership.acquired().await);

        // Not renewed: it runs out on this process's clock, with nothing published.
        let began = Instant::now();
        leadership.lost().await;
        assert_eq!(began.elapsed(), LEASE);
        assert!(!leadership.is_current());
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_keep_it_and_a_release_or_a_gone_elector_ends_it() {
        let (elector, leadership) = Leadership::new("c1_0000abcd");
        let mut watcher = leadership.clone();
        {
            let change = std::pin::pin!(watcher.next_change());
            let mut change = change;
            assert!(futures::poll!(&mut change).is_pending(), "nobody leads yet");
            elector.publish(Some(Claim::renewed("c1_0000abcd", Instant::now(), LEASE)));
            assert_eq!(change.await, Some(true));
        }
        {
            // Renewed every half lease for two leases: no change.
            let mut change = std::pin::pin!(watcher.next_change());
            for _ in 0..4 {
                tokio::time::sleep(LEASE / 2).await;
                elector.publish(Some(Claim::renewed("c1_0000abcd", Instant::now(), LEASE)));
                assert!(futures::poll!(&mut change).is_pending(), "renewals are not changes");
                assert!(leadership.is_current());
            }
            // Released.
            elector.publish(None);
            assert_eq!(change.await, Some(false));
        }
        {
            // Another controller leads, then the elector is gone: no change any more.
            let mut change = std::pin::pin!(watcher.next_change());
            elector.publish(Some(Claim::renewed("c2_00001234", Instant::now(), LEASE)));
            assert!(futures::poll!(&mut change).is_pending(), "another controller's claim");
            drop(elector);
            assert_eq!(change.await, None);
        }
        assert!(!leadership.clone().acquired().await);
    }
}
