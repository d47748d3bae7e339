//! What the report knows of this host, decided once for every section
//! that words it: which KVM backend answered, which capabilities it has,
//! and how many runs stand behind each probe floor.

use dirq_vmm::probe::ProbeReport;

use crate::common::meta::Host;

/// The KVM backend: as the probe's KVM named it, else the loaded module.
pub fn kvm_backend<'a>(host: &'a Host, probe: Option<&'a ProbeReport>) -> Option<&'a str> {
    probe
        .and_then(|probe| probe.backend.as_deref())
        .or(host.kvm_backend.as_deref())
}

/// The capabilities the probe asked KVM about, split by its answer.
#[derive(Debug, PartialEq, Eq)]
pub struct Capabilities<'a> {
    pub available: Vec<&'a str>,
    pub missing: Vec<&'a str>,
}

pub fn capabilities(probe: &ProbeReport) -> Capabilities<'_> {
    let answered = |answer: bool| {
        probe
            .capabilities
            .iter()
            .filter(move |(_, &present)| present == answer)
            .map(|(name, _)| name.as_str())
            .collect()
    };
    Capabilities {
        available: answered(true),
        missing: answered(false),
    }
}

/// The most runs the probe timed any floor in (one where it kept none).
pub fn probe_runs(probe: &ProbeReport) -> usize {
    probe
        .floors
        .spread
        .values()
        .map(|spread| spread.batch_ns.len())
        .max()
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(backend: Option<&str>, spread: serde_json::Value) -> ProbeReport {
        serde_json::from_value(serde_json::json!({
            "api_version": 12, "backend": backend, "max_vcpus": 8, "recommended_vcpus": 2,
            "capabilities": {"irqfd": true, "x2apic_api": false, "split_irqchip": true},
            "pv_features": [], "default_halt_poll_ns": null, "offered_exec": [],
            "guest_exec": "native", "samples": 100,
            "userspace_exit_ns": 30000.0, "kernel_exit_ns": 4000.0, "self_ipi_p50_ns": 1.0,
            "ipi_busy_p50_ns": 1.0, "ipi_halted_p50_ns": 1.0, "spread": spread
        }))
        .expect("contract parses")
    }

    fn host(backend: Option<&str>) -> Host {
        Host {
            kernel: None,
            cpu: None,
            cpus: 2,
            kvm_backend: backend.map(String::from),
            guest_exec: None,
            hardware_virtualization: None,
            nested: None,
        }
    }

    #[test]
    fn the_probes_backend_wins_over_the_loaded_module() {
        let probed = probe(Some("kvm_pvm"), serde_json::json!({}));
        let loaded = host(Some("kvm_intel"));
        assert_eq!(kvm_backend(&loaded, Some(&probed)), Some("kvm_pvm"));
        let unnamed = probe(None, serde_json::json!({}));
        assert_eq!(kvm_backend(&loaded, Some(&unnamed)), Some("kvm_intel"));
        assert_eq!(kvm_backend(&host(None), None), None);
    }

    #[test]
    fn capabilities_split_by_kvms_answer_and_runs_count_the_longest_floor() {
        let floor = |runs: usize| {
            serde_json::json!({"low_ns": 1.0, "high_ns": 2.0, "batch_ns": vec![1.5; runs],
                               "samples": 10})
        };
        let report = probe(
            None,
            serde_json::json!({"userspace_exit": floor(3), "kernel_exit": floor(5)}),
        );
        assert_eq!(
            capabilities(&report),
            Capabilities {
                available: vec!["irqfd", "split_irqchip"],
                missing: vec!["x2apic_api"],
            }
        );
        assert_eq!(probe_runs(&report), 5);
        assert_eq!(probe_runs(&probe(None, serde_json::json!({}))), 1);
    }
}
