//! How much work a scenario is, estimated before it runs: a valid scenario
//! can still ask for days of simulation, which should be refused at once
//! with the estimate, not discovered by waiting.

use dirq_stats::f64_of;

use super::{RunSpec, Scenario, Transport, WorkloadKind};
use crate::profile::CostProfile;

/// Events the machine schedules per packet, timer expiry, IPI, idle exit
/// or time slice: 2 to 4 on the built-in scenarios; the high end is used.
const EVENTS_PER_UNIT: f64 = 4.0;
/// The simulator's pace on one thread, for the time in the message.
pub const EVENTS_PER_S: f64 = 3e6;
/// Events a scenario may take without being insisted on: about ten
/// minutes of one thread.
pub const EVENT_BUDGET: f64 = 2e9;
/// A guest timer's rate (the 1 kHz tick of `with_timer` and cyclictest).
const TIMER_HZ: f64 = 1_000.0;
/// The most packets per second iperf's line rate, and one outstanding
/// request (netperf-rr, fio), can reach.
const IPERF_PPS: f64 = 1e6;
const REQUESTS_PER_S: f64 = 1e5;
/// A server's requests, with the interrupts and the TCP work around each.
const SERVER_REQUESTS_PER_S: f64 = 3e5;
/// The B2BUA's messages: five per call at 100 calls/s, and the INVITE's
/// 100 Trying and answer on the way.
const SIP_MESSAGES_PER_S: f64 = 1e3;
/// Bursts of 32 128-byte frames at 10 GbE line rate.
const L2FWD_BURSTS_PER_S: f64 = 2.7e5;

/// A scenario that would take longer than the budget.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("it would simulate about {events:.2e} events, about {minutes:.0} min at {EVENTS_PER_S:.0e} events/s: over the budget of {EVENT_BUDGET:.0e} events")]
pub struct OverBudget {
    pub events: f64,
    pub minutes: f64,
}

impl Scenario {
    /// About how many events running every run would take under `profile`.
    pub fn estimated_events(&self, profile: &CostProfile) -> f64 {
        self.expand()
            .iter()
            .map(|spec| spec.estimated_events(profile))
            .sum()
    }

    /// Refuses a scenario whose estimate is over `EVENT_BUDGET`; returns
    /// the estimate otherwise.
    pub fn check_budget(&self, profile: &CostProfile) -> Result<f64, OverBudget> {
        let events = self.estimated_events(profile);
        if events > EVENT_BUDGET {
            return Err(OverBudget {
                events,
                minutes: events / EVENTS_PER_S / 60.0,
            });
        }
        Ok(events)
    }
}

impl RunSpec {
    fn estimated_events(&self, profile: &CostProfile) -> f64 {
        let group = &self.group;
        let host = group.host;
        let vcpus = f64::from(host.vcpus_per_vm);
        let owners = f64::from(group.queue_owners.per_vm(host.vcpus_per_vm));
        let rate = f64_of(self.rate_pps.unwrap_or(0));
        let transports = if group.transport == Transport::Both {
            2.0
        } else {
            1.0
        };
        let traffic = match self.workload {
            WorkloadKind::UdpRx | WorkloadKind::Whileloop => rate * transports * owners,
            WorkloadKind::Iperf | WorkloadKind::Netperf => IPERF_PPS * owners,
            WorkloadKind::NetperfRr | WorkloadKind::UdpRr | WorkloadKind::Fio => {
                REQUESTS_PER_S * owners
            }
            WorkloadKind::Memcached | WorkloadKind::Apache => SERVER_REQUESTS_PER_S * owners,
            WorkloadKind::L2fwd => L2FWD_BURSTS_PER_S * owners,
            WorkloadKind::Sip => SIP_MESSAGES_PER_S,
            WorkloadKind::Ipi => f64_of(group.ipi_rate_per_s) * (vcpus - 1.0),
            WorkloadKind::Cyclictest | WorkloadKind::Idle => 0.0,
            // One call at a time, a few microseconds each, to each target.
            WorkloadKind::IpiCall => REQUESTS_PER_S * f64_of(group.call_targets().len() as u64),
            WorkloadKind::Vioapic => {
                crate::vioapic::most_events_per_s(&crate::vioapic::LoongsonProfile::loongson_2019())
            }
        };
        let timers = if group.with_timer || self.workload == WorkloadKind::Cyclictest {
            TIMER_HZ * owners
        } else {
            0.0
        };
        let idle = profile.idle_exits_per_s.io_instruction
            + profile.idle_exits_per_s.ept_violation
            + f64_of(profile.host_tick.hz);
        let slices = 1e9 / f64_of(profile.host_ns.sched_quantum.max(1));
        let per_vm_per_s = traffic + timers + (idle + slices) * vcpus;
        let seconds = f64_of(self.duration_ns) / 1e9;
        EVENTS_PER_UNIT * seconds * f64::from(host.vms) * per_vm_per_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::builtin;

    #[test]
    fn every_builtin_is_within_the_budget_and_not_underestimated() {
        let profile = CostProfile::did_2015();
        for name in ["did-udp-rx", "did-cyclictest", "fleet-overcommit"] {
            let scenario = builtin(name).expect("built-in");
            let estimate = scenario.check_budget(&profile).expect("within the budget");
            assert!(estimate > 0.0, "{name}");
        }
    }

    #[test]
    fn a_scenario_at_every_limit_is_refused_with_its_estimate() {
        let text = r#"
            name = "limits"
            description = "every limit at once"
            duration_ms = 600000
            [[runs]]
            workload = "udp-rx"
            designs = ["vanilla"]
            rates_pps = [100000000]
            host = { cores = 1024, vms = 64, vcpus_per_vm = 1 }
        "#;
        let scenario = Scenario::from_toml(text).expect("valid");
        let err = scenario
            .check_budget(&CostProfile::did_2015())
            .expect_err("over budget");
        assert!(err.events > EVENT_BUDGET);
        assert!(err.to_string().contains("events"), "{err}");
    }
}
