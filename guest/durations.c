#include "durations.h"
#include "kernel.h"

/* A bucket's width in TSC cycles; at least one, whatever the TSC rate. */
static u64 bucket_cycles(void)
{
    u64 cycles = ns_to_tsc(DURATION_BUCKET_NS);
    return cycles ? cycles : 1;
}

void durations_add(struct durations *d, u64 cycles)
{
    u64 bucket = cycles / bucket_cycles();
    if (bucket >= DURATION_BUCKETS)
        return;
    d->count[bucket]++;
    d->total++;
}

u64 durations_median(const struct durations *d)
{
    u64 seen = 0, total = d->total;
    for (u64 bucket = 0; bucket < DURATION_BUCKETS && total > 0; bucket++) {
        seen += d->count[bucket];
        if (2 * seen >= total)
            return (2 * bucket + 1) * bucket_cycles() / 2;
    }
    return 0;
}
