//! Multiboot v1 loading (the Multiboot Specification 0.6.96): the kernel's
//! header, its ELF32 or ELF64 load segments, and the boot information
//! (memory sizes, command line, modules, memory map) the kernel reads at
//! `%ebx` on entry.

use dirq_arch::bits::low_u32;
use goblin::elf::{program_header::PT_LOAD, Elf, ProgramHeader};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend as _};

use crate::memory::GuestMemory;

/// Multiboot spec 3.1.1: the header's magic, in the first 8 KiB, 4-aligned.
const HEADER_MAGIC: u32 = 0x1bad_b002;
const HEADER_SEARCH_BYTES: usize = 8192;
/// Multiboot spec 3.2: what `%eax` holds on entry.
pub const BOOTLOADER_MAGIC: u32 = 0x2bad_b002;

/// Header flags (spec 3.1.2). Bits 0-15 are requirements the loader must
/// meet or refuse the kernel; bits 16-31 optional.
const FLAG_PAGE_ALIGN_MODULES: u32 = 1 << 0;
const FLAG_MEMORY_INFO: u32 = 1 << 1;
const FLAG_VIDEO_MODE: u32 = 1 << 2;
/// The a.out kludge: load addresses in the header instead of an ELF.
const FLAG_ADDRESS_FIELDS: u32 = 1 << 16;
const SUPPORTED_REQUIREMENTS: u32 = FLAG_PAGE_ALIGN_MODULES | FLAG_MEMORY_INFO;

/// Boot information flags (spec 3.3).
const INFO_MEMORY: u32 = 1 << 0;
const INFO_CMDLINE: u32 = 1 << 2;
const INFO_MODULES: u32 = 1 << 3;
const INFO_MEMORY_MAP: u32 = 1 << 6;

/// Where the boot information page sits: below the 640 KiB of low memory
/// and clear of page 0, where kvm-unit-tests puts its AP trampoline.
pub const BOOT_INFO_GPA: u64 = 0x9000;
const BOOT_INFO_SIZE: u64 = 0x1000;
/// Offsets in that page: the info structure, the module list, the memory
/// map, then the strings.
const MODULES_OFFSET: u64 = 0x60;
const MEMORY_MAP_OFFSET: u64 = 0x80;
const STRINGS_OFFSET: u64 = 0x100;
/// Low memory as a PC reports it (spec 3.3 `mem_lower`, at most 640 KiB).
const LOW_MEMORY_KIB: u32 = 640;
const HIGH_MEMORY_START: u64 = 1 << 20;
const MEMORY_MAP_AVAILABLE: u32 = 1;
const PAGE: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    #[error("no Multiboot header (magic {HEADER_MAGIC:#x}) in the kernel's first 8 KiB")]
    NoHeader,
    #[error("the Multiboot header's checksum is wrong (magic + flags + checksum = {0:#x}, not 0)")]
    Checksum(u32),
    #[error("the kernel asks for Multiboot features this loader lacks (flags {0:#x}: a video mode or the a.out address fields)")]
    Unsupported(u32),
    #[error("the kernel is not an ELF file")]
    Elf(#[source] goblin::error::Error),
    #[error("segment {index} ({start:#x}, {len:#x} bytes in memory) lies outside the {ram:#x} bytes of RAM or the file")]
    SegmentOutside {
        index: usize,
        start: u64,
        len: u64,
        ram: u64,
    },
    #[error("the kernel's entry point {0:#x} is above 4 GiB: Multiboot enters in 32-bit mode")]
    EntryAbove4G(u64),
    #[error("the kernel has no loadable segment (no PT_LOAD with bytes in the file): it would boot into empty RAM")]
    NoLoadableSegment,
    #[error("the kernel's entry point {0:#x} lies in none of its loaded segments' bytes: it would run empty RAM")]
    EntryOutsideSegments(u64),
    #[error("the module ({len} bytes) does not fit in RAM after the kernel (which ends at {kernel_end:#x})")]
    ModuleTooLarge { len: usize, kernel_end: u64 },
    #[error("the command lines take {0} bytes; the boot information page holds {max}", max = BOOT_INFO_SIZE - STRINGS_OFFSET)]
    CmdlineTooLong(usize),
    #[error("cannot write into guest memory")]
    GuestMemory(#[from] vm_memory::GuestMemoryError),
}

/// What the loader did: where to enter and where the boot info is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loaded {
    pub entry: u32,
    pub boot_info: u32,
    /// The end of the kernel's highest segment in memory.
    pub kernel_end: u64,
}

/// The Multiboot header's flags, once found and checked (spec 3.1).
fn header_flags(image: &[u8]) -> Result<u32, LoaderError> {
    let word = |at: usize| {
        image
            .get(at..at + 4)
            .map(|bytes| u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    };
    let search = image.len().min(HEADER_SEARCH_BYTES);
    let at = (0..search)
        .step_by(4)
        .find(|&at| word(at) == Some(HEADER_MAGIC))
        .ok_or(LoaderError::NoHeader)?;
    let (flags, checksum) = (
        word(at + 4).ok_or(LoaderError::NoHeader)?,
        word(at + 8).ok_or(LoaderError::NoHeader)?,
    );
    let sum = HEADER_MAGIC.wrapping_add(flags).wrapping_add(checksum);
    if sum != 0 {
        return Err(LoaderError::Checksum(sum));
    }
    let unsupported = flags & (0xffff & !SUPPORTED_REQUIREMENTS | FLAG_ADDRESS_FIELDS);
    if unsupported != 0 || flags & FLAG_VIDEO_MODE != 0 {
        return Err(LoaderError::Unsupported(flags));
    }
    Ok(flags)
}

/// Loads `image` (a Multiboot kernel) into `memory` and writes its boot
/// information: `cmdline` is the kernel's command line, `module` the one
/// module it is given (kvm-unit-tests reads its environment from it).
pub fn load(
    memory: &GuestMemory,
    image: &[u8],
    cmdline: &str,
    module: Option<&[u8]>,
) -> Result<Loaded, LoaderError> {
    header_flags(image)?;
    let elf = Elf::parse(image).map_err(LoaderError::Elf)?;
    // Up front: a kernel with nothing to load, or an entry in no loaded
    // byte, would run zeroed RAM until the watchdog.
    let loadable: Vec<(usize, &ProgramHeader)> = elf
        .program_headers
        .iter()
        .enumerate()
        .filter(|(_, segment)| segment.p_type == PT_LOAD && segment.p_filesz > 0)
        .collect();
    if loadable.is_empty() {
        return Err(LoaderError::NoLoadableSegment);
    }
    let entry_loaded = loadable.iter().any(|(_, segment)| {
        (segment.p_paddr..segment.p_paddr.saturating_add(segment.p_filesz)).contains(&elf.entry)
    });
    if !entry_loaded {
        return Err(LoaderError::EntryOutsideSegments(elf.entry));
    }
    let ram = memory.last_addr().0 + 1;
    let mut kernel_end = 0u64;
    for (index, segment) in elf
        .program_headers
        .iter()
        .enumerate()
        .filter(|(_, segment)| segment.p_type == PT_LOAD)
    {
        let outside = LoaderError::SegmentOutside {
            index,
            start: segment.p_paddr,
            len: segment.p_memsz,
            ram,
        };
        let end = segment.p_paddr.checked_add(segment.p_memsz);
        let file_end = segment.p_offset.checked_add(segment.p_filesz);
        let (Some(end), Some(file_end)) = (end, file_end) else {
            return Err(outside);
        };
        if end > ram || segment.p_filesz > segment.p_memsz || file_end > image.len() as u64 {
            return Err(outside);
        }
        let range = usize::try_from(segment.p_offset)
            .ok()
            .zip(usize::try_from(file_end).ok());
        let Some(bytes) = range.and_then(|(start, end)| image.get(start..end)) else {
            return Err(outside);
        };
        memory.write_slice(bytes, GuestAddress(segment.p_paddr))?;
        // The rest of the segment (its .bss) is zero: fresh guest RAM is.
        kernel_end = kernel_end.max(end);
    }
    let entry = u32::try_from(elf.entry).map_err(|_| LoaderError::EntryAbove4G(elf.entry))?;
    let boot_info = write_boot_info(memory, ram, kernel_end, cmdline, module)?;
    Ok(Loaded {
        entry,
        boot_info,
        kernel_end,
    })
}

/// Writes the boot information page (spec 3.3); the module goes on the
/// first page after the kernel.
fn write_boot_info(
    memory: &GuestMemory,
    ram: u64,
    kernel_end: u64,
    cmdline: &str,
    module: Option<&[u8]>,
) -> Result<u32, LoaderError> {
    const MODULE_NAME: &str = "env";
    let strings_len = cmdline.len() + 1 + MODULE_NAME.len() + 1;
    if strings_len as u64 > BOOT_INFO_SIZE - STRINGS_OFFSET {
        return Err(LoaderError::CmdlineTooLong(strings_len));
    }
    let at = |offset: u64| GuestAddress(BOOT_INFO_GPA + offset);
    let gpa32 = |offset: u64| low_u32(BOOT_INFO_GPA + offset);
    let cmdline_offset = STRINGS_OFFSET;
    let name_offset = STRINGS_OFFSET + cmdline.len() as u64 + 1;
    memory.write_slice(cmdline.as_bytes(), at(cmdline_offset))?;
    memory.write_obj(0u8, at(name_offset - 1))?;
    memory.write_slice(MODULE_NAME.as_bytes(), at(name_offset))?;
    memory.write_obj(0u8, at(name_offset + MODULE_NAME.len() as u64))?;

    let mut flags = INFO_MEMORY | INFO_CMDLINE | INFO_MEMORY_MAP;
    let mut modules_count = 0u32;
    if let Some(module) = module {
        let start = kernel_end.div_ceil(PAGE) * PAGE;
        let too_large = LoaderError::ModuleTooLarge {
            len: module.len(),
            kernel_end,
        };
        let end = start.checked_add(module.len() as u64).ok_or(too_large)?;
        if end > ram || end > u64::from(u32::MAX) {
            return Err(LoaderError::ModuleTooLarge {
                len: module.len(),
                kernel_end,
            });
        }
        memory.write_slice(module, GuestAddress(start))?;
        // mod_start, mod_end, string, reserved (spec 3.3).
        let entry = [low_u32(start), low_u32(end), gpa32(name_offset), 0];
        for (index, word) in entry.iter().enumerate() {
            memory.write_obj(*word, at(MODULES_OFFSET + index as u64 * 4))?;
        }
        flags |= INFO_MODULES;
        modules_count = 1;
    }

    // Two available ranges: low memory and everything above 1 MiB. Each
    // entry is its size (20, not counting itself), base, length, type.
    let low = (0u64, u64::from(LOW_MEMORY_KIB) * 1024);
    let high = (HIGH_MEMORY_START, ram - HIGH_MEMORY_START);
    for (index, (base, length)) in [low, high].into_iter().enumerate() {
        let entry = at(MEMORY_MAP_OFFSET + index as u64 * 24);
        memory.write_obj(20u32, entry)?;
        memory.write_obj(base, GuestAddress(entry.0 + 4))?;
        memory.write_obj(length, GuestAddress(entry.0 + 12))?;
        memory.write_obj(MEMORY_MAP_AVAILABLE, GuestAddress(entry.0 + 20))?;
    }

    let mem_upper_kib = u32::try_from((ram - HIGH_MEMORY_START) / 1024).unwrap_or(u32::MAX);
    let info: [(u64, u32); 9] = [
        (0, flags),
        (4, LOW_MEMORY_KIB),
        (8, mem_upper_kib),
        (16, gpa32(cmdline_offset)),
        (20, modules_count),
        (24, gpa32(MODULES_OFFSET)),
        (44, 48),
        (48, gpa32(MEMORY_MAP_OFFSET)),
        (12, 0xffff_ffff), // boot_device: none (its flag is clear)
    ];
    for (offset, value) in info {
        memory.write_obj(value, at(offset))?;
    }
    Ok(low_u32(BOOT_INFO_GPA))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{multiboot_elf32, TINY_KERNEL_GPA};
    use vm_memory::GuestMemoryMmap;

    const RAM: usize = 8 << 20;
    const CODE: [u8; 2] = [0xf4, 0xf4]; // hlt; hlt

    fn ram() -> GuestMemory {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), RAM)]).expect("RAM")
    }

    fn word(memory: &GuestMemory, gpa: u64) -> u32 {
        memory.read_obj(GuestAddress(gpa)).expect("in RAM")
    }

    fn string(memory: &GuestMemory, gpa: u64) -> String {
        let mut bytes = vec![0u8; 64];
        memory
            .read_slice(&mut bytes, GuestAddress(gpa))
            .expect("in RAM");
        let end = bytes.iter().position(|&b| b == 0).expect("terminated");
        String::from_utf8(bytes[..end].to_vec()).expect("ASCII")
    }

    #[test]
    fn an_elf32_kernel_is_loaded_with_its_command_line_module_and_memory() {
        let memory = ram();
        let image = multiboot_elf32(&CODE);
        let loaded =
            load(&memory, &image, "apic testargs", Some(b"TEST_DEVICE=0\n")).expect("loads");
        assert_eq!(u64::from(loaded.entry), u64::from(TINY_KERNEL_GPA) + 96);
        let mut code = [0u8; 2];
        memory
            .read_slice(&mut code, GuestAddress(u64::from(loaded.entry)))
            .expect("in RAM");
        assert_eq!(code, CODE);
        let info = u64::from(loaded.boot_info);
        let flags = word(&memory, info);
        assert_eq!(
            flags,
            INFO_MEMORY | INFO_CMDLINE | INFO_MODULES | INFO_MEMORY_MAP
        );
        assert_eq!(word(&memory, info + 4), 640);
        assert_eq!(
            u64::from(word(&memory, info + 8)),
            (RAM as u64 - (1 << 20)) / 1024
        );
        assert_eq!(
            string(&memory, u64::from(word(&memory, info + 16))),
            "apic testargs"
        );
        assert_eq!(word(&memory, info + 20), 1, "one module");
        let module = u64::from(word(&memory, info + 24));
        let (start, end) = (word(&memory, module), word(&memory, module + 4));
        assert_eq!(start % 4096, 0, "page-aligned");
        assert!(u64::from(start) >= loaded.kernel_end);
        assert_eq!(end - start, 14);
        assert_eq!(string(&memory, u64::from(start)), "TEST_DEVICE=0\n");
        // Two memory-map entries, each 24 bytes with its size word.
        assert_eq!(word(&memory, info + 44), 48);
    }

    #[test]
    fn kernels_without_a_valid_header_or_with_unmet_requirements_are_refused() {
        let memory = ram();
        let mut image = multiboot_elf32(&CODE);
        let header = 52 + 32;
        image[header + 8] ^= 1; // checksum
        assert!(matches!(
            load(&memory, &image, "", None),
            Err(LoaderError::Checksum(_))
        ));
        let mut image = multiboot_elf32(&CODE);
        // Ask for a video mode (flag 2), checksum kept right.
        image[header + 4] = 4;
        let checksum = 0u32.wrapping_sub(HEADER_MAGIC).wrapping_sub(4);
        image[header + 8..header + 12].copy_from_slice(&checksum.to_le_bytes());
        assert!(matches!(
            load(&memory, &image, "", None),
            Err(LoaderError::Unsupported(4))
        ));
        assert!(matches!(
            load(&memory, &CODE, "", None),
            Err(LoaderError::NoHeader)
        ));
    }

    #[test]
    fn a_segment_beyond_ram_or_the_file_is_refused() {
        let memory: GuestMemory =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).expect("RAM");
        let image = multiboot_elf32(&CODE);
        // The image loads at 1 MiB: past the end of this RAM.
        assert!(matches!(
            load(&memory, &image, "", None),
            Err(LoaderError::SegmentOutside { .. })
        ));
        let mut truncated = multiboot_elf32(&CODE);
        truncated.truncate(truncated.len() - 1);
        assert!(matches!(
            load(&ram(), &truncated, "", None),
            Err(LoaderError::SegmentOutside { .. })
        ));
    }

    #[test]
    fn a_kernel_with_nothing_to_load_or_entering_outside_it_is_refused() {
        const PHDR: usize = 52;
        let mut image = multiboot_elf32(&CODE);
        image[PHDR..PHDR + 4].copy_from_slice(&4u32.to_le_bytes()); // PT_NOTE
        assert!(matches!(
            load(&ram(), &image, "", None),
            Err(LoaderError::NoLoadableSegment)
        ));
        let mut image = multiboot_elf32(&CODE);
        image[PHDR + 16..PHDR + 20].copy_from_slice(&0u32.to_le_bytes()); // p_filesz
        assert!(matches!(
            load(&ram(), &image, "", None),
            Err(LoaderError::NoLoadableSegment)
        ));
        let mut image = multiboot_elf32(&CODE);
        let beyond = TINY_KERNEL_GPA + 0x10_0000;
        image[24..28].copy_from_slice(&beyond.to_le_bytes()); // e_entry
        let err = load(&ram(), &image, "", None).expect_err("entry in no segment");
        assert!(
            matches!(err, LoaderError::EntryOutsideSegments(entry) if entry == u64::from(beyond))
        );
        // Nothing was written: the refusal comes before the load.
        let memory = ram();
        let _ = load(&memory, &image, "", None);
        let mut code = [0u8; 2];
        memory
            .read_slice(&mut code, GuestAddress(u64::from(TINY_KERNEL_GPA) + 96))
            .expect("in RAM");
        assert_eq!(code, [0, 0]);
    }

    #[test]
    fn a_command_line_longer_than_the_boot_page_is_refused() {
        let long = "x".repeat(4000);
        let image = multiboot_elf32(&CODE);
        assert!(matches!(
            load(&ram(), &image, &long, None),
            Err(LoaderError::CmdlineTooLong(_))
        ));
    }
}
