//! The ACPI power-management timer (ACPI 6.5 section 4.8.3.3): a free-running
//! 24-bit counter at 3.579545 MHz, read as a 32-bit port. Its port is what
//! the FADT's PM_TMR_BLK names (`multiboot::acpi`).

use std::time::Instant;

use crate::bus::{fill_le, DeviceError, PioDevice};

pub const PORT: u16 = 0x608;
pub const PORTS: u16 = 4;
/// ACPI 6.5 section 4.8.3.3: the timer's frequency.
pub const HZ: u64 = 3_579_545;
/// 24 bits: the FADT leaves TMR_VAL_EXT clear.
const MASK: u64 = (1 << 24) - 1;

pub struct PmTimer {
    start: Instant,
}

impl PmTimer {
    pub fn new() -> Self {
        PmTimer {
            start: Instant::now(),
        }
    }

    fn ticks(&self) -> u64 {
        let ns = self.start.elapsed().as_nanos();
        u64::try_from(ns * u128::from(HZ) / 1_000_000_000).unwrap_or(u64::MAX) & MASK
    }
}

impl Default for PmTimer {
    fn default() -> Self {
        Self::new()
    }
}

impl PioDevice for PmTimer {
    fn name(&self) -> &'static str {
        "ACPI PM timer"
    }

    fn read(&self, _cpu: usize, _offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        fill_le(data, self.ticks());
        Ok(())
    }

    fn write(&self, _cpu: usize, _offset: u16, _data: &[u8]) -> Result<(), DeviceError> {
        Ok(()) // read-only: writes have no effect
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_moves_forward_within_24_bits() {
        let timer = PmTimer::new();
        let read = || {
            let mut data = [0u8; 4];
            timer.read(0, 0, &mut data).expect("read");
            u32::from_le_bytes(data)
        };
        let first = read();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = read();
        assert!(second < 1 << 24 && first < 1 << 24);
        // 2 ms is ~7159 ticks; the counter wraps only after ~4.7 s.
        assert!(
            second.wrapping_sub(first) & 0xff_ffff >= 7_000,
            "{first} {second}"
        );
    }
}
