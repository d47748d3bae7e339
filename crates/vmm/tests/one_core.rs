//! Every bench with both vCPU threads on one host CPU (`--pin one-core`):
//! how a slow or busy host runs them, where a cross-vCPU interrupt waits
//! for the scheduler (~4 ms here). Each must finish, with the exit counts
//! and deliveries it has on a spread placement; counts are small so that
//! the whole file stays within seconds. Never times.

mod common;

use common::{run, userspace_exits};
use dirq_vmm::bench::io_batch::WRITES_PER_COMMAND;
use dirq_vmm::config::params::{
    ExitCostParams, HaltWakeupParams, IoBatchParams, IpiParams, IrqLatencyParams, TickParams,
    TimerLatencyParams, VioapicParams, WhileloopParams,
};
use dirq_vmm::config::{BenchConfig, BenchParams, GuestIdle, Pin, VioapicLevel};
use dirq_vmm::exits::UserspaceExit;
use dirq_vmm::testing::require_kvm;
use dirq_vmm::RunReport;

const EVENTS: u64 = 100;

fn one_core(config: &mut BenchConfig) {
    config.common.pin = Pin::OneCore;
}

/// Runs `params` with every vCPU on one host CPU, which the report must say.
fn run_on_one_core(params: BenchParams) -> RunReport {
    let bench = params.bench();
    let mut config = BenchConfig::from(params);
    one_core(&mut config);
    let report = run(&config).unwrap_or_else(|err| panic!("{bench} on one core: {err}"));
    let cpus = &report.placement.vcpu_cpus;
    assert!(
        cpus.len() == 2 && cpus[0] == cpus[1],
        "{bench}: {:?}",
        report.placement
    );
    let note = report.placement.note(2).expect("a shared CPU is noted");
    assert!(note.contains("one host CPU"), "{note}");
    report
}

#[test]
fn irq_latency_on_one_core_delivers_every_interrupt_once() {
    if !require_kvm("irq_latency_on_one_core_delivers_every_interrupt_once") {
        return;
    }
    let report = run_on_one_core(BenchParams::IrqLatency(IrqLatencyParams {
        count: EVENTS,
        rate_hz: 0,
        ..IrqLatencyParams::default()
    }));
    assert_eq!(report.interrupts, EVENTS);
    assert_eq!(report.latency_ns.map(|l| l.samples), Some(EVENTS));
}

#[test]
fn timer_latency_on_one_core_takes_every_expiry() {
    if !require_kvm("timer_latency_on_one_core_takes_every_expiry") {
        return;
    }
    let report = run_on_one_core(BenchParams::TimerLatency(TimerLatencyParams {
        count: EVENTS,
        ..TimerLatencyParams::default()
    }));
    assert_eq!(report.interrupts, EVENTS);
}

#[test]
fn ipi_on_one_core_answers_every_ping_into_a_busy_vcpu() {
    if !require_kvm("ipi_on_one_core_answers_every_ping_into_a_busy_vcpu") {
        return;
    }
    // Busy vCPUs: each IPI waits for the scheduler to run its target.
    const ROUNDS: u64 = 30;
    let mut config = BenchConfig::from(BenchParams::Ipi(IpiParams {
        count: ROUNDS,
        ..IpiParams::default()
    }));
    config.common.guest_idle = GuestIdle::Busy;
    one_core(&mut config);
    let report = run(&config).unwrap_or_else(|err| panic!("ipi on one core: {err}"));
    assert!(report.placement.shares_cpus());
    assert_eq!(
        report.results.ipi().expect("figures").handled.0,
        [ROUNDS, ROUNDS]
    );
}

#[test]
fn whileloop_on_one_core_finishes_its_loop_under_load() {
    if !require_kvm("whileloop_on_one_core_finishes_its_loop_under_load") {
        return;
    }
    let report = run_on_one_core(BenchParams::Whileloop(WhileloopParams {
        rate_hz: 1_000,
        duration_ms: 50,
    }));
    let whileloop = report.results.whileloop().expect("figures");
    assert!(whileloop.raised > 0, "{whileloop:?}");
    assert!(report.interrupts > 0);
    let share = whileloop.guest_share;
    assert!(share > 0.0 && share <= 1.5, "{share}");
}

#[test]
fn exit_cost_on_one_core_counts_one_userspace_exit_per_out() {
    if !require_kvm("exit_cost_on_one_core_counts_one_userspace_exit_per_out") {
        return;
    }
    let report = run_on_one_core(BenchParams::ExitCost(ExitCostParams { count: 200 }));
    assert_eq!(
        userspace_exits(&report, UserspaceExit::Io),
        200,
        "{:?}",
        report.exits
    );
}

#[test]
fn vioapic_on_one_core_consumes_every_event_at_every_level() {
    if !require_kvm("vioapic_on_one_core_consumes_every_event_at_every_level") {
        return;
    }
    for mode in [
        VioapicLevel::Userspace,
        VioapicLevel::RoPage,
        VioapicLevel::Pv,
    ] {
        let report = run_on_one_core(BenchParams::Vioapic(VioapicParams {
            vioapic: mode,
            count: EVENTS,
            ..VioapicParams::default()
        }));
        assert_eq!(
            report.results.vioapic().expect("figures").events,
            EVENTS,
            "{mode}"
        );
        assert!(
            report.exits.userspace >= EVENTS,
            "{mode}: {:?}",
            report.exits
        );
    }
    if let Some(report) = common::vioapic_kernel_level(EVENTS, one_core) {
        assert_eq!(report.results.vioapic().expect("figures").events, EVENTS);
        assert_eq!(report.exits.userspace, 0, "{:?}", report.exits);
    }
}

#[test]
fn io_batch_on_one_core_completes_every_command_both_ways() {
    if !require_kvm("io_batch_on_one_core_completes_every_command_both_ways") {
        return;
    }
    const COMMANDS: u64 = 50;
    for io_batch in [false, true] {
        let report = run_on_one_core(BenchParams::IoBatch(IoBatchParams {
            count: COMMANDS,
            io_batch,
        }));
        assert_eq!(report.commands, Some(COMMANDS));
        let exits_per_command = if io_batch { 1 } else { WRITES_PER_COMMAND };
        assert_eq!(
            userspace_exits(&report, UserspaceExit::Io),
            exits_per_command * COMMANDS,
            "batched {io_batch}: {:?}",
            report.exits
        );
    }
}

#[test]
fn tick_on_one_core_ticks_through_its_loop() {
    if !require_kvm("tick_on_one_core_ticks_through_its_loop") {
        return;
    }
    let report = run_on_one_core(BenchParams::Tick(TickParams {
        duration_ms: 100,
        ..TickParams::default()
    }));
    assert!(report.interrupts > 0, "no tick reached the guest");
}

#[test]
fn halt_wakeup_on_one_core_wakes_every_halt() {
    if !require_kvm("halt_wakeup_on_one_core_wakes_every_halt") {
        return;
    }
    // bench::run fails unless every round's self-IPI was handled once.
    let report = run_on_one_core(BenchParams::HaltWakeup(HaltWakeupParams { count: EVENTS }));
    assert_eq!(report.interrupts, EVENTS);
}
