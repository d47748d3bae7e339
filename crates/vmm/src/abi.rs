//! The contract with the guest test kernel: mirrors `guest/include/dirq_abi.h`.
//! Offsets are asserted on both sides, so the two cannot drift silently.

use std::mem::offset_of;

use vm_memory::ByteValued;

/// The guest kernel, built from `guest/` by build.rs.
pub const GUEST_ELF: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/dirq-guest.elf"));

pub const MAGIC: u32 = 0x7172_6964;
pub const VERSION: u32 = 3;

pub const SHARED_GPA: u64 = 0x8000;
pub const STACKS_GPA: u64 = 0x20000;
pub const STACK_SIZE: u64 = 0x10000;
pub const MAX_CPUS: usize = 8;
pub const LAPIC_GPA: u64 = 0xfee0_0000;
pub const IOAPIC_GPA: u64 = 0xfec0_0000;
pub const DEVICE_IOAPIC_PIN: u32 = 10;
pub const VIOAPIC_GPA: u64 = 0xfed0_0000;
pub const VIOAPIC_PV_GPA: u64 = 0x9000;
pub const VIOAPIC_LINE: u32 = 0;
pub const VIF_GPA: u64 = 0xa000;
pub const VIF_PAGE_SIZE: u64 = 0x1000;

pub const EXEC_PLAIN: u32 = 0;
pub const EXEC_PVM_NATIVE: u32 = 1;
pub const PIT_IOAPIC_PIN: u32 = 2;

pub const PORT_SERIAL: u16 = 0x3f8;
pub const PORT_CONTROL: u16 = 0xf4;
pub const PORT_NOOP: u16 = 0xf8;
pub const PORT_IO_BATCH: u16 = 0xfc;
pub const PORT_TASK_FILE: u16 = 0x1f0;

pub const CONTROL_BENCH_START: u32 = 1;
pub const CONTROL_BENCH_END: u32 = 2;
pub const CONTROL_DONE: u32 = 3;
pub const CONTROL_FAILED: u32 = 4;

pub const BENCH_IRQ_LATENCY: u32 = 1;
pub const BENCH_TIMER_LATENCY: u32 = 2;
pub const BENCH_IPI: u32 = 3;
pub const BENCH_WHILELOOP: u32 = 4;
pub const BENCH_EXIT_COST: u32 = 5;
pub const BENCH_FAULT: u32 = 6;
pub const BENCH_VIOAPIC: u32 = 7;
pub const BENCH_IO_BATCH: u32 = 8;
pub const BENCH_TICK: u32 = 9;
pub const BENCH_HALT_WAKEUP: u32 = 10;
pub const BENCH_HOSTILE: u32 = 11;

pub const VIOAPIC_USERSPACE: u64 = 1;
pub const VIOAPIC_KERNEL: u64 = 2;
pub const VIOAPIC_RO_PAGE: u64 = 3;
pub const VIOAPIC_PV: u64 = 4;

/// The guest's `enum dirq_vioapic_mode` value of a VIOAPIC level.
pub fn vioapic_level_id(level: dirq_arch::vioapic::VioapicLevel) -> u64 {
    use dirq_arch::vioapic::VioapicLevel;
    match level {
        VioapicLevel::Userspace => VIOAPIC_USERSPACE,
        VioapicLevel::Kernel => VIOAPIC_KERNEL,
        VioapicLevel::RoPage => VIOAPIC_RO_PAGE,
        VioapicLevel::Pv => VIOAPIC_PV,
    }
}
pub const VIOAPIC_FLAG_EOI_AT_ENTRY: u64 = 1;

pub const IPI_UNICAST: u64 = 0;
pub const IPI_BROADCAST: u64 = 1;
pub const IPI_BROADCAST_PV: u64 = 2;
pub const IPI_ROUND_TRIP: u64 = 0;
pub const IPI_ONE_WAY: u64 = 1;

pub const FAULT_TRIPLE: u32 = 1;
pub const FAULT_HANG: u32 = 2;
pub const FAULT_UNOWNED_PORT: u32 = 3;
pub const FAULT_UNOWNED_MMIO: u32 = 4;
pub const FAULT_EXCEPTION: u32 = 5;

pub const ATTACK_POKE: u32 = 1;
pub const ATTACK_FILL_SAMPLES: u32 = 2;
pub const ATTACK_CONTROL: u32 = 3;
pub const ATTACK_PIT_RELOAD: u32 = 4;
pub const ATTACK_PV_LOCK_CHURN: u32 = 5;
pub const ATTACK_PORT_WRITE: u32 = 6;
pub const ATTACK_TRIPLE_FAULT: u32 = 7;
pub const ATTACK_IPI_STORM: u32 = 8;
pub const ATTACK_STAY_EMULATED: u32 = 9;
pub const ATTACK_BEFORE: u32 = 1;
pub const ATTACK_DURING: u32 = 2;
pub const ATTACK_AFTER: u32 = 3;

pub const FAILURE_EXCEPTION: u32 = 1;
pub const FAILURE_UNKNOWN_BENCH: u32 = 2;
pub const FAILURE_MISSING_FEATURE: u32 = 3;
pub const FAILURE_ABI_MISMATCH: u32 = 4;
pub const FAILURE_HYPERCALL_REFUSED: u32 = 5;

pub const VECTOR_DEVICE: u8 = 0x40;
pub const VECTOR_TIMER: u8 = 0x41;
pub const VECTOR_TICK: u8 = 0x44;

pub const RESULT_EXIT_COST_ITERATIONS: usize = 0;
pub const RESULT_EXIT_COST_USERSPACE_CYCLES: usize = 1;
pub const RESULT_EXIT_COST_KERNEL_CYCLES: usize = 2;
pub const RESULT_EXIT_COST_USERSPACE_P50_CYCLES: usize = 3;
pub const RESULT_EXIT_COST_KERNEL_P50_CYCLES: usize = 4;
pub const RESULT_IPI_TARGET_GAP_CYCLES: usize = 0;
pub const RESULT_IPI_TARGET_GAPS: usize = 1;
pub const RESULT_IPI_SEND_CYCLES: usize = 2;
pub const RESULT_WHILELOOP_ITERATIONS: usize = 0;
pub const RESULT_WHILELOOP_BASELINE_CYCLES: usize = 1;
pub const RESULT_WHILELOOP_LOADED_CYCLES: usize = 2;
pub const RESULT_WHILELOOP_LOADED_ITERATIONS: usize = 3;
pub const RESULT_WHILELOOP_INTERRUPT_LOST_CYCLES: usize = 4;
pub const RESULT_WHILELOOP_INTERRUPTS_SEEN: usize = 5;
pub const RESULT_VIOAPIC_READS: usize = 0;
pub const RESULT_VIOAPIC_WRITES: usize = 1;
pub const RESULT_VIOAPIC_EVENTS: usize = 2;
pub const RESULT_VIOAPIC_SPURIOUS: usize = 3;
pub const RESULT_VIOAPIC_MISORDERED: usize = 4;
pub const RESULT_VIOAPIC_MASKED_ARRIVALS: usize = 5;
pub const RESULT_VIOAPIC_MASK_TOGGLES: usize = 6;
pub const RESULT_VIOAPIC_CYCLES: usize = 7;
pub const RESULT_VIOAPIC_GAVE_UP: usize = 8;
pub const RESULT_LAPIC_ISR_SET: usize = 9;
pub const RESULT_LAPIC_PPR: usize = 10;
pub const RESULT_LAPIC_TAKEN_BEFORE_EOI: usize = 11;
pub const RESULT_LAPIC_TAKEN: usize = 12;
pub const VIOAPIC_FINISHED: u64 = 0;
pub const VIOAPIC_GAVE_UP_SPURIOUS: u64 = 1;
pub const VIOAPIC_GAVE_UP_DEADLINE: u64 = 2;
pub const VIOAPIC_SPURIOUS_STREAK: u64 = 256;
pub const RESULT_IO_BATCH_CYCLES: usize = 0;
pub const RESULT_TICK_TICKS: usize = 0;
pub const RESULT_TICK_ITERATIONS: usize = 1;
pub const RESULT_TICK_BASELINE_CYCLES: usize = 2;
pub const RESULT_TICK_LOADED_CYCLES: usize = 3;
pub const RESULT_TICK_MAX_COUNT_READ: usize = 4;
pub const RESULT_TICK_RELOAD: usize = 5;
pub const RESULT_TICK_LOADED_ITERATIONS: usize = 6;
pub const RESULT_COUNT: usize = 16;

/// `struct dirq_shared`: boot parameters, device writes and guest results.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SharedPage {
    pub magic: u32,
    pub abi_version: u32,
    pub bench: u32,
    pub fault: u32,
    pub x2apic: u32,
    pub pv_eoi: u32,
    pub idle_busy: u32,
    pub tsc_deadline: u32,
    pub num_cpus: u32,
    pub via_ioapic: u32,
    pub count: u64,
    pub period_ns: u64,
    pub duration_ns: u64,
    pub tsc_khz: u64,
    pub apic_timer_hz: u64,
    pub samples_gpa: u64,
    pub samples_capacity: u64,
    pub args: [u64; 4],
    pub guest_exec: u32,
    /// A bounded guest loop stops trying after this many ms (half the watchdog).
    pub give_up_ms: u32,
    /// `enum dirq_attack`, 0: none (`crate::attack`).
    pub attack: u32,
    /// `enum dirq_attack_when`.
    pub attack_when: u32,
    pub attack_cpu: u32,
    pub attack_delay_us: u32,
    pub attack_args: [u64; 2],
    pub pad0: [u8; 0x100 - 0xa8],
    pub raise_seq: u64,
    pub pad1: [u8; 0x40 - 8],
    pub ack_seq: u64,
    pub handled: [u64; MAX_CPUS],
    pub samples_written: u64,
    pub pv_eoi_skips: u64,
    /// Bit n: CPU n switched to kvm_pvm's native mode.
    pub native_cpus: u64,
    pub cpus_online: u32,
    pub failure: u32,
    pub failure_detail: [u64; 4],
    pub result: [u64; RESULT_COUNT],
}

const _: () = {
    assert!(offset_of!(SharedPage, raise_seq) == 0x100);
    assert!(offset_of!(SharedPage, ack_seq) == 0x140);
    assert!(offset_of!(SharedPage, handled) == 0x148);
    assert!(offset_of!(SharedPage, pv_eoi_skips) == 0x190);
    assert!(offset_of!(SharedPage, guest_exec) == 0x80);
    assert!(offset_of!(SharedPage, native_cpus) == 0x198);
    assert!(offset_of!(SharedPage, attack) == 0x88);
    assert!(offset_of!(SharedPage, attack_args) == 0x98);
    assert!(offset_of!(SharedPage, result) == 0x1c8);
    assert!(std::mem::size_of::<SharedPage>() == 0x248);
};

impl Default for SharedPage {
    fn default() -> Self {
        // SAFETY: every field is an integer or an integer array, for which
        // all-zero bytes are a valid value.
        unsafe { std::mem::zeroed() }
    }
}

// SAFETY: SharedPage is repr(C), made only of integers and integer arrays,
// with explicit padding arrays and no implicit padding (asserted above), so
// every byte pattern is a valid value.
unsafe impl ByteValued for SharedPage {}

/// Guest-physical address of a field of the shared page.
pub const fn shared_field_gpa(offset: usize) -> u64 {
    SHARED_GPA + offset as u64
}

pub const RAISE_SEQ_GPA: u64 = shared_field_gpa(offset_of!(SharedPage, raise_seq));

/// `struct dirq_vioapic_pv`: the paravirtual VIOAPIC page's fields.
pub const VIOAPIC_PV_LOCK_GPA: u64 = VIOAPIC_PV_GPA;
pub const VIOAPIC_PV_IRR_GPA: u64 = VIOAPIC_PV_GPA + 4;
pub const VIOAPIC_PV_ISR_GPA: u64 = VIOAPIC_PV_GPA + 8;
pub const VIOAPIC_PV_MASK_GPA: u64 = VIOAPIC_PV_GPA + 12;

/// `struct dirq_io_batch`: a count, then `IO_BATCH_MAX` 8-byte entries of
/// port (u16), size (u8), reserved (u8), value (u32).
pub const IO_BATCH_MAX: usize = 32;
pub const IO_BATCH_HEADER_SIZE: usize = 8;
pub const IO_BATCH_ENTRY_SIZE: usize = 8;
pub const ACK_SEQ_GPA: u64 = shared_field_gpa(offset_of!(SharedPage, ack_seq));
