//! Writing what dirq produces: checked before the work that produces it,
//! and written atomically (a temporary file beside the target, renamed
//! over it), so a failed write never leaves a truncated file behind.
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
    #[error("{} is a directory, not a file", path.display())]
    IsDirectory { path: PathBuf },
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

/// Whether `path` could be written, found out before any work by creating
/// (and removing) its temporary file.
pub fn check_writable(path: &Path) -> Result<(), OutputError> {
    if path.is_dir() {
        return Err(OutputError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    let probe = temporary(path);
    let fail = |source| OutputError::Write {
        path: path.to_path_buf(),
        source,
    };
    std::fs::File::create(&probe).map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Writes `bytes` to `path` all at once or not at all.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let temporary = temporary(path);
    let fail = |source| OutputError::Write {
        path: path.to_path_buf(),
        source,
    };
    let written = std::fs::File::create(&temporary)
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
            Err(OutputError::IsDirectory { .. })
        ));
        let missing = dir.join("no-such-dir").join("x.json");
        assert!(check_writable(&missing).is_err());
        assert!(write_atomic(&missing, b"x").is_err());
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
