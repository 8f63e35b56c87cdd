//! Answering one signal on one object: the node's script carried out, one read-modify-write
//! of the signal annotation per phase, with optimistic concurrency.

use std::sync::Arc;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::{self, SignalData, SignalPhase, SignalStatus};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::behaviour::Behaviour;
use super::record::{Event, ObjectRef, SignalKey, command_kind, revision_of};
use super::script::{Step, script};
use super::shared::Shared;

/// The object types the responder answers on.
pub(super) trait SignalObject:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> SignalObject for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// First pause before retrying a write that failed with something other than a conflict
/// (the API server may be restarting); doubles up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Longest pause between two attempts of a failing write.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);

/// How often [`Step::AwaitPhase`] looks at the object again.
const AWAIT_PHASE_POLL: Duration = Duration::from_millis(50);

/// Why a driver stopped writing.
enum Stop {
    /// The object is gone, or carries another signal (the watcher records it).
    NotOurs,
    /// The signal already has a terminal status.
    Terminal,
    /// The signal was written again without a status: answer it from the start.
    Rewritten,
}

/// Answers one signal on one object.
pub(super) struct Driver<K: SignalObject> {
    /// The responder's bookkeeping.
    pub(super) shared: Arc<Shared>,
    /// The objects of the signal's kind.
    pub(super) api: Api<K>,
    /// The object carrying the signal.
    pub(super) object: ObjectRef,
    /// The signal as first seen.
    pub(super) data: SignalData,
    /// This driver's id (the object's entry names the driver working on it).
    pub(super) id: u64,
}

impl<K: SignalObject> Driver<K> {
    /// Answers the signal (after `resume_after`, for an adopted one) until its script is
    /// done or the signal is no longer ours.
    pub(super) async fn run(self, mut resume_after: Option<SignalPhase>) {
        let key = SignalKey::of(&self.data);
        let command = command_kind(&self.data);
        'signal: loop {
            let behaviour = self.behaviour().await;
            let mut steps = script(&behaviour, command);
            if let Some(done) = resume_after.take() {
                let position =
                    steps.iter().position(|s| matches!(s, Step::Write(p, _) if *p == done));
                if let Some(position) = position {
                    steps.drain(..=position);
                }
            }
            let mut wrote_any = false;
            for step in steps {
                match step {
                    Step::Wait(release) => release.released().await,
                    Step::AwaitPhase(phase) => match self.await_phase(&key, phase).await {
                        Ok(()) => {}
                        Err(Stop::Rewritten) => continue 'signal,
                        Err(Stop::NotOurs | Stop::Terminal) => break 'signal,
                    },
                    Step::Write(phase, reason) => {
                        match self.write(&key, phase, reason, wrote_any).await {
                            Ok(()) => wrote_any = true,
                            Err(Stop::Rewritten) => continue 'signal,
                            Err(Stop::NotOurs | Stop::Terminal) => break 'signal,
                        }
                    }
                }
            }
            break;
        }
        let mut state = self.shared.lock();
        if let Some(entry) = state.objects.get_mut(&self.object)
            && entry.driver.as_ref().is_some_and(|(id, _, _)| *id == self.id)
        {
            entry.driver = None;
        }
    }

    /// Waits until the signal `key` shows `phase` (written by someone else).
    async fn await_phase(&self, key: &SignalKey, phase: SignalPhase) -> Result<(), Stop> {
        loop {
            if let Ok(object) = self.api.get_opt(&self.object.name).await {
                let Some(object) = object else { return Err(Stop::NotOurs) };
                match signal::from_meta(object.meta()) {
                    Ok(Some(data)) if SignalKey::of(&data) == *key => {
                        if data.phase() == Some(phase) {
                            return Ok(());
                        }
                        if data.phase().is_some_and(|p| p.is_terminal()) {
                            return Err(Stop::Terminal);
                        }
                    }
                    _ => return Err(Stop::NotOurs),
                }
            }
            tokio::time::sleep(AWAIT_PHASE_POLL).await;
        }
    }

    /// The node's behaviour, waiting while it is [`Behaviour::Hold`].
    async fn behaviour(&self) -> Behaviour {
        loop {
            let (behaviour, mut changes) = self.shared.behaviour(&self.object.name);
            if !matches!(behaviour, Behaviour::Hold) {
                return behaviour;
            }
            if changes.changed().await.is_err() {
                // The responder is gone; hold forever (the task is aborted with it).
                std::future::pending::<()>().await;
            }
        }
    }

    /// Writes `phase` onto the signal `key`, retrying conflicts (re-read, re-decide) and
    /// other errors (with backoff) until it is written or no longer applies.
    async fn write(
        &self,
        key: &SignalKey,
        phase: SignalPhase,
        reason: Option<String>,
        wrote_any: bool,
    ) -> Result<(), Stop> {
        let name = &self.object.name;
        let mut delay = FIRST_RETRY_DELAY;
        loop {
            let attempt = async {
                let Some(obj) = self.api.get_opt(name).await? else {
                    return Ok(Err(Stop::NotOurs));
                };
                let meta = obj.meta();
                let revision = revision_of(meta.resource_version.as_deref());
                let current = match signal::from_meta(meta) {
                    Ok(Some(data)) if SignalKey::of(&data) == *key => data,
                    _ => return Ok(Err(Stop::NotOurs)),
                };
                match current.phase() {
                    Some(p) if p.is_terminal() => {
                        let mut state = self.shared.lock();
                        let saw = Event::Saw { key: key.clone(), phase: p };
                        self.shared.record(&mut state, revision, &self.object, saw);
                        let why = format!("someone else wrote the terminal status {p}");
                        self.shared.end(&mut state, &self.object, key.clone(), revision, &why);
                        return Ok(Err(Stop::Terminal));
                    }
                    None if wrote_any => {
                        let mut state = self.shared.lock();
                        self.shared.note_fresh(&mut state, &self.object, &current, revision);
                        return Ok(Err(Stop::Rewritten));
                    }
                    _ => {}
                }
                let mut status = SignalStatus::new(phase, jiff::Timestamp::now());
                status.reason = reason.clone();
                let (version, json) = signal::encode(&current.with_status(status));
                let patch = json!({
                    "metadata": {
                        "resourceVersion": meta.resource_version,
                        "annotations": {
                            keys::ANNOTATION_SIGNAL_VERSION: version,
                            keys::ANNOTATION_SIGNAL_DATA: json,
                        },
                    },
                });
                let written =
                    self.api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                let revision = revision_of(written.meta().resource_version.as_deref());
                self.shared.note_written(&self.object, key, phase, reason.clone(), revision);
                Ok::<_, kube::Error>(Ok(()))
            };
            match attempt.await {
                Ok(outcome) => return outcome,
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    // Someone else wrote the object since we read it: re-read and re-decide.
                }
                Err(err) => {
                    eprintln!(
                        "responder: writing {phase} to {} failed (retrying): {err}",
                        self.object
                    );
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                }
            }
        }
    }
}
