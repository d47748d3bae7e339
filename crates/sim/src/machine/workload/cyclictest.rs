//! cyclictest: the guest's timer thread (`crate::machine::timer_thread`),
//! measured. A 1 kHz guest timer's handler wakes the thread; the thread,
//! run by the guest's scheduler once the last handler returns, reads the
//! clock: the latency from the expiry to it is the run's latency. A group
//! with `with_timer` runs the same thread beside another workload,
//! unmeasured.

use super::{Ctx, Workload};

pub(super) struct Cyclictest;

impl Workload for Cyclictest {
    fn runs_timer_thread(&self) -> bool {
        true
    }

    fn on_timer_thread(&mut self, latency: u64, ctx: &mut Ctx) {
        ctx.record.latencies.push(latency);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{one_vm, Bench};
    use super::*;
    use crate::scenario::WorkloadKind;

    #[test]
    fn cyclictest_runs_the_timer_thread_and_records_what_it_reads() {
        let mut workload = Cyclictest;
        assert!(workload.runs_timer_thread());
        let mut bench = Bench::new(&one_vm(WorkloadKind::Cyclictest, 1));
        bench.call(|ctx, _| workload.on_timer_thread(20_000, ctx));
        assert_eq!(bench.record.latencies, [20_000]);
    }
}
