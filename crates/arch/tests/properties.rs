//! Property tests: random operation sequences against simple reference
//! models.

mod common;

use std::collections::BTreeSet;

use common::{pit_control, FakeClock, PIT_ACCESS_LOW_THEN_HIGH};
use dirq_arch::bus::{route, BusError};
use dirq_arch::clock::Clock;
use dirq_arch::interrupt::{DeliveryMode, Destination, Interrupt, TriggerMode};
use dirq_arch::ioapic::{Ioapic, MAX_REDIRECTION_ENTRY};
use dirq_arch::lapic::{
    Lapic, LapicConfig, TimerMode, APIC_BASE_X2APIC_ENABLE, APIC_DFR, APIC_LDR, MSR_IA32_APIC_BASE,
    MSR_IA32_TSC_DEADLINE,
};
use dirq_arch::msi::{MsiFormat, MsiMessage};
use dirq_arch::pit::{Pit, PORT_CHANNEL0, PORT_CONTROL};
use dirq_arch::vectors::VectorSet;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum LapicOp {
    Accept { vector: u8, level: bool },
    Acknowledge,
    Eoi,
    SetTpr(u8),
}

fn lapic_op() -> impl Strategy<Value = LapicOp> {
    prop_oneof![
        4 => (16u8..=255, any::<bool>()).prop_map(|(vector, level)| LapicOp::Accept { vector, level }),
        3 => Just(LapicOp::Acknowledge),
        3 => Just(LapicOp::Eoi),
        1 => (0u8..=0x9F).prop_map(LapicOp::SetTpr),
    ]
}

proptest! {
    /// No vector is dispatched at or below the in-service or task priority
    /// class, and ISR behaves as a stack that EOI pops (SDM 10.8.3.1, 10.8.5).
    #[test]
    fn lapic_dispatch_respects_priority_and_isr_is_a_stack(ops in prop::collection::vec(lapic_op(), 1..300)) {
        let mut lapic = Lapic::new(0, LapicConfig::new(1_000_000_000, 1_000_000_000).expect("rates"));
        lapic.set_svr(0x1FF);
        let mut in_service: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                LapicOp::Accept { vector, level } => {
                    lapic.accept(vector, TriggerMode::from_level_bit(level));
                    prop_assert!(lapic.irr().contains(vector));
                    prop_assert_eq!(lapic.tmr().contains(vector), level);
                }
                LapicOp::Acknowledge => {
                    let highest_pending = lapic.irr().highest();
                    let floor = in_service.last().map_or(0, |v| v >> 4).max(lapic.tpr() >> 4);
                    match lapic.acknowledge() {
                        Some(vector) => {
                            prop_assert_eq!(Some(vector), highest_pending);
                            prop_assert!(vector >> 4 > floor, "{:#x} dispatched at floor class {:#x}", vector, floor);
                            in_service.push(vector);
                        }
                        None => prop_assert!(highest_pending.is_none_or(|v| v >> 4 <= floor)),
                    }
                }
                LapicOp::Eoi => {
                    let expected = in_service.pop();
                    let outcome = lapic.eoi();
                    prop_assert_eq!(outcome.completed, expected);
                    prop_assert_eq!(outcome.broadcast, expected.filter(|&v| lapic.tmr().contains(v)));
                }
                LapicOp::SetTpr(tpr) => lapic.set_tpr(tpr),
            }
            let model: VectorSet = in_service.iter().copied().collect();
            prop_assert_eq!(*lapic.isr(), model);
            prop_assert_eq!(lapic.isr().highest(), in_service.last().copied());
            let isrv = in_service.last().copied().unwrap_or(0);
            let expected_ppr = if lapic.tpr() >> 4 >= isrv >> 4 { lapic.tpr() } else { isrv & 0xF0 };
            prop_assert_eq!(lapic.ppr(), expected_ppr);
        }
    }

    #[test]
    fn vector_set_matches_a_btree_set(ops in prop::collection::vec((any::<u8>(), any::<bool>()), 0..200)) {
        let mut set = VectorSet::EMPTY;
        let mut model = BTreeSet::new();
        for (vector, insert) in ops {
            if insert {
                prop_assert_eq!(set.set(vector), model.insert(vector));
            } else {
                prop_assert_eq!(set.clear(vector), model.remove(&vector));
            }
            prop_assert_eq!(set.highest(), model.last().copied());
            prop_assert_eq!(set.len() as usize, model.len());
            prop_assert_eq!(set.is_empty(), model.is_empty());
        }
        prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn msi_compose_decode_round_trip(
        vector in any::<u8>(),
        mode_bits in prop::sample::select(vec![0u32, 1, 2, 4, 5, 6, 7]),
        level in any::<bool>(),
        logical in any::<bool>(),
        id in 0u32..=0xFF,
    ) {
        let interrupt = Interrupt {
            vector,
            delivery_mode: DeliveryMode::from_bits(mode_bits).expect("non-reserved encoding"),
            trigger_mode: TriggerMode::from_level_bit(level),
            destination: if logical { Destination::Logical(id) } else { Destination::Physical(id) },
        };
        let message = MsiMessage::compose(&interrupt).expect("8-bit destinations are representable");
        prop_assert_eq!(message.decode(), Ok(MsiFormat::Compatibility(interrupt)));
    }

    /// Whatever the scale and the time, a rate generator reads back within
    /// the range the guest programmed (tick scaling stays invisible).
    #[test]
    fn pit_rate_generator_reads_stay_in_range(count in 2u16..=0xFFFF, scale in 1u32..=100, at_ns in 0u64..10_000_000_000) {
        let mut pit = Pit::new();
        pit.set_reload_scale(scale).expect("non-zero scale");
        let clock = FakeClock::default();
        let [low, high] = count.to_le_bytes();
        pit.write_port(PORT_CONTROL, pit_control(0, PIT_ACCESS_LOW_THEN_HIGH, 2, false), &clock).expect("control");
        pit.write_port(PORT_CHANNEL0, low, &clock).expect("low");
        pit.write_port(PORT_CHANNEL0, high, &clock).expect("high");
        clock.set(at_ns);
        pit.write_port(PORT_CONTROL, 0, &clock).expect("latch");
        let read_low = pit.read_port(PORT_CHANNEL0, &clock).expect("low");
        let read_high = pit.read_port(PORT_CHANNEL0, &clock).expect("high");
        let read = u16::from_le_bytes([read_low, read_high]);
        prop_assert!((1..=count).contains(&read), "read {} outside 1..={}", read, count);
    }
}

#[derive(Clone, Debug)]
enum RegisterOp {
    WriteMmio { offset: u64, value: u32 },
    ReadMmio { offset: u64 },
    WriteMsr { msr: u32, value: u64 },
    ReadMsr { msr: u32 },
    AdvanceAndExpire { ns: u64 },
}

fn register_op() -> impl Strategy<Value = RegisterOp> {
    let offset = prop_oneof![
        (0u64..0x40).prop_map(|register| register << 4),
        0u64..0x1000
    ];
    let msr = prop_oneof![
        0x800u32..=0x8FF,
        Just(MSR_IA32_APIC_BASE),
        Just(MSR_IA32_TSC_DEADLINE),
        any::<u32>()
    ];
    prop_oneof![
        (offset.clone(), any::<u32>())
            .prop_map(|(offset, value)| RegisterOp::WriteMmio { offset, value }),
        offset.prop_map(|offset| RegisterOp::ReadMmio { offset }),
        (msr.clone(), prop_oneof![any::<u64>(), 0u64..0x1_0000])
            .prop_map(|(msr, value)| RegisterOp::WriteMsr { msr, value }),
        msr.prop_map(|msr| RegisterOp::ReadMsr { msr }),
        (0u64..1_000_000).prop_map(|ns| RegisterOp::AdvanceAndExpire { ns }),
    ]
}

proptest! {
    /// Arbitrary guest register traffic never panics and never breaks the
    /// dispatch rule (a pending vector is always above the PPR's class).
    #[test]
    fn lapic_survives_arbitrary_register_traffic(ops in prop::collection::vec(register_op(), 1..200)) {
        let mut lapic = Lapic::new(1, LapicConfig::new(100_000_000, 3_000_000_000).expect("rates"));
        let clock = FakeClock::default();
        for op in ops {
            match op {
                RegisterOp::WriteMmio { offset, value } => {
                    lapic.write_mmio(offset, value, &clock);
                }
                RegisterOp::ReadMmio { offset } => {
                    lapic.read_mmio(offset, &clock);
                }
                RegisterOp::WriteMsr { msr, value } => {
                    let _ = lapic.write_msr(msr, value, &clock);
                }
                RegisterOp::ReadMsr { msr } => {
                    let _ = lapic.read_msr(msr, &clock);
                }
                RegisterOp::AdvanceAndExpire { ns } => {
                    clock.advance(ns);
                    lapic.expire_timer(&clock);
                    if let Some(deadline) = lapic.timer_deadline_ns() {
                        prop_assert!(deadline > clock.now_ns() || lapic.timer_mode() == TimerMode::TscDeadline);
                    }
                }
            }
            if let Some(vector) = lapic.pending_vector() {
                prop_assert!(vector >> 4 > lapic.ppr() >> 4);
            }
            lapic.acknowledge();
        }
    }

    /// Arbitrary IOREGSEL/IOWIN traffic and line changes never panic, and
    /// remote-IRR is only ever set on level-triggered pins.
    #[test]
    fn ioapic_survives_arbitrary_traffic(
        ops in prop::collection::vec((any::<bool>(), 0u64..0x20, any::<u32>(), 0u32..30, any::<bool>()), 1..200),
    ) {
        let mut ioapic = Ioapic::default();
        for (register_write, offset, value, pin, level) in ops {
            if register_write {
                ioapic.write_mmio(offset, value);
                ioapic.read_mmio(offset);
            } else {
                let _ = ioapic.set_irq(pin, level);
                ioapic.end_of_interrupt(dirq_arch::bits::low_u8(value), |_| {});
            }
            for pin in 0..=MAX_REDIRECTION_ENTRY {
                let entry = ioapic.redirection_entry(pin).expect("pin in range");
                prop_assert!(!entry.remote_irr() || entry.trigger_mode() == TriggerMode::Level);
            }
        }
    }

    /// Arbitrary port traffic never panics.
    #[test]
    fn pit_survives_arbitrary_port_traffic(
        ops in prop::collection::vec((0x3Eu16..0x46, any::<u8>(), any::<bool>(), 0u64..100_000_000), 1..200),
    ) {
        let mut pit = Pit::new();
        let clock = FakeClock::default();
        for (port, value, write, ns) in ops {
            clock.advance(ns);
            if write {
                let _ = pit.write_port(port, value, &clock);
            } else {
                let _ = pit.read_port(port, &clock);
            }
            pit.expire(&clock);
            if let Some(due) = pit.next_irq_ns() {
                prop_assert!(due > clock.now_ns());
            }
        }
    }
}

/// How one LAPIC on a random bus is set up.
#[derive(Clone, Debug)]
struct BusMember {
    tpr: u8,
    /// xAPIC only: the 8-bit logical ID.
    logical_id: u8,
}

fn bus_destination() -> impl Strategy<Value = Destination> {
    prop_oneof![
        (0u32..=0x120).prop_map(Destination::Physical),
        Just(Destination::Physical(0xFF)),
        Just(Destination::Physical(0xFFFF_FFFF)),
        any::<u32>().prop_map(|bits| Destination::Logical(bits & 0x000F_FFFF)),
        Just(Destination::Logical(0xFFFF_FFFF)),
        (0u32..40).prop_map(|sender| Destination::SelfOnly { sender }),
        Just(Destination::AllIncludingSelf),
        (0u32..40).prop_map(|sender| Destination::AllExcludingSelf { sender }),
    ]
}

/// The SDM's addressing rules written out for one receiver, independently
/// of `Lapic::matches_destination`.
fn reference_addresses(
    id: u32,
    member: &BusMember,
    x2apic: bool,
    cluster: bool,
    destination: &Destination,
) -> bool {
    match *destination {
        Destination::Physical(target) if x2apic => target == id || target == 0xFFFF_FFFF,
        Destination::Physical(target) => target == id || target == 0xFF,
        Destination::Logical(0xFFFF_FFFF) if x2apic => true,
        Destination::Logical(address) if x2apic => {
            address >> 16 == id >> 4 && address & (1 << (id & 0xF)) != 0
        }
        Destination::Logical(address) => {
            let (address, logical) = (address & 0xFF, u32::from(member.logical_id));
            address == 0xFF
                || if cluster {
                    address >> 4 == logical >> 4 && address & logical & 0xF != 0
                } else {
                    address & logical != 0
                }
        }
        Destination::SelfOnly { sender } => sender == id,
        Destination::AllIncludingSelf => true,
        Destination::AllExcludingSelf { sender } => sender != id,
    }
}

proptest! {
    /// Fixed and NMI reach exactly the addressed LAPICs; lowest priority
    /// reaches one addressed LAPIC of minimal priority (SDM 10.6.2).
    #[test]
    fn bus_routes_to_exactly_the_addressed_lapics(
        members in prop::collection::vec((0u8..=0xF0, any::<u8>()).prop_map(|(tpr, logical_id)| BusMember { tpr, logical_id }), 1..40),
        x2apic in any::<bool>(),
        cluster in any::<bool>(),
        mode in prop::sample::select(vec![DeliveryMode::Fixed, DeliveryMode::LowestPriority, DeliveryMode::Nmi]),
        destination in bus_destination(),
    ) {
        let clock = FakeClock::default();
        let lapics: Vec<Lapic> = members.iter().enumerate().map(|(id, member)| {
            let mut lapic = Lapic::new(u32::try_from(id).expect("below 40 members"), LapicConfig::new(1_000_000_000, 1_000_000_000).expect("rates"));
            lapic.set_svr(0x1FF);
            if x2apic {
                let base = lapic.apic_base() | APIC_BASE_X2APIC_ENABLE;
                lapic.set_apic_base(base).expect("xAPIC -> x2APIC");
            } else {
                lapic.write_mmio(APIC_LDR, u32::from(member.logical_id) << 24, &clock);
                if cluster {
                    lapic.write_mmio(APIC_DFR, 0x0FFF_FFFF, &clock);
                }
            }
            lapic.set_tpr(member.tpr);
            lapic
        }).collect();
        let interrupt = Interrupt { vector: 0x41, delivery_mode: mode, trigger_mode: TriggerMode::Edge, destination };
        let addressed: Vec<usize> = members.iter().enumerate()
            .filter(|(id, member)| reference_addresses(u32::try_from(*id).expect("below 40 members"), member, x2apic, cluster, &destination))
            .map(|(id, _)| id)
            .collect();
        let shorthand_fixed_only = matches!(destination, Destination::SelfOnly { .. } | Destination::AllIncludingSelf);
        let all_excluding_self = matches!(destination, Destination::AllExcludingSelf { .. });
        match route(&interrupt, &lapics) {
            Err(BusError::ShorthandNeedsFixed { .. }) => prop_assert!(shorthand_fixed_only && mode != DeliveryMode::Fixed),
            Err(BusError::LowestPriorityBroadcast) => prop_assert!(mode == DeliveryMode::LowestPriority && all_excluding_self),
            Ok(targets) if mode == DeliveryMode::LowestPriority => {
                let chosen: Vec<usize> = targets.iter().collect();
                prop_assert!(chosen.len() == usize::from(!addressed.is_empty()));
                if let Some(&winner) = chosen.first() {
                    prop_assert!(addressed.contains(&winner));
                    let lowest = addressed.iter().map(|&id| lapics[id].ppr()).min();
                    prop_assert_eq!(Some(lapics[winner].ppr()), lowest);
                }
            }
            Ok(targets) => prop_assert_eq!(targets.iter().collect::<Vec<_>>(), addressed),
        }
    }
}
