//! The IRQ lines of QEMU's `pc-testdev` (hw/misc/pc-testdev.c): a byte
//! written at port 0x2000 + n drives IOAPIC input n to that level (0 low,
//! anything else high) and leaves it there, through whichever IOAPIC the
//! run's interrupt path has. kvm-unit-tests' ioapic.c drives edge and
//! level interrupts this way.

use std::sync::Arc;

use crate::bus::{fill_le, le_u8, DeviceError, PioDevice};
use crate::interrupt::InterruptController;

pub const IRQ_PORT: u16 = 0x2000;
/// One port per IOAPIC input.
pub const IRQ_LINES: u16 = 24;

pub struct TestDevIrqLines {
    pub interrupts: Arc<dyn InterruptController>,
}

impl PioDevice for TestDevIrqLines {
    fn name(&self) -> &'static str {
        "pc-testdev IRQ lines"
    }

    fn read(&self, _cpu: usize, _offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        fill_le(data, 0);
        Ok(())
    }

    fn write(&self, _cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        Ok(self
            .interrupts
            .set_irq_line(u32::from(offset), le_u8(data) != 0)?)
    }
}
