//! One word per concept on the command line: `dirq studies` runs the
//! software-only studies and still answers to its old name, `designs`,
//! without showing it (a design is what `dirq sim` models); `dirq --help`
//! says what each word means.

use std::process::Command;

fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(args)
        .output()
        .expect("dirq runs");
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

#[test]
fn studies_is_the_subcommand_and_designs_its_hidden_alias() {
    let studies = help(&["studies", "--help"]);
    assert!(studies.contains("--only"), "{studies}");
    assert!(!studies.contains("design"), "{studies}");
    assert_eq!(help(&["designs", "--help"]), studies);
    let top = help(&["--help"]);
    assert!(top.contains("studies") && !top.contains("alias"), "{top}");
}

#[test]
fn the_top_help_defines_design_and_study() {
    let top = help(&["--help"]);
    assert!(
        top.contains("a design is a way of delivering interrupts that the simulator models"),
        "{top}"
    );
    assert!(
        top.contains("a study is a software-only change a userspace VMM can make"),
        "{top}"
    );
}
