//! KVM's binary statistics (KVM_GET_STATS_FD, Documentation/virt/kvm/api.rst
//! 4.133): the in-kernel counters of one vCPU, read without stopping it.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

use kvm_bindings::kvm_stats_header;
use vmm_sys_util::ioctl::ioctl;
use vmm_sys_util::ioctl_io_nr;

const KVMIO: u32 = 0xae;
ioctl_io_nr!(KVM_GET_STATS_FD, KVMIO, 0xce);

/// Size of `struct kvm_stats_desc` without its trailing name.
const DESC_FIXED_SIZE: usize = 16;
/// KVM_STATS_TYPE_MASK / KVM_STATS_TYPE_CUMULATIVE, KVM_STATS_TYPE_INSTANT.
const STATS_TYPE_MASK: u32 = 0xf;
const STATS_TYPE_CUMULATIVE: u32 = 0;
const STATS_TYPE_INSTANT: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("KVM_GET_STATS_FD failed")]
    Open(#[source] std::io::Error),
    #[error("cannot read the KVM stats fd")]
    Read(#[source] std::io::Error),
    #[error("the KVM stats fd is malformed: {0}")]
    Malformed(&'static str),
}

/// Named counter values.
pub type Counters = BTreeMap<String, u64>;

/// Counters from (name, value) pairs, for tests.
#[cfg(test)]
pub(crate) fn counters_of(pairs: &[(&str, u64)]) -> Counters {
    pairs
        .iter()
        .map(|(name, value)| (name.to_string(), *value))
        .collect()
}

struct Descriptor {
    name: String,
    /// Byte offset of the value within the data block.
    offset: usize,
}

/// The scalar counters of one KVM stats fd.
pub struct StatsFd {
    file: File,
    descriptors: Vec<Descriptor>,
    data_offset: u64,
    data_len: usize,
}

impl StatsFd {
    /// Opens the stats fd of a VM or vCPU file descriptor.
    pub fn open(kvm_object: &impl AsRawFd) -> Result<Self, StatsError> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new file
        // descriptor or -1; the object fd is valid for the call.
        let fd = unsafe { ioctl(kvm_object, KVM_GET_STATS_FD()) };
        if fd < 0 {
            return Err(StatsError::Open(std::io::Error::last_os_error()));
        }
        // SAFETY: fd was just returned by the kernel and nothing else owns it.
        StatsFd::from_file(unsafe { File::from_raw_fd(fd) })
    }

    /// Reads the descriptors of an already open stats fd (one borrowed from
    /// the VMM that opened it, say).
    pub fn from_file(file: File) -> Result<Self, StatsError> {
        let header = read_header(&file)?;
        let desc_size = DESC_FIXED_SIZE + header.name_size as usize;
        let mut block = vec![0u8; desc_size * header.num_desc as usize];
        file.read_exact_at(&mut block, header.desc_offset.into())
            .map_err(StatsError::Read)?;

        let mut descriptors = Vec::new();
        let mut data_len = 0usize;
        for raw in block.chunks_exact(desc_size) {
            let word =
                |at: usize| u32::from_ne_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
            let flags = word(0);
            let size = u16::from_ne_bytes([raw[6], raw[7]]) as usize;
            let offset = word(8) as usize;
            data_len = data_len.max(offset + size * 8);
            let kind = flags & STATS_TYPE_MASK;
            // Histograms (size > 1) and peak values are not exit counts.
            if size != 1 || !(kind == STATS_TYPE_CUMULATIVE || kind == STATS_TYPE_INSTANT) {
                continue;
            }
            let name_bytes = &raw[DESC_FIXED_SIZE..];
            let end = name_bytes
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_bytes.len());
            let name = std::str::from_utf8(&name_bytes[..end])
                .map_err(|_| StatsError::Malformed("a stat name is not UTF-8"))?;
            descriptors.push(Descriptor {
                name: name.to_string(),
                offset,
            });
        }
        Ok(StatsFd {
            file,
            descriptors,
            data_offset: header.data_offset.into(),
            data_len,
        })
    }

    /// The current value of every scalar counter.
    pub fn read(&self) -> Result<Counters, StatsError> {
        let mut data = vec![0u8; self.data_len];
        self.file
            .read_exact_at(&mut data, self.data_offset)
            .map_err(StatsError::Read)?;
        let mut counters = Counters::new();
        for descriptor in &self.descriptors {
            let at = descriptor.offset;
            let bytes: [u8; 8] = data
                .get(at..at + 8)
                .and_then(|slice| slice.try_into().ok())
                .ok_or(StatsError::Malformed("a stat lies outside the data block"))?;
            counters.insert(descriptor.name.clone(), u64::from_ne_bytes(bytes));
        }
        Ok(counters)
    }
}

fn read_header(file: &File) -> Result<kvm_stats_header, StatsError> {
    let mut raw = [0u8; std::mem::size_of::<kvm_stats_header>()];
    file.read_exact_at(&mut raw, 0).map_err(StatsError::Read)?;
    let word = |index: usize| {
        let at = index * 4;
        u32::from_ne_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]])
    };
    Ok(kvm_stats_header {
        flags: word(0),
        name_size: word(1),
        num_desc: word(2),
        id_offset: word(3),
        desc_offset: word(4),
        data_offset: word(5),
    })
}

/// `after - before`, counter by counter (counters that went down count 0).
pub fn delta<K: Ord + Clone>(
    before: &BTreeMap<K, u64>,
    after: &BTreeMap<K, u64>,
) -> BTreeMap<K, u64> {
    after
        .iter()
        .map(|(name, value)| {
            let base = before.get(name).copied().unwrap_or(0);
            (name.clone(), value.saturating_sub(base))
        })
        .collect()
}
