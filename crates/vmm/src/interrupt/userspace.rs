//! `--irqchip userspace`: no KVM irqchip; dirq's LAPIC models
//! (`dirq_arch::lapic`) stand in for KVM's, and dirq's IOAPIC delivers into
//! them over `dirq_arch::bus`. Every xAPIC MMIO and x2APIC MSR access exits
//! to this process; interrupts go in through KVM_INTERRUPT before an entry
//! when the vCPU can take them, halted vCPUs sleep here, and a timer thread
//! fires the LAPIC timers.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use kvm_bindings::{
    kvm_interrupt, kvm_segment, KVM_MSR_EXIT_REASON_FILTER, KVM_MSR_EXIT_REASON_INVAL,
};
use kvm_bindings::{KVM_CAP_X86_USER_SPACE_MSR, KVM_MSR_EXIT_REASON_UNKNOWN};
use kvm_ioctls::{MsrFilterDefaultAction, MsrFilterRange, MsrFilterRangeFlags, VcpuFd};
use vmm_sys_util::ioctl::ioctl_with_ref;
use vmm_sys_util::ioctl_iow_nr;

use dirq_arch::bus;
use dirq_arch::clock::Clock;
use dirq_arch::interrupt::{ApicBusMessage, Interrupt};
use dirq_arch::lapic::{
    AcceptOutcome, DeliveryMode, Lapic, LapicConfig, StartupState, MMIO_SIZE, MSR_IA32_APIC_BASE,
    MSR_IA32_TSC_DEADLINE, MSR_X2APIC_FIRST, MSR_X2APIC_LAST,
};
use dirq_arch::msi::{MsiFormat, MsiMessage};

use super::ioapic::{ApicBus, IoapicDevice, IoapicPin};
use super::{
    InterruptController, InterruptError, InterruptSink, Kicker, Path, Setup, TimerLoop,
    APIC_TIMER_HZ,
};
use crate::abi;
use crate::bus::{BankedMmio, Bus, Claim, DeviceError, MsrDevice};
use crate::config::Irqchip;
use crate::exec::{read_msr, write_msr};
use crate::run_control::RunControl;
use crate::vm::{Vm, VmError};

const KVMIO: u32 = 0xae;
ioctl_iow_nr!(KVM_INTERRUPT, KVMIO, 0x86, kvm_interrupt);

/// Longest a halted vCPU or the timer thread sleeps before re-checking for a stop.
const STOP_POLL: Duration = Duration::from_millis(20);
const MSR_IA32_TSC: u32 = 0x10;

/// Without KVM's LAPIC, x2APIC MSR accesses fail inside KVM; this makes
/// them exit to the VMM instead. KVM would handle IA32_APIC_BASE itself
/// and ignore IA32_TSC_DEADLINE, so a filter sends those two to us too.
pub(super) fn prepare_vm(vm: &Vm) -> Result<(), InterruptError> {
    let reasons =
        KVM_MSR_EXIT_REASON_INVAL | KVM_MSR_EXIT_REASON_UNKNOWN | KVM_MSR_EXIT_REASON_FILTER;
    vm.enable_cap(
        KVM_CAP_X86_USER_SPACE_MSR,
        u64::from(reasons),
        "KVM_CAP_X86_USER_SPACE_MSR",
    )?;
    let deny_one = [0u8; 1];
    let deny = |msr| MsrFilterRange {
        flags: MsrFilterRangeFlags::READ | MsrFilterRangeFlags::WRITE,
        base: msr,
        msr_count: 1,
        bitmap: &deny_one,
    };
    vm.fd
        .set_msr_filter(
            MsrFilterDefaultAction::ALLOW,
            &[deny(MSR_IA32_APIC_BASE), deny(MSR_IA32_TSC_DEADLINE)],
        )
        .map_err(|source| VmError::Kvm {
            what: "KVM_X86_SET_MSR_FILTER",
            source,
        })?;
    Ok(())
}

/// The guest's TSC as a clock: the LAPIC models convert TSC-deadline values
/// with it, so it must tick with the guest's TSC.
pub struct GuestTscClock {
    /// guest TSC - host TSC, sampled at boot.
    offset: i64,
    tsc_khz: u64,
}

impl GuestTscClock {
    pub fn new(guest_tsc: u64, host_tsc: u64, tsc_khz: u64) -> Self {
        GuestTscClock {
            offset: guest_tsc.wrapping_sub(host_tsc).cast_signed(),
            tsc_khz: tsc_khz.max(1),
        }
    }

    pub fn host_tsc() -> u64 {
        // SAFETY: RDTSC has no memory effects; every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
}

impl Clock for GuestTscClock {
    fn now_ns(&self) -> u64 {
        let guest_tsc = Self::host_tsc().wrapping_add(self.offset.cast_unsigned());
        u64::try_from(u128::from(guest_tsc) * 1_000_000 / u128::from(self.tsc_khz))
            .unwrap_or(u64::MAX)
    }
}

struct CpuApic {
    lapic: Mutex<Lapic>,
    /// Signalled when an interrupt arrives for a halted vCPU.
    wake: Condvar,
    /// The vCPU sleeps in `halted` (changed only under `lapic`'s
    /// lock): waking it needs the condvar, not a kick out of KVM_RUN.
    halted: AtomicBool,
    /// A kick went out since the vCPU last looked at its LAPIC
    /// (`before_entry`): it will see everything latched since, so a
    /// second kick would only force another exit. Without this, a device
    /// raising faster than the vCPU takes interrupts queues one signal
    /// per raise and the vCPU spends its time leaving the guest.
    kicked: AtomicBool,
    /// The CR8 the VMM last gave KVM for this vCPU (TPR[7:4]): a
    /// different value on the next entry is the guest's own MOV to CR8.
    cr8: AtomicU8,
    /// The IA32_APIC_BASE KVM was last given, `u64::MAX` before the first.
    apic_base_in_kvm: AtomicU64,
}

pub struct UserspaceIrqchip {
    cpus: Vec<CpuApic>,
    clock: GuestTscClock,
    kicker: Arc<Kicker>,
    /// Bumped on every LAPIC register write, so the timer thread re-plans.
    timer_generation: Mutex<u64>,
    timer_changed: Condvar,
    /// dirq's IOAPIC, delivering into these LAPICs; it receives the EOIs
    /// of level-triggered vectors.
    ioapic: Arc<IoapicDevice>,
    /// This irqchip, for the sinks it hands out.
    this: Weak<UserspaceIrqchip>,
    /// SMI and ExtINT messages dropped (`deliver`).
    refused_smi: AtomicU64,
    refused_extint: AtomicU64,
}

impl CpuApic {
    /// Sleeps, marked halted, until `awake` holds for the LAPIC or the run
    /// stops; the lock again, and whether `awake` holds.
    fn sleep_until<'a>(
        &'a self,
        mut lapic: MutexGuard<'a, Lapic>,
        control: &RunControl,
        awake: impl Fn(&Lapic) -> bool,
    ) -> (MutexGuard<'a, Lapic>, bool) {
        self.halted.store(true, Ordering::Relaxed);
        while !awake(&lapic) && !control.should_stop() {
            lapic = self
                .wake
                .wait_timeout(lapic, STOP_POLL)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        self.halted.store(false, Ordering::Relaxed);
        let woken = awake(&lapic);
        (lapic, woken)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Model state stays consistent across a panic: each update is one call.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl UserspaceIrqchip {
    /// One LAPIC per vCPU, APIC ID = vCPU index, timer bus at `bus_hz`,
    /// and an IOAPIC.
    pub fn new(
        vcpus: usize,
        bus_hz: u64,
        clock: GuestTscClock,
        kicker: Arc<Kicker>,
        physical_address_bits: u8,
    ) -> Result<Arc<Self>, InterruptError> {
        let config = LapicConfig::new(bus_hz, clock.tsc_khz * 1000)?
            .with_physical_address_bits(physical_address_bits);
        let cpus = (0..vcpus)
            .map(|cpu| CpuApic {
                lapic: Mutex::new(Lapic::new(
                    u32::try_from(cpu).expect("vCPU indices are below abi::MAX_CPUS"),
                    config,
                )),
                wake: Condvar::new(),
                halted: AtomicBool::new(false),
                kicked: AtomicBool::new(false),
                cr8: AtomicU8::new(0),
                apic_base_in_kvm: AtomicU64::new(u64::MAX),
            })
            .collect();
        Ok(Arc::new_cyclic(|this| UserspaceIrqchip {
            cpus,
            clock,
            kicker,
            timer_generation: Mutex::new(0),
            timer_changed: Condvar::new(),
            ioapic: Arc::new(IoapicDevice::new(Box::new(UserspaceLapics(this.clone())))),
            this: this.clone(),
            refused_smi: AtomicU64::new(0),
            refused_extint: AtomicU64::new(0),
        }))
    }

    /// The irqchip of a run, its LAPICs and IOAPIC on `setup.bus`; its
    /// timers count the guest's TSC.
    pub(super) fn create(setup: Setup) -> Result<Arc<Self>, InterruptError> {
        let host_tsc = GuestTscClock::host_tsc();
        let guest_tsc = read_msr(setup.boot_vcpu, MSR_IA32_TSC).ok_or(InterruptError::GuestTsc)?;
        let clock = GuestTscClock::new(guest_tsc, host_tsc, setup.tsc_khz);
        let chip = Self::new(
            setup.vcpus,
            APIC_TIMER_HZ,
            clock,
            setup.kicker.clone(),
            physical_address_bits(setup.boot_vcpu),
        )?;
        chip.attach(setup.bus);
        Ok(chip)
    }

    /// Puts the xAPIC pages, the LAPIC MSRs and the IOAPIC on `bus`.
    pub fn attach(self: &Arc<Self>, bus: &mut Bus) {
        bus.add_banked_mmio(Arc::new(LapicMmio(self.clone())));
        let msrs = Arc::new(LapicMsrs(self.clone()));
        for range in LapicMsrs::RANGES {
            bus.add_msr(range, msrs.clone());
        }
        bus.add_mmio(
            abi::IOAPIC_GPA..abi::IOAPIC_GPA + IoapicDevice::SIZE,
            self.ioapic.clone(),
        );
    }

    fn cpu(&self, cpu: usize) -> Result<&CpuApic, InterruptError> {
        self.cpus.get(cpu).ok_or(InterruptError::NoLapic(cpu))
    }

    /// The highest-priority interrupt `cpu`'s LAPIC would dispatch now.
    pub fn pending_vector(&self, cpu: usize) -> Result<Option<u8>, InterruptError> {
        Ok(lock(&self.cpu(cpu)?.lapic).pending_vector())
    }

    /// `vector` was handed to KVM_INTERRUPT: move it from IRR to ISR.
    pub fn acknowledge(&self, cpu: usize, vector: u8) -> Result<(), InterruptError> {
        match lock(&self.cpu(cpu)?.lapic).acknowledge() {
            Some(acked) if acked == vector => Ok(()),
            acknowledged => Err(InterruptError::Acknowledged {
                injected: vector,
                acknowledged,
            }),
        }
    }

    /// Puts `interrupt` on the APIC bus: every LAPIC it addresses latches it
    /// and its vCPU is woken (halted) or kicked out of KVM_RUN (running).
    /// `sender` is the vCPU whose own run loop is delivering, if any: it
    /// injects before its next entry without a kick. An edge that finds
    /// its IRR bit set is absorbed (SDM 10.8.4: one pending instance per
    /// vector) and needs no kick: the vCPU was told when the bit was set.
    pub fn deliver(
        &self,
        interrupt: Interrupt,
        sender: Option<usize>,
    ) -> Result<(), InterruptError> {
        // No SMM and no 8259 here: an SMI has nowhere to go, and an
        // ExtINT has no PIC to supply its vector (SDM 10.6.1). Both are
        // dropped and counted, as a platform without them would.
        match interrupt.delivery_mode {
            DeliveryMode::Smi => {
                self.refused_smi.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            DeliveryMode::ExtInt => {
                self.refused_extint.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            _ => {}
        }
        // Every LAPIC is locked, in vCPU order, so that lowest-priority
        // arbitration sees one consistent set of priorities.
        let mut lapics: Vec<MutexGuard<'_, Lapic>> =
            self.cpus.iter().map(|apic| lock(&apic.lapic)).collect();
        let views: Vec<&Lapic> = lapics.iter().map(|lapic| &**lapic).collect();
        let targets = bus::route(&interrupt, &views)?;
        for cpu in targets.iter() {
            let lapic = &mut lapics[cpu];
            match interrupt.delivery_mode {
                DeliveryMode::Nmi => lapic.receive_nmi(),
                DeliveryMode::Init => lapic.receive_init(),
                DeliveryMode::StartUp => lapic.receive_sipi(interrupt.vector),
                _ => {
                    if lapic.accept(interrupt.vector, interrupt.trigger_mode)
                        != AcceptOutcome::Latched
                    {
                        continue;
                    }
                }
            }
            self.wake(cpu, &self.cpus[cpu], lapic, sender);
        }
        Ok(())
    }

    /// Gets new work on `lapic` seen: a halted vCPU is woken, a running
    /// one kicked out of KVM_RUN, unless it is `sender`, which injects
    /// before its next entry anyway, or was kicked already. Nothing is
    /// done for an interrupt the LAPIC holds back (a higher or equal class
    /// in service, or the TPR): only an EOI or a TPR write lets it in,
    /// and both exit to this VMM, whose next entry injects it.
    /// `lapic` is `apic.lapic`, locked.
    fn wake(&self, cpu: usize, apic: &CpuApic, lapic: &Lapic, sender: Option<usize>) {
        if !has_work(lapic) {
            return;
        }
        if apic.halted.load(Ordering::Relaxed) {
            apic.wake.notify_all();
        } else if sender != Some(cpu) && !apic.kicked.swap(true, Ordering::SeqCst) {
            self.kicker.kick(cpu);
        }
    }

    /// A guest write to `cpu`'s LAPIC: `write` applies it to the model,
    /// then its bus message goes out. The timer thread is woken only when
    /// the write moved the timer's deadline: an EOI or ICR write at every
    /// interrupt must not cost a futex wake and a pass of that thread.
    fn write_register(
        &self,
        cpu: usize,
        write: impl FnOnce(&mut Lapic) -> Result<Option<ApicBusMessage>, InterruptError>,
    ) -> Result<(), InterruptError> {
        let (message, timer_moved) = {
            let mut lapic = lock(&self.cpu(cpu)?.lapic);
            let before = lapic.timer_deadline_ns();
            let message = write(&mut lapic)?;
            (message, lapic.timer_deadline_ns() != before)
        };
        if timer_moved {
            self.timer_changed();
        }
        match message {
            Some(ApicBusMessage::Ipi(interrupt)) => self.deliver(interrupt, Some(cpu)),
            Some(ApicBusMessage::Eoi(vector)) => self.ioapic.end_of_interrupt(vector),
            None => Ok(()),
        }
    }

    /// `cpu` is about to read its LAPIC before an entry: a raise that
    /// latches after this kicks it again, one before it is injected then.
    fn rearm_kick(&self, cpu: usize) -> Result<(), InterruptError> {
        self.cpu(cpu)?.kicked.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Holds `cpu` while it waits for SIPI (SDM 8.4.1) and starts it in
    /// real mode when one arrives. False if the run stopped first.
    fn start_if_waiting(
        &self,
        cpu: usize,
        vcpu: &VcpuFd,
        control: &RunControl,
    ) -> Result<bool, InterruptError> {
        let apic = self.cpu(cpu)?;
        let lapic = lock(&apic.lapic);
        if lapic.startup_state() == StartupState::Running {
            return Ok(true);
        }
        let (mut lapic, sipi_or_running) = apic.sleep_until(lapic, control, |lapic| {
            lapic.startup_state() != StartupState::WaitForSipi
        });
        if !sipi_or_running {
            return Ok(false);
        }
        if let StartupState::StartAt { vector } = lapic.startup_state() {
            start_in_real_mode(vcpu, vector)?;
            lapic.started();
            apic.cr8.store(0, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Keeps CR8 and the TPR one register (SDM 10.8.6.1: CR8[3:0] =
    /// TPR[7:4]; a MOV to CR8 clears TPR[3:0]). Without KVM's LAPIC, KVM
    /// keeps the guest's CR8, reports it in `kvm_run.cr8` at each exit
    /// (`take_guest_cr8`) and loads it from there at each entry (this).
    fn give_guest_cr8(&self, cpu: usize, vcpu: &mut VcpuFd) -> Result<(), InterruptError> {
        let apic = self.cpu(cpu)?;
        let cr8 = lock(&apic.lapic).tpr() >> 4;
        vcpu.get_kvm_run().cr8 = u64::from(cr8);
        apic.cr8.store(cr8, Ordering::Relaxed);
        Ok(())
    }

    /// The guest's CR8 at an exit: a value other than the one it was
    /// given is its own MOV to CR8, which sets the TPR.
    fn take_guest_cr8(&self, cpu: usize, cr8: u64) -> Result<(), InterruptError> {
        let apic = self.cpu(cpu)?;
        let mut lapic = lock(&apic.lapic);
        let guest_cr8 = u8::try_from(cr8 & 0xf).unwrap_or(0);
        if guest_cr8 != apic.cr8.load(Ordering::Relaxed) {
            lapic.set_tpr(guest_cr8 << 4);
            apic.cr8.store(guest_cr8, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Hands the model's IA32_APIC_BASE to KVM when it changed: KVM
    /// derives CPUID.1:EDX.APIC[bit 9] from its own copy (SDM 10.4.3: the
    /// flag reads 0 while the APIC is globally disabled), and the model
    /// owns the guest's reads and writes of the MSR.
    fn sync_apic_base(&self, cpu: usize, vcpu: &VcpuFd) -> Result<(), InterruptError> {
        let apic = self.cpu(cpu)?;
        let base = lock(&apic.lapic).apic_base();
        if apic.apic_base_in_kvm.swap(base, Ordering::Relaxed) != base
            && !write_msr(vcpu, MSR_IA32_APIC_BASE, base)
        {
            return Err(InterruptError::ApicBaseMirror(base));
        }
        Ok(())
    }

    /// SMI and ExtINT messages dropped so far.
    pub fn refused(&self) -> (u64, u64) {
        (
            self.refused_smi.load(Ordering::Relaxed),
            self.refused_extint.load(Ordering::Relaxed),
        )
    }

    fn timer_changed(&self) {
        *lock(&self.timer_generation) += 1;
        self.timer_changed.notify_all();
    }

    /// Fires due LAPIC timers until the run stops; run it on its own thread.
    pub fn run_timers(&self, control: &RunControl) {
        while !control.should_stop() {
            let mut generation = lock(&self.timer_generation);
            let seen = *generation;
            let next_deadline = self
                .cpus
                .iter()
                .filter_map(|apic| lock(&apic.lapic).timer_deadline_ns())
                .min();
            let now = self.clock.now_ns();
            let sleep = match next_deadline {
                Some(deadline) if deadline <= now => Duration::ZERO,
                Some(deadline) => Duration::from_nanos(deadline - now).min(STOP_POLL),
                None => STOP_POLL,
            };
            if !sleep.is_zero() {
                while *generation == seen && !control.should_stop() {
                    let (guard, timeout) = self
                        .timer_changed
                        .wait_timeout(generation, sleep)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    generation = guard;
                    if timeout.timed_out() {
                        break;
                    }
                }
            }
            drop(generation);
            for (cpu, apic) in self.cpus.iter().enumerate() {
                let mut lapic = lock(&apic.lapic);
                if lapic.expire_timer(&self.clock) {
                    self.wake(cpu, apic, &lapic, None);
                }
            }
        }
    }
}

/// The vCPU's MAXPHYADDR (CPUID.80000008H:EAX[7:0]), or 36 (SDM 4.1.4:
/// what a CPU without that leaf has).
fn physical_address_bits(vcpu: &VcpuFd) -> u8 {
    const LEAF_ADDRESS_SIZES: u32 = 0x8000_0008;
    vcpu.get_cpuid2(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
        .ok()
        .and_then(|cpuid| {
            cpuid
                .as_slice()
                .iter()
                .find(|entry| entry.function == LEAF_ADDRESS_SIZES)
                .map(|entry| entry.eax.to_le_bytes()[0])
        })
        .unwrap_or(36)
}

/// Whether a halted vCPU has something to do: an interrupt to take, an
/// NMI, or an INIT or SIPI to act on.
fn has_work(lapic: &Lapic) -> bool {
    lapic.pending_vector().is_some()
        || lapic.nmi_pending()
        || lapic.startup_state() != StartupState::Running
}

/// Real-address mode at `vector` << 12 (SDM 8.4.4.1: CS = vector << 8,
/// IP = 0), every other register as INIT leaves it (SDM 9.1.1 table 9-1).
fn start_in_real_mode(vcpu: &VcpuFd, vector: u8) -> Result<(), InterruptError> {
    const CR0_AFTER_INIT: u64 = 0x6000_0010; // CD, NW, ET
    let fail = |what| move |source| InterruptError::Startup { what, source };
    let mut sregs = vcpu.get_sregs().map_err(fail("KVM_GET_SREGS"))?;
    let data = kvm_segment {
        base: 0,
        limit: 0xffff,
        selector: 0,
        type_: 0x3,
        present: 1,
        s: 1,
        ..Default::default()
    };
    let selector = u16::from(vector) << 8;
    sregs.cs = kvm_segment {
        base: u64::from(selector) << 4,
        selector,
        type_: 0xb,
        ..data
    };
    for segment in [
        &mut sregs.ds,
        &mut sregs.es,
        &mut sregs.fs,
        &mut sregs.gs,
        &mut sregs.ss,
    ] {
        *segment = data;
    }
    sregs.cr0 = CR0_AFTER_INIT;
    sregs.cr2 = 0;
    sregs.cr3 = 0;
    sregs.cr4 = 0;
    sregs.efer = 0;
    sregs.gdt.base = 0;
    sregs.gdt.limit = 0xffff;
    sregs.idt.base = 0;
    sregs.idt.limit = 0xffff;
    vcpu.set_sregs(&sregs).map_err(fail("KVM_SET_SREGS"))?;
    let regs = kvm_bindings::kvm_regs {
        rflags: 0x2,
        ..Default::default()
    };
    vcpu.set_regs(&regs).map_err(fail("KVM_SET_REGS"))
}

/// The IOAPIC's view of these LAPICs; weak, as the irqchip owns the IOAPIC.
struct UserspaceLapics(Weak<UserspaceIrqchip>);

impl ApicBus for UserspaceLapics {
    fn deliver(&self, interrupt: Interrupt) -> Result<(), InterruptError> {
        let chip = self.0.upgrade().ok_or(InterruptError::Gone)?;
        chip.deliver(interrupt, None)
    }
}

impl InterruptController for UserspaceIrqchip {
    fn sink(&self, path: Path) -> Result<Box<dyn InterruptSink>, InterruptError> {
        Ok(match path {
            Path::DirqApicBus(msi) => Box::new(UserspaceMsi {
                chip: self.this.upgrade().ok_or(InterruptError::Gone)?,
                msi,
            }),
            Path::DirqIoapic(pin) => Box::new(IoapicPin {
                ioapic: self.ioapic.clone(),
                pin,
            }),
            _ => {
                return Err(InterruptError::NoPath {
                    path,
                    mode: Irqchip::Userspace,
                })
            }
        })
    }

    /// KVM_INTERRUPT the highest pending vector if the guest can take it
    /// now; otherwise ask KVM for an interrupt-window exit.
    fn before_entry(
        &self,
        cpu: usize,
        vcpu: &mut VcpuFd,
        control: &RunControl,
    ) -> Result<(), InterruptError> {
        self.rearm_kick(cpu)?;
        if !self.start_if_waiting(cpu, vcpu, control)? {
            // Stopped while waiting for SIPI: KVM_RUN returns at once.
            vcpu.set_kvm_immediate_exit(1);
            return Ok(());
        }
        let nmis = lock(&self.cpu(cpu)?.lapic).take_nmis();
        for _ in 0..nmis {
            vcpu.nmi().map_err(InterruptError::Nmi)?;
        }
        self.give_guest_cr8(cpu, vcpu)?;
        self.sync_apic_base(cpu, vcpu)?;
        let pending = self.pending_vector(cpu)?;
        let run = vcpu.get_kvm_run();
        let Some(vector) = pending else {
            run.request_interrupt_window = 0;
            return Ok(());
        };
        // KVM derives ready_for_interrupt_injection from the guest's
        // interruptibility (RFLAGS.IF and the interrupt shadow on VT-x/SVM,
        // the VIF flag under kvm_pvm), so it alone decides. if_flag does
        // not: in kvm_pvm's native mode it never shows the VIF.
        if run.ready_for_interrupt_injection == 0 {
            run.request_interrupt_window = 1;
            return Ok(());
        }
        run.request_interrupt_window = 0;
        let request = kvm_interrupt {
            irq: u32::from(vector),
        };
        // SAFETY: KVM_INTERRUPT reads one kvm_interrupt from the valid
        // reference; the vCPU fd is the caller's and not running (the
        // caller's run loop is about to enter it).
        let ret = unsafe { ioctl_with_ref(vcpu, KVM_INTERRUPT(), &request) };
        if ret < 0 {
            return Err(InterruptError::KvmInterrupt(std::io::Error::last_os_error()));
        }
        self.acknowledge(cpu, vector)
    }

    fn after_exit(&self, cpu: usize, cr8: u64) -> Result<(), InterruptError> {
        self.take_guest_cr8(cpu, cr8)
    }

    fn halted(&self, cpu: usize, control: &RunControl) -> Result<(), InterruptError> {
        let apic = self.cpu(cpu)?;
        // Woken or stopped, the vCPU goes back to its run loop, which
        // checks both.
        let (_lapic, _woken) = apic.sleep_until(lock(&apic.lapic), control, has_work);
        Ok(())
    }

    fn ioapic(&self) -> Option<&Arc<IoapicDevice>> {
        Some(&self.ioapic)
    }

    fn hold_application_processors(&self) {
        for apic in self.cpus.iter().skip(1) {
            lock(&apic.lapic).hold_for_sipi();
        }
    }

    fn timer_loop(self: Arc<Self>) -> Option<TimerLoop> {
        Some(Box::new(move |control| self.run_timers(control)))
    }
}

/// The xAPIC MMIO pages: each vCPU's own LAPIC answers at the base its
/// IA32_APIC_BASE names (SDM 10.4.1, 10.4.5). While its registers are
/// off (APIC disabled or in x2APIC mode, SDM 10.4.3, 10.12.1.2) the page
/// is a hole, as KVM's LAPIC makes it (KVM_X86_QUIRK_LAPIC_MMIO_HOLE, on
/// by default): reads are all-ones, writes of any width are lost.
pub struct LapicMmio(pub Arc<UserspaceIrqchip>);

impl LapicMmio {
    pub const SIZE: u64 = MMIO_SIZE;
}

impl BankedMmio for LapicMmio {
    fn name(&self) -> &'static str {
        "LAPIC (xAPIC MMIO)"
    }

    fn read(&self, cpu: usize, address: u64, data: &mut [u8]) -> Result<Claim, DeviceError> {
        let chip = &self.0;
        let lapic = lock(&chip.cpu(cpu)?.lapic);
        let Some(offset) = lapic.mmio_offset(address) else {
            return Ok(Claim::NotHere);
        };
        if lapic.xapic_mmio_enabled() {
            lapic.read_mmio_bytes(offset, data, &chip.clock);
        } else {
            data.fill(0xff);
        }
        Ok(Claim::Served)
    }

    fn write(&self, cpu: usize, address: u64, data: &[u8]) -> Result<Claim, DeviceError> {
        let chip = &self.0;
        let mut claim = Claim::NotHere;
        chip.write_register(cpu, |lapic| {
            let Some(offset) = lapic.mmio_offset(address) else {
                return Ok(None);
            };
            claim = Claim::Served;
            // write_mmio ignores everything while the registers are off.
            Ok(lapic.write_mmio_bytes(offset, data, &chip.clock))
        })?;
        Ok(claim)
    }
}

/// The x2APIC MSRs, IA32_APIC_BASE and IA32_TSC_DEADLINE of every vCPU.
pub struct LapicMsrs(pub Arc<UserspaceIrqchip>);

impl LapicMsrs {
    /// The MSR ranges this device owns.
    pub const RANGES: [std::ops::Range<u32>; 3] = [
        MSR_IA32_APIC_BASE..MSR_IA32_APIC_BASE + 1,
        MSR_IA32_TSC_DEADLINE..MSR_IA32_TSC_DEADLINE + 1,
        MSR_X2APIC_FIRST..MSR_X2APIC_LAST + 1,
    ];
}

impl MsrDevice for LapicMsrs {
    fn name(&self) -> &'static str {
        "LAPIC (MSRs)"
    }

    fn read(&self, cpu: usize, msr: u32) -> Result<u64, DeviceError> {
        let chip = &self.0;
        let value = lock(&chip.cpu(cpu)?.lapic).read_msr(msr, &chip.clock);
        Ok(value.map_err(InterruptError::from)?)
    }

    fn write(&self, cpu: usize, msr: u32, value: u64) -> Result<(), DeviceError> {
        let chip = &self.0;
        Ok(chip.write_register(cpu, |lapic| Ok(lapic.write_msr(msr, value, &chip.clock)?))?)
    }
}

/// A device's MSI with the userspace irqchip: the VMM decodes it and puts
/// it on its own APIC bus.
struct UserspaceMsi {
    chip: Arc<UserspaceIrqchip>,
    msi: MsiMessage,
}

impl InterruptSink for UserspaceMsi {
    fn raise(&self) -> Result<(), InterruptError> {
        match self.msi.decode()? {
            MsiFormat::Compatibility(interrupt) => self.chip.deliver(interrupt, None),
            MsiFormat::Remappable(_) => Err(InterruptError::Remappable),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::MmioDevice;
    use crate::interrupt::fixed_msi;
    use dirq_arch::lapic::{
        APIC_EOI, APIC_LVT_TIMER, APIC_SVR, APIC_TIMER_INITIAL_COUNT, APIC_VERSION,
        APIC_VERSION_VALUE, DEFAULT_MMIO_BASE, MSR_X2APIC_FIRST,
    };

    const VECTOR: u8 = 0x40;
    const SVR_ENABLED: u32 = 0x1ff;

    /// Two LAPICs, software-enabled through the xAPIC page (no vCPU threads).
    fn chip() -> Arc<UserspaceIrqchip> {
        let clock = GuestTscClock::new(0, 0, 1_000_000);
        let chip = UserspaceIrqchip::new(2, APIC_TIMER_HZ, clock, Arc::new(Kicker::default()), 46)
            .expect("valid LAPIC config");
        let mmio = LapicMmio(chip.clone());
        for cpu in 0..2 {
            mmio.write(
                cpu,
                DEFAULT_MMIO_BASE + APIC_SVR,
                &SVR_ENABLED.to_le_bytes(),
            )
            .expect("SVR write");
        }
        chip
    }

    fn pending(chip: &UserspaceIrqchip, cpu: usize) -> Option<u8> {
        chip.pending_vector(cpu).expect("the vCPU has a LAPIC")
    }

    fn msi_sink(chip: &UserspaceIrqchip, dest: u8) -> Box<dyn InterruptSink> {
        chip.sink(Path::DirqApicBus(fixed_msi(dest, VECTOR)))
            .expect("the userspace irqchip takes MSIs")
    }

    #[test]
    fn an_msi_reaches_only_its_destination_and_is_injected_once() {
        let chip = chip();
        msi_sink(&chip, 1).raise().expect("MSI decodes");
        assert_eq!(pending(&chip, 0), None);
        assert_eq!(pending(&chip, 1), Some(VECTOR));
        chip.acknowledge(1, VECTOR).expect("IRR -> ISR");
        // In service, not pending: the run loop will not inject it again.
        assert_eq!(pending(&chip, 1), None);
        assert!(matches!(
            chip.acknowledge(1, VECTOR),
            Err(InterruptError::Acknowledged {
                injected: VECTOR,
                acknowledged: None
            })
        ));
    }

    #[test]
    fn a_running_vcpu_is_kicked_once_per_entry_however_often_its_device_raises() {
        let kicker = Arc::new(Kicker::new(2).expect("signal handler installs"));
        let clock = GuestTscClock::new(0, 0, 1_000_000);
        let chip = UserspaceIrqchip::new(2, APIC_TIMER_HZ, clock, kicker.clone(), 46)
            .expect("valid LAPIC config");
        let mmio = LapicMmio(chip.clone());
        mmio.write(0, DEFAULT_MMIO_BASE + APIC_SVR, &SVR_ENABLED.to_le_bytes())
            .expect("SVR write");
        // This thread stands in for vCPU 0's, running in the guest.
        let mut run = kvm_bindings::kvm_run::default();
        let _running = kicker.register(0, &mut run);
        let msi = msi_sink(&chip, 0);
        for _ in 0..100 {
            msi.raise().expect("MSI decodes");
        }
        // The first edge latched and kicked; the rest found IRR set.
        assert_eq!(kicker.sent(0), 1);
        chip.rearm_kick(0).expect("vCPU 0 exists");
        chip.acknowledge(0, VECTOR).expect("injected");
        for _ in 0..100 {
            msi.raise().expect("MSI decodes");
        }
        // Latched behind the one in service: only its EOI lets it in, and
        // that EOI exits to the VMM, which injects it on the next entry.
        assert_eq!(kicker.sent(0), 1);
        mmio.write(0, DEFAULT_MMIO_BASE + APIC_EOI, &0u32.to_le_bytes())
            .expect("EOI write");
        chip.rearm_kick(0).expect("vCPU 0 exists");
        chip.acknowledge(0, VECTOR).expect("injected");
        chip.rearm_kick(0).expect("vCPU 0 exists");
        mmio.write(0, DEFAULT_MMIO_BASE + APIC_EOI, &0u32.to_le_bytes())
            .expect("EOI write");
        // Nothing pending, the vCPU back in the guest: the next edge kicks.
        msi.raise().expect("MSI decodes");
        assert_eq!(kicker.sent(0), 2);
    }

    #[test]
    fn an_eoi_through_the_xapic_page_lets_the_next_interrupt_in() {
        let chip = chip();
        let msi = msi_sink(&chip, 0);
        msi.raise().expect("MSI decodes");
        chip.acknowledge(0, VECTOR).expect("dispatched");
        msi.raise().expect("MSI decodes");
        // Same priority class as the one in service: held back (SDM 10.8.3.1).
        assert_eq!(pending(&chip, 0), None);
        LapicMmio(chip.clone())
            .write(0, DEFAULT_MMIO_BASE + APIC_EOI, &0u32.to_le_bytes())
            .expect("EOI write");
        assert_eq!(pending(&chip, 0), Some(VECTOR));
    }

    #[test]
    fn only_a_write_that_moves_the_timer_wakes_the_timer_thread() {
        let chip = chip();
        let mmio = LapicMmio(chip.clone());
        let generation = || *lock(&chip.timer_generation);
        let write = |offset, value: u32| {
            mmio.write(0, DEFAULT_MMIO_BASE + offset, &value.to_le_bytes())
                .expect("register write")
        };
        let before = generation();
        msi_sink(&chip, 0).raise().expect("MSI decodes");
        chip.acknowledge(0, VECTOR).expect("dispatched");
        write(APIC_EOI, 0);
        assert_eq!(generation(), before, "an EOI leaves the timer alone");
        // One-shot LVT timer, then an initial count: a deadline appears.
        write(APIC_LVT_TIMER, u32::from(VECTOR));
        assert_eq!(generation(), before, "no count, no deadline");
        write(APIC_TIMER_INITIAL_COUNT, 1_000);
        assert_eq!(generation(), before + 1);
    }

    #[test]
    fn an_x2apic_icr_write_sends_an_ipi_to_the_other_vcpu() {
        let chip = chip();
        let msrs = LapicMsrs(chip.clone());
        for cpu in 0..2 {
            let base = msrs.read(cpu, MSR_IA32_APIC_BASE).expect("APIC base reads");
            msrs.write(cpu, MSR_IA32_APIC_BASE, base | (1 << 10))
                .expect("x2APIC mode");
        }
        let icr = MSR_X2APIC_FIRST + 0x30;
        msrs.write(0, icr, (1u64 << 32) | u64::from(VECTOR))
            .expect("ICR write");
        assert_eq!(pending(&chip, 1), Some(VECTOR));
        assert_eq!(pending(&chip, 0), None);
    }

    #[test]
    fn the_ioapic_routes_a_pin_to_a_lapic() {
        let chip = chip();
        let ioapic = chip.ioapic().expect("userspace mode has an IOAPIC");
        let pin = 10u32;
        let write = |register: u32, value: u32| {
            ioapic
                .write(0, 0x00, &register.to_le_bytes())
                .expect("IOREGSEL");
            ioapic.write(0, 0x10, &value.to_le_bytes()).expect("IOWIN");
        };
        write(0x10 + 2 * pin + 1, 1 << 24); // destination APIC ID 1
        write(0x10 + 2 * pin, u32::from(VECTOR)); // fixed, edge, unmasked
        chip.sink(Path::DirqIoapic(pin))
            .expect("the userspace irqchip has IOAPIC inputs")
            .raise()
            .expect("pin pulses");
        assert_eq!(pending(&chip, 1), Some(VECTOR));
        assert_eq!(pending(&chip, 0), None);
    }

    #[test]
    fn each_vcpus_xapic_page_follows_its_apic_base() {
        const RELOCATED: u64 = 0xfed4_0000;
        let chip = chip();
        let mut bus = Bus::default();
        chip.attach(&mut bus);
        let version = |cpu, base: u64| {
            let mut data = [0u8; 4];
            bus.mmio_read(cpu, base + APIC_VERSION, &mut data)
                .map(|()| u32::from_le_bytes(data))
        };
        let msrs = LapicMsrs(chip.clone());
        let base = msrs.read(0, MSR_IA32_APIC_BASE).expect("APIC base reads");
        msrs.write(0, MSR_IA32_APIC_BASE, (base & 0xfff) | RELOCATED)
            .expect("relocation is a valid write");
        assert_eq!(version(0, RELOCATED).ok(), Some(APIC_VERSION_VALUE));
        // vCPU 0's page left the default base; vCPU 1's stayed there.
        assert!(version(0, DEFAULT_MMIO_BASE).is_err(), "nothing answers");
        assert_eq!(version(1, DEFAULT_MMIO_BASE).ok(), Some(APIC_VERSION_VALUE));
        assert!(version(1, RELOCATED).is_err(), "nothing answers");
        // A write at the new base reaches the register.
        bus.mmio_write(0, RELOCATED + APIC_SVR, &0x1ffu32.to_le_bytes())
            .expect("SVR write");
        assert_eq!(lock(&chip.cpus[0].lapic).svr(), 0x1ff);
        // In x2APIC mode the page is a hole at its base: all-ones.
        let base = msrs.read(0, MSR_IA32_APIC_BASE).expect("APIC base reads");
        msrs.write(0, MSR_IA32_APIC_BASE, base | (1 << 10))
            .expect("x2APIC mode");
        assert_eq!(version(0, RELOCATED).ok(), Some(u32::MAX));
    }

    #[test]
    fn narrow_xapic_accesses_read_bytes_of_the_register_and_writes_are_dropped() {
        let chip = chip();
        let mmio = LapicMmio(chip.clone());
        let mut low = [0u8; 2];
        assert_eq!(
            mmio.read(0, DEFAULT_MMIO_BASE + APIC_VERSION, &mut low)
                .expect("2-byte read"),
            Claim::Served
        );
        assert_eq!(low, APIC_VERSION_VALUE.to_le_bytes()[..2]);
        let svr = lock(&chip.cpus[0].lapic).svr();
        assert_eq!(
            mmio.write(0, DEFAULT_MMIO_BASE + APIC_SVR, &[0])
                .expect("1-byte write"),
            Claim::Served
        );
        assert_eq!(lock(&chip.cpus[0].lapic).svr(), svr, "dropped");
    }

    #[test]
    fn model_errors_reach_the_guest_access_typed() {
        let chip = chip();
        // x2APIC MSRs while the LAPIC is in xAPIC mode: the model refuses.
        let err = LapicMsrs(chip.clone())
            .read(0, MSR_X2APIC_FIRST + 0x30)
            .expect_err("x2APIC is off");
        assert!(
            matches!(
                err.model(),
                Some(InterruptError::Lapic(
                    dirq_arch::lapic::LapicError::X2apicDisabled { .. }
                ))
            ),
            "{err:?}"
        );
        // An access from a vCPU the irqchip has no LAPIC for.
        let err = LapicMmio(chip.clone())
            .read(7, DEFAULT_MMIO_BASE + APIC_SVR, &mut [0; 4])
            .expect_err("no vCPU 7");
        assert!(
            matches!(err.model(), Some(InterruptError::NoLapic(7))),
            "{err:?}"
        );
        // Neither KVM's MSI paths nor its IOAPIC exist in this mode.
        let path = Path::SignalMsi(fixed_msi(0, VECTOR));
        assert!(matches!(
            chip.sink(path),
            Err(InterruptError::NoPath {
                mode: Irqchip::Userspace,
                ..
            })
        ));
    }
}
