//! LAPIC rules from Intel SDM Vol. 3 chapter 10, one test per rule.

mod common;

use common::FakeClock;
use dirq_arch::lapic::*;

/// 1 GHz bus (1 ns per bus cycle before the divider), 2 GHz TSC.
const BUS_HZ: u64 = 1_000_000_000;
const TSC_HZ: u64 = 2_000_000_000;
const SVR_ENABLED: u32 = SVR_APIC_SOFTWARE_ENABLE | 0xFF;

fn enabled_lapic(apic_id: u32) -> Lapic {
    let mut lapic = Lapic::new(
        apic_id,
        LapicConfig::new(BUS_HZ, TSC_HZ).expect("non-zero rates"),
    );
    lapic.set_svr(SVR_ENABLED);
    lapic
}

fn x2apic_lapic(apic_id: u32) -> Lapic {
    let mut lapic = enabled_lapic(apic_id);
    let base = lapic.apic_base() | APIC_BASE_X2APIC_ENABLE;
    lapic
        .set_apic_base(base)
        .expect("xAPIC -> x2APIC is allowed");
    lapic
}

fn dispatch(lapic: &mut Lapic, vector: u8) {
    assert_eq!(
        lapic.accept(vector, TriggerMode::Edge),
        AcceptOutcome::Latched
    );
    assert_eq!(lapic.acknowledge(), Some(vector));
}

// --- Priority (SDM 10.8.3.1) ------------------------------------------------

#[test]
fn vector_in_the_in_service_class_waits_a_higher_class_preempts() {
    let mut lapic = enabled_lapic(0);
    dispatch(&mut lapic, 0x45);
    lapic.accept(0x4A, TriggerMode::Edge);
    assert_eq!(
        lapic.pending_vector(),
        None,
        "same class as ISR must not dispatch"
    );
    assert_eq!(lapic.acknowledge(), None);
    lapic.accept(0x31, TriggerMode::Edge);
    assert_eq!(
        lapic.pending_vector(),
        None,
        "lower class must not dispatch"
    );
    lapic.accept(0x50, TriggerMode::Edge);
    assert_eq!(lapic.pending_vector(), Some(0x50));
}

#[test]
fn ppr_is_tpr_or_in_service_class() {
    let mut lapic = enabled_lapic(0);
    dispatch(&mut lapic, 0x45);
    lapic.set_tpr(0x23);
    assert_eq!(lapic.ppr(), 0x40, "ISR class wins, sub-class 0");
    lapic.set_tpr(0x4F);
    assert_eq!(lapic.ppr(), 0x4F, "equal class: PPR = TPR");
    lapic.set_tpr(0x53);
    assert_eq!(lapic.ppr(), 0x53);
    lapic.set_tpr(0);
    lapic.eoi();
    assert_eq!(lapic.ppr(), 0);
}

#[test]
fn tpr_masks_its_class_and_below() {
    let mut lapic = enabled_lapic(0);
    lapic.set_tpr(0x50);
    lapic.accept(0x5F, TriggerMode::Edge);
    assert_eq!(lapic.pending_vector(), None);
    lapic.accept(0x61, TriggerMode::Edge);
    assert_eq!(lapic.pending_vector(), Some(0x61));
    lapic.set_tpr(0x70);
    assert_eq!(lapic.pending_vector(), None);
    lapic.set_tpr(0);
    assert_eq!(lapic.acknowledge(), Some(0x61));
    assert_eq!(
        lapic.acknowledge(),
        None,
        "0x5F is below the in-service class 6"
    );
}

#[test]
fn highest_pending_vector_dispatches_first() {
    let mut lapic = enabled_lapic(0);
    for vector in [0x31, 0xA2, 0x77] {
        lapic.accept(vector, TriggerMode::Edge);
    }
    assert_eq!(lapic.acknowledge(), Some(0xA2));
    assert!(lapic.isr().contains(0xA2) && !lapic.irr().contains(0xA2));
}

// --- EOI (SDM 10.8.5) -------------------------------------------------------

#[test]
fn eoi_completes_nested_interrupts_highest_first() {
    let mut lapic = enabled_lapic(0);
    for vector in [0x30, 0x60, 0x90] {
        dispatch(&mut lapic, vector);
    }
    for expected in [0x90, 0x60, 0x30] {
        assert_eq!(lapic.eoi().completed, Some(expected));
    }
    assert!(lapic.isr().is_empty());
    assert_eq!(lapic.ppr(), 0);
}

#[test]
fn eoi_lets_a_waiting_lower_class_vector_dispatch() {
    let mut lapic = enabled_lapic(0);
    dispatch(&mut lapic, 0x80);
    lapic.accept(0x40, TriggerMode::Edge);
    assert_eq!(lapic.pending_vector(), None);
    lapic.eoi();
    assert_eq!(lapic.pending_vector(), Some(0x40));
}

#[test]
fn eoi_with_nothing_in_service_changes_nothing() {
    let mut lapic = enabled_lapic(0);
    lapic.set_tpr(0x20);
    lapic.accept(0x55, TriggerMode::Level);
    let (irr, tmr) = (*lapic.irr(), *lapic.tmr());
    assert_eq!(
        lapic.eoi(),
        EoiOutcome {
            completed: None,
            broadcast: None
        }
    );
    assert_eq!((*lapic.irr(), *lapic.tmr(), lapic.ppr()), (irr, tmr, 0x20));
    assert!(lapic.isr().is_empty());
}

#[test]
fn level_triggered_eoi_is_broadcast_edge_is_not() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::default();
    lapic.accept(0x70, TriggerMode::Level);
    assert!(lapic.tmr().contains(0x70));
    lapic.acknowledge();
    assert_eq!(
        lapic.eoi(),
        EoiOutcome {
            completed: Some(0x70),
            broadcast: Some(0x70)
        }
    );

    lapic.accept(0x71, TriggerMode::Level);
    lapic.acknowledge();
    assert_eq!(
        lapic.write_mmio(APIC_EOI, 0, &clock),
        Some(ApicBusMessage::Eoi(0x71))
    );

    lapic.accept(0x70, TriggerMode::Edge);
    assert!(
        !lapic.tmr().contains(0x70),
        "edge acceptance clears TMR (SDM 10.8.4)"
    );
    lapic.acknowledge();
    assert_eq!(
        lapic.eoi(),
        EoiOutcome {
            completed: Some(0x70),
            broadcast: None
        }
    );
    assert_eq!(lapic.write_mmio(APIC_EOI, 0, &clock), None);
}

// --- Acceptance -------------------------------------------------------------

#[test]
fn second_request_for_a_pending_vector_coalesces() {
    let mut lapic = enabled_lapic(0);
    assert_eq!(
        lapic.accept(0x40, TriggerMode::Edge),
        AcceptOutcome::Latched
    );
    assert_eq!(
        lapic.accept(0x40, TriggerMode::Edge),
        AcceptOutcome::Coalesced
    );
    assert_eq!(lapic.acknowledge(), Some(0x40));
    lapic.eoi();
    assert_eq!(
        lapic.acknowledge(),
        None,
        "one dispatch for two coalesced requests"
    );
}

#[test]
fn illegal_vector_is_dropped_and_logged_in_esr() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::default();
    assert_eq!(lapic.accept(15, TriggerMode::Edge), AcceptOutcome::Rejected);
    assert!(lapic.irr().is_empty());
    assert_eq!(
        lapic.read_mmio(APIC_ESR, &clock),
        0,
        "errors appear only after an ESR write"
    );
    lapic.write_mmio(APIC_ESR, 0, &clock);
    assert_eq!(
        lapic.read_mmio(APIC_ESR, &clock),
        ESR_RECEIVE_ILLEGAL_VECTOR
    );
    lapic.write_mmio(APIC_ESR, 0, &clock);
    assert_eq!(
        lapic.read_mmio(APIC_ESR, &clock),
        0,
        "an ESR write clears logged errors"
    );
}

#[test]
fn error_lvt_raises_its_vector_on_an_error() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::default();
    lapic.write_mmio(APIC_LVT_ERROR, 0xE0, &clock);
    lapic.accept(3, TriggerMode::Edge);
    assert_eq!(lapic.pending_vector(), Some(0xE0));
}

#[test]
fn sending_an_illegal_vector_sends_nothing_and_sets_esr() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::default();
    assert_eq!(lapic.write_mmio(APIC_ICR_LOW, 0x0000_0007, &clock), None);
    lapic.write_mmio(APIC_ESR, 0, &clock);
    assert_eq!(lapic.read_mmio(APIC_ESR, &clock), ESR_SEND_ILLEGAL_VECTOR);
}

#[test]
fn software_disabled_apic_drops_fixed_interrupts_but_holds_pending_ones() {
    let mut lapic = enabled_lapic(0);
    lapic.accept(0x40, TriggerMode::Edge);
    lapic.set_svr(0xFF);
    assert_eq!(
        lapic.accept(0x50, TriggerMode::Edge),
        AcceptOutcome::Rejected
    );
    assert_eq!(
        lapic.acknowledge(),
        Some(0x40),
        "SDM 10.4.7.2: held interrupts still need handling"
    );
    assert_eq!(lapic.lvt(Lvt::Timer) & LVT_MASKED, LVT_MASKED);
}

#[test]
fn power_up_state() {
    let lapic = Lapic::new(0, LapicConfig::new(BUS_HZ, TSC_HZ).expect("non-zero rates"));
    let clock = FakeClock::default();
    assert!(!lapic.software_enabled());
    assert_eq!(lapic.read_mmio(APIC_SVR, &clock), 0xFF);
    assert_eq!(lapic.read_mmio(APIC_DFR, &clock), 0xFFFF_FFFF);
    assert_eq!(
        lapic.apic_base(),
        DEFAULT_MMIO_BASE | APIC_BASE_GLOBAL_ENABLE | APIC_BASE_BSP
    );
    for entry in [
        Lvt::Timer,
        Lvt::Thermal,
        Lvt::PerformanceCounter,
        Lvt::Lint0,
        Lvt::Lint1,
        Lvt::Error,
    ] {
        assert_eq!(lapic.lvt(entry), LVT_MASKED);
    }
    assert!(LapicConfig::new(0, TSC_HZ).is_err());
    assert!(LapicConfig::new(BUS_HZ, 0).is_err());
}

// --- xAPIC MMIO (SDM 10.4.1) ------------------------------------------------

#[test]
fn xapic_registers_round_trip_through_mmio() {
    let mut lapic = enabled_lapic(3);
    let clock = FakeClock::default();
    assert_eq!(lapic.read_mmio(APIC_ID, &clock), 3 << 24);
    assert_eq!(lapic.read_mmio(APIC_VERSION, &clock), 0x0005_0014);
    let round_trips = [
        (APIC_TPR, 0x35, 0x35),
        (APIC_LDR, 0xFFFF_FFFF, 0xFF00_0000),
        (APIC_DFR, 0x0000_0000, 0x0FFF_FFFF),
        (APIC_SVR, 0xFFFF_F1FF, 0x1FF),
        (APIC_LVT_TIMER, 0xFFFF_FFFF, 0x0007_00FF),
        (APIC_LVT_THERMAL, 0xFFFF_FFFF, 0x0001_07FF),
        (APIC_LVT_PERF, 0xFFFF_FFFF, 0x0001_07FF),
        (APIC_LVT_LINT0, 0xFFFF_FFFF, 0x0001_A7FF),
        (APIC_LVT_LINT1, 0xFFFF_FFFF, 0x0001_A7FF),
        (APIC_LVT_ERROR, 0xFFFF_FFFF, 0x0001_00FF),
        (APIC_TIMER_DIVIDE_CONFIG, 0xFFFF_FFFF, 0b1011),
        (APIC_ICR_HIGH, 0xFFFF_FFFF, 0xFF00_0000),
    ];
    for (offset, written, read) in round_trips {
        lapic.write_mmio(offset, written, &clock);
        assert_eq!(lapic.read_mmio(offset, &clock), read, "offset {offset:#x}");
    }
    // Read-only registers ignore writes.
    lapic.write_mmio(APIC_ID, 0x0700_0000, &clock);
    lapic.write_mmio(APIC_VERSION, 0, &clock);
    lapic.write_mmio(APIC_PPR, 0xF0, &clock);
    assert_eq!(lapic.read_mmio(APIC_ID, &clock), 3 << 24);
    assert_eq!(lapic.read_mmio(APIC_VERSION, &clock), 0x0005_0014);
    assert_eq!(lapic.read_mmio(APIC_PPR, &clock), 0x35);
    assert_eq!(
        lapic.read_mmio(APIC_TPR + 4, &clock),
        0,
        "unaligned offsets read 0"
    );
}

#[test]
fn isr_tmr_irr_banks_are_visible_over_mmio() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::default();
    lapic.accept(0x41, TriggerMode::Level);
    lapic.acknowledge();
    lapic.accept(0x22, TriggerMode::Edge);
    assert_eq!(lapic.read_mmio(APIC_ISR + 0x20, &clock), 1 << 1);
    assert_eq!(lapic.read_mmio(APIC_TMR + 0x20, &clock), 1 << 1);
    assert_eq!(lapic.read_mmio(APIC_IRR + 0x10, &clock), 1 << 2);
    assert_eq!(lapic.read_mmio(APIC_IRR + 0x20, &clock), 0);
}

#[test]
fn icr_low_write_sends_to_the_icr_high_destination() {
    let mut lapic = enabled_lapic(1);
    let clock = FakeClock::default();
    lapic.write_mmio(APIC_ICR_HIGH, 2 << 24, &clock);
    let sent = lapic.write_mmio(APIC_ICR_LOW, 0x0000_C0F3, &clock);
    let expected = Interrupt {
        vector: 0xF3,
        delivery_mode: DeliveryMode::Fixed,
        trigger_mode: TriggerMode::Level,
        destination: Destination::Physical(2),
    };
    assert_eq!(sent, Some(ApicBusMessage::Ipi(expected)));
    assert_eq!(
        lapic.read_mmio(APIC_ICR_LOW, &clock) & (1 << 12),
        0,
        "delivery status idle"
    );
}

#[test]
fn icr_delivery_modes_and_shorthands() {
    let mut lapic = enabled_lapic(1);
    let clock = FakeClock::default();
    let mut send = |icr_low: u32| match lapic.write_mmio(APIC_ICR_LOW, icr_low, &clock) {
        Some(ApicBusMessage::Ipi(interrupt)) => Some(interrupt),
        _ => None,
    };
    let nmi = send(0x000C_0400).expect("NMI to all but self");
    assert_eq!(nmi.delivery_mode, DeliveryMode::Nmi);
    assert_eq!(nmi.destination, Destination::AllExcludingSelf { sender: 1 });
    let init = send(0x0008_4500).expect("INIT assert to all");
    assert_eq!(
        (init.delivery_mode, init.destination),
        (DeliveryMode::Init, Destination::AllIncludingSelf)
    );
    assert_eq!(
        send(0x0000_8500),
        None,
        "INIT level de-assert sends nothing"
    );
    let sipi = send(0x0000_0699).expect("SIPI");
    assert_eq!(
        (sipi.delivery_mode, sipi.vector),
        (DeliveryMode::StartUp, 0x99)
    );
    let self_ipi = send(0x0004_0040).expect("self IPI");
    assert_eq!(self_ipi.destination, Destination::SelfOnly { sender: 1 });
    let logical = send(0x0000_0940).expect("logical lowest priority");
    assert_eq!(logical.delivery_mode, DeliveryMode::LowestPriority);
    assert!(matches!(logical.destination, Destination::Logical(_)));
    assert_eq!(
        send(0x0000_0340),
        None,
        "reserved delivery mode sends nothing"
    );
}

#[test]
fn logical_destination_flat_and_cluster_models() {
    let mut lapic = enabled_lapic(5);
    let clock = FakeClock::default();
    lapic.write_mmio(APIC_LDR, 0x2400_0000, &clock);
    // Flat model (DFR reset value): any common bit of the 8-bit mask.
    assert!(lapic.matches_destination(&Destination::Logical(0x04)));
    assert!(!lapic.matches_destination(&Destination::Logical(0x01)));
    // Cluster model: cluster 2, member bit 2.
    lapic.write_mmio(APIC_DFR, 0x0FFF_FFFF, &clock);
    assert!(lapic.matches_destination(&Destination::Logical(0x24)));
    assert!(lapic.matches_destination(&Destination::Logical(0x26)));
    assert!(!lapic.matches_destination(&Destination::Logical(0x14)));
    assert!(
        lapic.matches_destination(&Destination::Logical(0xFF)),
        "broadcast"
    );
    assert!(lapic.matches_destination(&Destination::Physical(5)));
    assert!(lapic.matches_destination(&Destination::Physical(XAPIC_BROADCAST_ID)));
    assert!(!lapic.matches_destination(&Destination::Physical(6)));
    assert!(!lapic.matches_destination(&Destination::AllExcludingSelf { sender: 5 }));
    assert!(lapic.matches_destination(&Destination::AllExcludingSelf { sender: 4 }));
}

#[test]
fn x2apic_logical_id_is_derived_from_the_apic_id() {
    let lapic = x2apic_lapic(0x23);
    let clock = FakeClock::default();
    // Cluster 0x2, member bit 3 (SDM 10.12.10.2).
    assert_eq!(lapic.read_msr(0x80D, &clock), Ok(0x0002_0008));
    assert!(lapic.matches_destination(&Destination::Logical(0x0002_0008)));
    assert!(lapic.matches_destination(&Destination::Logical(0x0002_FFFF)));
    assert!(!lapic.matches_destination(&Destination::Logical(0x0001_0008)));
    assert!(lapic.matches_destination(&Destination::Physical(X2APIC_BROADCAST_ID)));
    assert!(!lapic.matches_destination(&Destination::Physical(XAPIC_BROADCAST_ID)));
}

// --- x2APIC MSRs (SDM 10.12.1.2 table 10-6) --------------------------------

#[test]
fn x2apic_msr_numbers_are_0x800_plus_offset_over_16() {
    let expected = [
        (APIC_ID, 0x802),
        (APIC_VERSION, 0x803),
        (APIC_TPR, 0x808),
        (APIC_PPR, 0x80A),
        (APIC_EOI, 0x80B),
        (APIC_LDR, 0x80D),
        (APIC_SVR, 0x80F),
        (APIC_ISR, 0x810),
        (APIC_TMR, 0x818),
        (APIC_IRR, 0x820),
        (APIC_ESR, 0x828),
        (APIC_ICR_LOW, 0x830),
        (APIC_LVT_TIMER, 0x832),
        (APIC_LVT_THERMAL, 0x833),
        (APIC_LVT_PERF, 0x834),
        (APIC_LVT_LINT0, 0x835),
        (APIC_LVT_LINT1, 0x836),
        (APIC_LVT_ERROR, 0x837),
        (APIC_TIMER_INITIAL_COUNT, 0x838),
        (APIC_TIMER_CURRENT_COUNT, 0x839),
        (APIC_TIMER_DIVIDE_CONFIG, 0x83E),
        (APIC_SELF_IPI, 0x83F),
    ];
    for (offset, msr) in expected {
        assert_eq!(x2apic_msr(offset), msr, "offset {offset:#x}");
    }
}

#[test]
fn x2apic_msrs_reach_each_register() {
    let mut lapic = x2apic_lapic(0x1234);
    let clock = FakeClock::default();
    assert_eq!(
        lapic.read_msr(0x802, &clock),
        Ok(0x1234),
        "full 32-bit x2APIC ID"
    );
    assert_eq!(lapic.read_msr(0x803, &clock), Ok(0x0005_0014));
    lapic
        .write_msr(0x808, 0x20, &clock)
        .expect("TPR is read-write");
    assert_eq!(lapic.tpr(), 0x20);
    assert_eq!(lapic.read_msr(0x80A, &clock), Ok(0x20), "PPR");
    lapic
        .write_msr(0x80F, 0x1F0, &clock)
        .expect("SVR is read-write");
    assert_eq!(lapic.spurious_vector(), 0xF0);
    for (index, msr) in (0x832..=0x837).enumerate() {
        let vector = 0x40 + index as u64;
        lapic
            .write_msr(msr, vector, &clock)
            .expect("LVTs are read-write");
        assert_eq!(lapic.read_msr(msr, &clock), Ok(vector));
    }
    lapic.write_msr(0x83E, 0b1011, &clock).expect("TDCR");
    assert_eq!(lapic.read_msr(0x83E, &clock), Ok(0b1011));
    lapic.write_msr(0x838, 500, &clock).expect("TMICT");
    assert_eq!(lapic.read_msr(0x838, &clock), Ok(500));
    assert_eq!(lapic.read_msr(0x839, &clock), Ok(500), "TMCCT");

    lapic.accept(0x61, TriggerMode::Level);
    lapic.accept(0x95, TriggerMode::Edge);
    assert_eq!(
        lapic.read_msr(0x820 + 4, &clock),
        Ok(1 << 0x15),
        "IRR bank 4"
    );
    assert_eq!(lapic.read_msr(0x818 + 3, &clock), Ok(1 << 1), "TMR bank 3");
    lapic.acknowledge();
    assert_eq!(
        lapic.read_msr(0x810 + 4, &clock),
        Ok(1 << 0x15),
        "ISR bank 4"
    );
    assert_eq!(
        lapic.write_msr(0x80B, 0, &clock),
        Ok(None),
        "EOI of an edge vector"
    );
    assert!(lapic.isr().is_empty());

    lapic.accept(5, TriggerMode::Edge);
    lapic
        .write_msr(0x828, 0, &clock)
        .expect("ESR write latches");
    assert_eq!(
        lapic.read_msr(0x828, &clock),
        Ok(u64::from(ESR_RECEIVE_ILLEGAL_VECTOR))
    );
}

#[test]
fn x2apic_icr_is_one_64_bit_register() {
    let mut lapic = x2apic_lapic(1);
    let clock = FakeClock::default();
    let icr = 0x0000_1234_0000_4031;
    let sent = lapic.write_msr(0x830, icr, &clock).expect("ICR write");
    let expected = Interrupt {
        vector: 0x31,
        delivery_mode: DeliveryMode::Fixed,
        trigger_mode: TriggerMode::Edge,
        destination: Destination::Physical(0x1234),
    };
    assert_eq!(sent, Some(ApicBusMessage::Ipi(expected)));
    assert_eq!(lapic.read_msr(0x830, &clock), Ok(icr));
    assert_eq!(
        lapic.write_msr(0x830, 0x1000 | 0x31, &clock),
        Err(LapicError::ReservedBits {
            msr: 0x830,
            value: 0x1031
        }),
        "delivery status is reserved in x2APIC mode"
    );
}

#[test]
fn x2apic_self_ipi_targets_the_sender() {
    let mut lapic = x2apic_lapic(7);
    let clock = FakeClock::default();
    let sent = lapic.write_msr(0x83F, 0x45, &clock).expect("SELF IPI");
    let Some(ApicBusMessage::Ipi(interrupt)) = sent else {
        panic!("SELF IPI must send an IPI, got {sent:?}");
    };
    assert_eq!(interrupt.vector, 0x45);
    assert_eq!(interrupt.destination, Destination::SelfOnly { sender: 7 });
    assert!(lapic.matches_destination(&interrupt.destination));
    assert!(!x2apic_lapic(8).matches_destination(&interrupt.destination));
    assert_eq!(
        lapic.write_msr(0x83F, 0x145, &clock),
        Err(LapicError::ReservedBits {
            msr: 0x83F,
            value: 0x145
        })
    );
    assert_eq!(
        lapic.read_msr(0x83F, &clock),
        Err(LapicError::WriteOnlyRegister { msr: 0x83F })
    );
}

#[test]
fn x2apic_read_only_write_only_and_reserved_msrs_fault() {
    let mut lapic = x2apic_lapic(1);
    let clock = FakeClock::default();
    let read_only = [
        0x802, 0x803, 0x80A, 0x80D, 0x810, 0x817, 0x818, 0x81F, 0x820, 0x827, 0x839,
    ];
    for msr in read_only {
        assert_eq!(
            lapic.write_msr(msr, 0, &clock),
            Err(LapicError::ReadOnlyRegister { msr })
        );
        assert!(
            lapic.read_msr(msr, &clock).is_ok(),
            "MSR {msr:#x} is readable"
        );
    }
    assert_eq!(
        lapic.read_msr(0x80B, &clock),
        Err(LapicError::WriteOnlyRegister { msr: 0x80B })
    );
    // APR, RRD, DFR, ICR high, CMCI (absent with max LVT 5), unused MSRs.
    for msr in [
        0x800, 0x809, 0x80C, 0x80E, 0x82F, 0x831, 0x83A, 0x840, 0x8FF,
    ] {
        assert_eq!(
            lapic.read_msr(msr, &clock),
            Err(LapicError::ReservedRegister { msr })
        );
        assert_eq!(
            lapic.write_msr(msr, 0, &clock),
            Err(LapicError::ReservedRegister { msr })
        );
    }
    assert_eq!(
        lapic.write_msr(0x80B, 1, &clock),
        Err(LapicError::ReservedBits {
            msr: 0x80B,
            value: 1
        })
    );
    assert_eq!(
        lapic.write_msr(0x828, 1, &clock),
        Err(LapicError::ReservedBits {
            msr: 0x828,
            value: 1
        })
    );
    assert_eq!(
        lapic.write_msr(0x808, 1 << 32, &clock),
        Err(LapicError::ReservedBits {
            msr: 0x808,
            value: 1 << 32
        })
    );
    assert_eq!(
        lapic.read_msr(0x900, &clock),
        Err(LapicError::NotLapicMsr { msr: 0x900 })
    );
}

#[test]
fn x2apic_msrs_fault_in_xapic_mode_and_mmio_is_off_in_x2apic_mode() {
    let xapic = enabled_lapic(1);
    let clock = FakeClock::default();
    assert_eq!(
        xapic.read_msr(0x808, &clock),
        Err(LapicError::X2apicDisabled { msr: 0x808 })
    );
    let mut x2apic = x2apic_lapic(1);
    x2apic.write_mmio(APIC_TPR, 0x40, &clock);
    assert_eq!(x2apic.tpr(), 0);
    assert_eq!(x2apic.read_mmio(APIC_VERSION, &clock), 0);
}

#[test]
fn apic_base_mode_transitions() {
    let mut lapic = enabled_lapic(1);
    let base = DEFAULT_MMIO_BASE;
    let clock = FakeClock::default();
    assert_eq!(
        lapic.read_msr(MSR_IA32_APIC_BASE, &clock),
        Ok(base | APIC_BASE_GLOBAL_ENABLE)
    );
    let x2apic = base | APIC_BASE_GLOBAL_ENABLE | APIC_BASE_X2APIC_ENABLE;
    assert!(
        lapic.set_apic_base(base | APIC_BASE_X2APIC_ENABLE).is_err(),
        "EXTD without EN is invalid"
    );
    lapic
        .write_msr(MSR_IA32_APIC_BASE, x2apic, &clock)
        .expect("xAPIC -> x2APIC");
    assert!(lapic.is_x2apic());
    assert!(
        lapic.set_apic_base(base | APIC_BASE_GLOBAL_ENABLE).is_err(),
        "x2APIC -> xAPIC is invalid"
    );
    lapic.accept(0x40, TriggerMode::Edge);
    lapic.set_apic_base(base).expect("x2APIC -> disabled");
    assert!(lapic.irr().is_empty(), "disabling resets the APIC");
    assert!(
        lapic.set_apic_base(x2apic).is_err(),
        "disabled -> x2APIC is invalid"
    );
    lapic
        .set_apic_base(base | APIC_BASE_GLOBAL_ENABLE)
        .expect("disabled -> xAPIC");
    assert!(
        lapic
            .set_apic_base(base | APIC_BASE_GLOBAL_ENABLE | 1)
            .is_err(),
        "reserved bit 0"
    );
    lapic
        .set_apic_base(0xFED0_0000 | APIC_BASE_GLOBAL_ENABLE)
        .expect("move the page");
    assert_eq!(lapic.mmio_base(), 0xFED0_0000);
}

// --- Timer (SDM 10.5.4) -----------------------------------------------------

#[test]
fn one_shot_timer_counts_down_with_the_divider_and_fires_once() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::at(1_000);
    lapic.write_mmio(APIC_LVT_TIMER, 0x30, &clock);
    lapic.write_mmio(APIC_TIMER_DIVIDE_CONFIG, 0b0011, &clock); // divide by 16
    lapic.write_mmio(APIC_TIMER_INITIAL_COUNT, 1_000, &clock);
    assert_eq!(lapic.timer_deadline_ns(), Some(1_000 + 16_000));
    clock.advance(8_000);
    assert_eq!(lapic.read_mmio(APIC_TIMER_CURRENT_COUNT, &clock), 500);
    assert!(!lapic.expire_timer(&clock), "not due yet");
    clock.set(17_000);
    assert!(lapic.expire_timer(&clock));
    assert_eq!(lapic.pending_vector(), Some(0x30));
    assert_eq!(lapic.timer_deadline_ns(), None);
    assert_eq!(lapic.read_mmio(APIC_TIMER_CURRENT_COUNT, &clock), 0);
    clock.advance(100_000);
    assert!(!lapic.expire_timer(&clock), "one-shot fires once");
}

#[test]
fn divide_configuration_selects_every_divisor() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::default();
    let table = [
        (0b0000, 2),
        (0b0001, 4),
        (0b0010, 8),
        (0b0011, 16),
        (0b1000, 32),
        (0b1001, 64),
        (0b1010, 128),
        (0b1011, 1),
    ];
    for (tdcr, divisor) in table {
        lapic.write_mmio(APIC_TIMER_DIVIDE_CONFIG, tdcr, &clock);
        lapic.write_mmio(APIC_TIMER_INITIAL_COUNT, 10, &clock);
        assert_eq!(
            lapic.timer_deadline_ns(),
            Some(10 * divisor),
            "TDCR {tdcr:#b}"
        );
    }
}

#[test]
fn divide_change_applies_from_the_next_initial_count() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::default();
    lapic.write_mmio(APIC_TIMER_DIVIDE_CONFIG, 0b1011, &clock); // divide by 1
    lapic.write_mmio(APIC_TIMER_INITIAL_COUNT, 1_000, &clock);
    lapic.write_mmio(APIC_TIMER_DIVIDE_CONFIG, 0b0000, &clock); // divide by 2
    clock.set(400);
    assert_eq!(lapic.read_mmio(APIC_TIMER_CURRENT_COUNT, &clock), 600);
    assert_eq!(lapic.timer_deadline_ns(), Some(1_000));
    lapic.write_mmio(APIC_TIMER_INITIAL_COUNT, 1_000, &clock);
    assert_eq!(lapic.timer_deadline_ns(), Some(400 + 2_000));
}

#[test]
fn periodic_timer_reloads_and_skips_missed_periods() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::default();
    lapic.write_mmio(APIC_LVT_TIMER, (1 << 17) | 0x31, &clock);
    lapic.write_mmio(APIC_TIMER_DIVIDE_CONFIG, 0b1011, &clock); // divide by 1
    lapic.write_mmio(APIC_TIMER_INITIAL_COUNT, 100, &clock);
    clock.set(100);
    assert!(lapic.expire_timer(&clock));
    assert_eq!(lapic.timer_deadline_ns(), Some(200));
    clock.set(130);
    assert_eq!(lapic.read_mmio(APIC_TIMER_CURRENT_COUNT, &clock), 70);
    clock.set(455);
    assert!(lapic.expire_timer(&clock));
    assert_eq!(
        lapic.timer_deadline_ns(),
        Some(500),
        "periods 300 and 400 coalesce"
    );
    assert_eq!(lapic.read_mmio(APIC_TIMER_CURRENT_COUNT, &clock), 45);
    lapic.write_mmio(APIC_TIMER_INITIAL_COUNT, 0, &clock);
    assert_eq!(lapic.timer_deadline_ns(), None, "TMICT 0 stops the timer");
}

#[test]
fn masked_timer_expires_without_an_interrupt() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::default();
    lapic.write_mmio(APIC_LVT_TIMER, LVT_MASKED | (1 << 17) | 0x31, &clock);
    lapic.write_mmio(APIC_TIMER_INITIAL_COUNT, 50, &clock);
    clock.set(100);
    assert!(!lapic.expire_timer(&clock));
    assert!(lapic.irr().is_empty());
    assert_eq!(
        lapic.timer_deadline_ns(),
        Some(200),
        "a masked periodic timer keeps counting"
    );
}

#[test]
fn tsc_deadline_timer() {
    let mut lapic = enabled_lapic(0);
    let clock = FakeClock::at(500);
    assert_eq!(
        lapic.write_msr(MSR_IA32_TSC_DEADLINE, 4_000, &clock),
        Ok(None)
    );
    assert_eq!(
        lapic.timer_deadline_ns(),
        None,
        "ignored outside TSC-deadline mode"
    );
    assert_eq!(lapic.read_msr(MSR_IA32_TSC_DEADLINE, &clock), Ok(0));

    lapic.write_mmio(APIC_LVT_TIMER, (0b10 << 17) | 0x32, &clock);
    assert_eq!(lapic.timer_mode(), TimerMode::TscDeadline);
    lapic
        .write_msr(MSR_IA32_TSC_DEADLINE, 4_001, &clock)
        .expect("deadline write");
    // 4001 ticks at 2 GHz: the TSC reaches it during ns 2001.
    assert_eq!(lapic.timer_deadline_ns(), Some(2_001));
    lapic.write_mmio(APIC_TIMER_INITIAL_COUNT, 5, &clock);
    assert_eq!(
        lapic.timer_deadline_ns(),
        Some(2_001),
        "TMICT is ignored in deadline mode"
    );
    clock.set(2_001);
    assert_eq!(lapic.config().tsc_at(2_001), 4_002);
    assert!(lapic.expire_timer(&clock));
    assert_eq!(lapic.pending_vector(), Some(0x32));
    assert_eq!(
        lapic.read_msr(MSR_IA32_TSC_DEADLINE, &clock),
        Ok(0),
        "cleared when it fires"
    );

    lapic
        .write_msr(MSR_IA32_TSC_DEADLINE, 9_000, &clock)
        .expect("deadline write");
    lapic
        .write_msr(MSR_IA32_TSC_DEADLINE, 0, &clock)
        .expect("deadline write");
    assert_eq!(lapic.timer_deadline_ns(), None, "0 disarms");

    lapic
        .write_msr(MSR_IA32_TSC_DEADLINE, 9_000, &clock)
        .expect("deadline write");
    lapic.write_mmio(APIC_LVT_TIMER, 0x32, &clock);
    assert_eq!(
        lapic.timer_deadline_ns(),
        None,
        "leaving deadline mode disarms"
    );
}

#[test]
fn init_reset_keeps_id_and_mode() {
    let mut lapic = x2apic_lapic(9);
    lapic.accept(0x40, TriggerMode::Edge);
    lapic.set_tpr(0x30);
    lapic.reset();
    assert!(lapic.irr().is_empty());
    assert_eq!(
        (lapic.tpr(), lapic.apic_id(), lapic.is_x2apic()),
        (0, 9, true)
    );
    assert!(!lapic.software_enabled());
}

#[test]
fn an_encoded_x2apic_icr_sends_what_it_encodes() {
    let mut lapic = x2apic_lapic(3);
    let sent = |lapic: &mut Lapic, mode, destination| {
        let icr = x2apic_icr(0xFB, mode, destination);
        match lapic.write_msr(x2apic_msr(APIC_ICR_LOW), icr, &FakeClock::at(0)) {
            Ok(Some(ApicBusMessage::Ipi(interrupt))) => interrupt,
            other => panic!("{destination:?}: {other:?}"),
        }
    };
    for (mode, destination) in [
        (DeliveryMode::Fixed, Destination::Physical(7)),
        (
            DeliveryMode::LowestPriority,
            Destination::Logical(0x0001_0006),
        ),
        (
            DeliveryMode::Fixed,
            Destination::AllExcludingSelf { sender: 3 },
        ),
        (DeliveryMode::Fixed, Destination::AllIncludingSelf),
        (DeliveryMode::Fixed, Destination::SelfOnly { sender: 3 }),
        (
            DeliveryMode::Nmi,
            Destination::Physical(X2APIC_BROADCAST_ID),
        ),
    ] {
        let interrupt = sent(&mut lapic, mode, destination);
        assert_eq!(interrupt.vector, 0xFB);
        assert_eq!(interrupt.delivery_mode, mode);
        assert_eq!(interrupt.destination, destination);
    }
}

// --- INIT, Start-Up, NMI (SDM 8.4, 10.6.1) -----------------------------------

#[test]
fn an_application_processor_waits_for_sipi_and_starts_at_its_vector() {
    let mut lapic = enabled_lapic(1);
    assert_eq!(lapic.startup_state(), StartupState::Running);
    lapic.hold_for_sipi();
    assert_eq!(lapic.startup_state(), StartupState::WaitForSipi);
    lapic.receive_sipi(0x9a);
    assert_eq!(
        lapic.startup_state(),
        StartupState::StartAt { vector: 0x9a }
    );
    lapic.started();
    // SDM 8.4.4.1: the second SIPI of the start-up sequence is ignored.
    lapic.receive_sipi(0x10);
    assert_eq!(lapic.startup_state(), StartupState::Running);
}

#[test]
fn init_resets_the_apic_keeps_its_mode_and_drops_pending_nmis() {
    let mut lapic = x2apic_lapic(2);
    dispatch(&mut lapic, 0x40);
    lapic.set_tpr(0x30);
    lapic.receive_nmi();
    lapic.receive_init();
    assert_eq!(lapic.startup_state(), StartupState::WaitForSipi);
    assert_eq!(lapic.isr().highest(), None);
    assert_eq!(lapic.tpr(), 0);
    assert!(!lapic.software_enabled(), "SVR back to its reset value");
    assert!(lapic.is_x2apic(), "IA32_APIC_BASE survives INIT");
    assert!(!lapic.nmi_pending());
}

#[test]
fn nmis_bypass_irr_and_the_software_enable_and_are_handed_over_once() {
    let mut lapic = Lapic::new(0, LapicConfig::new(BUS_HZ, TSC_HZ).expect("non-zero rates"));
    assert!(!lapic.software_enabled());
    lapic.receive_nmi();
    lapic.receive_nmi();
    assert_eq!(lapic.pending_vector(), None, "NMIs never enter IRR");
    assert!(lapic.nmi_pending());
    assert_eq!(lapic.take_nmis(), 2);
    assert_eq!(lapic.take_nmis(), 0);
}

#[test]
fn the_xapic_page_is_off_while_disabled_or_in_x2apic_mode() {
    let mut lapic = enabled_lapic(0);
    assert!(lapic.xapic_mmio_enabled());
    let base = lapic.apic_base();
    lapic
        .set_apic_base(base | APIC_BASE_X2APIC_ENABLE)
        .expect("xAPIC -> x2APIC");
    assert!(!lapic.xapic_mmio_enabled(), "SDM 10.12.1.2");
    lapic
        .set_apic_base(base & !(APIC_BASE_X2APIC_ENABLE | APIC_BASE_GLOBAL_ENABLE))
        .expect("x2APIC -> disabled");
    assert!(!lapic.xapic_mmio_enabled(), "SDM 10.4.3");
}

#[test]
fn an_apic_base_above_maxphyaddr_is_reserved() {
    let config = LapicConfig::new(BUS_HZ, TSC_HZ)
        .expect("non-zero rates")
        .with_physical_address_bits(40);
    let mut lapic = Lapic::new(0, config);
    let base = lapic.apic_base();
    assert!(matches!(
        lapic.set_apic_base(base | (1 << 40)),
        Err(LapicError::ReservedBits { .. })
    ));
    lapic
        .set_apic_base((base & 0xfff) | (1 << 39))
        .expect("below MAXPHYADDR");
}

#[test]
fn the_xapic_page_answers_only_at_the_base_apic_base_names() {
    const RELOCATED: u64 = 0xFED4_0000;
    let mut lapic = enabled_lapic(0);
    assert_eq!(
        lapic.mmio_offset(DEFAULT_MMIO_BASE + APIC_SVR),
        Some(APIC_SVR)
    );
    assert_eq!(lapic.mmio_offset(DEFAULT_MMIO_BASE + MMIO_SIZE), None);
    assert_eq!(lapic.mmio_offset(DEFAULT_MMIO_BASE - 4), None);
    // SDM 10.4.5: a new base moves the whole page.
    let flags = lapic.apic_base() & 0xFFF;
    lapic
        .set_apic_base(RELOCATED | flags)
        .expect("relocation keeps the mode");
    assert_eq!(lapic.mmio_offset(DEFAULT_MMIO_BASE + APIC_SVR), None);
    assert_eq!(
        lapic.mmio_offset(RELOCATED + APIC_VERSION),
        Some(APIC_VERSION)
    );
}

#[test]
fn narrow_reads_return_bytes_of_the_register_narrow_writes_are_dropped() {
    let clock = FakeClock::at(0);
    let mut lapic = enabled_lapic(0);
    let read = |lapic: &Lapic, offset, len| {
        let mut data = vec![0xAA; len];
        lapic.read_mmio_bytes(offset, &mut data, &clock);
        data
    };
    let version = APIC_VERSION_VALUE.to_le_bytes();
    assert_eq!(read(&lapic, APIC_VERSION, 4), version);
    assert_eq!(read(&lapic, APIC_VERSION, 1), version[..1]);
    assert_eq!(read(&lapic, APIC_VERSION + 2, 2), version[2..]);
    assert_eq!(read(&lapic, APIC_VERSION + 3, 1), version[3..]);
    // Past the register's dword, or 8 bytes wide: reads 0.
    assert_eq!(read(&lapic, APIC_VERSION + 3, 2), [0, 0]);
    assert_eq!(read(&lapic, APIC_VERSION, 8), [0; 8]);
    assert_eq!(read(&lapic, APIC_VERSION + 4, 4), [0; 4]);
    // Only an aligned 4-byte write reaches a register.
    for data in [&[0x10][..], &[0x10, 0], &[0x10, 0, 0, 0, 0, 0, 0, 0]] {
        assert_eq!(lapic.write_mmio_bytes(APIC_TPR, data, &clock), None);
        assert_eq!(lapic.tpr(), 0, "{}-byte write dropped", data.len());
    }
    lapic.write_mmio_bytes(APIC_TPR, &0x10u32.to_le_bytes(), &clock);
    assert_eq!(lapic.tpr(), 0x10);
}
