//! The workloads through whole runs: what a run's results must show of
//! each workload whatever the design, asserted on counts and rates
//! (never on wall time).

use dirq_arch::exit::VmxExit;
use dirq_sim::metrics::{RunResult, ThroughputUnit};
use dirq_sim::scenario::Scenario;
use dirq_sim::{run_scenario, CostProfile, RunOptions};
use dirq_stats::f64_of;

/// The runs of a scenario whose `[[runs]]` groups are `body`, each run
/// lasting `ms`.
fn runs(ms: u64, body: &str) -> Vec<RunResult> {
    let text = format!("name = \"test\"\ndescription = \"test\"\nduration_ms = {ms}\n{body}");
    let scenario = Scenario::from_toml(&text).expect("test scenario parses");
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

fn one(ms: u64, body: &str) -> RunResult {
    let mut all = runs(ms, body);
    assert_eq!(all.len(), 1, "one run");
    all.remove(0)
}

fn throughput(run: &RunResult, unit: ThroughputUnit) -> f64 {
    let throughput = run.throughput.as_ref().expect("a throughput");
    assert_eq!(throughput.unit, unit);
    throughput.value
}

#[test]
fn tcp_throughput_never_exceeds_the_link() {
    let run = one(
        20,
        r#"
        [[runs]]
        workload = "iperf"
        designs = ["bare"]
    "#,
    );
    let gbit = throughput(&run, ThroughputUnit::GbitPerS);
    let link = f64_of(CostProfile::did_2015().network.link_mbps) / 1e3;
    assert!(gbit > 0.0);
    assert!(gbit <= link, "{gbit} > {link} Gbit/s");
}

/// A poll that used its weight is polled again without an interrupt
/// (Linux's `net_rx_action`): the weight cuts a queue's polls, not its
/// interrupts.
#[test]
fn lowering_napis_weight_leaves_the_interrupt_rate() {
    let raised = |weight: u32| {
        one(
            20,
            &format!(
                r#"
                [[runs]]
                workload = "udp-rx"
                designs = ["vanilla"]
                rates_pps = [600000]
                napi_weight = {weight}
            "#
            ),
        )
        .interrupts
        .raised
    };
    let (small, default) = (raised(4), raised(64));
    assert!(default > 100, "{default}");
    assert_eq!(small, default);
}

/// A vanilla whileloop whose background receive comes over virtio at
/// `rate_pps`, with `settings` (TOML lines) added to its group.
fn virtio_whileloop(ms: u64, rate_pps: u64, settings: &str) -> RunResult {
    one(
        ms,
        &format!(
            r#"
            [[runs]]
            workload = "whileloop"
            designs = ["vanilla"]
            transport = "pv"
            rates_pps = [{rate_pps}]
            napi_weight = 1
            {settings}
        "#
        ),
    )
}

#[test]
fn a_paced_source_below_capacity_has_each_frame_handled_by_its_own_interrupt() {
    // One frame every 200 us, each handled in far less: a paced source
    // never finds the last interrupt still pending, so nothing merges; a
    // Poisson source at the same rate sends some frames back to back.
    let handled = |arrivals: &str| {
        virtio_whileloop(100, 5000, &format!("arrivals = \"{arrivals}\""))
            .interrupts
            .handled
    };
    let paced = handled("paced");
    assert!((499..=500).contains(&paced), "{paced} of 500 frames");
    assert!(handled("poisson") < paced);
}

#[test]
fn without_napi_a_frame_during_the_handler_is_its_own_interrupt() {
    // Frames every 5 us into a guest whose interrupt takes longer than
    // that: NAPI masks the queue and re-polls what came meanwhile, with
    // no interrupt; a driver without NAPI takes an interrupt per frame
    // that came during the last handler, so it handles more interrupts
    // for the same frames and keeps less of the core for its loop.
    let run = |handler: &str| {
        let settings = format!("arrivals = \"paced\"\nrx_handler = \"{handler}\"");
        virtio_whileloop(50, 200_000, &settings)
    };
    let (napi, each) = (run("napi"), run("per-interrupt"));
    assert!(each.interrupts.handled > napi.interrupts.handled);
    let loop_share = |run: &RunResult| throughput(run, ThroughputUnit::LoopShare);
    assert!(loop_share(&each) < loop_share(&napi));
    assert_eq!(each.params["rx_handler"], "per-interrupt");
}

#[test]
fn a_closed_loop_servers_rate_never_exceeds_its_cpu_budget() {
    let run = one(
        20,
        r#"
        [[runs]]
        workload = "memcached"
        designs = ["vanilla"]
        clients = 200
    "#,
    );
    let rate = throughput(&run, ThroughputUnit::RequestsPerS);
    let budget = 1e9 / f64_of(CostProfile::did_2015().workloads.memcached_request);
    assert!(rate > 0.0);
    assert!(rate <= budget, "{rate} > {budget} requests/s");
}

#[test]
fn a_qos_target_checks_the_closed_loops_p95_and_never_moves_its_rate() {
    // 200 connections back to back: Little's law puts the mean response
    // near 200 / rate, over 1 ms at any rate the budget allows.
    let run_with = |target_ms: u64| {
        one(
            20,
            &format!(
                r#"
                [[runs]]
                workload = "memcached"
                designs = ["did"]
                clients = 200
                qos_p95_ms = {target_ms}
            "#
            ),
        )
    };
    let (tight, loose) = (run_with(1), run_with(10));
    let rate = throughput(&loose, ThroughputUnit::RequestsPerS);
    assert_eq!(throughput(&tight, ThroughputUnit::RequestsPerS), rate);
    let (tight_qos, loose_qos) = (
        tight.figures.qos.expect("a QoS check"),
        loose.figures.qos.expect("a QoS check"),
    );
    let p95_ns = loose_qos.p95_ns.expect("requests answered");
    assert_eq!(tight_qos.p95_ns, Some(p95_ns));
    assert!(p95_ns > 1_000_000 && p95_ns <= 10_000_000, "{p95_ns} ns");
    assert!(!tight_qos.met && loose_qos.met);
    assert!(
        f64_of(p95_ns) >= 200.0 / rate * 1e9 * 0.5,
        "{p95_ns} ns at {rate}/s"
    );
}

#[test]
fn a_pv_round_trip_grows_by_its_six_copies_of_the_message() {
    // The remote's read and write, vhost's two, the guest's two.
    let round_trip_ns = |bytes: u64| {
        let run = one(
            20,
            &format!(
                r#"
                [[runs]]
                workload = "udp-rr"
                designs = ["did"]
                transport = "pv"
                message_bytes = {bytes}
            "#
            ),
        );
        1e9 / throughput(&run, ThroughputUnit::TransactionsPerS)
    };
    let (small, large) = (32, 1_024);
    let copy = |bytes: u64| bytes * CostProfile::did_2015().network.copy_per_kib / 1024;
    let copies = f64_of(6 * (copy(large) - copy(small)));
    let growth = round_trip_ns(large) - round_trip_ns(small);
    assert!(growth > 0.9 * copies, "{growth} ns < {copies} ns");
}

#[test]
fn a_256_vcpu_vm_calls_all_with_one_icr_write_per_cluster_of_16() {
    let run = one(
        2,
        r#"
        [[runs]]
        workload = "ipi-call"
        designs = ["apicv"]
        target = "all"
        x2apic = "cluster"
        host = { cores = 257, vms = 1, vcpus_per_vm = 256 }
    "#,
    );
    // APICv virtualizes the EOI: every MSR_WRITE exit is an ICR write, 16
    // per call (logical IDs 1-255); the last call may be unfinished.
    let calls = throughput(&run, ThroughputUnit::CallsPerS);
    let writes = run.exits_by_reason_per_s[&VmxExit::MsrWrite];
    assert!(calls > 0.0);
    assert!(
        (16.0 * calls..=16.0 * (calls + 1.0 / 0.002)).contains(&writes),
        "{writes} writes/s for {calls} calls/s"
    );
    assert!(run.figures.total_s.is_some_and(|total| total > 0.0));
}

/// A call to all of a 33-vCPU VM's other vCPUs in x2APIC `mode` (guest
/// idle=poll: every callee runs in guest mode): its ICR writes per call
/// and its mean time, ns.
fn call_all(mode: &str) -> (f64, f64) {
    let run = one(
        20,
        &format!(
            r#"
            [[runs]]
            workload = "ipi-call"
            designs = ["apicv"]
            target = "all"
            idle = "poll"
            x2apic = "{mode}"
            host = {{ cores = 34, vms = 1, vcpus_per_vm = 33 }}
        "#
        ),
    );
    let calls = throughput(&run, ThroughputUnit::CallsPerS);
    let writes = run.exits_by_reason_per_s[&VmxExit::MsrWrite] / calls;
    let mean = run.latency_ns.as_ref().expect("call latencies").mean;
    (writes, mean)
}

#[test]
fn physical_mode_sends_n_minus_1_trapped_icr_writes_back_to_back() {
    let (physical_writes, physical_ns) = call_all("physical");
    let (cluster_writes, cluster_ns) = call_all("cluster");
    // APICv virtualizes the EOI: every MSR_WRITE is an ICR write. The
    // last call of the run may be cut short.
    assert!((physical_writes - 32.0).abs() < 1.0, "{physical_writes}");
    assert!((cluster_writes - 3.0).abs() < 0.2, "{cluster_writes}");
    // The 29 writes more each cost the sender an exit, one after another
    // (the kicks are the same in both modes).
    let profile = CostProfile::did_2015();
    let exit = profile.exit_service_ns.icr_write + profile.host_ns.exit_entry_transition;
    let extra = physical_ns - cluster_ns;
    assert!(extra > 0.8 * f64_of(29 * exit), "{extra} ns");
}

#[test]
fn adaptive_halt_polling_polls_only_the_vcpu_that_is_called() {
    let run = |idle: &str| {
        one(
            20,
            &format!(
                r#"
                [[runs]]
                workload = "ipi-call"
                designs = ["apicv"]
                target = "same-node"
                idle = "{idle}"
                host = {{ cores = 5, vms = 1, vcpus_per_vm = 4 }}
            "#
            ),
        )
    };
    let (adaptive, halt, fixed) = (run("adaptive-halt-poll"), run("halt"), run("halt-poll"));
    let mean = |run: &RunResult| run.latency_ns.as_ref().expect("latencies").mean;
    // The callee's window grew over its short waits: its calls find it
    // polled, never asleep, as the fixed window's do.
    assert!(
        mean(&adaptive) < mean(&halt),
        "a polled callee wakes sooner"
    );
    let wakeup = f64_of(CostProfile::did_2015().host_ns.wakeup);
    assert!((mean(&adaptive) - mean(&fixed)).abs() < 0.1 * wakeup);
    // vCPUs 2 and 3 halt once and are never called: an adaptive window
    // starts closed, so they sleep where the fixed window first polls
    // (did-2015's 200 us).
    assert!(adaptive.cpu_busy < fixed.cpu_busy);
    assert!(adaptive.cpu_busy < 1.0 - 2.0 * 0.9 / 4.0);
}

#[test]
fn guest_idle_poll_burns_a_full_core_per_vcpu_and_halting_does_not() {
    let busy = |idle: &str| {
        let run = one(
            2,
            &format!(
                r#"
                [[runs]]
                workload = "ipi-call"
                designs = ["apicv"]
                target = "same-node"
                idle = "{idle}"
                host = {{ cores = 5, vms = 1, vcpus_per_vm = 4 }}
            "#
            ),
        );
        assert!(run.throughput.as_ref().is_some_and(|t| t.value > 0.0));
        run.cpu_busy
    };
    assert_eq!(busy("poll"), 1.0);
    // vCPUs 2 and 3 are never called: they sleep nearly all the run.
    assert!(busy("halt") < 1.0 - 2.0 * 0.9 / 4.0);
}

#[test]
fn the_poll_mode_driver_forwards_frames_and_no_design_raises_an_interrupt() {
    for run in runs(
        5,
        r#"
        [[runs]]
        workload = "l2fwd"
        designs = ["vanilla", "did"]
    "#,
    ) {
        assert!(throughput(&run, ThroughputUnit::PacketsPerS) > 0.0);
        assert_eq!(run.interrupts.raised, 0, "{}", run.design);
    }
}

#[test]
fn every_workload_records_its_own_figure() {
    let kinds = [
        ("cyclictest", ""),
        ("fio", ""),
        ("ipi", "host = { cores = 3, vms = 1, vcpus_per_vm = 2 }"),
        ("netperf-rr", ""),
        ("apache", "clients = 4"),
    ];
    for (workload, more) in kinds {
        let run = one(
            10,
            &format!(
                r#"
                [[runs]]
                workload = "{workload}"
                designs = ["vanilla"]
                {more}
            "#
            ),
        );
        let latency = run.latency_ns.as_ref().expect("latencies");
        assert!(latency.samples > 0, "{workload}");
    }
}
