/*
 * Does the LAPIC hold a delivered interrupt in service until its EOI? The
 * SDM says it does (ISR bit set, PPR raised to its class, a second
 * interrupt of the same vector waits in IRR). One kvm_pvm host's in-kernel
 * LAPIC did not: ISR and PPR read 0 and the second was taken at once,
 * which makes a level-triggered IOAPIC line re-fire before the guest can
 * read its remote IRR (docs/native.md). The VMM checks the answer for
 * consistency before reporting it.
 */
#include "lapic_check.h"
#include "apic.h"
#include "irq.h"
#include "kernel.h"
#include "x86.h"

#define MSR_X2APIC_PPR 0x80a
#define MSR_X2APIC_ISR0 0x810
/* A self-IPI arrives within tens of us on every host measured; the waits
 * allow a thousand times that, and the one that expects nothing traps at
 * least this often (each trap is a chance for KVM to inject). */
#define DELIVERY_WAIT_MS 100
#define HELD_WAIT_MS 2
#define HELD_WAIT_TRAPS 200

/* Waits with interrupts enabled until *taken reaches `target`, trapping
 * into KVM (RDMSR) meanwhile, for at most `ms` ms and `traps` traps,
 * whichever ends later. */
static void wait_for_taken(volatile u64 *taken, u64 target, u64 ms, u64 traps)
{
    u64 deadline = rdtsc() + ms * shared->tsc_khz;
    for (u64 trap = 0; *taken < target; trap++) {
        if (trap >= traps && rdtsc() >= deadline)
            return;
        (void)rdmsr(MSR_X2APIC_PPR);
    }
}

void lapic_check_in_service(u8 vector, volatile u64 *taken, struct lapic_in_service *out)
{
    u64 before = *taken;
    irq_enable();
    apic_send_self_ipi(vector);
    wait_for_taken(taken, before + 1, DELIVERY_WAIT_MS, 0);
    irq_disable();
    out->isr_set = (rdmsr(MSR_X2APIC_ISR0 + vector / 32) >> (vector % 32)) & 1;
    out->ppr = rdmsr(MSR_X2APIC_PPR);
    irq_enable();
    apic_send_self_ipi(vector);
    wait_for_taken(taken, before + 2, HELD_WAIT_MS, HELD_WAIT_TRAPS);
    out->taken_before_eoi = *taken - before;
    /* End the first's service: a held second comes in, then ends its own.
     * Where nothing is in service an EOI does nothing. */
    apic_eoi();
    wait_for_taken(taken, before + 2, DELIVERY_WAIT_MS, 0);
    apic_eoi();
    irq_disable();
    out->taken = *taken - before;
}
