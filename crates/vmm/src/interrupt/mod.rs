//! The VMM's interrupt path. Who emulates the interrupt controllers is the
//! run's `Irqchip` mode; this module turns the mode into one
//! `InterruptController`, which the rest of the VMM uses without knowing
//! the mode: device threads raise through the `InterruptSink` it hands
//! out, the vCPU run loop asks it what to inject before each entry, what a
//! HLT that exits waits for and where an IOAPIC EOI goes, and `Kicker`
//! gets a vCPU out of KVM_RUN.
//!
//! One file per mode: `kernel` (KVM's LAPIC, IOAPIC and PIC), `split`
//! (KVM's LAPIC, dirq's IOAPIC) and `userspace` (dirq's LAPICs and IOAPIC,
//! `dirq_arch`'s models); `ioapic` is dirq's IOAPIC on the bus, which the
//! last two share, and `kick` the vCPU kick.

pub mod ioapic;
pub mod kernel;
pub mod kick;
pub mod split;
pub mod userspace;

use std::sync::Arc;

use kvm_ioctls::{Cap, Kvm, VcpuFd};

use dirq_arch::lapic::{DeliveryMode, Destination, Interrupt, TriggerMode};
use dirq_arch::msi::MsiMessage;

use crate::bus::Bus;
use crate::config::{Inject, Irqchip};
use crate::run_control::RunControl;
use crate::vm::{Vm, VmError};

pub use ioapic::IoapicDevice;
pub use kick::Kicker;

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
    #[error("KVM_INTERRUPT failed")]
    KvmInterrupt(#[source] std::io::Error),
    #[error(transparent)]
    Vm(#[from] VmError),
    #[error("cannot install the vCPU kick signal handler")]
    KickSignal(#[source] vmm_sys_util::errno::Error),
    #[error("cannot read the guest TSC (KVM_GET_MSRS of IA32_TSC)")]
    GuestTsc,
    #[error("LAPIC")]
    Lapic(#[from] dirq_arch::lapic::LapicError),
    #[error("IOAPIC")]
    Ioapic(#[from] dirq_arch::ioapic::IoapicError),
    #[error("MSI")]
    Msi(#[from] dirq_arch::msi::MsiError),
    #[error("APIC bus")]
    ApicBus(#[from] dirq_arch::bus::BusError),
    #[error("a remappable-format MSI needs an IOMMU, which this VM has none of")]
    Remappable,
    #[error("no LAPIC for vCPU {0}")]
    NoLapic(usize),
    #[error("injected vector {injected} but the LAPIC acknowledged {acknowledged:?}")]
    Acknowledged {
        injected: u8,
        acknowledged: Option<u8>,
    },
    #[error("the userspace irqchip is gone")]
    Gone,
    #[error("HLT exited to the VMM, though KVM's LAPIC ({0} irqchip) handles it")]
    HaltExit(Irqchip),
    #[error("KVM refused IA32_APIC_BASE = {0:#x} from the VMM")]
    ApicBaseMirror(u64),
    #[error("KVM_NMI failed")]
    Nmi(#[source] kvm_ioctls::Error),
    #[error("cannot start the vCPU at its SIPI vector: {what} failed")]
    Startup {
        what: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
    #[error("no IOAPIC takes input {0} in this mode")]
    NoIoapicLine(u32),
    #[error("the {mode} irqchip has no interrupt path {path:?}")]
    NoPath { path: Path, mode: Irqchip },
}

crate::bus::device_model_errors!(InterruptError);

/// The interrupt controllers of one run, whatever the mode.
pub trait InterruptController: Send + Sync {
    /// A device's way into the guest along `path` (`Path::choose`).
    fn sink(&self, path: Path) -> Result<Box<dyn InterruptSink>, InterruptError>;

    /// Called by `cpu`'s run loop before each KVM_RUN: injects what the
    /// guest can take now. KVM's LAPIC needs nothing.
    fn before_entry(
        &self,
        _cpu: usize,
        _vcpu: &mut VcpuFd,
        _control: &RunControl,
    ) -> Result<(), InterruptError> {
        Ok(())
    }

    /// KVM_RUN returned on `cpu`, before its exit is handled: `cr8` is
    /// the guest's CR8 as KVM reports it in kvm_run at every return. An
    /// irqchip outside KVM takes it into its TPR here, so that the exit's
    /// own LAPIC access sees a MOV to CR8 made just before it.
    fn after_exit(&self, _cpu: usize, _cr8: u64) -> Result<(), InterruptError> {
        Ok(())
    }

    /// HLT exited to the VMM: blocks until `cpu` has an interrupt to take
    /// or the run stops.
    fn halted(&self, cpu: usize, control: &RunControl) -> Result<(), InterruptError>;

    /// KVM_EXIT_IOAPIC_EOI: KVM's LAPIC completed level-triggered `vector`,
    /// which an IOAPIC outside the kernel must hear of.
    fn ioapic_eoi(&self, _vector: u8) -> Result<(), InterruptError> {
        Ok(())
    }

    /// Drives IOAPIC input `pin` to `level` and leaves it there, on
    /// whichever IOAPIC the mode has (KVM's through KVM_IRQ_LINE, dirq's
    /// on the bus).
    fn set_irq_line(&self, pin: u32, level: bool) -> Result<(), InterruptError> {
        match self.ioapic() {
            Some(ioapic) => ioapic.set_line(pin, level),
            None => Err(InterruptError::NoIoapicLine(pin)),
        }
    }

    /// Makes every vCPU but the boot CPU wait for INIT and SIPI, as on a
    /// PC at power-up (SDM 8.4.1). KVM's LAPIC does this itself.
    fn hold_application_processors(&self) {}

    /// dirq's IOAPIC, in the modes that emulate it.
    fn ioapic(&self) -> Option<&Arc<IoapicDevice>> {
        None
    }

    /// Work for a thread of its own while the guest runs (dirq's LAPIC
    /// timers), in the modes that have any.
    fn timer_loop(self: Arc<Self>) -> Option<TimerLoop> {
        None
    }
}

/// The LAPIC timer's input clock in every mode: KVM's counts at 1 GHz
/// (APIC_BUS_CYCLE_NS = 1), and dirq's model is set to match, so the guest
/// programs it the same way whichever runs.
pub const APIC_TIMER_HZ: u64 = 1_000_000_000;

/// A loop that runs until the run stops.
pub type TimerLoop = Box<dyn FnOnce(&RunControl) + Send>;

/// How a device's interrupt reaches a vCPU: a device thread holds one and
/// calls `raise`.
pub trait InterruptSink: Send + Sync {
    fn raise(&self) -> Result<(), InterruptError>;

    /// The device saw the guest acknowledge its last interrupt: only a
    /// traced run records it.
    fn acknowledged(&self) {}
}

/// What a device is wired to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceLine {
    /// It writes this MSI.
    Msi(MsiMessage),
    /// It pulses this IOAPIC input.
    IoapicPin(u32),
}

/// The ways a device's interrupt can reach a vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The VMM hands the MSI to KVM's LAPIC (KVM_SIGNAL_MSI).
    SignalMsi(MsiMessage),
    /// An irqfd bound to an MSI route: the kernel delivers it.
    MsiIrqfd(MsiMessage),
    /// The VMM toggles an input of KVM's IOAPIC (KVM_IRQ_LINE).
    KvmIrqLine(u32),
    /// An irqfd on an input of KVM's IOAPIC.
    PinIrqfd(u32),
    /// dirq's IOAPIC pulses the input.
    DirqIoapic(u32),
    /// dirq's APIC bus delivers the MSI to dirq's LAPICs.
    DirqApicBus(MsiMessage),
}

impl Path {
    /// The path of a device wired to `line` in `mode`. `inject` chooses
    /// where KVM's controller takes the interrupt; config validation
    /// refuses `Inject::Irqfd` where none does.
    pub fn choose(mode: Irqchip, line: DeviceLine, inject: Inject) -> Path {
        match (mode, line, inject) {
            (Irqchip::Userspace, DeviceLine::Msi(msi), _) => Path::DirqApicBus(msi),
            (Irqchip::Kernel | Irqchip::Split, DeviceLine::Msi(msi), Inject::Vcpu) => {
                Path::SignalMsi(msi)
            }
            (Irqchip::Kernel | Irqchip::Split, DeviceLine::Msi(msi), Inject::Irqfd) => {
                Path::MsiIrqfd(msi)
            }
            (Irqchip::Kernel, DeviceLine::IoapicPin(pin), Inject::Vcpu) => Path::KvmIrqLine(pin),
            (Irqchip::Kernel, DeviceLine::IoapicPin(pin), Inject::Irqfd) => Path::PinIrqfd(pin),
            (Irqchip::Split | Irqchip::Userspace, DeviceLine::IoapicPin(pin), _) => {
                Path::DirqIoapic(pin)
            }
        }
    }
}

/// What a mode's controllers are built on; the vCPUs exist already.
pub struct Setup<'a> {
    pub vm: &'a Arc<Vm>,
    /// The controllers that trap put their registers here.
    pub bus: &'a mut Bus,
    /// A vCPU whose TSC is the guest's.
    pub boot_vcpu: &'a VcpuFd,
    pub vcpus: usize,
    pub tsc_khz: u64,
    pub kicker: &'a Arc<Kicker>,
}

/// Makes the VM ready for `mode`; KVM wants it before any vCPU exists.
pub fn prepare_vm(mode: Irqchip, vm: &Vm) -> Result<(), InterruptError> {
    match mode {
        Irqchip::Kernel => kernel::prepare_vm(vm),
        Irqchip::Split => split::prepare_vm(vm),
        Irqchip::Userspace => userspace::prepare_vm(vm),
    }
}

/// The controllers of `mode`, their registers on `setup.bus`.
pub fn create(mode: Irqchip, setup: Setup) -> Result<Arc<dyn InterruptController>, InterruptError> {
    Ok(match mode {
        Irqchip::Kernel => Arc::new(kernel::KernelIrqchip::new(setup.vm.clone())),
        Irqchip::Split => Arc::new(split::SplitIrqchip::new(setup)),
        Irqchip::Userspace => userspace::UserspaceIrqchip::create(setup)?,
    })
}

/// Whether the vCPUs may be offered the TSC-deadline timer: dirq's LAPIC
/// model has it, KVM's only where the host supports it.
pub fn offers_tsc_deadline(mode: Irqchip, kvm: &Kvm) -> bool {
    mode == Irqchip::Userspace || kvm.check_extension(Cap::TscDeadlineTimer)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use dirq_arch::msi::MsiFormat;

    #[test]
    fn a_fixed_msi_decodes_to_its_destination_and_vector() {
        let msi = fixed_msi(3, 0x41);
        let Ok(MsiFormat::Compatibility(interrupt)) = msi.decode() else {
            panic!("{msi:?} is not a compatibility-format MSI");
        };
        assert_eq!(interrupt.vector, 0x41);
        assert_eq!(interrupt.destination, Destination::Physical(3));
        assert_eq!(interrupt.trigger_mode, TriggerMode::Edge);
    }

    #[test]
    fn each_mode_routes_a_device_through_its_own_controllers() {
        let msi = fixed_msi(0, 0x40);
        let (pin, vcpu, irqfd) = (DeviceLine::IoapicPin(10), Inject::Vcpu, Inject::Irqfd);
        let msi_line = DeviceLine::Msi(msi);
        for (mode, line, inject, path) in [
            (Irqchip::Kernel, msi_line, vcpu, Path::SignalMsi(msi)),
            (Irqchip::Kernel, msi_line, irqfd, Path::MsiIrqfd(msi)),
            (Irqchip::Kernel, pin, vcpu, Path::KvmIrqLine(10)),
            (Irqchip::Kernel, pin, irqfd, Path::PinIrqfd(10)),
            // Split: KVM's LAPIC takes MSIs, dirq's IOAPIC the pins.
            (Irqchip::Split, msi_line, vcpu, Path::SignalMsi(msi)),
            (Irqchip::Split, msi_line, irqfd, Path::MsiIrqfd(msi)),
            (Irqchip::Split, pin, vcpu, Path::DirqIoapic(10)),
            // Userspace: nothing reaches KVM's controllers, there are none.
            (Irqchip::Userspace, msi_line, vcpu, Path::DirqApicBus(msi)),
            (Irqchip::Userspace, pin, vcpu, Path::DirqIoapic(10)),
        ] {
            assert_eq!(
                Path::choose(mode, line, inject),
                path,
                "{mode} {line:?} {inject}"
            );
        }
    }

    #[test]
    fn errors_keep_the_models_error_as_their_source() {
        use std::error::Error;
        let err = InterruptError::from(dirq_arch::ioapic::IoapicError::InvalidPin { pin: 99 });
        assert!(matches!(
            err,
            InterruptError::Ioapic(dirq_arch::ioapic::IoapicError::InvalidPin { pin: 99 })
        ));
        let source = err.source().expect("the model's error is the source");
        assert!(source.to_string().contains("pin 99"), "{source}");
        let err = InterruptError::from(dirq_arch::lapic::LapicError::NotLapicMsr { msr: 0x10 });
        assert!(matches!(err, InterruptError::Lapic(_)));
    }
}
