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
    Irqchip,
};
use crate::exec::{kvm_backend, ExecError, HostExec};
use crate::report::RunReport;

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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Floors {
    /// One `out` handled by this VMM, guest round trip (mean).
    pub userspace_exit_ns: f64,
    /// One RDMSR handled inside KVM, guest round trip (mean).
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
    /// Set when the two vCPUs of the IPI floors shared a host CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_note: Option<String>,
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
    /// Events timed for each figure.
    pub samples: u64,
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

    let floors = measure_floors(guest_exec)?;
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
        samples: FLOOR_SAMPLES,
    })
}

impl Floors {
    /// Each floor with what it times, in the order people read them.
    pub fn named(&self) -> [(&'static str, f64); 7] {
        [
            ("exit to the VMM (port I/O), mean", self.userspace_exit_ns),
            ("exit handled in KVM (RDMSR), mean", self.kernel_exit_ns),
            ("x2APIC self-IPI, p50", self.self_ipi_p50_ns),
            ("IPI to a busy vCPU, one way, p50", self.ipi_busy_p50_ns),
            ("IPI to a halted vCPU, one way, p50", self.ipi_halted_p50_ns),
            ("IPI send to a busy vCPU, p50", self.ipi_busy_send_ns),
            ("IPI's cost to a busy target, p50", self.ipi_busy_target_ns),
        ]
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

/// Interrupts per emulated run: ~1 ms each emulated.
const EMULATED_INTERRUPTS: u64 = 300;

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
        rows.push(EmulationRow {
            path: format!("{irqchip} + {inject}"),
            emulated: run(GuestExec::Emulated, EMULATED_INTERRUPTS)?,
            native: run(GuestExec::Native, FLOOR_SAMPLES)?,
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

/// Events per floor: enough for a stable p50 in well under a second natively.
const FLOOR_SAMPLES: u64 = 5_000;

fn measure_floors(guest_exec: GuestExec) -> Result<Floors, ProbeError> {
    let timed = |what, params: BenchParams, guest_idle| {
        let common = CommonSettings {
            guest_idle,
            guest_exec: Some(guest_exec),
            ..CommonSettings::new(params.bench())
        };
        bench::run(&BenchConfig { params, common })
            .map_err(|source| ProbeError::Floor { what, source })
    };
    let p50 = |report: &RunReport| report.latency_ns.as_ref().map_or(0.0, |l| f64_of(l.p50));
    let exit_cost = BenchParams::ExitCost(ExitCostParams {
        count: FLOOR_SAMPLES,
    });
    let exit_cost = timed("exits and self-IPIs", exit_cost, GuestIdle::Halt)?;
    let ipi = BenchParams::Ipi(IpiParams {
        count: FLOOR_SAMPLES,
        ipi_measure: IpiMeasure::OneWay,
        ..IpiParams::default()
    });
    let busy = timed("an IPI to a busy vCPU", ipi.clone(), GuestIdle::Busy)?;
    let halted = timed("an IPI to a halted vCPU", ipi, GuestIdle::Halt)?;
    let result = |report: &RunReport, name: &str| report.results.get(name).copied().unwrap_or(0.0);
    let figure = |name: &str| result(&exit_cost, name);
    Ok(Floors {
        userspace_exit_ns: figure("userspace_exit_ns"),
        kernel_exit_ns: figure("kernel_exit_ns"),
        self_ipi_p50_ns: p50(&exit_cost),
        ipi_busy_p50_ns: p50(&busy),
        ipi_halted_p50_ns: p50(&halted),
        ipi_busy_target_ns: result(&busy, bench::TARGET_GAP_NS),
        ipi_busy_send_ns: result(&busy, bench::SEND_NS),
        placement_note: busy.placement.note(busy.config.common.vcpus),
    })
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
        writeln!(f, "platform floors ({} events each):", self.samples)?;
        for (name, ns) in floors.named() {
            writeln!(f, "  {name:<36} {:>8.2} us", ns / 1e3)?;
        }
        if let Some(note) = &floors.placement_note {
            writeln!(f, "  NOTE: {note}")?;
        }
        Ok(())
    }
}
