/* The IOAPIC at DIRQ_IOAPIC_GPA (82093AA datasheet 3.2). */
#ifndef DIRQ_IOAPIC_H
#define DIRQ_IOAPIC_H

#include "types.h"

/* Routes `pin` to `vector` on APIC ID `dest`: fixed, physical, edge, unmasked. */
void ioapic_route(u32 pin, u8 vector, u8 dest_apic_id);

#endif
