/*
 * whileloop: time a fixed compute loop with no interrupts, then the same
 * loop while the VMM's device thread interrupts at a chosen rate. The ratio
 * is the share of the CPU the guest kept. The handler is irq_entries.S's
 * device_irq (its acknowledgement is unused here). Under an interrupt load
 * the guest can barely run, the loaded loop stops after MAX_SLOWDOWN times
 * the baseline and reports how far it got, so the run always ends.
 */
#include "bench.h"
#include "irq_entries.h"
#include "kernel.h"
#include "x86.h"

#define CHUNK 4096
#define MAX_SLOWDOWN 20

/* A dependency chain the compiler cannot fold away. */
static u64 work(u64 iterations, u64 seed)
{
    volatile u64 sink = seed;
    u64 x = seed;
    for (u64 i = 0; i < iterations; i++)
        x = x * 6364136223846793005ul + 1442695040888963407ul;
    sink = x;
    return sink;
}

static void run(void)
{
    u64 budget = ns_to_tsc(shared->duration_ns);
    u64 iterations = 0;
    u64 seed = 1;

    set_irq_entries(DIRQ_VECTOR_DEVICE, &device_irq);
    u64 start = rdtsc();
    while (rdtsc() - start < budget) {
        seed = work(CHUNK, seed);
        iterations += CHUNK;
    }
    u64 baseline = rdtsc() - start;

    irq_enable();
    control(DIRQ_CONTROL_BENCH_START);
    start = rdtsc();
    u64 done = 0;
    while (done < iterations && rdtsc() - start < MAX_SLOWDOWN * baseline) {
        seed = work(CHUNK, seed);
        done += CHUNK;
    }
    u64 loaded = rdtsc() - start;
    control(DIRQ_CONTROL_BENCH_END);

    shared->result[DIRQ_RESULT_WHILELOOP_ITERATIONS] = iterations;
    shared->result[DIRQ_RESULT_WHILELOOP_LOADED_ITERATIONS] = done;
    shared->result[DIRQ_RESULT_WHILELOOP_BASELINE_CYCLES] = baseline;
    shared->result[DIRQ_RESULT_WHILELOOP_LOADED_CYCLES] = loaded;
}

const struct bench bench_whileloop = {DIRQ_BENCH_WHILELOOP, "whileloop", run, 0};
