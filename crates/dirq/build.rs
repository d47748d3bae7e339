//! Records the git commit dirq is built from (`DIRQ_SOURCE_COMMIT`), for
//! the metadata of every JSON output; "unknown" outside a git checkout.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout)
        .ok()
        .map(|text| text.trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=DIRQ_SOURCE_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // A new commit moves HEAD or the branch it names.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for reference in std::iter::once("HEAD".to_string()).chain(branch) {
        if let Some(path) = git(&["rev-parse", "--git-path", &reference]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
