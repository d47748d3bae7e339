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
    u64 fastest_chunk = ~0ul;
    u64 start = rdtsc(), chunk_start = start, now = start;
    while (now - start < budget_cycles) {
        seed = work(CHUNK, seed);
        iterations += CHUNK;
        now = rdtsc();
        if (now - chunk_start < fastest_chunk)
            fastest_chunk = now - chunk_start;
        chunk_start = now;
    }
    /*
     * The unloaded cost is the fastest chunk's: a host that preempts the
     * vCPU during the baseline would otherwise make the loaded run look
     * faster than the unloaded one (a share of the CPU above 100%).
     */
    u64 baseline = fastest_chunk * (iterations / CHUNK);

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
