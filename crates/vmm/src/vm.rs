//! The VM: its memory slot and halt behaviour, fixed before any vCPU
//! exists (KVM requires that order), as is its interrupt controller mode
//! (`interrupt::prepare_vm`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use dirq_arch::bits::{high_u32, low_u32};
use kvm_bindings::{
    kvm_enable_cap, kvm_irq_routing_entry, kvm_userspace_memory_region, KvmIrqRouting,
    KVM_CAP_DISABLE_QUIRKS2, KVM_CAP_HALT_POLL, KVM_CAP_X86_DISABLE_EXITS, KVM_IRQ_ROUTING_MSI,
    KVM_MEM_READONLY, KVM_X86_DISABLE_EXITS_HLT, KVM_X86_QUIRK_FIX_HYPERCALL_INSN,
};
use kvm_ioctls::{Kvm, VmFd};
use vm_memory::{GuestMemoryBackend as _, GuestMemoryRegion};
use vmm_sys_util::eventfd::EventFd;

use crate::config::HaltMode;
use crate::memory::GuestMemory;
use dirq_arch::msi::MsiMessage;

#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("cannot open /dev/kvm")]
    OpenKvm(#[source] kvm_ioctls::Error),
    #[error("{what} failed")]
    Kvm {
        what: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
    #[error("this KVM lacks {0}, which the chosen configuration needs")]
    MissingCapability(&'static str),
    #[error("cannot create an eventfd")]
    EventFd(#[source] std::io::Error),
}

fn kvm_call(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmError {
    move |source| VmError::Kvm { what, source }
}

pub struct Vm {
    pub fd: VmFd,
    /// The MSI routes the VMM installed, by GSI: KVM_SET_GSI_ROUTING
    /// replaces KVM's whole table, so each change commits all of them.
    msi_routes: Mutex<BTreeMap<u32, MsiMessage>>,
}

impl Vm {
    /// A VM with `memory` as its RAM and HLT handled as `halt` says.
    pub fn new(kvm: &Kvm, memory: &GuestMemory, halt: HaltMode) -> Result<Self, VmError> {
        let fd = kvm.create_vm().map_err(kvm_call("KVM_CREATE_VM"))?;
        let vm = Vm {
            fd,
            msi_routes: Mutex::default(),
        };
        vm.register_memory(memory)?;
        vm.configure_halt(kvm, halt)?;
        Ok(vm)
    }

    /// KVM_ENABLE_CAP of `cap` with `arg`; `what` names it in the error.
    pub fn enable_cap(&self, cap: u32, arg: u64, what: &'static str) -> Result<(), VmError> {
        let mut request = kvm_enable_cap {
            cap,
            ..Default::default()
        };
        request.args[0] = arg;
        self.fd.enable_cap(&request).map_err(kvm_call(what))
    }

    /// Guest RAM, from slot 0 on.
    fn register_memory(&self, memory: &GuestMemory) -> Result<(), VmError> {
        self.add_slots(0, memory, 0)
    }

    fn add_slots(&self, first_slot: u32, memory: &GuestMemory, flags: u32) -> Result<(), VmError> {
        for (slot, region) in (first_slot..).zip(memory.iter()) {
            let region_desc = kvm_userspace_memory_region {
                slot,
                flags,
                guest_phys_addr: region.start_addr().0,
                memory_size: region.len(),
                userspace_addr: region.as_ptr() as u64,
            };
            // SAFETY: the region is a live mmap owned by `memory`, which the
            // caller keeps alive for as long as the VM exists.
            unsafe { self.fd.set_user_memory_region(region_desc) }
                .map_err(kvm_call("KVM_SET_USER_MEMORY_REGION"))?;
        }
        Ok(())
    }

    /// Maps `memory` at its guest addresses from `first_slot` on, read-only
    /// (KVM_MEM_READONLY): guest reads hit it with no exit, guest writes
    /// exit as MMIO writes. The caller keeps `memory` alive with the VM.
    pub fn map_readonly(&self, first_slot: u32, memory: &GuestMemory) -> Result<(), VmError> {
        if !self.fd.check_extension(kvm_ioctls::Cap::ReadonlyMem) {
            return Err(VmError::MissingCapability("KVM_CAP_READONLY_MEM"));
        }
        self.add_slots(first_slot, memory, KVM_MEM_READONLY)
    }

    /// `exit` switches halt polling off so HLT always sleeps: the host's
    /// default halt_poll_ns would otherwise blur the comparison.
    fn configure_halt(&self, kvm: &Kvm, halt: HaltMode) -> Result<(), VmError> {
        match halt {
            HaltMode::Exit => self.enable_halt_poll(kvm, 0),
            HaltMode::Poll { ns } => self.enable_halt_poll(kvm, ns),
            HaltMode::None => {
                // A negative return is an error: nothing is allowed then.
                let allowed =
                    u32::try_from(kvm.check_extension_raw(u64::from(KVM_CAP_X86_DISABLE_EXITS)))
                        .unwrap_or(0);
                if allowed & KVM_X86_DISABLE_EXITS_HLT == 0 {
                    return Err(VmError::MissingCapability("KVM_X86_DISABLE_EXITS_HLT"));
                }
                self.enable_cap(
                    KVM_CAP_X86_DISABLE_EXITS,
                    u64::from(KVM_X86_DISABLE_EXITS_HLT),
                    "KVM_CAP_X86_DISABLE_EXITS",
                )
            }
        }
    }

    fn enable_halt_poll(&self, kvm: &Kvm, ns: u32) -> Result<(), VmError> {
        if kvm.check_extension_raw(u64::from(KVM_CAP_HALT_POLL)) == 0 {
            return Err(VmError::MissingCapability("KVM_CAP_HALT_POLL"));
        }
        self.enable_cap(KVM_CAP_HALT_POLL, u64::from(ns), "KVM_CAP_HALT_POLL")
    }

    /// Stops KVM from rewriting VMCALL/VMMCALL into the host's flavour
    /// (KVM_X86_QUIRK_FIX_HYPERCALL_INSN): under kvm_pvm that rewrite
    /// livelocks the emulator, where without it the guest gets a #UD and a
    /// clear failure.
    pub fn disable_hypercall_patching(&self) -> Result<(), VmError> {
        self.enable_cap(
            KVM_CAP_DISABLE_QUIRKS2,
            u64::from(KVM_X86_QUIRK_FIX_HYPERCALL_INSN),
            "KVM_CAP_DISABLE_QUIRKS2",
        )
    }

    /// Binds a new irqfd to an MSI route on `gsi`: writing the eventfd
    /// delivers `msi` with no VMM involvement. KVM's default routes go, so
    /// a VM uses either this or IOAPIC-input irqfds.
    pub fn msi_irqfd(&self, gsi: u32, msi: MsiMessage) -> Result<EventFd, VmError> {
        self.set_msi_route(gsi, Some(msi))?;
        self.irqfd(gsi)
    }

    /// Routes `gsi` to `msi`, or removes its route (`None`), keeping the
    /// VMM's routes on other GSIs; KVM is told only of a change.
    pub fn set_msi_route(&self, gsi: u32, msi: Option<MsiMessage>) -> Result<(), VmError> {
        let mut routes = self
            .msi_routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let before = routes.clone();
        match msi {
            Some(msi) => routes.insert(gsi, msi),
            None => routes.remove(&gsi),
        };
        if *routes == before {
            return Ok(());
        }
        let entries: Vec<kvm_irq_routing_entry> = routes
            .iter()
            .map(|(&gsi, msi)| {
                let mut entry = kvm_irq_routing_entry {
                    gsi,
                    type_: KVM_IRQ_ROUTING_MSI,
                    ..Default::default()
                };
                entry.u.msi.address_lo = low_u32(msi.address);
                entry.u.msi.address_hi = high_u32(msi.address);
                entry.u.msi.data = msi.data;
                entry
            })
            .collect();
        let routing = KvmIrqRouting::from_entries(&entries)
            .map_err(|_| VmError::MissingCapability("IRQ routing"))?;
        let committed = self
            .fd
            .set_gsi_routing(&routing)
            .map_err(kvm_call("KVM_SET_GSI_ROUTING"));
        if committed.is_err() {
            *routes = before;
        }
        committed
    }

    /// A level-triggered irqfd on `gsi` (an IOAPIC input): writing the
    /// first eventfd asserts the input; when the guest EOIs its interrupt,
    /// KVM deasserts it and signals the second (the resample eventfd), so
    /// the device can assert again if it still has work.
    pub fn level_irqfd(&self, gsi: u32) -> Result<(EventFd, EventFd), VmError> {
        let trigger = EventFd::new(libc::EFD_NONBLOCK).map_err(VmError::EventFd)?;
        let resample = EventFd::new(libc::EFD_NONBLOCK).map_err(VmError::EventFd)?;
        self.fd
            .register_irqfd_with_resample(&trigger, &resample, gsi)
            .map_err(kvm_call("KVM_IRQFD (resample)"))?;
        Ok((trigger, resample))
    }

    /// An eventfd that KVM signals, completing the write inside the
    /// kernel, when the guest writes the 4-byte `value` to `gpa`
    /// (KVM_IOEVENTFD with datamatch); other writes there still exit.
    pub fn mmio_ioeventfd(&self, gpa: u64, value: u32) -> Result<EventFd, VmError> {
        if !self.fd.check_extension(kvm_ioctls::Cap::Ioeventfd) {
            return Err(VmError::MissingCapability("KVM_CAP_IOEVENTFD"));
        }
        let eventfd = EventFd::new(libc::EFD_NONBLOCK).map_err(VmError::EventFd)?;
        self.fd
            .register_ioevent(&eventfd, &kvm_ioctls::IoEventAddress::Mmio(gpa), value)
            .map_err(kvm_call("KVM_IOEVENTFD"))?;
        Ok(eventfd)
    }

    /// A new irqfd on `gsi`; KVM's default routes map GSI n to input n of
    /// its in-kernel IOAPIC.
    pub fn irqfd(&self, gsi: u32) -> Result<EventFd, VmError> {
        let eventfd = EventFd::new(libc::EFD_NONBLOCK).map_err(VmError::EventFd)?;
        self.fd
            .register_irqfd(&eventfd, gsi)
            .map_err(kvm_call("KVM_IRQFD"))?;
        Ok(eventfd)
    }
}
