//! A passive recorder of signal progress: watches every `Node` and `ControlNode` and keeps,
//! per object, each change of its signal's phase in etcd revision order. Unlike the
//! [`crate::responder`] it never writes; scenarios with real node agents use it to check the
//! order in which nodes went through their phases.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use autopilot_api::signal::{self, SignalPhase};
use autopilot_api::v1beta2::ControlNode;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

/// How long the recorder's watches get to list what exists.
const STARTUP: std::time::Duration = std::time::Duration::from_secs(30);

pub use crate::responder::{ObjectKind, ObjectRef};

/// One observed state of a signal on an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The etcd revision (`resourceVersion`) of the object in this state.
    pub revision: u64,
    /// The object.
    pub object: ObjectRef,
    /// The plan's `spec.id`.
    pub plan_id: String,
    /// The command index.
    pub command_id: u32,
    /// When the leader signalled (the signal's `created`).
    pub created: String,
    /// The node-side phase (`None`: signalled, no answer yet).
    pub phase: Option<SignalPhase>,
    /// The phase's timestamp, as written.
    pub timestamp: Option<String>,
}

/// Records signal changes until dropped.
#[derive(Debug)]
pub struct SignalRecorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    vanished: Arc<Mutex<Vec<(u64, ObjectRef)>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl SignalRecorder {
    /// Starts watching every Node and ControlNode with `client`; returns once both watches
    /// have listed what exists (so nothing written afterwards is missed), or fails after
    /// `STARTUP`.
    pub async fn start(client: &kube::Client) -> anyhow::Result<Self> {
        Self::start_through(std::slice::from_ref(client)).await
    }

    /// [`SignalRecorder::start`] through each of `clients` (one per API server) at once,
    /// the history merged by revision: what one API server's watch missed while it restarted
    /// (a new API server's watch cache cannot resume an older revision, so its watchers list
    /// again and see only the state then) the others saw, as long as they do not all restart
    /// at the same time.
    pub async fn start_through(clients: &[kube::Client]) -> anyhow::Result<Self> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let vanished = Arc::new(Mutex::new(Vec::new()));
        let (listed, mut listed_rx) = tokio::sync::watch::channel(0usize);
        let listed = Arc::new(listed);
        let mut tasks = Vec::new();
        for client in clients {
            tasks.push(tokio::spawn(record::<Node>(
                client.clone(),
                ObjectKind::Node,
                seen.clone(),
                vanished.clone(),
                listed.clone(),
            )));
            tasks.push(tokio::spawn(record::<ControlNode>(
                client.clone(),
                ObjectKind::ControlNode,
                seen.clone(),
                vanished.clone(),
                listed.clone(),
            )));
        }
        let watches = tasks.len();
        let recorder = Self { seen, vanished, tasks };
        tokio::time::timeout(STARTUP, listed_rx.wait_for(|n| *n >= watches))
            .await
            .map_err(|_| {
                anyhow::anyhow!("the signal recorder's watches did not list in {STARTUP:?}")
            })?
            .map_err(|_| anyhow::anyhow!("the signal recorder's watches ended"))?;
        Ok(recorder)
    }

    /// Objects whose signal disappeared (annotations removed or unreadable) after it had been
    /// seen, with the revision at which it was missing.
    pub fn vanished(&self) -> Vec<(u64, ObjectRef)> {
        self.vanished.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Everything seen so far, in revision order: each change of an object's signal once
    /// (what several watches saw is merged).
    pub fn history(&self) -> Vec<Seen> {
        let mut all = self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        all.sort_by_key(|s| s.revision);
        merge(all)
    }

    /// The states each object went through, in revision order.
    pub fn by_object(&self) -> BTreeMap<ObjectRef, Vec<Seen>> {
        let mut by_object: BTreeMap<ObjectRef, Vec<Seen>> = BTreeMap::new();
        for seen in self.history() {
            by_object.entry(seen.object.clone()).or_default().push(seen);
        }
        by_object
    }
}

/// `seen` (in revision order, from one or several watches) with each object's repeats
/// dropped: an entry whose state is the one its object was last seen in.
fn merge(seen: Vec<Seen>) -> Vec<Seen> {
    let mut last: BTreeMap<ObjectRef, (String, u32, Option<SignalPhase>)> = BTreeMap::new();
    seen.into_iter()
        .filter(|s| {
            let state = (s.created.clone(), s.command_id, s.phase);
            last.insert(s.object.clone(), state.clone()).as_ref() != Some(&state)
        })
        .collect()
}

impl Drop for SignalRecorder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn record<K>(
    client: kube::Client,
    kind: ObjectKind,
    seen: Arc<Mutex<Vec<Seen>>>,
    vanished: Arc<Mutex<Vec<(u64, ObjectRef)>>>,
    listed: Arc<tokio::sync::watch::Sender<usize>>,
) where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::all(client);
    let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut last: BTreeMap<String, (String, u32, Option<SignalPhase>)> = BTreeMap::new();
    let mut first_list = true;
    while let Some(event) = stream.next().await {
        let objects = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => vec![o],
            Ok(watcher::Event::InitDone) => {
                if std::mem::take(&mut first_list) {
                    listed.send_modify(|n| *n += 1);
                }
                continue;
            }
            Ok(_) | Err(_) => continue,
        };
        for object in objects {
            let name = object.name_any();
            let revision = object.meta().resource_version.as_deref().and_then(|rv| rv.parse().ok());
            let Ok(Some(data)) = signal::from_meta(object.meta()) else {
                if last.remove(&name).is_some() {
                    vanished
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((revision.unwrap_or(0), ObjectRef { kind, name }));
                }
                continue;
            };
            let phase = data.phase();
            let state = (data.created.clone(), data.command.id, phase);
            if last.get(&name) == Some(&state) {
                continue;
            }
            last.insert(name.clone(), state);
            let revision = object.meta().resource_version.as_deref().and_then(|rv| rv.parse().ok());
            seen.lock().unwrap_or_else(|p| p.into_inner()).push(Seen {
                revision: revision.unwrap_or(0),
                object: ObjectRef { kind, name },
                plan_id: data.plan_id.clone(),
                command_id: data.command.id,
                created: data.created.clone(),
                phase,
                timestamp: data.status.as_ref().map(|s| s.timestamp.clone()),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(revision: u64, name: &str, phase: Option<SignalPhase>) -> Seen {
        Seen {
            revision,
            object: ObjectRef { kind: ObjectKind::ControlNode, name: name.to_owned() },
            plan_id: "p".to_owned(),
            command_id: 0,
            created: "t0".to_owned(),
            phase,
            timestamp: None,
        }
    }

    #[test]
    fn watches_merged_keep_each_change_once_and_what_only_one_saw() {
        use SignalPhase::{Completed, Restarting, Uncordoning};
        // One watch saw every change; another listed again after its API server restarted
        // (missing Uncordoning, then seeing the later Completed at its own revision).
        let mut all = vec![
            seen(100, "c0", Some(Restarting)),
            seen(105, "c0", Some(Uncordoning)),
            seen(110, "c0", Some(Completed)),
            seen(100, "c0", Some(Restarting)),
            seen(107, "c0", Some(Uncordoning)),
            seen(110, "c0", Some(Completed)),
            seen(101, "c1", None),
        ];
        all.sort_by_key(|s| s.revision);
        let merged = merge(all);
        let merged: Vec<(u64, &str, Option<SignalPhase>)> =
            merged.iter().map(|s| (s.revision, s.object.name.as_str(), s.phase)).collect();
        assert_eq!(
            merged,
            vec![
                (100, "c0", Some(Restarting)),
                (101, "c1", None),
                (105, "c0", Some(Uncordoning)),
                (110, "c0", Some(Completed)),
            ]
        );
    }
}
