//! The io-batch bench's disk: an ATA task file (ports 0x1f0-0x1f7, ATA/ATAPI-8
//! 7.1) that takes 48-bit commands. Features, sector count and the three LBA
//! registers each hold the last two bytes written (the second-to-last is the
//! high-order byte of a 48-bit command); a write to the command register
//! executes the command: the device counts it and folds every register into
//! a digest, so two runs can prove they left the device in the same state.

use std::sync::Mutex;

use crate::bus::{check_access_size, fill_le, le_u8, DeviceError, Direction, PioDevice};

pub const PORTS: u16 = 8;
const REG_FEATURES: u16 = 1;
const REG_LBA_HIGH: u16 = 5;
const REG_DEVICE: u16 = 6;
const REG_COMMAND: u16 = 7;
/// Status: device ready, seek complete (the command finished at once).
const STATUS_READY: u8 = 0x50;

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskFileState {
    /// (previous, current) byte of features, sector count, LBA low, mid, high.
    pub registers: [(u8, u8); 5],
    pub device: u8,
    pub commands: u64,
    /// FNV-1a over every executed command's registers, in order.
    pub digest: u32,
}

impl Default for TaskFileState {
    fn default() -> Self {
        TaskFileState {
            registers: [(0, 0); 5],
            device: 0,
            commands: 0,
            digest: FNV_OFFSET,
        }
    }
}

impl TaskFileState {
    fn execute(&mut self, command: u8) {
        let bytes = self
            .registers
            .iter()
            .flat_map(|&(previous, current)| [previous, current])
            .chain([self.device, command]);
        for byte in bytes {
            self.digest = (self.digest ^ u32::from(byte)).wrapping_mul(FNV_PRIME);
        }
        self.commands += 1;
    }
}

#[derive(Default)]
pub struct TaskFile {
    state: Mutex<TaskFileState>,
}

impl TaskFile {
    pub fn state(&self) -> TaskFileState {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TaskFileState> {
        // Every update is a few assignments under the lock: no half state.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl PioDevice for TaskFile {
    fn name(&self) -> &'static str {
        "task file"
    }

    fn read(&self, _cpu: usize, offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        check_access_size("a task file register", Direction::Read, data.len(), 1)?;
        let state = self.lock();
        let value = match offset {
            REG_FEATURES..=REG_LBA_HIGH => state.registers[usize::from(offset - REG_FEATURES)].1,
            REG_DEVICE => state.device,
            REG_COMMAND => STATUS_READY,
            _ => 0,
        };
        fill_le(data, u64::from(value));
        Ok(())
    }

    fn write(&self, _cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        check_access_size("a task file register", Direction::Write, data.len(), 1)?;
        let value = le_u8(data);
        let mut state = self.lock();
        match offset {
            REG_FEATURES..=REG_LBA_HIGH => {
                let register = &mut state.registers[usize::from(offset - REG_FEATURES)];
                *register = (register.1, value);
            }
            REG_DEVICE => state.device = value,
            REG_COMMAND => state.execute(value),
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_keep_the_last_two_bytes_and_commands_fold_into_the_digest() {
        let disk = TaskFile::default();
        for (offset, value) in [(2u16, 0u8), (2, 8), (3, 0x12), (6, 0x40)] {
            disk.write(0, offset, &[value]).expect("byte write");
        }
        let before = disk.state();
        assert_eq!(before.registers[1], (0, 8));
        assert_eq!(before.registers[2], (0, 0x12));
        assert_eq!(before.commands, 0);
        disk.write(0, REG_COMMAND, &[0x34]).expect("command");
        let after = disk.state();
        assert_eq!(after.commands, 1);
        assert_ne!(after.digest, before.digest);
        let mut status = [0u8];
        disk.read(0, REG_COMMAND, &mut status).expect("status");
        assert_eq!(status, [STATUS_READY]);
        assert!(disk.write(0, REG_COMMAND, &[0, 0]).is_err());
    }
}
