/*
 * The benchmarks' interrupt handlers, in assembly and as short as they can
 * be. On kvm_pvm every instruction from interrupt delivery to iretq is
 * emulated by KVM (insn_emulation grows by the handler's length, at about
 * a microsecond each), so a C handler behind the generic register-saving
 * stub (~80 emulated instructions) would dominate what the benchmarks
 * measure; these cost 12-16. Each handler exists once per EOI flavour
 * (x2APIC, xAPIC, each with or without PV EOI), chosen at setup by
 * set_irq_entries(), so none branches on the mode. No `lock` prefixes:
 * every counter here has one writer, the CPU that takes the vector.
 */
#include "dirq_abi.h"
#include "halt_window.h"

#define SHARED(offset) (DIRQ_SHARED_GPA + (offset))
#define HANDLED(cpu) SHARED(DIRQ_SHARED_OFFSET_HANDLED + 8 * (cpu))
#define MSR_X2APIC_EOI 0x80b
#define MSR_X2APIC_ICR 0x830
#define APIC_REG_EOI 0xb0
#define APIC_REG_ICR_LOW 0x300
#define APIC_REG_ICR_HIGH 0x310

/* Every handler starts here: the interrupted RIP is at 0(%rsp). */
.macro SAVE
    HALT_WINDOW_FIXUP 0
    push %rax
    push %rcx
    push %rdx
.endm

.macro RESTORE_IRET
    pop %rdx
    pop %rcx
    pop %rax
    iretq
.endm

/* rdx:rax = TSC, folded into %rax. */
.macro RDTSC_RAX
    rdtsc
    shl $32, %rdx
    or %rdx, %rax
.endm

/* Each EOI flavour takes the address of this CPU's PV EOI flag (pv_eoi_word
 * entry); only the PV flavours use it. */
.macro EOI_x2apic flag
    mov $MSR_X2APIC_EOI, %ecx
    xor %eax, %eax
    xor %edx, %edx
    wrmsr
.endm

.macro EOI_xapic flag
    mov $(DIRQ_LAPIC_GPA + APIC_REG_EOI), %rcx
    movl $0, (%rcx)
.endm

/* KVM's PV EOI: if KVM set this CPU's flag, clearing it is the whole EOI. */
.macro EOI_pv_x2apic flag
    btrl $0, \flag
    jnc 1f
    incq SHARED(DIRQ_SHARED_OFFSET_PV_EOI_SKIPS)
    jmp 2f
1:  EOI_x2apic
2:
.endm

.macro EOI_pv_xapic flag
    btrl $0, \flag
    jnc 1f
    incq SHARED(DIRQ_SHARED_OFFSET_PV_EOI_SKIPS)
    jmp 2f
1:  EOI_xapic
2:
.endm

#define CPU0_PV_EOI_FLAG pv_eoi_word(%rip)

/* Fixed IPI to APIC ID 0 (SDM 10.6.1), vector DIRQ_VECTOR_IPI_PONG_BASE + %rsi. */
.macro SEND_PONG_x2apic
    mov $MSR_X2APIC_ICR, %ecx
    lea DIRQ_VECTOR_IPI_PONG_BASE(%rsi), %eax
    xor %edx, %edx
    wrmsr
.endm

.macro SEND_PONG_xapic
    mov $(DIRQ_LAPIC_GPA + APIC_REG_ICR_HIGH), %rcx
    movl $0, (%rcx)
    mov $(DIRQ_LAPIC_GPA + APIC_REG_ICR_LOW), %rcx
    lea DIRQ_VECTOR_IPI_PONG_BASE(%rsi), %eax
    movl %eax, (%rcx)
.endm

/* Expands \body once per EOI flavour, with (\name, apic, eoi). */
.macro FOR_EACH_FLAVOUR name, body
    \body \name, x2apic, x2apic
    \body \name, xapic, xapic
    \body \name, x2apic, pv_x2apic
    \body \name, xapic, pv_xapic
.endm

/* irq-latency and whileloop, on CPU 0: ack the device's sequence number. */
.macro DEVICE name, apic, eoi
    .global \name\()_\eoi
\name\()_\eoi:
    SAVE
    mov SHARED(DIRQ_SHARED_OFFSET_RAISE_SEQ), %rax
    mov %rax, SHARED(DIRQ_SHARED_OFFSET_ACK_SEQ)
    incq HANDLED(0)
    EOI_\eoi CPU0_PV_EOI_FLAG
    RESTORE_IRET
.endm

/* tick, on CPU 0: count. */
.macro COUNT name, apic, eoi
    .global \name\()_\eoi
\name\()_\eoi:
    SAVE
    incq HANDLED(0)
    EOI_\eoi CPU0_PV_EOI_FLAG
    RESTORE_IRET
.endm

/* timer-latency, on CPU 0: when did the handler start. */
.macro TIMER name, apic, eoi
    .global \name\()_\eoi
\name\()_\eoi:
    SAVE
    RDTSC_RAX
    mov %rax, timer_fired_tsc(%rip)
    incq HANDLED(0)
    EOI_\eoi CPU0_PV_EOI_FLAG
    RESTORE_IRET
.endm

/* ipi, on a pinged CPU: note the TSC at entry in ipi_ping_tsc[this CPU],
 * count in handled[this CPU], then answer with this
 * CPU's own pong vector, so that pongs from several CPUs never coalesce
 * in CPU 0's IRR. The CPU index is the stack's, as in kernel.c's this_cpu(). */
.macro IPI_PING name, apic, eoi
    .global \name\()_\eoi
\name\()_\eoi:
    SAVE
    push %rsi
    RDTSC_RAX
    mov %rsp, %rsi
    sub $DIRQ_STACKS_GPA, %rsi
    shr $DIRQ_STACK_SHIFT, %rsi
    mov %rax, ipi_ping_tsc(,%rsi,8)
    incq HANDLED(0)(,%rsi,8)
    SEND_PONG_\apic
    EOI_\eoi "pv_eoi_word(,%rsi,4)"
    pop %rsi
    RESTORE_IRET
.endm

/* ipi, on CPU 0: when did CPU \target's pong arrive (the last pong of a
 * round is its end), counted per CPU in ipi_pongs[]. Defines
 * ipi_pong<target>_irq_<flavour>. */
.macro IPI_PONG target, apic, eoi
    .global ipi_pong\target\()_irq_\eoi
ipi_pong\target\()_irq_\eoi:
    SAVE
    RDTSC_RAX
    mov %rax, pong_tsc(%rip)
    incq ipi_pongs + 8 * \target(%rip)
    incq HANDLED(0)
    EOI_\eoi CPU0_PV_EOI_FLAG
    RESTORE_IRET
.endm

    .section .note.GNU-stack, "", @progbits
    .text
/*
 * vioapic, on CPU 0: only note the interrupt. The main loop services it
 * (controller registers, device, EOI), like a threaded handler whose line
 * stays in service until then; so no EOI here and one flavour for all.
 * With level_irq_eoi_at_entry set (a test's knob, DIRQ_VIOAPIC_FLAG_EOI_AT_ENTRY)
 * it ends the service at entry instead, as a LAPIC that holds nothing in
 * service does on its own (docs/native.md).
 */
    .global level_irq
level_irq:
    HALT_WINDOW_FIXUP 0
    incq level_irq_count(%rip)
    cmpb $0, level_irq_eoi_at_entry(%rip)
    jne 1f
    iretq
1:  push %rax
    push %rcx
    push %rdx
    EOI_x2apic
    RESTORE_IRET

FOR_EACH_FLAVOUR device_irq, DEVICE
FOR_EACH_FLAVOUR timer_irq, TIMER
FOR_EACH_FLAVOUR tick_irq, COUNT
FOR_EACH_FLAVOUR ipi_ping_irq, IPI_PING
    .irp target, 1, 2, 3, 4, 5, 6, 7
    FOR_EACH_FLAVOUR \target, IPI_PONG
    .endr
