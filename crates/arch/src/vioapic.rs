//! A direct-register virtual I/O interrupt controller, after the Loongson
//! 7A-style controller of the KVM VIOAPIC study (docs/mechanisms.md section 6):
//! 32 level-triggered input lines and three core registers, IRR (the lines'
//! levels), MASK, and ISR = IRR & !MASK. Each line has a route (vector and
//! destination APIC ID). The controller sends a fixed, edge-triggered
//! message on a line's route each time the line's ISR bit rises: when the
//! line is asserted while unmasked, or unmasked while asserted. A line that
//! stays asserted is not signalled again until it is masked and unmasked
//! (or drops and rises), which is what makes the guest's mask / clear the
//! device / unmask sequence correct for level-triggered devices.
//!
//! The paravirtual level moves MASK into memory the guest writes without an
//! exit; [`REG_UNMASK`] is the register that still traps, so an unmask takes
//! effect at once (`MASK &= !UNMASK`, then ISR is recomputed). The VMM hands
//! the guest's in-memory MASK to [`Vioapic::sync_mask`] before it evaluates.
//!
//! Like every model here it does no I/O: signals are returned as
//! [`Interrupt`]s for the caller's bus.

use serde::{Deserialize, Serialize};

use crate::interrupt::{DeliveryMode, Destination, Interrupt, TriggerMode};

pub const LINES: u32 = 32;
/// Size of the register page.
pub const MMIO_SIZE: u64 = 0x1000;

/// Input line levels (read-only).
pub const REG_IRR: u64 = 0x00;
/// IRR & !MASK: the lines that want service (read-only).
pub const REG_ISR: u64 = 0x04;
/// Set bits mask their lines (read/write; all lines masked at reset).
pub const REG_MASK: u64 = 0x08;
/// Write-only: clears the written bits of MASK (reads as 0).
pub const REG_UNMASK: u64 = 0x0c;
/// Line `n`'s route at `REG_ROUTE_BASE + 4n`: vector in bits 7:0,
/// destination APIC ID in bits 15:8. Vector 0 leaves the line unrouted.
pub const REG_ROUTE_BASE: u64 = 0x40;
const REG_ROUTE_END: u64 = REG_ROUTE_BASE + 4 * LINES as u64;
const ROUTE_VECTOR_MASK: u32 = 0xff;
const ROUTE_DESTINATION_SHIFT: u32 = 8;
const ROUTE_WRITABLE: u32 = 0xffff;

/// Where a VIOAPIC is emulated and which of its registers exit: the one
/// level enum of the simulator's study, the VMM's benches and the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VioapicLevel {
    /// In the userspace VMM: every access exits there.
    Userspace,
    /// In the kernel: every access exits, no userspace round trip.
    Kernel,
    /// In the kernel behind a read-only page: reads without exit.
    RoPage,
    /// Paravirtual MASK in shared memory; the acknowledge and UNMASK trap.
    Pv,
}

impl VioapicLevel {
    pub const ALL: [VioapicLevel; 4] = [
        VioapicLevel::Userspace,
        VioapicLevel::Kernel,
        VioapicLevel::RoPage,
        VioapicLevel::Pv,
    ];

    /// The level's name, as serde spells it.
    pub fn name(self) -> &'static str {
        match self {
            VioapicLevel::Userspace => "userspace",
            VioapicLevel::Kernel => "kernel",
            VioapicLevel::RoPage => "ro-page",
            VioapicLevel::Pv => "pv",
        }
    }
}

impl std::fmt::Display for VioapicLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of the levels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown VIOAPIC level `{0}`: expected userspace, kernel, ro-page or pv")]
pub struct UnknownVioapicLevel(pub String);

impl std::str::FromStr for VioapicLevel {
    type Err = UnknownVioapicLevel;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        VioapicLevel::ALL
            .into_iter()
            .find(|level| level.name() == name)
            .ok_or_else(|| UnknownVioapicLevel(name.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VioapicError {
    #[error("VIOAPIC line {line} does not exist (the controller has {LINES} lines)")]
    InvalidLine { line: u32 },
    #[error("VIOAPIC offset {offset:#x} is not a register")]
    NoRegister { offset: u64 },
    #[error("VIOAPIC register at {offset:#x} is read-only")]
    ReadOnly { offset: u64 },
}

/// The controller's registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vioapic {
    irr: u32,
    mask: u32,
    /// Always `irr & !mask`, recomputed after every change so that rises
    /// can be found by comparing with the previous value.
    isr: u32,
    routes: [u32; LINES as usize],
}

impl Default for Vioapic {
    fn default() -> Self {
        Vioapic::new()
    }
}

impl Vioapic {
    /// Reset state: no line asserted, every line masked and unrouted.
    pub fn new() -> Vioapic {
        Vioapic {
            irr: 0,
            mask: u32::MAX,
            isr: 0,
            routes: [0; LINES as usize],
        }
    }

    pub fn irr(&self) -> u32 {
        self.irr
    }

    pub fn isr(&self) -> u32 {
        self.isr
    }

    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// The message line `line` sends, or `None` while it is unrouted.
    pub fn route(&self, line: u32) -> Option<Interrupt> {
        let route = *self.routes.get(line as usize)?;
        let vector = (route & ROUTE_VECTOR_MASK) as u8;
        (vector != 0).then_some(Interrupt {
            vector,
            delivery_mode: DeliveryMode::Fixed,
            trigger_mode: TriggerMode::Edge,
            destination: Destination::Physical(route >> ROUTE_DESTINATION_SHIFT),
        })
    }

    /// A device drove `line` to `asserted`; returns what the controller sends.
    pub fn set_line(&mut self, line: u32, asserted: bool) -> Result<Vec<Interrupt>, VioapicError> {
        if line >= LINES {
            return Err(VioapicError::InvalidLine { line });
        }
        let bit = 1 << line;
        self.irr = if asserted {
            self.irr | bit
        } else {
            self.irr & !bit
        };
        Ok(self.update())
    }

    /// The guest's MASK as it stands in shared memory (paravirtual level).
    /// A guest only sets bits there, so this normally only lowers ISR bits.
    pub fn sync_mask(&mut self, mask: u32) -> Vec<Interrupt> {
        self.mask = mask;
        self.update()
    }

    /// A 32-bit register read.
    pub fn read(&self, offset: u64) -> Result<u32, VioapicError> {
        match offset {
            REG_IRR => Ok(self.irr),
            REG_ISR => Ok(self.isr),
            REG_MASK => Ok(self.mask),
            REG_UNMASK => Ok(0),
            _ => route_index(offset)
                .map(|line| self.routes[line])
                .ok_or(VioapicError::NoRegister { offset }),
        }
    }

    /// A 32-bit register write; returns what the controller sends.
    pub fn write(&mut self, offset: u64, value: u32) -> Result<Vec<Interrupt>, VioapicError> {
        match offset {
            REG_IRR | REG_ISR => return Err(VioapicError::ReadOnly { offset }),
            REG_MASK => self.mask = value,
            REG_UNMASK => self.mask &= !value,
            _ => {
                let line = route_index(offset).ok_or(VioapicError::NoRegister { offset })?;
                self.routes[line] = value & ROUTE_WRITABLE;
            }
        }
        Ok(self.update())
    }

    /// Recomputes ISR and returns the routed lines whose ISR bit rose.
    fn update(&mut self) -> Vec<Interrupt> {
        let isr = self.irr & !self.mask;
        let rose = isr & !self.isr;
        self.isr = isr;
        (0..LINES)
            .filter(|line| rose & (1 << line) != 0)
            .filter_map(|line| self.route(line))
            .collect()
    }
}

/// The line whose route register is at `offset`.
fn route_index(offset: u64) -> Option<usize> {
    (REG_ROUTE_BASE..REG_ROUTE_END)
        .contains(&offset)
        .then(|| offset - REG_ROUTE_BASE)
        .filter(|relative| relative.is_multiple_of(4))
        .map(|relative| (relative / 4) as usize)
}
