/* A fixed compute loop timed with and without a load (whileloop, tick). */
#ifndef DIRQ_COMPUTE_H
#define DIRQ_COMPUTE_H

#include "types.h"

struct loop_timing {
    u64 iterations;        /* done in the unloaded run */
    u64 baseline_cycles;   /* how long they take unloaded, chunks the host disturbed left out */
    u64 loaded_iterations; /* done again under the load (fewer if capped) */
    u64 loaded_cycles;
    /*
     * Of the loaded run, the cycles chunks took beyond an undisturbed chunk
     * in the chunks during which *events advanced, and by how much it
     * advanced: the time each event took from the loop, measured directly
     * rather than as a small difference of two long runs.
     */
    u64 event_lost_cycles;
    u64 events_seen;
};

/*
 * Computes for `budget_cycles` TSC cycles, calls `load_on`, then does the
 * same iterations again, calling `periodic` (if any) between chunks at most
 * once per `period_cycles` (by time, not iterations: natively the loop is
 * thousands of times faster than emulated). The loaded run stops after
 * max_slowdown times the baseline, so it always ends. `events` is the
 * counter the load's handler advances (see event_lost_cycles).
 */
void time_under_load(u64 budget_cycles, u64 max_slowdown, void (*load_on)(void), void (*periodic)(void),
                     u64 period_cycles, const volatile u64 *events, struct loop_timing *timing);

#endif
