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
