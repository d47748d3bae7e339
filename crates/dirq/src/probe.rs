//! `dirq probe`: this host's KVM capabilities and the cost of one exit.

use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object (with userspace_exit_ns and kernel_exit_ns).
    #[arg(long)]
    json: bool,
}

pub fn execute(args: Args) -> anyhow::Result<()> {
    let report = dirq_vmm::probe::probe().context("probing KVM failed")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}
