//! `dirq probe`: what this host's KVM offers, and what one exit costs —
//! one the VMM handles in userspace and one KVM handles in the kernel,
//! measured by the guest in the same run.

use std::collections::BTreeMap;

use kvm_bindings::*;
use kvm_ioctls::Kvm;
use serde::{Deserialize, Serialize};

use crate::bench::{self, BenchError};
use crate::config::{Bench, BenchConfig};

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

/// Kernel modules that provide KVM's x86 backend.
const BACKENDS: &[&str] = &["kvm_intel", "kvm_amd", "kvm_pvm"];

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot open /dev/kvm")]
    OpenKvm(#[source] kvm_ioctls::Error),
    #[error("KVM_GET_SUPPORTED_CPUID failed")]
    Cpuid(#[source] kvm_ioctls::Error),
    #[error("timing exits failed")]
    ExitCost(#[from] BenchError),
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
    /// One `out` handled by this VMM, guest round trip.
    pub userspace_exit_ns: f64,
    /// One CPUID handled inside KVM, guest round trip.
    pub kernel_exit_ns: f64,
    /// Exits timed for each figure.
    pub exit_samples: u64,
}

pub fn probe() -> Result<ProbeReport, ProbeError> {
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
    let backend = BACKENDS
        .iter()
        .find(|module| std::path::Path::new("/sys/module").join(module).exists())
        .map(|module| module.to_string());
    let default_halt_poll_ns = std::fs::read_to_string("/sys/module/kvm/parameters/halt_poll_ns")
        .ok()
        .and_then(|text| text.trim().parse().ok());

    let config = BenchConfig::new(Bench::ExitCost);
    let report = bench::run(&config)?;
    let figure = |name: &str| report.results.get(name).copied().unwrap_or(0.0);
    Ok(ProbeReport {
        api_version: kvm.get_api_version(),
        backend,
        max_vcpus: kvm.get_max_vcpus(),
        recommended_vcpus: kvm.get_nr_vcpus(),
        capabilities,
        pv_features,
        default_halt_poll_ns,
        userspace_exit_ns: figure("userspace_exit_ns"),
        kernel_exit_ns: figure("kernel_exit_ns"),
        exit_samples: config.count,
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
        writeln!(
            f,
            "one exit (mean of {}): userspace {:.0} ns, in-kernel {:.0} ns",
            self.exit_samples, self.userspace_exit_ns, self.kernel_exit_ns
        )
    }
}
