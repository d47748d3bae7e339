//! When the host may end a vCPU's time slice. Designs that deliver guest
//! interrupts through the physical LAPIC must not switch VMs while a guest
//! vector is in service there: the guest's EOI would then complete it in
//! the next VM's name (docs/mechanisms.md sections 4 and 5).

/// Whether a slice may end inside a guest handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preemption {
    /// At any time: guest interrupts are virtual and complete in the vCPU's
    /// own LAPIC model.
    Anytime,
    /// Only once no guest vector is in service in the physical LAPIC.
    AfterGuestHandlers,
}

impl Preemption {
    /// Whether the slice may end now, with a guest vector in service in the
    /// physical LAPIC or not.
    pub fn may_preempt(self, guest_vector_in_service: bool) -> bool {
        self == Preemption::Anytime || !guest_vector_in_service
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_physical_guest_handler_defers_the_slice_end_only_when_asked() {
        assert!(Preemption::Anytime.may_preempt(true));
        assert!(!Preemption::AfterGuestHandlers.may_preempt(true));
        assert!(Preemption::AfterGuestHandlers.may_preempt(false));
    }
}
