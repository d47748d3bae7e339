//! `dirq probe` on /dev/kvm: its floors are medians of repeated runs whose
//! sizes follow the host's pace, so it finishes on a slow host and says
//! why its floors may not be the host's own.

mod common;

use common::one_vm_at_a_time;
use dirq_vmm::host_load::{HostNoise, NoiseReason};
use dirq_vmm::probe::{probe, Floor, ProbeReport, BATCHES, MAX_BATCHES};
use dirq_vmm::testing::require_kvm;

/// The probe with every thread of it on host CPU 0: both vCPUs of the IPI
/// floors time-share one CPU, and an IPI to a busy vCPU waits for the
/// scheduler (milliseconds), as on a host whose traps are slow.
fn probe_on_one_cpu() -> ProbeReport {
    std::thread::spawn(|| {
        dirq_vmm::placement::pin(0).expect("pins to CPU 0");
        probe(None).expect("the probe finishes on one CPU")
    })
    .join()
    .expect("the probe thread does not panic")
}

#[test]
fn a_probe_on_one_host_cpu_finishes_and_says_its_ipi_floors_shared_it() {
    if !require_kvm("a_probe_on_one_host_cpu_finishes_and_says_its_ipi_floors_shared_it") {
        return;
    }
    let _serial = one_vm_at_a_time();
    let report = probe_on_one_cpu();
    let floors = &report.floors;
    assert!(floors.placement_note.is_some(), "{report:?}");
    let HostNoise::Noisy(reasons) = &report.host_noise else {
        panic!("a shared core is noise: {report:?}");
    };
    assert!(reasons.contains(&NoiseReason::SharedCore), "{reasons:?}");
    // Every floor measured is the median of its runs, inside their spread:
    // seven runs, and up to MAX_BATCHES while a floor of its kind is not
    // pinned down (on one shared CPU, whether it is depends on the host).
    for floor in [Floor::KernelExit, Floor::SelfIpi, Floor::IpiBusy] {
        let spread = &floors.spread[&floor];
        assert!(
            (BATCHES..=MAX_BATCHES).contains(&spread.batch_ns.len()),
            "{floor:?}: {spread:?}"
        );
        let median = floors.get(floor);
        assert!(
            spread.low_ns <= median && median <= spread.high_ns,
            "{floor:?}: {median} outside {spread:?}"
        );
    }
    // The slow IPIs got fewer events than the fast exits: the batches were
    // cut to their time budget, not run to their count.
    let samples = |floor: Floor| floors.spread[&floor].samples;
    assert!(
        samples(Floor::IpiBusy) < samples(Floor::KernelExit),
        "{:?}",
        floors.spread
    );
    assert_eq!(
        report.samples,
        floors.spread.values().map(|s| s.samples).min().unwrap_or(0)
    );
    // The JSON others read keeps the spread, the load and the verdict.
    let json = serde_json::to_string(&report).expect("serializes");
    let back: ProbeReport = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back.floors.spread, floors.spread);
    assert_eq!(back.host_noise, report.host_noise);
    let load = report.host_load.as_ref().expect("the load was recorded");
    assert!(load.cpus >= 1 && load.elapsed_s > 0.0, "{load:?}");
}
