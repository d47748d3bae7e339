/* The assembly interrupt handlers of irq_entries.S. */
#ifndef DIRQ_IRQ_ENTRIES_H
#define DIRQ_IRQ_ENTRIES_H

#include "types.h"

/* One handler, assembled once per EOI flavour. */
struct irq_entries {
    void (*x2apic)(void);
    void (*xapic)(void);
    void (*pv_x2apic)(void);
    void (*pv_xapic)(void);
};

/* CPU 0: acknowledges raise_seq through ack_seq, counts handled[0]. */
extern const struct irq_entries device_irq;
/* CPU 0: stores the TSC at entry in timer_fired_tsc, counts handled[0]. */
extern const struct irq_entries timer_irq;
/* CPU 0: counts handled[0]. */
extern const struct irq_entries tick_irq;
/* CPU 1: sends DIRQ_VECTOR_IPI_PONG to CPU 0, counts handled[1]. */
extern const struct irq_entries ipi_ping_irq;
/* CPU 0: stores the TSC at entry in pong_tsc, counts handled[0]. */
extern const struct irq_entries ipi_pong_irq;

/* CPU 0: counts level_irq_count and returns without EOI (bench_vioapic.c). */
void level_irq(void);
extern volatile u64 level_irq_count;

/* Written by timer_irq and ipi_pong_irq. */
extern volatile u64 timer_fired_tsc;
extern volatile u64 pong_tsc;

/* Points `vector`'s gate at the flavour of `entries` the VMM's mode needs. */
void set_irq_entries(u8 vector, const struct irq_entries *entries);

#endif
