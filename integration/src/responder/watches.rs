//! Watching Nodes and ControlNodes: every fresh signal starts a driver
//! (`super::driver`), every signal that goes away ends what was in flight.

use std::collections::BTreeSet;
use std::sync::Arc;

use autopilot_api::signal::{self, SignalData, SignalPhase};
use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;

use super::driver::{Driver, SignalObject};
use super::record::{Event, ObjectKind, ObjectRef, SignalKey, command_kind, revision_of};
use super::script::{Step, script};
use super::shared::{Fresh, Shared, State};

/// Watches every object of one kind and starts a driver for each new signal. Runs until the
/// responder is dropped; watch errors are retried with kube's default backoff.
pub(super) async fn watch_kind<K: SignalObject>(
    shared: Arc<Shared>,
    api: Api<K>,
    kind: ObjectKind,
    ready: tokio::sync::mpsc::Sender<ObjectKind>,
) {
    let mut ready = Some(ready);
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut listing: BTreeSet<String> = BTreeSet::new();
    let stream = watcher(api.clone(), watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(err) => {
                eprintln!("responder: {kind} watch error (retrying): {err}");
                continue;
            }
        };
        match event {
            watcher::Event::Init => listing.clear(),
            watcher::Event::InitApply(obj) => {
                listing.insert(obj.meta().name.clone().unwrap_or_default());
                on_apply(&shared, &api, kind, &obj);
            }
            watcher::Event::InitDone => {
                // Objects that vanished while the watch was down were deleted.
                for gone in listed.difference(&listing) {
                    on_gone(&shared, &ObjectRef { kind, name: gone.clone() }, 0, "object deleted");
                }
                listed = std::mem::take(&mut listing);
                if let Some(ready) = ready.take() {
                    let _ = ready.send(kind).await;
                }
            }
            watcher::Event::Apply(obj) => {
                listed.insert(obj.meta().name.clone().unwrap_or_default());
                on_apply(&shared, &api, kind, &obj);
            }
            watcher::Event::Delete(obj) => {
                let name = obj.meta().name.clone().unwrap_or_default();
                listed.remove(&name);
                let revision = revision_of(obj.meta().resource_version.as_deref());
                on_gone(&shared, &ObjectRef { kind, name }, revision, "object deleted");
            }
        }
    }
}

/// Reacts to the current state of one object.
fn on_apply<K: SignalObject>(shared: &Arc<Shared>, api: &Api<K>, kind: ObjectKind, obj: &K) {
    let meta = obj.meta();
    let object = ObjectRef { kind, name: meta.name.clone().unwrap_or_default() };
    let revision = revision_of(meta.resource_version.as_deref());
    let data = match signal::from_meta(meta) {
        Ok(Some(data)) => data,
        Ok(None) => {
            on_gone(shared, &object, revision, "signal annotations removed");
            return;
        }
        Err(err) => {
            eprintln!("responder: {object} carries an invalid signal (ignored): {err}");
            return;
        }
    };
    let mut state = shared.lock();
    match data.phase() {
        None => match shared.note_fresh(&mut state, &object, &data, revision) {
            Fresh::New | Fresh::Repeat => {
                let busy = state.objects.get(&object).and_then(|o| o.driver.as_ref());
                let same_signal_driven =
                    busy.is_some_and(|(_, key, _)| *key == SignalKey::of(&data));
                if !same_signal_driven {
                    spawn_driver(shared, &mut state, api.clone(), object, data, None);
                }
            }
            Fresh::Known => {}
        },
        Some(phase) => {
            let key = SignalKey::of(&data);
            let entry = state.objects.entry(object.clone()).or_default();
            // A terminal phase on the signal in flight that the node's script does not write
            // (with central cordoning the leader writes `Completed` after the node's last
            // write), or with no driver left to see it: someone else ended it. A running
            // driver whose script ends the signal writes that phase, or sees it when it
            // tries to.
            let (behaviour, _) = shared.behaviour(&object.name);
            let ends_itself = script(&behaviour, command_kind(&data))
                .iter()
                .any(|step| matches!(step, Step::Write(phase, _) if phase.is_terminal()));
            let driving = entry
                .driver
                .as_ref()
                .is_some_and(|(_, driven, abort)| *driven == key && !abort.is_finished());
            let ended_by_others = !ends_itself || !driving;
            if phase.is_terminal() && entry.in_flight.as_ref() == Some(&key) && ended_by_others {
                entry.in_flight = None;
                shared.record(&mut state, revision, &object, Event::Saw { key, phase });
                return;
            }
            if entry.in_flight.as_ref().is_some_and(|k| *k != key) {
                let previous = entry.in_flight.clone().expect("checked above");
                shared.end(&mut state, &object, previous, revision, "replaced by a newer signal");
            }
            let adopt = shared.config.borrow().adopt_in_progress;
            let entry = state.objects.entry(object.clone()).or_default();
            if adopt && !phase.is_terminal() && !entry.seen.contains(&key) {
                entry.seen.insert(key.clone());
                entry.in_flight = Some(key.clone());
                let event = Event::Signalled {
                    key,
                    command: command_kind(&data),
                    data: Box::new(data.clone()),
                    repeat: false,
                    adopted: true,
                };
                shared.record(&mut state, revision, &object, event);
                spawn_driver(shared, &mut state, api.clone(), object, data, Some(phase));
            }
        }
    }
}

/// The object or its signal went away: end what was in flight.
fn on_gone(shared: &Shared, object: &ObjectRef, revision: u64, why: &str) {
    let mut state = shared.lock();
    let in_flight = state.objects.get(object).and_then(|o| o.in_flight.clone());
    if let Some(key) = in_flight {
        shared.end(&mut state, object, key, revision, why);
    }
}

/// Starts a driver answering `data` on `object` (after `resume_after`, for an adopted
/// signal), replacing any driver already working on the object.
fn spawn_driver<K: SignalObject>(
    shared: &Arc<Shared>,
    state: &mut State,
    api: Api<K>,
    object: ObjectRef,
    data: SignalData,
    resume_after: Option<SignalPhase>,
) {
    state.next_driver += 1;
    let id = state.next_driver;
    let key = SignalKey::of(&data);
    // Reap finished drivers so a long benchmark does not accumulate them.
    while state.drivers.try_join_next().is_some() {}
    let driver = Driver { shared: shared.clone(), api, object: object.clone(), data, id };
    let abort = state.drivers.spawn(driver.run(resume_after));
    let entry = state.objects.entry(object).or_default();
    if let Some((_, _, old)) = entry.driver.replace((id, key, abort)) {
        old.abort();
    }
}
