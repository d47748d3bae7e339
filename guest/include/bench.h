/*
 * Benchmark dispatch. A benchmark is one file defining a `struct bench`;
 * adding one means adding that file and one line to bench.c's table.
 */
#ifndef DIRQ_BENCH_H
#define DIRQ_BENCH_H

#include "types.h"

struct bench {
    u32 id;            /* enum dirq_bench */
    const char *name;
    void (*bsp)(void); /* runs on CPU 0, brackets its measured window */
    void (*ap)(void);  /* runs on every other CPU; NULL parks them */
};

const struct bench *bench_find(u32 id);

extern const struct bench bench_irq_latency;
extern const struct bench bench_timer_latency;
extern const struct bench bench_ipi;
extern const struct bench bench_whileloop;
extern const struct bench bench_exit_cost;
extern const struct bench bench_fault;
extern const struct bench bench_vioapic;
extern const struct bench bench_io_batch;
extern const struct bench bench_tick;
extern const struct bench bench_halt_wakeup;
extern const struct bench bench_hostile;

#endif
