//! The software-only studies (mechanisms.md sections 6-8) on /dev/kvm:
//! exit counts per interrupt, per register access and per disk command,
//! never times. Skipped loudly without /dev/kvm.

mod common;

use common::{run, userspace_exits};
use dirq_vmm::bench::io_batch::WRITES_PER_COMMAND;
use dirq_vmm::config::params::{IoBatchParams, IpiParams, TickParams, VioapicParams};
use dirq_vmm::config::{BenchConfig, BenchParams, IpiKind, VioapicLevel};
use dirq_vmm::exits::UserspaceExit;
use dirq_vmm::testing::require_kvm;
use dirq_vmm::RunReport;

const EVENTS: u64 = 500;

fn vioapic(mode: VioapicLevel) -> RunReport {
    let config = BenchConfig::from(BenchParams::Vioapic(VioapicParams {
        vioapic: mode,
        count: EVENTS,
        ..VioapicParams::default()
    }));
    let report = run(&config).unwrap_or_else(|err| panic!("vioapic {mode}: {err}"));
    // bench::run fails unless every event was consumed, in order.
    assert_eq!(
        report.results.vioapic().expect("figures").events,
        EVENTS,
        "{mode}"
    );
    report
}

/// The race test at `mode`: the device raises at random times while the
/// guest also masks and unmasks.
fn racing(mode: VioapicLevel) -> BenchConfig {
    BenchConfig::from(BenchParams::Vioapic(VioapicParams {
        vioapic: mode,
        vioapic_race: true,
        count: 3_000,
        ..VioapicParams::default()
    }))
}

/// Register accesses of one interrupt's sequence at this level.
fn accesses_per_interrupt(report: &RunReport) -> (u64, u64) {
    (
        report
            .results
            .vioapic()
            .expect("figures")
            .register_reads_per_interrupt,
        report
            .results
            .vioapic()
            .expect("figures")
            .register_writes_per_interrupt,
    )
}

#[test]
fn vioapic_userspace_exits_once_per_register_access() {
    if !require_kvm("vioapic_userspace_exits_once_per_register_access") {
        return;
    }
    let report = vioapic(VioapicLevel::Userspace);
    let (reads, writes) = accesses_per_interrupt(&report);
    assert_eq!((reads, writes), (4, 2));
    // Back to back through dirq's controller: one interrupt per event.
    assert_eq!(report.interrupts, EVENTS);
    assert_eq!(report.results.vioapic().expect("figures").spurious, 0);
    assert_eq!(
        userspace_exits(&report, UserspaceExit::Mmio),
        (reads + writes) * EVENTS,
        "{:?}",
        report.exits
    );
    assert_eq!(report.exits.userspace, (reads + writes) * EVENTS);
}

#[test]
fn vioapic_ro_page_reads_cost_no_exit() {
    if !require_kvm("vioapic_ro_page_reads_cost_no_exit") {
        return;
    }
    let report = vioapic(VioapicLevel::RoPage);
    let (reads, writes) = accesses_per_interrupt(&report);
    assert!(reads > 0);
    assert_eq!(
        report.results.vioapic().expect("figures").trapped_reads,
        0,
        "reads hit the mirror"
    );
    assert_eq!(report.interrupts, EVENTS);
    // Of the two writes, the mask is posted through an ioeventfd and
    // completes inside KVM; only the unmask reaches the VMM.
    assert_eq!(writes, 2);
    assert_eq!(
        userspace_exits(&report, UserspaceExit::Mmio),
        EVENTS,
        "{:?}",
        report.exits
    );
}

#[test]
fn vioapic_ro_page_posted_mask_loses_and_reorders_nothing_under_racing_raises() {
    if !require_kvm("vioapic_ro_page_posted_mask_loses_and_reorders_nothing_under_racing_raises") {
        return;
    }
    let config = racing(VioapicLevel::RoPage);
    // Fails on a lost interrupt (the guest halts until the watchdog) or an
    // event consumed twice or out of order; interrupts already on their way
    // when the mask was posted may arrive and are spurious to the guest.
    let report = run(&config).unwrap_or_else(|err| panic!("ro-page race: {err}"));
    assert_eq!(report.results.vioapic().expect("figures").events, 3_000);
    assert!(
        report.results.vioapic().expect("figures").mask_toggles > 0,
        "{:?}",
        report.results
    );
}

#[test]
fn vioapic_pv_traps_only_the_unmask() {
    if !require_kvm("vioapic_pv_traps_only_the_unmask") {
        return;
    }
    let report = vioapic(VioapicLevel::Pv);
    assert_eq!(report.results.vioapic().expect("figures").trapped_reads, 0);
    assert_eq!(report.interrupts, EVENTS);
    assert_eq!(
        userspace_exits(&report, UserspaceExit::Mmio),
        EVENTS,
        "one UNMASK write per interrupt: {:?}",
        report.exits
    );
    assert_eq!(report.exits.userspace, EVENTS);
}

#[test]
fn vioapic_kernel_level_needs_no_userspace_exit() {
    if !require_kvm("vioapic_kernel_level_needs_no_userspace_exit") {
        return;
    }
    let Some(report) = common::vioapic_kernel_level(EVENTS, |_| {}) else {
        return;
    };
    assert_eq!(report.results.vioapic().expect("figures").trapped_reads, 0);
    assert_eq!(report.results.vioapic().expect("figures").trapped_writes, 0);
    assert_eq!(report.exits.userspace, 0, "{:?}", report.exits);
    // Spurious interrupts (duplicate deliveries) are serviced as nothing
    // to do; every event still took an interrupt of its own.
    assert!(report.interrupts >= EVENTS);
    assert_eq!(report.results.vioapic().expect("figures").events, EVENTS);
}

/// A LAPIC that holds nothing in service (a second kvm_pvm host's), as the
/// guest's knob reproduces it: the kernel level's level-triggered line
/// storms. The run must end by itself and say why it measured nothing.
#[test]
fn vioapic_kernel_level_on_a_lapic_that_holds_nothing_in_service_ends_and_says_why() {
    if !require_kvm(
        "vioapic_kernel_level_on_a_lapic_that_holds_nothing_in_service_ends_and_says_why",
    ) {
        return;
    }
    let config = BenchConfig::from(BenchParams::Vioapic(VioapicParams {
        vioapic: VioapicLevel::Kernel,
        count: 2_000,
        eoi_at_entry: true,
        ..VioapicParams::default()
    }));
    let why = common::assert_not_measurable_for_the_lapic(run(&config));
    assert!(why.contains("of 2000 events consumed"), "{why}");
}

/// A run longer than its watchdog allows: the guest stops at half of it
/// and says so, instead of being killed by it.
#[test]
fn vioapic_gives_up_at_half_the_watchdog_and_says_so() {
    if !require_kvm("vioapic_gives_up_at_half_the_watchdog_and_says_so") {
        return;
    }
    let mut config = BenchConfig::from(BenchParams::Vioapic(VioapicParams {
        vioapic: VioapicLevel::Userspace,
        count: dirq_vmm::config::params::MAX_COUNT,
        ..VioapicParams::default()
    }));
    config.common.timeout_ms = Some(400);
    match run(&config) {
        Err(dirq_vmm::bench::BenchError::NotMeasurable { why, .. }) => {
            assert!(why.contains("gave up after 200 ms"), "{why}")
        }
        other => panic!("expected a give-up, got {:?}", other.map(|r| r.results)),
    }
}

#[test]
fn vioapic_pv_survives_raises_racing_mask_and_unmask() {
    if !require_kvm("vioapic_pv_survives_raises_racing_mask_and_unmask") {
        return;
    }
    for mode in [VioapicLevel::Pv, VioapicLevel::Userspace] {
        let config = racing(mode);
        // Fails if an interrupt arrived while the guest had the line masked
        // with none in flight, or if the guest never got an event (a lost
        // interrupt leaves it halted until the watchdog).
        let report = run(&config).unwrap_or_else(|err| panic!("{mode} race: {err}"));
        assert_eq!(
            report.results.vioapic().expect("figures").events,
            3_000,
            "{mode}"
        );
        assert!(
            report.results.vioapic().expect("figures").mask_toggles > 0,
            "{mode}: the guest never masked outside its handler: {:?}",
            report.results
        );
    }
}

#[test]
fn vioapic_refuses_paths_it_does_not_measure() {
    assert!(
        racing(VioapicLevel::Kernel).validate().is_err(),
        "the race test drives dirq's controller"
    );
    let mut config = racing(VioapicLevel::Pv);
    config.common.pv_eoi = true;
    assert!(config.validate().is_err());
}

fn io_batch(batched: bool) -> RunReport {
    let config = BenchConfig::from(BenchParams::IoBatch(IoBatchParams {
        io_batch: batched,
        count: 300,
    }));
    run(&config).unwrap_or_else(|err| panic!("io-batch (batched {batched}): {err}"))
}

#[test]
fn io_batch_turns_eleven_exits_per_command_into_one() {
    if !require_kvm("io_batch_turns_eleven_exits_per_command_into_one") {
        return;
    }
    let writes = io_batch(false);
    let batched = io_batch(true);
    assert_eq!(writes.commands, Some(300));
    assert_eq!(batched.commands, Some(300));
    assert_eq!(
        userspace_exits(&writes, UserspaceExit::Io),
        WRITES_PER_COMMAND * 300,
        "{:?}",
        writes.exits
    );
    assert_eq!(
        userspace_exits(&batched, UserspaceExit::Io),
        300,
        "{:?}",
        batched.exits
    );
    assert_eq!(
        writes.results.io_batch().expect("figures").device_digest,
        batched.results.io_batch().expect("figures").device_digest,
        "the disk must end in the same state both ways"
    );
}

#[test]
fn tick_scaling_cuts_timer_interrupts_by_k_unseen_by_the_guest() {
    if !require_kvm("tick_scaling_cuts_timer_interrupts_by_k_unseen_by_the_guest") {
        return;
    }
    const K: u32 = 10;
    let tick_rate = |scale: u32| {
        let config = BenchConfig::from(BenchParams::Tick(TickParams {
            tick_scale: scale,
            duration_ms: 300,
        }));
        let report = run(&config).unwrap_or_else(|err| panic!("tick K={scale}: {err}"));
        // bench::run fails if the guest read back a count it never wrote.
        let tick = report.results.tick().expect("figures");
        assert!(tick.max_count_read <= tick.guest_reload);
        assert_eq!(tick.effective_reload, tick.guest_reload * u64::from(scale));
        assert!(report.interrupts > 0, "no tick at K={scale}");
        tick.timer_interrupts_per_s
    };
    let (fast, slow) = (tick_rate(1), tick_rate(K));
    // K times fewer ticks a second. Rates, not counts: the loop under the
    // heavier tick runs longer, the more so on a loaded host.
    let ratio = fast / slow;
    assert!(
        (f64::from(K) / 2.0..=f64::from(K) * 2.0).contains(&ratio),
        "{fast:.0} ticks/s at K=1, {slow:.0} at K={K}"
    );
}

#[test]
fn broadcast_ipis_reach_every_other_vcpu() {
    if !require_kvm("broadcast_ipis_reach_every_other_vcpu") {
        return;
    }
    let mut config = BenchConfig::from(BenchParams::Ipi(IpiParams {
        ipi: IpiKind::Broadcast,
        count: 200,
        ..IpiParams::default()
    }));
    config.common.vcpus = 4;
    let report = run(&config).expect("broadcast ipi runs");
    // Each answers with its own pong vector: none coalesce on vCPU 0.
    assert_eq!(
        report.results.ipi().expect("figures").handled.0,
        [3 * 200, 200, 200, 200]
    );
    assert_eq!(report.latency_ns.as_ref().map(|l| l.samples), Some(200));
    assert!(report.exits.vcpu_cpu_s > 0.0, "the vCPU threads' CPU time");
}
