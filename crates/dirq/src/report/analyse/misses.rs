//! Why a prediction missed: what the real run's own counters and its
//! twin's say, side by side, for every miss of the model-vs-reality check.
//! Nothing here is a fixed sentence per configuration: each reason is read
//! off the runs, so a miss that goes away takes its reason with it.

use std::collections::BTreeMap;

use dirq_stats::f64_of;
use dirq_vmm::config::{BenchParams, Irqchip};
use dirq_vmm::exits::{KvmStat, VmxExit};
use dirq_vmm::probe::Floors;
use serde::Serialize;

use crate::calibrate::costs::HostCosts;
use crate::common::real::RealCase;
use crate::report::analyse::model::{Comparison, Metric, TOLERANCE};

/// Below this share of the core, a time-in-guest figure is within a few
/// points of zero and its relative error measures noise, not the model.
const NEAR_ZERO_SHARE: f64 = 0.05;

/// A guest that handled fewer than this share of what its device raised
/// was saturated: the rest merged into interrupts already pending.
const SATURATED_HANDLED_SHARE: f64 = 0.95;

/// The VMM's time per interrupt below which it explains nothing (the
/// in-kernel paths' only userspace exits are the bench's control port).
const VMM_TIME_WORTH_NAMING_NS: f64 = 500.0;

/// The vCPU threads' wait for a host CPU per handled interrupt below which
/// it explains nothing.
const HOST_WAIT_WORTH_NAMING_NS: f64 = 1_000.0;

/// A miss and what the counters say about it.
#[derive(Debug, Clone, Serialize)]
pub struct MissExplained {
    pub configuration: String,
    pub metric: Metric,
    pub why: String,
    /// Whether the counters show a cause; `why` says so when they do not.
    pub explained: bool,
}

/// What a twin run predicts per handled interrupt.
pub struct TwinRates {
    /// Simulated seconds per handled interrupt; none without any.
    pub seconds_per_interrupt: Option<f64>,
    pub exits_per_interrupt_by_reason: BTreeMap<VmxExit, f64>,
}

/// Interrupts a second a real case's device raised and its guest handled
/// (medians over the repeats; raised only where the bench counts it), and
/// the VMM's own time on its exits per handled interrupt.
struct Load {
    raised_per_s: Option<f64>,
    handled_per_s: f64,
    vmm_ns_per_interrupt: Option<f64>,
    /// The vCPU threads' wait for a host CPU per handled interrupt.
    host_wait_ns_per_interrupt: Option<f64>,
}

impl Load {
    fn of(case: &RealCase) -> Option<Self> {
        let handled = case.per_s(|run| Some(f64_of(run.interrupts)))?;
        let raised = case.per_s(|run| Some(f64_of(run.results.whileloop().ok()?.raised)));
        let vmm = case.spread(|r| {
            let time = &r.run.exits.userspace_time;
            let total_ns: u64 = time.values().map(|t| t.total_ns).sum();
            (r.run.interrupts > 0 && !time.is_empty())
                .then(|| f64_of(total_ns) / f64_of(r.run.interrupts))
        });
        let host_wait = case.spread(|r| {
            (r.run.interrupts > 0)
                .then(|| r.run.exits.vcpu_waited_s * 1e9 / f64_of(r.run.interrupts))
        });
        Some(Load {
            raised_per_s: raised.map(|spread| spread.median),
            handled_per_s: handled.median,
            vmm_ns_per_interrupt: vmm.map(|spread| spread.median),
            host_wait_ns_per_interrupt: host_wait.map(|spread| spread.median),
        })
    }

    /// The vCPU threads' wait for a host CPU, where it is worth naming: a
    /// cost of the host's other work that neither the probe's floors nor
    /// the twin hold.
    fn host_wait(&self) -> Option<String> {
        let wait_ns = self
            .host_wait_ns_per_interrupt
            .filter(|&ns| ns >= HOST_WAIT_WORTH_NAMING_NS)?;
        Some(format!(
            "the vCPU threads waited {:.1} us per handled interrupt for a host CPU (runnable, \
             not running: the host's other work), a cost neither the probe's floors nor the \
             twin charge",
            wait_ns / 1e3
        ))
    }

    /// The VMM's own time per handled interrupt, where it is worth naming.
    fn vmm_time(&self) -> Option<String> {
        let vmm_ns = self
            .vmm_ns_per_interrupt
            .filter(|&ns| ns >= VMM_TIME_WORTH_NAMING_NS)?;
        Some(format!(
            "the VMM's own exit handlers (KVM_RUN's return to the next KVM_RUN) took {:.1} us \
             per handled interrupt, which the probe's no-op port exit does not time",
            vmm_ns / 1e3
        ))
    }

    fn saturated(&self) -> bool {
        self.raised_per_s
            .is_some_and(|raised| self.handled_per_s < SATURATED_HANDLED_SHARE * raised)
    }
}

/// "INTERRUPT_WINDOW 1.00, OTHER 2.00": exits per handled interrupt by
/// reason, largest first (equal ones by name).
fn by_reason(per_interrupt: &BTreeMap<VmxExit, f64>) -> String {
    let mut reasons: Vec<(&VmxExit, &f64)> = per_interrupt
        .iter()
        .filter(|(_, &count)| count >= 0.01)
        .collect();
    reasons.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.name().cmp(b.0.name())));
    if reasons.is_empty() {
        return "none".into();
    }
    reasons
        .iter()
        .map(|(reason, count)| format!("{reason} {count:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The real case's exits per handled interrupt by reason, over all repeats.
fn measured_by_reason(case: &RealCase) -> BTreeMap<VmxExit, f64> {
    let interrupts: u64 = case.repeats.iter().map(|r| r.run.interrupts).sum();
    if interrupts == 0 {
        return BTreeMap::new();
    }
    let mut exits: BTreeMap<VmxExit, u64> = BTreeMap::new();
    for repeat in &case.repeats {
        for (&reason, count) in &repeat.run.exits.by_category {
            *exits.entry(reason).or_insert(0) += count;
        }
    }
    exits
        .into_iter()
        .map(|(reason, count)| (reason, f64_of(count) / f64_of(interrupts)))
        .collect()
}

/// How the real run's halted vCPUs woke, per handled interrupt, from KVM's
/// halt counters (over all vCPUs and repeats): the wake-up path the twin
/// charges one fixed cost for. None where no HLT exited.
fn wake_path(case: &RealCase) -> Option<String> {
    let interrupts: u64 = case.repeats.iter().map(|r| r.run.interrupts).sum();
    let total = |stat: KvmStat| -> u64 {
        case.repeats
            .iter()
            .map(|r| r.run.exits.by_reason.get(&stat).copied().unwrap_or(0))
            .sum()
    };
    let halts = total(KvmStat::HaltExits);
    if interrupts == 0 || halts == 0 {
        return None;
    }
    let per = |count: u64| f64_of(count) / f64_of(interrupts);
    let slept = total(KvmStat::HaltWakeup);
    let mean_sleep_us = f64_of(total(KvmStat::HaltWaitNs)) / f64_of(slept.max(1)) / 1e3;
    Some(format!(
        "per handled interrupt {:.2} HLT exits: {:.2} ended in a halt poll that caught the \
         wake-up ({:.1} us polling each), {:.2} slept and were woken ({:.1} us asleep each), \
         {:.2} polled in vain first",
        per(halts),
        per(total(KvmStat::HaltSuccessfulPoll)),
        f64_of(total(KvmStat::HaltPollSuccessNs))
            / f64_of(total(KvmStat::HaltSuccessfulPoll).max(1))
            / 1e3,
        per(slept),
        mean_sleep_us,
        per(total(KvmStat::HaltAttemptedPoll).saturating_sub(total(KvmStat::HaltSuccessfulPoll))),
    ))
}

/// Host CPU per handled interrupt, measured and charged by the twin, and
/// how many of the interrupts woke a vCPU that slept in the host (KVM's
/// `halt_wakeup`): the twin counts such a vCPU's time from its HLT exit to
/// its wake-up as sleep, so the host's work to wake it and run it again
/// (the scheduler's wake-up and switch, KVM's return from blocking and
/// its re-entry) is CPU the twin does not charge and no floor times.
fn cpu_per_interrupt(
    case: &RealCase,
    load: &Load,
    twin_handled_per_s: Option<f64>,
    comparison: &Comparison,
) -> Option<String> {
    let twin_rate = twin_handled_per_s.filter(|&rate| rate > 0.0)?;
    if load.handled_per_s <= 0.0 {
        return None;
    }
    let (measured_us, charged_us) = (
        comparison.measured / load.handled_per_s * 1e6,
        comparison.predicted / twin_rate * 1e6,
    );
    let mut text = format!(
        "the vCPU threads burned {measured_us:.1} us of host CPU per handled interrupt; the \
         twin charges {charged_us:.1} us"
    );
    let interrupts: u64 = case.repeats.iter().map(|r| r.run.interrupts).sum();
    let woken: u64 = case
        .repeats
        .iter()
        .map(|r| {
            let stats = &r.run.exits.by_reason;
            stats.get(&KvmStat::HaltWakeup).copied().unwrap_or(0)
        })
        .sum();
    if interrupts > 0 && woken > 0 && measured_us > charged_us {
        text.push_str(&format!(
            "; {:.2} per interrupt woke a vCPU that slept in the host, whose wake-up and \
             re-entry the twin counts as sleep, not CPU, and no probe floor times",
            f64_of(woken) / f64_of(interrupts)
        ));
    }
    Some(text)
}

/// An IPI into a vCPU that never halted, against the probe's busy-IPI
/// floor: that floor times this very path end to end, while the twin adds
/// up its parts one after another (the sender's ICR exit, the send, the
/// target's kick exit, its entry), each a floor of its own, where on two
/// CPUs they overlap.
fn composed_ipi(
    case: &RealCase,
    floors: Option<&Floors>,
    comparison: &Comparison,
) -> Option<String> {
    let floor_ns = floors.map(|floors| floors.ipi_busy_p50_ns)?;
    let into_running = matches!(case.config.params, BenchParams::Ipi(_)) && !case.saw_hlt_exits();
    (into_running && floor_ns > 0.0 && comparison.predicted > comparison.measured).then(|| {
        format!(
            "the probe's busy-IPI floor, this path timed end to end, reads {:.1} us; the twin \
             charges its parts in sequence (the sender's ICR exit, the send, the target's kick \
             exit, its entry), which on two CPUs overlap",
            floor_ns / 1e3
        )
    })
}

/// A busy in-kernel-LAPIC vCPU's loss per device interrupt against the
/// kick the twin charges for it (`costs`, the calibration the twin ran
/// with). No floor times that kick: the calibration derives it from three,
/// whose errors add, and its provenance says how. The run's own loss less
/// the EOI and the entry the twin charges gives the kick it implies.
fn derived_kick(
    case: &RealCase,
    costs: Option<&HostCosts>,
    comparison: &Comparison,
) -> Option<String> {
    let costs = costs?;
    let in_kernel_lapic = case.config.common.irqchip != Irqchip::Userspace;
    if !in_kernel_lapic || case.saw_hlt_exits() {
        return None;
    }
    let (eoi_ns, entry_ns) = (costs.eoi_kernel.ns, costs.irq_entry.ns);
    let implied_ns = comparison.measured - eoi_ns - entry_ns;
    Some(format!(
        "the twin charges the kick that interrupts a busy vCPU {:.1} us, which no floor times \
         ({}); this run's loss per interrupt less the EOI ({:.1} us) and entry ({:.1} us) the \
         twin charges leaves {:.1} us for it",
        costs.external_interrupt.ns / 1e3,
        costs.external_interrupt.provenance(),
        eoi_ns / 1e3,
        entry_ns / 1e3,
        implied_ns / 1e3
    ))
}

/// Why `comparison` (a miss of `case` against its twin, which predicted
/// `predicted`) missed, from the counters of both, the probe's `floors`
/// and the calibrated `costs` the twin ran with, where they exist.
pub fn explain(
    case: &RealCase,
    predicted: &TwinRates,
    comparison: &Comparison,
    floors: Option<&Floors>,
    costs: Option<&HostCosts>,
) -> MissExplained {
    let mut why = Vec::new();
    let load = Load::of(case);
    let twin_handled_per_s = predicted.seconds_per_interrupt.map(|per| 1.0 / per);
    if let Some(load) = load.as_ref().filter(|load| load.saturated()) {
        why.push(format!(
            "saturated: the device raised {:.0}/s and the guest handled {:.0}/s (the twin {:.0}/s); \
             the rest merged into interrupts already pending",
            load.raised_per_s.unwrap_or_default(),
            load.handled_per_s,
            twin_handled_per_s.unwrap_or_default()
        ));
    }
    match comparison.metric {
        Metric::TimeInGuest => {
            if let (Some(load), Some(twin_rate)) = (&load, twin_handled_per_s) {
                let lost_us = |share: f64, rate: f64| (1.0 - share) / rate * 1e6;
                if load.handled_per_s > 0.0 {
                    let (lost, charged) = (
                        lost_us(comparison.measured, load.handled_per_s),
                        lost_us(comparison.predicted, twin_rate),
                    );
                    // Equal losses per interrupt leave the share to how
                    // many interrupts each handled: not a cause, a pointer.
                    if (lost - charged).abs() <= TOLERANCE * lost {
                        why.push(format!(
                            "per handled interrupt the loss agrees ({lost:.1} us measured, \
                             {charged:.1} us the twin), so the shares part by the interrupts \
                             handled: {:.0}/s measured, {twin_rate:.0}/s the twin",
                            load.handled_per_s
                        ));
                    } else {
                        why.push(format!(
                            "the loop lost {lost:.1} us per handled interrupt; the twin \
                             charges {charged:.1} us"
                        ));
                    }
                }
            }
            why.extend(load.as_ref().and_then(Load::vmm_time));
            if comparison.measured < NEAR_ZERO_SHARE && comparison.predicted < NEAR_ZERO_SHARE {
                why.push(
                    "both shares are within 5 points of zero, where a relative error measures \
                     noise"
                        .into(),
                );
            }
        }
        Metric::ExitsPerInterrupt => why.push(format!(
            "per handled interrupt, measured {}; the twin {} (before the execution mode's own \
             traps are added)",
            by_reason(&measured_by_reason(case)),
            by_reason(&predicted.exits_per_interrupt_by_reason)
        )),
        Metric::LostPerInterruptNs => {
            why.extend(load.as_ref().and_then(Load::vmm_time));
            why.extend(derived_kick(case, costs, comparison));
        }
        Metric::LatencyP50Ns => {
            why.extend(wake_path(case));
            why.extend(composed_ipi(case, floors, comparison));
        }
        Metric::HostCpuCores => why.extend(
            load.as_ref()
                .and_then(|load| cpu_per_interrupt(case, load, twin_handled_per_s, comparison)),
        ),
    }
    why.extend(load.as_ref().and_then(Load::host_wait));
    let explained = !why.is_empty();
    if !explained {
        // The counters agree with the twin's: what differs is the time
        // each event takes, which the twin takes from the probe's floors.
        why.push(format!(
            "per handled interrupt, measured {}; the twin {}: the same events, so the time \
             per event differs from what the probe's floors give the twin",
            by_reason(&measured_by_reason(case)),
            by_reason(&predicted.exits_per_interrupt_by_reason)
        ));
    }
    MissExplained {
        configuration: comparison.configuration.clone(),
        metric: comparison.metric,
        why: why.join("; "),
        explained,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::costs::{derive_costs, Observations};
    use crate::common::real::Repeat;
    use crate::common::spread::Spread;
    use crate::report::collect::fixtures::real_run;
    use dirq_vmm::config::{Bench, BenchConfig};
    use dirq_vmm::results::{BenchResult, WhileloopResult};

    fn whileloop_case(raised: u64, handled: u64, share: f64) -> RealCase {
        let figures = BenchResult::Whileloop(WhileloopResult {
            raised,
            guest_share: share,
            ..WhileloopResult::default()
        });
        let run = real_run(
            serde_json::json!({
                "interrupts": handled,
                "exits": {"userspace": handled, "by_reason": {},
                          "by_category": {"INTERRUPT_WINDOW": handled, "OTHER": 2 * handled},
                          "userspace_time": {"msr_write": {"samples": handled, "total_ns": 7_000 * handled,
                                                           "min_ns": 7_000, "max_ns": 7_000}}},
                "exits_per_interrupt": 3.0,
                "duration_s": 1.0
            }),
            &figures,
        );
        RealCase {
            label: "userspace".into(),
            command: "dirq run whileloop".into(),
            config: BenchConfig::new(Bench::Whileloop),
            repeats: vec![Repeat {
                run,
                cpu_cores: 1.0,
            }],
        }
    }

    /// A twin that handled `per_s` interrupts a second, each with one
    /// external-interrupt and one MSR-write exit.
    fn twin(per_s: u64) -> TwinRates {
        TwinRates {
            seconds_per_interrupt: Some(1.0 / f64_of(per_s)),
            exits_per_interrupt_by_reason: BTreeMap::from([
                (VmxExit::ExternalInterrupt, 1.0),
                (VmxExit::MsrWrite, 1.0),
            ]),
        }
    }

    fn miss(metric: Metric, measured: f64, predicted: f64) -> Comparison {
        let spread = Spread {
            median: measured,
            min: measured,
            max: measured,
            runs: 1,
        };
        Comparison::new("whileloop · userspace".into(), metric, spread, predicted)
    }

    /// Why `case` missed its twin of 10,000 handled/s on `metric`, with
    /// no probe floors or calibration to set beside it.
    fn why_missed(case: &RealCase, metric: Metric, measured: f64, predicted: f64) -> String {
        explain(
            case,
            &twin(10_000),
            &miss(metric, measured, predicted),
            None,
            None,
        )
        .why
    }

    #[test]
    fn a_saturated_run_says_how_much_merged_and_what_each_interrupt_cost() {
        let case = whileloop_case(20_000, 10_000, 0.2);
        let why = why_missed(&case, Metric::TimeInGuest, 0.2, 0.4);
        assert!(
            why.contains("raised 20000/s and the guest handled 10000/s (the twin 10000/s)"),
            "{why}"
        );
        assert!(
            why.contains("handlers") && why.contains("took 7.0 us"),
            "{why}"
        );
        // (1 - 0.2) / 10,000 and (1 - 0.4) / 10,000.
        assert!(
            why.contains("lost 80.0 us") && why.contains("charges 60.0 us"),
            "{why}"
        );
        assert!(!why.contains("noise"), "{why}");
    }

    #[test]
    fn an_exit_miss_lists_the_reasons_of_both_and_near_zero_shares_say_so() {
        let case = whileloop_case(10_000, 10_000, 0.01);
        let exits = why_missed(&case, Metric::ExitsPerInterrupt, 3.0, 4.0);
        assert!(!exits.contains("saturated"), "{exits}");
        assert!(
            exits.contains("measured OTHER 2.00, INTERRUPT_WINDOW 1.00")
                && exits.contains("twin EXTERNAL_INTERRUPT 1.00, MSR_WRITE 1.00"),
            "{exits}"
        );
        let share = why_missed(&case, Metric::TimeInGuest, 0.01, 0.0);
        assert!(share.contains("noise"), "{share}");
    }

    #[test]
    fn a_cpu_miss_sets_cpu_per_interrupt_beside_the_twins_and_counts_the_wake_ups() {
        let mut case = whileloop_case(10_000, 10_000, 0.5);
        case.repeats[0].run.exits.by_reason = BTreeMap::from([(KvmStat::HaltWakeup, 9_000)]);
        // 0.25 cores over 10,000 handled/s is 25 us each; the twin 0.16
        // cores over its 10,000/s, 16 us.
        let why = why_missed(&case, Metric::HostCpuCores, 0.25, 0.16);
        assert!(
            why.contains(
                "burned 25.0 us of host CPU per handled interrupt; the twin charges 16.0 us"
            ),
            "{why}"
        );
        assert!(why.contains("0.90 per interrupt woke a vCPU"), "{why}");
        // A twin that charges more names no wake-up.
        let over = why_missed(&case, Metric::HostCpuCores, 0.16, 0.25);
        assert!(!over.contains("woke"), "{over}");
    }

    #[test]
    fn an_ipi_into_a_running_vcpu_stands_beside_the_floor_that_times_it_whole() {
        let mut case = whileloop_case(10_000, 10_000, 0.5);
        case.config = BenchConfig::new(Bench::Ipi);
        let floors = Floors {
            ipi_busy_p50_ns: 21_800.0,
            ..Floors::default()
        };
        let slow_twin = miss(Metric::LatencyP50Ns, 21.3, 32.1);
        let why = explain(&case, &twin(10_000), &slow_twin, Some(&floors), None);
        assert!(why.why.contains("busy-IPI floor"), "{}", why.why);
        assert!(why.why.contains("reads 21.8 us"), "{}", why.why);
        assert!(why.explained);
        // A vCPU that halted is the wake path's to explain, not this.
        case.repeats[0].run.exits.by_category = BTreeMap::from([(VmxExit::Hlt, 10_000)]);
        let halted = explain(&case, &twin(10_000), &slow_twin, Some(&floors), None).why;
        assert!(!halted.contains("busy-IPI floor"), "{halted}");
    }

    #[test]
    fn a_busy_kernel_loss_stands_beside_the_kick_the_calibration_derives() {
        let case = whileloop_case(10_000, 10_000, 0.5);
        let costs = derive_costs(&Observations {
            kernel_exit_ns: 6_000.0,
            self_ipi_p50_ns: 12_000.0,
            ipi_busy_target_ns: 40_000.0,
            ipi_send_busy_ns: 9_000.0,
            ..Observations::default()
        });
        // The twin's kick: 40 - 9 - 6 (EOI) - 6 (entry) = 19 us; the run's
        // 25 us less that EOI and entry leaves 13.
        let miss = miss(Metric::LostPerInterruptNs, 25_000.0, 31_000.0);
        let why = explain(&case, &twin(10_000), &miss, None, Some(&costs));
        assert!(why.explained, "{}", why.why);
        assert!(
            why.why.contains("kick that interrupts a busy vCPU 19.0 us"),
            "{}",
            why.why
        );
        assert!(why.why.contains("leaves 13.0 us for it"), "{}", why.why);
        // dirq's userspace LAPIC kicks by a signal: not this derivation.
        let mut userspace = case.clone();
        userspace.config.common.irqchip = Irqchip::Userspace;
        let other = explain(&userspace, &twin(10_000), &miss, None, Some(&costs)).why;
        assert!(!other.contains("kick that interrupts"), "{other}");
        // Without a calibration there is nothing to set beside it.
        let uncalibrated = explain(&case, &twin(10_000), &miss, None, None).why;
        assert!(
            !uncalibrated.contains("kick that interrupts"),
            "{uncalibrated}"
        );
    }

    #[test]
    fn every_miss_names_a_cost_and_a_host_wait_is_named_where_it_is_paid() {
        let mut case = whileloop_case(10_000, 10_000, 0.5);
        let quiet = why_missed(&case, Metric::LatencyP50Ns, 9.0, 16.0);
        assert!(!quiet.contains("no cause"), "{quiet}");
        assert!(quiet.contains("the same events"), "{quiet}");
        // 0.05 s waited over 10,000 interrupts: 5 us each.
        case.repeats[0].run.exits.vcpu_waited_s = 0.05;
        let (halts, polled, slept) = (
            KvmStat::HaltExits,
            KvmStat::HaltSuccessfulPoll,
            KvmStat::HaltWakeup,
        );
        case.repeats[0].run.exits.by_reason =
            BTreeMap::from([(halts, 10_000), (polled, 7_500), (slept, 2_500)]);
        let busy = why_missed(&case, Metric::LatencyP50Ns, 9.0, 16.0);
        assert!(
            busy.contains("waited 5.0 us per handled interrupt"),
            "{busy}"
        );
        assert!(
            busy.contains("1.00 HLT exits: 0.75 ended in a halt poll")
                && busy.contains("0.25 slept"),
            "{busy}"
        );
    }
}
