//! `dirq calibrate`: measures this host's interrupt costs with the real VMM
//! and writes them as a cost profile that `dirq sim --profile` accepts.

pub mod costs;
pub mod profile;

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{ensure, Context, Result};
use dirq_vmm::config::params::IrqLatencyParams;
use dirq_vmm::config::{
    BenchConfig, BenchParams, CommonSettings, GuestExec, GuestIdle, Inject, Irqchip,
};
use dirq_vmm::probe::{Floor, ProbeReport};
use dirq_vmm::RunReport;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::common::plan::{command_line, fit_to_budget, run_case};
use costs::{derive_costs, Commands, HostCosts, Observations};
use profile::{host_profile, HostProfile};

#[derive(clap::Args)]
#[command(
    after_help = "Measures what interrupts cost on this host with dirq's real VMM on \
/dev/kvm: one userspace exit and one in-kernel exit, an interrupt into a running and into a \
halted vCPU (and so the HLT wake-up), EOI through the VMM's LAPIC, KVM's LAPIC and PV EOI, \
and timer programming. Writes them as a simulator cost profile: \
measured fields replace did-2015's, the rest are kept from did-2015, and every field says which.\n\n\
Examples:\n  dirq calibrate --out host.toml && dirq sim did-udp-rx --profile host.toml\n  \
dirq calibrate --quick --json"
)]
pub struct Args {
    /// Write the profile TOML here (default: print it to stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Fewer events per measurement (each run at most 1 s instead of 2.5 s).
    #[arg(long)]
    pub quick: bool,
    /// Print the measured costs and the profile as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// How the guest executes: native or emulated (kvm_pvm; default: native where offered).
    #[arg(long, value_parser = GuestExec::from_str)]
    pub guest_exec: Option<GuestExec>,
}

/// Everything a calibration measured and produced.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub probe: ProbeReport,
    pub costs: HostCosts,
    pub host: HostProfile,
    /// The reports of the runs behind the costs.
    pub runs: Vec<RunReport>,
}

/// The most events each calibration run measures: what a fast host runs.
fn most_events(quick: bool) -> u64 {
    if quick {
        1_000
    } else {
        5_000
    }
}

/// The wall time one calibration run may take, however slow the host.
fn run_budget_ms(quick: bool) -> u64 {
    if quick {
        1_000
    } else {
        2_500
    }
}

/// How many real runs a calibration makes (after the probe).
pub const CALIBRATION_RUNS: u64 = CALIBRATION_RUN_COUNT as u64;
const CALIBRATION_RUN_COUNT: usize = 3;

/// The calibration runs: an interrupt into a running and into a halted
/// vCPU, on the in-kernel path with PV EOI, where the interrupt's only exit
/// is its delivery; and into a halted vCPU through dirq's userspace LAPIC,
/// whose halted vCPU waits in the VMM, not in KVM.
fn calibration_runs(events: u64, guest_exec: GuestExec) -> [BenchConfig; CALIBRATION_RUN_COUNT] {
    let mut running = BenchConfig::from(BenchParams::IrqLatency(IrqLatencyParams {
        count: events,
        ..IrqLatencyParams::default()
    }));
    running.common = CommonSettings {
        guest_exec: Some(guest_exec),
        irqchip: Irqchip::Kernel,
        inject: Inject::Irqfd,
        pv_eoi: true,
        guest_idle: GuestIdle::Busy,
        ..running.common
    };
    let mut halted = running.clone();
    halted.common.guest_idle = GuestIdle::Halt;
    let mut halted_userspace = halted.clone();
    halted_userspace.common.irqchip = Irqchip::Userspace;
    halted_userspace.common.inject = Inject::Vcpu;
    halted_userspace.common.pv_eoi = false;
    [running, halted, halted_userspace]
}

/// Runs the calibration runs (advancing `bar` once per run) in the mode
/// `probe` measured in, and derives the costs and the profile from them
/// and from `probe`'s exit costs.
pub fn calibrate(probe: ProbeReport, quick: bool, bar: &ProgressBar) -> Result<Calibration> {
    let mut configs = calibration_runs(most_events(quick), probe.guest_exec);
    for config in &mut configs {
        fit_to_budget(config, run_budget_ms(quick), Some(&probe.floors));
    }
    let mut reports = Vec::new();
    let mut runs = Vec::new();
    for config in &configs {
        crate::common::progress::working_on(
            bar,
            format!(
                "{} {}",
                config.bench(),
                crate::common::plan::path_label(config)
            ),
        );
        let (case, report) = run_case(config)
            .with_context(|| format!("calibration run `{}` failed", command_line(config)))?;
        reports.push(case.run);
        runs.push(report);
        bar.inc(1);
    }
    let [running, halted, halted_userspace] = &reports[..] else {
        anyhow::bail!(
            "calibration made {} runs, expected {CALIBRATION_RUN_COUNT}",
            reports.len()
        );
    };
    let p50 = |run: &crate::common::views::RealRun, command: &str| -> Result<f64> {
        run.latency_ns
            .as_ref()
            .map(|latency| latency.p50)
            .with_context(|| format!("`{command}` reported no latency"))
    };
    let commands = Commands {
        probe: format!("dirq probe --guest-exec {}", probe.guest_exec),
        inject_running: command_line(&configs[0]),
        inject_halted: command_line(&configs[1]),
        inject_halted_userspace: command_line(&configs[2]),
    };
    let floors = &probe.floors;
    let observations = Observations {
        userspace_exit_ns: floors.userspace_exit_ns,
        kernel_exit_ns: floors.kernel_exit_ns,
        self_ipi_p50_ns: floors.self_ipi_p50_ns,
        ipi_send_busy_ns: floors.ipi_busy_send_ns,
        ipi_busy_target_ns: floors.ipi_busy_target_ns,
        userspace_ipi_send_busy_ns: floors.userspace_ipi_busy_send_ns,
        userspace_ipi_busy_target_ns: floors.userspace_ipi_busy_target_ns,
        inject_running_p50_ns: p50(running, &commands.inject_running)?,
        inject_halted_p50_ns: p50(halted, &commands.inject_halted)?,
        inject_halted_userspace_p50_ns: p50(halted_userspace, &commands.inject_halted_userspace)?,
        half_spread_ns: Floor::ALL
            .into_iter()
            .map(|floor| (floor, floors.half_spread_ns(floor)))
            .collect(),
        unpinned: floors
            .unpinned()
            .into_iter()
            .map(|(floor, _)| floor)
            .collect(),
        commands,
    };
    ensure!(
        observations.userspace_exit_ns > 0.0 && observations.kernel_exit_ns > 0.0,
        "probe measured no exit cost (userspace {} ns, kernel {} ns)",
        observations.userspace_exit_ns,
        observations.kernel_exit_ns
    );
    let costs = derive_costs(&observations);
    let name = format!(
        "host-{}",
        probe.backend.clone().unwrap_or_else(|| "kvm".into())
    );
    let host = host_profile(&name, &costs, probe.default_halt_poll_ns);
    Ok(Calibration {
        probe,
        costs,
        host,
        runs,
    })
}

pub fn execute(args: Args) -> Result<()> {
    let started = time::OffsetDateTime::now_utc();
    if let Some(path) = &args.out {
        crate::output::check_writable(path)?;
    }
    diag!("dirq calibrate: measuring this host's interrupt costs on /dev/kvm ...");
    let bar = ProgressBar::new(CALIBRATION_RUNS);
    crate::common::progress::working_on(&bar, "probe");
    // Every step is needed for the profile: the first that fails ends it.
    let calibration = dirq_vmm::probe::probe(args.guest_exec)
        .context("probe failed")
        .and_then(|probe| calibrate(probe, args.quick, &bar));
    bar.finish_and_clear();
    let calibration = calibration.inspect_err(|err| {
        diag!("dirq calibrate: FAILED {err:#}; no profile written");
    })?;
    let toml = calibration
        .host
        .to_toml()
        .context("cannot write the profile as TOML")?;
    if args.json {
        let guest_exec = Some(calibration.probe.guest_exec.to_string());
        crate::common::meta::print_json(&calibration, started, guest_exec)?;
    } else {
        diag!("{:<48} {:>12}  source", "cost", "ns");
        for (name, measured) in calibration.costs.rows() {
            diag!(
                "{name:<48} {:>12.0}  {}",
                measured.ns,
                measured.provenance()
            );
        }
    }
    match &args.out {
        Some(path) => {
            crate::output::write_atomic(path, toml.as_bytes())?;
            diag!(
                "dirq calibrate: wrote {} (use it with `dirq sim <scenario> --profile {}`)",
                path.display(),
                path.display()
            );
        }
        None if !args.json => crate::output::print(&toml)?,
        None => {}
    }
    Ok(())
}
