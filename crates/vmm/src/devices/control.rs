//! The guest's control port: it opens and closes the measured window and
//! reports completion or failure (in the run's `RunControl`). Also the
//! no-op port `dirq probe` times.

use std::sync::Arc;
use std::time::Instant;

use crate::abi;
use crate::bus::{check_access_size, le_u32, DeviceError, Direction, PioDevice};
use crate::exits::{ExitAccounting, ExitSnapshot};
use crate::run_control::{GuestEnd, RunControl};

/// A control command the run's state cannot take.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("the guest closed a window it never opened")]
    WindowNotOpen,
    #[error("unknown control command {0}")]
    UnknownCommand(u32),
}

/// The device behind `abi::PORT_CONTROL`.
pub struct ControlPort {
    control: Arc<RunControl>,
    accounting: Arc<ExitAccounting>,
}

impl ControlPort {
    pub fn new(control: Arc<RunControl>, accounting: Arc<ExitAccounting>) -> Self {
        ControlPort {
            control,
            accounting,
        }
    }

    fn snapshot(&self) -> Result<(Instant, ExitSnapshot), DeviceError> {
        let snapshot = self.accounting.snapshot()?;
        Ok((Instant::now(), snapshot))
    }
}

impl PioDevice for ControlPort {
    fn name(&self) -> &'static str {
        "control port"
    }

    fn read(&self, _cpu: usize, _offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        data.fill(0);
        Ok(())
    }

    fn write(&self, _cpu: usize, _offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        check_access_size("the control port", Direction::Write, data.len(), 4)?;
        let command = le_u32(data);
        match command {
            abi::CONTROL_BENCH_START => self.control.open_window(self.snapshot()?),
            abi::CONTROL_BENCH_END => {
                if !self.control.close_window(self.snapshot()?) {
                    return Err(ControlError::WindowNotOpen.into());
                }
            }
            abi::CONTROL_DONE => self.control.end(GuestEnd::Done),
            abi::CONTROL_FAILED => self.control.end(GuestEnd::Failed),
            other => return Err(ControlError::UnknownCommand(other).into()),
        }
        Ok(())
    }
}

/// The port behind `abi::PORT_NOOP`: an exit the VMM handles by doing nothing.
pub struct NoopPort;

impl PioDevice for NoopPort {
    fn name(&self) -> &'static str {
        "no-op port"
    }

    fn read(&self, _cpu: usize, _offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        data.fill(0);
        Ok(())
    }

    fn write(&self, _cpu: usize, _offset: u16, _data: &[u8]) -> Result<(), DeviceError> {
        Ok(())
    }
}
