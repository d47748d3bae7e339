//! Local APIC model (Intel SDM Vol. 3, chapter 10): IRR/ISR/TMR, TPR/PPR
//! priority classes, EOI, the LVT timer (one-shot, periodic, TSC-deadline),
//! the ICR, and both register interfaces (xAPIC MMIO, x2APIC MSRs).
//!
//! The model never reaches out: what it sends (IPIs, level-triggered EOI
//! broadcasts) is returned as an [`ApicBusMessage`] for the caller's bus to
//! deliver, and time comes from an injected [`Clock`].
//!
//! The message types it sends and receives live in [`crate::interrupt`].

use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};

use crate::bits::{high_u32, low_u32, low_u8};
use crate::clock::Clock;
// Re-exported so that code written against `lapic::Interrupt` keeps building;
// new code imports `crate::interrupt`.
pub use crate::interrupt::{
    ApicBusMessage, DeliveryMode, Destination, DestinationMode, DestinationShorthand, Interrupt,
    TriggerMode, X2APIC_BROADCAST_ID, XAPIC_BROADCAST_ID,
};
use crate::vectors::VectorSet;

// ---------------------------------------------------------------------------
// Register map (SDM 10.4.1 table 10-1, x2APIC table 10-6).
// ---------------------------------------------------------------------------

/// Default physical base of the xAPIC MMIO page (SDM 10.4.1).
pub const DEFAULT_MMIO_BASE: u64 = 0xFEE0_0000;
/// Size of the xAPIC MMIO page.
pub const MMIO_SIZE: u64 = 0x1000;

pub const APIC_ID: u64 = 0x020;
pub const APIC_VERSION: u64 = 0x030;
pub const APIC_TPR: u64 = 0x080;
pub const APIC_PPR: u64 = 0x0A0;
pub const APIC_EOI: u64 = 0x0B0;
pub const APIC_LDR: u64 = 0x0D0;
pub const APIC_DFR: u64 = 0x0E0;
pub const APIC_SVR: u64 = 0x0F0;
/// First of 8 ISR banks, 0x10 apart.
pub const APIC_ISR: u64 = 0x100;
/// First of 8 TMR banks, 0x10 apart.
pub const APIC_TMR: u64 = 0x180;
/// First of 8 IRR banks, 0x10 apart.
pub const APIC_IRR: u64 = 0x200;
pub const APIC_ESR: u64 = 0x280;
pub const APIC_ICR_LOW: u64 = 0x300;
pub const APIC_ICR_HIGH: u64 = 0x310;
pub const APIC_LVT_TIMER: u64 = 0x320;
pub const APIC_LVT_THERMAL: u64 = 0x330;
pub const APIC_LVT_PERF: u64 = 0x340;
pub const APIC_LVT_LINT0: u64 = 0x350;
pub const APIC_LVT_LINT1: u64 = 0x360;
pub const APIC_LVT_ERROR: u64 = 0x370;
pub const APIC_TIMER_INITIAL_COUNT: u64 = 0x380;
pub const APIC_TIMER_CURRENT_COUNT: u64 = 0x390;
pub const APIC_TIMER_DIVIDE_CONFIG: u64 = 0x3E0;
/// Exists only as an x2APIC MSR (0x83F).
pub const APIC_SELF_IPI: u64 = 0x3F0;

/// IA32_APIC_BASE MSR (SDM 10.4.4).
pub const MSR_IA32_APIC_BASE: u32 = 0x1B;
/// IA32_TSC_DEADLINE MSR (SDM 10.5.4.1).
pub const MSR_IA32_TSC_DEADLINE: u32 = 0x6E0;
/// First and last x2APIC register MSR (SDM 10.12.1.2).
pub const MSR_X2APIC_FIRST: u32 = 0x800;
pub const MSR_X2APIC_LAST: u32 = 0x8FF;

/// The x2APIC MSR of an xAPIC register offset: 0x800 + offset / 16
/// (SDM 10.12.1.2).
pub const fn x2apic_msr(offset: u64) -> u32 {
    MSR_X2APIC_FIRST + low_u32(offset >> 4)
}

/// The 64-bit x2APIC ICR value (SDM 10.12.9) that sends an edge `vector`
/// with `delivery_mode` to `destination`: what a guest writes to the ICR
/// MSR, and the inverse of the decoding an ICR write does. A shorthand's
/// sender is the writing LAPIC, so the one carried here is ignored.
pub fn x2apic_icr(vector: u8, delivery_mode: DeliveryMode, destination: Destination) -> u64 {
    let (shorthand, logical, id) = match destination {
        Destination::Physical(id) => (DestinationShorthand::NoShorthand, false, id),
        Destination::Logical(address) => (DestinationShorthand::NoShorthand, true, address),
        Destination::SelfOnly { .. } => (DestinationShorthand::SelfOnly, false, 0),
        Destination::AllIncludingSelf => (DestinationShorthand::AllIncludingSelf, false, 0),
        Destination::AllExcludingSelf { .. } => (DestinationShorthand::AllExcludingSelf, false, 0),
    };
    let logical_bit = if logical { ICR_LOGICAL_DESTINATION } else { 0 };
    u64::from(id) << 32
        | u64::from(shorthand.bits()) << ICR_SHORTHAND_SHIFT
        | logical_bit
        | u64::from(delivery_mode.bits()) << ICR_DELIVERY_MODE_SHIFT
        | u64::from(vector)
}

pub const APIC_BASE_BSP: u64 = 1 << 8;
pub const APIC_BASE_X2APIC_ENABLE: u64 = 1 << 10;
pub const APIC_BASE_GLOBAL_ENABLE: u64 = 1 << 11;
/// Bits of IA32_APIC_BASE that software may set: BSP (read-only, ignored on
/// write), EXTD, EN and the page base up to a 52-bit physical address.
const APIC_BASE_WRITABLE: u64 =
    0x000F_FFFF_FFFF_F000 | APIC_BASE_GLOBAL_ENABLE | APIC_BASE_X2APIC_ENABLE;

/// Version register: version 0x14 (integrated APIC), max LVT entry 5
/// (timer, thermal, perf, LINT0, LINT1, error; no CMCI), no EOI-broadcast
/// suppression (SDM 10.4.8).
pub const APIC_VERSION_VALUE: u32 = 0x0005_0014;

pub const SVR_APIC_SOFTWARE_ENABLE: u32 = 1 << 8;
/// Spurious vector and software-enable bits; EOI-broadcast suppression (bit
/// 12) is not offered by the version register, so it stays 0.
const SVR_WRITABLE: u32 = 0x3FF;
const SVR_RESET: u32 = 0xFF;

pub const LVT_MASKED: u32 = 1 << 16;
const LVT_VECTOR: u32 = 0xFF;
const LVT_TIMER_MODE_SHIFT: u32 = 17;
const LVT_RESET: u32 = LVT_MASKED;

const DFR_FLAT_MODEL: u32 = 0xF;
const DFR_RESERVED_ONES: u32 = 0x0FFF_FFFF;

/// ESR bits (SDM 10.5.3).
pub const ESR_SEND_ILLEGAL_VECTOR: u32 = 1 << 5;
pub const ESR_RECEIVE_ILLEGAL_VECTOR: u32 = 1 << 6;

/// ICR fields (SDM 10.6.1).
const ICR_VECTOR: u64 = 0xFF;
pub(crate) const ICR_DELIVERY_MODE_SHIFT: u64 = 8;
pub(crate) const ICR_LOGICAL_DESTINATION: u64 = 1 << 11;
const ICR_LEVEL_ASSERT: u64 = 1 << 14;
pub(crate) const ICR_TRIGGER_LEVEL: u64 = 1 << 15;
pub(crate) const ICR_SHORTHAND_SHIFT: u64 = 18;
/// Writable bits of the low ICR dword: everything but delivery status (12)
/// and the reserved bits.
const ICR_LOW_WRITABLE: u64 = 0x000C_CFFF;
const ICR_XAPIC_DESTINATION_SHIFT: u64 = 56;
const ICR_HIGH_XAPIC_WRITABLE: u32 = 0xFF00_0000;

/// Vectors 0-15 are reserved for exceptions; as fixed interrupts they are
/// illegal (SDM 10.5.2).
const FIRST_LEGAL_VECTOR: u8 = 16;

const TDCR_WRITABLE: u32 = 0b1011;
const NS_PER_SECOND: u128 = 1_000_000_000;

// ---------------------------------------------------------------------------
// Configuration, errors, outcomes.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LapicError {
    #[error("{what} frequency must be non-zero")]
    ZeroFrequency { what: &'static str },
    #[error("MSR {msr:#x} is not a local APIC MSR")]
    NotLapicMsr { msr: u32 },
    #[error("x2APIC MSR {msr:#x} accessed while the LAPIC is not in x2APIC mode")]
    X2apicDisabled { msr: u32 },
    #[error("x2APIC MSR {msr:#x} is reserved")]
    ReservedRegister { msr: u32 },
    #[error("x2APIC MSR {msr:#x} is read-only")]
    ReadOnlyRegister { msr: u32 },
    #[error("x2APIC MSR {msr:#x} is write-only")]
    WriteOnlyRegister { msr: u32 },
    #[error("value {value:#x} sets reserved bits of MSR {msr:#x}")]
    ReservedBits { msr: u32, value: u64 },
    #[error("IA32_APIC_BASE transition from {from:#x} to {to:#x} is invalid")]
    InvalidApicBaseTransition { from: u64, to: u64 },
}

/// Clock rates the timer counts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LapicConfig {
    bus_hz: NonZeroU64,
    tsc_hz: NonZeroU64,
    /// MAXPHYADDR (CPUID.80000008H:EAX[7:0]): IA32_APIC_BASE bits above
    /// it are reserved (SDM 10.4.4 figure 10-5).
    #[serde(
        default = "max_physical_address_bits",
        skip_serializing_if = "is_max_physical_address_bits"
    )]
    physical_address_bits: u8,
}

/// The architectural limit of MAXPHYADDR (SDM 4.1.4).
const MAX_PHYSICAL_ADDRESS_BITS: u8 = 52;

fn max_physical_address_bits() -> u8 {
    MAX_PHYSICAL_ADDRESS_BITS
}

fn is_max_physical_address_bits(bits: &u8) -> bool {
    *bits == MAX_PHYSICAL_ADDRESS_BITS
}

impl LapicConfig {
    /// `bus_hz` drives the LVT timer before the divider; `tsc_hz` converts
    /// TSC-deadline values, with TSC 0 at clock time 0.
    pub fn new(bus_hz: u64, tsc_hz: u64) -> Result<Self, LapicError> {
        let nonzero = |hz, what| NonZeroU64::new(hz).ok_or(LapicError::ZeroFrequency { what });
        Ok(LapicConfig {
            bus_hz: nonzero(bus_hz, "bus")?,
            tsc_hz: nonzero(tsc_hz, "TSC")?,
            physical_address_bits: MAX_PHYSICAL_ADDRESS_BITS,
        })
    }

    /// The CPU's MAXPHYADDR, 32-52 (clamped): a base above it is reserved.
    pub fn with_physical_address_bits(self, bits: u8) -> Self {
        LapicConfig {
            physical_address_bits: bits.clamp(32, MAX_PHYSICAL_ADDRESS_BITS),
            ..self
        }
    }

    /// IA32_APIC_BASE bits reserved beyond those of every CPU: the page
    /// base above MAXPHYADDR.
    fn apic_base_reserved(&self) -> u64 {
        APIC_BASE_WRITABLE & !((1u64 << self.physical_address_bits) - 1) & !0xfff
    }

    pub fn bus_hz(&self) -> u64 {
        self.bus_hz.get()
    }

    pub fn tsc_hz(&self) -> u64 {
        self.tsc_hz.get()
    }

    /// The TSC value at clock time `now_ns`.
    pub fn tsc_at(&self, now_ns: u64) -> u64 {
        saturate(u128::from(now_ns) * u128::from(self.tsc_hz.get()) / NS_PER_SECOND)
    }

    /// The first clock time at which the TSC reaches `tsc`.
    fn ns_at_tsc(&self, tsc: u64) -> u64 {
        saturate((u128::from(tsc) * NS_PER_SECOND).div_ceil(u128::from(self.tsc_hz.get())))
    }
}

/// What [`Lapic::accept`] did with an arriving fixed interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AcceptOutcome {
    /// IRR bit newly set.
    Latched,
    /// The IRR bit was already set: the two requests merge into one
    /// (the LAPIC holds one pending instance per vector, SDM 10.8.4).
    Coalesced,
    /// Dropped: illegal vector (ESR updated) or APIC disabled.
    Rejected,
}

/// Result of an EOI (SDM 10.8.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EoiOutcome {
    /// The vector whose ISR bit was cleared; `None` when nothing was in
    /// service (the EOI is then a harmless no-op).
    pub completed: Option<u8>,
    /// The completed vector when its TMR bit was set (level-triggered): it
    /// must be broadcast to the IOAPICs.
    pub broadcast: Option<u8>,
}

/// The local vector table entries (SDM 10.5.1), in register order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Lvt {
    Timer,
    Thermal,
    PerformanceCounter,
    Lint0,
    Lint1,
    Error,
}

impl Lvt {
    const ALL: [Lvt; 6] = [
        Lvt::Timer,
        Lvt::Thermal,
        Lvt::PerformanceCounter,
        Lvt::Lint0,
        Lvt::Lint1,
        Lvt::Error,
    ];

    fn from_offset(offset: u64) -> Option<Lvt> {
        if offset & 0xF != 0 {
            return None;
        }
        let index = usize::try_from(offset.checked_sub(APIC_LVT_TIMER)? >> 4).ok()?;
        Lvt::ALL.get(index).copied()
    }

    /// Bits software may write (SDM 10.5.1 figure 10-8): the delivery
    /// status and remote-IRR bits are read-only, the rest reserved.
    const fn writable_bits(self) -> u32 {
        match self {
            // vector, mask, timer mode
            Lvt::Timer => 0x0007_00FF,
            // vector, delivery mode, mask
            Lvt::Thermal | Lvt::PerformanceCounter => 0x0001_07FF,
            // vector, delivery mode, polarity, trigger mode, mask
            Lvt::Lint0 | Lvt::Lint1 => 0x0001_A7FF,
            // vector, mask
            Lvt::Error => 0x0001_00FF,
        }
    }
}

/// LVT timer modes, bits 18:17 (SDM 10.5.4). The reserved encoding 11 counts
/// as one-shot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TimerMode {
    OneShot,
    Periodic,
    TscDeadline,
}

impl TimerMode {
    fn from_lvt(lvt: u32) -> TimerMode {
        match (lvt >> LVT_TIMER_MODE_SHIFT) & 0b11 {
            0b01 => TimerMode::Periodic,
            0b10 => TimerMode::TscDeadline,
            _ => TimerMode::OneShot,
        }
    }
}

/// Timer counting state. Counting starts at `period_start_ns`; the next
/// expiry is `deadline_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TimerState {
    initial_count: u32,
    divide_config: u32,
    /// The divisor the count in progress runs with: TDCR as of the last
    /// TMICT write.
    counting_divisor: u64,
    period_start_ns: u64,
    deadline_ns: Option<u64>,
    /// Last value written to IA32_TSC_DEADLINE, 0 once it fired.
    tsc_deadline: u64,
}

impl TimerState {
    /// The divisor selected by TDCR bits 3,1:0 (SDM 10.5.4 figure 10-10):
    /// 0b000 -> 2, 0b001 -> 4, ... 0b110 -> 128, 0b111 -> 1.
    fn divisor(&self) -> u64 {
        let code = ((self.divide_config & 0b1000) >> 1) | (self.divide_config & 0b11);
        if code == 0b111 {
            1
        } else {
            2 << code
        }
    }
}

// ---------------------------------------------------------------------------
// The LAPIC.
// ---------------------------------------------------------------------------

/// One local APIC. Starts in the power-up state of SDM 10.4.7.1: xAPIC mode,
/// globally enabled, software-disabled (SVR = 0xFF), all LVTs masked.
#[derive(Clone, Debug)]
pub struct Lapic {
    config: LapicConfig,
    apic_id: u32,
    apic_base: u64,
    irr: VectorSet,
    isr: VectorSet,
    tmr: VectorSet,
    tpr: u8,
    /// Processor priority, kept up to date whenever TPR or ISR change.
    ppr: u8,
    ldr: u32,
    dfr: u32,
    svr: u32,
    /// ESR as software reads it: the errors latched by the last ESR write.
    esr: u32,
    /// Errors detected since the last ESR write (SDM 10.5.3).
    esr_pending: u32,
    icr: u64,
    lvt: [u32; 6],
    timer: TimerState,
    startup: StartupState,
    /// NMIs received and not yet handed to the CPU.
    nmis_pending: u32,
}

/// Where this APIC's processor stands in the INIT/SIPI start-up protocol
/// (SDM 8.4.1, 10.6.1 "INIT" and "Start-Up").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartupState {
    /// Executing instructions.
    Running,
    /// Halted after INIT (or at power-up, an AP) until a Start-Up IPI.
    WaitForSipi,
    /// A Start-Up IPI arrived: the processor starts in real mode at
    /// `vector` << 12, CS = `vector` << 8, IP = 0 (SDM 8.4.4.1).
    StartAt { vector: u8 },
}

impl Lapic {
    pub fn new(apic_id: u32, config: LapicConfig) -> Lapic {
        let bsp = if apic_id == 0 { APIC_BASE_BSP } else { 0 };
        let mut lapic = Lapic {
            config,
            apic_id,
            apic_base: DEFAULT_MMIO_BASE | APIC_BASE_GLOBAL_ENABLE | bsp,
            irr: VectorSet::EMPTY,
            isr: VectorSet::EMPTY,
            tmr: VectorSet::EMPTY,
            tpr: 0,
            ppr: 0,
            ldr: 0,
            dfr: 0,
            svr: 0,
            esr: 0,
            esr_pending: 0,
            icr: 0,
            lvt: [0; 6],
            timer: TimerState::default(),
            startup: StartupState::Running,
            nmis_pending: 0,
        };
        lapic.reset();
        lapic
    }

    /// INIT (SDM 10.4.7.3): every register returns to its power-up value
    /// except the APIC ID and IA32_APIC_BASE (so x2APIC mode is kept).
    pub fn reset(&mut self) {
        self.irr = VectorSet::EMPTY;
        self.isr = VectorSet::EMPTY;
        self.tmr = VectorSet::EMPTY;
        self.tpr = 0;
        self.ppr = 0;
        self.ldr = if self.is_x2apic() {
            self.x2apic_logical_id()
        } else {
            0
        };
        self.dfr = u32::MAX;
        self.svr = SVR_RESET;
        self.esr = 0;
        self.esr_pending = 0;
        self.icr = 0;
        self.lvt = [LVT_RESET; 6];
        self.timer = TimerState::default();
    }

    pub fn apic_id(&self) -> u32 {
        self.apic_id
    }

    // --- INIT, Start-Up, NMI (SDM 8.4, 10.6.1) ------------------------------

    /// Power-up of an application processor (SDM 8.4.1): it waits for
    /// INIT and SIPI before it runs.
    pub fn hold_for_sipi(&mut self) {
        self.startup = StartupState::WaitForSipi;
    }

    /// An INIT message (SDM 10.6.1, 10.4.7.3): the APIC resets (`reset`),
    /// pending NMIs are dropped, and the processor waits for a SIPI.
    /// (INIT level de-assert never gets here: `send_ipi` drops it.)
    pub fn receive_init(&mut self) {
        self.reset();
        self.nmis_pending = 0;
        self.startup = StartupState::WaitForSipi;
    }

    /// A Start-Up message (SDM 10.6.1): starts a processor waiting for
    /// SIPI at `vector`; ignored by one that is not (SDM 8.4.4.1, the
    /// second SIPI of the universal start-up algorithm).
    pub fn receive_sipi(&mut self, vector: u8) {
        if self.startup == StartupState::WaitForSipi {
            self.startup = StartupState::StartAt { vector };
        }
    }

    pub fn startup_state(&self) -> StartupState {
        self.startup
    }

    /// The processor has been started where `StartAt` said: it runs.
    pub fn started(&mut self) {
        self.startup = StartupState::Running;
    }

    /// An NMI message (SDM 10.6.1): bypasses IRR, TPR and the software
    /// enable; the processor's own NMI blocking decides when it is taken.
    pub fn receive_nmi(&mut self) {
        self.nmis_pending = self.nmis_pending.saturating_add(1);
    }

    pub fn nmi_pending(&self) -> bool {
        self.nmis_pending > 0
    }

    /// The NMIs received since the last call, for the CPU to take.
    pub fn take_nmis(&mut self) -> u32 {
        std::mem::take(&mut self.nmis_pending)
    }

    pub fn config(&self) -> &LapicConfig {
        &self.config
    }

    // --- Core interrupt state ---------------------------------------------

    /// An arriving fixed or lowest-priority interrupt (SDM 10.8.3): sets IRR,
    /// and TMR for level (cleared for edge, SDM 10.8.4). Vectors 0-15 are
    /// illegal: ESR "receive illegal vector" is set and the interrupt dropped
    /// (SDM 10.5.3). A software- or hardware-disabled APIC drops fixed
    /// interrupts (SDM 10.4.7.2).
    #[inline]
    pub fn accept(&mut self, vector: u8, trigger_mode: TriggerMode) -> AcceptOutcome {
        if vector < FIRST_LEGAL_VECTOR {
            self.record_error(ESR_RECEIVE_ILLEGAL_VECTOR);
            return AcceptOutcome::Rejected;
        }
        if !self.software_enabled() || !self.hardware_enabled() {
            return AcceptOutcome::Rejected;
        }
        if trigger_mode.is_level() {
            self.tmr.set(vector);
        } else {
            self.tmr.clear(vector);
        }
        if self.irr.set(vector) {
            AcceptOutcome::Latched
        } else {
            AcceptOutcome::Coalesced
        }
    }

    /// The vector the LAPIC would dispatch now: the highest IRR vector whose
    /// priority class is above the PPR's (SDM 10.8.3.1). Interrupts already
    /// latched stay dispatchable when the APIC is software-disabled (SDM
    /// 10.4.7.2: pending interrupts are held and need handling).
    #[inline]
    pub fn pending_vector(&self) -> Option<u8> {
        let vector = self.irr.highest()?;
        (priority_class(vector) > priority_class(self.ppr) && self.hardware_enabled())
            .then_some(vector)
    }

    /// Interrupt acknowledge (INTA): moves the pending vector from IRR to ISR
    /// and raises the PPR to its class (SDM 10.8.3.1, 10.8.4).
    #[inline]
    pub fn acknowledge(&mut self) -> Option<u8> {
        let vector = self.pending_vector()?;
        self.irr.clear(vector);
        self.isr.set(vector);
        self.update_ppr();
        Some(vector)
    }

    /// EOI (SDM 10.8.5): clears the highest ISR bit, which is the most
    /// recently dispatched interrupt since dispatch only ever raises the
    /// priority class. With nothing in service nothing changes.
    #[inline]
    pub fn eoi(&mut self) -> EoiOutcome {
        let Some(vector) = self.isr.highest() else {
            return EoiOutcome::default();
        };
        self.isr.clear(vector);
        self.update_ppr();
        EoiOutcome {
            completed: Some(vector),
            broadcast: self.tmr.contains(vector).then_some(vector),
        }
    }

    pub fn irr(&self) -> &VectorSet {
        &self.irr
    }

    pub fn isr(&self) -> &VectorSet {
        &self.isr
    }

    pub fn tmr(&self) -> &VectorSet {
        &self.tmr
    }

    pub fn tpr(&self) -> u8 {
        self.tpr
    }

    /// Sets the task priority (SDM 10.8.3.1); bits 3:0 are kept but do not
    /// affect dispatch.
    pub fn set_tpr(&mut self, tpr: u8) {
        self.tpr = tpr;
        self.update_ppr();
    }

    pub fn ppr(&self) -> u8 {
        self.ppr
    }

    pub fn svr(&self) -> u32 {
        self.svr
    }

    /// Writes the spurious-interrupt vector register (SDM 10.9). Clearing the
    /// software-enable bit masks every LVT entry (SDM 10.4.7.2).
    pub fn set_svr(&mut self, value: u32) {
        self.svr = value & SVR_WRITABLE;
        if !self.software_enabled() {
            for entry in &mut self.lvt {
                *entry |= LVT_MASKED;
            }
        }
    }

    /// SVR bit 8 (SDM 10.4.7.2).
    pub fn software_enabled(&self) -> bool {
        self.svr & SVR_APIC_SOFTWARE_ENABLE != 0
    }

    pub fn spurious_vector(&self) -> u8 {
        (self.svr & 0xFF) as u8
    }

    pub fn lvt(&self, entry: Lvt) -> u32 {
        self.lvt[entry as usize]
    }

    /// Whether this LAPIC receives a message sent to `destination`
    /// (SDM 10.6.2: physical, flat/cluster logical; 10.12.10: x2APIC
    /// cluster logical).
    pub fn matches_destination(&self, destination: &Destination) -> bool {
        match *destination {
            Destination::Physical(id) => {
                let broadcast = if self.is_x2apic() {
                    X2APIC_BROADCAST_ID
                } else {
                    XAPIC_BROADCAST_ID
                };
                id == broadcast || id == self.apic_id
            }
            Destination::Logical(address) => self.matches_logical(address),
            Destination::SelfOnly { sender } => sender == self.apic_id,
            Destination::AllIncludingSelf => true,
            Destination::AllExcludingSelf { sender } => sender != self.apic_id,
        }
    }

    fn matches_logical(&self, address: u32) -> bool {
        if self.is_x2apic() {
            // SDM 10.12.10.2: cluster ID in bits 31:16, member bitmap in 15:0.
            return address == X2APIC_BROADCAST_ID
                || (address >> 16 == self.ldr >> 16 && address & self.ldr & 0xFFFF != 0);
        }
        let address = address & 0xFF;
        let logical_id = self.ldr >> 24;
        if address == XAPIC_BROADCAST_ID {
            true
        } else if self.dfr >> 28 == DFR_FLAT_MODEL {
            // SDM 10.6.2.2 flat model: any common bit.
            address & logical_id != 0
        } else {
            // Cluster model: same cluster (high nibble), common member bit.
            address >> 4 == logical_id >> 4 && address & logical_id & 0xF != 0
        }
    }

    // --- IA32_APIC_BASE (SDM 10.4.4, 10.12.5) ------------------------------

    pub fn apic_base(&self) -> u64 {
        self.apic_base
    }

    /// Physical address of the xAPIC MMIO page.
    pub fn mmio_base(&self) -> u64 {
        self.apic_base & 0x000F_FFFF_FFFF_F000
    }

    /// Where `address` falls in this processor's xAPIC page, if it does:
    /// the page sits wherever IA32_APIC_BASE puts it (SDM 10.4.5,
    /// "Relocating the Local APIC Registers"; each processor's own copy).
    /// Whether its registers answer there is `xapic_mmio_enabled`.
    pub fn mmio_offset(&self, address: u64) -> Option<u64> {
        let offset = address.checked_sub(self.mmio_base())?;
        (offset < MMIO_SIZE).then_some(offset)
    }

    pub fn is_x2apic(&self) -> bool {
        self.apic_base & (APIC_BASE_X2APIC_ENABLE | APIC_BASE_GLOBAL_ENABLE)
            == (APIC_BASE_X2APIC_ENABLE | APIC_BASE_GLOBAL_ENABLE)
    }

    /// Whether the xAPIC page answers (SDM 10.4.3: not while the APIC is
    /// disabled; 10.12.1.2: not in x2APIC mode).
    pub fn xapic_mmio_enabled(&self) -> bool {
        self.hardware_enabled() && !self.is_x2apic()
    }

    fn hardware_enabled(&self) -> bool {
        self.apic_base & APIC_BASE_GLOBAL_ENABLE != 0
    }

    /// Writes IA32_APIC_BASE. Allowed mode transitions (SDM 10.12.5 figure
    /// 10-27): disabled <-> xAPIC, xAPIC -> x2APIC, x2APIC -> disabled; any
    /// other, EXTD without EN, or reserved bits, is an error (#GP). Entering
    /// disabled resets the APIC (SDM 10.4.3).
    pub fn set_apic_base(&mut self, value: u64) -> Result<(), LapicError> {
        let invalid = || LapicError::InvalidApicBaseTransition {
            from: self.apic_base,
            to: value,
        };
        let reserved = !(APIC_BASE_WRITABLE | APIC_BASE_BSP) | self.config.apic_base_reserved();
        if value & reserved != 0 {
            return Err(LapicError::ReservedBits {
                msr: MSR_IA32_APIC_BASE,
                value,
            });
        }
        let mode = |base: u64| base & (APIC_BASE_GLOBAL_ENABLE | APIC_BASE_X2APIC_ENABLE);
        const DISABLED: u64 = 0;
        const XAPIC: u64 = APIC_BASE_GLOBAL_ENABLE;
        const X2APIC: u64 = APIC_BASE_GLOBAL_ENABLE | APIC_BASE_X2APIC_ENABLE;
        let (from, to) = (mode(self.apic_base), mode(value));
        let allowed = from == to
            || matches!(
                (from, to),
                (DISABLED, XAPIC) | (XAPIC, DISABLED) | (XAPIC, X2APIC) | (X2APIC, DISABLED)
            );
        if !allowed {
            return Err(invalid());
        }
        self.apic_base = (value & APIC_BASE_WRITABLE) | (self.apic_base & APIC_BASE_BSP);
        if to == DISABLED && from != DISABLED {
            self.reset();
        } else if to == X2APIC && from != X2APIC {
            // SDM 10.12.10.2: the logical ID is derived from the x2APIC ID.
            self.ldr = self.x2apic_logical_id();
        }
        Ok(())
    }

    /// x2APIC logical ID: cluster = ID[19:4] in bits 31:16, member bit
    /// 1 << ID[3:0] in bits 15:0 (SDM 10.12.10.2).
    fn x2apic_logical_id(&self) -> u32 {
        ((self.apic_id >> 4) << 16) | (1 << (self.apic_id & 0xF))
    }

    // --- xAPIC MMIO (SDM 10.4.1 table 10-1) --------------------------------

    /// A 32-bit read at `offset` in the APIC page. Registers sit on 16-byte
    /// boundaries; other offsets, reserved and write-only registers read 0,
    /// as does everything when the MMIO interface is off (APIC disabled or
    /// in x2APIC mode, SDM 10.12.1.2).
    pub fn read_mmio(&self, offset: u64, clock: &dyn Clock) -> u32 {
        if offset & 0xF != 0 || !self.xapic_mmio_enabled() {
            return 0;
        }
        match offset {
            APIC_ID => self.apic_id << 24,
            APIC_DFR => self.dfr,
            APIC_ICR_HIGH => (self.icr >> 32) as u32,
            _ => self.read_common(offset, clock).unwrap_or(0),
        }
    }

    /// A read of 1, 2 or 4 bytes at `offset`. SDM 10.4.1 asks for aligned
    /// 32-bit accesses and leaves others undefined; KVM's LAPIC
    /// (`kvm_lapic_reg_read`) and the VMMs built on it read the register's
    /// dword and return the bytes asked for, so this does too. An access
    /// running past its dword, or of another width, reads 0 (KVM leaves
    /// the destination untouched).
    pub fn read_mmio_bytes(&self, offset: u64, data: &mut [u8], clock: &dyn Clock) {
        data.fill(0);
        let within = (offset & 0x3) as usize;
        if !matches!(data.len(), 1 | 2 | 4) || within + data.len() > 4 {
            return;
        }
        let dword = self.read_mmio(offset & !0x3, clock).to_le_bytes();
        data.copy_from_slice(&dword[within..within + data.len()]);
    }

    /// A write of `data` at `offset`: only an aligned 32-bit write reaches
    /// a register (SDM 10.4.1); any other width is dropped, as KVM's
    /// `apic_mmio_write` drops it, rather than ending the guest.
    pub fn write_mmio_bytes(
        &mut self,
        offset: u64,
        data: &[u8],
        clock: &dyn Clock,
    ) -> Option<ApicBusMessage> {
        let dword: [u8; 4] = data.try_into().ok()?;
        self.write_mmio(offset, u32::from_le_bytes(dword), clock)
    }

    /// A 32-bit write at `offset`. Writes to read-only, reserved or unaligned
    /// offsets are ignored, as is everything when the MMIO interface is off.
    pub fn write_mmio(
        &mut self,
        offset: u64,
        value: u32,
        clock: &dyn Clock,
    ) -> Option<ApicBusMessage> {
        if offset & 0xF != 0 || !self.xapic_mmio_enabled() {
            return None;
        }
        match offset {
            APIC_LDR => {
                self.ldr = value & 0xFF00_0000;
                None
            }
            APIC_DFR => {
                self.dfr = value | DFR_RESERVED_ONES;
                None
            }
            APIC_ESR => {
                self.latch_errors();
                None
            }
            APIC_ICR_LOW => {
                self.icr = (self.icr & !0xFFFF_FFFF) | (u64::from(value) & ICR_LOW_WRITABLE);
                self.send_ipi(self.icr).map(ApicBusMessage::Ipi)
            }
            APIC_ICR_HIGH => {
                let high = value & ICR_HIGH_XAPIC_WRITABLE;
                self.icr = (self.icr & 0xFFFF_FFFF) | (u64::from(high) << 32);
                None
            }
            _ => self.write_common(offset, value, clock),
        }
    }

    // --- MSRs: x2APIC (SDM 10.12.1.2 table 10-6), APIC base, TSC deadline --

    /// RDMSR of a LAPIC MSR. Errors become #GP in the guest.
    pub fn read_msr(&self, msr: u32, clock: &dyn Clock) -> Result<u64, LapicError> {
        match msr {
            MSR_IA32_APIC_BASE => return Ok(self.apic_base),
            MSR_IA32_TSC_DEADLINE => return Ok(self.read_tsc_deadline()),
            _ => {}
        }
        let offset = self.x2apic_offset(msr)?;
        match access(offset) {
            Access::Reserved => Err(LapicError::ReservedRegister { msr }),
            Access::WriteOnly => Err(LapicError::WriteOnlyRegister { msr }),
            Access::ReadOnly | Access::ReadWrite => Ok(match offset {
                APIC_ID => u64::from(self.apic_id),
                APIC_ICR_LOW => self.icr,
                _ => u64::from(self.read_common(offset, clock).unwrap_or(0)),
            }),
        }
    }

    /// WRMSR of a LAPIC MSR; may put a message on the bus. Errors become #GP
    /// in the guest.
    pub fn write_msr(
        &mut self,
        msr: u32,
        value: u64,
        clock: &dyn Clock,
    ) -> Result<Option<ApicBusMessage>, LapicError> {
        match msr {
            MSR_IA32_APIC_BASE => return self.set_apic_base(value).map(|()| None),
            MSR_IA32_TSC_DEADLINE => {
                self.write_tsc_deadline(value);
                return Ok(None);
            }
            _ => {}
        }
        let offset = self.x2apic_offset(msr)?;
        match access(offset) {
            Access::Reserved => return Err(LapicError::ReservedRegister { msr }),
            Access::ReadOnly => return Err(LapicError::ReadOnlyRegister { msr }),
            Access::WriteOnly | Access::ReadWrite => {}
        }
        let reserved = LapicError::ReservedBits { msr, value };
        if offset == APIC_ICR_LOW {
            // The 64-bit ICR: destination in bits 63:32 (SDM 10.12.9).
            if value & 0xFFFF_FFFF & !ICR_LOW_WRITABLE != 0 {
                return Err(reserved);
            }
            self.icr = value;
            return Ok(self.send_ipi(value).map(ApicBusMessage::Ipi));
        }
        let Ok(value32) = u32::try_from(value) else {
            return Err(reserved);
        };
        match offset {
            // SDM 10.12.1.2: a non-zero write to EOI or ESR raises #GP.
            APIC_EOI | APIC_ESR if value32 != 0 => Err(reserved),
            APIC_ESR => {
                self.latch_errors();
                Ok(None)
            }
            APIC_SELF_IPI => {
                // SDM 10.12.11: vector in bits 7:0, the rest reserved.
                let Ok(vector) = u8::try_from(value32) else {
                    return Err(reserved);
                };
                let interrupt = Interrupt {
                    vector,
                    delivery_mode: DeliveryMode::Fixed,
                    trigger_mode: TriggerMode::Edge,
                    destination: Destination::SelfOnly {
                        sender: self.apic_id,
                    },
                };
                Ok(self.check_sent_vector(interrupt).map(ApicBusMessage::Ipi))
            }
            _ => Ok(self.write_common(offset, value32, clock)),
        }
    }

    /// The xAPIC offset of an x2APIC MSR, once the LAPIC is in x2APIC mode.
    fn x2apic_offset(&self, msr: u32) -> Result<u64, LapicError> {
        if !(MSR_X2APIC_FIRST..=MSR_X2APIC_LAST).contains(&msr) {
            return Err(LapicError::NotLapicMsr { msr });
        }
        if !self.is_x2apic() {
            return Err(LapicError::X2apicDisabled { msr });
        }
        Ok(u64::from(msr - MSR_X2APIC_FIRST) << 4)
    }

    // --- Registers shared by both interfaces -------------------------------

    /// Reads a register whose format is the same in xAPIC and x2APIC modes;
    /// `None` for offsets that are not such a register.
    fn read_common(&self, offset: u64, clock: &dyn Clock) -> Option<u32> {
        // Only called for offsets inside the bank's 8 registers, so the index
        // is below 8.
        let bank = |first: u64| ((offset - first) >> 4) as usize;
        Some(match offset {
            APIC_VERSION => APIC_VERSION_VALUE,
            APIC_TPR => u32::from(self.tpr),
            APIC_PPR => u32::from(self.ppr),
            APIC_LDR => self.ldr,
            APIC_SVR => self.svr,
            APIC_ISR..APIC_TMR => self.isr.bank(bank(APIC_ISR)),
            APIC_TMR..APIC_IRR => self.tmr.bank(bank(APIC_TMR)),
            APIC_IRR..APIC_ESR => self.irr.bank(bank(APIC_IRR)),
            APIC_ESR => self.esr,
            APIC_ICR_LOW => low_u32(self.icr),
            APIC_TIMER_INITIAL_COUNT => self.timer.initial_count,
            APIC_TIMER_CURRENT_COUNT => self.current_count(clock.now_ns()),
            APIC_TIMER_DIVIDE_CONFIG => self.timer.divide_config,
            _ => return Lvt::from_offset(offset).map(|entry| self.lvt(entry)),
        })
    }

    /// Writes a register whose format is the same in both modes; other
    /// offsets are ignored.
    fn write_common(
        &mut self,
        offset: u64,
        value: u32,
        clock: &dyn Clock,
    ) -> Option<ApicBusMessage> {
        match offset {
            APIC_TPR => self.set_tpr(low_u8(value)),
            APIC_EOI => return self.eoi().broadcast.map(ApicBusMessage::Eoi),
            APIC_SVR => self.set_svr(value),
            APIC_TIMER_INITIAL_COUNT => self.write_initial_count(value, clock.now_ns()),
            // The new divisor applies from the next TMICT write: the count in
            // progress keeps its rate and deadline.
            APIC_TIMER_DIVIDE_CONFIG => self.timer.divide_config = value & TDCR_WRITABLE,
            _ => {
                if let Some(entry) = Lvt::from_offset(offset) {
                    self.write_lvt(entry, value);
                }
            }
        }
        None
    }

    fn write_lvt(&mut self, entry: Lvt, value: u32) {
        let mut value = value & entry.writable_bits();
        if !self.software_enabled() {
            // SDM 10.4.7.2: LVT mask bits cannot be cleared while disabled.
            value |= LVT_MASKED;
        }
        let old = std::mem::replace(&mut self.lvt[entry as usize], value);
        if entry == Lvt::Timer {
            let deadline_mode = |lvt| TimerMode::from_lvt(lvt) == TimerMode::TscDeadline;
            // SDM 10.5.4.1: switching into or out of TSC-deadline mode
            // disarms the timer.
            if deadline_mode(old) != deadline_mode(value) {
                self.timer.deadline_ns = None;
                self.timer.tsc_deadline = 0;
                self.timer.initial_count = 0;
            }
        }
    }

    // --- ICR and errors ----------------------------------------------------

    /// Decodes an ICR value into the IPI it sends (SDM 10.6.1). The INIT
    /// level de-assert message and the reserved delivery mode send nothing.
    fn send_ipi(&mut self, icr: u64) -> Option<Interrupt> {
        let delivery_mode = DeliveryMode::from_bits(low_u32(icr >> ICR_DELIVERY_MODE_SHIFT))?;
        let level_triggered = icr & ICR_TRIGGER_LEVEL != 0;
        if delivery_mode == DeliveryMode::Init && level_triggered && icr & ICR_LEVEL_ASSERT == 0 {
            return None;
        }
        let sender = self.apic_id;
        let destination = match DestinationShorthand::from_bits(low_u32(icr >> ICR_SHORTHAND_SHIFT))
        {
            DestinationShorthand::NoShorthand => {
                let id = if self.is_x2apic() {
                    high_u32(icr)
                } else {
                    low_u32(icr >> ICR_XAPIC_DESTINATION_SHIFT)
                };
                if icr & ICR_LOGICAL_DESTINATION != 0 {
                    Destination::Logical(id)
                } else {
                    Destination::Physical(id)
                }
            }
            DestinationShorthand::SelfOnly => Destination::SelfOnly { sender },
            DestinationShorthand::AllIncludingSelf => Destination::AllIncludingSelf,
            DestinationShorthand::AllExcludingSelf => Destination::AllExcludingSelf { sender },
        };
        // The trigger mode only means something for fixed and lowest-priority
        // IPIs; the others are edge messages.
        let trigger_mode = TriggerMode::from_level_bit(level_triggered && delivery_mode.uses_irr());
        self.check_sent_vector(Interrupt {
            vector: (icr & ICR_VECTOR) as u8,
            delivery_mode,
            trigger_mode,
            destination,
        })
    }

    /// A fixed or lowest-priority IPI with vector 0-15 is not sent and sets
    /// ESR "send illegal vector" (SDM 10.5.3).
    fn check_sent_vector(&mut self, interrupt: Interrupt) -> Option<Interrupt> {
        if interrupt.delivery_mode.uses_irr() && interrupt.vector < FIRST_LEGAL_VECTOR {
            self.record_error(ESR_SEND_ILLEGAL_VECTOR);
            return None;
        }
        Some(interrupt)
    }

    /// Logs an error and raises the LVT error interrupt unless masked
    /// (SDM 10.5.3).
    fn record_error(&mut self, error: u32) {
        self.esr_pending |= error;
        let lvt_error = self.lvt(Lvt::Error);
        let vector = (lvt_error & LVT_VECTOR) as u8;
        if lvt_error & LVT_MASKED == 0 && vector >= FIRST_LEGAL_VECTOR {
            self.accept(vector, TriggerMode::Edge);
        }
    }

    /// An ESR write makes the errors detected since the previous write
    /// readable and starts collecting anew (SDM 10.5.3).
    fn latch_errors(&mut self) {
        self.esr = std::mem::take(&mut self.esr_pending);
    }

    /// PPR = TPR if TPR's class is at least the highest in-service class,
    /// else that class with sub-class 0 (SDM 10.8.3.1).
    #[inline]
    fn update_ppr(&mut self) {
        let isrv = self.isr.highest().unwrap_or(0);
        self.ppr = if priority_class(self.tpr) >= priority_class(isrv) {
            self.tpr
        } else {
            isrv & 0xF0
        };
    }

    // --- Timer (SDM 10.5.4) ------------------------------------------------

    pub fn timer_mode(&self) -> TimerMode {
        TimerMode::from_lvt(self.lvt(Lvt::Timer))
    }

    /// Absolute clock time of the next timer expiry; `None` when disarmed.
    pub fn timer_deadline_ns(&self) -> Option<u64> {
        self.timer.deadline_ns
    }

    /// Call at or after [`Self::timer_deadline_ns`]. When the deadline has
    /// passed, raises the LVT timer vector unless the entry is masked,
    /// re-arms a periodic timer for the next period after now (missed
    /// periods coalesce, as they would in IRR), and disarms one-shot and
    /// TSC-deadline timers (IA32_TSC_DEADLINE reads 0 afterwards). Returns
    /// whether the interrupt was raised.
    pub fn expire_timer(&mut self, clock: &dyn Clock) -> bool {
        let now = clock.now_ns();
        let Some(deadline) = self.timer.deadline_ns.filter(|&deadline| deadline <= now) else {
            return false;
        };
        match self.timer_mode() {
            TimerMode::Periodic => {
                let period = self.period_ns();
                let periods_elapsed = (now - deadline) / period + 1;
                self.timer.period_start_ns =
                    deadline.saturating_add((periods_elapsed - 1) * period);
                self.timer.deadline_ns = Some(self.timer.period_start_ns.saturating_add(period));
            }
            TimerMode::OneShot => self.timer.deadline_ns = None,
            TimerMode::TscDeadline => {
                self.timer.deadline_ns = None;
                self.timer.tsc_deadline = 0;
            }
        }
        let lvt_timer = self.lvt(Lvt::Timer);
        if lvt_timer & LVT_MASKED != 0 {
            return false;
        }
        self.accept((lvt_timer & LVT_VECTOR) as u8, TriggerMode::Edge) != AcceptOutcome::Rejected
    }

    /// One full count in ns: initial count x divisor bus cycles, rounded up,
    /// at least 1 so a periodic timer always advances.
    fn period_ns(&self) -> u64 {
        let cycles = u128::from(self.timer.initial_count) * u128::from(self.timer.counting_divisor);
        saturate((cycles * NS_PER_SECOND).div_ceil(u128::from(self.config.bus_hz.get()))).max(1)
    }

    /// TMICT write: starts counting from now; 0 stops the timer. Ignored in
    /// TSC-deadline mode (SDM 10.5.4.1).
    fn write_initial_count(&mut self, count: u32, now: u64) {
        if self.timer_mode() == TimerMode::TscDeadline {
            return;
        }
        self.timer.initial_count = count;
        self.timer.counting_divisor = self.timer.divisor();
        self.timer.period_start_ns = now;
        self.timer.deadline_ns = (count != 0).then(|| now.saturating_add(self.period_ns()));
    }

    /// TMCCT: counts down from the initial count in steps of `divisor` bus
    /// cycles; a periodic timer reloads, an expired one-shot reads 0.
    fn current_count(&self, now: u64) -> u32 {
        let initial = self.timer.initial_count;
        if initial == 0
            || self.timer.deadline_ns.is_none()
            || self.timer_mode() == TimerMode::TscDeadline
        {
            return 0;
        }
        let elapsed = u128::from(now.saturating_sub(self.timer.period_start_ns));
        let ticks = elapsed * u128::from(self.config.bus_hz.get())
            / (NS_PER_SECOND * u128::from(self.timer.counting_divisor));
        let initial = u128::from(initial);
        let remaining = match self.timer_mode() {
            TimerMode::Periodic => initial - ticks % initial,
            _ => initial.saturating_sub(ticks),
        };
        u32::try_from(remaining).expect("remaining <= initial, which came from a u32")
    }

    fn read_tsc_deadline(&self) -> u64 {
        match self.timer_mode() {
            TimerMode::TscDeadline => self.timer.tsc_deadline,
            _ => 0,
        }
    }

    /// IA32_TSC_DEADLINE write (SDM 10.5.4.1): arms the timer to fire when
    /// the TSC reaches `tsc` (at once if already past); 0 disarms. Ignored
    /// outside TSC-deadline mode.
    fn write_tsc_deadline(&mut self, tsc: u64) {
        if self.timer_mode() != TimerMode::TscDeadline {
            return;
        }
        self.timer.tsc_deadline = tsc;
        self.timer.deadline_ns = (tsc != 0).then(|| self.config.ns_at_tsc(tsc));
    }
}

/// The priority class of a vector or priority value: bits 7:4.
#[inline]
const fn priority_class(value: u8) -> u8 {
    value >> 4
}

fn saturate(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// How an x2APIC register MSR may be accessed (SDM 10.12.1.2 table 10-6).
enum Access {
    ReadOnly,
    WriteOnly,
    ReadWrite,
    Reserved,
}

fn access(offset: u64) -> Access {
    match offset {
        APIC_ID | APIC_VERSION | APIC_PPR | APIC_LDR | APIC_TIMER_CURRENT_COUNT => Access::ReadOnly,
        APIC_ISR..APIC_ESR => Access::ReadOnly,
        APIC_EOI | APIC_SELF_IPI => Access::WriteOnly,
        APIC_TPR
        | APIC_SVR
        | APIC_ESR
        | APIC_ICR_LOW
        | APIC_TIMER_INITIAL_COUNT
        | APIC_TIMER_DIVIDE_CONFIG => Access::ReadWrite,
        APIC_LVT_TIMER..=APIC_LVT_ERROR if offset & 0xF == 0 => Access::ReadWrite,
        _ => Access::Reserved,
    }
}
