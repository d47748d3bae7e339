/*
 * A Multiboot v1 kernel for any VMM (QEMU's -kernel, dirq run --kernel)
 * whose exits and interrupts `dirq observe` must see from outside, each
 * loop a known number of times:
 *   1. INL_COUNT  `inl` from port 0xe0 (no device: every one exits to the VMM)
 *   2. OUTB_COUNT `outb` to port 0xe1
 *   3. IPI_COUNT  self-IPIs, vector 0x41, through the xAPIC ICR, each followed
 *      by a write of the EOI register
 * then it writes 0 to the isa-debug-exit port 0xf4 (QEMU ends with status 1).
 * 32-bit protected mode as Multiboot leaves it: flat segments, no paging,
 * interrupts off.
 */
#define MULTIBOOT_MAGIC 0x1BADB002
#define INL_COUNT 1000
#define OUTB_COUNT 500
#define IPI_COUNT 1000
#define VECTOR 0x41
#define APIC 0xfee00000
#define APIC_EOI 0xb0
#define APIC_SVR 0xf0
#define APIC_ICR_LOW 0x300
#define ICR_SELF (1 << 18)

	/* The header must lie in the file's first 8 KiB: first in .text. */
	.text
	.align 4
	.long MULTIBOOT_MAGIC
	.long 0
	.long -MULTIBOOT_MAGIC

	.code32
	.globl _start
_start:
	/* Multiboot leaves GDTR undefined: load flat segments of our own. */
	lgdt gdt_pointer
	ljmp $0x08, $flat
flat:
	mov $0x10, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %ss
	mov $stack_top, %esp

	mov $INL_COUNT, %ecx
inl_loop:
	inl $0xe0, %eax
	loop inl_loop

	mov $OUTB_COUNT, %ecx
outb_loop:
	outb %al, $0xe1
	loop outb_loop

	/* Software-enable the LAPIC, spurious vector 0xff. */
	movl $0x1ff, APIC + APIC_SVR

	/*
	 * Interrupts stay off: each self-IPI is accepted into the IRR (KVM
	 * traces every acceptance) and never taken, so no IRET runs (KVM's
	 * instruction emulator cannot run a protected-mode IRET, which is how
	 * a VMM that is not PVM-aware runs this guest on kvm_pvm). Each EOI
	 * write then finds nothing in service.
	 */
	mov $IPI_COUNT, %ecx
ipi_loop:
	movl $(ICR_SELF | VECTOR), APIC + APIC_ICR_LOW
	movl $0, APIC + APIC_EOI
	loop ipi_loop

	cli
	movb $0, %al
	outb %al, $0xf4
halt:
	hlt
	jmp halt


	.data
	.align 8
gdt:
	.quad 0
	.quad 0x00cf9a000000ffff	/* 0x08: code, flat 4 GiB, 32-bit */
	.quad 0x00cf92000000ffff	/* 0x10: data, flat 4 GiB */
gdt_pointer:
	.word 3 * 8 - 1
	.long gdt

	.bss
	.align 8
	.align 16
	.skip 4096
stack_top:
