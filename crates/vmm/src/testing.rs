//! Helpers for tests that need /dev/kvm.

use std::io::Write;

/// Whether a KVM test can run. Without /dev/kvm it says so loudly on
/// stderr; either way it appends "ran <name>" or "skipped <name>" to the
/// file named by `DIRQ_KVM_TEST_LOG`, if set, so CI can count skips.
pub fn require_kvm(name: &str) -> bool {
    let available = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if !available {
        eprintln!("KVM TEST SKIPPED: {name}: /dev/kvm is missing or not accessible");
    }
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
