//! `--irqchip split`: KVM's LAPICs, dirq's IOAPIC in the VMM
//! (KVM_CAP_SPLIT_IRQCHIP). The IOAPIC's redirections reach KVM's LAPICs
//! as MSIs; KVM reports the EOI of a level-triggered vector with
//! KVM_EXIT_IOAPIC_EOI. Also the only mode with KVM's LAPIC that lets the
//! VMM emulate a PIT (the tick bench).

use std::sync::Arc;

use kvm_bindings::KVM_CAP_SPLIT_IRQCHIP;

use dirq_arch::ioapic::RedirectionEntry;
use dirq_arch::lapic::{Interrupt, TriggerMode};
use dirq_arch::msi::MsiMessage;

use super::ioapic::{ApicBus, IoapicDevice, IoapicPin};
use super::kernel::{kvm_lapic_sink, signal_msi};
use super::{InterruptController, InterruptError, InterruptSink, Path, Setup};
use crate::abi;
use crate::config::Irqchip;
use crate::run_control::RunControl;
use crate::vm::Vm;

/// IOAPIC pins KVM reserves routes for (the IOAPIC has 24).
const IOAPIC_PINS: u64 = 24;

pub(super) fn prepare_vm(vm: &Vm) -> Result<(), InterruptError> {
    vm.enable_cap(KVM_CAP_SPLIT_IRQCHIP, IOAPIC_PINS, "KVM_CAP_SPLIT_IRQCHIP")?;
    Ok(())
}

pub struct SplitIrqchip {
    vm: Arc<Vm>,
    ioapic: Arc<IoapicDevice>,
}

impl SplitIrqchip {
    /// dirq's IOAPIC on `setup.bus`, delivering into KVM's LAPICs.
    pub fn new(setup: Setup) -> Self {
        let ioapic = Arc::new(IoapicDevice::new(Box::new(KvmLapics(setup.vm.clone()))));
        setup.bus.add_mmio(
            abi::IOAPIC_GPA..abi::IOAPIC_GPA + IoapicDevice::SIZE,
            ioapic.clone(),
        );
        SplitIrqchip {
            vm: setup.vm.clone(),
            ioapic,
        }
    }
}

impl InterruptController for SplitIrqchip {
    fn sink(&self, path: Path) -> Result<Box<dyn InterruptSink>, InterruptError> {
        match path {
            Path::DirqIoapic(pin) => Ok(Box::new(IoapicPin {
                ioapic: self.ioapic.clone(),
                pin,
            })),
            _ => kvm_lapic_sink(&self.vm, path, Irqchip::Split),
        }
    }

    fn halted(&self, _cpu: usize, _control: &RunControl) -> Result<(), InterruptError> {
        Err(InterruptError::HaltExit(Irqchip::Split))
    }

    fn ioapic_eoi(&self, vector: u8) -> Result<(), InterruptError> {
        self.ioapic.end_of_interrupt(vector)
    }

    fn ioapic(&self) -> Option<&Arc<IoapicDevice>> {
        Some(&self.ioapic)
    }
}

/// KVM's LAPICs, reached by turning the redirection into an MSI (the
/// IOAPIC's messages carry the same fields, SDM 10.11).
struct KvmLapics(Arc<Vm>);

impl ApicBus for KvmLapics {
    fn deliver(&self, interrupt: Interrupt) -> Result<(), InterruptError> {
        signal_msi(&self.0, MsiMessage::compose(&interrupt)?)
    }

    /// KVM reports the EOI of a vector (KVM_EXIT_IOAPIC_EOI) only if an
    /// MSI route on one of the IOAPIC's GSIs sends that vector
    /// level-triggered to the vCPU (`kvm_scan_ioapic_routes`; api.rst,
    /// KVM_CAP_SPLIT_IRQCHIP): an MSI through KVM_SIGNAL_MSI leaves no
    /// such trace, so without these routes remote IRR is never cleared
    /// and the pin never fires again. Pin n's route is GSI n; a masked
    /// level entry keeps its route, as its vector may still be in service.
    fn redirections_written(&self, entries: &[RedirectionEntry]) -> Result<(), InterruptError> {
        for (gsi, entry) in (0u32..).zip(entries) {
            let msi = entry
                .interrupt()
                .filter(|interrupt| interrupt.trigger_mode == TriggerMode::Level)
                .and_then(|interrupt| MsiMessage::compose(&interrupt).ok());
            self.0.set_msi_route(gsi, msi)?;
        }
        Ok(())
    }
}
