//! Exit accounting: the exits the run loop sees in userspace, by reason,
//! and KVM's in-kernel counters from each vCPU's binary stats fd.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::stats::{self, Counters, StatsError, StatsFd};

/// Why KVM_RUN returned to the VMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserspaceExit {
    Io,
    Mmio,
    MsrRead,
    MsrWrite,
    IrqWindow,
    Hlt,
    /// A signal (the VMM kicking its own vCPU) interrupted KVM_RUN.
    Interrupted,
    Hypercall,
    IoapicEoi,
    Other,
}

impl UserspaceExit {
    const ALL: [UserspaceExit; 10] = [
        UserspaceExit::Io,
        UserspaceExit::Mmio,
        UserspaceExit::MsrRead,
        UserspaceExit::MsrWrite,
        UserspaceExit::IrqWindow,
        UserspaceExit::Hlt,
        UserspaceExit::Interrupted,
        UserspaceExit::Hypercall,
        UserspaceExit::IoapicEoi,
        UserspaceExit::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UserspaceExit::Io => "io",
            UserspaceExit::Mmio => "mmio",
            UserspaceExit::MsrRead => "msr_read",
            UserspaceExit::MsrWrite => "msr_write",
            UserspaceExit::IrqWindow => "irq_window",
            UserspaceExit::Hlt => "hlt",
            UserspaceExit::Interrupted => "intr",
            UserspaceExit::Hypercall => "hypercall",
            UserspaceExit::IoapicEoi => "ioapic_eoi",
            UserspaceExit::Other => "other",
        }
    }
}

/// One vCPU's userspace exits, counted by its run loop.
#[derive(Default)]
pub struct ExitCounters {
    counts: [AtomicU64; UserspaceExit::ALL.len()],
}

impl ExitCounters {
    pub fn count(&self, reason: UserspaceExit) {
        self.counts[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Counters {
        UserspaceExit::ALL
            .iter()
            .map(|&reason| {
                (
                    reason.name().to_string(),
                    self.counts[reason as usize].load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

/// The in-kernel counters reported as exit reasons: KVM's `*_exits` stats
/// and the other exit-causing events it counts.
const KERNEL_EXIT_STATS: &[&str] = &[
    "halt_exits",
    "io_exits",
    "irq_exits",
    "irq_window_exits",
    "mmio_exits",
    "nmi_window_exits",
    "request_irq_exits",
    "signal_exits",
    "hypercalls",
    "insn_emulation",
];
const KERNEL_TOTAL_STAT: &str = "exits";
const KERNEL_SIGNAL_EXITS_STAT: &str = "signal_exits";

#[derive(Debug, thiserror::Error)]
pub enum ExitsError {
    #[error("cannot read vCPU {cpu}'s KVM stats")]
    Stats {
        cpu: usize,
        #[source]
        source: StatsError,
    },
}

/// Counters of every vCPU at one instant.
#[derive(Clone, Debug, Default)]
pub struct ExitSnapshot {
    userspace: Vec<Counters>,
    kernel: Vec<Counters>,
}

/// Every vCPU's counters: the run loops' and KVM's.
pub struct ExitAccounting {
    pub counters: Vec<ExitCounters>,
    stats: Vec<StatsFd>,
}

impl ExitAccounting {
    pub fn new(stats: Vec<StatsFd>) -> Self {
        ExitAccounting {
            counters: stats.iter().map(|_| ExitCounters::default()).collect(),
            stats,
        }
    }

    pub fn snapshot(&self) -> Result<ExitSnapshot, ExitsError> {
        let kernel = self
            .stats
            .iter()
            .enumerate()
            .map(|(cpu, fd)| {
                fd.read()
                    .map_err(|source| ExitsError::Stats { cpu, source })
            })
            .collect::<Result<_, _>>()?;
        Ok(ExitSnapshot {
            userspace: self.counters.iter().map(ExitCounters::snapshot).collect(),
            kernel,
        })
    }
}

/// One vCPU's exits over the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VcpuExits {
    pub cpu: usize,
    pub total: u64,
    pub userspace: u64,
    pub kernel: u64,
    /// Userspace exits by reason (`io`, `mmio`, `msr_write`, `irq_window`, `hlt`, `intr`, ...).
    pub userspace_by_reason: BTreeMap<String, u64>,
    /// Every scalar KVM stat that moved (exits, irq_injections, halt_wakeup, ...).
    pub kvm_stats: BTreeMap<String, u64>,
}

/// All vCPUs' exits over the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExitSummary {
    /// KVM's `exits` stat: every exit from guest mode.
    pub total: u64,
    /// Exits that returned to this process: KVM_RUN returns, except kicks
    /// (`intr`) that arrived before the guest was entered.
    pub userspace: u64,
    /// Exits KVM handled without returning: `total - userspace`.
    pub kernel: u64,
    /// KVM's per-category exit counters (`io_exits`, `halt_exits`, `irq_exits`, ...).
    pub by_reason: BTreeMap<String, u64>,
    /// Userspace exits by reason, summed over vCPUs.
    pub userspace_by_reason: BTreeMap<String, u64>,
    pub per_vcpu: Vec<VcpuExits>,
}

impl ExitSummary {
    /// The exits between two snapshots, minus `excluded` userspace I/O exits
    /// on vCPU 0 (the guest's own window markers).
    pub fn between(before: &ExitSnapshot, after: &ExitSnapshot, excluded_markers: u64) -> Self {
        let mut per_vcpu = Vec::new();
        for (cpu, (user_after, kernel_after)) in
            after.userspace.iter().zip(&after.kernel).enumerate()
        {
            let empty = Counters::new();
            let mut userspace_by_reason =
                stats::delta(before.userspace.get(cpu).unwrap_or(&empty), user_after);
            let mut kvm_stats =
                stats::delta(before.kernel.get(cpu).unwrap_or(&empty), kernel_after);
            if cpu == 0 && excluded_markers > 0 {
                for counters in [&mut userspace_by_reason, &mut kvm_stats] {
                    for name in [UserspaceExit::Io.name(), "io_exits", KERNEL_TOTAL_STAT] {
                        if let Some(value) = counters.get_mut(name) {
                            *value = value.saturating_sub(excluded_markers);
                        }
                    }
                }
            }
            userspace_by_reason.retain(|_, value| *value > 0);
            kvm_stats.retain(|_, value| *value > 0);
            // A kick that lands before KVM_RUN enters the guest returns EINTR
            // without any exit; KVM's signal_exits counts those that did exit.
            let interrupted = userspace_by_reason
                .get(UserspaceExit::Interrupted.name())
                .copied()
                .unwrap_or(0);
            let signal_exits = kvm_stats
                .get(KERNEL_SIGNAL_EXITS_STAT)
                .copied()
                .unwrap_or(0);
            let userspace: u64 = userspace_by_reason.values().sum::<u64>() - interrupted
                + interrupted.min(signal_exits);
            let total = kvm_stats
                .get(KERNEL_TOTAL_STAT)
                .copied()
                .unwrap_or(0)
                .max(userspace);
            per_vcpu.push(VcpuExits {
                cpu,
                total,
                userspace,
                kernel: total - userspace,
                userspace_by_reason,
                kvm_stats,
            });
        }
        let mut by_reason = BTreeMap::new();
        let mut userspace_by_reason = BTreeMap::new();
        for vcpu in &per_vcpu {
            for name in KERNEL_EXIT_STATS {
                if let Some(value) = vcpu.kvm_stats.get(*name) {
                    *by_reason.entry(name.to_string()).or_insert(0) += value;
                }
            }
            for (name, value) in &vcpu.userspace_by_reason {
                *userspace_by_reason.entry(name.clone()).or_insert(0) += value;
            }
        }
        ExitSummary {
            total: per_vcpu.iter().map(|v| v.total).sum(),
            userspace: per_vcpu.iter().map(|v| v.userspace).sum(),
            kernel: per_vcpu.iter().map(|v| v.kernel).sum(),
            by_reason,
            userspace_by_reason,
            per_vcpu,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(pairs: &[(&str, u64)]) -> Counters {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), *value))
            .collect()
    }

    #[test]
    fn window_counts_exits_between_snapshots_without_the_end_marker() {
        let before = ExitSnapshot {
            userspace: vec![counters(&[("io", 5), ("hlt", 1)])],
            kernel: vec![counters(&[
                ("exits", 10),
                ("io_exits", 5),
                ("halt_exits", 1),
            ])],
        };
        let after = ExitSnapshot {
            userspace: vec![counters(&[("io", 6), ("hlt", 101)])],
            kernel: vec![counters(&[
                ("exits", 160),
                ("io_exits", 6),
                ("halt_exits", 101),
            ])],
        };
        let summary = ExitSummary::between(&before, &after, 1);
        assert_eq!(summary.userspace, 100);
        assert_eq!(summary.total, 149);
        assert_eq!(summary.kernel, 49);
        assert_eq!(summary.by_reason.get("halt_exits"), Some(&100));
        assert_eq!(
            summary.by_reason.get("io_exits"),
            None,
            "the marker was the only I/O exit"
        );
        assert_eq!(summary.userspace_by_reason.get("hlt"), Some(&100));
    }

    #[test]
    fn kicks_before_entry_are_not_exits() {
        let before = ExitSnapshot {
            userspace: vec![Counters::new()],
            kernel: vec![Counters::new()],
        };
        let after = ExitSnapshot {
            userspace: vec![counters(&[("intr", 10), ("msr_write", 4)])],
            kernel: vec![counters(&[("exits", 7), ("signal_exits", 3)])],
        };
        let summary = ExitSummary::between(&before, &after, 0);
        // 4 MSR writes plus the 3 kicks that KVM saw leave the guest.
        assert_eq!(summary.userspace, 7);
        assert_eq!(summary.total, 7);
        assert_eq!(summary.kernel, 0);
        assert_eq!(summary.userspace_by_reason.get("intr"), Some(&10));
    }
}
