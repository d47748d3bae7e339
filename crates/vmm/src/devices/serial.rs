//! The console: a write-only 16550 at 0x3f8 whose transmitter is always
//! ready. What the guest prints goes to a bounded buffer the report keeps
//! (the guest decides how much it prints: the VMM keeps the last
//! `CONSOLE_LIMIT` bytes and counts the rest), and optionally to stderr,
//! escaped (the guest's bytes reach a terminal).

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::{Mutex, MutexGuard};

use crate::bus::{fill_le, DeviceError, PioDevice};

/// Transmit holding register (offset 0) and line status register (offset 5).
const REG_DATA: u16 = 0;
const REG_LINE_STATUS: u16 = 5;
/// LSR: transmit holding register empty, transmitter empty.
const LSR_TX_IDLE: u8 = 0x60;
/// The UART occupies eight ports.
pub const SERIAL_PORTS: u16 = 8;
/// The console bytes a run keeps: the last 16 KiB (the test kernel prints a few lines).
pub const CONSOLE_LIMIT: usize = 16 * 1024;
/// The longest line echoed to stderr; the rest of it is counted, not shown.
const ECHO_LINE_LIMIT: usize = 512;

#[derive(Default)]
struct Console {
    /// The last `CONSOLE_LIMIT` bytes.
    kept: VecDeque<u8>,
    /// Bytes dropped from the front to keep within the limit.
    dropped: u64,
    /// The line being printed, for the echo.
    line: Vec<u8>,
    /// Bytes of that line beyond `ECHO_LINE_LIMIT`.
    line_overflow: u64,
}

pub struct Serial {
    console: Mutex<Console>,
    echo: bool,
}

impl Serial {
    pub fn new(echo: bool) -> Self {
        Serial {
            console: Mutex::new(Console::default()),
            echo,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Console> {
        // Every update is a push of whole bytes: a panic leaves it usable.
        self.console
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What the guest printed: the last `CONSOLE_LIMIT` bytes, after a line
    /// saying how much was dropped before them, if anything was.
    pub fn output(&self) -> String {
        let console = self.lock();
        let (front, back) = console.kept.as_slices();
        let text = String::from_utf8_lossy(&[front, back].concat()).into_owned();
        match console.dropped {
            0 => text,
            dropped => format!(
                "[dirq: the guest printed {dropped} bytes more than the {} KiB kept; the first ones were dropped]\n{text}",
                CONSOLE_LIMIT / 1024
            ),
        }
    }

    fn print(&self, console: &mut Console, byte: u8) {
        if console.kept.len() == CONSOLE_LIMIT {
            console.kept.pop_front();
            console.dropped += 1;
        }
        console.kept.push_back(byte);
        if !self.echo {
            return;
        }
        if byte == b'\n' {
            let mut line = escape_for_terminal(&console.line);
            if console.line_overflow > 0 {
                line.push_str(&format!(
                    " [dirq: {} more bytes of this line not shown]",
                    console.line_overflow
                ));
            }
            // Standard error that cannot take it (a full disk) loses the echo, not the run.
            let _ = writeln!(std::io::stderr(), "guest: {line}");
            console.line.clear();
            console.line_overflow = 0;
        } else if console.line.len() < ECHO_LINE_LIMIT {
            console.line.push(byte);
        } else {
            console.line_overflow += 1;
        }
    }
}

/// The guest's bytes as a terminal may show them: printable ASCII and
/// spaces as they are, everything else (escape sequences, bells, carriage
/// returns, 8-bit controls) as `\xNN`.
pub fn escape_for_terminal(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for &byte in bytes {
        if byte == b' ' || byte == b'\t' || byte.is_ascii_graphic() {
            text.push(char::from(byte));
        } else {
            text.push_str(&format!("\\x{byte:02x}"));
        }
    }
    text
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
        let mut console = self.lock();
        for &byte in data {
            self.print(&mut console, byte);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_keeps_the_last_bytes_and_says_how_many_were_dropped() {
        let serial = Serial::new(false);
        let flood = vec![b'x'; CONSOLE_LIMIT + 100];
        serial.write(0, REG_DATA, &flood).expect("console write");
        serial.write(0, REG_DATA, b"end").expect("console write");
        let output = serial.output();
        assert!(output.starts_with("[dirq: the guest printed 103 bytes more"));
        assert!(
            output.ends_with("xxend"),
            "{}",
            &output[output.len() - 10..]
        );
        assert!(output.len() < CONSOLE_LIMIT + 200);
    }

    #[test]
    fn escape_bytes_never_reach_the_terminal() {
        let text = escape_for_terminal(b"\x1b[2J\x1b]0;owned\x07ok \x9b31m\r");
        assert_eq!(text, "\\x1b[2J\\x1b]0;owned\\x07ok \\x9b31m\\x0d");
        assert!(!text.bytes().any(|byte| byte.is_ascii_control()));
    }
}
