/* The local APIC through xAPIC MMIO or x2APIC MSRs, as the VMM asked. */
#ifndef DIRQ_APIC_H
#define DIRQ_APIC_H

#include "types.h"

/* xAPIC register offsets (SDM Vol. 3 Table 11-1). */
#define APIC_REG_TPR 0x080
#define APIC_REG_SVR 0x0f0
#define APIC_REG_ICR_LOW 0x300
#define APIC_REG_ICR_HIGH 0x310
#define APIC_REG_LVT_TIMER 0x320
#define APIC_REG_LVT_LINT0 0x350
#define APIC_REG_TIMER_INITIAL 0x380
#define APIC_REG_TIMER_DIVIDE 0x3e0

/* Per-CPU PV EOI flags, registered with KVM when the VMM enables PV EOI. */
extern volatile u32 pv_eoi_word[];

void apic_init_cpu(u32 cpu);
/* Writes an xAPIC register (by its MMIO offset) through the mode in use. */
void apic_write(u32 reg, u32 value);
void apic_send_ipi(u32 dest_apic_id, u8 vector);
/* Fixed IPI to this CPU (x2APIC SELF IPI register, or the ICR's self shorthand). */
void apic_send_self_ipi(u8 vector);
/* Fixed IPI to every CPU but this one (ICR shorthand, SDM 10.6.1). */
void apic_send_ipi_all_but_self(u8 vector);
/* End of interrupt: clears the highest in-service vector (SDM 10.8.5). */
void apic_eoi(void);
/* Whether `vector` waits in this LAPIC's IRR (x2APIC only). */
int apic_irr_pending(u8 vector);
/* Programs the LVT timer: one-shot or TSC-deadline mode (SDM 10.5.4). */
void apic_timer_setup(u8 vector, int tsc_deadline);
/* Arms a one-shot timer of `ticks` APIC timer ticks (divide-by-1). */
void apic_timer_arm_oneshot(u32 ticks);
/* Arms the TSC-deadline timer for absolute TSC value `deadline`. */
void apic_timer_arm_deadline(u64 deadline);

#endif
