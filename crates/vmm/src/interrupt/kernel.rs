//! `--irqchip kernel`: KVM's LAPICs, IOAPIC and PIC (KVM_CREATE_IRQCHIP).
//! The VMM only raises: an MSI through KVM_SIGNAL_MSI or an irqfd on an
//! MSI route, an IOAPIC input through KVM_IRQ_LINE or an irqfd on its GSI.
//! The split mode's MSIs take the same paths.

use std::sync::Arc;

use dirq_arch::bits::{high_u32, low_u32};
use kvm_bindings::kvm_msi;
use vmm_sys_util::eventfd::EventFd;

use dirq_arch::msi::MsiMessage;

use super::{InterruptController, InterruptError, InterruptSink, Path};
use crate::config::Irqchip;
use crate::run_control::RunControl;
use crate::vm::{Vm, VmError};

/// The GSI a device's MSI irqfd is routed on: the first after the IOAPIC's
/// 24 inputs.
const DEVICE_MSI_GSI: u32 = 24;

pub(super) fn prepare_vm(vm: &Vm) -> Result<(), InterruptError> {
    vm.fd.create_irq_chip().map_err(|source| VmError::Kvm {
        what: "KVM_CREATE_IRQCHIP",
        source,
    })?;
    Ok(())
}

pub struct KernelIrqchip {
    vm: Arc<Vm>,
}

impl KernelIrqchip {
    pub fn new(vm: Arc<Vm>) -> Self {
        KernelIrqchip { vm }
    }
}

impl InterruptController for KernelIrqchip {
    fn sink(&self, path: Path) -> Result<Box<dyn InterruptSink>, InterruptError> {
        Ok(match path {
            Path::KvmIrqLine(pin) => Box::new(KvmIrqLine {
                vm: self.vm.clone(),
                pin,
            }),
            Path::PinIrqfd(pin) => Box::new(Irqfd {
                eventfd: self.vm.irqfd(pin)?,
            }),
            Path::SignalMsi(_) | Path::MsiIrqfd(_) => {
                kvm_lapic_sink(&self.vm, path, Irqchip::Kernel)?
            }
            Path::DirqIoapic(_) | Path::DirqApicBus(_) => {
                return Err(InterruptError::NoPath {
                    path,
                    mode: Irqchip::Kernel,
                })
            }
        })
    }

    fn halted(&self, _cpu: usize, _control: &RunControl) -> Result<(), InterruptError> {
        Err(InterruptError::HaltExit(Irqchip::Kernel))
    }

    fn set_irq_line(&self, pin: u32, level: bool) -> Result<(), InterruptError> {
        self.vm
            .fd
            .set_irq_line(pin, level)
            .map_err(InterruptError::IrqLine)
    }
}

/// An MSI into KVM's LAPIC, in `mode` (kernel or split).
pub(super) fn kvm_lapic_sink(
    vm: &Arc<Vm>,
    path: Path,
    mode: Irqchip,
) -> Result<Box<dyn InterruptSink>, InterruptError> {
    Ok(match path {
        Path::SignalMsi(msi) => Box::new(SignalMsi {
            vm: vm.clone(),
            msi,
        }),
        Path::MsiIrqfd(msi) => Box::new(Irqfd {
            eventfd: vm.msi_irqfd(DEVICE_MSI_GSI, msi)?,
        }),
        _ => return Err(InterruptError::NoPath { path, mode }),
    })
}

/// Hands `msi` to KVM's LAPICs (KVM_SIGNAL_MSI).
pub fn signal_msi(vm: &Vm, msi: MsiMessage) -> Result<(), InterruptError> {
    let request = kvm_msi {
        address_lo: low_u32(msi.address),
        address_hi: high_u32(msi.address),
        data: msi.data,
        ..Default::default()
    };
    match vm.fd.signal_msi(request) {
        Ok(0) => Err(InterruptError::Blocked(msi)),
        Ok(_) => Ok(()),
        Err(err) => Err(InterruptError::SignalMsi(err)),
    }
}

/// `--inject vcpu` with KVM's LAPIC: the VMM hands the MSI to KVM.
struct SignalMsi {
    vm: Arc<Vm>,
    msi: MsiMessage,
}

impl InterruptSink for SignalMsi {
    fn raise(&self) -> Result<(), InterruptError> {
        signal_msi(&self.vm, self.msi)
    }
}

/// `--inject irqfd`: the kernel delivers what the eventfd is bound to.
struct Irqfd {
    eventfd: EventFd,
}

impl InterruptSink for Irqfd {
    fn raise(&self) -> Result<(), InterruptError> {
        self.eventfd.write(1).map_err(InterruptError::Irqfd)
    }
}

/// An edge on an input of KVM's IOAPIC (KVM_IRQ_LINE).
struct KvmIrqLine {
    vm: Arc<Vm>,
    pin: u32,
}

impl InterruptSink for KvmIrqLine {
    fn raise(&self) -> Result<(), InterruptError> {
        for level in [true, false] {
            self.vm
                .fd
                .set_irq_line(self.pin, level)
                .map_err(InterruptError::IrqLine)?;
        }
        Ok(())
    }
}
