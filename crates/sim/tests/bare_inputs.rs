//! Each built-in scenario's bare-metal run reproduces the bare-metal
//! figures its paper gives as inputs (docs/calibration.md): within 10% for
//! rates, throughput and latency, 5% for VoIP's <10 ms bucket and call
//! rate. A figure the model cannot reproduce yet is an ignored test whose
//! reason names the cause (issue 21) and the figure the run gives.

use std::sync::OnceLock;

use dirq_sim::design::DesignKind;
use dirq_sim::metrics::RunResult;
use dirq_sim::scenario::{self, WorkloadKind};
use dirq_sim::{run_scenario, RunOptions};
use dirq_stats::f64_of;

/// The bare-metal runs of built-in scenario `name`, its sweeps left out.
fn bare_runs(name: &str) -> Vec<RunResult> {
    let mut scenario = scenario::builtin(name).expect("built-in");
    scenario
        .runs
        .retain(|group| group.sweep.is_none() && group.designs.contains(&DesignKind::Bare));
    for group in &mut scenario.runs {
        group.designs = vec![DesignKind::Bare];
    }
    let options = RunOptions {
        seed: 1,
        profile: None,
        trace: false,
    };
    run_scenario(&scenario, &options)
        .expect("scenario runs")
        .result
        .runs
}

/// The bare run of `workload` in built-in scenario `name`, each scenario
/// run once for all its tests.
fn bare(name: &'static str, workload: WorkloadKind) -> RunResult {
    static ELI: OnceLock<Vec<RunResult>> = OnceLock::new();
    static DID_MEMCACHED: OnceLock<Vec<RunResult>> = OnceLock::new();
    static DID_CYCLICTEST: OnceLock<Vec<RunResult>> = OnceLock::new();
    static DID_VOIP: OnceLock<Vec<RunResult>> = OnceLock::new();
    let cache = match name {
        "eli-2012" => &ELI,
        "did-memcached" => &DID_MEMCACHED,
        "did-cyclictest" => &DID_CYCLICTEST,
        "did-voip" => &DID_VOIP,
        other => panic!("no bare inputs for {other}"),
    };
    cache
        .get_or_init(|| bare_runs(name))
        .iter()
        .find(|run| run.params["workload"] == workload.name())
        .unwrap_or_else(|| panic!("{name} has a bare {} run", workload.name()))
        .clone()
}

fn assert_within(measured: f64, given: f64, tolerance: f64, what: &str) {
    let error = (measured - given).abs() / given;
    assert!(
        error <= tolerance,
        "{what}: {measured:.1} against the given {given:.1} ({:.1}% off)",
        error * 100.0
    );
}

fn throughput(run: &RunResult) -> f64 {
    run.throughput.as_ref().expect("a throughput").value
}

fn mean_latency_ns(run: &RunResult) -> f64 {
    run.latency_ns.as_ref().expect("a latency").mean
}

#[test]
fn eli_netperf_bare_streams_5245_mbps() {
    let run = bare("eli-2012", WorkloadKind::Netperf);
    assert_within(throughput(&run), 5_245.0, 0.10, "Mbit/s");
}

#[test]
fn eli_netperf_bare_raises_48430_interrupts_per_s() {
    let run = bare("eli-2012", WorkloadKind::Netperf);
    assert_within(run.interrupts_per_s, 48_430.0, 0.10, "interrupts/s");
}

#[test]
fn eli_apache_bare_serves_11875_requests_per_s_in_0_337_ms() {
    let run = bare("eli-2012", WorkloadKind::Apache);
    assert_within(throughput(&run), 11_875.0, 0.10, "requests/s");
    assert_within(mean_latency_ns(&run), 337_000.0, 0.10, "response ns");
}

#[test]
fn eli_apache_bare_raises_68851_interrupts_per_s() {
    let run = bare("eli-2012", WorkloadKind::Apache);
    assert_within(run.interrupts_per_s, 68_851.0, 0.10, "interrupts/s");
}

#[test]
fn eli_udp_rr_bare_round_trip_is_27_93_us() {
    let run = bare("eli-2012", WorkloadKind::UdpRr);
    assert_within(mean_latency_ns(&run), 27_930.0, 0.10, "round trip ns");
    // netperf's UDP_RR latency is 1 / transactions per second.
    assert_within(1e9 / throughput(&run), 27_930.0, 0.10, "1 / transactions");
}

#[test]
fn did_memcached_bare_peak_is_152_3k_requests_per_s() {
    let run = bare("did-memcached", WorkloadKind::Memcached);
    assert_within(throughput(&run), 152_300.0, 0.10, "requests/s");
}

#[test]
fn did_cyclictest_bare_invocation_latency_is_2_us() {
    let run = bare("did-cyclictest", WorkloadKind::Cyclictest);
    assert_within(mean_latency_ns(&run), 2_000.0, 0.10, "latency ns");
}

#[test]
fn did_voip_bare_places_90_9_calls_per_s() {
    let run = bare("did-voip", WorkloadKind::Sip);
    assert_within(
        run.figures.call_rate.expect("a call rate"),
        90.9,
        0.05,
        "calls/s",
    );
}

#[test]
fn did_voip_bare_setup_buckets_are_9485_112_147_256() {
    let run = bare("did-voip", WorkloadKind::Sip);
    let buckets = run.figures.setup_ms_buckets.expect("setup buckets");
    assert_within(f64_of(buckets["<10"]), 9_485.0, 0.05, "<10 ms calls");
    for (bucket, given) in [("10-100", 112.0), ("100-200", 147.0), (">200", 256.0)] {
        assert_within(f64_of(buckets[bucket]), given, 0.10, bucket);
    }
}

#[test]
fn did_voip_bare_retransmits_79_invites() {
    let run = bare("did-voip", WorkloadKind::Sip);
    let retransmissions = run.figures.invite_retransmissions.expect("a count");
    assert_within(
        f64_of(retransmissions),
        79.0,
        0.10,
        "INVITE retransmissions",
    );
}
