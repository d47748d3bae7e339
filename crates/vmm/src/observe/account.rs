//! What one VM's traced events add up to: its exits (by reason, with the
//! time from each exit to the next entry where the backend traces both),
//! the cause of each exit, the guest instructions behind them (hot spots),
//! its interrupts by vector and source, and its halts. Pure: events in,
//! tallies out, so every rule is tested with records built from the
//! kernel's published formats.

use std::collections::{BTreeMap, HashMap};

use dirq_arch::exit::VmxExit;
use dirq_arch::exit_cause::{ExitCause, ExitClass, InterruptSource};
use dirq_arch::interrupt::TriggerMode;
use dirq_arch::lapic::{x2apic_msr, APIC_LVT_TIMER};
use serde::{Deserialize, Serialize};

use super::event::{Isa, KvmEvent};
use super::insn;

/// One traced event: when (CLOCK_MONOTONIC ns), on which host CPU, in
/// which thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traced {
    pub time_ns: u64,
    pub cpu: u32,
    /// The thread and its thread group (process).
    pub pid: u32,
    pub tid: u32,
    pub event: KvmEvent,
}

/// The names the kernel prints for exit reasons and userspace exits,
/// from the tracepoints' print fmt lines.
pub trait ExitNames {
    fn exit_name(&self, isa: Isa, reason: u32) -> Option<&str>;
    fn userspace_exit_name(&self, reason: u32) -> Option<&str>;
}

/// Host interrupt vectors of Linux on x86 (arch/x86/include/asm/irq_vectors.h):
/// what an external-interrupt exit's vector says about its cause.
mod host_vectors {
    pub const FIRST_EXTERNAL: u8 = 0x20;
    pub const LOCAL_TIMER: u8 = 0xEC;
    pub const POSTED_INTR_NESTED: u8 = 0xF0;
    pub const POSTED_INTR_WAKEUP: u8 = 0xF1;
    pub const POSTED_INTR: u8 = 0xF2;
    pub const IRQ_WORK: u8 = 0xF6;
    pub const CALL_FUNCTION_SINGLE: u8 = 0xFB;
    pub const CALL_FUNCTION: u8 = 0xFC;
    pub const RESCHEDULE: u8 = 0xFD;
}

fn low_byte(value: u64) -> u8 {
    u8::try_from(value & 0xFF).unwrap_or(u8::MAX)
}

/// The cause of an external-interrupt exit whose host vector is known.
fn host_interrupt_cause(vector: u8) -> ExitCause {
    use host_vectors::*;
    match vector {
        // KVM kicks a running vCPU with the reschedule IPI, or with the
        // posted-interrupt vectors when it posts.
        RESCHEDULE | POSTED_INTR | POSTED_INTR_WAKEUP | POSTED_INTR_NESTED => {
            ExitCause::InterruptDelivery
        }
        LOCAL_TIMER => ExitCause::HostTimer,
        CALL_FUNCTION | CALL_FUNCTION_SINGLE | IRQ_WORK => ExitCause::HostIpi,
        FIRST_EXTERNAL..LOCAL_TIMER => ExitCause::HostDeviceInterrupt,
        _ => ExitCause::ExternalInterrupt,
    }
}

/// Exit time statistics: count, total, extremes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    pub samples: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

impl Timing {
    fn add(&mut self, ns: u64) {
        self.min_ns = if self.samples == 0 {
            ns
        } else {
            self.min_ns.min(ns)
        };
        self.max_ns = self.max_ns.max(ns);
        self.samples += 1;
        self.total_ns = self.total_ns.saturating_add(ns);
    }

    pub fn merge(&mut self, other: &Timing) {
        if other.samples == 0 {
            return;
        }
        self.min_ns = if self.samples == 0 {
            other.min_ns
        } else {
            self.min_ns.min(other.min_ns)
        };
        self.max_ns = self.max_ns.max(other.max_ns);
        self.samples += other.samples;
        self.total_ns = self.total_ns.saturating_add(other.total_ns);
    }
}

/// One exit reason's row of `perf kvm stat report`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRow {
    /// dirq's one naming of the reason.
    pub category: Option<VmxExit>,
    pub count: u64,
    /// Exit to entry; none where entries are not traced.
    pub time: Timing,
}

/// How many exits one cause made, and their time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CauseTally {
    pub count: u64,
    pub time: Timing,
    /// Of `count`, the exits that went on to the VMM (KVM_RUN returned).
    pub to_userspace: u64,
}

/// One guest instruction address that exits (or traps) and what it does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotSpot {
    pub rip: u64,
    pub exits: u64,
    pub time: Timing,
    /// The instruction, where its bytes were traced.
    pub instruction: Option<String>,
    pub classes: BTreeMap<ExitClass, u64>,
}

/// Where interrupts of one vector came from, and what became of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorTally {
    /// Accepted into a LAPIC, by the source that raised it.
    pub accepted: BTreeMap<SourceKind, u64>,
    pub level_triggered: u64,
    /// Injected into the guest by KVM at entry (kvm_inj_virq).
    pub injected: u64,
    pub eois: u64,
    pub pv_eois: u64,
}

/// How an interrupt was raised, as the tracepoints show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// An MSI (KVM_SIGNAL_MSI, or an irqfd routed to an MSI).
    Msi,
    /// An IOAPIC (or PIC) input pin.
    IoapicPin,
    Ipi,
    /// The LAPIC timer (the vector the guest wrote to the LVT timer entry).
    Timer,
    /// Accepted with no source event before it: another LVT entry, or an
    /// interrupt the VMM injected through its own userspace LAPIC.
    Local,
}

/// Halts and how they ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaltTally {
    /// HLT exits (or trapped HLTs).
    pub halts: u64,
    /// Wake-ups after the vCPU slept (kvm_vcpu_wakeup `wait`).
    pub woke_from_sleep: u64,
    /// Wake-ups that halt polling caught (kvm_vcpu_wakeup `poll`).
    pub woke_while_polling: u64,
    /// Wake-ups KVM marked invalid (the poll window mispredicted).
    pub invalid: u64,
    pub slept_ns: u64,
    pub polled_ns: u64,
    pub poll_grew: u64,
    pub poll_shrank: u64,
}

/// What an open exit saw before the next entry.
#[derive(Clone, Copy, Debug, Default)]
struct Facts {
    msr: Option<(bool, u32, u64)>,
    apic: Option<(bool, u32, u64)>,
    pio: Option<(bool, u16)>,
    mmio: Option<bool>,
    eoi: Option<(u32, u8)>,
    ipi: Option<u64>,
    userspace: bool,
}

#[derive(Clone, Copy, Debug)]
enum Opened {
    /// A kvm_exit (VT-x, SVM).
    Exit {
        isa: Isa,
        reason: u32,
        info1: u64,
        intr_info: u32,
    },
    /// An instruction KVM emulated (kvm_pvm: each trap is one).
    Trap { mnemonic: &'static str },
    /// An access KVM traced with no exit or trap around it (a guest run by
    /// the instruction emulator, where every instruction is emulated): the
    /// exit it would be where the guest runs on hardware.
    Access,
}

#[derive(Clone, Copy, Debug)]
struct OpenExit {
    start_ns: u64,
    rip: u64,
    opened: Opened,
    facts: Facts,
}

/// An interrupt raise waiting for its acceptance in the same thread.
#[derive(Clone, Copy, Debug)]
struct Raised {
    kind: SourceKind,
}

/// Hot spots kept at most: a guest under the instruction emulator traps at
/// every instruction; past this many addresses the rest are summed.
const HOT_SPOTS_KEPT: usize = 1 << 20;

/// One VM's tallies.
#[derive(Debug, Default)]
pub struct VmAccount {
    /// Whether MSIs may come from an assigned device (the VMM holds VFIO).
    assigned_devices: bool,
    /// vCPU index of a thread, where known.
    vcpu_of_thread: HashMap<u32, u32>,
    open: HashMap<u32, OpenExit>,
    raised: HashMap<u32, Raised>,
    /// (APIC id, vector) -> where it last came from, and its trigger: what
    /// an EOI of that vector completes (a vector's source and trigger are
    /// its configuration; they seldom change).
    vector_origin: HashMap<(u32, u8), (InterruptSource, TriggerMode)>,
    timer_vector: HashMap<u32, u8>,
    halted: HashMap<u32, bool>,
    /// Traced exits by vCPU (where known) and reason.
    exits: BTreeMap<Option<u32>, BTreeMap<String, ExitRow>>,
    pub traps: BTreeMap<&'static str, u64>,
    pub causes: HashMap<ExitCause, CauseTally>,
    hot_spots: HashMap<u64, HotSpot>,
    pub hot_spots_dropped: u64,
    pub vectors: BTreeMap<u8, VectorTally>,
    /// EOIs that found no interrupt in service in KVM's LAPIC.
    pub eois_with_none_in_service: u64,
    pub halts: HaltTally,
    pub userspace_exits: BTreeMap<String, u64>,
    pub events: u64,
    emulated_execution: bool,
    pub first_ns: Option<u64>,
    pub last_ns: u64,
}

impl VmAccount {
    pub fn new(assigned_devices: bool) -> Self {
        VmAccount {
            assigned_devices,
            ..VmAccount::default()
        }
    }

    /// Tells which vCPU a thread runs (e.g. from debugfs's vcpuN/pid).
    pub fn set_vcpu_thread(&mut self, tid: u32, vcpu: u32) {
        self.vcpu_of_thread.insert(tid, vcpu);
    }

    /// Whether the backend traced an exit (kvm_exit) for this VM.
    pub fn exits_traced(&self) -> bool {
        !self.exits.is_empty()
    }

    /// The traced exits by reason, over every vCPU.
    pub fn exit_rows(&self) -> BTreeMap<String, ExitRow> {
        let mut rows: BTreeMap<String, ExitRow> = BTreeMap::new();
        for (name, row) in self.exits.values().flatten() {
            let merged = rows.entry(name.clone()).or_default();
            merged.category = row.category;
            merged.count += row.count;
            merged.time.merge(&row.time);
        }
        rows
    }

    /// The traced exits by vCPU (`None`: a thread whose vCPU is not known).
    pub fn vcpu_exit_rows(&self) -> &BTreeMap<Option<u32>, BTreeMap<String, ExitRow>> {
        &self.exits
    }

    pub fn hot_spots(&self) -> impl Iterator<Item = &HotSpot> {
        self.hot_spots.values()
    }

    /// Takes one event; events must come in time order.
    pub fn record(&mut self, traced: &Traced, names: &dyn ExitNames) {
        self.events += 1;
        self.first_ns.get_or_insert(traced.time_ns);
        self.last_ns = self.last_ns.max(traced.time_ns);
        let tid = traced.tid;
        if !matches!(
            traced.event,
            KvmEvent::AcceptIrq { .. }
                | KvmEvent::MsiSetIrq { .. }
                | KvmEvent::SetIrq { .. }
                | KvmEvent::IoapicSetIrq { .. }
                | KvmEvent::ApicIpi { .. }
        ) {
            // A raise is accepted in the same call; anything else ends it.
            self.raised.remove(&tid);
        }
        self.open_access(tid, traced, names);
        match traced.event {
            KvmEvent::Exit {
                vcpu,
                isa,
                reason,
                rip,
                info1,
                intr_info,
                ..
            } => {
                self.vcpu_of_thread.insert(tid, vcpu);
                self.close(tid, traced.time_ns, names);
                self.open.insert(
                    tid,
                    OpenExit {
                        start_ns: traced.time_ns,
                        rip,
                        opened: Opened::Exit {
                            isa,
                            reason,
                            info1,
                            intr_info,
                        },
                        facts: Facts::default(),
                    },
                );
            }
            KvmEvent::Entry { vcpu, .. } => {
                self.vcpu_of_thread.insert(tid, vcpu);
                self.close(tid, traced.time_ns, names);
            }
            KvmEvent::EmulateInsn { rip, len, insn, .. } => {
                // Under VT-x an emulation runs inside an exit it belongs to;
                // a guest the emulator runs has every instruction emulated.
                let inside_exit = self
                    .open
                    .get(&tid)
                    .is_some_and(|open| matches!(open.opened, Opened::Exit { .. }));
                if inside_exit || self.emulated_execution {
                    return;
                }
                self.close(tid, traced.time_ns, names);
                let mnemonic = insn::mnemonic(&insn[..usize::from(len).min(insn.len())]);
                self.open.insert(
                    tid,
                    OpenExit {
                        start_ns: traced.time_ns,
                        rip,
                        opened: Opened::Trap { mnemonic },
                        facts: Facts::default(),
                    },
                );
            }
            KvmEvent::Msr {
                write, msr, data, ..
            } => self.fact(tid, |facts| facts.msr = Some((write, msr, data))),
            KvmEvent::Apic {
                write,
                register,
                value,
            } => {
                if write && register == u32::try_from(APIC_LVT_TIMER).unwrap_or(0) {
                    self.note_timer_vector(tid, value);
                }
                self.fact(tid, |facts| facts.apic = Some((write, register, value)));
            }
            KvmEvent::Pio { write, port, .. } => {
                self.fact(tid, |facts| facts.pio = Some((write, port)))
            }
            KvmEvent::Mmio { write, .. } => self.fact(tid, |facts| facts.mmio = Some(write)),
            KvmEvent::UserspaceExit { reason, errno } => {
                let name = if errno == -libc::EINTR {
                    "EINTR (a signal: the VMM's kick)".to_string()
                } else if errno < 0 {
                    format!("error {errno}")
                } else {
                    names
                        .userspace_exit_name(reason)
                        .map_or_else(|| format!("reason {reason}"), str::to_string)
                };
                *self.userspace_exits.entry(name).or_insert(0) += 1;
                self.fact(tid, |facts| facts.userspace = true);
            }
            KvmEvent::MsiSetIrq { .. } => self.raise(tid, SourceKind::Msi),
            KvmEvent::SetIrq { level, .. } => {
                if level != 0 {
                    self.raise(tid, SourceKind::IoapicPin);
                }
            }
            KvmEvent::IoapicSetIrq { .. } => self.raise(tid, SourceKind::IoapicPin),
            KvmEvent::ApicIpi {
                icr_low,
                destination,
            } => {
                let icr = u64::from(destination) << 32 | u64::from(icr_low);
                self.fact(tid, |facts| facts.ipi = Some(icr));
                self.raise(tid, SourceKind::Ipi);
            }
            KvmEvent::AcceptIrq {
                apic_id,
                level,
                vector,
                ..
            } => self.accept(tid, apic_id, vector, level),
            KvmEvent::InjectVirq { vector, .. } => {
                self.vectors.entry(vector).or_default().injected += 1
            }
            KvmEvent::Eoi {
                apic_id,
                vector: Some(vector),
            } => {
                self.vectors.entry(vector).or_default().eois += 1;
                self.fact(tid, |facts| facts.eoi = Some((apic_id, vector)));
            }
            KvmEvent::Eoi { vector: None, .. } => self.eois_with_none_in_service += 1,
            KvmEvent::PvEoi { vector, .. } => {
                if let Some(vector) = vector {
                    self.vectors.entry(vector).or_default().pv_eois += 1;
                }
            }
            KvmEvent::VcpuWakeup { ns, waited, valid } => {
                if let Some(&vcpu) = self.vcpu_of_thread.get(&tid) {
                    self.halted.insert(vcpu, false);
                }
                let halts = &mut self.halts;
                if waited {
                    halts.woke_from_sleep += 1;
                    halts.slept_ns = halts.slept_ns.saturating_add(ns);
                } else {
                    halts.woke_while_polling += 1;
                    halts.polled_ns = halts.polled_ns.saturating_add(ns);
                }
                halts.invalid += u64::from(!valid);
            }
            KvmEvent::HaltPollNs { grow, .. } => {
                if grow {
                    self.halts.poll_grew += 1;
                } else {
                    self.halts.poll_shrank += 1;
                }
            }
        }
    }

    /// Closes every exit still open (the observation ended).
    pub fn finish(&mut self, names: &dyn ExitNames) {
        let open: Vec<u32> = self.open.keys().copied().collect();
        for tid in open {
            if let Some(exit) = self.open.remove(&tid) {
                self.tally(tid, exit, None, names);
            }
        }
    }

    /// Opens a pseudo-exit for an access no exit or trap encloses, and
    /// closes one that a second access of the same kind, or any event that
    /// is no access, ends.
    fn open_access(&mut self, tid: u32, traced: &Traced, names: &dyn ExitNames) {
        let open_access = self
            .open
            .get(&tid)
            .filter(|open| matches!(open.opened, Opened::Access));
        // Each access is a pseudo-exit of its own, but an x2APIC register
        // access is traced twice: kvm_msr, then kvm_apic.
        let facts = open_access.map(|open| open.facts);
        let has_access = facts.is_some_and(|f| {
            f.msr.is_some() || f.apic.is_some() || f.pio.is_some() || f.mmio.is_some()
        });
        let starts = match traced.event {
            KvmEvent::Apic { .. } => {
                Some(has_access && !facts.is_some_and(|f| f.msr.is_some() && f.apic.is_none()))
            }
            KvmEvent::Msr { .. } | KvmEvent::Pio { .. } | KvmEvent::Mmio { .. } => Some(has_access),
            // Parts of an access, or no part of the guest's run.
            KvmEvent::Eoi { .. }
            | KvmEvent::ApicIpi { .. }
            | KvmEvent::UserspaceExit { .. }
            | KvmEvent::AcceptIrq { .. }
            | KvmEvent::MsiSetIrq { .. }
            | KvmEvent::SetIrq { .. }
            | KvmEvent::IoapicSetIrq { .. }
            | KvmEvent::InjectVirq { .. }
            | KvmEvent::PvEoi { .. }
            | KvmEvent::HaltPollNs { .. } => return,
            KvmEvent::Exit { .. }
            | KvmEvent::Entry { .. }
            | KvmEvent::EmulateInsn { .. }
            | KvmEvent::VcpuWakeup { .. } => None,
        };
        let open_elsewhere = self.open.contains_key(&tid) && open_access.is_none();
        match starts {
            // An access inside an exit or a trap belongs to it.
            Some(_) if open_elsewhere => {}
            Some(again) => {
                if again {
                    self.close(tid, traced.time_ns, names);
                }
                self.open.entry(tid).or_insert(OpenExit {
                    start_ns: traced.time_ns,
                    rip: 0,
                    opened: Opened::Access,
                    facts: Facts::default(),
                });
            }
            None if open_access.is_some() => self.close(tid, traced.time_ns, names),
            None => {}
        }
    }

    /// The guest runs under KVM's instruction emulator: its traps are its
    /// instructions, not exits. What they were counted as is dropped, and
    /// its accesses count alone from now on.
    pub fn mark_emulated_execution(&mut self) {
        self.emulated_execution = true;
        self.open
            .retain(|_, open| !matches!(open.opened, Opened::Trap { .. }));
        self.causes.clear();
        self.traps.clear();
        self.hot_spots.clear();
        self.hot_spots_dropped = 0;
        self.halts.halts = 0;
    }

    /// Whether traps were found to be emulated instructions.
    pub fn emulated_execution(&self) -> bool {
        self.emulated_execution
    }

    /// Instructions KVM emulated, counted so far, and of them the ordinary
    /// ones (no privileged instruction, no memory access): a guest whose
    /// ordinary instructions are emulated runs under the emulator.
    pub fn traps_total(&self) -> (u64, u64) {
        let ordinary = self.traps.get("other").copied().unwrap_or(0);
        (self.traps.values().sum(), ordinary)
    }

    fn fact(&mut self, tid: u32, set: impl FnOnce(&mut Facts)) {
        if let Some(open) = self.open.get_mut(&tid) {
            set(&mut open.facts);
        }
    }

    fn raise(&mut self, tid: u32, kind: SourceKind) {
        self.raised.insert(tid, Raised { kind });
    }

    fn note_timer_vector(&mut self, tid: u32, lvt: u64) {
        if let Some(&vcpu) = self.vcpu_of_thread.get(&tid) {
            // KVM's default APIC ID is the vCPU's index.
            self.timer_vector.insert(vcpu, low_byte(lvt));
        }
    }

    fn accept(&mut self, tid: u32, apic_id: u32, vector: u8, level: bool) {
        let kind = match self.raised.get(&tid) {
            Some(raised) => raised.kind,
            None if self.timer_vector.get(&apic_id) == Some(&vector) => SourceKind::Timer,
            None => SourceKind::Local,
        };
        let tally = self.vectors.entry(vector).or_default();
        *tally.accepted.entry(kind).or_insert(0) += 1;
        tally.level_triggered += u64::from(level);
        let source = match kind {
            SourceKind::Msi if self.assigned_devices => InterruptSource::Unknown,
            SourceKind::Msi | SourceKind::IoapicPin => InterruptSource::EmulatedDevice,
            SourceKind::Ipi => InterruptSource::Ipi,
            SourceKind::Timer => InterruptSource::Timer,
            SourceKind::Local => InterruptSource::Unknown,
        };
        self.vector_origin.insert(
            (apic_id, vector),
            (source, TriggerMode::from_level_bit(level)),
        );
    }

    /// Ends the exit open on `tid` at `now` (its entry).
    fn close(&mut self, tid: u32, now: u64, names: &dyn ExitNames) {
        if let Some(exit) = self.open.remove(&tid) {
            let elapsed = match exit.opened {
                Opened::Exit { .. } => Some(now.saturating_sub(exit.start_ns)),
                // A trap's or an access's end is not traced.
                Opened::Trap { .. } | Opened::Access => None,
            };
            self.tally(tid, exit, elapsed, names);
        }
    }

    fn tally(&mut self, tid: u32, exit: OpenExit, elapsed: Option<u64>, names: &dyn ExitNames) {
        let vcpu = self.vcpu_of_thread.get(&tid).copied();
        let (cause, instruction) = match exit.opened {
            Opened::Exit {
                isa,
                reason,
                info1,
                intr_info,
            } => {
                let name = names
                    .exit_name(isa, reason)
                    .map_or_else(|| format!("{isa:?} exit {reason:#x}"), str::to_string);
                let category = match isa {
                    Isa::Vmx => Some(VmxExit::from_name(&name).unwrap_or(VmxExit::Other)),
                    Isa::Svm => Some(VmxExit::of_svm(&name, info1 & 1 == 1)),
                    Isa::Other(_) => None,
                };
                let row = self
                    .exits
                    .entry(vcpu)
                    .or_default()
                    .entry(name.clone())
                    .or_default();
                row.category = category;
                row.count += 1;
                if let Some(ns) = elapsed {
                    row.time.add(ns);
                }
                let cause = self.exit_cause(&name, category, isa, info1, intr_info, &exit.facts);
                (cause, None)
            }
            Opened::Trap { mnemonic } => {
                *self.traps.entry(mnemonic).or_insert(0) += 1;
                (self.trap_cause(mnemonic, &exit.facts), Some(mnemonic))
            }
            Opened::Access => (self.trap_cause("", &exit.facts), None),
        };
        if cause.class() == ExitClass::Hlt {
            self.halts.halts += 1;
            if let Some(vcpu) = vcpu {
                self.halted.insert(vcpu, true);
            }
        }
        let tally = self.causes.entry(cause).or_default();
        tally.count += 1;
        tally.to_userspace += u64::from(exit.facts.userspace);
        if let Some(ns) = elapsed {
            tally.time.add(ns);
        }
        if matches!(exit.opened, Opened::Access) {
            // No instruction address was traced.
            return;
        }
        if self.hot_spots.len() >= HOT_SPOTS_KEPT && !self.hot_spots.contains_key(&exit.rip) {
            self.hot_spots_dropped += 1;
            return;
        }
        let spot = self.hot_spots.entry(exit.rip).or_default();
        spot.rip = exit.rip;
        spot.exits += 1;
        if let Some(ns) = elapsed {
            spot.time.add(ns);
        }
        if spot.instruction.is_none() {
            spot.instruction = instruction.map(str::to_string);
        }
        *spot.classes.entry(cause.class()).or_insert(0) += 1;
    }

    /// What the EOI the facts saw completed.
    fn completed(&self, facts: &Facts) -> (InterruptSource, Option<TriggerMode>) {
        facts
            .eoi
            .and_then(|key| self.vector_origin.get(&key).copied())
            .map_or((InterruptSource::Unknown, None), |(source, trigger)| {
                (source, Some(trigger))
            })
    }

    /// The cause of an access the facts recorded, if any: an MSR first
    /// (it carries the full value), then an APIC register, then I/O.
    fn access_cause(&mut self, facts: &Facts) -> Option<ExitCause> {
        let (completes, trigger) = if facts.eoi.is_some() {
            self.completed(facts)
        } else {
            (InterruptSource::Unknown, None)
        };
        let cause = if let Some((write, msr, data)) = facts.msr {
            let value = facts.ipi.unwrap_or(data);
            ExitCause::msr_access(msr, write, value, completes, trigger)
        } else if let Some((write, register, value)) = facts.apic {
            let value = facts.ipi.unwrap_or(value);
            ExitCause::apic_access(
                x2apic_msr(u64::from(register)),
                write,
                value,
                completes,
                trigger,
            )
        } else if let Some((write, port)) = facts.pio {
            ExitCause::PortIo { port, write }
        } else if let Some(write) = facts.mmio {
            ExitCause::Mmio { write }
        } else {
            return None;
        };
        Some(self.with_targets(cause))
    }

    /// An IPI's targets' state, where its destination is one known vCPU.
    fn with_targets(&self, cause: ExitCause) -> ExitCause {
        let ExitCause::IpiSend { icr, .. } = cause else {
            return cause;
        };
        // Physical destination, no shorthand (SDM 10.6.1: bit 11, bits 19:18).
        let unicast = icr & (1 << 11) == 0 && icr >> 18 & 0b11 == 0;
        let target = u32::try_from(icr >> 32).unwrap_or(u32::MAX);
        let every_target_running = unicast
            .then(|| self.halted.get(&target).map(|halted| !halted))
            .flatten();
        ExitCause::IpiSend {
            icr,
            every_target_running,
        }
    }

    fn exit_cause(
        &mut self,
        name: &str,
        category: Option<VmxExit>,
        isa: Isa,
        info1: u64,
        intr_info: u32,
        facts: &Facts,
    ) -> ExitCause {
        match (category, name) {
            (Some(VmxExit::ExternalInterrupt), _) => match isa {
                // VM-exit interruption information: bit 31 valid, bits 7:0
                // the vector (SDM 24.9.2). SVM's INTR intercept has none.
                Isa::Vmx if intr_info & 1 << 31 != 0 => {
                    host_interrupt_cause(low_byte(u64::from(intr_info)))
                }
                _ => ExitCause::ExternalInterrupt,
            },
            (Some(VmxExit::InterruptWindow), _) => ExitCause::InterruptWindow,
            (Some(VmxExit::Hlt), _) => ExitCause::Hlt,
            (Some(VmxExit::EoiInduced), _) => {
                let (completes, trigger) = self.completed(facts);
                ExitCause::EoiWrite {
                    completes,
                    trigger: trigger.or(Some(TriggerMode::Level)),
                }
            }
            (_, "PREEMPTION_TIMER") => ExitCause::TimerExpiry,
            (Some(VmxExit::IoInstruction), _) => self.access_cause(facts).unwrap_or(
                // Exit qualification: bit 3 direction (1 = IN), 31:16 port
                // (SDM 27.2.1, table 27-5).
                ExitCause::PortIo {
                    port: u16::try_from((info1 >> 16) & 0xFFFF).unwrap_or(u16::MAX),
                    write: info1 & 1 << 3 == 0,
                },
            ),
            _ => self.access_cause(facts).unwrap_or(ExitCause::Other),
        }
    }

    fn trap_cause(&mut self, mnemonic: &str, facts: &Facts) -> ExitCause {
        match (self.access_cause(facts), mnemonic) {
            (Some(cause), _) => cause,
            (None, "hlt") => ExitCause::Hlt,
            (None, "wrmsr") => ExitCause::UntracedMsr { write: true },
            (None, "rdmsr") => ExitCause::UntracedMsr { write: false },
            (None, _) => ExitCause::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::event::{encode, published_formats, Decoder, Tracepoint};
    use crate::observe::format::EventFormat;
    use dirq_arch::lapic::{APIC_EOI, APIC_ICR_LOW, APIC_TIMER_INITIAL_COUNT};

    const VCPU0: u32 = 100;
    const VCPU1: u32 = 101;
    const DEVICE: u32 = 50;

    /// Feeds records, built from the kernel's published formats and
    /// decoded as the observer decodes them, into one VM's account.
    struct Script {
        formats: Vec<(Tracepoint, EventFormat)>,
        decoder: Decoder,
        account: VmAccount,
        now: u64,
    }

    impl Script {
        fn new(assigned_devices: bool) -> Script {
            let formats = published_formats();
            let (decoder, _) = Decoder::new(&formats);
            let mut account = VmAccount::new(assigned_devices);
            account.set_vcpu_thread(VCPU0, 0);
            account.set_vcpu_thread(VCPU1, 1);
            Script {
                formats,
                decoder,
                account,
                now: 0,
            }
        }

        /// One record of `tracepoint` in thread `tid`, `ns` after the last.
        fn at(
            &mut self,
            ns: u64,
            tid: u32,
            tracepoint: Tracepoint,
            fields: &[(&str, u64)],
        ) -> &mut Script {
            let format = &self
                .formats
                .iter()
                .find(|(t, _)| *t == tracepoint)
                .unwrap()
                .1;
            let event = self.decoder.decode(&encode(format, fields)).unwrap();
            self.now += ns;
            let traced = Traced {
                time_ns: self.now,
                cpu: 0,
                pid: 1,
                tid,
                event,
            };
            self.account.record(&traced, &self.decoder);
            self
        }

        fn vmx_code(&self, name: &str) -> u64 {
            let exit = &self
                .formats
                .iter()
                .find(|(t, _)| *t == Tracepoint::KvmExit)
                .unwrap()
                .1;
            *exit.symbols[0]
                .names
                .iter()
                .find(|(_, n)| *n == name)
                .unwrap()
                .0
        }

        fn vmx_exit(
            &mut self,
            ns: u64,
            tid: u32,
            name: &str,
            rip: u64,
            extra: &[(&str, u64)],
        ) -> &mut Script {
            let vcpu = u64::from(tid - VCPU0);
            let mut fields = vec![
                ("exit_reason", self.vmx_code(name)),
                ("isa", 1),
                ("guest_rip", rip),
                ("vcpu_id", vcpu),
            ];
            fields.extend_from_slice(extra);
            self.at(ns, tid, Tracepoint::KvmExit, &fields)
        }

        /// The LAPIC of vCPU 0 accepting `vector`, 1 ns later.
        fn accepted(&mut self, tid: u32, vector: u64) -> &mut Script {
            self.at(
                1,
                tid,
                Tracepoint::KvmApicAcceptIrq,
                &[("apicid", 0), ("vec", vector)],
            )
        }

        /// The guest's x2APIC EOI write of `vector`, as KVM traces it.
        fn x2apic_eoi(&mut self, tid: u32, vector: u64) -> &mut Script {
            self.at(
                1,
                tid,
                Tracepoint::KvmMsr,
                &[("write", 1), ("ecx", msr(APIC_EOI))],
            )
            .at(
                1,
                tid,
                Tracepoint::KvmEoi,
                &[("apicid", 0), ("vector", vector)],
            )
        }

        fn entry(&mut self, ns: u64, tid: u32) -> &mut Script {
            self.at(
                ns,
                tid,
                Tracepoint::KvmEntry,
                &[("vcpu_id", u64::from(tid - VCPU0))],
            )
        }

        fn cause(&self, cause: ExitCause) -> CauseTally {
            self.account.causes.get(&cause).copied().unwrap_or_default()
        }
    }

    fn msr(offset: u64) -> u64 {
        u64::from(x2apic_msr(offset))
    }

    #[test]
    fn an_msi_its_eoi_exit_and_the_exits_time_add_up_on_vmx() {
        let mut script = Script::new(false);
        script
            .at(
                0,
                DEVICE,
                Tracepoint::KvmMsiSetIrq,
                &[("address", 0xFEE0_0000), ("data", 0x41)],
            )
            .accepted(DEVICE, 0x41)
            .vmx_exit(1_000, VCPU0, "MSR_WRITE", 0x1000, &[])
            .at(
                100,
                VCPU0,
                Tracepoint::KvmMsr,
                &[("write", 1), ("ecx", msr(APIC_EOI))],
            )
            .at(
                100,
                VCPU0,
                Tracepoint::KvmEoi,
                &[("apicid", 0), ("vector", 0x41)],
            )
            .entry(1_800, VCPU0);
        let eoi = ExitCause::EoiWrite {
            completes: InterruptSource::EmulatedDevice,
            trigger: Some(TriggerMode::Edge),
        };
        let tally = script.cause(eoi);
        assert_eq!((tally.count, tally.time.total_ns), (1, 2_000));
        let row = &script.account.exit_rows()["MSR_WRITE"];
        assert_eq!(
            (row.count, row.category, row.time.max_ns),
            (1, Some(VmxExit::MsrWrite), 2_000)
        );
        let spot = script.account.hot_spots().next().unwrap();
        assert_eq!(
            (spot.rip, spot.exits, spot.classes[&ExitClass::EoiWrite]),
            (0x1000, 1, 1)
        );
        let vector = &script.account.vectors[&0x41];
        assert_eq!((vector.accepted[&SourceKind::Msi], vector.eois), (1, 1));
        assert_eq!(
            script.account.vcpu_exit_rows()[&Some(0)]["MSR_WRITE"].count,
            1
        );
    }

    #[test]
    fn an_msi_of_a_vm_with_an_assigned_device_completes_an_unknown_source() {
        let mut script = Script::new(true);
        script
            .at(0, DEVICE, Tracepoint::KvmMsiSetIrq, &[("data", 0x41)])
            .accepted(DEVICE, 0x41)
            .vmx_exit(10, VCPU0, "MSR_WRITE", 0x1000, &[])
            .x2apic_eoi(VCPU0, 0x41)
            .entry(1, VCPU0);
        let eoi = ExitCause::EoiWrite {
            completes: InterruptSource::Unknown,
            trigger: Some(TriggerMode::Edge),
        };
        assert_eq!(script.cause(eoi).count, 1);
    }

    #[test]
    fn kvm_pvm_traps_are_classed_by_what_the_emulated_instruction_touched() {
        let mut script = Script::new(false);
        script
            .at(
                0,
                VCPU0,
                Tracepoint::KvmEmulateInsn,
                &[("rip", 0x2000), ("len", 2), ("insn", 0x300F)],
            )
            .at(
                1,
                VCPU0,
                Tracepoint::KvmMsr,
                &[
                    ("write", 1),
                    ("ecx", msr(APIC_TIMER_INITIAL_COUNT)),
                    ("data", 5000),
                ],
            )
            .at(
                1,
                VCPU0,
                Tracepoint::KvmEmulateInsn,
                &[("rip", 0x3000), ("len", 1), ("insn", 0xEE)],
            )
            .at(
                1,
                VCPU0,
                Tracepoint::KvmPio,
                &[("rw", 1), ("port", 0xF4), ("size", 1), ("count", 1)],
            )
            .at(1, VCPU0, Tracepoint::KvmUserspaceExit, &[("reason", 2)])
            .at(
                1,
                VCPU0,
                Tracepoint::KvmEmulateInsn,
                &[("rip", 0x4000), ("len", 1), ("insn", 0xF4)],
            );
        script.account.finish(&script.decoder);
        let timer = script.cause(ExitCause::TimerProgramming {
            msr: x2apic_msr(APIC_TIMER_INITIAL_COUNT),
        });
        assert_eq!(
            (timer.count, timer.time.samples),
            (1, 0),
            "no entry: no time"
        );
        let port = script.cause(ExitCause::PortIo {
            port: 0xF4,
            write: true,
        });
        assert_eq!((port.count, port.to_userspace), (1, 1));
        assert_eq!(script.cause(ExitCause::Hlt).count, 1);
        assert_eq!(script.account.halts.halts, 1);
        assert_eq!(script.account.traps["wrmsr"], 1);
        assert_eq!(script.account.userspace_exits["KVM_EXIT_IO"], 1);
        assert!(!script.account.exits_traced(), "kvm_exit never fired");
        let spots: BTreeMap<u64, Option<String>> = script
            .account
            .hot_spots()
            .map(|s| (s.rip, s.instruction.clone()))
            .collect();
        assert_eq!(spots[&0x3000].as_deref(), Some("out"));
    }

    #[test]
    fn an_external_interrupts_host_vector_names_its_cause() {
        let mut script = Script::new(false);
        let valid = 1u64 << 31;
        for (vector, rip) in [(0xFD, 1), (0xEC, 2), (0x31, 3), (0xFC, 4), (0xFF, 5)] {
            script
                .vmx_exit(
                    10,
                    VCPU0,
                    "EXTERNAL_INTERRUPT",
                    rip,
                    &[("intr_info", valid | vector)],
                )
                .entry(10, VCPU0);
        }
        script
            .vmx_exit(10, VCPU0, "EXTERNAL_INTERRUPT", 6, &[("intr_info", 0xFD)])
            .entry(10, VCPU0);
        for cause in [
            ExitCause::InterruptDelivery,
            ExitCause::HostTimer,
            ExitCause::HostDeviceInterrupt,
            ExitCause::HostIpi,
        ] {
            assert_eq!(script.cause(cause).count, 1, "{cause:?}");
        }
        assert_eq!(
            script.cause(ExitCause::ExternalInterrupt).count,
            2,
            "0xFF and an invalid vector"
        );
    }

    #[test]
    fn an_svm_interrupt_exit_has_no_vector_to_tell() {
        let mut script = Script::new(false);
        let exit = &script
            .formats
            .iter()
            .find(|(t, _)| *t == Tracepoint::KvmExit)
            .unwrap()
            .1;
        let code = *exit.symbols[1]
            .names
            .iter()
            .find(|(_, n)| *n == "interrupt")
            .unwrap()
            .0;
        script
            .at(
                0,
                VCPU0,
                Tracepoint::KvmExit,
                &[
                    ("exit_reason", code),
                    ("isa", 2),
                    ("intr_info", 0x8000_00FD),
                ],
            )
            .entry(5, VCPU0);
        assert_eq!(script.cause(ExitCause::ExternalInterrupt).count, 1);
        assert_eq!(
            script.account.exit_rows()["interrupt"].category,
            Some(VmxExit::ExternalInterrupt)
        );
    }

    #[test]
    fn the_timers_vector_comes_from_the_guests_lvt_write() {
        let mut script = Script::new(false);
        script
            .vmx_exit(0, VCPU0, "MSR_WRITE", 0x10, &[])
            .at(
                1,
                VCPU0,
                Tracepoint::KvmApic,
                &[("rw", 1), ("reg", APIC_LVT_TIMER), ("val", 0xEF)],
            )
            .entry(1, VCPU0)
            .accepted(VCPU0, 0xEF)
            .vmx_exit(1, VCPU0, "MSR_WRITE", 0x20, &[])
            .x2apic_eoi(VCPU0, 0xEF)
            .entry(1, VCPU0);
        assert_eq!(
            script.account.vectors[&0xEF].accepted[&SourceKind::Timer],
            1
        );
        let eoi = ExitCause::EoiWrite {
            completes: InterruptSource::Timer,
            trigger: Some(TriggerMode::Edge),
        };
        assert_eq!(script.cause(eoi).count, 1);
        let lvt = ExitCause::TimerProgramming {
            msr: x2apic_msr(APIC_LVT_TIMER),
        };
        assert_eq!(script.cause(lvt).count, 1);
    }

    #[test]
    fn an_ipi_to_a_halted_vcpu_is_sent_to_a_target_not_running() {
        let mut script = Script::new(false);
        let icr = 1u64 << 32 | 0xFB;
        let send = |script: &mut Script| {
            script
                .vmx_exit(1, VCPU0, "MSR_WRITE", 0x30, &[])
                .at(
                    1,
                    VCPU0,
                    Tracepoint::KvmMsr,
                    &[("write", 1), ("ecx", msr(APIC_ICR_LOW)), ("data", icr)],
                )
                .at(
                    1,
                    VCPU0,
                    Tracepoint::KvmApicIpi,
                    &[("icr_low", 0xFB), ("dest_id", 1)],
                )
                .at(
                    1,
                    VCPU0,
                    Tracepoint::KvmApicAcceptIrq,
                    &[("apicid", 1), ("vec", 0xFB)],
                )
                .entry(1, VCPU0);
        };
        script.vmx_exit(0, VCPU1, "HLT", 0x40, &[]).entry(1, VCPU1);
        send(&mut script);
        script.at(
            1,
            VCPU1,
            Tracepoint::KvmVcpuWakeup,
            &[("ns", 2_000), ("waited", 1), ("valid", 1)],
        );
        send(&mut script);
        let to = |running| ExitCause::IpiSend {
            icr,
            every_target_running: Some(running),
        };
        assert_eq!(script.cause(to(false)).count, 1);
        assert_eq!(script.cause(to(true)).count, 1);
        assert_eq!(script.account.vectors[&0xFB].accepted[&SourceKind::Ipi], 2);
        let halts = script.account.halts;
        assert_eq!(
            (halts.halts, halts.woke_from_sleep, halts.slept_ns),
            (1, 1, 2_000)
        );
    }

    #[test]
    fn a_level_triggered_pin_completes_through_an_eoi_induced_exit() {
        let mut script = Script::new(false);
        script
            .at(
                0,
                DEVICE,
                Tracepoint::KvmIoapicSetIrq,
                &[("e", 0x8031), ("pin", 10)],
            )
            .at(
                1,
                DEVICE,
                Tracepoint::KvmApicAcceptIrq,
                &[("apicid", 0), ("vec", 0x31), ("tm", 1)],
            )
            .vmx_exit(1, VCPU0, "EOI_INDUCED", 0x50, &[])
            .at(
                1,
                VCPU0,
                Tracepoint::KvmEoi,
                &[("apicid", 0), ("vector", 0x31)],
            )
            .entry(1, VCPU0);
        let eoi = ExitCause::EoiWrite {
            completes: InterruptSource::EmulatedDevice,
            trigger: Some(TriggerMode::Level),
        };
        assert_eq!(script.cause(eoi).count, 1);
        assert_eq!(script.account.vectors[&0x31].level_triggered, 1);
    }

    #[test]
    fn a_raise_counts_only_for_the_acceptances_that_follow_it_in_its_thread() {
        let mut script = Script::new(false);
        script
            .at(0, DEVICE, Tracepoint::KvmMsiSetIrq, &[("data", 0x41)])
            .at(1, DEVICE, Tracepoint::KvmPio, &[("rw", 1), ("port", 0x70)])
            .accepted(DEVICE, 0x41)
            .accepted(VCPU1, 0x42);
        assert_eq!(
            script.account.vectors[&0x41].accepted[&SourceKind::Local],
            1
        );
        assert_eq!(
            script.account.vectors[&0x42].accepted[&SourceKind::Local],
            1
        );
    }

    #[test]
    fn accesses_no_exit_encloses_count_as_the_exits_they_would_be() {
        let mut script = Script::new(false);
        let icr = APIC_ICR_LOW;
        let eoi = APIC_EOI;
        script
            .at(0, VCPU0, Tracepoint::KvmPio, &[("rw", 0), ("port", 0xE0)])
            .at(1, VCPU0, Tracepoint::KvmPio, &[("rw", 0), ("port", 0xE0)])
            .at(
                1,
                VCPU0,
                Tracepoint::KvmApic,
                &[("rw", 1), ("reg", icr), ("val", 0x4_0041)],
            )
            .at(1, VCPU0, Tracepoint::KvmApicIpi, &[("icr_low", 0x4_0041)])
            .accepted(VCPU0, 0x41)
            .at(1, VCPU0, Tracepoint::KvmApic, &[("rw", 1), ("reg", eoi)])
            .at(
                1,
                VCPU0,
                Tracepoint::KvmEoi,
                &[("apicid", 0), ("vector", u64::from(u32::MAX))],
            );
        script.account.finish(&script.decoder);
        assert_eq!(
            script
                .cause(ExitCause::PortIo {
                    port: 0xE0,
                    write: false
                })
                .count,
            2
        );
        let send = ExitCause::IpiSend {
            icr: 0x4_0041,
            every_target_running: None,
        };
        assert_eq!(script.cause(send).count, 1);
        let completes = ExitCause::EoiWrite {
            completes: InterruptSource::Unknown,
            trigger: None,
        };
        assert_eq!(script.cause(completes).count, 1);
        assert_eq!(script.account.vectors[&0x41].accepted[&SourceKind::Ipi], 1);
        assert_eq!(script.account.eois_with_none_in_service, 1);
        assert_eq!(
            script.account.hot_spots().count(),
            0,
            "no instruction address"
        );
    }

    #[test]
    fn an_emulated_guests_instructions_are_not_counted_as_its_exits() {
        let mut script = Script::new(false);
        script
            .at(
                0,
                VCPU0,
                Tracepoint::KvmEmulateInsn,
                &[("rip", 0x10), ("len", 1), ("insn", 0x90)],
            )
            .at(
                1,
                VCPU0,
                Tracepoint::KvmEmulateInsn,
                &[("rip", 0x11), ("len", 1), ("insn", 0xE5)],
            );
        assert_eq!(script.account.traps_total(), (1, 1));
        script.account.mark_emulated_execution();
        script
            .at(
                1,
                VCPU0,
                Tracepoint::KvmEmulateInsn,
                &[("rip", 0x11), ("len", 1), ("insn", 0xE5)],
            )
            .at(1, VCPU0, Tracepoint::KvmPio, &[("rw", 0), ("port", 0xE0)])
            .at(
                1,
                VCPU0,
                Tracepoint::KvmEmulateInsn,
                &[("rip", 0x13), ("len", 1), ("insn", 0x90)],
            );
        script.account.finish(&script.decoder);
        assert!(script.account.emulated_execution());
        assert_eq!(script.account.traps_total(), (0, 0));
        assert_eq!(
            script
                .cause(ExitCause::PortIo {
                    port: 0xE0,
                    write: false
                })
                .count,
            1
        );
        assert_eq!(
            script.account.causes.len(),
            1,
            "{:?}",
            script.account.causes
        );
    }

    #[test]
    fn an_io_exit_without_a_pio_record_reads_its_port_from_the_qualification() {
        let mut script = Script::new(false);
        // IN from port 0x71: direction bit 3 set.
        script
            .vmx_exit(
                0,
                VCPU0,
                "IO_INSTRUCTION",
                0x60,
                &[("info1", 0x71 << 16 | 1 << 3)],
            )
            .entry(1, VCPU0);
        assert_eq!(
            script
                .cause(ExitCause::PortIo {
                    port: 0x71,
                    write: false
                })
                .count,
            1
        );
    }
}
