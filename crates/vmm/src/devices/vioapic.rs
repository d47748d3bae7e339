//! dirq's VIOAPIC model (`dirq_arch::vioapic`) in the VMM, at three of the
//! four levels of mechanisms.md section 6 (the fourth is KVM's in-kernel
//! IOAPIC): every access trapped, reads served by a read-only mirror page,
//! or MASK in a guest-writable page with only UNMASK trapping. Whatever the
//! level, the controller runs (samples its device line, recomputes ISR,
//! sends what rose as an MSI to KVM's LAPIC) on every access that reaches
//! it and whenever the device raises.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dirq_arch::lapic::Interrupt;
use dirq_arch::msi::MsiMessage;
use dirq_arch::vioapic::{Vioapic, VioapicError, LINES, REG_IRR, REG_MASK, REG_ROUTE_BASE};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend as _, VolatileMemory};

use super::event_source::LineSource;
use crate::abi;
use crate::bus::{check_access_size, fill_le, le_u32, DeviceError, Direction, MmioDevice};
use crate::interrupt::{kernel::signal_msi, InterruptError};
use crate::memory::GuestMemory;
use crate::run_control::RunControl;
use crate::vm::Vm;
use vmm_sys_util::eventfd::EventFd;

/// Where the guest reads the controller's registers.
pub enum Registers {
    /// In the MMIO page: every access exits (`--vioapic userspace`).
    Trapped,
    /// In a read-only memory slot over the MMIO page, which the VMM keeps
    /// current (`--vioapic ro-page`). Writes exit, but a write that masks
    /// the line is completed inside KVM by an ioeventfd (`posted_mask`):
    /// masking needs no synchronisation, so the VMM applies it before the
    /// next access or raise it handles, which keeps the order. Unmasking
    /// must take effect at once and traps to the VMM.
    ReadOnlyMirror {
        mirror: GuestMemory,
        posted_mask: EventFd,
    },
    /// IRR, ISR and MASK in the guest's `struct dirq_vioapic_pv`; MASK is
    /// the guest's to set, UNMASK traps (`--vioapic pv`).
    Paravirtual,
}

/// The MASK value whose write the ro-page level posts through an
/// ioeventfd: every line masked. The guest masks by writing MASK | its
/// line, and every other line is masked already, so that is its mask
/// write; any other value, an unmask among them, still traps.
pub const POSTED_MASK: u32 = u32::MAX;

/// The guest holds the PV lock for a few instructions; held this long, it
/// is not going to let go (a preempted vCPU thread comes back far sooner).
const PV_LOCK_HOLD_LIMIT: Duration = Duration::from_secs(1);
/// Spins between two looks at the clock and the stop flag.
const PV_LOCK_SPINS_PER_CHECK: u32 = 1024;

/// The guest's PV lock word: free, or taken by whoever set it.
const PV_LOCK_FREE: u32 = 0;
const PV_LOCK_TAKEN: u32 = 1;

/// Why the VMM gave up on the guest's PV lock.
#[derive(Debug, thiserror::Error)]
pub enum PvLockError {
    #[error("the guest held the VIOAPIC PV lock at every attempt the VMM made to take it for {held_ms} ms (the VMM tries for at most {} ms)", PV_LOCK_HOLD_LIMIT.as_millis())]
    HeldTooLong { held_ms: u128 },
    #[error("the guest held the VIOAPIC PV lock at every attempt the VMM made to take it for {held_ms} ms, until the run was stopped")]
    Stopped { held_ms: u128 },
    #[error("the guest wrote {0:#x} to the VIOAPIC PV lock word, which holds only 0 (free) or 1 (taken)")]
    Garbage(u32),
}

pub struct VioapicDevice {
    model: Mutex<Vioapic>,
    registers: Registers,
    /// Guest RAM: the paravirtual page.
    memory: GuestMemory,
    line: Box<dyn LineSource>,
    vm: Arc<Vm>,
    /// Bounds the wait for the guest's PV lock.
    control: Arc<RunControl>,
    /// Register accesses that reached the VMM (exits), by direction.
    reads: AtomicU64,
    writes: AtomicU64,
}

impl VioapicDevice {
    pub const SIZE: u64 = dirq_arch::vioapic::MMIO_SIZE;

    /// A controller with every line masked, its registers published.
    pub fn new(
        registers: Registers,
        memory: GuestMemory,
        line: Box<dyn LineSource>,
        vm: Arc<Vm>,
        control: Arc<RunControl>,
    ) -> Result<Self, DeviceError> {
        let device = VioapicDevice {
            model: Mutex::new(Vioapic::new()),
            registers,
            memory,
            line,
            vm,
            control,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        };
        if let Registers::ReadOnlyMirror { mirror, .. } = &device.registers {
            // The mirror's reads never reach the VMM, so nothing can refuse
            // one outside the registers: it reads all-ones, as an
            // unclaimed bus read does, never a plausible 0.
            let ones = vec![0xff; usize::try_from(Self::SIZE).expect("a 4 KiB page")];
            mirror.write_slice(&ones, GuestAddress(abi::VIOAPIC_GPA))?;
        }
        device.publish(&device.lock())?;
        Ok(device)
    }

    /// (reads, writes) that exited to the VMM so far.
    pub fn exits(&self) -> (u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
        )
    }

    /// The device's line may have changed: run the controller.
    pub fn sample(&self) -> Result<(), DeviceError> {
        self.run(|_| Ok(Vec::new()))
    }

    fn lock(&self) -> MutexGuard<'_, Vioapic> {
        // Every model update is one call: a panic cannot leave it half-done.
        self.model
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` holding the paravirtual page's lock, which the guest takes
    /// to mask (a spin lock: the guest holds it for a few instructions).
    /// The guest owns the lock word, so the wait is bounded: by
    /// `PV_LOCK_HOLD_LIMIT` and by the run's stop flag.
    fn with_pv_lock<T>(
        &self,
        f: impl FnOnce() -> Result<T, DeviceError>,
    ) -> Result<T, DeviceError> {
        if !matches!(self.registers, Registers::Paravirtual) {
            return f();
        }
        let slice = self
            .memory
            .get_slice(GuestAddress(abi::VIOAPIC_PV_LOCK_GPA), 4)?;
        let lock = slice.get_atomic_ref::<AtomicU32>(0)?;
        let since = Instant::now();
        let mut spins = 0u32;
        loop {
            match lock.compare_exchange_weak(
                PV_LOCK_FREE,
                PV_LOCK_TAKEN,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(PV_LOCK_FREE | PV_LOCK_TAKEN) => {}
                Err(garbage) => return Err(PvLockError::Garbage(garbage).into()),
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(PV_LOCK_SPINS_PER_CHECK) {
                let held = since.elapsed();
                let held_ms = held.as_millis();
                // Past the limit the guest is to blame, whatever else also
                // stopped the run meanwhile (its watchdog, its other vCPU).
                if held > PV_LOCK_HOLD_LIMIT {
                    return Err(PvLockError::HeldTooLong { held_ms }.into());
                }
                if self.control.should_stop() {
                    return Err(PvLockError::Stopped { held_ms }.into());
                }
            }
            std::hint::spin_loop();
        }
        let result = f();
        // A guest that scribbles on the lock while the VMM holds it must
        // not have that hidden by the release: garbage stays and is refused.
        match lock.compare_exchange(
            PV_LOCK_TAKEN,
            PV_LOCK_FREE,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) | Err(PV_LOCK_FREE) => result,
            Err(garbage) => Err(PvLockError::Garbage(garbage).into()),
        }
    }

    /// Applies `op`, samples the device line, publishes the registers where
    /// the guest reads them, then sends what rose: all under the lock the
    /// guest masks under, so a mask and a send never interleave.
    fn run(
        &self,
        op: impl FnOnce(&mut Vioapic) -> Result<Vec<Interrupt>, VioapicError>,
    ) -> Result<(), DeviceError> {
        self.with_pv_lock(|| self.run_locked(op))
    }

    fn run_locked(
        &self,
        op: impl FnOnce(&mut Vioapic) -> Result<Vec<Interrupt>, VioapicError>,
    ) -> Result<(), DeviceError> {
        let mut model = self.lock();
        let mut sent = Vec::new();
        if let Registers::ReadOnlyMirror { posted_mask, .. } = &self.registers {
            // A non-blocking eventfd reads its count once, or fails when
            // no mask was posted since.
            if posted_mask.read().is_ok() {
                sent.extend(model.write(REG_MASK, POSTED_MASK)?);
            }
        }
        if matches!(self.registers, Registers::Paravirtual) {
            let mask: u32 = self
                .memory
                .read_obj(GuestAddress(abi::VIOAPIC_PV_MASK_GPA))?;
            sent.extend(model.sync_mask(mask));
        }
        sent.extend(op(&mut model)?);
        let level = self.line.level()?;
        sent.extend(model.set_line(abi::VIOAPIC_LINE, level)?);
        self.publish(&model)?;
        for interrupt in sent {
            let msi = MsiMessage::compose(&interrupt).map_err(InterruptError::from)?;
            signal_msi(&self.vm, msi)?;
        }
        Ok(())
    }

    /// Writes the readable registers where this level's guest reads them.
    fn publish(&self, model: &Vioapic) -> Result<(), DeviceError> {
        match &self.registers {
            Registers::Trapped => Ok(()),
            Registers::ReadOnlyMirror { mirror, .. } => {
                let mut page = Vec::new();
                for offset in (REG_IRR..REG_ROUTE_BASE + 4 * u64::from(LINES)).step_by(4) {
                    page.extend(model.read(offset).unwrap_or(0).to_le_bytes());
                }
                Ok(mirror.write_slice(&page, GuestAddress(abi::VIOAPIC_GPA))?)
            }
            Registers::Paravirtual => {
                for (gpa, value) in [
                    (abi::VIOAPIC_PV_IRR_GPA, model.irr()),
                    (abi::VIOAPIC_PV_ISR_GPA, model.isr()),
                    (abi::VIOAPIC_PV_MASK_GPA, model.mask()),
                ] {
                    self.memory.write_obj(value, GuestAddress(gpa))?;
                }
                Ok(())
            }
        }
    }
}

impl MmioDevice for VioapicDevice {
    fn name(&self) -> &'static str {
        "VIOAPIC"
    }

    fn read(&self, _cpu: usize, offset: u64, data: &mut [u8]) -> Result<(), DeviceError> {
        check_access_size("a VIOAPIC register", Direction::Read, data.len(), 4)?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.sample()?;
        let value = self.lock().read(offset)?;
        fill_le(data, u64::from(value));
        Ok(())
    }

    fn write(&self, _cpu: usize, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_access_size("a VIOAPIC register", Direction::Write, data.len(), 4)?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let value = le_u32(data);
        self.run(|model| model.write(offset, value))
    }
}
