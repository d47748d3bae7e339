//! `dirq run <bench>`: boot the guest test kernel on KVM, run one
//! benchmark through the chosen interrupt path, count every exit.

use std::str::FromStr;

use anyhow::Context;
use dirq_stats::f64_of;
use dirq_vmm::bench;
use dirq_vmm::config::BenchParams;
use dirq_vmm::config::{
    self, ApicMode, Bench, BenchConfig, ConfigError, FaultKind, GuestExec, GuestIdle, HaltMode,
    Inject, IpiKind, IpiMeasure, IrqSource, Irqchip, Named, Param, Pin, TimerMode, VioapicLevel,
};
use dirq_vmm::hostile::Case;
use dirq_vmm::report::{text_table, LatencySummary, RunReport};

use crate::common::meta;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
  dirq run irq-latency                                   # KVM's LAPIC, the VMM injects MSIs\n  \
  dirq run irq-latency --irqchip userspace               # dirq's LAPIC model: every EOI exits to the VMM\n  \
  dirq run irq-latency --inject irqfd --pv-eoi           # the kernel delivers, EOI through shared memory\n  \
  dirq run irq-latency --compare                         # userspace vs kernel+irqfd+PV EOI, side by side\n  \
  dirq run timer-latency --timer oneshot --period-ns 100000\n  \
  dirq run ipi --guest-idle busy --json\n  \
  dirq run timer-latency --histogram=200                 # cyclictest-style histogram up to 200 us\n  \
  dirq run whileloop --rate 20000\n  \
  dirq run whileloop --irqchip userspace --sweep          # 2K..40K/s offered: handled against the path's peak\n  \
  dirq run vioapic --vioapic pv                          # level-triggered interrupts, MASK in shared memory\n  \
  dirq run io-batch --io-batch                           # 11 port writes per disk command, one exit\n  \
  dirq run tick --tick-scale 10                          # the guest's 1000 Hz PIT tick, 10x slower\n  \
  dirq run ipi --ipi broadcast --vcpus 4 --pv-send-ipi   # one hypercall pings three vCPUs (VT-x/SVM hosts only)\n  \
  dirq run ipi --pin one-core --count 200               # both vCPUs on one host CPU: a slow host's IPIs\n  \
  dirq run fault --fault triple-fault                    # fault handling self-test (exits non-zero)\n  \
  dirq run hostile --list                                # the attacks on the VMM, each with refuses or survives\n  \
  dirq run hostile --case pv-lock-held-forever           # one attack: the VMM must refuse it, naming the cause\n\n\
`dirq studies` runs vioapic, io-batch, tick and ipi in every mode and prints them side by side.")]
pub struct Args {
    /// Benchmark: irq-latency, timer-latency, ipi, whileloop, exit-cost, vioapic, io-batch, tick, halt-wakeup, fault, hostile.
    #[arg(value_parser = Bench::from_str, required_unless_present = "kernel")]
    bench: Option<Bench>,
    /// Boot this Multiboot v1 kernel (ELF32 or ELF64, e.g. kvm-unit-tests' x86/apic.flat) on a
    /// minimal PC instead of dirq's guest: it runs until it writes the isa-debug-exit port
    /// (0xf4) and `dirq` exits non-zero unless its status is 1 (its code 0). Takes --irqchip,
    /// --halt, --vcpus, --pin, --timeout (default 60 s), --console and --json.
    #[arg(long, value_name = "FILE", conflicts_with = "bench")]
    kernel: Option<std::path::PathBuf>,
    /// With --kernel: its command line.
    #[arg(long, value_name = "CMDLINE", requires = "kernel", default_value = "")]
    append: String,
    /// With --kernel: a file handed to it as its one Multiboot module (kvm-unit-tests reads
    /// its environment, e.g. `TEST_DEVICE=0`, from it).
    #[arg(long, value_name = "FILE", requires = "kernel")]
    initrd: Option<std::path::PathBuf>,
    /// With --kernel: guest RAM in MiB, 64-3072; default 128.
    #[arg(long, value_name = "MIB", requires = "kernel")]
    ram_mib: Option<u32>,
    /// Interrupt controller: userspace (dirq's models, every access exits), kernel (KVM's), split (KVM LAPIC, dirq IOAPIC).
    #[arg(long, value_parser = Irqchip::from_str)]
    irqchip: Option<Irqchip>,
    /// How the device's MSI reaches the vCPU: vcpu (the VMM injects it) or irqfd (the kernel does).
    #[arg(long, value_parser = Inject::from_str)]
    inject: Option<Inject>,
    /// What the irq-latency device drives: msi, or ioapic (input 10 of the IOAPIC, routed by the guest).
    #[arg(long, value_parser = IrqSource::from_str)]
    source: Option<IrqSource>,
    /// Let the guest use KVM's PV EOI (EOI through a shared-memory flag, no exit).
    #[arg(long)]
    pv_eoi: bool,
    /// HLT handling: exit (sleep at once), poll:<ns> (KVM halt polling), none (HLT does not exit).
    #[arg(long, value_parser = HaltMode::from_str)]
    halt: Option<HaltMode>,
    /// LAPIC interface the guest uses: xapic (MMIO) or x2apic (MSRs).
    #[arg(long, value_parser = ApicMode::from_str)]
    apic: Option<ApicMode>,
    /// What the guest does between events: halt or busy (spin).
    #[arg(long, value_parser = GuestIdle::from_str)]
    guest_idle: Option<GuestIdle>,
    /// LAPIC timer mode for timer-latency: oneshot or tsc-deadline.
    #[arg(long, value_parser = TimerMode::from_str)]
    timer: Option<TimerMode>,
    /// Events to measure (interrupts, timer expiries, IPI round trips, timed exits):
    /// 1-1572864; default 5000 (exit-cost 20000, vioapic 20000, halt-wakeup 1000).
    #[arg(long)]
    count: Option<u64>,
    /// Device interrupts per second for irq-latency and whileloop, 0-1000000 (0 = back to back);
    /// default 5000 (whileloop 10000).
    #[arg(long)]
    rate: Option<u64>,
    /// Timer period in ns for timer-latency, 1000-1000000000; default 200000.
    #[arg(long)]
    period_ns: Option<u64>,
    /// Length of whileloop's unloaded loop and tick's loop, in ms, 1-60000; default 500.
    #[arg(long)]
    duration_ms: Option<u64>,
    /// The fault bench's misbehaviour: triple-fault, hang, unowned-port, unowned-mmio, exception.
    #[arg(long, value_parser = FaultKind::from_str)]
    fault: Option<FaultKind>,
    /// vioapic: where the I/O interrupt controller lives: userspace, kernel, ro-page or pv.
    #[arg(long, value_parser = VioapicLevel::from_str)]
    vioapic: Option<VioapicLevel>,
    /// vioapic race test: the device raises at random times while the guest masks and unmasks.
    #[arg(long)]
    race: bool,
    /// io-batch: record each disk command's port writes and ring one doorbell.
    #[arg(long)]
    io_batch: bool,
    /// tick: run the guest's PIT this many times slower, unseen by the guest: 1-1000; default 1.
    #[arg(long, value_name = "K")]
    tick_scale: Option<u32>,
    /// ipi: unicast (CPU 0 pings CPU 1) or broadcast (CPU 0 pings every other vCPU).
    #[arg(long, value_parser = IpiKind::from_str)]
    ipi: Option<IpiKind>,
    /// ipi broadcast: send with one KVM PV send-IPI hypercall instead of an ICR write
    /// (needs hypercalls: unavailable under kvm_pvm).
    #[arg(long)]
    pv_send_ipi: bool,
    /// ipi: what a sample times: round-trip (ping to last pong) or one-way (ping to its handler).
    #[arg(long, value_parser = IpiMeasure::from_str)]
    ipi_measure: Option<IpiMeasure>,
    /// vCPUs to boot, 1-8 (more than the host's cores is allowed); default 2.
    #[arg(long)]
    vcpus: Option<u32>,
    /// How the guest executes: native or emulated (kvm_pvm hosts; default: native where offered).
    /// VT-x/SVM hosts run it on hardware and take no other value.
    #[arg(long, value_parser = GuestExec::from_str)]
    guest_exec: Option<GuestExec>,
    /// Where the vCPU threads run: spread (each on a host CPU of its own, when there are
    /// enough) or one-core (all on one host CPU: cross-vCPU interrupts then wait for the
    /// scheduler, milliseconds each, as on a slow or busy host); default spread.
    #[arg(long, value_parser = Pin::from_str)]
    pin: Option<Pin>,
    /// Watchdog: fail the run if the guest has not finished after this many seconds,
    /// 0.001-3600. Default: scaled to the run's work (--count, --rate, --period-ns,
    /// --duration-ms, --vcpus) at a slow host's cost per event (25 ms per interrupt another
    /// thread sends, 0.7 ms per exit), plus 10 s, at least 30 (hostile: 4).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Print one JSON object instead of the tables: the run, with the schema version, command
    /// line, dirq version, host and start/end times.
    #[arg(long)]
    json: bool,
    /// After the tables, print the latency histogram as cyclictest does: one line per bucket up
    /// to US microseconds, 1-10000000 (default 10000), then min/avg/max and the samples above (overflows).
    #[arg(
        long,
        value_name = "US",
        num_args = 0..=1,
        default_missing_value = "10000",
        value_parser = clap::value_parser!(u64).range(1..=10_000_000),
        conflicts_with_all = ["json", "compare"]
    )]
    histogram: Option<u64>,
    /// Echo the guest's serial console to stderr.
    #[arg(long)]
    console: bool,
    /// hostile: the attack on the VMM to run (`--list` names them all).
    #[arg(long = "case", value_parser = Case::from_str)]
    case: Option<Case>,
    /// hostile: list every attack with what the VMM must do with it (refuses or survives).
    #[arg(long, conflicts_with = "case")]
    list: bool,
    /// irq-latency only: compare the userspace path (--irqchip userspace --halt exit) with the best
    /// in-kernel one (--irqchip kernel --inject irqfd --pv-eoi --halt poll:200000); --count, --rate,
    /// --apic, --guest-idle and --source apply to both.
    #[arg(long)]
    compare: bool,
    /// whileloop only: run it at 2K, 5K, 10K, 20K and 40K interrupts/s offered and print what
    /// the path handled at each beside its peak: whether it holds its capacity under overload.
    #[arg(long, conflicts_with_all = ["rate", "compare", "histogram"])]
    sweep: bool,
}

impl Args {
    /// `--kernel`: what to boot and how; the bench flags are refused.
    fn kernel_run(&self, kernel: &std::path::Path) -> anyhow::Result<crate::kernel::KernelRun> {
        let bench_only = [
            ("--inject", self.inject.is_some()),
            ("--source", self.source.is_some()),
            ("--pv-eoi", self.pv_eoi),
            ("--apic", self.apic.is_some()),
            ("--guest-idle", self.guest_idle.is_some()),
            ("--timer", self.timer.is_some()),
            ("--count", self.count.is_some()),
            ("--rate", self.rate.is_some()),
            ("--period-ns", self.period_ns.is_some()),
            ("--duration-ms", self.duration_ms.is_some()),
            ("--fault", self.fault.is_some()),
            ("--vioapic", self.vioapic.is_some()),
            ("--race", self.race),
            ("--io-batch", self.io_batch),
            ("--tick-scale", self.tick_scale.is_some()),
            ("--ipi", self.ipi.is_some()),
            ("--pv-send-ipi", self.pv_send_ipi),
            ("--ipi-measure", self.ipi_measure.is_some()),
            ("--guest-exec", self.guest_exec.is_some()),
            ("--histogram", self.histogram.is_some()),
            ("--case", self.case.is_some()),
            ("--list", self.list),
            ("--compare", self.compare),
            ("--sweep", self.sweep),
        ];
        if let Some((flag, _)) = bench_only.iter().find(|(_, given)| *given) {
            anyhow::bail!(
                "{flag} is a benchmark flag: a --kernel run takes --irqchip, --halt, --vcpus, \
                 --pin, --timeout, --console and --json (--inject: such a kernel has no MSI device; \
                 pc-testdev's lines go through the irqchip's IOAPIC)"
            );
        }
        Ok(crate::kernel::KernelRun {
            kernel: kernel.to_path_buf(),
            cmdline: self.append.clone(),
            initrd: self.initrd.clone(),
            irqchip: self.irqchip.unwrap_or(Irqchip::Kernel),
            halt: self.halt.unwrap_or(HaltMode::Exit),
            vcpus: self.vcpus.unwrap_or(1),
            ram_mib: self.ram_mib,
            timeout_s: self.timeout,
            pin: self.pin.unwrap_or(Pin::Spread),
        })
    }

    fn config(&self) -> anyhow::Result<BenchConfig> {
        let bench = self
            .bench
            .context("name a benchmark, or boot a kernel with --kernel")?;
        let mut config = match (bench, self.case) {
            (Bench::Hostile, Some(case)) => case.config(),
            (bench, Some(_)) => {
                return Err(ConfigError::NotApplicable {
                    flag: "--case",
                    bench,
                    takers: vec![Bench::Hostile],
                }
                .into())
            }
            (Bench::Hostile, None) => {
                anyhow::bail!("hostile needs --case <name>: `dirq run hostile --list` names them")
            }
            (bench, _) => BenchConfig::new(bench),
        };
        self.refuse_actions_of_other_benches()?;
        self.set_params(&mut config)?;
        let common = &mut config.common;
        common.irqchip = self.irqchip.unwrap_or(common.irqchip);
        common.inject = self.inject.unwrap_or(common.inject);
        // A flag not given keeps what the bench (or hostile case) chose.
        common.pv_eoi |= self.pv_eoi;
        common.halt = self.halt.unwrap_or(common.halt);
        common.apic = self.apic.unwrap_or(common.apic);
        common.guest_idle = self.guest_idle.unwrap_or(common.guest_idle);
        common.guest_exec = self.guest_exec.or(common.guest_exec);
        common.vcpus = self.vcpus.unwrap_or(common.vcpus);
        common.pin = self.pin.unwrap_or(common.pin);
        if let Some(seconds) = self.timeout {
            common.timeout_ms = Some(config::timeout_ms_from_seconds(seconds)?);
        }
        config.validate()?;
        Ok(config)
    }

    /// The bench parameters the command line gives: the bench's own
    /// parameter set takes them, or refuses one it would silently ignore.
    fn set_params(&self, config: &mut BenchConfig) -> Result<(), ConfigError> {
        let given = [
            self.count.map(Param::Count),
            self.rate.map(Param::Rate),
            self.source.map(Param::Source),
            self.period_ns.map(Param::PeriodNs),
            self.timer.map(Param::Timer),
            self.duration_ms.map(Param::DurationMs),
            self.fault.map(Param::Fault),
            self.vioapic.map(Param::Vioapic),
            self.race.then_some(Param::Race),
            self.io_batch.then_some(Param::IoBatch),
            self.tick_scale.map(Param::TickScale),
            self.ipi.map(Param::Ipi),
            self.pv_send_ipi.then_some(Param::PvSendIpi),
            self.ipi_measure.map(Param::IpiMeasure),
            // An attack on another bench is that bench's run: it takes no case.
            self.case.and_then(|case| match case {
                Case::Hostile(case) => Some(Param::Case(case)),
                Case::Attack(_) => None,
            }),
        ];
        given
            .into_iter()
            .flatten()
            .try_for_each(|param| config.params.set(param))
    }

    /// `--list` and `--compare` do something else than one run, for one
    /// bench each; `--compare` chooses the interrupt path itself.
    fn refuse_actions_of_other_benches(&self) -> anyhow::Result<()> {
        for (flag, given, bench) in [
            ("--list", self.list, Bench::Hostile),
            ("--compare", self.compare, Bench::IrqLatency),
            ("--sweep", self.sweep, Bench::Whileloop),
        ] {
            let Some(given_bench) = self.bench else {
                continue;
            };
            if given && given_bench != bench {
                return Err(ConfigError::NotApplicable {
                    flag,
                    bench: given_bench,
                    takers: vec![bench],
                }
                .into());
            }
        }
        // --compare chooses these for each of its two paths.
        let overridden = [
            ("--irqchip", self.irqchip.is_some()),
            ("--inject", self.inject.is_some()),
            ("--pv-eoi", self.pv_eoi),
            ("--halt", self.halt.is_some()),
        ];
        if let Some((flag, _)) = overridden.iter().find(|(_, given)| self.compare && *given) {
            anyhow::bail!(
                "--compare sets --irqchip, --inject, --pv-eoi and --halt for each path itself: drop {flag}"
            );
        }
        Ok(())
    }
}

pub fn execute(args: Args) -> anyhow::Result<()> {
    if let Some(kernel) = &args.kernel {
        return crate::kernel::execute(&args.kernel_run(kernel)?, args.console, args.json);
    }
    if args.list {
        args.refuse_actions_of_other_benches()?;
        args.set_params(&mut BenchConfig::new(Bench::Hostile))?;
        crate::output::print(&dirq_vmm::hostile::list())?;
        return Ok(());
    }
    let config = args.config()?;
    let started = time::OffsetDateTime::now_utc();
    if args.compare {
        let spinner = indicatif::ProgressBar::new_spinner().with_message(
            "booting the guest three times: userspace path, best in-kernel path, exit costs",
        );
        spinner.enable_steady_tick(std::time::Duration::from_millis(100));
        let comparison = bench::irq_latency::compare(&config);
        spinner.finish_and_clear();
        let comparison = comparison.context("comparison run failed")?;
        if args.json {
            let guest_exec = Some(comparison.best.guest_exec.name().to_string());
            meta::print_json(&comparison, started, guest_exec)?;
        } else {
            crate::output::print(&comparison_text(&comparison))?;
        }
        return Ok(());
    }
    if args.sweep {
        let BenchParams::Whileloop(params) = &config.params else {
            anyhow::bail!("--sweep runs whileloop only");
        };
        let rates = bench::whileloop::SWEEP_RATES_HZ;
        let progress = indicatif::ProgressBar::new_spinner().with_message(format!(
            "booting the guest {} times, one per offered rate",
            rates.len()
        ));
        progress.enable_steady_tick(std::time::Duration::from_millis(100));
        let sweep = bench::whileloop::sweep(&config.common, params, &rates);
        progress.finish_and_clear();
        let sweep = sweep.context("sweep run failed")?;
        if args.json {
            let guest_exec = sweep
                .runs
                .first()
                .map(|run| run.guest_exec.name().to_string());
            meta::print_json(&sweep, started, guest_exec)?;
        } else {
            crate::output::print(&sweep_text(&sweep))?;
        }
        return Ok(());
    }
    let report = bench::run_with_console(&config, args.console)
        .with_context(|| format!("{} run failed", config.bench()))?;
    if args.json {
        let guest_exec = Some(report.guest_exec.name().to_string());
        meta::print_json(&report, started, guest_exec)?;
        return Ok(());
    }
    let mut text = report.to_string();
    if let Some(max_us) = args.histogram {
        match &report.latency_ns {
            Some(latency) => text += &cyclictest_histogram(latency, max_us),
            None => text += &format!("# Histogram: {} measures no latency\n", config.bench()),
        }
    }
    Ok(crate::output::print(&text)?)
}

/// `--compare`: both paths side by side, then the verdict.
fn comparison_text(comparison: &bench::irq_latency::Comparison) -> String {
    let mut table = text_table(&[
        "irq-latency path",
        "p50 (us)",
        "p99 (us)",
        "exits/irq",
        "userspace exits/irq",
    ]);
    for report in [&comparison.baseline, &comparison.best] {
        let us = |pick: fn(&LatencySummary) -> u64| {
            report
                .latency_ns
                .as_ref()
                .map_or_else(|| "-".into(), |l| format!("{:.2}", f64_of(pick(l)) / 1e3))
        };
        table.add_row(vec![
            report.path(),
            us(|l| l.p50),
            us(|l| l.p99),
            format!("{:.2}", report.exits_per_interrupt),
            format!("{:.2}", report.userspace_exits_per_interrupt),
        ]);
    }
    let mut text = format!(
        "{table}\nguest {}; one exit: userspace {:.2} us, in-kernel {:.2} us; \
         IPI into a busy vCPU {:.2} us (p50, one way)\n",
        comparison.best.guest_exec,
        comparison.userspace_exit_ns / 1e3,
        comparison.kernel_exit_ns / 1e3,
        comparison.ipi_busy_p50_ns / 1e3
    );
    for report in [&comparison.baseline, &comparison.best] {
        text.push_str(&format!(
            "where {}'s time goes, exits per interrupt: {}\n",
            report.config.common.irqchip,
            exit_mix(report)
        ));
    }
    text.push_str(&format!(
        "p50 speedup (userspace / best): {:.2}x; best p50 = {:.2} in-kernel exits = {:.2}x the busy-IPI floor\n",
        comparison.p50_speedup,
        comparison.best_p50_in_kernel_exits,
        comparison.best_p50_over_ipi_floor
    ));
    text
}

/// `--sweep`: each offered rate's run, what the path handled against its
/// peak, and the verdict at the highest rate.
fn sweep_text(sweep: &bench::whileloop::Sweep) -> String {
    use bench::whileloop::Sweep;
    let mut table = text_table(&[
        "offered/s",
        "raised/s",
        "handled/s",
        "of peak",
        "exits/irq",
        "kicks/irq",
        "vCPU 0 waited for a CPU",
        "guest share",
        "saturated",
    ]);
    let per_s = |count: u64, run: &RunReport| {
        if run.duration_s > 0.0 {
            f64_of(count) / run.duration_s
        } else {
            0.0
        }
    };
    for run in &sweep.runs {
        let BenchParams::Whileloop(params) = &run.config.params else {
            continue;
        };
        let raised = run.results.whileloop().map_or(0, |result| result.raised);
        let per_interrupt = |count: u64| f64_of(count) / f64_of(run.interrupts.max(1));
        // vCPU 0 takes the device's interrupts and runs the loop.
        let waited_s = run.exits.per_vcpu.first().map_or(0.0, |vcpu| vcpu.waited_s);
        table.add_row(vec![
            params.rate_hz.to_string(),
            format!("{:.0}", per_s(raised, run)),
            format!("{:.0}", Sweep::handled_per_s(run)),
            format!("{:.0}%", 100.0 * sweep.share_of_peak(run)),
            format!("{:.2}", run.exits_per_interrupt),
            format!("{:.2}", per_interrupt(run.exits.kicks)),
            format!("{:.0}%", 100.0 * waited_s / run.duration_s.max(1e-9)),
            format!("{:.3}", run.results.guest_share().unwrap_or(0.0)),
            if run.saturated.is_some() { "yes" } else { "no" }.into(),
        ]);
    }
    let mut text = match sweep.runs.first() {
        Some(run) => format!("whileloop  {}\n", run.path()),
        None => String::new(),
    };
    text.push_str(&format!("{table}\n"));
    if let Some(last) = sweep.runs.last() {
        text.push_str(&format!(
            "peak {:.0} handled/s; at the highest rate offered the path handled {:.0}/s, {:.0}% of its peak\n",
            sweep.peak_per_s(),
            Sweep::handled_per_s(last),
            100.0 * sweep.share_of_peak(last)
        ));
    }
    text.push_str(
        "vCPU 0 waited for a CPU: the share of the window the thread of the vCPU that takes the \
         interrupts was runnable but not running (the host's other work); a busy host lowers \
         every rate's handled figure.\n",
    );
    text
}

/// A run's exits per interrupt by VMX reason (userspace exits named "to
/// VMM"), largest first.
fn exit_mix(report: &RunReport) -> String {
    let interrupts = f64_of(report.interrupts.max(1));
    let mut mix: Vec<(String, f64)> = report
        .exits
        .by_category
        .iter()
        .map(|(reason, count)| (reason.to_string(), f64_of(*count) / interrupts))
        .chain(
            report
                .exits
                .userspace_by_reason
                .iter()
                .map(|(reason, count)| (format!("{reason} to VMM"), f64_of(*count) / interrupts)),
        )
        .filter(|(_, per)| *per >= 0.01)
        .collect();
    mix.sort_by(|a, b| b.1.total_cmp(&a.1));
    mix.iter()
        .map(|(reason, per)| format!("{reason} {per:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// cyclictest's `--histogram` output, on the run's log buckets: one line
/// per non-empty bucket up to `max_us` (its upper bound in us, then its
/// samples), the totals, and the samples beyond `max_us`.
fn cyclictest_histogram(latency: &LatencySummary, max_us: u64) -> String {
    let mut text =
        String::from("# Histogram (bucket upper bound in us, samples; each bucket 5% wider)\n");
    let mut overflows = 0;
    for bucket in &latency.histogram {
        if bucket.le_ns > max_us * 1_000 {
            overflows += bucket.count;
        } else {
            text.push_str(&format!(
                "{:>10.1} {:>8}\n",
                f64_of(bucket.le_ns) / 1e3,
                bucket.count
            ));
        }
    }
    text.push_str(&format!(
        "# Total: {}\n# Min Latencies: {:.1}\n# Avg Latencies: {:.1}\n# Max Latencies: {:.1}\n\
         # Histogram Overflows: {overflows} (above {max_us} us)\n",
        latency.samples,
        f64_of(latency.min) / 1e3,
        latency.mean / 1e3,
        f64_of(latency.max) / 1e3
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use dirq_vmm::config::{BenchParams, HostileCase};

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// `dirq run`'s reading of a bench's parameters printed as flags.
    fn parsed(params: &BenchParams) -> BenchParams {
        let words: Vec<String> = params
            .params()
            .iter()
            .flat_map(|param| {
                let text = param.to_string();
                text.split(' ').map(String::from).collect::<Vec<_>>()
            })
            .collect();
        let line = ["dirq", params.bench().name()]
            .into_iter()
            .map(String::from)
            .chain(words);
        let cli = Cli::try_parse_from(line).expect("dirq run takes every flag a set prints");
        cli.args.config().expect("valid").params
    }

    #[test]
    fn every_parameter_printed_as_a_flag_reads_back_through_dirq_run() {
        let mut sets: Vec<BenchParams> = Bench::ALL
            .iter()
            .filter(|&&bench| bench != Bench::Hostile)
            .map(|&bench| BenchParams::new(bench))
            .collect();
        sets.push(HostileCase::ALL[1].config().params);
        // Non-defaults, the boolean flags among them.
        for (bench, flags) in [
            (
                Bench::Ipi,
                ["--ipi", "broadcast", "--pv-send-ipi", "--count", "9"].as_slice(),
            ),
            (Bench::Vioapic, &["--vioapic", "ro-page", "--race"]),
            (Bench::IoBatch, &["--io-batch", "--count", "7"]),
            (
                Bench::TimerLatency,
                &["--timer", "oneshot", "--period-ns", "5000"],
            ),
            (Bench::Tick, &["--tick-scale", "10", "--duration-ms", "20"]),
            (Bench::IrqLatency, &["--source", "ioapic", "--rate", "0"]),
            (Bench::Whileloop, &["--rate", "3"]),
        ] {
            let head = ["dirq", bench.name()];
            let cli = Cli::try_parse_from(head.iter().chain(flags)).expect("valid flags");
            let params = cli.args.config().expect("valid").params;
            assert_ne!(
                params,
                BenchParams::new(bench),
                "{flags:?} changes the defaults"
            );
            sets.push(params);
        }
        for params in sets {
            assert_eq!(parsed(&params), params, "{}", params.bench());
        }
    }

    #[test]
    fn histogram_lists_buckets_up_to_the_limit_and_counts_the_rest_as_overflows() {
        let samples: Vec<u64> = (1..=100).map(|i| i * 1_000).collect();
        let latency = LatencySummary::from_samples_ns(&samples).expect("samples");
        let text = cyclictest_histogram(&latency, 50);
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        let listed: u64 = lines
            .iter()
            .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        assert!((49..=50).contains(&listed), "{text}");
        assert!(text.contains(&format!(
            "# Histogram Overflows: {} (above 50 us)",
            100 - listed
        )));
        assert!(text.contains("# Max Latencies: 100.0"), "{text}");
    }
}
