/* Services the guest kernel core offers to the benchmarks. */
#ifndef DIRQ_KERNEL_H
#define DIRQ_KERNEL_H

#include "dirq_abi.h"
#include "types.h"

/* The register frame isr_common builds (entry.S), lowest address first.
 * isr_common serves the vectors no benchmark handles: they are failures. */
struct irq_frame {
    u64 r15, r14, r13, r12, r11, r10, r9, r8, rbp, rdi, rsi, rdx, rcx, rbx, rax;
    u64 vector, error;
    u64 rip, cs, rflags, rsp, ss;
};

extern volatile struct dirq_shared *const shared;

/* Serial console. */
void kputs(const char *s);
void kput_hex(u64 value);
void kput_dec(u64 value);

void control(enum dirq_control command);
__attribute__((noreturn)) void fail(enum dirq_failure failure, u64 d0, u64 d1, u64 d2, u64 d3);

/* Loads an empty IDT and faults: the CPU shuts down (KVM_EXIT_SHUTDOWN). */
void triple_fault(void);

/* Which CPU runs this code, derived from the stack pointer (no exit). */
u32 this_cpu(void);

/* Points `vector`'s gate straight at an assembly entry that ends in iretq. */
void set_irq_entry(u8 vector, void (*entry)(void));

/* Waits, halting or spinning as the VMM asked, until *value >= target. */
void wait_until_at_least(volatile u64 *value, u64 target);

/* Appends one TSC-cycle sample to the VMM-provided sample area. */
void record_sample(u64 cycles);

u64 ns_to_tsc(u64 ns);

#endif
