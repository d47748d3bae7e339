#include "compute.h"
#include "x86.h"

#define CHUNK 4096

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

void time_under_load(u64 budget_cycles, u64 max_slowdown, void (*load_on)(void), void (*periodic)(void),
                     u64 period_cycles, struct loop_timing *timing)
{
    u64 iterations = 0;
    u64 seed = 1;
    u64 start = rdtsc();
    while (rdtsc() - start < budget_cycles) {
        seed = work(CHUNK, seed);
        iterations += CHUNK;
    }
    u64 baseline = rdtsc() - start;

    load_on();
    start = rdtsc();
    u64 done = 0, last_periodic = start;
    while (done < iterations && rdtsc() - start < max_slowdown * baseline) {
        seed = work(CHUNK, seed);
        done += CHUNK;
        if (periodic && rdtsc() - last_periodic >= period_cycles) {
            periodic();
            last_periodic = rdtsc();
        }
    }
    timing->loaded_cycles = rdtsc() - start;
    timing->iterations = iterations;
    timing->baseline_cycles = baseline;
    timing->loaded_iterations = done;
}
