//! `dirq studies`: the software-only studies of mechanisms.md sections 6-8,
//! measured on KVM in one run: the four VIOAPIC levels, batched port I/O,
//! transparent tick scaling and the IPI/HLT trade-offs, side by side.

use std::fmt;
use std::time::Duration;

use std::str::FromStr;

use anyhow::Context;
use dirq_vmm::config::GuestExec;
use dirq_vmm::studies::{halt, io_batch, tick, vioapic, Scale, Settings};
use indicatif::ProgressBar;
use serde::Serialize;

#[derive(clap::Args)]
#[command(
    after_help = "Each study runs for real on /dev/kvm with dirq's guest test kernel; every \
table is measured in this run.\n\n\
Examples:\n  \
  dirq studies                      # all four tables (about a minute)\n  \
  dirq studies --quick              # small counts, a few seconds per table\n  \
  dirq studies --only vioapic,halt  # some of the tables\n  \
  dirq studies --json > studies.json\n\n\
Single modes: dirq run vioapic --vioapic pv, dirq run io-batch --io-batch, \
dirq run tick --tick-scale 10, dirq run ipi --halt poll:200000"
)]
pub struct Args {
    /// Small counts: each table in a few seconds (what `dirq report --quick` runs).
    #[arg(long)]
    quick: bool,
    /// The tables to measure, comma-separated (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Study>,
    /// Print one JSON object with a key per table instead of the tables.
    #[arg(long)]
    json: bool,
    /// How the guest executes: native or emulated (kvm_pvm; default: native where offered).
    #[arg(long, value_parser = GuestExec::from_str)]
    guest_exec: Option<GuestExec>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Study {
    /// Section 6: userspace, in-kernel, read-only page and paravirtual controller.
    Vioapic,
    /// Section 8: N port writes per disk command, or one doorbell.
    IoBatch,
    /// Section 8: the PIT tick slowed K times behind the guest's back.
    Tick,
    /// Section 7: IPI latency against host CPU burned, per halt mode.
    Halt,
}

impl Study {
    pub const ALL: [Study; 4] = [Study::Vioapic, Study::IoBatch, Study::Tick, Study::Halt];

    pub fn title(self) -> &'static str {
        match self {
            Study::Vioapic => "VIOAPIC levels (mechanisms.md section 6)",
            Study::IoBatch => "Batched port I/O (section 8)",
            Study::Tick => "Transparent tick scaling (section 8)",
            Study::Halt => "IPIs and HLT (section 7)",
        }
    }
}

/// Every table measured; a table that failed is `None` and its error is in
/// `failures`.
#[derive(Debug, Default, Serialize)]
pub struct StudyTables {
    pub vioapic: Option<vioapic::VioapicTable>,
    pub io_batch: Option<io_batch::IoBatchTable>,
    pub tick: Option<tick::TickTable>,
    pub halt: Option<halt::HaltTable>,
    /// "<study>: <error>", one per table that could not be measured.
    pub failures: Vec<String>,
}

/// Measures the chosen studies, one after the other (they share the host's
/// two cores, so running them at once would skew each other). `bar`
/// advances once per study.
pub fn measure(studies: &[Study], settings: Settings, bar: &ProgressBar) -> StudyTables {
    let mut tables = StudyTables::default();
    for &study in studies {
        crate::common::progress::working_on(bar, study.title());
        let measured = match study {
            Study::Vioapic => vioapic::compare(settings).map(|t| tables.vioapic = Some(t)),
            Study::IoBatch => io_batch::compare(settings).map(|t| tables.io_batch = Some(t)),
            Study::Tick => tick::compare(settings).map(|t| tables.tick = Some(t)),
            Study::Halt => halt::compare(settings).map(|t| tables.halt = Some(t)),
        };
        if let Err(err) = measured {
            let err = anyhow::Error::from(err);
            tables.failures.push(format!("{}: {err:#}", study.title()));
        }
        bar.inc(1);
    }
    tables
}

impl fmt::Display for StudyTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sections: [(Study, Option<&dyn fmt::Display>); 4] = [
            (Study::Vioapic, self.vioapic.as_ref().map(|t| t as _)),
            (Study::IoBatch, self.io_batch.as_ref().map(|t| t as _)),
            (Study::Tick, self.tick.as_ref().map(|t| t as _)),
            (Study::Halt, self.halt.as_ref().map(|t| t as _)),
        ];
        for (study, table) in sections {
            if let Some(table) = table {
                writeln!(f, "== {}\n{table}", study.title())?;
            }
        }
        Ok(())
    }
}

pub fn execute(args: Args) -> anyhow::Result<()> {
    let started = time::OffsetDateTime::now_utc();
    let studies = if args.only.is_empty() {
        Study::ALL.to_vec()
    } else {
        args.only.clone()
    };
    let scale = if args.quick {
        Scale::Quick
    } else {
        Scale::Full
    };
    let bar = ProgressBar::new(studies.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("{spinner} [{pos}/{len}] {msg} ({elapsed})")
            .context("progress bar template")?,
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let settings = Settings {
        scale,
        guest_exec: args.guest_exec,
    };
    let tables = measure(&studies, settings, &bar);
    bar.finish_and_clear();
    for failure in &tables.failures {
        diag!("dirq studies: FAILED {failure}");
    }
    if args.json {
        let guest_exec = dirq_vmm::exec::HostExec::detect_host()
            .ok()
            .and_then(|host| host.resolve(args.guest_exec).ok())
            .map(|exec| exec.to_string());
        crate::common::meta::print_json(&tables, started, guest_exec)?;
    } else {
        crate::output::print(&tables.to_string())?;
    }
    anyhow::ensure!(
        tables.failures.is_empty(),
        "{} of {} studies could not be measured:\n  {}",
        tables.failures.len(),
        studies.len(),
        tables.failures.join("\n  ")
    );
    Ok(())
}
