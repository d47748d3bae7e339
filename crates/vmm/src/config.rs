//! What a run boots and measures: every flag of `dirq run`, serde-friendly
//! so reports can record and replay it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown {what} '{value}' (expected one of: {expected})")]
    UnknownValue {
        what: &'static str,
        value: String,
        expected: String,
    },
    #[error("invalid halt mode '{0}' (expected exit, none or poll:<ns>, e.g. poll:200000)")]
    InvalidHalt(String),
    #[error("{0}")]
    Incompatible(String),
    #[error("{what} must be between {min} and {max}, got {value}")]
    OutOfRange {
        what: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
}

/// Defines a string-valued enum: `FromStr`, `Display`, serde as the string.
macro_rules! named_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal, { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Every value's name, comma-separated.
            pub fn names() -> String {
                Self::ALL.iter().map(|value| value.name()).collect::<Vec<_>>().join(", ")
            }

            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = ConfigError;
            fn from_str(value: &str) -> Result<Self, ConfigError> {
                match value {
                    $($text => Ok($name::$variant),)+
                    _ => Err(ConfigError::UnknownValue {
                        what: $what,
                        value: value.to_string(),
                        expected: $name::names(),
                    }),
                }
            }
        }
    };
}

named_enum!(
    /// The benchmark the guest runs.
    Bench, "bench", {
        /// A device thread raises MSIs; the round trip to the guest's ack.
        IrqLatency = "irq-latency",
        /// The guest's LAPIC timer: how late each expiry is handled.
        TimerLatency = "timer-latency",
        /// vCPU 0 and vCPU 1 ping-pong IPIs.
        Ipi = "ipi",
        /// A compute loop's slowdown under an interrupt load.
        Whileloop = "whileloop",
        /// One userspace exit and one in-kernel exit, timed (`dirq probe`).
        ExitCost = "exit-cost",
        /// The guest misbehaves on purpose (see `FaultKind`).
        Fault = "fault",
        /// Level-triggered device interrupts through an I/O interrupt
        /// controller at one of four levels (`VioapicMode`), back to back.
        Vioapic = "vioapic",
        /// Disk commands of 11 port writes each, or one doorbell per command.
        IoBatch = "io-batch",
        /// A compute loop under the guest's 1000 Hz PIT tick, optionally
        /// slowed by the VMM (`--tick-scale`).
        Tick = "tick",
        /// A self-IPI sent between enabling interrupts and HLT must wake
        /// the halt (the lost-wake-up window of kvm_pvm's native mode).
        HaltWakeup = "halt-wakeup",
        /// Guest code that attacks the VMM (`HostileCase`): the VMM must
        /// refuse it with a message naming the cause, or survive it.
        Hostile = "hostile",
    }
);

named_enum!(
    /// The attack of the `hostile` bench (crates/vmm/src/hostile.rs says
    /// what the VMM must do with each; guest/bench_hostile.c does it).
    HostileCase, "hostile case", {
        TripleFaultVcpu0 = "triple-fault-vcpu0",
        TripleFaultVcpu1 = "triple-fault-vcpu1",
        InterruptsOffForever = "interrupts-off-forever",
        EoiStormX2apic = "eoi-storm-x2apic",
        EoiStormMmio = "eoi-storm-mmio",
        UnownedPort = "unowned-port",
        UnownedMmio = "unowned-mmio",
        UnownedMsr = "unowned-msr",
        DoorbellOutsideRam = "doorbell-outside-ram",
        DoorbellStraddlesRamEnd = "doorbell-straddles-ram-end",
        DoorbellHugeCount = "doorbell-huge-count",
        DoorbellBadSize = "doorbell-bad-size",
        DoorbellReservedByte = "doorbell-reserved-byte",
        DoorbellUnownedPort = "doorbell-unowned-port",
        DoorbellNested = "doorbell-nested",
        PvLockHeldForever = "pv-lock-held-forever",
        PvLockHeldThenUnmask = "pv-lock-held-then-unmask",
        PvLockGarbage = "pv-lock-garbage",
        PvPageCorrupt = "pv-page-corrupt",
        UnknownHypercall = "unknown-hypercall",
        SerialFloodLines = "serial-flood-lines",
        SerialFloodNoNewline = "serial-flood-no-newline",
        SerialEscapes = "serial-escapes",
        InitSipiVcpu1 = "init-sipi-vcpu1",
        ForgedAck = "forged-ack",
        TprBlocksAll = "tpr-blocks-all",
        PeriodicTimerCount1 = "periodic-timer-count-1",
        ForgedSampleCount = "forged-sample-count",
    }
);

named_enum!(
    /// Where the vioapic bench's I/O interrupt controller lives
    /// (mechanisms.md section 6), from dearest to cheapest.
    VioapicMode, "vioapic mode", {
        /// dirq's VIOAPIC in the VMM: every register access exits to userspace.
        Userspace = "userspace",
        /// KVM's in-kernel IOAPIC, level-triggered: accesses stay in the kernel.
        Kernel = "kernel",
        /// dirq's VIOAPIC with its readable registers mirrored in a
        /// read-only memory slot: reads cost no exit, writes trap.
        RoPage = "ro-page",
        /// MASK in a guest-writable shared page, only UNMASK traps.
        Pv = "pv",
    }
);

named_enum!(
    /// Whom the ipi bench's CPU 0 pings.
    IpiKind, "ipi kind", {
        /// CPU 1 only.
        Unicast = "unicast",
        /// Every other CPU at once (ICR shorthand all-excluding-self).
        Broadcast = "broadcast",
    }
);

named_enum!(
    /// What one ipi sample times.
    IpiMeasure, "ipi measure", {
        /// Ping sent to the last pong handled back on CPU 0.
        RoundTrip = "round-trip",
        /// Ping sent to the pinged handler's entry (`dirq probe`'s floor).
        OneWay = "one-way",
    }
);

named_enum!(
    /// Who emulates the interrupt controllers.
    Irqchip, "irqchip", {
        /// No KVM irqchip: dirq's LAPIC/IOAPIC models in this process.
        Userspace = "userspace",
        /// KVM's in-kernel LAPIC, IOAPIC and PIC.
        Kernel = "kernel",
        /// KVM's in-kernel LAPIC, dirq's IOAPIC model in this process.
        Split = "split",
    }
);

named_enum!(
    /// How a device thread's interrupt reaches the vCPU.
    Inject, "inject", {
        /// The VMM injects it (KVM_SIGNAL_MSI, or KVM_INTERRUPT in userspace mode).
        Vcpu = "vcpu",
        /// An irqfd bound to an MSI route: the kernel delivers it.
        Irqfd = "irqfd",
    }
);

named_enum!(
    /// What the irq-latency device is wired to.
    IrqSource, "interrupt source", {
        /// It sends MSIs straight to the LAPIC.
        Msi = "msi",
        /// It pulses IOAPIC input 10, which the guest routes to its vector.
        Ioapic = "ioapic",
    }
);

named_enum!(
    /// How the guest talks to its LAPIC.
    ApicMode, "apic mode", {
        Xapic = "xapic",
        X2apic = "x2apic",
    }
);

named_enum!(
    /// What the guest does while it waits for the next event.
    GuestIdle, "guest idle", {
        Halt = "halt",
        Busy = "busy",
    }
);

named_enum!(
    /// The LAPIC timer mode of `timer-latency`.
    TimerMode, "timer mode", {
        Oneshot = "oneshot",
        TscDeadline = "tsc-deadline",
    }
);

named_enum!(
    /// How the guest's instructions execute. The VMM decides it from the
    /// host side (`exec::HostExec`); the guest is told, never probes.
    GuestExec, "guest execution mode", {
        /// kvm_pvm's native mode: the guest runs on the CPU in ring 3 and
        /// only privileged operations trap.
        Native = "native",
        /// kvm_pvm's instruction emulator runs every guest instruction.
        Emulated = "emulated",
        /// Hardware virtualization (VT-x/SVM): an ordinary x86 guest.
        Hardware = "hardware",
    }
);

named_enum!(
    /// The misbehaviour of the `fault` bench.
    FaultKind, "fault", {
        /// An exception with no IDT: KVM_EXIT_SHUTDOWN.
        TripleFault = "triple-fault",
        /// Spins with interrupts off; only the watchdog ends it.
        Hang = "hang",
        /// An `out` to a port no device owns.
        UnownedPort = "unowned-port",
        /// A read of an address no RAM or device backs.
        UnownedMmio = "unowned-mmio",
        /// `ud2`: the guest's own exception handler reports it.
        Exception = "exception",
    }
);

/// What happens when the guest executes HLT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum HaltMode {
    /// HLT exits and the vCPU thread sleeps at once (halt polling off).
    Exit,
    /// KVM polls this many ns for a wake-up before sleeping (KVM_CAP_HALT_POLL).
    Poll { ns: u32 },
    /// HLT does not exit (KVM_CAP_X86_DISABLE_EXITS).
    None,
}

impl fmt::Display for HaltMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HaltMode::Exit => f.write_str("exit"),
            HaltMode::Poll { ns } => write!(f, "poll:{ns}"),
            HaltMode::None => f.write_str("none"),
        }
    }
}

impl FromStr for HaltMode {
    type Err = ConfigError;
    fn from_str(value: &str) -> Result<Self, ConfigError> {
        match value {
            "exit" => Ok(HaltMode::Exit),
            "none" => Ok(HaltMode::None),
            _ => value
                .strip_prefix("poll:")
                .and_then(|ns| ns.parse().ok())
                .map(|ns| HaltMode::Poll { ns })
                .ok_or_else(|| ConfigError::InvalidHalt(value.to_string())),
        }
    }
}

impl TryFrom<String> for HaltMode {
    type Error = ConfigError;
    fn try_from(value: String) -> Result<Self, ConfigError> {
        value.parse()
    }
}

impl From<HaltMode> for String {
    fn from(mode: HaltMode) -> String {
        mode.to_string()
    }
}

/// Everything one run boots and measures. `BenchConfig::new` gives defaults
/// that finish in about a second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    pub bench: Bench,
    pub irqchip: Irqchip,
    pub inject: Inject,
    pub source: IrqSource,
    pub pv_eoi: bool,
    pub halt: HaltMode,
    pub apic: ApicMode,
    pub guest_idle: GuestIdle,
    pub timer: TimerMode,
    /// Events to measure: interrupts, timer expiries, IPI round trips, exits.
    pub count: u64,
    /// Device interrupts per second (irq-latency, whileloop); 0 = back to back.
    pub rate_hz: u64,
    /// Timer period (timer-latency).
    pub period_ns: u64,
    /// Length of the unloaded loop (whileloop).
    pub duration_ms: u64,
    /// The misbehaviour of the `fault` bench.
    pub fault: FaultKind,
    /// vCPUs to boot (the ipi bench's broadcast uses more than two).
    pub vcpus: u32,
    /// The vioapic bench's controller level.
    pub vioapic: VioapicMode,
    /// vioapic race test: the device raises at random times while the guest
    /// also masks and unmasks outside its handler.
    pub vioapic_race: bool,
    /// io-batch: record each command's port writes and ring one doorbell.
    pub io_batch: bool,
    /// tick: the VMM runs the guest's PIT this many times slower.
    pub tick_scale: u32,
    /// ipi: unicast or broadcast.
    pub ipi: IpiKind,
    /// ipi broadcast: one KVM_HC_SEND_IPI hypercall instead of an ICR write.
    pub pv_send_ipi: bool,
    /// ipi: round trip or one way.
    #[serde(default = "IpiMeasure::round_trip")]
    pub ipi_measure: IpiMeasure,
    /// The watchdog: a run that has not finished by then fails.
    pub timeout_ms: u64,
    /// How the guest executes; `None`: the best this host offers
    /// (`exec::HostExec::default_exec`).
    #[serde(default)]
    pub guest_exec: Option<GuestExec>,
    /// The hostile bench's attack.
    #[serde(default = "HostileCase::first")]
    pub hostile: HostileCase,
}

/// The hostile bench's default watchdog: longer than the device's wait
/// for an acknowledgement (2 s), so that its verdict comes first.
pub const HOSTILE_TIMEOUT_MS: u64 = 4_000;

/// The fastest device `--rate`: one interrupt per microsecond, already
/// beyond what one exit costs on any host dirq runs on.
pub const MAX_RATE_HZ: u64 = 1_000_000;
/// The longest `--duration-ms` (a minute).
pub const MAX_DURATION_MS: u64 = 60_000;
/// The longest watchdog, in ms (an hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// `--period-ns` bounds: 1 us to 1 s.
pub const MIN_PERIOD_NS: u64 = 1_000;
pub const MAX_PERIOD_NS: u64 = 1_000_000_000;

/// The largest count the guest's sample area holds.
pub const MAX_COUNT: u64 = crate::memory::SAMPLES_CAPACITY;
/// vCPUs a run can boot: the guest's per-CPU stacks and counters.
pub const MAX_VCPUS: u32 = crate::abi::MAX_CPUS as u32;
/// The largest `--tick-scale`: it turns a 1000 Hz tick into a 1 Hz one.
pub const MAX_TICK_SCALE: u32 = 1000;

impl BenchConfig {
    /// The in-kernel path with defaults sized for about a second of work.
    pub fn new(bench: Bench) -> Self {
        let (count, rate_hz) = match bench {
            Bench::IrqLatency => (5_000, 5_000),
            Bench::TimerLatency => (5_000, 0),
            Bench::Ipi => (5_000, 0),
            Bench::Whileloop => (0, 10_000),
            Bench::ExitCost => (20_000, 0),
            Bench::Fault => (0, 0),
            Bench::Vioapic => (20_000, 0),
            Bench::IoBatch => (5_000, 0),
            Bench::Tick => (0, 0),
            Bench::HaltWakeup => (1_000, 0),
            Bench::Hostile => (100, 0),
        };
        BenchConfig {
            bench,
            // The tick's PIT lives in the VMM, which KVM allows only with
            // its IOAPIC out of the kernel too.
            irqchip: if bench == Bench::Tick {
                Irqchip::Split
            } else {
                Irqchip::Kernel
            },
            inject: Inject::Vcpu,
            source: IrqSource::Msi,
            pv_eoi: false,
            halt: HaltMode::Exit,
            apic: ApicMode::X2apic,
            guest_idle: GuestIdle::Halt,
            timer: TimerMode::TscDeadline,
            count,
            rate_hz,
            period_ns: 200_000,
            duration_ms: 500,
            fault: FaultKind::Exception,
            vcpus: 2,
            vioapic: VioapicMode::Userspace,
            vioapic_race: false,
            io_batch: false,
            tick_scale: 1,
            ipi: IpiKind::Unicast,
            pv_send_ipi: false,
            ipi_measure: IpiMeasure::RoundTrip,
            // A hostile case that refuses by the watchdog should not take long.
            timeout_ms: if bench == Bench::Hostile {
                HOSTILE_TIMEOUT_MS
            } else {
                30_000
            },
            guest_exec: None,
            hostile: HostileCase::first(),
        }
    }

    /// Rejects combinations KVM cannot provide, with the reason.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let incompatible = |why: &str| Err(ConfigError::Incompatible(why.to_string()));
        if self.irqchip == Irqchip::Userspace {
            if self.inject == Inject::Irqfd {
                return incompatible(
                    "--inject irqfd needs KVM's LAPIC: use --irqchip kernel or split",
                );
            }
            if self.pv_eoi {
                return incompatible(
                    "--pv-eoi is a feature of KVM's LAPIC: use --irqchip kernel or split",
                );
            }
            if matches!(self.halt, HaltMode::Poll { .. }) {
                return incompatible(
                    "--halt poll is KVM's in-kernel halt polling: with --irqchip userspace HLT always exits to the VMM",
                );
            }
        }
        if self.irqchip == Irqchip::Split
            && self.source == IrqSource::Ioapic
            && self.inject == Inject::Irqfd
        {
            return incompatible("--inject irqfd cannot drive the IOAPIC in the VMM (--irqchip split): use --inject vcpu");
        }
        self.validate_designs()?;
        let counted = matches!(
            self.bench,
            Bench::IrqLatency
                | Bench::TimerLatency
                | Bench::Ipi
                | Bench::ExitCost
                | Bench::Vioapic
                | Bench::IoBatch
                | Bench::HaltWakeup
                | Bench::Hostile
        );
        if counted && !(1..=MAX_COUNT).contains(&self.count) {
            return Err(ConfigError::OutOfRange {
                what: "--count",
                value: self.count,
                min: 1,
                max: MAX_COUNT,
            });
        }
        if self.bench == Bench::TimerLatency
            && !(MIN_PERIOD_NS..=MAX_PERIOD_NS).contains(&self.period_ns)
        {
            return Err(ConfigError::OutOfRange {
                what: "--period-ns",
                value: self.period_ns,
                min: MIN_PERIOD_NS,
                max: MAX_PERIOD_NS,
            });
        }
        // Every bench's duration reaches the guest in ns: bounded, it cannot wrap.
        if !(1..=MAX_DURATION_MS).contains(&self.duration_ms) {
            return Err(ConfigError::OutOfRange {
                what: "--duration-ms",
                value: self.duration_ms,
                min: 1,
                max: MAX_DURATION_MS,
            });
        }
        if self.rate_hz > MAX_RATE_HZ {
            return Err(ConfigError::OutOfRange {
                what: "--rate",
                value: self.rate_hz,
                min: 0,
                max: MAX_RATE_HZ,
            });
        }
        if self.timeout_ms > MAX_TIMEOUT_MS {
            return Err(ConfigError::OutOfRange {
                what: "--timeout (in ms)",
                value: self.timeout_ms,
                min: 1,
                max: MAX_TIMEOUT_MS,
            });
        }
        if self.bench == Bench::Whileloop && self.rate_hz == 0 {
            return incompatible("whileloop needs an interrupt rate: --rate must be at least 1");
        }
        if self.timeout_ms == 0 {
            return incompatible("--timeout must be at least 1 ms");
        }
        Ok(())
    }

    /// The bench-specific parameters the guest reads from `shared->args`.
    pub fn guest_args(&self) -> [u64; 4] {
        match self.bench {
            Bench::Vioapic => [self.vioapic.abi_id(), u64::from(self.vioapic_race), 0, 0],
            Bench::IoBatch => [u64::from(self.io_batch), 0, 0, 0],
            Bench::Hostile => [self.hostile.abi_id(), 0, 0, 0],
            Bench::Ipi => {
                let kind = match (self.ipi, self.pv_send_ipi) {
                    (IpiKind::Unicast, _) => crate::abi::IPI_UNICAST,
                    (IpiKind::Broadcast, false) => crate::abi::IPI_BROADCAST,
                    (IpiKind::Broadcast, true) => crate::abi::IPI_BROADCAST_PV,
                };
                let measure = match self.ipi_measure {
                    IpiMeasure::RoundTrip => crate::abi::IPI_ROUND_TRIP,
                    IpiMeasure::OneWay => crate::abi::IPI_ONE_WAY,
                };
                [kind, measure, 0, 0]
            }
            _ => [0; 4],
        }
    }

    /// The flags of the software-only designs (mechanisms.md sections 6-8).
    fn validate_designs(&self) -> Result<(), ConfigError> {
        let incompatible = |why: &str| Err(ConfigError::Incompatible(why.to_string()));
        if !(1..=MAX_VCPUS).contains(&self.vcpus) {
            return Err(ConfigError::OutOfRange {
                what: "--vcpus",
                value: u64::from(self.vcpus),
                min: 1,
                max: u64::from(MAX_VCPUS),
            });
        }
        if self.bench == Bench::Ipi && self.vcpus < 2 {
            return incompatible("ipi needs at least 2 vCPUs");
        }
        if !(1..=MAX_TICK_SCALE).contains(&self.tick_scale) {
            return Err(ConfigError::OutOfRange {
                what: "--tick-scale",
                value: u64::from(self.tick_scale),
                min: 1,
                max: u64::from(MAX_TICK_SCALE),
            });
        }
        if self.pv_send_ipi && self.ipi != IpiKind::Broadcast {
            return incompatible(
                "--pv-send-ipi replaces the broadcast ICR write: use it with --ipi broadcast",
            );
        }
        match self.bench {
            Bench::Vioapic => {
                // The modes differ only in where the I/O controller lives; the
                // LAPIC below it is KVM's in every mode.
                if self.irqchip != Irqchip::Kernel || self.pv_eoi || self.apic != ApicMode::X2apic {
                    return incompatible("vioapic runs on KVM's LAPIC in x2APIC mode (--irqchip kernel --apic x2apic, no --pv-eoi); --vioapic chooses where the I/O interrupt controller lives");
                }
                if self.vioapic_race && self.vioapic == VioapicMode::Kernel {
                    return incompatible("the vioapic race test drives dirq's controller: use --vioapic userspace, ro-page or pv");
                }
            }
            Bench::HaltWakeup if self.apic != ApicMode::X2apic => {
                return incompatible(
                    "halt-wakeup sends its self-IPI through the x2APIC: use --apic x2apic",
                );
            }
            Bench::Tick if self.irqchip != Irqchip::Split => {
                return incompatible(
                    "tick needs a PIT the VMM emulates, which KVM allows only with --irqchip split",
                );
            }
            _ => {}
        }
        Ok(())
    }
}

impl Bench {
    /// The guest's `enum dirq_bench` value.
    pub fn abi_id(self) -> u32 {
        match self {
            Bench::IrqLatency => crate::abi::BENCH_IRQ_LATENCY,
            Bench::TimerLatency => crate::abi::BENCH_TIMER_LATENCY,
            Bench::Ipi => crate::abi::BENCH_IPI,
            Bench::Whileloop => crate::abi::BENCH_WHILELOOP,
            Bench::ExitCost => crate::abi::BENCH_EXIT_COST,
            Bench::Fault => crate::abi::BENCH_FAULT,
            Bench::Vioapic => crate::abi::BENCH_VIOAPIC,
            Bench::IoBatch => crate::abi::BENCH_IO_BATCH,
            Bench::Tick => crate::abi::BENCH_TICK,
            Bench::HaltWakeup => crate::abi::BENCH_HALT_WAKEUP,
            Bench::Hostile => crate::abi::BENCH_HOSTILE,
        }
    }
}

impl HostileCase {
    fn first() -> Self {
        HostileCase::ALL[0]
    }
}

impl IpiMeasure {
    fn round_trip() -> Self {
        IpiMeasure::RoundTrip
    }
}

impl VioapicMode {
    /// The guest's `enum dirq_vioapic_mode` value.
    pub fn abi_id(self) -> u64 {
        match self {
            VioapicMode::Userspace => crate::abi::VIOAPIC_USERSPACE,
            VioapicMode::Kernel => crate::abi::VIOAPIC_KERNEL,
            VioapicMode::RoPage => crate::abi::VIOAPIC_RO_PAGE,
            VioapicMode::Pv => crate::abi::VIOAPIC_PV,
        }
    }
}

impl FaultKind {
    /// The guest's `enum dirq_fault` value.
    pub fn abi_id(self) -> u32 {
        match self {
            FaultKind::TripleFault => crate::abi::FAULT_TRIPLE,
            FaultKind::Hang => crate::abi::FAULT_HANG,
            FaultKind::UnownedPort => crate::abi::FAULT_UNOWNED_PORT,
            FaultKind::UnownedMmio => crate::abi::FAULT_UNOWNED_MMIO,
            FaultKind::Exception => crate::abi::FAULT_EXCEPTION,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halt_modes_parse_and_print_the_same_way() {
        for text in ["exit", "none", "poll:200000"] {
            let mode: HaltMode = text.parse().expect("valid halt mode");
            assert_eq!(mode.to_string(), text);
            let json = serde_json::to_string(&mode).expect("serializes");
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(
                serde_json::from_str::<HaltMode>(&json).expect("deserializes"),
                mode
            );
        }
        assert!("poll:".parse::<HaltMode>().is_err());
        assert!("poll:-1".parse::<HaltMode>().is_err());
        assert!("sleep".parse::<HaltMode>().is_err());
    }

    #[test]
    fn named_enums_round_trip_through_their_names() {
        for bench in Bench::ALL {
            assert_eq!(
                bench.name().parse::<Bench>().expect("own name parses"),
                *bench
            );
        }
        let err = "fastest".parse::<Irqchip>().expect_err("unknown value");
        assert!(
            err.to_string().contains("userspace, kernel, split)"),
            "{err}"
        );
    }

    #[test]
    fn kvm_only_features_are_refused_with_the_userspace_irqchip() {
        let mut config = BenchConfig::new(Bench::IrqLatency);
        config.irqchip = Irqchip::Userspace;
        assert!(config.validate().is_ok());
        for change in [
            |c: &mut BenchConfig| c.inject = Inject::Irqfd,
            |c: &mut BenchConfig| c.pv_eoi = true,
            |c: &mut BenchConfig| c.halt = HaltMode::Poll { ns: 1000 },
        ] {
            let mut bad = config.clone();
            change(&mut bad);
            assert!(
                matches!(bad.validate(), Err(ConfigError::Incompatible(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn counts_beyond_the_sample_area_are_refused() {
        let mut config = BenchConfig::new(Bench::TimerLatency);
        config.count = MAX_COUNT + 1;
        assert!(matches!(
            config.validate(),
            Err(ConfigError::OutOfRange {
                what: "--count",
                ..
            })
        ));
        config.count = 0;
        assert!(config.validate().is_err());
    }

    #[test]
    fn every_bench_default_is_valid() {
        for bench in Bench::ALL {
            BenchConfig::new(*bench)
                .validate()
                .expect("defaults are valid");
        }
    }
}
