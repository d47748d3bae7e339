//! The vioapic bench's device: events numbered in guest memory, as a
//! device's DMA'd status would be. It raises `raise_seq` for each new event
//! and keeps its level-triggered line asserted while `raise_seq > ack_seq`;
//! the guest reads and clears it by copying `raise_seq` to `ack_seq`. An
//! interrupt controller samples the line whenever it runs.

use std::sync::atomic::Ordering;

use vm_memory::{Bytes, GuestAddress};

use crate::abi;
use crate::memory::GuestMemory;

pub trait LineSource: Send + Sync {
    /// The line's level now.
    fn level(&self) -> Result<bool, vm_memory::GuestMemoryError>;
}

fn load(memory: &GuestMemory, gpa: u64) -> Result<u64, vm_memory::GuestMemoryError> {
    memory.load(GuestAddress(gpa), Ordering::Acquire)
}

/// Events the guest has not consumed yet raise the line.
pub struct PendingEvents {
    pub memory: GuestMemory,
}

impl PendingEvents {
    /// Makes one more event pending.
    pub fn raise(&self) -> Result<(), vm_memory::GuestMemoryError> {
        let raised = load(&self.memory, abi::RAISE_SEQ_GPA)?;
        self.memory.store(
            raised + 1,
            GuestAddress(abi::RAISE_SEQ_GPA),
            Ordering::Release,
        )
    }

    pub fn raised(&self) -> Result<u64, vm_memory::GuestMemoryError> {
        load(&self.memory, abi::RAISE_SEQ_GPA)
    }
}

impl LineSource for PendingEvents {
    fn level(&self) -> Result<bool, vm_memory::GuestMemoryError> {
        Ok(load(&self.memory, abi::RAISE_SEQ_GPA)? > load(&self.memory, abi::ACK_SEQ_GPA)?)
    }
}

/// A device that always has its next event ready, up to `count`: the
/// moment the guest consumed one, the next is pending. Sampling is what
/// makes it pending, so the line never drops between two events unless the
/// guest samples in between, and only one sampler runs at a time (the
/// controller's lock, or the one resample thread).
pub struct BackToBack {
    pub events: PendingEvents,
    pub count: u64,
}

impl LineSource for BackToBack {
    fn level(&self) -> Result<bool, vm_memory::GuestMemoryError> {
        let pending = self.events.level()?;
        if !pending && self.events.raised()? < self.count {
            self.events.raise()?;
            return Ok(true);
        }
        Ok(pending)
    }
}
