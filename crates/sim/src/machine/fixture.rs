//! Test fixtures: a run's setting, each part of the machine built alone
//! from it, and the effects a call lists.
//!
//! A part's test builds the part (the hypervisor with the platform it
//! drives, [`Host`]; the guest with [`Facts`] for its surroundings), calls
//! one of its methods with the inputs the machine would hand it and
//! asserts the effects it lists. A machine's test builds the machine
//! ([`Setting::machine`]) and goes through its events and results.

use super::build::enabled_lapic;
use super::effects::{Effect, Effects};
use super::guest::{self, Guest, Surroundings};
use super::hypervisor::Hypervisor;
use super::ledger::Ledger;
use super::platform::Platform;
use super::topology::Topology;
use super::workload::{self, testing::Facts, Workload};
use super::{index_u32, Event, Machine, Ring};
use crate::design::DesignKind;
use crate::metrics::ExitReason;
use crate::profile::CostProfile;
use crate::rng::Rng;
use crate::scenario::{HostShape, NicCoalescing, RunGroup, RunSpec, WorkloadKind};
use dirq_arch::lapic::Lapic;

/// A run's spec and profile, and the topology they make.
pub(super) struct Setting {
    pub(super) spec: RunSpec,
    pub(super) profile: CostProfile,
    pub(super) topology: Topology,
}

impl Setting {
    /// `spec` on the did-2015 profile, every cost at its mean so that a
    /// test can name the time it expects.
    pub(super) fn of(spec: RunSpec) -> Setting {
        Setting::with_profile(spec, |_| {})
    }

    /// [`Setting::of`], the profile changed by `adapt`.
    pub(super) fn with_profile(spec: RunSpec, adapt: impl FnOnce(&mut CostProfile)) -> Setting {
        let mut profile = CostProfile::did_2015();
        profile.service_time = crate::service::ServiceTimes::default();
        adapt(&mut profile);
        let topology = Topology::new(&spec.group, profile.numa_ns.clone());
        Setting {
            spec,
            profile,
            topology,
        }
    }

    /// `workload` under `design` on a group changed by `adapt`, 10 ms.
    pub(super) fn group(
        design: DesignKind,
        workload: WorkloadKind,
        adapt: impl FnOnce(&mut RunGroup),
    ) -> Setting {
        let mut group = RunGroup::new(workload, vec![design]);
        adapt(&mut group);
        Setting::of(RunSpec {
            design,
            workload,
            rate_pps: None,
            group,
            nic: NicCoalescing::FITTED,
            duration_ns: 10_000_000,
        })
    }

    /// One VM with one vCPU on core 1, receiving UDP (no packets).
    pub(super) fn single(design: DesignKind) -> Setting {
        Setting::group(design, WorkloadKind::UdpRx, |_| {})
    }

    /// One VM of `vcpus` vCPUs, each on its own core.
    pub(super) fn one_vm(design: DesignKind, workload: WorkloadKind, vcpus: u32) -> Setting {
        Setting::group(design, workload, |group| {
            group.host = HostShape {
                cores: vcpus + 1,
                vms: 1,
                vcpus_per_vm: vcpus,
            };
        })
    }

    fn workload(&self) -> Box<dyn Workload> {
        workload::for_run(&self.spec, &self.profile, &self.topology)
    }

    /// The platform alone: its LAPICs enabled, its IRTEs not yet written.
    pub(super) fn platform(&self) -> Platform {
        let lapics = (0..self.spec.group.host.cores)
            .map(|core| enabled_lapic(core).expect("a LAPIC"))
            .collect();
        let traffic = self.workload().traffic();
        Platform::new(&self.spec, &self.profile, &self.topology, traffic, lapics)
    }

    /// The hypervisor alone (`platform` tells it the VFs' event queues).
    pub(super) fn hypervisor(&self, platform: &Platform) -> Hypervisor {
        let topology = &self.topology;
        let vlapics = (0..topology.vcpu_count())
            .map(|vcpu| {
                let id = index_u32(vcpu - topology.lead(topology.vm_of(vcpu)));
                enabled_lapic(id).expect("a LAPIC")
            })
            .collect();
        Hypervisor::new(&self.spec, &self.profile, topology, vlapics, platform)
    }

    /// The hypervisor on its platform, started as a run starts: the VFs'
    /// IRTEs written, every core's first vCPU scheduled in and in guest
    /// mode at time 0.
    pub(super) fn host(&self) -> Host {
        let mut platform = self.platform();
        let mut hypervisor = self.hypervisor(&platform);
        let mut ledger = Ledger::new(&self.topology, false);
        hypervisor.route_vfs(platform.iommu());
        for core in 1..self.spec.group.host.cores as usize {
            let (lapic, iommu) = platform.lapic_and_iommu(core);
            let mut fx = Effects::default();
            if hypervisor.start_core(core, lapic, iommu, &mut ledger, &mut fx) {
                hypervisor.enter_guest(core, 0, &mut ledger);
            }
        }
        Host {
            now: 0,
            platform,
            hypervisor,
            ledger,
            rng: Rng::new(1),
        }
    }

    /// The guest alone, with its workload.
    pub(super) fn guest(&self) -> Guest {
        Guest::new(&self.spec, &self.profile, &self.topology, self.workload())
    }

    /// The whole machine, its first events scheduled.
    pub(super) fn machine(&self) -> Machine {
        match Machine::new(&self.spec, &self.profile, 1, false) {
            Ok(machine) => machine,
            Err(err) => panic!("fixture machine: {err}"),
        }
    }
}

/// The hypervisor and the platform it drives, with the inputs the
/// machine hands them.
pub(super) struct Host {
    pub(super) now: u64,
    pub(super) platform: Platform,
    pub(super) hypervisor: Hypervisor,
    pub(super) ledger: Ledger,
    pub(super) rng: Rng,
}

impl Host {
    /// Calls `call` on the hypervisor with `core`'s LAPIC, the ledger and
    /// the time, as the machine would: what it returned and the effects
    /// it listed.
    pub(super) fn call<R>(
        &mut self,
        core: usize,
        call: impl FnOnce(&mut Hypervisor, &mut Lapic, &mut Ledger, u64, &mut Effects) -> R,
    ) -> (R, Vec<Effect>) {
        let lapic = self.platform.lapic_mut(core);
        let (hypervisor, ledger, now) = (&mut self.hypervisor, &mut self.ledger, self.now);
        called(|fx| call(hypervisor, lapic, ledger, now, fx))
    }

    /// `vector` arrives at `core`'s LAPIC.
    pub(super) fn raise(&mut self, core: usize, vector: u8) {
        self.platform.deliver_physical(core, vector);
    }

    /// The exit `vcpu` takes for `reason`, at its cost.
    pub(super) fn exit_of(&self, vcpu: usize, reason: ExitReason) -> Effect {
        let exit = listed(|fx| self.hypervisor.list_exit(vcpu, reason, fx));
        exit[0]
    }

    /// `vcpu` exits for `reason` (its mean cost), as the machine carries
    /// an exit out: the host then works on its core.
    pub(super) fn exits(&mut self, vcpu: usize, reason: ExitReason) -> Vec<Effect> {
        let Effect::Exit { service_ns, .. } = self.exit_of(vcpu, reason) else {
            unreachable!("list_exit lists an exit")
        };
        let (hypervisor, ledger, rng, now) = (
            &mut self.hypervisor,
            &mut self.ledger,
            &mut self.rng,
            self.now,
        );
        listed(|fx| hypervisor.exit(vcpu, reason, service_ns, now, rng, ledger, fx))
    }
}

/// What the guest is handed, owned by the test: the time, the run's
/// ledger and random stream, and [`Facts`] for its surroundings.
pub(super) struct GuestBench {
    pub(super) now: u64,
    pub(super) rng: Rng,
    pub(super) ledger: Ledger,
    pub(super) topology: Topology,
    pub(super) around: Facts,
}

impl GuestBench {
    /// The bench of `setting`'s guest, every vCPU in guest mode.
    pub(super) fn new(setting: &Setting) -> GuestBench {
        let topology = setting.topology.clone();
        let around = Facts {
            in_guest: (0..topology.vcpu_count()).collect(),
            ..Facts::default()
        };
        GuestBench {
            now: 0,
            rng: Rng::new(1),
            ledger: Ledger::new(&topology, false),
            topology,
            around,
        }
    }

    /// Calls `call` on `guest` with the inputs and an effect list of its
    /// own: what it returned and the effects it listed.
    pub(super) fn call<R>(
        &mut self,
        guest: &mut Guest,
        call: impl FnOnce(&mut Guest, &mut guest::Inputs<Facts>, &mut Effects) -> R,
    ) -> (R, Vec<Effect>) {
        let mut inputs = guest::Inputs {
            now: self.now,
            rng: &mut self.rng,
            ledger: &mut self.ledger,
            topology: &self.topology,
            around: &mut self.around,
        };
        called(|fx| call(guest, &mut inputs, fx))
    }

    /// The effects `call` lists.
    pub(super) fn listed<R>(
        &mut self,
        guest: &mut Guest,
        call: impl FnOnce(&mut Guest, &mut guest::Inputs<Facts>, &mut Effects) -> R,
    ) -> Vec<Effect> {
        self.call(guest, call).1
    }
}

/// The guest's surroundings as a test sets them: which vCPUs run and
/// what the rings hold; the driver's masks are kept in `masked`.
impl Surroundings for Facts {
    fn in_guest(&self, vcpu: usize) -> bool {
        self.in_guest.contains(&vcpu)
    }

    fn ring_level(&self, pair: usize, ring: Ring) -> u32 {
        self.rings.get(&(pair, ring)).copied().unwrap_or(0)
    }

    fn mask(&mut self, pair: usize, ring: Ring) {
        self.masked.insert((pair, ring));
    }

    fn unmask(&mut self, pair: usize, ring: Ring) {
        self.masked.remove(&(pair, ring));
    }

    fn take(&mut self, pair: usize, ring: Ring, frames: u32) -> u32 {
        let level = self.rings.entry((pair, ring)).or_default();
        *level = level.saturating_sub(frames);
        *level
    }
}

/// What `call` returned and the effects it listed on a list of its own,
/// none applied: for a part tested alone.
pub(super) fn called<R>(call: impl FnOnce(&mut Effects) -> R) -> (R, Vec<Effect>) {
    let mut fx = Effects {
        listed_from: Effects::LIST_ALL,
        ..Effects::default()
    };
    let result = call(&mut fx);
    (result, fx.stack)
}

/// The effects `call` lists (what it returns besides is dropped).
pub(super) fn listed<R>(call: impl FnOnce(&mut Effects) -> R) -> Vec<Effect> {
    called(call).1
}

/// `event` scheduled at `at`, as a part lists it.
pub(super) fn scheduled(at: u64, event: impl Into<Event>) -> Effect {
    Effect::Schedule {
        at,
        event: event.into(),
    }
}
