//! The result of one run, serialized as `dirq run --json` prints it, and
//! its human-readable form: `perf kvm stat`-style exit tables and a
//! cyclictest-style latency line.

use std::collections::BTreeMap;
use std::fmt;

use dirq_stats::{f64_of, ratio};
use serde::{Deserialize, Serialize};

use crate::config::{Bench, BenchConfig, BenchParams, GuestExec, GuestIdle, HaltMode, Named};
use crate::exits::{ExitSummary, ExitTime, KvmStat, UserspaceExit, VmxExit};
use crate::machine::MachineFacts;
use crate::placement::Placement;
use crate::probe::Floor;

pub use crate::results::BenchResult;
use crate::results::Evidence;

/// The claims list's names for the latency samples and the execution mode.
pub const LATENCY_NS: &str = "latency_ns";
pub const GUEST_EXEC: &str = "guest_exec";
/// How the text output marks a figure that is the guest's claim.
pub const CLAIM_MARK: &str = "(the guest's claim)";
pub use dirq_stats::{Bucket, LatencySummary};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The bench (`bench`) and its own figures (`results`).
    #[serde(flatten)]
    pub results: BenchResult,
    pub config: BenchConfig,
    /// Interrupts the guest handled in the measured window (all vCPUs).
    pub interrupts: u64,
    pub exits: ExitSummary,
    /// `exits.total / interrupts`.
    pub exits_per_interrupt: f64,
    /// `exits.userspace / interrupts`.
    pub userspace_exits_per_interrupt: f64,
    /// `exits.kernel / interrupts`.
    pub kernel_exits_per_interrupt: f64,
    /// Null for benches that measure no latency (whileloop, exit-cost).
    pub latency_ns: Option<LatencySummary>,
    pub duration_s: f64,
    /// How the guest executed (native, emulated, hardware).
    pub guest_exec: GuestExec,
    /// Why the guest ran otherwise than asked (native refused), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_warning: Option<String>,
    /// KVM's instruction-emulation count per interrupt and per second of
    /// the window: ~1,000 per interrupt emulated, a few trapped
    /// instructions natively. It proves the execution mode.
    pub insn_emulation_per_interrupt: f64,
    pub insn_emulation_per_s: f64,
    /// Where the vCPU threads ran.
    pub placement: Placement,
    /// io-batch: disk commands completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<u64>,
    /// Set when the guest handled fewer interrupts than its device raised
    /// (whileloop): the path ran at its capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturated: Option<Saturation>,
    /// irq-latency: where its interrupts found the vCPU taking them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    /// What the VMM itself saw of the run: the evidence the guest's
    /// figures were checked against.
    #[serde(default)]
    pub evidence: Evidence,
    /// The figures that are the guest's claim (by their JSON names, with
    /// `latency_ns` for samples the guest timed and `guest_exec` for a
    /// mode KVM's counts could not confirm): held to the VMM's evidence on
    /// one side at most, so a false value within bounds would pass.
    #[serde(default)]
    pub guest_claims: Vec<String>,
    /// The guest's serial console.
    #[serde(skip)]
    pub console: String,
}

/// A guest that handled fewer than this share of the interrupts its device
/// raised was saturated: the rest merged into interrupts already pending.
pub const SATURATED_HANDLED_SHARE: f64 = 0.95;

/// A run whose device raised faster than its interrupt path delivered.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Saturation {
    pub raised_per_s: f64,
    pub handled_per_s: f64,
}

impl Saturation {
    /// Whether `handled_per_s` out of `raised_per_s` is saturation.
    pub fn of(raised_per_s: f64, handled_per_s: f64) -> Option<Self> {
        (handled_per_s < SATURATED_HANDLED_SHARE * raised_per_s).then_some(Saturation {
            raised_per_s,
            handled_per_s,
        })
    }
}

impl fmt::Display for Saturation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the device raised {:.0}/s and the guest handled {:.0}/s \
             ({:.0}%); the rest merged into interrupts already pending (a set IRR bit absorbs \
             the next edge)",
            self.raised_per_s,
            self.handled_per_s,
            100.0 * self.handled_per_s / self.raised_per_s
        )
    }
}

/// A latency run whose interrupts found their vCPU halted less often than
/// this measured something else than a halted vCPU's latency.
pub const HALTED_AS_ASKED: f64 = 0.9;

/// Where a latency run's interrupts found the vCPU that takes them, read
/// off KVM's counters: what its latency is to be set beside.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// What the guest was asked to do between interrupts.
    pub asked: GuestIdle,
    /// The share of handled interrupts that found the vCPU halted (its HLT
    /// exits per interrupt, at most 1); none where its HLT does not exit
    /// and so is not counted.
    pub halted_share: Option<f64>,
    /// The probe's floor for a vCPU in the asked state.
    pub floor: Floor,
}

impl Target {
    /// The target of an irq-latency run: vCPU 0, which takes the device's
    /// interrupts.
    fn of(config: &BenchConfig, interrupts: u64, exits: &ExitSummary) -> Option<Self> {
        if !matches!(config.params, BenchParams::IrqLatency(_)) || interrupts == 0 {
            return None;
        }
        let asked = config.common.guest_idle;
        let halts = exits
            .per_vcpu
            .first()
            .map_or(0, |vcpu| vcpu.kvm_stats.get(KvmStat::HaltExits));
        let counted = halts > 0 || config.common.halt != HaltMode::None;
        Some(Target {
            asked,
            halted_share: counted.then(|| per(halts, interrupts).min(1.0)),
            floor: match asked {
                GuestIdle::Busy => Floor::IpiBusy,
                GuestIdle::Halt => Floor::IpiHalted,
            },
        })
    }

    /// Whether the interrupts found the vCPU as the run asked; unknown
    /// (true) where its halts are not counted.
    pub fn as_asked(&self) -> bool {
        match self.asked {
            GuestIdle::Busy => true,
            GuestIdle::Halt => self
                .halted_share
                .is_none_or(|share| share >= HALTED_AS_ASKED),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.asked, self.halted_share) {
            (GuestIdle::Busy, _) => write!(
                f,
                "target vCPU busy between interrupts (spinning, interrupts on)"
            )?,
            (GuestIdle::Halt, Some(share)) => write!(
                f,
                "target vCPU halted between interrupts: {:.0}% of them woke it from a HLT exit",
                100.0 * share
            )?,
            (GuestIdle::Halt, None) => write!(
                f,
                "target vCPU halted between interrupts (its HLT does not exit: KVM counts none)"
            )?,
        }
        write!(
            f,
            "; set its latency beside `dirq probe`'s \"{}\"",
            self.floor.name()
        )
    }
}

fn per(value: u64, interrupts: u64) -> f64 {
    if interrupts == 0 {
        0.0
    } else {
        ratio(value, interrupts)
    }
}

impl RunReport {
    pub fn new(
        config: &BenchConfig,
        interrupts: u64,
        exits: ExitSummary,
        latency_ns: Option<LatencySummary>,
        duration_s: f64,
        results: BenchResult,
        machine: MachineFacts,
    ) -> Self {
        debug_assert_eq!(results.bench(), config.bench());
        let mut guest_claims: Vec<String> = results
            .claims(config)
            .into_iter()
            .map(String::from)
            .collect();
        // The samples the guest timed itself; irq-latency's are the VMM's.
        if latency_ns.is_some() && config.params.expected_samples() > 0 {
            guest_claims.push(LATENCY_NS.into());
        }
        if machine.exec.unconfirmed {
            guest_claims.push(GUEST_EXEC.into());
        }
        let insn_emulation = exits
            .by_reason
            .get(&KvmStat::InsnEmulation)
            .copied()
            .unwrap_or(0);
        let target = Target::of(config, interrupts, &exits);
        let saturated = match (&results, duration_s > 0.0) {
            (BenchResult::Whileloop(whileloop), true) => Saturation::of(
                f64_of(whileloop.raised) / duration_s,
                f64_of(interrupts) / duration_s,
            ),
            _ => None,
        };
        RunReport {
            config: config.clone(),
            interrupts,
            exits_per_interrupt: per(exits.total, interrupts),
            userspace_exits_per_interrupt: per(exits.userspace, interrupts),
            kernel_exits_per_interrupt: per(exits.kernel, interrupts),
            exits,
            latency_ns,
            duration_s,
            results,
            guest_exec: machine.exec.guest_exec,
            exec_warning: machine.exec.warning,
            insn_emulation_per_interrupt: per(insn_emulation, interrupts),
            insn_emulation_per_s: if duration_s > 0.0 {
                f64_of(insn_emulation) / duration_s
            } else {
                0.0
            },
            placement: machine.placement,
            commands: None,
            saturated,
            target,
            evidence: machine.evidence,
            guest_claims,
            console: machine.console,
        }
    }

    /// Whether `figure` (a JSON name) is the guest's claim.
    pub fn is_claim(&self, figure: &str) -> bool {
        self.guest_claims.iter().any(|claim| claim == figure)
    }

    pub fn bench(&self) -> Bench {
        self.results.bench()
    }

    /// " (the guest's claim)" after a figure that is one, else nothing.
    fn mark(&self, figure: &str) -> String {
        if self.is_claim(figure) {
            format!(" {CLAIM_MARK}")
        } else {
            String::new()
        }
    }

    /// The flags that chose the path, in `dirq run` syntax.
    pub fn path(&self) -> String {
        let c = &self.config.common;
        format!(
            "--irqchip {} --inject {} --apic {} --halt {} --guest-idle {}{}",
            c.irqchip,
            c.inject,
            c.apic,
            c.halt,
            c.guest_idle,
            if c.pv_eoi { " --pv-eoi" } else { "" }
        )
    }
}

/// Why the exit tables have no times: said under each table.
const KERNEL_TIME_NOTE: &str = "Time%, Min, Max, Avg time: not measured. KVM's kvm_exit/kvm_entry \
tracepoints would time these exits; on kvm_pvm they record no VM-EXIT samples.";
const USERSPACE_TIME_NOTE: &str = "Time: from KVM_RUN's return to the next KVM_RUN (the VMM's part \
of each exit; KVM's own part is not timed). A kick that finds the vCPU outside the guest is timed, not counted.";

/// A table in the text style every dirq command prints.
pub fn text_table(header: &[&str]) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::UTF8_HORIZONTAL_ONLY)
        .remove_style(comfy_table::TableComponent::HorizontalLines)
        .remove_style(comfy_table::TableComponent::MiddleIntersections)
        .remove_style(comfy_table::TableComponent::LeftBorderIntersections)
        .remove_style(comfy_table::TableComponent::RightBorderIntersections)
        .remove_style(comfy_table::TableComponent::MiddleHeaderIntersections)
        .set_header(header.iter().copied());
    for index in 1..header.len() {
        if let Some(column) = table.column_mut(index) {
            column.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    table
}

/// The columns of `perf kvm stat report`, as it names them.
pub const PERF_KVM_STAT_COLUMNS: [&str; 7] = [
    "VM-EXIT", "Samples", "Samples%", "Time%", "Min Time", "Max Time", "Avg time",
];

/// `perf kvm stat report`'s table: one row per exit reason, largest first,
/// with its times where `times` has them.
fn exit_table(
    rows: &BTreeMap<VmxExit, u64>,
    times: &BTreeMap<VmxExit, ExitTime>,
    interrupts: u64,
) -> comfy_table::Table {
    let mut header = PERF_KVM_STAT_COLUMNS.to_vec();
    header.push("per interrupt");
    let mut table = text_table(&header);
    let total: u64 = rows.values().sum();
    let total_ns: u64 = times.values().map(|time| time.total_ns).sum();
    let us = |ns: u64| format!("{:.2}us", f64_of(ns) / 1e3);
    let mut sorted: Vec<_> = rows.iter().filter(|(_, count)| **count > 0).collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.name().cmp(b.0.name())));
    for (reason, count) in sorted {
        let timed = times.get(reason).map(|time| {
            [
                format!("{:.2}%", 100.0 * per(time.total_ns, total_ns)),
                us(time.min_ns),
                us(time.max_ns),
                us(time.total_ns / time.samples.max(1)),
            ]
        });
        let [time_share, min, max, avg] =
            timed.unwrap_or_else(|| ["-".into(), "-".into(), "-".into(), "-".into()]);
        table.add_row(vec![
            reason.to_string(),
            count.to_string(),
            format!("{:.2}%", 100.0 * per(*count, total)),
            time_share,
            min,
            max,
            avg,
            format!("{:.3}", per(*count, interrupts)),
        ]);
    }
    table
}

impl RunReport {
    /// Userspace exits by VMX reason (several `KVM_EXIT_*` reasons may
    /// share one), kicks that arrived before guest entry left out.
    fn userspace_exits_by_vmx_reason(&self) -> BTreeMap<VmxExit, u64> {
        let mut rows = BTreeMap::new();
        for &reason in UserspaceExit::ALL {
            let count = self
                .exits
                .userspace_by_reason
                .get(&reason)
                .copied()
                .unwrap_or(0);
            *rows.entry(VmxExit::from(reason)).or_insert(0) += count;
        }
        // Kicks that found the vCPU outside the guest made no exit.
        let kicks = VmxExit::from(UserspaceExit::Interrupted);
        let counted: u64 = rows.values().sum();
        if let Some(value) = rows.get_mut(&kicks) {
            *value = value.saturating_sub(counted.saturating_sub(self.exits.userspace));
        }
        rows
    }

    /// The VMM's time on userspace exits by VMX reason, as the rows of
    /// `userspace_exits_by_vmx_reason` group them.
    fn userspace_time_by_vmx_reason(&self) -> BTreeMap<VmxExit, ExitTime> {
        let mut times: BTreeMap<VmxExit, ExitTime> = BTreeMap::new();
        for (&reason, time) in &self.exits.userspace_time {
            let slot = times.entry(VmxExit::from(reason)).or_default();
            *slot = slot.merge(*time);
        }
        times
    }

    /// KVM's statistics that count no exit: emulations, injections, wake-ups.
    fn other_kvm_stats(&self) -> BTreeMap<&str, u64> {
        let mut stats = BTreeMap::new();
        for vcpu in &self.exits.per_vcpu {
            let read = vcpu
                .kvm_stats
                .read
                .iter()
                .filter(|(stat, _)| **stat != KvmStat::Exits && stat.exit().is_none())
                .map(|(stat, value)| (stat.name(), value));
            let unread = vcpu.kvm_stats.unread.iter();
            for (name, value) in read.chain(unread.map(|(name, value)| (name.as_str(), value))) {
                *stats.entry(name).or_insert(0) += value;
            }
        }
        stats
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}  {}", self.bench(), self.path())?;
        writeln!(
            f,
            "guest {}{}: insn_emulation {:.1} per interrupt, {:.0} per s",
            self.guest_exec,
            self.mark(GUEST_EXEC),
            self.insn_emulation_per_interrupt,
            self.insn_emulation_per_s
        )?;
        if let Some(warning) = &self.exec_warning {
            writeln!(f, "WARNING: {warning}")?;
        }
        if let Some(note) = self.placement.note(self.config.common.vcpus) {
            writeln!(f, "NOTE: {note}")?;
        }
        writeln!(
            f,
            "interrupts {}  duration {:.3} s  exits {} (userspace {}, kernel {})  exits/interrupt {:.2} (userspace {:.2}, kernel {:.2})",
            self.interrupts,
            self.duration_s,
            self.exits.total,
            self.exits.userspace,
            self.exits.kernel,
            self.exits_per_interrupt,
            self.userspace_exits_per_interrupt,
            self.kernel_exits_per_interrupt,
        )?;
        if let Some(saturated) = &self.saturated {
            writeln!(f, "SATURATED (the path ran at its capacity): {saturated}")?;
        }
        if let Some(target) = &self.target {
            writeln!(f, "{target}")?;
            if !target.as_asked() {
                writeln!(
                    f,
                    "WARNING: asked for a halted target, most interrupts found it running \
                     (fewer HLT exits than interrupts): this is no halted vCPU's latency"
                )?;
            }
        }
        writeln!(f)?;
        writeln!(
            f,
            "Analyze events for all VMs, all VCPUs: every VM exit KVM counted, by VMX reason"
        )?;
        writeln!(
            f,
            "{}",
            exit_table(&self.exits.by_category, &BTreeMap::new(), self.interrupts)
        )?;
        writeln!(f, "{KERNEL_TIME_NOTE}")?;
        writeln!(f)?;
        writeln!(
            f,
            "The exits that returned to the VMM (userspace), by VMX reason"
        )?;
        writeln!(
            f,
            "{}",
            exit_table(
                &self.userspace_exits_by_vmx_reason(),
                &self.userspace_time_by_vmx_reason(),
                self.interrupts
            )
        )?;
        writeln!(f, "{USERSPACE_TIME_NOTE}")?;
        let other = self.other_kvm_stats();
        if !other.is_empty() {
            writeln!(f)?;
            writeln!(f, "Other KVM statistics (events, not exits)")?;
            let mut table = text_table(&["statistic", "count", "per interrupt"]);
            for (name, count) in &other {
                table.add_row(vec![
                    name.to_string(),
                    count.to_string(),
                    format!("{:.3}", per(*count, self.interrupts)),
                ]);
            }
            writeln!(f, "{table}")?;
        }
        writeln!(f)?;
        for vcpu in &self.exits.per_vcpu {
            write!(
                f,
                "vCPU {}: exits {} (userspace {}, kernel {}), CPU {:.3} s, waited for a host CPU {:.3} s",
                vcpu.cpu, vcpu.total, vcpu.userspace, vcpu.kernel, vcpu.cpu_s, vcpu.waited_s
            )?;
            if vcpu.kicks > 0 {
                write!(
                    f,
                    ", kicks {} ({:.2} per interrupt)",
                    vcpu.kicks,
                    per(vcpu.kicks, self.interrupts)
                )?;
            }
            writeln!(f)?;
        }
        if let Some(latency) = &self.latency_ns {
            writeln!(
                f,
                "latency (us){}: samples {}  min {:.2}  avg {:.2}  p50 {:.2}  p99 {:.2}  max {:.2}",
                self.mark(LATENCY_NS),
                latency.samples,
                f64_of(latency.min) / 1e3,
                latency.mean / 1e3,
                f64_of(latency.p50) / 1e3,
                f64_of(latency.p99) / 1e3,
                f64_of(latency.max) / 1e3,
            )?;
        }
        for (name, value) in &self.results.figures() {
            writeln!(f, "{name}: {value:.4}{}", self.mark(name))?;
        }
        if !self.guest_claims.is_empty() {
            writeln!(
                f,
                "{CLAIM_MARK}: measured by the guest alone and held to the VMM's evidence on one side at most (docs/hostile.md)"
            )?;
        }
        Ok(())
    }
}

/// The error and its causes on one line, as `dirq` prints it.
pub fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::params::IrqLatencyParams;

    fn exits(halts: u64) -> ExitSummary {
        serde_json::from_value(serde_json::json!({
            "total": 4 * halts, "userspace": 0, "kernel": 4 * halts,
            "by_reason": {}, "by_category": {}, "userspace_by_reason": {},
            "vcpu_cpu_s": 0.1,
            "per_vcpu": [{"cpu": 0, "total": 4 * halts, "userspace": 0, "kernel": 4 * halts,
                          "userspace_by_reason": {}, "kvm_stats": {"halt_exits": halts},
                          "cpu_s": 0.1}]
        }))
        .expect("an exit summary")
    }

    #[test]
    fn a_latency_run_says_how_often_it_found_its_target_as_asked() {
        let mut config = BenchConfig::from(BenchParams::IrqLatency(IrqLatencyParams::default()));
        config.common.guest_idle = GuestIdle::Halt;
        let halted = Target::of(&config, 100, &exits(98)).expect("irq-latency has a target");
        assert_eq!(halted.floor, Floor::IpiHalted);
        assert_eq!(halted.halted_share, Some(0.98));
        assert!(halted.as_asked());
        assert!(
            halted.to_string().contains("98% of them woke it"),
            "{halted}"
        );
        let running = Target::of(&config, 100, &exits(2)).expect("irq-latency has a target");
        assert!(!running.as_asked(), "2 halts for 100 interrupts");
        config.common.guest_idle = GuestIdle::Busy;
        let busy = Target::of(&config, 100, &exits(0)).expect("irq-latency has a target");
        assert_eq!(busy.floor, Floor::IpiBusy);
        assert!(busy.as_asked());
        let whileloop = BenchConfig::from(BenchParams::Whileloop(Default::default()));
        assert_eq!(Target::of(&whileloop, 100, &exits(0)), None);
    }

    #[test]
    fn a_run_that_handled_under_95_percent_of_its_raises_is_saturated() {
        assert_eq!(Saturation::of(1_000.0, 990.0), None);
        let saturated = Saturation::of(40_000.0, 6_000.0).expect("saturated");
        assert!(saturated.to_string().contains("(15%)"), "{saturated}");
    }
}
