/*
 * fault: misbehave on purpose, so the VMM's fault handling can be tested.
 */
#include "bench.h"
#include "irq.h"
#include "kernel.h"
#include "x86.h"

/* Nothing is mapped here: no RAM, no device. */
#define UNOWNED_MMIO_GPA 0xd0000000ul
#define UNOWNED_PORT 0x1234

static void run(void)
{
    switch (shared->fault) {
    case DIRQ_FAULT_TRIPLE:
        triple_fault();
        break;
    case DIRQ_FAULT_HANG:
        irq_disable();
        for (;;)
            cpu_relax();
    case DIRQ_FAULT_UNOWNED_PORT:
        outb(UNOWNED_PORT, 1);
        break;
    case DIRQ_FAULT_UNOWNED_MMIO:
        (void)mmio_read32(UNOWNED_MMIO_GPA);
        break;
    case DIRQ_FAULT_EXCEPTION:
        __asm__ volatile("ud2");
        break;
    }
}

const struct bench bench_fault = {DIRQ_BENCH_FAULT, "fault", run, 0};
