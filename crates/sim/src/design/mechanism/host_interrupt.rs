//! How the host's own interrupts (a kick, the end of a time slice, an
//! assigned interrupt for a descheduled VM) reach a core that may be
//! running a guest: as a fixed vector, which exits as EXTERNAL_INTERRUPT
//! (or, through ELI's shadow IDT, as #NP), or as an NMI, which DID uses
//! because its guests own every fixed vector (docs/mechanisms.md section 5).

/// The delivery mode of host IPIs and hypervisor ticks to a guest core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostInterrupts {
    /// A fixed interrupt with a host vector.
    Vector,
    /// An NMI carrying its message in the core's mailbox.
    Nmi,
}

impl HostInterrupts {
    /// Whether a host interrupt travels as an NMI (with a mailbox
    /// message) rather than as a host vector.
    pub fn as_nmi(self) -> bool {
        self == HostInterrupts::Nmi
    }
}
