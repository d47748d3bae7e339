/*
 * vioapic: level-triggered device interrupts through an I/O interrupt
 * controller at one of the four levels of the Loongson VIOAPIC study
 * (mechanisms.md section 6), back to back: the VMM's device has a new event
 * ready as soon as the guest consumed the last one.
 *
 * Per interrupt the guest does the level-triggered sequence: read the
 * controller's status, mask the line, check the line, read and clear the
 * device (its event number sits in memory, as a DMA'd status would), EOI
 * the LAPIC, unmask. Six controller register accesses at every level; only
 * where they land differs:
 *   userspace  the VIOAPIC's MMIO page: all six exit to the VMM;
 *   ro-page    reads hit a read-only mirror of the page; the two writes exit;
 *   pv         reads and the mask hit the shared page (struct
 *              dirq_vioapic_pv, under its lock); only the UNMASK write exits;
 *   kernel     KVM's IOAPIC (IOREGSEL/IOWIN pairs), handled in the kernel.
 *
 * The interrupt handler (irq_entries.S's level_irq) only counts; the
 * sequence runs here, so every level pays the same for the handler.
 *
 * Race test (args[1]): the device raises at random times. For the first
 * half of the events the guest also masks and unmasks the line itself
 * between interrupts: no interrupt may arrive while the line is masked
 * unless it was already waiting in the LAPIC when the mask landed. In the
 * second half it only halts between interrupts, so an interrupt lost in a
 * race between a raise and the handler's mask/unmask stalls the run.
 *
 * No loop runs unbounded: the guest gives up after give_up_ms, or after
 * DIRQ_VIOAPIC_SPURIOUS_STREAK wake-ups in a row with nothing to service
 * (a level line that storms, as on a LAPIC that holds nothing in service,
 * which lapic_check.c detects first), and says which in its results. A
 * TSC-deadline timer at give_up_ms wakes a halt that no interrupt would
 * (KVM's LAPIC, which this bench always runs on, has that timer).
 */
#include "apic.h"
#include "bench.h"
#include "irq.h"
#include "ioapic.h"
#include "irq_entries.h"
#include "kernel.h"
#include "lapic_check.h"
#include "x86.h"

#define LINE_BIT (1u << DIRQ_VIOAPIC_LINE)
#define MSR_X2APIC_EOI 0x80b
#define VIOAPIC_REG(reg) (DIRQ_VIOAPIC_GPA + (reg))
/* Exits the masked window of a race toggle takes, so that an interrupt
 * wrongly sent meanwhile gets a chance to be injected. */
#define MASKED_WINDOW_EXITS 4

static volatile struct dirq_vioapic_pv *const pv = (volatile struct dirq_vioapic_pv *)DIRQ_VIOAPIC_PV_GPA;

/*
 * Each step of the sequence at each level. The back-to-back loop is built
 * once per level with `mode` a constant, so it carries no branch on the
 * level: on kvm_pvm, where KVM emulates every instruction of this guest,
 * each instruction the loop saves is time no level should be charged for.
 */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* KVM's IOAPIC: each register is an IOREGSEL write plus an IOWIN access. */
#define KERNEL_RTE IOAPIC_REDTBL(DIRQ_DEVICE_IOAPIC_PIN)
#define KERNEL_RTE_LOW (DIRQ_VECTOR_DEVICE | IOAPIC_RTE_LEVEL)

/* The LAPIC EOI, x2APIC only (the VMM refuses xAPIC for this bench). */
ALWAYS_INLINE void eoi(void) { wrmsr(MSR_X2APIC_EOI, 0); }

ALWAYS_INLINE u32 vioapic_read(u64 reg) { return mmio_read32(VIOAPIC_REG(reg)); }
ALWAYS_INLINE void vioapic_write(u64 reg, u32 value) { mmio_write32(VIOAPIC_REG(reg), value); }

/* Under the page's lock: MASK |= line, ISR &= ~line (struct dirq_vioapic_pv). */
ALWAYS_INLINE void pv_mask_locked(void)
{
    u32 busy;
    __asm__ volatile("1: mov $1, %0\n\t"
                     "xchg %0, %1\n\t"
                     "test %0, %0\n\t"
                     "jz 2f\n\t"
                     "pause\n\t"
                     "jmp 1b\n"
                     "2: orl %4, %3\n\t"
                     "andl %5, %2\n\t"
                     "movl $0, %1"
                     : "=&r"(busy), "+m"(pv->lock), "+m"(pv->isr), "+m"(pv->mask)
                     : "i"(LINE_BIT), "i"(~LINE_BIT)
                     : "memory");
}

/* Read the controller's status: the line's bit if it wants service. */
ALWAYS_INLINE u32 controller_status(u64 mode)
{
    switch (mode) {
    case DIRQ_VIOAPIC_KERNEL:
        /* Remote IRR: the IOAPIC delivered the line and awaits its EOI. */
        return (ioapic_read(KERNEL_RTE) & IOAPIC_RTE_REMOTE_IRR) ? LINE_BIT : 0;
    case DIRQ_VIOAPIC_PV:
        return pv->isr & LINE_BIT;
    default:
        return vioapic_read(DIRQ_VIOAPIC_REG_ISR) & LINE_BIT;
    }
}

ALWAYS_INLINE void controller_mask(u64 mode)
{
    switch (mode) {
    case DIRQ_VIOAPIC_KERNEL:
        ioapic_write(KERNEL_RTE, KERNEL_RTE_LOW | IOAPIC_RTE_MASKED);
        break;
    case DIRQ_VIOAPIC_PV:
        /* No exit: masking only lowers ISR = IRR & ~MASK. */
        pv_mask_locked();
        break;
    default:
        vioapic_write(DIRQ_VIOAPIC_REG_MASK, vioapic_read(DIRQ_VIOAPIC_REG_MASK) | LINE_BIT);
    }
}

/* Whether the device still asserts the line (the IOAPIC shows no levels:
 * its remote IRR already said so). */
ALWAYS_INLINE u32 controller_level(u64 mode)
{
    switch (mode) {
    case DIRQ_VIOAPIC_KERNEL:
        return LINE_BIT;
    case DIRQ_VIOAPIC_PV:
        return pv->irr & LINE_BIT;
    default:
        return vioapic_read(DIRQ_VIOAPIC_REG_IRR) & LINE_BIT;
    }
}

ALWAYS_INLINE void controller_unmask(u64 mode)
{
    switch (mode) {
    case DIRQ_VIOAPIC_KERNEL:
        ioapic_write(KERNEL_RTE, KERNEL_RTE_LOW);
        break;
    case DIRQ_VIOAPIC_PV:
        /* Must take effect at once: the trapping UNMASK register. */
        vioapic_write(DIRQ_VIOAPIC_REG_UNMASK, LINE_BIT);
        break;
    default:
        vioapic_write(DIRQ_VIOAPIC_REG_MASK, vioapic_read(DIRQ_VIOAPIC_REG_MASK) & ~LINE_BIT);
    }
}

/* The register accesses one pass of the sequence makes at each level,
 * wherever they land (an IOAPIC register is a select and a window access). */
static void count_accesses(u64 mode, u64 *reads, u64 *writes)
{
    switch (mode) {
    case DIRQ_VIOAPIC_KERNEL: /* status: select + read; mask, unmask: select + write */
        *reads = 1;
        *writes = 5;
        break;
    case DIRQ_VIOAPIC_PV: /* status, MASK, IRR; MASK, UNMASK */
        *reads = 3;
        *writes = 2;
        break;
    default: /* ISR, MASK, IRR, MASK; MASK, MASK */
        *reads = 4;
        *writes = 2;
    }
}

static void setup(u64 mode)
{
    if (mode == DIRQ_VIOAPIC_KERNEL) {
        ioapic_route(DIRQ_DEVICE_IOAPIC_PIN, DIRQ_VECTOR_DEVICE, 0, IOAPIC_RTE_LEVEL);
        return;
    }
    vioapic_write(DIRQ_VIOAPIC_REG_ROUTE(DIRQ_VIOAPIC_LINE), DIRQ_VECTOR_DEVICE);
    vioapic_write(DIRQ_VIOAPIC_REG_UNMASK, LINE_BIT);
}

static u64 serviced;   /* interrupts whose sequence ran */
static u64 spurious;   /* interrupts with nothing to service */
static u64 misordered; /* back to back: an event skipped */
static u64 spurious_at_last_event; /* `spurious` when the last event was consumed */
static u64 give_up_tsc;
static u64 gave_up;    /* enum dirq_vioapic_gave_up */

/* Whether to stop trying: the line storms, or time is up. */
ALWAYS_INLINE int giving_up(void)
{
    if (spurious - spurious_at_last_event >= DIRQ_VIOAPIC_SPURIOUS_STREAK)
        gave_up = DIRQ_VIOAPIC_GAVE_UP_SPURIOUS;
    else if (rdtsc() >= give_up_tsc)
        gave_up = DIRQ_VIOAPIC_GAVE_UP_DEADLINE;
    return gave_up != DIRQ_VIOAPIC_FINISHED;
}

/* The level-triggered sequence for one delivered interrupt; back to back,
 * each interrupt must bring exactly the next event. */
ALWAYS_INLINE void service(u64 mode, int back_to_back)
{
    serviced++;
    if (!controller_status(mode)) {
        /* A toggle got there first (race test), or a duplicate delivery. */
        spurious++;
        eoi();
        return;
    }
    controller_mask(mode);
    u64 seq = shared->raise_seq, acked = shared->ack_seq; /* read and clear the device */
    if (controller_level(mode) && seq != acked) {
        misordered += back_to_back && seq != acked + 1;
        shared->ack_seq = seq;
        spurious_at_last_event = spurious;
    } else {
        spurious++;
    }
    eoi();
    controller_unmask(mode);
}

/* Waits for the next interrupt; the controller usually sent it while the
 * last unmask exited, so it is already in. */
ALWAYS_INLINE void wait_for_interrupt(void)
{
    if (level_irq_count != serviced)
        return;
    irq_disable();
    if (level_irq_count == serviced)
        safe_halt();
    irq_enable();
}

ALWAYS_INLINE void back_to_back(u64 mode)
{
    while (shared->ack_seq < shared->count && !giving_up()) {
        wait_for_interrupt();
        service(mode, 1);
    }
}

static void __attribute__((noinline)) back_to_back_userspace(void) { back_to_back(DIRQ_VIOAPIC_USERSPACE); }
static void __attribute__((noinline)) back_to_back_kernel(void) { back_to_back(DIRQ_VIOAPIC_KERNEL); }
static void __attribute__((noinline)) back_to_back_pv(void) { back_to_back(DIRQ_VIOAPIC_PV); }

static u64 masked_arrivals, toggles;

/* Race test: mask and unmask the line outside the handler. */
static void race_toggle(u64 mode)
{
    /* KVM injects into this vCPU only when it exits: take one, so that an
     * interrupt already sent comes in before the toggle, not during it. */
    outb(DIRQ_PORT_NOOP, 0);
    irq_disable();
    if (level_irq_count != serviced) {
        irq_enable();
        return;
    }
    controller_mask(mode);
    /* What the controller sent before the mask landed waits in the LAPIC's
     * IRR: let it in and service it first, unmasked again. */
    if (apic_irr_pending(DIRQ_VECTOR_DEVICE)) {
        controller_unmask(mode);
        irq_enable();
        return;
    }
    u64 before = level_irq_count;
    irq_enable();
    for (int i = 0; i < MASKED_WINDOW_EXITS; i++)
        outb(DIRQ_PORT_NOOP, 0);
    irq_disable();
    masked_arrivals += level_irq_count - before;
    controller_unmask(mode);
    toggles++;
    irq_enable();
}

static void race(u64 mode)
{
    while (shared->ack_seq < shared->count && !giving_up()) {
        if (level_irq_count != serviced)
            service(mode, 0);
        else if (shared->ack_seq < shared->count / 2)
            race_toggle(mode);
        else
            wait_for_interrupt();
    }
}

static void run(void)
{
    u64 mode = shared->args[0];
    level_irq_eoi_at_entry = (shared->args[3] & DIRQ_VIOAPIC_FLAG_EOI_AT_ENTRY) != 0;
    set_irq_entry(DIRQ_VECTOR_DEVICE, level_irq);
    /* Before the line is routed: the device's vector is the check's. */
    struct lapic_in_service check;
    lapic_check_in_service(DIRQ_VECTOR_DEVICE, &level_irq_count, &check);
    level_irq_count = 0;
    setup(mode);

    irq_enable();
    control(DIRQ_CONTROL_BENCH_START);
    u64 start = rdtsc();
    give_up_tsc = start + shared->give_up_ms * shared->tsc_khz;
    set_irq_entries(DIRQ_VECTOR_TIMER, &timer_irq);
    apic_timer_setup(DIRQ_VECTOR_TIMER, 1);
    apic_timer_arm_deadline(give_up_tsc);
    if (shared->args[1])
        race(mode);
    else if (mode == DIRQ_VIOAPIC_KERNEL)
        back_to_back_kernel();
    else if (mode == DIRQ_VIOAPIC_PV)
        back_to_back_pv();
    else
        back_to_back_userspace(); /* and ro-page: the VMM decides where reads land */
    u64 cycles = rdtsc() - start;
    apic_timer_arm_deadline(0); /* disarmed */
    control(DIRQ_CONTROL_BENCH_END);

    u64 reads, writes;
    count_accesses(mode, &reads, &writes);
    shared->handled[0] = serviced;
    shared->result[DIRQ_RESULT_VIOAPIC_READS] = reads;
    shared->result[DIRQ_RESULT_VIOAPIC_WRITES] = writes;
    shared->result[DIRQ_RESULT_VIOAPIC_EVENTS] = shared->ack_seq;
    shared->result[DIRQ_RESULT_VIOAPIC_SPURIOUS] = spurious;
    shared->result[DIRQ_RESULT_VIOAPIC_MISORDERED] = misordered;
    shared->result[DIRQ_RESULT_VIOAPIC_MASKED_ARRIVALS] = masked_arrivals;
    shared->result[DIRQ_RESULT_VIOAPIC_MASK_TOGGLES] = toggles;
    shared->result[DIRQ_RESULT_VIOAPIC_CYCLES] = cycles;
    shared->result[DIRQ_RESULT_VIOAPIC_GAVE_UP] = gave_up;
    shared->result[DIRQ_RESULT_LAPIC_ISR_SET] = check.isr_set;
    shared->result[DIRQ_RESULT_LAPIC_PPR] = check.ppr;
    shared->result[DIRQ_RESULT_LAPIC_TAKEN_BEFORE_EOI] = check.taken_before_eoi;
    shared->result[DIRQ_RESULT_LAPIC_TAKEN] = check.taken;
}

const struct bench bench_vioapic = {DIRQ_BENCH_VIOAPIC, "vioapic", run, 0};
