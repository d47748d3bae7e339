/*
 * timer-latency (cyclictest in spirit): arm the LAPIC timer one period
 * ahead, and record how many TSC cycles after the deadline the handler
 * (irq_entries.S) started.
 */
#include "apic.h"
#include "bench.h"
#include "irq_entries.h"
#include "kernel.h"
#include "x86.h"

static void run(void)
{
    u64 period_tsc = ns_to_tsc(shared->period_ns);
    u32 period_ticks = (u32)(shared->period_ns * shared->apic_timer_hz / 1000000000ul);
    int tsc_deadline = (int)shared->tsc_deadline;

    set_irq_entries(DIRQ_VECTOR_TIMER, &timer_irq);
    apic_timer_setup(DIRQ_VECTOR_TIMER, tsc_deadline);
    control(DIRQ_CONTROL_BENCH_START);
    for (u64 i = 1; i <= shared->count; i++) {
        u64 deadline = rdtsc() + period_tsc;
        if (tsc_deadline)
            apic_timer_arm_deadline(deadline);
        else
            apic_timer_arm_oneshot(period_ticks);
        wait_until_at_least(&shared->handled[0], i);
        record_sample(timer_fired_tsc > deadline ? timer_fired_tsc - deadline : 0);
    }
    control(DIRQ_CONTROL_BENCH_END);
}

const struct bench bench_timer_latency = {DIRQ_BENCH_TIMER_LATENCY, "timer-latency", run, 0};
