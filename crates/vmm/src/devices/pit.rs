//! dirq's 8254 model (`dirq_arch::pit`) on ports 0x40-0x43, for the tick
//! bench (KVM's own PIT needs its in-kernel irqchip, so this runs with
//! `--irqchip split`). A timer thread turns channel 0's IRQ0 edges into
//! pulses on an IOAPIC input. The reload scale makes the guest's tick K
//! times slower without the guest seeing counts it did not program.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dirq_arch::clock::Clock;
use dirq_arch::pit::{Pit, PitError, PIT_FREQUENCY_HZ, PORT_CHANNEL0};
use dirq_stats::ratio;

use crate::bus::{check_access_size, fill_le, le_u8, DeviceError, Direction, PioDevice};
use crate::results::PitEvidence;
use crate::run_control::RunControl;

pub const PORTS: u16 = 4;
/// Longest the timer thread sleeps before re-checking for a stop.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Host monotonic time since the device was made: the PIT's input clock.
struct MonotonicClock(Instant);

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

pub struct PitDevice {
    pit: Mutex<Pit>,
    clock: MonotonicClock,
    /// Signalled on every guest write, so the timer thread re-plans.
    reprogrammed: Condvar,
    /// The vCPUs that wrote the PIT's ports, bit n for vCPU n: a guest
    /// that reprograms it from another vCPU is named.
    writers: AtomicU64,
    /// IRQ0 edges raised, in all and while the window was open: what the
    /// guest's count of ticks is held to.
    irqs: AtomicU64,
    irqs_in_window: AtomicU64,
}

impl PitDevice {
    /// A PIT whose counters run `reload_scale` times slower than 1.19 MHz.
    pub fn new(reload_scale: u32) -> Result<Self, PitError> {
        let mut pit = Pit::new();
        pit.set_reload_scale(reload_scale)?;
        Ok(PitDevice {
            pit: Mutex::new(pit),
            clock: MonotonicClock(Instant::now()),
            reprogrammed: Condvar::new(),
            writers: AtomicU64::new(0),
            irqs: AtomicU64::new(0),
            irqs_in_window: AtomicU64::new(0),
        })
    }

    /// What the PIT did, as the guest's figures are held to it.
    pub fn evidence(&self, reload_scale: u32) -> PitEvidence {
        let effective = u64::from(self.reload_count()) * u64::from(reload_scale.max(1));
        PitEvidence {
            irqs: self.irqs.load(Ordering::Relaxed),
            irqs_in_window: self.irqs_in_window.load(Ordering::Relaxed),
            hz: ratio(PIT_FREQUENCY_HZ, effective.max(1)),
        }
    }

    /// The vCPUs that wrote the PIT's ports, in order.
    pub fn writers(&self) -> Vec<usize> {
        let writers = self.writers.load(Ordering::Relaxed);
        (0..64).filter(|cpu| writers & (1 << cpu) != 0).collect()
    }

    fn lock(&self) -> MutexGuard<'_, Pit> {
        // Every model update is one call: a panic cannot leave it half-done.
        self.pit
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Channel 0's count as the guest programmed it (input ticks).
    pub fn reload_count(&self) -> u32 {
        self.lock().reload_count()
    }

    /// Calls `irq0` at every IRQ0 edge until the run stops or it fails.
    pub fn run_timer<E>(
        &self,
        control: &RunControl,
        irq0: impl Fn() -> Result<(), E>,
    ) -> Result<(), E> {
        let mut pit = self.lock();
        while !control.should_stop() {
            let now = self.clock.now_ns();
            let sleep = match pit.next_irq_ns() {
                Some(due) if due <= now => {
                    if pit.expire(&self.clock) {
                        drop(pit);
                        irq0()?;
                        self.irqs.fetch_add(1, Ordering::Relaxed);
                        if control.window_open() {
                            self.irqs_in_window.fetch_add(1, Ordering::Relaxed);
                        }
                        pit = self.lock();
                    }
                    continue;
                }
                Some(due) => Duration::from_nanos(due - now).min(STOP_POLL),
                None => STOP_POLL,
            };
            pit = self
                .reprogrammed
                .wait_timeout(pit, sleep)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        Ok(())
    }
}

impl PioDevice for PitDevice {
    fn name(&self) -> &'static str {
        "PIT"
    }

    fn read(&self, _cpu: usize, offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
        check_access_size("a PIT port", Direction::Read, data.len(), 1)?;
        let value = self.lock().read_port(PORT_CHANNEL0 + offset, &self.clock)?;
        fill_le(data, u64::from(value));
        Ok(())
    }

    fn write(&self, cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        check_access_size("a PIT port", Direction::Write, data.len(), 1)?;
        // At most abi::MAX_CPUS vCPUs: every one has its bit.
        self.writers.fetch_or(1 << cpu.min(63), Ordering::Relaxed);
        self.lock()
            .write_port(PORT_CHANNEL0 + offset, le_u8(data), &self.clock)?;
        self.reprogrammed.notify_all();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pit_names_every_vcpu_that_programmed_it() {
        let pit = PitDevice::new(1).expect("scale 1");
        assert!(pit.writers().is_empty());
        pit.write(1, 3, &[0x34]).expect("mode write");
        pit.write(0, 0, &[0x9c]).expect("reload low byte");
        assert_eq!(pit.writers(), [0, 1]);
    }
}
