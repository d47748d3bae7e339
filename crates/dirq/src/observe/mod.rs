//! `dirq observe`: any running VM watched from outside, whatever VMM runs
//! it: its exits by reason and cause, the guest instructions behind them,
//! its interrupts and halts, and what each design would save it.

pub mod record;
pub mod text;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dirq_sim::what_if::ExitCosts;
use dirq_vmm::observe::symbols::{SymbolMap, SymbolsError};
use dirq_vmm::observe::vm::VmId;
use dirq_vmm::observe::{ObserveError, Observer, Target};
use serde::Deserialize;

pub use record::{Record, Symbols};

const AFTER_HELP: &str = "\
Examples:
  dirq observe                          every VM on this host, live, until Ctrl-C
  dirq observe --pid 4242 --duration 10 one VMM's VMs for 10 s, then the summary
  dirq observe --vm 4242-11 --json      one VM (debugfs's kvm/<pid>-<fd> name), as JSON
  dirq observe --pid 4242 --duration 30 --symbols guest.map --record vm.json
  dirq observe --replay vm.json         the summary of a saved record

Sources: KVM's statistics (the VMM's own statistics fds, copied with pidfd_getfd, or debugfs)
and KVM's tracepoints through perf_event_open (kvm_exit/kvm_entry where the backend fires them,
kvm_emulate_insn, kvm_pio, kvm_msr, kvm_apic*, kvm_msi_set_irq, kvm_eoi, kvm_vcpu_wakeup, ...).
Needs root (or CAP_PERFMON and ptrace rights over the VMM); mounts tracefs and debugfs when absent.

Exit status: 0 observed (also when the VM ended meanwhile), 2 bad arguments or input file,
3 no such VMM or VM, 4 no permission, 5 nothing readable (no tracefs, no statistics), 1 other.";

#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Watch every VM of this VMM process (QEMU, Firecracker, cloud-hypervisor, crosvm, dirq run).
    #[arg(long, short = 'p', conflicts_with_all = ["vm", "all"])]
    pid: Option<u32>,
    /// With --pid: wait up to this many seconds for the process to create its VM (a VMM just
    /// started), 0-600.
    #[arg(long, default_value_t = 0.0, value_parser = parse_wait, requires = "pid")]
    wait: f64,
    /// Watch one VM, named <pid>-<fd> as debugfs names it (kvm/<pid>-<fd>).
    #[arg(long, value_parser = parse_vm, conflicts_with = "all")]
    vm: Option<VmId>,
    /// Watch every VM on the host, including those that start meanwhile (the default).
    #[arg(long)]
    all: bool,
    /// Watch this many seconds, then print the summary (default: until Ctrl-C or the VM ends),
    /// 0.1-86400.
    #[arg(long, short = 'd', value_parser = parse_duration)]
    duration: Option<f64>,
    /// Print the summary as one JSON object (the same document --record writes).
    #[arg(long)]
    json: bool,
    /// Also write the summary as JSON to FILE, for `dirq report --observation FILE` and later reading.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Print the summary of a record written earlier instead of watching.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["pid", "vm", "all", "duration", "record"])]
    replay: Option<PathBuf>,
    /// Name the guest's hot spots with its symbols: a System.map, a /proc/kallsyms copy, or an
    /// ELF file with its symbol table.
    #[arg(long, value_name = "FILE")]
    symbols: Option<PathBuf>,
    /// This host's exit costs from a saved `dirq probe --json` (default: run the probe after the
    /// observation where the backend does not time exits).
    #[arg(long, value_name = "FILE", conflicts_with = "no_probe")]
    probe: Option<PathBuf>,
    /// Do not measure exit costs: CPU time saved counts traced exit times only.
    #[arg(long)]
    no_probe: bool,
    /// Hot spots shown in the text summary, 1-1000.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u16).range(1..=1000))]
    top: u16,
}

fn parse_vm(text: &str) -> Result<VmId, String> {
    text.parse()
        .map_err(|error: dirq_vmm::observe::vm::VmError| error.to_string())
}

fn parse_wait(text: &str) -> Result<f64, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !(0.0..=600.0).contains(&seconds) {
        return Err(format!("{seconds} s is outside 0-600"));
    }
    Ok(seconds)
}

fn parse_duration(text: &str) -> Result<f64, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !(0.1..=86_400.0).contains(&seconds) {
        return Err(format!("{seconds} s is outside 0.1-86400"));
    }
    Ok(seconds)
}

/// Why `dirq observe` failed, with the exit status each kind ends with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Observe(#[from] ObserveError),
    #[error(transparent)]
    Symbols(#[from] SymbolsError),
    #[error("cannot use {} as a probe: {why}", path.display())]
    Probe { path: PathBuf, why: String },
    #[error("cannot read the record {}: {why}", path.display())]
    Replay { path: PathBuf, why: String },
}

impl Error {
    pub fn exit_status(&self) -> u8 {
        use dirq_vmm::observe::vm::VmError;
        match self {
            Error::Symbols(_) | Error::Probe { .. } | Error::Replay { .. } => 2,
            Error::Observe(error) if error.is_permission() => 4,
            Error::Observe(ObserveError::Vm(VmError::BadVmId(_))) => 2,
            Error::Observe(ObserveError::Vm(_) | ObserveError::NoVms) => 3,
            Error::Observe(ObserveError::NothingReadable { .. }) => 5,
        }
    }
}

/// Set by SIGINT/SIGTERM: end with the summary.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn stop_on_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; the disposition is set before any thread.
        unsafe {
            libc::signal(
                signal,
                request_stop as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// How often the rings are drained, and the statistics read.
const POLL: Duration = Duration::from_millis(50);
const REFRESH: Duration = Duration::from_secs(1);

pub fn execute(args: Args) -> anyhow::Result<()> {
    let started = time::OffsetDateTime::now_utc();
    if let Some(path) = &args.replay {
        let record = replay(path)?;
        return show(&record, &args, started);
    }
    // Inputs first: a bad file fails before any watching.
    let symbols = Symbols::new(
        args.symbols
            .as_deref()
            .map(|path| SymbolMap::load(path).map(|map| (path.to_path_buf(), map)))
            .transpose()
            .map_err(Error::from)?,
    );
    let saved_costs = args.probe.as_deref().map(read_probe).transpose()?;
    if let Some(path) = &args.record {
        crate::output::check_writable(path)?;
    }
    let target = match (args.pid, args.vm) {
        (Some(pid), _) => Target::Process(pid, Duration::from_secs_f64(args.wait)),
        (None, Some(vm)) => Target::Vm(vm),
        (None, None) => Target::All,
    };
    stop_on_signals();
    let mut observer = Observer::start(target).map_err(Error::from)?;
    for mounted in &observer.mounted {
        diag!("dirq observe: mounted {mounted}");
    }
    let live = args.duration.is_none() && !args.json && std::io::stdout().is_terminal();
    let deadline = args
        .duration
        .map(|seconds| Instant::now() + Duration::from_secs_f64(seconds));
    let mut next_refresh = Instant::now() + REFRESH;
    let bar = progress(args.duration);
    loop {
        std::thread::sleep(POLL);
        observer.poll();
        if Instant::now() >= next_refresh {
            next_refresh += REFRESH;
            observer.refresh();
            if live {
                let record = Record::from(observer.observation(), None, &symbols);
                crate::output::print(&format!("\x1b[H\x1b[2J{}", text::live(&record)))?;
            }
            if let Some(bar) = &bar {
                bar.set_position(bar.position() + 1);
            }
        }
        let done = STOP.load(Ordering::Relaxed)
            || deadline.is_some_and(|deadline| Instant::now() >= deadline)
            || observer.all_ended();
        if done {
            break;
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let observation = observer.finish();
    for vm in observation.vms.iter().filter(|vm| vm.ended) {
        diag!(
            "dirq observe: VM {} ({}) ended after {:.2} s: the summary is what was seen until then",
            vm.vm,
            vm.vmm,
            vm.observed_s
        );
    }
    let costs = match saved_costs {
        Some(costs) => Some(costs),
        None if !args.no_probe && Record::needs_costs(&observation) => measure_costs(),
        None => None,
    };
    let record = Record::from(observation, costs, &symbols);
    if let Some(path) = &args.record {
        let json = crate::common::meta::document_json(&record, started, None)?;
        crate::output::write_atomic(path, json.as_bytes())?;
    }
    show(&record, &args, started)
}

fn show(record: &Record, args: &Args, started: time::OffsetDateTime) -> anyhow::Result<()> {
    for vm in &record.vms {
        if let Some(warning) = vm.symbol_fit.as_ref().and_then(|fit| fit.warning()) {
            diag!("dirq observe: WARNING: {warning}");
        }
    }
    if let Some(lost) = record.sources.lost_records() {
        diag!(
            "dirq observe: WARNING: the kernel lost trace records (their ring buffers filled): {lost}; what those tracepoints count is short by as much"
        );
    }
    if args.json {
        crate::common::meta::print_json(record, started, None)
    } else {
        Ok(crate::output::print(&text::render(
            record,
            usize::from(args.top),
        ))?)
    }
}

fn progress(duration: Option<f64>) -> Option<indicatif::ProgressBar> {
    let seconds = duration?;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(dirq_stats::round_u64(seconds.ceil()));
    bar.set_style(
        indicatif::ProgressStyle::with_template("watching {bar:30} {pos}/{len} s")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// The probe's floors, measured now (the watched VM has ended or was left).
fn measure_costs() -> Option<record::Costs> {
    diag!("dirq observe: measuring this host's exit costs with dirq probe (about 15 s; --probe FILE reuses a saved one, --no-probe skips)");
    match dirq_vmm::probe::probe(None) {
        Ok(report) => Some(record::Costs {
            floors: ExitCosts {
                kernel_ns: report.floors.kernel_exit_ns,
                userspace_ns: report.floors.userspace_exit_ns,
            },
            from: "dirq probe, run after the observation".to_string(),
        }),
        Err(error) => {
            diag!("dirq observe: the probe failed ({error}): CPU time saved counts traced exit times only");
            None
        }
    }
}

/// The largest probe or record file read.
const MAX_FILE_BYTES: u64 = 64 << 20;

fn read_bounded(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let metadata = std::fs::metadata(path).map_err(|error| error.to_string())?;
    if !metadata.is_file() {
        return Err("not a regular file".to_string());
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(|error| error.to_string())?;
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        return Err(format!("larger than {} MiB", MAX_FILE_BYTES >> 20));
    }
    Ok(text)
}

fn read_probe(path: &Path) -> Result<record::Costs, Error> {
    #[derive(Deserialize)]
    struct Saved {
        probe: Floors,
    }
    #[derive(Deserialize)]
    struct Floors {
        kernel_exit_ns: f64,
        userspace_exit_ns: f64,
    }
    let failed = |why: String| Error::Probe {
        path: path.to_path_buf(),
        why,
    };
    let text = read_bounded(path).map_err(failed)?;
    let saved: Saved = serde_json::from_str(&text)
        .map_err(|error| failed(format!("not a `dirq probe --json` output ({error})")))?;
    let Floors {
        kernel_exit_ns,
        userspace_exit_ns,
    } = saved.probe;
    let plausible = |ns: f64| ns.is_finite() && (1.0..=1e9).contains(&ns);
    if !plausible(kernel_exit_ns) || !plausible(userspace_exit_ns) {
        return Err(failed(format!(
            "its floors ({kernel_exit_ns} ns, {userspace_exit_ns} ns) are not exit costs"
        )));
    }
    Ok(record::Costs {
        floors: ExitCosts {
            kernel_ns: kernel_exit_ns,
            userspace_ns: userspace_exit_ns,
        },
        from: path.display().to_string(),
    })
}

/// A record written by `--record`.
pub fn replay(path: &Path) -> Result<Record, Error> {
    #[derive(Deserialize)]
    struct Saved {
        schema_version: u32,
        #[serde(flatten)]
        record: Record,
    }
    let failed = |why: String| Error::Replay {
        path: path.to_path_buf(),
        why,
    };
    let text = read_bounded(path).map_err(failed)?;
    let saved: Saved = serde_json::from_str(&text)
        .map_err(|error| failed(format!("not a `dirq observe --record` file ({error})")))?;
    let expected = crate::common::meta::SCHEMA_VERSION;
    if saved.schema_version != expected {
        return Err(failed(format!(
            "its schema version is {}, this dirq reads {expected}",
            saved.schema_version
        )));
    }
    Ok(saved.record)
}
