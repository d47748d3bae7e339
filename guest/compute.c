#include "compute.h"
#include "x86.h"

#define CHUNK 4096
/* A chunk this many times the fastest one was disturbed by the host. */
#define PREEMPTED_CHUNK_FACTOR 3

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
                     u64 period_cycles, const volatile u64 *events, struct loop_timing *timing)
{
    u64 iterations = 0;
    u64 seed = 1;
    u64 fastest_chunk = ~0ul, kept_cycles = 0, kept_chunks = 0;
    u64 start = rdtsc(), chunk_start = start, now = start;
    while (now - start < budget_cycles) {
        seed = work(CHUNK, seed);
        iterations += CHUNK;
        now = rdtsc();
        u64 chunk = now - chunk_start;
        chunk_start = now;
        if (chunk < fastest_chunk)
            fastest_chunk = chunk;
        /*
         * A chunk the host preempted (or interrupted for its own work)
         * takes many times the others: it is left out, so that a host
         * that preempts the vCPU during the baseline does not make the
         * loaded run look faster than the unloaded one (a share of the CPU
         * above 100%).
         */
        if (chunk <= PREEMPTED_CHUNK_FACTOR * fastest_chunk) {
            kept_cycles += chunk;
            kept_chunks++;
        }
    }
    /* The unloaded cost: the mean undisturbed chunk, for every chunk. */
    u64 undisturbed_chunk = kept_cycles / kept_chunks;
    u64 baseline = undisturbed_chunk * (iterations / CHUNK);

    load_on();
    start = rdtsc();
    u64 done = 0, last_periodic = start, lost = 0, seen = 0;
    u64 events_before = *events;
    chunk_start = start;
    /* One TSC read per chunk, as in the baseline: the chunk's end serves
     * the cap too. */
    while (done < iterations && chunk_start - start < max_slowdown * baseline) {
        seed = work(CHUNK, seed);
        done += CHUNK;
        now = rdtsc();
        u64 events_now = *events;
        if (events_now != events_before) {
            u64 chunk = now - chunk_start;
            if (chunk > undisturbed_chunk)
                lost += chunk - undisturbed_chunk;
            seen += events_now - events_before;
            events_before = events_now;
        }
        if (periodic && now - last_periodic >= period_cycles) {
            periodic();
            now = rdtsc();
            last_periodic = now;
        }
        chunk_start = now;
    }
    timing->loaded_cycles = rdtsc() - start;
    timing->event_lost_cycles = lost;
    timing->events_seen = seen;
    timing->iterations = iterations;
    timing->baseline_cycles = baseline;
    timing->loaded_iterations = done;
}
