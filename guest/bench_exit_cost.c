/*
 * exit-cost (used by `dirq probe`): the cost of one exit the VMM handles
 * (an `out` to a port that does nothing) and of one exit KVM handles in the
 * kernel, timed back to back in the same run. The in-kernel exit reads
 * IA32_MISC_ENABLE, which traps to KVM on every backend: VT-x and SVM
 * intercept it, and kvm_pvm's native mode traps every RDMSR (CPUID would
 * not do: natively it bypasses KVM). Each exit is timed on its own, for a
 * median next to the mean. Then the same number of self-IPIs, each timed
 * from the send to its handler's entry.
 */
#include "apic.h"
#include "bench.h"
#include "durations.h"
#include "irq.h"
#include "irq_entries.h"
#include "kernel.h"
#include "x86.h"

#define MSR_IA32_MISC_ENABLE 0x1a0

static struct durations userspace_exits, kernel_exits;

static void run(void)
{
    u64 n = shared->count;
    u64 userspace = 0, kernel = 0;

    control(DIRQ_CONTROL_BENCH_START);
    for (u64 i = 0; i < n; i++) {
        u64 start = rdtsc();
        outl(DIRQ_PORT_NOOP, 0);
        u64 took = rdtsc() - start;
        userspace += took;
        durations_add(&userspace_exits, took);
    }

    for (u64 i = 0; i < n; i++) {
        u64 start = rdtsc();
        (void)rdmsr(MSR_IA32_MISC_ENABLE);
        u64 took = rdtsc() - start;
        kernel += took;
        durations_add(&kernel_exits, took);
    }

    /* The self-IPI: its handler (timer_irq) stores the TSC at entry. */
    set_irq_entries(DIRQ_VECTOR_TIMER, &timer_irq);
    irq_enable();
    for (u64 i = 1; i <= n; i++) {
        u64 sent = rdtsc();
        apic_send_self_ipi(DIRQ_VECTOR_TIMER);
        while (shared->handled[0] < i)
            cpu_relax();
        record_sample(timer_fired_tsc - sent);
    }
    irq_disable();
    control(DIRQ_CONTROL_BENCH_END);

    shared->result[DIRQ_RESULT_EXIT_COST_ITERATIONS] = n;
    shared->result[DIRQ_RESULT_EXIT_COST_USERSPACE_CYCLES] = userspace;
    shared->result[DIRQ_RESULT_EXIT_COST_KERNEL_CYCLES] = kernel;
    shared->result[DIRQ_RESULT_EXIT_COST_USERSPACE_P50_CYCLES] = durations_median(&userspace_exits);
    shared->result[DIRQ_RESULT_EXIT_COST_KERNEL_P50_CYCLES] = durations_median(&kernel_exits);
}

const struct bench bench_exit_cost = {DIRQ_BENCH_EXIT_COST, "exit-cost", run, 0};
