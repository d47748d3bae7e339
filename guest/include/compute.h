/* A fixed compute loop timed with and without a load (whileloop, tick). */
#ifndef DIRQ_COMPUTE_H
#define DIRQ_COMPUTE_H

#include "types.h"

struct loop_timing {
    u64 iterations;        /* done in the unloaded run */
    u64 baseline_cycles;   /* how long they took */
    u64 loaded_iterations; /* done again under the load (fewer if capped) */
    u64 loaded_cycles;
};

/*
 * Computes for `budget_cycles` TSC cycles, calls `load_on`, then does the
 * same iterations again, calling `each_chunk` (if any) between chunks. The
 * loaded run stops after max_slowdown times the baseline, so it always ends.
 */
void time_under_load(u64 budget_cycles, u64 max_slowdown, void (*load_on)(void), void (*each_chunk)(void),
                     struct loop_timing *timing);

#endif
