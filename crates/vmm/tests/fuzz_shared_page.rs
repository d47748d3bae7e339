//! The shared page as a hostile guest may leave it, read back by the VMM
//! (no KVM needed): what every bench reads of it (`machine::check_claims`:
//! the execution mode it claims, its sample count and samples) and the
//! account of a failure never panic, and what they accept obeys the run's
//! configuration and what the VMM observed. The seed corpus,
//! `corpus/shared_page.txt`, is replayed first with the outcome each seed
//! must have; proptest then mutates pages around the run's own values (a
//! failure it finds is persisted beside this file and replayed from then on).

use std::sync::OnceLock;

use dirq_stats::f64_of;
use dirq_vmm::abi::SharedPage;
use dirq_vmm::config::{Bench, BenchConfig, GuestExec, Param};
use dirq_vmm::exec::{ExecEvidence, VcpuExecStats};
use dirq_vmm::machine::{check_claims, describe_failure, Observation};
use dirq_vmm::memory::{self, GuestMemory};
use dirq_vmm::results::GUEST_CLOCK_SLACK;
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
