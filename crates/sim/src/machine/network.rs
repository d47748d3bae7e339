//! The network's costs as a run's devices and workloads use them, fixed
//! for the run: copying a message, a frame's time on the link and in the
//! NICs' DMA, and the one-way way to a peer (over the NIC's link to a
//! remote host, or over the host's bridge to a host process, or both for a
//! PV peer on another server). Costs come from the profile's `network`
//! section.

use crate::profile::{CostProfile, NetworkCosts};
use crate::scenario::{RunGroup, Transport};

/// Ethernet's header, FCS, preamble and inter-frame gap (IEEE 802.3).
const ETHERNET_FRAMING_BYTES: u64 = 38;
/// Frame bytes the NIC does not move by DMA: the FCS (the NIC adds and
/// strips it), the preamble and the inter-frame gap (IEEE 802.3).
const NOT_DMA_BYTES: u64 = 24;
/// netperf's default request/response size (1 byte) when a scenario
/// names no `message_bytes`.
const DEFAULT_MESSAGE_BYTES: u64 = 1;

/// Serialization time of `frames` frames carrying `payload` bytes in all
/// at `link_mbps`, ns.
pub(super) fn wire_ns(payload: u64, frames: u64, overhead_bytes: u64, link_mbps: u64) -> u64 {
    let bits = (payload + frames * overhead_bytes) * 8;
    (bits * 1_000).div_ceil(link_mbps)
}

/// TCP's payload per frame: the MTU less the IP and TCP headers (the
/// profile's frame overhead less Ethernet's own framing).
pub(super) fn mss(network: &NetworkCosts) -> u64 {
    network.mtu_bytes
        - network
            .frame_overhead_bytes
            .saturating_sub(ETHERNET_FRAMING_BYTES)
}

/// A run's network.
#[derive(Clone, Debug)]
pub(super) struct Network {
    pub(super) costs: NetworkCosts,
    /// The wire's one-way latency past serialization.
    pub(super) wire_one_way_ns: u64,
    pub(super) transport: Transport,
    /// The PV peer is on another server, its frames arriving through the
    /// host's NIC (memcached's clients, on the DID testbed's other
    /// server); NetPIPE's and iperf's PV peers are host processes.
    pub(super) pv_peer_on_wire: bool,
    message_bytes: u64,
}

impl Network {
    pub(super) fn new(profile: &CostProfile, group: &RunGroup, pv_peer_on_wire: bool) -> Network {
        Network {
            costs: profile.network.clone(),
            wire_one_way_ns: profile.guest_ns.wire_one_way,
            transport: group.transport,
            pv_peer_on_wire,
            message_bytes: group.message_bytes.unwrap_or(DEFAULT_MESSAGE_BYTES),
        }
    }

    /// Payload bytes per message (netperf-rr's, udp-rr's, netperf's
    /// writes).
    pub(super) fn message_bytes(&self) -> u64 {
        self.message_bytes
    }

    pub(super) fn mss(&self) -> u64 {
        mss(&self.costs)
    }

    /// Copying `bytes` between buffers.
    pub(super) fn copy_ns(&self, bytes: u64) -> u64 {
        bytes * self.costs.copy_per_kib / 1024
    }

    /// Serialization of one frame of `payload` bytes on the link.
    pub(super) fn frame_wire_ns(&self, payload: u64) -> u64 {
        wire_ns(
            payload,
            1,
            self.costs.frame_overhead_bytes,
            self.costs.link_mbps,
        )
    }

    /// One NIC's DMA of a frame of `payload` bytes between its FIFO and
    /// host memory. The 82599 stores a frame whole before it passes it on
    /// either way (the receive side checks the FCS, the transmit side
    /// inserts checksums over the whole frame), so the DMA is on the way.
    pub(super) fn frame_dma_ns(&self, payload: u64) -> u64 {
        let bytes = payload
            + self
                .costs
                .frame_overhead_bytes
                .saturating_sub(NOT_DMA_BYTES);
        (bytes * 8 * 1_000).div_ceil(self.costs.pcie_mbps)
    }

    /// A message's way to the peer: over the link to the remote host (the
    /// sending NIC's DMA, the wire, the receiving NIC's DMA), or over the
    /// host's bridge to a host process (PV; vhost's copy is its own job),
    /// or both for a PV peer on another server.
    pub(super) fn one_way_ns(&self, payload: u64) -> u64 {
        match self.transport {
            Transport::Pv => self.costs.bridge_one_way + self.past_bridge_ns(payload),
            _ => self.link_one_way_ns(payload),
        }
    }

    /// A PV guest's frame once past the host's bridge, which vhost's pass
    /// runs itself: the link to a peer on another server, nothing more for
    /// a host process.
    pub(super) fn past_bridge_ns(&self, payload: u64) -> u64 {
        if self.pv_peer_on_wire {
            self.link_one_way_ns(payload)
        } else {
            0
        }
    }

    /// Over the link: the sending NIC's DMA, the wire, the receiving
    /// NIC's DMA.
    fn link_one_way_ns(&self, payload: u64) -> u64 {
        self.wire_one_way_ns + self.frame_wire_ns(payload) + 2 * self.frame_dma_ns(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::scenario::WorkloadKind;

    fn network(transport: Transport, pv_peer_on_wire: bool) -> Network {
        let mut group = RunGroup::new(WorkloadKind::NetperfRr, vec![DesignKind::Did]);
        group.transport = transport;
        Network::new(&CostProfile::did_2015(), &group, pv_peer_on_wire)
    }

    #[test]
    fn the_wire_time_counts_every_frames_overhead_at_line_rate() {
        // One 1500-byte frame (1460 payload + 78 overhead) at 10 Gbit/s.
        assert_eq!(wire_ns(1_460, 1, 78, 10_000), 1_231);
        assert_eq!(wire_ns(2 * 1_460, 2, 78, 10_000), 2_461);
    }

    #[test]
    fn a_pv_peer_is_the_bridge_away_or_the_bridge_and_the_link() {
        let sriov = network(Transport::Sriov, false);
        let host_process = network(Transport::Pv, false);
        let remote = network(Transport::Pv, true);
        let bridge = host_process.costs.bridge_one_way;
        assert_eq!(host_process.one_way_ns(100), bridge);
        assert_eq!(host_process.past_bridge_ns(100), 0);
        assert_eq!(remote.one_way_ns(100), bridge + sriov.one_way_ns(100));
        assert!(sriov.one_way_ns(1_000) > sriov.one_way_ns(100));
    }
}
