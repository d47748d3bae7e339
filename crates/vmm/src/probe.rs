//! `dirq probe`: what this host's KVM offers, how the guest executes on
//! it, and the platform's floors, all measured in one run by the guest:
//! one exit to the VMM (port I/O), one exit KVM handles in the kernel
//! (RDMSR), the cheapest interrupt into a running guest (x2APIC self-IPI)
//! and an IPI to another vCPU, busy and halted.

use std::collections::BTreeMap;

use dirq_stats::f64_of;
use kvm_bindings::*;
use kvm_ioctls::Kvm;
use serde::{Deserialize, Serialize};

use crate::bench::lapic_check::{self, LapicInService};
use crate::bench::{self, BenchError};
use crate::config::params::{ExitCostParams, IpiParams, IrqLatencyParams};
use crate::config::{
    Bench, BenchConfig, BenchParams, CommonSettings, GuestExec, GuestIdle, Inject, IpiMeasure,
    Irqchip, Named,
};
use crate::exec::{kvm_backend, ExecError, HostExec};
use crate::host_load::{HostLoad, HostNoise, LoadMonitor, NoiseReason};
use crate::report::RunReport;
use crate::results::IpiResult;

/// KVM's paravirtual feature leaf and its bits (Documentation/virt/kvm/x86/cpuid.rst).
const CPUID_KVM_FEATURES: u32 = 0x4000_0001;
const KVM_PV_FEATURES: &[(u32, &str)] = &[
    (0, "clocksource"),
    (1, "nop_io_delay"),
    (2, "mmu_op"),
    (3, "clocksource2"),
    (4, "async_pf"),
    (5, "steal_time"),
    (6, "pv_eoi"),
    (7, "pv_unhalt"),
    (9, "pv_tlb_flush"),
    (10, "async_pf_vmexit"),
    (11, "pv_send_ipi"),
    (12, "poll_control"),
    (13, "pv_sched_yield"),
    (14, "async_pf_int"),
    (15, "msi_ext_dest_id"),
    (16, "hc_map_gpa_range"),
    (17, "migration_control"),
    (24, "clocksource_stable"),
];

const CAPABILITIES: &[(u32, &str)] = &[
    (KVM_CAP_IRQCHIP, "irqchip"),
    (KVM_CAP_SPLIT_IRQCHIP, "split_irqchip"),
    (KVM_CAP_IRQFD, "irqfd"),
    (KVM_CAP_IOEVENTFD, "ioeventfd"),
    (KVM_CAP_IRQ_ROUTING, "irq_routing"),
    (KVM_CAP_SIGNAL_MSI, "signal_msi"),
    (KVM_CAP_X2APIC_API, "x2apic_api"),
    (KVM_CAP_TSC_DEADLINE_TIMER, "tsc_deadline_timer"),
    (KVM_CAP_READONLY_MEM, "readonly_mem"),
    (KVM_CAP_X86_MSR_FILTER, "x86_msr_filter"),
    (KVM_CAP_X86_USER_SPACE_MSR, "x86_user_space_msr"),
    (KVM_CAP_X86_DISABLE_EXITS, "x86_disable_exits"),
    (KVM_CAP_HALT_POLL, "halt_poll"),
    (KVM_CAP_COALESCED_MMIO, "coalesced_mmio"),
    (KVM_CAP_COALESCED_PIO, "coalesced_pio"),
    (KVM_CAP_IMMEDIATE_EXIT, "immediate_exit"),
    (KVM_CAP_BINARY_STATS_FD, "binary_stats_fd"),
    (KVM_CAP_EXIT_HYPERCALL, "exit_hypercall"),
    (KVM_CAP_PIT2, "pit2"),
];

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot open /dev/kvm")]
    OpenKvm(#[source] kvm_ioctls::Error),
    #[error("KVM_GET_SUPPORTED_CPUID failed")]
    Cpuid(#[source] kvm_ioctls::Error),
    #[error("timing {what} failed")]
    Floor {
        what: &'static str,
        #[source]
        source: BenchError,
    },
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// The platform's floors: what no interrupt path on this host can beat.
/// Each is a median: of the figure's median in each of the probe's runs
/// (batches), so that one slow run moves none; `spread` says how far the
/// runs disagreed, and whether they pinned the median down
/// ([`FloorSpread::pinned`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Floors {
    /// One `out` handled by this VMM, guest round trip (p50; the mean
    /// where the guest saw no exit under its 200 us cap).
    pub userspace_exit_ns: f64,
    /// One RDMSR handled inside KVM, guest round trip (p50, as above).
    pub kernel_exit_ns: f64,
    /// x2APIC self-IPI, sent to handler entry (p50).
    pub self_ipi_p50_ns: f64,
    /// IPI to another vCPU spinning with interrupts on, one way (p50).
    pub ipi_busy_p50_ns: f64,
    /// IPI to another vCPU halted in HLT, one way (p50).
    pub ipi_halted_p50_ns: f64,
    /// What one IPI takes from a busy vCPU (p50, the target's own TSC):
    /// the exit the kick forces, the injection, the handler (its pong and
    /// EOI) and the return. 0 when the guest did not measure it.
    #[serde(default)]
    pub ipi_busy_target_ns: f64,
    /// The sender's ICR write of an IPI to a busy vCPU (p50): its exit and
    /// the host IPI that kicks the target. 0 when not measured.
    #[serde(default)]
    pub ipi_busy_send_ns: f64,
    /// The same two with dirq's userspace LAPIC, whose kick is a signal
    /// to the target's thread and a return to the VMM. 0 when not measured.
    #[serde(default)]
    pub userspace_ipi_busy_target_ns: f64,
    #[serde(default)]
    pub userspace_ipi_busy_send_ns: f64,
    /// Set when the two vCPUs of the IPI floors shared a host CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_note: Option<String>,
    /// How each floor varied between the probe's runs.
    #[serde(default)]
    pub spread: BTreeMap<Floor, FloorSpread>,
    /// Wall time per event of each kind of probe run (ns): what sizes the
    /// report's runs to a time budget on this host.
    #[serde(default)]
    pub event_wall_ns: BTreeMap<FloorRun, f64>,
}

/// One of the floors, by what it times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Floor {
    UserspaceExit,
    KernelExit,
    SelfIpi,
    IpiBusy,
    IpiHalted,
    IpiBusySend,
    IpiBusyTarget,
    UserspaceIpiBusySend,
    UserspaceIpiBusyTarget,
}

impl Floor {
    /// Every floor, in the order people read them.
    pub const ALL: [Floor; 9] = [
        Floor::UserspaceExit,
        Floor::KernelExit,
        Floor::SelfIpi,
        Floor::IpiBusy,
        Floor::IpiHalted,
        Floor::IpiBusySend,
        Floor::IpiBusyTarget,
        Floor::UserspaceIpiBusySend,
        Floor::UserspaceIpiBusyTarget,
    ];

    /// What the floor times, for tables and warnings.
    pub fn name(self) -> &'static str {
        match self {
            Floor::UserspaceExit => "exit to the VMM (port I/O), p50",
            Floor::KernelExit => "exit handled in KVM (RDMSR), p50",
            Floor::SelfIpi => "x2APIC self-IPI, p50",
            Floor::IpiBusy => "IPI to a busy vCPU, one way, p50",
            Floor::IpiHalted => "IPI to a halted vCPU, one way, p50",
            Floor::IpiBusySend => "IPI send to a busy vCPU, p50",
            Floor::IpiBusyTarget => "IPI's cost to a busy target, p50",
            Floor::UserspaceIpiBusySend => "the same send, userspace LAPIC, p50",
            Floor::UserspaceIpiBusyTarget => "the same cost, userspace LAPIC, p50",
        }
    }
}

/// The four kinds of run the probe repeats, each timing some floors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloorRun {
    /// exit-cost: port I/O, RDMSR and self-IPI, back to back.
    Exits,
    /// ipi one way to a spinning vCPU.
    IpiBusy,
    /// ipi one way to a halted vCPU.
    IpiHalted,
    /// ipi one way to a spinning vCPU through dirq's userspace LAPIC.
    IpiBusyUserspace,
}

impl FloorRun {
    const ALL: [FloorRun; 4] = [
        FloorRun::Exits,
        FloorRun::IpiBusy,
        FloorRun::IpiHalted,
        FloorRun::IpiBusyUserspace,
    ];

    fn describe(self) -> &'static str {
        match self {
            FloorRun::Exits => "exits and self-IPIs",
            FloorRun::IpiBusy => "an IPI to a busy vCPU",
            FloorRun::IpiHalted => "an IPI to a halted vCPU",
            FloorRun::IpiBusyUserspace => "an IPI to a busy vCPU, userspace LAPIC",
        }
    }

    /// The run's bench, what its guest does between events, and whose
    /// LAPIC it uses.
    fn params(self, count: u64) -> (BenchParams, GuestIdle, Irqchip) {
        let ipi = |idle, irqchip| {
            let params = BenchParams::Ipi(IpiParams {
                count,
                ipi_measure: IpiMeasure::OneWay,
                ..IpiParams::default()
            });
            (params, idle, irqchip)
        };
        match self {
            FloorRun::Exits => (
                BenchParams::ExitCost(ExitCostParams { count }),
                GuestIdle::Halt,
                Irqchip::Kernel,
            ),
            FloorRun::IpiBusy => ipi(GuestIdle::Busy, Irqchip::Kernel),
            FloorRun::IpiHalted => ipi(GuestIdle::Halt, Irqchip::Kernel),
            FloorRun::IpiBusyUserspace => ipi(GuestIdle::Busy, Irqchip::Userspace),
        }
    }
}

/// How far one floor moved between the probe's runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FloorSpread {
    /// The first and third quartiles of the runs' figures (ns).
    pub low_ns: f64,
    pub high_ns: f64,
    /// Each run's figure (ns), in the order they ran.
    pub batch_ns: Vec<f64>,
    /// Events timed for this floor over all runs.
    pub samples: u64,
}

/// Two probes of a quiet host should agree on every floor within this
/// share: each probe pins a floor's median down to half of it.
pub const FLOOR_AGREEMENT: f64 = 0.30;

impl FloorSpread {
    /// Half the width of the median's notch, as a share of `median` (0
    /// for no median): 1.58 IQR / sqrt(runs), the box plot's notch
    /// (McGill, Tukey and Larsen 1978), roughly a 95% interval for the
    /// median of runs like these. More runs narrow it.
    pub fn notch(&self, median: f64) -> f64 {
        let runs = dirq_stats::f64_of(self.batch_ns.len() as u64);
        if median > 0.0 && runs > 0.0 {
            1.58 * (self.high_ns - self.low_ns) / runs.sqrt() / median
        } else {
            0.0
        }
    }

    /// Whether the runs pinned the median down: its notch within half of
    /// [`FLOOR_AGREEMENT`], so that two probes' medians, each that close
    /// to the host's own, agree within it.
    pub fn pinned(&self, median: f64) -> bool {
        self.notch(median) <= FLOOR_AGREEMENT / 2.0
    }

    /// Half the interquartile range: how far either side of the median a
    /// run's figure typically lands.
    pub fn half_width_ns(&self) -> f64 {
        (self.high_ns - self.low_ns) / 2.0
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub api_version: i32,
    /// The loaded KVM backend module (kvm_intel, kvm_amd, kvm_pvm).
    pub backend: Option<String>,
    pub max_vcpus: usize,
    pub recommended_vcpus: usize,
    pub capabilities: BTreeMap<String, bool>,
    /// Bits of KVM's PV CPUID leaf 0x40000001 EAX this KVM offers.
    pub pv_features: Vec<String>,
    /// The host's default halt_poll_ns (module parameter).
    pub default_halt_poll_ns: Option<u64>,
    /// The execution modes this host offers, best first.
    pub offered_exec: Vec<GuestExec>,
    /// The mode the floors were measured in.
    pub guest_exec: GuestExec,
    #[serde(flatten)]
    pub floors: Floors,
    /// Whether KVM's LAPIC holds a delivered interrupt in service until
    /// its EOI (`bench::lapic_check`); `None` in reports from before it.
    #[serde(default)]
    pub lapic_in_service: Option<LapicInService>,
    /// Events timed for the floor that got the fewest, over all runs.
    pub samples: u64,
    /// What the host did while the floors were measured.
    #[serde(default)]
    pub host_load: Option<HostLoad>,
    /// Whether the floors can be taken as this host's own.
    #[serde(default)]
    pub host_noise: HostNoise,
}

/// Probes the host and measures the floors with the guest executing as
/// `guest_exec` asks (`None`: the host's default).
pub fn probe(guest_exec: Option<GuestExec>) -> Result<ProbeReport, ProbeError> {
    let kvm = Kvm::new().map_err(ProbeError::OpenKvm)?;
    let capabilities = CAPABILITIES
        .iter()
        .map(|&(cap, name)| {
            (
                name.to_string(),
                kvm.check_extension_raw(u64::from(cap)) > 0,
            )
        })
        .collect();
    let supported = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(ProbeError::Cpuid)?;
    let pv_bits = supported
        .as_slice()
        .iter()
        .find(|entry| entry.function == CPUID_KVM_FEATURES)
        .map_or(0, |entry| entry.eax);
    let pv_features = KVM_PV_FEATURES
        .iter()
        .filter(|(bit, _)| pv_bits & (1 << bit) != 0)
        .map(|(_, name)| name.to_string())
        .collect();
    let host = HostExec::detect(&kvm)?;
    let guest_exec = host.resolve(guest_exec)?;
    let default_halt_poll_ns = std::fs::read_to_string("/sys/module/kvm/parameters/halt_poll_ns")
        .ok()
        .and_then(|text| text.trim().parse().ok());

    let mut monitor = LoadMonitor::start();
    let floors = measure_floors(guest_exec, &mut monitor)?;
    let host_load = monitor.finish();
    let host_noise = HostNoise::from_reasons(floors.noise_reasons(&host_load));
    let samples = floors
        .spread
        .values()
        .map(|spread| spread.samples)
        .min()
        .unwrap_or(0);
    Ok(ProbeReport {
        api_version: kvm.get_api_version(),
        backend: kvm_backend(),
        max_vcpus: kvm.get_max_vcpus(),
        recommended_vcpus: kvm.get_nr_vcpus(),
        capabilities,
        pv_features,
        default_halt_poll_ns,
        offered_exec: host.offered(),
        guest_exec,
        floors,
        lapic_in_service: Some(lapic_check::check(Some(guest_exec)).map_err(|source| {
            ProbeError::Floor {
                what: "whether the LAPIC holds interrupts in service",
                source,
            }
        })?),
        samples,
        host_load: Some(host_load),
        host_noise,
    })
}

impl Floors {
    /// Each floor with what it times, in the order people read them.
    pub fn named(&self) -> [(&'static str, f64); 9] {
        Floor::ALL.map(|floor| (floor.name(), self.get(floor)))
    }

    /// One floor's figure (ns).
    pub fn get(&self, floor: Floor) -> f64 {
        match floor {
            Floor::UserspaceExit => self.userspace_exit_ns,
            Floor::KernelExit => self.kernel_exit_ns,
            Floor::SelfIpi => self.self_ipi_p50_ns,
            Floor::IpiBusy => self.ipi_busy_p50_ns,
            Floor::IpiHalted => self.ipi_halted_p50_ns,
            Floor::IpiBusySend => self.ipi_busy_send_ns,
            Floor::IpiBusyTarget => self.ipi_busy_target_ns,
            Floor::UserspaceIpiBusySend => self.userspace_ipi_busy_send_ns,
            Floor::UserspaceIpiBusyTarget => self.userspace_ipi_busy_target_ns,
        }
    }

    fn slot(&mut self, floor: Floor) -> &mut f64 {
        match floor {
            Floor::UserspaceExit => &mut self.userspace_exit_ns,
            Floor::KernelExit => &mut self.kernel_exit_ns,
            Floor::SelfIpi => &mut self.self_ipi_p50_ns,
            Floor::IpiBusy => &mut self.ipi_busy_p50_ns,
            Floor::IpiHalted => &mut self.ipi_halted_p50_ns,
            Floor::IpiBusySend => &mut self.ipi_busy_send_ns,
            Floor::IpiBusyTarget => &mut self.ipi_busy_target_ns,
            Floor::UserspaceIpiBusySend => &mut self.userspace_ipi_busy_send_ns,
            Floor::UserspaceIpiBusyTarget => &mut self.userspace_ipi_busy_target_ns,
        }
    }

    /// Half the interquartile range of a floor's runs (0 when unknown).
    pub fn half_spread_ns(&self, floor: Floor) -> f64 {
        self.spread
            .get(&floor)
            .map_or(0.0, FloorSpread::half_width_ns)
    }

    /// The floors measured whose runs did not pin their median down,
    /// with its notch (a share of the median): what the probe could not
    /// pin down, and every cost derived from them says so.
    pub fn unpinned(&self) -> Vec<(Floor, f64)> {
        self.spread
            .iter()
            .filter(|(&floor, spread)| !spread.pinned(self.get(floor)))
            .map(|(&floor, spread)| (floor, spread.notch(self.get(floor))))
            .collect()
    }

    /// Why these floors, measured under `load`, may not be the host's own.
    pub fn noise_reasons(&self, load: &HostLoad) -> Vec<NoiseReason> {
        let mut reasons = load.noise_reasons();
        reasons.extend(
            self.unpinned()
                .into_iter()
                .map(|(floor, relative)| NoiseReason::FloorSpread { floor, relative }),
        );
        if self.placement_note.is_some() {
            reasons.push(NoiseReason::SharedCore);
        }
        reasons
    }
}

/// One interrupt path measured emulated and natively.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmulationRow {
    pub path: String,
    pub emulated: RunReport,
    pub native: RunReport,
}

/// What kvm_pvm's emulation costs, per path: the same irq-latency run in
/// both modes (docs/native.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmulationTable {
    pub rows: Vec<EmulationRow>,
}

/// At most this many interrupts per emulated run (~1 ms each emulated on a
/// quiet host with a core per vCPU).
const EMULATED_INTERRUPTS: u64 = 300;

/// At most this many interrupts per native run of the emulation table.
const EMULATION_NATIVE_INTERRUPTS: u64 = 5_000;

/// The wall time one run of the emulation table may take: each run is
/// sized from a pilot run's pace, so a host whose traps (or whose
/// emulation) cost ten times more still finishes the table in seconds.
const EMULATION_RUN_BUDGET_MS: u64 = 2_000;

/// Runs irq-latency on the userspace, kernel and kernel+irqfd paths into a
/// busy guest, emulated and native. Only hosts that offer both can.
pub fn emulation_table() -> Result<EmulationTable, ProbeError> {
    let host = HostExec::detect_host()?;
    host.resolve(Some(GuestExec::Native))?;
    let paths = [
        (Irqchip::Userspace, Inject::Vcpu),
        (Irqchip::Kernel, Inject::Vcpu),
        (Irqchip::Kernel, Inject::Irqfd),
    ];
    let mut rows = Vec::new();
    for (irqchip, inject) in paths {
        let run = |exec, count| {
            let config = BenchConfig {
                params: BenchParams::IrqLatency(IrqLatencyParams {
                    count,
                    rate_hz: 0,
                    ..IrqLatencyParams::default()
                }),
                common: CommonSettings {
                    irqchip,
                    inject,
                    guest_idle: GuestIdle::Busy,
                    guest_exec: Some(exec),
                    ..CommonSettings::new(Bench::IrqLatency)
                },
            };
            bench::run(&config).map_err(|source| ProbeError::Floor {
                what: "irq-latency for the emulation table",
                source,
            })
        };
        // A pilot run's pace sizes the run to the budget, at most `most`.
        let sized = |exec, most: u64| {
            let pilot = run(exec, PILOT_EVENTS)?;
            let pace_ns = pilot.duration_s * 1e9 / dirq_stats::f64_of(pilot.interrupts.max(1));
            run(
                exec,
                events_fitting(EMULATION_RUN_BUDGET_MS, pace_ns, PILOT_EVENTS, most),
            )
        };
        rows.push(EmulationRow {
            path: format!("{irqchip} + {inject}"),
            emulated: sized(GuestExec::Emulated, EMULATED_INTERRUPTS)?,
            native: sized(GuestExec::Native, EMULATION_NATIVE_INTERRUPTS)?,
        });
    }
    Ok(EmulationTable { rows })
}

impl std::fmt::Display for EmulationTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{:<20} {:<9} {:>10} {:>10} {:>16}",
            "irq-latency, busy", "guest", "exits/irq", "p50 (us)", "insn_emul/irq"
        )?;
        for row in &self.rows {
            for report in [&row.emulated, &row.native] {
                writeln!(
                    f,
                    "{:<20} {:<9} {:>10.2} {:>10.2} {:>16.1}",
                    row.path,
                    report.guest_exec.name(),
                    report.exits_per_interrupt,
                    report
                        .latency_ns
                        .as_ref()
                        .map_or(0.0, |l| f64_of(l.p50) / 1e3),
                    report.insn_emulation_per_interrupt
                )?;
            }
        }
        Ok(())
    }
}

/// Runs of each kind per probe, after a pilot run that only sizes them,
/// taken in turn with the other kinds: the median of seven shrugs off two
/// slow ones on either side ...
pub const BATCHES: usize = 7;

/// ... and up to this many while a floor of the kind is not pinned down
/// (its notch narrows with the root of the runs: 15 runs pin a floor whose
/// runs spread 1.5 times as far as 7 can).
pub const MAX_BATCHES: usize = 15;

/// The pilot's events: few enough for a host whose IPIs take milliseconds
/// (vCPUs sharing a CPU) to finish within one batch budget's watchdog.
const PILOT_EVENTS: u64 = 20;

/// A batch's events: at most this many (a stable p50 natively in tens of
/// ms), at least the minimum (a median still worth the name) ...
const MAX_BATCH_EVENTS: u64 = 1_000;
const MIN_BATCH_EVENTS: u64 = 20;

/// ... and otherwise as many as fit this budget at the previous run's pace.
const BATCH_BUDGET_MS: u64 = 250;

/// A probe run's watchdog: booting and tearing down the VM, plus this many
/// times the longer of the batch budget and the batch's expected length.
const BOOT_ALLOWANCE_MS: u64 = 3_000;
const WATCHDOG_BUDGETS: u64 = 8;

/// How many events of `pace_ns` wall time each fit `budget_ms`, kept
/// between `least` and `most` (`most` when the pace is unknown, 0).
pub fn events_fitting(budget_ms: u64, pace_ns: f64, least: u64, most: u64) -> u64 {
    let fitting = if pace_ns > 0.0 {
        dirq_stats::round_u64(dirq_stats::f64_of(budget_ms) * 1e6 / pace_ns)
    } else {
        most
    };
    fitting.clamp(least, most)
}

/// The events of the next batch and its watchdog, from the pace (wall ns
/// per event) of the previous run of its kind; the pilot's without one.
fn batch_size(pace_ns: Option<f64>) -> (u64, u64) {
    let events = pace_ns.map_or(PILOT_EVENTS, |pace| {
        events_fitting(BATCH_BUDGET_MS, pace, MIN_BATCH_EVENTS, MAX_BATCH_EVENTS)
    });
    let expected_ms =
        dirq_stats::round_u64(pace_ns.unwrap_or(0.0) * dirq_stats::f64_of(events) / 1e6);
    let timeout_ms = BOOT_ALLOWANCE_MS + WATCHDOG_BUDGETS * expected_ms.max(BATCH_BUDGET_MS);
    (events, timeout_ms)
}

/// One floor's figure from one run: its value and the events behind it.
struct Figure {
    floor: Floor,
    ns: f64,
    samples: u64,
}

/// The floors a run of `kind` timed, `events` of each.
fn figures(kind: FloorRun, report: &RunReport, events: u64) -> Result<Vec<Figure>, BenchError> {
    let p50 = report.latency_ns.as_ref().map_or(0.0, |l| f64_of(l.p50));
    let figure = |floor, ns, samples| Figure { floor, ns, samples };
    // The guest's median leaves out exits over its cap: without any
    // under it, the mean is all there is.
    let median_or_mean = |p50: u64, mean: f64| if p50 > 0 { f64_of(p50) } else { mean };
    // A figure the guest did not time counts as 0: `summarize` leaves it out.
    let timed = |ns: Option<u64>| ns.map_or(0.0, f64_of);
    // A busy-target IPI run times the sender's ICR write and the target's
    // loss, whichever LAPIC carries it.
    let send_and_target = |send: Floor, target: Floor, ipi: &IpiResult| {
        [
            figure(send, timed(ipi.send_p50_ns), events),
            figure(
                target,
                timed(ipi.target_gap_p50_ns),
                ipi.target_gaps.unwrap_or(0),
            ),
        ]
    };
    let results = &report.results;
    Ok(match kind {
        FloorRun::Exits => {
            let cost = results.exit_cost()?;
            vec![
                figure(
                    Floor::UserspaceExit,
                    median_or_mean(cost.userspace_exit_p50_ns, cost.userspace_exit_ns),
                    events,
                ),
                figure(
                    Floor::KernelExit,
                    median_or_mean(cost.kernel_exit_p50_ns, cost.kernel_exit_ns),
                    events,
                ),
                figure(Floor::SelfIpi, p50, events),
            ]
        }
        FloorRun::IpiBusy => {
            let mut figures = vec![figure(Floor::IpiBusy, p50, events)];
            figures.extend(send_and_target(
                Floor::IpiBusySend,
                Floor::IpiBusyTarget,
                results.ipi()?,
            ));
            figures
        }
        FloorRun::IpiBusyUserspace => send_and_target(
            Floor::UserspaceIpiBusySend,
            Floor::UserspaceIpiBusyTarget,
            results.ipi()?,
        )
        .into(),
        FloorRun::IpiHalted => vec![figure(Floor::IpiHalted, p50, events)],
    })
}

/// The `q` quantile of `sorted`, interpolating between neighbours.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else {
        return 0.0;
    };
    let position = q * dirq_stats::f64_of(last as u64);
    let below = dirq_stats::round_u64(position.floor());
    let index = usize::try_from(below).unwrap_or(last).min(last);
    let above = (index + 1).min(last);
    let fraction = position - dirq_stats::f64_of(below);
    sorted[index] + (sorted[above] - sorted[index]) * fraction
}

/// A floor's median over its runs and how they spread; runs that did not
/// time it (0) are left out.
fn summarize(figures: &[Figure]) -> Option<(f64, FloorSpread)> {
    let batch_ns: Vec<f64> = figures
        .iter()
        .filter(|figure| figure.ns > 0.0)
        .map(|figure| figure.ns)
        .collect();
    let mut sorted = batch_ns.clone();
    sorted.sort_by(f64::total_cmp);
    let median = quantile(&sorted, 0.5);
    (median > 0.0).then(|| {
        let spread = FloorSpread {
            low_ns: quantile(&sorted, 0.25),
            high_ns: quantile(&sorted, 0.75),
            batch_ns,
            samples: figures.iter().map(|figure| figure.samples).sum(),
        };
        (median, spread)
    })
}

/// Whether every floor timed so far has its median pinned down.
fn all_pinned(by_floor: &BTreeMap<Floor, Vec<Figure>>) -> bool {
    by_floor
        .values()
        .all(|figures| summarize(figures).is_none_or(|(median, spread)| spread.pinned(median)))
}

fn measure_floors(guest_exec: GuestExec, monitor: &mut LoadMonitor) -> Result<Floors, ProbeError> {
    let mut floors = Floors::default();
    let mut pace_ns: BTreeMap<FloorRun, f64> = BTreeMap::new();
    let mut by_kind: BTreeMap<FloorRun, BTreeMap<Floor, Vec<Figure>>> = BTreeMap::new();
    // Round by round, one run of each kind still needing runs: a floor's
    // runs then span the whole probe, not the second its kind happened to
    // run in, and what the host does meanwhile shows in their spread
    // rather than between two probes. Round 0 is the pilot, which only
    // sizes the runs (and warms the host up).
    for round in 0..=MAX_BATCHES {
        for kind in FloorRun::ALL {
            let timed = by_kind.entry(kind).or_default();
            if round > BATCHES && all_pinned(timed) {
                continue;
            }
            monitor.look();
            let (events, timeout_ms) = batch_size(pace_ns.get(&kind).copied());
            let (params, guest_idle, irqchip) = kind.params(events);
            let common = CommonSettings {
                guest_idle,
                irqchip,
                guest_exec: Some(guest_exec),
                timeout_ms: Some(timeout_ms),
                ..CommonSettings::new(params.bench())
            };
            let failed = |source| ProbeError::Floor {
                what: kind.describe(),
                source,
            };
            let report = bench::run(&BenchConfig { params, common }).map_err(failed)?;
            pace_ns.insert(kind, report.duration_s * 1e9 / dirq_stats::f64_of(events));
            if round == 0 {
                continue;
            }
            if floors.placement_note.is_none() {
                floors.placement_note = report.placement.note(report.config.common.vcpus);
            }
            for figure in figures(kind, &report, events).map_err(failed)? {
                timed.entry(figure.floor).or_default().push(figure);
            }
        }
    }
    floors.event_wall_ns = pace_ns;
    for (floor, figures) in by_kind.into_values().flatten() {
        if let Some((median, spread)) = summarize(&figures) {
            *floors.slot(floor) = median;
            floors.spread.insert(floor, spread);
        }
    }
    Ok(floors)
}

impl std::fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "KVM API {}  backend {}  vCPUs: {} recommended, {} max",
            self.api_version,
            self.backend.as_deref().unwrap_or("unknown"),
            self.recommended_vcpus,
            self.max_vcpus
        )?;
        let (present, absent): (Vec<_>, Vec<_>) =
            self.capabilities.iter().partition(|(_, &has)| has);
        let names = |caps: Vec<(&String, &bool)>| {
            caps.into_iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        };
        writeln!(f, "capabilities: {}", names(present))?;
        writeln!(f, "missing:      {}", names(absent))?;
        writeln!(f, "PV features:  {}", self.pv_features.join(" "))?;
        if let Some(ns) = self.default_halt_poll_ns {
            writeln!(f, "default halt_poll_ns: {ns}")?;
        }
        let offered: Vec<&str> = self.offered_exec.iter().map(|exec| exec.name()).collect();
        writeln!(
            f,
            "guest execution: {} (offered: {})",
            self.guest_exec,
            offered.join(", ")
        )?;
        let floors = &self.floors;
        writeln!(
            f,
            "platform floors (median of {BATCHES} to {MAX_BATCHES} runs each, more while the median \
             is uncertain by over +/-{:.0}%; the runs' interquartile range; the median's \
             uncertainty; runs; events over all runs):",
            100.0 * FLOOR_AGREEMENT / 2.0
        )?;
        for (floor, (name, ns)) in Floor::ALL.into_iter().zip(floors.named()) {
            write!(f, "  {name:<36} {:>8.2} us", ns / 1e3)?;
            match floors.spread.get(&floor) {
                Some(spread) => writeln!(
                    f,
                    "   [{:.2}-{:.2}]  +/-{:.0}%{}  {} runs  {} events",
                    spread.low_ns / 1e3,
                    spread.high_ns / 1e3,
                    100.0 * spread.notch(ns),
                    if spread.pinned(ns) { "" } else { " NOT PINNED" },
                    spread.batch_ns.len(),
                    spread.samples
                )?,
                None => writeln!(f, "   not measured")?,
            }
        }
        let unpinned = floors.unpinned();
        if !unpinned.is_empty() {
            let names: Vec<&str> = unpinned.iter().map(|(floor, _)| floor.name()).collect();
            writeln!(
                f,
                "  NOT PINNED DOWN after {MAX_BATCHES} runs: {}; a second probe may differ by more \
                 than {:.0}% on these, and every cost derived from them says so",
                names.join("; "),
                100.0 * FLOOR_AGREEMENT
            )?;
        }
        if let Some(note) = &floors.placement_note {
            writeln!(f, "  NOTE: {note}")?;
        }
        if let Some(load) = &self.host_load {
            writeln!(f, "{load}")?;
        }
        if let Some(warning) = self.host_noise.warning() {
            writeln!(f, "{warning}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `runs` figures around 100 us whose quartiles are `iqr` apart.
    fn figures(runs: usize, iqr: f64) -> Vec<Figure> {
        (0..runs)
            .map(|run| {
                // Evenly spaced from 100 - iqr to 100 + iqr: the quartiles
                // land iqr / 2 either side of the median.
                let step = dirq_stats::f64_of(run as u64) / dirq_stats::f64_of(runs as u64 - 1);
                Figure {
                    floor: Floor::IpiBusyTarget,
                    ns: 100_000.0 + iqr * (2.0 * step - 1.0),
                    samples: 10,
                }
            })
            .collect()
    }

    #[test]
    fn a_floor_is_pinned_when_its_medians_notch_is_within_half_the_agreement() {
        let (median, spread) = summarize(&figures(BATCHES, 30_000.0)).expect("timed");
        assert_eq!(median, 100_000.0);
        assert!((spread.high_ns - spread.low_ns - 30_000.0).abs() < 1e-6);
        // 1.58 * 0.30 / sqrt(7) = 0.179: seven runs this spread do not pin it ...
        assert!((spread.notch(median) - 0.179).abs() < 1e-3);
        assert!(!spread.pinned(median));
        // ... fifteen do: 1.58 * 0.30 / sqrt(15) = 0.122.
        let (median, spread) = summarize(&figures(MAX_BATCHES, 30_000.0)).expect("timed");
        assert!(spread.pinned(median), "{}", spread.notch(median));
        let by_floor = |runs, iqr| BTreeMap::from([(Floor::IpiBusyTarget, figures(runs, iqr))]);
        assert!(all_pinned(&by_floor(BATCHES, 10_000.0)));
        assert!(!all_pinned(&by_floor(BATCHES, 30_000.0)));
        assert!(all_pinned(&BTreeMap::new()));
    }

    #[test]
    fn the_probe_names_the_floors_it_could_not_pin_down() {
        let (median, spread) = summarize(&figures(MAX_BATCHES, 60_000.0)).expect("timed");
        let floors = Floors {
            ipi_busy_target_ns: median,
            spread: BTreeMap::from([(Floor::IpiBusyTarget, spread)]),
            ..Floors::default()
        };
        let unpinned = floors.unpinned();
        assert_eq!(unpinned.len(), 1);
        assert_eq!(unpinned[0].0, Floor::IpiBusyTarget);
        let load = HostLoad {
            cpus: 2,
            load_average: None,
            other_runnable: None,
            steal_ms: None,
            steal_share: None,
            elapsed_s: 1.0,
        };
        assert!(floors.noise_reasons(&load).iter().any(|reason| matches!(
            reason,
            NoiseReason::FloorSpread {
                floor: Floor::IpiBusyTarget,
                ..
            }
        )));
    }
}
