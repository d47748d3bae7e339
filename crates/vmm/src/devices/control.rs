//! The guest's control port: it opens and closes the measured window and
//! reports completion or failure (in the run's `RunControl`). Also the
//! no-op port `dirq probe` times.

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

use crate::abi;
use crate::bus::{check_access_size, le_u32, DeviceError, Direction, PioDevice};
use crate::config::{ConfigError, Named};
use crate::exits::{ExitAccounting, ExitSnapshot};
use crate::run_control::{GuestEnd, PhaseError, RunControl};

/// The ports a 32-bit port register spans (the control and no-op ports):
/// a 4-byte access starting at it must end inside them.
pub const REGISTER32_PORTS: u16 = 4;

/// The vCPU that runs the bench: the only one that may open, close or end
/// its window (any vCPU may report a failure).
pub const BENCH_VCPU: usize = 0;

/// A command the guest writes to the control port.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
)]
#[serde(rename_all = "UPPERCASE")]
#[strum(serialize_all = "UPPERCASE", parse_err_ty = ConfigError, parse_err_fn = ControlCommand::unknown)]
pub enum ControlCommand {
    Start,
    End,
    Done,
    Failed,
}

impl Named for ControlCommand {
    const WHAT: &'static str = "control command";
}

impl ControlCommand {
    fn from_abi(command: u32) -> Option<Self> {
        Some(match command {
            abi::CONTROL_BENCH_START => ControlCommand::Start,
            abi::CONTROL_BENCH_END => ControlCommand::End,
            abi::CONTROL_DONE => ControlCommand::Done,
            abi::CONTROL_FAILED => ControlCommand::Failed,
            _ => return None,
        })
    }
}

/// A control command the run's state cannot take, naming the vCPU that sent it.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("vCPU {cpu} sent {command}, but only vCPU {BENCH_VCPU} runs the bench and may start, end or finish it")]
    NotBenchVcpu { cpu: usize, command: ControlCommand },
    #[error("vCPU {cpu} sent {command} out of order (START, END, DONE, each once): {phase}")]
    OutOfOrder {
        cpu: usize,
        command: ControlCommand,
        phase: PhaseError,
    },
    #[error("vCPU {cpu} sent unknown control command {command}")]
    UnknownCommand { cpu: usize, command: u32 },
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

    fn write(&self, cpu: usize, _offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        check_access_size("the control port", Direction::Write, data.len(), 4)?;
        let raw = le_u32(data);
        let command = ControlCommand::from_abi(raw)
            .ok_or(ControlError::UnknownCommand { cpu, command: raw })?;
        if command != ControlCommand::Failed && cpu != BENCH_VCPU {
            return Err(ControlError::NotBenchVcpu { cpu, command }.into());
        }
        let phase = match command {
            ControlCommand::Start => self.control.open_window(self.snapshot()?),
            ControlCommand::End => self.control.close_window(self.snapshot()?),
            ControlCommand::Done => self.control.end(GuestEnd::Done),
            ControlCommand::Failed => self.control.end(GuestEnd::Failed),
        };
        phase.map_err(|phase| {
            ControlError::OutOfOrder {
                cpu,
                command,
                phase,
            }
            .into()
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn port() -> (ControlPort, Arc<RunControl>) {
        let control = Arc::new(RunControl::default());
        let accounting = Arc::new(ExitAccounting::new(Vec::new(), Default::default()));
        (ControlPort::new(control.clone(), accounting), control)
    }

    fn send(port: &ControlPort, cpu: usize, command: u32) -> Result<(), DeviceError> {
        port.write(cpu, 0, &command.to_le_bytes())
    }

    #[test]
    fn only_the_bench_vcpu_starts_ends_or_finishes_and_the_refusal_names_it() {
        let (port, control) = port();
        send(&port, 0, abi::CONTROL_BENCH_START).expect("vCPU 0 starts");
        send(&port, 0, abi::CONTROL_BENCH_END).expect("vCPU 0 ends");
        let err = send(&port, 1, abi::CONTROL_DONE).expect_err("vCPU 1 may not finish");
        assert_eq!(
            err.to_string(),
            "vCPU 1 sent DONE, but only vCPU 0 runs the bench and may start, end or finish it"
        );
        assert_eq!(control.guest_end(), None);
        send(&port, 1, abi::CONTROL_FAILED).expect("any vCPU may fail");
        assert_eq!(control.guest_end(), Some(GuestEnd::Failed));
    }

    #[test]
    fn a_command_out_of_order_names_vcpu_command_and_rule() {
        let (port, _) = port();
        let err = send(&port, 0, abi::CONTROL_DONE).expect_err("DONE first");
        assert_eq!(
            err.to_string(),
            "vCPU 0 sent DONE out of order (START, END, DONE, each once): DONE came before END: the measured window was never closed"
        );
        let err = send(&port, 0, 99).expect_err("unknown");
        assert_eq!(err.to_string(), "vCPU 0 sent unknown control command 99");
    }
}
