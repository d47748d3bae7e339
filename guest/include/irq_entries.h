/* The assembly interrupt handlers of irq_entries.S. */
#ifndef DIRQ_IRQ_ENTRIES_H
#define DIRQ_IRQ_ENTRIES_H

#include "dirq_abi.h"
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
/* A pinged CPU: stores the TSC at entry in ipi_ping_tsc[its index], counts
 * handled[its index], sends CPU 0 the pong vector
 * DIRQ_VECTOR_IPI_PONG_BASE + its index. */
extern const struct irq_entries ipi_ping_irq;
/* CPU 0, CPU n's pong: stores the TSC at entry in pong_tsc, counts
 * ipi_pongs[n] and handled[0]. Entry 0 is unused. */
extern const struct irq_entries *const ipi_pong_irq[DIRQ_MAX_CPUS];
extern volatile u64 ipi_pongs[DIRQ_MAX_CPUS];
extern volatile u64 ipi_ping_tsc[DIRQ_MAX_CPUS];

/* CPU 0: counts level_irq_count and returns without EOI (bench_vioapic.c),
 * or, with level_irq_eoi_at_entry set, EOIs at entry (x2APIC). */
void level_irq(void);
extern volatile u64 level_irq_count;
extern volatile u8 level_irq_eoi_at_entry;

/* Written by timer_irq and ipi_pong_irq. */
extern volatile u64 timer_fired_tsc;
extern volatile u64 pong_tsc;

/* Points `vector`'s gate at the flavour of `entries` the VMM's mode needs. */
void set_irq_entries(u8 vector, const struct irq_entries *entries);

#endif
