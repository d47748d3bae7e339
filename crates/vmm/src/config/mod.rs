//! What a run boots and measures: every flag of `dirq run`, serde-friendly
//! so reports can record and replay it. A `BenchConfig` is the bench's own
//! parameter set (`params`) and the settings every bench shares; each
//! checks its own rules.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use dirq_arch::vioapic::VioapicLevel;
use dirq_stats::{f64_of, round_u64};
use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

pub mod params;

pub use params::{BenchParams, EventCost, Param, Workload};

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
    Incompatible(&'static str),
    #[error("{what} must be between {min} and {max}, got {value}")]
    OutOfRange {
        what: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error("--timeout must be between 0.001 and {max_s} seconds, got {seconds:?}")]
    Timeout { seconds: f64, max_s: u64 },
    #[error("{flag} does not apply to {bench}: only {} take(s) it", names(.takers))]
    NotApplicable {
        flag: &'static str,
        bench: Bench,
        takers: Vec<Bench>,
    },
}

fn names(benches: &[Bench]) -> String {
    let names: Vec<&str> = benches.iter().map(|bench| bench.name()).collect();
    names.join(", ")
}

/// An enum of the configuration (and of exits and control commands) whose
/// values are named by strings in flags, JSON and output: strum derives
/// the names (`Display`, `FromStr`, `IntoStaticStr`, `VariantArray`),
/// serde spells them alike (a test holds the two together), and an unknown
/// name is refused listing the known ones.
pub trait Named: Copy + Into<&'static str> + strum::VariantArray + 'static {
    /// What a value is, for the refusal of an unknown name.
    const WHAT: &'static str;
    /// Every value, in declaration order.
    const ALL: &'static [Self] = Self::VARIANTS;

    fn name(self) -> &'static str {
        self.into()
    }

    /// Every value's name, comma-separated.
    fn names() -> String {
        Self::ALL
            .iter()
            .map(|value| value.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The refusal of an unknown name (strum's `parse_err_fn`).
    fn unknown(value: &str) -> ConfigError {
        ConfigError::UnknownValue {
            what: Self::WHAT,
            value: value.to_string(),
            expected: Self::names(),
        }
    }
}

/// The benchmark the guest runs.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = Bench::unknown)]
pub enum Bench {
    /// A device thread raises MSIs; the round trip to the guest's ack.
    IrqLatency,
    /// The guest's LAPIC timer: how late each expiry is handled.
    TimerLatency,
    /// vCPU 0 and vCPU 1 ping-pong IPIs.
    Ipi,
    /// A compute loop's slowdown under an interrupt load.
    Whileloop,
    /// One userspace exit and one in-kernel exit, timed (`dirq probe`).
    ExitCost,
    /// The guest misbehaves on purpose (see `FaultKind`).
    Fault,
    /// Level-triggered device interrupts through an I/O interrupt
    /// controller at one of four levels (`VioapicLevel`), back to back.
    Vioapic,
    /// Disk commands of 11 port writes each, or one doorbell per command.
    IoBatch,
    /// A compute loop under the guest's 1000 Hz PIT tick, optionally
    /// slowed by the VMM (`--tick-scale`).
    Tick,
    /// A self-IPI sent between enabling interrupts and HLT must wake
    /// the halt (the lost-wake-up window of kvm_pvm's native mode).
    HaltWakeup,
    /// Guest code that attacks the VMM (`HostileCase`): the VMM must
    /// refuse it with a message naming the cause, or survive it.
    Hostile,
}

impl Named for Bench {
    const WHAT: &'static str = "bench";
}

/// The attack of the `hostile` bench (crates/vmm/src/hostile.rs says
/// what the VMM must do with each; guest/bench_hostile.c does it).
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = HostileCase::unknown)]
pub enum HostileCase {
    TripleFaultVcpu0,
    TripleFaultVcpu1,
    InterruptsOffForever,
    EoiStormX2apic,
    EoiStormMmio,
    UnownedPort,
    UnownedMmio,
    UnownedMsr,
    DoorbellOutsideRam,
    DoorbellStraddlesRamEnd,
    DoorbellHugeCount,
    DoorbellBadSize,
    DoorbellReservedByte,
    DoorbellUnownedPort,
    DoorbellNested,
    PvLockHeldForever,
    PvLockHeldThenUnmask,
    PvLockGarbage,
    PvPageCorrupt,
    UnknownHypercall,
    SerialFloodLines,
    SerialFloodNoNewline,
    SerialEscapes,
    InitSipiVcpu1,
    ForgedAck,
    TprBlocksAll,
    #[serde(rename = "periodic-timer-count-1")]
    #[strum(serialize = "periodic-timer-count-1")]
    PeriodicTimerCount1,
    ForgedSampleCount,
    ForgedNativeClaim,
    SamplesMax,
    FewerSamples,
    EmptyWindow,
    DoneFromVcpu1,
    StartTwice,
    ForgedExitCost,
}

impl Named for HostileCase {
    const WHAT: &'static str = "hostile case";
}

/// An attack mounted through a real bench's guest (guest/attack.c):
/// what each does and what the VMM must do with it is in
/// `crate::attack`.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = AttackCase::unknown)]
pub enum AttackCase {
    NativeClaimUnasked,
    SamplesOverCount,
    SamplesUnderCount,
    SamplesCountMax,
    SamplesCountZero,
    SamplesValuesMax,
    SamplesCountFromVcpu1,
    SamplesInWhileloop,
    WindowAtOnceTimerLatency,
    WindowAtOnceIpi,
    WindowAtOnceExitCost,
    WindowAtOnceTick,
    WindowAtOnceWhileloop,
    DoneFromVcpu1MidRun,
    StartTwiceMidRun,
    EndTwice,
    DoneBeforeEnd,
    EndFromVcpu1After,
    ForgedInfRate,
    ForgedUserspaceExitNs,
    ForgedGuestShareZero,
    ForgedHandled,
    PitReprogrammedFromVcpu1,
    PitProgrammedBeforeByVcpu1,
    PvLockChurnFromVcpu1,
    SerialStraddlesRangeEnd,
    ControlPortByteWrite,
    SerialByteFromVcpu1,
    TripleFaultVcpu1MidIpi,
    TripleFaultAfterWindow,
    WindowAtOnceVioapic,
    WindowAtOnceIoBatch,
    WindowAtOnceIrqLatency,
    WindowAtOnceHaltWakeup,
    IpiStormVioapic,
    IpiStormIrqLatency,
    IpiStormTimerLatency,
    IpiStormWhileloop,
    IpiStormTick,
    IpiStormExitCost,
    IpiStormHaltWakeup,
    IpiStormIoBatch,
    PitSameReloadFromVcpu1,
    NativeClaimShortWindow,
    ForgedShareAboveOneWhileloop,
    ForgedShareAboveOneTick,
    ForgedLostPerInterruptTiny,
    ForgedLostPerInterruptHuge,
    ForgedVioapicRate,
    ForgedRegisterReads,
    ForgedSpurious,
    ForgedMaskToggles,
    ForgedHandledZeroVioapic,
    ForgedCommandsRate,
    ForgedTickRate,
    ForgedTickCount,
    ForgedUserspaceExitTotal,
    ForgedUserspaceExitTiny,
    ForgedKernelExitP50,
    ForgedSendP50Tiny,
    SamplesZeroTimerLatency,
    SamplesOneCycleIpi,
    SamplesZeroExitCost,
}

impl Named for AttackCase {
    const WHAT: &'static str = "attack case";
}

/// Whom the ipi bench's CPU 0 pings.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = IpiKind::unknown)]
pub enum IpiKind {
    /// CPU 1 only.
    Unicast,
    /// Every other CPU at once (ICR shorthand all-excluding-self).
    Broadcast,
}

impl Named for IpiKind {
    const WHAT: &'static str = "ipi kind";
}

/// What one ipi sample times.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = IpiMeasure::unknown)]
pub enum IpiMeasure {
    /// Ping sent to the last pong handled back on CPU 0.
    RoundTrip,
    /// Ping sent to the pinged handler's entry (`dirq probe`'s floor).
    OneWay,
}

impl Named for IpiMeasure {
    const WHAT: &'static str = "ipi measure";
}

/// Who emulates the interrupt controllers.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = Irqchip::unknown)]
pub enum Irqchip {
    /// No KVM irqchip: dirq's LAPIC/IOAPIC models in this process.
    Userspace,
    /// KVM's in-kernel LAPIC, IOAPIC and PIC.
    Kernel,
    /// KVM's in-kernel LAPIC, dirq's IOAPIC model in this process.
    Split,
}

impl Named for Irqchip {
    const WHAT: &'static str = "irqchip";
}

/// How a device thread's interrupt reaches the vCPU.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = Inject::unknown)]
pub enum Inject {
    /// The VMM injects it (KVM_SIGNAL_MSI, or KVM_INTERRUPT in userspace mode).
    Vcpu,
    /// An irqfd bound to an MSI route: the kernel delivers it.
    Irqfd,
}

impl Named for Inject {
    const WHAT: &'static str = "inject";
}

/// What the irq-latency device is wired to.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = IrqSource::unknown)]
pub enum IrqSource {
    /// It sends MSIs straight to the LAPIC.
    Msi,
    /// It pulses IOAPIC input 10, which the guest routes to its vector.
    Ioapic,
}

impl Named for IrqSource {
    const WHAT: &'static str = "interrupt source";
}

/// How the guest talks to its LAPIC.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = ApicMode::unknown)]
pub enum ApicMode {
    Xapic,
    X2apic,
}

impl Named for ApicMode {
    const WHAT: &'static str = "apic mode";
}

/// What the guest does while it waits for the next event.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = GuestIdle::unknown)]
pub enum GuestIdle {
    Halt,
    Busy,
}

impl Named for GuestIdle {
    const WHAT: &'static str = "guest idle";
}

/// The LAPIC timer mode of `timer-latency`.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = TimerMode::unknown)]
pub enum TimerMode {
    Oneshot,
    TscDeadline,
}

impl Named for TimerMode {
    const WHAT: &'static str = "timer mode";
}

/// How the guest's instructions execute. The VMM decides it from the
/// host side (`exec::HostExec`); the guest is told, never probes.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = GuestExec::unknown)]
pub enum GuestExec {
    /// kvm_pvm's native mode: the guest runs on the CPU in ring 3 and
    /// only privileged operations trap.
    Native,
    /// kvm_pvm's instruction emulator runs every guest instruction.
    Emulated,
    /// Hardware virtualization (VT-x/SVM): an ordinary x86 guest.
    Hardware,
}

impl Named for GuestExec {
    const WHAT: &'static str = "guest execution mode";
}

/// The misbehaviour of the `fault` bench.
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = FaultKind::unknown)]
pub enum FaultKind {
    /// An exception with no IDT: KVM_EXIT_SHUTDOWN.
    TripleFault,
    /// Spins with interrupts off; only the watchdog ends it.
    Hang,
    /// An `out` to a port no device owns.
    UnownedPort,
    /// A read of an address no RAM or device backs.
    UnownedMmio,
    /// `ud2`: the guest's own exception handler reports it.
    Exception,
}

impl Named for FaultKind {
    const WHAT: &'static str = "fault";
}

/// Where the vCPU threads run (`placement::Placement`).
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
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case", parse_err_ty = ConfigError, parse_err_fn = Pin::unknown)]
pub enum Pin {
    /// Each vCPU on a host CPU of its own, when there are enough.
    Spread,
    /// Every vCPU thread on the first host CPU this process may use:
    /// a slow host's cross-vCPU interrupts (the scheduler's tick) on any host.
    OneCore,
}

impl Named for Pin {
    const WHAT: &'static str = "pinning";
}

impl Pin {
    fn spread() -> Self {
        Pin::Spread
    }

    fn is_spread(&self) -> bool {
        *self == Pin::Spread
    }
}

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

/// Everything one run boots and measures: the bench with its own
/// parameters, and the settings every bench shares. `BenchConfig::new`
/// gives defaults that finish in about a second. Serialized flat, as one
/// object: `bench` (the bench's name), its parameters, the shared settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    #[serde(flatten)]
    pub params: BenchParams,
    #[serde(flatten)]
    pub common: CommonSettings,
}

/// What every bench is run with: the interrupt path, the guest's side of
/// it, and the watchdog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommonSettings {
    pub irqchip: Irqchip,
    pub inject: Inject,
    pub pv_eoi: bool,
    pub halt: HaltMode,
    pub apic: ApicMode,
    pub guest_idle: GuestIdle,
    /// vCPUs to boot (the ipi bench's broadcast uses more than two).
    pub vcpus: u32,
    /// The watchdog: a run that has not finished by then fails. `None`:
    /// scaled to the run's expected length (`BenchConfig::watchdog`).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// How the guest executes; `None`: the best this host offers
    /// (`exec::HostExec::default_exec`).
    #[serde(default)]
    pub guest_exec: Option<GuestExec>,
    /// Where the vCPU threads run.
    #[serde(default = "Pin::spread", skip_serializing_if = "Pin::is_spread")]
    pub pin: Pin,
    /// An attack the guest mounts on the VMM during this run
    /// (`dirq run hostile --case`), none by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attack: Option<AttackCase>,
}

/// The hostile bench's default watchdog: longer than the device's wait
/// for an acknowledgement (2 s), so that its verdict comes first.
pub const HOSTILE_TIMEOUT_MS: u64 = 4_000;
/// The longest watchdog, in ms (an hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// The shortest scaled watchdog: what every run had before it scaled.
pub const MIN_SCALED_TIMEOUT_MS: u64 = 30_000;
/// What a scaled watchdog allows beside the work: boot, the guest's
/// checks, teardown.
const WATCHDOG_SLACK: Duration = Duration::from_secs(10);

/// A run's watchdog, and the expected length it was scaled to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watchdog {
    pub timeout: Duration,
    /// The longest the configured work should take (`Workload::bound`).
    pub expected: Duration,
    /// Set by `--timeout`, not scaled.
    pub explicit: bool,
}
/// vCPUs a run can boot: the guest's per-CPU stacks and counters.
pub const MAX_VCPUS: u32 = 8;
const _: () = assert!(MAX_VCPUS as usize == crate::abi::MAX_CPUS);

impl BenchConfig {
    /// `bench` on the in-kernel path, with defaults sized for about a second of work.
    pub fn new(bench: Bench) -> Self {
        BenchParams::new(bench).into()
    }

    pub fn bench(&self) -> Bench {
        self.params.bench()
    }

    /// The watchdog: `--timeout` if given, else the work's expected length
    /// on a slow host plus slack, between 30 s and an hour.
    pub fn watchdog(&self) -> Watchdog {
        let expected = self.params.workload(&self.common).bound();
        let (timeout, explicit) = match self.common.timeout_ms {
            Some(ms) => (Duration::from_millis(ms), true),
            None => (
                expected.saturating_add(WATCHDOG_SLACK).clamp(
                    Duration::from_millis(MIN_SCALED_TIMEOUT_MS),
                    Duration::from_millis(MAX_TIMEOUT_MS),
                ),
                false,
            ),
        };
        Watchdog {
            timeout,
            expected,
            explicit,
        }
    }

    /// Rejects values out of range and combinations KVM or the bench
    /// cannot run, with the reason: the shared settings' rules, then the
    /// bench's own.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.common.validate()?;
        self.params.validate(&self.common)
    }
}

/// `params` with its bench's shared defaults.
impl From<BenchParams> for BenchConfig {
    fn from(params: BenchParams) -> Self {
        BenchConfig {
            common: CommonSettings::new(params.bench()),
            params,
        }
    }
}

impl CommonSettings {
    /// What `bench` runs with unless told otherwise.
    pub fn new(bench: Bench) -> Self {
        CommonSettings {
            // The tick's PIT lives in the VMM, which KVM allows only with
            // its IOAPIC out of the kernel too.
            irqchip: if bench == Bench::Tick {
                Irqchip::Split
            } else {
                Irqchip::Kernel
            },
            inject: Inject::Vcpu,
            pv_eoi: false,
            halt: HaltMode::Exit,
            apic: ApicMode::X2apic,
            guest_idle: GuestIdle::Halt,
            vcpus: 2,
            // A hostile case that refuses by the watchdog should not take long.
            timeout_ms: (bench == Bench::Hostile).then_some(HOSTILE_TIMEOUT_MS),
            guest_exec: None,
            pin: Pin::Spread,
            attack: None,
        }
    }

    /// The rules of the shared settings, whatever the bench.
    fn validate(&self) -> Result<(), ConfigError> {
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
        in_range("--vcpus", self.vcpus.into(), 1, MAX_VCPUS.into())?;
        if let Some(attack) = self.attack {
            // The attacking vCPU must be booted.
            in_range(
                "--vcpus",
                self.vcpus.into(),
                u64::from(attack.plan().vcpu) + 1,
                MAX_VCPUS.into(),
            )?;
        }
        match self.timeout_ms {
            Some(ms) => in_range("--timeout (in ms)", ms, 1, MAX_TIMEOUT_MS),
            None => Ok(()),
        }
    }
}

/// `--timeout`'s seconds as the watchdog's ms.
pub fn timeout_ms_from_seconds(seconds: f64) -> Result<u64, ConfigError> {
    let max_s = MAX_TIMEOUT_MS / 1000;
    // The documented minimum is one millisecond: less is refused, not rounded up to it.
    if seconds.is_finite() && seconds >= 0.001 && seconds <= f64_of(max_s) {
        Ok(round_u64((seconds * 1000.0).ceil()))
    } else {
        Err(ConfigError::Timeout { seconds, max_s })
    }
}

fn incompatible(why: &'static str) -> Result<(), ConfigError> {
    Err(ConfigError::Incompatible(why))
}

/// Refuses `value` outside `min..=max`, naming the flag that set it.
fn in_range(what: &'static str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            what,
            value,
            min,
            max,
        })
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

    /// Whether the guest runs the bench on vCPU 0 alone, the other vCPUs
    /// halted through the measured window (only ipi and hostile give them
    /// work).
    pub fn runs_on_vcpu0_alone(self) -> bool {
        !matches!(self, Bench::Ipi | Bench::Hostile)
    }

    /// Whether the bench reports figures of its own (all but hostile and
    /// fault, which end with a verdict).
    pub fn has_figures(self) -> bool {
        !matches!(self, Bench::Hostile | Bench::Fault)
    }

    /// Whether the bench exists to handle interrupts: a run of it that
    /// handled none measured nothing.
    pub fn handles_interrupts(self) -> bool {
        matches!(
            self,
            Bench::IrqLatency
                | Bench::TimerLatency
                | Bench::Ipi
                | Bench::Whileloop
                | Bench::HaltWakeup
        )
    }
}

impl HostileCase {
    pub(crate) fn first() -> Self {
        HostileCase::ALL[0]
    }
}

impl IpiMeasure {
    pub(crate) fn round_trip() -> Self {
        IpiMeasure::RoundTrip
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

    /// Every value of `T` is named alike by strum and serde, and parses
    /// back from its name.
    fn assert_named_alike<T>()
    where
        T: Named + FromStr<Err = ConfigError> + Serialize + serde::de::DeserializeOwned,
        T: fmt::Display + fmt::Debug + PartialEq,
    {
        for &value in T::ALL {
            let name = value.name();
            assert_eq!(value.to_string(), name);
            assert_eq!(name.parse::<T>().expect("own name parses"), value);
            let json = serde_json::to_string(&value).expect("serializes");
            assert_eq!(json, format!("\"{name}\""), "{value:?}");
            assert_eq!(serde_json::from_str::<T>(&json).expect("reads"), value);
        }
    }

    #[test]
    fn named_enums_round_trip_through_their_names() {
        assert_named_alike::<Bench>();
        assert_named_alike::<HostileCase>();
        assert_named_alike::<AttackCase>();
        assert_named_alike::<IpiKind>();
        assert_named_alike::<IpiMeasure>();
        assert_named_alike::<Irqchip>();
        assert_named_alike::<Inject>();
        assert_named_alike::<IrqSource>();
        assert_named_alike::<ApicMode>();
        assert_named_alike::<GuestIdle>();
        assert_named_alike::<TimerMode>();
        assert_named_alike::<GuestExec>();
        assert_named_alike::<FaultKind>();
        assert_named_alike::<Pin>();
        assert_named_alike::<crate::exits::UserspaceExit>();
        assert_named_alike::<crate::exits::KvmStat>();
        assert_named_alike::<crate::devices::control::ControlCommand>();
        assert_eq!(
            HostileCase::PeriodicTimerCount1.name(),
            "periodic-timer-count-1"
        );
        assert_eq!(crate::exits::UserspaceExit::Interrupted.name(), "intr");
        let err = "fastest".parse::<Irqchip>().expect_err("unknown value");
        assert!(
            err.to_string().contains("userspace, kernel, split)"),
            "{err}"
        );
    }

    #[test]
    fn kvm_only_features_are_refused_with_the_userspace_irqchip() {
        let mut config = BenchConfig::new(Bench::IrqLatency);
        config.common.irqchip = Irqchip::Userspace;
        assert!(config.validate().is_ok());
        for change in [
            |c: &mut CommonSettings| c.inject = Inject::Irqfd,
            |c: &mut CommonSettings| c.pv_eoi = true,
            |c: &mut CommonSettings| c.halt = HaltMode::Poll { ns: 1000 },
        ] {
            let mut bad = config.clone();
            change(&mut bad.common);
            assert!(
                matches!(bad.validate(), Err(ConfigError::Incompatible(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn shared_settings_out_of_range_are_refused_for_every_bench() {
        for &bench in Bench::ALL {
            let mut config = BenchConfig::new(bench);
            config.common.vcpus = MAX_VCPUS + 1;
            assert!(matches!(
                config.validate(),
                Err(ConfigError::OutOfRange {
                    what: "--vcpus",
                    ..
                })
            ));
            config.common.vcpus = 2;
            config.common.timeout_ms = Some(0);
            assert!(config.validate().is_err(), "{bench}");
        }
    }

    #[test]
    fn timeouts_are_taken_in_seconds_and_kept_in_ms() {
        assert_eq!(timeout_ms_from_seconds(0.0015).expect("valid"), 2);
        assert_eq!(timeout_ms_from_seconds(4.0).expect("valid"), 4_000);
        assert_eq!(timeout_ms_from_seconds(0.001).expect("the minimum"), 1);
        for bad in [0.0, -1.0, f64::NAN, 3_601.0, 0.0009, 1e-300] {
            assert!(matches!(
                timeout_ms_from_seconds(bad),
                Err(ConfigError::Timeout { max_s: 3_600, .. })
            ));
        }
    }

    #[test]
    fn a_config_serializes_flat_with_the_benchs_parameters_only() {
        let config = BenchConfig::new(Bench::TimerLatency);
        let json = serde_json::to_value(&config).expect("serializes");
        assert_eq!(json["bench"], "timer-latency");
        assert_eq!(json["period_ns"], 200_000);
        assert_eq!(json["irqchip"], "kernel");
        assert!(json.get("rate_hz").is_none(), "{json}");
        assert_eq!(
            serde_json::from_value::<BenchConfig>(json).expect("deserializes"),
            config
        );
    }

    #[test]
    fn the_watchdog_scales_with_the_work_unless_told() {
        let config = |count| {
            BenchConfig::from(BenchParams::Vioapic(params::VioapicParams {
                count,
                ..params::VioapicParams::default()
            }))
        };
        // Little work: the old fixed 30 s.
        let small = config(10).watchdog();
        assert_eq!(small.timeout, Duration::from_secs(30));
        assert!(!small.explicit);
        // Much work: its bound, with slack.
        let large = config(100_000).watchdog();
        assert_eq!(
            large.expected,
            EventCost::CrossThread.bound().saturating_mul(100_000)
        );
        assert_eq!(large.timeout, large.expected + WATCHDOG_SLACK);
        // A rate paces irq-latency: 2,000 events at 10/s need 200 s,
        // more than their events' bound.
        let paced = BenchConfig::from(BenchParams::IrqLatency(params::IrqLatencyParams {
            count: 2_000,
            rate_hz: 10,
            ..params::IrqLatencyParams::default()
        }))
        .watchdog();
        assert_eq!(paced.expected, Duration::from_secs(200));
        // The longest run the flags allow stays under the hour.
        let longest = BenchConfig::from(BenchParams::IrqLatency(params::IrqLatencyParams {
            count: params::MAX_COUNT,
            ..params::IrqLatencyParams::default()
        }))
        .watchdog();
        assert_eq!(longest.timeout, Duration::from_millis(MAX_TIMEOUT_MS));
        // --timeout wins.
        let mut told = config(100_000);
        told.common.timeout_ms = Some(1_500);
        let told = told.watchdog();
        assert_eq!(told.timeout, Duration::from_millis(1_500));
        assert!(told.explicit);
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
