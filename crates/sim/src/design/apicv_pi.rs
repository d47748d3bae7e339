//! Today's Intel hardware (docs/mechanisms.md section 3b): APICv plus VT-d
//! posted interrupts for the assigned device, and the same plus IPI
//! virtualization.
//!
//! APICv-PI: the VF's IRTE is in posted format (VT-d 9.11) and names the
//! owning vCPU's posted-interrupt descriptor; the IOMMU posts the guest
//! vector there (VT-d 5.2.3) and notifies NDST with NV unless ON or SN is
//! set. A running vCPU takes it with no exit (SDM 29.6); a preempted one
//! has SN set and finds it in PIR at its next entry; a blocked one has NV
//! switched to the wake-up vector, a host interrupt whose handler wakes
//! it. Everything else is APICv's: guest IPIs' ICR writes and timer writes
//! exit, EOIs are virtualized (SDM 29.1.3), HLT exits.
//!
//! APICv-PI-IPIv: as above, and the CPU virtualizes ICR writes of fixed
//! physical unicasts (SDM Vol. 3C, "IPI Virtualization"): through the
//! PID-pointer table it posts to the target's descriptor, with the same
//! ON/SN/NV rules, so a guest IPI never exits on the sender.

use super::apicv::APICV;
use super::{Design, DesignKind, IpiSender, IrteRule, Posting};

pub const APICV_PI: Design = Design {
    kind: DesignKind::ApicvPi,
    vf_irte: IrteRule::Posted,
    posting: Posting::VtdPid,
    ..APICV
};

pub const APICV_PI_IPIV: Design = Design {
    kind: DesignKind::ApicvPiIpiv,
    ipi_sender: IpiSender::Ipiv,
    ..APICV_PI
};
