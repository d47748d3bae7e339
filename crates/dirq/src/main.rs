//! `dirq`: interrupt delivery for virtual machines.
//!
//! One binary, one subcommand per job; each subcommand lives in its own
//! module and owns its flags.

// Standard output goes through `output::print`, which turns a full disk or
// a file-size limit into an error; `print!` would panic. Diagnostics go
// through `diag!`, for the same reason.
#![deny(clippy::print_stdout, clippy::print_stderr)]

/// `eprintln!` that never panics: a diagnostic standard error cannot take
/// (a full disk, a file-size limit) is dropped; the exit status still
/// says whether dirq failed.
macro_rules! diag {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod calibrate;
mod common;
mod conformance;
mod input;
mod kernel;
mod observe;
mod output;
mod probe;
mod report;
mod run;
mod sim;
mod studies;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "dirq",
    version,
    about = "Interrupt delivery for virtual machines: measure it on real KVM, model it, report it",
    long_about = "dirq compares ways of delivering interrupts to virtual machines.\n\n\
  dirq run      boots dirq's guest test kernel on /dev/kvm and counts every exit\n\
  dirq probe    what this host's KVM supports and what one exit costs\n\
  dirq observe  any running VM (QEMU, Firecracker, ...) watched from outside: its exits, hot spots, what each design would save\n\
  dirq sim      simulates the interrupt-delivery designs (vanilla KVM, APICv, ELI, DID) on a modelled server\n\
  dirq studies  the software-only studies on /dev/kvm: VIOAPIC levels, batched I/O, tick scaling, IPI/HLT\n\
  dirq calibrate  measures this host's costs into a profile for `dirq sim --profile`\n\
  dirq report   runs all of the above and writes one HTML report (the main job)\n\
  dirq conformance  kvm-unit-tests' APIC/IOAPIC tests through every interrupt path (dirq run --kernel boots one)\n\n\
Two words: a design is a way of delivering interrupts that the simulator models (vanilla, \
APICv, ELI, DID...), most of which need hardware this host may lack; a study is a software-only \
change a userspace VMM can make today, measured for real on /dev/kvm."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot the guest test kernel on KVM, run one benchmark, count every exit.
    Run(run::Args),
    /// Report this host's KVM capabilities and the cost of one exit.
    Probe(probe::Args),
    /// Watch running VMs from outside: exits, hot spots by guest RIP, interrupts, and what
    /// each design would save them.
    Observe(observe::Args),
    /// Simulate interrupt-delivery designs on a modelled server.
    Sim(sim::Args),
    /// Measure the software-only studies on KVM, every mode side by side.
    // `designs` is the old name, still accepted but not shown: a design is
    // a way of delivering interrupts, which `dirq sim` models.
    #[command(alias = "designs")]
    Studies(studies::Args),
    /// Measure this host's costs and write a cost profile for `dirq sim --profile`.
    Calibrate(calibrate::Args),
    /// Run probe, calibration, real benchmarks and simulations; write an HTML report.
    Report(report::Args),
    /// Boot kvm-unit-tests' APIC, IOAPIC, event-injection and vmexit tests through every
    /// interrupt path, side by side with KVM's own devices.
    Conformance(conformance::Args),
}

fn main() -> std::process::ExitCode {
    restore_default_sigpipe();
    ignore_file_size_limit_signal();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::execute(args),
        Command::Probe(args) => probe::execute(args),
        Command::Observe(args) => observe::execute(args),
        Command::Sim(args) => sim::execute(args),
        Command::Studies(args) => studies::execute(args),
        Command::Calibrate(args) => calibrate::execute(args),
        Command::Report(args) => report::execute(args),
        Command::Conformance(args) => conformance::execute(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            diag!("dirq: error: {err:#}");
            // A command whose failures end with a status per kind says which.
            err.downcast_ref::<observe::Error>()
                .map_or(std::process::ExitCode::FAILURE, |error| {
                    std::process::ExitCode::from(error.exit_status())
                })
        }
    }
}

/// A write past the file-size limit (`ulimit -f`) raises SIGXFSZ, whose
/// default kills dirq with no message. Ignored, the write fails with EFBIG
/// instead, which dirq reports as any other failed write: exit 1.
fn ignore_file_size_limit_signal() {
    // SAFETY: called first thing in main, before any thread exists;
    // SIG_IGN is a valid disposition for SIGXFSZ.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Rust ignores SIGPIPE, which turns a closed pipe (`dirq run ... | head -1`)
/// into a write error at every later print. Restoring the default makes
/// dirq end quietly with the status a pipeline expects, as `cat` does.
fn restore_default_sigpipe() {
    // SAFETY: called first thing in main, before any thread exists;
    // SIG_DFL is a valid disposition for SIGPIPE and no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
