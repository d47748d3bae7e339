//! What every JSON document dirq writes says about itself, as cyclictest's
//! `--json` does: a schema version, the command line, dirq's version, the
//! host, and when the work started and ended.

use serde::Serialize;
use time::OffsetDateTime;

/// Raised whenever a field of a JSON output changes meaning or goes away
/// (3: the simulator names its exits by VMX reason; 4: data.json's
/// `steps[].step` is the step's id, its title moves to `title`, and failed
/// steps are in `steps[].failures`, no longer in `notes`).
pub const SCHEMA_VERSION: u32 = 4;

/// Kernel modules that provide KVM's x86 backend.
const KVM_BACKENDS: [&str; 3] = ["kvm_intel", "kvm_amd", "kvm_pvm"];

#[derive(Debug, Clone, Serialize)]
pub struct Host {
    /// `uname -r`.
    pub kernel: Option<String>,
    /// The first `model name` of /proc/cpuinfo.
    pub cpu: Option<String>,
    pub cpus: usize,
    /// The loaded KVM backend module, if any.
    pub kvm_backend: Option<String>,
    /// How the guest's instructions ran (`native`, `emulated`, `hardware`),
    /// as the run reports it; absent when no guest ran.
    pub guest_exec: Option<String>,
    /// Whether the CPU offers VT-x or AMD-V (/proc/cpuinfo's `vmx` or `svm`
    /// flag): without it KVM runs on kvm_pvm, and APICv, posted interrupts,
    /// ELI and DID cannot run here.
    pub hardware_virtualization: Option<bool>,
    /// Whether this host is itself a virtual machine (the `hypervisor`
    /// flag): then every trap of its guests is nested.
    pub nested: Option<bool>,
}

/// The flags of /proc/cpuinfo's first CPU.
fn cpu_flags(cpuinfo: &str) -> Option<Vec<&str>> {
    cpuinfo
        .lines()
        .find(|line| line.starts_with("flags"))
        .and_then(|line| line.split_once(':'))
        .map(|(_, flags)| flags.split_whitespace().collect())
}

impl Host {
    pub fn this(guest_exec: Option<String>) -> Self {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let cpuinfo = read("/proc/cpuinfo");
        let flags = cpuinfo.as_deref().and_then(cpu_flags);
        let has = |flag: &str| flags.as_ref().map(|flags| flags.contains(&flag));
        Host {
            kernel: read("/proc/sys/kernel/osrelease").map(|text| text.trim().to_string()),
            cpu: cpuinfo.as_deref().and_then(|text| {
                text.lines()
                    .find(|line| line.starts_with("model name"))
                    .and_then(|line| line.split_once(':'))
                    .map(|(_, model)| model.trim().to_string())
            }),
            hardware_virtualization: has("vmx").zip(has("svm")).map(|(vmx, svm)| vmx || svm),
            nested: has("hypervisor"),
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            kvm_backend: KVM_BACKENDS
                .iter()
                .find(|module| std::path::Path::new("/sys/module").join(module).exists())
                .map(|module| module.to_string()),
            guest_exec,
        }
    }
}

/// How this dirq binary was compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildProfile {
    Debug,
    Release,
}

impl BuildProfile {
    pub const THIS: BuildProfile = if cfg!(debug_assertions) {
        BuildProfile::Debug
    } else {
        BuildProfile::Release
    };
}

/// The git commit dirq was built from (build.rs), "unknown" outside a
/// git checkout.
pub const SOURCE_COMMIT: &str = env!("DIRQ_SOURCE_COMMIT");

/// The self-description at the top of a JSON document.
#[derive(Debug, Clone, Serialize)]
pub struct Meta {
    pub schema_version: u32,
    pub dirq_version: &'static str,
    pub source_commit: &'static str,
    pub build_profile: BuildProfile,
    /// The arguments dirq was started with, program name first.
    pub command_line: Vec<String>,
    pub host: Host,
    #[serde(with = "time::serde::rfc3339")]
    pub started: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub ended: OffsetDateTime,
}

impl Meta {
    /// The metadata of work that began at `started` and ends now.
    pub fn since(started: OffsetDateTime, guest_exec: Option<String>) -> Self {
        Meta {
            schema_version: SCHEMA_VERSION,
            dirq_version: env!("CARGO_PKG_VERSION"),
            source_commit: SOURCE_COMMIT,
            build_profile: BuildProfile::THIS,
            command_line: std::env::args().collect(),
            host: Host::this(guest_exec),
            started,
            ended: OffsetDateTime::now_utc(),
        }
    }
}

/// The host's load average and the CPU time its own hypervisor stole,
/// sampled when a report starts: a busy or stolen-from host makes every
/// timing noisy. One small reader of /proc, to be replaced by the probe's
/// own measure of host noise.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadSample {
    load_avg_1m: Option<f64>,
    /// (steal, total) jiffies of all CPUs, /proc/stat's `cpu` line.
    steal_and_total: Option<(u64, u64)>,
}

impl LoadSample {
    pub fn now() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        LoadSample {
            load_avg_1m: read("/proc/loadavg").and_then(|text| {
                text.split_whitespace()
                    .next()
                    .and_then(|load| load.parse().ok())
            }),
            steal_and_total: read("/proc/stat").and_then(|text| steal_and_total(&text)),
        }
    }
}

/// Steal and total jiffies from /proc/stat: user nice system idle iowait
/// irq softirq steal (guest time is already inside user).
fn steal_and_total(stat: &str) -> Option<(u64, u64)> {
    let fields: Vec<u64> = stat
        .lines()
        .find(|line| line.starts_with("cpu "))?
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    (fields.len() == 8).then(|| (fields[7], fields.iter().sum()))
}

/// Above this 1-minute load average per CPU before the report started,
/// other work shared the cores the runs timed.
const BUSY_LOAD_PER_CPU: f64 = 0.5;
/// Above this share of CPU time stolen by the outer hypervisor during the
/// report, its timings include the neighbours' work.
const NOISY_STEAL_SHARE: f64 = 0.02;

/// How loaded the host was over a report: data.json's `host_load`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HostLoad {
    pub cpus: usize,
    /// 1-minute load average when the report started (before its own work).
    pub load_avg_1m_at_start: Option<f64>,
    /// ... and when it ended (its own runs included).
    pub load_avg_1m_at_end: Option<f64>,
    /// Share of all CPU time the host's hypervisor stole while the report ran.
    pub steal_share: Option<f64>,
}

impl HostLoad {
    /// The load from `start` until now.
    pub fn since(start: LoadSample, cpus: usize) -> Self {
        let end = LoadSample::now();
        let steal_share = start.steal_and_total.zip(end.steal_and_total).and_then(
            |((steal0, total0), (steal1, total1))| {
                let total = total1.checked_sub(total0).filter(|&t| t > 0)?;
                Some(dirq_stats::f64_of(steal1.saturating_sub(steal0)) / dirq_stats::f64_of(total))
            },
        );
        HostLoad {
            cpus,
            load_avg_1m_at_start: start.load_avg_1m,
            load_avg_1m_at_end: end.load_avg_1m,
            steal_share,
        }
    }

    /// What made this host noisy, if anything: a warning for the top of
    /// the report.
    pub fn warning(&self) -> Option<String> {
        let mut why = Vec::new();
        if let Some(load) = self.load_avg_1m_at_start.filter(|&load| {
            load > BUSY_LOAD_PER_CPU
                * dirq_stats::f64_of(u64::try_from(self.cpus).unwrap_or(u64::MAX))
        }) {
            why.push(format!(
                "a load average of {load:.2} on {} CPUs before the report started",
                self.cpus
            ));
        }
        if let Some(steal) = self.steal_share.filter(|&s| s > NOISY_STEAL_SHARE) {
            why.push(format!(
                "{:.1}% of CPU time stolen by the host's own hypervisor while it ran",
                steal * 100.0
            ));
        }
        (!why.is_empty()).then(|| {
            format!(
                "Noisy host: {}. Other work shared the cores the real runs were timed on, so \
                 their latencies and floors are noisier than on an idle host; compare ranges, \
                 not single numbers, or rerun on an idle host.",
                why.join(" and ")
            )
        })
    }
}

/// A JSON output: the metadata, then the result's own fields.
#[derive(Serialize)]
pub struct Document<'a, T: Serialize> {
    #[serde(flatten)]
    pub meta: Meta,
    #[serde(flatten)]
    pub result: &'a T,
}

/// Prints `result` as one JSON object behind the metadata of a command
/// that started at `started`: every dirq `--json` output has this shape.
pub fn print_json(
    result: &impl Serialize,
    started: OffsetDateTime,
    guest_exec: Option<String>,
) -> serde_json::Result<()> {
    let document = Document {
        meta: Meta::since(started, guest_exec),
        result,
    };
    println!("{}", serde_json::to_string_pretty(&document)?);
    Ok(())
}

/// "2026-11-22 07:39 UTC".
pub fn utc_minutes(at: OffsetDateTime) -> String {
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
    at.to_offset(time::UtcOffset::UTC)
        .format(&format)
        .unwrap_or_else(|_| at.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_carry_metadata_beside_the_result_fields() {
        let started = OffsetDateTime::from_unix_timestamp(1_795_333_151).expect("valid time");
        let meta = Meta::since(started, Some("native".into()));
        let result = serde_json::json!({"bench": "irq-latency", "interrupts": 5});
        let value = serde_json::to_value(Document {
            meta,
            result: &result,
        })
        .expect("serializes");
        assert_eq!(value["schema_version"], SCHEMA_VERSION);
        assert_eq!(value["bench"], "irq-latency");
        assert_eq!(value["started"], "2026-11-22T07:39:11Z");
        assert_eq!(value["host"]["guest_exec"], "native");
        assert!(value["host"]["cpus"].as_u64().is_some_and(|cpus| cpus >= 1));
        assert!(value["command_line"]
            .as_array()
            .is_some_and(|a| !a.is_empty()));
    }

    #[test]
    fn steal_is_read_from_the_cpu_line_and_a_busy_host_is_warned_about() {
        let stat = "cpu  100 0 50 800 10 0 5 35 20 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(steal_and_total(stat), Some((35, 1000)));
        assert_eq!(steal_and_total("intr 1 2\n"), None);
        let quiet = HostLoad {
            cpus: 2,
            load_avg_1m_at_start: Some(0.4),
            load_avg_1m_at_end: Some(2.0),
            steal_share: Some(0.01),
        };
        assert_eq!(quiet.warning(), None);
        let busy = HostLoad {
            load_avg_1m_at_start: Some(3.5),
            steal_share: Some(0.05),
            ..quiet
        };
        let warning = busy.warning().expect("busy host");
        assert!(
            warning.contains("load average of 3.50 on 2 CPUs") && warning.contains("5.0% of CPU"),
            "{warning}"
        );
    }

    #[test]
    fn the_first_cpus_flags_say_whether_the_host_virtualizes_in_hardware() {
        let cpuinfo = "processor : 0\nflags\t\t: fpu sse hypervisor lm\n";
        let flags = cpu_flags(cpuinfo).expect("flags");
        assert!(flags.contains(&"hypervisor") && !flags.contains(&"vmx"));
        assert_eq!(cpu_flags("processor : 0\n"), None);
    }

    #[test]
    fn timestamps_are_utc_calendar_minutes() {
        let at = OffsetDateTime::from_unix_timestamp(951_782_400).expect("valid time");
        assert_eq!(utc_minutes(at), "2000-02-29 00:00 UTC");
    }
}
