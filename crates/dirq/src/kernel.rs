//! `dirq run --kernel FILE`: boot a Multiboot kernel that is not dirq's
//! own on a minimal PC (`dirq_vmm::multiboot`) and print how it ended and
//! what it cost in exits.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use dirq_vmm::config::{HaltMode, Irqchip, Pin};
use dirq_vmm::multiboot::{self, KernelConfig, KernelEnd, KernelOutcome};
use dirq_vmm::report::text_table;

use crate::input::InputKind;

/// A --kernel run's watchdog when --timeout is not given.
pub const DEFAULT_TIMEOUT_S: f64 = 60.0;
/// kvm-unit-tests' convention: `exit(0)` writes 0, QEMU exits with 1.
pub const PASS_STATUS: u32 = 1;

/// What `dirq run --kernel` boots, as the command line gave it.
#[derive(Clone, Debug)]
pub struct KernelRun {
    pub kernel: PathBuf,
    pub cmdline: String,
    pub initrd: Option<PathBuf>,
    pub irqchip: Irqchip,
    pub halt: HaltMode,
    pub vcpus: u32,
    pub ram_mib: Option<u32>,
    pub timeout_s: Option<f64>,
    pub pin: Pin,
}

impl KernelRun {
    /// Reads the files and checks the timeout.
    pub fn config(&self) -> anyhow::Result<KernelConfig> {
        let read = |path: &PathBuf, kind| crate::input::read(path, kind);
        let timeout_s = self.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
        if !(0.001..=3600.0).contains(&timeout_s) {
            anyhow::bail!("--timeout must be between 0.001 and 3600 seconds, got {timeout_s}");
        }
        Ok(KernelConfig {
            kernel: read(&self.kernel, InputKind::Kernel)?,
            cmdline: multiboot_cmdline(&self.kernel, &self.cmdline),
            module: self
                .initrd
                .as_ref()
                .map(|path| read(path, InputKind::Initrd))
                .transpose()?,
            irqchip: self.irqchip,
            halt: self.halt,
            vcpus: self.vcpus,
            ram_mib: self.ram_mib.unwrap_or(multiboot::DEFAULT_RAM_MIB),
            timeout: Duration::from_secs_f64(timeout_s),
            pin: self.pin,
        })
    }

    /// Boots it once.
    pub fn boot(&self, echo_console: bool) -> anyhow::Result<KernelOutcome> {
        let config = self.config()?;
        multiboot::run(&config, echo_console)
            .with_context(|| format!("cannot boot {}", self.kernel.display()))
    }
}

/// The Multiboot command line: the kernel's path, then `--append`'s
/// words, as GRUB and QEMU's `-kernel` hand it over. kvm-unit-tests takes
/// its first word as argv[0]: without the path, vmexit.flat would drop
/// the first test it is asked for.
fn multiboot_cmdline(kernel: &std::path::Path, append: &str) -> String {
    let path = kernel.display();
    if append.is_empty() {
        path.to_string()
    } else {
        format!("{path} {append}")
    }
}

pub fn execute(run: &KernelRun, echo_console: bool, json: bool) -> anyhow::Result<()> {
    let started = time::OffsetDateTime::now_utc();
    let outcome = run.boot(echo_console)?;
    if json {
        crate::common::meta::print_json(&outcome, started, None)?;
    } else {
        let console = if echo_console {
            String::new()
        } else {
            outcome.console.clone()
        };
        crate::output::print(&format!("{console}{}", summary(run, &outcome)))?;
    }
    match outcome.end {
        KernelEnd::Exited(PASS_STATUS) => Ok(()),
        KernelEnd::Exited(status) => anyhow::bail!("the kernel exited with status {status}"),
        KernelEnd::TimedOut => anyhow::bail!("the kernel did not exit before the watchdog"),
        KernelEnd::Failed(why) => anyhow::bail!("the kernel's run failed: {why}"),
    }
}

/// How a run ended, in a few words.
pub fn describe_end(end: &KernelEnd) -> String {
    match end {
        KernelEnd::Exited(status) => format!("exit status {status}"),
        KernelEnd::TimedOut => "timed out".into(),
        KernelEnd::Failed(why) => format!("failed: {why}"),
    }
}

/// The run's end, its exits and what the open bus answered.
fn summary(run: &KernelRun, outcome: &KernelOutcome) -> String {
    let exits = &outcome.exits;
    let mut text = format!(
        "\n{} ({} irqchip, {} vCPU): {} after {:.2} s; {} exits, {} to the VMM\n",
        run.kernel.display(),
        run.irqchip,
        run.vcpus,
        describe_end(&outcome.end),
        outcome.elapsed_s,
        exits.total,
        exits.userspace
    );
    let mut table = text_table(&["exit", "count"]);
    for (reason, count) in &exits.userspace_by_reason {
        table.add_row(vec![format!("to VMM: {reason}"), count.to_string()]);
    }
    for (category, count) in &exits.by_category {
        table.add_row(vec![category.to_string(), count.to_string()]);
    }
    text += &format!("{table}\n");
    if !outcome.unclaimed.is_empty() {
        let accesses: Vec<String> = outcome
            .unclaimed
            .iter()
            .map(|(access, count)| format!("{access} x{count}"))
            .collect();
        text += &format!(
            "unclaimed accesses (open bus: reads all-ones, writes dropped, MSRs #GP): {}\n",
            accesses.join(", ")
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_starts_with_the_kernels_path_as_argv0() {
        let kernel = std::path::Path::new("x86/vmexit.flat");
        assert_eq!(
            multiboot_cmdline(kernel, "cpuid ipi"),
            "x86/vmexit.flat cpuid ipi"
        );
        assert_eq!(multiboot_cmdline(kernel, ""), "x86/vmexit.flat");
    }
}
