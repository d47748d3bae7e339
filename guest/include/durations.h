/*
 * Durations of up to DURATION_CAP_NS in DURATION_BUCKET_NS buckets, for a
 * median that a few host preemptions cannot drag. Longer ones are the host
 * preempting a vCPU, not the event timed, and are left out.
 */
#ifndef DIRQ_DURATIONS_H
#define DIRQ_DURATIONS_H

#include "types.h"

#define DURATION_BUCKET_NS 100
#define DURATION_CAP_NS 200000
#define DURATION_BUCKETS (DURATION_CAP_NS / DURATION_BUCKET_NS)

struct durations {
    volatile u32 count[DURATION_BUCKETS];
    volatile u64 total;
};

void durations_add(struct durations *d, u64 cycles);
/* The median's bucket midpoint, in TSC cycles; 0 without any duration. */
u64 durations_median(const struct durations *d);

#endif
