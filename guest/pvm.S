/*
 * kvm_pvm native mode: the two pieces that must be assembly.
 *
 * The halt window. Native HLT wakes on an interrupt only if VIF byte 0 is
 * set, so the guest sets it and then halts; an interrupt delivered between
 * the two would be handled and the halt would then sleep through the
 * wake-up it was waiting for. Every interrupt entry therefore runs
 * HALT_WINDOW_FIXUP (halt_window.h): an interrupt whose return address is
 * inside [pvm_halt_window_start, pvm_halt_window_end) returns to the end
 * instead, skipping the hlt, as if the halt had been woken.
 */
#include "dirq_abi.h"

#define MSR_PVM_VIF_PAGE 0x4b564d10
#define MSR_PVM_SIGNATURE 0x4b564d11
#define MSR_X2APIC_SELF_IPI 0x83f
/* A self-IPI reaches a running native guest in about 5 us; this bounds
 * the test hook's wait to milliseconds if it never does. */
#define HOOK_SPIN_LIMIT 1000000

    .section .note.GNU-stack, "", @progbits
    .text

/* void pvm_safe_halt(volatile u8 *vif, u32 self_ipi_vector, volatile u64 *handled) */
    .global pvm_safe_halt
    .global pvm_halt_window_start
    .global pvm_halt_window_end
pvm_safe_halt:
pvm_halt_window_start:
    movb $1, (%rdi)
    test %esi, %esi
    jz 1f
    /* Test hook (the halt-wakeup bench): send a self-IPI and spin until
     * its handler has counted it in *handled, so that it is delivered
     * inside the window; a halt that then slept would never wake. */
    mov (%rdx), %r8
    mov %rdx, %r9
    mov $MSR_X2APIC_SELF_IPI, %ecx
    mov %esi, %eax
    xor %edx, %edx
    wrmsr
    mov $HOOK_SPIN_LIMIT, %r10
3:  pause
    cmp (%r9), %r8
    jne 1f
    dec %r10
    jnz 3b
1:  cmpb $0, 1(%rdi)
    jne 2f
    hlt
pvm_halt_window_end:
    ret
    /* An interrupt arrived while byte 0 was clear and is held (byte 1):
     * one trapping instruction lets KVM deliver it instead of halting. */
2:  mov $MSR_PVM_SIGNATURE, %ecx
    rdmsr
    ret

/* void pvm_enter_native(u64 vif_gpa): execution continues natively after
 * the wrmsr, or (on a #GP, see exec_fixup_fault) emulated. */
    .global pvm_enter_native
    .global pvm_enter_wrmsr
pvm_enter_native:
    mov $MSR_PVM_VIF_PAGE, %ecx
    mov %edi, %eax
    mov %rdi, %rdx
    shr $32, %rdx
pvm_enter_wrmsr:
    wrmsr
    ret
