#include "ioapic.h"
#include "dirq_abi.h"
#include "x86.h"


void ioapic_route(u32 pin, u8 vector, u8 dest_apic_id, u32 low_flags)
{
    /* High half first, so the entry is never live with a stale destination. */
    ioapic_write(IOAPIC_REDTBL(pin) + 1, (u32)dest_apic_id << 24);
    ioapic_write(IOAPIC_REDTBL(pin), vector | low_flags);
}
