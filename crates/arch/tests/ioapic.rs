//! IOAPIC rules from the 82093AA datasheet and SDM 10.8.5 (EOI broadcast).

use dirq_arch::bits::{high_u32, low_u32};
use dirq_arch::interrupt::{DeliveryMode, Destination, Interrupt, TriggerMode};
use dirq_arch::ioapic::*;

const PIN: u32 = 5;

/// Programs `pin` through IOREGSEL/IOWIN, high dword first as guests do.
fn program(ioapic: &mut Ioapic, pin: u32, entry: u64) -> Option<Interrupt> {
    let register = IOREDTBL_BASE + 2 * pin;
    ioapic.write_mmio(IOREGSEL, register + 1);
    ioapic.write_mmio(IOWIN, high_u32(entry));
    ioapic.write_mmio(IOREGSEL, register);
    ioapic.write_mmio(IOWIN, low_u32(entry))
}

fn read_entry(ioapic: &mut Ioapic, pin: u32) -> u64 {
    let register = IOREDTBL_BASE + 2 * pin;
    ioapic.write_mmio(IOREGSEL, register);
    let low = u64::from(ioapic.read_mmio(IOWIN));
    ioapic.write_mmio(IOREGSEL, register + 1);
    low | (u64::from(ioapic.read_mmio(IOWIN)) << 32)
}

fn level_entry(vector: u8) -> u64 {
    (3u64 << 56) | RTE_TRIGGER_LEVEL | u64::from(vector)
}

fn expected(vector: u8, trigger_mode: TriggerMode) -> Interrupt {
    Interrupt {
        vector,
        delivery_mode: DeliveryMode::Fixed,
        trigger_mode,
        destination: Destination::Physical(3),
    }
}

#[test]
fn identification_registers() {
    let mut ioapic = Ioapic::new(2);
    ioapic.write_mmio(IOREGSEL, IOAPICVER);
    assert_eq!(ioapic.read_mmio(IOWIN), 0x0017_0011);
    ioapic.write_mmio(IOREGSEL, IOAPICID);
    assert_eq!(ioapic.read_mmio(IOWIN), 2 << 24);
    ioapic.write_mmio(IOWIN, 0xFFFF_FFFF);
    assert_eq!(
        ioapic.read_mmio(IOWIN),
        0x0F00_0000,
        "only ID bits 27:24 are writable"
    );
    ioapic.write_mmio(IOREGSEL, IOAPICARB);
    assert_eq!(ioapic.read_mmio(IOWIN), 0x0F00_0000);
    ioapic.write_mmio(IOREGSEL, IOAPICVER);
    ioapic.write_mmio(IOWIN, 0);
    assert_eq!(ioapic.read_mmio(IOWIN), 0x0017_0011, "version is read-only");
}

#[test]
fn redirection_entries_reset_masked_and_round_trip_writable_bits() {
    let mut ioapic = Ioapic::default();
    for pin in 0..=MAX_REDIRECTION_ENTRY {
        assert_eq!(ioapic.redirection_entry(pin), Ok(RedirectionEntry::RESET));
    }
    program(&mut ioapic, 23, u64::MAX);
    // Delivery status (12) and remote-IRR (14) are read-only; bits 55:17 reserved.
    assert_eq!(read_entry(&mut ioapic, 23), 0xFF00_0000_0001_AFFF);
    let entry = ioapic.redirection_entry(23).expect("pin 23 exists");
    assert_eq!(entry.vector(), 0xFF);
    assert_eq!(entry.delivery_mode(), Some(DeliveryMode::ExtInt));
    assert_eq!(entry.destination(), 0xFF);
    assert!(entry.masked() && !entry.remote_irr());
}

#[test]
fn level_pin_delivers_once_until_eoi() {
    let mut ioapic = Ioapic::default();
    program(&mut ioapic, PIN, level_entry(0x40));
    assert_eq!(
        ioapic.set_irq(PIN, true),
        Ok(Some(expected(0x40, TriggerMode::Level)))
    );
    assert!(ioapic.redirection_entry(PIN).expect("pin").remote_irr());
    assert_eq!(
        ioapic.set_irq(PIN, true),
        Ok(None),
        "remote-IRR blocks re-delivery"
    );

    let mut redelivered = Vec::new();
    ioapic.end_of_interrupt(0x41, |interrupt| redelivered.push(interrupt));
    assert!(
        redelivered.is_empty(),
        "EOI of another vector leaves remote-IRR set"
    );
    assert!(ioapic.redirection_entry(PIN).expect("pin").remote_irr());

    ioapic.end_of_interrupt(0x40, |interrupt| redelivered.push(interrupt));
    assert_eq!(
        redelivered,
        vec![expected(0x40, TriggerMode::Level)],
        "line still asserted"
    );
    assert!(ioapic.redirection_entry(PIN).expect("pin").remote_irr());

    assert_eq!(ioapic.set_irq(PIN, false), Ok(None));
    redelivered.clear();
    ioapic.end_of_interrupt(0x40, |interrupt| redelivered.push(interrupt));
    assert!(
        redelivered.is_empty(),
        "line de-asserted: nothing to re-deliver"
    );
    assert!(!ioapic.redirection_entry(PIN).expect("pin").remote_irr());
}

#[test]
fn eoi_re_delivers_every_asserted_pin_sharing_the_vector() {
    let mut ioapic = Ioapic::default();
    for pin in [1, 2] {
        program(&mut ioapic, pin, level_entry(0x50));
        assert!(ioapic.set_irq(pin, true).expect("pin").is_some());
    }
    let mut redelivered = 0;
    ioapic.end_of_interrupt(0x50, |_| redelivered += 1);
    assert_eq!(redelivered, 2);
}

#[test]
fn masked_level_pin_delivers_when_unmasked() {
    let mut ioapic = Ioapic::default();
    program(&mut ioapic, PIN, level_entry(0x40) | RTE_MASKED);
    assert_eq!(ioapic.set_irq(PIN, true), Ok(None));
    assert!(!ioapic.redirection_entry(PIN).expect("pin").remote_irr());
    let unmasked = program(&mut ioapic, PIN, level_entry(0x40));
    assert_eq!(unmasked, Some(expected(0x40, TriggerMode::Level)));
}

#[test]
fn edge_pin_delivers_on_rising_edges_only_and_loses_masked_edges() {
    let mut ioapic = Ioapic::default();
    let edge = (3u64 << 56) | 0x33;
    program(&mut ioapic, PIN, edge);
    assert_eq!(
        ioapic.set_irq(PIN, true),
        Ok(Some(expected(0x33, TriggerMode::Edge)))
    );
    assert_eq!(
        ioapic.set_irq(PIN, true),
        Ok(None),
        "no edge while held high"
    );
    assert_eq!(ioapic.set_irq(PIN, false), Ok(None));
    assert_eq!(
        ioapic.set_irq(PIN, true),
        Ok(Some(expected(0x33, TriggerMode::Edge)))
    );
    assert!(!ioapic.redirection_entry(PIN).expect("pin").remote_irr());

    ioapic.set_irq(PIN, false).expect("pin");
    program(&mut ioapic, PIN, edge | RTE_MASKED);
    assert_eq!(ioapic.set_irq(PIN, true), Ok(None));
    assert_eq!(
        program(&mut ioapic, PIN, edge),
        None,
        "an edge seen while masked is lost"
    );
}

#[test]
fn logical_destination_and_delivery_mode_reach_the_interrupt() {
    let mut ioapic = Ioapic::default();
    program(
        &mut ioapic,
        0,
        (0x0Fu64 << 56) | RTE_DESTINATION_LOGICAL | (0b001 << 8) | 0x60,
    );
    let interrupt = ioapic
        .set_irq(0, true)
        .expect("pin")
        .expect("unmasked edge");
    assert_eq!(interrupt.delivery_mode, DeliveryMode::LowestPriority);
    assert_eq!(interrupt.destination, Destination::Logical(0x0F));
}

#[test]
fn reserved_delivery_mode_delivers_nothing() {
    let mut ioapic = Ioapic::default();
    program(&mut ioapic, 0, level_entry(0x60) | (0b011 << 8));
    assert_eq!(ioapic.set_irq(0, true), Ok(None));
    assert!(!ioapic.redirection_entry(0).expect("pin").remote_irr());
}

#[test]
fn bad_pins_and_registers_are_errors_or_ignored() {
    let mut ioapic = Ioapic::default();
    assert_eq!(
        ioapic.set_irq(24, true),
        Err(IoapicError::InvalidPin { pin: 24 })
    );
    assert_eq!(
        ioapic.redirection_entry(u32::MAX),
        Err(IoapicError::InvalidPin { pin: u32::MAX })
    );
    assert_eq!(
        ioapic.line_asserted(99),
        Err(IoapicError::InvalidPin { pin: 99 })
    );
    ioapic.write_mmio(IOREGSEL, IOREDTBL_BASE + 2 * MAX_REDIRECTION_ENTRY + 2);
    assert_eq!(ioapic.write_mmio(IOWIN, 0x40), None);
    assert_eq!(ioapic.read_mmio(IOWIN), 0);
    assert_eq!(ioapic.read_mmio(0x04), 0);
}

#[test]
fn selects_and_offsets_that_name_no_register_are_refused() {
    assert_eq!(Ioapic::check_access(IOREGSEL, Some(IOAPICARB)), Ok(()));
    let last = IOREDTBL_BASE + 2 * MAX_REDIRECTION_ENTRY + 1;
    assert_eq!(Ioapic::check_access(IOREGSEL, Some(last)), Ok(()));
    assert_eq!(
        Ioapic::check_access(IOREGSEL, Some(last + 1)),
        Err(IoapicError::InvalidSelect { select: last + 1 })
    );
    assert_eq!(
        Ioapic::check_access(IOREGSEL, Some(0x03)),
        Err(IoapicError::InvalidSelect { select: 0x03 })
    );
    assert_eq!(Ioapic::check_access(IOWIN, Some(0)), Ok(()));
    assert_eq!(
        Ioapic::check_access(0x04, None),
        Err(IoapicError::NoRegister { offset: 0x04 })
    );
}
