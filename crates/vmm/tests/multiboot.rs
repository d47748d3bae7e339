//! Boots a tiny Multiboot kernel, built from bytes in the test, on the
//! minimal PC of `dirq_vmm::multiboot`, through each interrupt path.
//! Needs no toolchain and no kvm-unit-tests.

mod common;

use std::time::Duration;

use common::one_vm_at_a_time;
use dirq_vmm::config::{HaltMode, Irqchip, Pin};
use dirq_vmm::exits::UserspaceExit;
use dirq_vmm::multiboot::{self, KernelConfig, KernelEnd};
use dirq_vmm::testing::{multiboot_elf32, require_kvm};

/// 32-bit code: checks the Multiboot magic in %eax, reads an unowned port
/// (0x1234), reads fw_cfg's CPU count (selector 5) and writes it to the
/// exit port; with a wrong magic it writes 0x7f instead.
const CHECK_ENTRY_AND_EXIT_WITH_CPU_COUNT: &[u8] = &[
    0x3d, 0x02, 0xb0, 0xad, 0x2b, // cmp $0x2badb002, %eax
    0x75, 0x1a, // jne bad
    0x66, 0xba, 0x34, 0x12, // mov $0x1234, %dx
    0xed, // in (%dx), %eax
    0x66, 0xba, 0x10, 0x05, // mov $0x510, %dx
    0x66, 0xb8, 0x05, 0x00, // mov $5, %ax
    0x66, 0xef, // out %ax, (%dx)
    0x42, // inc %edx
    0xec, // in (%dx), %al
    0x0f, 0xb6, 0xc0, // movzbl %al, %eax
    0x66, 0xba, 0xf4, 0x00, // mov $0xf4, %dx
    0xef, // out %eax, (%dx)
    0xf4, // hlt
    // bad:
    0xb8, 0x7f, 0x00, 0x00, 0x00, // mov $0x7f, %eax
    0x66, 0xba, 0xf4, 0x00, // mov $0xf4, %dx
    0xef, // out %eax, (%dx)
    0xf4, // hlt
];

fn config(irqchip: Irqchip, vcpus: u32, code: &[u8]) -> KernelConfig {
    KernelConfig {
        kernel: multiboot_elf32(code),
        cmdline: String::new(),
        module: None,
        irqchip,
        halt: HaltMode::Exit,
        vcpus,
        ram_mib: multiboot::MIN_RAM_MIB,
        timeout: Duration::from_secs(30),
        pin: Pin::Spread,
    }
}

/// Boots `code` on `vcpus` vCPUs through every irqchip and checks that it
/// exits with `status`, that nothing reached the open bus (when
/// `bus_untouched`), and, through the userspace irqchip, that it took
/// `userspace_mmio_exits` MMIO exits when that is given.
fn exits_with_on_every_irqchip(
    code: &[u8],
    vcpus: u32,
    status: u32,
    bus_untouched: bool,
    userspace_mmio_exits: Option<u64>,
) {
    for irqchip in [Irqchip::Userspace, Irqchip::Split, Irqchip::Kernel] {
        let _serial = one_vm_at_a_time();
        let outcome = multiboot::run(&config(irqchip, vcpus, code), false).expect("boots");
        assert_eq!(
            outcome.end,
            KernelEnd::Exited((status << 1) | 1),
            "{irqchip}: {outcome:?}"
        );
        if bus_untouched {
            assert!(
                outcome.unclaimed.is_empty(),
                "{irqchip}: {:?}",
                outcome.unclaimed
            );
        }
        if let (Irqchip::Userspace, Some(expected)) = (irqchip, userspace_mmio_exits) {
            let mmio = outcome.exits.userspace_by_reason.get(&UserspaceExit::Mmio);
            assert_eq!(mmio.copied(), Some(expected), "{:?}", outcome.exits);
        }
    }
}

#[test]
fn a_multiboot_kernel_enters_with_the_magic_and_exits_with_its_status_on_every_path() {
    if !require_kvm("a_multiboot_kernel_enters_with_the_magic_and_exits_with_its_status") {
        return;
    }
    for irqchip in [Irqchip::Kernel, Irqchip::Split, Irqchip::Userspace] {
        for vcpus in [1, 2] {
            let _serial = one_vm_at_a_time();
            let outcome = multiboot::run(
                &config(irqchip, vcpus, CHECK_ENTRY_AND_EXIT_WITH_CPU_COUNT),
                false,
            )
            .expect("boots");
            // isa-debug-exit: status = (value << 1) | 1, value = CPU count.
            assert_eq!(
                outcome.end,
                KernelEnd::Exited((vcpus << 1) | 1),
                "{irqchip}, {vcpus} vCPUs: {outcome:?}"
            );
            assert_eq!(
                outcome.unclaimed,
                [("port 0x1234 read".to_string(), 1)],
                "{irqchip}"
            );
            // The unowned port, fw_cfg's selector and byte, the exit port.
            let io = outcome.exits.userspace_by_reason.get(&UserspaceExit::Io);
            assert_eq!(io.copied(), Some(4), "{irqchip}: {:?}", outcome.exits);
        }
    }
}

#[test]
fn a_kernel_that_never_exits_is_stopped_by_the_watchdog() {
    if !require_kvm("a_kernel_that_never_exits_is_stopped_by_the_watchdog") {
        return;
    }
    let _serial = one_vm_at_a_time();
    let mut spin = config(Irqchip::Userspace, 1, &[0xeb, 0xfe]); // jmp .
    spin.timeout = Duration::from_millis(300);
    let outcome = multiboot::run(&spin, false).expect("boots");
    assert_eq!(outcome.end, KernelEnd::TimedOut);
}

/// 32-bit code: moves the BSP's APIC page to 0xfed40000 (IA32_APIC_BASE,
/// SDM 10.4.5), puts real-mode code at 0x8000 that writes 5 to the exit
/// port, software-enables the APIC (KVM's sends nothing before) and
/// starts vCPU 1 there with INIT and a Start-Up IPI (vector 8) written to
/// the ICR at the new base (SDM 8.4.4.1); then halts.
const RELOCATE_APIC_AND_START_AP: &[u8] = &[
    0xb9, 0x1b, 0x00, 0x00, 0x00, // mov $0x1b, %ecx (IA32_APIC_BASE)
    0xb8, 0x00, 0x09, 0xd4, 0xfe, // mov $0xfed40900, %eax (base, EN, BSP)
    0x31, 0xd2, // xor %edx, %edx
    0x0f, 0x30, // wrmsr
    // movl $0xf4e605b0, 0x8000: mov $5, %al; out %al, $0xf4
    0xc7, 0x05, 0x00, 0x80, 0x00, 0x00, 0xb0, 0x05, 0xe6, 0xf4,
    // movl $0x90fdebf4, 0x8004: hlt; jmp .-1
    0xc7, 0x05, 0x04, 0x80, 0x00, 0x00, 0xf4, 0xeb, 0xfd, 0x90,
    // movl $0x1ff, 0xfed400f0: SVR, APIC software-enabled
    0xc7, 0x05, 0xf0, 0x00, 0xd4, 0xfe, 0xff, 0x01, 0x00, 0x00,
    // movl $0x01000000, 0xfed40310: ICR high, destination APIC ID 1
    0xc7, 0x05, 0x10, 0x03, 0xd4, 0xfe, 0x00, 0x00, 0x00, 0x01,
    // movl $0x4500, 0xfed40300: INIT, level assert
    0xc7, 0x05, 0x00, 0x03, 0xd4, 0xfe, 0x00, 0x45, 0x00, 0x00,
    // movl $0x4608, 0xfed40300: Start-Up, vector 8 (0x8000)
    0xc7, 0x05, 0x00, 0x03, 0xd4, 0xfe, 0x08, 0x46, 0x00, 0x00, 0xf4, 0xeb,
    0xfd, // hlt; jmp .-1
];

#[test]
fn an_ap_starts_by_init_and_sipi_sent_through_a_relocated_apic_page() {
    if !require_kvm("an_ap_starts_by_init_and_sipi_sent_through_a_relocated_apic_page") {
        return;
    }
    // Only the AP, started in real mode at 0x8000, writes 5; nothing
    // reaches the open bus (the writes find the moved page); through the
    // userspace irqchip SVR, ICR high, INIT and Start-Up are an MMIO exit each.
    exits_with_on_every_irqchip(RELOCATE_APIC_AND_START_AP, 2, 5, true, Some(4));
}

/// 32-bit code, interrupts disabled throughout: a GDT (flat code at 0x08)
/// and an IDT whose NMI gate (vector 2) points at a handler that writes 7
/// to the exit port, the APIC software-enabled (KVM's sends nothing
/// before), then an NMI to itself through the xAPIC ICR (physical
/// destination 0), then a spin. An NMI ignores RFLAGS.IF and the
/// IRR (SDM 6.7.1, 10.6.1).
const SELF_NMI_REACHES_ITS_HANDLER: &[u8] = &[
    0xbc, 0x00, 0x60, 0x00, 0x00, // mov $0x6000, %esp
    0xc7, 0x05, 0x08, 0x6f, 0x00, 0x00, 0xff, 0xff, 0x00, 0x00, // GDT[1] low
    0xc7, 0x05, 0x0c, 0x6f, 0x00, 0x00, 0x00, 0x9a, 0xcf, 0x00, // GDT[1] high: flat code
    0x66, 0xc7, 0x05, 0xe0, 0x6f, 0x00, 0x00, 0x17, 0x00, // movw $0x17, 0x6fe0
    0xc7, 0x05, 0xe2, 0x6f, 0x00, 0x00, 0x00, 0x6f, 0x00, 0x00, // movl $0x6f00, 0x6fe2
    0x0f, 0x01, 0x15, 0xe0, 0x6f, 0x00, 0x00, // lgdt 0x6fe0
    // movl $0x1ff, 0xfee000f0: SVR, APIC software-enabled
    0xc7, 0x05, 0xf0, 0x00, 0xe0, 0xfe, 0xff, 0x01, 0x00, 0x00, 0xe8, 0x00, 0x00, 0x00,
    0x00, // call 1f
    0x5b, // 1: pop %ebx
    0x8d, 0x93, 0x4c, 0x00, 0x00, 0x00, // lea handler-1b(%ebx), %edx
    0xb8, 0x00, 0x00, 0x08, 0x00, // mov $0x80000, %eax (selector 0x08)
    0x66, 0x89, 0xd0, // mov %dx, %ax
    0xa3, 0x10, 0x70, 0x00, 0x00, // mov %eax, 0x7010 (gate 2, low)
    0x81, 0xe2, 0x00, 0x00, 0xff, 0xff, // and $0xffff0000, %edx
    0x81, 0xca, 0x00, 0x8e, 0x00, 0x00, // or $0x8e00, %edx (32-bit interrupt gate)
    0x89, 0x15, 0x14, 0x70, 0x00, 0x00, // mov %edx, 0x7014 (gate 2, high)
    0x66, 0xc7, 0x05, 0xf0, 0x6f, 0x00, 0x00, 0xff, 0x07, // movw $0x7ff, 0x6ff0
    0xc7, 0x05, 0xf2, 0x6f, 0x00, 0x00, 0x00, 0x70, 0x00, 0x00, // movl $0x7000, 0x6ff2
    0x0f, 0x01, 0x1d, 0xf0, 0x6f, 0x00, 0x00, // lidt 0x6ff0
    // movl $0x4400, 0xfee00300: ICR low, NMI, assert, to APIC ID 0
    0xc7, 0x05, 0x00, 0x03, 0xe0, 0xfe, 0x00, 0x44, 0x00, 0x00, 0xeb, 0xfe, // jmp .
    // handler:
    0xb0, 0x07, // mov $7, %al
    0xe6, 0xf4, // out %al, $0xf4
    0xeb, 0xfe, // jmp .
];

#[test]
fn a_self_nmi_is_taken_with_interrupts_disabled_on_every_path() {
    if !require_kvm("a_self_nmi_is_taken_with_interrupts_disabled_on_every_path") {
        return;
    }
    // The SVR and ICR writes are MMIO exits; the NMI itself costs none.
    exits_with_on_every_irqchip(SELF_NMI_REACHES_ITS_HANDLER, 1, 7, true, Some(2));
}

/// 32-bit code that enters long mode (2 MiB identity map, a 64-bit code
/// segment) with the APIC in x2APIC mode, then: MOV 5 to CR8 and read the
/// TPR MSR (0x808); write 0x30 to the TPR MSR and read CR8; exit with
/// the TPR read back or'ed with CR8: 0x53 if CR8 and the TPR are one
/// register (SDM 10.8.6.1: CR8[3:0] = TPR[7:4]).
const CR8_AND_TPR_ARE_ONE_REGISTER: &[u8] = &[
    0xbc, 0x00, 0x60, 0x00, 0x00, // mov $0x6000, %esp
    0xc7, 0x05, 0x00, 0x00, 0x01, 0x00, 0x03, 0x10, 0x01, 0x00, // PML4[0] = 0x11000 | P | W
    0xc7, 0x05, 0x00, 0x10, 0x01, 0x00, 0x03, 0x20, 0x01, 0x00, // PDPT[0] = 0x12000 | P | W
    0xc7, 0x05, 0x00, 0x20, 0x01, 0x00, 0x83, 0x00, 0x00, 0x00, // PD[0] = 0 | PS | P | W
    0xc7, 0x05, 0x0c, 0x6f, 0x00, 0x00, 0x00, 0x9a, 0x20, 0x00, // GDT[1]: 64-bit code
    0x66, 0xc7, 0x05, 0xe0, 0x6f, 0x00, 0x00, 0x17, 0x00, // movw $0x17, 0x6fe0
    0xc7, 0x05, 0xe2, 0x6f, 0x00, 0x00, 0x00, 0x6f, 0x00, 0x00, // movl $0x6f00, 0x6fe2
    0x0f, 0x01, 0x15, 0xe0, 0x6f, 0x00, 0x00, // lgdt 0x6fe0
    0x0f, 0x20, 0xe0, // mov %cr4, %eax
    0x83, 0xc8, 0x20, // or $0x20, %eax (PAE)
    0x0f, 0x22, 0xe0, // mov %eax, %cr4
    0xb8, 0x00, 0x00, 0x01, 0x00, // mov $0x10000, %eax
    0x0f, 0x22, 0xd8, // mov %eax, %cr3
    0xb9, 0x80, 0x00, 0x00, 0xc0, // mov $0xc0000080, %ecx (EFER)
    0x0f, 0x32, // rdmsr
    0x0d, 0x00, 0x01, 0x00, 0x00, // or $0x100, %eax (LME)
    0x0f, 0x30, // wrmsr
    0xb9, 0x1b, 0x00, 0x00, 0x00, // mov $0x1b, %ecx (IA32_APIC_BASE)
    0x0f, 0x32, // rdmsr
    0x0d, 0x00, 0x0c, 0x00, 0x00, // or $0xc00, %eax (EN, EXTD: x2APIC)
    0x0f, 0x30, // wrmsr
    0x0f, 0x20, 0xc0, // mov %cr0, %eax
    0x0d, 0x00, 0x00, 0x00, 0x80, // or $0x80000000, %eax (PG)
    0x0f, 0x22, 0xc0, // mov %eax, %cr0
    0xe8, 0x00, 0x00, 0x00, 0x00, // call 1f
    0x5b, // 1: pop %ebx
    0x8d, 0x43, 0x08, // lea 2f-1b(%ebx), %eax
    0x6a, 0x08, // push $0x08
    0x50, // push %eax
    0xcb, // lret
    // 2: 64-bit code
    0xb8, 0x05, 0x00, 0x00, 0x00, // mov $5, %eax
    0x44, 0x0f, 0x22, 0xc0, // mov %rax, %cr8
    0xb9, 0x08, 0x08, 0x00, 0x00, // mov $0x808, %ecx (x2APIC TPR)
    0x0f, 0x32, // rdmsr
    0x89, 0xc3, // mov %eax, %ebx
    0xb8, 0x30, 0x00, 0x00, 0x00, // mov $0x30, %eax
    0x31, 0xd2, // xor %edx, %edx
    0x0f, 0x30, // wrmsr
    0x44, 0x0f, 0x20, 0xc0, // mov %cr8, %rax
    0x09, 0xd8, // or %ebx, %eax
    0xe7, 0xf4, // out %eax, $0xf4
    0xf4, // hlt
    0xeb, 0xfd, // jmp .-1
];

#[test]
fn cr8_and_the_tpr_are_one_register_on_every_path() {
    if !require_kvm("cr8_and_the_tpr_are_one_register_on_every_path") {
        return;
    }
    exits_with_on_every_irqchip(CR8_AND_TPR_ARE_ONE_REGISTER, 1, 0x53, false, None);
}
