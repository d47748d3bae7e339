//! Hardware posting (docs/mechanisms.md section 3b): the IOMMU posting an
//! assigned device's interrupt through a posted IRTE, a CPU posting a
//! guest's IPI (IPIv, AVIC), the host handlers that wake a vCPU a post
//! found asleep, and the guest's ICR write that decides which path an IPI
//! takes. What each post does is the design's `Posting`; whether an ICR
//! write exits is its `IpiSender`.

use super::*;
use crate::design::mechanism::posting::{PostSignal, PostSource, PostTarget};

impl Machine {
    /// Whether `vcpu` is its core's current vCPU and runnable (AVIC's
    /// IsRunning; under VT-d, SN clear and NV the notification vector).
    pub(super) fn is_running(&self, vcpu: usize) -> bool {
        let v = &self.vcpus[vcpu];
        self.cores[v.home_core].current == Some(vcpu) && v.state == VcpuState::Running
    }

    /// Hardware posts `vector` for `vcpu`.
    pub(super) fn hardware_post(
        &mut self,
        vcpu: usize,
        vector: u8,
        source: PostSource,
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
            self.merged(self.vcpus[vcpu].vm, vector);
        }
        match post.signal {
            PostSignal::Recorded => {}
            PostSignal::Suppressed => self.checker.posted_suppressed(vcpu, vector),
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
    pub(super) fn wake_posted_sleepers(&mut self, core: Option<usize>, fx: &mut Effects) {
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
    pub(super) fn vcpu_blocked(&mut self, vcpu: usize) {
        self.checker.vcpu_blocked(vcpu);
        let pid = &mut self.vcpus[vcpu].hw.pid;
        self.design.posting.block(pid, POSTED_WAKEUP_VECTOR);
    }

    /// The vCPU woke: the checker notes it, and its descriptor notifies
    /// with the notification vector again.
    pub(super) fn vcpu_woken(&mut self, vcpu: usize) {
        self.checker.vcpu_woken(vcpu);
        let current = self.cores[self.vcpus[vcpu].home_core].current == Some(vcpu);
        let pid = &mut self.vcpus[vcpu].hw.pid;
        self.design
            .posting
            .unblock(pid, POSTED_NOTIFICATION_VECTOR, current);
    }

    /// End of run, hardware posting designs: a blocked vCPU holding a
    /// posted request with no wake-up under way was never woken for it.
    pub(super) fn count_unwoken_sleepers(&mut self) {
        if !self.design.posting.hardware_wakes() {
            return;
        }
        let housekeeping = &self.cores[HOUSEKEEPING_CORE];
        let ga_log_under_way =
            housekeeping.lapic.irr().contains(GA_LOG_VECTOR) || housekeeping.mode == Mode::Host;
        for vcpu in 0..self.vcpus.len() {
            let v = &self.vcpus[vcpu];
            let home = &self.cores[v.home_core];
            let wakeup_under_way =
                home.lapic.irr().contains(POSTED_WAKEUP_VECTOR) || home.mode == Mode::Host;
            if v.state == VcpuState::Halted
                && !v.hw.pid.pir.is_empty()
                && !wakeup_under_way
                && !ga_log_under_way
            {
                self.checker.wakeup_lost();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{listed, one_vm, running, single};
    use super::*;
    use crate::design::DesignKind;
    use crate::metrics::Invariant;
    use crate::scenario::IpiMode;

    /// vCPU 0 blocked in HLT on core 1, its core asleep.
    fn blocked(design: DesignKind) -> Machine {
        let mut m = single(design);
        running(&mut m, 0);
        m.halt(0);
        m.cores[1].mode = Mode::Idle;
        m
    }

    #[test]
    fn a_posted_irte_notifies_a_running_vcpu_without_a_host_vector() {
        let mut m = single(DesignKind::ApicvPi);
        running(&mut m, 0);
        let fx = listed(&mut m, |m, fx| m.fire_vf_msi(0, VfVector::Rx, fx));
        let notification = Effect::DeliverPhysical {
            core: 1,
            vector: POSTED_NOTIFICATION_VECTOR,
        };
        assert_eq!(fx, [notification]);
        assert!(m.vcpus[0].hw.pid.pir.contains(GUEST_VF_VECTOR));
    }

    #[test]
    fn a_post_to_a_blocked_vcpu_sends_the_wakeup_vector_whose_handler_wakes_it() {
        let mut m = blocked(DesignKind::ApicvPi);
        assert_eq!(m.vcpus[0].state, VcpuState::Halted);
        let fx = listed(&mut m, |m, fx| m.fire_vf_msi(0, VfVector::Rx, fx));
        let wakeup = Effect::DeliverPhysical {
            core: 1,
            vector: POSTED_WAKEUP_VECTOR,
        };
        assert_eq!(fx, [wakeup]);
        let fx = listed(&mut m, |m, fx| {
            m.host_handle_vector(1, POSTED_WAKEUP_VECTOR, fx)
        });
        assert_eq!(fx, [Effect::Wake(0)]);
        listed(&mut m, |m, fx| m.wake(0, fx));
        assert_eq!(
            m.vcpus[0].hw.pid.notification_vector,
            POSTED_NOTIFICATION_VECTOR
        );
        m.count_unwoken_sleepers();
        assert_eq!(m.checker.violations_of(Invariant::Lost), 0);
        assert_eq!(m.checker.violations_of(Invariant::Doubled), 0);
    }

    #[test]
    fn a_post_suppressed_by_sn_waits_in_pir_for_the_next_entry() {
        let mut m = single(DesignKind::ApicvPi);
        m.vcpus[0].hw.pid.suppress = true;
        assert!(listed(&mut m, |m, fx| m.fire_vf_msi(0, VfVector::Rx, fx)).is_empty());
        m.prepare_entry(0);
        assert!(m.vcpus[0].hw.vlapic.irr().contains(GUEST_VF_VECTOR));
        assert_eq!(m.checker.violations_of(Invariant::Lost), 0);
    }

    #[test]
    fn a_suppressed_post_left_in_pir_at_entry_is_lost() {
        // The bug the check is for: SN cleared at entry without syncing PIR.
        let mut m = single(DesignKind::ApicvPi);
        m.vcpus[0].hw.pid.suppress = true;
        listed(&mut m, |m, fx| m.fire_vf_msi(0, VfVector::Rx, fx));
        let pir = m.vcpus[0].hw.pid.pir;
        m.checker.entered(0, &pir);
        assert_eq!(m.checker.violations_of(Invariant::Lost), 1);
    }

    #[test]
    fn a_sleeper_whose_wakeup_never_came_is_counted_at_the_end() {
        // The bug the check is for: a blocked vCPU left with SN set.
        let mut m = blocked(DesignKind::ApicvPi);
        m.vcpus[0].hw.pid.suppress = true;
        listed(&mut m, |m, fx| m.fire_vf_msi(0, VfVector::Rx, fx));
        m.count_unwoken_sleepers();
        assert_eq!(m.checker.violations_of(Invariant::Lost), 1);
    }

    #[test]
    fn avic_logs_a_device_post_for_a_sleeper_and_the_ga_log_handler_wakes_it() {
        let mut m = blocked(DesignKind::Avic);
        let fx = listed(&mut m, |m, fx| m.fire_vf_msi(0, VfVector::Rx, fx));
        let ga_log = Effect::DeliverPhysical {
            core: HOUSEKEEPING_CORE,
            vector: GA_LOG_VECTOR,
        };
        assert_eq!(fx, [ga_log]);
        let fx = listed(&mut m, |m, fx| m.host_handle_vector(0, GA_LOG_VECTOR, fx));
        assert_eq!(fx, [Effect::Wake(0)]);
    }

    #[test]
    fn ipiv_posts_a_unicast_with_no_exit_and_avic_exits_for_a_sleeping_target() {
        let icr = IpiMode::Unicast.icr(GUEST_IPI_VECTOR);
        for (design, exits) in [(DesignKind::ApicvPiIpiv, false), (DesignKind::Avic, true)] {
            let mut m = one_vm(design, WorkloadKind::Ipi, 2);
            m.vcpus[1].state = VcpuState::Halted;
            let fx = listed(&mut m, |m, fx| m.send_guest_ipis(0, icr, &[1], fx));
            let exit = fx
                .iter()
                .any(|effect| matches!(effect, Effect::Exit { .. }));
            assert_eq!(exit, exits, "{design}");
            let posted = fx.iter().any(|effect| {
                matches!(
                    effect,
                    Effect::Schedule {
                        event: Event::PostedIpi { vcpu: 1 },
                        ..
                    }
                )
            });
            assert!(posted, "{design}: {fx:?}");
        }
    }
}
