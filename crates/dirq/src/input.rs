//! Reading the files dirq is given, the one way every input is read:
//! opened without blocking (a FIFO with no writer would hold `open` for
//! ever), refused unless it is a regular file, and read only up to the
//! limit of its kind before anything parses it (`/dev/zero` or a sparse
//! file of gigabytes would otherwise be read until memory runs out).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What a file is read as; each kind has its own size limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// A simulation scenario (TOML); the built-in ones are under 3 KiB.
    Scenario,
    /// A cost profile (TOML); the built-in ones are under 9 KiB.
    Profile,
    /// A Multiboot kernel for `dirq run --kernel`; kvm-unit-tests' are
    /// under 1 MiB.
    Kernel,
    /// The Multiboot module (`--initrd`); kvm-unit-tests' environment is
    /// a few lines.
    Initrd,
    /// A part written by `dirq sim --shard`; every built-in scenario
    /// together prints about 1.3 MiB.
    ShardPart,
}

const MIB: u64 = 1 << 20;

impl InputKind {
    /// The most bytes a file of this kind may hold: far above any honest
    /// file of the kind, far below what would exhaust memory or time.
    pub fn limit(self) -> u64 {
        match self {
            InputKind::Scenario | InputKind::Profile => MIB,
            InputKind::Kernel | InputKind::Initrd | InputKind::ShardPart => 64 * MIB,
        }
    }
}

impl fmt::Display for InputKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InputKind::Scenario => "scenario",
            InputKind::Profile => "cost profile",
            InputKind::Kernel => "kernel",
            InputKind::Initrd => "initrd",
            InputKind::ShardPart => "shard part",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot open {kind} {}", path.display())]
    Open {
        kind: InputKind,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{kind} {} is {what}, not a regular file", path.display())]
    NotRegular {
        kind: InputKind,
        path: PathBuf,
        what: &'static str,
    },
    #[error("{kind} {} holds {size} bytes or more; a {kind} may hold at most {} bytes", path.display(), kind.limit())]
    TooLarge {
        kind: InputKind,
        path: PathBuf,
        size: u64,
    },
    #[error("cannot read {kind} {}", path.display())]
    Read {
        kind: InputKind,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{kind} {} is not UTF-8 text", path.display())]
    NotText { kind: InputKind, path: PathBuf },
}

/// What a file that is not a regular one is, in words.
pub(crate) fn describe_file_type(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Opens `path` without blocking and makes sure it is a regular file.
fn open_regular(path: &Path, kind: InputKind) -> Result<File, InputError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|source| InputError::Open {
            kind,
            path: path.to_path_buf(),
            source,
        })?;
    let metadata = file.metadata().map_err(|source| InputError::Read {
        kind,
        path: path.to_path_buf(),
        source,
    })?;
    if !metadata.is_file() {
        return Err(InputError::NotRegular {
            kind,
            path: path.to_path_buf(),
            what: describe_file_type(metadata.file_type()),
        });
    }
    if metadata.len() > kind.limit() {
        return Err(InputError::TooLarge {
            kind,
            path: path.to_path_buf(),
            size: metadata.len(),
        });
    }
    Ok(file)
}

/// The bytes of the regular file at `path`, at most `kind`'s limit.
pub fn read(path: &Path, kind: InputKind) -> Result<Vec<u8>, InputError> {
    let file = open_regular(path, kind)?;
    let limit = kind.limit();
    let mut bytes = Vec::new();
    // One byte past the limit tells a file that grew since it was checked.
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Read {
            kind,
            path: path.to_path_buf(),
            source,
        })?;
    let size = bytes.len() as u64;
    if size > limit {
        return Err(InputError::TooLarge {
            kind,
            path: path.to_path_buf(),
            size,
        });
    }
    Ok(bytes)
}

/// The text of the regular file at `path`, at most `kind`'s limit.
pub fn read_text(path: &Path, kind: InputKind) -> Result<String, InputError> {
    String::from_utf8(read(path, kind)?).map_err(|_| InputError::NotText {
        kind,
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dirq-input-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn a_regular_file_within_its_limit_is_read_whole() {
        let dir = scratch("regular");
        let path = dir.join("scenario.toml");
        std::fs::write(&path, "name = \"x\"\n").expect("written");
        assert_eq!(
            read_text(&path, InputKind::Scenario).expect("read"),
            "name = \"x\"\n"
        );
        std::fs::write(&path, [0xff, 0xfe]).expect("written");
        assert!(matches!(
            read_text(&path, InputKind::Scenario),
            Err(InputError::NotText { .. })
        ));
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }

    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_at_once() {
        let dir = scratch("special");
        let fifo = dir.join("fifo.toml");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("a path");
        // SAFETY: mkfifo reads one NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let started = Instant::now();
        let err = read(&fifo, InputKind::Scenario).expect_err("a FIFO");
        assert!(started.elapsed() < Duration::from_secs(5), "blocked");
        assert_eq!(
            err.to_string(),
            format!("scenario {} is a FIFO, not a regular file", fifo.display())
        );
        let err = read(Path::new("/dev/zero"), InputKind::Profile).expect_err("a device");
        assert_eq!(
            err.to_string(),
            "cost profile /dev/zero is a character device, not a regular file"
        );
        let err = read(&dir, InputKind::ShardPart).expect_err("a directory");
        assert!(err
            .to_string()
            .ends_with("is a directory, not a regular file"));
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }

    #[test]
    fn a_file_past_its_kinds_limit_is_refused_before_it_is_read() {
        let dir = scratch("large");
        let path = dir.join("kernel.elf");
        let file = File::create(&path).expect("created");
        // Sparse: refused from its size, not after reading gigabytes.
        file.set_len(3 << 30).expect("sized");
        let started = Instant::now();
        let err = read(&path, InputKind::Kernel).expect_err("too large");
        assert!(started.elapsed() < Duration::from_secs(5), "read whole");
        assert!(
            err.to_string().contains(
                "holds 3221225472 bytes or more; a kernel may hold at most 67108864 bytes"
            ),
            "{err}"
        );
        file.set_len(InputKind::Profile.limit() + 1).expect("sized");
        assert!(matches!(
            read(&path, InputKind::Profile),
            Err(InputError::TooLarge { .. })
        ));
        file.set_len(InputKind::Profile.limit()).expect("sized");
        assert_eq!(
            read(&path, InputKind::Profile).expect("at the limit").len() as u64,
            InputKind::Profile.limit()
        );
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
