//! Guest memory: one RAM region at GPA 0 and the guest kernel loaded into it.
//!
//! Layout (identity-mapped by the page tables in `boot`):
//! 0x1000 page tables, 0x7000 boot GDT, 0x8000 shared page, 0x20000 stacks,
//! 0x100000 kernel, 0x400000.. latency samples written by the guest.

use std::io::Cursor;

use linux_loader::loader::{elf::Elf, KernelLoader};
use vm_memory::{GuestAddress, GuestMemoryMmap};

use crate::abi;

pub const RAM_SIZE: u64 = 16 << 20;
pub const SAMPLES_GPA: u64 = 0x40_0000;
pub const SAMPLES_CAPACITY: u64 = (RAM_SIZE - SAMPLES_GPA) / 8;

pub type GuestMemory = GuestMemoryMmap<()>;

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("cannot allocate guest memory")]
    Allocate(#[source] vm_memory::mmap::FromRangesError),
    #[error("cannot load the guest kernel ELF")]
    LoadKernel(#[source] linux_loader::loader::Error),
    #[error("the guest kernel overlaps the sample area (ends at {end:#x})")]
    KernelTooLarge { end: u64 },
}

pub fn create_guest_memory() -> Result<GuestMemory, MemoryError> {
    let size = usize::try_from(RAM_SIZE).expect("16 MiB fits a 64-bit usize");
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)]).map_err(MemoryError::Allocate)
}

/// One page of host memory at `gpa`, for a memory slot beside RAM.
pub fn create_page(gpa: u64) -> Result<GuestMemory, MemoryError> {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(gpa), PAGE_SIZE)]).map_err(MemoryError::Allocate)
}

const PAGE_SIZE: usize = 4096;

/// Loads the embedded guest kernel at its link addresses; returns its entry point.
pub fn load_guest_kernel(memory: &GuestMemory) -> Result<GuestAddress, MemoryError> {
    let loaded = Elf::load(memory, None, &mut Cursor::new(abi::GUEST_ELF), None)
        .map_err(MemoryError::LoadKernel)?;
    if loaded.kernel_end > SAMPLES_GPA {
        return Err(MemoryError::KernelTooLarge {
            end: loaded.kernel_end,
        });
    }
    Ok(loaded.kernel_load)
}
