//! Builds the freestanding guest test kernel in `guest/` with the C
//! compiler the `cc` crate detects (gcc, or `$CC`), so the VMM can embed it
//! (`include_bytes!` of `$OUT_DIR/dirq-guest.elf`). `cc` finds and
//! configures the compiler; the link, a static ELF at fixed addresses with
//! `guest/linker.ld`, is ours.

use std::path::{Path, PathBuf};

/// Flags that keep the guest to instructions this KVM backend runs natively:
/// no SSE/AVX (no xsave state), no red zone (interrupts share the stack).
const CFLAGS: &[&str] = &[
    "-ffreestanding",
    "-nostdlib",
    "-fno-pic",
    "-fno-pie",
    "-mno-red-zone",
    "-mgeneral-regs-only",
    "-fno-stack-protector",
    "-fno-asynchronous-unwind-tables",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-std=gnu11",
];

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let guest_dir = manifest_dir.join("../../guest");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed={}", guest_dir.display());

    let sources = guest_sources(&guest_dir);
    for source in &sources {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    let elf = out_dir.join("dirq-guest.elf");
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .cargo_warnings(false)
        .get_compiler();
    let status = compiler
        .to_command()
        .args(CFLAGS)
        .arg("-I")
        .arg(guest_dir.join("include"))
        .args(["-static", "-no-pie", "-Wl,--build-id=none", "-Wl,-T"])
        .arg(guest_dir.join("linker.ld"))
        .arg("-o")
        .arg(&elf)
        .args(&sources)
        .status()
        .unwrap_or_else(|err| {
            panic!(
                "cannot run the C compiler {} to build the guest kernel (install gcc): {err}",
                compiler.path().display()
            )
        });
    assert!(
        status.success(),
        "{} failed to build the guest kernel in {}",
        compiler.path().display(),
        guest_dir.display()
    );
}

/// Every `.c` and `.S` file of the guest, plus headers for change tracking.
fn guest_sources(guest_dir: &Path) -> Vec<PathBuf> {
    let mut sources = Vec::new();
    for dir in [guest_dir.to_path_buf(), guest_dir.join("include")] {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()));
        for entry in entries {
            let path = entry.expect("readable directory entry").path();
            match path.extension().and_then(|ext| ext.to_str()) {
                Some("c") | Some("S") => sources.push(path),
                Some("h") | Some("ld") => println!("cargo:rerun-if-changed={}", path.display()),
                _ => {}
            }
        }
    }
    sources.sort();
    sources
}
