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

/// dirq with `args`, its standard output and error in files under a
/// file-size limit of `limit` bytes (`ulimit -f`): its exit status and
/// what standard error kept.
fn under_file_size_limit(args: &[&str], limit: u64) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let dir = std::env::temp_dir();
    let name = |what: &str| dir.join(format!("dirq-fsize-{}-{limit}.{what}", std::process::id()));
    let (out, err) = (name("out"), name("err"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_dirq"));
    command
        .args(args)
        .stdout(std::fs::File::create(&out).expect("a temporary file"))
        .stderr(std::fs::File::create(&err).expect("a temporary file"));
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let status = command.status().expect("dirq runs");
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&err);
    (status.code(), stderr)
}

#[test]
fn a_file_size_limit_is_an_error_message_and_exit_1() {
    // Less than the listing: its write passes the limit (`ulimit -f 1`).
    let (status, stderr) = under_file_size_limit(&LISTING, 1024);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn an_error_that_standard_error_cannot_take_still_exits_1() {
    // `ulimit -f 0` with both outputs in files: the listing fails, and so
    // does the message saying so; the status still says it.
    let (status, stderr) = under_file_size_limit(&LISTING, 0);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}
