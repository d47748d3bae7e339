#include "halt_window.h"

    .section .note.GNU-stack, "", @progbits

/*
 * Entry point and interrupt stubs.
 *
 * The VMM starts every vCPU here already in 64-bit long mode, with paging
 * on, %rdi = CPU index and %rsp = the top of that CPU's stack.
 */
    .section .text.entry, "ax"
    .global _start
_start:
    xor %ebp, %ebp
    call kmain
1:  cli
    hlt
    jmp 1b

    .text
/* void gdt_load(const struct descriptor_pointer *gdtr): also reloads segments. */
    .global gdt_load
gdt_load:
    lgdt (%rdi)
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    pushq $0x08
    lea 1f(%rip), %rax
    pushq %rax
    lretq
1:  ret

/*
 * 256 stubs of 16 bytes each, so C computes stub n's address as
 * isr_stubs + 16 * n. Vectors where the CPU pushes an error code (SDM
 * Vol. 3 Table 6-1) skip the dummy push, so every frame has one.
 */
    .balign 16
    .global isr_stubs
isr_stubs:
    .set vector, 0
    .rept 256
    .balign 16
    .if (vector == 8) || ((vector >= 10) && (vector <= 14)) || (vector == 17) || (vector == 21) || (vector == 29) || (vector == 30)
    .else
    pushq $0
    .endif
    pushq $vector
    jmp isr_common
    .set vector, vector + 1
    .endr

/* The stub pushed the vector and an error code above the CPU's frame. */
isr_common:
    HALT_WINDOW_FIXUP 16
    push %rax
    push %rbx
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %rbp
    push %r8
    push %r9
    push %r10
    push %r11
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, %rdi
    cld
    call isr_dispatch
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rbp
    pop %rdi
    pop %rsi
    pop %rdx
    pop %rcx
    pop %rbx
    pop %rax
    add $16, %rsp
    iretq
