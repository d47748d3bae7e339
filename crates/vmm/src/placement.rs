//! Where the vCPU threads run. Each vCPU gets a host CPU of its own when
//! there are enough: an IPI between two vCPUs time-sliced on one CPU waits
//! for the scheduler (milliseconds under kvm_pvm) instead of crossing CPUs
//! (tens of microseconds), so a shared CPU changes what a run measures and
//! every table that shows such a run says so. `--pin one-core` puts them
//! all on one CPU on purpose: how a slow or busy host runs them.

use serde::{Deserialize, Serialize};

use crate::config::Pin;

#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error("cannot read this process's CPU affinity")]
    Affinity(#[source] std::io::Error),
    #[error("cannot pin the device thread to host CPU {cpu}")]
    PinDevice {
        cpu: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot pin vCPU {vcpu} to host CPU {cpu}")]
    Pin {
        vcpu: usize,
        cpu: usize,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The host CPUs this process may run on.
    pub host_cpus: Vec<usize>,
    /// The host CPU each vCPU thread is pinned to; empty when they are not
    /// pinned because there are more vCPUs than host CPUs.
    pub vcpu_cpus: Vec<usize>,
}

impl Placement {
    /// `pin`'s placement on the CPUs this process may use: spread, one
    /// host CPU per vCPU in order if they suffice; one-core, all on the first.
    pub fn plan(vcpus: usize, pin: Pin) -> Result<Self, PlacementError> {
        Ok(Self::for_cpus(allowed_cpus()?, vcpus, pin))
    }

    fn for_cpus(host_cpus: Vec<usize>, vcpus: usize, pin: Pin) -> Self {
        let vcpu_cpus = match pin {
            Pin::OneCore => vec![host_cpus[0]; vcpus],
            Pin::Spread if vcpus <= host_cpus.len() => host_cpus[..vcpus].to_vec(),
            Pin::Spread => Vec::new(),
        };
        Placement {
            host_cpus,
            vcpu_cpus,
        }
    }

    /// Whether some vCPUs time-share a host CPU.
    pub fn shares_cpus(&self) -> bool {
        self.vcpu_cpus.is_empty() || self.one_core()
    }

    /// Whether several vCPUs were pinned to one host CPU (`--pin one-core`).
    fn one_core(&self) -> bool {
        self.vcpu_cpus.len() > 1 && self.vcpu_cpus.iter().all(|&cpu| cpu == self.vcpu_cpus[0])
    }

    /// A sentence for tables, when vCPUs share CPUs.
    pub fn note(&self, vcpus: u32) -> Option<String> {
        if self.one_core() {
            return Some(format!(
                "{vcpus} vCPUs pinned to one host CPU (--pin one-core): the scheduler time-slices them, so cross-vCPU interrupts wait for it"
            ));
        }
        self.shares_cpus().then(|| {
            format!(
                "{vcpus} vCPUs share {} host CPUs: the scheduler time-slices them, so cross-vCPU interrupts wait for it",
                self.host_cpus.len()
            )
        })
    }

    /// Pins the calling thread, vCPU `vcpu`'s, to its host CPU, if it has one.
    pub fn pin_this_thread(&self, vcpu: usize) -> Result<(), PlacementError> {
        match self.vcpu_cpus.get(vcpu) {
            Some(&cpu) => pin(cpu).map_err(|source| PlacementError::Pin { vcpu, cpu, source }),
            None => Ok(()),
        }
    }

    /// The host CPU for the thread that raises device interrupts: the last
    /// one vCPU 0, which takes them, does not run on, as a vhost thread
    /// would be placed; a device thread spinning beside vCPU 0 would take
    /// turns with it. `None` when vCPU 0 is unpinned or alone.
    pub fn device_cpu(&self) -> Option<usize> {
        let vcpu0 = *self.vcpu_cpus.first()?;
        self.host_cpus
            .iter()
            .rev()
            .copied()
            .find(|&cpu| cpu != vcpu0)
    }

    /// Pins the calling thread, a device thread, to `device_cpu`, if any.
    pub fn pin_device_thread(&self) -> Result<(), PlacementError> {
        match self.device_cpu() {
            Some(cpu) => pin(cpu).map_err(|source| PlacementError::PinDevice { cpu, source }),
            None => Ok(()),
        }
    }
}

/// Pins the calling thread to host CPU `cpu`; the threads it starts
/// inherit the pin.
pub fn pin(cpu: usize) -> Result<(), std::io::Error> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write only into the
    // local set, and sched_setaffinity reads it for this thread (0).
    let result = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if result != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn allowed_cpus() -> Result<Vec<usize>, PlacementError> {
    // SAFETY: sched_getaffinity writes at most size_of::<cpu_set_t>() bytes
    // into the zeroed local set; CPU_ISSET only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(PlacementError::Affinity(std::io::Error::last_os_error()));
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect())
    }
}

/// Asks the kernel to end this thread's timed waits on time. By default a
/// thread's futex and sleep timeouts may end up to its timer slack (50 us)
/// late, which would add to every LAPIC timer the VMM fires.
pub fn wake_on_time() -> std::io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK reads only its integer argument and changes
    // only the calling thread's slack.
    let result = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_vcpu_gets_its_own_cpu_when_there_are_enough() {
        let placement = Placement::for_cpus(vec![0, 2, 3], 2, Pin::Spread);
        assert_eq!(placement.vcpu_cpus, vec![0, 2]);
        assert!(!placement.shares_cpus());
        assert_eq!(placement.note(2), None);
    }

    #[test]
    fn the_device_thread_runs_beside_vcpu_0_never_on_its_cpu() {
        assert_eq!(
            Placement::for_cpus(vec![0, 1], 2, Pin::Spread).device_cpu(),
            Some(1)
        );
        assert_eq!(
            Placement::for_cpus(vec![0, 1, 2], 1, Pin::Spread).device_cpu(),
            Some(2)
        );
        assert_eq!(
            Placement::for_cpus(vec![3], 1, Pin::Spread).device_cpu(),
            None
        );
        assert_eq!(
            Placement::for_cpus(vec![0, 1], 4, Pin::Spread).device_cpu(),
            None
        );
    }

    #[test]
    fn more_vcpus_than_cpus_are_left_to_the_scheduler_and_said_so() {
        let placement = Placement::for_cpus(vec![0, 1], 4, Pin::Spread);
        assert!(placement.shares_cpus());
        let note = placement.note(4).expect("a note");
        assert!(note.contains("4 vCPUs share 2 host CPUs"), "{note}");
    }

    #[test]
    fn one_core_pins_every_vcpu_to_the_first_cpu_and_says_so() {
        let placement = Placement::for_cpus(vec![2, 3], 2, Pin::OneCore);
        assert_eq!(placement.vcpu_cpus, vec![2, 2]);
        assert!(placement.shares_cpus());
        let note = placement.note(2).expect("a note");
        assert!(note.contains("pinned to one host CPU"), "{note}");
        // The device thread keeps to another CPU, as a vhost thread would.
        assert_eq!(placement.device_cpu(), Some(3));
    }

    #[test]
    fn this_process_may_run_somewhere() {
        let placement = Placement::plan(1, Pin::Spread).expect("affinity readable");
        assert!(!placement.host_cpus.is_empty());
        assert_eq!(placement.vcpu_cpus.len(), 1);
    }
}
