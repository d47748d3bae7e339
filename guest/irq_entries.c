#include "irq_entries.h"
#include "kernel.h"

#define IRQ_ENTRIES(name)                                                                          \
    void name##_x2apic(void);                                                                      \
    void name##_xapic(void);                                                                       \
    void name##_pv_x2apic(void);                                                                   \
    void name##_pv_xapic(void);                                                                    \
    const struct irq_entries name = {name##_x2apic, name##_xapic, name##_pv_x2apic, name##_pv_xapic}

IRQ_ENTRIES(device_irq);
IRQ_ENTRIES(timer_irq);
IRQ_ENTRIES(tick_irq);
IRQ_ENTRIES(ipi_ping_irq);
IRQ_ENTRIES(ipi_pong1_irq);
IRQ_ENTRIES(ipi_pong2_irq);
IRQ_ENTRIES(ipi_pong3_irq);
IRQ_ENTRIES(ipi_pong4_irq);
IRQ_ENTRIES(ipi_pong5_irq);
IRQ_ENTRIES(ipi_pong6_irq);
IRQ_ENTRIES(ipi_pong7_irq);

const struct irq_entries *const ipi_pong_irq[DIRQ_MAX_CPUS] = {
    0, &ipi_pong1_irq, &ipi_pong2_irq, &ipi_pong3_irq, &ipi_pong4_irq, &ipi_pong5_irq, &ipi_pong6_irq, &ipi_pong7_irq,
};
volatile u64 ipi_pongs[DIRQ_MAX_CPUS];
volatile u64 ipi_ping_tsc[DIRQ_MAX_CPUS];

volatile u64 level_irq_count;
volatile u8 level_irq_eoi_at_entry;
volatile u64 timer_fired_tsc;
volatile u64 pong_tsc;

void set_irq_entries(u8 vector, const struct irq_entries *entries)
{
    void (*entry)(void);
    if (shared->pv_eoi)
        entry = shared->x2apic ? entries->pv_x2apic : entries->pv_xapic;
    else
        entry = shared->x2apic ? entries->x2apic : entries->xapic;
    set_irq_entry(vector, entry);
}
