//! Building a machine from a run's spec: cores, vCPUs pinned round-robin,
//! VMs, and the first events of each workload.

use super::itr::{ItrMode, Throttle};
use super::napi::Napi;
use super::virtio::{Vhost, VIRTIO_NET_NAPI_WEIGHT};
use super::*;

fn enabled_lapic(apic_id: u32) -> Result<Lapic, SimError> {
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
        let design = spec.design.table();
        let host = spec.group.host;
        let core_count = host.cores as usize;
        let mut cores = Vec::with_capacity(core_count);
        for id in 0..core_count {
            cores.push(Core {
                lapic: enabled_lapic(index_u32(id))?,
                mode: Mode::Idle,
                mode_since: 0,
                current: None,
                runqueue: Vec::new(),
                timer_owner: None,
                timer_misowned: false,
                nmi_mailbox: Vec::new(),
                free_host_irqs: 0,
                slice_due: false,
                timer_work_ns: 0,
                halt_poll_until: 0,
                guest_ns: 0,
                asleep_ns: 0,
                hosts_vcpus: false,
                vf_vectors: Vec::new(),
            });
        }
        let mut vcpus = Vec::new();
        let mut vms = Vec::new();
        let mut pairs = Vec::new();
        let owners_per_vm = spec.group.queue_owners.per_vm(host.vcpus_per_vm) as usize;
        let topology = Topology::new(&spec.group, profile.numa_ns.clone());
        let workload = workload::for_run(spec, profile, &topology);
        let handlers = Handlers::of(workload.programs());
        let traffic = workload.traffic();
        let napi_weight = spec
            .group
            .napi_weight
            .unwrap_or(profile.network.napi_weight);
        let itr = match spec.group.itr_us {
            Some(us) => ItrMode::Fixed {
                interval_ns: us * 1_000,
            },
            None => ItrMode::Adaptive(profile.network.adaptive_coalescing),
        };
        for vm in 0..host.vms as usize {
            let mut ids = Vec::new();
            for index in 0..host.vcpus_per_vm as usize {
                let id = vcpus.len();
                let home_core = spec.group.home_core(index_u32(id)) as usize;
                let program = handlers.program(index, spec.group.idle);
                vcpus.push(Vcpu {
                    vm,
                    home_core,
                    hw: VcpuHardware {
                        vlapic: enabled_lapic(index_u32(index))?,
                        vmcs: design.vmcs.build(),
                        pid: PostedInterruptDescriptor::new(
                            POSTED_NOTIFICATION_VECTOR,
                            index_u32(home_core),
                        ),
                    },
                    injection: InjectionState::default(),
                    timer: TimerState::default(),
                    frames: vec![Frame::background(program)],
                    interruptible: true,
                    state: VcpuState::Runnable,
                    step_started: 0,
                    step_running: false,
                    spin_since: None,
                    spin_ns: 0,
                    halt_requested: false,
                    // Set below, once the VM's queue pairs exist.
                    pair: 0,
                    housekeeping: Accesses::default(),
                });
                cores[home_core].runqueue.push(id);
                cores[home_core].hosts_vcpus = true;
                ids.push(id);
            }
            let first_pair = pairs.len();
            for (index, &owner) in ids.iter().enumerate() {
                if index >= owners_per_vm {
                    vcpus[owner].pair = first_pair;
                    continue;
                }
                // Validation keeps every core within its vector range.
                let vf_core = &mut cores[vcpus[owner].home_core];
                let mut allocate = |queue: VfVector| {
                    let vector = HOST_VF_VECTOR_BASE
                        + u8::try_from(vf_core.vf_vectors.len())
                            .expect("at most HOST_VECTORS_PER_CORE");
                    vf_core.vf_vectors.push((pairs.len(), queue));
                    vector
                };
                let vf_host_vector = allocate(VfVector::Rx);
                let tx_eq = TxEq::of(profile.network.adaptive_coalescing, || {
                    allocate(VfVector::Tx)
                });
                vcpus[owner].pair = pairs.len();
                let rx = |weight| RxRing {
                    napi: Napi::with_weight(weight),
                    ..RxRing::default()
                };
                let virtio_weight = spec.group.napi_weight.unwrap_or(VIRTIO_NET_NAPI_WEIGHT);
                let mut vf = rx(napi_weight);
                // A poll-mode driver never enables the VF's interrupt.
                vf.masked = traffic.polled_vf;
                pairs.push(QueuePair {
                    owner,
                    vf,
                    virtio: rx(virtio_weight),
                    vf_host_vector,
                    throttle: Throttle::new(itr),
                    tx_eq,
                });
            }
            vms.push(Vm {
                vcpus: ids,
                vhost: Vhost::new(itr),
            });
        }
        let vcpu_count = topology.vcpu_count();
        let mut machine = Machine {
            now: 0,
            end: spec.duration_ns,
            fx: Effects::default(),
            rng: Rng::new(seed),
            exit_times: profile.service_time.exit.sampler(),
            guest_times: profile.service_time.guest.sampler(),
            design,
            profile: profile.clone(),
            spec: spec.clone(),
            net: Network::new(profile, &spec.group, traffic.pv_peer_on_wire),
            topology,
            workload,
            handlers,
            traffic,
            timer_threads: TimerThreads::new(vcpu_count),
            cores,
            vcpus,
            vms,
            // An entry per VF event queue (`VfEventQueue::irte_handle`).
            iommu: InterruptRemappingTable::new(index_u32(
                pairs.len() * crate::scenario::VF_MSIX_VECTORS as usize,
            )),
            pairs,
            counters: Counters::default(),
            checker: Checker::new(host.vms as usize, (host.vms * host.vcpus_per_vm) as usize),
            trace: trace.then(Trace::default),
        };
        machine.start();
        Ok(machine)
    }

    /// `vm`'s workload starts: its first events; then the timer thread on
    /// each queue-pair owner, when the workload or the group runs it.
    fn start_workload(&mut self, vm: usize, fx: &mut Effects) {
        let owners: Vec<usize> = self.topology.owners(vm).collect();
        self.with_workload(|workload, ctx| workload.start(vm, &owners, ctx, fx));
        if self.spec.group.with_timer || self.workload.runs_timer_thread() {
            for &owner in &owners {
                let deadline = self.timer_threads.arm_first_tick(owner, &mut self.rng);
                self.program_guest_timer(owner, deadline, fx);
            }
        }
    }

    /// The first events of the run; each step's effects take place before
    /// the next step.
    pub(super) fn start(&mut self) {
        let mut fx = std::mem::take(&mut self.fx);
        // Every VF's IRTE is valid from the start: routed as for a VM that
        // is not running until its vCPU is first scheduled in. Set-up work
        // is not charged.
        for vcpu in 0..self.vcpus.len() {
            self.retarget_vf(vcpu);
        }
        for core in 1..self.cores.len() {
            if let Some(&first) = self.cores[core].runqueue.first() {
                self.cores[core].current = Some(first);
                self.vcpus[first].state = VcpuState::Running;
                self.recheck_timer_ownership(core);
                self.schedule_in(first, &mut fx);
                self.enter_guest(core, &mut fx);
                if self.cores[core].runqueue.len() > 1 {
                    self.arm_slice(core, self.profile.host_ns.sched_quantum, &mut fx);
                }
                self.apply(&mut fx);
            }
        }
        for vm in 0..self.vms.len() {
            self.start_workload(vm, &mut fx);
            self.apply(&mut fx);
        }
        for vcpu in 0..self.vcpus.len() {
            self.start_housekeeping(vcpu, &mut fx);
        }
        self.start_host_ticks(&mut fx);
        self.apply(&mut fx);
        self.fx = fx;
    }
}
