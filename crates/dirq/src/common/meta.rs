//! What every JSON document dirq writes says about itself, as cyclictest's
//! `--json` does: a schema version, the command line, dirq's version, the
//! host, and when the work started and ended.

use serde::Serialize;
use time::OffsetDateTime;

/// Raised whenever a field of a JSON output changes meaning or goes away
/// (3: the simulator names its exits by VMX reason; 4: data.json's
/// `steps[].step` is the step's id, its title moves to `title`, and failed
/// steps are in `steps[].failures`, no longer in `notes`; 5: one word
/// per concept in data.json: the software-only studies are `raw.studies`,
/// step `studies` and sections `studies*`, the published experiments'
/// sections `paper-*`; table cells are objects with their number and
/// unit beside their text; 6: every cell that shows a number has its
/// value and unit, throughputs in their own unit, and no cell holds two
/// numbers; 7: one section per scenario, `scenario-<name>`, with its
/// `given` inputs, and `folded` figures and tables).
pub const SCHEMA_VERSION: u32 = 7;

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
) -> anyhow::Result<()> {
    Ok(crate::output::print(&document_json(
        result, started, guest_exec,
    )?)?)
}

/// The text `print_json` prints: for a file written with the same shape.
pub fn document_json(
    result: &impl Serialize,
    started: OffsetDateTime,
    guest_exec: Option<String>,
) -> anyhow::Result<String> {
    let document = Document {
        meta: Meta::since(started, guest_exec),
        result,
    };
    let mut text = serde_json::to_string_pretty(&document)?;
    text.push('\n');
    Ok(text)
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
