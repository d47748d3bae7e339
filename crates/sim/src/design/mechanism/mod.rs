//! The mechanisms a design table names, one file each. A mechanism owns
//! its per-vCPU state and its costs, acts on the hardware models it is
//! given, and returns what the engine must do next as its own small effect
//! type; the engine (`crate::machine`) calls the mechanism a table names
//! and never branches on a table field itself.
//!
//! | file                | table field             | decides                                         |
//! |---------------------|-------------------------|-------------------------------------------------|
//! | `vmcs.rs`           | `vmcs`                  | what exits (and so which EOIs and TMICT writes trap) |
//! | `irte.rs`           | `vf_irte`               | where a VF's MSI goes                           |
//! | `injection.rs`      | `injection`             | how a queued virtual interrupt enters the guest |
//! | `signal.rs`         | `virtual_signal`        | how a sender signals a vCPU                     |
//! | `timer.rs`          | `guest_timer`           | where the guest's LAPIC timer lives             |
//! | `host_tick.rs`      | `host_tick`             | where the host's scheduler tick runs            |
//! | `host_interrupt.rs` | `host_interrupts`       | how host IPIs reach a core running a guest      |
//! | `preemption.rs`     | `preemption`            | when a time slice may end                       |
//! | `posting.rs`        | `posting`               | what a post by the IOMMU or a CPU does          |
//! | `ipi_sender.rs`     | `ipi_sender`            | whether a guest's ICR write exits               |
//! | `pv_eoi.rs`         | `pv_eoi`                | whether a PV EOI guest's EOI may be skipped     |

pub mod host_interrupt;
pub mod host_tick;
pub mod injection;
pub mod ipi_sender;
pub mod irte;
pub mod posting;
pub mod preemption;
pub mod pv_eoi;
pub mod signal;
pub mod timer;
pub mod vmcs;

use dirq_arch::lapic::Lapic;
use dirq_arch::posted::PostedInterruptDescriptor;
use dirq_arch::vmcs::Vmcs;

/// The hardware models of one vCPU that the mechanisms act on: its
/// virtual LAPIC (KVM's software LAPIC, or APICv's virtual-APIC page),
/// its VMCS and its posted-interrupt descriptor.
pub(crate) struct VcpuHardware {
    pub(crate) vlapic: Lapic,
    pub(crate) vmcs: Vmcs,
    pub(crate) pid: PostedInterruptDescriptor,
}

/// A software-enabled x2APIC-mode LAPIC with ID 0 (mechanism tests).
#[cfg(test)]
pub(crate) fn enabled_lapic() -> Lapic {
    use dirq_arch::lapic::{
        LapicConfig, APIC_BASE_GLOBAL_ENABLE, APIC_BASE_X2APIC_ENABLE, DEFAULT_MMIO_BASE,
        SVR_APIC_SOFTWARE_ENABLE,
    };
    let config = LapicConfig::new(1_000_000_000, 1_000_000_000).expect("non-zero clocks");
    let mut lapic = Lapic::new(0, config);
    lapic
        .set_apic_base(DEFAULT_MMIO_BASE | APIC_BASE_GLOBAL_ENABLE | APIC_BASE_X2APIC_ENABLE)
        .expect("a valid APIC base");
    lapic.set_svr(SVR_APIC_SOFTWARE_ENABLE | 0xFF);
    lapic
}
