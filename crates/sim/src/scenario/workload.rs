//! What a run group runs: the workload, its transport, the guest's idle
//! mode, which vCPUs own device queues and how guest IPIs are sent.

use dirq_arch::interrupt::{DeliveryMode, Destination};
use dirq_arch::lapic::x2apic_icr;
use dirq_stats::round_u64;
use serde::{Deserialize, Serialize};

use crate::rng::Rng;

/// The workloads the simulator knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// 128-byte UDP packets received at `rates_pps`.
    UdpRx,
    /// A 1 kHz guest timer; latency from expiry to the user-level handler.
    Cyclictest,
    /// Fixed compute in the background of a `udp-rx` at `rates_pps`.
    Whileloop,
    /// NetPIPE's ping-pong, one message outstanding; latency is half the
    /// round trip, as NetPIPE reports it.
    NetperfRr,
    /// Bulk receive of MTU-sized packets at line rate.
    Iperf,
    /// virtio-blk 4 KB random reads, one outstanding, guard timer per request.
    Fio,
    /// Guest IPIs from vCPU 0 to the others.
    Ipi,
    /// An idle VM: only background exits.
    Idle,
    /// The IPI paper's benchmark: vCPU 0 calls a function on `target` and
    /// waits for its completion (smp_call_function_single/many), call
    /// after call.
    IpiCall,
    /// The Loongson VIOAPIC paper: back-to-back level-triggered device
    /// interrupts on one core, the controller at `level`.
    Vioapic,
    /// netperf TCP stream: the guest sends `message_bytes` writes over TCP.
    Netperf,
    /// netperf UDP request/response (netperf-rr by the ELI paper's name);
    /// latency is the full round trip, 1 / transactions per second, as
    /// netperf's UDP_RR defines it.
    UdpRr,
    /// memcached: a closed-loop server for `clients` connections.
    Memcached,
    /// apache: a closed-loop web server for `clients` connections.
    Apache,
    /// DPDK l2fwd: the poll-mode driver forwards 128-byte packets.
    L2fwd,
    /// A SIP back-to-back user agent relaying 100 calls/s of 10 s.
    Sip,
}

impl WorkloadKind {
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::UdpRx => "udp-rx",
            WorkloadKind::Cyclictest => "cyclictest",
            WorkloadKind::Whileloop => "whileloop",
            WorkloadKind::NetperfRr => "netperf-rr",
            WorkloadKind::Iperf => "iperf",
            WorkloadKind::Fio => "fio",
            WorkloadKind::Ipi => "ipi",
            WorkloadKind::Idle => "idle",
            WorkloadKind::IpiCall => "ipi-call",
            WorkloadKind::Vioapic => "vioapic",
            WorkloadKind::Netperf => "netperf",
            WorkloadKind::UdpRr => "udp-rr",
            WorkloadKind::Memcached => "memcached",
            WorkloadKind::Apache => "apache",
            WorkloadKind::L2fwd => "l2fwd",
            WorkloadKind::Sip => "sip",
        }
    }

    /// A workload whose traffic is the network's, so its transport is one
    /// of its parameters (whileloop's background receive is not measured).
    pub fn is_network(self) -> bool {
        matches!(
            self,
            WorkloadKind::UdpRx
                | WorkloadKind::NetperfRr
                | WorkloadKind::Iperf
                | WorkloadKind::Netperf
                | WorkloadKind::UdpRr
                | WorkloadKind::Memcached
                | WorkloadKind::Apache
                | WorkloadKind::L2fwd
                | WorkloadKind::Sip
        )
    }

    /// The latency a request/response workload reports for one
    /// `round_trip_ns`: its tool's definition.
    pub fn reported_latency_ns(self, round_trip_ns: u64) -> u64 {
        match self {
            WorkloadKind::NetperfRr => round_trip_ns / 2,
            _ => round_trip_ns,
        }
    }

    /// A server answering requests from clients over the network.
    pub fn is_server(self) -> bool {
        matches!(self, WorkloadKind::Memcached | WorkloadKind::Apache)
    }
}

/// Where network traffic enters the VM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// An SR-IOV virtual function assigned to the VM.
    #[default]
    Sriov,
    /// virtio-net with a vhost backend thread on the housekeeping core.
    Pv,
    /// Both at once, each at the given rate.
    Both,
}

/// What an idle vCPU does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdleMode {
    /// Guest idle=poll: never halts (the DID testbed's setting).
    #[default]
    Poll,
    /// HLT exits and the vCPU thread sleeps.
    #[serde(rename = "halt", alias = "hlt")]
    Hlt,
    /// HLT exits; the host polls a fixed `halt_poll` ns before sleeping
    /// (KVM's first halt polling, Linux 4.0).
    HaltPoll,
    /// HLT exits; KVM's adaptive halt polling (Linux 4.3 on,
    /// `kvm_vcpu_block`): each vCPU polls its own window, which grows on a
    /// short wait and resets on a long one, up to `halt_poll` ns
    /// (`machine::hypervisor::halt_poll`).
    AdaptiveHaltPoll,
}

impl IdleMode {
    /// Whether the host polls a halted vCPU before it sleeps.
    pub fn host_polls(self) -> bool {
        matches!(self, IdleMode::HaltPoll | IdleMode::AdaptiveHaltPoll)
    }
}

/// The x2APIC destination mode the guest's Linux addresses its IPIs in
/// (arch/x86/kernel/apic/x2apic_{phys,cluster}.c).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum X2apicMode {
    /// One ICR write per target CPU (`__x2apic_send_IPI_mask` walks the
    /// mask): Linux's choice in a KVM guest without interrupt remapping,
    /// where "all CPUs can be addressed by IOAPIC/MSI only in physical
    /// mode" (`try_to_enable_x2apic` sets `x2apic_phys`).
    #[default]
    Physical,
    /// One ICR write per cluster of 16 logical IDs (SDM 10.12.10.2), with
    /// interrupt remapping.
    Cluster,
}

/// Whether the guest uses KVM's PV EOI (`dirq run --pv-eoi`;
/// docs/mechanisms.md section 8). Only a design whose LAPIC KVM emulates
/// can waive an EOI (`design::mechanism::pv_eoi`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PvEoiSetting {
    /// Every EOI is written.
    #[default]
    Off,
    /// The guest enabled PV EOI and KVM sets its flag as Linux's KVM does.
    On,
    /// The guest enabled PV EOI and the host never sets the flag (a host
    /// whose real PV EOI runs skip no EOI, as kvm_pvm's): every EOI is
    /// written.
    NeverFlagged,
}

impl PvEoiSetting {
    pub fn is_off(&self) -> bool {
        *self == PvEoiSetting::Off
    }
}

/// How a packet source spaces the frames of udp-rx and whileloop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arrivals {
    /// Exponential gaps: many independent senders, as a NIC's traffic.
    #[default]
    Poisson,
    /// One gap of 1/rate after another: a single paced sender, as the
    /// device thread of `dirq run whileloop` and `irq-latency`.
    Paced,
}

impl Arrivals {
    pub fn is_poisson(&self) -> bool {
        *self == Arrivals::Poisson
    }

    /// The gap before a source at `rate_per_s` sends its next frame.
    pub fn gap_ns(self, rate_per_s: f64, rng: &mut Rng) -> u64 {
        let mean_ns = 1e9 / rate_per_s;
        match self {
            Arrivals::Poisson => rng.exponential_ns(mean_ns),
            Arrivals::Paced => round_u64(mean_ns).max(1),
        }
    }
}

/// How the guest's driver takes the frames of udp-rx and whileloop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RxHandler {
    /// Linux's NAPI: the interrupt masks the queue and schedules a poll.
    #[default]
    Napi,
    /// No NAPI, as dirq's own guest: each interrupt takes what the ring
    /// holds at once and re-enables the queue, so a frame that comes
    /// during the handler raises the next interrupt, which waits in the
    /// IRR, and frames that come before it is taken share one.
    PerInterrupt,
}

impl RxHandler {
    pub fn is_napi(&self) -> bool {
        *self == RxHandler::Napi
    }
}

/// Which vCPUs of a VM own a receive queue pair (an SR-IOV VF queue with
/// its own MSI-X vector and IRTE, and a virtio queue) and a guest timer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueOwners {
    /// vCPU 0 only: one queue per VM, one timer.
    #[default]
    FirstVcpu,
    /// Every vCPU: a multi-queue NIC spreading flows over the vCPUs, and a
    /// tick on every vCPU; each queue gets the configured packet rate.
    EveryVcpu,
}

/// Unicast to vCPU 1 or broadcast to all other vCPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IpiMode {
    #[default]
    Unicast,
    Broadcast,
}

impl IpiMode {
    /// The x2APIC ICR value the guest's vCPU 0 writes to send `vector`:
    /// physical to APIC ID 1, or the all-excluding-self shorthand.
    pub fn icr(self, vector: u8) -> u64 {
        let destination = match self {
            IpiMode::Unicast => Destination::Physical(1),
            IpiMode::Broadcast => Destination::AllExcludingSelf { sender: 0 },
        };
        x2apic_icr(vector, DeliveryMode::Fixed, destination)
    }
}

impl QueueOwners {
    /// How many vCPUs of a VM of `vcpus_per_vm` own queues: vCPUs 0 to n-1.
    pub fn per_vm(self, vcpus_per_vm: u32) -> u32 {
        match self {
            QueueOwners::FirstVcpu => 1,
            QueueOwners::EveryVcpu => vcpus_per_vm,
        }
    }
}
