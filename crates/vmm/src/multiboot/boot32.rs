//! A vCPU as a Multiboot loader leaves it (Multiboot spec 3.2): the boot
//! CPU in 32-bit protected mode, paging off, flat 4 GiB code and data
//! segments, interrupts disabled, `%eax` = the loader's magic and `%ebx` =
//! the boot information; the kernel loads its own GDT and IDT. Other vCPUs
//! keep their reset state: they wait for INIT/SIPI.

use kvm_bindings::CpuId;
use kvm_ioctls::VcpuFd;

use super::loader::{Loaded, BOOTLOADER_MAGIC};
use crate::boot::{load_flat_segments, CpuMode, CR0_ET, CR0_PE};

const RFLAGS_RESERVED_ONE: u64 = 1 << 1;

#[derive(Debug, thiserror::Error)]
#[error("cannot set up vCPU {cpu} for Multiboot: {what} failed")]
pub struct Boot32Error {
    cpu: usize,
    what: &'static str,
    #[source]
    source: kvm_ioctls::Error,
}

/// Gives `vcpu` its CPUID and, for the boot CPU (`loaded` set), the
/// Multiboot entry state.
pub fn configure(
    vcpu: &VcpuFd,
    cpu: usize,
    cpuid: &CpuId,
    loaded: Option<Loaded>,
) -> Result<(), Boot32Error> {
    let fail = |what| move |source| Boot32Error { cpu, what, source };
    vcpu.set_cpuid2(cpuid).map_err(fail("KVM_SET_CPUID2"))?;
    let Some(loaded) = loaded else {
        return Ok(());
    };
    let mut sregs = vcpu.get_sregs().map_err(fail("KVM_GET_SREGS"))?;
    load_flat_segments(&mut sregs, CpuMode::Protected32);
    sregs.cr0 = CR0_PE | CR0_ET;
    sregs.cr4 = 0;
    sregs.efer = 0;
    vcpu.set_sregs(&sregs).map_err(fail("KVM_SET_SREGS"))?;

    let mut regs = vcpu.get_regs().map_err(fail("KVM_GET_REGS"))?;
    regs.rip = u64::from(loaded.entry);
    regs.rax = u64::from(BOOTLOADER_MAGIC);
    regs.rbx = u64::from(loaded.boot_info);
    regs.rflags = RFLAGS_RESERVED_ONE;
    vcpu.set_regs(&regs).map_err(fail("KVM_SET_REGS"))?;
    Ok(())
}
