//! Naming a guest's instruction addresses: a System.map or /proc/kallsyms
//! copy of the guest (`address type name`), or an ELF file with a symbol
//! table (the guest kernel itself).

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The largest symbol file read: a distribution kernel's System.map is
/// about 8 MiB, its vmlinux with symbols a few hundred.
const MAX_BYTES: u64 = 512 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SymbolsError {
    #[error("cannot read the symbol map {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the symbol map {} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error("the symbol map {} is larger than {} MiB", path.display(), MAX_BYTES >> 20)]
    TooLarge { path: PathBuf },
    #[error(
        "{} names no code symbol: give a System.map, a /proc/kallsyms copy or an ELF file with \
         its symbol table",
        path.display()
    )]
    Empty { path: PathBuf },
    #[error(
        "every address in {} is 0: /proc/kallsyms read without permission hides them; copy it as root",
        path.display()
    )]
    Hidden { path: PathBuf },
}

/// Code symbols by address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolMap {
    symbols: Vec<(u64, String)>,
}

impl SymbolMap {
    pub fn load(path: &Path) -> Result<SymbolMap, SymbolsError> {
        let failed = |source| SymbolsError::Read {
            path: path.to_path_buf(),
            source,
        };
        let metadata = std::fs::metadata(path).map_err(failed)?;
        if !metadata.is_file() {
            return Err(SymbolsError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|file| file.take(MAX_BYTES + 1).read_to_end(&mut bytes))
            .map_err(failed)?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_BYTES {
            return Err(SymbolsError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let map = if bytes.starts_with(b"\x7fELF") {
            SymbolMap::from_elf(&bytes)
        } else {
            SymbolMap::from_map(&String::from_utf8_lossy(&bytes))
        };
        if map.symbols.is_empty() {
            return Err(SymbolsError::Empty {
                path: path.to_path_buf(),
            });
        }
        if map.symbols.iter().all(|(address, _)| *address == 0) {
            return Err(SymbolsError::Hidden {
                path: path.to_path_buf(),
            });
        }
        Ok(map)
    }

    /// `ffffffff81000000 T _stext` lines; text symbols only (t, T, w, W).
    pub fn from_map(text: &str) -> SymbolMap {
        let symbols = text
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                let address = u64::from_str_radix(words.next()?, 16).ok()?;
                let kind = words.next()?;
                let name = words.next()?;
                matches!(kind, "t" | "T" | "w" | "W").then(|| (address, name.to_string()))
            })
            .collect();
        SymbolMap::sorted(symbols)
    }

    /// The function symbols of an ELF file.
    pub fn from_elf(bytes: &[u8]) -> SymbolMap {
        let Ok(elf) = goblin::elf::Elf::parse(bytes) else {
            return SymbolMap::default();
        };
        // Functions, and the untyped labels assembly code defines, in an
        // executable section.
        let in_code = |index: usize| {
            elf.section_headers
                .get(index)
                .is_some_and(|section| section.is_executable())
        };
        let symbols = elf
            .syms
            .iter()
            .filter(|symbol| {
                let code_type =
                    symbol.is_function() || symbol.st_type() == goblin::elf::sym::STT_NOTYPE;
                code_type && symbol.st_value != 0 && in_code(symbol.st_shndx)
            })
            .filter_map(|symbol| {
                let name = elf.strtab.get_at(symbol.st_name)?;
                Some((symbol.st_value, name.to_string()))
            })
            .collect();
        SymbolMap::sorted(symbols)
    }

    fn sorted(mut symbols: Vec<(u64, String)>) -> SymbolMap {
        symbols.sort();
        symbols.dedup_by_key(|(address, _)| *address);
        SymbolMap { symbols }
    }

    /// `function+0x1a` for an address at or after a symbol, within 1 MiB
    /// of it (past the last symbol, an address is no function's).
    pub fn name(&self, address: u64) -> Option<String> {
        let index = self.symbols.partition_point(|(start, _)| *start <= address);
        let (start, name) = self.symbols.get(index.checked_sub(1)?)?;
        let offset = address - start;
        (offset < 1 << 20).then(|| {
            if offset == 0 {
                name.clone()
            } else {
                format!("{name}+{offset:#x}")
            }
        })
    }
}

/// How well a symbol map fits the addresses it was asked to name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolFit {
    pub file: PathBuf,
    pub named: usize,
    pub of: usize,
}

impl SymbolFit {
    /// A map that names under half of the hot spots is likely another
    /// guest's (or kernel's): said, not trusted.
    pub fn warning(&self) -> Option<String> {
        (self.of > 0 && self.named * 2 < self.of).then(|| {
            format!(
                "the symbol map {} names {} of {} hot spots: is it this guest's?",
                self.file.display(),
                self.named,
                self.of
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_map_names_addresses_by_the_function_that_holds_them() {
        let map = SymbolMap::from_map(
            "ffffffff81000000 T _stext\nffffffff81000100 t irq_entry\nffffffff81000200 D data\n\
             ffffffff81000300 T lapic_eoi\nnot a line\n",
        );
        assert_eq!(
            map.name(0xffff_ffff_8100_0100).as_deref(),
            Some("irq_entry")
        );
        assert_eq!(
            map.name(0xffff_ffff_8100_0234).as_deref(),
            Some("irq_entry+0x134"),
            "data is no code"
        );
        assert_eq!(
            map.name(0xffff_ffff_8100_0301).as_deref(),
            Some("lapic_eoi+0x1")
        );
        assert_eq!(map.name(0x1000), None, "before the first symbol");
        assert_eq!(map.name(0xffff_ffff_8200_0000), None, "far past the last");
    }

    #[test]
    fn bad_symbol_files_are_refused_with_their_reason() {
        let dir = std::env::temp_dir().join(format!("dirq-symbols-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let empty = write("empty", "hello\nworld\n");
        let hidden = write(
            "hidden",
            "0000000000000000 T _stext\n0000000000000000 T start\n",
        );
        assert!(matches!(
            SymbolMap::load(&empty),
            Err(SymbolsError::Empty { .. })
        ));
        assert!(matches!(
            SymbolMap::load(&hidden),
            Err(SymbolsError::Hidden { .. })
        ));
        assert!(matches!(
            SymbolMap::load(&dir),
            Err(SymbolsError::NotAFile { .. })
        ));
        assert!(matches!(
            SymbolMap::load(&dir.join("absent")),
            Err(SymbolsError::Read { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_elf_names_its_c_functions_and_its_assembly_labels() {
        let map = SymbolMap::from_elf(crate::abi::GUEST_ELF);
        let entry = map
            .symbols
            .iter()
            .find(|(_, name)| name == "device_irq_x2apic");
        let (address, _) = entry.expect("the guest's assembly IRQ entry");
        assert_eq!(
            map.name(*address + 0x40),
            Some(format!("device_irq_x2apic+{:#x}", 0x40))
        );
        assert!(
            map.symbols.iter().any(|(_, name)| name == "kmain"),
            "a C function"
        );
    }

    #[test]
    fn a_map_naming_few_hot_spots_is_doubted() {
        let fit = |named| SymbolFit {
            file: "m".into(),
            named,
            of: 10,
        };
        assert!(fit(4).warning().is_some());
        assert!(fit(5).warning().is_none());
    }
}
