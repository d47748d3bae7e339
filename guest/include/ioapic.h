/* The IOAPIC at DIRQ_IOAPIC_GPA (82093AA datasheet 3.2). */
#ifndef DIRQ_IOAPIC_H
#define DIRQ_IOAPIC_H

#include "dirq_abi.h"
#include "types.h"
#include "x86.h"

#define IOAPIC_REDTBL(pin) (0x10 + 2 * (pin))
#define IOAPIC_RTE_REMOTE_IRR (1u << 14)
#define IOAPIC_RTE_LEVEL (1u << 15)
#define IOAPIC_RTE_MASKED (1u << 16)

#define IOAPIC_REGSEL 0x00
#define IOAPIC_WINDOW 0x10

/* Indirect register access through IOREGSEL/IOWIN: two MMIO accesses each. */
static inline u32 ioapic_read(u32 reg)
{
    mmio_write32(DIRQ_IOAPIC_GPA + IOAPIC_REGSEL, reg);
    return mmio_read32(DIRQ_IOAPIC_GPA + IOAPIC_WINDOW);
}

static inline void ioapic_write(u32 reg, u32 value)
{
    mmio_write32(DIRQ_IOAPIC_GPA + IOAPIC_REGSEL, reg);
    mmio_write32(DIRQ_IOAPIC_GPA + IOAPIC_WINDOW, value);
}

/* Routes `pin` to `vector` on APIC ID `dest`: fixed, physical, unmasked;
 * `low_flags` adds e.g. IOAPIC_RTE_LEVEL to the low dword. */
void ioapic_route(u32 pin, u8 vector, u8 dest_apic_id, u32 low_flags);

#endif
