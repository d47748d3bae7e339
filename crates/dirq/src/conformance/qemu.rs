//! The reference column: the same kvm-unit-tests binaries booted by QEMU
//! (`-accel kvm`) on the same host, as kvm-unit-tests' own runner boots
//! them, with KVM's LAPIC and KVM's IOAPIC (kernel) or QEMU's (split).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dirq_vmm::multiboot::KernelEnd;
use serde::Serialize;
use wait_timeout::ChildExt;

/// QEMU's `-machine kernel_irqchip=` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum QemuIrqchip {
    /// KVM's LAPICs, QEMU's IOAPIC.
    Split,
    /// KVM's LAPICs, IOAPIC and PIC.
    Kernel,
}

impl QemuIrqchip {
    fn machine(self) -> &'static str {
        match self {
            QemuIrqchip::Split => "pc,kernel_irqchip=split",
            QemuIrqchip::Kernel => "pc,kernel_irqchip=on",
        }
    }
}

impl std::fmt::Display for QemuIrqchip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QemuIrqchip::Split => "QEMU split",
            QemuIrqchip::Kernel => "QEMU kernel",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    #[error("cannot start {qemu}")]
    Spawn {
        qemu: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("waiting for {qemu}")]
    Wait {
        qemu: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One boot's console and end.
pub struct QemuOutcome {
    pub console: String,
    pub end: KernelEnd,
    pub elapsed_s: f64,
}

/// One QEMU boot of `kernel`.
pub struct QemuBoot<'a> {
    pub qemu: &'a Path,
    pub kernel: &'a Path,
    pub append: &'a str,
    pub initrd: &'a Path,
    pub irqchip: QemuIrqchip,
    pub vcpus: u32,
    pub timeout: Duration,
}

impl QemuBoot<'_> {
    /// Boots it; a run past the timeout is killed (the child this started,
    /// by its own handle) and reported as timed out.
    pub fn run(&self) -> Result<QemuOutcome, QemuError> {
        let started = Instant::now();
        let mut child = Command::new(self.qemu)
            .args(["-nodefaults", "-display", "none", "-accel", "kvm"])
            .args(["-machine", self.irqchip.machine()])
            .args(["-device", "pc-testdev"])
            .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x4"])
            .args(["-serial", "stdio", "-smp", &self.vcpus.to_string()])
            .arg("-kernel")
            .arg(self.kernel)
            .arg("-initrd")
            .arg(self.initrd)
            .args(["-append", self.append])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| QemuError::Spawn {
                qemu: self.qemu.to_path_buf(),
                source,
            })?;
        // The console is small (kilobytes): readers on their own threads
        // keep QEMU from blocking on a full pipe while this waits.
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        let wait_error = |source| QemuError::Wait {
            qemu: self.qemu.to_path_buf(),
            source,
        };
        let status = child.wait_timeout(self.timeout).map_err(wait_error)?;
        if status.is_none() {
            // Already exited, if the kill fails: wait() below reaps it.
            let _ = child.kill();
            child.wait().map_err(wait_error)?;
        }
        let collect = |reader: Option<std::thread::JoinHandle<String>>| {
            reader
                .and_then(|reader| reader.join().ok())
                .unwrap_or_default()
        };
        let console = collect(stdout);
        let errors = collect(stderr);
        let end = match status {
            None => KernelEnd::TimedOut,
            Some(status) => match status.code().and_then(|code| u32::try_from(code).ok()) {
                // isa-debug-exit: QEMU exits with (value << 1) | 1. QEMU's
                // own errors exit 1 too, but before the guest printed.
                Some(code) if code & 1 == 1 && !console.trim().is_empty() => {
                    KernelEnd::Exited(code)
                }
                _ => KernelEnd::Failed(format!("QEMU {status}: {}", errors.trim())),
            },
        };
        Ok(QemuOutcome {
            console,
            end,
            elapsed_s: started.elapsed().as_secs_f64(),
        })
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        // A read error ends the console where it stopped.
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Boots a shell script standing in for QEMU (it ignores QEMU's
    /// arguments), with a watchdog of `timeout_ms`.
    fn fake_qemu(script: &str, timeout_ms: u64) -> QemuOutcome {
        let dir = std::env::temp_dir().join(format!("dirq-fake-qemu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let qemu = dir.join(format!("qemu-{}", script.len()));
        std::fs::write(&qemu, format!("#!/bin/sh\n{script}\n")).expect("script");
        std::fs::set_permissions(&qemu, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("executable");
        let outcome = QemuBoot {
            qemu: &qemu,
            kernel: Path::new("x86/apic.flat"),
            append: "",
            initrd: Path::new("env"),
            irqchip: QemuIrqchip::Kernel,
            vcpus: 1,
            timeout: Duration::from_millis(timeout_ms),
        }
        .run()
        .expect("the script starts");
        let _ = std::fs::remove_file(&qemu);
        outcome
    }

    #[test]
    fn the_exit_status_console_and_watchdog_are_qemus() {
        let passed = fake_qemu("echo 'PASS: self ipi'; exit 3", 30_000);
        assert_eq!(passed.end, KernelEnd::Exited(3));
        assert_eq!(passed.console, "PASS: self ipi\n");
        // Status 1 with no console: QEMU's own error, not the guest's exit.
        let refused = fake_qemu("echo 'no KVM' >&2; exit 1", 30_000);
        assert_eq!(
            refused.end,
            KernelEnd::Failed("QEMU exit status: 1: no KVM".into())
        );
        let hung = fake_qemu("exec sleep 30", 200);
        assert_eq!(hung.end, KernelEnd::TimedOut);
    }
}
