/*
 * The contract between the dirq VMM and its guest test kernel.
 *
 * Mirrored by crates/vmm/src/abi.rs; both sides assert the offsets, so a
 * change here that is not made there fails the build.
 */
#ifndef DIRQ_ABI_H
#define DIRQ_ABI_H

#define DIRQ_ABI_MAGIC 0x71726964u /* "dirq" */
#define DIRQ_ABI_VERSION 3u

/* Guest-physical layout chosen by the VMM. */
#define DIRQ_SHARED_GPA 0x8000
#define DIRQ_STACKS_GPA 0x20000
#define DIRQ_STACK_SIZE 0x10000
#define DIRQ_STACK_SHIFT 16 /* log2(DIRQ_STACK_SIZE) */
#define DIRQ_MAX_CPUS 8
#define DIRQ_LAPIC_GPA 0xfee00000
#define DIRQ_IOAPIC_GPA 0xfec00000
#define DIRQ_DEVICE_IOAPIC_PIN 10
/* The VIOAPIC's register page, and its paravirtual page in guest RAM. */
#define DIRQ_VIOAPIC_GPA 0xfed00000
#define DIRQ_VIOAPIC_PV_GPA 0x9000
#define DIRQ_VIOAPIC_LINE 0
/* kvm_pvm native mode: one "VIF" page per CPU (virtual interrupt flag), page-aligned. */
#define DIRQ_VIF_GPA 0xa000
#define DIRQ_VIF_PAGE_SIZE 0x1000
/* PIT channel 0 (IRQ0) reaches this IOAPIC input, as on PCs (ACPI override). */
#define DIRQ_PIT_IOAPIC_PIN 2

/* I/O ports the VMM owns. */
#define DIRQ_PORT_SERIAL 0x3f8
#define DIRQ_PORT_CONTROL 0xf4 /* 32-bit writes: enum dirq_control */
#define DIRQ_PORT_NOOP 0xf8    /* does nothing: the cost of one userspace exit */
#define DIRQ_PORT_IO_BATCH 0xfc /* 32-bit write: GPA of a struct dirq_io_batch to replay */
#define DIRQ_PORT_TASK_FILE 0x1f0 /* the io-batch disk's task file, 0x1f0-0x1f7 */

/* VIOAPIC registers (crates/arch/src/vioapic.rs). */
#define DIRQ_VIOAPIC_REG_IRR 0x00
#define DIRQ_VIOAPIC_REG_ISR 0x04
#define DIRQ_VIOAPIC_REG_MASK 0x08
#define DIRQ_VIOAPIC_REG_UNMASK 0x0c
#define DIRQ_VIOAPIC_REG_ROUTE(line) (0x40 + 4 * (line))

/* Interrupt vectors the guest uses. */
#define DIRQ_VECTOR_DEVICE 0x40
#define DIRQ_VECTOR_TIMER 0x41
#define DIRQ_VECTOR_IPI_PING 0x42
#define DIRQ_VECTOR_IPI_PONG_BASE 0x50 /* + the answering CPU's index */
#define DIRQ_VECTOR_TICK 0x44
#define DIRQ_VECTOR_SPURIOUS 0xff

/* Offsets in struct dirq_shared that assembly code uses (asserted below). */
#define DIRQ_SHARED_OFFSET_RAISE_SEQ 0x100
#define DIRQ_SHARED_OFFSET_ACK_SEQ 0x140
#define DIRQ_SHARED_OFFSET_HANDLED 0x148
#define DIRQ_SHARED_OFFSET_PV_EOI_SKIPS 0x190

/* Bench-specific results in dirq_shared.result[]. */
#define DIRQ_RESULT_EXIT_COST_ITERATIONS 0
#define DIRQ_RESULT_EXIT_COST_USERSPACE_CYCLES 1
#define DIRQ_RESULT_EXIT_COST_KERNEL_CYCLES 2
/* The median of each kind of exit, TSC cycles (0: none under 200 us). */
#define DIRQ_RESULT_EXIT_COST_USERSPACE_P50_CYCLES 3
#define DIRQ_RESULT_EXIT_COST_KERNEL_P50_CYCLES 4
/* exit-cost's samples: x2APIC self-IPI, sent to handler entry (the cheapest
 * interrupt into a running guest through KVM's LAPIC). */
/* ipi, busy unicast target (CPU 1): the median gap the pings made in its
 * spin loop (TSC cycles), and how many gaps (those a ping handler ran in). */
#define DIRQ_RESULT_IPI_TARGET_GAP_CYCLES 0
#define DIRQ_RESULT_IPI_TARGET_GAPS 1
/* ipi, CPU 0: the median TSC cycles its ICR write (or hypercall) took. */
#define DIRQ_RESULT_IPI_SEND_CYCLES 2
#define DIRQ_RESULT_WHILELOOP_ITERATIONS 0
#define DIRQ_RESULT_WHILELOOP_BASELINE_CYCLES 1
#define DIRQ_RESULT_WHILELOOP_LOADED_CYCLES 2
#define DIRQ_RESULT_WHILELOOP_LOADED_ITERATIONS 3
#define DIRQ_RESULT_WHILELOOP_INTERRUPT_LOST_CYCLES 4 /* loaded chunks' excess where handled[0] advanced */
#define DIRQ_RESULT_WHILELOOP_INTERRUPTS_SEEN 5       /* how far handled[0] advanced in those chunks */
#define DIRQ_RESULT_VIOAPIC_READS 0      /* controller register reads per interrupt */
#define DIRQ_RESULT_VIOAPIC_WRITES 1     /* controller register writes per interrupt */
#define DIRQ_RESULT_VIOAPIC_EVENTS 2     /* device events consumed */
#define DIRQ_RESULT_VIOAPIC_SPURIOUS 3   /* interrupts with nothing to service */
#define DIRQ_RESULT_VIOAPIC_MISORDERED 4 /* back-to-back events not consumed one by one */
#define DIRQ_RESULT_VIOAPIC_MASKED_ARRIVALS 5 /* race test: arrived while masked, none in flight */
#define DIRQ_RESULT_VIOAPIC_MASK_TOGGLES 6 /* race test: mask/unmask pairs done outside the handler */
#define DIRQ_RESULT_VIOAPIC_CYCLES 7     /* TSC cycles over the measured interrupts */
#define DIRQ_RESULT_VIOAPIC_GAVE_UP 8    /* enum dirq_vioapic_gave_up */
/* vioapic, before its window: does KVM's LAPIC hold a delivered interrupt in
 * service (guest/lapic_check.c)? Two self-IPIs, the first left without EOI. */
#define DIRQ_RESULT_LAPIC_ISR_SET 9        /* 1: the first's ISR bit was set */
#define DIRQ_RESULT_LAPIC_PPR 10           /* PPR while the first was unacknowledged */
#define DIRQ_RESULT_LAPIC_TAKEN_BEFORE_EOI 11 /* of the two, taken before the EOI */
#define DIRQ_RESULT_LAPIC_TAKEN 12         /* of the two, taken in all */
#define DIRQ_RESULT_IO_BATCH_CYCLES 0
#define DIRQ_RESULT_TICK_TICKS 0          /* timer interrupts in the loaded loop */
#define DIRQ_RESULT_TICK_ITERATIONS 1
#define DIRQ_RESULT_TICK_BASELINE_CYCLES 2 /* the loop with the PIT stopped */
#define DIRQ_RESULT_TICK_LOADED_CYCLES 3   /* the same loop under the tick */
#define DIRQ_RESULT_TICK_MAX_COUNT_READ 4  /* the highest channel-0 count read back */
#define DIRQ_RESULT_TICK_RELOAD 5          /* the count the guest programmed */
#define DIRQ_RESULT_TICK_LOADED_ITERATIONS 6
#define DIRQ_RESULT_COUNT 16

#ifndef __ASSEMBLER__
#include "types.h"

enum dirq_control {
    DIRQ_CONTROL_BENCH_START = 1, /* measured window opens; device starts */
    DIRQ_CONTROL_BENCH_END = 2,   /* measured window closes; device stops */
    DIRQ_CONTROL_DONE = 3,        /* benchmark finished, results are valid */
    DIRQ_CONTROL_FAILED = 4,      /* guest failure, see failure fields */
};

enum dirq_bench {
    DIRQ_BENCH_IRQ_LATENCY = 1,
    DIRQ_BENCH_TIMER_LATENCY = 2,
    DIRQ_BENCH_IPI = 3,
    DIRQ_BENCH_WHILELOOP = 4,
    DIRQ_BENCH_EXIT_COST = 5,
    DIRQ_BENCH_FAULT = 6,
    DIRQ_BENCH_VIOAPIC = 7,
    DIRQ_BENCH_IO_BATCH = 8,
    DIRQ_BENCH_TICK = 9,
    DIRQ_BENCH_HALT_WAKEUP = 10,
    DIRQ_BENCH_HOSTILE = 11,
};

/* How the guest runs, as the VMM decided from the host side (never probed
 * from the guest). */
enum dirq_guest_exec {
    DIRQ_EXEC_PLAIN = 0,      /* an ordinary x86 guest (VT-x/SVM, or kvm_pvm's emulator) */
    DIRQ_EXEC_PVM_NATIVE = 1, /* switch to kvm_pvm's native mode after reading CPUID */
};

/* args[0] of the vioapic bench: where the I/O interrupt controller lives. */
enum dirq_vioapic_mode {
    DIRQ_VIOAPIC_USERSPACE = 1, /* the VIOAPIC in the VMM: every access exits */
    DIRQ_VIOAPIC_KERNEL = 2,    /* KVM's in-kernel IOAPIC, level-triggered */
    DIRQ_VIOAPIC_RO_PAGE = 3,   /* reads from a read-only mirror, writes exit */
    DIRQ_VIOAPIC_PV = 4,        /* MASK in shared memory, only UNMASK exits */
};

/* The vioapic guest gives up after give_up_ms of its measured loop, or
 * after this many wake-ups in a row that found nothing to service (a
 * storm), and says which. */
#define DIRQ_VIOAPIC_SPURIOUS_STREAK 256
enum dirq_vioapic_gave_up {
    DIRQ_VIOAPIC_FINISHED = 0,
    DIRQ_VIOAPIC_GAVE_UP_SPURIOUS = 1,
    DIRQ_VIOAPIC_GAVE_UP_DEADLINE = 2,
};

/* args[3] of the vioapic bench: flags. */
#define DIRQ_VIOAPIC_FLAG_EOI_AT_ENTRY 1u /* test knob: the level handler EOIs at entry */

/* args[0] of the ipi bench. */
enum dirq_ipi_kind {
    DIRQ_IPI_UNICAST = 0,           /* CPU 0 pings CPU 1 */
    DIRQ_IPI_BROADCAST = 1,         /* CPU 0 pings all others (ICR shorthand) */
    DIRQ_IPI_BROADCAST_PV = 2,      /* ... with one KVM_HC_SEND_IPI hypercall */
};

/* args[1] of the ipi bench: what each sample is. */
enum dirq_ipi_measure {
    DIRQ_IPI_ROUND_TRIP = 0, /* ping sent to the round's last pong handled, on CPU 0 */
    DIRQ_IPI_ONE_WAY = 1,    /* ping sent to the ping handler's entry (TSCs are shared) */
};

/* The paravirtual VIOAPIC page: MASK moved into memory (section 6). The
 * guest and the VMM update mask and isr only while holding lock. */
struct dirq_vioapic_pv {
    volatile u32 lock;
    volatile u32 irr;
    volatile u32 isr;
    volatile u32 mask;
};

/* What one DIRQ_PORT_IO_BATCH doorbell replays, in order. */
#define DIRQ_IO_BATCH_MAX 32
struct dirq_io_batch_entry {
    u16 port;
    u8 size; /* 1, 2 or 4 */
    u8 reserved;
    u32 value;
};
struct dirq_io_batch {
    u32 count;
    u32 reserved;
    struct dirq_io_batch_entry entries[DIRQ_IO_BATCH_MAX];
};

enum dirq_fault {
    DIRQ_FAULT_TRIPLE = 1,
    DIRQ_FAULT_HANG = 2,
    DIRQ_FAULT_UNOWNED_PORT = 3,
    DIRQ_FAULT_UNOWNED_MMIO = 4,
    DIRQ_FAULT_EXCEPTION = 5,
};

/* args[0] of the hostile bench: the attack (crates/vmm/src/hostile.rs). */
enum dirq_hostile {
    DIRQ_HOSTILE_TRIPLE_FAULT_CPU0 = 1,
    DIRQ_HOSTILE_TRIPLE_FAULT_CPU1 = 2,
    DIRQ_HOSTILE_INTERRUPTS_OFF_FOREVER = 3,
    DIRQ_HOSTILE_EOI_STORM = 4,
    DIRQ_HOSTILE_UNOWNED_PORT = 5,
    DIRQ_HOSTILE_UNOWNED_MMIO = 6,
    DIRQ_HOSTILE_UNOWNED_MSR = 7,
    DIRQ_HOSTILE_DOORBELL_OUTSIDE_RAM = 8,
    DIRQ_HOSTILE_DOORBELL_STRADDLES_RAM_END = 9,
    DIRQ_HOSTILE_DOORBELL_HUGE_COUNT = 10,
    DIRQ_HOSTILE_DOORBELL_BAD_SIZE = 11,
    DIRQ_HOSTILE_DOORBELL_RESERVED_BYTE = 12,
    DIRQ_HOSTILE_DOORBELL_UNOWNED_PORT = 13,
    DIRQ_HOSTILE_DOORBELL_NESTED = 14,
    DIRQ_HOSTILE_PV_LOCK_HELD_FOREVER = 15,
    DIRQ_HOSTILE_PV_LOCK_HELD_THEN_UNMASK = 16,
    DIRQ_HOSTILE_PV_LOCK_GARBAGE = 17,
    DIRQ_HOSTILE_PV_PAGE_CORRUPT = 18,
    DIRQ_HOSTILE_UNKNOWN_HYPERCALL = 19,
    DIRQ_HOSTILE_SERIAL_FLOOD_LINES = 20,
    DIRQ_HOSTILE_SERIAL_FLOOD_NO_NEWLINE = 21,
    DIRQ_HOSTILE_SERIAL_ESCAPES = 22,
    DIRQ_HOSTILE_INIT_SIPI_CPU1 = 23,
    DIRQ_HOSTILE_FORGED_ACK = 24,
    DIRQ_HOSTILE_TPR_BLOCKS_ALL = 25,
    DIRQ_HOSTILE_PERIODIC_TIMER_COUNT_1 = 26,
    DIRQ_HOSTILE_FORGED_SAMPLE_COUNT = 27,
    DIRQ_HOSTILE_FORGED_NATIVE_CLAIM = 28, /* stays emulated, claims native */
    DIRQ_HOSTILE_SAMPLES_MAX = 29,         /* count samples of ~0 */
    DIRQ_HOSTILE_FEWER_SAMPLES = 30,       /* 1 sample of count */
    DIRQ_HOSTILE_EMPTY_WINDOW = 31,        /* START, END and DONE at once */
    DIRQ_HOSTILE_DONE_FROM_CPU1 = 32,      /* CPU 1 says DONE while CPU 0 measures */
    DIRQ_HOSTILE_START_TWICE = 33,
    DIRQ_HOSTILE_FORGED_EXIT_COST = 34,    /* exit-cost's result slots, forged */
};

/* An attack the VMM mounts through any bench (crates/vmm/src/attack.rs
 * declares what the VMM must do with each): attack_cpu runs it once, at
 * attack_when. */
enum dirq_attack {
    DIRQ_ATTACK_NONE = 0,
    DIRQ_ATTACK_POKE = 1,         /* the u64 at shared-page offset args[0] = args[1] */
    DIRQ_ATTACK_FILL_SAMPLES = 2, /* every sample written so far = args[0] */
    DIRQ_ATTACK_CONTROL = 3,      /* control commands: each non-zero byte of args[0], lowest first */
    DIRQ_ATTACK_PIT_RELOAD = 4,   /* PIT channel 0 as a rate generator, reload args[0]; again
                                   * every args[1] us until the window closes (0: once) */
    DIRQ_ATTACK_PV_LOCK_CHURN = 5, /* until the window closes: hold the PV lock args[0] pauses, free args[1] */
    DIRQ_ATTACK_PORT_WRITE = 6,   /* an args[1]-byte write (1, 2 or 4) of 0 to port args[0] */
    DIRQ_ATTACK_TRIPLE_FAULT = 7,
    DIRQ_ATTACK_IPI_STORM = 8,    /* args[1] fixed IPIs of vector args[0] to APIC ID 0, back to back */
    DIRQ_ATTACK_STAY_EMULATED = 9, /* attack_cpu never enters native mode, yet claims it (at boot) */
};

enum dirq_attack_when {
    DIRQ_ATTACK_BEFORE = 1, /* before the bench starts; CPU 0 waits for it */
    DIRQ_ATTACK_DURING = 2, /* attack_delay_us after the window opens */
    DIRQ_ATTACK_AFTER = 3,  /* after the window closes; CPU 0 waits for it before DONE */
};

enum dirq_failure {
    DIRQ_FAILURE_EXCEPTION = 1,      /* detail[0..3] = vector, error, rip, cpu */
    DIRQ_FAILURE_UNKNOWN_BENCH = 2,  /* detail[0] = bench */
    DIRQ_FAILURE_MISSING_FEATURE = 3, /* detail[0] = CPUID leaf, detail[1] = bit mask */
    DIRQ_FAILURE_ABI_MISMATCH = 4,    /* detail[0] = magic, detail[1] = version */
    DIRQ_FAILURE_HYPERCALL_REFUSED = 5, /* detail[0] = hypercall number, detail[1] = what KVM returned */
};


/*
 * The shared page at DIRQ_SHARED_GPA. Three cache lines' worth of groups
 * so that the device thread's writes and the guest's acks do not share a
 * line with the read-mostly parameters.
 */
struct dirq_shared {
    /* 0x000: boot parameters, written by the VMM before the first entry. */
    u32 magic;
    u32 abi_version;
    u32 bench;        /* enum dirq_bench */
    u32 fault;        /* enum dirq_fault, for DIRQ_BENCH_FAULT */
    u32 x2apic;       /* 1: x2APIC MSRs, 0: xAPIC MMIO */
    u32 pv_eoi;       /* 1: enable KVM PV EOI and use it */
    u32 idle_busy;    /* 1: spin between events, 0: hlt */
    u32 tsc_deadline; /* timer-latency: 1: TSC-deadline, 0: one-shot */
    u32 num_cpus;
    u32 via_ioapic;   /* irq-latency: 1: the device drives IOAPIC pin DIRQ_DEVICE_IOAPIC_PIN */
    u64 count;         /* events to measure */
    u64 period_ns;     /* timer period */
    u64 duration_ns;   /* whileloop: baseline loop length */
    u64 tsc_khz;
    u64 apic_timer_hz; /* LAPIC timer input clock with divide-by-1 */
    u64 samples_gpa;   /* u64 TSC-cycle samples written by the guest */
    u64 samples_capacity;
    u64 args[4];       /* bench-specific parameters (BenchConfig::guest_args) */
    u32 guest_exec;    /* enum dirq_guest_exec */
    u32 give_up_ms;    /* a bounded guest loop stops trying after this (half the watchdog) */
    /* 0x88: an attack on the VMM, mounted on any bench (guest/attack.c). */
    u32 attack;          /* enum dirq_attack, 0: none */
    u32 attack_when;     /* enum dirq_attack_when */
    u32 attack_cpu;      /* the CPU that attacks */
    u32 attack_delay_us; /* DURING: this long after the window opens */
    u64 attack_args[2];
    u8 pad0[0x100 - 0xa8];

    /* 0x100: written by the VMM's device thread while the bench runs. */
    volatile u64 raise_seq;
    u8 pad1[0x40 - 8];

    /* 0x140: written by the guest. */
    volatile u64 ack_seq;          /* last device interrupt handled */
    volatile u64 handled[DIRQ_MAX_CPUS]; /* interrupts handled per CPU */
    volatile u64 samples_written;
    volatile u64 pv_eoi_skips;     /* EOIs done by clearing KVM's PV EOI flag */
    volatile u64 native_cpus;      /* bit n: CPU n runs in kvm_pvm native mode */
    volatile u32 cpus_online;
    volatile u32 failure;          /* enum dirq_failure */
    volatile u64 failure_detail[4];
    volatile u64 result[DIRQ_RESULT_COUNT];
};

#define DIRQ_ASSERT_OFFSET(field, offset) \
    _Static_assert(__builtin_offsetof(struct dirq_shared, field) == (offset), #field " offset")
DIRQ_ASSERT_OFFSET(raise_seq, DIRQ_SHARED_OFFSET_RAISE_SEQ);
DIRQ_ASSERT_OFFSET(ack_seq, DIRQ_SHARED_OFFSET_ACK_SEQ);
DIRQ_ASSERT_OFFSET(handled, DIRQ_SHARED_OFFSET_HANDLED);
DIRQ_ASSERT_OFFSET(pv_eoi_skips, DIRQ_SHARED_OFFSET_PV_EOI_SKIPS);
DIRQ_ASSERT_OFFSET(guest_exec, 0x80);
DIRQ_ASSERT_OFFSET(native_cpus, 0x198);
DIRQ_ASSERT_OFFSET(attack, 0x88);
DIRQ_ASSERT_OFFSET(attack_args, 0x98);
_Static_assert(__builtin_offsetof(struct dirq_shared, result) == 0x1c8, "result offset");
_Static_assert(sizeof(struct dirq_shared) == 0x248, "dirq_shared size");
_Static_assert(1 << DIRQ_STACK_SHIFT == DIRQ_STACK_SIZE, "stack shift");
_Static_assert(sizeof(struct dirq_io_batch) == 8 + 8 * DIRQ_IO_BATCH_MAX, "dirq_io_batch size");
#endif /* __ASSEMBLER__ */

#endif
