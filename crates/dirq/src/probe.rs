//! `dirq probe`: this host's KVM capabilities, how the guest executes on
//! it, and the platform's floors (exit costs, self-IPI, cross-vCPU IPI).

use std::str::FromStr;

use anyhow::Context;
use dirq_vmm::config::GuestExec;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object (the floors as userspace_exit_ns, kernel_exit_ns,
    /// self_ipi_p50_ns, ipi_busy_p50_ns, ipi_halted_p50_ns, each a median of
    /// its runs, with their spread, the host's load, the noise verdict and
    /// lapic_in_service: held or not-held).
    #[arg(long)]
    json: bool,
    /// Also run irq-latency on three paths emulated and natively, side by side
    /// (kvm_pvm hosts with native mode only).
    #[arg(long)]
    emulation: bool,
    /// How the guest executes: native or emulated (kvm_pvm; default: native where offered).
    #[arg(long, value_parser = GuestExec::from_str)]
    guest_exec: Option<GuestExec>,
}

pub fn execute(args: Args) -> anyhow::Result<()> {
    let started = time::OffsetDateTime::now_utc();
    let report = dirq_vmm::probe::probe(args.guest_exec).context("probing KVM failed")?;
    let emulation = args
        .emulation
        .then(dirq_vmm::probe::emulation_table)
        .transpose()
        .context("the emulated/native comparison failed")?;
    if args.json {
        // The warning the text output ends with, where a reader of JSON sees it.
        if let Some(warning) = report.host_noise.warning() {
            diag!("dirq probe: {warning}");
        }
        let guest_exec = Some(report.guest_exec.to_string());
        let json = serde_json::json!({ "probe": report, "emulation": emulation });
        crate::common::meta::print_json(&json, started, guest_exec)?;
    } else {
        let mut text = report.to_string();
        if let Some(in_service) = report.lapic_in_service {
            text += &format!("in-kernel LAPIC, a delivered interrupt: {in_service}\n");
        }
        if let Some(table) = emulation {
            text += &format!("\nwhat kvm_pvm's emulation costs, per path:\n{table}");
        }
        crate::output::print(&text)?;
    }
    Ok(())
}
