//! One parameter set per bench: what it measures beyond the settings every
//! bench shares, its defaults, its rules (each set's `validate`, the one
//! place they are checked), the flags that set it and what the guest reads
//! of it from the boot page.

use std::fmt;
use std::time::Duration;

use dirq_stats::ratio;
use serde::{Deserialize, Serialize};

use super::{
    in_range, incompatible, ApicMode, Bench, CommonSettings, ConfigError, FaultKind, HostileCase,
    Inject, IpiKind, IpiMeasure, IrqSource, Irqchip, TimerMode, VioapicLevel,
};
use crate::abi::{self, SharedPage};
use crate::config::Named;

/// The fastest device `--rate`: one interrupt per microsecond, already
/// beyond what one exit costs on any host dirq runs on.
pub const MAX_RATE_HZ: u64 = 1_000_000;
/// The longest `--duration-ms` (a minute).
pub const MAX_DURATION_MS: u64 = 60_000;
/// `--period-ns` bounds: 1 us to 1 s.
pub const MIN_PERIOD_NS: u64 = 1_000;
pub const MAX_PERIOD_NS: u64 = 1_000_000_000;
/// The largest count the guest's sample area holds.
pub const MAX_COUNT: u64 = crate::memory::SAMPLES_CAPACITY;
/// The largest `--tick-scale`: it turns a 1000 Hz tick into a 1 Hz one.
pub const MAX_TICK_SCALE: u32 = 1000;

/// One bench parameter, as one `dirq run` flag sets it; the flag is the
/// variant's name (`PeriodNs` is `--period-ns`), as clap derives the
/// `dirq run` flags from the field names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case", prefix = "--")]
pub enum Param {
    Count(u64),
    Rate(u64),
    Source(IrqSource),
    PeriodNs(u64),
    Timer(TimerMode),
    DurationMs(u64),
    Fault(FaultKind),
    Vioapic(VioapicLevel),
    Race,
    IoBatch,
    TickScale(u32),
    Ipi(IpiKind),
    PvSendIpi,
    IpiMeasure(IpiMeasure),
    Case(HostileCase),
}

impl Param {
    pub fn flag(self) -> &'static str {
        self.into()
    }
}

/// The flag with its value, as on a `dirq run` command line.
impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = self.flag();
        match self {
            Param::Count(value)
            | Param::Rate(value)
            | Param::PeriodNs(value)
            | Param::DurationMs(value) => write!(f, "{flag} {value}"),
            Param::TickScale(value) => write!(f, "{flag} {value}"),
            Param::Source(value) => write!(f, "{flag} {value}"),
            Param::Timer(value) => write!(f, "{flag} {value}"),
            Param::Fault(value) => write!(f, "{flag} {value}"),
            Param::Vioapic(value) => write!(f, "{flag} {value}"),
            Param::Ipi(value) => write!(f, "{flag} {value}"),
            Param::IpiMeasure(value) => write!(f, "{flag} {value}"),
            Param::Case(value) => write!(f, "{flag} {value}"),
            Param::Race | Param::IoBatch | Param::PvSendIpi => f.write_str(flag),
        }
    }
}

/// A set's `set` and `params` from one list of its flags, in `dirq run`
/// order: `value field = Variant` for a flag with a value,
/// `switch field = Variant` for a boolean one (listed only when on).
macro_rules! flag_fields {
    ($($kind:ident $field:ident = $variant:ident),+ $(,)?) => {
        fn set(&mut self, param: Param) -> bool {
            match param {
                $(flag_fields!(@pattern $kind $variant taken) => {
                    flag_fields!(@take $kind self.$field, taken)
                })+
                _ => return false,
            }
            true
        }

        fn params(&self) -> Vec<Param> {
            [$(flag_fields!(@given $kind self.$field, $variant)),+]
                .into_iter()
                .flatten()
                .collect()
        }
    };
    (@pattern value $variant:ident $taken:ident) => { Param::$variant($taken) };
    (@pattern switch $variant:ident $taken:ident) => { Param::$variant };
    (@take value $place:expr, $taken:ident) => { $place = $taken };
    (@take switch $place:expr, $taken:ident) => { $place = true };
    (@given value $value:expr, $variant:ident) => { Some(Param::$variant($value)) };
    (@given switch $on:expr, $variant:ident) => { $on.then_some(Param::$variant) };
}

/// What each bench's parameter set does.
trait ParamSet {
    /// Refuses values out of range, and combinations with the shared
    /// settings that KVM or the bench cannot run.
    fn validate(&self, common: &CommonSettings) -> Result<(), ConfigError>;
    /// Takes `param`'s value; false if this bench has no such parameter
    /// (`flag_fields!` writes `set` and `params` from one list).
    fn set(&mut self, param: Param) -> bool;
    /// Every parameter as the flag that sets it (a boolean one only when on).
    fn params(&self) -> Vec<Param>;
    /// Writes what the guest reads of the parameters into its boot page.
    fn boot(&self, page: &mut SharedPage);
    /// What the run's length is made of, for its watchdog.
    fn workload(&self, common: &CommonSettings) -> Workload;
}

/// What a run's length is made of: events that each cost up to a bound
/// on the slowest host dirq expects, and time the run spends by design.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    pub events: u64,
    pub per_event: EventCost,
    /// Waiting the configuration asks for: a rate, a period, a loop's length.
    pub paced: Duration,
}

/// The dearest an event is expected to be, on a host 10x slower than
/// dirq's development host with every vCPU thread on one CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventCost {
    /// An exit handled on the vCPU's own thread (in KVM or the VMM):
    /// 67 us for a port exit to userspace on the slowest host measured.
    Exit,
    /// An interrupt that another thread (a vCPU, the device, a timer)
    /// must be scheduled to send: with both busy vCPUs on one CPU an IPI
    /// took ~4 ms alone, and a ping's round trip a median 24 ms (max 48)
    /// while other builds loaded the host.
    CrossThread,
}

impl EventCost {
    pub fn bound(self) -> Duration {
        match self {
            EventCost::Exit => Duration::from_micros(700),
            EventCost::CrossThread => Duration::from_millis(25),
        }
    }
}

impl Workload {
    /// The longest the run should take: its events at their bound, or its
    /// pacing if that is longer (a paced event's cost hides in its wait).
    pub fn bound(&self) -> Duration {
        let events = u32::try_from(self.events).unwrap_or(u32::MAX);
        self.paced
            .max(self.per_event.bound().saturating_mul(events))
    }

    fn events(events: u64, per_event: EventCost) -> Self {
        Workload {
            events,
            per_event,
            paced: Duration::ZERO,
        }
    }

    fn paced(self, paced: Duration) -> Self {
        Workload { paced, ..self }
    }
}

/// How much slower a compute loop may run under its interrupt load than
/// alone before its run is overdue (tick and whileloop run both).
const LOADED_SLOWDOWN_BOUND: u32 = 20;

/// A baseline loop of `duration_ms` and the same work under load.
fn loops_of(duration_ms: u64) -> Duration {
    Duration::from_millis(duration_ms).saturating_mul(1 + LOADED_SLOWDOWN_BOUND)
}

/// `count` events at `rate_hz` (0: back to back).
fn at_rate(count: u64, rate_hz: u64) -> Duration {
    if rate_hz == 0 {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(ratio(count, rate_hz))
}

/// Defines `BenchParams` with one variant per bench (named as `Bench`'s)
/// and its dispatch to each variant's set.
macro_rules! bench_params {
    ($($bench:ident($params:ident)),+ $(,)?) => {
        /// A bench and its parameters; serialized with the bench's name
        /// under `bench`, beside its parameters.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "bench", rename_all = "kebab-case")]
        pub enum BenchParams {
            $($bench($params)),+
        }

        impl BenchParams {
            /// `bench` with its defaults.
            pub fn new(bench: Bench) -> Self {
                match bench {
                    $(Bench::$bench => BenchParams::$bench($params::default())),+
                }
            }

            pub fn bench(&self) -> Bench {
                match self {
                    $(BenchParams::$bench(_) => Bench::$bench),+
                }
            }

            fn set_ref(&self) -> &dyn ParamSet {
                match self {
                    $(BenchParams::$bench(params) => params),+
                }
            }

            fn set_mut(&mut self) -> &mut dyn ParamSet {
                match self {
                    $(BenchParams::$bench(params) => params),+
                }
            }
        }
    };
}

bench_params!(
    IrqLatency(IrqLatencyParams),
    TimerLatency(TimerLatencyParams),
    Ipi(IpiParams),
    Whileloop(WhileloopParams),
    ExitCost(ExitCostParams),
    Fault(FaultParams),
    Vioapic(VioapicParams),
    IoBatch(IoBatchParams),
    Tick(TickParams),
    HaltWakeup(HaltWakeupParams),
    Hostile(HostileParams),
);

impl BenchParams {
    /// The bench's rules, given the settings it runs with.
    pub fn validate(&self, common: &CommonSettings) -> Result<(), ConfigError> {
        self.set_ref().validate(common)
    }

    /// Takes one flag's value, or refuses a flag this bench does not take
    /// (it would be silently ignored), naming the benches that do.
    pub fn set(&mut self, param: Param) -> Result<(), ConfigError> {
        if self.set_mut().set(param) {
            return Ok(());
        }
        Err(ConfigError::NotApplicable {
            flag: param.flag(),
            bench: self.bench(),
            takers: Bench::ALL
                .iter()
                .copied()
                .filter(|&bench| BenchParams::new(bench).set_mut().set(param))
                .collect(),
        })
    }

    /// The parameters as the flags that set them, in `dirq run` order.
    pub fn params(&self) -> Vec<Param> {
        self.set_ref().params()
    }

    /// What the run's length is made of, for its watchdog.
    pub fn workload(&self, common: &CommonSettings) -> Workload {
        self.set_ref().workload(common)
    }

    /// Device interrupts per second, for the benches that have a rate.
    pub fn rate_hz(&self) -> Option<u64> {
        match self {
            BenchParams::IrqLatency(params) => Some(params.rate_hz),
            BenchParams::Whileloop(params) => Some(params.rate_hz),
            _ => None,
        }
    }

    /// The samples a bench's guest records: one per event the run asked
    /// for, or none.
    pub fn expected_samples(&self) -> u64 {
        match self {
            BenchParams::TimerLatency(params) => params.count,
            BenchParams::Ipi(params) => params.count,
            BenchParams::ExitCost(params) => params.count,
            BenchParams::Hostile(params) if params.hostile.records_samples() => params.count,
            _ => 0,
        }
    }

    /// Writes the bench and what the guest reads of its parameters into
    /// the boot page.
    pub(crate) fn boot(&self, page: &mut SharedPage) {
        page.bench = self.bench().abi_id();
        self.set_ref().boot(page);
    }
}

/// Refuses a count the guest's sample area cannot hold.
fn check_count(count: u64) -> Result<(), ConfigError> {
    in_range("--count", count, 1, MAX_COUNT)
}

/// The duration reaches the guest in ns: bounded, it cannot wrap.
fn check_duration_ms(duration_ms: u64) -> Result<(), ConfigError> {
    in_range("--duration-ms", duration_ms, 1, MAX_DURATION_MS)
}

/// A bench's duration as the guest reads it.
fn boot_duration(page: &mut SharedPage, duration_ms: u64) {
    page.duration_ns = duration_ms * 1_000_000;
}

/// A device thread raises MSIs (or pulses an IOAPIC input); the round trip
/// to the guest's ack.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IrqLatencyParams {
    pub count: u64,
    /// Device interrupts per second; 0 = back to back.
    pub rate_hz: u64,
    pub source: IrqSource,
}

impl Default for IrqLatencyParams {
    fn default() -> Self {
        IrqLatencyParams {
            count: 5_000,
            rate_hz: 5_000,
            source: IrqSource::Msi,
        }
    }
}

impl ParamSet for IrqLatencyParams {
    fn validate(&self, common: &CommonSettings) -> Result<(), ConfigError> {
        check_count(self.count)?;
        in_range("--rate", self.rate_hz, 0, MAX_RATE_HZ)?;
        if common.irqchip == Irqchip::Split
            && self.source == IrqSource::Ioapic
            && common.inject == Inject::Irqfd
        {
            return incompatible("--inject irqfd cannot drive the IOAPIC in the VMM (--irqchip split): use --inject vcpu");
        }
        Ok(())
    }

    flag_fields!(value count = Count, value rate_hz = Rate, value source = Source);

    fn boot(&self, page: &mut SharedPage) {
        page.count = self.count;
        page.via_ioapic = u32::from(self.source == IrqSource::Ioapic);
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        Workload::events(self.count, EventCost::CrossThread)
            .paced(at_rate(self.count, self.rate_hz))
    }
}

/// The guest's LAPIC timer: how late each expiry is handled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimerLatencyParams {
    pub count: u64,
    pub period_ns: u64,
    pub timer: TimerMode,
}

impl Default for TimerLatencyParams {
    fn default() -> Self {
        TimerLatencyParams {
            count: 5_000,
            period_ns: 200_000,
            timer: TimerMode::TscDeadline,
        }
    }
}

impl ParamSet for TimerLatencyParams {
    fn validate(&self, _common: &CommonSettings) -> Result<(), ConfigError> {
        check_count(self.count)?;
        in_range("--period-ns", self.period_ns, MIN_PERIOD_NS, MAX_PERIOD_NS)
    }

    flag_fields!(value timer = Timer, value period_ns = PeriodNs, value count = Count);

    fn boot(&self, page: &mut SharedPage) {
        page.count = self.count;
        page.period_ns = self.period_ns;
        page.tsc_deadline = u32::from(self.timer == TimerMode::TscDeadline);
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        let period = Duration::from_nanos(self.period_ns);
        let count = u32::try_from(self.count).unwrap_or(u32::MAX);
        Workload::events(self.count, EventCost::CrossThread).paced(period.saturating_mul(count))
    }
}

/// vCPU 0 pings the others with IPIs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IpiParams {
    pub count: u64,
    pub ipi: IpiKind,
    /// A broadcast is one KVM_HC_SEND_IPI hypercall instead of an ICR write.
    pub pv_send_ipi: bool,
    #[serde(default = "IpiMeasure::round_trip")]
    pub ipi_measure: IpiMeasure,
}

impl Default for IpiParams {
    fn default() -> Self {
        IpiParams {
            count: 5_000,
            ipi: IpiKind::Unicast,
            pv_send_ipi: false,
            ipi_measure: IpiMeasure::RoundTrip,
        }
    }
}

impl ParamSet for IpiParams {
    fn validate(&self, common: &CommonSettings) -> Result<(), ConfigError> {
        check_count(self.count)?;
        if common.vcpus < 2 {
            return incompatible("ipi needs at least 2 vCPUs");
        }
        if self.pv_send_ipi && self.ipi != IpiKind::Broadcast {
            return incompatible(
                "--pv-send-ipi replaces the broadcast ICR write: use it with --ipi broadcast",
            );
        }
        Ok(())
    }

    flag_fields!(value ipi = Ipi, value ipi_measure = IpiMeasure, switch pv_send_ipi = PvSendIpi, value count = Count);

    fn boot(&self, page: &mut SharedPage) {
        let kind = match (self.ipi, self.pv_send_ipi) {
            (IpiKind::Unicast, _) => abi::IPI_UNICAST,
            (IpiKind::Broadcast, false) => abi::IPI_BROADCAST,
            (IpiKind::Broadcast, true) => abi::IPI_BROADCAST_PV,
        };
        let measure = match self.ipi_measure {
            IpiMeasure::RoundTrip => abi::IPI_ROUND_TRIP,
            IpiMeasure::OneWay => abi::IPI_ONE_WAY,
        };
        page.count = self.count;
        page.args = [kind, measure, 0, 0];
    }

    fn workload(&self, common: &CommonSettings) -> Workload {
        // A ping to each other vCPU and its pong, per round.
        let ipis = self.count * 2 * u64::from(common.vcpus.saturating_sub(1));
        Workload::events(ipis, EventCost::CrossThread)
    }
}

/// A compute loop's slowdown under a device's interrupt load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WhileloopParams {
    pub rate_hz: u64,
    /// Length of the unloaded loop.
    pub duration_ms: u64,
}

impl Default for WhileloopParams {
    fn default() -> Self {
        WhileloopParams {
            rate_hz: 10_000,
            duration_ms: 500,
        }
    }
}

impl ParamSet for WhileloopParams {
    fn validate(&self, _common: &CommonSettings) -> Result<(), ConfigError> {
        if self.rate_hz == 0 {
            return incompatible("whileloop needs an interrupt rate: --rate must be at least 1");
        }
        in_range("--rate", self.rate_hz, 1, MAX_RATE_HZ)?;
        check_duration_ms(self.duration_ms)
    }

    flag_fields!(value rate_hz = Rate, value duration_ms = DurationMs);

    fn boot(&self, page: &mut SharedPage) {
        boot_duration(page, self.duration_ms);
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        Workload::events(0, EventCost::CrossThread).paced(loops_of(self.duration_ms))
    }
}

/// One userspace exit and one in-kernel exit, timed (`dirq probe`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExitCostParams {
    pub count: u64,
}

impl Default for ExitCostParams {
    fn default() -> Self {
        ExitCostParams { count: 20_000 }
    }
}

impl ParamSet for ExitCostParams {
    fn validate(&self, _common: &CommonSettings) -> Result<(), ConfigError> {
        check_count(self.count)
    }

    flag_fields!(value count = Count);

    fn boot(&self, page: &mut SharedPage) {
        page.count = self.count;
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        // A port exit, an in-kernel exit and a self-IPI per iteration.
        Workload::events(self.count * 3, EventCost::Exit)
    }
}

/// The guest misbehaves on purpose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultParams {
    pub fault: FaultKind,
}

impl Default for FaultParams {
    fn default() -> Self {
        FaultParams {
            fault: FaultKind::Exception,
        }
    }
}

impl ParamSet for FaultParams {
    fn validate(&self, _common: &CommonSettings) -> Result<(), ConfigError> {
        Ok(())
    }

    flag_fields!(value fault = Fault);

    fn boot(&self, page: &mut SharedPage) {
        page.fault = self.fault.abi_id();
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        Workload::events(0, EventCost::Exit)
    }
}

/// Level-triggered device interrupts through an I/O interrupt controller
/// at one of four levels, back to back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VioapicParams {
    pub count: u64,
    /// Where the controller lives.
    pub vioapic: VioapicLevel,
    /// Race test: the device raises at random times while the guest also
    /// masks and unmasks outside its handler.
    pub vioapic_race: bool,
    /// Tests only: the guest's level handler EOIs at entry, which is what
    /// a LAPIC that holds nothing in service does by itself (docs/native.md):
    /// it reproduces such a host here. No flag sets it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eoi_at_entry: bool,
}

impl Default for VioapicParams {
    fn default() -> Self {
        VioapicParams {
            count: 20_000,
            vioapic: VioapicLevel::Userspace,
            vioapic_race: false,
            eoi_at_entry: false,
        }
    }
}

impl ParamSet for VioapicParams {
    fn validate(&self, common: &CommonSettings) -> Result<(), ConfigError> {
        check_count(self.count)?;
        // The levels differ only in where the I/O controller lives; the
        // LAPIC below it is KVM's at every level.
        if common.irqchip != Irqchip::Kernel || common.pv_eoi || common.apic != ApicMode::X2apic {
            return incompatible("vioapic runs on KVM's LAPIC in x2APIC mode (--irqchip kernel --apic x2apic, no --pv-eoi); --vioapic chooses where the I/O interrupt controller lives");
        }
        if self.vioapic_race && self.vioapic == VioapicLevel::Kernel {
            return incompatible(
                "the vioapic race test drives dirq's controller: use --vioapic userspace, ro-page or pv",
            );
        }
        Ok(())
    }

    flag_fields!(value vioapic = Vioapic, switch vioapic_race = Race, value count = Count);

    fn boot(&self, page: &mut SharedPage) {
        page.count = self.count;
        let flags = if self.eoi_at_entry {
            abi::VIOAPIC_FLAG_EOI_AT_ENTRY
        } else {
            0
        };
        page.args = [
            abi::vioapic_level_id(self.vioapic),
            u64::from(self.vioapic_race),
            0,
            flags,
        ];
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        Workload::events(self.count, EventCost::CrossThread)
    }
}

/// Disk commands of 11 port writes each, or one doorbell per command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IoBatchParams {
    pub count: u64,
    /// Record each command's port writes and ring one doorbell.
    pub io_batch: bool,
}

impl Default for IoBatchParams {
    fn default() -> Self {
        IoBatchParams {
            count: 5_000,
            io_batch: false,
        }
    }
}

impl ParamSet for IoBatchParams {
    fn validate(&self, _common: &CommonSettings) -> Result<(), ConfigError> {
        check_count(self.count)
    }

    flag_fields!(switch io_batch = IoBatch, value count = Count);

    fn boot(&self, page: &mut SharedPage) {
        page.count = self.count;
        page.args = [u64::from(self.io_batch), 0, 0, 0];
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        // Eleven port writes, or one doorbell, and the completion interrupt.
        Workload::events(self.count, EventCost::CrossThread)
    }
}

/// A compute loop under the guest's 1000 Hz PIT tick, which the VMM may
/// run slower.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TickParams {
    /// The VMM runs the guest's PIT this many times slower.
    pub tick_scale: u32,
    /// Length of the loop.
    pub duration_ms: u64,
}

impl Default for TickParams {
    fn default() -> Self {
        TickParams {
            tick_scale: 1,
            duration_ms: 500,
        }
    }
}

impl ParamSet for TickParams {
    fn validate(&self, common: &CommonSettings) -> Result<(), ConfigError> {
        in_range(
            "--tick-scale",
            self.tick_scale.into(),
            1,
            MAX_TICK_SCALE.into(),
        )?;
        check_duration_ms(self.duration_ms)?;
        if common.irqchip != Irqchip::Split {
            return incompatible(
                "tick needs a PIT the VMM emulates, which KVM allows only with --irqchip split",
            );
        }
        Ok(())
    }

    flag_fields!(value tick_scale = TickScale, value duration_ms = DurationMs);

    fn boot(&self, page: &mut SharedPage) {
        boot_duration(page, self.duration_ms);
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        Workload::events(0, EventCost::CrossThread).paced(loops_of(self.duration_ms))
    }
}

/// A self-IPI sent between enabling interrupts and HLT must wake the halt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HaltWakeupParams {
    pub count: u64,
}

impl Default for HaltWakeupParams {
    fn default() -> Self {
        HaltWakeupParams { count: 1_000 }
    }
}

impl ParamSet for HaltWakeupParams {
    fn validate(&self, common: &CommonSettings) -> Result<(), ConfigError> {
        check_count(self.count)?;
        if common.apic != ApicMode::X2apic {
            return incompatible(
                "halt-wakeup sends its self-IPI through the x2APIC: use --apic x2apic",
            );
        }
        Ok(())
    }

    flag_fields!(value count = Count);

    fn boot(&self, page: &mut SharedPage) {
        page.count = self.count;
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        Workload::events(self.count, EventCost::CrossThread)
    }
}

/// Guest code that attacks the VMM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostileParams {
    #[serde(default = "HostileCase::first")]
    pub hostile: HostileCase,
    /// The case's rounds (self-IPIs, device interrupts); the case sets it
    /// (`HostileCase::config`), no flag does.
    pub count: u64,
}

impl Default for HostileParams {
    fn default() -> Self {
        HostileParams {
            hostile: HostileCase::first(),
            count: 100,
        }
    }
}

impl ParamSet for HostileParams {
    fn validate(&self, _common: &CommonSettings) -> Result<(), ConfigError> {
        check_count(self.count)
    }

    flag_fields!(value hostile = Case);

    fn boot(&self, page: &mut SharedPage) {
        page.count = self.count;
        page.args = [self.hostile.abi_id(), 0, 0, 0];
    }

    fn workload(&self, _common: &CommonSettings) -> Workload {
        Workload::events(self.count, EventCost::CrossThread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BenchConfig;

    #[test]
    fn each_variant_is_serialized_under_its_benchs_name() {
        for &bench in Bench::ALL {
            let json = serde_json::to_value(BenchParams::new(bench)).expect("serializes");
            assert_eq!(json["bench"], bench.name());
            let back: BenchParams = serde_json::from_value(json).expect("deserializes");
            assert_eq!(back.bench(), bench);
        }
    }

    #[test]
    fn every_parameter_a_set_lists_sets_it_back() {
        for &bench in Bench::ALL {
            let defaults = BenchParams::new(bench);
            let mut params = defaults.clone();
            for param in defaults.params() {
                params.set(param).expect("a listed parameter applies");
            }
            assert_eq!(params, defaults, "{bench}");
        }
    }

    #[test]
    fn a_flag_of_another_bench_is_refused_naming_the_benches_that_take_it() {
        let mut tick = BenchParams::new(Bench::Tick);
        let err = tick.set(Param::Count(10)).expect_err("tick counts nothing");
        assert_eq!(
            err.to_string(),
            "--count does not apply to tick: only irq-latency, timer-latency, ipi, exit-cost, \
             vioapic, io-batch, halt-wakeup take(s) it"
        );
        let err = BenchParams::new(Bench::Ipi)
            .set(Param::Race)
            .expect_err("a vioapic flag");
        assert!(
            matches!(&err, ConfigError::NotApplicable { flag: "--race", bench: Bench::Ipi, takers } if takers == &[Bench::Vioapic]),
            "{err}"
        );
        // The hostile bench's count belongs to its case, not to a flag.
        assert!(BenchParams::new(Bench::Hostile)
            .set(Param::Count(1))
            .is_err());
        let mut whileloop = BenchParams::new(Bench::Whileloop);
        whileloop
            .set(Param::Rate(20_000))
            .expect("whileloop has a rate");
        assert_eq!(whileloop.rate_hz(), Some(20_000));
    }

    #[test]
    fn each_set_refuses_its_own_out_of_range_values() {
        let cases: [(Bench, Param, &str); 6] = [
            (Bench::TimerLatency, Param::Count(MAX_COUNT + 1), "--count"),
            (Bench::TimerLatency, Param::PeriodNs(999), "--period-ns"),
            (Bench::IrqLatency, Param::Rate(MAX_RATE_HZ + 1), "--rate"),
            (Bench::Whileloop, Param::DurationMs(0), "--duration-ms"),
            (
                Bench::Tick,
                Param::TickScale(MAX_TICK_SCALE + 1),
                "--tick-scale",
            ),
            (Bench::Vioapic, Param::Count(0), "--count"),
        ];
        for (bench, param, flag) in cases {
            let mut config = BenchConfig::new(bench);
            config.params.set(param).expect("the bench takes it");
            assert!(
                matches!(config.validate(), Err(ConfigError::OutOfRange { what, .. }) if what == flag),
                "{bench} {param}"
            );
        }
    }

    #[test]
    fn each_set_refuses_shared_settings_it_cannot_run_with() {
        let refused = |bench, change: fn(&mut BenchConfig)| {
            let mut config = BenchConfig::new(bench);
            change(&mut config);
            matches!(config.validate(), Err(ConfigError::Incompatible(_)))
        };
        assert!(refused(Bench::Tick, |c| c.common.irqchip = Irqchip::Kernel));
        assert!(refused(Bench::Vioapic, |c| c.common.pv_eoi = true));
        assert!(refused(Bench::Vioapic, |c| c.common.apic = ApicMode::Xapic));
        assert!(refused(Bench::HaltWakeup, |c| c.common.apic = ApicMode::Xapic));
        assert!(refused(Bench::Ipi, |c| c.common.vcpus = 1));
        assert!(refused(Bench::Whileloop, |c| c.params =
            BenchParams::Whileloop(WhileloopParams {
                rate_hz: 0,
                duration_ms: 500
            })));
        assert!(refused(Bench::IrqLatency, |c| {
            c.common.irqchip = Irqchip::Split;
            c.common.inject = Inject::Irqfd;
            c.params = BenchParams::IrqLatency(IrqLatencyParams {
                source: IrqSource::Ioapic,
                ..IrqLatencyParams::default()
            });
        }));
        assert!(refused(Bench::Ipi, |c| c.params =
            BenchParams::Ipi(IpiParams {
                pv_send_ipi: true,
                ..IpiParams::default()
            })));
        assert!(refused(Bench::Vioapic, |c| c.params =
            BenchParams::Vioapic(VioapicParams {
                vioapic: VioapicLevel::Kernel,
                vioapic_race: true,
                ..VioapicParams::default()
            })));
        // The same settings elsewhere are fine: the rules are each bench's.
        assert!(!refused(Bench::IrqLatency, |c| c.common.apic = ApicMode::Xapic));
        assert!(!refused(Bench::TimerLatency, |c| c.common.vcpus = 1));
    }

    #[test]
    fn the_guest_reads_only_its_benchs_parameters() {
        let mut page = SharedPage::default();
        BenchParams::Ipi(IpiParams {
            ipi: IpiKind::Broadcast,
            pv_send_ipi: true,
            ipi_measure: IpiMeasure::OneWay,
            count: 7,
        })
        .boot(&mut page);
        assert_eq!(page.bench, abi::BENCH_IPI);
        assert_eq!(page.count, 7);
        assert_eq!(page.args, [abi::IPI_BROADCAST_PV, abi::IPI_ONE_WAY, 0, 0]);
        assert_eq!((page.period_ns, page.duration_ns, page.fault), (0, 0, 0));

        let mut page = SharedPage::default();
        BenchParams::new(Bench::Tick).boot(&mut page);
        assert_eq!(page.duration_ns, 500_000_000);
        assert_eq!(page.count, 0);
    }
}
