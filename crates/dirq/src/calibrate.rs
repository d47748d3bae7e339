//! `dirq calibrate` (not built yet).

#[derive(clap::Args)]
pub struct Args {}

pub fn execute(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`dirq calibrate` is not built yet")
}
