/*
 * The attack hook (attack.h): the VMM chooses an attack, the CPU that
 * mounts it and when (shared->attack*); this runs it once, on any bench.
 * crates/vmm/src/attack.rs names the cases and what the VMM must do with
 * each: refuse it naming the cause, or survive it with correct output.
 */
#include "attack.h"
#include "apic.h"
#include "irq.h"
#include "kernel.h"
#include "x86.h"

#define PIT_CHANNEL0 0x40
#define PIT_CONTROL 0x43
#define PIT_CH0_RATE_GENERATOR 0x34 /* channel 0, low then high byte, mode 2 */

enum window_state { WINDOW_NOT_OPENED = 0, WINDOW_OPEN = 1, WINDOW_CLOSED = 2 };

/* What the guest's own control commands did, for attackers on other CPUs. */
static volatile u32 window_state;
static volatile u32 fired, done;

static volatile struct dirq_vioapic_pv *const pv = (volatile struct dirq_vioapic_pv *)DIRQ_VIOAPIC_PV_GPA;

static u64 give_up_tsc(void) { return rdtsc() + ns_to_tsc((u64)shared->give_up_ms * 1000000); }

/* Waits until *value >= target, for at most give_up_ms: an attacker must
 * not outlast a bench that never gets there. */
static void wait_for(volatile u32 *value, u32 target)
{
    u64 until = give_up_tsc();
    while (__atomic_load_n(value, __ATOMIC_ACQUIRE) < target && rdtsc() < until)
        cpu_relax();
}

static void pause_for(u64 pauses)
{
    for (u64 i = 0; i < pauses; i++)
        cpu_relax();
}

/* Programs channel 0 with `reload`, again every `period_us` until the
 * window closes (0: once): the same reload restarts the count each time. */
static void pit_reload(u64 reload, u64 period_us)
{
    u64 until = give_up_tsc();
    do {
        outb(PIT_CONTROL, PIT_CH0_RATE_GENERATOR);
        outb(PIT_CHANNEL0, (u8)reload);
        outb(PIT_CHANNEL0, (u8)(reload >> 8));
        u64 next = rdtsc() + ns_to_tsc(period_us * 1000);
        while (period_us && rdtsc() < next)
            cpu_relax();
    } while (period_us && window_state != WINDOW_CLOSED && rdtsc() < until);
}

static void port_write(u16 port, u64 size)
{
    if (size == 1)
        outb(port, 0);
    else if (size == 2)
        __asm__ volatile("outw %0, %1" ::"a"((u16)0), "Nd"(port) : "memory");
    else
        outl(port, 0);
}

/* Holds the VIOAPIC PV lock `hold` pauses at a time, as the guest's own
 * code takes it (test-and-set), and leaves it free `free` pauses, until
 * the window closes. */
static void pv_lock_churn(u64 hold, u64 free)
{
    u64 until = give_up_tsc();
    while (window_state != WINDOW_CLOSED && rdtsc() < until) {
        while (__atomic_exchange_n(&pv->lock, 1, __ATOMIC_ACQUIRE))
            cpu_relax();
        pause_for(hold);
        __atomic_store_n(&pv->lock, 0, __ATOMIC_RELEASE);
        pause_for(free);
    }
}

static void attack(void)
{
    u64 arg0 = shared->attack_args[0], arg1 = shared->attack_args[1];
    switch (shared->attack) {
    case DIRQ_ATTACK_POKE:
        *(volatile u64 *)((u64)shared + arg0) = arg1;
        break;
    case DIRQ_ATTACK_FILL_SAMPLES: {
        u64 written = shared->samples_written;
        for (u64 i = 0; i < written && i < shared->samples_capacity; i++)
            ((volatile u64 *)shared->samples_gpa)[i] = arg0;
        break;
    }
    case DIRQ_ATTACK_CONTROL:
        for (u64 commands = arg0; commands; commands >>= 8)
            if (commands & 0xff)
                control((enum dirq_control)(commands & 0xff));
        break;
    case DIRQ_ATTACK_PIT_RELOAD:
        pit_reload(arg0, arg1);
        break;
    case DIRQ_ATTACK_IPI_STORM:
        for (u64 i = 0; i < arg1; i++)
            apic_send_ipi(0, (u8)arg0);
        break;
    case DIRQ_ATTACK_PV_LOCK_CHURN:
        pv_lock_churn(arg0, arg1);
        break;
    case DIRQ_ATTACK_PORT_WRITE:
        port_write((u16)arg0, arg1);
        break;
    case DIRQ_ATTACK_TRIPLE_FAULT:
        triple_fault();
        break;
    case DIRQ_ATTACK_STAY_EMULATED:
        break; /* done at boot: exec_mode_enter never switched */
    }
}

void attack_at(u32 cpu, enum dirq_attack_when when)
{
    if (shared->attack == DIRQ_ATTACK_NONE || shared->attack_when != when || shared->attack_cpu != cpu)
        return;
    if (__atomic_exchange_n(&fired, 1, __ATOMIC_ACQ_REL))
        return; /* once: an attack that sends START must not re-enter */
    if (when == DIRQ_ATTACK_DURING) {
        u64 until = rdtsc() + ns_to_tsc((u64)shared->attack_delay_us * 1000);
        while (rdtsc() < until)
            cpu_relax();
    }
    attack();
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}

void attack_from_ap(u32 cpu, int answers_interrupts)
{
    if (shared->attack == DIRQ_ATTACK_NONE || shared->attack_cpu != cpu)
        return;
    enum dirq_attack_when when = shared->attack_when;
    if (when != DIRQ_ATTACK_BEFORE) {
        /* A CPU the bench needs keeps answering its interrupts meanwhile. */
        if (answers_interrupts)
            irq_enable();
        wait_for(&window_state, when == DIRQ_ATTACK_DURING ? WINDOW_OPEN : WINDOW_CLOSED);
        irq_disable();
    }
    attack_at(cpu, when);
}

void attack_await(enum dirq_attack_when when)
{
    if (shared->attack != DIRQ_ATTACK_NONE && shared->attack_when == when && shared->attack_cpu != 0)
        wait_for(&done, 1);
}

void attack_note_control(enum dirq_control command)
{
    if (command == DIRQ_CONTROL_BENCH_START && window_state == WINDOW_NOT_OPENED)
        __atomic_store_n(&window_state, WINDOW_OPEN, __ATOMIC_RELEASE);
    else if (command == DIRQ_CONTROL_BENCH_END)
        __atomic_store_n(&window_state, WINDOW_CLOSED, __ATOMIC_RELEASE);
}
