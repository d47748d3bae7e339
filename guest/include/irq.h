/*
 * Interrupt masking and halting, the same calls however the guest runs.
 *
 * An ordinary x86 guest (VT-x/SVM, or kvm_pvm's instruction emulator) uses
 * cli/sti/hlt. In kvm_pvm's native mode the guest runs in ring 3: cli and
 * sti trap and change nothing, and the interrupt flag is byte 0 of this
 * CPU's VIF page (docs/native.md). The VMM says which (shared->guest_exec);
 * the guest never probes for kvm_pvm itself.
 */
#ifndef DIRQ_IRQ_H
#define DIRQ_IRQ_H

#include "types.h"

/* Switches this CPU to kvm_pvm's native mode if the VMM asked for it; every
 * CPUID the guest needs must have been read before (native CPUID is not
 * KVM's). Records the outcome in shared->native_cpus. */
void exec_mode_enter(u32 cpu);

/* An exception the mode switch expects (a #GP from a KVM that refuses
 * native mode): advances *rip past it and returns 1. */
int exec_fixup_fault(u64 vector, u64 *rip);

void irq_enable(void);
void irq_disable(void);

/* With interrupts disabled: enables them and halts until an interrupt has
 * been handled, with no window in which a wake-up can be lost (plain x86:
 * sti's interrupt shadow; native: a restartable halt window, see pvm.S).
 * Returns with interrupts enabled. */
void safe_halt(void);

/* As safe_halt, but first sends this CPU a self-IPI on `vector` after
 * interrupts are enabled and before the halt, whose handler counts it in
 * *handled: natively the guest then waits inside the lost-wake-up window
 * until it has been delivered there (the halt-wakeup bench). */
void safe_halt_with_self_ipi(u8 vector, volatile u64 *handled);

#endif
