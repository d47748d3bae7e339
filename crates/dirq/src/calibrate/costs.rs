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
    /// `dirq probe`: one RDMSR handled inside KVM, guest round trip.
    pub kernel_exit_ns: f64,
    /// `dirq probe`: x2APIC self-IPI, its send to its handler's entry (p50).
    pub self_ipi_p50_ns: f64,
    /// `dirq probe`: the ICR write of an IPI to a busy vCPU, as the sender
    /// times it (p50; 0 if not measured).
    pub ipi_send_busy_ns: f64,
    /// `dirq probe`: what one IPI took from a busy vCPU, its handler's pong
    /// and EOI included (p50, the target's TSC; 0 if not measured).
    pub ipi_busy_target_ns: f64,
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
    /// The injection into the guest and its handler's entry, when the
    /// probe timed a self-IPI.
    pub irq_entry: Option<Measured>,
    /// The host IPI a sender pays to kick a running vCPU, beyond its exit.
    pub ipi_send: Option<Measured>,
    /// The exit a running vCPU takes when it is kicked for an interrupt.
    pub external_interrupt: Measured,
    pub eoi_userspace: Measured,
    pub eoi_kernel: Measured,
    pub eoi_pv: Measured,
    pub timer_program: Measured,
}

impl HostCosts {
    /// Named rows for tables, in a fixed order; costs not measured on
    /// this host are left out.
    pub fn rows(&self) -> Vec<(&'static str, &Measured)> {
        let measured = [
            ("userspace exit", Some(&self.userspace_exit)),
            ("in-kernel exit", Some(&self.kernel_exit)),
            (
                "interrupt into a running vCPU (p50)",
                Some(&self.inject_running),
            ),
            (
                "interrupt into a halted vCPU (p50)",
                Some(&self.inject_halted),
            ),
            ("HLT wake-up", Some(&self.hlt_wakeup)),
            ("injection and handler entry", self.irq_entry.as_ref()),
            ("IPI send to a running vCPU", self.ipi_send.as_ref()),
            (
                "external-interrupt exit (kick of a running vCPU)",
                Some(&self.external_interrupt),
            ),
            ("EOI, userspace LAPIC", Some(&self.eoi_userspace)),
            ("EOI, KVM LAPIC (x2APIC MSR)", Some(&self.eoi_kernel)),
            ("EOI, KVM PV EOI", Some(&self.eoi_pv)),
            (
                "timer programming (TSC deadline)",
                Some(&self.timer_program),
            ),
        ];
        measured
            .into_iter()
            .filter_map(|(name, cost)| Some((name, cost?)))
            .collect()
    }
}

/// `value` when it is a cost at all.
fn positive(value: f64) -> Option<f64> {
    (value.is_finite() && value > 0.0).then_some(value)
}

pub fn derive_costs(obs: &Observations) -> HostCosts {
    let c = &obs.commands;
    let measured = |ns: f64, source: String| Measured { ns, source };
    let kernel_exit = measured(
        obs.kernel_exit_ns,
        format!("`{}`: RDMSR handled inside KVM, guest round trip", c.probe),
    );
    // A cost derived from the probe's floors, when it is one at all.
    let from_probe =
        |ns: f64, how: &str| positive(ns).map(|ns| measured(ns, format!("{how} (`{}`)", c.probe)));
    // A self-IPI's ICR write is one in-kernel exit; the rest of its way to
    // the handler is the injection and the handler's entry (on kvm_pvm's
    // native mode a trap of its own, on VT-x part of the VM entry).
    let irq_entry = from_probe(
        obs.self_ipi_p50_ns - obs.kernel_exit_ns,
        "x2APIC self-IPI p50, send to handler entry, minus its ICR write, one in-kernel exit",
    );
    let entry_ns = irq_entry.as_ref().map_or(0.0, |entry| entry.ns);
    // A round trip to a halted vCPU is its HLT exit returning (one in-kernel
    // exit), the wake-up of the sleeping vCPU thread, and the injection and
    // handler entry. (The running-vCPU round trip is no baseline: on some
    // hosts a kick reaches a running vCPU later than a wake-up reaches a
    // halted one.)
    let wakeup_ns = obs.inject_halted_p50_ns - obs.kernel_exit_ns - entry_ns;
    let entry_note = if irq_entry.is_some() {
        " and the injection and handler entry"
    } else {
        ""
    };
    let hlt_wakeup = if wakeup_ns > 0.0 {
        measured(
            wakeup_ns,
            format!(
                "p50 of `{}` minus one in-kernel exit{entry_note} (`{}`)",
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
    // The EOI and TSC-deadline MSR writes are exits KVM handles without
    // returning to the VMM: the probe times exactly that round trip.
    let in_kernel = |what: &str| {
        measured(
            obs.kernel_exit_ns,
            format!("{what}: one in-kernel exit (`{}`)", c.probe),
        )
    };
    // An IPI to a busy vCPU costs its sender an in-kernel exit and the host
    // IPI that kicks the target.
    let ipi_send = from_probe(
        obs.ipi_send_busy_ns - obs.kernel_exit_ns,
        "an ICR write to a busy vCPU as its sender times it, minus one in-kernel exit",
    );
    // What the kick takes from the busy target beyond its handler: the
    // target's lost time per IPI less the handler's pong (an IPI to a busy
    // vCPU again), its EOI (one in-kernel exit) and its entry. On kvm_pvm's
    // native mode it holds the handler's IRETQ trap too. Without both
    // floors the kick is taken for one in-kernel exit.
    let kicked_exit = from_probe(
        obs.ipi_busy_target_ns - obs.ipi_send_busy_ns - obs.kernel_exit_ns - entry_ns,
        "what an IPI takes from a busy vCPU (its own TSC) minus its handler's pong, EOI \
         (one in-kernel exit) and entry: the exit the kick forces",
    )
    .filter(|_| obs.ipi_busy_target_ns > 0.0 && obs.ipi_send_busy_ns > 0.0);
    let external_interrupt = kicked_exit
        .unwrap_or_else(|| in_kernel("the kick exits into KVM, which injects and re-enters"));
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
        irq_entry,
        ipi_send,
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
            self_ipi_p50_ns: 0.0,
            ipi_send_busy_ns: 0.0,
            ipi_busy_target_ns: 0.0,
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
    fn the_probes_ipi_floors_split_into_entry_send_and_kicked_exit() {
        let mut obs = observations(30_000.0, 70_000.0);
        obs.self_ipi_p50_ns = 7_000.0;
        obs.ipi_send_busy_ns = 10_000.0;
        obs.ipi_busy_target_ns = 30_000.0;
        let costs = derive_costs(&obs);
        let entry = costs.irq_entry.as_ref().expect("a self-IPI was timed");
        assert_eq!(entry.ns, 3_000.0);
        assert_eq!(
            costs.ipi_send.as_ref().expect("a send was timed").ns,
            6_000.0
        );
        // 30 us lost by the target = kick exit + pong 10 + EOI 4 + entry 3.
        assert_eq!(costs.external_interrupt.ns, 13_000.0);
        assert!(costs.external_interrupt.source.contains("pong"));
        // The halted round trip holds the entry too.
        assert_eq!(costs.hlt_wakeup.ns, 63_000.0);
        assert_eq!(costs.rows().len(), 12);
    }

    #[test]
    fn without_the_ipi_floors_the_kick_is_one_in_kernel_exit() {
        let costs = derive_costs(&observations(30_000.0, 70_000.0));
        assert!(costs.irq_entry.is_none() && costs.ipi_send.is_none());
        assert_eq!(costs.rows().len(), 10);
    }

    #[test]
    fn a_round_trip_no_longer_than_one_exit_gets_no_wakeup_cost() {
        let costs = derive_costs(&observations(500_000.0, 3_000.0));
        assert_eq!(costs.hlt_wakeup.ns, 0.0);
        assert!(costs.hlt_wakeup.source.contains("no wake-up cost seen"));
    }
}
