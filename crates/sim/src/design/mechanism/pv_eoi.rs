//! KVM's PV EOI (docs/mechanisms.md section 8): a flag in guest memory,
//! set by KVM at VM entry, that lets the guest skip its EOI write; KVM
//! completes the skipped EOI at the next exit.
//!
//! As Linux does it:
//! - The guest (arch/x86/kernel/kvm.c, `kvm_guest_apic_eoi_write`):
//!   `if (__test_and_clear_bit(KVM_PV_EOI_BIT, &kvm_apic_eoi)) return;`
//!   then the native EOI write.
//! - Before each entry (arch/x86/kvm/lapic.c, `kvm_lapic_sync_to_vapic` ->
//!   `apic_sync_pv_eoi_to_guest`), KVM sets the flag and
//!   `KVM_APIC_PV_EOI_PENDING` unless the IRR holds a vector
//!   (`irr_pending`), no injection since the last EOI left
//!   `highest_isr_cache` valid, or the vector in service needs its EOI
//!   (`kvm_ioapic_handles_vector`: a level-triggered one).
//! - After each exit (`kvm_lapic_sync_from_vapic` ->
//!   `apic_sync_pv_eoi_from_guest`), `pv_eoi_test_and_clr_pending` clears
//!   the flag and the pending bit; if the guest had cleared the flag, KVM
//!   completes its EOI (`apic_set_eoi`, traced as `kvm_pv_eoi`).
//!
//! Per vCPU it owns the flag, the pending bit and KVM's
//! `highest_isr_cache`.

use dirq_arch::lapic::Lapic;

use crate::scenario::PvEoiSetting;

/// Whether the design's LAPIC can waive the guest's EOI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PvEoi {
    /// KVM's software LAPIC: it tracks what is in service itself, so it
    /// can complete an EOI the guest skipped.
    SoftwareLapic,
    /// No flag is ever set: the EOI is virtualized or passed through
    /// (with APICv KVM keeps no `highest_isr_cache`), or there is no
    /// hypervisor.
    Unavailable,
}

impl PvEoi {
    /// A vCPU's PV EOI state for a run with `setting`.
    pub(crate) fn state(self, setting: PvEoiSetting) -> PvEoiState {
        PvEoiState {
            host_sets_flag: self == PvEoi::SoftwareLapic && setting == PvEoiSetting::On,
            ..PvEoiState::default()
        }
    }
}

/// What the guest's EOI did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GuestEoiWrite {
    /// The flag was set: the guest cleared it and wrote nothing.
    Skipped,
    /// The EOI register write, as without PV EOI.
    Written,
}

/// One vCPU's PV EOI state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PvEoiState {
    /// The guest enabled PV EOI and this host sets the flag (never, when
    /// the run is `never-flagged`).
    host_sets_flag: bool,
    /// `KVM_PV_EOI_ENABLED` in the guest's per-CPU word.
    flag: bool,
    /// `KVM_APIC_PV_EOI_PENDING`: KVM set the flag at the last entry.
    pending: bool,
    /// KVM's `highest_isr_cache`: the vector last injected, until an EOI.
    isr_cache: Option<u8>,
}

impl PvEoiState {
    /// Just before VM entry, after the injection (`injected`, if any):
    /// sets the flag when the vector in service is the only thing KVM
    /// would have to act on at its EOI.
    pub(crate) fn entering(&mut self, vlapic: &Lapic, injected: Option<u8>) {
        if let Some(vector) = injected {
            self.isr_cache = Some(vector);
        }
        if !self.host_sets_flag || !vlapic.irr().is_empty() {
            return;
        }
        let Some(vector) = self.isr_cache else {
            return;
        };
        if vlapic.tmr().contains(vector) {
            return;
        }
        self.flag = true;
        self.pending = true;
    }

    /// The guest's EOI (`kvm_guest_apic_eoi_write`).
    pub(crate) fn guest_eoi(&mut self) -> GuestEoiWrite {
        if std::mem::take(&mut self.flag) {
            GuestEoiWrite::Skipped
        } else {
            GuestEoiWrite::Written
        }
    }

    /// KVM completed an EOI the guest wrote: no injection since is
    /// cached (`apic_clear_isr`).
    pub(crate) fn eoi_emulated(&mut self) {
        self.isr_cache = None;
    }

    /// After a VM exit: clears the flag, and completes in `vlapic` the
    /// EOI the guest skipped since the entry, if it did. Returns the
    /// vector that EOI completed.
    pub(crate) fn exited(&mut self, vlapic: &mut Lapic) -> Option<u8> {
        if !std::mem::take(&mut self.pending) {
            return None;
        }
        if std::mem::take(&mut self.flag) {
            return None;
        }
        self.isr_cache = None;
        vlapic.eoi().completed
    }
}

#[cfg(test)]
mod tests {
    use super::super::enabled_lapic;
    use super::*;
    use dirq_arch::interrupt::TriggerMode;

    const VECTOR: u8 = 0x51;
    const HIGHER: u8 = 0x61;

    /// A vCPU's LAPIC with `vector` injected (in service), and its state
    /// after the entry that injected it.
    fn injected(setting: PvEoiSetting, trigger: TriggerMode) -> (PvEoiState, Lapic) {
        let mut vlapic = enabled_lapic();
        vlapic.accept(VECTOR, trigger);
        let vector = vlapic.acknowledge();
        let mut state = PvEoi::SoftwareLapic.state(setting);
        state.entering(&vlapic, vector);
        (state, vlapic)
    }

    #[test]
    fn a_lone_edge_interrupt_is_flagged_and_its_eoi_completed_at_the_next_exit() {
        let (mut state, mut vlapic) = injected(PvEoiSetting::On, TriggerMode::Edge);
        assert_eq!(state.guest_eoi(), GuestEoiWrite::Skipped);
        assert!(vlapic.isr().contains(VECTOR), "KVM has not seen it yet");
        assert_eq!(state.exited(&mut vlapic), Some(VECTOR));
        assert!(vlapic.isr().is_empty());
        // Nothing injected since: the next entry sets no flag.
        state.entering(&vlapic, None);
        assert_eq!(state.guest_eoi(), GuestEoiWrite::Written);
    }

    #[test]
    fn an_exit_before_the_eoi_clears_the_flag_and_the_next_entry_sets_it_again() {
        let (mut state, mut vlapic) = injected(PvEoiSetting::On, TriggerMode::Edge);
        assert_eq!(state.exited(&mut vlapic), None);
        assert!(vlapic.isr().contains(VECTOR), "still in service");
        state.entering(&vlapic, None);
        assert_eq!(state.guest_eoi(), GuestEoiWrite::Skipped);
    }

    #[test]
    fn nothing_is_flagged_with_an_irr_bit_or_a_level_triggered_vector() {
        let (_, mut vlapic) = injected(PvEoiSetting::On, TriggerMode::Edge);
        vlapic.accept(HIGHER, TriggerMode::Edge);
        let mut state = PvEoi::SoftwareLapic.state(PvEoiSetting::On);
        state.entering(&vlapic, Some(VECTOR));
        assert_eq!(state.guest_eoi(), GuestEoiWrite::Written);

        let (mut state, _) = injected(PvEoiSetting::On, TriggerMode::Level);
        assert_eq!(state.guest_eoi(), GuestEoiWrite::Written);
    }

    #[test]
    fn a_written_eoi_ends_the_cache_so_an_outer_handler_writes_its_own() {
        let (mut state, mut vlapic) = injected(PvEoiSetting::On, TriggerMode::Edge);
        assert_eq!(state.exited(&mut vlapic), None);
        // The higher vector nests inside; its own EOI is skipped...
        vlapic.accept(HIGHER, TriggerMode::Edge);
        let nested = vlapic.acknowledge();
        state.entering(&vlapic, nested);
        assert_eq!(state.guest_eoi(), GuestEoiWrite::Skipped);
        assert_eq!(state.exited(&mut vlapic), Some(HIGHER));
        // ...and completing it leaves no cached vector for the outer one.
        state.entering(&vlapic, None);
        assert_eq!(state.guest_eoi(), GuestEoiWrite::Written);
        state.eoi_emulated();
        assert_eq!(state.exited(&mut vlapic), None);
    }

    #[test]
    fn a_host_that_never_flags_and_a_design_without_it_skip_nothing() {
        for (mechanism, setting) in [
            (PvEoi::SoftwareLapic, PvEoiSetting::NeverFlagged),
            (PvEoi::SoftwareLapic, PvEoiSetting::Off),
            (PvEoi::Unavailable, PvEoiSetting::On),
        ] {
            let mut vlapic = enabled_lapic();
            vlapic.accept(VECTOR, TriggerMode::Edge);
            let vector = vlapic.acknowledge();
            let mut state = mechanism.state(setting);
            state.entering(&vlapic, vector);
            assert_eq!(state.guest_eoi(), GuestEoiWrite::Written, "{mechanism:?}");
            assert_eq!(state.exited(&mut vlapic), None);
            assert!(
                vlapic.isr().contains(VECTOR),
                "the written EOI completes it"
            );
        }
    }
}
