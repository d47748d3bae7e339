//! Cost profiles: the measured (or assumed) costs the simulator takes as
//! input. The `did-2015` and `eli-2012` profiles ship embedded (a scenario
//! names its `profile`); `dirq calibrate` writes files of the same shape
//! for `dirq sim --profile`.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::metrics::ExitReason;

#[derive(Debug, Error)]
pub enum ProfileError {
    #[error("cannot parse cost profile")]
    Parse(#[from] toml::de::Error),
    #[error("cost profile field {field} must be {rule}")]
    Invalid {
        field: &'static str,
        rule: &'static str,
    },
    #[error("cost profile field {field} is {value} ns; costs are at most {MAX_COST_NS} ns (1 s), so the simulator's time arithmetic cannot overflow")]
    CostTooLarge { field: String, value: u64 },
    #[error("cost profile cannot be checked")]
    Unreadable(#[from] serde_json::Error),
    #[error("cannot read cost profile {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

/// Exit-to-re-entry service time per exit reason, ns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExitServiceNs {
    /// EXTERNAL_INTERRUPT: a physical interrupt arrived in guest mode.
    pub external_interrupt: u64,
    /// MSR_WRITE of the x2APIC EOI register.
    pub eoi_write: u64,
    /// IO_INSTRUCTION: port I/O (virtio notify, device setup).
    pub io_instruction: u64,
    /// EPT_VIOLATION: MMIO emulation or a missing mapping.
    pub ept_violation: u64,
    /// MSR_WRITE of TMICT (timer programming).
    pub timer_write: u64,
    /// MSR_WRITE of the ICR (guest IPI), before the IPI is sent.
    pub icr_write: u64,
    /// INTERRUPT_WINDOW: the interrupt window opened.
    pub interrupt_window: u64,
    /// HLT, the exit itself (sleeping and waking are `HostNs` costs).
    pub hlt: u64,
    /// NMI exit (DID's host IPIs and NMI-mode IRTEs).
    pub nmi: u64,
    /// EXCEPTION exit (ELI's #NP from the shadow IDT).
    pub exception: u64,
    /// APIC_ACCESS: xAPIC MMIO.
    pub apic_access: u64,
    /// OTHER: preemption timer, EOI-induced exits.
    pub other: u64,
}

/// Host-side costs that are not a single exit's service time, ns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostNs {
    /// Hardware VM exit plus VM entry, paid on every exit on top of the
    /// software-measured service time.
    pub exit_entry_transition: u64,
    /// A physical interrupt taken while the core is already in host mode.
    pub irq_in_host_mode: u64,
    /// Sending one IPI from the host (per target of an emulated ICR write).
    pub send_ipi: u64,
    /// Switching vCPU threads on a core.
    pub context_switch: u64,
    /// Waking a halted vCPU thread.
    pub wakeup: u64,
    /// Time slice of vCPUs sharing a core.
    pub sched_quantum: u64,
    /// Delay before retrying a time-slice end that found the guest inside
    /// a directly delivered handler.
    pub preemption_retry: u64,
    /// How long the host polls before sleeping a halted vCPU
    /// (`idle = "halt-poll"`).
    pub halt_poll: u64,
    /// Backend (vhost) work per virtio request or packet.
    pub virtio_backend_per_request: u64,
    /// Storage latency of one 4 KB random read.
    pub block_device_service: u64,
}

/// Guest-side work, ns of guest CPU time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestNs {
    /// Timer interrupt to the user-level handler on bare metal.
    pub timer_irq_to_user: u64,
    /// Hardirq entry and handler body before the EOI.
    pub irq_entry: u64,
    /// NAPI receive work per 128-byte packet.
    pub rx_packet: u64,
    /// User work per netperf transaction or fio request.
    pub request_work: u64,
    /// Network one way: NIC, switch and the remote host.
    pub wire_one_way: u64,
}

/// Background exits of an idle VM, per second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleExitsPerS {
    /// Background IO_INSTRUCTION exits per second per vCPU.
    pub io_instruction: f64,
    /// Background EPT_VIOLATION exits per second per vCPU.
    pub ept_violation: f64,
}

/// The network: the link, TCP's and NAPI's settings, and the guest's
/// network-stack work (ns of guest CPU time unless named otherwise).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkCosts {
    /// Line rate of the NIC's link, Mbit/s.
    pub link_mbps: u64,
    pub mtu_bytes: u64,
    /// Bytes a frame carries besides its TCP payload: Ethernet framing,
    /// preamble and gap, IP and TCP headers.
    pub frame_overhead_bytes: u64,
    /// The largest TSO send / GRO merge / virtio GSO buffer, bytes.
    pub gso_bytes: u64,
    /// The receiver's TCP window, bytes.
    pub tcp_window_bytes: u64,
    /// NAPI's weight: packets one poll may take (`napi_weight` overrides).
    pub napi_weight: u32,
    /// Driver work per received frame (descriptor, buffer, GRO merge).
    pub rx_frame: u64,
    /// IP and TCP receive work per GRO batch (one merged packet).
    pub rx_stack: u64,
    /// Stack and driver work per transmitted packet (an ACK, a response).
    pub tx_packet: u64,
    /// Copying one KiB between kernel and user buffers (or by vhost).
    pub copy_per_kib: u64,
    /// One-way delay over the host's bridge between a host process and
    /// the backend (PV), besides the backend's own work.
    pub bridge_one_way: u64,
}

/// Every cost the simulator uses. See `profiles/did-2015.toml` for the
/// meaning and provenance of each field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostProfile {
    /// Shown in results (`profile`).
    pub name: String,
    pub exit_service_ns: ExitServiceNs,
    pub host_ns: HostNs,
    pub guest_ns: GuestNs,
    pub idle_exits_per_s: IdleExitsPerS,
    pub network: NetworkCosts,
    pub workloads: WorkloadCosts,
}

/// Per-request CPU work of the application workloads (ns of CPU time on
/// the profile's testbed), each fitted to or taken from a bare-metal row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadCosts {
    /// A memcached request: parse, look up, answer.
    pub memcached_request: u64,
    /// An HTTP request for a static page (apache).
    pub http_request: u64,
    /// The B2BUA's work per SIP message it relays.
    pub sip_message: u64,
    /// netperf's work per `message_bytes` write (the send system call).
    pub stream_message: u64,
    /// Forwarding one packet in a poll-mode driver (DPDK l2fwd).
    pub l2fwd_packet: u64,
    /// The testbed's CPU clock, MHz (cycles to ns).
    pub cpu_mhz: u64,
}

/// The largest cost a profile may give (1 s): a bound that keeps every sum
/// of costs the simulator forms far from overflowing.
pub const MAX_COST_NS: u64 = 1_000_000_000;
/// The most background exits per second per vCPU (one per microsecond).
pub const MAX_IDLE_EXITS_PER_S: f64 = 1e6;

/// The `did-2015` profile text, embedded so the binary needs no data files.
pub const DID_2015_TOML: &str = include_str!("../../../profiles/did-2015.toml");
/// The `eli-2012` profile text.
pub const ELI_2012_TOML: &str = include_str!("../../../profiles/eli-2012.toml");

/// The built-in profiles by name.
const BUILTIN_PROFILES: [(&str, &str); 2] =
    [("did-2015", DID_2015_TOML), ("eli-2012", ELI_2012_TOML)];

/// A built-in profile by name, or else a profile file at that path.
pub fn resolve(name_or_path: &str) -> Result<CostProfile, ProfileError> {
    if let Some((_, text)) = BUILTIN_PROFILES
        .iter()
        .find(|(name, _)| *name == name_or_path)
    {
        return CostProfile::from_toml(text);
    }
    let text = std::fs::read_to_string(name_or_path).map_err(|source| ProfileError::Read {
        path: name_or_path.to_string(),
        source,
    })?;
    CostProfile::from_toml(&text)
}

impl CostProfile {
    /// The DID testbed (docs/calibration.md).
    pub fn did_2015() -> CostProfile {
        match Self::from_toml(DID_2015_TOML) {
            Ok(profile) => profile,
            // The embedded text is checked by a unit test.
            Err(err) => unreachable!("embedded did-2015 profile is invalid: {err}"),
        }
    }

    pub fn from_toml(text: &str) -> Result<CostProfile, ProfileError> {
        let profile: CostProfile = toml::from_str(text)?;
        profile.validate()?;
        Ok(profile)
    }

    fn validate(&self) -> Result<(), ProfileError> {
        let rates = [
            self.idle_exits_per_s.io_instruction,
            self.idle_exits_per_s.ept_violation,
        ];
        if rates
            .iter()
            .any(|rate| !rate.is_finite() || !(0.0..=MAX_IDLE_EXITS_PER_S).contains(rate))
        {
            return Err(ProfileError::Invalid {
                field: "idle_exits_per_s",
                rule: "finite, 0 to 1e6 per second",
            });
        }
        if self.name.trim().is_empty() {
            return Err(ProfileError::Invalid {
                field: "name",
                rule: "not empty",
            });
        }
        // Every cost, by its TOML path.
        let costs = serde_json::to_value(self)?;
        for section in [
            "exit_service_ns",
            "host_ns",
            "guest_ns",
            "network",
            "workloads",
        ] {
            let fields = costs[section].as_object().into_iter().flatten();
            for (field, value) in fields {
                if let Some(value) = value.as_u64().filter(|&value| value > MAX_COST_NS) {
                    return Err(ProfileError::CostTooLarge {
                        field: format!("{section}.{field}"),
                        value,
                    });
                }
            }
        }
        let network = &self.network;
        if network.link_mbps == 0
            || network.napi_weight == 0
            || network.mtu_bytes <= network.frame_overhead_bytes
            || network.gso_bytes < network.mtu_bytes
            || network.tcp_window_bytes < network.gso_bytes
            || self.workloads.cpu_mhz == 0
        {
            return Err(ProfileError::Invalid {
                field: "network / workloads",
                rule: "a positive link rate, NAPI weight and clock; MTU > frame overhead; gso_bytes >= MTU; window >= gso_bytes",
            });
        }
        if self.host_ns.sched_quantum == 0 || self.host_ns.preemption_retry == 0 {
            return Err(ProfileError::Invalid {
                field: "host_ns.sched_quantum / preemption_retry",
                rule: "positive",
            });
        }
        Ok(())
    }

    /// Service time of one exit of `reason` (for MSR_WRITE the caller picks the
    /// MSR-specific field).
    pub fn exit_cost(&self, reason: ExitReason) -> u64 {
        let service = &self.exit_service_ns;
        let base = match reason {
            ExitReason::ExternalInterrupt => service.external_interrupt,
            ExitReason::InterruptWindow => service.interrupt_window,
            ExitReason::MsrWrite => service.eoi_write,
            ExitReason::ApicAccess => service.apic_access,
            ExitReason::IoInstruction => service.io_instruction,
            ExitReason::Hlt => service.hlt,
            ExitReason::EptViolation => service.ept_violation,
            ExitReason::Nmi => service.nmi,
            ExitReason::Exception => service.exception,
            ExitReason::Other => service.other,
        };
        base + self.host_ns.exit_entry_transition
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_profile_parses_with_measured_values() {
        let profile = CostProfile::did_2015();
        assert_eq!(profile.exit_service_ns.external_interrupt, 1970);
        assert_eq!(profile.exit_service_ns.eoi_write, 850);
        assert_eq!(profile.exit_service_ns.io_instruction, 8650);
        assert_eq!(profile.exit_service_ns.ept_violation, 9900);
    }

    #[test]
    fn every_builtin_profile_resolves_and_a_missing_file_is_an_error() {
        for (name, _) in BUILTIN_PROFILES {
            assert_eq!(
                resolve(name).map(|profile| profile.name).ok(),
                Some(name.to_string())
            );
        }
        assert!(matches!(
            resolve("no-such-profile.toml"),
            Err(ProfileError::Read { .. })
        ));
    }

    #[test]
    fn unknown_field_is_rejected() {
        let text = DID_2015_TOML.replace("[guest_ns]", "[guest_ns]\nbogus = 1");
        assert!(CostProfile::from_toml(&text).is_err());
    }

    #[test]
    fn costs_that_could_overflow_the_clock_are_refused_naming_the_field() {
        let text = DID_2015_TOML.replace(
            "external_interrupt = 1970",
            &format!("external_interrupt = {}", i64::MAX),
        );
        let err = CostProfile::from_toml(&text).expect_err("too large");
        assert!(
            matches!(&err, ProfileError::CostTooLarge { field, .. } if field == "exit_service_ns.external_interrupt"),
            "{err}"
        );
        let text = DID_2015_TOML.replace("io_instruction = 65.5", "io_instruction = 1e12");
        assert!(matches!(
            CostProfile::from_toml(&text),
            Err(ProfileError::Invalid {
                field: "idle_exits_per_s",
                ..
            })
        ));
    }

    #[test]
    fn negative_rate_is_rejected() {
        let text = DID_2015_TOML.replace("io_instruction = 65.5", "io_instruction = -1.0");
        assert!(matches!(
            CostProfile::from_toml(&text),
            Err(ProfileError::Invalid { .. })
        ));
    }
}
