//! The Loongson VIOAPIC run's mechanisms, asserted on its counts.
use super::flow::{controller_accesses, toggles_line, trapped_accesses, Access};
use super::*;
use crate::design::DesignKind;
use crate::scenario::{builtin, RunGroup, Scenario};

fn spec(level: VioapicLevel) -> RunSpec {
    let mut group = RunGroup::new(WorkloadKind::Vioapic, vec![DesignKind::Vanilla]);
    group.level = Some(level);
    Scenario {
        name: "vioapic".into(),
        description: "test".into(),
        duration_ms: 10,
        nic: crate::scenario::NicCoalescing::FITTED,
        profile: crate::profile::BuiltinProfile::default(),
        figure: None,
        runs: vec![group],
    }
    .expand()
    .remove(0)
}

fn run(level: VioapicLevel) -> RunResult {
    simulate(
        &spec(level),
        level,
        &LoongsonProfile::loongson_2019(),
        false,
    )
    .0
}

fn exits_per_interrupt(result: &RunResult) -> f64 {
    result.exits_per_s / result.throughput.as_ref().unwrap().value
}

#[test]
fn each_level_exits_once_per_trapped_access_plus_the_device_read() {
    for level in VioapicLevel::ALL {
        let result = run(level);
        let expected = trapped_accesses(level) + usize::from(DEVICE_LANDING.exits());
        let exits = exits_per_interrupt(&result);
        assert!(
            (exits - f64_of(expected as u64)).abs() < 1e-9,
            "{level:?}: {exits}"
        );
    }
}

#[test]
fn pv_exits_less_per_interrupt_than_the_kernel_level_and_ro_page_between() {
    let [_, kernel, ro_page, pv] = VioapicLevel::ALL.map(|level| exits_per_interrupt(&run(level)));
    assert!(pv < ro_page && ro_page < kernel);
}

/// The VMM's crossings per interrupt at `level`: one per line-toggling
/// write with the controller in userspace.
fn crossings(level: VioapicLevel) -> u64 {
    match level {
        VioapicLevel::Userspace => {
            controller_accesses().filter(|&a| toggles_line(a)).count() as u64
        }
        _ => 0,
    }
}

#[test]
fn an_interrupt_costs_injection_plus_its_steps_where_they_land() {
    let profile = LoongsonProfile::loongson_2019();
    for level in VioapicLevel::ALL {
        let mut machine = Loongson::new(level, &profile);
        let steps: u64 = FLOW.iter().map(|&step| machine.step_cycles(step)).sum();
        let expected = profile.cycles.injection + steps + crossings(level) * profile.vmm_crossing();
        let result = run(level);
        assert_eq!(
            result.figures.cycles_per_interrupt,
            Some(f64_of(expected)),
            "{level:?}"
        );
        let million = f64_of(expected) * 1e6 / f64_of(profile.cpu_hz);
        assert!((result.figures.seconds_per_million.unwrap() - million).abs() < 1e-9);
    }
}

#[test]
fn the_userspace_level_reproduces_its_measured_response() {
    // The calibration input the handler's work is derived from.
    let cycles = run(VioapicLevel::Userspace)
        .figures
        .cycles_per_interrupt
        .unwrap();
    assert!((cycles - 91_769.0).abs() <= 3.0, "{cycles}");
}

#[test]
fn every_event_is_delivered_once_in_order_and_none_is_merged() {
    for level in VioapicLevel::ALL {
        let result = run(level);
        assert!(
            result
                .invariant_violations
                .values()
                .all(|&count| count == 0),
            "{level:?}"
        );
        assert_eq!(result.interrupts.coalesced, 0, "{level:?}");
        assert_eq!(result.interrupts.pending_at_end, 1, "the next event waits");
        assert!(result.interrupts.handled > 100, "{level:?}");
    }
}

#[test]
fn pv_masks_in_the_shared_page_and_the_vmm_honours_it() {
    let profile = LoongsonProfile::loongson_2019();
    let mut machine = Loongson::new(VioapicLevel::Pv, &profile);
    machine.start();
    assert!(machine.delivered);
    machine.mask_read = machine.read_mask();
    machine.write_mask(true);
    assert_eq!(
        machine.controller.mask() & LINE_BIT,
        0,
        "no exit: the controller has not seen it"
    );
    machine.delivered = false;
    machine.finish_step(Step::Device);
    assert!(
        !machine.delivered,
        "the VMM read the shared MASK before the line rose again"
    );
    machine.mask_read = machine.read_mask();
    machine.write_mask(false);
    assert!(
        machine.delivered,
        "UNMASK of an asserted line sends at once"
    );
}

#[test]
fn a_status_read_finding_nothing_is_spurious() {
    let profile = LoongsonProfile::loongson_2019();
    let mut machine = Loongson::new(VioapicLevel::Kernel, &profile);
    let status = Step::Controller(Access {
        kind: AccessKind::Read,
        register: Register::Isr,
    });
    machine.finish_step(status);
    assert_eq!(machine.counts.spurious, 1, "the line is not asserted yet");
    machine.start();
    machine.finish_step(status);
    assert_eq!(machine.counts.spurious, 1);
}

#[test]
fn the_trace_shows_one_exit_slice_per_trapped_access() {
    let level = VioapicLevel::RoPage;
    let (result, trace) = simulate(&spec(level), level, &LoongsonProfile::loongson_2019(), true);
    let mut file = crate::trace::TraceFile::default();
    file.add_run(0, "ro-page", 1, trace.expect("asked for"));
    let json = file.to_json();
    let events = json["traceEvents"].as_array().unwrap();
    let count = |name: &str| events.iter().filter(|e| e["name"] == name).count() as u64;
    let handled = count(&format!("handle {DEVICE_VECTOR:#04x}"));
    assert!(handled > 0 && handled <= result.interrupts.handled);
    let exits = count(ACCESS_EXIT.name());
    // The trace window may cut the last interrupt's exits either side
    // of its handling.
    let per_interrupt = (trapped_accesses(level) + 1) as u64;
    let whole = (handled - 1) * per_interrupt..=(handled + 1) * per_interrupt;
    assert!(whole.contains(&exits), "{exits} exits, {handled} handled");
}

#[test]
fn the_builtin_scenario_runs_every_level_on_the_loongson_profile() {
    let scenario = builtin("loongson-vioapic").unwrap();
    assert!(on_loongson(&scenario));
    let levels: Vec<_> = scenario
        .expand()
        .iter()
        .map(|spec| spec.group.level)
        .collect();
    assert_eq!(levels, VioapicLevel::ALL.map(Some));
    let options = crate::RunOptions {
        seed: 1,
        profile: Some(crate::CostProfile::did_2015()),
        trace: false,
    };
    let result = crate::run_scenario(&scenario, &options).unwrap().result;
    assert_eq!(
        result.profile, "loongson-2019",
        "an x86 profile does not apply"
    );
}

#[test]
fn a_userspace_write_that_changes_the_line_costs_a_second_crossing_the_kernels_does_not() {
    let profile = LoongsonProfile::loongson_2019();
    let mask_write = Step::Controller(Access {
        kind: AccessKind::Write,
        register: Register::Mask,
    });
    let ack = Step::Controller(Access {
        kind: AccessKind::Write,
        register: Register::Ack,
    });
    for level in [VioapicLevel::Userspace, VioapicLevel::Kernel] {
        let mut machine = Loongson::new(level, &profile);
        machine.start();
        // The raise that delivered the first interrupt went through the VMM.
        let userspace = level == VioapicLevel::Userspace;
        assert_eq!(machine.current.crossings, u64::from(userspace), "{level:?}");
        machine.mask_read = machine.read_mask();
        machine.finish_step(mask_write);
        assert_eq!(machine.output_changed(), userspace, "{level:?}: masking");
        machine.finish_step(ack);
        assert!(
            !machine.output_changed(),
            "{level:?}: the ACK leaves the line"
        );
    }
}

#[test]
fn only_the_userspace_level_crosses_twice_per_interrupt() {
    for level in VioapicLevel::ALL {
        let result = run(level);
        let profile = LoongsonProfile::loongson_2019();
        let mut machine = Loongson::new(level, &profile);
        let steps: u64 = FLOW.iter().map(|&step| machine.step_cycles(step)).sum();
        let crossing_cycles =
            result.figures.cycles_per_interrupt.unwrap() - f64_of(profile.cycles.injection + steps);
        assert!(
            (crossing_cycles - f64_of(crossings(level) * profile.vmm_crossing())).abs() < 1e-6,
            "{level:?}: {crossing_cycles}"
        );
    }
    assert_eq!(crossings(VioapicLevel::Userspace), 2);
}

#[test]
fn register_accesses_are_most_of_the_userspace_response_and_shrink_by_level() {
    // The study: the response dominates an interrupt's cost, and most of
    // it is the guest's accesses to the controller's registers.
    let profile = LoongsonProfile::loongson_2019();
    let shares = VioapicLevel::ALL.map(|level| run(level).figures.register_access_share.unwrap());
    let userspace_response = 1.0 - f64_of(profile.cycles.injection) / 91_769.0;
    assert!(shares[0] > userspace_response / 2.0, "{shares:?}");
    assert!(
        shares.windows(2).all(|pair| pair[1] < pair[0]),
        "{shares:?}"
    );
}
