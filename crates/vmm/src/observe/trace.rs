//! KVM's tracepoints read through perf_event_open, as `perf record -a -e
//! kvm:...` reads them: one counter per tracepoint and host CPU, sampling
//! every record with its raw data, time (CLOCK_MONOTONIC), CPU and thread.
//! Records are decoded by each tracepoint's format file and handed on in
//! time order; records the kernel could not store are counted, never
//! silently dropped.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

use perf_event_open::config::{Clock, Cpu, Opts, Proc, SampleOn};
use perf_event_open::count::Counter;
use perf_event_open::event::tp::Tracepoint as PerfTracepoint;
use perf_event_open::sample::record::Record;
use perf_event_open::sample::Sampler;

use super::account::Traced;
use super::event::{Decoder, Tracepoint, Unusable};
use super::format::{EventFormat, FormatError};

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(
        "tracefs is not mounted and could not be mounted at {path} ({source}): \
         mount it (`mount -t tracefs none /sys/kernel/tracing`) or run as root"
    )]
    Mount {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("this kernel has no kvm tracepoints under {0} (is the kvm module loaded?)")]
    NoKvmEvents(PathBuf),
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a tracepoint format")]
    Format {
        path: PathBuf,
        #[source]
        source: FormatError,
    },
    #[error(
        "perf_event_open refused the kvm tracepoints ({source}): tracing them system-wide needs \
         root or CAP_PERFMON (kernel.perf_event_paranoid is {paranoid})"
    )]
    Permission {
        paranoid: String,
        #[source]
        source: std::io::Error,
    },
    #[error("perf_event_open failed for {tracepoint} on CPU {cpu}")]
    Open {
        tracepoint: Tracepoint,
        cpu: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the host's online CPUs from {0}")]
    Cpus(PathBuf),
}

/// Where tracefs is, and whether dirq mounted it.
#[derive(Clone, Debug)]
pub struct Tracefs {
    root: PathBuf,
    pub mounted_here: bool,
}

const TRACEFS: &str = "/sys/kernel/tracing";
const TRACEFS_UNDER_DEBUGFS: &str = "/sys/kernel/debug/tracing";

impl Tracefs {
    /// Finds tracefs, mounting it at /sys/kernel/tracing if it is absent.
    pub fn locate() -> Result<Tracefs, TraceError> {
        for root in [TRACEFS, TRACEFS_UNDER_DEBUGFS] {
            if Path::new(root).join("events").is_dir() {
                return Tracefs::with_kvm(PathBuf::from(root), false);
            }
        }
        mount("tracefs", TRACEFS).map_err(|source| TraceError::Mount {
            path: PathBuf::from(TRACEFS),
            source,
        })?;
        Tracefs::with_kvm(PathBuf::from(TRACEFS), true)
    }

    fn with_kvm(root: PathBuf, mounted_here: bool) -> Result<Tracefs, TraceError> {
        let kvm = root.join("events/kvm");
        if !kvm.is_dir() {
            return Err(TraceError::NoKvmEvents(kvm));
        }
        Ok(Tracefs { root, mounted_here })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The tracepoint's format, or `None` if this kernel lacks it.
    pub fn format(&self, tracepoint: Tracepoint) -> Result<Option<EventFormat>, TraceError> {
        let path = self
            .root
            .join("events/kvm")
            .join(tracepoint.name())
            .join("format");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(TraceError::Read { path, source }),
        };
        EventFormat::parse(&text)
            .map(Some)
            .map_err(|source| TraceError::Format { path, source })
    }
}

/// Mounts a pseudo file system of `kind` at `target` (debugfs, tracefs).
pub fn mount(kind: &str, target: &str) -> std::io::Result<()> {
    let source = CString::new("none").map_err(std::io::Error::other)?;
    let kind = CString::new(kind).map_err(std::io::Error::other)?;
    let target = CString::new(target).map_err(std::io::Error::other)?;
    // SAFETY: every pointer is a NUL-terminated string that lives across
    // the call; no data is passed.
    let status = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            kind.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if status == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The host CPUs online now (`0-1,4`).
pub fn online_cpus() -> Result<Vec<u32>, TraceError> {
    let path = PathBuf::from("/sys/devices/system/cpu/online");
    let text = std::fs::read_to_string(&path).map_err(|_| TraceError::Cpus(path.clone()))?;
    parse_cpu_list(text.trim()).ok_or(TraceError::Cpus(path))
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for range in text.split(',') {
        let (first, last): (u32, u32) = match range.split_once('-') {
            Some((first, last)) => (first.parse().ok()?, last.parse().ok()?),
            None => {
                let cpu = range.parse().ok()?;
                (cpu, cpu)
            }
        };
        if last < first || last - first > 65_536 {
            return None;
        }
        cpus.extend(first..=last);
    }
    Some(cpus)
}

/// Pages of each ring buffer, as a power of two: 2^7 pages (512 KiB) hold
/// about 6,000 records, 60 ms of one tracepoint at 100,000 records a
/// second between two drains.
const RING_PAGES_LOG2: u8 = 7;

struct Ring {
    tracepoint: Tracepoint,
    counter: Counter,
    sampler: Sampler,
}

/// The kvm tracepoints being sampled on every CPU.
pub struct TraceSession {
    rings: Vec<Ring>,
    decoder: Decoder,
    pub unusable: Vec<Unusable>,
    /// Tracepoints this kernel does not have.
    pub absent: Vec<Tracepoint>,
    pub opened: Vec<Tracepoint>,
    /// Records the kernel could not store (PERF_RECORD_LOST), by the
    /// tracepoint whose ring was full.
    pub lost: BTreeMap<Tracepoint, u64>,
    /// Records read and decoded.
    pub records: u64,
    /// Records of a tracepoint not asked for, or too short for its format.
    pub undecodable: u64,
    /// Tracepoints turned off while tracing, and why.
    pub disabled: Vec<(Tracepoint, String)>,
    pending: Vec<Traced>,
    /// Every record older than this was in a ring when the last drain began.
    watermark_ns: u64,
}

impl TraceSession {
    /// Opens `tracepoints` on every online CPU.
    pub fn open(tracefs: &Tracefs, tracepoints: &[Tracepoint]) -> Result<TraceSession, TraceError> {
        let cpus = online_cpus()?;
        let mut formats = Vec::new();
        let mut absent = Vec::new();
        for &tracepoint in tracepoints {
            match tracefs.format(tracepoint)? {
                Some(format) => formats.push((tracepoint, format)),
                None => absent.push(tracepoint),
            }
        }
        let (decoder, unusable) = Decoder::new(&formats);
        let mut rings = Vec::new();
        let mut opened = Vec::new();
        for (tracepoint, format) in &formats {
            if unusable.iter().any(|u| u.tracepoint == *tracepoint) {
                continue;
            }
            for &cpu in &cpus {
                rings.push(open_ring(*tracepoint, format.id, cpu)?);
            }
            opened.push(*tracepoint);
        }
        Ok(TraceSession {
            rings,
            decoder,
            unusable,
            absent,
            opened,
            lost: BTreeMap::new(),
            records: 0,
            undecodable: 0,
            disabled: Vec::new(),
            pending: Vec::new(),
            watermark_ns: monotonic_ns(),
        })
    }

    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// Stops sampling `tracepoint` on every CPU (its records still in the
    /// rings are read).
    pub fn disable(&mut self, tracepoint: Tracepoint, why: String) {
        for ring in self
            .rings
            .iter()
            .filter(|ring| ring.tracepoint == tracepoint)
        {
            // A counter that will not stop keeps sampling: no harm but load.
            let _ = ring.counter.disable();
        }
        self.disabled.push((tracepoint, why));
    }

    /// The records every ring held before the previous drain began, in
    /// time order (the later ones wait for the next drain, so that a
    /// record another CPU's ring still had to give comes in its place).
    pub fn drain(&mut self) -> Vec<Traced> {
        let started = monotonic_ns();
        self.read_rings();
        self.pending.sort_by_key(|traced| traced.time_ns);
        let ready = self
            .pending
            .partition_point(|traced| traced.time_ns <= self.watermark_ns);
        self.watermark_ns = started;
        self.pending.drain(..ready).collect()
    }

    /// Every record left, in time order (the observation ends).
    pub fn finish(&mut self) -> Vec<Traced> {
        self.read_rings();
        self.pending.sort_by_key(|traced| traced.time_ns);
        std::mem::take(&mut self.pending)
    }

    fn read_rings(&mut self) {
        for ring in &self.rings {
            let Some(records) = ring.sampler.iter() else {
                continue;
            };
            for (_, record) in records {
                match record {
                    Record::Sample(sample) => {
                        let event = sample
                            .raw
                            .as_deref()
                            .and_then(|raw| self.decoder.decode(raw));
                        let task = sample.record_id.task.as_ref();
                        match (event, sample.record_id.time, task) {
                            (Some(event), Some(time_ns), Some(task)) => {
                                self.records += 1;
                                self.pending.push(Traced {
                                    time_ns,
                                    cpu: sample.record_id.cpu.unwrap_or(0),
                                    pid: task.pid,
                                    tid: task.tid,
                                    event,
                                });
                            }
                            _ => self.undecodable += 1,
                        }
                    }
                    Record::LostRecords(lost) => {
                        *self.lost.entry(ring.tracepoint).or_insert(0) += lost.lost_records;
                    }
                    _ => {}
                }
            }
        }
    }
}

fn open_ring(tracepoint: Tracepoint, id: u64, cpu: u32) -> Result<Ring, TraceError> {
    // Every record, with its raw data, thread, time and CPU.
    let mut opts = Opts {
        sample_on: SampleOn::Count(1),
        timer: Some(Clock::Monotonic),
        ..Opts::default()
    };
    opts.sample_format.raw = true;
    opts.record_id_format.task = true;
    opts.record_id_format.time = true;
    opts.record_id_format.cpu = true;
    let failed = |source: std::io::Error| match source.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => TraceError::Permission {
            paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .map_or_else(|_| "unknown".to_string(), |text| text.trim().to_string()),
            source,
        },
        _ => TraceError::Open {
            tracepoint,
            cpu,
            source,
        },
    };
    let counter =
        Counter::new(PerfTracepoint { id }, (Proc::ALL, Cpu(cpu)), opts).map_err(failed)?;
    let sampler = counter.sampler(RING_PAGES_LOG2).map_err(failed)?;
    counter.enable().map_err(failed)?;
    Ok(Ring {
        tracepoint,
        counter,
        sampler,
    })
}

/// CLOCK_MONOTONIC now, in ns: the clock the samples carry.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec.cast_unsigned() * 1_000_000_000 + now.tv_nsec.cast_unsigned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
