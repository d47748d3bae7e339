//! Watching any running VM from outside, as kvm_stat and `perf kvm stat`
//! do, whatever VMM runs it (QEMU, Firecracker, cloud-hypervisor, crosvm,
//! dirq's own `run`): its KVM statistics ([`kvm_stats`]), KVM's
//! tracepoints through perf_event_open ([`trace`], decoded by their format
//! files in [`format`] and [`event`]), and what they add up to
//! ([`account`]): exits by reason and cause, the guest instructions behind
//! them, interrupts by vector and source, halts.
//!
//! Nothing is asked of the VMM: the VMs are found in /proc ([`vm`]).

pub mod account;
pub mod event;
pub mod format;
pub mod insn;
pub mod kvm_stats;
pub mod symbols;
pub mod trace;
pub mod vm;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use dirq_arch::exit::VmxExit;
use dirq_arch::exit_cause::{ExitCause, ExitClass};
use serde::{Deserialize, Serialize};

use account::{CauseTally, ExitRow, HaltTally, HotSpot, SourceKind, Timing, Traced, VmAccount};
use event::{Tracepoint, Unusable};
use kvm_stats::{Readings, StatsOrigin, VmStats};
use trace::{monotonic_ns, TraceError, TraceSession, Tracefs};
use vm::{Pidfd, VmError, VmId, VmInfo};

use crate::config::Named;
use crate::exits::KvmStat;

/// What to watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every VM of one VMM process; the VMM may be starting: its first VM
    /// is waited for this long.
    Process(u32, std::time::Duration),
    /// One VM, as debugfs names it.
    Vm(VmId),
    /// Every VM on the host, including those that start while watching.
    All,
}

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error(transparent)]
    Vm(#[from] VmError),
    #[error("no KVM VM is running on this host")]
    NoVms,
    #[error(
        "nothing of {vms} can be read: its KVM statistics ({stats}) and KVM's tracepoints ({trace})"
    )]
    NothingReadable {
        vms: String,
        stats: String,
        #[source]
        trace: TraceError,
    },
}

impl ObserveError {
    /// Whether the failure is a missing permission (not a wrong target).
    pub fn is_permission(&self) -> bool {
        matches!(
            self,
            ObserveError::Vm(VmError::Permission { .. })
                | ObserveError::NothingReadable {
                    trace: TraceError::Permission { .. } | TraceError::Mount { .. },
                    ..
                }
        )
    }
}

/// The tracepoints the observer reads.
pub const TRACEPOINTS: &[Tracepoint] = Tracepoint::ALL;

const DEBUGFS: &str = "/sys/kernel/debug";

/// The hot spots kept in an observation, by exits and by time.
const HOT_SPOTS_SHOWN: usize = 20;

struct Watched {
    info: VmInfo,
    stats: VmStats,
    first: Readings,
    last: Readings,
    account: VmAccount,
    pidfd: Option<Pidfd>,
    started_ns: u64,
    ended_ns: Option<u64>,
    /// Traps, and ordinary ones, counted at the last refresh.
    traps_at_refresh: (u64, u64),
    /// Refreshes in a row in which it ran under the emulator.
    emulating_refreshes: u32,
}

/// Emulated instructions in one refresh from which a guest whose traps are
/// mostly ordinary instructions is taken to run under KVM's emulator:
/// kvm_pvm's native mode traps only privileged instructions and memory
/// accesses KVM must emulate, never an ADD or a JMP.
const EMULATED_EXECUTION_TRAPS: u64 = 10_000;

/// Refreshes in a row that must look so: a guest that boots under the
/// emulator and then runs natively (dirq's own) emulates tens of thousands
/// of ordinary instructions once, within a second.
const EMULATED_EXECUTION_REFRESHES: u32 = 3;

impl Watched {
    fn attach(info: VmInfo, debugfs_kvm: Option<&Path>) -> Watched {
        let stats = VmStats::attach(&info, debugfs_kvm);
        let first = stats.read();
        let mut account = VmAccount::new(info.vfio);
        if let Some(kvm) = debugfs_kvm {
            for (tid, vcpu) in vm::vcpu_threads(kvm, info.id) {
                account.set_vcpu_thread(tid, vcpu);
            }
        }
        Watched {
            pidfd: Pidfd::open(info.id.pid).ok(),
            last: first.clone(),
            first,
            stats,
            account,
            info,
            started_ns: monotonic_ns(),
            ended_ns: None,
            traps_at_refresh: (0, 0),
            emulating_refreshes: 0,
        }
    }
}

impl Watched {
    /// Takes up the vCPUs and statistics fds the VMM created since.
    fn follow(&mut self, debugfs_kvm: Option<&Path>) {
        let Ok(now) = vm::vm(self.info.id) else {
            return;
        };
        if now.stats_fds != self.info.stats_fds {
            let had_none = matches!(self.stats.origin, StatsOrigin::Unavailable(_));
            self.stats = VmStats::attach(&now, debugfs_kvm);
            if had_none {
                // Counted from now: what came before was not watched.
                self.first = self.stats.read();
            }
        }
        if now.vcpu_fds != self.info.vcpu_fds {
            if let Some(kvm) = debugfs_kvm {
                for (tid, vcpu) in vm::vcpu_threads(kvm, now.id) {
                    self.account.set_vcpu_thread(tid, vcpu);
                }
            }
        }
        self.info = now;
    }
}

/// A running observation.
pub struct Observer {
    target: Target,
    trace: Option<TraceSession>,
    trace_error: Option<String>,
    debugfs_kvm: Option<PathBuf>,
    /// File systems mounted to observe (said in the observation).
    pub mounted: Vec<String>,
    vms: Vec<Watched>,
    /// Thread -> whose its events are.
    owners: HashMap<u32, Owner>,
    /// One VM on the whole host: events of kernel threads (irqfd's
    /// workers) are its.
    sole_vm: bool,
    unattributed: u64,
    started_ns: u64,
}

impl Observer {
    /// Finds the target's VMs, attaches to their statistics and opens the
    /// tracepoints; fails only when nothing at all can be read.
    pub fn start(target: Target) -> Result<Observer, ObserveError> {
        let found = match target {
            Target::Process(pid, patience) => vm::wait_for_vmm(pid, patience)?,
            Target::Vm(id) => vec![vm::vm(id)?],
            Target::All => vm::all_vms(),
        };
        if found.is_empty() {
            return Err(ObserveError::NoVms);
        }
        let mut mounted = Vec::new();
        let debugfs_kvm = debugfs_kvm(&mut mounted);
        let (trace, trace_error) = match Tracefs::locate().and_then(|tracefs| {
            if tracefs.mounted_here {
                mounted.push(format!("tracefs at {}", tracefs.root().display()));
            }
            TraceSession::open(&tracefs, TRACEPOINTS)
        }) {
            Ok(session) => (Some(session), None),
            Err(error) => (None, Some(error)),
        };
        let vms: Vec<Watched> = found
            .into_iter()
            .map(|info| Watched::attach(info, debugfs_kvm.as_deref()))
            .collect();
        if let Some(error) = trace_error {
            let unreadable: Vec<String> = vms
                .iter()
                .filter_map(|vm| match &vm.stats.origin {
                    StatsOrigin::Unavailable(why) => Some(why.clone()),
                    _ => None,
                })
                .collect();
            if unreadable.len() == vms.len() {
                return Err(ObserveError::NothingReadable {
                    vms: vms
                        .iter()
                        .map(|vm| format!("VM {} ({})", vm.info.id, vm.info.comm))
                        .collect::<Vec<_>>()
                        .join(", "),
                    stats: unreadable.join("; "),
                    trace: error,
                });
            }
            return Ok(Observer::new(
                target,
                None,
                Some(error.to_string()),
                debugfs_kvm,
                mounted,
                vms,
            ));
        }
        Ok(Observer::new(
            target,
            trace,
            None,
            debugfs_kvm,
            mounted,
            vms,
        ))
    }

    fn new(
        target: Target,
        trace: Option<TraceSession>,
        trace_error: Option<String>,
        debugfs_kvm: Option<PathBuf>,
        mounted: Vec<String>,
        vms: Vec<Watched>,
    ) -> Observer {
        Observer {
            target,
            trace,
            trace_error,
            debugfs_kvm,
            mounted,
            sole_vm: vm::all_vms().len() == 1,
            vms,
            owners: HashMap::new(),
            unattributed: 0,
            started_ns: monotonic_ns(),
        }
    }

    /// Takes the records the rings hold; call every few tens of ms.
    pub fn poll(&mut self) {
        let records = self
            .trace
            .as_mut()
            .map(TraceSession::drain)
            .unwrap_or_default();
        self.route(&records);
    }

    /// Reads the statistics, notes VMs that ended and (watching the whole
    /// host) finds new ones; call about once a second.
    pub fn refresh(&mut self) {
        self.notice_emulated_execution();
        for watched in &mut self.vms {
            if watched.ended_ns.is_some() {
                continue;
            }
            watched.follow(self.debugfs_kvm.as_deref());
            // Read before asking whether it ended: a copied statistics fd
            // still reads after the VMM is gone, with its final counts.
            let reading = watched.stats.read();
            if !reading.vm.is_empty() {
                watched.last = reading;
            }
            if watched.pidfd.as_ref().is_some_and(Pidfd::ended) {
                watched.ended_ns = Some(monotonic_ns());
            }
        }
        // A VM started since may not be charged with kernel workers' events.
        let all = vm::all_vms();
        self.sole_vm = all.len() == 1;
        if self.target == Target::All {
            let known: Vec<VmId> = self.vms.iter().map(|vm| vm.info.id).collect();
            for info in all.into_iter().filter(|info| !known.contains(&info.id)) {
                self.vms
                    .push(Watched::attach(info, self.debugfs_kvm.as_deref()));
            }
        }
    }

    /// A guest run by KVM's instruction emulator (a VMM that is not
    /// PVM-aware, on kvm_pvm) has every instruction emulated: kvm_emulate_insn
    /// then fires hundreds of thousands of times a second, says nothing of
    /// exits and drowns the other records. It is turned off, and that VM's
    /// accesses count alone.
    fn notice_emulated_execution(&mut self) {
        let Some(trace) = &mut self.trace else { return };
        let mut flooding = Vec::new();
        for watched in &mut self.vms {
            let (traps, ordinary) = watched.account.traps_total();
            let (last_traps, last_ordinary) = watched.traps_at_refresh;
            watched.traps_at_refresh = (traps, ordinary);
            let (traps, ordinary) = (
                traps.saturating_sub(last_traps),
                ordinary.saturating_sub(last_ordinary),
            );
            let emulating = traps >= EMULATED_EXECUTION_TRAPS && ordinary * 2 >= traps;
            watched.emulating_refreshes = if emulating {
                watched.emulating_refreshes + 1
            } else {
                0
            };
            if watched.emulating_refreshes == EMULATED_EXECUTION_REFRESHES
                && !watched.account.emulated_execution()
            {
                watched.account.mark_emulated_execution();
                flooding.push(format!(
                    "{} ({traps} instructions emulated in the last second, {ordinary} of them ordinary)",
                    watched.info.id
                ));
            }
        }
        if !flooding.is_empty()
            && !trace
                .disabled
                .iter()
                .any(|(t, _)| *t == Tracepoint::KvmEmulateInsn)
        {
            trace.disable(
                Tracepoint::KvmEmulateInsn,
                format!(
                    "the guest of VM {} runs under KVM's instruction emulator: every instruction \
                     is one record, none an exit; its port, MMIO, MSR and APIC accesses count \
                     as the exits they would be on hardware",
                    flooding.join(", ")
                ),
            );
        }
    }

    /// Whether every watched VM has ended (watching the whole host, never).
    pub fn all_ended(&self) -> bool {
        self.target != Target::All && self.vms.iter().all(|vm| vm.ended_ns.is_some())
    }

    /// The observation so far.
    pub fn observation(&self) -> Observation {
        let now = monotonic_ns();
        let decoder = self.trace.as_ref().map(TraceSession::decoder);
        Observation {
            duration_s: seconds(now.saturating_sub(self.started_ns)),
            sources: Sources {
                mounted: self.mounted.clone(),
                tracepoints: self
                    .trace
                    .as_ref()
                    .map(|t| t.opened.clone())
                    .unwrap_or_default(),
                absent: self
                    .trace
                    .as_ref()
                    .map(|t| t.absent.clone())
                    .unwrap_or_default(),
                unusable: self
                    .trace
                    .as_ref()
                    .map(|t| t.unusable.clone())
                    .unwrap_or_default(),
                trace_error: self.trace_error.clone(),
                disabled: self
                    .trace
                    .as_ref()
                    .map(|t| t.disabled.clone())
                    .unwrap_or_default(),
                records: self.trace.as_ref().map_or(0, |t| t.records),
                lost: self.trace.as_ref().map_or(0, |t| t.lost.values().sum()),
                lost_by_tracepoint: self
                    .trace
                    .as_ref()
                    .map(|t| t.lost.clone())
                    .unwrap_or_default(),
                undecodable: self.trace.as_ref().map_or(0, |t| t.undecodable),
                unattributed: self.unattributed,
            },
            vms: self
                .vms
                .iter()
                .map(|watched| summarize(watched, now, self.trace.is_some(), decoder.is_some()))
                .collect(),
        }
    }

    /// Ends the observation: the last records, the last statistics.
    pub fn finish(mut self) -> Observation {
        let records = self
            .trace
            .as_mut()
            .map(TraceSession::finish)
            .unwrap_or_default();
        self.route(&records);
        self.refresh();
        if let Some(decoder) = self.trace.as_ref().map(TraceSession::decoder) {
            for watched in &mut self.vms {
                watched.account.finish(decoder);
            }
        }
        self.observation()
    }

    fn route(&mut self, records: &[Traced]) {
        let Some(decoder) = self.trace.as_ref().map(TraceSession::decoder) else {
            return;
        };
        for traced in records {
            let owner = *self
                .owners
                .entry(traced.tid)
                .or_insert_with(|| owner_of(&self.vms, traced.pid, traced.tid));
            let index = match owner {
                Owner::Vm(index) => Some(index),
                Owner::Kernel => (self.sole_vm && self.vms.len() == 1).then_some(0),
                Owner::Other => None,
            };
            match index.and_then(|index| self.vms.get_mut(index)) {
                Some(watched) if traced.time_ns >= watched.started_ns => {
                    watched.account.record(traced, decoder)
                }
                Some(_) => {}
                None => self.unattributed += 1,
            }
        }
    }
}

/// Mounts debugfs if absent; its `kvm` directory, if there is one.
fn debugfs_kvm(mounted: &mut Vec<String>) -> Option<PathBuf> {
    let kvm = Path::new(DEBUGFS).join("kvm");
    if !kvm.is_dir() && trace::mount("debugfs", DEBUGFS).is_ok() {
        mounted.push(format!("debugfs at {DEBUGFS}"));
    }
    kvm.is_dir().then_some(kvm)
}

/// Whose a thread's events are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// The watched VM's: its VMM's thread or its vhost worker.
    Vm(usize),
    /// A kernel thread's that serves no one VM by name (irqfd's workers).
    Kernel,
    /// Another process's (another VMM's vCPU), or a thread gone unseen.
    Other,
}

/// Whose the events of thread `tid` of process `pid` are: the watched VM
/// whose VMM that process is, or whose VMM owns the vhost worker
/// (`vhost-<pid>`), else a kernel thread's or another process's.
fn owner_of(vms: &[Watched], pid: u32, tid: u32) -> Owner {
    let vm_of = |pid: u32| vms.iter().position(|vm| vm.info.id.pid == pid);
    if let Some(index) = vm_of(pid) {
        return Owner::Vm(index);
    }
    let Some(thread) = vm::thread_of(tid) else {
        return Owner::Other;
    };
    match thread
        .name
        .strip_prefix("vhost-")
        .and_then(|owner| owner.parse().ok())
    {
        Some(vhost_owner) => vm_of(vhost_owner).map_or(Owner::Other, Owner::Vm),
        None if thread.kernel => Owner::Kernel,
        None => Owner::Other,
    }
}

fn seconds(ns: u64) -> f64 {
    dirq_stats::f64_of(ns) / 1e9
}

/// Reads back a map keyed by a number, where it sits under
/// `#[serde(flatten)]`: serde then hands JSON's string keys over as
/// strings, not as the number they spell.
pub mod numeric_keys {
    use std::collections::BTreeMap;
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D, K, V>(deserializer: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        D: Deserializer<'de>,
        K: FromStr + Ord,
        K::Err: Display,
        V: Deserialize<'de>,
    {
        BTreeMap::<String, V>::deserialize(deserializer)?
            .into_iter()
            .map(|(key, value)| Ok((key.parse().map_err(D::Error::custom)?, value)))
            .collect()
    }
}

/// An observation of one or more VMs: `dirq observe --json`'s body and
/// the record file the report reads back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub duration_s: f64,
    pub sources: Sources,
    pub vms: Vec<VmObservation>,
}

/// What was read, and what could not be.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sources {
    /// File systems dirq mounted to read them.
    pub mounted: Vec<String>,
    pub tracepoints: Vec<Tracepoint>,
    /// Tracepoints this kernel lacks.
    pub absent: Vec<Tracepoint>,
    pub unusable: Vec<Unusable>,
    /// Why no tracepoint could be read, if none could.
    pub trace_error: Option<String>,
    /// Tracepoints turned off while tracing, and why.
    pub disabled: Vec<(Tracepoint, String)>,
    /// Records read, lost by the kernel (perf's lost-record count), and
    /// unreadable.
    pub records: u64,
    pub lost: u64,
    pub undecodable: u64,
    /// The lost records by tracepoint: only those tracepoints' figures are
    /// short.
    #[serde(default)]
    pub lost_by_tracepoint: BTreeMap<Tracepoint, u64>,
    /// Records of threads no watched VM owns (other VMs', or kernel workers
    /// while several VMs run).
    pub unattributed: u64,
}

impl Sources {
    /// The records the kernel lost, by tracepoint ("kvm_emulate_insn
    /// 280908, kvm_pio 3"), or `None` if it lost none.
    pub fn lost_records(&self) -> Option<String> {
        (self.lost > 0).then(|| {
            self.lost_by_tracepoint
                .iter()
                .map(|(tracepoint, lost)| format!("{tracepoint} {lost}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
    }
}

/// One row of a perf-kvm-stat table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitTableRow {
    /// The reason as the kernel names it (VMX, SVM), or the KVM statistic's
    /// category with what the traps tell of it (kvm_pvm).
    pub reason: String,
    /// dirq's one naming of exits.
    pub category: Option<VmxExit>,
    pub samples: u64,
    /// Exit to entry, where both are traced.
    pub time: Option<Timing>,
}

/// Where a perf-kvm-stat table's rows come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TableSource {
    /// kvm_exit and kvm_entry: every exit with its reason and time.
    ExitTracepoint,
    /// KVM's statistics by category, OTHER split by the traced traps.
    Statistics,
    /// Only the traced traps (no statistics, no kvm_exit).
    Traps,
}

/// One exit cause's count and time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CauseRow {
    pub cause: ExitCause,
    pub count: u64,
    pub time: Timing,
    pub to_userspace: u64,
}

/// One vector's interrupts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InterruptRow {
    pub vector: u8,
    pub sources: BTreeMap<SourceKind, u64>,
    pub accepted: u64,
    pub per_s: f64,
    pub level_triggered: u64,
    pub injected: u64,
    pub eois: u64,
    pub pv_eois: u64,
}

/// Halts: traced outcomes and KVM's own statistics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Halts {
    pub traced: HaltTally,
    /// halt_exits, halt_wait_ns, halt_successful_poll, halt_attempted_poll,
    /// halt_poll_invalid, halt_poll_success_ns, halt_poll_fail_ns, halt_wakeup.
    pub statistics: BTreeMap<String, u64>,
}

/// One VM, observed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VmObservation {
    pub vm: VmId,
    pub vmm: String,
    pub vcpus: usize,
    pub assigned_devices: bool,
    pub observed_s: f64,
    /// The VMM ended while watched: what was seen until then.
    pub ended: bool,
    pub statistics: StatsOrigin,
    /// KVM's `exits` over the observation (from the statistics); the
    /// traced exits where there are none.
    pub exits: Option<u64>,
    /// KVM's counters that moved over the observation.
    pub kvm_stats: Readings,
    pub exit_table_source: TableSource,
    pub exit_table: Vec<ExitTableRow>,
    pub vcpu_exit_tables: BTreeMap<String, Vec<ExitTableRow>>,
    pub causes: Vec<CauseRow>,
    /// Instructions KVM emulated, by mnemonic (each a trap under kvm_pvm's
    /// native mode; every instruction under its emulator).
    pub traps: BTreeMap<String, u64>,
    pub hot_spots: Vec<HotSpot>,
    pub hot_spots_dropped: u64,
    pub interrupts: Vec<InterruptRow>,
    /// EOIs that found nothing in service in KVM's LAPIC (a LAPIC that
    /// holds no interrupt in service, or a guest's stray EOI).
    pub eois_with_none_in_service: u64,
    pub halts: Halts,
    pub userspace_exits: BTreeMap<String, u64>,
    pub traced_events: u64,
    /// What this backend or host did not let the observer see.
    pub unseen: Vec<String>,
}

impl VmObservation {
    /// Exits per class, summed from the causes.
    pub fn classes(&self) -> BTreeMap<ExitClass, CauseTally> {
        let mut classes: BTreeMap<ExitClass, CauseTally> = BTreeMap::new();
        for row in &self.causes {
            let tally = classes.entry(row.cause.class()).or_default();
            tally.count += row.count;
            tally.to_userspace += row.to_userspace;
            tally.time.merge(&row.time);
        }
        classes
    }
}

fn summarize(watched: &Watched, now: u64, traced: bool, decoded: bool) -> VmObservation {
    let end = watched.ended_ns.unwrap_or(now);
    let observed_s = seconds(end.saturating_sub(watched.started_ns));
    let window = watched.last.since(&watched.first);
    let account = &watched.account;
    let have_stats = !matches!(watched.stats.origin, StatsOrigin::Unavailable(_));
    let traps: BTreeMap<String, u64> = account
        .traps
        .iter()
        .map(|(mnemonic, count)| (mnemonic.to_string(), *count))
        .collect();
    let (exit_table_source, exit_table) = exit_table(account, &window.vm, &traps, have_stats);
    let vcpu_exit_tables = vcpu_tables(account, &window, have_stats);
    let mut causes: Vec<CauseRow> = account
        .causes
        .iter()
        .map(|(cause, tally)| CauseRow {
            cause: *cause,
            count: tally.count,
            time: tally.time,
            to_userspace: tally.to_userspace,
        })
        .collect();
    causes.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.cause.class().cmp(&b.cause.class()))
    });
    let interrupts = account
        .vectors
        .iter()
        .map(|(vector, tally)| {
            let accepted = tally.accepted.values().sum::<u64>();
            InterruptRow {
                vector: *vector,
                sources: tally.accepted.clone(),
                accepted,
                per_s: per_second(accepted, observed_s),
                level_triggered: tally.level_triggered,
                injected: tally.injected,
                eois: tally.eois,
                pv_eois: tally.pv_eois,
            }
        })
        .collect();
    let halts = Halts {
        traced: account.halts,
        statistics: window
            .vm
            .iter()
            .filter(|(name, value)| name.starts_with("halt_") && **value > 0)
            .map(|(name, value)| (name.clone(), *value))
            .collect(),
    };
    let mut kvm_stats = window.clone();
    kvm_stats.vm.retain(|_, value| *value > 0);
    for counters in kvm_stats.per_vcpu.values_mut() {
        counters.retain(|_, value| *value > 0);
    }
    let traced_exits: u64 = exit_table
        .iter()
        .filter(|_| exit_table_source == TableSource::ExitTracepoint)
        .map(|row| row.samples)
        .sum();
    let exits = if have_stats {
        Some(window.get(KvmStat::Exits.name()))
    } else {
        (exit_table_source == TableSource::ExitTracepoint).then_some(traced_exits)
    };
    VmObservation {
        vm: watched.info.id,
        vmm: watched.info.comm.clone(),
        vcpus: watched.info.vcpu_fds.len().max(window.per_vcpu.len()),
        assigned_devices: watched.info.vfio,
        observed_s,
        ended: watched.ended_ns.is_some(),
        statistics: watched.stats.origin.clone(),
        exits,
        kvm_stats,
        exit_table_source,
        exit_table,
        vcpu_exit_tables,
        causes,
        traps,
        hot_spots: hot_spots(account),
        hot_spots_dropped: account.hot_spots_dropped,
        interrupts,
        eois_with_none_in_service: account.eois_with_none_in_service,
        halts,
        userspace_exits: account.userspace_exits.clone(),
        traced_events: account.events,
        unseen: unseen(watched, &window, traced && decoded),
    }
}

fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        dirq_stats::f64_of(count) / seconds
    } else {
        0.0
    }
}

/// The hot spots worth showing: the top by exits and the top by time.
fn hot_spots(account: &VmAccount) -> Vec<HotSpot> {
    let mut by_exits: Vec<&HotSpot> = account.hot_spots().collect();
    by_exits.sort_by(|a, b| b.exits.cmp(&a.exits).then(a.rip.cmp(&b.rip)));
    let mut by_time = by_exits.clone();
    by_time.sort_by(|a, b| {
        b.time
            .total_ns
            .cmp(&a.time.total_ns)
            .then(a.rip.cmp(&b.rip))
    });
    let mut shown: Vec<HotSpot> = Vec::new();
    for spot in by_exits.into_iter().take(HOT_SPOTS_SHOWN).chain(
        by_time
            .into_iter()
            .take(HOT_SPOTS_SHOWN)
            .filter(|s| s.time.total_ns > 0),
    ) {
        if !shown.iter().any(|kept| kept.rip == spot.rip) {
            shown.push(spot.clone());
        }
    }
    shown
}

/// KVM's exit statistics as perf-kvm-stat rows: each category's count,
/// OTHER what no category claims.
fn statistic_rows(counters: &BTreeMap<String, u64>) -> Vec<ExitTableRow> {
    let total = counters.get(KvmStat::Exits.name()).copied().unwrap_or(0);
    let mut rows: Vec<ExitTableRow> = KvmStat::ALL
        .iter()
        .filter_map(|stat| {
            Some((
                stat.exit()?,
                counters.get(stat.name()).copied().unwrap_or(0),
            ))
        })
        .filter(|(_, count)| *count > 0)
        .map(|(exit, count)| ExitTableRow {
            reason: exit.name().to_string(),
            category: Some(exit),
            samples: count,
            time: None,
        })
        .collect();
    let claimed: u64 = rows.iter().map(|row| row.samples).sum();
    if total > claimed {
        rows.push(ExitTableRow {
            reason: VmxExit::Other.name().to_string(),
            category: Some(VmxExit::Other),
            samples: total - claimed,
            time: None,
        });
    }
    rows
}

/// OTHER split by the traps that KVM counts under no category of its own
/// (on kvm_pvm: the emulated WRMSR, RDMSR, port I/O, IRET...). Returns the
/// rows unchanged when the traps outnumber OTHER: then they are
/// instructions the emulator ran, not exits.
fn split_other(
    mut rows: Vec<ExitTableRow>,
    traps: &BTreeMap<String, u64>,
    counters: &BTreeMap<String, u64>,
) -> Vec<ExitTableRow> {
    let has = |stat: KvmStat| counters.get(stat.name()).copied().unwrap_or(0) > 0;
    let counted_elsewhere = |mnemonic: &str| match mnemonic {
        "hlt" => true,
        "in" | "out" | "ins" | "outs" => has(KvmStat::IoExits),
        "mov (memory)" => has(KvmStat::MmioExits),
        _ => false,
    };
    let Some(other) = rows
        .iter()
        .position(|row| row.category == Some(VmxExit::Other))
    else {
        return rows;
    };
    let split: Vec<(&String, u64)> = traps
        .iter()
        .filter(|(mnemonic, _)| !counted_elsewhere(mnemonic))
        .map(|(mnemonic, count)| (mnemonic, *count))
        .collect();
    let traced: u64 = split.iter().map(|(_, count)| count).sum();
    let total = rows[other].samples;
    if traced == 0 || traced > total {
        return rows;
    }
    rows.remove(other);
    for (mnemonic, count) in split {
        rows.push(ExitTableRow {
            reason: format!("OTHER: {mnemonic} (emulated)"),
            category: Some(VmxExit::Other),
            samples: count,
            time: None,
        });
    }
    if total > traced {
        rows.push(ExitTableRow {
            reason: "OTHER: not traced (interrupt delivery, IRET, ...)".to_string(),
            category: Some(VmxExit::Other),
            samples: total - traced,
            time: None,
        });
    }
    rows
}

fn traced_rows(rows: &BTreeMap<String, ExitRow>) -> Vec<ExitTableRow> {
    rows.iter()
        .map(|(reason, row)| ExitTableRow {
            reason: reason.clone(),
            category: row.category,
            samples: row.count,
            time: (row.time.samples > 0).then_some(row.time),
        })
        .collect()
}

fn sorted(mut rows: Vec<ExitTableRow>) -> Vec<ExitTableRow> {
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.reason.cmp(&b.reason)));
    rows
}

fn exit_table(
    account: &VmAccount,
    counters: &BTreeMap<String, u64>,
    traps: &BTreeMap<String, u64>,
    have_stats: bool,
) -> (TableSource, Vec<ExitTableRow>) {
    if account.exits_traced() {
        return (
            TableSource::ExitTracepoint,
            sorted(traced_rows(&account.exit_rows())),
        );
    }
    if have_stats {
        return (
            TableSource::Statistics,
            sorted(split_other(statistic_rows(counters), traps, counters)),
        );
    }
    let rows = traps
        .iter()
        .map(|(mnemonic, count)| ExitTableRow {
            reason: format!("{mnemonic} (emulated)"),
            category: None,
            samples: *count,
            time: None,
        })
        .collect();
    (TableSource::Traps, sorted(rows))
}

fn vcpu_tables(
    account: &VmAccount,
    window: &Readings,
    have_stats: bool,
) -> BTreeMap<String, Vec<ExitTableRow>> {
    if account.exits_traced() {
        return account
            .vcpu_exit_rows()
            .iter()
            .map(|(vcpu, rows)| {
                let name = vcpu.map_or_else(|| "unknown vCPU".to_string(), |v| format!("vCPU {v}"));
                (name, sorted(traced_rows(rows)))
            })
            .collect();
    }
    if !have_stats {
        return BTreeMap::new();
    }
    window
        .per_vcpu
        .iter()
        .map(|(vcpu, counters)| (format!("vCPU {vcpu}"), sorted(statistic_rows(counters))))
        .filter(|(_, rows)| !rows.is_empty())
        .collect()
}

fn unseen(watched: &Watched, window: &Readings, traced: bool) -> Vec<String> {
    let mut unseen = Vec::new();
    let account = &watched.account;
    if let StatsOrigin::Unavailable(why) = &watched.stats.origin {
        unseen.push(format!("KVM's statistics (exit totals, halt times): {why}"));
    } else if matches!(watched.stats.origin, StatsOrigin::Debugfs(_)) {
        unseen.push("per-vCPU statistics: debugfs has them per VM only".to_string());
    }
    if !traced {
        unseen.push("every traced figure: KVM's tracepoints could not be read".to_string());
        return unseen;
    }
    let exits = window.get(KvmStat::Exits.name());
    if !account.exits_traced() && (exits > 0 || !account.traps.is_empty()) {
        unseen.push(
            "exit reasons, guest RIPs and times of exits: kvm_exit and kvm_entry never fired \
             (kvm_pvm does not trace exits); exits are counted from KVM's statistics, and the \
             instructions KVM emulated (kvm_emulate_insn) stand for the trapped ones"
                .to_string(),
        );
        unseen.push(
            "the host vector of each external-interrupt exit (a kick, the host's timer, a \
             device): only kvm_exit carries it"
                .to_string(),
        );
    }
    let injections = window.get("irq_injections");
    let accepted: u64 = account
        .vectors
        .values()
        .map(|v| v.accepted.values().sum::<u64>())
        .sum();
    if injections > accepted {
        unseen.push(format!(
            "{} interrupts injected by the VMM's own userspace irqchip (KVM_INTERRUPT): no \
             tracepoint names their vector or source",
            injections - accepted
        ));
    }
    unseen
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::stats::counters_of as counters;

    #[test]
    fn lost_records_are_named_by_the_tracepoint_whose_ring_filled() {
        let mut sources = Sources::default();
        assert_eq!(sources.lost_records(), None);
        sources.lost = 280_911;
        sources.lost_by_tracepoint = BTreeMap::from([
            (Tracepoint::KvmEmulateInsn, 280_908),
            (Tracepoint::KvmPio, 3),
        ]);
        assert_eq!(
            sources.lost_records().as_deref(),
            Some("kvm_pio 3, kvm_emulate_insn 280908")
        );
    }

    #[test]
    fn statistics_rows_sum_to_the_exits_with_other_the_rest() {
        let stats = counters(&[
            ("exits", 4106),
            ("irq_exits", 1064),
            ("irq_window_exits", 41),
            ("insn_emulation", 1015),
        ]);
        let rows = statistic_rows(&stats);
        assert_eq!(rows.iter().map(|row| row.samples).sum::<u64>(), 4106);
        let other = rows
            .iter()
            .find(|row| row.category == Some(VmxExit::Other))
            .unwrap();
        assert_eq!(other.samples, 3001);
    }

    #[test]
    fn other_is_split_by_the_traps_kvm_counts_nowhere_else() {
        let stats = counters(&[("exits", 3000), ("halt_exits", 10)]);
        let traps = BTreeMap::from([
            ("wrmsr".to_string(), 1000),
            ("out".to_string(), 500),
            ("hlt".to_string(), 10),
        ]);
        let rows = split_other(statistic_rows(&stats), &traps, &stats);
        let find = |reason: &str| {
            rows.iter()
                .find(|row| row.reason == reason)
                .map(|row| row.samples)
        };
        assert_eq!(find("OTHER: wrmsr (emulated)"), Some(1000));
        assert_eq!(find("OTHER: out (emulated)"), Some(500));
        assert_eq!(
            find("OTHER: not traced (interrupt delivery, IRET, ...)"),
            Some(1490)
        );
        assert_eq!(find("HLT"), Some(10));
        assert_eq!(rows.iter().map(|row| row.samples).sum::<u64>(), 3000);
    }

    #[test]
    fn traps_that_outnumber_other_are_instructions_not_exits() {
        let stats = counters(&[("exits", 100)]);
        let traps = BTreeMap::from([("mov (memory)".to_string(), 100_000)]);
        let rows = split_other(statistic_rows(&stats), &traps, &stats);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].reason, "OTHER");
    }
}
