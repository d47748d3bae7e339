//! Hardware posting (docs/mechanisms.md section 3b): the IOMMU posting an
//! assigned device's interrupt through a posted IRTE, a CPU posting a
//! guest's IPI (IPIv, AVIC), the host handlers that wake a vCPU a post
//! found asleep, and the guest's ICR write that decides which path an IPI
//! takes. What each post does is the design's `Posting`; whether an ICR
//! write exits is its `IpiSender`.

use super::{Hypervisor, Mode, VcpuState};
use crate::design::mechanism::posting::{PostSignal, PostSource, PostTarget};
use crate::machine::effects::{Effect, Effects};
use crate::machine::ledger::Ledger;
use crate::machine::platform::Platform;
use crate::machine::{
    GA_LOG_VECTOR, HOUSEKEEPING_CORE, POSTED_NOTIFICATION_VECTOR, POSTED_WAKEUP_VECTOR,
};

impl Hypervisor {
    /// Whether `vcpu` is its core's current vCPU and runnable (AVIC's
    /// IsRunning; under VT-d, SN clear and NV the notification vector).
    pub(super) fn is_running(&self, vcpu: usize) -> bool {
        let v = &self.vcpus[vcpu];
        self.cores[v.home_core].current == Some(vcpu) && v.state == VcpuState::Running
    }

    /// Hardware posts `vector` for `vcpu`.
    pub(in crate::machine) fn hardware_post(
        &mut self,
        vcpu: usize,
        vector: u8,
        source: PostSource,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let core = self.vcpus[vcpu].home_core;
        let running = self.is_running(vcpu);
        let target = PostTarget {
            running,
            in_guest_mode: running && self.cores[core].mode == Mode::Guest,
        };
        let pid = &mut self.vcpus[vcpu].hw.pid;
        let post = self.design.posting.post(pid, vector, target, source);
        if post.merged {
            ledger.merged(self.vcpus[vcpu].vm, vector);
        }
        match post.signal {
            PostSignal::Recorded => {}
            PostSignal::Suppressed => ledger.checker.posted_suppressed(vcpu, vector),
            // NDST is the vCPU's home core: vCPUs are pinned.
            PostSignal::Notify(vector) => fx.push(Effect::DeliverPhysical { core, vector }),
            PostSignal::GaLog => fx.push(Effect::DeliverPhysical {
                core: HOUSEKEEPING_CORE,
                vector: GA_LOG_VECTOR,
            }),
            PostSignal::WakeBySender => fx.push(Effect::Wake(vcpu)),
        }
    }

    /// The host's handler for the wake-up vector (on `Some(core)`: the
    /// vCPUs that blocked there) or the GA log interrupt (`None`: any
    /// vCPU): each blocked vCPU with a posted request wakes.
    pub(super) fn wake_posted_sleepers(&self, core: Option<usize>, fx: &mut Effects) {
        for vcpu in 0..self.vcpus.len() {
            let v = &self.vcpus[vcpu];
            let here = core.is_none_or(|core| v.home_core == core);
            if here && v.state == VcpuState::Halted && !v.hw.pid.pir.is_empty() {
                fx.push(Effect::Wake(vcpu));
            }
        }
    }

    /// The vCPU blocks: the checker notes it, and under VT-d posting its
    /// descriptor now notifies with the wake-up vector.
    pub(super) fn vcpu_blocked(&mut self, vcpu: usize, ledger: &mut Ledger) {
        ledger.checker.vcpu_blocked(vcpu);
        let pid = &mut self.vcpus[vcpu].hw.pid;
        self.design.posting.block(pid, POSTED_WAKEUP_VECTOR);
    }

    /// The vCPU woke: the checker notes it, and its descriptor notifies
    /// with the notification vector again.
    pub(super) fn vcpu_woken(&mut self, vcpu: usize, ledger: &mut Ledger) {
        ledger.checker.vcpu_woken(vcpu);
        let current = self.cores[self.vcpus[vcpu].home_core].current == Some(vcpu);
        let pid = &mut self.vcpus[vcpu].hw.pid;
        self.design
            .posting
            .unblock(pid, POSTED_NOTIFICATION_VECTOR, current);
    }

    /// End of run, hardware posting designs: a blocked vCPU holding a
    /// posted request with no wake-up under way was never woken for it.
    pub(in crate::machine) fn count_unwoken_sleepers(
        &self,
        platform: &Platform,
        ledger: &mut Ledger,
    ) {
        if !self.design.posting.hardware_wakes() {
            return;
        }
        let housekeeping = &self.cores[HOUSEKEEPING_CORE];
        let ga_log_under_way = platform
            .lapic(HOUSEKEEPING_CORE)
            .irr()
            .contains(GA_LOG_VECTOR)
            || housekeeping.mode == Mode::Host;
        for vcpu in 0..self.vcpus.len() {
            let v = &self.vcpus[vcpu];
            let home = &self.cores[v.home_core];
            let wakeup_under_way = platform
                .lapic(v.home_core)
                .irr()
                .contains(POSTED_WAKEUP_VECTOR)
                || home.mode == Mode::Host;
            if v.state == VcpuState::Halted
                && !v.hw.pid.pir.is_empty()
                && !wakeup_under_way
                && !ga_log_under_way
            {
                ledger.checker.wakeup_lost();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::design::DesignKind;
    use crate::machine::fixture::{listed, Host, Setting};
    use crate::machine::platform::VfVector;
    use crate::machine::GUEST_VF_VECTOR;
    use crate::metrics::{ExitReason, Invariant};

    const VF_POST: Effect = Effect::Post {
        vcpu: 0,
        vector: GUEST_VF_VECTOR,
        source: PostSource::Iommu,
    };

    /// vCPU 0 halted by an exiting HLT, its core asleep.
    fn blocked(design: DesignKind) -> Host {
        let mut host = Setting::single(design).host();
        host.call(1, |hv, lapic, ledger, _, fx| {
            hv.guest_halt(0, lapic, ledger, fx)
        });
        host.exits(0, ExitReason::Hlt);
        let (hypervisor, platform, ledger) =
            (&mut host.hypervisor, &mut host.platform, &mut host.ledger);
        listed(|fx| hypervisor.finish_host_work(1, 0, 0, platform, ledger, fx));
        assert!(host.hypervisor.halted(0));
        host
    }

    fn post(host: &mut Host) -> Vec<Effect> {
        let (platform, ledger) = (&mut host.platform, &mut host.ledger);
        let fx = listed(|fx| platform.fire_vf_msi(0, VfVector::Rx, 0, ledger, fx));
        assert_eq!(fx, [VF_POST]);
        let Effect::Post {
            vcpu,
            vector,
            source,
        } = VF_POST
        else {
            unreachable!()
        };
        let (hypervisor, ledger) = (&mut host.hypervisor, &mut host.ledger);
        listed(|fx| hypervisor.hardware_post(vcpu, vector, source, ledger, fx))
    }

    #[test]
    fn a_posted_irte_notifies_a_running_vcpu_without_a_host_vector() {
        let mut host = Setting::single(DesignKind::ApicvPi).host();
        let vector = POSTED_NOTIFICATION_VECTOR;
        assert_eq!(
            post(&mut host),
            [Effect::DeliverPhysical { core: 1, vector }]
        );
    }

    #[test]
    fn a_post_to_a_blocked_vcpu_sends_the_wakeup_vector_whose_handler_wakes_it() {
        let mut host = blocked(DesignKind::ApicvPi);
        let vector = POSTED_WAKEUP_VECTOR;
        assert_eq!(
            post(&mut host),
            [Effect::DeliverPhysical { core: 1, vector }]
        );
        let ((), fx) = host.call(1, |hv, _, ledger, now, fx| {
            hv.host_vector(1, vector, now, ledger, fx)
        });
        assert_eq!(fx, [Effect::Wake(0)]);
        host.call(1, |hv, _, ledger, now, fx| hv.wake(0, now, ledger, fx));
        assert!(!host.hypervisor.halted(0));
        let (hypervisor, platform, ledger) = (&host.hypervisor, &host.platform, &mut host.ledger);
        hypervisor.count_unwoken_sleepers(platform, ledger);
        assert_eq!(ledger.checker.violations_of(Invariant::Lost), 0);
    }

    #[test]
    fn avic_logs_a_device_post_for_a_sleeper_and_the_ga_log_handler_wakes_it() {
        let mut host = blocked(DesignKind::Avic);
        let ga_log = Effect::DeliverPhysical {
            core: HOUSEKEEPING_CORE,
            vector: GA_LOG_VECTOR,
        };
        assert_eq!(post(&mut host), [ga_log]);
        let ((), fx) = host.call(HOUSEKEEPING_CORE, |hv, _, ledger, now, fx| {
            hv.host_vector(HOUSEKEEPING_CORE, GA_LOG_VECTOR, now, ledger, fx)
        });
        assert_eq!(fx, [Effect::Wake(0)]);
    }
}
