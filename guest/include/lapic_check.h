/* Whether KVM's LAPIC holds a delivered interrupt in service (SDM 10.8.4). */
#ifndef DIRQ_LAPIC_CHECK_H
#define DIRQ_LAPIC_CHECK_H

#include "types.h"

struct lapic_in_service {
    u64 isr_set;          /* the first IPI's ISR bit, its handler done, no EOI yet */
    u64 ppr;              /* PPR then: its priority class if held */
    u64 taken_before_eoi; /* IPIs taken before the EOI: 1 if held, 2 if not */
    u64 taken;            /* IPIs taken in all: 2 */
};

/* With interrupts disabled and `vector`'s handler counting in *taken without
 * EOI (x2APIC): sends two self-IPIs on `vector`, the second while the first
 * is unacknowledged, and notes what the LAPIC did. Every wait is bounded by
 * TSC time; returns with interrupts disabled and nothing left in service. */
void lapic_check_in_service(u8 vector, volatile u64 *taken, struct lapic_in_service *out);

#endif
