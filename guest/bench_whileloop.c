/*
 * whileloop: time a fixed compute loop with no interrupts, then the same
 * loop while the VMM's device thread interrupts at a chosen rate. The ratio
 * is the share of the CPU the guest kept. The handler is irq_entries.S's
 * device_irq (its acknowledgement is unused here). Under an interrupt load
 * the guest can barely run, the loaded loop stops after MAX_SLOWDOWN times
 * the baseline and reports how far it got, so the run always ends.
 */
#include "bench.h"
#include "irq.h"
#include "compute.h"
#include "irq_entries.h"
#include "kernel.h"
#include "x86.h"

#define MAX_SLOWDOWN 20

static void interrupts_on(void)
{
    irq_enable();
    control(DIRQ_CONTROL_BENCH_START);
}

static void run(void)
{
    struct loop_timing timing;
    set_irq_entries(DIRQ_VECTOR_DEVICE, &device_irq);
    time_under_load(ns_to_tsc(shared->duration_ns), MAX_SLOWDOWN, interrupts_on, 0, 0, &shared->handled[0], &timing);
    control(DIRQ_CONTROL_BENCH_END);

    shared->result[DIRQ_RESULT_WHILELOOP_ITERATIONS] = timing.iterations;
    shared->result[DIRQ_RESULT_WHILELOOP_LOADED_ITERATIONS] = timing.loaded_iterations;
    shared->result[DIRQ_RESULT_WHILELOOP_BASELINE_CYCLES] = timing.baseline_cycles;
    shared->result[DIRQ_RESULT_WHILELOOP_LOADED_CYCLES] = timing.loaded_cycles;
    shared->result[DIRQ_RESULT_WHILELOOP_INTERRUPT_LOST_CYCLES] = timing.event_lost_cycles;
    shared->result[DIRQ_RESULT_WHILELOOP_INTERRUPTS_SEEN] = timing.events_seen;
}

const struct bench bench_whileloop = {DIRQ_BENCH_WHILELOOP, "whileloop", run, 0};
