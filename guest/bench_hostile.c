/*
 * hostile: guest code written to attack the VMM, one case per function
 * (kvm-unit-tests style). shared->args[0] picks the case (enum
 * dirq_hostile); crates/vmm/src/hostile.rs declares what the VMM must do
 * with each: refuse it with a message naming the cause, or survive it.
 */
#include "apic.h"
#include "bench.h"
#include "irq.h"
#include "irq_entries.h"
#include "kernel.h"
#include "x86.h"

/* Nothing is mapped at these: no RAM, no device, no MSR. */
#define UNOWNED_MMIO_GPA 0xd0000000ul
#define UNOWNED_PORT 0x1234
#define UNOWNED_MSR 0x4b564dffu
/* Guest RAM ends here (crates/vmm/src/memory.rs). */
#define RAM_END 0x1000000ul
#define MSR_X2APIC_EOI 0x80b
#define MSR_X2APIC_ICR 0x830
#define APIC_REG_EOI 0x0b0
#define LVT_TIMER_PERIODIC (1u << 17)
#define LVT_MASKED (1u << 16)
#define EOI_STORM 10000
#define SERIAL_FLOOD (20 * 1024) /* more than the VMM keeps */
#define PERIODIC_TIMER_NS 20000000ul
/* Emulated, ~0.2 s of work: far more emulated instructions than exits. */
#define EMULATED_WORK 50000
/* CPU 1 waits this long into CPU 0's window before its DONE. */
#define EARLY_DONE_NS 10000000ul
/* exit-cost's userspace exit, forged: years of TSC cycles. */
#define FORGED_EXIT_CYCLES (1ul << 60)

/* Buffers live on the stack: static ones would grow the kernel's .bss and
 * move other benches' data onto pages first touched inside their measured
 * windows (natively, a page fault there is one more exit). */
static volatile struct dirq_vioapic_pv *const pv = (volatile struct dirq_vioapic_pv *)DIRQ_VIOAPIC_PV_GPA;

static void interrupts_off_forever(void)
{
    irq_disable(); /* natively: VIF byte 0 cleared */
    for (;;)
        cpu_relax();
}

/* EOIs with nothing in service, then interrupts that must still arrive. */
static void eoi_storm(void)
{
    for (u32 i = 0; i < EOI_STORM; i++) {
        if (shared->x2apic)
            wrmsr(MSR_X2APIC_EOI, 0);
        else
            mmio_write32(DIRQ_LAPIC_GPA + APIC_REG_EOI, 0);
    }
    set_irq_entries(DIRQ_VECTOR_TICK, &tick_irq);
    for (u64 i = 1; i <= shared->count; i++) {
        irq_disable();
        apic_send_self_ipi(DIRQ_VECTOR_TICK);
        safe_halt();
    }
    irq_disable();
}

static void doorbell(u64 gpa) { outl(DIRQ_PORT_IO_BATCH, (u32)gpa); }

/* A batch of one entry, the rest as given. */
static void ring_one(u16 port, u8 size, u8 reserved)
{
    struct dirq_io_batch batch = {.count = 1};
    batch.entries[0] = (struct dirq_io_batch_entry){port, size, reserved, 0};
    doorbell((u64)&batch);
}

static void ring_huge_count(void)
{
    struct dirq_io_batch batch = {.count = ~0u};
    doorbell((u64)&batch);
}

static void pv_unmask(void) { mmio_write32(DIRQ_VIOAPIC_GPA + DIRQ_VIOAPIC_REG_UNMASK, 1u << DIRQ_VIOAPIC_LINE); }

static void serial_flood(u8 fill, int newlines)
{
    u8 flood[1024];
    for (u64 i = 0; i < sizeof(flood); i++)
        flood[i] = (newlines && i % 64 == 63) ? '\n' : fill;
    for (u64 sent = 0; sent < SERIAL_FLOOD; sent += sizeof(flood)) {
        const u8 *from = flood;
        u64 left = sizeof(flood);
        __asm__ volatile("rep outsb" : "+S"(from), "+c"(left) : "d"((u16)DIRQ_PORT_SERIAL) : "memory");
    }
    kputs("\n");
}

static void serial_escapes(void)
{
    /* Clear the screen, retitle the terminal, ring the bell, then a BEL-free
     * OSC and a raw CSI: a terminal must see none of it. */
    kputs("\x1b[2J\x1b]0;owned\x07\x1b[31mred\x1b[0m" "\x9b" "31m\r\n");
}

/* kvm_pvm raises #UD at the vmcall; VT-x/SVM KVM returns -KVM_ENOSYS,
 * which the guest reports: the run ends naming the hypercall either way. */
static void unknown_hypercall(void)
{
    u64 nr = 0xdead0000ul, ret = nr;
    __asm__ volatile("vmcall" : "+a"(ret) : : "memory");
    fail(DIRQ_FAILURE_HYPERCALL_REFUSED, nr, ret, 0, 0);
}

static void init_sipi_cpu1(void)
{
    /* INIT, then a SIPI to page 0x10: CPU 1 restarts in real mode. */
    wrmsr(MSR_X2APIC_ICR, ((u64)1 << 32) | 0x4500);
    wrmsr(MSR_X2APIC_ICR, ((u64)1 << 32) | 0x4610);
    for (;;)
        cpu_relax();
}

/* Waits for device interrupts after run() claimed every one handled
 * (forged ack_seq) or raised the TPR above every vector. */
static void await_device(void)
{
    wait_until_at_least(&shared->handled[0], shared->count);
}

/* The shortest periodic timer there is, for a while, then off. */
static void periodic_timer_count_1(void)
{
    set_irq_entries(DIRQ_VECTOR_TICK, &tick_irq);
    apic_write(APIC_REG_TIMER_DIVIDE, 0xb); /* divide by 1 */
    apic_write(APIC_REG_LVT_TIMER, LVT_TIMER_PERIODIC | DIRQ_VECTOR_TICK);
    apic_write(APIC_REG_TIMER_INITIAL, 1);
    irq_enable();
    u64 until = rdtsc() + ns_to_tsc(PERIODIC_TIMER_NS);
    while (rdtsc() < until)
        cpu_relax();
    irq_disable();
    apic_write(APIC_REG_LVT_TIMER, LVT_MASKED);
    apic_write(APIC_REG_TIMER_INITIAL, 0);
}

/* Work the instruction emulator counts, while the shared page says native. */
static void emulated_work(void)
{
    for (volatile u64 i = 0; i < EMULATED_WORK; i++)
        ;
}

/* count samples, each as given: the VMM holds them to --count and the window. */
static void record_samples(u64 count, u64 cycles)
{
    for (u64 i = 0; i < count; i++)
        record_sample(cycles);
}

/* exit-cost's result slots, its userspace exit longer than any window. */
static void forge_exit_cost(void)
{
    shared->result[DIRQ_RESULT_EXIT_COST_ITERATIONS] = 1;
    shared->result[DIRQ_RESULT_EXIT_COST_USERSPACE_CYCLES] = FORGED_EXIT_CYCLES;
    shared->result[DIRQ_RESULT_EXIT_COST_KERNEL_CYCLES] = ns_to_tsc(2000);
    shared->result[DIRQ_RESULT_EXIT_COST_USERSPACE_P50_CYCLES] = ns_to_tsc(30000);
    shared->result[DIRQ_RESULT_EXIT_COST_KERNEL_P50_CYCLES] = ns_to_tsc(2000);
}

static void run(void)
{
    /* Set before the window opens: the VMM's device starts with it. */
    if (shared->args[0] == DIRQ_HOSTILE_FORGED_ACK || shared->args[0] == DIRQ_HOSTILE_TPR_BLOCKS_ALL)
        set_irq_entries(DIRQ_VECTOR_DEVICE, &device_irq);
    if (shared->args[0] == DIRQ_HOSTILE_FORGED_ACK)
        shared->ack_seq = ~0ul;
    if (shared->args[0] == DIRQ_HOSTILE_TPR_BLOCKS_ALL)
        apic_write(APIC_REG_TPR, 0xff);
    if (shared->args[0] == DIRQ_HOSTILE_PV_LOCK_HELD_FOREVER)
        pv->lock = 1; /* the VMM's device samples the line under it */
    control(DIRQ_CONTROL_BENCH_START);
    switch (shared->args[0]) {
    case DIRQ_HOSTILE_TRIPLE_FAULT_CPU0:
        triple_fault();
        break;
    case DIRQ_HOSTILE_TRIPLE_FAULT_CPU1: /* CPU 1 attacks, in ap() */
        for (;;)
            cpu_relax();
    case DIRQ_HOSTILE_INIT_SIPI_CPU1:
        init_sipi_cpu1();
        break;
    case DIRQ_HOSTILE_INTERRUPTS_OFF_FOREVER:
        interrupts_off_forever();
        break;
    case DIRQ_HOSTILE_EOI_STORM:
        eoi_storm();
        break;
    case DIRQ_HOSTILE_UNOWNED_PORT:
        outb(UNOWNED_PORT, 1);
        break;
    case DIRQ_HOSTILE_UNOWNED_MMIO:
        (void)mmio_read32(UNOWNED_MMIO_GPA);
        break;
    case DIRQ_HOSTILE_UNOWNED_MSR:
        (void)rdmsr(UNOWNED_MSR);
        break;
    case DIRQ_HOSTILE_DOORBELL_OUTSIDE_RAM:
        doorbell(UNOWNED_MMIO_GPA);
        break;
    case DIRQ_HOSTILE_DOORBELL_STRADDLES_RAM_END:
        doorbell(RAM_END - 4);
        break;
    case DIRQ_HOSTILE_DOORBELL_HUGE_COUNT:
        ring_huge_count();
        break;
    case DIRQ_HOSTILE_DOORBELL_BAD_SIZE:
        ring_one(DIRQ_PORT_NOOP, 3, 0);
        break;
    case DIRQ_HOSTILE_DOORBELL_RESERVED_BYTE:
        ring_one(DIRQ_PORT_NOOP, 1, 0xff);
        break;
    case DIRQ_HOSTILE_DOORBELL_UNOWNED_PORT:
        ring_one(UNOWNED_PORT, 1, 0);
        break;
    case DIRQ_HOSTILE_DOORBELL_NESTED:
        ring_one(DIRQ_PORT_IO_BATCH, 4, 0);
        break;
    case DIRQ_HOSTILE_PV_LOCK_HELD_FOREVER:
        for (;;)
            cpu_relax();
    case DIRQ_HOSTILE_PV_LOCK_HELD_THEN_UNMASK:
        /* Take the lock as the guest's own code does (test-and-set) and keep
         * it: a plain store could land while the VMM's device thread holds
         * the lock, whose release would then free it and let the case pass. */
        while (__atomic_exchange_n(&pv->lock, 1, __ATOMIC_ACQUIRE))
            cpu_relax();
        pv_unmask();
        break;
    case DIRQ_HOSTILE_PV_LOCK_GARBAGE:
        pv->lock = 0xdeadbeef;
        pv_unmask();
        break;
    case DIRQ_HOSTILE_PV_PAGE_CORRUPT:
        pv->irr = ~0u;
        pv->isr = ~0u;
        pv->mask = 0x5a5a5a5a;
        pv_unmask();
        break;
    case DIRQ_HOSTILE_UNKNOWN_HYPERCALL:
        unknown_hypercall();
        break;
    case DIRQ_HOSTILE_SERIAL_FLOOD_LINES:
        serial_flood('x', 1);
        break;
    case DIRQ_HOSTILE_SERIAL_FLOOD_NO_NEWLINE:
        serial_flood('y', 0);
        break;
    case DIRQ_HOSTILE_SERIAL_ESCAPES:
        serial_escapes();
        break;
    case DIRQ_HOSTILE_FORGED_ACK:
    case DIRQ_HOSTILE_TPR_BLOCKS_ALL:
        await_device();
        break;
    case DIRQ_HOSTILE_PERIODIC_TIMER_COUNT_1:
        periodic_timer_count_1();
        break;
    case DIRQ_HOSTILE_FORGED_SAMPLE_COUNT:
        shared->samples_written = ~0ul;
        break;
    case DIRQ_HOSTILE_FORGED_NATIVE_CLAIM:
        emulated_work();
        break;
    case DIRQ_HOSTILE_SAMPLES_MAX:
        record_samples(shared->count, ~0ul);
        break;
    case DIRQ_HOSTILE_FEWER_SAMPLES:
        record_samples(1, 1);
        break;
    case DIRQ_HOSTILE_EMPTY_WINDOW: /* START, END and DONE back to back */
        break;
    case DIRQ_HOSTILE_DONE_FROM_CPU1: /* CPU 1 attacks, in ap() */
        for (;;)
            cpu_relax();
    case DIRQ_HOSTILE_START_TWICE:
        control(DIRQ_CONTROL_BENCH_START);
        break;
    case DIRQ_HOSTILE_FORGED_EXIT_COST:
        forge_exit_cost();
        break;
    }
    control(DIRQ_CONTROL_BENCH_END);
}

static void ap(void)
{
    if (this_cpu() != 1)
        return;
    switch (shared->args[0]) {
    case DIRQ_HOSTILE_TRIPLE_FAULT_CPU1:
        triple_fault();
        break;
    case DIRQ_HOSTILE_DONE_FROM_CPU1: {
        u64 until = rdtsc() + ns_to_tsc(EARLY_DONE_NS);
        while (rdtsc() < until)
            cpu_relax();
        control(DIRQ_CONTROL_DONE);
        break;
    }
    }
}

const struct bench bench_hostile = {DIRQ_BENCH_HOSTILE, "hostile", run, ap};
