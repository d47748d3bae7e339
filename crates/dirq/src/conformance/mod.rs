//! `dirq conformance --kut DIR`: kvm-unit-tests' APIC, IOAPIC and event
//! injection tests booted by dirq's VMM through every interrupt path, side
//! by side with KVM's own in-kernel devices (the kernel irqchip), and
//! vmexit.flat's exit costs beside `dirq probe`'s floors; QEMU on the same
//! host boots the same binaries as a second reference. Builds nothing:
//! DIR is a kvm-unit-tests tree after `./configure && make`.

mod qemu;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use dirq_stats::f64_of;
use dirq_vmm::config::{GuestExec, HaltMode, Irqchip, Pin};
use dirq_vmm::multiboot::KernelEnd;
use dirq_vmm::report::text_table;
use serde::Serialize;

use crate::kernel::{describe_end, KernelRun, PASS_STATUS};
use qemu::{QemuBoot, QemuIrqchip};

#[derive(clap::Args)]
#[command(after_help = "Example:\n  \
  git clone https://gitlab.com/kvm-unit-tests/kvm-unit-tests && cd kvm-unit-tests && ./configure && make\n  \
  dirq conformance --kut kvm-unit-tests\n\n\
Every run is bounded by its watchdog; apic.flat takes minutes through the userspace irqchip \
(its pending-NMI test sends 1.1 million IPIs, each an exit to the VMM under emulation).")]
pub struct Args {
    /// A kvm-unit-tests build directory: x86/apic.flat, x86/ioapic.flat, x86/eventinj.flat
    /// and x86/vmexit.flat are booted from it.
    #[arg(long, value_name = "DIR")]
    kut: PathBuf,
    /// Watchdog of each run in seconds, 1-3600; default per test (apic 900, ioapic 300,
    /// eventinj 120, vmexit 300).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Leave out vmexit.flat and the probe.
    #[arg(long)]
    no_vmexit: bool,
    /// The QEMU that boots the same tests as the reference (`-accel kvm`,
    /// kernel and split irqchip); its columns read '-' if it cannot start.
    #[arg(long, value_name = "PATH", default_value = "qemu-system-x86_64")]
    qemu: PathBuf,
    /// Leave out the QEMU reference runs.
    #[arg(long)]
    no_qemu: bool,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
}

/// Who ran a test, through which interrupt path: one column of the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
enum Column {
    Dirq(Irqchip),
    Qemu(QemuIrqchip),
}

/// dirq's paths, KVM's own devices last, then QEMU's: the references.
const COLUMNS: [Column; 5] = [
    Column::Dirq(Irqchip::Userspace),
    Column::Dirq(Irqchip::Split),
    Column::Dirq(Irqchip::Kernel),
    Column::Qemu(QemuIrqchip::Split),
    Column::Qemu(QemuIrqchip::Kernel),
];

/// A test file, its vCPUs and its default watchdog.
struct Suite {
    name: &'static str,
    vcpus: u32,
    timeout_s: f64,
}

const SUITES: [Suite; 3] = [
    Suite {
        name: "apic",
        vcpus: 1,
        timeout_s: 900.0,
    },
    Suite {
        name: "ioapic",
        vcpus: 1,
        // It runs in seconds; the split runs hang (docs/conformance.md).
        timeout_s: 120.0,
    },
    Suite {
        name: "eventinj",
        vcpus: 1,
        timeout_s: 120.0,
    },
];

/// kvm-unit-tests' environment: the PV-IPI test (a hypercall) is skipped.
const ENVIRONMENT: &str = "TEST_DEVICE=0\n";

/// vmexit.flat's tests that need no hypercall; `ipi` needs two vCPUs.
const VMEXIT_TESTS: &str = "cpuid inl_from_pmtimer inl_from_qemu inl_from_kernel outl_to_kernel \
                            mov_from_cr8 mov_to_cr8 self_ipi_sti_nop x2apic_self_ipi_sti_nop ipi";
const VMEXIT_VCPUS: u32 = 2;
const VMEXIT_TIMEOUT_S: f64 = 300.0;

/// What fails on a kvm_pvm host whatever the path, because its guest runs
/// in KVM's instruction emulator (about 0.7 us an instruction).
const EMULATOR_FAILURES: [(&str, &str, &str); 4] = [
    (
        "apic",
        "PV IPIs testing",
        "a hypercall: VMCALL livelocks in the emulator (or raises #UD with the hypercall quirk off); skipped by TEST_DEVICE=0",
    ),
    (
        "apic",
        "tsc deadline timer / TMCCT",
        "busy-wait timer windows: the test polls for an expiry within a TSC window the emulated loop overruns",
    ),
    (
        "eventinj",
        "every check after the first",
        "INT n: the emulator cannot emulate INT3, so the run ends with KVM_INTERNAL_ERROR at the first one",
    ),
    (
        "vmexit",
        "vmcall",
        "a hypercall (not run)",
    ),
];

/// One check's verdict, as kvm-unit-tests prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
    Xfail,
    Xpass,
}

impl Verdict {
    fn parse(line: &str) -> Option<(Verdict, &str)> {
        [
            ("PASS: ", Verdict::Pass),
            ("FAIL: ", Verdict::Fail),
            ("SKIP: ", Verdict::Skip),
            ("XFAIL: ", Verdict::Xfail),
            ("XPASS: ", Verdict::Xpass),
        ]
        .into_iter()
        .find_map(|(prefix, verdict)| line.strip_prefix(prefix).map(|name| (verdict, name)))
    }

    fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
            Verdict::Xfail => "XFAIL",
            Verdict::Xpass => "XPASS",
        }
    }
}

/// Each check a console reports, in order; a name printed twice is
/// numbered (`name #2`).
pub fn checks(console: &str) -> Vec<(String, Verdict)> {
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    console
        .lines()
        .filter_map(|line| Verdict::parse(line.trim_end()))
        .map(|(verdict, name)| {
            let count = seen.entry(name.to_string()).or_default();
            *count += 1;
            let key = if *count == 1 {
                name.to_string()
            } else {
                format!("{name} #{count}")
            };
            (key, verdict)
        })
        .collect()
}

/// vmexit.flat's figures: `name cycles-per-iteration` lines.
pub fn vmexit_cycles(console: &str) -> Vec<(String, u64)> {
    console
        .lines()
        .filter_map(|line| {
            // The self-IPI tests' own output ('1' then '0's) can run into
            // their line: drop the digits before the name.
            let (name, cycles) = line.split_once(' ')?;
            let name = name.trim_start_matches(|c: char| c.is_ascii_digit());
            let valid =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            valid
                .then(|| cycles.trim().parse().ok())
                .flatten()
                .map(|cycles| (name.to_string(), cycles))
        })
        .collect()
}

#[derive(Serialize)]
struct SuiteRun {
    suite: &'static str,
    column: Column,
    end: KernelEnd,
    elapsed_s: f64,
    checks: Vec<(String, Verdict)>,
}

#[derive(Serialize)]
struct VmexitRun {
    column: Column,
    end: KernelEnd,
    /// Microseconds per iteration, by test.
    us: Vec<(String, f64)>,
}

#[derive(Serialize)]
struct Conformance {
    suites: Vec<SuiteRun>,
    vmexit: Vec<VmexitRun>,
    floors: Option<dirq_vmm::probe::Floors>,
}

pub fn execute(args: Args) -> anyhow::Result<()> {
    let started = time::OffsetDateTime::now_utc();
    let environment = std::env::temp_dir().join(format!("dirq-kut-env-{}", std::process::id()));
    std::fs::write(&environment, ENVIRONMENT)
        .with_context(|| format!("cannot write {}", environment.display()))?;
    let result = run_all(&args, &environment);
    // The environment file is ours alone; a failure to remove it is harmless.
    let _ = std::fs::remove_file(&environment);
    let conformance = result?;
    if args.json {
        return crate::common::meta::print_json(&conformance, started, None);
    }
    let mut text = suites_table(&conformance.suites);
    text += &known_failures();
    if !conformance.vmexit.is_empty() {
        text += &vmexit_table(&conformance.vmexit, conformance.floors.as_ref());
    }
    Ok(crate::output::print(&text)?)
}

fn flat(kut: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = kut.join("x86").join(format!("{name}.flat"));
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: is {} a kvm-unit-tests build directory (./configure && make)?",
        path.display(),
        kut.display()
    );
    Ok(path)
}

/// A console, how the run ended and the host's TSC rate.
struct Booted {
    console: String,
    end: KernelEnd,
    elapsed_s: f64,
    tsc_khz: Option<u64>,
}

/// One boot of a kvm-unit-tests binary, by dirq or QEMU. None if QEMU
/// cannot be started (said once on stderr).
struct Booter<'a> {
    args: &'a Args,
    environment: &'a Path,
    qemu_missing: std::cell::Cell<bool>,
}

impl Booter<'_> {
    fn boot(
        &self,
        column: Column,
        kernel: &Path,
        append: &str,
        vcpus: u32,
        timeout_s: f64,
    ) -> anyhow::Result<Option<Booted>> {
        match column {
            Column::Dirq(irqchip) => {
                let run = KernelRun {
                    kernel: kernel.to_path_buf(),
                    cmdline: append.to_string(),
                    initrd: Some(self.environment.to_path_buf()),
                    irqchip,
                    halt: HaltMode::Exit,
                    vcpus,
                    ram_mib: None,
                    timeout_s: Some(timeout_s),
                    pin: Pin::Spread,
                };
                diag!(
                    "dirq conformance: {} through the {irqchip} irqchip...",
                    kernel.display()
                );
                let outcome = run.boot(false)?;
                Ok(Some(Booted {
                    console: outcome.console,
                    end: outcome.end,
                    elapsed_s: outcome.elapsed_s,
                    tsc_khz: Some(outcome.tsc_khz),
                }))
            }
            Column::Qemu(irqchip) => {
                if self.args.no_qemu || self.qemu_missing.get() {
                    return Ok(None);
                }
                diag!("dirq conformance: {} by {irqchip}...", kernel.display());
                let boot = QemuBoot {
                    qemu: &self.args.qemu,
                    kernel,
                    append,
                    initrd: self.environment,
                    irqchip,
                    vcpus,
                    timeout: std::time::Duration::from_secs_f64(timeout_s),
                };
                match boot.run() {
                    Ok(outcome) => Ok(Some(Booted {
                        console: outcome.console,
                        end: outcome.end,
                        elapsed_s: outcome.elapsed_s,
                        tsc_khz: None,
                    })),
                    Err(err @ qemu::QemuError::Spawn { .. }) => {
                        diag!("dirq conformance: {err:#}; no QEMU columns");
                        self.qemu_missing.set(true);
                        Ok(None)
                    }
                    Err(err) => Err(err.into()),
                }
            }
        }
    }
}

fn run_all(args: &Args, environment: &Path) -> anyhow::Result<Conformance> {
    let booter = Booter {
        args,
        environment,
        qemu_missing: std::cell::Cell::new(false),
    };
    let mut suites = Vec::new();
    for suite in &SUITES {
        let kernel = flat(&args.kut, suite.name)?;
        for column in COLUMNS {
            let timeout_s = args.timeout.unwrap_or(suite.timeout_s);
            let Some(booted) = booter.boot(column, &kernel, "", suite.vcpus, timeout_s)? else {
                continue;
            };
            suites.push(SuiteRun {
                suite: suite.name,
                column,
                checks: checks(&booted.console),
                end: booted.end,
                elapsed_s: booted.elapsed_s,
            });
        }
    }
    if args.no_vmexit {
        return Ok(Conformance {
            suites,
            vmexit: Vec::new(),
            floors: None,
        });
    }
    let kernel = flat(&args.kut, "vmexit")?;
    let mut booted_runs = Vec::new();
    for column in COLUMNS {
        let timeout_s = args.timeout.unwrap_or(VMEXIT_TIMEOUT_S);
        if let Some(booted) = booter.boot(column, &kernel, VMEXIT_TESTS, VMEXIT_VCPUS, timeout_s)? {
            booted_runs.push((column, booted));
        }
    }
    // QEMU's guest counts the same host TSC that dirq's runs report.
    let tsc_khz = booted_runs
        .iter()
        .find_map(|(_, booted)| booted.tsc_khz)
        .unwrap_or(1)
        .max(1);
    let cycles_per_us = f64_of(tsc_khz) / 1e3;
    let vmexit = booted_runs
        .into_iter()
        .map(|(column, booted)| VmexitRun {
            column,
            us: vmexit_cycles(&booted.console)
                .into_iter()
                .map(|(name, cycles)| (name, f64_of(cycles) / cycles_per_us))
                .collect(),
            end: booted.end,
        })
        .collect();
    diag!("dirq conformance: probing the exit floors (emulated guest)...");
    let floors = dirq_vmm::probe::probe(Some(GuestExec::Emulated))
        .map(|report| report.floors)
        .map_err(|err| diag!("dirq conformance: the probe failed ({err}); no floors"))
        .ok();
    Ok(Conformance {
        suites,
        vmexit,
        floors,
    })
}

/// One row per check, one column per path; then how each run ended.
fn suites_table(runs: &[SuiteRun]) -> String {
    let mut header = vec!["test".to_string(), "check".to_string()];
    header.extend(COLUMNS.iter().map(column_name));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = text_table(&header);
    for suite in &SUITES {
        let of_suite: Vec<&SuiteRun> = runs.iter().filter(|run| run.suite == suite.name).collect();
        let mut names: Vec<&str> = Vec::new();
        for run in &of_suite {
            for (name, _) in &run.checks {
                if !names.contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
        for name in names {
            let mut row = vec![suite.name.to_string(), name.to_string()];
            row.extend(COLUMNS.iter().map(|column| {
                of_suite
                    .iter()
                    .find(|run| run.column == *column)
                    .and_then(|run| run.checks.iter().find(|(check, _)| check == name))
                    .map_or("-".to_string(), |(_, verdict)| verdict.name().to_string())
            }));
            table.add_row(row);
        }
        let mut passed = vec![suite.name.to_string(), "passed / reported".to_string()];
        let mut ended = vec![suite.name.to_string(), "run ended".to_string()];
        for column in COLUMNS {
            let run = of_suite.iter().find(|run| run.column == column);
            passed.push(run.map_or("-".into(), |run| {
                let pass = run
                    .checks
                    .iter()
                    .filter(|(_, verdict)| *verdict == Verdict::Pass)
                    .count();
                format!("{pass} / {}", run.checks.len())
            }));
            ended.push(run.map_or("-".into(), |run| {
                format!("{} ({:.0} s)", short_end(&run.end), run.elapsed_s)
            }));
        }
        table.add_row(passed);
        table.add_row(ended);
    }
    format!(
        "kvm-unit-tests through dirq's interrupt paths ('-': not reached or not run; kernel = \
         KVM's own LAPIC, IOAPIC and PIC, the reference; QEMU's runs the second reference)\n\
         {table}\n"
    )
}

fn column_name(column: &Column) -> String {
    match column {
        Column::Dirq(Irqchip::Kernel) => "kernel (KVM's devices)".into(),
        Column::Dirq(other) => other.to_string(),
        Column::Qemu(irqchip) => irqchip.to_string(),
    }
}

fn short_end(end: &KernelEnd) -> String {
    match end {
        KernelEnd::Exited(PASS_STATUS) => "exit 1 (all passed)".into(),
        KernelEnd::Exited(status) => format!("exit {status}"),
        KernelEnd::TimedOut => "timed out".into(),
        KernelEnd::Failed(why) if why.contains("instruction emulation failed") => {
            "emulation failure".into()
        }
        other => describe_end(other),
    }
}

fn known_failures() -> String {
    let mut table = text_table(&[
        "test",
        "check",
        "why it fails on a kvm_pvm host, on every path",
    ]);
    for (suite, check, why) in EMULATOR_FAILURES {
        table.add_row(vec![suite, check, why]);
    }
    format!("{table}\n")
}

fn vmexit_table(runs: &[VmexitRun], floors: Option<&dirq_vmm::probe::Floors>) -> String {
    let mut header = vec!["vmexit.flat test (us/iteration)".to_string()];
    header.extend(COLUMNS.iter().map(column_name));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = text_table(&header);
    let mut names: Vec<&str> = Vec::new();
    for run in runs {
        for (name, _) in &run.us {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    for name in names {
        let mut row = vec![name.to_string()];
        row.extend(COLUMNS.iter().map(|column| {
            runs.iter()
                .find(|run| run.column == *column)
                .and_then(|run| run.us.iter().find(|(test, _)| test == name))
                .map_or("-".to_string(), |(_, us)| format!("{us:.2}"))
        }));
        table.add_row(row);
    }
    let mut ended = vec!["run ended".to_string()];
    ended.extend(COLUMNS.iter().map(|column| {
        runs.iter()
            .find(|run| run.column == *column)
            .map_or("-".into(), |run| short_end(&run.end))
    }));
    table.add_row(ended);
    let floors = floors.map_or_else(
        || "dirq probe's floors: not measured\n".to_string(),
        |floors| {
            format!(
                "dirq probe's floors (emulated guest, p50): userspace port exit {:.2} us \
                 (inl_from_qemu's equivalent), in-kernel exit {:.2} us, x2APIC self-IPI {:.2} us, \
                 IPI to a busy vCPU {:.2} us\n",
                floors.userspace_exit_ns / 1e3,
                floors.kernel_exit_ns / 1e3,
                floors.self_ipi_p50_ns / 1e3,
                floors.ipi_busy_p50_ns / 1e3
            )
        },
    );
    format!("{table}\n{floors}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_are_read_from_the_console_and_repeated_names_numbered() {
        let console = "enabling apic\nPASS: self ipi\nFAIL: pending nmi\nPASS: self ipi\n\
                       SKIP: x2apic not detected\nSUMMARY: 3 tests\n";
        assert_eq!(
            checks(console),
            [
                ("self ipi".to_string(), Verdict::Pass),
                ("pending nmi".to_string(), Verdict::Fail),
                ("self ipi #2".to_string(), Verdict::Pass),
                ("x2apic not detected".to_string(), Verdict::Skip),
            ]
        );
    }

    #[test]
    fn vmexit_figures_are_the_name_and_cycles_lines_only() {
        let console = "PM timer port is 608\ncpuid 152175\n  ipi ipi 1479509\n\
                       inl_from_qemu 284281\n1000self_ipi_sti_nop 4092543\n";
        assert_eq!(
            vmexit_cycles(console),
            [
                ("cpuid".to_string(), 152_175),
                ("inl_from_qemu".to_string(), 284_281),
                ("self_ipi_sti_nop".to_string(), 4_092_543)
            ]
        );
    }
}
