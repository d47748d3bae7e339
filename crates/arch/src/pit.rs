//! Intel 8254 programmable interval timer (8254 datasheet): three channels
//! behind ports 0x40-0x43. Channel 0 drives IRQ0, whose edges
//! [`Pit::expire`] reports; channels 1 and 2 count and read back but signal
//! nothing. The gate inputs are modelled as permanently high, so the
//! gate-triggered modes 1 and 5 never start counting.
//!
//! Tick scaling ([`Pit::set_reload_scale`]): the counters run `k` times
//! slower than 1,193,182 Hz while the guest reads back counts in the range it
//! programmed, so a VMM can stretch a guest's timer tick without the guest
//! noticing anything but time.

use std::num::NonZeroU32;

use crate::clock::Clock;

/// Input clock of every channel.
pub const PIT_FREQUENCY_HZ: u64 = 1_193_182;
pub const PORT_CHANNEL0: u16 = 0x40;
pub const PORT_CHANNEL1: u16 = 0x41;
pub const PORT_CHANNEL2: u16 = 0x42;
pub const PORT_CONTROL: u16 = 0x43;

/// Control word fields (8254 datasheet, "Control Word Format").
const CONTROL_CHANNEL_SHIFT: u8 = 6;
const CONTROL_READ_BACK: u8 = 0b11;
const CONTROL_ACCESS_SHIFT: u8 = 4;
const CONTROL_MODE_SHIFT: u8 = 1;
const CONTROL_BCD: u8 = 1;
/// Read-back command: bit 5 clear latches counts, bit 4 clear latches
/// status, bits 3:1 select channels 2, 1, 0.
const READ_BACK_NO_COUNT: u8 = 1 << 5;
const READ_BACK_NO_STATUS: u8 = 1 << 4;
/// Status byte: output pin state in bit 7 (null count, bit 6, is always 0
/// because a written count loads at once).
const STATUS_OUTPUT: u8 = 1 << 7;

const NS_PER_SECOND: u128 = 1_000_000_000;
/// A written count of 0 stands for the maximum: 2^16 in binary, 10^4 in BCD.
const BINARY_MAX_COUNT: u32 = 1 << 16;
const BCD_MAX_COUNT: u32 = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PitError {
    #[error("port {port:#x} does not belong to the PIT (0x40-0x43)")]
    NotPitPort { port: u16 },
    #[error("the PIT control port 0x43 is write-only")]
    ControlPortWriteOnly,
    #[error("the reload scale must be at least 1")]
    ZeroReloadScale,
}

/// Counter modes (8254 datasheet, "Modes"); 6 and 7 alias 2 and 3.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum PitMode {
    #[default]
    InterruptOnTerminalCount,
    HardwareOneShot,
    RateGenerator,
    SquareWave,
    SoftwareStrobe,
    HardwareStrobe,
}

impl PitMode {
    fn from_bits(bits: u8) -> PitMode {
        match bits & 0b111 {
            0 => PitMode::InterruptOnTerminalCount,
            1 => PitMode::HardwareOneShot,
            2 | 6 => PitMode::RateGenerator,
            3 | 7 => PitMode::SquareWave,
            4 => PitMode::SoftwareStrobe,
            _ => PitMode::HardwareStrobe,
        }
    }

    fn bits(self) -> u8 {
        self as u8
    }

    fn periodic(self) -> bool {
        matches!(self, PitMode::RateGenerator | PitMode::SquareWave)
    }

    fn gate_triggered(self) -> bool {
        matches!(self, PitMode::HardwareOneShot | PitMode::HardwareStrobe)
    }
}

/// Which bytes a data-port access moves (control word bits 5:4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum AccessMode {
    LowByte,
    HighByte,
    #[default]
    LowThenHigh,
}

impl AccessMode {
    fn bits(self) -> u8 {
        match self {
            AccessMode::LowByte => 0b01,
            AccessMode::HighByte => 0b10,
            AccessMode::LowThenHigh => 0b11,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Channel {
    mode: PitMode,
    access: AccessMode,
    bcd: bool,
    /// The count as written (0 stands for the maximum).
    written_count: u16,
    /// Low byte received, high byte awaited (LowThenHigh writes).
    pending_low_byte: Option<u8>,
    /// Next read returns the high byte (LowThenHigh reads).
    read_high_next: bool,
    latched_count: Option<u16>,
    latched_status: Option<u8>,
    /// When the current count started; `None` while not counting.
    start_ns: Option<u64>,
    /// The reload scale in force when the count was loaded.
    scale: u32,
    /// One count in ns at that scale.
    period_ns: u64,
    /// Channel 0 only: the next IRQ0 edge.
    next_irq_ns: Option<u64>,
}

impl Channel {
    /// The number of input ticks in one count: 1..=65536 (or 10000 in BCD).
    fn effective_count(&self) -> u32 {
        match (self.bcd, self.written_count) {
            (false, 0) => BINARY_MAX_COUNT,
            (true, 0) => BCD_MAX_COUNT,
            (false, count) => u32::from(count),
            (true, count) => from_bcd(count).max(1),
        }
    }

    /// Counter value and output pin at `ticks` input ticks after the count
    /// was loaded (8254 datasheet, mode descriptions).
    fn state_after(&self, ticks: u64) -> (u32, bool) {
        let count = u64::from(self.effective_count());
        let modulus = if self.bcd {
            u64::from(BCD_MAX_COUNT)
        } else {
            u64::from(BINARY_MAX_COUNT)
        };
        let (value, output) = match self.mode {
            // Counts down once, then keeps wrapping through the full range;
            // mode 0's output rises at terminal count and stays high, mode
            // 4's strobes low for one tick.
            PitMode::InterruptOnTerminalCount | PitMode::SoftwareStrobe => {
                let value = (count + modulus - ticks % modulus) % modulus;
                let output = match self.mode {
                    PitMode::InterruptOnTerminalCount => ticks >= count,
                    _ => ticks != count,
                };
                (value, output)
            }
            // N, N-1, ..., 1, N, ...: output low while the count is 1.
            PitMode::RateGenerator => {
                let value = count - ticks % count;
                (value, value != 1)
            }
            // Counts down by two through each half period; output high for
            // the first half (the longer one when N is odd).
            PitMode::SquareWave => {
                let phase = ticks % count;
                let first_half = count.div_ceil(2);
                let (within, output) = if phase < first_half {
                    (phase, true)
                } else {
                    (phase - first_half, false)
                };
                (count - 2 * within, output)
            }
            PitMode::HardwareOneShot | PitMode::HardwareStrobe => (count, true),
        };
        let value = u32::try_from(value).expect("at most the count, which came from a u32");
        (value, output)
    }
}

/// The 8254.
#[derive(Clone, Debug)]
pub struct Pit {
    channels: [Channel; 3],
    reload_scale: NonZeroU32,
}

impl Default for Pit {
    fn default() -> Self {
        Pit::new()
    }
}

impl Pit {
    pub fn new() -> Pit {
        Pit {
            channels: [Channel::default(); 3],
            reload_scale: NonZeroU32::MIN,
        }
    }

    /// Makes every counter run `scale` times slower from its next count
    /// load on (a VMM sets it before the guest programs the PIT); 1 restores
    /// real time.
    pub fn set_reload_scale(&mut self, scale: u32) -> Result<(), PitError> {
        self.reload_scale = NonZeroU32::new(scale).ok_or(PitError::ZeroReloadScale)?;
        Ok(())
    }

    pub fn reload_scale(&self) -> u32 {
        self.reload_scale.get()
    }

    /// An 8-bit OUT to ports 0x40-0x43.
    pub fn write_port(&mut self, port: u16, value: u8, clock: &dyn Clock) -> Result<(), PitError> {
        let now = clock.now_ns();
        if port == PORT_CONTROL {
            self.write_control(value, now);
            return Ok(());
        }
        let index = Self::channel_index(port)?;
        let channel = &mut self.channels[index];
        let count = match (channel.access, channel.pending_low_byte.take()) {
            (AccessMode::LowByte, _) => u16::from(value),
            (AccessMode::HighByte, _) => u16::from(value) << 8,
            (AccessMode::LowThenHigh, None) => {
                channel.pending_low_byte = Some(value);
                return Ok(());
            }
            (AccessMode::LowThenHigh, Some(low)) => u16::from_le_bytes([low, value]),
        };
        channel.written_count = count;
        self.load_count(index, now);
        Ok(())
    }

    /// An 8-bit IN from ports 0x40-0x42: a latched status, else a latched
    /// count, else the live count, one byte at a time as the access mode
    /// says.
    pub fn read_port(&mut self, port: u16, clock: &dyn Clock) -> Result<u8, PitError> {
        if port == PORT_CONTROL {
            return Err(PitError::ControlPortWriteOnly);
        }
        let index = Self::channel_index(port)?;
        let live = self.count_and_output(index, clock.now_ns()).0;
        let channel = &mut self.channels[index];
        if let Some(status) = channel.latched_status.take() {
            return Ok(status);
        }
        let count = channel.latched_count.unwrap_or(live);
        let [low, high] = count.to_le_bytes();
        let (byte, done) = match channel.access {
            AccessMode::LowByte => (low, true),
            AccessMode::HighByte => (high, true),
            AccessMode::LowThenHigh if channel.read_high_next => (high, true),
            AccessMode::LowThenHigh => (low, false),
        };
        channel.read_high_next = !done;
        if done {
            channel.latched_count = None;
        }
        Ok(byte)
    }

    fn channel_index(port: u16) -> Result<usize, PitError> {
        match port {
            PORT_CHANNEL0..=PORT_CHANNEL2 => Ok(usize::from(port - PORT_CHANNEL0)),
            _ => Err(PitError::NotPitPort { port }),
        }
    }

    fn write_control(&mut self, value: u8, now: u64) {
        let select = value >> CONTROL_CHANNEL_SHIFT;
        if select == CONTROL_READ_BACK {
            self.read_back(value, now);
            return;
        }
        let index = usize::from(select);
        let access = match (value >> CONTROL_ACCESS_SHIFT) & 0b11 {
            0b00 => {
                // Counter latch command: a pending latch is kept.
                let count = self.count_and_output(index, now).0;
                self.channels[index].latched_count.get_or_insert(count);
                return;
            }
            0b01 => AccessMode::LowByte,
            0b10 => AccessMode::HighByte,
            _ => AccessMode::LowThenHigh,
        };
        // A control word stops the channel until its count is written.
        self.channels[index] = Channel {
            mode: PitMode::from_bits(value >> CONTROL_MODE_SHIFT),
            access,
            bcd: value & CONTROL_BCD != 0,
            ..Channel::default()
        };
    }

    /// Read-back command (8254 datasheet, "Read-Back Command").
    fn read_back(&mut self, value: u8, now: u64) {
        for index in 0..self.channels.len() {
            if value & (1 << (index + 1)) == 0 {
                continue;
            }
            let (count, output) = self.count_and_output(index, now);
            let channel = &mut self.channels[index];
            if value & READ_BACK_NO_COUNT == 0 {
                channel.latched_count.get_or_insert(count);
            }
            if value & READ_BACK_NO_STATUS == 0 {
                let output_bit = if output { STATUS_OUTPUT } else { 0 };
                let status = output_bit
                    | (channel.access.bits() << CONTROL_ACCESS_SHIFT)
                    | (channel.mode.bits() << CONTROL_MODE_SHIFT)
                    | u8::from(channel.bcd);
                channel.latched_status.get_or_insert(status);
            }
        }
    }

    /// Starts counting the written count now; channel 0 schedules its first
    /// IRQ0 edge one count away. Re-writing the count restarts at once (the
    /// 8254 waits for the end of the period in modes 2 and 3).
    fn load_count(&mut self, index: usize, now: u64) {
        let period_ns = self.scaled_count_ns(index);
        let scale = self.reload_scale.get();
        let channel = &mut self.channels[index];
        if channel.mode.gate_triggered() {
            return;
        }
        channel.start_ns = Some(now);
        channel.scale = scale;
        channel.period_ns = period_ns;
        if index == 0 {
            channel.next_irq_ns = Some(now.saturating_add(period_ns));
        }
    }

    /// The live count as the guest reads it (BCD-encoded in BCD mode) and the
    /// output pin.
    fn count_and_output(&self, index: usize, now: u64) -> (u16, bool) {
        let channel = &self.channels[index];
        let Some(start) = channel.start_ns else {
            // Not counting: the counter holds the written count.
            return (
                channel.written_count,
                channel.mode != PitMode::InterruptOnTerminalCount,
            );
        };
        let elapsed = u128::from(now.saturating_sub(start));
        let ticks =
            elapsed * u128::from(PIT_FREQUENCY_HZ) / (NS_PER_SECOND * u128::from(channel.scale));
        let (value, output) = channel.state_after(u64::try_from(ticks).unwrap_or(u64::MAX));
        let encoded = if channel.bcd {
            to_bcd(value)
        } else {
            count_register(value)
        };
        (encoded, output)
    }

    /// Channel 0's count in input ticks: 1..=65536 (10000 in BCD mode).
    pub fn reload_count(&self) -> u32 {
        self.channels[0].effective_count()
    }

    /// Channel 0's count in ns, including the reload scale: the IRQ0 period
    /// in modes 2 and 3. While counting, the scale in force at the load;
    /// otherwise the current one.
    pub fn period_ns(&self) -> u64 {
        let channel = &self.channels[0];
        match channel.start_ns {
            Some(_) => channel.period_ns,
            None => self.scaled_count_ns(0),
        }
    }

    /// One count of channel `index` in ns at the current reload scale.
    fn scaled_count_ns(&self, index: usize) -> u64 {
        let ticks = u128::from(self.channels[index].effective_count())
            * u128::from(self.reload_scale.get());
        u64::try_from((ticks * NS_PER_SECOND).div_ceil(u128::from(PIT_FREQUENCY_HZ)))
            .unwrap_or(u64::MAX)
    }

    /// Absolute clock time of the next IRQ0 edge; `None` when none is due.
    pub fn next_irq_ns(&self) -> Option<u64> {
        self.channels[0].next_irq_ns
    }

    /// Call at or after [`Self::next_irq_ns`]: returns whether IRQ0 rose.
    /// Modes 2 and 3 re-arm for the next period after now (missed periods
    /// coalesce); modes 0 and 4 signal once per count written.
    pub fn expire(&mut self, clock: &dyn Clock) -> bool {
        let now = clock.now_ns();
        let channel = &mut self.channels[0];
        let period = channel.period_ns.max(1);
        let Some(due) = channel.next_irq_ns.filter(|&due| due <= now) else {
            return false;
        };
        channel.next_irq_ns = if channel.mode.periodic() {
            let periods_elapsed = (now - due) / period + 1;
            Some(due.saturating_add(periods_elapsed.saturating_mul(period)))
        } else {
            None
        };
        true
    }
}

/// Decodes a 4-digit BCD count; invalid digits count as their binary value,
/// which is what the hardware's digit counters do with them too.
fn from_bcd(value: u16) -> u32 {
    (0..4).rev().fold(0, |acc, digit| {
        acc * 10 + u32::from((value >> (digit * 4)) & 0xF)
    })
}

/// Encodes a count below 10000 as 4 BCD digits.
/// The 16-bit count register holding `value` (1..=65536): a full count of
/// 65536 reads as 0, as the 8254 loads it.
#[allow(clippy::cast_possible_truncation)] // 65536 wrapping to 0 is the intent.
fn count_register(value: u32) -> u16 {
    value as u16
}

fn to_bcd(value: u32) -> u16 {
    (0..4).fold(0, |acc, digit| {
        acc | (((value / 10u32.pow(digit)) % 10) as u16) << (digit * 4)
    })
}
