//! Sweeping one parameter of a run group over a list of values.

use serde::{Deserialize, Serialize};

use super::{IdleMode, IpiMode, IpiTarget, QueueOwners, RunGroup, Transport, VioapicLevel};

/// The parameter a group sweeps and its values, written
/// `sweep = { parameter = "<name>", values = [...] }`; each value replaces
/// the group's own setting of that parameter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "parameter",
    content = "values",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum Sweep {
    /// `host.cores`.
    Cores(Vec<u32>),
    /// `host.vms`.
    Vms(Vec<u32>),
    /// `host.vcpus_per_vm`.
    VcpusPerVm(Vec<u32>),
    Transport(Vec<Transport>),
    Idle(Vec<IdleMode>),
    IpiMode(Vec<IpiMode>),
    IpiRatePerS(Vec<u64>),
    NestedInterrupts(Vec<bool>),
    WithTimer(Vec<bool>),
    QueueOwners(Vec<QueueOwners>),
    /// The ipi-call workload's callee.
    Target(Vec<IpiTarget>),
    /// The vioapic workload's `level`.
    Level(Vec<VioapicLevel>),
    MessageBytes(Vec<u64>),
    NapiWeight(Vec<u32>),
    ItrUs(Vec<u64>),
    ComputeCyclesPerByte(Vec<u64>),
}

impl Sweep {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        match self {
            Sweep::Cores(values) | Sweep::Vms(values) | Sweep::VcpusPerVm(values) => values.len(),
            Sweep::Transport(values) => values.len(),
            Sweep::Idle(values) => values.len(),
            Sweep::IpiMode(values) => values.len(),
            Sweep::IpiRatePerS(values) => values.len(),
            Sweep::NestedInterrupts(values) | Sweep::WithTimer(values) => values.len(),
            Sweep::QueueOwners(values) => values.len(),
            Sweep::Target(values) => values.len(),
            Sweep::Level(values) => values.len(),
            Sweep::MessageBytes(values) | Sweep::ItrUs(values) => values.len(),
            Sweep::ComputeCyclesPerByte(values) => values.len(),
            Sweep::NapiWeight(values) => values.len(),
        }
    }

    /// `base` once per value, with the value set.
    fn groups(&self, base: &RunGroup) -> Vec<RunGroup> {
        fn each<T: Copy>(
            values: &[T],
            base: &RunGroup,
            set: impl Fn(&mut RunGroup, T),
        ) -> Vec<RunGroup> {
            values
                .iter()
                .map(|&value| {
                    let mut group = base.clone();
                    set(&mut group, value);
                    group
                })
                .collect()
        }
        match self {
            Sweep::Cores(values) => each(values, base, |group, value| group.host.cores = value),
            Sweep::Vms(values) => each(values, base, |group, value| group.host.vms = value),
            Sweep::VcpusPerVm(values) => each(values, base, |group, value| {
                group.host.vcpus_per_vm = value;
            }),
            Sweep::Transport(values) => each(values, base, |group, value| group.transport = value),
            Sweep::Idle(values) => each(values, base, |group, value| group.idle = value),
            Sweep::IpiMode(values) => each(values, base, |group, value| group.ipi_mode = value),
            Sweep::IpiRatePerS(values) => each(values, base, |group, value| {
                group.ipi_rate_per_s = value;
            }),
            Sweep::NestedInterrupts(values) => each(values, base, |group, value| {
                group.nested_interrupts = value;
            }),
            Sweep::WithTimer(values) => each(values, base, |group, value| group.with_timer = value),
            Sweep::QueueOwners(values) => each(values, base, |group, value| {
                group.queue_owners = value;
            }),
            Sweep::Target(values) => each(values, base, |group, value| group.target = value),
            Sweep::Level(values) => each(values, base, |group, value| group.level = Some(value)),
            Sweep::MessageBytes(values) => each(values, base, |group, value| {
                group.message_bytes = Some(value);
            }),
            Sweep::NapiWeight(values) => each(values, base, |group, value| {
                group.napi_weight = Some(value);
            }),
            Sweep::ItrUs(values) => each(values, base, |group, value| group.itr_us = Some(value)),
            Sweep::ComputeCyclesPerByte(values) => each(values, base, |group, value| {
                group.compute_cycles_per_byte = Some(value);
            }),
        }
    }
}

impl RunGroup {
    /// The groups this one stands for: one per swept value, in order, or
    /// itself when it sweeps nothing. None of them sweeps.
    pub fn swept(&self) -> Vec<RunGroup> {
        let base = RunGroup {
            sweep: None,
            ..self.clone()
        };
        match &self.sweep {
            Some(sweep) => sweep.groups(&base),
            None => vec![base],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{InvalidScenario, Scenario, WorkloadKind};
    use super::*;

    fn scenario(sweep: &str) -> Result<Scenario, super::super::ScenarioError> {
        Scenario::from_toml(&format!(
            r#"
            name = "sweep"
            description = "sweep"
            [[runs]]
            workload = "udp-rx"
            designs = ["vanilla", "did"]
            rates_pps = [1000, 2000]
            host = {{ cores = 9, vms = 1, vcpus_per_vm = 1 }}
            {sweep}
            "#
        ))
    }

    #[test]
    fn a_sweep_expands_value_by_value_then_rate_then_design() {
        let scenario =
            scenario(r#"sweep = { parameter = "vms", values = [2, 8] }"#).expect("sweep parses");
        let runs: Vec<(u32, Option<u64>, String)> = scenario
            .expand()
            .iter()
            .map(|spec| (spec.group.host.vms, spec.rate_pps, spec.design.to_string()))
            .collect();
        let expected = [2, 8].iter().flat_map(|&vms| {
            [1000, 2000].iter().flat_map(move |&rate| {
                ["vanilla", "did"].map(|design| (vms, Some(rate), design.to_string()))
            })
        });
        assert_eq!(runs, expected.collect::<Vec<_>>());
        assert_eq!(scenario.expand()[0].params()["vms"], 2);
    }

    #[test]
    fn enum_parameters_sweep_by_their_names() {
        let scenario = scenario(r#"sweep = { parameter = "transport", values = ["sriov", "pv"] }"#)
            .expect("sweep parses");
        let transports: Vec<Transport> = scenario.runs[0]
            .swept()
            .iter()
            .map(|group| group.transport)
            .collect();
        assert_eq!(transports, [Transport::Sriov, Transport::Pv]);
        assert!(scenario.runs[0].swept().iter().all(|g| g.sweep.is_none()));
    }

    #[test]
    fn every_swept_value_is_validated_and_a_sweep_needs_values() {
        let invalid = |sweep: &str| match scenario(sweep) {
            Err(super::super::ScenarioError::Invalid(invalid)) => Some(invalid),
            _ => None,
        };
        assert_eq!(
            invalid(r#"sweep = { parameter = "cores", values = [9, 1] }"#),
            Some(InvalidScenario::Cores)
        );
        assert_eq!(
            invalid(r#"sweep = { parameter = "vms", values = [] }"#),
            Some(InvalidScenario::EmptySweep)
        );
        assert!(scenario(r#"sweep = { parameter = "rates", values = [1] }"#).is_err());
    }

    #[test]
    fn a_group_without_a_sweep_stands_for_itself() {
        let group = RunGroup::new(WorkloadKind::Cyclictest, Vec::new());
        assert_eq!(group.swept(), std::slice::from_ref(&group));
    }
}
