//! Writing what dirq produces: checked before the work that produces it,
//! and written atomically (a temporary file beside the target, renamed
//! over it), so a failed write never leaves a truncated file behind. Only
//! a new path or a regular file is ever replaced: a rename over a device,
//! a FIFO or a symbolic link would replace it (as root, `--trace
//! /dev/null` would replace /dev/null), so those are refused.
//! Standard output fails as an ordinary error (a full disk, a file-size
//! limit), never as `print!`'s panic.

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is {what}: dirq writes only a new file or over a regular file, and would replace it", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("cannot write to standard output")]
    Stdout(#[source] std::io::Error),
}

/// Writes `text` to standard output and flushes it. A reader that closed
/// the pipe (`dirq ... | head -1`) never gets here: `main` restores
/// SIGPIPE's default, so such a write ends dirq as it ends `cat`.
pub fn print(text: &str) -> Result<(), OutputError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(OutputError::Stdout)
}

/// The temporary file `path` is written to before the rename.
fn temporary(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// Refuses a `path` that exists and is not a regular file (the link
/// itself, not what it points to: a rename replaces the link).
fn check_replaceable(path: &Path) -> Result<(), OutputError> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if !metadata.is_file() => Err(OutputError::NotRegular {
            path: path.to_path_buf(),
            what: crate::input::describe_file_type(metadata.file_type()),
        }),
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(OutputError::Write {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Creates the temporary file, never through a file or link already there.
fn create_temporary(temporary: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temporary)
}

/// Whether `path` could be written, found out before any work by creating
/// (and removing) its temporary file.
pub fn check_writable(path: &Path) -> Result<(), OutputError> {
    check_replaceable(path)?;
    let probe = temporary(path);
    let fail = |source| OutputError::Write {
        path: path.to_path_buf(),
        source,
    };
    create_temporary(&probe).map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Writes `bytes` to `path` all at once or not at all.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    check_replaceable(path)?;
    let temporary = temporary(path);
    let fail = |source| OutputError::Write {
        path: path.to_path_buf(),
        source,
    };
    let written = create_temporary(&temporary)
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        // Best effort: the error that matters is the write's.
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_the_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("dirq-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("data.json");
        check_writable(&path).expect("writable");
        write_atomic(&path, b"old").expect("first write");
        write_atomic(&path, b"new").expect("second write");
        assert_eq!(std::fs::read(&path).expect("written"), b"new");
        assert_eq!(std::fs::read_dir(&dir).expect("listed").count(), 1);
        assert!(matches!(
            check_writable(&dir),
            Err(OutputError::NotRegular {
                what: "a directory",
                ..
            })
        ));
        let missing = dir.join("no-such-dir").join("x.json");
        assert!(check_writable(&missing).is_err());
        assert!(write_atomic(&missing, b"x").is_err());
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }

    #[test]
    fn a_device_a_fifo_or_a_link_is_never_replaced() {
        let dir = std::env::temp_dir().join(format!("dirq-special-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let fifo = dir.join("fifo.json");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("a path");
        // SAFETY: mkfifo reads one NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let target = dir.join("target.json");
        std::fs::write(&target, b"kept").expect("written");
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&target, &link).expect("linked");
        for (path, what) in [
            (Path::new("/dev/null"), "a character device"),
            (fifo.as_path(), "a FIFO"),
            (link.as_path(), "a symbolic link"),
        ] {
            let err = check_writable(path).expect_err("refused before any work");
            assert!(
                matches!(err, OutputError::NotRegular { what: w, .. } if w == what),
                "{err}"
            );
            let err = write_atomic(path, b"x").expect_err("refused");
            assert!(err.to_string().contains(what), "{err}");
        }
        let file_type = |path: &Path| std::fs::symlink_metadata(path).expect("there").file_type();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&file_type(&fifo)));
        assert!(file_type(&link).is_symlink());
        assert_eq!(std::fs::read(&target).expect("kept"), b"kept");
        // A temporary file planted as a link is not written through either.
        let out = dir.join("out.json");
        std::os::unix::fs::symlink(&target, temporary(&out)).expect("planted");
        assert!(write_atomic(&out, b"x").is_err());
        assert_eq!(std::fs::read(&target).expect("kept"), b"kept");
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
