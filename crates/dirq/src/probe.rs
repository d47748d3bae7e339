//! `dirq probe`: this host's KVM capabilities, how the guest executes on
//! it, and the platform's floors (exit costs, self-IPI, cross-vCPU IPI).

use anyhow::Context;
use dirq_vmm::config::GuestExec;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object (the floors as userspace_exit_ns, kernel_exit_ns,
    /// self_ipi_p50_ns, ipi_busy_p50_ns, ipi_halted_p50_ns).
    #[arg(long)]
    json: bool,
    /// How the guest executes: native or emulated (kvm_pvm; default: native where offered).
    #[arg(long, value_parser = crate::run::parse::<GuestExec>)]
    guest_exec: Option<GuestExec>,
}

pub fn execute(args: Args) -> anyhow::Result<()> {
    let report = dirq_vmm::probe::probe(args.guest_exec).context("probing KVM failed")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}
