//! What `dirq sim` prints of a run a reader must not have to dig out of
//! JSON: a server's QoS check says its p95, its target and whether the
//! closed loop met it.

use std::process::Command;

#[test]
fn a_servers_qos_line_says_its_p95_target_and_verdict() {
    let dir = std::env::temp_dir().join(format!("dirq-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let scenario = dir.join("qos.toml");
    // 200 connections back to back keep every response over 1 ms.
    let runs = [1, 10].map(|target_ms| {
        format!(
            "[[runs]]\nworkload = \"memcached\"\ndesigns = [\"did\"]\nclients = 200\n\
             qos_p95_ms = {target_ms}\n"
        )
    });
    std::fs::write(
        &scenario,
        format!(
            "name = \"qos\"\ndescription = \"qos\"\nduration_ms = 20\n{}",
            runs.concat()
        ),
    )
    .expect("the scenario is written");
    let output = Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(["sim", "--threads", "1"])
        .arg(&scenario)
        .output()
        .expect("dirq runs");
    std::fs::remove_dir_all(&dir).ok();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let qos: Vec<&str> = text.lines().filter(|l| l.contains("QoS:")).collect();
    assert_eq!(qos.len(), 2, "{text}");
    assert!(
        qos[0].ends_with("against 1 ms: missed (the closed loop cannot offer less)"),
        "{text}"
    );
    assert!(qos[1].ends_with("against 10 ms: met"), "{text}");
    assert!(
        !text.contains("\"p95_ns\""),
        "the check is not printed twice: {text}"
    );
}
