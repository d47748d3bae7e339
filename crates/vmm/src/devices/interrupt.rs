//! How a device's interrupt reaches a vCPU. A device thread holds one
//! `InterruptSink` and calls `raise`; which path that takes (the VMM
//! injecting, an irqfd, or dirq's userspace irqchip) is the run's choice.

use std::sync::Arc;

use kvm_bindings::kvm_msi;
use vmm_sys_util::eventfd::EventFd;

use dirq_arch::lapic::{DeliveryMode, Destination, Interrupt, TriggerMode};
use dirq_arch::msi::MsiMessage;

use crate::vm::Vm;

/// A fixed, edge-triggered MSI to one APIC ID, physical destination (SDM 10.11).
pub fn fixed_msi(dest_apic_id: u8, vector: u8) -> MsiMessage {
    let interrupt = Interrupt {
        vector,
        delivery_mode: DeliveryMode::Fixed,
        trigger_mode: TriggerMode::Edge,
        destination: Destination::Physical(u32::from(dest_apic_id)),
    };
    MsiMessage::compose(&interrupt).expect("an 8-bit physical destination always fits an MSI")
}

#[derive(Debug, thiserror::Error)]
pub enum InterruptError {
    #[error("KVM_SIGNAL_MSI failed")]
    SignalMsi(#[source] kvm_ioctls::Error),
    #[error("KVM_SIGNAL_MSI: the guest's LAPIC refused MSI {0:?}")]
    Blocked(MsiMessage),
    #[error("KVM_IRQ_LINE failed")]
    IrqLine(#[source] kvm_ioctls::Error),
    #[error("cannot signal the irqfd")]
    Irqfd(#[source] std::io::Error),
    #[error("userspace irqchip: {0}")]
    Userspace(String),
}

pub trait InterruptSink: Send + Sync {
    fn raise(&self) -> Result<(), InterruptError>;
}

/// `--inject vcpu` with KVM's LAPIC: the VMM hands the MSI to KVM.
pub struct SignalMsi {
    pub vm: Arc<Vm>,
    pub msi: MsiMessage,
}

impl InterruptSink for SignalMsi {
    fn raise(&self) -> Result<(), InterruptError> {
        signal_msi(&self.vm, self.msi)
    }
}

/// Hands `msi` to KVM's LAPICs (KVM_SIGNAL_MSI).
pub fn signal_msi(vm: &Vm, msi: MsiMessage) -> Result<(), InterruptError> {
    let request = kvm_msi {
        address_lo: msi.address as u32,
        address_hi: (msi.address >> 32) as u32,
        data: msi.data,
        ..Default::default()
    };
    match vm.fd.signal_msi(request) {
        Ok(0) => Err(InterruptError::Blocked(msi)),
        Ok(_) => Ok(()),
        Err(err) => Err(InterruptError::SignalMsi(err)),
    }
}

/// `--inject irqfd`: the kernel delivers the routed MSI itself.
pub struct Irqfd {
    pub eventfd: EventFd,
}

impl InterruptSink for Irqfd {
    fn raise(&self) -> Result<(), InterruptError> {
        self.eventfd.write(1).map_err(InterruptError::Irqfd)
    }
}
