//! Scenarios: which workloads to run under which designs on which host.
//! Built-in scenarios are the TOML files in `scenarios/`, embedded.
//!
//! A scenario is a name, a description, `duration_ms`, the NIC's coalescing,
//! optionally the cost `profile` it runs on (a built-in profile's name or a
//! file's path; did-2015 by default), optionally the `[figure]` the report
//! draws of it ([`ScenarioFigure`]) and a list of `[[runs]]` groups. A group runs one workload under each of
//! its `policies`, at each of its `rates_pps`, on its `host`; the other keys
//! are the [`RunGroup`] fields.
//!
//! A group may also sweep one more parameter over a list of values: it then
//! stands for one group per value, in the order given, each with that value
//! set (see [`Sweep`] for the parameters):
//!
//! ```toml
//! [[runs]]
//! workload = "udp-rx"
//! designs = ["vanilla", "did"]
//! rates_pps = [100000]
//! sweep = { parameter = "vms", values = [1, 2, 4, 8] }
//! host = { cores = 9, vms = 1, vcpus_per_vm = 1 }
//! ```
//!
//! Runs expand group by group, swept value by value, rate by rate, design
//! by design; each run's `params` in the results names the value it ran.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::design::DesignKind;
use crate::profile::BuiltinProfile;
pub use crate::vioapic::VioapicLevel;

mod budget;
mod builtin;
mod figure;
mod network;
mod sweep;
mod topology;
mod workload;

pub use budget::{OverBudget, EVENT_BUDGET};
pub use builtin::{builtin, builtin_names};
pub use figure::{FigureKind, ScenarioFigure};
pub use network::{MAX_CLIENTS, MAX_ITR_US, MAX_MESSAGE_BYTES, MAX_NAPI_WEIGHT, MAX_QOS_MS};
pub use sweep::Sweep;
pub use topology::IpiTarget;
pub use workload::{
    Arrivals, IdleMode, IpiMode, PvEoiSetting, QueueOwners, RxHandler, Transport, WorkloadKind,
    X2apicMode,
};

#[derive(Debug, Error)]
pub enum ScenarioError {
    #[error("no built-in scenario named {0:?} (see `dirq sim --list`)")]
    UnknownBuiltin(String),
    #[error("cannot parse scenario")]
    Parse(#[from] toml::de::Error),
    #[error("invalid scenario")]
    Invalid(#[from] InvalidScenario),
}

/// A limit a scenario breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum InvalidScenario {
    #[error("duration_ms must be 1..={MAX_DURATION_MS}")]
    Duration,
    #[error("nic.packets_per_interrupt must be 1..={MAX_PACKETS_PER_INTERRUPT}")]
    NoPacketsPerInterrupt,
    #[error("nic.interrupt_timeout_ns must be 1..={MAX_INTERRUPT_TIMEOUT_NS}")]
    InterruptTimeout,
    #[error("the scenario's name must not be empty")]
    EmptyName,
    #[error("a scenario needs at least one [[runs]] group")]
    NoRunGroups,
    #[error("host.cores must be 2..={MAX_CORES} (core 0 is housekeeping)")]
    Cores,
    #[error("host.vms must be 1..={MAX_VMS}")]
    Vms,
    #[error("host.vcpus_per_vm must be 1..={MAX_VCPUS_PER_VM}")]
    VcpusPerVm,
    #[error(
        "each guest core can give at most {HOST_VECTORS_PER_CORE} VF MSI-X vectors ({VF_MSIX_VECTORS} per receive queue) a host vector"
    )]
    HostVectorsPerCore,
    #[error("at most {MAX_QUEUES} receive pair in all (the IRTE handle is 16 bits)")]
    Queues,
    #[error("the {0:?} group lists no designs")]
    NoDesigns(WorkloadKind),
    #[error("{0:?} needs rates_pps")]
    NeedsRates(WorkloadKind),
    #[error("rates_pps must be 1..={MAX_RATE_PPS}")]
    Rate,
    #[error("ipi needs host.vcpus_per_vm >= 2")]
    IpiNeedsTwoVcpus,
    #[error("ipi_rate_per_s must be 1..={MAX_IPI_RATE_PER_S}")]
    IpiRate,
    #[error("a sweep needs at least one value")]
    EmptySweep,
    #[error("host.numa_nodes must be 1..=host.cores")]
    NumaNodes,
    #[error("ipi-call needs host.vcpus_per_vm >= 2 and, for target = \"cross-node\", a vCPU homed on another node than vCPU 0")]
    NoCallTarget,
    #[error("vioapic needs a level, and only vioapic takes one")]
    Level,
    #[error("halt_poll_ns must be 0..=1000000000 and needs idle = \"halt-poll\" or \"adaptive-halt-poll\"")]
    HaltPollNs,
    #[error("vioapic runs on the Loongson testbed: a scenario holding it holds no other workload")]
    MixedTestbeds,
    #[error("message_bytes must be 1..={MAX_MESSAGE_BYTES}")]
    MessageBytes,
    #[error("napi_weight must be 1..={MAX_NAPI_WEIGHT}")]
    NapiWeight,
    #[error("itr_us must be 0..={MAX_ITR_US}")]
    ItrUs,
    #[error("{0:?} needs clients = 1..={MAX_CLIENTS}")]
    Clients(WorkloadKind),
    #[error("qos_p95_ms must be 1..={MAX_QOS_MS}")]
    QosTarget,
    #[error("sip runs one B2BUA: host.vms must be 1")]
    SipNeedsOneVm,
}

/// The SR-IOV VF's interrupt coalescing (82599-style): an interrupt fires
/// when `packets_per_interrupt` packets are waiting or `interrupt_timeout_ns`
/// after the first waiting packet, whichever comes first, and only while
/// the driver has the interrupt unmasked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicCoalescing {
    pub packets_per_interrupt: u32,
    pub interrupt_timeout_ns: u64,
}

impl NicCoalescing {
    /// Fitted to the vanilla column of the calibration table (see
    /// scenarios/did-udp-rx.toml); fixed for every scenario.
    pub const FITTED: NicCoalescing = NicCoalescing {
        packets_per_interrupt: 7,
        interrupt_timeout_ns: 80_000,
    };
}

impl Default for NicCoalescing {
    fn default() -> Self {
        Self::FITTED
    }
}

/// The simulated host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostShape {
    /// Physical cores. Core 0 is the housekeeping core (backends, DID's
    /// designated timer core); vCPUs are pinned round-robin to the rest.
    pub cores: u32,
    pub vms: u32,
    pub vcpus_per_vm: u32,
}

impl Default for HostShape {
    fn default() -> Self {
        HostShape {
            cores: 2,
            vms: 1,
            vcpus_per_vm: 1,
        }
    }
}

/// One group of runs: a workload under each listed design, at each rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunGroup {
    pub workload: WorkloadKind,
    /// The designs the workload runs under (`policies`, the key's old
    /// name, still reads).
    #[serde(alias = "policies")]
    pub designs: Vec<DesignKind>,
    /// Packet rates for udp-rx and whileloop (and the SR-IOV part of
    /// `transport = "both"`).
    #[serde(default)]
    pub rates_pps: Vec<u64>,
    /// How the packets of `rates_pps` are spaced.
    #[serde(default, skip_serializing_if = "Arrivals::is_poisson")]
    pub arrivals: Arrivals,
    /// How the guest's driver takes them.
    #[serde(default, skip_serializing_if = "RxHandler::is_napi")]
    pub rx_handler: RxHandler,
    #[serde(default)]
    pub transport: Transport,
    #[serde(default)]
    pub idle: IdleMode,
    #[serde(default)]
    pub ipi_mode: IpiMode,
    /// IPIs per second sent by vCPU 0 (ipi workload).
    #[serde(default = "default_ipi_rate")]
    pub ipi_rate_per_s: u64,
    #[serde(default)]
    pub host: HostShape,
    /// Guest handlers re-enable interrupts (older Linux, Windows), so a
    /// higher-priority interrupt can nest inside a lower one's handler.
    #[serde(default)]
    pub nested_interrupts: bool,
    /// Add a guest 1 kHz timer (cyclictest) to the workload's traffic.
    #[serde(default)]
    pub with_timer: bool,
    #[serde(default)]
    pub queue_owners: QueueOwners,
    /// NUMA nodes (sockets) the host's cores split into, in equal runs of
    /// consecutive cores.
    #[serde(default = "one_node")]
    pub numa_nodes: u32,
    /// The ipi-call workload's callee.
    #[serde(default)]
    pub target: IpiTarget,
    /// The x2APIC mode the ipi-call workload's guest sends its IPIs in.
    #[serde(default)]
    pub x2apic: X2apicMode,
    /// The host's `halt_poll_ns` (the most a halted vCPU is polled),
    /// instead of the profile's `host_ns.halt_poll`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt_poll_ns: Option<u64>,
    /// Where the vioapic workload's controller is emulated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<VioapicLevel>,
    /// Payload bytes per message (netperf-rr, udp-rr, netperf's writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_bytes: Option<u64>,
    /// Whether the guest uses KVM's PV EOI.
    #[serde(default, skip_serializing_if = "PvEoiSetting::is_off")]
    pub pv_eoi: PvEoiSetting,
    /// The guest's NAPI weight, instead of the profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub napi_weight: Option<u32>,
    /// A fixed NIC interrupt throttling interval (0: none) instead of the
    /// adaptive one; the UDP receive workloads keep their fitted coalescing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itr_us: Option<u64>,
    /// Computation per byte of I/O added to netperf's writes, CPU cycles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_cycles_per_byte: Option<u64>,
    /// Concurrent client connections of a server workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<u32>,
    /// Check the clients' closed-loop rate against a QoS target: 95 % of
    /// requests finish within this many ms (the run's `qos`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_p95_ms: Option<u64>,
    /// One more parameter over a list: the group stands for one group per
    /// value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<Sweep>,
}

fn default_ipi_rate() -> u64 {
    10_000
}

fn one_node() -> u32 {
    1
}

fn default_duration_ms() -> u64 {
    1000
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// Simulated time per run.
    #[serde(default = "default_duration_ms")]
    pub duration_ms: u64,
    #[serde(default)]
    pub nic: NicCoalescing,
    /// The built-in cost profile of the paper's testbed (unless the run
    /// is given one).
    #[serde(default)]
    pub profile: BuiltinProfile,
    /// What `dirq report` draws of it (see [`ScenarioFigure`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figure: Option<ScenarioFigure>,
    pub runs: Vec<RunGroup>,
}

/// One fully specified run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSpec {
    pub design: DesignKind,
    pub workload: WorkloadKind,
    pub rate_pps: Option<u64>,
    pub group: RunGroup,
    pub nic: NicCoalescing,
    pub duration_ns: u64,
}

impl RunSpec {
    /// Whether the run arms a guest timer (cyclictest, or `with_timer`).
    pub fn has_guest_timer(&self) -> bool {
        self.group.with_timer || self.workload == WorkloadKind::Cyclictest
    }

    /// The `params` object of the run's JSON.
    pub fn params(&self) -> BTreeMap<String, serde_json::Value> {
        let mut params = BTreeMap::new();
        params.insert("workload".into(), self.workload.name().into());
        if let Some(rate) = self.rate_pps {
            params.insert("rate_pps".into(), rate.into());
            if !self.group.arrivals.is_poisson() {
                params.insert("arrivals".into(), enum_name(&self.group.arrivals));
            }
            if !self.group.rx_handler.is_napi() {
                params.insert("rx_handler".into(), enum_name(&self.group.rx_handler));
            }
        }
        if self.workload.is_network() {
            params.insert("transport".into(), enum_name(&self.group.transport));
        }
        self.group.network_params(&mut params);
        if self.workload == WorkloadKind::Ipi {
            params.insert("ipi_mode".into(), enum_name(&self.group.ipi_mode));
            params.insert("ipi_rate_per_s".into(), self.group.ipi_rate_per_s.into());
        }
        if self.workload == WorkloadKind::IpiCall {
            params.insert("target".into(), enum_name(&self.group.target));
            params.insert("x2apic".into(), enum_name(&self.group.x2apic));
        }
        if let Some(ns) = self.group.halt_poll_ns {
            params.insert("halt_poll_ns".into(), ns.into());
        }
        if self.group.numa_nodes != 1 {
            params.insert("numa_nodes".into(), self.group.numa_nodes.into());
        }
        let ipis = matches!(self.workload, WorkloadKind::Ipi | WorkloadKind::IpiCall);
        if self.group.idle != IdleMode::Poll || ipis {
            params.insert("idle".into(), enum_name(&self.group.idle));
        }
        let host = self.group.host;
        if host != HostShape::default() {
            params.insert("cores".into(), host.cores.into());
            params.insert("vms".into(), host.vms.into());
            params.insert("vcpus_per_vm".into(), host.vcpus_per_vm.into());
        }
        if self.group.nested_interrupts {
            params.insert("nested_interrupts".into(), true.into());
        }
        if self.group.with_timer {
            params.insert("with_timer".into(), true.into());
        }
        if self.group.queue_owners != QueueOwners::default() {
            params.insert("queue_owners".into(), enum_name(&self.group.queue_owners));
        }
        if let Some(level) = self.group.level {
            params.insert("level".into(), level.name().into());
        }
        params
    }
}

fn enum_name<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

pub const MAX_DURATION_MS: u64 = 600_000;
/// The NIC's coalescing: at most a full 82599 receive ring per interrupt,
/// and at most a second's wait.
pub const MAX_PACKETS_PER_INTERRUPT: u32 = 4096;
pub const MAX_INTERRUPT_TIMEOUT_NS: u64 = 1_000_000_000;
pub const MAX_CORES: u32 = 1024;
pub const MAX_VMS: u32 = 1024;
pub const MAX_VCPUS_PER_VM: u32 = 256;
pub const MAX_RATE_PPS: u64 = 100_000_000;
pub const MAX_IPI_RATE_PER_S: u64 = 10_000_000;
/// A VF queue pair's MSI-X vectors, each with its IRTE and host vector:
/// its receive event queue's and, with a driver that has one, its
/// transmit event queue's (be2net's).
pub const VF_MSIX_VECTORS: u32 = 2;
/// Receive queues in a run: an IRTE handle is 16 bits (VT-d 5.1.5), and
/// each queue pair's MSI-X vectors take one.
pub const MAX_QUEUES: u32 = (1 << 16) / VF_MSIX_VECTORS;
/// Host vectors a core can hand out to VFs (0x60..=0xDF, below the
/// system vectors), as Linux's per-CPU vector matrix does.
pub const HOST_VECTORS_PER_CORE: u32 = 0x80;

impl RunGroup {
    /// A group with every optional setting at its default.
    pub fn new(workload: WorkloadKind, designs: Vec<DesignKind>) -> RunGroup {
        RunGroup {
            workload,
            designs,
            rates_pps: Vec::new(),
            arrivals: Arrivals::default(),
            rx_handler: RxHandler::default(),
            transport: Transport::default(),
            idle: IdleMode::default(),
            ipi_mode: IpiMode::default(),
            ipi_rate_per_s: default_ipi_rate(),
            host: HostShape::default(),
            nested_interrupts: false,
            with_timer: false,
            queue_owners: QueueOwners::default(),
            numa_nodes: one_node(),
            target: IpiTarget::default(),
            x2apic: X2apicMode::default(),
            halt_poll_ns: None,
            level: None,
            message_bytes: None,
            pv_eoi: PvEoiSetting::Off,
            napi_weight: None,
            itr_us: None,
            compute_cycles_per_byte: None,
            clients: None,
            qos_p95_ms: None,
            sweep: None,
        }
    }

    fn validate(&self) -> Result<(), InvalidScenario> {
        let host = self.host;
        if host.cores < 2 || host.cores > MAX_CORES {
            return Err(InvalidScenario::Cores);
        }
        if host.vms == 0 || host.vms > MAX_VMS {
            return Err(InvalidScenario::Vms);
        }
        if host.vcpus_per_vm == 0 || host.vcpus_per_vm > MAX_VCPUS_PER_VM {
            return Err(InvalidScenario::VcpusPerVm);
        }
        // vCPU i of VM v is homed on guest core (v * vcpus_per_vm + i) %
        // (cores - 1); the busiest core must have a host vector for each
        // receive queue whose owner it homes.
        let owners_per_vm = self.queue_owners.per_vm(host.vcpus_per_vm);
        if u64::from(host.vms) * u64::from(owners_per_vm) > u64::from(MAX_QUEUES) {
            return Err(InvalidScenario::Queues);
        }
        let guest_cores = u64::from(host.cores - 1);
        let mut vfs_per_core =
            vec![0u32; usize::try_from(guest_cores).expect("a u32 fits a usize")];
        for vm in 0..u64::from(host.vms) {
            for index in 0..u64::from(owners_per_vm) {
                let vcpu = vm * u64::from(host.vcpus_per_vm) + index;
                let core = usize::try_from(vcpu % guest_cores).expect("below guest_cores");
                vfs_per_core[core] += 1;
            }
        }
        if vfs_per_core
            .iter()
            .any(|&count| count * VF_MSIX_VECTORS > HOST_VECTORS_PER_CORE)
        {
            return Err(InvalidScenario::HostVectorsPerCore);
        }
        if self.designs.is_empty() {
            return Err(InvalidScenario::NoDesigns(self.workload));
        }
        let needs_rate = matches!(self.workload, WorkloadKind::UdpRx | WorkloadKind::Whileloop);
        if needs_rate && self.rates_pps.is_empty() {
            return Err(InvalidScenario::NeedsRates(self.workload));
        }
        if self
            .rates_pps
            .iter()
            .any(|&rate| rate == 0 || rate > MAX_RATE_PPS)
        {
            return Err(InvalidScenario::Rate);
        }
        if self.numa_nodes == 0 || self.numa_nodes > host.cores {
            return Err(InvalidScenario::NumaNodes);
        }
        if self.workload == WorkloadKind::IpiCall && self.call_targets().is_empty() {
            return Err(InvalidScenario::NoCallTarget);
        }
        if self.workload == WorkloadKind::Ipi && host.vcpus_per_vm < 2 {
            return Err(InvalidScenario::IpiNeedsTwoVcpus);
        }
        if self.workload == WorkloadKind::Ipi
            && (self.ipi_rate_per_s == 0 || self.ipi_rate_per_s > MAX_IPI_RATE_PER_S)
        {
            return Err(InvalidScenario::IpiRate);
        }
        if self.level.is_some() != (self.workload == WorkloadKind::Vioapic) {
            return Err(InvalidScenario::Level);
        }
        if self
            .halt_poll_ns
            .is_some_and(|ns| ns > crate::profile::MAX_COST_NS || !self.idle.host_polls())
        {
            return Err(InvalidScenario::HaltPollNs);
        }
        self.validate_network()?;
        Ok(())
    }
}

impl Scenario {
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = toml::from_str(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Checks every limit; a scenario built as a value must pass this
    /// before it runs.
    pub fn validate(&self) -> Result<(), InvalidScenario> {
        if self.duration_ms == 0 || self.duration_ms > MAX_DURATION_MS {
            return Err(InvalidScenario::Duration);
        }
        if self.name.trim().is_empty() {
            return Err(InvalidScenario::EmptyName);
        }
        if !(1..=MAX_PACKETS_PER_INTERRUPT).contains(&self.nic.packets_per_interrupt) {
            return Err(InvalidScenario::NoPacketsPerInterrupt);
        }
        if !(1..=MAX_INTERRUPT_TIMEOUT_NS).contains(&self.nic.interrupt_timeout_ns) {
            return Err(InvalidScenario::InterruptTimeout);
        }
        if self.runs.is_empty() {
            return Err(InvalidScenario::NoRunGroups);
        }
        if self
            .runs
            .iter()
            .any(|group| group.sweep.as_ref().is_some_and(Sweep::is_empty))
        {
            return Err(InvalidScenario::EmptySweep);
        }
        let loongson = self
            .runs
            .iter()
            .filter(|group| group.workload == WorkloadKind::Vioapic)
            .count();
        if loongson != 0 && loongson != self.runs.len() {
            return Err(InvalidScenario::MixedTestbeds);
        }
        self.runs
            .iter()
            .flat_map(RunGroup::swept)
            .try_for_each(|group| group.validate())
    }

    /// Every run, in order: group by group, rate by rate, design by design.
    pub fn expand(&self) -> Vec<RunSpec> {
        let mut specs = Vec::new();
        for group in self.runs.iter().flat_map(RunGroup::swept) {
            let rates: Vec<Option<u64>> = if group.rates_pps.is_empty() {
                vec![None]
            } else {
                group.rates_pps.iter().copied().map(Some).collect()
            };
            for rate_pps in rates {
                for &design in &group.designs {
                    specs.push(RunSpec {
                        design,
                        workload: group.workload,
                        rate_pps,
                        group: group.clone(),
                        nic: self.nic,
                        duration_ns: self.duration_ms * 1_000_000,
                    });
                }
            }
        }
        specs
    }
}

#[cfg(test)]
mod tests;
