//! Every guest-facing entry point of the VMM's devices driven with
//! arbitrary access sequences (no KVM needed): port, MMIO and MSR accesses
//! through the bus, I/O batch doorbells over arbitrary guest memory, and
//! the VIOAPIC model under arbitrary PV page contents. Nothing panics,
//! every access returns, and what the guest controls stays bounded.

use std::sync::Arc;

use dirq_arch::vioapic::{Vioapic, LINES, MMIO_SIZE as VIOAPIC_MMIO_SIZE};
use dirq_vmm::abi;
use dirq_vmm::bus::Bus;
use dirq_vmm::bus::MmioDevice;
use dirq_vmm::config::{HaltMode, Irqchip};
use dirq_vmm::devices::event_source::PendingEvents;
use dirq_vmm::devices::io_batch::IoBatchDoorbell;
use dirq_vmm::devices::pit;
use dirq_vmm::devices::serial::{Serial, CONSOLE_LIMIT, SERIAL_PORTS};
use dirq_vmm::devices::task_file::{self, TaskFile};
use dirq_vmm::devices::vioapic::{Registers, VioapicDevice};
use dirq_vmm::interrupt::userspace::{GuestTscClock, LapicMmio, UserspaceIrqchip};
use dirq_vmm::interrupt::{self, IoapicDevice, Kicker, APIC_TIMER_HZ};
use dirq_vmm::memory::{self, GuestMemory};
use dirq_vmm::run_control::RunControl;
use dirq_vmm::testing::require_kvm;
use dirq_vmm::vm::Vm;
use proptest::prelude::*;
use vm_memory::{Bytes, GuestAddress};

/// The PV VIOAPIC on a real VM (its sends go to KVM's LAPIC), with the
/// run already stopped: a lock the fuzzed page leaves taken is given up
/// on at once instead of after a second.
fn pv_vioapic() -> (VioapicDevice, GuestMemory) {
    let kvm = kvm_ioctls::Kvm::new().expect("/dev/kvm");
    let memory = memory::create_guest_memory().expect("guest RAM");
    let vm = Arc::new(Vm::new(&kvm, &memory, HaltMode::Exit).expect("VM"));
    interrupt::prepare_vm(Irqchip::Kernel, &vm).expect("KVM's irqchip");
    let control = Arc::new(RunControl::default());
    control.request_stop();
    let line = Box::new(PendingEvents {
        memory: memory.clone(),
    });
    let device = VioapicDevice::new(Registers::Paravirtual, memory.clone(), line, vm, control)
        .expect("VIOAPIC");
    (device, memory)
}

/// Where the fuzzed batches live in guest RAM.
const BATCH_GPA: u64 = 0x5000;
const VCPUS: usize = 2;

#[derive(Clone, Debug)]
enum Access {
    PioRead(u16, usize),
    PioWrite(u16, Vec<u8>),
    MmioRead(u64, usize),
    MmioWrite(u64, Vec<u8>),
    MsrRead(u32),
    MsrWrite(u32, u64),
    /// The guest rewrites part of its batch, then rings the doorbell.
    Doorbell(Vec<u8>, u64),
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1), Just(2), Just(4), Just(8), 0usize..16]
}

/// Mostly addresses some device owns, sometimes anything.
fn port() -> impl Strategy<Value = u16> {
    prop_oneof![
        abi::PORT_SERIAL..abi::PORT_SERIAL + SERIAL_PORTS,
        abi::PORT_TASK_FILE..abi::PORT_TASK_FILE + task_file::PORTS,
        dirq_arch::pit::PORT_CHANNEL0..dirq_arch::pit::PORT_CHANNEL0 + pit::PORTS,
        Just(abi::PORT_IO_BATCH),
        any::<u16>(),
    ]
}

fn address() -> impl Strategy<Value = u64> {
    prop_oneof![
        abi::LAPIC_GPA..abi::LAPIC_GPA + LapicMmio::SIZE,
        abi::IOAPIC_GPA..abi::IOAPIC_GPA + IoapicDevice::SIZE,
        any::<u64>(),
    ]
}

fn msr() -> impl Strategy<Value = u32> {
    prop_oneof![0x800u32..0x840, Just(0x1b), Just(0x6e0), any::<u32>()]
}

fn access() -> impl Strategy<Value = Access> {
    prop_oneof![
        (port(), size()).prop_map(|(port, len)| Access::PioRead(port, len)),
        (port(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(port, data)| Access::PioWrite(port, data)),
        (address(), size()).prop_map(|(address, len)| Access::MmioRead(address, len)),
        (address(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(address, data)| Access::MmioWrite(address, data)),
        msr().prop_map(Access::MsrRead),
        (msr(), any::<u64>()).prop_map(|(msr, value)| Access::MsrWrite(msr, value)),
        (
            prop::collection::vec(any::<u8>(), 0..300),
            prop_oneof![Just(BATCH_GPA), any::<u32>().prop_map(u64::from)],
        )
            .prop_map(|(bytes, gpa)| Access::Doorbell(bytes, gpa)),
    ]
}

/// The bus a run builds with every device that needs no KVM.
fn machine() -> (Bus, Arc<Serial>, GuestMemory) {
    let memory = memory::create_guest_memory().expect("guest RAM");
    let serial = Arc::new(Serial::new(false));
    let clock = GuestTscClock::new(0, GuestTscClock::host_tsc(), 1_000_000);
    let chip = UserspaceIrqchip::new(VCPUS, APIC_TIMER_HZ, clock, Arc::new(Kicker::default()), 46)
        .expect("LAPICs");
    let disk = Arc::new(TaskFile::default());
    let timer = Arc::new(pit::PitDevice::new(1).expect("PIT"));
    let mut bus = Bus::default();
    // The doorbell replays its batches to every port device here.
    let mut batch_targets = Bus::default();
    for ports in [&mut bus, &mut batch_targets] {
        ports.add_pio(
            abi::PORT_SERIAL..abi::PORT_SERIAL + SERIAL_PORTS,
            serial.clone(),
        );
        ports.add_pio(
            abi::PORT_TASK_FILE..abi::PORT_TASK_FILE + task_file::PORTS,
            disk.clone(),
        );
        ports.add_pio(
            dirq_arch::pit::PORT_CHANNEL0..dirq_arch::pit::PORT_CHANNEL0 + pit::PORTS,
            timer.clone(),
        );
    }
    chip.attach(&mut bus);
    IoBatchDoorbell::new(abi::PORT_IO_BATCH, memory.clone(), batch_targets).attach(&mut bus);
    (bus, serial, memory)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_bus_survives_arbitrary_guest_accesses(
        accesses in prop::collection::vec((0..VCPUS + 1, access()), 1..200),
    ) {
        let (bus, serial, memory) = machine();
        for (cpu, access) in accesses {
            // Errors are the point: each must be returned, not a panic or a hang.
            let _ = match access {
                Access::PioRead(port, len) => bus.pio_read(cpu, port, &mut vec![0; len]),
                Access::PioWrite(port, data) => bus.pio_write(cpu, port, &data),
                Access::MmioRead(address, len) => bus.mmio_read(cpu, address, &mut vec![0; len]),
                Access::MmioWrite(address, data) => bus.mmio_write(cpu, address, &data),
                Access::MsrRead(msr) => bus.msr_read(cpu, msr).map(drop),
                Access::MsrWrite(msr, value) => bus.msr_write(cpu, msr, value),
                Access::Doorbell(mut bytes, gpa) => {
                    // Mostly a count that fits, so the entries get checked too.
                    if let Some(header) = bytes.get_mut(..8) {
                        header.copy_from_slice(&[header[0] % 40, 0, 0, 0, 0, 0, 0, 0]);
                    }
                    memory.write_slice(&bytes, GuestAddress(BATCH_GPA)).expect("in RAM");
                    let doorbell = u32::try_from(gpa).expect("the strategy draws a u32");
                    bus.pio_write(cpu, abi::PORT_IO_BATCH, &doorbell.to_le_bytes())
                }
            };
        }
        // The console is the one thing here a guest could grow.
        prop_assert!(serial.output().len() <= CONSOLE_LIMIT + 200);
    }

    #[test]
    fn the_vioapic_keeps_its_invariants_under_arbitrary_pv_pages_and_registers(
        ops in prop::collection::vec((0u8..4, any::<u32>(), 0..VIOAPIC_MMIO_SIZE / 4), 1..300),
    ) {
        let mut vioapic = Vioapic::new();
        for (op, value, register) in ops {
            let offset = register * 4;
            let sent = match op {
                // The PV page's MASK, whatever the guest left there.
                0 => vioapic.sync_mask(value),
                1 => vioapic.write(offset, value).unwrap_or_default(),
                2 => vioapic.set_line(value % (LINES + 2), value & 1 == 1).unwrap_or_default(),
                _ => {
                    let _ = vioapic.read(offset);
                    Vec::new()
                }
            };
            prop_assert!(sent.len() <= LINES as usize);
            // In service: asserted and unmasked, nothing else.
            prop_assert_eq!(vioapic.isr(), vioapic.irr() & !vioapic.mask());
        }
    }
}

#[test]
fn the_pv_vioapic_refuses_or_serves_whatever_the_pv_page_holds() {
    if !require_kvm("the_pv_vioapic_refuses_or_serves_whatever_the_pv_page_holds") {
        return;
    }
    let accesses = prop::collection::vec(
        (
            any::<[u32; 4]>(),
            any::<bool>(),
            0..VIOAPIC_MMIO_SIZE / 4,
            any::<u32>(),
        ),
        1..40,
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(32));
    let outcome = runner.run(&accesses, |accesses| {
        let (device, memory) = pv_vioapic();
        for (page, write, register, value) in accesses {
            // Lock, IRR, ISR and MASK as a hostile guest left them.
            for (index, word) in page.iter().enumerate() {
                memory
                    .write_obj(*word, GuestAddress(abi::VIOAPIC_PV_GPA + 4 * index as u64))
                    .expect("PV page");
            }
            let offset = register * 4;
            let served = if write {
                device.write(0, offset, &value.to_le_bytes())
            } else {
                device.read(0, offset, &mut [0; 4])
            };
            let lock: u32 = memory
                .read_obj(GuestAddress(abi::VIOAPIC_PV_LOCK_GPA))
                .expect("lock");
            // Served: the VMM let go of the lock it took; refused: it never
            // touched a lock it did not get.
            let expected_lock = if served.is_ok() { 0 } else { page[0] };
            prop_assert_eq!(lock, expected_lock, "{:?}", served);
            if page[0] > 1 {
                prop_assert!(served.is_err());
            }
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}
