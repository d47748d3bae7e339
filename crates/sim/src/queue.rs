//! The event queue: a 4-ary heap ordered by (time, insertion order), so
//! that simultaneous events run in the order they were scheduled and a run
//! is deterministic. Four children per node halve the heap's depth, which
//! saves more moves than the extra comparisons cost: the queue is the
//! engine's hottest part.
//!
//! An event may carry a key (a dense slot number, see [`Keyed`]): at most one
//! event per key is pending, scheduling under a key replaces the pending one
//! and [`EventQueue::cancel`] withdraws it. Cancelled entries stay in the
//! heap and are dropped when they reach its top (lazy deletion, as nexosim's
//! cancellable actions are), which keeps scheduling O(log n).
//!
//! An event that is the earliest of all when it is scheduled (often the
//! next step of the part that just ran) waits beside the heap, in
//! `earliest`, and the next pop takes it from there: it skips a push and a
//! pop of the heap, which are most of a run's queue work.

use std::cmp::Ordering;

use dary_heap::QuaternaryHeap;

/// An event that may be cancellable: `key` names its slot.
pub trait Keyed {
    /// The slot of a cancellable event, `None` for one that always runs.
    fn key(&self) -> Option<usize>;
}

struct Entry<E> {
    time_ns: u64,
    seq: u64,
    event: E,
}

impl<E> Entry<E> {
    /// (time, insertion order) as one integer: one comparison orders two
    /// entries. Two u64 fields rather than a u128 keep the entry 8-aligned
    /// and small.
    fn order(&self) -> u128 {
        u128::from(self.time_ns) << 64 | u128::from(self.seq)
    }
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.order() == other.order()
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    // Reversed: the heap is a max-heap and we pop the earliest.
    fn cmp(&self, other: &Self) -> Ordering {
        other.order().cmp(&self.order())
    }
}

/// No event pending under a key.
const VACANT: u64 = u64::MAX;

pub struct EventQueue<E> {
    /// An entry that orders before every entry in `heap`, if any.
    earliest: Option<Entry<E>>,
    heap: QuaternaryHeap<Entry<E>>,
    next_seq: u64,
    /// Per key: the sequence number of its pending event, or `VACANT`.
    pending: Vec<u64>,
}

impl<E: Keyed> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            earliest: None,
            heap: QuaternaryHeap::with_capacity(1024),
            next_seq: 0,
            pending: Vec::new(),
        }
    }

    /// Schedules `event` at `time_ns`; a keyed event replaces the one
    /// pending under its key. Always inlined (hot path): at each caller
    /// the event's kind is known, so its key folds to a constant and the
    /// call's register saves go; the heap's push stays a call.
    #[inline(always)]
    pub fn schedule(&mut self, time_ns: u64, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(key) = event.key() {
            if key >= self.pending.len() {
                self.pending.resize(key + 1, VACANT);
            }
            self.pending[key] = seq;
        }
        let entry = Entry {
            time_ns,
            seq,
            event,
        };
        let goes_first = match (&self.earliest, self.heap.peek()) {
            (Some(earliest), _) => entry.order() < earliest.order(),
            (None, Some(top)) => entry.order() < top.order(),
            (None, None) => true,
        };
        if goes_first {
            if let Some(displaced) = self.earliest.replace(entry) {
                self.push_to_heap(displaced);
            }
        } else {
            self.push_to_heap(entry);
        }
    }

    /// Kept out of line so that `schedule`'s inlined copies stay small.
    #[inline(never)]
    fn push_to_heap(&mut self, entry: Entry<E>) {
        self.heap.push(entry);
    }

    /// Withdraws the event pending under `key`, if any.
    pub fn cancel(&mut self, key: usize) {
        if let Some(slot) = self.pending.get_mut(key) {
            *slot = VACANT;
        }
    }

    pub fn is_pending(&self, key: usize) -> bool {
        self.pending.get(key).is_some_and(|&seq| seq != VACANT)
    }

    /// The next live event, skipping cancelled and replaced ones. Always
    /// inlined into the engine's loop, its one caller per model: left to
    /// the compiler it was sometimes not, and the call cost about 2.5% of
    /// a run's instructions.
    #[inline(always)]
    pub fn pop(&mut self) -> Option<(u64, E)> {
        loop {
            let entry = match self.earliest.take() {
                Some(entry) => entry,
                None => self.heap.pop()?,
            };
            if let Some(key) = entry.event.key() {
                if self.pending[key] != entry.seq {
                    continue;
                }
                self.pending[key] = VACANT;
            }
            return Some((entry.time_ns, entry.event));
        }
    }
}

impl<E: Keyed> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Ev(char, Option<usize>);
    impl Keyed for Ev {
        fn key(&self) -> Option<usize> {
            self.1
        }
    }

    fn drain(queue: &mut EventQueue<Ev>) -> Vec<char> {
        std::iter::from_fn(|| queue.pop().map(|(_, e)| e.0)).collect()
    }

    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut queue = EventQueue::new();
        queue.schedule(20, Ev('a', None));
        queue.schedule(10, Ev('b', None));
        queue.schedule(20, Ev('c', None));
        queue.schedule(10, Ev('d', None));
        assert_eq!(drain(&mut queue), vec!['b', 'd', 'a', 'c']);
    }

    #[test]
    fn a_keyed_event_replaces_the_pending_one_and_can_be_cancelled() {
        let mut queue = EventQueue::new();
        queue.schedule(10, Ev('a', Some(0)));
        queue.schedule(30, Ev('b', Some(0)));
        queue.schedule(20, Ev('c', Some(1)));
        queue.schedule(5, Ev('d', Some(2)));
        queue.cancel(2);
        assert!(queue.is_pending(0) && queue.is_pending(1) && !queue.is_pending(2));
        assert_eq!(drain(&mut queue), vec!['c', 'b']);
        assert!(!queue.is_pending(0));
    }

    #[test]
    fn an_event_earlier_than_all_pending_runs_first_or_is_displaced() {
        let mut queue = EventQueue::new();
        queue.schedule(50, Ev('a', None));
        queue.schedule(20, Ev('b', None));
        queue.schedule(20, Ev('c', None));
        queue.schedule(10, Ev('d', Some(0)));
        queue.cancel(0);
        assert_eq!(queue.pop(), Some((20, Ev('b', None))));
        queue.schedule(30, Ev('e', None));
        queue.schedule(15, Ev('f', None));
        assert_eq!(drain(&mut queue), vec!['f', 'c', 'e', 'a']);
    }

    /// An event told apart by the order it was scheduled in.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Numbered(u64, Option<usize>);
    impl Keyed for Numbered {
        fn key(&self) -> Option<usize> {
            self.1
        }
    }

    /// Random schedules, cancellations and pops pop what a sorted list of
    /// the live events would.
    #[test]
    fn pops_what_a_sorted_list_would() {
        let mut rng = crate::rng::Rng::new(11);
        let mut queue = EventQueue::new();
        // (time, insertion order, event) of the live events.
        let mut reference: Vec<(u64, u64, Numbered)> = Vec::new();
        let mut now = 0;
        for order in 0..20_000u64 {
            match rng.next_u64() % 4 {
                0 | 1 => {
                    let at = now + rng.next_u64() % 100;
                    let key = rng
                        .next_u64()
                        .is_multiple_of(3)
                        .then(|| (rng.next_u64() % 8) as usize);
                    let event = Numbered(order, key);
                    reference.retain(|&(_, _, other)| key.is_none() || other.1 != key);
                    reference.push((at, order, event));
                    queue.schedule(at, event);
                }
                2 => {
                    let key = (rng.next_u64() % 8) as usize;
                    reference.retain(|&(_, _, other)| other.1 != Some(key));
                    queue.cancel(key);
                }
                _ => {
                    let expected = reference
                        .iter()
                        .enumerate()
                        .min_by_key(|&(_, &(at, order, _))| (at, order))
                        .map(|(index, _)| index)
                        .map(|index| reference.remove(index));
                    let popped = queue.pop();
                    assert_eq!(popped, expected.map(|(at, _, event)| (at, event)));
                    now = popped.map_or(now, |(at, _)| at);
                }
            }
        }
    }

    #[test]
    fn a_key_is_free_again_once_its_event_ran() {
        let mut queue = EventQueue::new();
        queue.schedule(10, Ev('a', Some(3)));
        assert_eq!(queue.pop(), Some((10, Ev('a', Some(3)))));
        queue.cancel(3);
        queue.schedule(20, Ev('b', Some(3)));
        assert_eq!(drain(&mut queue), vec!['b']);
    }
}
