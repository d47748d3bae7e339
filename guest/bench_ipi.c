/*
 * ipi: CPU 0 pings, each pinged CPU n answers with its own vector
 * DIRQ_VECTOR_IPI_PONG_BASE + n, and CPU 0 records the round trip in TSC
 * cycles, until the last pong of the round; with args[1] =
 * DIRQ_IPI_ONE_WAY, until the last ping handler's entry instead (the
 * vCPUs' TSCs are one clock). args[0]
 * (enum dirq_ipi_kind) says whom: CPU 1 (unicast), or every other CPU with
 * the ICR's all-excluding-self shorthand or one KVM PV send-IPI hypercall
 * (broadcast). The handlers are in irq_entries.S.
 */
#include "apic.h"
#include "bench.h"
#include "durations.h"
#include "irq.h"
#include "irq_entries.h"
#include "kernel.h"
#include "x86.h"

#define AP_APIC_ID 1
#define KVM_HC_SEND_IPI 10
#define APIC_DM_FIXED 0

/* The sender's ICR writes, and the gaps a busy unicast target's loop lost. */
static struct durations sends, target_gaps;

/* KVM_HC_SEND_IPI (Documentation/virt/kvm/x86/hypercalls.rst): one exit
 * for every CPU in the bitmap, APIC IDs from `min` on. KVM handles VMCALL
 * and VMMCALL alike (it rewrites the one the host does not use). */
static void pv_send_ipi(u64 bitmap, u32 min, u8 vector)
{
    u64 ret;
    __asm__ volatile("vmcall"
                     : "=a"(ret)
                     : "a"(KVM_HC_SEND_IPI), "b"(bitmap), "c"(0ul), "d"((u64)min), "S"((u64)(APIC_DM_FIXED | vector))
                     : "memory");
    (void)ret;
}

static void run(void)
{
    u64 kind = shared->args[0];
    int one_way = shared->args[1] == DIRQ_IPI_ONE_WAY;
    /* Every CPU but 0, as APIC IDs from 0. */
    u64 others = ((1ul << shared->num_cpus) - 1) & ~1ul;

    u32 last = kind == DIRQ_IPI_UNICAST ? AP_APIC_ID : shared->num_cpus - 1;

    /* The IDT is shared by all CPUs. */
    set_irq_entries(DIRQ_VECTOR_IPI_PING, &ipi_ping_irq);
    for (u32 cpu = 1; cpu < shared->num_cpus; cpu++)
        set_irq_entries(DIRQ_VECTOR_IPI_PONG_BASE + cpu, ipi_pong_irq[cpu]);
    control(DIRQ_CONTROL_BENCH_START);
    for (u64 i = 1; i <= shared->count; i++) {
        u64 sent = rdtsc();
        if (kind == DIRQ_IPI_BROADCAST_PV)
            pv_send_ipi(others, 0, DIRQ_VECTOR_IPI_PING);
        else if (kind == DIRQ_IPI_BROADCAST)
            apic_send_ipi_all_but_self(DIRQ_VECTOR_IPI_PING);
        else
            apic_send_ipi(AP_APIC_ID, DIRQ_VECTOR_IPI_PING);
        durations_add(&sends, rdtsc() - sent);
        /* Every pong wakes CPU 0; the round ends with the last of them. */
        for (u32 cpu = 1; cpu <= last; cpu++)
            wait_until_at_least(&ipi_pongs[cpu], i);
        u64 end = pong_tsc;
        if (one_way) {
            end = 0;
            for (u32 cpu = 1; cpu <= last; cpu++)
                end = ipi_ping_tsc[cpu] > end ? ipi_ping_tsc[cpu] : end;
        }
        record_sample(end - sent);
    }
    control(DIRQ_CONTROL_BENCH_END);
    shared->result[DIRQ_RESULT_IPI_SEND_CYCLES] = durations_median(&sends);
    shared->result[DIRQ_RESULT_IPI_TARGET_GAP_CYCLES] = durations_median(&target_gaps);
    shared->result[DIRQ_RESULT_IPI_TARGET_GAPS] = target_gaps.total;
}

/* A gap in a busy spin longer than this was taken from the loop (a ping's
 * exit, injection, handler and return, or a host tick), not one iteration. */
#define STOLEN_GAP_NS 500

/* A busy unicast target spins with interrupts on and records what each ping
 * takes from it: `dirq probe`'s cost of a kicked interrupt. Only gaps its
 * ping handler ran in count: on a loaded host the gaps of host ticks and
 * preemptions outnumber the pings and would move the median. A ping seen
 * with no gap yet (its handler ran between the TSC read and the count's)
 * is owed the next one. */
static void spin_counting_stolen_time(void)
{
    u64 threshold = ns_to_tsc(STOLEN_GAP_NS);
    volatile u64 *pings = &shared->handled[this_cpu()];
    irq_enable();
    u64 last = rdtsc(), seen = *pings;
    int owed = 0;
    for (;;) {
        cpu_relax();
        u64 now = rdtsc();
        u64 gap = now - last > threshold ? now - last : 0;
        last = now;
        u64 handled = *pings;
        if (handled != seen) {
            seen = handled;
            owed = 1;
        }
        if (owed && gap) {
            durations_add(&target_gaps, gap);
            owed = 0;
        }
    }
}

/* Every other CPU idles (halting or spinning) with interrupts on, answering pings. */
static void respond(void)
{
    if (shared->idle_busy && this_cpu() == AP_APIC_ID && shared->args[0] == DIRQ_IPI_UNICAST)
        spin_counting_stolen_time();
    wait_until_at_least(&shared->handled[this_cpu()], ~0ul);
}

const struct bench bench_ipi = {DIRQ_BENCH_IPI, "ipi", run, respond};
