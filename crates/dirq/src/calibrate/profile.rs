//! A simulator cost profile for this host: the measured costs replace the
//! did-2015 values they correspond to; everything this host cannot measure
//! is kept from did-2015 and says so, field by field, in the TOML.

use dirq_sim::profile::CostProfile;
use dirq_stats::round_u64;

use super::costs::{HostCosts, Measured};

/// Where one profile field's value came from, for the TOML comments and
/// the report's calibration table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Provenance {
    /// `section.field`, as in the TOML.
    pub field: String,
    pub value: String,
    pub source: String,
}

/// The calibrated profile and the provenance of every field it changed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostProfile {
    pub profile: CostProfile,
    pub provenance: Vec<Provenance>,
}

fn ns(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        round_u64(value)
    } else {
        0
    }
}

/// Builds this host's profile. `name` names it (e.g. "host-kvm_pvm");
/// `halt_poll_ns` is the host's default halt polling window, if known.
pub fn host_profile(name: &str, costs: &HostCosts, halt_poll_ns: Option<u64>) -> HostProfile {
    let mut profile = CostProfile::did_2015();
    profile.name = name.to_string();
    let mut fields = Fields::default();
    let kernel_exit = ns(costs.kernel_exit.ns);
    let service = &mut profile.exit_service_ns;
    fields.set_cost(
        "exit_service_ns.external_interrupt",
        &mut service.external_interrupt,
        &costs.external_interrupt,
    );
    fields.set_cost(
        "exit_service_ns.eoi_write",
        &mut service.eoi_write,
        &costs.eoi_kernel,
    );
    fields.set_cost(
        "exit_service_ns.io_instruction",
        &mut service.io_instruction,
        &costs.userspace_exit,
    );
    fields.set_cost(
        "exit_service_ns.timer_write",
        &mut service.timer_write,
        &costs.timer_program,
    );
    let in_kernel = |what: &str| {
        format!(
            "measured: {what}: one in-kernel exit ({})",
            costs.kernel_exit.source
        )
    };
    let assumed_in_kernel = |what: &str| format!("assumed = in-kernel exit: {what}");
    fields.set(
        "exit_service_ns.icr_write",
        &mut service.icr_write,
        kernel_exit,
        in_kernel("the ICR write is handled by KVM's LAPIC"),
    );
    fields.set(
        "exit_service_ns.interrupt_window",
        &mut service.interrupt_window,
        kernel_exit,
        in_kernel("the interrupt-window exit only injects"),
    );
    fields.set(
        "exit_service_ns.hlt",
        &mut service.hlt,
        kernel_exit,
        in_kernel("the HLT exit itself; the sleep is host_ns.wakeup"),
    );
    fields.set(
        "exit_service_ns.apic_access",
        &mut service.apic_access,
        kernel_exit,
        in_kernel("xAPIC MMIO is emulated by KVM's LAPIC"),
    );
    fields.set(
        "exit_service_ns.ept_violation",
        &mut service.ept_violation,
        kernel_exit,
        assumed_in_kernel("a guest page fault handled by KVM"),
    );
    fields.set(
        "exit_service_ns.other",
        &mut service.other,
        kernel_exit,
        in_kernel("any other exit KVM handles"),
    );
    let external = service.external_interrupt;
    fields.set(
        "exit_service_ns.nmi",
        &mut service.nmi,
        external,
        "assumed = external_interrupt: the same host entry path".into(),
    );
    fields.set(
        "exit_service_ns.exception",
        &mut service.exception,
        external,
        "assumed = external_interrupt: ELI's #NP carries a host interrupt".into(),
    );
    let host = &mut profile.host_ns;
    fields.set(
        "host_ns.exit_entry_transition",
        &mut host.exit_entry_transition,
        0,
        "measured: 0, the costs above are guest round trips and already include exit and entry"
            .into(),
    );
    fields.set_cost("host_ns.wakeup", &mut host.wakeup, &costs.hlt_wakeup);
    fields.set_cost("host_ns.send_ipi", &mut host.send_ipi, &costs.ipi_send);
    if let Some(poll) = halt_poll_ns {
        fields.set(
            "host_ns.halt_poll",
            &mut host.halt_poll,
            poll,
            "measured: this host's /sys/module/kvm/parameters/halt_poll_ns".into(),
        );
    }
    fields.set_cost(
        "guest_ns.irq_entry",
        &mut profile.guest_ns.irq_entry,
        &costs.irq_entry,
    );
    HostProfile {
        profile,
        provenance: fields.provenance,
    }
}

/// The fields `host_profile` changed, each with where its value came from.
#[derive(Default)]
struct Fields {
    provenance: Vec<Provenance>,
}

impl Fields {
    fn set(&mut self, field: &str, target: &mut u64, value: u64, source: String) {
        *target = value;
        self.provenance.push(Provenance {
            field: field.to_string(),
            value: value.to_string(),
            source,
        });
    }

    /// `target` set to a derived cost, quoting how it was derived.
    fn set_cost(&mut self, field: &str, target: &mut u64, cost: &Measured) {
        self.set(field, target, ns(cost.ns), cost.provenance());
    }
}

impl HostProfile {
    /// The profile as TOML that `dirq sim --profile` reads, each field
    /// commented with its source; fields without a comment are did-2015's.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        let body = toml::to_string(&self.profile)?;
        let mut text = format!(
            "# Cost profile \"{}\", written by `dirq calibrate` from real runs on this host.\n\
             # Fields marked \"measured\" come from this host; unmarked fields are kept\n\
             # from did-2015 (see profiles/did-2015.toml for their sources): this host\n\
             # cannot measure them (guest-side work, devices it does not have).\n",
            self.profile.name
        );
        let mut section = String::new();
        for line in body.lines() {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_string();
            }
            text.push_str(line);
            let key = line.split('=').next().map(str::trim).unwrap_or_default();
            let field = format!("{section}.{key}");
            if let Some(entry) = self.provenance.iter().find(|p| p.field == field) {
                text.push_str("  # ");
                // Comments end at the line; keep each source on one line.
                text.push_str(&entry.source.replace('\n', " "));
            }
            text.push('\n');
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::super::costs::{derive_costs, Commands, Observations};
    use super::*;

    fn costs() -> HostCosts {
        derive_costs(&Observations {
            userspace_exit_ns: 9_800.0,
            kernel_exit_ns: 4_200.0,
            inject_running_p50_ns: 30_000.0,
            inject_halted_p50_ns: 72_000.0,
            commands: Commands {
                probe: "dirq probe".into(),
                ..Commands::default()
            },
            ..Observations::default()
        })
    }

    #[test]
    fn calibrated_profile_round_trips_through_the_sim_loader() {
        let host = host_profile("host-test", &costs(), Some(200_000));
        let text = host.to_toml().expect("serializes");
        let loaded = CostProfile::from_toml(&text).expect("the sim accepts the calibrated profile");
        assert_eq!(loaded, host.profile);
        assert_eq!(loaded.name, "host-test");
        assert_eq!(loaded.exit_service_ns.io_instruction, 9_800);
        assert_eq!(loaded.exit_service_ns.external_interrupt, 4_200);
        assert_eq!(loaded.exit_service_ns.eoi_write, 4_200);
        // 72 us less the exit and did-2015's entry: no self-IPI was timed.
        assert_eq!(loaded.host_ns.wakeup, 67_300);
        assert_eq!(loaded.host_ns.exit_entry_transition, 0);
        // What the host cannot measure stays did-2015's, and says so.
        assert_eq!(loaded.guest_ns, CostProfile::did_2015().guest_ns);
        assert!(text.contains("irq_entry = 500  # not derivable"), "{text}");
    }

    #[test]
    fn every_changed_field_is_commented_with_its_source() {
        let host = host_profile("host-test", &costs(), None);
        let text = host.to_toml().expect("serializes");
        for entry in &host.provenance {
            let key = entry.field.rsplit('.').next().expect("field has a key");
            let line = text
                .lines()
                .find(|line| line.starts_with(&format!("{key} =")) && line.contains('#'))
                .unwrap_or_else(|| panic!("{} has no commented line", entry.field));
            assert!(
                line.contains("measured")
                    || line.contains("assumed")
                    || line.contains("not derivable"),
                "{line}"
            );
        }
        assert!(text.starts_with("# Cost profile \"host-test\""));
    }
}
