//! What the leader's drain hands the plan engine (DESIGN §14): the nodes it finished
//! draining.
//!
//! A node restarts only when the Plan status records its drain, and only the plan engine
//! writes the Plan status. So the drain does not move a drained node's signal to
//! `ApplyingUpdate` itself: it notes here which signal it drained (by the signal's
//! `created`) and asks for a pass. The pass records the drain on the node's target, writes
//! that status, and only then writes `ApplyingUpdate` on the signal. The note lives in the
//! leader's memory, never on the node's object (where anyone who may patch Nodes could
//! write one): a new leader drains again, which finds nothing left to evict.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use autopilot_api::signal::SignalPhase;
use autopilot_engine::plan::{ObjectKind, ObservedSignal, SignalTarget, TargetObject};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};

/// The drained signals, shared by the drain and the plan engine of one leader term.
#[derive(Clone, Debug)]
pub struct Handoff {
    /// The `created` of the signal drained, by signal object.
    drained: Arc<Mutex<BTreeMap<SignalTarget, String>>>,
    /// Asks the plan controller for a pass.
    poke: UnboundedSender<()>,
}

impl Handoff {
    /// A handoff, and the stream of its requests for a pass.
    pub fn new() -> (Self, UnboundedReceiver<()>) {
        let (poke, pokes) = futures::channel::mpsc::unbounded();
        (Self { drained: Arc::default(), poke }, pokes)
    }

    /// The drain finished draining the node of `target` for the signal created `created`.
    pub fn drained(&self, target: SignalTarget, created: &str) {
        let mut drained = self.drained.lock().unwrap_or_else(PoisonError::into_inner);
        if drained.get(&target).map(String::as_str) != Some(created) {
            drained.insert(target, created.to_owned());
        }
        drop(drained);
        // A plan controller that stopped (the term ended) needs no pass.
        let _ = self.poke.unbounded_send(());
    }

    /// Mark the objects of the views whose signal the drain finished draining (and forget
    /// what no longer applies: an object gone, or whose signal is another or moved on).
    pub fn mark(
        &self,
        control_nodes: &mut BTreeMap<String, TargetObject>,
        nodes: &mut BTreeMap<String, TargetObject>,
    ) {
        // The views are kept between passes: a mark stays only while its note does.
        for object in control_nodes.values_mut().chain(nodes.values_mut()) {
            object.drained = None;
        }
        let mut drained = self.drained.lock().unwrap_or_else(PoisonError::into_inner);
        drained.retain(|target, created| {
            let objects = match target.kind {
                ObjectKind::ControlNode => &mut *control_nodes,
                ObjectKind::Node => &mut *nodes,
            };
            let Some(object) = objects.get_mut(&target.name) else { return false };
            let draining = match &object.signal {
                ObservedSignal::Valid(signal) => {
                    signal.created == *created && signal.phase() == Some(SignalPhase::Cordoning)
                }
                ObservedSignal::Invalid(_) | ObservedSignal::None => false,
            };
            object.drained = draining.then(|| created.clone());
            draining
        });
    }

    /// The engine wrote `ApplyingUpdate` on the signal of `target`: nothing more to hand over.
    pub fn delivered(&self, target: &SignalTarget) {
        self.drained.lock().unwrap_or_else(PoisonError::into_inner).remove(target);
    }
}

#[cfg(test)]
mod tests {
    use autopilot_api::signal::{SignalData, SignalStatus};

    use super::*;

    fn object(name: &str, created: &str, phase: SignalPhase) -> TargetObject {
        let signal = SignalData {
            plan_id: "id".to_owned(),
            created: created.to_owned(),
            command: autopilot_api::signal::SignalCommand {
                id: 0,
                k0supdate: None,
                airgapupdate: None,
                preflight: None,
                rollback: None,
            },
            status: Some(SignalStatus::new(phase, jiff::Timestamp::UNIX_EPOCH)),
            run_id: Some("uid/1".to_owned()),
        };
        TargetObject {
            name: name.to_owned(),
            labels: Default::default(),
            ready: true,
            signal: ObservedSignal::Valid(signal),
            required_keys: Default::default(),
            version: None,
            kubelet_version: None,
            gate_check: None,
            prestage: None,
            drained: None,
        }
    }

    fn node(name: &str) -> SignalTarget {
        SignalTarget { kind: ObjectKind::Node, name: name.to_owned() }
    }

    #[test]
    fn only_the_drained_signal_in_cordoning_is_marked_and_the_rest_is_forgotten() {
        let (handoff, mut pokes) = Handoff::new();
        handoff.drained(node("w1"), "t1");
        handoff.drained(node("w2"), "t1");
        handoff.drained(node("w3"), "t1");
        handoff.drained(node("gone"), "t1");
        assert!(pokes.try_recv().is_ok(), "a pass is asked for");
        let mut nodes = BTreeMap::from([
            ("w1".to_owned(), object("w1", "t1", SignalPhase::Cordoning)),
            // Another signal now (a forged or a newer one): not what was drained.
            ("w2".to_owned(), object("w2", "t2", SignalPhase::Cordoning)),
            // Moved on already.
            ("w3".to_owned(), object("w3", "t1", SignalPhase::ApplyingUpdate)),
        ]);
        handoff.mark(&mut BTreeMap::new(), &mut nodes);
        assert_eq!(nodes["w1"].drained.as_deref(), Some("t1"));
        assert_eq!(nodes["w2"].drained, None);
        assert_eq!(nodes["w3"].drained, None);
        let kept: Vec<SignalTarget> = handoff.drained.lock().unwrap().keys().cloned().collect();
        assert_eq!(kept, [node("w1")]);

        handoff.delivered(&node("w1"));
        assert!(handoff.drained.lock().unwrap().is_empty());
        handoff.mark(&mut BTreeMap::new(), &mut nodes);
        assert_eq!(nodes["w1"].drained, None, "delivered: no longer marked");
    }
}
