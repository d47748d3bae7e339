/*
 * ipi: CPU 0 sends DIRQ_VECTOR_IPI_PING to CPU 1, whose handler answers
 * with DIRQ_VECTOR_IPI_PONG; CPU 0 records the round trip in TSC cycles.
 * The handlers are in irq_entries.S.
 */
#include "apic.h"
#include "bench.h"
#include "irq_entries.h"
#include "kernel.h"
#include "x86.h"

#define AP_APIC_ID 1

static void run(void)
{
    /* The IDT is shared by both CPUs. */
    set_irq_entries(DIRQ_VECTOR_IPI_PING, &ipi_ping_irq);
    set_irq_entries(DIRQ_VECTOR_IPI_PONG, &ipi_pong_irq);
    control(DIRQ_CONTROL_BENCH_START);
    for (u64 i = 1; i <= shared->count; i++) {
        u64 sent = rdtsc();
        apic_send_ipi(AP_APIC_ID, DIRQ_VECTOR_IPI_PING);
        wait_until_at_least(&shared->handled[0], i);
        record_sample(pong_tsc - sent);
    }
    control(DIRQ_CONTROL_BENCH_END);
}

/* CPU 1 idles (halting or spinning) with interrupts on, answering pings. */
static void respond(void) { wait_until_at_least(&shared->handled[1], ~0ul); }

const struct bench bench_ipi = {DIRQ_BENCH_IPI, "ipi", run, respond};
