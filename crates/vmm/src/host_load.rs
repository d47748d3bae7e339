//! How busy the host was while `dirq probe` measured its floors, and the
//! verdict on whether the floors can be trusted as this host's: load
//! average, the outer hypervisor's steal time over the probe, other
//! runnable tasks, and how far the floors' batches spread.
//!
//! On kvm_pvm every trap is nested, so a busy host or a busy outer host
//! moves every floor; a report that quotes floors quotes this with them.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::probe::Floor;

/// The 1-minute load average above which the host's CPUs were busy
/// before the probe started: per host CPU.
const BUSY_LOAD_PER_CPU: f64 = 1.0;

/// Other runnable tasks, on average over the probe's looks, from which
/// they competed with the probe's vCPUs for much of it.
const BUSY_OTHER_RUNNABLE: f64 = 0.5;

/// The share of all host CPUs' time the outer hypervisor took for others
/// from which traps (each one through it) are slowed.
const NOISY_STEAL_SHARE: f64 = 0.02;

/// What the host did while the probe ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostLoad {
    /// Host CPUs online.
    pub cpus: usize,
    /// /proc/loadavg's 1, 5 and 15-minute averages when the measuring
    /// started, before its own vCPUs added to them.
    pub load_average: Option<[f64; 3]>,
    /// Runnable tasks other than the watcher, averaged over its looks
    /// between runs (when none of its vCPUs run); None without a look.
    pub other_runnable: Option<f64>,
    /// The outer hypervisor's steal time over the probe (/proc/stat), in
    /// ms summed over all CPUs; None without /proc/stat.
    pub steal_ms: Option<f64>,
    /// `steal_ms` as a share of all CPUs' time over the probe (0-1).
    pub steal_share: Option<f64>,
    /// How long the probe measured.
    pub elapsed_s: f64,
}

/// Why the floors of a probe may not be this host's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NoiseReason {
    /// The 1-minute load average was above one task per host CPU.
    LoadAverage { one_minute: f64, cpus: usize },
    /// Other tasks were runnable during much of the probe.
    OtherRunnable { average: f64 },
    /// The outer hypervisor ran others on this host's CPUs.
    Steal { share: f64 },
    /// A floor the probe could not pin down: its median's notch (half
    /// width, a share of the median) after its last run, wider than two
    /// probes may disagree by (`probe::FLOOR_AGREEMENT`, halved).
    FloorSpread { floor: Floor, relative: f64 },
    /// The IPI floors' two vCPUs time-shared one host CPU.
    SharedCore,
    /// A reason the probe saw while it measured the floors, where a longer
    /// run (the report) has readings of its own beside it.
    DuringProbe { reason: Box<NoiseReason> },
}

/// The verdict on the host while the probe measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "reasons", rename_all = "snake_case")]
pub enum HostNoise {
    #[default]
    Quiet,
    Noisy(Vec<NoiseReason>),
}

impl HostNoise {
    /// Noisy with `reasons`, quiet without any.
    pub fn from_reasons(reasons: Vec<NoiseReason>) -> Self {
        if reasons.is_empty() {
            HostNoise::Quiet
        } else {
            HostNoise::Noisy(reasons)
        }
    }

    /// The one-line warning to print above the floors; None when quiet.
    pub fn warning(&self) -> Option<String> {
        let HostNoise::Noisy(reasons) = self else {
            return None;
        };
        let reasons: Vec<String> = reasons.iter().map(ToString::to_string).collect();
        Some(format!(
            "WARNING: the host was noisy while the floors were measured ({}); \
             they may not be this host's own: probe again when it is idle",
            reasons.join("; ")
        ))
    }
}

impl std::fmt::Display for NoiseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoiseReason::LoadAverage { one_minute, cpus } => {
                write!(f, "load average {one_minute:.2} on {cpus} CPUs")
            }
            NoiseReason::OtherRunnable { average } => {
                write!(f, "{average:.1} other tasks runnable on average")
            }
            NoiseReason::Steal { share } => {
                write!(
                    f,
                    "{:.1}% of CPU time stolen by the outer host",
                    share * 100.0
                )
            }
            NoiseReason::FloorSpread { floor, relative } => write!(
                f,
                "{} not pinned down: its runs leave its median uncertain by +/-{:.0}%",
                floor.name(),
                relative * 100.0
            ),
            NoiseReason::SharedCore => write!(f, "the IPI floors' vCPUs shared a host CPU"),
            NoiseReason::DuringProbe { reason } => {
                write!(f, "while the probe measured the floors, {reason}")
            }
        }
    }
}

impl std::fmt::Display for HostLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "host load over {:.1} s: ", self.elapsed_s)?;
        match self.load_average {
            Some([one, five, fifteen]) => write!(
                f,
                "load average {one:.2} {five:.2} {fifteen:.2} on {} CPUs",
                self.cpus
            )?,
            None => write!(f, "load average unknown on {} CPUs", self.cpus)?,
        }
        if let Some(other) = self.other_runnable {
            write!(f, ", {other:.1} other tasks runnable")?;
        }
        match (self.steal_ms, self.steal_share) {
            (Some(ms), Some(share)) => {
                write!(f, ", steal {ms:.0} ms ({:.1}%)", share * 100.0)
            }
            _ => write!(f, ", steal unknown"),
        }
    }
}

impl HostLoad {
    /// The host's share of the reasons a probe is noisy; the probe adds
    /// its own (floor spreads, a shared core).
    pub fn noise_reasons(&self) -> Vec<NoiseReason> {
        let mut reasons = Vec::new();
        if let Some([one_minute, ..]) = self.load_average {
            if one_minute > BUSY_LOAD_PER_CPU * dirq_stats::f64_of(self.cpus as u64) {
                reasons.push(NoiseReason::LoadAverage {
                    one_minute,
                    cpus: self.cpus,
                });
            }
        }
        if let Some(average) = self
            .other_runnable
            .filter(|&average| average >= BUSY_OTHER_RUNNABLE)
        {
            reasons.push(NoiseReason::OtherRunnable { average });
        }
        if let Some(share) = self.steal_share.filter(|&share| share > NOISY_STEAL_SHARE) {
            reasons.push(NoiseReason::Steal { share });
        }
        reasons
    }
}

/// Watches the host over a probe: start it first, `look` between runs,
/// `finish` at the end.
pub struct LoadMonitor {
    started: Instant,
    load_average: Option<[f64; 3]>,
    steal_ticks: Option<u64>,
    other_runnable: Vec<u32>,
}

impl LoadMonitor {
    pub fn start() -> Self {
        Self {
            started: Instant::now(),
            load_average: read_load_average(),
            steal_ticks: read_steal_ticks(),
            other_runnable: Vec::new(),
        }
    }

    /// Counts the other runnable tasks; call it while no vCPU of the
    /// probe runs, so that the only runnable task of ours is this one.
    /// A watcher that never looks reports no count.
    pub fn look(&mut self) {
        if let Some(runnable) = read_runnable() {
            self.other_runnable.push(runnable.saturating_sub(1));
        }
    }

    pub fn finish(self) -> HostLoad {
        let elapsed_s = self.started.elapsed().as_secs_f64();
        // The load average and steal are host-wide: all online CPUs count,
        // not only those this process may run on.
        let cpus = read_online_cpus()
            .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
            .unwrap_or(1);
        let steal_ms = self
            .steal_ticks
            .zip(read_steal_ticks())
            .map(|(before, after)| ticks_to_ms(after.saturating_sub(before)));
        let cpu_ms = elapsed_s * 1e3 * dirq_stats::f64_of(cpus as u64);
        let looks = self.other_runnable.len() as u64;
        let runnable: u64 = self.other_runnable.iter().map(|&n| u64::from(n)).sum();
        HostLoad {
            cpus,
            load_average: self.load_average,
            other_runnable: (looks > 0).then(|| dirq_stats::ratio(runnable, looks)),
            steal_ms,
            steal_share: steal_ms.map(|ms| if cpu_ms > 0.0 { ms / cpu_ms } else { 0.0 }),
            elapsed_s,
        }
    }
}

/// /proc/stat counts in USER_HZ ticks, 100 per second on every Linux ABI.
const USER_HZ: f64 = 100.0;

fn ticks_to_ms(ticks: u64) -> f64 {
    dirq_stats::f64_of(ticks) * 1e3 / USER_HZ
}

/// The steal column (the 8th number) of /proc/stat's all-CPU line.
fn read_steal_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_steal_ticks(&stat)
}

fn parse_steal_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

fn read_online_cpus() -> Option<usize> {
    count_cpus(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// One "cpuN" line of /proc/stat per online CPU.
fn count_cpus(stat: &str) -> Option<usize> {
    let cpus = stat
        .lines()
        .filter(|line| {
            line.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    (cpus > 0).then_some(cpus)
}

fn read_load_average() -> Option<[f64; 3]> {
    parse_load_average(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// "0.52 0.58 0.59 2/110 1234": the three averages.
fn parse_load_average(loadavg: &str) -> Option<[f64; 3]> {
    let mut fields = loadavg.split_whitespace().map(str::parse::<f64>);
    Some([
        fields.next()?.ok()?,
        fields.next()?.ok()?,
        fields.next()?.ok()?,
    ])
}

fn read_runnable() -> Option<u32> {
    parse_runnable(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// "0.52 0.58 0.59 2/110 1234": the 2 runnable tasks, the reader included.
fn parse_runnable(loadavg: &str) -> Option<u32> {
    let (runnable, _) = loadavg.split_whitespace().nth(3)?.split_once('/')?;
    runnable.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOADAVG: &str = "8.87 5.87 2.75 5/110 13877\n";

    #[test]
    fn proc_files_are_read_by_column() {
        assert_eq!(parse_load_average(LOADAVG), Some([8.87, 5.87, 2.75]));
        assert_eq!(parse_runnable(LOADAVG), Some(5));
        let stat = "cpu  100 2 300 4000 50 6 7 812 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse_steal_ticks(stat), Some(812));
        assert_eq!(count_cpus(stat), Some(1));
        assert_eq!(ticks_to_ms(812), 8_120.0);
    }

    fn load(one_minute: f64, other_runnable: f64, steal_share: f64) -> HostLoad {
        HostLoad {
            cpus: 2,
            load_average: Some([one_minute, 0.0, 0.0]),
            other_runnable: Some(other_runnable),
            steal_ms: Some(0.0),
            steal_share: Some(steal_share),
            elapsed_s: 10.0,
        }
    }

    #[test]
    fn an_idle_host_gives_no_reason_and_each_sign_of_load_one() {
        assert!(load(0.3, 0.0, 0.0).noise_reasons().is_empty());
        assert_eq!(
            HostNoise::from_reasons(load(0.3, 0.0, 0.0).noise_reasons()),
            HostNoise::Quiet
        );
        let reasons = load(8.9, 3.0, 0.10).noise_reasons();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        let warning = HostNoise::from_reasons(reasons)
            .warning()
            .expect("a noisy host warns");
        assert!(warning.contains("load average 8.90 on 2 CPUs"), "{warning}");
        assert!(warning.contains("10.0% of CPU time stolen"), "{warning}");
        assert!(warning.contains("3.0 other tasks"), "{warning}");
    }

    #[test]
    fn the_verdict_serializes_with_its_reasons() {
        let noise = HostNoise::Noisy(vec![
            NoiseReason::SharedCore,
            NoiseReason::FloorSpread {
                floor: Floor::IpiBusyTarget,
                relative: 0.5,
            },
        ]);
        let json = serde_json::to_value(&noise).expect("serializes");
        assert_eq!(json["verdict"], "noisy");
        assert_eq!(json["reasons"][0]["kind"], "shared_core");
        assert_eq!(json["reasons"][1]["floor"], "ipi_busy_target");
        let back: HostNoise = serde_json::from_value(json).expect("deserializes");
        assert_eq!(back, noise);
        assert_eq!(
            serde_json::to_value(HostNoise::Quiet).expect("serializes")["verdict"],
            "quiet"
        );
    }
}
