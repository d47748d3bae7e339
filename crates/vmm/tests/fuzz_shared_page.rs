//! The shared page as a hostile guest may leave it, read back by the VMM
//! (no KVM needed): what every bench reads of it (`machine::check_claims`:
//! the execution mode it claims, its sample count and samples) and the
//! account of a failure never panic, and what they accept obeys the run's
//! configuration and what the VMM observed. The seed corpus,
//! `corpus/shared_page.txt`, is replayed first with the outcome each seed
//! must have; proptest then mutates pages around the run's own values (a
//! failure it finds is persisted beside this file and replayed from then on).
//! The figures each bench makes of the page (`BenchResult::check`) have
//! their own corpus, `corpus/figures.txt`, and fuzz.

use std::sync::OnceLock;

use dirq_stats::f64_of;
use dirq_vmm::abi::SharedPage;
use dirq_vmm::config::VioapicLevel;
use dirq_vmm::config::{Bench, BenchConfig, GuestExec, Param};
use dirq_vmm::exec::{ExecEvidence, VcpuExecStats};
use dirq_vmm::machine::{check_claims, describe_failure, Observation};
use dirq_vmm::memory::{self, GuestMemory};
use dirq_vmm::results::{
    BenchResult, Evidence, ExitCostResult, IoBatchResult, IpiResult, IpisByVcpu, Observed,
    PitEvidence, PvEoiCount, TickResult, VioapicResult, WhileloopResult, GUEST_CLOCK_SLACK,
    MIN_TIMED_CYCLES, SHARE_NOISE,
};
use proptest::prelude::*;
use vm_memory::{Bytes, GuestAddress};

/// 1 GHz: a TSC cycle is a nanosecond.
const TSC_KHZ: u64 = 1_000_000;
/// The samples a fuzzed page may write: enough to pass any count drawn.
const MAX_FUZZED_SAMPLES: u64 = 300;
/// The corpus replays counts up to this, whatever it says it wrote.
const MAX_CORPUS_SAMPLES: u64 = 5_000;

/// A finished run as the VMM saw it, and the page the guest left.
#[derive(Clone)]
struct Claims {
    bench: Bench,
    count: u64,
    asked: GuestExec,
    window_ns: u64,
    stats: VcpuExecStats,
    page: SharedPage,
    /// The value of every sample the guest wrote.
    sample: u64,
}

impl std::fmt::Debug for Claims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claims")
            .field("bench", &self.bench)
            .field("count", &self.count)
            .field("asked", &self.asked)
            .field("window_ns", &self.window_ns)
            .field("stats", &self.stats)
            .field("page", &PageFields(&self.page))
            .field("sample", &self.sample)
            .finish()
    }
}

impl std::fmt::Debug for PageFields<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPage")
            .field("samples_written", &self.0.samples_written)
            .field("native_cpus", &self.0.native_cpus)
            .field("failure", &self.0.failure)
            .finish_non_exhaustive()
    }
}

/// What of the page the claims are about, for failure messages.
struct PageFields<'a>(&'a SharedPage);

/// The guest RAM every case writes its samples into: one mapping for all.
fn guest_memory() -> &'static GuestMemory {
    static MEMORY: OnceLock<GuestMemory> = OnceLock::new();
    MEMORY.get_or_init(|| memory::create_guest_memory().expect("guest RAM"))
}

/// Holds the VMM's verdict on `claims` to the rules; `Ok(accepted)`.
fn judge(claims: &Claims, samples_to_write: u64) -> Result<bool, TestCaseError> {
    let mut config = BenchConfig::new(claims.bench);
    // A bench without a count takes none.
    let _ = config.params.set(Param::Count(claims.count));
    let page = &claims.page;
    let written = page.samples_written.min(samples_to_write);
    let bytes: Vec<u8> = (0..written)
        .flat_map(|_| claims.sample.to_le_bytes())
        .collect();
    let memory = guest_memory();
    memory
        .write_slice(&bytes, GuestAddress(memory::SAMPLES_GPA))
        .expect("samples in RAM");
    // Read only to describe a failure: anything there is described.
    prop_assert!(!describe_failure(page).is_empty());
    let stats = [claims.stats, VcpuExecStats::default()];
    let verdict = check_claims(
        &config,
        page,
        memory,
        &Observation {
            asked: claims.asked,
            stats: &stats,
            tsc_khz: TSC_KHZ,
            window_ns: claims.window_ns,
        },
    );
    let (exec, samples) = match verdict {
        Ok(accepted) => accepted,
        Err(refused) => {
            prop_assert!(!refused.to_string().is_empty());
            return Ok(false);
        }
    };
    let expected = config.params.expected_samples();
    prop_assert_eq!(page.samples_written, expected, "{:?}", PageFields(page));
    prop_assert_eq!(samples.len() as u64, expected);
    for &cycles in &samples {
        prop_assert!(cycles >= MIN_TIMED_CYCLES, "sample {} cycles", cycles);
        prop_assert!(
            f64_of(cycles) <= f64_of(claims.window_ns) * GUEST_CLOCK_SLACK,
            "sample {} ns in a {} ns window",
            cycles,
            claims.window_ns
        );
    }
    if exec.guest_exec == GuestExec::Native {
        prop_assert_eq!(claims.asked, GuestExec::Native);
        prop_assert!(claims.stats.evidence() != ExecEvidence::Emulated);
    }
    if page.native_cpus != 0 && claims.asked == GuestExec::Emulated {
        prop_assert!(false, "a native claim the VMM never asked for was accepted");
    }
    Ok(true)
}

/// One corpus line: `key=value` words (see the corpus's header).
fn parse_seed(line: &str) -> (Claims, bool) {
    let mut claims = Claims {
        bench: Bench::TimerLatency,
        count: 0,
        asked: GuestExec::Native,
        window_ns: 0,
        stats: VcpuExecStats::default(),
        page: SharedPage::default(),
        sample: 0,
    };
    let mut accepted = None;
    for word in line.split_whitespace() {
        let (key, value) = word.split_once('=').expect("key=value");
        let number = || value.parse::<u64>().expect("a number");
        match key {
            "bench" => claims.bench = value.parse().expect("a bench"),
            "count" => claims.count = number(),
            "asked" => claims.asked = value.parse().expect("an execution mode"),
            "window_ns" => claims.window_ns = number(),
            "exits" => claims.stats.exits = number(),
            "emulations" => claims.stats.insn_emulation = number(),
            "native_cpus" => claims.page.native_cpus = number(),
            "samples_written" => claims.page.samples_written = number(),
            "sample" => claims.sample = number(),
            "failure" => claims.page.failure = u32::try_from(number()).expect("a u32"),
            "detail" => claims.page.failure_detail = [number(); 4],
            "expect" => accepted = Some(value == "accepted"),
            other => panic!("unknown corpus key {other}"),
        }
    }
    (
        claims,
        accepted.expect("every seed says what the VMM must do"),
    )
}

#[test]
fn the_seed_corpus_ends_as_each_seed_says() {
    let corpus = include_str!("corpus/shared_page.txt");
    let seeds: Vec<&str> = corpus
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .collect();
    assert!(seeds.len() >= 10, "the corpus lost its seeds");
    for seed in seeds {
        let (claims, must_accept) = parse_seed(seed);
        let accepted =
            judge(&claims, MAX_CORPUS_SAMPLES).unwrap_or_else(|broken| panic!("{seed}: {broken}"));
        assert_eq!(accepted, must_accept, "{seed}");
    }
}

fn bench() -> impl Strategy<Value = Bench> {
    prop::sample::select(vec![
        Bench::TimerLatency,
        Bench::Ipi,
        Bench::ExitCost,
        Bench::Whileloop,
        Bench::IrqLatency,
        Bench::Tick,
    ])
}

/// Mostly near what the run asked for, sometimes anything.
fn near(value: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(value),
        Just(value.saturating_add(1)),
        Just(value.saturating_sub(1)),
        Just(0),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn claims() -> impl Strategy<Value = Claims> {
    (
        bench(),
        1..MAX_FUZZED_SAMPLES,
        prop::sample::select(vec![GuestExec::Native, GuestExec::Emulated]),
        prop_oneof![Just(0u64), 1..10_000_000u64, any::<u64>()],
        (any::<u16>(), any::<u32>()),
        any::<[u8; std::mem::size_of::<SharedPage>()]>(),
    )
        .prop_flat_map(
            |(bench, count, asked, window_ns, (exits, emulations), bytes)| {
                (
                    near(count),
                    prop_oneof![Just(0u64), Just(1), Just(3), any::<u64>()],
                    near(window_ns),
                )
                    .prop_map(move |(samples_written, native_cpus, sample)| {
                        // Every byte of the page as the guest left it, then the
                        // fields the VMM reads, near the run's values.
                        let mut page = SharedPage::default();
                        vm_memory::ByteValued::as_mut_slice(&mut page).copy_from_slice(&bytes);
                        page.samples_written = samples_written;
                        page.native_cpus = native_cpus;
                        Claims {
                            bench,
                            count,
                            asked,
                            window_ns,
                            stats: VcpuExecStats {
                                exits: u64::from(exits),
                                insn_emulation: u64::from(emulations),
                            },
                            page,
                            sample,
                        }
                    })
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn whatever_the_page_holds_the_vmm_refuses_or_accepts_only_what_can_be_true(
        claims in claims(),
    ) {
        judge(&claims, MAX_FUZZED_SAMPLES)?;
    }
}

// The figures each bench makes of the page's result slots, beside the
// VMM's evidence (`BenchResult::check`): the seed corpus
// `corpus/figures.txt` holds issue 37's forgeries, each with its outcome;
// proptest then puts any value in any figure and any evidence beside it.

/// A run's figures and what the VMM saw of it.
#[derive(Clone, Debug)]
struct Figures {
    bench: Bench,
    results: serde_json::Value,
    evidence: Evidence,
    count: u64,
    level: Option<VioapicLevel>,
    interrupts: u64,
}

/// A second's window at 1 GHz, 1,000 injections into each vCPU, 500 port
/// exits the VMM took 400 ns or more on, 2,000 in KVM, a 1 kHz PIT.
fn honest_evidence() -> Evidence {
    Evidence {
        window_ns: 1_000_000_000,
        tsc_khz: 1_000_000,
        injected: Some(vec![1_000, 1_000]),
        port_exits: 500,
        port_exit_vmm_min_ns: Some(400),
        kernel_exits: 2_000,
        pit: Some(PitEvidence {
            irqs: 1_000,
            irqs_in_window: 980,
            hz: 1_000.0,
        }),
    }
}

/// What each bench honestly reports in that second, 500 events.
fn honest(bench: Bench) -> Figures {
    let result = match bench {
        Bench::Whileloop => BenchResult::Whileloop(WhileloopResult {
            raised: 1_000,
            iterations: 100_000_000,
            loaded_iterations: 90_000_000,
            baseline_ns: 400_000_000,
            loaded_ns: 500_000_000,
            guest_share: 0.9,
            lost_per_interrupt_ns: Some(20_000.0),
        }),
        Bench::Tick => BenchResult::Tick(TickResult {
            timer_interrupts: 500,
            timer_interrupts_per_s: 980.0,
            exits_per_s: 3_000.0,
            guest_share: 0.8,
            guest_reload: 1_193,
            max_count_read: 1_000,
            effective_reload: 1_193,
        }),
        Bench::Vioapic => BenchResult::Vioapic(VioapicResult {
            events: 500,
            interrupts_per_s: 520.0,
            host_cycles_per_interrupt: 1_900_000.0,
            register_reads_per_interrupt: 4,
            register_writes_per_interrupt: 2,
            trapped_reads: 2_000,
            trapped_writes: 1_002,
            spurious: 0,
            mask_toggles: 0,
        }),
        Bench::IoBatch => BenchResult::IoBatch(IoBatchResult {
            commands_per_s: 520.0,
            exits_per_command: 11.0,
            userspace_exits_per_command: 11.0,
            device_digest: 1,
        }),
        Bench::ExitCost => BenchResult::ExitCost(ExitCostResult {
            userspace_exit_ns: 30_000.0,
            kernel_exit_ns: 2_100.0,
            userspace_exit_p50_ns: 29_000,
            kernel_exit_p50_ns: 2_000,
            pv_eoi_skips: 0,
        }),
        Bench::Ipi => BenchResult::Ipi(IpiResult {
            handled: IpisByVcpu(vec![500, 500]),
            send_p50_ns: Some(15_000),
            target_gap_p50_ns: None,
            target_gaps: None,
            pv_eoi_skips: 0,
        }),
        _ => BenchResult::TimerLatency(PvEoiCount { pv_eoi_skips: 0 }),
    };
    Figures {
        bench: result.bench(),
        results: serde_json::to_value(&result).expect("serializes"),
        evidence: honest_evidence(),
        count: 500,
        level: None,
        interrupts: 500,
    }
}

/// How the VMM judged `figures`: `Ok(None)` refused, `Ok(Some(claims))`
/// accepted with those figures as the guest's claims; an accepted run that
/// breaks a physical bound fails the case.
fn judge_figures(figures: &Figures) -> Result<Option<Vec<&'static str>>, TestCaseError> {
    let Ok(result) = serde_json::from_value::<BenchResult>(figures.results.clone()) else {
        return Ok(None); // a value the figure's type cannot hold
    };
    let mut config = BenchConfig::new(figures.bench);
    let _ = config.params.set(Param::Count(figures.count));
    if let Some(level) = figures.level {
        config
            .params
            .set(Param::Vioapic(level))
            .expect("a vioapic run");
    }
    let evidence = &figures.evidence;
    let verdict = result.check(&Observed {
        evidence,
        config: &config,
        interrupts: figures.interrupts,
    });
    if let Err(refused) = verdict {
        prop_assert!(!refused.to_string().is_empty());
        return Ok(None);
    }
    // What was accepted obeys every physical bound.
    let window = f64_of(evidence.window_ns);
    let count = f64_of(figures.count);
    let resolution = f64_of(MIN_TIMED_CYCLES) * 1e6 / f64_of(evidence.tsc_khz.max(1)) - 1.0;
    let injected: u64 = evidence.injected.iter().flatten().sum();
    prop_assert!(figures.interrupts <= injected || evidence.injected.is_none());
    for (name, value) in result.figures() {
        prop_assert!(value.is_finite() && value >= 0.0, "{name} = {value}");
        match name.as_str() {
            "guest_share" => prop_assert!(value <= 1.0 + SHARE_NOISE, "{name} = {value}"),
            // A mean of chunks' excess: may be 0, none longer than the window together.
            "lost_per_interrupt_ns" => prop_assert!(
                value * f64_of(figures.interrupts.max(1)) <= window * GUEST_CLOCK_SLACK,
                "{name} = {value}"
            ),
            "send_p50_ns"
            | "target_gap_p50_ns"
            | "loaded_ns"
            | "kernel_exit_ns"
            | "kernel_exit_p50_ns"
            | "userspace_exit_p50_ns" => {
                prop_assert!(
                    value >= resolution && value <= window * GUEST_CLOCK_SLACK,
                    "{name} = {value}"
                );
            }
            "userspace_exit_ns" => {
                let vmm = evidence.port_exit_vmm_min_ns.map_or(0.0, f64_of);
                prop_assert!(value >= vmm / GUEST_CLOCK_SLACK, "{name} = {value}");
                prop_assert!(
                    value * count <= window * GUEST_CLOCK_SLACK,
                    "{name} = {value}"
                );
            }
            "interrupts_per_s" | "commands_per_s" => {
                prop_assert!(
                    value <= count / (window / 1e9) * GUEST_CLOCK_SLACK,
                    "{name} = {value}"
                );
            }
            "timer_interrupts_per_s" => {
                let hz = evidence.pit.map_or(f64::INFINITY, |pit| pit.hz);
                prop_assert!(value <= hz * GUEST_CLOCK_SLACK, "{name} = {value}");
            }
            "timer_interrupts" => {
                let irqs = evidence.pit.map_or(u64::MAX, |pit| pit.irqs);
                prop_assert!(value <= f64_of(irqs), "{name} = {value}");
            }
            "pv_eoi_skips" => prop_assert!(value <= f64_of(figures.interrupts), "{name} = {value}"),
            "mask_toggles" => prop_assert!(value == 0.0, "{name} = {value}"),
            other => {
                if let Some(cpu) = other.strip_prefix("ipis_to_vcpu") {
                    let cpu: usize = cpu.parse().expect("a vCPU");
                    let injected = evidence.injected.as_ref().and_then(|v| v.get(cpu).copied());
                    prop_assert!(injected.is_none_or(|injected| value <= f64_of(injected)));
                }
            }
        }
    }
    Ok(Some(result.claims(&config)))
}

/// One figures corpus line (see the corpus's header).
fn parse_figures(line: &str) -> (Figures, String) {
    let words: Vec<(&str, &str)> = line
        .split_whitespace()
        .map(|word| word.split_once('=').expect("key=value"))
        .collect();
    let bench = words
        .iter()
        .find(|(key, _)| *key == "bench")
        .map(|(_, value)| value.parse().expect("a bench"))
        .expect("every seed names its bench");
    let mut figures = honest(bench);
    let mut expect = None;
    for (key, value) in words {
        let number = || value.parse::<u64>().expect("a number");
        let evidence = &mut figures.evidence;
        match key {
            "bench" => {}
            "expect" => expect = Some(value.to_string()),
            "window_ns" => evidence.window_ns = number(),
            "tsc_khz" => evidence.tsc_khz = number(),
            "port_exits" => evidence.port_exits = number(),
            "vmm_min_ns" => evidence.port_exit_vmm_min_ns = Some(number()),
            "kernel_exits" => evidence.kernel_exits = number(),
            "pit_irqs" => evidence.pit.as_mut().expect("a PIT").irqs = number(),
            "count" => figures.count = number(),
            "level" => figures.level = Some(value.parse().expect("a level")),
            "interrupts" => figures.interrupts = number(),
            figure => {
                let value: serde_json::Value = serde_json::from_str(value).expect("a number");
                figures.results["results"][figure] = value;
            }
        }
    }
    (
        figures,
        expect.expect("every seed says what the VMM must do"),
    )
}

#[test]
fn the_figures_corpus_ends_as_each_seed_says() {
    let corpus = include_str!("corpus/figures.txt");
    let seeds: Vec<&str> = corpus
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .collect();
    assert!(seeds.len() >= 20, "the corpus lost its seeds");
    for seed in seeds {
        let (figures, expect) = parse_figures(seed);
        let verdict = judge_figures(&figures).unwrap_or_else(|broken| panic!("{seed}: {broken}"));
        match (expect.as_str(), verdict) {
            ("refused", None) => {}
            ("accepted", Some(_)) => {}
            (claim, Some(claims)) if claim.starts_with("claim:") => {
                let figure = &claim["claim:".len()..];
                assert!(claims.contains(&figure), "{seed}: claims {claims:?}");
            }
            (expect, verdict) => panic!("{seed}: expected {expect}, got {verdict:?}"),
        }
    }
}

fn figure_value() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::json!(0)),
        Just(serde_json::json!(1)),
        Just(serde_json::json!(u64::MAX)),
        any::<u64>().prop_map(|value| serde_json::json!(value)),
        (0u64..10_000_000_000).prop_map(|value| serde_json::json!(value)),
        (-1e12f64..1e20).prop_map(|value| serde_json::json!(value)),
        (0.0f64..2.0).prop_map(|value| serde_json::json!(value)),
    ]
}

fn figures() -> impl Strategy<Value = Figures> {
    let benches = vec![
        Bench::Whileloop,
        Bench::Tick,
        Bench::Vioapic,
        Bench::IoBatch,
        Bench::ExitCost,
        Bench::Ipi,
        Bench::TimerLatency,
    ];
    (
        prop::sample::select(benches),
        any::<prop::sample::Index>(),
        figure_value(),
        prop_oneof![Just(1_000_000_000u64), 1..10_000_000_000u64],
        prop_oneof![Just(500u64), 0..5_000u64],
        prop_oneof![Just(Some(400u64)), Just(None), any::<u64>().prop_map(Some)],
    )
        .prop_map(|(bench, index, value, window_ns, interrupts, vmm_min)| {
            let mut figures = honest(bench);
            let names: Vec<String> = figures.results["results"]
                .as_object()
                .map(|object| object.keys().cloned().collect())
                .unwrap_or_default();
            if !names.is_empty() {
                figures.results["results"][index.get(&names).as_str()] = value;
            }
            figures.evidence.window_ns = window_ns;
            figures.evidence.port_exit_vmm_min_ns = vmm_min;
            figures.interrupts = interrupts;
            figures
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn whatever_figure_the_guest_forges_the_vmm_accepts_only_what_can_be_true(
        figures in figures(),
    ) {
        judge_figures(&figures)?;
    }
}
