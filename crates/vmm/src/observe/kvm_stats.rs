//! A watched VM's KVM statistics (the counters kvm_stat shows), read from
//! outside by whichever way this host allows:
//! 1. the VMM's own binary-statistics fds, copied with pidfd_getfd: exact,
//!    per vCPU, readable after the VMM ends (the copy holds them);
//! 2. debugfs's `kvm/<pid>-<fd>/`: per VM, unless kernel lockdown hides it;
//! 3. neither: the tracepoints alone, and the reason is said.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::vm::{Pidfd, VmInfo};
use crate::stats::{self, Counters, StatsFd};

/// Where the statistics come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "origin", content = "detail")]
pub enum StatsOrigin {
    /// The VMM's binary-statistics fds (KVM_GET_STATS_FD), per vCPU.
    VmmStatsFds,
    /// debugfs, per VM.
    Debugfs(PathBuf),
    /// None readable, and why.
    Unavailable(String),
}

/// The counters at one instant: per vCPU where the source has them, and
/// summed over the VM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readings {
    #[serde(deserialize_with = "super::numeric_keys::deserialize")]
    pub per_vcpu: BTreeMap<u32, Counters>,
    pub vm: Counters,
}

impl Readings {
    /// `self - earlier`, counter by counter.
    pub fn since(&self, earlier: &Readings) -> Readings {
        Readings {
            per_vcpu: self
                .per_vcpu
                .iter()
                .map(|(vcpu, after)| {
                    let before = earlier.per_vcpu.get(vcpu).cloned().unwrap_or_default();
                    (*vcpu, stats::delta(&before, after))
                })
                .collect(),
            vm: stats::delta(&earlier.vm, &self.vm),
        }
    }

    pub fn get(&self, name: &str) -> u64 {
        self.vm.get(name).copied().unwrap_or(0)
    }
}

enum Source {
    Fds(BTreeMap<u32, StatsFd>),
    Debugfs(PathBuf),
    None,
}

/// One VM's statistics source.
pub struct VmStats {
    pub origin: StatsOrigin,
    source: Source,
}

impl VmStats {
    /// The best source this host allows for `vm`.
    pub fn attach(vm: &VmInfo, debugfs_kvm: Option<&Path>) -> VmStats {
        let mut why_not = Vec::new();
        if vm.stats_fds.is_empty() {
            why_not.push(if vm.shares_process {
                "the VMM holds several VMs, whose statistics fds cannot be told apart".to_string()
            } else {
                "the VMM keeps no KVM statistics fd open".to_string()
            });
        } else {
            match borrow(vm) {
                Ok(fds) => {
                    return VmStats {
                        origin: StatsOrigin::VmmStatsFds,
                        source: Source::Fds(fds),
                    }
                }
                Err(error) => {
                    why_not.push(format!("copying the VMM's statistics fds failed ({error})"))
                }
            }
        }
        match debugfs_kvm.map(|kvm| kvm.join(vm.id.to_string())) {
            Some(dir) => match std::fs::read_to_string(dir.join("exits")) {
                Ok(_) => {
                    return VmStats {
                        origin: StatsOrigin::Debugfs(dir.clone()),
                        source: Source::Debugfs(dir),
                    }
                }
                Err(error) if error.raw_os_error() == Some(libc::EPERM) => why_not
                    .push("debugfs's KVM statistics are hidden by kernel lockdown".to_string()),
                Err(error) => why_not.push(format!("{} is unreadable ({error})", dir.display())),
            },
            None => why_not.push("debugfs is not mounted".to_string()),
        }
        VmStats {
            origin: StatsOrigin::Unavailable(why_not.join("; ")),
            source: Source::None,
        }
    }

    /// The counters now; empty readings where no source is readable (a
    /// debugfs directory that vanished with its VM reads empty too).
    pub fn read(&self) -> Readings {
        match &self.source {
            Source::Fds(fds) => {
                let per_vcpu: BTreeMap<u32, Counters> = fds
                    .iter()
                    .filter_map(|(vcpu, fd)| Some((*vcpu, fd.read().ok()?)))
                    .collect();
                let mut vm = Counters::new();
                for counters in per_vcpu.values() {
                    for (name, value) in counters {
                        let sum = vm.entry(name.clone()).or_insert(0);
                        *sum = sum.saturating_add(*value);
                    }
                }
                Readings { per_vcpu, vm }
            }
            Source::Debugfs(dir) => Readings {
                per_vcpu: BTreeMap::new(),
                vm: read_debugfs(dir),
            },
            Source::None => Readings::default(),
        }
    }
}

fn borrow(vm: &VmInfo) -> Result<BTreeMap<u32, StatsFd>, String> {
    let pidfd = Pidfd::open(vm.id.pid).map_err(|error| format!("pidfd_open: {error}"))?;
    vm.stats_fds
        .iter()
        .map(|(&vcpu, &fd)| {
            let file = pidfd
                .copy_fd(fd)
                .map_err(|error| format!("pidfd_getfd: {error}"))?;
            let stats = StatsFd::from_file(file).map_err(|error| error.to_string())?;
            Ok((vcpu, stats))
        })
        .collect()
}

/// Every counter file of a debugfs VM directory (one number each).
fn read_debugfs(dir: &Path) -> Counters {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Counters::new();
    };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .filter_map(|entry| {
            let value = std::fs::read_to_string(entry.path())
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some((entry.file_name().to_str()?.to_string(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::stats::counters_of as counters;

    #[test]
    fn readings_subtract_counter_by_counter() {
        let earlier = Readings {
            per_vcpu: BTreeMap::from([(0, counters(&[("exits", 10)]))]),
            vm: counters(&[("exits", 10), ("halt_exits", 2)]),
        };
        let later = Readings {
            per_vcpu: BTreeMap::from([
                (0, counters(&[("exits", 25)])),
                (1, counters(&[("exits", 4)])),
            ]),
            vm: counters(&[("exits", 29), ("halt_exits", 2)]),
        };
        let window = later.since(&earlier);
        assert_eq!(window.get("exits"), 19);
        assert_eq!(window.get("halt_exits"), 0);
        assert_eq!(window.per_vcpu[&0]["exits"], 15);
        assert_eq!(
            window.per_vcpu[&1]["exits"], 4,
            "a vCPU that appeared counts from 0"
        );
    }

    #[test]
    fn a_debugfs_directory_reads_one_counter_per_file() {
        let dir = std::env::temp_dir().join(format!("dirq-debugfs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("vcpu0")).unwrap();
        std::fs::write(dir.join("exits"), "1234\n").unwrap();
        std::fs::write(dir.join("halt_exits"), "7\n").unwrap();
        std::fs::write(dir.join("garbage"), "not a number\n").unwrap();
        let read = read_debugfs(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read, counters(&[("exits", 1234), ("halt_exits", 7)]));
    }
}
