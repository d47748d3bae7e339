//! IPIs and HLT (mechanisms.md section 7): the ipi bench's round trip under
//! each way of waiting for an interrupt, against the host CPU the vCPU
//! threads burn meanwhile, for a unicast ping and for a broadcast to more
//! vCPUs than this host has cores.

use std::fmt;

use dirq_stats::{f64_of, ratio};
use serde::{Deserialize, Serialize};

use super::Settings;
use crate::bench::{BenchError, BEST_PATH_HALT_POLL_NS};
use crate::config::params::IpiParams;
use crate::config::{
    Bench, BenchConfig, BenchParams, CommonSettings, GuestIdle, HaltMode, IpiKind, Named,
};
use crate::report::{LatencySummary, RunReport};

/// vCPUs of the broadcast rows: more than the two cores of a small host.
pub const BROADCAST_VCPUS: u32 = 4;
/// Watchdog per round trip: a guest that polls (idle=poll) on more vCPUs
/// than cores can take ~10 ms a round on kvm_pvm, and a row that hangs (a
/// PV send-IPI hypercall kvm_pvm never completes) must not hold the table
/// up for the default watchdog.
const ROW_TIMEOUT_PER_ROUND_MS: u64 = 20;
const ROW_TIMEOUT_SLACK_MS: u64 = 1_000;

/// How the waiting vCPUs wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitMode {
    /// HLT exits and the vCPU thread sleeps.
    HltExits,
    /// KVM polls before it sleeps (KVM_CAP_HALT_POLL).
    HaltPoll,
    /// The guest never halts (idle=poll).
    GuestPolls,
    /// HLT does not exit (KVM_CAP_X86_DISABLE_EXITS).
    HltInGuest,
    /// HLT exits; the broadcast is one KVM PV send-IPI hypercall.
    PvSendIpi,
}

impl WaitMode {
    fn label(self) -> String {
        match self {
            WaitMode::HltExits => "HLT exits".into(),
            WaitMode::HaltPoll => format!("halt polling {} us", BEST_PATH_HALT_POLL_NS / 1_000),
            WaitMode::GuestPolls => "guest polls (idle=poll)".into(),
            WaitMode::HltInGuest => "HLT does not exit".into(),
            WaitMode::PvSendIpi => "PV send-IPI, HLT exits".into(),
        }
    }

    fn apply(self, ipi: &mut IpiParams, common: &mut CommonSettings) {
        match self {
            WaitMode::HltExits => {}
            WaitMode::HaltPoll => {
                common.halt = HaltMode::Poll {
                    ns: BEST_PATH_HALT_POLL_NS,
                }
            }
            WaitMode::GuestPolls => common.guest_idle = GuestIdle::Busy,
            WaitMode::HltInGuest => common.halt = HaltMode::None,
            WaitMode::PvSendIpi => ipi.pv_send_ipi = true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HaltRow {
    pub ipi: IpiKind,
    pub mode: WaitMode,
    pub label: String,
    pub vcpus: u32,
    pub latency_ns: Option<LatencySummary>,
    /// CPU seconds the vCPU threads burned per second of the window: the
    /// price of polling, in host cores.
    pub host_cpu_per_s: f64,
    pub exits_per_round_trip: f64,
    /// Why the row could not be measured on this host.
    pub unavailable: Option<String>,
    /// Set when its vCPUs time-shared host CPUs, which its figures show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_shared: Option<String>,
}

impl HaltTable {
    /// What the rows marked `*` share: the first row's note that has one.
    pub fn shared_cpus_note(&self) -> Option<&str> {
        self.rows.iter().find_map(|row| row.cpus_shared.as_deref())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HaltTable {
    pub rows: Vec<HaltRow>,
    pub runs: Vec<RunReport>,
}

/// The rows' runs: every wait mode for a unicast, and for a broadcast
/// (where PV send-IPI applies) to `BROADCAST_VCPUS`.
pub fn comparison_runs(settings: Settings) -> Vec<(WaitMode, IpiParams, CommonSettings)> {
    let unicast = [
        WaitMode::HltExits,
        WaitMode::HaltPoll,
        WaitMode::GuestPolls,
        WaitMode::HltInGuest,
    ];
    let broadcast = unicast.iter().copied().chain([WaitMode::PvSendIpi]);
    let rows = unicast
        .iter()
        .map(|&mode| (mode, IpiKind::Unicast, 2))
        .chain(broadcast.map(|mode| (mode, IpiKind::Broadcast, BROADCAST_VCPUS)));
    rows.map(|(mode, ipi, vcpus)| {
        let mut ipi = IpiParams {
            ipi,
            count: settings.pick(200, 1_000),
            ..IpiParams::default()
        };
        let mut common = settings.common(Bench::Ipi);
        common.vcpus = vcpus;
        common.timeout_ms = Some(ROW_TIMEOUT_SLACK_MS + ROW_TIMEOUT_PER_ROUND_MS * ipi.count);
        mode.apply(&mut ipi, &mut common);
        (mode, ipi, common)
    })
    .collect()
}

/// Measures every row; a row this host cannot run says why instead.
pub fn compare(settings: Settings) -> Result<HaltTable, BenchError> {
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    for (mode, ipi, common) in comparison_runs(settings) {
        let mut row = HaltRow {
            ipi: ipi.ipi,
            mode,
            label: mode.label(),
            vcpus: common.vcpus,
            latency_ns: None,
            host_cpu_per_s: 0.0,
            exits_per_round_trip: 0.0,
            unavailable: None,
            cpus_shared: None,
        };
        let count = ipi.count;
        let config = BenchConfig {
            params: BenchParams::Ipi(ipi),
            common,
        };
        match crate::bench::run(&config) {
            Ok(run) => {
                row.latency_ns = run.latency_ns.clone();
                row.host_cpu_per_s = if run.duration_s > 0.0 {
                    run.exits.vcpu_cpu_s / run.duration_s
                } else {
                    0.0
                };
                row.exits_per_round_trip = ratio(run.exits.total, count);
                row.cpus_shared = run.placement.note(config.common.vcpus);
                runs.push(run);
            }
            Err(err) => row.unavailable = Some(crate::report::with_causes(&err)),
        }
        rows.push(row);
    }
    Ok(HaltTable { rows, runs })
}

impl fmt::Display for HaltTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<10} {:<26} {:>5} {:>10} {:>10} {:>12} {:>12}",
            "ipi", "waiting", "vCPUs", "p50 (us)", "p99 (us)", "CPU (cores)", "exits/round"
        )?;
        for row in &self.rows {
            let shared = if row.cpus_shared.is_some() { "*" } else { "" };
            write!(
                f,
                "{:<10} {:<26} {:>5} ",
                row.ipi.name(),
                row.label,
                format!("{}{shared}", row.vcpus)
            )?;
            match (&row.unavailable, &row.latency_ns) {
                (Some(reason), _) => writeln!(f, "unavailable: {reason}")?,
                (None, latency) => writeln!(
                    f,
                    "{:>10.2} {:>10.2} {:>12.2} {:>12.2}",
                    latency.as_ref().map_or(0.0, |l| f64_of(l.p50) / 1e3),
                    latency.as_ref().map_or(0.0, |l| f64_of(l.p99) / 1e3),
                    row.host_cpu_per_s,
                    row.exits_per_round_trip
                )?,
            }
        }
        if let Some(note) = self.shared_cpus_note() {
            writeln!(f, "* {note}")?;
        }
        Ok(())
    }
}
