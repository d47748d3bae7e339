//! An exit port compatible with QEMU's `isa-debug-exit` (hw/misc/debugexit.c):
//! a write of `value` ends the run with exit status `(value << 1) | 1`, so
//! a guest's status can never be 0. kvm-unit-tests ends every test with
//! `outl(code, 0xf4)`.

use std::sync::{Arc, Mutex};

use crate::bus::{fill_le, le_u32, DeviceError, PioDevice};
use crate::run_control::RunControl;

/// QEMU's default iobase and size for kvm-unit-tests.
pub const PORT: u16 = 0xf4;
pub const PORTS: u16 = 4;

pub struct DebugExit {
    control: Arc<RunControl>,
    status: Mutex<Option<u32>>,
}

impl DebugExit {
    pub fn new(control: Arc<RunControl>) -> Self {
        DebugExit {
            control,
            status: Mutex::new(None),
        }
    }

    /// The exit status the guest asked for, as QEMU would exit with it.
    pub fn status(&self) -> Option<u32> {
        *self.status.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PioDevice for DebugExit {
    fn name(&self) -> &'static str {
        "isa-debug-exit"
    }

    fn read(&self, _cpu: usize, _offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        fill_le(data, u64::MAX);
        Ok(())
    }

    fn write(&self, _cpu: usize, _offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        let value = le_u32(data);
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        // The first write ends the run; a second from another vCPU is late.
        status.get_or_insert(value.wrapping_shl(1) | 1);
        self.control.request_stop();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_stops_the_run_with_qemus_exit_status() {
        let control = Arc::new(RunControl::default());
        let device = DebugExit::new(control.clone());
        assert_eq!(device.status(), None);
        device.write(0, 0, &0u32.to_le_bytes()).expect("write");
        assert!(control.should_stop());
        assert_eq!(device.status(), Some(1));
        device.write(1, 0, &7u32.to_le_bytes()).expect("write");
        assert_eq!(device.status(), Some(1), "the first status stands");
        let other = DebugExit::new(Arc::new(RunControl::default()));
        other.write(0, 0, &[3]).expect("write");
        assert_eq!(other.status(), Some(7));
    }
}
