//! Helpers for tests that need /dev/kvm.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static RAN: AtomicU64 = AtomicU64::new(0);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static SUMMARY_AT_EXIT: Once = Once::new();

/// Set to 1 to make a KVM test fail, not skip, when /dev/kvm cannot be opened.
pub const REQUIRE_KVM: &str = "DIRQ_REQUIRE_KVM";

/// Whether a KVM test can run. Without /dev/kvm it says so loudly on
/// stderr. Either way it is counted: when the test binary exits it prints
/// how many of its KVM tests ran and how many were skipped (so
/// `cargo test` itself says it), and it appends "ran <name>" or
/// "skipped <name>" to the file named by `DIRQ_KVM_TEST_LOG`, if set, so CI
/// can total them.
///
/// With `DIRQ_REQUIRE_KVM=1` (CI sets it where /dev/kvm exists) a test that
/// cannot open /dev/kvm fails instead of skipping, so a broken device node
/// or a permission change cannot turn the KVM suite into silent passes.
pub fn require_kvm(name: &str) -> bool {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    let available = opened.is_ok();
    if let Err(err) = &opened {
        assert!(
            std::env::var_os(REQUIRE_KVM).is_none_or(|value| value != "1"),
            "KVM test {name} cannot run: /dev/kvm: {err}, and {REQUIRE_KVM}=1 forbids skipping it"
        );
        eprintln!("KVM TEST SKIPPED: {name}: /dev/kvm is missing or not accessible");
    }
    count(available);
    if let Some(path) = std::env::var_os("DIRQ_KVM_TEST_LOG") {
        let line = format!("{} {name}\n", if available { "ran" } else { "skipped" });
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut log| log.write_all(line.as_bytes()));
        if let Err(err) = appended {
            eprintln!(
                "cannot append to DIRQ_KVM_TEST_LOG {}: {err}",
                path.to_string_lossy()
            );
        }
    }
    available
}

fn count(available: bool) {
    let counter = if available { &RAN } else { &SKIPPED };
    counter.fetch_add(1, Ordering::Relaxed);
    SUMMARY_AT_EXIT.call_once(|| {
        // SAFETY: `print_summary` is a plain `extern "C" fn` with no
        // arguments that only reads atomics and writes to stdout, which
        // stays usable in exit handlers.
        if unsafe { libc::atexit(print_summary) } != 0 {
            eprintln!("cannot register the KVM test summary; counts follow per test");
        }
    });
}

/// Runs when the test binary exits, after the test harness's own summary.
extern "C" fn print_summary() {
    let ran = RAN.load(Ordering::Relaxed);
    let skipped = SKIPPED.load(Ordering::Relaxed);
    let binary = std::env::args()
        .next()
        .and_then(|path| {
            let name = std::path::Path::new(&path)
                .file_name()?
                .to_str()?
                .to_string();
            // Cargo names test binaries `<target>-<hash>`.
            Some(
                name.rsplit_once('-')
                    .map_or(name.clone(), |(target, _)| target.to_string()),
            )
        })
        .unwrap_or_default();
    let line = if skipped > 0 {
        format!("KVM tests ({binary}): {ran} ran, {skipped} SKIPPED: /dev/kvm is missing\n")
    } else {
        format!("KVM tests ({binary}): {ran} ran, 0 skipped\n")
    };
    let mut stdout = std::io::stdout().lock();
    // Nothing is left to report a failed write to.
    let _ = stdout
        .write_all(line.as_bytes())
        .and_then(|()| stdout.flush());
}

/// Where `multiboot_elf32` loads its image and the code's offset in it.
pub const TINY_KERNEL_GPA: u32 = 0x10_0000;
const TINY_KERNEL_CODE_OFFSET: u32 = 52 + 32 + 12;

/// A minimal Multiboot v1 kernel, built from bytes: an ELF32 header, one
/// load segment (the whole file, at `TINY_KERNEL_GPA`), the Multiboot
/// header (flags 0), then `code` (32-bit protected-mode instructions),
/// which is the entry point. For tests that must not depend on a
/// toolchain or on kvm-unit-tests.
pub fn multiboot_elf32(code: &[u8]) -> Vec<u8> {
    const MAGIC: u32 = 0x1bad_b002;
    let file_len =
        TINY_KERNEL_CODE_OFFSET + u32::try_from(code.len()).expect("a test kernel is a few bytes");
    let mut image = Vec::new();
    // ELF header: ELFCLASS32, little-endian, version 1; ET_EXEC, EM_386.
    image.extend_from_slice(&[0x7f, b'E', b'L', b'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    image.extend_from_slice(&2u16.to_le_bytes());
    image.extend_from_slice(&3u16.to_le_bytes());
    image.extend_from_slice(&1u32.to_le_bytes());
    image.extend_from_slice(&(TINY_KERNEL_GPA + TINY_KERNEL_CODE_OFFSET).to_le_bytes());
    image.extend_from_slice(&52u32.to_le_bytes()); // e_phoff
    image.extend_from_slice(&0u32.to_le_bytes()); // e_shoff
    image.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    for half in [52u16, 32, 1, 40, 0, 0] {
        // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
        image.extend_from_slice(&half.to_le_bytes());
    }
    // PT_LOAD: offset 0, vaddr = paddr, the whole file, R+X.
    for word in [
        1,
        0,
        TINY_KERNEL_GPA,
        TINY_KERNEL_GPA,
        file_len,
        file_len,
        5,
        0x1000,
    ] {
        image.extend_from_slice(&word.to_le_bytes());
    }
    for word in [MAGIC, 0, 0u32.wrapping_sub(MAGIC)] {
        image.extend_from_slice(&word.to_le_bytes());
    }
    image.extend_from_slice(code);
    image
}
