//! 8254 PIT: programming, read-back, IRQ0 timing and tick scaling.

mod common;

use common::{pit_control, FakeClock, PIT_ACCESS_LATCH, PIT_ACCESS_LOW, PIT_ACCESS_LOW_THEN_HIGH};
use dirq_arch::pit::*;

/// Channel 0, low then high byte, mode 2 (rate generator), binary.
const CH0_LOHI_MODE2: u8 = pit_control(0, PIT_ACCESS_LOW_THEN_HIGH, 2, false);
/// Channel 0, low then high byte, mode 0 (interrupt on terminal count).
const CH0_LOHI_MODE0: u8 = pit_control(0, PIT_ACCESS_LOW_THEN_HIGH, 0, false);
/// Counter latch command for channel 0.
const CH0_LATCH: u8 = pit_control(0, PIT_ACCESS_LATCH, 0, false);

/// Read-back command (channel field 3): bits 5 and 4 clear latch count and
/// status, bit 1 selects channel 0.
const READ_BACK_CH0_COUNT_AND_STATUS: u8 = pit_control(3, 0, 1, false);

fn program(pit: &mut Pit, control: u8, count: u16, clock: &FakeClock) {
    let [low, high] = count.to_le_bytes();
    pit.write_port(PORT_CONTROL, control, clock)
        .expect("control port");
    pit.write_port(PORT_CHANNEL0, low, clock)
        .expect("channel 0");
    pit.write_port(PORT_CHANNEL0, high, clock)
        .expect("channel 0");
}

fn read_count(pit: &mut Pit, clock: &FakeClock) -> u16 {
    let low = pit.read_port(PORT_CHANNEL0, clock).expect("channel 0");
    let high = pit.read_port(PORT_CHANNEL0, clock).expect("channel 0");
    u16::from_le_bytes([low, high])
}

fn ns_for_ticks(ticks: u64) -> u64 {
    (ticks * 1_000_000_000).div_ceil(PIT_FREQUENCY_HZ)
}

#[test]
fn rate_generator_interrupts_every_period() {
    let mut pit = Pit::new();
    let clock = FakeClock::at(10_000);
    program(&mut pit, CH0_LOHI_MODE2, 1193, &clock);
    assert_eq!(pit.reload_count(), 1193);
    assert_eq!(
        pit.period_ns(),
        999_848,
        "1193 ticks at 1,193,182 Hz, rounded up"
    );
    assert_eq!(pit.next_irq_ns(), Some(10_000 + 999_848));
    clock.advance(999_847);
    assert!(!pit.expire(&clock));
    clock.advance(1);
    assert!(pit.expire(&clock));
    assert_eq!(pit.next_irq_ns(), Some(10_000 + 2 * 999_848));
    clock.advance(3 * 999_848);
    assert!(pit.expire(&clock));
    assert_eq!(
        pit.next_irq_ns(),
        Some(10_000 + 5 * 999_848),
        "missed periods coalesce"
    );
}

#[test]
fn latched_count_is_read_low_then_high() {
    let mut pit = Pit::new();
    let clock = FakeClock::default();
    program(&mut pit, CH0_LOHI_MODE2, 1193, &clock);
    clock.set(500_000); // 596 ticks
    pit.write_port(PORT_CONTROL, CH0_LATCH, &clock)
        .expect("latch");
    clock.set(900_000);
    assert_eq!(
        read_count(&mut pit, &clock),
        1193 - 596,
        "the latch froze the count"
    );
    assert_eq!(
        read_count(&mut pit, &clock),
        1193 - 1073,
        "then reads follow the live count"
    );
}

#[test]
fn count_zero_means_65536() {
    let mut pit = Pit::new();
    let clock = FakeClock::default();
    program(&mut pit, CH0_LOHI_MODE2, 0, &clock);
    assert_eq!(pit.reload_count(), 65_536);
    assert_eq!(pit.period_ns(), ns_for_ticks(65_536));
}

#[test]
fn reload_scale_slows_the_counter_but_not_what_the_guest_reads() {
    let mut pit = Pit::new();
    pit.set_reload_scale(10).expect("non-zero scale");
    let clock = FakeClock::default();
    program(&mut pit, CH0_LOHI_MODE2, 1193, &clock);
    assert_eq!(pit.reload_count(), 1193, "the guest's count is unchanged");
    assert_eq!(pit.period_ns(), ns_for_ticks(11_930));
    assert_eq!(pit.next_irq_ns(), Some(ns_for_ticks(11_930)));
    clock.set(500_000); // 596 real ticks, 59 scaled
    assert_eq!(read_count(&mut pit, &clock), 1193 - 59);
    clock.set(pit.period_ns() - 1);
    let count = read_count(&mut pit, &clock);
    assert!(
        (1..=1193).contains(&count),
        "reads stay within the programmed range, got {count}"
    );
    assert_eq!(pit.set_reload_scale(0), Err(PitError::ZeroReloadScale));
}

#[test]
fn mode0_interrupts_once_then_the_counter_wraps() {
    let mut pit = Pit::new();
    let clock = FakeClock::default();
    program(&mut pit, CH0_LOHI_MODE0, 100, &clock);
    assert_eq!(pit.next_irq_ns(), Some(ns_for_ticks(100)));
    clock.set(ns_for_ticks(150));
    assert!(pit.expire(&clock));
    assert_eq!(pit.next_irq_ns(), None);
    assert_eq!(
        read_count(&mut pit, &clock),
        u16::try_from(100u32 + 65_536 - 150).unwrap()
    );
    clock.advance(10_000_000);
    assert!(!pit.expire(&clock));
}

#[test]
fn control_word_stops_the_channel_until_a_count_is_written() {
    let mut pit = Pit::new();
    let clock = FakeClock::default();
    program(&mut pit, CH0_LOHI_MODE2, 1193, &clock);
    pit.write_port(PORT_CONTROL, CH0_LOHI_MODE2, &clock)
        .expect("control");
    assert_eq!(pit.next_irq_ns(), None);
    pit.write_port(PORT_CHANNEL0, 0x10, &clock)
        .expect("low byte");
    assert_eq!(pit.next_irq_ns(), None, "waiting for the high byte");
    pit.write_port(PORT_CHANNEL0, 0x00, &clock)
        .expect("high byte");
    assert_eq!(pit.reload_count(), 0x10);
    assert!(pit.next_irq_ns().is_some());
}

#[test]
fn low_byte_only_access() {
    let mut pit = Pit::new();
    let clock = FakeClock::default();
    pit.write_port(
        PORT_CONTROL,
        pit_control(0, PIT_ACCESS_LOW, 2, false),
        &clock,
    )
    .expect("control");
    pit.write_port(PORT_CHANNEL0, 0x20, &clock).expect("count");
    assert_eq!(pit.reload_count(), 0x20);
    assert_eq!(pit.read_port(PORT_CHANNEL0, &clock), Ok(0x20));
    assert_eq!(
        pit.read_port(PORT_CHANNEL0, &clock),
        Ok(0x20),
        "every read is the low byte"
    );
}

#[test]
fn read_back_latches_status_then_count() {
    let mut pit = Pit::new();
    let clock = FakeClock::default();
    program(&mut pit, CH0_LOHI_MODE2, 1193, &clock);
    clock.set(500_000);
    // Read-back: latch count and status of channel 0.
    pit.write_port(PORT_CONTROL, READ_BACK_CH0_COUNT_AND_STATUS, &clock)
        .expect("read-back");
    clock.set(900_000);
    let status = pit.read_port(PORT_CHANNEL0, &clock).expect("status");
    assert_eq!(
        status,
        0x80 | (PIT_ACCESS_LOW_THEN_HIGH << 4) | (2 << 1),
        "output high, lo/hi access, mode 2, binary"
    );
    assert_eq!(read_count(&mut pit, &clock), 1193 - 596);
}

#[test]
fn bcd_counting() {
    let mut pit = Pit::new();
    let clock = FakeClock::default();
    program(&mut pit, CH0_LOHI_MODE2 | 1, 0x1000, &clock);
    assert_eq!(pit.reload_count(), 1000);
    assert_eq!(pit.period_ns(), ns_for_ticks(1000));
    clock.set(ns_for_ticks(1) * 25);
    assert_eq!(read_count(&mut pit, &clock), 0x0975, "1000 - 25 in BCD");
}

#[test]
fn channel_2_counts_without_raising_irq0() {
    let mut pit = Pit::new();
    let clock = FakeClock::default();
    pit.write_port(
        PORT_CONTROL,
        pit_control(2, PIT_ACCESS_LOW_THEN_HIGH, 0, false),
        &clock,
    )
    .expect("control");
    pit.write_port(PORT_CHANNEL2, 0xFF, &clock).expect("low");
    pit.write_port(PORT_CHANNEL2, 0xFF, &clock).expect("high");
    clock.set(ns_for_ticks(100));
    let low = pit.read_port(PORT_CHANNEL2, &clock).expect("low");
    let high = pit.read_port(PORT_CHANNEL2, &clock).expect("high");
    assert_eq!(u16::from_le_bytes([low, high]), 0xFFFF - 100);
    assert_eq!(pit.next_irq_ns(), None);
}

#[test]
fn bad_ports_are_errors() {
    let mut pit = Pit::new();
    let clock = FakeClock::default();
    assert_eq!(
        pit.write_port(0x44, 0, &clock),
        Err(PitError::NotPitPort { port: 0x44 })
    );
    assert_eq!(
        pit.read_port(0x3F, &clock),
        Err(PitError::NotPitPort { port: 0x3F })
    );
    assert_eq!(
        pit.read_port(PORT_CONTROL, &clock),
        Err(PitError::ControlPortWriteOnly)
    );
}
