/*
 * irq-latency: the VMM's device thread raises DIRQ_VECTOR_DEVICE, writing
 * its sequence number to raise_seq first; the handler acknowledges through
 * ack_seq, which the device thread spins on to time the round trip. The
 * device sends MSIs, or pulses an IOAPIC input the guest routes first.
 * The handler is irq_entries.S's device_irq.
 */
#include "bench.h"
#include "ioapic.h"
#include "irq_entries.h"
#include "kernel.h"

static void run(void)
{
    set_irq_entries(DIRQ_VECTOR_DEVICE, &device_irq);
    if (shared->via_ioapic)
        ioapic_route(DIRQ_DEVICE_IOAPIC_PIN, DIRQ_VECTOR_DEVICE, 0, 0);
    control(DIRQ_CONTROL_BENCH_START);
    wait_until_at_least(&shared->handled[0], shared->count);
    control(DIRQ_CONTROL_BENCH_END);
}

const struct bench bench_irq_latency = {DIRQ_BENCH_IRQ_LATENCY, "irq-latency", run, 0};
