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
/// port, and starts vCPU 1 there with INIT and a Start-Up IPI (vector 8)
/// written to the ICR at the new base (SDM 8.4.4.1); then halts.
const RELOCATE_APIC_AND_START_AP: &[u8] = &[
    0xb9, 0x1b, 0x00, 0x00, 0x00, // mov $0x1b, %ecx (IA32_APIC_BASE)
    0xb8, 0x00, 0x09, 0xd4, 0xfe, // mov $0xfed40900, %eax (base, EN, BSP)
    0x31, 0xd2, // xor %edx, %edx
    0x0f, 0x30, // wrmsr
    // movl $0xf4e605b0, 0x8000: mov $5, %al; out %al, $0xf4
    0xc7, 0x05, 0x00, 0x80, 0x00, 0x00, 0xb0, 0x05, 0xe6, 0xf4,
    // movl $0x90fdebf4, 0x8004: hlt; jmp .-1
    0xc7, 0x05, 0x04, 0x80, 0x00, 0x00, 0xf4, 0xeb, 0xfd, 0x90,
    // movl $0x01000000, 0xfed40310: ICR high, destination APIC ID 1
    0xc7, 0x05, 0x10, 0x03, 0xd4, 0xfe, 0x00, 0x00, 0x00, 0x01,
    // movl $0x4500, 0xfed40300: INIT, level assert
    0xc7, 0x05, 0x00, 0x03, 0xd4, 0xfe, 0x00, 0x45, 0x00, 0x00,
    // movl $0x4608, 0xfed40300: Start-Up, vector 8 (0x8000)
    0xc7, 0x05, 0x00, 0x03, 0xd4, 0xfe, 0x08, 0x46, 0x00, 0x00, 0xf4, 0xeb,
    0xfd, // hlt; jmp .-1
];

/// Through dirq's LAPIC (the userspace irqchip). With KVM's LAPIC on a
/// kvm_pvm host the same guest's AP never starts (docs/conformance.md).
#[test]
fn an_ap_starts_by_init_and_sipi_sent_through_a_relocated_apic_page() {
    if !require_kvm("an_ap_starts_by_init_and_sipi_sent_through_a_relocated_apic_page") {
        return;
    }
    let _serial = one_vm_at_a_time();
    let outcome = multiboot::run(
        &config(Irqchip::Userspace, 2, RELOCATE_APIC_AND_START_AP),
        false,
    )
    .expect("boots");
    // Only the AP, started in real mode at 0x8000, writes 5.
    assert_eq!(outcome.end, KernelEnd::Exited((5 << 1) | 1), "{outcome:?}");
    // Nothing reached the open bus: the ICR writes found the moved page,
    // each an MMIO exit (ICR high, INIT, Start-Up).
    assert!(outcome.unclaimed.is_empty(), "{:?}", outcome.unclaimed);
    let mmio = outcome.exits.userspace_by_reason.get(&UserspaceExit::Mmio);
    assert_eq!(mmio.copied(), Some(3), "{:?}", outcome.exits);
}
