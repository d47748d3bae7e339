//! What a guest's writes to its virtual hardware cost: an ICR write (the
//! VM's APIC bus routes it over the vCPUs' virtual LAPICs, the design's
//! IPI sender decides whether it exits and who posts it), a virtio
//! notify, a housekeeping access.

use dirq_arch::bus;
use dirq_arch::interrupt::ApicBusMessage;

use super::{Hypervisor, Mode, VcpuState, VirtCpu};
use crate::design::msrs;
use crate::machine::effects::Effects;
use crate::machine::{index_u32, At, Event};
use crate::metrics::ExitReason;

/// The vLAPIC of the vCPU at `sender` on a VM's APIC bus (`bus`, its
/// vCPUs' virtual LAPICs in APIC-ID order) takes the guest's write of
/// `icr`, which puts the IPI on the bus; `bus::route` picks the bus
/// positions it reaches (every destination mode, shorthand and
/// lowest-priority arbitration), as for the real guest. A write the LAPIC
/// refuses sends nothing.
fn route_icr_write(bus: &mut [VirtCpu], sender: usize, icr: u64, now: u64) -> Vec<usize> {
    let Some(sender) = bus.get_mut(sender) else {
        return Vec::new();
    };
    let sent = sender.hw.vlapic.write_msr(msrs::ICR, icr, &At(now));
    let Ok(Some(ApicBusMessage::Ipi(interrupt))) = sent else {
        return Vec::new();
    };
    match bus::route(&interrupt, bus) {
        Ok(targets) => targets.iter().collect(),
        Err(_) => Vec::new(),
    }
}

impl Hypervisor {
    /// The guest writes `icr` on `vcpu`'s vLAPIC at `now`: the vCPUs its
    /// VM's APIC bus routes the IPI to.
    pub(in crate::machine) fn route_icr(&mut self, vcpu: usize, icr: u64, now: u64) -> Vec<usize> {
        // A VM's vCPUs are numbered consecutively, in APIC-ID order.
        let vm = self.topology.vcpus_of(self.vcpus[vcpu].vm);
        let first = vm.start;
        route_icr_write(&mut self.vcpus[vm], vcpu - first, icr, now)
            .into_iter()
            .map(|position| first + position)
            .collect()
    }

    /// The IPIs of `vcpu`'s ICR write `icr` leave at `now` for `targets`.
    /// The design's IPI sender decides whether the write exits and whether
    /// the CPU posted the vector itself (IPIv, AVIC). A write that exits
    /// has the host kick the targets one after another within that exit
    /// (`kvm_apic_send_ipi` -> `kvm_vcpu_kick` per target; AVIC's
    /// AVIC_INCOMPLETE_IPI likewise): each IPI leaves once the kicks before
    /// it are done.
    pub(in crate::machine) fn send_guest_ipis(
        &mut self,
        vcpu: usize,
        icr: u64,
        targets: &[usize],
        now: u64,
        fx: &mut Effects,
    ) {
        let from = self.vcpus[vcpu].home_core;
        let every_target_running = targets.iter().all(|&target| self.is_running(target));
        let send =
            self.design
                .ipi_sender
                .send(&self.vcpus[vcpu].hw.vmcs, icr, every_target_running);
        let trapped = send.exits;
        let mut sent_at = Vec::with_capacity(targets.len());
        let mut send_at = now;
        if trapped {
            send_at += self.profile.exit_service_ns.icr_write;
        }
        for &target in targets {
            if trapped {
                send_at += self.kick_ns(from, target, now);
            }
            sent_at.push(send_at);
        }
        if trapped {
            let kicks = send_at - now - self.profile.exit_service_ns.icr_write;
            let cost = self.profile.exit_service_ns.icr_write
                + self.profile.host_ns.exit_entry_transition
                + kicks;
            fx.exit(vcpu, ExitReason::MsrWrite, cost);
        }
        for (&target, at) in targets.iter().zip(sent_at) {
            let to = self.vcpus[target].home_core;
            let target = index_u32(target);
            let event = if send.posted_by_cpu {
                Event::PostedIpi { vcpu: target }
            } else {
                Event::GuestIpi { vcpu: target }
            };
            fx.schedule(at + self.topology.interconnect_ns(from, to), event);
        }
    }

    /// The sender's time in `kvm_vcpu_kick` for `target` at `now`. For a
    /// target whose thread sleeps in `schedule()` (halted, past any
    /// halt-polling window): its wake-up from the sender
    /// (`try_to_wake_up`), which takes the target core's runqueue lock
    /// (one cache line from that core, over the interconnect, same-node or
    /// cross-node) and sends the IPI. For a target the host halt-polls: no
    /// IPI and no wake-up (it is neither in guest mode nor on its wait
    /// queue); the pending bit the sender sets is a line the poller holds.
    /// Otherwise the IPI's send.
    pub(super) fn kick_ns(&self, from: usize, target: usize, now: u64) -> u64 {
        let core = self.vcpus[target].home_core;
        let halted =
            self.vcpus[target].state == VcpuState::Halted && self.cores[core].mode == Mode::Idle;
        let line = self.topology.interconnect_ns(from, core);
        match (halted, self.polling(core, now)) {
            (true, true) => line,
            (true, false) => self.profile.host_ns.send_ipi + line,
            (false, _) => self.profile.host_ns.send_ipi,
        }
    }

    /// A virtio notify: a port write that exits under every hypervisor,
    /// served in the kernel by an ioeventfd.
    pub(in crate::machine) fn io_notify(&self, vcpu: usize, fx: &mut Effects) {
        if self.vcpus[vcpu].hw.vmcs.io_exits() {
            let cost = self.profile.virtio_notify_cost();
            fx.exit(vcpu, ExitReason::IoInstruction, cost);
        }
    }

    /// A housekeeping access of `vcpu`'s guest: an I/O-port or
    /// EPT-faulting one, which exits under a hypervisor.
    pub(in crate::machine) fn access(&self, vcpu: usize, reason: ExitReason, fx: &mut Effects) {
        let vmcs = &self.vcpus[vcpu].hw.vmcs;
        let exits = match reason {
            ExitReason::IoInstruction => vmcs.io_exits(),
            _ => vmcs.ept_enabled(),
        };
        if exits {
            self.list_exit(vcpu, reason, fx);
        }
    }
}
