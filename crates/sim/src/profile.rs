//! Cost profiles: the measured (or assumed) costs the simulator takes as
//! input. The `did-2015` and `eli-2012` profiles ship embedded (a scenario
//! names its `profile`); `dirq calibrate` writes files of the same shape
//! for `dirq sim --profile`.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::metrics::ExitReason;
use crate::service::ServiceTimes;

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
}

/// Exit-to-re-entry service time per exit reason, ns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExitServiceNs {
    /// EXTERNAL_INTERRUPT: a physical interrupt arrived in guest mode.
    pub external_interrupt: u64,
    /// MSR_WRITE of the x2APIC EOI register.
    pub eoi_write: u64,
    /// IO_INSTRUCTION: port I/O emulated in the VMM (device setup, the
    /// idle VM's accesses).
    pub io_instruction: u64,
    /// IO_INSTRUCTION of a virtio notify, which KVM hands to an ioeventfd
    /// in the kernel (`kvm_io_bus_write`): no trip to the VMM.
    pub virtio_notify: u64,
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
    /// How long the host polls before sleeping a halted vCPU: the fixed
    /// window (`idle = "halt-poll"`), or KVM's `halt_poll_ns`, the most an
    /// adaptive window grows to (`idle = "adaptive-halt-poll"`).
    pub halt_poll: u64,
    /// Backend (vhost) work per virtio request or packet, in a pass.
    pub virtio_backend_per_request: u64,
    /// Waking the sleeping vhost worker for a job (`machine::virtio`).
    pub virtio_backend_wakeup: u64,
    /// One 4 KB read from the fio disk, a ramdisk read with the page cache
    /// bypassed (O_DIRECT): the copy out of the ramdisk's pages.
    pub ramdisk_read: u64,
    /// An exit's indirect cost (the ELI study's term): after re-entry the
    /// guest's next work runs this much longer while it refills the cache
    /// lines the host's exit path displaced (absent: 0).
    #[serde(default)]
    pub exit_indirect: u64,
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

/// The host's periodic scheduler tick on a core that runs a vCPU: a
/// hypervisor that keeps its own timers on the guest cores (every design
/// but DID and bare metal) takes it as an interrupt while the guest runs,
/// and runs its handler with interrupts disabled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostTick {
    /// Ticks per second (the host kernel's HZ); 0: no tick modelled.
    pub hz: u64,
    /// The tick's own work on its core beyond taking the interrupt:
    /// `update_process_times` (`scheduler_tick`, `run_local_timers`,
    /// `rcu_check_callbacks`) and the timer and RCU softirqs `irq_exit`
    /// then runs, ns (absent: 0).
    #[serde(default)]
    pub work_ns: u64,
}

/// The guest kernel's periodic tick, on a vCPU whose guest keeps it (a
/// timer thread at most one jiffy apart holds it off NO_HZ idle).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestTick {
    /// Ticks per second (the guest kernel's HZ); 0: no tick modelled.
    pub hz: u64,
}

/// The guest's own periodic work that makes an idle VM exit: a housekeeping
/// pass every `period_ns` performs the I/O-port and EPT-faulting accesses
/// whose rates `idle_exits_per_s` gives, each in a section with interrupts
/// disabled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestHousekeeping {
    /// Time between two passes, ns (needed when `idle_exits_per_s` is not 0).
    pub period_ns: u64,
    /// Each pass comes `period_ns` after the previous one, give or take up
    /// to this much (uniform): timer slack, so that passes do not keep one
    /// phase against other periodic work.
    pub jitter_ns: u64,
    /// Guest time with interrupts disabled around each access, ns.
    pub irqs_off_ns: u64,
}

/// The host work DID and ELI do that vanilla KVM does not, ns; each is
/// charged by the mechanism that does it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesignWorkNs {
    /// Rewriting a VF's IRTE (and invalidating the IOMMU's interrupt entry
    /// cache) at schedule-in or -out.
    pub irte_rewrite: u64,
    /// One self-IPI sent just before VM entry (DID's injection).
    pub self_ipi: u64,
    /// Moving a guest timer between a core's LAPIC and the designated core.
    pub timer_migration: u64,
    /// Switching ELI's injection mode on or off (VMCS and MSR-bitmap writes).
    pub injection_mode_switch: u64,
    /// KVM's emulated LAPIC timer expiring: the host's hrtimer interrupt
    /// runs KVM's timer callback beyond a generic interrupt's handling
    /// (hrtimer queue walk, clockevent re-arm, `apic_timer_fn`).
    pub hrtimer_callback: u64,
    /// The callback kicks its vCPU: a request bit, and an IPI only if the
    /// vCPU runs in guest mode elsewhere (never here: its core just exited).
    pub vcpu_kick: u64,
    /// At the next entry KVM turns the pending timer into a virtual
    /// interrupt (`kvm_inject_pending_timer_irqs`: accept into the vLAPIC,
    /// then the VMCS event injection).
    pub timer_injection: u64,
}

/// KVM's adaptive halt polling (virt/kvm/kvm_main.c of Linux 4.3 to 5.x):
/// its module parameters besides `halt_poll_ns` (`host_ns.halt_poll`),
/// and what a polled wake-up costs the host. Absent: KVM's defaults and a
/// free wake-up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HaltPolling {
    /// `halt_poll_ns_grow`: the factor a window grows by.
    pub grow: u32,
    /// The window a vCPU first grows to from none (`grow_halt_poll_ns`'s
    /// "10us base", later `halt_poll_ns_grow_start`), ns.
    pub grow_start_ns: u64,
    /// `halt_poll_ns_shrink`: the divisor a window shrinks by; 0 resets
    /// it.
    pub shrink: u32,
    /// Host time from a polling vCPU's interrupt to its re-entry: the
    /// poll loop's exit, `kvm_vcpu_block`'s accounting and KVM's entry
    /// path with the event to inject, ns.
    pub wakeup_ns: u64,
}

impl Default for HaltPolling {
    /// KVM's defaults (halt_poll_ns_grow = 2, a 10 us base,
    /// halt_poll_ns_shrink = 0) and a free wake-up.
    fn default() -> Self {
        HaltPolling {
            grow: 2,
            grow_start_ns: 10_000,
            shrink: 0,
            wakeup_ns: 0,
        }
    }
}

/// A virtio-blk read through QEMU's user space and the guest's block
/// layer (`machine::platform::virtio_blk`), ns. Each QEMU thread's
/// wake-up is `host_ns.virtio_backend_wakeup`, the ramdisk's copy
/// `host_ns.ramdisk_read`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtioBlkNs {
    /// Guest CPU: the read's system call and the block layer down to
    /// virtio-blk's request on the ring, before the notify.
    pub guest_submit: u64,
    /// QEMU's main loop takes the notified request to its AIO thread
    /// pool (`virtio_blk_handle_output`, `bdrv_aio_readv`).
    pub dispatch: u64,
    /// The AIO thread's `preadv` on the host's ramdisk besides the copy:
    /// the system call and the direct-I/O path.
    pub pread: u64,
    /// QEMU's main loop completes the read (`virtio_blk_req_complete`:
    /// the used ring, the MSI sent into KVM).
    pub complete: u64,
    /// Guest CPU after the interrupt's entry: virtio-blk's and the block
    /// layer's completion, the reader's wake-up and its return to user
    /// space.
    pub guest_complete: u64,
}

/// The host's NUMA interconnect: how long one message between two cores
/// takes (an IPI reaching its target once sent, or the cache line a
/// waiting caller polls), ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaNs {
    /// Between two cores of one node.
    pub same_node: u64,
    /// Between cores of different nodes (sockets).
    pub cross_node: u64,
}

/// The network: the link, TCP's and NAPI's settings, and the guest's
/// network-stack work (ns of guest CPU time unless named otherwise).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkCosts {
    /// Line rate of the NIC's link, Mbit/s.
    pub link_mbps: u64,
    /// The NIC's DMA rate over its PCIe link, Mbit/s.
    pub pcie_mbps: u64,
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
    /// The host's tap and bridge between a host process (or the host's
    /// NIC) and the backend (PV), one way, besides the backend's own
    /// work; from the guest, vhost's thread runs it (`machine::virtio`).
    pub bridge_one_way: u64,
    /// The testbed's NIC driver's adaptive interrupt coalescing, used
    /// when a scenario fixes no interval (absent: ixgbe's).
    #[serde(default)]
    pub adaptive_coalescing: AdaptiveCoalescing,
}

/// Whose adaptive interrupt coalescing the testbed's NIC runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdaptiveCoalescing {
    /// Intel 82599 with ixgbe/ixgbevf: latency classes from the bytes
    /// each interrupt brought (`ixgbe_update_itr`).
    #[default]
    IxgbeItr,
    /// Emulex OneConnect with be2net: an event-queue delay from the
    /// receive frame rate (`be_rx_eqd_update`), at most 96 us.
    Be2netAic,
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
    /// The shapes around the published means (absent: every time fixed).
    #[serde(default)]
    pub service_time: ServiceTimes,
    /// Absent: no host tick.
    #[serde(default)]
    pub host_tick: HostTick,
    /// Absent: no guest tick.
    #[serde(default)]
    pub guest_tick: GuestTick,
    /// Needed when `idle_exits_per_s` is not 0.
    #[serde(default)]
    pub guest_housekeeping: GuestHousekeeping,
    /// Absent: DID's and ELI's own work is free.
    #[serde(default)]
    pub design_work_ns: DesignWorkNs,
    /// Absent: IPIs arrive at once.
    #[serde(default)]
    pub numa_ns: NumaNs,
    /// Absent: KVM's defaults, a free polled wake-up.
    #[serde(default)]
    pub halt_polling: HaltPolling,
    /// Absent: a virtio-blk read costs only QEMU's wake-ups and the
    /// ramdisk's copy.
    #[serde(default)]
    pub virtio_blk_ns: VirtioBlkNs,
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
/// The fastest host (or guest) tick a profile may give.
pub const MAX_HOST_TICK_HZ: u64 = 10_000;

/// The `did-2015` profile text, embedded so the binary needs no data files.
pub const DID_2015_TOML: &str = include_str!("../../../profiles/did-2015.toml");
/// The `eli-2012` profile text.
pub const ELI_2012_TOML: &str = include_str!("../../../profiles/eli-2012.toml");

/// The `ipi-2019` profile text.
pub const IPI_2019_TOML: &str = include_str!("../../../profiles/ipi-2019.toml");

/// The profiles compiled into the binary; a scenario names the one its
/// paper's testbed has (`profile = "ipi-2019"`), did-2015 by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum BuiltinProfile {
    #[default]
    #[serde(rename = "did-2015")]
    Did2015,
    #[serde(rename = "eli-2012")]
    Eli2012,
    #[serde(rename = "ipi-2019")]
    Ipi2019,
}

impl BuiltinProfile {
    pub const ALL: [BuiltinProfile; 3] = [
        BuiltinProfile::Did2015,
        BuiltinProfile::Eli2012,
        BuiltinProfile::Ipi2019,
    ];

    pub fn text(self) -> &'static str {
        match self {
            BuiltinProfile::Did2015 => DID_2015_TOML,
            BuiltinProfile::Eli2012 => ELI_2012_TOML,
            BuiltinProfile::Ipi2019 => IPI_2019_TOML,
        }
    }

    pub fn profile(self) -> CostProfile {
        match CostProfile::from_toml(self.text()) {
            Ok(profile) => profile,
            // Every embedded text is checked by a unit test.
            Err(err) => unreachable!("embedded profile {self:?} is invalid: {err}"),
        }
    }
}

impl CostProfile {
    /// The DID testbed (docs/calibration.md).
    pub fn did_2015() -> CostProfile {
        BuiltinProfile::Did2015.profile()
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
        if !self.service_time.exit.is_valid() || !self.service_time.guest.is_valid() {
            return Err(ProfileError::Invalid {
                field: "service_time",
                rule: "a lognormal cv of 0 to 10, a fixed_fraction of 0 to 1",
            });
        }
        let background = rates.iter().any(|&rate| rate > 0.0);
        if background && self.guest_housekeeping.period_ns == 0 {
            return Err(ProfileError::Invalid {
                field: "guest_housekeeping.period_ns",
                rule: "positive when idle_exits_per_s is not zero",
            });
        }
        if self.host_tick.hz > MAX_HOST_TICK_HZ {
            return Err(ProfileError::Invalid {
                field: "host_tick.hz",
                rule: "at most 10000",
            });
        }
        if self.guest_tick.hz > MAX_HOST_TICK_HZ {
            return Err(ProfileError::Invalid {
                field: "guest_tick.hz",
                rule: "at most 10000",
            });
        }
        // Every cost, by its TOML path.
        let costs = serde_json::to_value(self)?;
        for section in [
            "exit_service_ns",
            "host_ns",
            "host_tick",
            "guest_ns",
            "guest_housekeeping",
            "design_work_ns",
            "numa_ns",
            "halt_polling",
            "virtio_blk_ns",
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
            || network.pcie_mbps == 0
            || network.napi_weight == 0
            || network.mtu_bytes <= network.frame_overhead_bytes
            || network.gso_bytes < network.mtu_bytes
            || network.tcp_window_bytes < network.gso_bytes
            || self.workloads.cpu_mhz == 0
        {
            return Err(ProfileError::Invalid {
                field: "network / workloads",
                rule: "a positive link rate, PCIe rate, NAPI weight and clock; MTU > frame overhead; gso_bytes >= MTU; window >= gso_bytes",
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

    /// A virtio notify's exit, exit to re-entry.
    pub fn virtio_notify_cost(&self) -> u64 {
        self.exit_service_ns.virtio_notify + self.host_ns.exit_entry_transition
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
    fn every_builtin_profile_parses_under_its_own_name() {
        for builtin in BuiltinProfile::ALL {
            let profile = CostProfile::from_toml(builtin.text()).expect("parses");
            let named: BuiltinProfile =
                serde_json::from_value(serde_json::Value::String(profile.name.clone()))
                    .expect("a built-in name");
            assert_eq!(named, builtin);
        }
    }

    #[test]
    fn housekeeping_needs_a_period_when_the_guest_exits_in_the_background() {
        let text = DID_2015_TOML.replace("period_ns = ", "period_ns = 0 # ");
        assert!(matches!(
            CostProfile::from_toml(&text),
            Err(ProfileError::Invalid {
                field: "guest_housekeeping.period_ns",
                ..
            })
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
