#include "ioapic.h"
#include "dirq_abi.h"
#include "x86.h"

#define IOAPIC_REGSEL 0x00
#define IOAPIC_WINDOW 0x10
#define IOAPIC_REDTBL(pin) (0x10 + 2 * (pin))

static void ioapic_write(u32 reg, u32 value)
{
    mmio_write32(DIRQ_IOAPIC_GPA + IOAPIC_REGSEL, reg);
    mmio_write32(DIRQ_IOAPIC_GPA + IOAPIC_WINDOW, value);
}

void ioapic_route(u32 pin, u8 vector, u8 dest_apic_id)
{
    /* High half first, so the entry is never live with a stale destination. */
    ioapic_write(IOAPIC_REDTBL(pin) + 1, (u32)dest_apic_id << 24);
    ioapic_write(IOAPIC_REDTBL(pin), vector);
}
