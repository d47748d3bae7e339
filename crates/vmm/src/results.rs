//! What each bench measured beyond exits and latency: one type per bench,
//! so that a reader names a field the compiler checks instead of looking a
//! string up in a map. In `dirq run --json` the bench's name stays under
//! `bench` and its figures under `results`, as one object of named numbers.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use dirq_stats::{f64_of, ratio};

use crate::bench::cycles_to_ns;
use crate::config::{Bench, BenchConfig, BenchParams, VioapicLevel};

/// Defines `BenchResult`, one variant per bench that reports, named as
/// `Bench`'s variant, the bench of each, and a reader per bench
/// (`results.tick()`) that gives its figures or says whose they are.
macro_rules! bench_results {
    ($($reader:ident: $bench:ident($result:ty)),+ $(,)?) => {
        /// A bench's own figures, tagged by the bench: serialized as
        /// `"bench": <name>, "results": {<figure>: <number>, ...}`.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "bench", content = "results", rename_all = "kebab-case")]
        pub enum BenchResult {
            $($bench($result)),+
        }

        impl BenchResult {
            pub fn bench(&self) -> Bench {
                match self {
                    $(BenchResult::$bench(_) => Bench::$bench),+
                }
            }

            /// The figures of a run of `bench` that measured nothing (every
            /// figure zero or absent); none for a bench without figures.
            pub fn measured_nothing(bench: Bench) -> Option<BenchResult> {
                match bench {
                    $(Bench::$bench => Some(BenchResult::$bench(<$result>::default())),)+
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }

            $(
                #[doc = concat!("The ", stringify!($bench), " bench's figures, or whose these are.")]
                pub fn $reader(&self) -> Result<&$result, ResultMismatch> {
                    match self {
                        BenchResult::$bench(figures) => Ok(figures),
                        #[allow(unreachable_patterns)]
                        other => Err(other.mismatch(Bench::$bench)),
                    }
                }
            )+
        }
    };
}

bench_results!(
    irq_latency: IrqLatency(PvEoiCount),
    timer_latency: TimerLatency(PvEoiCount),
    ipi: Ipi(IpiResult),
    whileloop: Whileloop(WhileloopResult),
    exit_cost: ExitCost(ExitCostResult),
    vioapic: Vioapic(VioapicResult),
    io_batch: IoBatch(IoBatchResult),
    tick: Tick(TickResult),
    halt_wakeup: HaltWakeup(PvEoiCount),
    hostile: Hostile(NoFigures),
);

/// A run's results were not those of the bench its reader expected.
#[derive(Debug, thiserror::Error)]
#[error("expected {expected} results, got {got}'s")]
pub struct ResultMismatch {
    pub expected: Bench,
    pub got: Bench,
}

impl BenchResult {
    /// EOIs the guest skipped because KVM's PV EOI flag said none was
    /// needed, for the benches whose guest counts them.
    pub fn pv_eoi_skips(&self) -> Option<u64> {
        match self {
            BenchResult::IrqLatency(counts)
            | BenchResult::TimerLatency(counts)
            | BenchResult::HaltWakeup(counts) => Some(counts.pv_eoi_skips),
            BenchResult::Ipi(ipi) => Some(ipi.pv_eoi_skips),
            BenchResult::ExitCost(cost) => Some(cost.pv_eoi_skips),
            _ => None,
        }
    }

    /// The share of the CPU the guest's compute loop kept, for the benches
    /// that run one (whileloop under the device, tick under the PIT).
    pub fn guest_share(&self) -> Option<f64> {
        match self {
            BenchResult::Whileloop(whileloop) => Some(whileloop.guest_share),
            BenchResult::Tick(tick) => Some(tick.guest_share),
            _ => None,
        }
    }

    /// The figures by the names `dirq run --json` gives them, as numbers.
    pub fn figures(&self) -> BTreeMap<String, f64> {
        let figures = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut object)) => object.remove("results"),
            _ => None,
        };
        let Some(serde_json::Value::Object(figures)) = figures else {
            return BTreeMap::new();
        };
        figures
            .into_iter()
            .filter_map(|(name, value)| Some((name, value.as_f64()?)))
            .collect()
    }

    /// The error a reader gives when these are not `expected`'s results.
    fn mismatch(&self, expected: Bench) -> ResultMismatch {
        ResultMismatch {
            expected,
            got: self.bench(),
        }
    }
}

/// What the VMM itself saw of a run, beside what the guest wrote: every
/// figure the guest reports is held to it (docs/hostile.md lists each
/// figure with its evidence and bounds). `dirq run --json` prints it as
/// `evidence`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Host time from the guest's START to its END, by the VMM's clock.
    pub window_ns: u64,
    /// The guest TSC's rate, as the host set it (KVM_GET_TSC_KHZ): what
    /// turns the guest's cycles into time.
    pub tsc_khz: u64,
    /// KVM's `irq_injections` of each vCPU over the whole run: no handler
    /// runs without one. `None` where APICv or AVIC deliver interrupts
    /// without an injection KVM counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected: Option<Vec<u64>>,
    /// Port accesses that exited to the VMM in the window (END's aside).
    pub port_exits: u64,
    /// The least time the VMM spent on one of them (from KVM_RUN's return
    /// to the next KVM_RUN): part of every such exit the guest times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_exit_vmm_min_ns: Option<u64>,
    /// Exits KVM handled without the VMM in the window.
    pub kernel_exits: u64,
    /// tick: what the VMM's PIT did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pit: Option<PitEvidence>,
}

/// The tick bench's PIT, as the VMM ran it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PitEvidence {
    /// IRQ0 edges the VMM's timer thread raised over the run.
    pub irqs: u64,
    /// Of them, those raised while the window was open.
    pub irqs_in_window: u64,
    /// Channel 0's rate as last programmed (scaled), in Hz.
    pub hz: f64,
}

/// How far a duration the guest timed with its TSC may exceed the window
/// the VMM timed with the host's clock: under kvm_pvm's emulator the
/// guest's TSC was measured 3% fast against host time. A forged figure is
/// off by orders of magnitude, not by this.
pub const GUEST_CLOCK_SLACK: f64 = 2.0;

/// The fewest TSC cycles between the two reads that time any event: the
/// RDTSC instruction alone takes longer (18 cycles and more on every x86
/// core in Agner Fog's instruction tables), so a shorter time was not
/// measured. The platform's resolution, whatever the host's speed.
pub const MIN_TIMED_CYCLES: u64 = 16;

/// How far above 1 a share of the CPU may read from timing noise alone:
/// the baseline keeps only undisturbed chunks, yet a short or emulated
/// loop on a loaded host reads well above it (measured: 2.7 for a 5 ms
/// emulated whileloop at load 9). Ten times faster than alone is not
/// noise; below that the share is the guest's claim.
pub const SHARE_NOISE: f64 = 9.0;

/// Why a guest-timed duration of `ns` cannot have fit a `window_ns` window, if it cannot.
pub fn beyond_window(ns: f64, window_ns: f64) -> Option<String> {
    (ns > window_ns * GUEST_CLOCK_SLACK).then(|| {
        format!(
            "longer than the whole measured window ({window_ns:.0} ns from START to END, timed by the VMM; the guest's clock may run up to {GUEST_CLOCK_SLACK}x)"
        )
    })
}

/// Why `cycles` is too short to have been measured, if it is.
pub fn below_resolution(cycles: u64) -> Option<String> {
    (cycles < MIN_TIMED_CYCLES).then(|| {
        format!(
            "shorter than the platform's resolution ({MIN_TIMED_CYCLES} TSC cycles: reading the TSC alone takes longer)"
        )
    })
}

/// A figure the guest reported that cannot be true, and the rule it breaks.
#[derive(Debug, thiserror::Error)]
#[error("{bench}: the guest reported {figure} = {value}, which is impossible: {rule}")]
pub struct Implausible {
    pub bench: Bench,
    pub figure: &'static str,
    pub value: String,
    pub rule: String,
}

/// What one run's figures are held to: the VMM's evidence and the run's
/// configuration.
pub struct Observed<'a> {
    pub evidence: &'a Evidence,
    pub config: &'a BenchConfig,
    /// The interrupts the guest says it handled, all vCPUs (itself held
    /// to `evidence.injected`).
    pub interrupts: u64,
}

/// Checks one bench's figures against what the VMM observed.
struct Rules<'a> {
    bench: Bench,
    observed: &'a Observed<'a>,
}

impl Rules<'_> {
    fn refuse(&self, figure: &'static str, value: impl fmt::Display, rule: String) -> Implausible {
        Implausible {
            bench: self.bench,
            figure,
            value: value.to_string(),
            rule,
        }
    }

    fn window_ns(&self) -> f64 {
        f64_of(self.observed.evidence.window_ns)
    }

    /// The platform's resolution in ns at the guest TSC's rate, rounded
    /// down as the guest's cycles are.
    fn resolution_ns(&self) -> f64 {
        f64_of(cycles_to_ns(
            MIN_TIMED_CYCLES,
            self.observed.evidence.tsc_khz,
        ))
    }

    /// A count of what the bench exists to measure: zero measured nothing.
    fn measured(&self, figure: &'static str, value: u64) -> Result<(), Implausible> {
        if value == 0 {
            return Err(self.refuse(figure, value, "the run measured nothing".into()));
        }
        Ok(())
    }

    /// A rate or ratio: a number, not infinite or NaN after arithmetic.
    fn finite(&self, figure: &'static str, value: f64) -> Result<(), Implausible> {
        if !value.is_finite() {
            return Err(self.refuse(figure, value, "not a finite number".into()));
        }
        Ok(())
    }

    /// A rate or share of something that happened: finite and above zero.
    fn positive(&self, figure: &'static str, value: f64) -> Result<(), Implausible> {
        self.finite(figure, value)?;
        if value <= 0.0 {
            return Err(self.refuse(figure, value, "the run measured nothing".into()));
        }
        Ok(())
    }

    /// `value` is at most `bound`, which `evidence` says.
    fn at_most(
        &self,
        figure: &'static str,
        value: f64,
        bound: f64,
        evidence: impl FnOnce() -> String,
    ) -> Result<(), Implausible> {
        self.finite(figure, value)?;
        if value > bound {
            return Err(self.refuse(figure, value, evidence()));
        }
        Ok(())
    }

    /// `value` is at least `bound`, which `evidence` says.
    fn at_least(
        &self,
        figure: &'static str,
        value: f64,
        bound: f64,
        evidence: impl FnOnce() -> String,
    ) -> Result<(), Implausible> {
        self.finite(figure, value)?;
        if value < bound {
            return Err(self.refuse(figure, value, evidence()));
        }
        Ok(())
    }

    /// A duration timed inside the window: no longer than the window.
    fn within_window(&self, figure: &'static str, ns: f64) -> Result<(), Implausible> {
        self.finite(figure, ns)?;
        match beyond_window(ns, self.window_ns()) {
            Some(rule) => Err(self.refuse(figure, ns, rule)),
            None => Ok(()),
        }
    }

    /// One event the guest timed: no shorter than the platform's
    /// resolution, no longer than the window.
    fn timed(&self, figure: &'static str, ns: f64) -> Result<(), Implausible> {
        self.within_window(figure, ns)?;
        let resolution = self.resolution_ns();
        self.at_least(figure, ns, resolution, || {
            format!(
                "shorter than the platform's resolution ({MIN_TIMED_CYCLES} TSC cycles, {resolution:.0} ns at the {} kHz the host gave the guest's TSC)",
                self.observed.evidence.tsc_khz
            )
        })
    }

    /// `events` events of `ns` each, all inside the window: together no
    /// longer than it (per event, no more than the window over the events).
    fn each_of(
        &self,
        figure: &'static str,
        ns: f64,
        events: u64,
        what: &str,
    ) -> Result<(), Implausible> {
        let window = self.window_ns();
        let bound = window * GUEST_CLOCK_SLACK / f64_of(events.max(1));
        self.at_most(figure, ns, bound, || {
            format!(
                "{events} {what} of {ns:.0} ns each take {:.0} ns, longer than the whole measured window ({window:.0} ns from START to END, timed by the VMM; the guest's clock may run up to {GUEST_CLOCK_SLACK}x)",
                ns * f64_of(events)
            )
        })
    }

    /// A rate of `events` over a span the guest timed that is most of the
    /// window (its loop is all the window holds): within the clock's slack
    /// of `events` over the window the VMM timed.
    fn rate_over_window(
        &self,
        figure: &'static str,
        per_s: f64,
        events: u64,
        what: &str,
    ) -> Result<(), Implausible> {
        let window_s = self.window_ns() / 1e9;
        let vmm_rate = f64_of(events) / window_s;
        let rule = |side: &str| {
            format!(
                "{events} {what} in the {window_s:.3} s the VMM timed from START to END are {vmm_rate:.0}/s; the guest's rate may be {side} by at most {GUEST_CLOCK_SLACK}x"
            )
        };
        self.at_most(figure, per_s, vmm_rate * GUEST_CLOCK_SLACK, || {
            rule("higher")
        })?;
        self.at_least(figure, per_s, vmm_rate / GUEST_CLOCK_SLACK, || {
            rule("lower")
        })
    }

    /// A share of the CPU: above 0, at most 1 but for timing noise.
    fn share(&self, figure: &'static str, share: f64) -> Result<(), Implausible> {
        self.positive(figure, share)?;
        self.at_most(figure, share, 1.0 + SHARE_NOISE, || {
            format!(
                "a share of the CPU is at most 1 (with {SHARE_NOISE} for the loop's timing noise)"
            )
        })
    }

    /// Interrupts KVM injected into `cpu` over the run, where it counts them all.
    fn injected(&self, cpu: usize) -> Option<u64> {
        let injected = self.observed.evidence.injected.as_ref()?;
        Some(injected.get(cpu).copied().unwrap_or(0))
    }

    /// A count of interrupts `cpu` handled: no more than KVM injected.
    fn handled_by(
        &self,
        figure: &'static str,
        cpu: usize,
        handled: u64,
    ) -> Result<(), Implausible> {
        let Some(injected) = self.injected(cpu) else {
            return Ok(());
        };
        self.at_most(figure, f64_of(handled), f64_of(injected), || {
            format!("KVM injected {injected} interrupts into vCPU {cpu} over the whole run, and no handler runs without one")
        })
    }

    /// EOIs skipped on PV EOI's word: at most one per interrupt handled.
    fn pv_eoi_skips(&self, skips: u64) -> Result<(), Implausible> {
        let handled = self.observed.interrupts;
        self.at_most("pv_eoi_skips", f64_of(skips), f64_of(handled), || {
            format!("an EOI is skipped for an interrupt handled, and the guest handled {handled}")
        })
    }
}

/// The vioapic bench's parameters, for its checks.
fn vioapic_params<'a>(rules: &'a Rules) -> Option<&'a crate::config::params::VioapicParams> {
    match &rules.observed.config.params {
        BenchParams::Vioapic(params) => Some(params),
        _ => None,
    }
}

/// Whether every register access of the guest's sequence exits to the
/// VMM's controller, one sequence per event: the userspace level outside
/// the race test (ro-page posts its MASK write, pv keeps it in memory, the
/// kernel's IOAPIC never reaches the VMM, the race test adds toggles).
fn every_access_trapped(params: &crate::config::params::VioapicParams) -> bool {
    params.vioapic == VioapicLevel::Userspace && !params.vioapic_race
}

/// The run's count of events (`--count`), for the benches that take one.
fn count_of(config: &BenchConfig) -> u64 {
    let mut asked = crate::abi::SharedPage::default();
    config.params.boot(&mut asked);
    asked.count
}

impl BenchResult {
    /// Refuses a figure that the VMM's own observations make impossible, or
    /// that says the run measured nothing.
    pub fn check(&self, observed: &Observed) -> Result<(), Implausible> {
        let rules = Rules {
            bench: self.bench(),
            observed,
        };
        // Every handler ran for an interrupt KVM injected.
        if let Some(injected) = &observed.evidence.injected {
            let injected = injected
                .iter()
                .fold(0u64, |sum, &count| sum.saturating_add(count));
            rules.at_most("interrupts", f64_of(observed.interrupts), f64_of(injected), || {
                format!("KVM injected {injected} interrupts into the vCPUs over the whole run, and no handler runs without one")
            })?;
        }
        match self {
            BenchResult::Ipi(ipi) => ipi.check(&rules),
            BenchResult::Whileloop(whileloop) => whileloop.check(&rules),
            BenchResult::ExitCost(cost) => cost.check(&rules),
            BenchResult::Vioapic(vioapic) => vioapic.check(&rules),
            BenchResult::IoBatch(io_batch) => io_batch.check(&rules),
            BenchResult::Tick(tick) => tick.check(&rules),
            BenchResult::IrqLatency(counts)
            | BenchResult::TimerLatency(counts)
            | BenchResult::HaltWakeup(counts) => rules.pv_eoi_skips(counts.pv_eoi_skips),
            BenchResult::Hostile(_) => Ok(()),
        }
    }

    /// The figures that are the guest's claim: measured by the guest alone,
    /// and bounded by the VMM's evidence on one side at most, so that a
    /// false value inside the bounds cannot be told from a true one. In
    /// `dirq run --json` they are listed under `guest_claims`.
    pub fn claims(&self, config: &BenchConfig) -> Vec<&'static str> {
        match self {
            BenchResult::IrqLatency(_)
            | BenchResult::TimerLatency(_)
            | BenchResult::HaltWakeup(_) => {
                vec!["pv_eoi_skips"]
            }
            BenchResult::Ipi(ipi) => {
                let mut claims = vec!["pv_eoi_skips"];
                if ipi.send_p50_ns.is_some() {
                    claims.push("send_p50_ns");
                }
                if ipi.target_gap_p50_ns.is_some() {
                    claims.extend(["target_gap_p50_ns", "target_gaps"]);
                }
                claims
            }
            BenchResult::Whileloop(whileloop) => {
                let mut claims = vec![
                    "iterations",
                    "loaded_iterations",
                    "baseline_ns",
                    "guest_share",
                ];
                if whileloop.lost_per_interrupt_ns.is_some() {
                    claims.push("lost_per_interrupt_ns");
                }
                claims
            }
            BenchResult::ExitCost(_) => {
                vec!["kernel_exit_ns", "kernel_exit_p50_ns", "pv_eoi_skips"]
            }
            BenchResult::Vioapic(_) => {
                let BenchParams::Vioapic(params) = &config.params else {
                    return Vec::new();
                };
                let mut claims = vec!["spurious"];
                if !every_access_trapped(params) {
                    claims.extend([
                        "register_reads_per_interrupt",
                        "register_writes_per_interrupt",
                    ]);
                }
                if params.vioapic_race {
                    claims.push("mask_toggles");
                }
                claims
            }
            // A tick the guest was slow to take merges into the next (a
            // loaded host took a fifth of the PIT's edges): no lower bound.
            BenchResult::Tick(_) => {
                vec!["timer_interrupts", "timer_interrupts_per_s", "guest_share"]
            }
            BenchResult::IoBatch(_) | BenchResult::Hostile(_) => Vec::new(),
        }
    }
}

/// A bench with no figures of its own (hostile: the verdict is the run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NoFigures {}

/// irq-latency, timer-latency, halt-wakeup: the guest measures latency
/// itself and counts only its skipped EOIs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PvEoiCount {
    pub pv_eoi_skips: u64,
}

/// ipi: the IPIs each vCPU handled, and the sender's and a busy target's
/// costs where the guest measured them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IpiResult {
    /// vCPU 0: pongs; any other: pings.
    #[serde(flatten)]
    pub handled: IpisByVcpu,
    /// How long the sender's ICR write (or hypercall) took, median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_p50_ns: Option<u64>,
    /// With a busy unicast target: what a ping takes from the target's
    /// spin loop (its exit, injection, handler with the pong and EOI, and
    /// return), the median gap in the target's own TSC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_gap_p50_ns: Option<u64>,
    /// The gaps behind `target_gap_p50_ns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_gaps: Option<u64>,
    pub pv_eoi_skips: u64,
}

/// The IPIs vCPU `i` handled at index `i`; in JSON one figure per vCPU,
/// named by [`ipis_to_vcpu`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IpisByVcpu(pub Vec<u64>);

impl IpisByVcpu {
    /// The IPIs vCPU `cpu` handled; none for a vCPU the run did not have.
    pub fn to_vcpu(&self, cpu: usize) -> Option<u64> {
        self.0.get(cpu).copied()
    }
}

/// The figure naming the IPIs vCPU `cpu` handled.
fn ipis_to_vcpu(cpu: usize) -> String {
    format!("{IPIS_TO_VCPU}{cpu}")
}

const IPIS_TO_VCPU: &str = "ipis_to_vcpu";

impl Serialize for IpisByVcpu {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (cpu, handled) in self.0.iter().enumerate() {
            map.serialize_entry(&ipis_to_vcpu(cpu), handled)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for IpisByVcpu {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ByName;
        impl<'de> Visitor<'de> for ByName {
            type Value = IpisByVcpu;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "{IPIS_TO_VCPU}<cpu> figures")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IpisByVcpu, A::Error> {
                let mut handled = BTreeMap::new();
                while let Some(name) = map.next_key::<String>()? {
                    match name
                        .strip_prefix(IPIS_TO_VCPU)
                        .and_then(|cpu| cpu.parse::<usize>().ok())
                    {
                        Some(cpu) => {
                            handled.insert(cpu, map.next_value::<u64>()?);
                        }
                        None => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                let cpus = handled.keys().next_back().map_or(0, |last| last + 1);
                let mut by_vcpu = vec![0; cpus];
                for (cpu, count) in handled {
                    by_vcpu[cpu] = count;
                }
                Ok(IpisByVcpu(by_vcpu))
            }
        }
        deserializer.deserialize_map(ByName)
    }
}

/// exit-cost: one exit to the VMM (port I/O) and one handled inside KVM
/// (RDMSR), mean and median.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitCostResult {
    pub userspace_exit_ns: f64,
    pub kernel_exit_ns: f64,
    pub userspace_exit_p50_ns: u64,
    pub kernel_exit_p50_ns: u64,
    pub pv_eoi_skips: u64,
}

/// whileloop: the compute loop alone and under the device's interrupts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WhileloopResult {
    /// The interrupts the device thread raised (the guest may handle
    /// fewer: the rest merged into pending ones).
    pub raised: u64,
    pub iterations: u64,
    /// Below `iterations` when the guest gave up at its slowdown cap.
    pub loaded_iterations: u64,
    pub baseline_ns: u64,
    pub loaded_ns: u64,
    /// The share of the CPU the loop kept under the load.
    pub guest_share: f64,
    /// What each handled interrupt took from the loaded loop (ns), timed
    /// by the guest chunk by chunk: every chunk during which the handler
    /// ran adds what it took beyond an undisturbed chunk. Unlike the share,
    /// well conditioned at any rate (at low rates the share's loss is a
    /// small difference of two long runs). None when no chunk saw one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_per_interrupt_ns: Option<f64>,
}

/// tick: the compute loop under the PIT tick, and what the guest read back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TickResult {
    pub timer_interrupts: u64,
    pub timer_interrupts_per_s: f64,
    pub exits_per_s: f64,
    pub guest_share: f64,
    /// The reload count the guest programmed.
    pub guest_reload: u64,
    /// The largest count the guest read back: never beyond its reload.
    pub max_count_read: u64,
    /// The reload the VMM's PIT ran: the guest's, times the scale.
    pub effective_reload: u64,
}

/// io-batch: disk commands, one exit per port write or one per doorbell.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IoBatchResult {
    pub commands_per_s: f64,
    pub exits_per_command: f64,
    pub userspace_exits_per_command: f64,
    /// A digest of the disk's registers after the last command: equal
    /// digests, equal disk state, batched or not.
    pub device_digest: u32,
}

/// vioapic: level-triggered device events serviced through the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VioapicResult {
    /// Device events serviced (spurious interrupts do no work).
    pub events: u64,
    pub interrupts_per_s: f64,
    pub host_cycles_per_interrupt: f64,
    /// What the guest's sequence does per interrupt; `trapped_*` is what
    /// exited to the VMM's controller (0 at the kernel level).
    pub register_reads_per_interrupt: u64,
    pub register_writes_per_interrupt: u64,
    pub trapped_reads: u64,
    pub trapped_writes: u64,
    pub spurious: u64,
    pub mask_toggles: u64,
}

impl IpiResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        for (cpu, &handled) in self.handled.0.iter().enumerate() {
            rules.handled_by("ipis_to_vcpu", cpu, handled)?;
        }
        if let Some(ns) = self.send_p50_ns {
            rules.timed("send_p50_ns", f64_of(ns))?;
        }
        if let Some(ns) = self.target_gap_p50_ns {
            rules.timed("target_gap_p50_ns", f64_of(ns))?;
        }
        if let Some(gaps) = self.target_gaps {
            // A gap is timed around a ping the target handled.
            let pinged: u64 = self.handled.0.iter().skip(1).sum();
            rules.at_most("target_gaps", f64_of(gaps), f64_of(pinged), || {
                format!("a gap is timed around a ping, and the targets handled {pinged}")
            })?;
        }
        rules.pv_eoi_skips(self.pv_eoi_skips)
    }
}

impl WhileloopResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        // The headline first: a share of the CPU cannot pass 1.
        rules.share("guest_share", self.guest_share)?;
        rules.measured("iterations", self.iterations)?;
        rules.measured("loaded_iterations", self.loaded_iterations)?;
        let iterations = self.iterations;
        rules.at_most(
            "loaded_iterations",
            f64_of(self.loaded_iterations),
            f64_of(iterations),
            || format!("the loaded loop stops at the baseline's {iterations} iterations"),
        )?;
        rules.timed("loaded_ns", f64_of(self.loaded_ns))?;
        // The baseline loop stops on its clock's check, which a slow
        // (emulated, loaded) guest makes late: no tighter than the window.
        rules.timed("baseline_ns", f64_of(self.baseline_ns))?;
        // The device raised every interrupt the guest can have handled.
        let raised = self.raised;
        let handled = rules.observed.interrupts;
        rules.at_most("interrupts", f64_of(handled), f64_of(raised), || {
            format!("the VMM's device raised {raised} interrupts")
        })?;
        // A mean of what chunks took beyond an undisturbed one, not one
        // timed event: it may honestly read 0, so no resolution bound.
        if let Some(ns) = self.lost_per_interrupt_ns {
            rules.each_of("lost_per_interrupt_ns", ns, handled, "handled interrupts")?;
        }
        Ok(())
    }
}

impl ExitCostResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        let evidence = rules.observed.evidence;
        let count = count_of(rules.observed.config);
        // Each timed exit happened: the VMM served the port exits, KVM
        // counted the in-kernel ones.
        let served = evidence.port_exits;
        rules.at_least("userspace_exit_ns", f64_of(served), f64_of(count), || {
            format!("the guest timed {count} exits to the VMM, but the VMM served {served} in the window")
        })?;
        let kernel = evidence.kernel_exits;
        rules.at_least("kernel_exit_ns", f64_of(kernel), f64_of(count), || {
            format!("the guest timed {count} exits handled in KVM, but KVM counted {kernel} in the window")
        })?;
        let userspace = [
            ("userspace_exit_ns", self.userspace_exit_ns),
            ("userspace_exit_p50_ns", f64_of(self.userspace_exit_p50_ns)),
        ];
        for (figure, ns) in userspace {
            rules.timed(figure, ns)?;
            if let Some(vmm_ns) = evidence.port_exit_vmm_min_ns {
                let floor = f64_of(vmm_ns) / GUEST_CLOCK_SLACK;
                rules.at_least(figure, ns, floor, || {
                    format!("the VMM alone spent at least {vmm_ns} ns on each exit to it in the window, and every such exit the guest times holds that part (its clock may run {GUEST_CLOCK_SLACK}x slow)")
                })?;
            }
        }
        rules.each_of(
            "userspace_exit_ns",
            self.userspace_exit_ns,
            count,
            "exits to the VMM",
        )?;
        rules.timed("kernel_exit_ns", self.kernel_exit_ns)?;
        rules.each_of(
            "kernel_exit_ns",
            self.kernel_exit_ns,
            count,
            "exits handled in KVM",
        )?;
        rules.timed("kernel_exit_p50_ns", f64_of(self.kernel_exit_p50_ns))?;
        // At least half the exits take the median or more: it is at most
        // twice the mean (a bucket's midpoint, and the clock, given slack).
        let medians = [
            (
                "userspace_exit_p50_ns",
                self.userspace_exit_p50_ns,
                self.userspace_exit_ns,
            ),
            (
                "kernel_exit_p50_ns",
                self.kernel_exit_p50_ns,
                self.kernel_exit_ns,
            ),
        ];
        for (figure, p50, mean) in medians {
            rules.at_most(figure, f64_of(p50), 2.0 * mean * GUEST_CLOCK_SLACK, || {
                format!("at least half the exits take the median or more, so it is at most twice their mean ({mean:.0} ns)")
            })?;
        }
        rules.pv_eoi_skips(self.pv_eoi_skips)
    }
}

impl VioapicResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        rules.measured("events", self.events)?;
        let events = self.events;
        rules.rate_over_window(
            "interrupts_per_s",
            self.interrupts_per_s,
            events,
            "device events",
        )?;
        // The same span in cycles, per event.
        let evidence = rules.observed.evidence;
        let window_cycles = f64_of(evidence.window_ns) * f64_of(evidence.tsc_khz) / 1e6;
        let per_event = window_cycles / f64_of(events);
        let cycles_rule = |side: &str| {
            format!("the window the VMM timed holds {per_event:.0} TSC cycles per event; the guest's may be {side} by at most {GUEST_CLOCK_SLACK}x")
        };
        rules.at_most(
            "host_cycles_per_interrupt",
            self.host_cycles_per_interrupt,
            per_event * GUEST_CLOCK_SLACK,
            || cycles_rule("more"),
        )?;
        rules.at_least(
            "host_cycles_per_interrupt",
            self.host_cycles_per_interrupt,
            per_event / GUEST_CLOCK_SLACK,
            || cycles_rule("fewer"),
        )?;
        let Some(params) = vioapic_params(rules) else {
            return Ok(());
        };
        // Outside the race test each event is serviced by an interrupt.
        let handled = rules.observed.interrupts;
        if !params.vioapic_race && handled < events {
            return Err(rules.refuse(
                "interrupts",
                handled,
                format!(
                    "the guest serviced {events} device events, each in an interrupt's handler"
                ),
            ));
        }
        // Where every access of the sequence exits, the VMM served them.
        if every_access_trapped(params) {
            let trapped = |figure, per_interrupt: u64, served: u64| {
                rules.at_most(figure, f64_of(per_interrupt), ratio(served, events), || {
                    format!("over {events} events the VMM served {served} (every one exits at the {} level)", params.vioapic)
                })
            };
            trapped(
                "register_reads_per_interrupt",
                self.register_reads_per_interrupt,
                self.trapped_reads,
            )?;
            trapped(
                "register_writes_per_interrupt",
                self.register_writes_per_interrupt,
                self.trapped_writes,
            )?;
        }
        // Every access, trapped or not, takes time inside the window.
        let accesses = self
            .register_reads_per_interrupt
            .saturating_add(self.register_writes_per_interrupt);
        let most = window_cycles * GUEST_CLOCK_SLACK / f64_of(MIN_TIMED_CYCLES) / f64_of(events);
        rules.at_most("register_reads_per_interrupt", f64_of(accesses), most, || {
            format!("{accesses} register accesses per interrupt over {events} events cannot fit the window at {MIN_TIMED_CYCLES} TSC cycles or more each")
        })?;
        // A spurious interrupt is one the guest handled: KVM injected it,
        // beside one per event serviced (the race test's guest also finds
        // events without an interrupt).
        if let (Some(injected), Some(params)) = (rules.injected(0), vioapic_params(rules)) {
            let serviced = if params.vioapic_race { 0 } else { events };
            let room = injected.saturating_sub(serviced);
            rules.at_most("spurious", f64_of(self.spurious), f64_of(room), || {
                format!("KVM injected {injected} interrupts into vCPU 0 over the whole run, {serviced} of them for the events serviced")
            })?;
        }
        let toggles = self.mask_toggles;
        if params.vioapic_race {
            if params.vioapic == VioapicLevel::Userspace {
                let writes = self.trapped_writes;
                rules.at_most("mask_toggles", f64_of(toggles) * 2.0, f64_of(writes), || {
                    format!("{toggles} mask/unmask pairs are twice as many register writes, and the VMM served {writes}")
                })?;
            }
        } else {
            rules.at_most("mask_toggles", f64_of(toggles), 0.0, || {
                "the guest toggles the mask only in the race test (--race), which this run is not".into()
            })?;
        }
        Ok(())
    }
}

impl IoBatchResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        let commands = count_of(rules.observed.config);
        rules.rate_over_window(
            "commands_per_s",
            self.commands_per_s,
            commands,
            "disk commands",
        )?;
        rules.finite("exits_per_command", self.exits_per_command)?;
        rules.finite(
            "userspace_exits_per_command",
            self.userspace_exits_per_command,
        )
    }
}

impl TickResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        rules.share("guest_share", self.guest_share)?;
        rules.measured("timer_interrupts", self.timer_interrupts)?;
        rules.positive("timer_interrupts_per_s", self.timer_interrupts_per_s)?;
        rules.finite("exits_per_s", self.exits_per_s)?;
        rules.handled_by("timer_interrupts", 0, self.timer_interrupts)?;
        let Some(pit) = rules.observed.evidence.pit else {
            return Ok(());
        };
        let ticks = self.timer_interrupts;
        rules.at_most("timer_interrupts", f64_of(ticks), f64_of(pit.irqs), || {
            format!(
                "the VMM's PIT raised {} IRQ0 edges over the whole run",
                pit.irqs
            )
        })?;
        let hz = pit.hz;
        rules.at_most(
            "timer_interrupts_per_s",
            self.timer_interrupts_per_s,
            hz * GUEST_CLOCK_SLACK,
            || format!("the PIT, as programmed, fires {hz:.1} times a second; the guest's clock may run up to {GUEST_CLOCK_SLACK}x"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Named;

    fn every_variant() -> Vec<BenchResult> {
        vec![
            BenchResult::IrqLatency(PvEoiCount { pv_eoi_skips: 3 }),
            BenchResult::TimerLatency(PvEoiCount::default()),
            BenchResult::Ipi(IpiResult {
                handled: IpisByVcpu(vec![200, 100, 100]),
                send_p50_ns: Some(900),
                ..IpiResult::default()
            }),
            BenchResult::Whileloop(WhileloopResult {
                raised: 5,
                guest_share: 0.5,
                ..WhileloopResult::default()
            }),
            BenchResult::ExitCost(ExitCostResult::default()),
            BenchResult::Vioapic(VioapicResult::default()),
            BenchResult::IoBatch(IoBatchResult {
                device_digest: 0xdead_beef,
                ..IoBatchResult::default()
            }),
            BenchResult::Tick(TickResult::default()),
            BenchResult::HaltWakeup(PvEoiCount::default()),
            BenchResult::Hostile(NoFigures {}),
        ]
    }

    #[test]
    fn a_reader_gives_its_benchs_figures_and_names_any_other_bench() {
        let results = every_variant();
        let io_batch = &results[6];
        let figures = io_batch.io_batch().expect("io-batch figures");
        assert_eq!(figures.device_digest, 0xdead_beef);
        let err = io_batch.tick().expect_err("not tick's");
        assert_eq!((err.expected, err.got), (Bench::Tick, Bench::IoBatch));
        assert_eq!(err.to_string(), "expected tick results, got io-batch's");
        // Three benches share one result type; each reader keeps its own.
        let timer = &results[1];
        assert!(timer.timer_latency().is_ok());
        assert!(timer.irq_latency().is_err() && timer.halt_wakeup().is_err());
    }

    #[test]
    fn each_result_is_tagged_with_its_benchs_name_and_round_trips() {
        for result in every_variant() {
            let json = serde_json::to_value(&result).expect("serializes");
            assert_eq!(
                json["bench"],
                serde_json::to_value(result.bench()).expect("a bench serializes"),
                "{json}"
            );
            assert!(json["results"].is_object(), "{json}");
            let back: BenchResult = serde_json::from_value(json).expect("deserializes");
            assert_eq!(back, result);
        }
    }

    #[test]
    fn every_bench_that_reports_has_its_result_type() {
        let tagged: Vec<Bench> = every_variant().iter().map(BenchResult::bench).collect();
        let reporting: Vec<Bench> = Bench::ALL
            .iter()
            .copied()
            .filter(|&bench| bench != Bench::Fault)
            .collect();
        assert_eq!(tagged, reporting);
        let empty: Vec<Bench> = Bench::ALL
            .iter()
            .filter_map(|&bench| BenchResult::measured_nothing(bench))
            .map(|result| result.bench())
            .collect();
        assert_eq!(empty, reporting);
        let whileloop = BenchResult::measured_nothing(Bench::Whileloop).expect("has figures");
        assert_eq!(whileloop.guest_share(), Some(0.0));
    }

    #[test]
    fn typed_readers_find_the_figures_the_report_reads() {
        let results = every_variant();
        assert_eq!(results[3].guest_share(), Some(0.5));
        assert_eq!(results[0].guest_share(), None);
        let ipi = results[2].ipi().expect("ipi figures");
        assert_eq!(ipi.handled.to_vcpu(1), Some(100));
        assert_eq!(ipi.handled.to_vcpu(3), None);
    }

    #[test]
    fn figures_keep_the_names_users_read() {
        let ipi = BenchResult::Ipi(IpiResult {
            handled: IpisByVcpu(vec![200, 100]),
            send_p50_ns: Some(900),
            pv_eoi_skips: 1,
            ..IpiResult::default()
        });
        let figures = ipi.figures();
        let names: Vec<&str> = figures.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "ipis_to_vcpu0",
                "ipis_to_vcpu1",
                "pv_eoi_skips",
                "send_p50_ns"
            ]
        );
        assert_eq!(figures[&ipis_to_vcpu(1)], 100.0);
        let whileloop = every_variant().remove(3).figures();
        assert_eq!(whileloop["raised"], 5.0);
        assert_eq!(whileloop["guest_share"], 0.5);
        assert_eq!(BenchResult::Hostile(NoFigures {}).figures().len(), 0);
    }

    /// A second's window at 1 GHz (a cycle is a nanosecond), 1,000
    /// injections into vCPU 0, 500 port exits the VMM took 400 ns or more
    /// on, 2,000 exits in KVM.
    fn second() -> Evidence {
        Evidence {
            window_ns: 1_000_000_000,
            tsc_khz: 1_000_000,
            injected: Some(vec![1_000, 0]),
            port_exits: 500,
            port_exit_vmm_min_ns: Some(400),
            kernel_exits: 2_000,
            pit: None,
        }
    }

    fn check(
        result: &BenchResult,
        config: &BenchConfig,
        interrupts: u64,
    ) -> Result<(), Implausible> {
        result.check(&Observed {
            evidence: &second(),
            config,
            interrupts,
        })
    }

    fn counted(bench: Bench, count: u64) -> BenchConfig {
        let mut config = BenchConfig::new(bench);
        let _ = config.params.set(crate::config::Param::Count(count));
        config
    }

    fn honest_cost() -> ExitCostResult {
        ExitCostResult {
            userspace_exit_ns: 30_000.0,
            kernel_exit_ns: 2_100.0,
            userspace_exit_p50_ns: 29_000,
            kernel_exit_p50_ns: 2_000,
            pv_eoi_skips: 0,
        }
    }

    #[test]
    fn forged_figures_are_refused_naming_figure_and_rule() {
        let exit_cost = counted(Bench::ExitCost, 500);
        let huge = BenchResult::ExitCost(ExitCostResult {
            userspace_exit_ns: 7_094_901_566_811_366.0,
            ..honest_cost()
        });
        let err = check(&huge, &exit_cost, 0).expect_err("longer than the window");
        assert_eq!(
            err.to_string(),
            "exit-cost: the guest reported userspace_exit_ns = 7094901566811366, which is impossible: \
             longer than the whole measured window (1000000000 ns from START to END, timed by the VMM; \
             the guest's clock may run up to 2x)"
        );
        let inf = BenchResult::Vioapic(VioapicResult {
            events: 10,
            interrupts_per_s: f64::INFINITY,
            ..VioapicResult::default()
        });
        let err = check(&inf, &counted(Bench::Vioapic, 10), 10).expect_err("infinite");
        assert!(err.to_string().contains("interrupts_per_s = inf"), "{err}");
        assert!(err.to_string().contains("not a finite number"), "{err}");
        let no_ticks = BenchResult::Tick(TickResult {
            guest_share: 0.5,
            ..TickResult::default()
        });
        let err = check(&no_ticks, &BenchConfig::new(Bench::Tick), 0).expect_err("nothing");
        assert!(err.to_string().contains("timer_interrupts = 0"), "{err}");
    }

    #[test]
    fn each_exit_fits_the_window_and_holds_the_vmms_own_part() {
        let config = counted(Bench::ExitCost, 500);
        let cost = |edit: fn(&mut ExitCostResult)| {
            let mut cost = honest_cost();
            edit(&mut cost);
            check(&BenchResult::ExitCost(cost), &config, 0).map_err(|err| err.to_string())
        };
        cost(|_| ()).expect("plausible");
        // 500 exits of 96 ms: each fits the window, together 48 of them.
        let total = cost(|c| c.userspace_exit_ns = 96_000_000.0).expect_err("too long together");
        assert!(
            total.contains("500 exits to the VMM of 96000000 ns each"),
            "{total}"
        );
        // Below what the VMM alone spent on each, above the resolution.
        let cheap = cost(|c| c.userspace_exit_ns = 100.0).expect_err("cheaper than the VMM");
        assert!(
            cheap.contains("the VMM alone spent at least 400 ns"),
            "{cheap}"
        );
        let tiny = cost(|c| c.kernel_exit_p50_ns = 3).expect_err("below resolution");
        assert!(
            tiny.contains("shorter than the platform's resolution (16 TSC cycles"),
            "{tiny}"
        );
        let median =
            cost(|c| c.kernel_exit_p50_ns = 100_000).expect_err("median past twice the mean");
        assert!(median.contains("at most twice their mean"), "{median}");
        // More exits timed than the VMM and KVM saw.
        let more = counted(Bench::ExitCost, 600);
        let err = check(&BenchResult::ExitCost(honest_cost()), &more, 0).expect_err("unserved");
        assert!(
            err.to_string()
                .contains("but the VMM served 500 in the window"),
            "{err}"
        );
    }

    #[test]
    fn shares_rates_and_counts_stay_within_what_the_vmm_saw() {
        let whileloop = |share: f64, lost: Option<f64>| {
            BenchResult::Whileloop(WhileloopResult {
                raised: 900,
                iterations: 100,
                loaded_iterations: 90,
                baseline_ns: 400_000_000,
                loaded_ns: 500_000_000,
                guest_share: share,
                lost_per_interrupt_ns: lost,
            })
        };
        let config = BenchConfig::new(Bench::Whileloop);
        check(&whileloop(0.9, Some(20_000.0)), &config, 800).expect("plausible");
        check(&whileloop(1.05, None), &config, 800).expect("noise above 1");
        let err = check(&whileloop(47_255_366.0, None), &config, 800).expect_err("share > 1");
        assert!(
            err.to_string().contains("a share of the CPU is at most 1"),
            "{err}"
        );
        let err = check(&whileloop(0.9, Some(49_650_839.0)), &config, 800).expect_err("loss");
        assert!(
            err.to_string()
                .contains("800 handled interrupts of 49650839 ns"),
            "{err}"
        );
        // A mean of chunks' excess, not one timed event: an honest run
        // with no chunk slowed reads 0, below any resolution.
        for tiny in [0.0, 0.27] {
            check(&whileloop(0.9, Some(tiny)), &config, 800).expect("a mean may be tiny");
        }
        // Fewer than KVM injected (1,000), more than the device raised.
        let err = check(&whileloop(0.9, None), &config, 901).expect_err("unraised");
        assert!(
            err.to_string().contains("the VMM's device raised 900"),
            "{err}"
        );

        let vioapic = |edit: fn(&mut VioapicResult)| {
            let mut result = VioapicResult {
                events: 500,
                interrupts_per_s: 520.0,
                host_cycles_per_interrupt: 1_900_000.0,
                register_reads_per_interrupt: 4,
                register_writes_per_interrupt: 2,
                trapped_reads: 2_000,
                trapped_writes: 1_002,
                spurious: 0,
                mask_toggles: 0,
            };
            edit(&mut result);
            check(
                &BenchResult::Vioapic(result),
                &counted(Bench::Vioapic, 500),
                500,
            )
            .map_err(|err| err.to_string())
        };
        vioapic(|_| ()).expect("plausible");
        let rate = vioapic(|r| r.interrupts_per_s = 4.9e9).expect_err("rate");
        assert!(
            rate.contains("500 device events in the 1.000 s the VMM timed"),
            "{rate}"
        );
        let reads = vioapic(|r| r.register_reads_per_interrupt = u64::MAX).expect_err("reads");
        assert!(reads.contains("the VMM served 2000"), "{reads}");
        let spurious = vioapic(|r| r.spurious = 501).expect_err("spurious");
        assert!(
            spurious.contains("KVM injected 1000 interrupts into vCPU 0"),
            "{spurious}"
        );
        let toggles = vioapic(|r| r.mask_toggles = 1).expect_err("no race");
        assert!(toggles.contains("only in the race test"), "{toggles}");

        let io_batch = BenchResult::IoBatch(IoBatchResult {
            commands_per_s: 2.45e9,
            ..IoBatchResult::default()
        });
        let err = check(&io_batch, &counted(Bench::IoBatch, 500), 0).expect_err("rate");
        assert!(
            err.to_string().contains("500 disk commands in the 1.000 s"),
            "{err}"
        );
    }

    #[test]
    fn the_tick_is_held_to_the_pit_the_vmm_ran() {
        let tick = |ticks: u64, per_s: f64| {
            BenchResult::Tick(TickResult {
                timer_interrupts: ticks,
                timer_interrupts_per_s: per_s,
                exits_per_s: 3_000.0,
                guest_share: 0.8,
                guest_reload: 1_193,
                max_count_read: 1_000,
                effective_reload: 1_193,
            })
        };
        let mut evidence = second();
        evidence.pit = Some(PitEvidence {
            irqs: 520,
            irqs_in_window: 500,
            hz: 1_000.2,
        });
        let config = BenchConfig::new(Bench::Tick);
        let check = |result: &BenchResult| {
            result
                .check(&Observed {
                    evidence: &evidence,
                    config: &config,
                    interrupts: 0,
                })
                .map_err(|err| err.to_string())
        };
        check(&tick(480, 960.0)).expect("plausible");
        let rate = check(&tick(480, 2.5e8)).expect_err("faster than the PIT");
        assert!(
            rate.contains("the PIT, as programmed, fires 1000.2 times a second"),
            "{rate}"
        );
        let many = check(&tick(900, 960.0)).expect_err("more than injected or raised");
        assert!(
            many.contains("KVM injected") || many.contains("the VMM's PIT raised"),
            "{many}"
        );
        // Ticks merge on a loaded host: fewer is no forgery.
        check(&tick(100, 960.0)).expect("merged ticks");
    }

    #[test]
    fn figures_a_run_could_have_measured_pass() {
        let whileloop = BenchResult::Whileloop(WhileloopResult {
            raised: 5,
            iterations: 100,
            loaded_iterations: 90,
            baseline_ns: 1_000,
            loaded_ns: 1_100,
            guest_share: 0.9,
            lost_per_interrupt_ns: Some(20.0),
        });
        check(&whileloop, &BenchConfig::new(Bench::Whileloop), 5).expect("plausible");
        check(
            &BenchResult::TimerLatency(PvEoiCount::default()),
            &BenchConfig::new(Bench::TimerLatency),
            500,
        )
        .expect("nothing of its own to check");
        let skips = BenchResult::TimerLatency(PvEoiCount { pv_eoi_skips: 501 });
        assert!(check(&skips, &BenchConfig::new(Bench::TimerLatency), 500).is_err());
    }

    #[test]
    fn claims_are_the_figures_no_evidence_bounds_from_below() {
        let cost = BenchResult::ExitCost(ExitCostResult::default());
        assert_eq!(
            cost.claims(&BenchConfig::new(Bench::ExitCost)),
            ["kernel_exit_ns", "kernel_exit_p50_ns", "pv_eoi_skips"]
        );
        let vioapic = BenchResult::Vioapic(VioapicResult::default());
        assert_eq!(
            vioapic.claims(&BenchConfig::new(Bench::Vioapic)),
            ["spurious"]
        );
        let mut pv = BenchConfig::new(Bench::Vioapic);
        pv.params
            .set(crate::config::Param::Vioapic(VioapicLevel::Pv))
            .expect("a level");
        assert!(vioapic
            .claims(&pv)
            .contains(&"register_reads_per_interrupt"));
        assert!(BenchResult::IoBatch(IoBatchResult::default())
            .claims(&BenchConfig::new(Bench::IoBatch))
            .is_empty());
    }

    #[test]
    fn pv_eoi_skips_are_read_only_where_the_guest_counts_them() {
        let results = every_variant();
        assert_eq!(results[0].pv_eoi_skips(), Some(3));
        assert_eq!(results[3].pv_eoi_skips(), None);
        let mismatch = results[3].mismatch(Bench::Tick);
        assert_eq!(
            mismatch.to_string(),
            "expected tick results, got whileloop's"
        );
    }
}
