/*
 * tick (mechanisms.md section 8): the guest programs PIT channel 0 for a
 * 1000 Hz tick, as a Linux guest with HZ=1000 would, routes IRQ0 through
 * the VMM's IOAPIC, and times a compute loop without and with the tick.
 * The VMM may stretch the reload count (--tick-scale); the guest only
 * reads back counts in the range it programmed, which it records.
 */
#include "bench.h"
#include "irq.h"
#include "compute.h"
#include "ioapic.h"
#include "irq_entries.h"
#include "kernel.h"
#include "x86.h"

#define PIT_CHANNEL0 0x40
#define PIT_CONTROL 0x43
#define PIT_HZ 1193182
#define TICK_HZ 1000
#define PIT_RELOAD ((PIT_HZ + TICK_HZ / 2) / TICK_HZ)
/* Control word: channel 0, low then high byte, mode 2 (rate generator). */
#define PIT_CH0_RATE_GENERATOR 0x34
#define PIT_CH0_LATCH 0x00
#define MAX_SLOWDOWN 20
/* A read-back costs three port exits; every 10 ms keeps them near 1% of
 * the loop natively while still sampling counts all over a scaled period. */
#define READ_BACK_PERIOD_NS 10000000

static u64 max_count_read;

static void tick_on(void)
{
    outb(PIT_CONTROL, PIT_CH0_RATE_GENERATOR);
    outb(PIT_CHANNEL0, PIT_RELOAD & 0xff);
    outb(PIT_CHANNEL0, PIT_RELOAD >> 8);
    ioapic_route(DIRQ_PIT_IOAPIC_PIN, DIRQ_VECTOR_TICK, 0, 0);
    irq_enable();
    control(DIRQ_CONTROL_BENCH_START);
}

/* What the guest can see of the tick: the live count of channel 0. */
static void read_back_count(void)
{
    outb(PIT_CONTROL, PIT_CH0_LATCH);
    u64 count = inb(PIT_CHANNEL0);
    count |= (u64)inb(PIT_CHANNEL0) << 8;
    if (count > max_count_read)
        max_count_read = count;
}

static void run(void)
{
    struct loop_timing timing;
    set_irq_entries(DIRQ_VECTOR_TICK, &tick_irq);
    time_under_load(ns_to_tsc(shared->duration_ns), MAX_SLOWDOWN, tick_on, read_back_count, ns_to_tsc(READ_BACK_PERIOD_NS),
                    &shared->handled[0], &timing);
    control(DIRQ_CONTROL_BENCH_END);
    irq_disable();

    shared->result[DIRQ_RESULT_TICK_TICKS] = shared->handled[0];
    shared->result[DIRQ_RESULT_TICK_ITERATIONS] = timing.iterations;
    shared->result[DIRQ_RESULT_TICK_LOADED_ITERATIONS] = timing.loaded_iterations;
    shared->result[DIRQ_RESULT_TICK_BASELINE_CYCLES] = timing.baseline_cycles;
    shared->result[DIRQ_RESULT_TICK_LOADED_CYCLES] = timing.loaded_cycles;
    shared->result[DIRQ_RESULT_TICK_MAX_COUNT_READ] = max_count_read;
    shared->result[DIRQ_RESULT_TICK_RELOAD] = PIT_RELOAD;
}

const struct bench bench_tick = {DIRQ_BENCH_TICK, "tick", run, 0};
