//! A device raising far faster than its interrupt path delivers: the path
//! must coalesce (a set IRR bit absorbs the next edge), not livelock. The
//! assertions are counts per handled interrupt, never times: what a kick
//! storm or a re-delivered signal would multiply.

mod common;

use common::run;
use dirq_vmm::config::params::WhileloopParams;
use dirq_vmm::config::{BenchConfig, BenchParams, Irqchip, Pin};
use dirq_vmm::exits::VmxExit;
use dirq_vmm::testing::require_kvm;
use dirq_vmm::RunReport;

/// Far beyond what any path here delivers (~25 us between raises).
const OVERLOAD_HZ: u64 = 40_000;

/// Exits per handled interrupt on the userspace path at most: its kick,
/// its injection's trap, its EOI, the interrupt window and the IRETQ,
/// with room to spare; a kick storm made 37.
const MOST_EXITS_PER_INTERRUPT: u64 = 8;

fn whileloop(irqchip: Irqchip, pin: Pin) -> RunReport {
    let mut config = BenchConfig::from(BenchParams::Whileloop(WhileloopParams {
        rate_hz: OVERLOAD_HZ,
        duration_ms: 100,
    }));
    config.common.irqchip = irqchip;
    config.common.pin = pin;
    run(&config).unwrap_or_else(|err| panic!("whileloop {irqchip} at {OVERLOAD_HZ}/s: {err}"))
}

/// The guest kept running its loop and taking interrupts, and the VMM
/// kicked its vCPU at most once per handled interrupt (plus the window's
/// two edges), however many the device raised.
fn assert_coalesced(report: &RunReport) {
    let result = report.results.whileloop().expect("whileloop figures");
    let handled = report.interrupts;
    assert!(handled > 0, "no interrupt handled: {:?}", report.exits);
    assert!(result.loaded_iterations > 0, "the loop made no progress");
    assert!(
        report.exits.kicks <= handled + 2,
        "{} kicks for {handled} handled interrupts ({} raised)",
        report.exits.kicks,
        result.raised
    );
    let external = report
        .exits
        .by_category
        .get(&VmxExit::ExternalInterrupt)
        .copied()
        .unwrap_or(0);
    assert!(
        external <= handled + 2,
        "{external} external-interrupt exits for {handled} handled: {:?}",
        report.exits.by_category
    );
    assert!(
        report.exits.total <= MOST_EXITS_PER_INTERRUPT * handled,
        "{} exits for {handled} handled: {:?}",
        report.exits.total,
        report.exits.by_category
    );
}

#[test]
fn the_userspace_irqchip_coalesces_an_overload_instead_of_kicking_per_raise() {
    if !require_kvm("the_userspace_irqchip_coalesces_an_overload_instead_of_kicking_per_raise") {
        return;
    }
    let report = whileloop(Irqchip::Userspace, Pin::Spread);
    assert_coalesced(&report);
    // What the device raised beyond what the guest handled merged; the
    // run says the path was saturated when it was.
    let raised = report.results.whileloop().expect("figures").raised;
    if report.interrupts * 100 < raised * 95 {
        let saturated = report.saturated.expect("a saturated run says so");
        assert!(saturated.handled_per_s < saturated.raised_per_s);
    }
}

#[test]
fn the_userspace_irqchip_coalesces_an_overload_with_its_vcpus_on_one_core() {
    if !require_kvm("the_userspace_irqchip_coalesces_an_overload_with_its_vcpus_on_one_core") {
        return;
    }
    assert_coalesced(&whileloop(Irqchip::Userspace, Pin::OneCore));
}

#[test]
fn the_kernel_irqchip_needs_no_kick_under_overload() {
    if !require_kvm("the_kernel_irqchip_needs_no_kick_under_overload") {
        return;
    }
    let report = whileloop(Irqchip::Kernel, Pin::Spread);
    assert_eq!(report.exits.kicks, 0, "KVM's LAPIC kicks its vCPUs itself");
    assert!(
        report.interrupts > 0 && report.exits.total <= MOST_EXITS_PER_INTERRUPT * report.interrupts
    );
}
