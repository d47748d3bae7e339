//! `dirq run` (not built yet).

#[derive(clap::Args)]
pub struct Args {}

pub fn execute(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`dirq run` is not built yet")
}
