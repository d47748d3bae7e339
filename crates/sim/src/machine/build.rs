//! Assembling a machine from a run's spec: the topology, the platform
//! (a software-enabled x2APIC LAPIC per core), the hypervisor (a virtual
//! LAPIC per vCPU, the design's table), the guest and its workload; then
//! the run's first events.

use dirq_arch::lapic::{
    x2apic_msr, Lapic, LapicConfig, APIC_BASE_GLOBAL_ENABLE, APIC_BASE_X2APIC_ENABLE,
    APIC_LVT_TIMER, APIC_TIMER_DIVIDE_CONFIG, DEFAULT_MMIO_BASE, SVR_APIC_SOFTWARE_ENABLE,
};

use super::effects::Effects;
use super::{
    guest, index_u32, workload, Around, At, Guest, Hypervisor, Ledger, Machine, Platform, Topology,
    GUEST_TIMER_VECTOR,
};
use crate::profile::CostProfile;
use crate::rng::Rng;
use crate::scenario::RunSpec;
use crate::SimError;

/// The LAPIC bus clock: 1 GHz so that one timer count is one ns.
const BUS_HZ: u64 = 1_000_000_000;
const TSC_HZ: u64 = 3_400_000_000;
/// TDCR value for divide-by-1 (SDM 10.5.4 figure 10-10).
const TDCR_DIVIDE_BY_1: u64 = 0b1011;

/// A software-enabled x2APIC-mode LAPIC with ID `apic_id`, its timer on
/// the guest's timer vector at divide-by-1.
pub(super) fn enabled_lapic(apic_id: u32) -> Result<Lapic, SimError> {
    let config = LapicConfig::new(BUS_HZ, TSC_HZ).map_err(SimError::Model)?;
    let mut lapic = Lapic::new(apic_id, config);
    lapic
        .set_apic_base(DEFAULT_MMIO_BASE | APIC_BASE_GLOBAL_ENABLE | APIC_BASE_X2APIC_ENABLE)
        .map_err(SimError::Model)?;
    // Software-enabled, spurious vector 0xFF (SDM 10.9).
    lapic.set_svr(SVR_APIC_SOFTWARE_ENABLE | 0xFF);
    let clock = At(0);
    lapic
        .write_msr(
            x2apic_msr(APIC_LVT_TIMER),
            u64::from(GUEST_TIMER_VECTOR),
            &clock,
        )
        .map_err(SimError::Model)?;
    lapic
        .write_msr(
            x2apic_msr(APIC_TIMER_DIVIDE_CONFIG),
            TDCR_DIVIDE_BY_1,
            &clock,
        )
        .map_err(SimError::Model)?;
    Ok(lapic)
}

impl Machine {
    pub(crate) fn new(
        spec: &RunSpec,
        profile: &CostProfile,
        seed: u64,
        trace: bool,
    ) -> Result<Machine, SimError> {
        let topology = Topology::new(&spec.group, profile.numa_ns.clone());
        let workload = workload::for_run(spec, profile, &topology);
        let traffic = workload.traffic();
        let lapics = (0..spec.group.host.cores)
            .map(enabled_lapic)
            .collect::<Result<Vec<_>, _>>()?;
        // A vCPU's virtual LAPIC has its index in its VM as its APIC ID.
        let vlapics = (0..topology.vcpu_count())
            .map(|vcpu| enabled_lapic(index_u32(vcpu - topology.lead(topology.vm_of(vcpu)))))
            .collect::<Result<Vec<_>, _>>()?;
        let platform = Platform::new(spec, profile, &topology, traffic, lapics);
        let hypervisor = Hypervisor::new(spec, profile, &topology, vlapics, &platform);
        let guest = Guest::new(spec, profile, &topology, workload);
        let mut machine = Machine {
            now: 0,
            end: spec.duration_ns,
            fx: Effects::default(),
            rng: Rng::new(seed),
            ledger: Ledger::new(&topology, trace),
            topology,
            platform,
            hypervisor,
            guest,
        };
        machine.start(spec);
        Ok(machine)
    }

    /// The first events of the run; each step's effects take place before
    /// the next step.
    fn start(&mut self, spec: &RunSpec) {
        let mut fx = std::mem::take(&mut self.fx);
        self.hypervisor.route_vfs(self.platform.iommu());
        for core in 1..spec.group.host.cores as usize {
            let (lapic, iommu) = self.platform.lapic_and_iommu(core);
            if self
                .hypervisor
                .start_core(core, lapic, iommu, &mut self.ledger, &mut fx)
            {
                self.enter_guest(core, &mut fx);
                self.hypervisor.arm_first_slice(core, &mut fx);
                self.apply(&mut fx);
            }
        }
        for vm in 0..self.topology.vm_count() {
            self.start_workload(vm, spec.group.with_timer, &mut fx);
            self.apply(&mut fx);
        }
        for vcpu in 0..self.topology.vcpu_count() {
            self.guest.start_housekeeping(vcpu, &mut self.rng, &mut fx);
        }
        self.hypervisor.start_host_ticks(&mut self.rng, &mut fx);
        self.apply(&mut fx);
        self.fx = fx;
    }

    /// `vm`'s workload starts: its first events; then the timer thread on
    /// each queue-pair owner, when the workload or the group (`with_timer`)
    /// runs it.
    fn start_workload(&mut self, vm: usize, with_timer: bool, fx: &mut Effects) {
        let owners: Vec<usize> = self.topology.owners(vm).collect();
        with_inputs!(self, |inputs| self.guest.start_workload(
            vm,
            &owners,
            &mut inputs,
            fx
        ));
        if !self.guest.runs_timer_thread(with_timer) {
            return;
        }
        for &owner in &owners {
            let deadline = self.guest.arm_timer_thread(owner, &mut self.rng);
            let lapic = self.platform.lapic_mut(self.hypervisor.home_core(owner));
            self.hypervisor
                .program_guest_timer(owner, deadline, 0, lapic, &mut self.ledger, fx);
        }
    }
}
