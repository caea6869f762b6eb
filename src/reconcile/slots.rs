//! A watch's `maxConcurrentReconciles` slots, shared by its namespaces, and the CRs in line for one.
//! A CR that finds no slot free is parked here and its reconcile returns at once: kube-runtime keeps
//! a reconcile's future, its task and its span until it returns, in tables that do not shrink, so a
//! reconcile waiting inside for a slot made them as large as every CR queued at once (all of them
//! when the operator starts). When a slot frees, the first CR in line (new and changed CRs before
//! resyncs of converged ones, each in arrival order) gets it, held for it, and its controller is
//! asked to reconcile it again; that reconcile takes the held slot.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

use crate::cached::Cached;
use crate::run::Priority;

/// A request to reconcile a CR again, to its namespace's controller.
pub type Recall = ObjectRef<Cached>;

/// The slots of one watch.
#[derive(Debug)]
pub struct Slots {
    limit: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    in_use: usize,
    /// The CRs in line, by key.
    parked: HashMap<String, Parked>,
    /// Keys in line, in arrival order per priority (a key whose entry left or moved is skipped).
    urgent: VecDeque<String>,
    resync: VecDeque<String>,
    /// Slots held for CRs asked to come back, until their reconcile takes them (or they are deleted).
    held: HashMap<String, Held>,
    /// Each watched namespace's controller (`None`: all namespaces).
    controllers: Vec<(Option<String>, mpsc::UnboundedSender<Recall>)>,
}

/// A CR in line.
#[derive(Debug)]
struct Parked {
    target: Recall,
    priority: Priority,
    /// Its run is a resync, as decided when it was first looked at (see `reconcile::is_resync`).
    paced: bool,
}

/// A slot held for a CR.
#[derive(Debug, Clone, Copy)]
struct Held {
    paced: bool,
}

/// A slot, given back (to the next CR in line, or free) when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    /// The CR's run is a resync: it was when it was parked, or is now.
    pub paced: bool,
}

impl Slots {
    /// `limit` slots (at least one).
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Slots { limit: limit.max(1), state: Mutex::default() })
    }

    /// The requests to reconcile CRs of `namespace` (`None`: all namespaces) again, for that
    /// namespace's controller.
    pub fn register(
        &self,
        namespace: Option<&str>,
    ) -> impl futures::Stream<Item = Recall> + Send + 'static + use<> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.lock().controllers.push((namespace.map(str::to_string), sender));
        futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|recall| (recall, receiver))
        })
    }

    /// The slot held for `key`, if one is (its reconcile takes it before anything else, so that a
    /// reconcile that stops early gives it back).
    pub fn take_held(self: &Arc<Self>, key: &str) -> Option<Slot> {
        let held = self.lock().held.remove(key)?;
        Some(Slot { slots: self.clone(), paced: held.paced })
    }

    /// A free slot for `key` when no CR is in line for one; else `key` joins the line (or, already
    /// in it, moves up to `priority` if that is higher) and `None` says its reconcile ends here.
    /// `target` names the CR to its controller.
    pub fn admit(
        self: &Arc<Self>,
        key: &str,
        priority: Priority,
        paced: bool,
        target: impl FnOnce() -> Recall,
    ) -> Option<Slot> {
        let mut state = self.lock();
        if state.in_use < self.limit && state.parked.is_empty() {
            state.in_use += 1;
            return Some(Slot { slots: self.clone(), paced });
        }
        match state.parked.get_mut(key) {
            Some(parked) => {
                parked.paced |= paced;
                if priority == Priority::Urgent && parked.priority == Priority::Resync {
                    parked.priority = Priority::Urgent;
                    state.urgent.push_back(key.to_string());
                }
            }
            None => {
                state.parked.insert(key.to_string(), Parked { target: target(), priority, paced });
                match priority {
                    Priority::Urgent => state.urgent.push_back(key.to_string()),
                    Priority::Resync => state.resync.push_back(key.to_string()),
                }
            }
        }
        None
    }

    /// Forgets a deleted CR: out of line, and a slot held for it goes on.
    pub fn forget(self: &Arc<Self>, key: &str) {
        let held = {
            let mut state = self.lock();
            state.parked.remove(key);
            state.held.remove(key)
        };
        if held.is_some() {
            self.release();
        }
    }

    /// A slot is given back: held for the first CR in line, whose controller is asked to reconcile
    /// it, or free.
    fn release(&self) {
        let mut state = self.lock();
        loop {
            let Some((key, parked)) = state.next_in_line() else {
                state.in_use -= 1;
                return;
            };
            let controller = state
                .controllers
                .iter()
                .find(|(scope, _)| scope.is_some() && scope.as_deref() == parked.target.namespace.as_deref())
                .or_else(|| state.controllers.iter().find(|(scope, _)| scope.is_none()))
                .map(|(_, sender)| sender.clone());
            // A controller that stopped (shutdown) takes no more: the slot goes to the next CR.
            if controller.is_some_and(|sender| sender.send(parked.target).is_ok()) {
                state.held.insert(key, Held { paced: parked.paced });
                return;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// The first CR in line, out of it.
    fn next_in_line(&mut self) -> Option<(String, Parked)> {
        for priority in [Priority::Urgent, Priority::Resync] {
            loop {
                let queue = match priority {
                    Priority::Urgent => &mut self.urgent,
                    Priority::Resync => &mut self.resync,
                };
                let Some(key) = queue.pop_front() else { break };
                // Skipped: gone, or moved up (its place is in the urgent line).
                if self.parked.get(&key).is_some_and(|parked| parked.priority == priority) {
                    let parked = self.parked.remove(&key)?;
                    return Some((key, parked));
                }
            }
        }
        if self.urgent.capacity() > 64 && self.urgent.is_empty() {
            self.urgent.shrink_to_fit();
        }
        if self.resync.capacity() > 64 && self.resync.is_empty() {
            self.resync.shrink_to_fit();
        }
        if self.parked.is_empty() {
            self.parked.shrink_to_fit();
        }
        None
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release();
    }
}

#[cfg(test)]
mod tests {
    use futures::{FutureExt, StreamExt};
    use kube::api::{ApiResource, GroupVersionKind};

    use super::*;

    fn target(name: &str) -> Recall {
        let kind = Arc::new(ApiResource::from_gvk(&GroupVersionKind::gvk("x", "v1", "X")));
        ObjectRef::new_with(name, kind).within("ns")
    }

    fn admit(slots: &Arc<Slots>, name: &str, priority: Priority) -> Option<Slot> {
        slots.admit(name, priority, false, || target(name))
    }

    /// The names recalled so far.
    fn recalled(stream: &mut (impl futures::Stream<Item = Recall> + Unpin)) -> Vec<String> {
        let mut names = Vec::new();
        while let Some(Some(recall)) = stream.next().now_or_never() {
            names.push(recall.name);
        }
        names
    }

    #[test]
    fn crs_in_line_get_freed_slots_new_ones_before_resyncs_each_in_arrival_order() {
        let slots = Slots::new(1);
        let mut recalls = Box::pin(slots.register(Some("ns")));
        let running = admit(&slots, "a", Priority::Urgent).expect("a free slot");
        assert!(admit(&slots, "r1", Priority::Resync).is_none(), "in line");
        assert!(admit(&slots, "u1", Priority::Urgent).is_none());
        assert!(admit(&slots, "r2", Priority::Resync).is_none());
        assert!(admit(&slots, "u2", Priority::Urgent).is_none());
        assert!(admit(&slots, "new", Priority::Urgent).is_none(), "a free slot goes to the line first");

        let mut order = Vec::new();
        drop(running);
        for _ in 0..5 {
            let names = recalled(&mut recalls);
            assert_eq!(names.len(), 1, "one slot, one CR asked back at a time: {names:?}");
            let slot = slots.take_held(&names[0]).expect("its slot is held for it");
            assert!(slots.take_held(&names[0]).is_none(), "taken once");
            order.push(names[0].clone());
            drop(slot);
        }
        assert_eq!(order, ["u1", "u2", "new", "r1", "r2"]);
        assert!(recalled(&mut recalls).is_empty());
        assert!(admit(&slots, "b", Priority::Resync).is_some(), "nobody in line: the slot is free");
    }

    #[test]
    fn a_cr_in_line_moves_up_when_it_becomes_urgent_and_keeps_being_a_resync() {
        let slots = Slots::new(1);
        let mut recalls = Box::pin(slots.register(None));
        let running = admit(&slots, "a", Priority::Urgent).unwrap();
        assert!(slots.admit("r", Priority::Resync, true, || target("r")).is_none());
        assert!(admit(&slots, "u", Priority::Urgent).is_none());
        assert!(admit(&slots, "r", Priority::Urgent).is_none(), "changed while in line");
        drop(running);
        assert_eq!(recalled(&mut recalls), ["u"]);
        drop(slots.take_held("u").unwrap());
        assert_eq!(recalled(&mut recalls), ["r"]);
        let slot = slots.take_held("r").unwrap();
        assert!(slot.paced, "a resync when it was parked");
        drop(slot);
        assert!(recalled(&mut recalls).is_empty(), "once only");
    }

    #[test]
    fn a_deleted_cr_leaves_the_line_and_its_held_slot_goes_on() {
        let slots = Slots::new(1);
        let mut recalls = Box::pin(slots.register(None));
        let running = admit(&slots, "a", Priority::Urgent).unwrap();
        for name in ["gone", "held", "next"] {
            assert!(admit(&slots, name, Priority::Urgent).is_none());
        }
        slots.forget("gone");
        drop(running);
        assert_eq!(recalled(&mut recalls), ["held"]);
        slots.forget("held");
        assert_eq!(recalled(&mut recalls), ["next"]);
        drop(slots.take_held("next").unwrap());
        assert!(admit(&slots, "b", Priority::Urgent).is_some(), "every slot back");
    }

    #[test]
    fn a_stopped_controller_s_crs_do_not_keep_the_slot() {
        let slots = Slots::new(1);
        let recalls = slots.register(None);
        let running = admit(&slots, "a", Priority::Urgent).unwrap();
        assert!(admit(&slots, "b", Priority::Urgent).is_none());
        drop(recalls);
        drop(running);
        assert!(slots.take_held("b").is_none());
        assert!(admit(&slots, "c", Priority::Urgent).is_some(), "the slot is free again");
    }
}
