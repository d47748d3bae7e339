//! The invariant checker: a ledger of every interrupt raised for a VM,
//! settled when a handler starts, merged when a structure holding one
//! instance per vector absorbs a second, and reconciled at the end of the
//! run. It only observes: the engine tells it what happened and it counts
//! the violations (the `Invariant` kinds).
//!
//! Hardware posting adds two checks, counted under the existing kinds so
//! that every other design's results keep their shape: a request posted
//! while SN was set must be merged at the vCPU's next entry, or it is
//! `Lost`; a blocked vCPU is woken exactly once per block (a second wake
//! or a second block without one is `Doubled`), and one left asleep with
//! a posted request and no wake-up under way at the end is `Lost`.

use dirq_arch::vectors::VectorSet;

use crate::metrics::Invariant;

/// A vector's priority class (SDM 10.8.3.1).
pub(super) fn class(vector: u8) -> u8 {
    vector >> 4
}

#[derive(Default)]
pub(crate) struct Checker {
    /// Per VM and vector: raised and not yet handled or merged.
    outstanding: Vec<[u32; 256]>,
    pub violations: [u64; Invariant::ALL.len()],
    pub raised: u64,
    pub handled: u64,
    pub coalesced: u64,
    pub pending_at_end: u64,
    /// Cores whose LAPIC timer is armed for a vCPU not scheduled there.
    misowned_timers: u64,
    /// Per vCPU: blocked in HLT and not yet woken.
    blocked: Vec<bool>,
    /// Per vCPU: vectors posted while SN was set, due at its next entry.
    suppressed_posts: Vec<VectorSet>,
}

impl Checker {
    pub fn new(vms: usize, vcpus: usize) -> Checker {
        Checker {
            outstanding: vec![[0; 256]; vms],
            blocked: vec![false; vcpus],
            suppressed_posts: vec![VectorSet::EMPTY; vcpus],
            ..Checker::default()
        }
    }

    fn violation(&mut self, invariant: Invariant) {
        self.violations[invariant as usize] += 1;
    }

    pub fn violations_of(&self, invariant: Invariant) -> u64 {
        self.violations[invariant as usize]
    }

    pub fn raise(&mut self, vm: usize, vector: u8) {
        self.raised += 1;
        self.outstanding[vm][usize::from(vector)] += 1;
    }

    /// A structure holding one instance per vector merged a second request.
    pub fn merged(&mut self, vm: usize, vector: u8) {
        let slot = &mut self.outstanding[vm][usize::from(vector)];
        if *slot > 0 {
            *slot -= 1;
            self.coalesced += 1;
        }
    }

    /// A handler for `vector` starts in `vm`. `is_guest_vector` says
    /// whether the guest has a handler for it at all; `in_service` is the
    /// highest vector whose handler has not yet sent its EOI.
    pub fn delivered(
        &mut self,
        vm: usize,
        vector: u8,
        is_guest_vector: bool,
        in_service: Option<u8>,
    ) {
        if !is_guest_vector {
            self.violation(Invariant::MisDelivery);
            return;
        }
        let index = usize::from(vector);
        if self.outstanding[vm][index] > 0 {
            self.outstanding[vm][index] -= 1;
            self.handled += 1;
        } else if self.outstanding.iter().any(|other| other[index] > 0) {
            self.violation(Invariant::MisDelivery);
        } else {
            self.violation(Invariant::Doubled);
        }
        if in_service.is_some_and(|current| class(current) >= class(vector)) {
            self.violation(Invariant::PriorityInversion);
        }
    }

    /// A host vector ran guest code.
    pub fn host_vector_in_guest(&mut self) {
        self.violation(Invariant::MisDelivery);
    }

    /// A guest EOI: `believed` is the vector the guest was completing,
    /// `completed` what the LAPIC (physical or virtual) completed.
    pub fn eoi(&mut self, believed: Option<u8>, completed: Option<u8>) {
        match (believed, completed) {
            (_, None) => self.violation(Invariant::EoiNothingInService),
            (Some(expected), Some(done)) if expected != done => {
                self.violation(Invariant::EoiWrongVector)
            }
            _ => {}
        }
    }

    /// DID's timer invariant: outside the designated core, an armed LAPIC
    /// timer belongs to the vCPU scheduled there. The engine reports each
    /// core whose state flips, so the check costs O(1) per event.
    pub fn timer_misowned(&mut self, misowned: bool) {
        if misowned {
            self.misowned_timers += 1;
        } else {
            self.misowned_timers -= 1;
        }
    }

    /// `vcpu` blocked; blocking again before a wake is a doubled block.
    pub fn vcpu_blocked(&mut self, vcpu: usize) {
        if std::mem::replace(&mut self.blocked[vcpu], true) {
            self.violation(Invariant::Doubled);
        }
    }

    /// `vcpu` woke; waking one that is not blocked is a doubled wake.
    pub fn vcpu_woken(&mut self, vcpu: usize) {
        if !std::mem::replace(&mut self.blocked[vcpu], false) {
            self.violation(Invariant::Doubled);
        }
    }

    /// Hardware posted `vector` for `vcpu` while its SN was set.
    pub fn posted_suppressed(&mut self, vcpu: usize, vector: u8) {
        self.suppressed_posts[vcpu].set(vector);
    }

    /// `vcpu` enters with `pir` left in its descriptor: a suppressed post
    /// still there missed its entry.
    pub fn entered(&mut self, vcpu: usize, pir: &VectorSet) {
        let suppressed = &mut self.suppressed_posts[vcpu];
        if suppressed.is_empty() {
            return;
        }
        let missed = suppressed
            .take()
            .iter()
            .filter(|&v| pir.contains(v))
            .count();
        self.violations[Invariant::Lost as usize] += missed as u64;
    }

    /// A blocked vCPU holds a posted request and no wake-up is under way.
    pub fn wakeup_lost(&mut self) {
        self.violation(Invariant::Lost);
    }

    /// After each event: every core then in violation counts once.
    pub fn event_done(&mut self) {
        self.violations[Invariant::TimerOwnership as usize] += self.misowned_timers;
    }

    /// The vectors still outstanding for `vm`, with their counts.
    pub fn outstanding(&self, vm: usize) -> impl Iterator<Item = (u8, u32)> + '_ {
        (0..=u8::MAX)
            .map(move |vector| (vector, self.outstanding[vm][usize::from(vector)]))
            .filter(|&(_, count)| count > 0)
    }

    /// End of run: `count` outstanding instances of a vector are pending
    /// when some structure still `held` it, lost otherwise.
    pub fn settle(&mut self, count: u32, held: bool) {
        if held {
            self.pending_at_end += u64::from(count);
        } else {
            self.violations[Invariant::Lost as usize] += u64::from(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR: u8 = 0x41;

    #[test]
    fn a_raised_interrupt_is_handled_once() {
        let mut checker = Checker::new(1, 1);
        checker.raise(0, VECTOR);
        checker.delivered(0, VECTOR, true, None);
        assert_eq!((checker.raised, checker.handled), (1, 1));
        checker.delivered(0, VECTOR, true, None);
        assert_eq!(checker.violations_of(Invariant::Doubled), 1);
    }

    #[test]
    fn another_vms_interrupt_is_a_mis_delivery() {
        let mut checker = Checker::new(2, 1);
        checker.raise(1, VECTOR);
        checker.delivered(0, VECTOR, true, None);
        assert_eq!(checker.violations_of(Invariant::MisDelivery), 1);
        checker.delivered(0, 0xEF, false, None);
        assert_eq!(checker.violations_of(Invariant::MisDelivery), 2);
    }

    #[test]
    fn same_or_lower_class_inside_a_handler_is_an_inversion() {
        let mut checker = Checker::new(1, 1);
        checker.raise(0, VECTOR);
        checker.raise(0, 0x51);
        checker.delivered(0, VECTOR, true, Some(0x4F));
        assert_eq!(checker.violations_of(Invariant::PriorityInversion), 1);
        checker.delivered(0, 0x51, true, Some(0x41));
        assert_eq!(checker.violations_of(Invariant::PriorityInversion), 1);
    }

    #[test]
    fn merged_requests_are_coalesced_not_lost() {
        let mut checker = Checker::new(1, 1);
        checker.raise(0, VECTOR);
        checker.raise(0, VECTOR);
        checker.merged(0, VECTOR);
        assert_eq!(checker.coalesced, 1);
        assert_eq!(
            checker.outstanding(0).collect::<Vec<_>>(),
            vec![(VECTOR, 1)]
        );
    }

    #[test]
    fn eoi_mismatches_are_told_apart() {
        let mut checker = Checker::new(1, 1);
        checker.eoi(Some(VECTOR), None);
        checker.eoi(Some(VECTOR), Some(0x51));
        checker.eoi(Some(VECTOR), Some(VECTOR));
        assert_eq!(checker.violations_of(Invariant::EoiNothingInService), 1);
        assert_eq!(checker.violations_of(Invariant::EoiWrongVector), 1);
    }

    #[test]
    fn a_misowned_timer_counts_at_every_event_until_fixed() {
        let mut checker = Checker::new(1, 1);
        checker.event_done();
        checker.timer_misowned(true);
        checker.event_done();
        checker.event_done();
        checker.timer_misowned(false);
        checker.event_done();
        assert_eq!(checker.violations_of(Invariant::TimerOwnership), 2);
    }

    #[test]
    fn a_blocked_vcpu_is_woken_exactly_once() {
        let mut checker = Checker::new(1, 2);
        checker.vcpu_blocked(0);
        checker.vcpu_woken(0);
        assert_eq!(checker.violations_of(Invariant::Doubled), 0);
        checker.vcpu_woken(0);
        assert_eq!(checker.violations_of(Invariant::Doubled), 1, "woken twice");
        checker.vcpu_blocked(1);
        checker.vcpu_blocked(1);
        assert_eq!(checker.violations_of(Invariant::Doubled), 2, "never woken");
    }

    #[test]
    fn a_post_under_sn_must_be_merged_by_the_next_entry() {
        let mut checker = Checker::new(1, 1);
        checker.posted_suppressed(0, VECTOR);
        checker.entered(0, &VectorSet::EMPTY);
        assert_eq!(checker.violations_of(Invariant::Lost), 0, "merged");
        checker.posted_suppressed(0, VECTOR);
        let left: VectorSet = [VECTOR].into_iter().collect();
        checker.entered(0, &left);
        assert_eq!(checker.violations_of(Invariant::Lost), 1, "left in PIR");
        checker.entered(0, &left);
        assert_eq!(checker.violations_of(Invariant::Lost), 1, "counted once");
    }

    #[test]
    fn outstanding_at_the_end_is_pending_or_lost() {
        let mut checker = Checker::new(1, 1);
        checker.settle(2, true);
        checker.settle(3, false);
        assert_eq!(checker.pending_at_end, 2);
        assert_eq!(checker.violations_of(Invariant::Lost), 3);
    }
}
