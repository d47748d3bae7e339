//! QEMU's fw_cfg interface, the legacy port form (QEMU docs/specs/fw_cfg):
//! a 16-bit selector written at 0x510, the selected item's bytes read one
//! at a time at 0x511. It holds what a PC guest asks its firmware for:
//! the CPU count and the RAM size.

use std::sync::Mutex;

use crate::bus::{fill_le, le_u32, DeviceError, PioDevice};

pub const PORT: u16 = 0x510;
pub const PORTS: u16 = 2;
const OFFSET_SELECTOR: u16 = 0;
const OFFSET_DATA: u16 = 1;

/// Item keys (QEMU include/standard-headers/linux/qemu_fw_cfg.h).
const SIGNATURE: u16 = 0x00;
const ID: u16 = 0x01;
const RAM_SIZE: u16 = 0x03;
const NB_CPUS: u16 = 0x05;
const MAX_CPUS: u16 = 0x0f;
/// The traditional (port) interface, no DMA.
const ID_TRADITIONAL: u64 = 1;

struct Cursor {
    selector: u16,
    offset: usize,
}

pub struct FwCfg {
    cpus: u16,
    ram_bytes: u64,
    cursor: Mutex<Cursor>,
}

impl FwCfg {
    pub fn new(cpus: u16, ram_bytes: u64) -> Self {
        FwCfg {
            cpus,
            ram_bytes,
            cursor: Mutex::new(Cursor {
                selector: 0,
                offset: 0,
            }),
        }
    }

    /// The selected item's bytes; an item this machine lacks reads as zeros.
    fn item(&self, selector: u16) -> Vec<u8> {
        match selector {
            SIGNATURE => b"QEMU".to_vec(),
            ID => ID_TRADITIONAL.to_le_bytes()[..4].to_vec(),
            RAM_SIZE => self.ram_bytes.to_le_bytes().to_vec(),
            NB_CPUS | MAX_CPUS => self.cpus.to_le_bytes().to_vec(),
            _ => Vec::new(),
        }
    }
}

impl PioDevice for FwCfg {
    fn name(&self) -> &'static str {
        "fw_cfg"
    }

    fn read(&self, _cpu: usize, offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        if offset != OFFSET_DATA {
            fill_le(data, 0);
            return Ok(());
        }
        let item = self.item(cursor.selector);
        // Each read of the data port returns the next byte; past the end, 0.
        for byte in data.iter_mut() {
            *byte = item.get(cursor.offset).copied().unwrap_or(0);
            cursor.offset = cursor.offset.saturating_add(1);
        }
        Ok(())
    }

    fn write(&self, _cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        if offset == OFFSET_SELECTOR {
            let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
            let [low, high, ..] = le_u32(data).to_le_bytes();
            cursor.selector = u16::from_le_bytes([low, high]);
            cursor.offset = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_item(device: &FwCfg, selector: u16, len: usize) -> u64 {
        device
            .write(0, OFFSET_SELECTOR, &selector.to_le_bytes())
            .expect("selector");
        (0..len).fold(0, |value, index| {
            let mut byte = [0u8];
            device.read(0, OFFSET_DATA, &mut byte).expect("data");
            value | u64::from(byte[0]) << (8 * index)
        })
    }

    #[test]
    fn the_guest_reads_the_cpu_count_and_ram_size_byte_by_byte() {
        let device = FwCfg::new(3, 128 << 20);
        assert_eq!(read_item(&device, NB_CPUS, 2), 3);
        assert_eq!(read_item(&device, RAM_SIZE, 8), 128 << 20);
        assert_eq!(
            read_item(&device, SIGNATURE, 4),
            u64::from(u32::from_le_bytes(*b"QEMU"))
        );
        // Selecting again restarts the item; an unknown item reads zeros.
        assert_eq!(read_item(&device, NB_CPUS, 2), 3);
        assert_eq!(read_item(&device, 0x19, 8), 0);
    }
}
