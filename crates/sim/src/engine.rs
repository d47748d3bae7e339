//! The discrete-event engine every simulation runs on: the x86 machine
//! (`crate::machine`) and the Loongson VIOAPIC paper's core
//! (`crate::vioapic`) are [`Model`]s, and [`run`] pops their events in
//! time order and hands each to its model until the run's end.

use crate::queue::{EventQueue, Keyed};

/// A simulated system: its pending events and what an event does.
pub(crate) trait Model {
    type Event: Keyed;

    /// The model's pending events.
    fn queue(&mut self) -> &mut EventQueue<Self::Event>;

    /// `event` happens at `now`: the model changes its state and schedules
    /// what follows on its queue.
    fn handle(&mut self, now: u64, event: Self::Event);
}

/// Runs `model` until its queue is empty or its next event is past `end`;
/// returns how many events it handled.
pub(crate) fn run<M: Model>(model: &mut M, end: u64) -> u64 {
    let mut events = 0;
    while let Some((time, event)) = model.queue().pop() {
        if time > end {
            break;
        }
        events += 1;
        model.handle(time, event);
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each event schedules the next one `gap` later and records its time.
    struct Ticker {
        queue: EventQueue<Tick>,
        gap: u64,
        seen: Vec<u64>,
    }

    #[derive(Clone, Copy)]
    struct Tick;

    impl Keyed for Tick {
        fn key(&self) -> Option<usize> {
            None
        }
    }

    impl Model for Ticker {
        type Event = Tick;
        fn queue(&mut self) -> &mut EventQueue<Tick> {
            &mut self.queue
        }
        fn handle(&mut self, now: u64, event: Tick) {
            self.seen.push(now);
            self.queue.schedule(now + self.gap, event);
        }
    }

    #[test]
    fn runs_the_events_up_to_the_end_inclusive_and_counts_them() {
        let mut ticker = Ticker {
            queue: EventQueue::new(),
            gap: 30,
            seen: Vec::new(),
        };
        ticker.queue.schedule(0, Tick);
        assert_eq!(run(&mut ticker, 90), 4);
        assert_eq!(ticker.seen, [0, 30, 60, 90]);
    }
}
