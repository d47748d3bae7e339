//! What each design would do with the exits of a VM observed on a real
//! host (`dirq observe`): every exit is classed by its cause, and the
//! design's own table decides its fate with the same models the simulator
//! runs (the VMCS controls, IPI virtualization, the injection, signal,
//! timer and host-tick mechanisms): one source of truth.

use dirq_arch::exit_cause::{ExitCause, ExitClass, InterruptSource};
use dirq_arch::interrupt::TriggerMode;
use dirq_arch::ipi_virtualization::AvicIpi;
use dirq_arch::vmcs::MsrWriteAction;
use serde::{Deserialize, Serialize};

use crate::design::{
    msrs, Design, DesignKind, GuestTimer, HostTick, Injection, InjectionMode, IpiSender, IrteRule,
    VirtualSignal,
};

/// The designs a what-if compares with today's vanilla KVM.
pub const DESIGNS: [DesignKind; 6] = [
    DesignKind::Apicv,
    DesignKind::ApicvPi,
    DesignKind::ApicvPiIpiv,
    DesignKind::Avic,
    DesignKind::Eli,
    DesignKind::Did,
];

/// What the observer knows of the VM beyond each exit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmFacts {
    /// The VMM holds an assigned (VFIO) device.
    pub assigned_devices: bool,
}

/// Why a design's fate for an exit cannot be told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unknown {
    /// An EOI whose vector was not seen accepted, so its trigger mode
    /// (which the EOI-exit bitmap follows) is not known.
    EoiTrigger,
    /// An EOI or a host interrupt that may be an assigned device's or an
    /// emulated one's.
    AssignedOrEmulated,
    /// Whether the IPI's targets were running (AVIC exits for a sleeper).
    TargetRunning,
    /// An external-interrupt exit whose host vector the backend hides.
    HostVector,
    /// An MSR access KVM handed to the VMM: which MSR is not traced.
    MsrIndex,
}

impl Unknown {
    pub fn reason(self) -> &'static str {
        match self {
            Unknown::EoiTrigger => "the completed vector's trigger mode was not seen",
            Unknown::AssignedOrEmulated => {
                "the VM has an assigned device: an MSI may be that device's or an emulated one's"
            }
            Unknown::TargetRunning => "whether the IPI's target vCPU was running was not seen",
            Unknown::HostVector => {
                "the backend does not report an external-interrupt exit's host vector"
            }
            Unknown::MsrIndex => {
                "the MSR of an access KVM handed to the VMM is not traced (with a userspace \
                 irqchip, EOI and timer writes are such accesses)"
            }
        }
    }
}

/// What a design does with one exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fate {
    Removed,
    Stays,
    Undecided(Unknown),
}

impl Fate {
    fn of(exits: bool) -> Fate {
        if exits {
            Fate::Stays
        } else {
            Fate::Removed
        }
    }
}

/// The fate of an exit caused by `cause` under `design`.
pub fn fate(design: &Design, cause: &ExitCause, vm: VmFacts) -> Fate {
    let vmcs = design.vmcs.build();
    match *cause {
        ExitCause::EoiWrite { completes, trigger } => match vmcs.msr_write(msrs::EOI) {
            MsrWriteAction::Exit => Fate::Stays,
            // EOI virtualization exits only for vectors in the EOI-exit
            // bitmap: KVM sets it for level-triggered ones (SDM 29.1.3).
            MsrWriteAction::VirtualizedApicWrite => match trigger {
                Some(TriggerMode::Level) => Fate::Stays,
                Some(TriggerMode::Edge) => Fate::Removed,
                None => Fate::Undecided(Unknown::EoiTrigger),
            },
            MsrWriteAction::PassThrough => passed_through_eoi(design.injection, completes, vm),
        },
        ExitCause::TimerProgramming { msr } => {
            Fate::of(vmcs.msr_write(msr) == MsrWriteAction::Exit)
        }
        ExitCause::TimerExpiry => Fate::of(design.guest_timer == GuestTimer::HostHrtimer),
        ExitCause::IpiSend {
            icr,
            every_target_running,
        } => match (design.ipi_sender, every_target_running) {
            (IpiSender::Avic, None) if AvicIpi::of(icr, true) != AvicIpi::of(icr, false) => {
                Fate::Undecided(Unknown::TargetRunning)
            }
            (sender, running) => Fate::of(sender.send(&vmcs, icr, running.unwrap_or(true)).exits),
        },
        ExitCause::ApicAccess { msr, write: true } => {
            Fate::of(vmcs.msr_write(msr) == MsrWriteAction::Exit)
        }
        ExitCause::ApicAccess { msr, write: false } => Fate::of(vmcs.msr_read_exits(msr)),
        ExitCause::OtherMsr { msr, write: true } => {
            Fate::of(vmcs.msr_write(msr) == MsrWriteAction::Exit)
        }
        ExitCause::OtherMsr { msr, write: false } => Fate::of(vmcs.msr_read_exits(msr)),
        ExitCause::UntracedMsr { .. } => Fate::Undecided(Unknown::MsrIndex),
        // A kick only interrupts the guest where the virtual interrupt is
        // not posted or sent as a physical IPI with the guest's vector.
        ExitCause::InterruptDelivery => {
            Fate::of(design.virtual_signal == VirtualSignal::KickAndInject)
        }
        ExitCause::HostTimer => Fate::of(
            design.host_tick != HostTick::HousekeepingCore
                || design.guest_timer != GuestTimer::PassThrough,
        ),
        // Another device's interrupt exits under every design (as an NMI
        // under DID, a #NP under ELI); an assigned device's does not where
        // its IRTE posts it or sends it to the guest.
        ExitCause::HostDeviceInterrupt if !vm.assigned_devices => Fate::Stays,
        ExitCause::HostDeviceInterrupt => match design.vf_irte {
            IrteRule::ToHost => Fate::Stays,
            IrteRule::Posted | IrteRule::DirectOrNmi => {
                Fate::Undecided(Unknown::AssignedOrEmulated)
            }
        },
        ExitCause::HostIpi => Fate::Stays,
        ExitCause::ExternalInterrupt => Fate::Undecided(Unknown::HostVector),
        // Virtual-interrupt delivery and DID's self-IPI wait for the guest
        // to open its window without an exit (SDM 29.2.2).
        ExitCause::InterruptWindow => Fate::of(matches!(
            design.injection,
            Injection::Classic { .. } | Injection::ClassicUntracked
        )),
        ExitCause::Hlt => Fate::of(vmcs.hlt_exits()),
        ExitCause::PortIo { .. } => Fate::of(vmcs.io_exits()),
        ExitCause::Mmio { .. } => Fate::of(vmcs.ept_enabled()),
        ExitCause::Other => Fate::Stays,
    }
}

/// An EOI the MSR bitmap passes to the physical LAPIC: right only where
/// the physical LAPIC holds the interrupt in service. DID injects every
/// virtual interrupt as a self-IPI so it does; ELI traps EOIs again while
/// an injected (virtual) interrupt is in service, so only an assigned
/// device's EOI goes through.
fn passed_through_eoi(injection: Injection, completes: InterruptSource, vm: VmFacts) -> Fate {
    match injection {
        Injection::Classic {
            mode: Some(InjectionMode { traps_eoi: true }),
        } => match completes {
            InterruptSource::AssignedDevice => Fate::Removed,
            // Without an assigned device no interrupt is one.
            InterruptSource::Unknown if !vm.assigned_devices => Fate::Stays,
            InterruptSource::Unknown => Fate::Undecided(Unknown::AssignedOrEmulated),
            InterruptSource::EmulatedDevice | InterruptSource::Timer | InterruptSource::Ipi => {
                Fate::Stays
            }
        },
        _ => Fate::Removed,
    }
}

/// One observed cause's exits and what they cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObservedExits {
    pub cause: ExitCause,
    pub count: u64,
    /// Exits of `count` whose time was traced, and that time.
    pub timed: u64,
    pub timed_ns: u64,
    /// Exits of `count` that went on to the VMM.
    pub to_userspace: u64,
}

/// What an exit costs on this host where its own time was not traced:
/// the probe's floors.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExitCosts {
    /// An exit KVM handles itself.
    pub kernel_ns: f64,
    /// An exit that goes on to the VMM.
    pub userspace_ns: f64,
}

/// One design's verdict on an observed VM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Saving {
    pub design: DesignKind,
    pub removed_exits: u64,
    pub removed_per_s: f64,
    /// CPU time the removed exits took, per second of observation: what
    /// the design gives back to the VM (measured where traced, else from
    /// the probe's floors).
    pub cpu_us_per_s: f64,
    /// Of that, the part from the probe's floors (not traced).
    pub cpu_us_per_s_from_floors: f64,
    pub kept_exits: u64,
    /// Exits per class whose fate could not be told, and why.
    pub undecided: Vec<UndecidedClass>,
    /// Removed exits per class.
    pub removed_by_class: Vec<(ExitClass, u64)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndecidedClass {
    pub class: ExitClass,
    pub exits: u64,
    pub why: Unknown,
}

/// Every design's saving for the observed exits over `seconds`.
pub fn savings(
    exits: &[ObservedExits],
    vm: VmFacts,
    costs: Option<ExitCosts>,
    seconds: f64,
) -> Vec<Saving> {
    DESIGNS
        .iter()
        .map(|&kind| saving(kind.table(), exits, vm, costs, seconds))
        .collect()
}

fn saving(
    design: &Design,
    exits: &[ObservedExits],
    vm: VmFacts,
    costs: Option<ExitCosts>,
    seconds: f64,
) -> Saving {
    let per_second = |value: f64| if seconds > 0.0 { value / seconds } else { 0.0 };
    let mut removed = 0;
    let mut kept = 0;
    let mut measured_ns = 0.0;
    let mut floor_ns = 0.0;
    let mut removed_by_class: Vec<(ExitClass, u64)> = Vec::new();
    let mut undecided: Vec<UndecidedClass> = Vec::new();
    for observed in exits {
        let class = observed.cause.class();
        match fate(design, &observed.cause, vm) {
            Fate::Removed => {
                removed += observed.count;
                measured_ns += dirq_stats::f64_of(observed.timed_ns);
                let untimed = observed.count.saturating_sub(observed.timed);
                if let Some(costs) = costs {
                    // Untimed exits: those that reached the VMM cost its
                    // floor, the rest KVM's.
                    let to_vmm = observed.to_userspace.min(untimed);
                    floor_ns += dirq_stats::f64_of(to_vmm) * costs.userspace_ns
                        + dirq_stats::f64_of(untimed - to_vmm) * costs.kernel_ns;
                }
                match removed_by_class.iter_mut().find(|(c, _)| *c == class) {
                    Some((_, count)) => *count += observed.count,
                    None => removed_by_class.push((class, observed.count)),
                }
            }
            Fate::Stays => kept += observed.count,
            Fate::Undecided(why) => {
                match undecided
                    .iter_mut()
                    .find(|u| u.class == class && u.why == why)
                {
                    Some(entry) => entry.exits += observed.count,
                    None => undecided.push(UndecidedClass {
                        class,
                        exits: observed.count,
                        why,
                    }),
                }
            }
        }
    }
    removed_by_class.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    undecided.sort_by(|a, b| b.exits.cmp(&a.exits).then(a.class.cmp(&b.class)));
    Saving {
        design: design.kind,
        removed_exits: removed,
        removed_per_s: per_second(dirq_stats::f64_of(removed)),
        cpu_us_per_s: per_second(measured_ns + floor_ns) / 1e3,
        cpu_us_per_s_from_floors: per_second(floor_ns) / 1e3,
        kept_exits: kept,
        undecided,
        removed_by_class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dirq_arch::interrupt::{DeliveryMode, Destination};
    use dirq_arch::lapic::{x2apic_icr, x2apic_msr, APIC_TPR, MSR_IA32_TSC_DEADLINE};

    const NO_VFIO: VmFacts = VmFacts {
        assigned_devices: false,
    };

    fn fates(cause: ExitCause) -> Vec<(DesignKind, Fate)> {
        DESIGNS
            .iter()
            .chain(&[DesignKind::Vanilla])
            .map(|&kind| (kind, fate(kind.table(), &cause, NO_VFIO)))
            .collect()
    }

    fn removed_by(cause: ExitCause) -> Vec<DesignKind> {
        fates(cause)
            .into_iter()
            .filter(|(_, fate)| *fate == Fate::Removed)
            .map(|(kind, _)| kind)
            .collect()
    }

    use DesignKind::*;

    #[test]
    fn vanilla_removes_nothing() {
        for cause in [
            ExitCause::EoiWrite {
                completes: InterruptSource::EmulatedDevice,
                trigger: Some(TriggerMode::Edge),
            },
            ExitCause::InterruptWindow,
            ExitCause::InterruptDelivery,
            ExitCause::TimerProgramming { msr: msrs::TMICT },
            ExitCause::IpiSend {
                icr: 0xFB,
                every_target_running: Some(true),
            },
        ] {
            assert_eq!(
                fate(Vanilla.table(), &cause, NO_VFIO),
                Fate::Stays,
                "{cause:?}"
            );
        }
    }

    #[test]
    fn an_edge_eoi_is_removed_by_apic_virtualization_and_did_and_a_level_one_only_by_did() {
        let edge = ExitCause::EoiWrite {
            completes: InterruptSource::EmulatedDevice,
            trigger: Some(TriggerMode::Edge),
        };
        assert_eq!(
            removed_by(edge),
            vec![Apicv, ApicvPi, ApicvPiIpiv, Avic, Did]
        );
        let level = ExitCause::EoiWrite {
            completes: InterruptSource::EmulatedDevice,
            trigger: Some(TriggerMode::Level),
        };
        assert_eq!(removed_by(level), vec![Did]);
        let unseen = ExitCause::EoiWrite {
            completes: InterruptSource::Unknown,
            trigger: None,
        };
        assert_eq!(
            fate(Apicv.table(), &unseen, NO_VFIO),
            Fate::Undecided(Unknown::EoiTrigger)
        );
    }

    #[test]
    fn eli_passes_only_an_assigned_devices_eoi() {
        let eoi = |completes| ExitCause::EoiWrite {
            completes,
            trigger: Some(TriggerMode::Edge),
        };
        let eli = Eli.table();
        assert_eq!(
            fate(eli, &eoi(InterruptSource::AssignedDevice), NO_VFIO),
            Fate::Removed
        );
        assert_eq!(
            fate(eli, &eoi(InterruptSource::Timer), NO_VFIO),
            Fate::Stays
        );
        assert_eq!(
            fate(eli, &eoi(InterruptSource::Unknown), NO_VFIO),
            Fate::Stays,
            "no assigned device"
        );
        let vfio = VmFacts {
            assigned_devices: true,
        };
        assert_eq!(
            fate(eli, &eoi(InterruptSource::Unknown), vfio),
            Fate::Undecided(Unknown::AssignedOrEmulated)
        );
    }

    #[test]
    fn timer_writes_follow_each_designs_msr_bitmap() {
        assert_eq!(
            removed_by(ExitCause::TimerProgramming { msr: msrs::TMICT }),
            vec![Did]
        );
        // DID passes TMICT through, not the TSC-deadline MSR.
        assert!(removed_by(ExitCause::TimerProgramming {
            msr: MSR_IA32_TSC_DEADLINE
        })
        .is_empty());
        assert_eq!(removed_by(ExitCause::TimerExpiry), vec![Did]);
        assert_eq!(removed_by(ExitCause::HostTimer), vec![Did]);
    }

    #[test]
    fn ipis_are_sent_without_an_exit_by_ipiv_for_unicasts_and_by_avic_to_running_targets() {
        let unicast = x2apic_icr(0xFB, DeliveryMode::Fixed, Destination::Physical(1));
        let send = |running| ExitCause::IpiSend {
            icr: unicast,
            every_target_running: running,
        };
        assert_eq!(removed_by(send(Some(true))), vec![ApicvPiIpiv, Avic]);
        assert_eq!(removed_by(send(Some(false))), vec![ApicvPiIpiv]);
        assert_eq!(
            fate(Avic.table(), &send(None), NO_VFIO),
            Fate::Undecided(Unknown::TargetRunning)
        );
        let broadcast = x2apic_icr(
            0xFB,
            DeliveryMode::Fixed,
            Destination::AllExcludingSelf { sender: 0 },
        );
        let all = ExitCause::IpiSend {
            icr: broadcast,
            every_target_running: Some(true),
        };
        assert_eq!(removed_by(all), vec![Avic]);
        // An INIT is no message AVIC sends: it exits whoever runs.
        let init = x2apic_icr(0, DeliveryMode::Init, Destination::Physical(1));
        let init = ExitCause::IpiSend {
            icr: init,
            every_target_running: None,
        };
        assert_eq!(fate(Avic.table(), &init, NO_VFIO), Fate::Stays);
    }

    #[test]
    fn kicks_and_windows_go_where_interrupts_are_posted_or_sent_directly() {
        assert_eq!(
            removed_by(ExitCause::InterruptDelivery),
            vec![Apicv, ApicvPi, ApicvPiIpiv, Avic, Did]
        );
        assert_eq!(
            removed_by(ExitCause::InterruptWindow),
            vec![Apicv, ApicvPi, ApicvPiIpiv, Avic, Did]
        );
    }

    #[test]
    fn apic_reads_and_tpr_writes_are_virtualized_by_the_apic_virtualizing_designs() {
        let tpr = x2apic_msr(APIC_TPR);
        assert_eq!(
            removed_by(ExitCause::ApicAccess {
                msr: tpr,
                write: true
            }),
            vec![Apicv, ApicvPi, ApicvPiIpiv, Avic]
        );
        assert_eq!(
            removed_by(ExitCause::ApicAccess {
                msr: tpr,
                write: false
            }),
            vec![Apicv, ApicvPi, ApicvPiIpiv, Avic]
        );
        assert!(removed_by(ExitCause::OtherMsr {
            msr: 0x1B,
            write: false
        })
        .is_empty());
    }

    #[test]
    fn a_host_devices_interrupt_is_undecided_only_for_a_vm_with_an_assigned_device() {
        assert!(removed_by(ExitCause::HostDeviceInterrupt).is_empty());
        let vfio = VmFacts {
            assigned_devices: true,
        };
        assert_eq!(
            fate(Vanilla.table(), &ExitCause::HostDeviceInterrupt, vfio),
            Fate::Stays
        );
        assert_eq!(
            fate(Apicv.table(), &ExitCause::HostDeviceInterrupt, vfio),
            Fate::Stays
        );
        assert_eq!(
            fate(Did.table(), &ExitCause::HostDeviceInterrupt, vfio),
            Fate::Undecided(Unknown::AssignedOrEmulated)
        );
        assert_eq!(
            fate(Did.table(), &ExitCause::ExternalInterrupt, NO_VFIO),
            Fate::Undecided(Unknown::HostVector)
        );
    }

    #[test]
    fn savings_charge_measured_time_first_and_floors_for_the_rest() {
        let exits = [
            ObservedExits {
                cause: ExitCause::EoiWrite {
                    completes: InterruptSource::EmulatedDevice,
                    trigger: Some(TriggerMode::Edge),
                },
                count: 1_000,
                timed: 400,
                timed_ns: 400_000,
                to_userspace: 100,
            },
            ObservedExits {
                cause: ExitCause::PortIo {
                    port: 0xF4,
                    write: true,
                },
                count: 50,
                timed: 0,
                timed_ns: 0,
                to_userspace: 50,
            },
            ObservedExits {
                cause: ExitCause::ExternalInterrupt,
                count: 7,
                timed: 0,
                timed_ns: 0,
                to_userspace: 0,
            },
        ];
        let costs = ExitCosts {
            kernel_ns: 2_000.0,
            userspace_ns: 30_000.0,
        };
        let all = savings(&exits, NO_VFIO, Some(costs), 2.0);
        let apicv = all.iter().find(|s| s.design == Apicv).unwrap();
        assert_eq!((apicv.removed_exits, apicv.kept_exits), (1_000, 50));
        // 400 us traced + 100 untimed to the VMM x 30 us + 500 x 2 us, over 2 s.
        assert_eq!(apicv.cpu_us_per_s, (400.0 + 3_000.0 + 1_000.0) / 2.0);
        assert_eq!(apicv.cpu_us_per_s_from_floors, 4_000.0 / 2.0);
        assert_eq!(apicv.removed_per_s, 500.0);
        assert_eq!(
            apicv.undecided,
            vec![UndecidedClass {
                class: ExitClass::ExternalInterrupt,
                exits: 7,
                why: Unknown::HostVector
            }]
        );
        let without_costs = savings(&exits, NO_VFIO, None, 2.0);
        assert_eq!(
            without_costs[0].cpu_us_per_s, 200.0,
            "the traced time alone"
        );
    }
}
