//! VIOAPIC rules (docs/mechanisms.md section 6): ISR = IRR & !MASK, a message
//! per ISR rise, the trapping UNMASK register and the paravirtual MASK.

use dirq_arch::interrupt::{DeliveryMode, Destination, Interrupt, TriggerMode};
use dirq_arch::vioapic::*;
use proptest::prelude::*;

const LINE: u32 = 3;
const VECTOR: u8 = 0x40;

fn routed(line: u32, vector: u8, dest: u32) -> Vioapic {
    let mut vioapic = Vioapic::new();
    let route = u32::from(vector) | (dest << 8);
    let sent = vioapic
        .write(REG_ROUTE_BASE + 4 * u64::from(line), route)
        .expect("route register");
    assert!(sent.is_empty(), "routing a masked line sends nothing");
    vioapic
}

fn message(vector: u8, dest: u32) -> Interrupt {
    Interrupt {
        vector,
        delivery_mode: DeliveryMode::Fixed,
        trigger_mode: TriggerMode::Edge,
        destination: Destination::Physical(dest),
    }
}

#[test]
fn reset_masks_every_line() {
    let mut vioapic = Vioapic::new();
    assert_eq!(vioapic.read(REG_MASK), Ok(u32::MAX));
    assert_eq!(vioapic.set_line(LINE, true), Ok(vec![]));
    assert_eq!(vioapic.read(REG_IRR), Ok(1 << LINE));
    assert_eq!(vioapic.read(REG_ISR), Ok(0), "ISR = IRR & !MASK");
}

#[test]
fn unmasking_an_asserted_line_signals_its_route_once() {
    let mut vioapic = routed(LINE, VECTOR, 1);
    vioapic.set_line(LINE, true).expect("line exists");
    let sent = vioapic.write(REG_MASK, !(1 << LINE)).expect("MASK");
    assert_eq!(sent, vec![message(VECTOR, 1)]);
    assert_eq!(vioapic.read(REG_ISR), Ok(1 << LINE));
    // Still asserted, still unmasked: no new rise, no new message.
    assert_eq!(vioapic.set_line(LINE, true), Ok(vec![]));
    assert_eq!(vioapic.write(REG_MASK, !(1 << LINE)), Ok(vec![]));
}

#[test]
fn asserting_an_unmasked_line_signals() {
    let mut vioapic = routed(LINE, VECTOR, 0);
    vioapic.write(REG_MASK, 0).expect("MASK");
    assert_eq!(vioapic.set_line(LINE, true), Ok(vec![message(VECTOR, 0)]));
    assert_eq!(vioapic.set_line(LINE, false), Ok(vec![]));
    assert_eq!(vioapic.read(REG_ISR), Ok(0));
    assert_eq!(vioapic.set_line(LINE, true), Ok(vec![message(VECTOR, 0)]));
}

#[test]
fn mask_then_unmask_of_a_still_asserted_line_signals_again() {
    // The level-triggered flow: mask, clear the device, unmask. A device
    // that asserted again meanwhile is signalled at the unmask.
    let mut vioapic = routed(LINE, VECTOR, 0);
    vioapic.write(REG_MASK, 0).expect("MASK");
    vioapic.set_line(LINE, true).expect("line exists");
    assert_eq!(vioapic.write(REG_MASK, 1 << LINE), Ok(vec![]));
    assert_eq!(vioapic.read(REG_ISR), Ok(0));
    assert_eq!(
        vioapic.write(REG_UNMASK, 1 << LINE),
        Ok(vec![message(VECTOR, 0)])
    );
    // A device cleared before the unmask is not signalled.
    vioapic.write(REG_MASK, 1 << LINE).expect("MASK");
    vioapic.set_line(LINE, false).expect("line exists");
    assert_eq!(vioapic.write(REG_UNMASK, 1 << LINE), Ok(vec![]));
}

#[test]
fn unmask_register_clears_only_the_written_bits_and_reads_zero() {
    let mut vioapic = Vioapic::new();
    vioapic.write(REG_UNMASK, 0b1010).expect("UNMASK");
    assert_eq!(vioapic.read(REG_MASK), Ok(!0b1010));
    assert_eq!(vioapic.read(REG_UNMASK), Ok(0));
}

#[test]
fn paravirtual_mask_in_memory_lowers_isr_without_a_message() {
    let mut vioapic = routed(LINE, VECTOR, 0);
    vioapic.write(REG_MASK, 0).expect("MASK");
    vioapic.set_line(LINE, true).expect("line exists");
    // The guest set MASK in its shared page; the VMM syncs it.
    assert_eq!(vioapic.sync_mask(1 << LINE), vec![]);
    assert_eq!(vioapic.isr(), 0);
    assert_eq!(vioapic.write(REG_UNMASK, 1 << LINE).map(|s| s.len()), Ok(1));
}

#[test]
fn unrouted_lines_signal_nothing() {
    let mut vioapic = Vioapic::new();
    vioapic.write(REG_MASK, 0).expect("MASK");
    assert_eq!(vioapic.set_line(LINE, true), Ok(vec![]));
    assert_eq!(vioapic.isr(), 1 << LINE, "the line still wants service");
}

#[test]
fn bad_accesses_are_errors() {
    let mut vioapic = Vioapic::new();
    assert_eq!(
        vioapic.write(REG_IRR, 1),
        Err(VioapicError::ReadOnly { offset: REG_IRR })
    );
    assert_eq!(
        vioapic.write(REG_ISR, 1),
        Err(VioapicError::ReadOnly { offset: REG_ISR })
    );
    assert_eq!(
        vioapic.read(0x10),
        Err(VioapicError::NoRegister { offset: 0x10 })
    );
    assert_eq!(
        vioapic.read(REG_ROUTE_BASE + 2),
        Err(VioapicError::NoRegister {
            offset: REG_ROUTE_BASE + 2
        })
    );
    assert_eq!(
        vioapic.set_line(LINES, true),
        Err(VioapicError::InvalidLine { line: LINES })
    );
}

#[derive(Clone, Debug)]
enum Op {
    Line(u32, bool),
    Mask(u32),
    Unmask(u32),
    SyncMask(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let bits = any::<u32>().prop_map(|bits| bits & 0xff);
    prop_oneof![
        (0u32..8, any::<bool>()).prop_map(|(line, level)| Op::Line(line, level)),
        bits.clone().prop_map(Op::Mask),
        bits.clone().prop_map(Op::Unmask),
        bits.prop_map(Op::SyncMask),
    ]
}

proptest! {
    /// Against a reference: ISR is always IRR & !MASK, and each operation
    /// sends exactly one message per routed line whose ISR bit rose.
    #[test]
    fn one_message_per_isr_rise(ops in prop::collection::vec(op(), 1..200)) {
        let mut vioapic = Vioapic::new();
        for line in 0..8u32 {
            vioapic.write(REG_ROUTE_BASE + 4 * u64::from(line), 0x30 + line).expect("route");
        }
        let (mut irr, mut mask) = (0u32, u32::MAX);
        for op in ops {
            let before = irr & !mask;
            let sent = match op {
                Op::Line(line, level) => {
                    irr = if level { irr | 1 << line } else { irr & !(1 << line) };
                    vioapic.set_line(line, level).expect("line exists")
                }
                Op::Mask(bits) => {
                    mask = bits | 0xffff_ff00;
                    vioapic.write(REG_MASK, mask).expect("MASK")
                }
                Op::Unmask(bits) => {
                    mask &= !bits;
                    vioapic.write(REG_UNMASK, bits).expect("UNMASK")
                }
                Op::SyncMask(bits) => {
                    mask = bits | 0xffff_ff00;
                    vioapic.sync_mask(mask)
                }
            };
            let isr = irr & !mask;
            prop_assert_eq!(vioapic.isr(), isr);
            let rose: Vec<u8> = (0..8u8)
                .filter(|line| isr & !before & (1 << line) != 0)
                .map(|line| 0x30 + line)
                .collect();
            let vectors: Vec<u8> = sent.iter().map(|m| m.vector).collect();
            prop_assert_eq!(vectors, rose);
        }
    }
}

#[test]
fn levels_serialize_by_their_kebab_case_names() {
    for level in VioapicLevel::ALL {
        let json = serde_json::to_string(&level).expect("serializes");
        assert_eq!(json, format!("\"{}\"", level.name()));
        let back: VioapicLevel = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, level);
    }
    assert_eq!(VioapicLevel::RoPage.name(), "ro-page");
}

#[test]
fn levels_parse_from_the_names_they_print_and_nothing_else() {
    for level in VioapicLevel::ALL {
        assert_eq!(level.to_string().parse::<VioapicLevel>(), Ok(level));
    }
    let unknown = "ro_page".parse::<VioapicLevel>().expect_err("not a level");
    assert!(unknown.to_string().contains("`ro_page`"), "{unknown}");
}
