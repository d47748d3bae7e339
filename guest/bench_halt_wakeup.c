/*
 * halt-wakeup: an interrupt that becomes pending after the guest enabled
 * interrupts and before it halted must wake the halt. Each round sends a
 * self-IPI inside that window (irq.h's safe_halt_with_self_ipi) and then
 * expects its handler to have run; a lost wake-up sleeps until the
 * watchdog. x2APIC only (the self-IPI MSR).
 */
#include "bench.h"
#include "irq.h"
#include "irq_entries.h"
#include "kernel.h"

static void run(void)
{
    set_irq_entries(DIRQ_VECTOR_TICK, &tick_irq);
    control(DIRQ_CONTROL_BENCH_START);
    for (u64 i = 1; i <= shared->count; i++) {
        irq_disable();
        safe_halt_with_self_ipi(DIRQ_VECTOR_TICK, &shared->handled[0]);
        if (shared->handled[0] != i)
            break; /* woken by something else: the VMM sees the shortfall */
    }
    control(DIRQ_CONTROL_BENCH_END);
}

const struct bench bench_halt_wakeup = {DIRQ_BENCH_HALT_WAKEUP, "halt-wakeup", run, 0};
