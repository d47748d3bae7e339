//! This host's interrupt costs, derived from real runs. Pure arithmetic on
//! the runs' reports, so it is tested without KVM.

use serde::Serialize;

/// One derived cost and where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub ns: f64,
    /// How the number was obtained, quoting the run(s).
    pub source: String,
}

/// The inputs `dirq calibrate` collects.
#[derive(Debug, Clone)]
pub struct Observations {
    /// `dirq probe`: one `out` handled by the VMM, guest round trip.
    pub userspace_exit_ns: f64,
    /// `dirq probe`: one CPUID handled inside KVM, guest round trip.
    pub kernel_exit_ns: f64,
    /// irq-latency p50, in-kernel path with PV EOI, guest busy.
    pub inject_running_p50_ns: f64,
    /// The same with the guest halted between interrupts.
    pub inject_halted_p50_ns: f64,
    /// The commands behind each input, quoted in `source`.
    pub commands: Commands,
}

#[derive(Debug, Clone, Default)]
pub struct Commands {
    pub probe: String,
    pub inject_running: String,
    pub inject_halted: String,
}

/// Every cost issue 5 asks `dirq calibrate` to measure.
#[derive(Debug, Clone, Serialize)]
pub struct HostCosts {
    pub userspace_exit: Measured,
    pub kernel_exit: Measured,
    pub inject_running: Measured,
    pub inject_halted: Measured,
    pub hlt_wakeup: Measured,
    /// The exit a running vCPU takes when it is kicked for an interrupt.
    pub external_interrupt: Measured,
    pub eoi_userspace: Measured,
    pub eoi_kernel: Measured,
    pub eoi_pv: Measured,
    pub timer_program: Measured,
}

impl HostCosts {
    /// Named rows for tables, in a fixed order.
    pub fn rows(&self) -> [(&'static str, &Measured); 10] {
        [
            ("userspace exit", &self.userspace_exit),
            ("in-kernel exit", &self.kernel_exit),
            ("interrupt into a running vCPU (p50)", &self.inject_running),
            ("interrupt into a halted vCPU (p50)", &self.inject_halted),
            ("HLT wake-up", &self.hlt_wakeup),
            (
                "external-interrupt exit (kick of a running vCPU)",
                &self.external_interrupt,
            ),
            ("EOI, userspace LAPIC", &self.eoi_userspace),
            ("EOI, KVM LAPIC (x2APIC MSR)", &self.eoi_kernel),
            ("EOI, KVM PV EOI", &self.eoi_pv),
            ("timer programming (TSC deadline)", &self.timer_program),
        ]
    }
}

pub fn derive_costs(obs: &Observations) -> HostCosts {
    let c = &obs.commands;
    let measured = |ns: f64, source: String| Measured { ns, source };
    let kernel_exit = measured(
        obs.kernel_exit_ns,
        format!("`{}`: CPUID handled inside KVM, guest round trip", c.probe),
    );
    // A round trip to a halted vCPU is its HLT exit returning (one in-kernel
    // exit) plus the wake-up of the sleeping vCPU thread. (The running-vCPU
    // round trip is no baseline: on some hosts a kick reaches a running
    // vCPU later than a wake-up reaches a halted one.)
    let wakeup_ns = obs.inject_halted_p50_ns - obs.kernel_exit_ns;
    let hlt_wakeup = if wakeup_ns > 0.0 {
        measured(
            wakeup_ns,
            format!(
                "p50 of `{}` minus one in-kernel exit (`{}`)",
                c.inject_halted, c.probe
            ),
        )
    } else {
        measured(
            0.0,
            format!(
                "p50 of `{}` was not above one in-kernel exit: no wake-up cost seen",
                c.inject_halted
            ),
        )
    };
    // The kick of a running vCPU and its EOI MSR write are exits KVM
    // handles without returning to the VMM: the probe times exactly that
    // round trip. (A whileloop's lost time would include the guest handler
    // and, on a 2-core host, scheduler noise larger than the exit itself.)
    let in_kernel = |what: &str| {
        measured(
            obs.kernel_exit_ns,
            format!("{what}: one in-kernel exit (`{}`)", c.probe),
        )
    };
    let external_interrupt = in_kernel("the kick exits into KVM, which injects and re-enters");
    let eoi_kernel = in_kernel("the x2APIC EOI MSR write is handled by KVM's LAPIC");
    let timer_program = in_kernel("the TSC-deadline MSR write is handled by KVM's LAPIC");
    HostCosts {
        userspace_exit: measured(
            obs.userspace_exit_ns,
            format!(
                "`{}`: port I/O handled by the VMM, guest round trip",
                c.probe
            ),
        ),
        inject_running: measured(
            obs.inject_running_p50_ns,
            format!("`{}`: MSI round trip p50", c.inject_running),
        ),
        inject_halted: measured(
            obs.inject_halted_p50_ns,
            format!("`{}`: MSI round trip p50", c.inject_halted),
        ),
        hlt_wakeup,
        external_interrupt,
        eoi_userspace: measured(
            obs.userspace_exit_ns,
            format!(
                "the EOI write exits to the VMM's LAPIC model: one userspace exit (`{}`)",
                c.probe
            ),
        ),
        eoi_kernel,
        eoi_pv: measured(
            0.0,
            "PV EOI clears a flag in shared memory: no exit (the PV EOI runs show no EOI exit)"
                .into(),
        ),
        timer_program,
        kernel_exit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observations(running: f64, halted: f64) -> Observations {
        Observations {
            userspace_exit_ns: 9_000.0,
            kernel_exit_ns: 4_000.0,
            inject_running_p50_ns: running,
            inject_halted_p50_ns: halted,
            commands: Commands::default(),
        }
    }

    #[test]
    fn each_cost_comes_from_the_exit_its_path_takes() {
        let costs = derive_costs(&observations(30_000.0, 70_000.0));
        assert_eq!(costs.hlt_wakeup.ns, 66_000.0);
        assert_eq!(costs.external_interrupt.ns, 4_000.0);
        assert_eq!(costs.eoi_kernel.ns, 4_000.0);
        assert_eq!(costs.eoi_userspace.ns, 9_000.0);
        assert_eq!(costs.eoi_pv.ns, 0.0);
        assert_eq!(costs.timer_program.ns, 4_000.0);
        assert_eq!(costs.inject_halted.ns, 70_000.0);
    }

    #[test]
    fn a_round_trip_no_longer_than_one_exit_gets_no_wakeup_cost() {
        let costs = derive_costs(&observations(500_000.0, 3_000.0));
        assert_eq!(costs.hlt_wakeup.ns, 0.0);
        assert!(costs.hlt_wakeup.source.contains("no wake-up cost seen"));
    }
}
