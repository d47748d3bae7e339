//! Where the host's scheduler tick runs (docs/mechanisms.md section 5): a
//! hypervisor that emulates guest timers with host hrtimers keeps its
//! timers, tick included, on the guest cores; DID moves them to the
//! designated core, and bare metal has no host. Idle cores never tick
//! (NO_HZ), whatever the placement.

/// The cores the host's periodic tick interrupts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostTick {
    /// Every core that runs vCPUs takes the tick while busy.
    GuestCores,
    /// Only the housekeeping core ticks: guest cores are never interrupted
    /// by it.
    HousekeepingCore,
}

impl HostTick {
    /// Whether a profile ticking at `hz` interrupts the guest cores.
    pub fn on_guest_cores(self, hz: u64) -> bool {
        hz > 0 && self == HostTick::GuestCores
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_ticking_host_on_the_guest_cores_interrupts_them() {
        assert!(HostTick::GuestCores.on_guest_cores(250));
        assert!(!HostTick::GuestCores.on_guest_cores(0), "tickless profile");
        assert!(!HostTick::HousekeepingCore.on_guest_cores(250));
    }
}
