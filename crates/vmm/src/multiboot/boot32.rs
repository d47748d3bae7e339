//! A vCPU as a Multiboot loader leaves it (Multiboot spec 3.2): the boot
//! CPU in 32-bit protected mode, paging off, flat 4 GiB code and data
//! segments, interrupts disabled, `%eax` = the loader's magic and `%ebx` =
//! the boot information; the kernel loads its own GDT and IDT. Other vCPUs
//! keep their reset state: they wait for INIT/SIPI.

use kvm_bindings::{kvm_segment, CpuId};
use kvm_ioctls::VcpuFd;

use super::loader::{Loaded, BOOTLOADER_MAGIC};

const CR0_PE: u64 = 1 << 0;
const CR0_ET: u64 = 1 << 4;
const RFLAGS_RESERVED_ONE: u64 = 1 << 1;
/// Any selector values do; these match a flat GDT's usual layout.
const SELECTOR_CODE: u16 = 0x08;
const SELECTOR_DATA: u16 = 0x10;

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
    let code = kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector: SELECTOR_CODE,
        type_: 0xb, // execute/read, accessed
        present: 1,
        dpl: 0,
        db: 1,
        s: 1,
        l: 0,
        g: 1,
        ..Default::default()
    };
    let data = kvm_segment {
        selector: SELECTOR_DATA,
        type_: 0x3, // read/write, accessed
        ..code
    };
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
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
