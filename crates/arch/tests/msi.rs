//! MSI formats: SDM 10.11.1/10.11.2 (compatibility) and VT-d 5.1.2.2
//! (remappable).

use dirq_arch::interrupt::{DeliveryMode, Destination, Interrupt, TriggerMode};
use dirq_arch::msi::*;

#[test]
fn compatibility_format_decodes_every_field() {
    let message = MsiMessage {
        // Destination 0x12, logical, redirection hint.
        address: 0xFEE1_200C,
        // Vector 0x31, lowest priority, level, assert.
        data: 0x0000_C131,
    };
    let expected = Interrupt {
        vector: 0x31,
        delivery_mode: DeliveryMode::LowestPriority,
        trigger_mode: TriggerMode::Level,
        destination: Destination::Logical(0x12),
    };
    assert_eq!(message.decode(), Ok(MsiFormat::Compatibility(expected)));
}

#[test]
fn compose_then_decode_round_trips() {
    let interrupt = Interrupt {
        vector: 0xEC,
        delivery_mode: DeliveryMode::Nmi,
        trigger_mode: TriggerMode::Edge,
        destination: Destination::Physical(0xFF),
    };
    let message = MsiMessage::compose(&interrupt).expect("representable");
    assert_eq!(
        message,
        MsiMessage {
            address: 0xFEEF_F000,
            data: 0x04EC
        }
    );
    assert_eq!(message.decode(), Ok(MsiFormat::Compatibility(interrupt)));
}

#[test]
fn shorthands_and_wide_ids_cannot_be_composed() {
    for destination in [Destination::AllIncludingSelf, Destination::Physical(0x100)] {
        let interrupt = Interrupt {
            vector: 0x40,
            delivery_mode: DeliveryMode::Fixed,
            trigger_mode: TriggerMode::Edge,
            destination,
        };
        assert_eq!(
            MsiMessage::compose(&interrupt),
            Err(MsiError::UnrepresentableDestination { destination })
        );
    }
}

#[test]
fn bad_messages_are_errors() {
    let decode = |address, data| MsiMessage { address, data }.decode();
    assert_eq!(
        decode(0xFED0_0000, 0x40),
        Err(MsiError::NotInterruptAddress {
            address: 0xFED0_0000
        })
    );
    assert_eq!(
        decode(0x1_FEE0_0000, 0x40),
        Err(MsiError::NotInterruptAddress {
            address: 0x1_FEE0_0000
        })
    );
    assert_eq!(
        decode(0xFEE0_0020, 0x40),
        Err(MsiError::ReservedAddressBits {
            address: 0xFEE0_0020
        })
    );
    assert_eq!(
        decode(0xFEE0_0000, 0x0340),
        Err(MsiError::ReservedDeliveryMode { data: 0x0340 })
    );
    assert_eq!(
        decode(0xFEE0_0000, 0x1_0040),
        Err(MsiError::ReservedDataBits { data: 0x1_0040 })
    );
}

#[test]
fn remappable_format_yields_the_handle() {
    // handle[14:0] = address[19:5] = 0x1234, handle[15] = address[2], SHV clear.
    let message = MsiMessage {
        address: 0xFEE0_0000 | (0x1234 << 5) | (1 << 4) | (1 << 2),
        data: 0,
    };
    let expected = RemappableMsi {
        handle: 0x9234,
        subhandle: None,
    };
    assert_eq!(message.decode(), Ok(MsiFormat::Remappable(expected)));
    assert_eq!(expected.interrupt_index(), 0x9234);
    assert_eq!(MsiMessage::compose_remappable(&expected), message);
}

#[test]
fn remappable_subhandle_adds_to_the_index() {
    let msi = RemappableMsi {
        handle: 0xFFF0,
        subhandle: Some(0x20),
    };
    let message = MsiMessage::compose_remappable(&msi);
    assert_eq!(message.address & (1 << 3), 1 << 3, "SHV set");
    assert_eq!(message.decode(), Ok(MsiFormat::Remappable(msi)));
    assert_eq!(
        msi.interrupt_index(),
        0x1_0010,
        "the index may exceed the table"
    );
    let reserved = MsiMessage {
        data: 0x1_0000,
        ..message
    };
    assert_eq!(
        reserved.decode(),
        Err(MsiError::ReservedDataBits { data: 0x1_0000 })
    );
}
