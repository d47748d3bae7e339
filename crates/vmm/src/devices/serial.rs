//! The console: a write-only 16550 at 0x3f8 whose transmitter is always
//! ready. Lines go to a buffer the report keeps, and optionally to stderr.

use std::sync::Mutex;

use super::{fill_le, DeviceError, PioDevice};

/// Transmit holding register (offset 0) and line status register (offset 5).
const REG_DATA: u16 = 0;
const REG_LINE_STATUS: u16 = 5;
/// LSR: transmit holding register empty, transmitter empty.
const LSR_TX_IDLE: u8 = 0x60;
/// The UART occupies eight ports.
pub const SERIAL_PORTS: u16 = 8;

pub struct Serial {
    console: Mutex<String>,
    echo: bool,
}

impl Serial {
    pub fn new(echo: bool) -> Self {
        Serial {
            console: Mutex::new(String::new()),
            echo,
        }
    }

    /// Everything the guest printed.
    pub fn output(&self) -> String {
        self.console
            .lock()
            .map(|text| text.clone())
            .unwrap_or_default()
    }
}

impl PioDevice for Serial {
    fn name(&self) -> &'static str {
        "serial"
    }

    fn read(&self, _cpu: usize, offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        let value = if offset == REG_LINE_STATUS {
            LSR_TX_IDLE
        } else {
            0
        };
        fill_le(data, u64::from(value));
        Ok(())
    }

    fn write(&self, _cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        if offset != REG_DATA {
            return Ok(()); // line control, divisor, FIFO: nothing to model
        }
        let mut console = self
            .console
            .lock()
            .map_err(|_| DeviceError::Device("console lock poisoned".into()))?;
        for &byte in data {
            console.push(char::from(byte));
            if self.echo && byte == b'\n' {
                let line = console.rsplit_terminator('\n').next().unwrap_or_default();
                eprintln!("guest: {line}");
            }
        }
        Ok(())
    }
}
