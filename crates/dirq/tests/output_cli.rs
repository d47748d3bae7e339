//! What dirq does when its standard output fails: a reader that closed the
//! pipe ends it quietly, as it ends `cat`; a device that refuses the write
//! (a full disk, a file-size limit) is an error message and exit status
//! 1, never a panic.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// `dirq sim --list` prints a line per built-in scenario without KVM: enough
/// output to meet a closed pipe or a full device.
const LISTING: [&str; 2] = ["sim", "--list"];

#[test]
fn a_closed_pipe_ends_dirq_quietly_without_a_panic() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(LISTING)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dirq starts");
    // Close the reading end before dirq writes, as `| head -0` would.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr piped")
        .read_to_string(&mut stderr)
        .expect("stderr readable");
    let status = child.wait().expect("dirq ends");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        status.success() || status.signal() == Some(libc::SIGPIPE),
        "{status:?}: {stderr}"
    );
}

#[test]
fn a_full_device_is_an_error_message_and_exit_1() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full exists on Linux");
    let output = Command::new(env!("CARGO_BIN_EXE_dirq"))
        .args(LISTING)
        .stdout(full)
        .output()
        .expect("dirq runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_file_size_limit_is_an_error_message_and_exit_1() {
    use std::os::unix::process::CommandExt;
    let path = std::env::temp_dir().join(format!("dirq-fsize-{}.txt", std::process::id()));
    let file = std::fs::File::create(&path).expect("a temporary file");
    let mut command = Command::new(env!("CARGO_BIN_EXE_dirq"));
    command.args(LISTING).stdout(file);
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            // Less than the listing: its write passes the limit (`ulimit -f 1`).
            let limit = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let output = command.output().expect("dirq runs");
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{:?}: {stderr}",
        output.status
    );
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
