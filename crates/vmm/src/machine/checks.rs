//! After the run: how it ended (a thread that failed, hung or panicked,
//! the watchdog, a guest that failed or broke the protocol), then what the
//! guest claims on its shared page, held to what the VMM itself saw: the
//! window by its own clock, KVM's counts, the other vCPUs' exits.

use std::sync::Arc;

use dirq_stats::f64_of;
use vm_memory::{Bytes, GuestAddress};

use super::threads::Stopped;
use super::{ExecOutcome, MachineError, MachineFacts, MachineOutput};
use crate::abi::{self, SharedPage};
use crate::bench::cycles_to_ns;
use crate::config::{Bench, BenchConfig, GuestExec};
use crate::exec::{ExecError, ExecEvidence, VcpuExecStats, NATIVE_MIN_EXITS};
use crate::exits::{ExitSnapshot, ExitSummary, KvmStat, UserspaceExit};
use crate::memory::{self, GuestMemory};
use crate::results::{below_resolution, beyond_window, Evidence};
use crate::run_control::{GuestEnd, Window};

impl<T> Stopped<'_, T> {
    /// The run's output, or why there is none: a thread that failed, hung
    /// or panicked, the watchdog, or a guest that failed or broke the
    /// protocol.
    pub(super) fn output(self) -> Result<MachineOutput<T>, MachineError> {
        let mut hung = Vec::new();
        match self.timers {
            Some(Some(false)) => return Err(MachineError::ThreadPanic("LAPIC timer")),
            Some(None) => hung.push("LAPIC timer".to_string()),
            Some(Some(true)) | None => {}
        }
        let mut rips = Vec::new();
        for (cpu, joined) in self.vcpus.into_iter().enumerate() {
            let Some(joined) = joined else {
                hung.push(format!("vCPU {cpu}"));
                continue;
            };
            let (result, rip) = joined.map_err(|_| MachineError::ThreadPanic("vCPU"))?;
            result?;
            rips.push(match rip {
                Some(rip) => format!("vCPU {cpu} rip {rip:#x}"),
                None => format!("vCPU {cpu} rip unknown"),
            });
        }
        if !hung.is_empty() {
            return Err(MachineError::ThreadsHung {
                threads: hung.join(", "),
            });
        }
        // The counters as the run left them, the whole VM's exits: the
        // window's end if it never closed, and every interrupt KVM injected.
        let lifetime = self.plumbing.accounting.snapshot()?;
        // Another vCPU's meddling explains what the bench then saw (a lost
        // or doubled interrupt, a storm, a stall): it is named first.
        if let Some(window) = self.plumbing.control.window() {
            let end = window.end.as_ref().map_or(&lifetime, |(_, end)| end);
            check_idle_vcpus(self.config.bench(), &window.start.1, end)?;
        }
        // A lost or doubled interrupt is the device's verdict: it names the
        // cause better than the watchdog that the lost interrupt then trips.
        let device = match self.device {
            Some(joined) => Some(joined.map_err(|_| MachineError::ThreadPanic("device"))??),
            None => None,
        };
        let shared: SharedPage = self.memory.read_obj(GuestAddress(abi::SHARED_GPA))?;
        if self.timed_out {
            return Err(MachineError::Timeout {
                watchdog: self.watchdog,
                progress: progress(
                    &shared,
                    self.config,
                    self.plumbing.control.window().is_some(),
                ),
                rips: rips.join(", "),
            });
        }
        let console = self.plumbing.serial.output();
        if self.plumbing.control.guest_end() == Some(GuestEnd::Failed) {
            return Err(MachineError::Guest(describe_failure(&shared)));
        }
        let window = self
            .plumbing
            .control
            .window()
            .ok_or(MachineError::Protocol("opening its measured window"))?;
        let Some((_, end)) = &window.end else {
            return Err(MachineError::Protocol("closing its measured window"));
        };
        if self.config.bench().has_figures() {
            check_window_not_empty(&window, end)?;
        }
        let evidence = evidence(
            &window,
            end,
            &lifetime,
            self.tsc_khz,
            self.injections_counted,
        );
        let stats = window_exec_stats(&window.start.1, end);
        let (exec, samples) = check_claims(
            self.config,
            &shared,
            &self.memory,
            &Observation {
                asked: self.guest_exec,
                stats: &stats,
                tsc_khz: self.tsc_khz,
                window_ns: window_ns(&window),
            },
        )?;
        Ok(MachineOutput {
            facts: MachineFacts {
                exec,
                placement: Arc::unwrap_or_clone(self.plumbing.placement),
                console,
                evidence,
            },
            shared,
            samples,
            window,
            lifetime,
            tsc_khz: self.tsc_khz,
            device,
            trace: self.recorder.map(|recorder| recorder.finish()),
        })
    }
}

/// What the VMM saw of the window (`start` to `end`) and of the whole run
/// (`lifetime`, the counters as it left them), with the TSC rate it gave the
/// guest; injections only where they count every delivery.
fn evidence(
    window: &Window,
    end: &ExitSnapshot,
    lifetime: &ExitSnapshot,
    tsc_khz: u64,
    injections_counted: bool,
) -> Evidence {
    let exits = ExitSummary::between(&window.start.1, end, crate::bench::WINDOW_MARKER_EXITS);
    let io = UserspaceExit::Io;
    Evidence {
        window_ns: window_ns(window),
        tsc_khz,
        injected: injections_counted.then(|| lifetime.kvm_stat(KvmStat::IrqInjections)),
        port_exits: exits.userspace_by_reason.get(&io).copied().unwrap_or(0),
        port_exit_vmm_min_ns: exits.userspace_time.get(&io).map(|time| time.min_ns),
        kernel_exits: exits.kernel,
        pit: None,
    }
}

/// What the VMM itself observed of a run that ended: what the guest's
/// claims are held to.
pub struct Observation<'a> {
    /// The execution mode the VMM told the guest to use.
    pub asked: GuestExec,
    /// KVM's per-vCPU statistics over the measured window.
    pub stats: &'a [VcpuExecStats],
    pub tsc_khz: u64,
    /// Host time from the guest's START to its END.
    pub window_ns: u64,
}

/// The claims of the guest's page that every bench shares, checked against
/// the run's configuration and what the VMM observed: how it executed
/// (`native_cpus`) and its samples (`samples_written` and the samples
/// themselves, in `memory`). Anything else the page holds is each bench's
/// to check.
pub fn check_claims(
    config: &BenchConfig,
    shared: &SharedPage,
    memory: &GuestMemory,
    observed: &Observation,
) -> Result<(ExecOutcome, Vec<u64>), MachineError> {
    let exec = exec_outcome(observed.asked, shared.native_cpus, observed.stats)?;
    let samples = read_samples(
        memory,
        shared.samples_written,
        config.params.expected_samples(),
    )?;
    let timed_from = match config.bench() {
        Bench::TimerLatency => TimedFrom::Deadline,
        _ => TimedFrom::TscRead,
    };
    check_samples_fit(&samples, observed.tsc_khz, observed.window_ns, timed_from)?;
    Ok((exec, samples))
}

/// What a stopped guest had done: its window, interrupts and device
/// events, as it last wrote them, against what the run asked for (from
/// `config`, not from the page the guest could have rewritten).
fn progress(shared: &SharedPage, config: &BenchConfig, window_opened: bool) -> String {
    if !window_opened {
        return "the guest never opened its measured window".into();
    }
    let cpus = usize::try_from(config.common.vcpus)
        .unwrap_or(abi::MAX_CPUS)
        .min(abi::MAX_CPUS);
    let handled: Vec<String> = shared.handled[..cpus].iter().map(u64::to_string).collect();
    let mut text = format!(
        "by then the guest had handled {} interrupts (per vCPU)",
        handled.join("/")
    );
    if shared.ack_seq > 0 {
        text += &format!(" and acknowledged {} device events", shared.ack_seq);
    }
    let mut asked = SharedPage::default();
    config.params.boot(&mut asked);
    if asked.count > 0 {
        text += &format!(", of the {} events the run asked for", asked.count);
    }
    text
}

/// How the guest executed, as KVM's statistics over the window tell it.
/// The guest's claim (`native_cpus`) is never believed alone: a vCPU that
/// admits emulation is taken at its word (that claim can only cost it), one
/// that claims native mode must have been told to switch and must not look
/// emulated to KVM. A window too short to tell keeps the mode asked for.
fn exec_outcome(
    asked: GuestExec,
    native_cpus: u64,
    stats: &[VcpuExecStats],
) -> Result<ExecOutcome, ExecError> {
    let claims_native = |cpu: usize| native_cpus & (1u64 << cpu) != 0;
    let booted = u32::try_from(stats.len())
        .ok()
        .and_then(|vcpus| native_cpus.checked_shr(vcpus));
    if booted.is_some_and(|beyond| beyond != 0) {
        return Err(ExecError::ClaimBeyondVcpus {
            native_cpus,
            vcpus: stats.len(),
        });
    }
    if asked == GuestExec::Hardware {
        return Ok(ExecOutcome {
            guest_exec: asked,
            warning: None,
            unconfirmed: false,
        });
    }
    for (cpu, stats) in stats.iter().enumerate() {
        if !claims_native(cpu) {
            continue;
        }
        if asked != GuestExec::Native {
            return Err(ExecError::UnaskedNativeClaim { cpu, asked });
        }
        if stats.evidence() == ExecEvidence::Emulated {
            return Err(ExecError::ForgedNativeClaim { cpu, stats: *stats });
        }
    }
    let refused: Vec<String> = (0..stats.len())
        .filter(|&cpu| !claims_native(cpu))
        .map(|cpu| cpu.to_string())
        .collect();
    if asked == GuestExec::Emulated {
        return Ok(ExecOutcome {
            guest_exec: asked,
            warning: None,
            unconfirmed: false,
        });
    }
    if !refused.is_empty() {
        return Ok(ExecOutcome {
            guest_exec: GuestExec::Emulated,
            warning: Some(format!(
                "kvm_pvm refused native mode on vCPU {}: the run fell back to emulation",
                refused.join(", ")
            )),
            unconfirmed: false,
        });
    }
    // Every vCPU claims native, none is contradicted: KVM must also have
    // seen one of them run natively, or the mode is the guest's word.
    if stats
        .iter()
        .any(|stats| stats.evidence() == ExecEvidence::Native)
    {
        return Ok(ExecOutcome {
            guest_exec: GuestExec::Native,
            warning: None,
            unconfirmed: false,
        });
    }
    let counts: Vec<String> = stats
        .iter()
        .enumerate()
        .map(|(cpu, stats)| {
            format!(
                "vCPU {cpu}: {} exits, {} emulated instructions",
                stats.exits, stats.insn_emulation
            )
        })
        .collect();
    Ok(ExecOutcome {
        guest_exec: GuestExec::Native,
        warning: Some(format!(
            "the measured window is too short for KVM's counts to tell native execution from emulation ({}; it takes {NATIVE_MIN_EXITS} exits on one vCPU): native is the guest's claim",
            counts.join("; ")
        )),
        unconfirmed: true,
    })
}

/// Refuses a run in which a vCPU the bench leaves halted trapped during
/// the window: beyond the host's interrupts and the VMM's kicks, which
/// find a halted vCPU as well, every exit is the guest's doing there.
fn check_idle_vcpus(
    bench: Bench,
    start: &ExitSnapshot,
    end: &ExitSnapshot,
) -> Result<(), MachineError> {
    if !bench.runs_on_vcpu0_alone() {
        return Ok(());
    }
    let window = ExitSummary::between(start, end, 0);
    for vcpu in window.per_vcpu.iter().skip(1) {
        let stats = &vcpu.kvm_stats;
        let not_its_own = stats.get(KvmStat::IrqExits) + stats.get(KvmStat::SignalExits);
        let exits = vcpu.total.saturating_sub(not_its_own);
        let emulated = stats.get(KvmStat::InsnEmulation);
        if exits == 0 && emulated == 0 {
            continue;
        }
        let mut detail: Vec<String> = stats
            .read
            .iter()
            .filter(|(stat, _)| {
                !matches!(
                    stat,
                    KvmStat::Exits | KvmStat::IrqExits | KvmStat::SignalExits
                )
            })
            .map(|(stat, count)| format!("{stat} {count}"))
            .collect();
        detail.extend(
            vcpu.userspace_by_reason
                .iter()
                .map(|(reason, count)| format!("{count} returned to the VMM as {reason}")),
        );
        return Err(MachineError::Interference {
            cpu: vcpu.cpu,
            bench,
            exits,
            detail: detail.join(", "),
        });
    }
    Ok(())
}

/// Every bench's measured events trap on every backend dirq runs on (an
/// interrupt, a port access, a timer, a halt): a window with no exit at
/// all, its END marker aside, was closed before anything was measured.
fn check_window_not_empty(window: &Window, end: &ExitSnapshot) -> Result<(), MachineError> {
    let exits = ExitSummary::between(&window.start.1, end, crate::bench::WINDOW_MARKER_EXITS);
    if exits.total == 0 {
        return Err(MachineError::EmptyWindow {
            window_ns: window_ns(window),
        });
    }
    Ok(())
}

/// Each vCPU's exits and emulated instructions between `start` and `end`.
fn window_exec_stats(start: &ExitSnapshot, end: &ExitSnapshot) -> Vec<VcpuExecStats> {
    ExitSummary::between(start, end, 0)
        .per_vcpu
        .iter()
        .map(|vcpu| VcpuExecStats {
            exits: vcpu.kvm_stats.get(KvmStat::Exits),
            insn_emulation: vcpu.kvm_stats.get(KvmStat::InsnEmulation),
        })
        .collect()
}

/// The guest's samples. It wrote the count, so a count other than the run
/// asked for is refused: more is forged, fewer (or none) measured less
/// than was asked.
fn read_samples(
    memory: &GuestMemory,
    written: u64,
    expected: u64,
) -> Result<Vec<u64>, MachineError> {
    let miscounted = MachineError::SampleCount {
        written,
        expected,
        capacity: memory::SAMPLES_CAPACITY,
    };
    if written != expected || written > memory::SAMPLES_CAPACITY {
        return Err(miscounted);
    }
    let count = usize::try_from(written).map_err(|_| miscounted)?;
    let mut bytes = vec![0u8; count * 8];
    memory.read_slice(&mut bytes, GuestAddress(memory::SAMPLES_GPA))?;
    Ok(bytes
        .chunks_exact(8)
        .map(|chunk| u64::from_le_bytes(chunk.try_into().unwrap_or_default()))
        .collect())
}

/// The host time from the guest's START to its END, as the VMM saw them.
fn window_ns(window: &Window) -> u64 {
    window.end.as_ref().map_or(0, |(end, _)| {
        u64::try_from((*end - window.start.0).as_nanos()).unwrap_or(u64::MAX)
    })
}

/// Where a bench's samples start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TimedFrom {
    /// A TSC read: a sample spans two reads, never less than one takes.
    TscRead,
    /// A deadline the guest computed (timer-latency): KVM may fire a
    /// TSC-deadline timer early (its `lapic_timer_advance`), and the guest
    /// records such an expiry as 0, so only the median must span a read.
    Deadline,
}

/// Every sample was timed inside the window, so none can be longer, and
/// (`timed_from`) none, or not the median, can be shorter than reading the
/// TSC.
fn check_samples_fit(
    samples: &[u64],
    tsc_khz: u64,
    window_ns: u64,
    timed_from: TimedFrom,
) -> Result<(), MachineError> {
    let refuse = |index: usize, cycles: u64, rule: String| MachineError::SampleBeyondWindow {
        index,
        cycles,
        ns: cycles_to_ns(cycles, tsc_khz),
        rule,
    };
    for (index, &cycles) in samples.iter().enumerate() {
        let ns = cycles_to_ns(cycles, tsc_khz);
        let rule = beyond_window(f64_of(ns), f64_of(window_ns)).or_else(|| match timed_from {
            TimedFrom::TscRead => below_resolution(cycles),
            TimedFrom::Deadline => None,
        });
        if let Some(rule) = rule {
            return Err(refuse(index, cycles, rule));
        }
    }
    if timed_from == TimedFrom::Deadline {
        let mut sorted: Vec<(u64, usize)> = samples.iter().copied().zip(0..).collect();
        sorted.sort_unstable();
        if let Some(&(cycles, index)) = sorted.get(sorted.len() / 2) {
            if let Some(rule) = below_resolution(cycles) {
                return Err(refuse(index, cycles, format!("the median, {rule}")));
            }
        }
    }
    Ok(())
}

fn exception_name(vector: u64) -> &'static str {
    const NAMES: [&str; 21] = [
        "#DE",
        "#DB",
        "NMI",
        "#BP",
        "#OF",
        "#BR",
        "#UD",
        "#NM",
        "#DF",
        "coprocessor overrun",
        "#TS",
        "#NP",
        "#SS",
        "#GP",
        "#PF",
        "reserved",
        "#MF",
        "#AC",
        "#MC",
        "#XM",
        "#VE",
    ];
    usize::try_from(vector)
        .ok()
        .and_then(|vector| NAMES.get(vector))
        .copied()
        .unwrap_or("interrupt")
}

/// The guest's own account of its failure (`failure`, `failure_detail`),
/// whatever those fields hold.
pub fn describe_failure(shared: &SharedPage) -> String {
    let [d0, d1, d2, d3] = shared.failure_detail;
    match shared.failure {
        abi::FAILURE_EXCEPTION => format!(
            "unexpected {} (vector {d0}, error code {d1:#x}) at rip {d2:#x} on CPU {d3}",
            exception_name(d0)
        ),
        abi::FAILURE_MISSING_FEATURE => {
            format!(
                "the guest needs CPUID leaf {d0:#x} bits {d1:#x}, which this vCPU does not offer"
            )
        }
        abi::FAILURE_UNKNOWN_BENCH => format!("the guest does not know benchmark {d0}"),
        abi::FAILURE_ABI_MISMATCH => format!(
            "the guest expects a different boot page (it read magic {d0:#x}, version {d1}; the VMM writes {:#x}, version {})",
            abi::MAGIC,
            abi::VERSION
        ),
        abi::FAILURE_HYPERCALL_REFUSED => format!(
            "KVM refused the guest's hypercall {d0:#x} (it returned {})",
            d1.cast_signed()
        ),
        other => format!("unknown failure code {other}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn an_early_timer_may_read_zero_but_not_for_the_median_and_a_timed_span_never() {
        // 1 GHz TSC, a 1 s window: samples of 2,000 cycles are 2 us.
        let one_early = [2_000, 0, 2_100, 1_900, 2_050];
        check_samples_fit(&one_early, 1_000_000, 1_000_000_000, TimedFrom::Deadline)
            .expect("one expiry at its deadline is honest");
        let refused = check_samples_fit(&one_early, 1_000_000, 1_000_000_000, TimedFrom::TscRead)
            .expect_err("a span between two TSC reads is never 0");
        assert!(
            refused.to_string().starts_with("sample 1 is 0 TSC cycles"),
            "{refused}"
        );
        let mostly_early = [0, 0, 2_000, 0, 0];
        let refused =
            check_samples_fit(&mostly_early, 1_000_000, 1_000_000_000, TimedFrom::Deadline)
                .expect_err("a timer that beats its deadline at the median is not KVM's");
        assert!(
            refused.to_string().contains("the median, shorter than"),
            "{refused}"
        );
    }

    const NATIVE: VcpuExecStats = VcpuExecStats {
        exits: 1502,
        insn_emulation: 901,
    };
    const EMULATED: VcpuExecStats = VcpuExecStats {
        exits: 310,
        insn_emulation: 43217,
    };
    const IDLE: VcpuExecStats = VcpuExecStats {
        exits: 0,
        insn_emulation: 0,
    };

    /// The execution mode `check_claims` reads from a page on which the
    /// guest claims `native_cpus`, KVM having counted `stats` per vCPU.
    fn exec_of(
        asked: GuestExec,
        native_cpus: u64,
        stats: &[VcpuExecStats],
    ) -> Result<ExecOutcome, MachineError> {
        let memory = memory::create_guest_memory().expect("guest RAM");
        let shared = SharedPage {
            native_cpus,
            ..SharedPage::default()
        };
        let observed = Observation {
            asked,
            stats,
            tsc_khz: 1_000_000,
            window_ns: 1_000_000,
        };
        let config = BenchConfig::new(Bench::Whileloop);
        check_claims(&config, &shared, &memory, &observed).map(|(exec, _)| exec)
    }

    #[test]
    fn a_native_claim_that_kvm_saw_emulated_is_refused_naming_both() {
        let err = exec_of(GuestExec::Native, 0b11, &[EMULATED, IDLE]).expect_err("forged claim");
        let message = err.to_string();
        assert!(
            message.starts_with("vCPU 0: the guest claims native execution"),
            "{message}"
        );
        assert!(
            message.contains("KVM emulated 43217 instructions in 310 exits"),
            "{message}"
        );
        let err = exec_of(GuestExec::Emulated, 0b10, &[EMULATED, IDLE])
            .expect_err("never told to switch");
        assert!(err.to_string().starts_with("vCPU 1: "), "{err}");
        let err = exec_of(GuestExec::Native, 0b111, &[NATIVE, NATIVE]).expect_err("a third vCPU");
        assert!(
            err.to_string()
                .contains("never booted (native_cpus 0x7, 2 vCPUs)"),
            "{err}"
        );
    }

    #[test]
    fn native_is_reported_only_for_claims_kvm_does_not_contradict() {
        let native = exec_of(GuestExec::Native, 0b11, &[NATIVE, IDLE]).expect("honest");
        assert_eq!(native.guest_exec, GuestExec::Native);
        assert_eq!(native.warning, None);
        let fell_back = exec_of(GuestExec::Native, 0b01, &[NATIVE, EMULATED]).expect("admitted");
        assert_eq!(fell_back.guest_exec, GuestExec::Emulated);
        assert!(fell_back.warning.expect("says why").contains("vCPU 1"));
        let emulated = exec_of(GuestExec::Emulated, 0, &[EMULATED, IDLE]).expect("asked");
        assert_eq!(emulated.guest_exec, GuestExec::Emulated);
        assert!(!native.unconfirmed && !fell_back.unconfirmed && !emulated.unconfirmed);
    }

    fn kvm(vcpus: &[&[(&str, u64)]]) -> ExitSnapshot {
        ExitSnapshot::of_kvm(
            vcpus
                .iter()
                .map(|stats| {
                    stats
                        .iter()
                        .map(|(name, n)| (name.to_string(), *n))
                        .collect()
                })
                .collect(),
        )
    }

    #[test]
    fn a_vcpu_the_bench_leaves_halted_that_traps_in_the_window_is_named() {
        let start = kvm(&[&[("exits", 10)], &[("exits", 3), ("irq_exits", 1)]]);
        // vCPU 1 took two host interrupts and a kick: not its doing.
        let quiet = kvm(&[
            &[("exits", 900)],
            &[("exits", 6), ("irq_exits", 3), ("signal_exits", 1)],
        ]);
        check_idle_vcpus(Bench::TimerLatency, &start, &quiet).expect("idle");
        // vCPU 1 sent IPIs: exits of its own, and emulated instructions.
        let storm = kvm(&[
            &[("exits", 900)],
            &[
                ("exits", 5_006),
                ("irq_exits", 3),
                ("insn_emulation", 5_000),
            ],
        ]);
        let err = check_idle_vcpus(Bench::Vioapic, &start, &storm).expect_err("interfered");
        let message = err.to_string();
        assert!(
            message.starts_with(
                "vCPU 1, which the vioapic bench leaves halted, made 5001 exits of its own in the measured window (insn_emulation 5000)"
            ),
            "{message}"
        );
        // The ipi bench gives vCPU 1 work of its own.
        check_idle_vcpus(Bench::Ipi, &start, &storm).expect("its responder");
    }

    #[test]
    fn a_window_with_no_exit_but_its_end_measured_nothing() {
        let start = kvm(&[&[("exits", 10)], &[("exits", 3)]]);
        let at_once = Window {
            start: (Instant::now(), start.clone()),
            end: None,
        };
        let only_end = kvm(&[&[("exits", 11)], &[("exits", 3)]]);
        let err = check_window_not_empty(&at_once, &only_end).expect_err("empty");
        assert!(
            err.to_string()
                .ends_with("with no exit on any vCPU in between: it measured nothing there"),
            "{err}"
        );
        let worked = kvm(&[&[("exits", 12)], &[("exits", 3)]]);
        check_window_not_empty(&at_once, &worked).expect("one exit of the bench's");
    }

    #[test]
    fn a_window_too_short_to_tell_leaves_native_as_the_guests_claim() {
        let barely = VcpuExecStats {
            exits: 3,
            insn_emulation: 2,
        };
        let outcome = exec_of(GuestExec::Native, 0b11, &[barely, IDLE]).expect("not refuted");
        assert_eq!(outcome.guest_exec, GuestExec::Native);
        assert!(outcome.unconfirmed);
        let warning = outcome.warning.expect("says so");
        assert!(
            warning.contains("too short for KVM's counts to tell")
                && warning.contains("vCPU 0: 3 exits, 2 emulated instructions")
                && warning.ends_with("native is the guest's claim"),
            "{warning}"
        );
        // Ten interrupts under the emulator: refused, however short.
        let short_emulated = VcpuExecStats {
            exits: 35,
            insn_emulation: 640,
        };
        assert!(exec_of(GuestExec::Native, 0b11, &[short_emulated, IDLE]).is_err());
    }
}
