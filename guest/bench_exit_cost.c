/*
 * exit-cost (used by `dirq probe`): the cost of one exit the VMM handles
 * (an `out` to a port that does nothing) and of one exit KVM handles in the
 * kernel (CPUID), timed back to back in the same run.
 */
#include "bench.h"
#include "kernel.h"
#include "x86.h"

static void run(void)
{
    u64 n = shared->count;
    u32 a, b, c, d;

    control(DIRQ_CONTROL_BENCH_START);
    u64 start = rdtsc();
    for (u64 i = 0; i < n; i++)
        outl(DIRQ_PORT_NOOP, 0);
    u64 userspace = rdtsc() - start;

    start = rdtsc();
    for (u64 i = 0; i < n; i++)
        cpuid(0, &a, &b, &c, &d);
    u64 kernel = rdtsc() - start;
    control(DIRQ_CONTROL_BENCH_END);

    shared->result[DIRQ_RESULT_EXIT_COST_ITERATIONS] = n;
    shared->result[DIRQ_RESULT_EXIT_COST_USERSPACE_CYCLES] = userspace;
    shared->result[DIRQ_RESULT_EXIT_COST_KERNEL_CYCLES] = kernel;
}

const struct bench bench_exit_cost = {DIRQ_BENCH_EXIT_COST, "exit-cost", run, 0};
