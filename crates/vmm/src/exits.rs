//! Exit accounting: the exits the run loop sees in userspace, by reason,
//! and KVM's in-kernel counters from each vCPU's binary stats fd.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use dirq_stats::{f64_of, round_u64};
use hdrhistogram::Histogram;

use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

use crate::config::{ConfigError, Named};
use crate::interrupt::Kicker;
use crate::stats::{self, Counters, StatsError, StatsFd};

/// Why KVM_RUN returned to the VMM, named as KVM's `KVM_EXIT_*` reason.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = ConfigError, parse_err_fn = UserspaceExit::unknown)]
pub enum UserspaceExit {
    Io,
    Mmio,
    MsrRead,
    MsrWrite,
    IrqWindow,
    Hlt,
    /// A signal (the VMM kicking its own vCPU) interrupted KVM_RUN.
    #[serde(rename = "intr")]
    #[strum(serialize = "intr")]
    Interrupted,
    Hypercall,
    IoapicEoi,
    Other,
}

impl Named for UserspaceExit {
    const WHAT: &'static str = "userspace exit";
}

/// The longest userspace exit a histogram holds: a minute (a HLT the VMM
/// sleeps through can be long).
const EXIT_TIME_MAX_NS: u64 = 60_000_000_000;

/// Time histograms of one vCPU's userspace exits, one per reason.
type ExitTimes = Vec<Histogram<u64>>;

fn exit_times() -> ExitTimes {
    UserspaceExit::ALL
        .iter()
        .map(|_| {
            Histogram::new_with_bounds(1, EXIT_TIME_MAX_NS, 2)
                .expect("1 ns to a minute at 2 digits is a valid histogram")
        })
        .collect()
}

/// One vCPU's userspace exits, counted and timed by its run loop, and the
/// CPU time of the thread that runs it.
pub struct ExitCounters {
    counts: [AtomicU64; UserspaceExit::ALL.len()],
    /// The reason counted last and not timed yet, plus one (0: none).
    untimed: AtomicUsize,
    times: Mutex<ExitTimes>,
    cpu_clock: OnceLock<libc::clockid_t>,
    /// The tracked thread's id, for its scheduler statistics.
    thread_id: OnceLock<libc::pid_t>,
}

impl Default for ExitCounters {
    fn default() -> Self {
        ExitCounters {
            counts: Default::default(),
            untimed: AtomicUsize::new(0),
            times: Mutex::new(exit_times()),
            cpu_clock: OnceLock::new(),
            thread_id: OnceLock::new(),
        }
    }
}

impl ExitCounters {
    pub fn count(&self, reason: UserspaceExit) {
        self.counts[reason as usize].fetch_add(1, Ordering::Relaxed);
        self.untimed.store(reason as usize + 1, Ordering::Relaxed);
    }

    /// The exit counted last took `elapsed` in the VMM, from KVM_RUN's
    /// return to the next KVM_RUN (`perf kvm stat`'s time is exit to entry;
    /// this is the VMM's part of it).
    pub fn time_last(&self, elapsed: Duration) {
        let Some(reason) = self.untimed.swap(0, Ordering::Relaxed).checked_sub(1) else {
            return;
        };
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let mut times = self
            .times
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(histogram) = times.get_mut(reason) {
            histogram.saturating_record(ns.clamp(1, EXIT_TIME_MAX_NS));
        }
    }

    fn times(&self) -> ExitTimes {
        self.times
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Called on the vCPU's thread before it first runs: from then on the
    /// snapshots include that thread's CPU time (in the guest, in KVM, and
    /// in the VMM's exit handling; sleeping in HLT costs none).
    pub fn track_this_thread(&self) {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: pthread_self is always valid for the calling thread, and
        // pthread_getcpuclockid writes one clockid_t through the pointer.
        if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } == 0 {
            let _ = self.cpu_clock.set(clock);
        }
        // SAFETY: gettid has no preconditions.
        let _ = self.thread_id.set(unsafe { libc::gettid() });
    }

    /// How long the tracked thread was runnable but waited for a host CPU
    /// (the scheduler's run_delay, /proc/<pid>/task/<tid>/schedstat); 0
    /// before it is tracked or where the kernel keeps no such statistic.
    fn run_delay_ns(&self) -> u64 {
        let Some(tid) = self.thread_id.get() else {
            return 0;
        };
        std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
            .ok()
            .and_then(|text| text.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    }

    /// CPU time of the tracked thread so far; 0 before it is tracked. Only
    /// read while the thread lives (the measured window).
    fn cpu_ns(&self) -> u64 {
        let Some(&clock) = self.cpu_clock.get() else {
            return 0;
        };
        let mut time = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through the pointer; the
        // clock belongs to a vCPU thread that is still running.
        if unsafe { libc::clock_gettime(clock, &mut time) } != 0 {
            return 0;
        }
        // A CPU-time clock is never negative.
        let (seconds, ns) = (time.tv_sec.cast_unsigned(), time.tv_nsec.cast_unsigned());
        seconds * 1_000_000_000 + ns
    }

    pub(crate) fn snapshot(&self) -> UserspaceCounts {
        UserspaceExit::ALL
            .iter()
            .map(|&reason| (reason, self.counts[reason as usize].load(Ordering::Relaxed)))
            .collect()
    }
}

pub use dirq_arch::exit::VmxExit;

/// The KVM per-vCPU statistics dirq reads (x86's `struct kvm_vcpu_stat`,
/// named as the binary stats fd names them).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = ConfigError, parse_err_fn = KvmStat::unknown)]
pub enum KvmStat {
    // In name order, so that maps keyed by statistic serialize in the
    // kernel's (alphabetical) order.
    /// Every exit from guest mode.
    Exits,
    /// HLTs before which KVM polled for a wake-up (halt polling).
    HaltAttemptedPoll,
    HaltExits,
    /// Time spent in polls that ended without a wake-up (ns; KVM's
    /// halt_poll_fail_hist holds the same polls by length).
    HaltPollFailNs,
    /// Polls cut short because the poll window changed meanwhile.
    HaltPollInvalid,
    /// Time spent in polls that caught a wake-up (ns; as
    /// halt_poll_success_hist).
    HaltPollSuccessNs,
    /// Polls that caught a wake-up before the vCPU thread slept.
    HaltSuccessfulPoll,
    /// Time the vCPU thread slept in HLT (ns; as halt_wait_hist).
    HaltWaitNs,
    /// HLTs that ended in the vCPU thread's sleep and wake-up.
    HaltWakeup,
    Hypercalls,
    /// Instructions KVM emulated: every guest instruction under
    /// kvm_pvm's emulator, only the trapped ones in its native mode.
    InsnEmulation,
    IoExits,
    IrqExits,
    /// Interrupts KVM injected into the vCPU, whoever raised them (the
    /// VMM's KVM_INTERRUPT, its irqchip, an IPI); not those APICv or
    /// AVIC post without an injection.
    IrqInjections,
    IrqWindowExits,
    /// MMIO accesses KVM passes to userspace.
    MmioExits,
    NmiWindowExits,
    /// Guest page faults KVM handled.
    PfTaken,
    /// Returns to userspace that the VMM's request for an interrupt
    /// window caused.
    RequestIrqExits,
    /// Returns to userspace that a signal caused.
    SignalExits,
}

impl Named for KvmStat {
    const WHAT: &'static str = "KVM statistic";
}

impl KvmStat {
    /// The VM exit the statistic counts. The others count no exit of their
    /// own: `insn_emulation` counts emulated instructions, `signal_exits`
    /// and `request_irq_exits` count returns to userspace whose VM exit
    /// another statistic already counted, `exits` counts them all (`mmio_exits`
    /// are MMIO accesses KVM passes to userspace, which VMX reports as EPT
    /// misconfigurations).
    pub fn exit(self) -> Option<VmxExit> {
        match self {
            KvmStat::HaltExits => Some(VmxExit::Hlt),
            KvmStat::IoExits => Some(VmxExit::IoInstruction),
            KvmStat::IrqExits => Some(VmxExit::ExternalInterrupt),
            KvmStat::IrqWindowExits => Some(VmxExit::InterruptWindow),
            KvmStat::NmiWindowExits => Some(VmxExit::NmiWindow),
            KvmStat::MmioExits => Some(VmxExit::EptMisconfig),
            KvmStat::Hypercalls => Some(VmxExit::Vmcall),
            KvmStat::Exits
            | KvmStat::RequestIrqExits
            | KvmStat::SignalExits
            | KvmStat::InsnEmulation
            | KvmStat::IrqInjections
            | KvmStat::PfTaken
            | KvmStat::HaltAttemptedPoll
            | KvmStat::HaltPollFailNs
            | KvmStat::HaltPollInvalid
            | KvmStat::HaltPollSuccessNs
            | KvmStat::HaltSuccessfulPoll
            | KvmStat::HaltWaitNs
            | KvmStat::HaltWakeup => None,
        }
    }

    /// Whether [`ExitSummary::by_reason`] keeps the statistic: those that
    /// count exits by category and the exit-related events KVM counts
    /// besides (emulations, halt polls and wake-ups; not the total, not
    /// page faults, not injections).
    fn is_exit_category(self) -> bool {
        !matches!(
            self,
            KvmStat::Exits | KvmStat::PfTaken | KvmStat::IrqInjections
        )
    }
}

impl From<UserspaceExit> for VmxExit {
    /// The VM exit behind each return of KVM_RUN to the VMM.
    fn from(exit: UserspaceExit) -> Self {
        match exit {
            UserspaceExit::Io => VmxExit::IoInstruction,
            UserspaceExit::Mmio => VmxExit::EptMisconfig,
            UserspaceExit::MsrRead => VmxExit::MsrRead,
            UserspaceExit::MsrWrite => VmxExit::MsrWrite,
            UserspaceExit::IrqWindow => VmxExit::InterruptWindow,
            UserspaceExit::Hlt => VmxExit::Hlt,
            // The VMM's kick is a signal: an IPI to the vCPU's core.
            UserspaceExit::Interrupted => VmxExit::ExternalInterrupt,
            UserspaceExit::Hypercall => VmxExit::Vmcall,
            UserspaceExit::IoapicEoi => VmxExit::EoiInduced,
            UserspaceExit::Other => VmxExit::Other,
        }
    }
}

/// One vCPU's KVM statistics: those dirq reads, by [`KvmStat`], and the rest
/// of what the kernel exports under its own names, which only the text
/// report lists (kernels add and rename statistics; none is looked up).
/// Serialized as the kernel's one map of name to count.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Counters", into = "Counters")]
pub struct KvmStats {
    pub read: BTreeMap<KvmStat, u64>,
    pub unread: Counters,
}

impl KvmStats {
    /// The statistic's count; 0 where it did not move.
    pub fn get(&self, stat: KvmStat) -> u64 {
        self.read.get(&stat).copied().unwrap_or(0)
    }

    fn retain_nonzero(&mut self) {
        self.read.retain(|_, value| *value > 0);
        self.unread.retain(|_, value| *value > 0);
    }
}

impl From<Counters> for KvmStats {
    fn from(counters: Counters) -> Self {
        let mut stats = KvmStats::default();
        for (name, value) in counters {
            match name.parse::<KvmStat>() {
                Ok(stat) => {
                    stats.read.insert(stat, value);
                }
                Err(_) => {
                    stats.unread.insert(name, value);
                }
            }
        }
        stats
    }
}

impl From<KvmStats> for Counters {
    fn from(stats: KvmStats) -> Self {
        let read = stats
            .read
            .into_iter()
            .map(|(stat, value)| (stat.name().to_string(), value));
        stats.unread.into_iter().chain(read).collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExitsError {
    #[error("cannot read vCPU {cpu}'s KVM stats")]
    Stats {
        cpu: usize,
        #[source]
        source: StatsError,
    },
}

/// Userspace exits counted by reason.
pub type UserspaceCounts = BTreeMap<UserspaceExit, u64>;

/// Counters of every vCPU at one instant.
#[derive(Clone, Debug, Default)]
pub struct ExitSnapshot {
    userspace: Vec<UserspaceCounts>,
    userspace_times: Vec<ExitTimes>,
    kernel: Vec<Counters>,
    cpu_ns: Vec<u64>,
    run_delay_ns: Vec<u64>,
    kicks: Vec<u64>,
}

impl ExitSnapshot {
    /// A snapshot of KVM's counters alone, one map per vCPU (tests).
    #[cfg(test)]
    pub(crate) fn of_kvm(kernel: Vec<Counters>) -> Self {
        ExitSnapshot {
            userspace: kernel.iter().map(|_| UserspaceCounts::new()).collect(),
            userspace_times: Vec::new(),
            cpu_ns: kernel.iter().map(|_| 0).collect(),
            run_delay_ns: kernel.iter().map(|_| 0).collect(),
            kicks: kernel.iter().map(|_| 0).collect(),
            kernel,
        }
    }

    /// KVM's count of `stat` on each vCPU since it was created.
    pub fn kvm_stat(&self, stat: KvmStat) -> Vec<u64> {
        self.kernel
            .iter()
            .map(|counters| counters.get(stat.name()).copied().unwrap_or(0))
            .collect()
    }
}

/// How long one kind of userspace exit kept the VMM, over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitTime {
    pub samples: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

impl ExitTime {
    /// The exits recorded in `after` but not in `before`; `None` if none.
    fn between(before: Option<&Histogram<u64>>, after: &Histogram<u64>) -> Option<Self> {
        let mut window = after.clone();
        if let Some(before) = before {
            window.subtract(before).ok()?;
        }
        (!window.is_empty()).then(|| ExitTime {
            samples: window.len(),
            total_ns: round_u64(window.mean() * f64_of(window.len())),
            min_ns: window.min(),
            max_ns: window.max(),
        })
    }

    /// Both together: `self` then `other`.
    pub fn merge(self, other: ExitTime) -> ExitTime {
        if self.samples == 0 {
            return other;
        }
        ExitTime {
            samples: self.samples + other.samples,
            total_ns: self.total_ns + other.total_ns,
            min_ns: self.min_ns.min(other.min_ns),
            max_ns: self.max_ns.max(other.max_ns),
        }
    }
}

/// Every vCPU's counters: the run loops', KVM's and the kicks the VMM sent.
pub struct ExitAccounting {
    pub counters: Vec<ExitCounters>,
    stats: Vec<StatsFd>,
    kicker: Arc<Kicker>,
}

impl ExitAccounting {
    pub fn new(stats: Vec<StatsFd>, kicker: Arc<Kicker>) -> Self {
        ExitAccounting {
            counters: stats.iter().map(|_| ExitCounters::default()).collect(),
            stats,
            kicker,
        }
    }

    /// Every vCPU's KVM statistics now, by vCPU.
    pub fn kvm_stats(&self) -> Result<Vec<KvmStats>, ExitsError> {
        self.stats
            .iter()
            .enumerate()
            .map(|(cpu, fd)| {
                fd.read()
                    .map(KvmStats::from)
                    .map_err(|source| ExitsError::Stats { cpu, source })
            })
            .collect()
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
            userspace_times: self.counters.iter().map(ExitCounters::times).collect(),
            kernel,
            cpu_ns: self.counters.iter().map(ExitCounters::cpu_ns).collect(),
            run_delay_ns: self
                .counters
                .iter()
                .map(ExitCounters::run_delay_ns)
                .collect(),
            kicks: (0..self.counters.len())
                .map(|cpu| self.kicker.sent(cpu))
                .collect(),
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
    pub userspace_by_reason: UserspaceCounts,
    /// How long each reason's exits kept the VMM.
    #[serde(default)]
    pub userspace_time: BTreeMap<UserspaceExit, ExitTime>,
    /// Every scalar KVM stat that moved (exits, irq_injections, halt_wakeup, ...).
    pub kvm_stats: KvmStats,
    /// CPU seconds the vCPU's thread burned.
    pub cpu_s: f64,
    /// Seconds the vCPU's thread was runnable but waited for a host CPU
    /// (the scheduler's run_delay): the host's other work, which no floor
    /// of the probe's includes.
    #[serde(default)]
    pub waited_s: f64,
    /// Signals the VMM sent to get the vCPU out of KVM_RUN (userspace
    /// irqchip): at most one per entry, however fast its device raises.
    #[serde(default)]
    pub kicks: u64,
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
    /// KVM's per-category exit counters (`io_exits`, `halt_exits`, `irq_exits`, ...)
    /// and the other exit-related events it counts (`insn_emulation`, `hypercalls`).
    pub by_reason: BTreeMap<KvmStat, u64>,
    /// The exits themselves by VMX exit reason (mapped from KVM's
    /// statistics by [`KvmStat::exit`]), with what no statistic claims as
    /// [`VmxExit::Other`]: sums to `total`.
    pub by_category: BTreeMap<VmxExit, u64>,
    /// Userspace exits by reason, summed over vCPUs.
    pub userspace_by_reason: UserspaceCounts,
    /// How long each reason's userspace exits kept the VMM, over all vCPUs.
    #[serde(default)]
    pub userspace_time: BTreeMap<UserspaceExit, ExitTime>,
    /// CPU seconds all vCPU threads burned: what polling (in KVM or in the
    /// guest) costs the host.
    pub vcpu_cpu_s: f64,
    /// Seconds the vCPU threads waited for a host CPU, all together.
    #[serde(default)]
    pub vcpu_waited_s: f64,
    /// Kicks sent to all vCPUs.
    #[serde(default)]
    pub kicks: u64,
    pub per_vcpu: Vec<VcpuExits>,
    /// The VM's exits outside the measured window (its boot, the guest's
    /// setup, what it did before and after), by VMX reason: what an
    /// observer of the whole VM (`dirq observe`) sees besides the window.
    #[serde(default)]
    pub outside_window: BTreeMap<VmxExit, u64>,
}

impl ExitSummary {
    /// The exits between two snapshots, minus `excluded` userspace I/O exits
    /// on vCPU 0 (the guest's own window markers).
    pub fn between(before: &ExitSnapshot, after: &ExitSnapshot, excluded_markers: u64) -> Self {
        let mut per_vcpu = Vec::new();
        for (cpu, (user_after, kernel_after)) in
            after.userspace.iter().zip(&after.kernel).enumerate()
        {
            let mut userspace_by_reason = stats::delta(
                before.userspace.get(cpu).unwrap_or(&UserspaceCounts::new()),
                user_after,
            );
            let mut kvm_stats = KvmStats::from(stats::delta(
                before.kernel.get(cpu).unwrap_or(&Counters::new()),
                kernel_after,
            ));
            if cpu == 0 && excluded_markers > 0 {
                let markers = |value: Option<&mut u64>| {
                    if let Some(value) = value {
                        *value = value.saturating_sub(excluded_markers);
                    }
                };
                markers(userspace_by_reason.get_mut(&UserspaceExit::Io));
                for stat in [KvmStat::IoExits, KvmStat::Exits] {
                    markers(kvm_stats.read.get_mut(&stat));
                }
            }
            userspace_by_reason.retain(|_, value| *value > 0);
            kvm_stats.retain_nonzero();
            // A kick that lands before KVM_RUN enters the guest returns EINTR
            // without any exit; KVM's signal_exits counts those that did exit.
            let interrupted = userspace_by_reason
                .get(&UserspaceExit::Interrupted)
                .copied()
                .unwrap_or(0);
            let signal_exits = kvm_stats.get(KvmStat::SignalExits);
            let userspace: u64 = userspace_by_reason.values().sum::<u64>() - interrupted
                + interrupted.min(signal_exits);
            let total = kvm_stats.get(KvmStat::Exits).max(userspace);
            let cpu_ns = |snapshot: &ExitSnapshot| snapshot.cpu_ns.get(cpu).copied().unwrap_or(0);
            let waited_ns =
                |snapshot: &ExitSnapshot| snapshot.run_delay_ns.get(cpu).copied().unwrap_or(0);
            let kicks = |snapshot: &ExitSnapshot| snapshot.kicks.get(cpu).copied().unwrap_or(0);
            let before_times = before.userspace_times.get(cpu);
            let userspace_time = after
                .userspace_times
                .get(cpu)
                .into_iter()
                .flat_map(|times| times.iter().enumerate())
                .filter_map(|(reason, after)| {
                    let before = before_times.and_then(|times| times.get(reason));
                    Some((
                        *UserspaceExit::ALL.get(reason)?,
                        ExitTime::between(before, after)?,
                    ))
                })
                .collect();
            per_vcpu.push(VcpuExits {
                cpu,
                total,
                userspace,
                kernel: total - userspace,
                userspace_by_reason,
                userspace_time,
                kvm_stats,
                cpu_s: f64_of(cpu_ns(after).saturating_sub(cpu_ns(before))) / 1e9,
                waited_s: f64_of(waited_ns(after).saturating_sub(waited_ns(before))) / 1e9,
                kicks: kicks(after).saturating_sub(kicks(before)),
            });
        }
        let mut by_reason = BTreeMap::new();
        let mut userspace_by_reason = BTreeMap::new();
        let mut userspace_time: BTreeMap<UserspaceExit, ExitTime> = BTreeMap::new();
        for vcpu in &per_vcpu {
            for (&reason, time) in &vcpu.userspace_time {
                let slot = userspace_time.entry(reason).or_default();
                *slot = slot.merge(*time);
            }
            for (&stat, value) in &vcpu.kvm_stats.read {
                if stat.is_exit_category() {
                    *by_reason.entry(stat).or_insert(0) += value;
                }
            }
            for (&reason, value) in &vcpu.userspace_by_reason {
                *userspace_by_reason.entry(reason).or_insert(0) += value;
            }
        }
        let total = per_vcpu.iter().map(|v| v.total).sum();
        ExitSummary {
            by_category: categorize(&by_reason, total),
            total,
            userspace: per_vcpu.iter().map(|v| v.userspace).sum(),
            kernel: per_vcpu.iter().map(|v| v.kernel).sum(),
            by_reason,
            userspace_by_reason,
            userspace_time,
            vcpu_cpu_s: per_vcpu.iter().map(|v| v.cpu_s).sum(),
            vcpu_waited_s: per_vcpu.iter().map(|v| v.waited_s).sum(),
            kicks: per_vcpu.iter().map(|v| v.kicks).sum(),
            per_vcpu,
            outside_window: BTreeMap::new(),
        }
    }

    /// Sets what of the VM's `lifetime` (its counters from creation to
    /// the guest's stop) lies outside this window.
    pub fn with_lifetime(mut self, lifetime: &ExitSnapshot) -> Self {
        let whole = ExitSummary::between(&ExitSnapshot::default(), lifetime, 0);
        self.outside_window = whole
            .by_category
            .iter()
            .map(|(&exit, &count)| {
                let inside = self.by_category.get(&exit).copied().unwrap_or(0);
                (exit, count.saturating_sub(inside))
            })
            .filter(|(_, outside)| *outside > 0)
            .collect();
        self
    }
}

/// KVM's stats also count events that are not exits (e.g. `insn_emulation`,
/// one per instruction KVM emulated): they are left out, so the categories
/// sum to the exits.
fn categorize(by_reason: &BTreeMap<KvmStat, u64>, total: u64) -> BTreeMap<VmxExit, u64> {
    let mut categories: BTreeMap<VmxExit, u64> = BTreeMap::new();
    for (stat, count) in by_reason {
        if let Some(exit) = stat.exit() {
            *categories.entry(exit).or_insert(0) += count;
        }
    }
    let other = total.saturating_sub(categories.values().sum());
    if other > 0 {
        categories.insert(VmxExit::Other, other);
    }
    categories
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::stats::counters_of as counters;

    fn userspace(pairs: &[(UserspaceExit, u64)]) -> UserspaceCounts {
        pairs.iter().copied().collect()
    }

    /// One vCPU's snapshot of `io` I/O and `hlt` HLT exits to userspace
    /// among KVM's `exits`.
    fn io_and_hlt(io: u64, hlt: u64, exits: u64) -> ExitSnapshot {
        ExitSnapshot {
            userspace: vec![userspace(&[
                (UserspaceExit::Io, io),
                (UserspaceExit::Hlt, hlt),
            ])],
            kernel: vec![counters(&[
                ("exits", exits),
                ("io_exits", io),
                ("halt_exits", hlt),
            ])],
            ..ExitSnapshot::default()
        }
    }

    #[test]
    fn window_counts_exits_between_snapshots_without_the_end_marker() {
        let before = ExitSnapshot {
            cpu_ns: vec![1_000_000_000],
            run_delay_ns: vec![100_000_000],
            kicks: vec![3],
            ..io_and_hlt(5, 1, 10)
        };
        let after = ExitSnapshot {
            cpu_ns: vec![1_250_000_000],
            run_delay_ns: vec![150_000_000],
            kicks: vec![8],
            ..io_and_hlt(6, 101, 160)
        };
        let summary = ExitSummary::between(&before, &after, 1);
        assert_eq!(summary.userspace, 100);
        assert_eq!(summary.total, 149);
        assert_eq!(summary.kernel, 49);
        assert_eq!(summary.by_reason.get(&KvmStat::HaltExits), Some(&100));
        assert_eq!(
            summary.by_reason.get(&KvmStat::IoExits),
            None,
            "the marker was the only I/O exit"
        );
        assert_eq!(
            summary.userspace_by_reason.get(&UserspaceExit::Hlt),
            Some(&100)
        );
        assert_eq!(summary.vcpu_cpu_s, 0.25);
        assert_eq!(summary.vcpu_waited_s, 0.05);
        assert_eq!(summary.kicks, 5);
        // 149 exits: 100 HLT, 49 with no KVM category.
        assert_eq!(summary.by_category.get(&VmxExit::Hlt), Some(&100));
        assert_eq!(summary.by_category.get(&VmxExit::Other), Some(&49));

        // The VM ran on after the window: 2 more I/O exits, 3 more HLTs.
        let lifetime = ExitSnapshot {
            cpu_ns: vec![1_300_000_000],
            run_delay_ns: vec![60_000_000],
            kicks: vec![6],
            ..io_and_hlt(8, 104, 170)
        };
        let outside = summary.with_lifetime(&lifetime).outside_window;
        // Boot's 5 I/O and 1 HLT, the marker, then 2 I/O and 3 HLT after.
        assert_eq!(outside.get(&VmxExit::IoInstruction), Some(&8));
        assert_eq!(outside.get(&VmxExit::Hlt), Some(&4));
        assert_eq!(outside.get(&VmxExit::Other), Some(&9), "{outside:?}");
        assert_eq!(outside.values().sum::<u64>(), 170 - 149);
    }

    #[test]
    fn categories_leave_out_stats_that_are_not_exits() {
        let by_reason = BTreeMap::from([
            (KvmStat::IoExits, 1000),
            (KvmStat::IrqWindowExits, 500),
            (KvmStat::SignalExits, 300),
            (KvmStat::InsnEmulation, 9000),
        ]);
        let categories = categorize(&by_reason, 2000);
        assert_eq!(categories.get(&VmxExit::IoInstruction), Some(&1000));
        assert_eq!(categories.get(&VmxExit::InterruptWindow), Some(&500));
        // Neither emulations nor returns to userspace are exits of their own.
        assert_eq!(categories.len(), 3, "{categories:?}");
        assert_eq!(categories.get(&VmxExit::Other), Some(&500));
        assert_eq!(categories.values().sum::<u64>(), 2000);
    }

    #[test]
    fn every_exit_statistic_and_userspace_exit_has_one_vmx_name() {
        let mut claimed = BTreeMap::new();
        for &stat in KvmStat::ALL {
            assert_eq!(stat.name().parse::<KvmStat>().ok(), Some(stat));
            if let Some(exit) = stat.exit() {
                assert!(stat.is_exit_category(), "{stat} counts exits");
                assert_eq!(claimed.insert(exit, stat), None, "{exit} twice");
            }
        }
        assert_eq!(KvmStat::InsnEmulation.exit(), None);
        assert_eq!(KvmStat::MmioExits.exit(), Some(VmxExit::EptMisconfig));
        assert!(
            !claimed.contains_key(&VmxExit::Other),
            "OTHER is no statistic's"
        );
        let names: Vec<&str> = KvmStat::ALL.iter().map(|stat| stat.name()).collect();
        assert!(names.is_sorted(), "declared in name order: {names:?}");
        assert_eq!(VmxExit::from(UserspaceExit::Hlt), VmxExit::Hlt);
    }

    #[test]
    fn kicks_before_entry_are_not_exits() {
        let before = ExitSnapshot {
            userspace: vec![UserspaceCounts::new()],
            userspace_times: Vec::new(),
            kernel: vec![Counters::new()],
            cpu_ns: vec![0],
            ..ExitSnapshot::default()
        };
        let after = ExitSnapshot {
            userspace: vec![userspace(&[
                (UserspaceExit::Interrupted, 10),
                (UserspaceExit::MsrWrite, 4),
            ])],
            userspace_times: Vec::new(),
            kernel: vec![counters(&[("exits", 7), ("signal_exits", 3)])],
            cpu_ns: vec![0],
            ..ExitSnapshot::default()
        };
        let summary = ExitSummary::between(&before, &after, 0);
        // 4 MSR writes plus the 3 kicks that KVM saw leave the guest.
        assert_eq!(summary.userspace, 7);
        assert_eq!(summary.total, 7);
        assert_eq!(summary.kernel, 0);
        assert_eq!(
            summary.userspace_by_reason.get(&UserspaceExit::Interrupted),
            Some(&10)
        );
    }

    #[test]
    fn the_run_loop_times_each_counted_exit_and_a_window_keeps_only_its_own() {
        let counters = ExitCounters::default();
        let snapshot = |counters: &ExitCounters| ExitSnapshot {
            userspace: vec![counters.snapshot()],
            userspace_times: vec![counters.times()],
            kernel: vec![Counters::new()],
            cpu_ns: vec![0],
            ..ExitSnapshot::default()
        };
        counters.count(UserspaceExit::Io);
        counters.time_last(Duration::from_micros(5));
        let before = snapshot(&counters);
        for us in [10, 20] {
            counters.count(UserspaceExit::MsrWrite);
            counters.time_last(Duration::from_micros(us));
        }
        // Nothing was counted since: nothing to time.
        counters.time_last(Duration::from_secs(1));
        let summary = ExitSummary::between(&before, &snapshot(&counters), 0);
        let eoi = summary.userspace_time[&UserspaceExit::MsrWrite];
        assert_eq!(eoi.samples, 2);
        assert!((9_900..=10_100).contains(&eoi.min_ns), "{eoi:?}");
        assert!((19_800..=20_200).contains(&eoi.max_ns), "{eoi:?}");
        assert!((29_500..=30_500).contains(&eoi.total_ns), "{eoi:?}");
        assert!(
            !summary.userspace_time.contains_key(&UserspaceExit::Io),
            "{summary:?}"
        );
    }

    #[test]
    fn exit_maps_serialize_with_the_kernels_and_vmxs_names_and_read_back() {
        let json = serde_json::json!({
            "cpu": 0, "total": 630, "userspace": 0, "kernel": 630,
            "userspace_by_reason": {"hlt": 2},
            "kvm_stats": {"exits": 630, "fpu_reload": 1, "insn_emulation": 160,
                          "irq_exits": 153, "req_event": 355},
            "cpu_s": 0.05
        });
        let vcpu: VcpuExits = serde_json::from_value(json.clone()).expect("parses");
        assert_eq!(vcpu.kvm_stats.get(KvmStat::IrqExits), 153);
        assert_eq!(vcpu.kvm_stats.get(KvmStat::HaltExits), 0);
        assert_eq!(vcpu.kvm_stats.unread.get("req_event"), Some(&355));
        assert!(!vcpu.kvm_stats.unread.contains_key("exits"));
        let mut back = serde_json::to_value(&vcpu).expect("serializes");
        // Fields newer than the JSON read back as their defaults.
        let fields = back.as_object_mut().expect("an object");
        for newer in ["userspace_time", "waited_s", "kicks"] {
            fields.remove(newer);
        }
        assert_eq!(back, json);

        let summary = ExitSummary {
            total: 630,
            userspace: 0,
            kernel: 630,
            by_reason: BTreeMap::from([(KvmStat::IrqExits, 153), (KvmStat::InsnEmulation, 160)]),
            by_category: BTreeMap::from([(VmxExit::ExternalInterrupt, 153), (VmxExit::Other, 477)]),
            userspace_by_reason: UserspaceCounts::new(),
            userspace_time: BTreeMap::new(),
            vcpu_cpu_s: 0.05,
            vcpu_waited_s: 0.0,
            kicks: 0,
            per_vcpu: vec![vcpu],
            outside_window: BTreeMap::new(),
        };
        let json = serde_json::to_value(&summary).expect("serializes");
        assert_eq!(
            json["by_reason"],
            serde_json::json!({"insn_emulation": 160, "irq_exits": 153})
        );
        assert_eq!(
            json["by_category"],
            serde_json::json!({"EXTERNAL_INTERRUPT": 153, "OTHER": 477})
        );
        let back: ExitSummary = serde_json::from_value(json).expect("parses");
        assert_eq!(back, summary);
    }
}
