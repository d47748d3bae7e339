//! AMD AVIC (docs/mechanisms.md section 3b; AMD APM Vol. 2, 15.29), with
//! the guest in x2APIC mode as x2AVIC runs it.
//!
//! The vCPU's virtual APIC backing page holds its IRR and ISR; the
//! processor delivers from it and virtualizes EOI writes of edge-triggered
//! vectors with no exit (the VMCS model's APICv controls stand for this).
//! The IOMMU in guest virtual APIC mode posts the VF's vector into the
//! backing page; a guest's fixed IPI is written into each target's backing
//! page by the sending CPU. A target whose physical APIC ID table entry has
//! IsRunning set gets a doorbell, taken with no exit; otherwise the IOMMU
//! logs to the GA log and interrupts the host, whose handler wakes the
//! vCPU, and the sending CPU exits with AVIC_INCOMPLETE_IPI for the
//! hypervisor to wake it. Timer writes are not accelerated: TMICT is an
//! AVIC_NOACCEL trap, counted as the MSR write exit it stands for
//! (docs/mechanisms.md lists how AVIC's exits are named). HLT exits.

use super::apicv::APICV;
use super::{Design, DesignKind, IpiSender, IrteRule, Posting};

pub const AVIC: Design = Design {
    kind: DesignKind::Avic,
    vf_irte: IrteRule::Posted,
    posting: Posting::Avic,
    ipi_sender: IpiSender::Avic,
    ..APICV
};
