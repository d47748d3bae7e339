//! APIC-bus routing rules (SDM 10.6.1, 10.6.2, 10.12.9-10), one test per rule.

mod common;

use common::FakeClock;
use dirq_arch::bus::{route, BusError, Targets};
use dirq_arch::interrupt::{
    DeliveryMode, Destination, Interrupt, TriggerMode, X2APIC_BROADCAST_ID, XAPIC_BROADCAST_ID,
};
use dirq_arch::lapic::{
    Lapic, LapicConfig, APIC_BASE_X2APIC_ENABLE, APIC_DFR, APIC_LDR, SVR_APIC_SOFTWARE_ENABLE,
};

const VECTOR: u8 = 0x41;
const DFR_CLUSTER_MODEL: u32 = 0x0FFF_FFFF;

fn xapic(apic_id: u32) -> Lapic {
    let mut lapic = Lapic::new(
        apic_id,
        LapicConfig::new(1_000_000_000, 2_000_000_000).expect("non-zero rates"),
    );
    lapic.set_svr(SVR_APIC_SOFTWARE_ENABLE | 0xFF);
    lapic
}

fn xapic_with_ldr(apic_id: u32, logical_id: u8, cluster_model: bool) -> Lapic {
    let mut lapic = xapic(apic_id);
    let clock = FakeClock::default();
    lapic.write_mmio(APIC_LDR, u32::from(logical_id) << 24, &clock);
    if cluster_model {
        lapic.write_mmio(APIC_DFR, DFR_CLUSTER_MODEL, &clock);
    }
    lapic
}

fn x2apic(apic_id: u32) -> Lapic {
    let mut lapic = xapic(apic_id);
    let base = lapic.apic_base() | APIC_BASE_X2APIC_ENABLE;
    lapic.set_apic_base(base).expect("xAPIC -> x2APIC");
    lapic
}

fn interrupt(delivery_mode: DeliveryMode, destination: Destination) -> Interrupt {
    Interrupt {
        vector: VECTOR,
        delivery_mode,
        trigger_mode: TriggerMode::Edge,
        destination,
    }
}

fn fixed(destination: Destination) -> Interrupt {
    interrupt(DeliveryMode::Fixed, destination)
}

fn indices(targets: &Targets) -> Vec<usize> {
    targets.iter().collect()
}

#[test]
fn physical_destination_reaches_the_lapic_with_that_id() {
    // Bus position and APIC ID differ: routing goes by ID (SDM 10.6.2.1).
    let lapics = [xapic(3), xapic(1), xapic(2)];
    let targets = route(&fixed(Destination::Physical(1)), &lapics).expect("valid");
    assert_eq!(targets, Targets::One(1));
    let nobody = route(&fixed(Destination::Physical(7)), &lapics).expect("valid");
    assert_eq!(nobody, Targets::None);
}

#[test]
fn xapic_physical_broadcast_reaches_everyone() {
    let lapics = [xapic(0), xapic(1), xapic(2)];
    let targets = route(&fixed(Destination::Physical(XAPIC_BROADCAST_ID)), &lapics);
    assert_eq!(indices(&targets.expect("valid")), vec![0, 1, 2]);
}

#[test]
fn x2apic_physical_0xff_is_an_id_and_only_all_ones_broadcasts() {
    // SDM 10.12.9: in x2APIC mode 0xFF is an ordinary 32-bit APIC ID.
    let lapics: Vec<Lapic> = (0..300).map(x2apic).collect();
    let to_255 = route(&fixed(Destination::Physical(0xFF)), &lapics).expect("valid");
    assert_eq!(to_255, Targets::One(255));
    let everyone = route(&fixed(Destination::Physical(X2APIC_BROADCAST_ID)), &lapics);
    assert_eq!(everyone.expect("valid").iter().count(), 300);
}

#[test]
fn logical_flat_model_reaches_every_lapic_sharing_a_bit() {
    // SDM 10.6.2.2 flat model: the 8-bit mask is compared with each LDR.
    let lapics = [
        xapic_with_ldr(0, 0b0001, false),
        xapic_with_ldr(1, 0b0010, false),
        xapic_with_ldr(2, 0b0100, false),
    ];
    let targets = route(&fixed(Destination::Logical(0b0101)), &lapics).expect("valid");
    assert_eq!(indices(&targets), vec![0, 2]);
}

#[test]
fn logical_cluster_model_needs_the_same_cluster_and_a_member_bit() {
    // SDM 10.6.2.2 cluster model: cluster in bits 7:4, members in 3:0.
    let lapics = [
        xapic_with_ldr(0, 0x11, true),
        xapic_with_ldr(1, 0x12, true),
        xapic_with_ldr(2, 0x21, true),
    ];
    let targets = route(&fixed(Destination::Logical(0x13)), &lapics).expect("valid");
    assert_eq!(indices(&targets), vec![0, 1]);
    let other_cluster = route(&fixed(Destination::Logical(0x21)), &lapics).expect("valid");
    assert_eq!(other_cluster, Targets::One(2));
}

#[test]
fn x2apic_logical_cluster_is_derived_from_the_id() {
    // SDM 10.12.10.2: cluster = ID[19:4], member bit = 1 << ID[3:0].
    let lapics: Vec<Lapic> = (0..40).map(x2apic).collect();
    let cluster_1_members_0_and_2 = (1 << 16) | 0b101;
    let targets = route(
        &fixed(Destination::Logical(cluster_1_members_0_and_2)),
        &lapics,
    );
    assert_eq!(indices(&targets.expect("valid")), vec![16, 18]);
}

#[test]
fn lowest_priority_picks_the_lowest_processor_priority() {
    // SDM 10.6.2.4: among the addressed LAPICs, the lowest priority wins.
    let mut lapics = [
        xapic_with_ldr(0, 0b01, false),
        xapic_with_ldr(1, 0b10, false),
    ];
    lapics[0].set_tpr(0x50);
    lapics[1].set_tpr(0x20);
    let lowest = interrupt(DeliveryMode::LowestPriority, Destination::Logical(0b11));
    assert_eq!(route(&lowest, &lapics), Ok(Targets::One(1)));
    lapics[1].set_tpr(0x70);
    assert_eq!(route(&lowest, &lapics), Ok(Targets::One(0)));
}

#[test]
fn lowest_priority_ties_go_to_the_first_on_the_bus() {
    let lapics = [
        xapic_with_ldr(0, 0b01, false),
        xapic_with_ldr(1, 0b10, false),
    ];
    let lowest = interrupt(DeliveryMode::LowestPriority, Destination::Logical(0b11));
    assert_eq!(route(&lowest, &lapics), Ok(Targets::One(0)));
}

#[test]
fn nmi_reaches_every_addressed_lapic() {
    let lapics = [xapic(0), xapic(1), xapic(2)];
    let nmi = interrupt(
        DeliveryMode::Nmi,
        Destination::AllExcludingSelf { sender: 1 },
    );
    assert_eq!(indices(&route(&nmi, &lapics).expect("valid")), vec![0, 2]);
}

#[test]
fn self_shorthand_reaches_only_the_sender() {
    let lapics = [xapic(0), xapic(1), xapic(2)];
    let to_self = fixed(Destination::SelfOnly { sender: 2 });
    assert_eq!(route(&to_self, &lapics), Ok(Targets::One(2)));
}

#[test]
fn all_including_self_reaches_everyone() {
    let lapics = [xapic(0), xapic(1)];
    let all = fixed(Destination::AllIncludingSelf);
    assert_eq!(indices(&route(&all, &lapics).expect("valid")), vec![0, 1]);
}

#[test]
fn self_and_all_including_self_carry_fixed_only() {
    // SDM 10.6.1 table 10-3.
    let lapics = [xapic(0)];
    for destination in [
        Destination::SelfOnly { sender: 0 },
        Destination::AllIncludingSelf,
    ] {
        let nmi = interrupt(DeliveryMode::Nmi, destination);
        assert_eq!(
            route(&nmi, &lapics),
            Err(BusError::ShorthandNeedsFixed {
                mode: DeliveryMode::Nmi,
                destination
            })
        );
    }
}

#[test]
fn lowest_priority_broadcast_is_refused() {
    let lapics = [xapic(0), xapic(1)];
    let broadcast = interrupt(
        DeliveryMode::LowestPriority,
        Destination::AllExcludingSelf { sender: 0 },
    );
    assert_eq!(
        route(&broadcast, &lapics),
        Err(BusError::LowestPriorityBroadcast)
    );
}
