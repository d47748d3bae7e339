/*
 * ipi: CPU 0 pings, the pinged CPUs answer with DIRQ_VECTOR_IPI_PONG, and
 * CPU 0 records the round trip in TSC cycles (until the last pong). args[0]
 * (enum dirq_ipi_kind) says whom: CPU 1 (unicast), or every other CPU with
 * the ICR's all-excluding-self shorthand or one KVM PV send-IPI hypercall
 * (broadcast). The handlers are in irq_entries.S.
 */
#include "apic.h"
#include "bench.h"
#include "irq_entries.h"
#include "kernel.h"
#include "x86.h"

#define AP_APIC_ID 1
#define KVM_HC_SEND_IPI 10
#define APIC_DM_FIXED 0
#define CPUID_KVM_FEATURES 0x40000001
#define KVM_FEATURE_PV_SEND_IPI (1u << 11)

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

/* Whether every pinged CPU answered ping `round`: the pongs themselves
 * cannot be counted, as pongs arriving together coalesce in CPU 0's IRR. */
static int answered(u64 round, u64 kind)
{
    u32 last = kind == DIRQ_IPI_UNICAST ? AP_APIC_ID : shared->num_cpus - 1;
    for (u32 cpu = 1; cpu <= last; cpu++)
        if (shared->handled[cpu] < round)
            return 0;
    return 1;
}

static void run(void)
{
    u64 kind = shared->args[0];
    /* Every CPU but 0, as APIC IDs from 0. */
    u64 others = ((1ul << shared->num_cpus) - 1) & ~1ul;

    if (kind == DIRQ_IPI_BROADCAST_PV) {
        u32 a, b, c, d;
        cpuid(CPUID_KVM_FEATURES, &a, &b, &c, &d);
        if (!(a & KVM_FEATURE_PV_SEND_IPI))
            fail(DIRQ_FAILURE_MISSING_FEATURE, CPUID_KVM_FEATURES, KVM_FEATURE_PV_SEND_IPI, 0, 0);
    }

    /* The IDT is shared by all CPUs. */
    set_irq_entries(DIRQ_VECTOR_IPI_PING, &ipi_ping_irq);
    set_irq_entries(DIRQ_VECTOR_IPI_PONG, &ipi_pong_irq);
    control(DIRQ_CONTROL_BENCH_START);
    for (u64 i = 1; i <= shared->count; i++) {
        u64 sent = rdtsc();
        if (kind == DIRQ_IPI_BROADCAST_PV)
            pv_send_ipi(others, 0, DIRQ_VECTOR_IPI_PING);
        else if (kind == DIRQ_IPI_BROADCAST)
            apic_send_ipi_all_but_self(DIRQ_VECTOR_IPI_PING);
        else
            apic_send_ipi(AP_APIC_ID, DIRQ_VECTOR_IPI_PING);
        /* Each pong wakes CPU 0 to look again; the last one to land is
         * when the round trip ended. */
        while (!answered(i, kind))
            wait_until_at_least(&shared->handled[0], shared->handled[0] + 1);
        record_sample(pong_tsc - sent);
    }
    control(DIRQ_CONTROL_BENCH_END);
}

/* Every other CPU idles (halting or spinning) with interrupts on, answering pings. */
static void respond(void) { wait_until_at_least(&shared->handled[this_cpu()], ~0ul); }

const struct bench bench_ipi = {DIRQ_BENCH_IPI, "ipi", run, respond};
