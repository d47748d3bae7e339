//! What each bench measured beyond exits and latency: one type per bench,
//! so that a reader names a field the compiler checks instead of looking a
//! string up in a map. In `dirq run --json` the bench's name stays under
//! `bench` and its figures under `results`, as one object of named numbers.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use dirq_stats::f64_of;

use crate::config::Bench;

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

/// What the VMM itself observed of a run: the guest's figures must fit it.
#[derive(Clone, Copy, Debug)]
pub struct Observed {
    /// Host time from the guest's START to its END.
    pub window_ns: f64,
}

/// How far a duration the guest timed with its TSC may exceed the window
/// the VMM timed with the host's clock: under kvm_pvm's emulator the
/// guest's TSC was measured 3% fast against host time. A forged figure is
/// off by orders of magnitude, not by this.
pub const GUEST_CLOCK_SLACK: f64 = 2.0;

/// Why a guest-timed duration of `ns` cannot have fit a `window_ns` window, if it cannot.
pub fn beyond_window(ns: f64, window_ns: f64) -> Option<String> {
    (ns > window_ns * GUEST_CLOCK_SLACK).then(|| {
        format!(
            "longer than the whole measured window ({window_ns:.0} ns from START to END, timed by the VMM; the guest's clock may run up to {GUEST_CLOCK_SLACK}x)"
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

/// Checks one bench's figures against what the VMM observed.
struct Rules<'a> {
    bench: Bench,
    observed: &'a Observed,
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

    /// A duration timed inside the window: no longer than the window.
    fn within_window(&self, figure: &'static str, ns: f64) -> Result<(), Implausible> {
        self.finite(figure, ns)?;
        match beyond_window(ns, self.observed.window_ns) {
            Some(rule) => Err(self.refuse(figure, ns, rule)),
            None => Ok(()),
        }
    }

    /// A duration timed inside the window, of something that took time.
    fn timed(&self, figure: &'static str, ns: f64) -> Result<(), Implausible> {
        self.positive(figure, ns)?;
        self.within_window(figure, ns)
    }
}

impl BenchResult {
    /// Refuses a figure that the VMM's own observations make impossible, or
    /// that says the run measured nothing.
    pub fn check(&self, observed: &Observed) -> Result<(), Implausible> {
        let rules = Rules {
            bench: self.bench(),
            observed,
        };
        match self {
            BenchResult::Ipi(ipi) => ipi.check(&rules),
            BenchResult::Whileloop(whileloop) => whileloop.check(&rules),
            BenchResult::ExitCost(cost) => cost.check(&rules),
            BenchResult::Vioapic(vioapic) => vioapic.check(&rules),
            BenchResult::IoBatch(io_batch) => io_batch.check(&rules),
            BenchResult::Tick(tick) => tick.check(&rules),
            BenchResult::IrqLatency(_)
            | BenchResult::TimerLatency(_)
            | BenchResult::HaltWakeup(_)
            | BenchResult::Hostile(_) => Ok(()),
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
        let timed = [
            ("send_p50_ns", self.send_p50_ns),
            ("target_gap_p50_ns", self.target_gap_p50_ns),
        ];
        for (figure, ns) in timed {
            if let Some(ns) = ns {
                rules.within_window(figure, f64_of(ns))?;
            }
        }
        Ok(())
    }
}

impl WhileloopResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        rules.measured("iterations", self.iterations)?;
        rules.measured("loaded_iterations", self.loaded_iterations)?;
        rules.timed("baseline_ns", f64_of(self.baseline_ns))?;
        rules.timed("loaded_ns", f64_of(self.loaded_ns))?;
        rules.positive("guest_share", self.guest_share)?;
        if let Some(ns) = self.lost_per_interrupt_ns {
            rules.within_window("lost_per_interrupt_ns", ns)?;
        }
        Ok(())
    }
}

impl ExitCostResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        rules.timed("userspace_exit_ns", self.userspace_exit_ns)?;
        rules.timed("kernel_exit_ns", self.kernel_exit_ns)?;
        rules.timed("userspace_exit_p50_ns", f64_of(self.userspace_exit_p50_ns))?;
        rules.timed("kernel_exit_p50_ns", f64_of(self.kernel_exit_p50_ns))
    }
}

impl VioapicResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        rules.measured("events", self.events)?;
        rules.positive("interrupts_per_s", self.interrupts_per_s)?;
        rules.finite("host_cycles_per_interrupt", self.host_cycles_per_interrupt)
    }
}

impl IoBatchResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        rules.positive("commands_per_s", self.commands_per_s)?;
        rules.finite("exits_per_command", self.exits_per_command)?;
        rules.finite(
            "userspace_exits_per_command",
            self.userspace_exits_per_command,
        )
    }
}

impl TickResult {
    fn check(&self, rules: &Rules) -> Result<(), Implausible> {
        rules.measured("timer_interrupts", self.timer_interrupts)?;
        rules.positive("timer_interrupts_per_s", self.timer_interrupts_per_s)?;
        rules.finite("exits_per_s", self.exits_per_s)?;
        rules.positive("guest_share", self.guest_share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    const SECOND: Observed = Observed { window_ns: 1e9 };

    #[test]
    fn forged_figures_are_refused_naming_figure_and_rule() {
        let huge = BenchResult::ExitCost(ExitCostResult {
            userspace_exit_ns: 7_094_901_566_811_366.0,
            kernel_exit_ns: 2_000.0,
            userspace_exit_p50_ns: 30_000,
            kernel_exit_p50_ns: 2_000,
            pv_eoi_skips: 0,
        });
        let err = huge.check(&SECOND).expect_err("longer than the window");
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
        let err = inf.check(&SECOND).expect_err("infinite");
        assert!(err.to_string().contains("interrupts_per_s = inf"), "{err}");
        assert!(err.to_string().contains("not a finite number"), "{err}");
        let zero_share = BenchResult::Whileloop(WhileloopResult {
            raised: 5,
            iterations: 100,
            loaded_iterations: 50,
            baseline_ns: 1_000,
            loaded_ns: 2_000,
            guest_share: 0.0,
            lost_per_interrupt_ns: None,
        });
        let err = zero_share.check(&SECOND).expect_err("nothing kept");
        assert!(err.to_string().contains("guest_share = 0"), "{err}");
        let no_ticks = BenchResult::Tick(TickResult::default());
        let err = no_ticks.check(&SECOND).expect_err("measured nothing");
        assert!(err.to_string().contains("timer_interrupts = 0"), "{err}");
    }

    #[test]
    fn figures_a_run_could_have_measured_pass() {
        let cost = BenchResult::ExitCost(ExitCostResult {
            userspace_exit_ns: 30_000.0,
            kernel_exit_ns: 2_100.0,
            userspace_exit_p50_ns: 29_000,
            kernel_exit_p50_ns: 2_000,
            pv_eoi_skips: 0,
        });
        cost.check(&SECOND).expect("plausible");
        let whileloop = BenchResult::Whileloop(WhileloopResult {
            raised: 5,
            iterations: 100,
            loaded_iterations: 90,
            baseline_ns: 1_000,
            loaded_ns: 1_100,
            guest_share: 0.9,
            lost_per_interrupt_ns: Some(20.0),
        });
        whileloop.check(&SECOND).expect("plausible");
        BenchResult::TimerLatency(PvEoiCount::default())
            .check(&SECOND)
            .expect("nothing of its own to check");
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
