//! This host's interrupt costs, derived from real runs. Pure arithmetic on
//! the runs' reports, so it is tested without KVM.
//!
//! Every figure subtracted is a median (the probe's floors are medians of
//! its runs' medians; the calibration runs' are p50s), so like is taken
//! from like. A derived cost that comes out negative, or closer to zero
//! than the probe's runs spread, is not derivable: it says why, and holds
//! the fallback the simulator uses instead. A cost that rests on a floor
//! the probe could not pin down names it.

use std::collections::{BTreeMap, BTreeSet};

use dirq_sim::profile::CostProfile;
use dirq_stats::f64_of;
use dirq_vmm::probe::Floor;
use serde::Serialize;

/// One derived cost and where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub ns: f64,
    /// How the number was obtained, quoting the run(s).
    pub source: String,
    /// Set when the derivation failed: why, and what `ns` holds instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_derivable: Option<NotDerivable>,
    /// The probe floors it rests on whose median the probe could not pin
    /// down: a second probe may move it by more than they agree.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unpinned: Vec<Floor>,
}

/// Why a cost could not be derived from the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Underivable {
    /// A figure it is derived from was not measured on this host.
    NotMeasured,
    /// What the subtraction left was below zero.
    Negative { difference_ns: f64 },
    /// What it left was no farther from zero than the figures' runs spread.
    WithinSpread { difference_ns: f64, spread_ns: f64 },
}

/// A cost that could not be derived, and what stands in for it.
#[derive(Debug, Clone, Serialize)]
pub struct NotDerivable {
    pub why: Underivable,
    /// What `ns` holds instead, and where it comes from.
    pub fallback: String,
}

impl std::fmt::Display for Underivable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Underivable::NotMeasured => write!(f, "a figure it needs was not measured"),
            Underivable::Negative { difference_ns } => {
                write!(f, "the subtraction left {difference_ns:.0} ns, below zero")
            }
            Underivable::WithinSpread {
                difference_ns,
                spread_ns,
            } => write!(
                f,
                "the subtraction left {difference_ns:.0} ns, within the runs' spread \
                 (+/- {spread_ns:.0} ns) of zero"
            ),
        }
    }
}

impl Measured {
    fn new(ns: f64, source: String) -> Self {
        Measured {
            ns,
            source,
            not_derivable: None,
            unpinned: Vec::new(),
        }
    }

    /// What the report and the profile say of the number.
    pub fn provenance(&self) -> String {
        let mut text = match &self.not_derivable {
            None => format!("measured: {}", self.source),
            Some(NotDerivable { why, fallback }) => {
                format!("not derivable: {why} ({}); uses {fallback}", self.source)
            }
        };
        if !self.unpinned.is_empty() {
            let names: Vec<&str> = self.unpinned.iter().map(|floor| floor.name()).collect();
            text.push_str(&format!(
                "; rests on what the probe could not pin down: {}",
                names.join(", ")
            ));
        }
        text
    }
}

/// The inputs `dirq calibrate` collects.
#[derive(Debug, Clone, Default)]
pub struct Observations {
    /// `dirq probe`: one `out` handled by the VMM, guest round trip (p50).
    pub userspace_exit_ns: f64,
    /// `dirq probe`: one RDMSR handled inside KVM, guest round trip (p50).
    pub kernel_exit_ns: f64,
    /// `dirq probe`: x2APIC self-IPI, its send to its handler's entry (p50).
    pub self_ipi_p50_ns: f64,
    /// `dirq probe`: the ICR write of an IPI to a busy vCPU, as the sender
    /// times it (p50; 0 if not measured).
    pub ipi_send_busy_ns: f64,
    /// `dirq probe`: what one IPI took from a busy vCPU, its handler's pong
    /// and EOI included (p50, the target's TSC; 0 if not measured).
    pub ipi_busy_target_ns: f64,
    /// `dirq probe`: the same two through dirq's userspace LAPIC (0 if not
    /// measured).
    pub userspace_ipi_send_busy_ns: f64,
    pub userspace_ipi_busy_target_ns: f64,
    /// irq-latency p50, in-kernel path with PV EOI, guest busy.
    pub inject_running_p50_ns: f64,
    /// The same with the guest halted between interrupts.
    pub inject_halted_p50_ns: f64,
    /// irq-latency p50 into a halted guest through dirq's userspace LAPIC.
    pub inject_halted_userspace_p50_ns: f64,
    /// How far either side of its median each probe floor's runs landed
    /// (half their interquartile range); a floor not here did not vary.
    pub half_spread_ns: BTreeMap<Floor, f64>,
    /// The floors whose median the probe could not pin down.
    pub unpinned: BTreeSet<Floor>,
    /// The commands behind each input, quoted in `source`.
    pub commands: Commands,
}

#[derive(Debug, Clone, Default)]
pub struct Commands {
    pub probe: String,
    pub inject_running: String,
    pub inject_halted: String,
    pub inject_halted_userspace: String,
}

/// Every cost issue 5 asks `dirq calibrate` to measure.
#[derive(Debug, Clone, Serialize)]
pub struct HostCosts {
    pub userspace_exit: Measured,
    pub kernel_exit: Measured,
    pub inject_running: Measured,
    pub inject_halted: Measured,
    pub hlt_wakeup: Measured,
    /// The same wake-up of a vCPU halted in the VMM (userspace LAPIC).
    pub hlt_wakeup_userspace: Measured,
    /// The injection into the guest and its handler's entry.
    pub irq_entry: Measured,
    /// The host IPI a sender pays to kick a running vCPU, beyond its exit.
    pub ipi_send: Measured,
    /// The exit a running vCPU takes when it is kicked for an interrupt.
    pub external_interrupt: Measured,
    /// What the VMM's kick (a signal to the vCPU thread, the return to the
    /// VMM, its injection and re-entry) takes from a running vCPU with
    /// dirq's userspace LAPIC.
    pub userspace_kick: Measured,
    pub eoi_userspace: Measured,
    pub eoi_kernel: Measured,
    pub eoi_pv: Measured,
    pub timer_program: Measured,
}

impl HostCosts {
    /// Named rows for tables, in a fixed order, derivable or not.
    pub fn rows(&self) -> [(&'static str, &Measured); 14] {
        [
            ("userspace exit", &self.userspace_exit),
            ("in-kernel exit", &self.kernel_exit),
            ("interrupt into a running vCPU (p50)", &self.inject_running),
            ("interrupt into a halted vCPU (p50)", &self.inject_halted),
            ("HLT wake-up", &self.hlt_wakeup),
            ("HLT wake-up, userspace LAPIC", &self.hlt_wakeup_userspace),
            ("injection and handler entry", &self.irq_entry),
            ("IPI send to a running vCPU", &self.ipi_send),
            (
                "external-interrupt exit (kick of a running vCPU)",
                &self.external_interrupt,
            ),
            (
                "kick of a running vCPU, userspace LAPIC",
                &self.userspace_kick,
            ),
            ("EOI, userspace LAPIC", &self.eoi_userspace),
            ("EOI, KVM LAPIC (x2APIC MSR)", &self.eoi_kernel),
            ("EOI, KVM PV EOI", &self.eoi_pv),
            ("timer programming (TSC deadline)", &self.timer_program),
        ]
    }
}

/// A figure entering a derivation: its value, its runs' half spread and
/// the probe floors it rests on.
#[derive(Debug, Clone)]
struct Term {
    ns: f64,
    half_spread_ns: f64,
    floors: BTreeSet<Floor>,
}

/// `minuend` less every subtrahend, when the runs show it is a cost: the
/// figures' spreads add up as independent errors (root of the sum of
/// squares), and a difference no larger than that is zero for all they tell.
fn difference(minuend: &Term, subtrahends: &[&Term]) -> Result<Term, Underivable> {
    let terms = || std::iter::once(minuend).chain(subtrahends.iter().copied());
    if terms().any(|term| !(term.ns.is_finite() && term.ns > 0.0)) {
        return Err(Underivable::NotMeasured);
    }
    let difference_ns = minuend.ns - subtrahends.iter().map(|term| term.ns).sum::<f64>();
    let spread_ns = terms()
        .map(|term| term.half_spread_ns.powi(2))
        .sum::<f64>()
        .sqrt();
    if difference_ns < 0.0 {
        Err(Underivable::Negative { difference_ns })
    } else if difference_ns <= spread_ns {
        Err(Underivable::WithinSpread {
            difference_ns,
            spread_ns,
        })
    } else {
        Ok(Term {
            ns: difference_ns,
            half_spread_ns: spread_ns,
            floors: terms().flat_map(|term| term.floors.clone()).collect(),
        })
    }
}

/// The derived cost, naming the floors among `unpinned` it rests on, or
/// `fallback_ns` with why it stands in.
fn derived(
    result: Result<&Term, &Underivable>,
    unpinned: &BTreeSet<Floor>,
    source: String,
    fallback_ns: f64,
    fallback: &str,
) -> Measured {
    match result {
        Ok(term) => Measured {
            unpinned: term.floors.intersection(unpinned).copied().collect(),
            ..Measured::new(term.ns, source)
        },
        Err(why) => Measured {
            ns: fallback_ns,
            source,
            not_derivable: Some(NotDerivable {
                why: *why,
                fallback: format!("{fallback_ns:.0} ns, {fallback}"),
            }),
            unpinned: Vec::new(),
        },
    }
}

pub fn derive_costs(obs: &Observations) -> HostCosts {
    let c = &obs.commands;
    let probe_term = |floor: Floor, ns: f64| Term {
        ns,
        half_spread_ns: obs.half_spread_ns.get(&floor).copied().unwrap_or(0.0),
        floors: BTreeSet::from([floor]),
    };
    // The calibration runs are single runs: no spread of their own.
    let run_term = |ns: f64| Term {
        ns,
        half_spread_ns: 0.0,
        floors: BTreeSet::new(),
    };
    let derive = |result: &Result<Term, Underivable>, source, fallback_ns, fallback| {
        derived(
            result.as_ref(),
            &obs.unpinned,
            source,
            fallback_ns,
            fallback,
        )
    };
    // A floor taken as it is.
    let floor_cost = |floor: Floor, ns: f64, source: String| {
        derived(Ok(&probe_term(floor, ns)), &obs.unpinned, source, ns, "")
    };
    let kernel = probe_term(Floor::KernelExit, obs.kernel_exit_ns);
    let kernel_exit = floor_cost(
        Floor::KernelExit,
        obs.kernel_exit_ns,
        format!("`{}`: RDMSR handled inside KVM, guest round trip", c.probe),
    );
    let did_2015 = CostProfile::did_2015();
    let from_probe = |how: &str| format!("{how} (`{}`)", c.probe);
    // A self-IPI's ICR write is one in-kernel exit; the rest of its way to
    // the handler is the injection and the handler's entry (on kvm_pvm's
    // native mode a trap of its own, on VT-x part of the VM entry).
    let irq_entry_ns = difference(&probe_term(Floor::SelfIpi, obs.self_ipi_p50_ns), &[&kernel]);
    let irq_entry = derive(
        &irq_entry_ns,
        from_probe(
            "x2APIC self-IPI p50, send to handler entry, minus its ICR write, one in-kernel exit",
        ),
        f64_of(did_2015.guest_ns.irq_entry),
        "did-2015's guest_ns.irq_entry",
    );
    // The entry the simulator will use, derived or not.
    let entry = irq_entry_ns.unwrap_or(Term {
        ns: irq_entry.ns,
        half_spread_ns: 0.0,
        floors: BTreeSet::new(),
    });
    // A round trip to a halted vCPU is its HLT exit returning (one in-kernel
    // exit), the wake-up of the sleeping vCPU thread, and the injection and
    // handler entry. (The running-vCPU round trip is no baseline: on some
    // hosts a kick reaches a running vCPU later than a wake-up reaches a
    // halted one.)
    let hlt_wakeup = derive(
        &difference(&run_term(obs.inject_halted_p50_ns), &[&kernel, &entry]),
        format!(
            "p50 of `{}` minus one in-kernel exit and the injection and handler entry (`{}`)",
            c.inject_halted, c.probe
        ),
        0.0,
        "no wake-up beyond the exit and the entry",
    );
    // The EOI and TSC-deadline MSR writes are exits KVM handles without
    // returning to the VMM: the probe times exactly that round trip.
    let in_kernel = |what: &str| {
        floor_cost(
            Floor::KernelExit,
            obs.kernel_exit_ns,
            format!("{what}: one in-kernel exit (`{}`)", c.probe),
        )
    };
    // An IPI to a busy vCPU costs its sender an in-kernel exit and the host
    // IPI that kicks the target.
    let send = probe_term(Floor::IpiBusySend, obs.ipi_send_busy_ns);
    let ipi_send = derive(
        &difference(&send, &[&kernel]),
        from_probe("an ICR write to a busy vCPU as its sender times it, minus one in-kernel exit"),
        f64_of(did_2015.host_ns.send_ipi),
        "did-2015's host_ns.send_ipi",
    );
    // What the kick takes from the busy target beyond its handler: the
    // target's lost time per IPI less the handler's pong (an IPI to a busy
    // vCPU again), its EOI (one in-kernel exit) and its entry. On kvm_pvm's
    // native mode it holds the handler's IRETQ trap too. When that cannot
    // be derived the kick is taken for one in-kernel exit.
    let external_interrupt = derive(
        &difference(
            &probe_term(Floor::IpiBusyTarget, obs.ipi_busy_target_ns),
            &[&send, &kernel, &entry],
        ),
        from_probe(
            "what an IPI takes from a busy vCPU (its own TSC) minus its handler's pong, EOI \
             (one in-kernel exit) and entry: the exit the kick forces",
        ),
        obs.kernel_exit_ns,
        "one in-kernel exit: the kick exits into KVM, which injects and re-enters",
    );
    // The same split with dirq's userspace LAPIC, like from like: the pong's
    // ICR write as its sender times it and the EOI (a userspace exit) come
    // off the target's loss. When it cannot be derived the kick is taken
    // for a userspace exit plus what a kick into KVM adds to an exit.
    let userspace = probe_term(Floor::UserspaceExit, obs.userspace_exit_ns);
    let userspace_kick = derive(
        &difference(
            &probe_term(
                Floor::UserspaceIpiBusyTarget,
                obs.userspace_ipi_busy_target_ns,
            ),
            &[
                &probe_term(Floor::UserspaceIpiBusySend, obs.userspace_ipi_send_busy_ns),
                &userspace,
                &entry,
            ],
        ),
        from_probe(
            "what an IPI takes from a busy vCPU through the userspace LAPIC minus its \
             handler's pong, EOI (one userspace exit) and entry",
        ),
        obs.userspace_exit_ns + (external_interrupt.ns - obs.kernel_exit_ns).max(0.0),
        "a userspace exit plus what a kick into KVM adds to an in-kernel exit",
    );
    // With dirq's LAPIC a halted vCPU's HLT exit returns to the VMM, which
    // waits for an interrupt: the round trip is that exit's return (one
    // userspace exit), the VMM's wake-up of the vCPU thread, and the entry.
    let hlt_wakeup_userspace = derive(
        &difference(
            &run_term(obs.inject_halted_userspace_p50_ns),
            &[&userspace, &entry],
        ),
        format!(
            "p50 of `{}` minus one userspace exit and the injection and handler entry (`{}`)",
            c.inject_halted_userspace, c.probe
        ),
        hlt_wakeup.ns,
        "the in-kernel path's HLT wake-up",
    );
    let eoi_kernel = in_kernel("the x2APIC EOI MSR write is handled by KVM's LAPIC");
    let timer_program = in_kernel("the TSC-deadline MSR write is handled by KVM's LAPIC");
    HostCosts {
        userspace_exit: floor_cost(
            Floor::UserspaceExit,
            obs.userspace_exit_ns,
            format!(
                "`{}`: port I/O handled by the VMM, guest round trip",
                c.probe
            ),
        ),
        inject_running: Measured::new(
            obs.inject_running_p50_ns,
            format!("`{}`: MSI round trip p50", c.inject_running),
        ),
        inject_halted: Measured::new(
            obs.inject_halted_p50_ns,
            format!("`{}`: MSI round trip p50", c.inject_halted),
        ),
        hlt_wakeup,
        hlt_wakeup_userspace,
        irq_entry,
        ipi_send,
        external_interrupt,
        userspace_kick,
        eoi_userspace: floor_cost(
            Floor::UserspaceExit,
            obs.userspace_exit_ns,
            format!(
                "the EOI write exits to the VMM's LAPIC model: one userspace exit (`{}`)",
                c.probe
            ),
        ),
        eoi_kernel,
        eoi_pv: Measured::new(
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
            ..Observations::default()
        }
    }

    fn with_ipi_floors(self_ipi: f64, send: f64, target: f64) -> Observations {
        Observations {
            self_ipi_p50_ns: self_ipi,
            ipi_send_busy_ns: send,
            ipi_busy_target_ns: target,
            userspace_ipi_send_busy_ns: 32_000.0,
            userspace_ipi_busy_target_ns: 100_000.0,
            inject_halted_userspace_p50_ns: 40_000.0,
            ..observations(30_000.0, 70_000.0)
        }
    }

    #[test]
    fn each_cost_comes_from_the_exit_its_path_takes() {
        let costs = derive_costs(&observations(30_000.0, 70_000.0));
        // Without a self-IPI the entry is did-2015's 500 ns.
        assert_eq!(costs.hlt_wakeup.ns, 65_500.0);
        assert_eq!(costs.external_interrupt.ns, 4_000.0);
        assert_eq!(costs.eoi_kernel.ns, 4_000.0);
        assert_eq!(costs.eoi_userspace.ns, 9_000.0);
        assert_eq!(costs.eoi_pv.ns, 0.0);
        assert_eq!(costs.timer_program.ns, 4_000.0);
        assert_eq!(costs.inject_halted.ns, 70_000.0);
    }

    #[test]
    fn the_probes_ipi_floors_split_into_entry_send_and_kicked_exit() {
        let costs = derive_costs(&with_ipi_floors(7_000.0, 10_000.0, 30_000.0));
        assert_eq!(costs.irq_entry.ns, 3_000.0);
        assert_eq!(costs.ipi_send.ns, 6_000.0);
        // 30 us lost by the target = kick exit + pong 10 + EOI 4 + entry 3.
        assert_eq!(costs.external_interrupt.ns, 13_000.0);
        assert!(costs.external_interrupt.source.contains("pong"));
        // The halted round trip holds the entry too.
        assert_eq!(costs.hlt_wakeup.ns, 63_000.0);
        assert!(costs.rows().iter().all(|(_, m)| m.not_derivable.is_none()));
    }

    #[test]
    fn without_the_ipi_floors_each_cost_keeps_its_row_and_names_its_fallback() {
        let costs = derive_costs(&observations(30_000.0, 70_000.0));
        for (cost, ns, fallback) in [
            (&costs.irq_entry, 500.0, "guest_ns.irq_entry"),
            (&costs.ipi_send, 300.0, "host_ns.send_ipi"),
            (&costs.external_interrupt, 4_000.0, "one in-kernel exit"),
        ] {
            let not = cost.not_derivable.as_ref().expect("not derivable");
            assert_eq!(not.why, Underivable::NotMeasured);
            assert_eq!(cost.ns, ns);
            assert!(
                cost.provenance().contains(fallback),
                "{}",
                cost.provenance()
            );
        }
        assert_eq!(costs.rows().len(), 14);
    }

    #[test]
    fn the_userspace_kick_is_split_from_the_userspace_ipi_floors_like_from_like() {
        let mut obs = with_ipi_floors(7_000.0, 10_000.0, 30_000.0);
        // 100 us lost = kick + pong 32 + EOI (userspace exit 9) + entry 3.
        assert_eq!(derive_costs(&obs).userspace_kick.ns, 56_000.0);
        // Unmeasured: a userspace exit plus the kick's 13 - 4 us into KVM.
        obs.userspace_ipi_busy_target_ns = 0.0;
        let kick = derive_costs(&obs).userspace_kick;
        assert_eq!(kick.ns, 18_000.0);
        assert!(kick.provenance().contains("a userspace exit plus"));
    }

    #[test]
    fn a_vcpu_halted_in_the_vmm_wakes_at_its_own_round_trips_cost() {
        let mut obs = with_ipi_floors(7_000.0, 10_000.0, 30_000.0);
        // 40 us = the HLT exit's return (userspace exit 9) + wake + entry 3.
        assert_eq!(derive_costs(&obs).hlt_wakeup_userspace.ns, 28_000.0);
        // Unmeasured: the in-kernel wake-up stands in, and says so.
        obs.inject_halted_userspace_p50_ns = 0.0;
        let costs = derive_costs(&obs);
        assert_eq!(costs.hlt_wakeup_userspace.ns, costs.hlt_wakeup.ns);
        assert!(costs
            .hlt_wakeup_userspace
            .provenance()
            .contains("the in-kernel path's HLT wake-up"));
    }

    #[test]
    fn a_self_ipi_faster_than_an_exit_leaves_a_negative_entry_that_is_kept_and_explained() {
        // A noisy host: the self-IPI p50 fell below the RDMSR's.
        let costs = derive_costs(&with_ipi_floors(3_500.0, 10_000.0, 30_000.0));
        let not = costs.irq_entry.not_derivable.as_ref().expect("negative");
        assert_eq!(
            not.why,
            Underivable::Negative {
                difference_ns: -500.0
            }
        );
        assert!(costs
            .irq_entry
            .provenance()
            .starts_with("not derivable: the subtraction left -500 ns, below zero"));
        // What uses the entry uses its fallback: 30 - 10 - 4 - 0.5 us.
        assert_eq!(costs.external_interrupt.ns, 15_500.0);
    }

    #[test]
    fn a_difference_inside_the_runs_spread_is_not_a_cost() {
        let mut obs = with_ipi_floors(4_300.0, 10_000.0, 30_000.0);
        obs.half_spread_ns = [(Floor::SelfIpi, 300.0), (Floor::KernelExit, 400.0)].into();
        let costs = derive_costs(&obs);
        let not = costs
            .irq_entry
            .not_derivable
            .as_ref()
            .expect("within spread");
        assert_eq!(
            not.why,
            Underivable::WithinSpread {
                difference_ns: 300.0,
                spread_ns: 500.0
            }
        );
        // The same difference from steadier runs is a cost.
        obs.half_spread_ns.clear();
        assert_eq!(derive_costs(&obs).irq_entry.ns, 300.0);
    }

    #[test]
    fn a_round_trip_no_longer_than_one_exit_gets_no_wakeup_cost() {
        let costs = derive_costs(&observations(500_000.0, 3_000.0));
        assert_eq!(costs.hlt_wakeup.ns, 0.0);
        assert!(costs
            .hlt_wakeup
            .provenance()
            .contains("no wake-up beyond the exit and the entry"));
    }

    #[test]
    fn a_cost_resting_on_a_floor_the_probe_could_not_pin_down_says_so() {
        let mut obs = with_ipi_floors(7_000.0, 10_000.0, 30_000.0);
        obs.unpinned = [Floor::IpiBusyTarget].into();
        let costs = derive_costs(&obs);
        assert_eq!(
            costs.external_interrupt.unpinned,
            vec![Floor::IpiBusyTarget]
        );
        assert!(
            costs
                .external_interrupt
                .provenance()
                .ends_with("could not pin down: IPI's cost to a busy target, p50"),
            "{}",
            costs.external_interrupt.provenance()
        );
        // What does not rest on it is as before.
        assert!(costs.ipi_send.unpinned.is_empty());
        assert!(costs.irq_entry.unpinned.is_empty());
        obs.unpinned = [Floor::KernelExit].into();
        let costs = derive_costs(&obs);
        for cost in [&costs.kernel_exit, &costs.eoi_kernel, &costs.hlt_wakeup] {
            assert_eq!(cost.unpinned, vec![Floor::KernelExit]);
        }
        assert!(costs.userspace_exit.unpinned.is_empty());
    }
}
