//! What a PC guest expects of the two 8259A PICs when it does not use
//! them: the initialization sequence is accepted and the interrupt mask
//! register (OCW1) reads back what was written (8259A datasheet,
//! "Programming the 8259A"). They raise nothing: interrupts reach the
//! vCPUs through the IOAPIC. Beside them, the PIIX edge/level control
//! registers (ELCR, ports 0x4d0-0x4d1, PIIX3 datasheet 2.3.2), read/write.

use std::sync::Mutex;

use crate::bus::{fill_le, le_u8, DeviceError, PioDevice};

pub const MASTER_PORT: u16 = 0x20;
pub const SLAVE_PORT: u16 = 0xa0;
pub const PIC_PORTS: u16 = 2;
pub const ELCR_PORT: u16 = 0x4d0;
pub const ELCR_PORTS: u16 = 2;

/// ICW1 (written at the even port) has bit 4 set; bit 0 says ICW4
/// follows, bit 1 that the PIC is alone (no ICW3).
const ICW1: u8 = 1 << 4;
const ICW1_NEEDS_ICW4: u8 = 1 << 0;
const ICW1_SINGLE: u8 = 1 << 1;

#[derive(Default)]
struct State {
    mask: u8,
    /// Initialization words still expected at the odd port.
    icws_left: u8,
}

/// One 8259A's command and data ports.
#[derive(Default)]
pub struct PicMasks {
    state: Mutex<State>,
}

impl PicMasks {
    pub fn mask(&self) -> u8 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).mask
    }
}

impl PioDevice for PicMasks {
    fn name(&self) -> &'static str {
        "8259A PIC"
    }

    fn read(&self, _cpu: usize, offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        // The even port reads IRR or ISR: nothing is ever pending here.
        let value = if offset == 1 { self.mask() } else { 0 };
        fill_le(data, u64::from(value));
        Ok(())
    }

    fn write(&self, _cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        let value = le_u8(data);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if offset == 0 {
            if value & ICW1 != 0 {
                // ICW2 always, ICW3 unless single, ICW4 if asked; the
                // mask is cleared (8259A datasheet, ICW1).
                state.icws_left =
                    1 + u8::from(value & ICW1_SINGLE == 0) + u8::from(value & ICW1_NEEDS_ICW4 != 0);
                state.mask = 0;
            }
            // OCW2/OCW3 (EOI, read-register select): nothing to model.
        } else if state.icws_left > 0 {
            state.icws_left -= 1;
        } else {
            state.mask = value;
        }
        Ok(())
    }
}

/// The two ELCR bytes, one bit per ISA IRQ.
#[derive(Default)]
pub struct Elcr {
    bits: Mutex<[u8; 2]>,
}

impl PioDevice for Elcr {
    fn name(&self) -> &'static str {
        "ELCR"
    }

    fn read(&self, _cpu: usize, offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        let bits = self.bits.lock().unwrap_or_else(|p| p.into_inner());
        for (index, byte) in data.iter_mut().enumerate() {
            *byte = bits
                .get(usize::from(offset) + index)
                .copied()
                .unwrap_or(0xff);
        }
        Ok(())
    }

    fn write(&self, _cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        let mut bits = self.bits.lock().unwrap_or_else(|p| p.into_inner());
        for (index, byte) in data.iter().enumerate() {
            if let Some(slot) = bits.get_mut(usize::from(offset) + index) {
                *slot = *byte;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_survives_the_initialization_words() {
        let pic = PicMasks::default();
        pic.write(0, 1, &[0xff]).expect("OCW1");
        assert_eq!(pic.mask(), 0xff);
        // ICW1 (cascade, ICW4 needed), ICW2, ICW3, ICW4: none is a mask.
        for (offset, value) in [(0, 0x11), (1, 0x20), (1, 0x04), (1, 0x01)] {
            pic.write(0, offset, &[value]).expect("ICW");
        }
        assert_eq!(pic.mask(), 0);
        pic.write(0, 1, &[0xfb]).expect("OCW1");
        let mut data = [0u8];
        pic.read(0, 1, &mut data).expect("read");
        assert_eq!(data, [0xfb]);
    }

    #[test]
    fn the_elcr_reads_back_what_was_written() {
        let elcr = Elcr::default();
        elcr.write(0, 0, &[0x20, 0x0e]).expect("write");
        let mut data = [0u8; 1];
        elcr.read(0, 1, &mut data).expect("read");
        assert_eq!(data, [0x0e]);
    }
}
