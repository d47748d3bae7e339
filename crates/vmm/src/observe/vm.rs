//! Finding the VMs on this host from outside: every KVM VM is an anonymous
//! file (`anon_inode:kvm-vm`) some process holds, with its vCPUs
//! (`anon_inode:kvm-vcpu:N`) and, where the VMM opened them, their binary
//! statistics (`anon_inode:kvm-vcpu-stats:N`). debugfs names the VM
//! `<pid>-<fd>` after the same process and file descriptor.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("no process {0} (it is not running)")]
    NoProcess(u32),
    #[error("cannot see process {pid}'s files ({source}): watching another user's VMM needs root")]
    Permission {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "process {pid} ({comm}) holds no KVM VM: it is not a VMM, or its VM is not created yet"
    )]
    NotAVmm { pid: u32, comm: String },
    #[error("process {pid} holds no KVM VM on file descriptor {fd}")]
    NoSuchVm { pid: u32, fd: u32 },
    #[error("`{0}` is not a VM: give it as <pid>-<fd>, as debugfs names it (kvm/<pid>-<fd>)")]
    BadVmId(String),
}

/// A VM as debugfs names it: the VMM's process id and the VM's file
/// descriptor in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VmId {
    pub pid: u32,
    pub fd: u32,
}

impl fmt::Display for VmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.pid, self.fd)
    }
}

impl FromStr for VmId {
    type Err = VmError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || VmError::BadVmId(text.to_string());
        let (pid, fd) = text.split_once('-').ok_or_else(bad)?;
        Ok(VmId {
            pid: pid.parse().map_err(|_| bad())?,
            fd: fd.parse().map_err(|_| bad())?,
        })
    }
}

/// One VM and what its VMM holds of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmInfo {
    pub id: VmId,
    /// The VMM's command name (`qemu-system-x86`, `firecracker`, `dirq`).
    pub comm: String,
    /// vCPU index -> the VMM's file descriptor of it.
    pub vcpu_fds: BTreeMap<u32, u32>,
    /// vCPU index -> the VMM's binary-statistics fd of it, where open.
    pub stats_fds: BTreeMap<u32, u32>,
    /// The VMM holds VFIO devices: some MSIs may be an assigned device's.
    pub vfio: bool,
    /// Other VMs in the same process: vCPUs cannot be told apart by VM.
    pub shares_process: bool,
}

/// The VMs process `pid` holds.
pub fn vms_of(pid: u32) -> Result<Vec<VmInfo>, VmError> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let entries = std::fs::read_dir(proc.join("fd")).map_err(|source| {
        if proc.exists() {
            VmError::Permission { pid, source }
        } else {
            VmError::NoProcess(pid)
        }
    })?;
    let mut vm_fds = Vec::new();
    let mut vcpu_fds = BTreeMap::new();
    let mut stats_fds = BTreeMap::new();
    let mut vfio = false;
    for entry in entries.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        match classify(&target) {
            Some(Held::Vm) => vm_fds.push(fd),
            Some(Held::Vcpu(index)) => {
                vcpu_fds.insert(index, fd);
            }
            Some(Held::VcpuStats(index)) => {
                stats_fds.insert(index, fd);
            }
            Some(Held::Vfio) => vfio = true,
            None => {}
        }
    }
    vm_fds.sort_unstable();
    let comm = command_name(pid);
    let shares_process = vm_fds.len() > 1;
    Ok(vm_fds
        .into_iter()
        .map(|fd| VmInfo {
            id: VmId { pid, fd },
            comm: comm.clone(),
            // vCPU fds carry no VM: with several VMs they are nobody's.
            vcpu_fds: if shares_process {
                BTreeMap::new()
            } else {
                vcpu_fds.clone()
            },
            stats_fds: if shares_process {
                BTreeMap::new()
            } else {
                stats_fds.clone()
            },
            vfio,
            shares_process,
        })
        .collect())
}

/// The VMs process `pid` holds, at least one.
pub fn vmm(pid: u32) -> Result<Vec<VmInfo>, VmError> {
    let vms = vms_of(pid)?;
    if vms.is_empty() {
        return Err(VmError::NotAVmm {
            pid,
            comm: command_name(pid),
        });
    }
    Ok(vms)
}

/// The VMs process `pid` holds, waiting up to `patience` for the first
/// to be created and its vCPUs with it: a VMM just started creates its VM,
/// then its vCPUs, then (some VMMs) their statistics fds, within
/// milliseconds. Polls every millisecond.
pub fn wait_for_vmm(pid: u32, patience: std::time::Duration) -> Result<Vec<VmInfo>, VmError> {
    /// How long vCPUs without statistics fds are given to get them.
    const SETTLE: std::time::Duration = std::time::Duration::from_millis(50);
    let deadline = std::time::Instant::now() + patience;
    let mut vcpus_seen: Option<std::time::Instant> = None;
    loop {
        let vms = vms_of(pid)?;
        let settled = vms.iter().all(|vm| {
            !vm.vcpu_fds.is_empty()
                && (vm.shares_process || vm.stats_fds.len() >= vm.vcpu_fds.len())
        });
        if vms.iter().any(|vm| !vm.vcpu_fds.is_empty()) {
            vcpus_seen.get_or_insert_with(std::time::Instant::now);
        }
        let waited_enough = vcpus_seen.is_some_and(|seen| seen.elapsed() >= SETTLE);
        let now = std::time::Instant::now();
        if !vms.is_empty() && (settled || waited_enough || now >= deadline) {
            return Ok(vms);
        }
        if now >= deadline {
            return vmm(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The VM `id`.
pub fn vm(id: VmId) -> Result<VmInfo, VmError> {
    vms_of(id.pid)?
        .into_iter()
        .find(|vm| vm.id == id)
        .ok_or(VmError::NoSuchVm {
            pid: id.pid,
            fd: id.fd,
        })
}

/// Every VM on the host (processes that vanish while read are skipped).
pub fn all_vms() -> Vec<VmInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut vms: Vec<VmInfo> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| vms_of(pid).ok())
        .flatten()
        .collect();
    vms.sort_by_key(|vm| vm.id);
    vms
}

enum Held {
    Vm,
    Vcpu(u32),
    VcpuStats(u32),
    Vfio,
}

/// What a file descriptor's link names (anon inodes are named by KVM).
fn classify(target: &str) -> Option<Held> {
    if target == "anon_inode:kvm-vm" {
        return Some(Held::Vm);
    }
    if let Some(index) = target.strip_prefix("anon_inode:kvm-vcpu-stats:") {
        return index.parse().ok().map(Held::VcpuStats);
    }
    if let Some(index) = target.strip_prefix("anon_inode:kvm-vcpu:") {
        return index.parse().ok().map(Held::Vcpu);
    }
    (target.starts_with("/dev/vfio/") || target == "anon_inode:[vfio-device]").then_some(Held::Vfio)
}

/// `/proc/<pid>/comm`, or "?" once the process is gone.
pub fn command_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or_else(|_| "?".to_string(), |comm| comm.trim().to_string())
}

/// The threads of process `pid`.
pub fn threads(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A thread as /proc/<tid>/status tells it.
pub struct Thread {
    pub name: String,
    /// A kernel thread (`Kthread: 1`): a worker, no process's.
    pub kernel: bool,
}

/// Thread `tid`, if it is still there.
pub fn thread_of(tid: u32) -> Option<Thread> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let field = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key).map(|value| value.trim().to_string()))
    };
    // Where the kernel prints no `Kthread:`, kthreadd (2) and its children are kernel threads.
    let kernel = match field("Kthread:") {
        Some(flag) => flag == "1",
        None => tid == 2 || field("PPid:").is_some_and(|parent| parent == "2"),
    };
    Some(Thread {
        name: field("Name:")?,
        kernel,
    })
}

/// The vCPU threads of a VM, from debugfs's `kvm/<pid>-<fd>/vcpuN/pid`
/// (read-only files, readable even where lockdown hides the statistics).
pub fn vcpu_threads(debugfs_kvm: &Path, id: VmId) -> BTreeMap<u32, u32> {
    let dir = debugfs_kvm.join(id.to_string());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let index = entry
                .file_name()
                .to_str()?
                .strip_prefix("vcpu")?
                .parse()
                .ok()?;
            let tid = std::fs::read_to_string(entry.path().join("pid"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some((tid, index))
        })
        .collect()
}

/// A process handle that outlives its pid's reuse (pidfd_open(2)): it says
/// when the process ended and copies its file descriptors (pidfd_getfd(2),
/// which needs ptrace access: root, or the same user without Yama's limit).
pub struct Pidfd(OwnedFd);

impl Pidfd {
    pub fn open(pid: u32) -> std::io::Result<Pidfd> {
        let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        Pidfd::own(fd).map(Pidfd)
    }

    /// A copy of the process's file descriptor `fd`.
    pub fn copy_fd(&self, fd: u32) -> std::io::Result<File> {
        let fd = libc::c_int::try_from(fd).map_err(std::io::Error::other)?;
        // SAFETY: pidfd_getfd takes our pidfd, the target's fd number and
        // flags, and returns a new fd in this process or -1.
        let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.0.as_raw_fd(), fd, 0) };
        Pidfd::own(copy).map(File::from)
    }

    /// Whether the process has ended (its pidfd polls readable).
    pub fn ended(&self) -> bool {
        let mut poll = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call; a zero timeout never blocks.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready > 0
    }

    fn own(fd: libc::c_long) -> std::io::Result<OwnedFd> {
        let fd = libc::c_int::try_from(fd).map_err(std::io::Error::other)?;
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this fd and nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_ids_read_and_print_as_debugfs_names_them() {
        let id: VmId = "7197-4".parse().unwrap();
        assert_eq!(id, VmId { pid: 7197, fd: 4 });
        assert_eq!(id.to_string(), "7197-4");
        for bad in ["7197", "x-4", "7197-", "-4"] {
            assert!(
                matches!(bad.parse::<VmId>(), Err(VmError::BadVmId(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn kvm_files_are_told_apart_by_their_anon_inode_names() {
        assert!(matches!(classify("anon_inode:kvm-vm"), Some(Held::Vm)));
        assert!(matches!(
            classify("anon_inode:kvm-vcpu:3"),
            Some(Held::Vcpu(3))
        ));
        assert!(matches!(
            classify("anon_inode:kvm-vcpu-stats:1"),
            Some(Held::VcpuStats(1))
        ));
        assert!(matches!(classify("/dev/vfio/12"), Some(Held::Vfio)));
        assert!(classify("/dev/kvm").is_none());
        assert!(classify("anon_inode:kvm-vcpu:x").is_none());
    }

    #[test]
    fn a_process_without_a_vm_is_not_a_vmm() {
        let me = std::process::id();
        assert!(matches!(vmm(me), Err(VmError::NotAVmm { pid, .. }) if pid == me));
        assert!(matches!(vms_of(u32::MAX), Err(VmError::NoProcess(_))));
        assert!(threads(me).contains(&me));
        assert!(thread_of(me).is_some_and(|thread| !thread.kernel));
        // kthreadd, and one of its children.
        assert!(thread_of(2).is_some_and(|thread| thread.kernel));
    }

    #[test]
    fn a_pidfd_copies_a_processs_file_and_sees_it_end() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let pidfd = Pidfd::open(pid).unwrap();
        assert!(!pidfd.ended());
        // fd 0 of the child: /dev/null or our stdin, a file either way.
        assert!(pidfd.copy_fd(0).is_ok());
        assert!(pidfd.copy_fd(9999).is_err(), "no such fd");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(pidfd.ended());
    }
}
