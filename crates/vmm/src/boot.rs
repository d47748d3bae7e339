//! Puts each vCPU straight into 64-bit long mode at the guest's entry point:
//! identity-mapped page tables for the low 4 GiB (RAM, IOAPIC and LAPIC
//! pages), a flat GDT, and per-CPU stack, CPUID and MP state.

use kvm_bindings::{kvm_mp_state, kvm_segment, CpuId, KVM_MP_STATE_RUNNABLE};
use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress};

use crate::abi;
use crate::memory::GuestMemory;

const PML4_GPA: u64 = 0x1000;
const PDPT_GPA: u64 = 0x2000;
/// Four page directories of 2 MiB pages cover 4 GiB.
const PD_GPA: u64 = 0x3000;
const GDT_GPA: u64 = 0x7000;

// Page-table entry bits (SDM Vol. 3 4.5).
const PTE_PRESENT: u64 = 1 << 0;
const PTE_WRITABLE: u64 = 1 << 1;
/// Set at every level: kvm_pvm's native mode runs the guest in ring 3 and
/// livelocks on refaults without it. Harmless elsewhere: the guest runs at
/// CPL 0 and never enables SMEP/SMAP.
const PTE_USER: u64 = 1 << 2;
const PTE_CACHE_DISABLE: u64 = 1 << 4;
const PTE_PAGE_SIZE: u64 = 1 << 7;
const LARGE_PAGE: u64 = 2 << 20;
/// The top 32 MiB of the 4 GiB space holds the IOAPIC and LAPIC pages.
const MMIO_HOLE_START: u64 = 0xfe00_0000;

const SELECTOR_CODE: u16 = 0x08;
const SELECTOR_DATA: u16 = 0x10;
/// Null, 64-bit code, data: the same table the guest installs for itself.
const GDT: [u64; 3] = [0, 0x00af_9a00_0000_ffff, 0x00cf_9200_0000_ffff];

pub(crate) const CR0_PE: u64 = 1 << 0;
pub(crate) const CR0_ET: u64 = 1 << 4;
const CR0_NE: u64 = 1 << 5;
const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;
const RFLAGS_RESERVED_ONE: u64 = 1 << 1;

const CPUID_LEAF_FEATURES: u32 = 1;
const CPUID_LEAF_TOPOLOGY: u32 = 0xb;
const CPUID_1_ECX_TSC_DEADLINE: u32 = 1 << 24;
const CPUID_KVM_FEATURES: u32 = 0x4000_0001;
const KVM_FEATURE_PV_EOI: u32 = 1 << 6;
const KVM_FEATURE_PV_SEND_IPI: u32 = 1 << 11;

#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("cannot write boot structures into guest memory")]
    GuestMemory(#[from] vm_memory::GuestMemoryError),
    #[error("cannot set up vCPU {cpu}: {what}")]
    Vcpu {
        cpu: usize,
        what: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
}

/// Writes the page tables and GDT every vCPU starts with.
pub fn write_boot_structures(memory: &GuestMemory) -> Result<(), BootError> {
    const TABLE: u64 = PTE_PRESENT | PTE_WRITABLE | PTE_USER;
    memory.write_obj(PDPT_GPA | TABLE, GuestAddress(PML4_GPA))?;
    for gib in 0..4u64 {
        let pd = PD_GPA + gib * 0x1000;
        memory.write_obj(pd | TABLE, GuestAddress(PDPT_GPA + gib * 8))?;
        for entry in 0..512u64 {
            let base = (gib << 30) + entry * LARGE_PAGE;
            let cache = if base >= MMIO_HOLE_START {
                PTE_CACHE_DISABLE
            } else {
                0
            };
            let pde = base | TABLE | PTE_PAGE_SIZE | cache;
            memory.write_obj(pde, GuestAddress(pd + entry * 8))?;
        }
    }
    for (index, descriptor) in GDT.iter().enumerate() {
        memory.write_obj(*descriptor, GuestAddress(GDT_GPA + index as u64 * 8))?;
    }
    Ok(())
}

/// What the guest's CPUID shows, beyond what KVM supports by default.
pub struct CpuidOptions {
    pub tsc_deadline: bool,
    pub pv_eoi: bool,
    pub pv_send_ipi: bool,
}

/// Per-vCPU CPUID: the APIC ID in leaves 1 and 0xB, TSC-deadline when the
/// VMM can honour it, and KVM's PV EOI and PV send-IPI only when asked for.
pub fn vcpu_cpuid(supported: &CpuId, cpu: usize, options: &CpuidOptions) -> CpuId {
    let apic_id = u32::try_from(cpu).expect("vCPU indices are below abi::MAX_CPUS");
    let mut cpuid = supported.clone();
    for entry in cpuid.as_mut_slice() {
        match entry.function {
            CPUID_LEAF_FEATURES => {
                entry.ebx = (entry.ebx & 0x00ff_ffff) | (apic_id << 24);
                if options.tsc_deadline {
                    entry.ecx |= CPUID_1_ECX_TSC_DEADLINE;
                } else {
                    entry.ecx &= !CPUID_1_ECX_TSC_DEADLINE;
                }
            }
            CPUID_LEAF_TOPOLOGY => entry.edx = apic_id,
            CPUID_KVM_FEATURES => {
                // Offer the PV features the run uses, and no others it measures.
                if !options.pv_eoi {
                    entry.eax &= !KVM_FEATURE_PV_EOI;
                }
                if !options.pv_send_ipi {
                    entry.eax &= !KVM_FEATURE_PV_SEND_IPI;
                }
            }
            _ => {}
        }
    }
    cpuid
}

/// The mode a vCPU's flat code segment runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CpuMode {
    /// 32-bit protected mode (CS.D = 1), as a Multiboot loader leaves it.
    Protected32,
    /// 64-bit mode (CS.L = 1, CS.D = 0: SDM Vol. 3A 5.2.1).
    Long,
}

/// Flat 4 GiB code and data segments for `mode` in every segment register:
/// the one layout both of dirq's boot paths use.
pub(crate) fn load_flat_segments(sregs: &mut kvm_bindings::kvm_sregs, mode: CpuMode) {
    let long = mode == CpuMode::Long;
    let code = kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector: SELECTOR_CODE,
        type_: 0xb, // execute/read, accessed
        present: 1,
        dpl: 0,
        db: u8::from(!long),
        s: 1,
        l: u8::from(long),
        g: 1,
        ..Default::default()
    };
    let data = kvm_segment {
        selector: SELECTOR_DATA,
        type_: 0x3, // read/write, accessed
        db: 1,
        l: 0,
        ..code
    };
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
}

/// Long mode, flat segments, the guest's entry point, `%rdi` = CPU index and
/// `%rsp` = that CPU's stack; non-boot CPUs are made runnable directly
/// rather than through INIT/SIPI.
pub fn configure_vcpu(
    vcpu: &VcpuFd,
    cpu: usize,
    entry: GuestAddress,
    cpuid: &CpuId,
) -> Result<(), BootError> {
    let fail = |what| move |source| BootError::Vcpu { cpu, what, source };
    vcpu.set_cpuid2(cpuid).map_err(fail("KVM_SET_CPUID2"))?;

    let mut sregs = vcpu.get_sregs().map_err(fail("KVM_GET_SREGS"))?;
    load_flat_segments(&mut sregs, CpuMode::Long);
    sregs.gdt.base = GDT_GPA;
    sregs.gdt.limit = u16::try_from(GDT.len() * 8 - 1).expect("a GDT of a few entries");
    sregs.cr3 = PML4_GPA;
    sregs.cr4 |= CR4_PAE;
    sregs.cr0 = CR0_PE | CR0_ET | CR0_NE | CR0_PG;
    sregs.efer |= EFER_LME | EFER_LMA;
    vcpu.set_sregs(&sregs).map_err(fail("KVM_SET_SREGS"))?;

    let mut regs = vcpu.get_regs().map_err(fail("KVM_GET_REGS"))?;
    regs.rip = entry.0;
    regs.rsp = abi::STACKS_GPA + (cpu as u64 + 1) * abi::STACK_SIZE;
    regs.rdi = cpu as u64;
    regs.rflags = RFLAGS_RESERVED_ONE;
    vcpu.set_regs(&regs).map_err(fail("KVM_SET_REGS"))?;

    if cpu != 0 {
        let runnable = kvm_mp_state {
            mp_state: KVM_MP_STATE_RUNNABLE,
        };
        vcpu.set_mp_state(runnable)
            .map_err(fail("KVM_SET_MP_STATE"))?;
    }
    Ok(())
}
