#include "bench.h"

static const struct bench *const benches[] = {
    &bench_irq_latency, &bench_timer_latency, &bench_ipi, &bench_whileloop, &bench_exit_cost, &bench_fault,
    &bench_vioapic, &bench_io_batch, &bench_tick, &bench_halt_wakeup, &bench_hostile,
};

const struct bench *bench_find(u32 id)
{
    for (u64 i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
        if (benches[i]->id == id)
            return benches[i];
    return 0;
}
