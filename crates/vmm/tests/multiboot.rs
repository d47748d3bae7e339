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
