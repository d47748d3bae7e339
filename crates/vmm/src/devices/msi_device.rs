//! The benchmark device: a host thread that raises MSIs through the run's
//! `InterruptSink`, either waiting for each acknowledgement (irq-latency)
//! or at a fixed rate regardless (whileloop).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vm_memory::{Bytes, GuestAddress};

use crate::abi;
use crate::interrupt::{InterruptError, InterruptSink};
use crate::memory::GuestMemory;
use crate::run_control::RunControl;

/// An interrupt not acknowledged within this long is lost.
const ACK_TIMEOUT: Duration = Duration::from_secs(2);
/// Sleep only when the next raise is further away than the scheduler's slack.
const SLEEP_THRESHOLD: Duration = Duration::from_micros(200);
/// The longest sleep between two looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(10);

#[derive(Debug, thiserror::Error)]
pub enum MsiDeviceError {
    #[error(transparent)]
    Raise(#[from] InterruptError),
    #[error("device interrupt {seq} was not acknowledged within {ACK_TIMEOUT:?} (lost; {} acknowledged before it)", .seq - 1)]
    Unacknowledged { seq: u64 },
    #[error("the guest acknowledged interrupt {acked} when only {raised} had been raised (a forged or doubled acknowledgement)")]
    AckedUnraised { acked: u64, raised: u64 },
    #[error("the device cannot access the shared page")]
    GuestMemory(#[from] vm_memory::GuestMemoryError),
    #[error("the device's interrupt controller failed")]
    Controller(#[from] crate::bus::DeviceError),
    #[error(transparent)]
    Placement(#[from] crate::placement::PlacementError),
}

/// What the device thread sees of the machine.
pub struct DeviceEnv<'a> {
    pub memory: &'a GuestMemory,
    pub control: &'a RunControl,
    pub sink: &'a dyn InterruptSink,
}

/// Waits (spinning for the last stretch) until `when`, or until the run stops.
fn pace_until(when: Instant, control: &RunControl) {
    loop {
        let now = Instant::now();
        if now >= when || control.should_stop() {
            return;
        }
        let left = when - now;
        if left > SLEEP_THRESHOLD {
            std::thread::sleep((left - SLEEP_THRESHOLD).min(STOP_CHECK));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// When the `n`th raise (from 0) is due at `rate_hz` (0: at once).
fn due(start: Instant, rate_hz: u64, n: u64) -> Instant {
    match rate_hz {
        0 => start,
        rate => start + Duration::from_nanos(n.saturating_mul(1_000_000_000) / rate),
    }
}

/// Raises `count` interrupts, each after the previous was acknowledged and
/// a full 1/`rate_hz` after the previous raise; returns each round trip in
/// ns. A late raise is not made up for: raised back to back to catch up,
/// the next ones would find a halted guest still in its handler, and the
/// run would time a running vCPU's latency instead.
pub fn ping_pong(env: &DeviceEnv, count: u64, rate_hz: u64) -> Result<Vec<u64>, MsiDeviceError> {
    let mut round_trips = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    if !env.control.wait_for_window() {
        return Ok(round_trips);
    }
    let mut previous: Option<Instant> = None;
    for seq in 1..=count {
        if let Some(previous) = previous {
            pace_until(due(previous, rate_hz, 1), env.control);
        }
        env.memory
            .store(seq, GuestAddress(abi::RAISE_SEQ_GPA), Ordering::Release)?;
        let raised = Instant::now();
        previous = Some(raised);
        env.sink.raise()?;
        loop {
            let acked: u64 = env
                .memory
                .load(GuestAddress(abi::ACK_SEQ_GPA), Ordering::Acquire)?;
            if acked > seq {
                return Err(MsiDeviceError::AckedUnraised { acked, raised: seq });
            }
            if acked == seq {
                break;
            }
            if env.control.should_stop() {
                return Ok(round_trips);
            }
            if raised.elapsed() > ACK_TIMEOUT {
                return Err(MsiDeviceError::Unacknowledged { seq });
            }
            std::hint::spin_loop();
        }
        round_trips.push(u64::try_from(raised.elapsed().as_nanos()).unwrap_or(u64::MAX));
        env.sink.acknowledged();
    }
    Ok(round_trips)
}

/// Raises an interrupt every 1/`rate_hz` s while the measured window is
/// open, acknowledged or not; returns how many it raised.
pub fn periodic(env: &DeviceEnv, rate_hz: u64) -> Result<u64, MsiDeviceError> {
    let mut raised = 0u64;
    if !env.control.wait_for_window() {
        return Ok(raised);
    }
    let start = Instant::now();
    while !env.control.window_closed() && !env.control.should_stop() {
        env.sink.raise()?;
        raised += 1;
        pace_until(due(start, rate_hz, raised), env.control);
    }
    Ok(raised)
}
