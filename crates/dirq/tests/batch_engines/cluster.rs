//! A one-node Slurm cluster with accounting, started from Debian's packages
//! in a temporary directory, all on 127.0.0.1: munged with its own key and
//! socket, MariaDB on an empty data directory, slurmdbd, slurmctld and
//! slurmd. Dropping it cancels its jobs and stops every daemon it started,
//! by the pid it recorded, also when a test fails.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

/// Every program the cluster runs, from Debian's slurm-wlm, slurmdbd, munge
/// and mariadb-server.
const PROGRAMS: [&str; 11] = [
    "mungekey",
    "munged",
    "mariadbd",
    "slurmdbd",
    "slurmctld",
    "slurmd",
    "sbatch",
    "sacct",
    "scontrol",
    "scancel",
    "squeue",
];

/// Set to 1 (CI does, once it installed the packages) to make the Slurm
/// test fail, not skip, where a program is missing.
const REQUIRE_SLURM: &str = "DIRQ_REQUIRE_SLURM";

/// How long a daemon may take to come up, on a loaded 2-CPU host.
const START_BOUND: Duration = Duration::from_secs(90);
/// How long a stopped daemon, or a cancelled job, may take to go.
const STOP_BOUND: Duration = Duration::from_secs(15);
/// How long one Slurm client command may take.
const CLIENT_BOUND: &str = "60";
const POLL: Duration = Duration::from_millis(200);

/// The node's name; slurmd is told it, so the host's name does not matter.
const NODE: &str = "dirqnode";

/// Whether the cluster can start here. Where a program is missing it says
/// which, loudly, on the test's real stderr (past the harness's capture),
/// and skips; with `DIRQ_REQUIRE_SLURM=1` it fails instead.
pub fn available(test: &str) -> bool {
    let missing: Vec<&str> = PROGRAMS
        .into_iter()
        .filter(|program| find_program(program).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "{} not installed (Debian: apt-get install slurm-wlm slurmdbd munge mariadb-server; .ci/run does)",
        missing.join(", ")
    );
    assert!(
        std::env::var_os(REQUIRE_SLURM).is_none_or(|value| value != "1"),
        "Slurm test {test} cannot run: {why}, and {REQUIRE_SLURM}=1 forbids skipping it"
    );
    // Written to the file descriptor itself: the harness captures eprintln!.
    let _ = writeln!(std::io::stderr(), "SLURM TEST SKIPPED: {test}: {why}");
    false
}

/// `program` on PATH, or in the sbin directories a non-root PATH may lack.
fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

fn program(name: &str) -> PathBuf {
    find_program(name).unwrap_or_else(|| panic!("{name} is installed"))
}

struct Daemon {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// SIGTERM, then SIGKILL if it is still there after `STOP_BOUND` (slurmd
    /// ignores SIGTERM while it retries registering with a controller).
    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid fits pid_t");
        // SAFETY: kill(2) on the pid of our own child, which has not been
        // reaped yet (try_wait above), so the pid cannot have been reused.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        if !matches!(self.child.wait_timeout(STOP_BOUND), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    daemons: RefCell<Vec<Daemon>>,
}

/// Four ports free on 127.0.0.1 now, all different: bound together, then
/// released for the daemons.
fn free_ports() -> [u16; 4] {
    let listeners: Vec<TcpListener> = (0..4)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|listener| listener.local_addr().expect("bound").port())
        .collect();
    ports.try_into().expect("four ports")
}

/// slurmctld runs only where its configured host is this host's short name.
fn short_hostname() -> String {
    let name = fs::read_to_string("/proc/sys/kernel/hostname").expect("the host's name");
    name.trim()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string()
}

impl Cluster {
    /// Starts the daemons one after the other, each once the one it needs
    /// answers; gives the cluster with its node idle.
    pub fn start() -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("dirq-slurm-")
            .tempdir()
            .expect("a temporary directory");
        // munged refuses a socket in a directory others cannot search.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .expect("the directory made searchable");
        let path = dir.path().to_path_buf();
        let [mysql_port, dbd_port, ctld_port, slurmd_port] = free_ports();
        let socket = path.join("munge.sock");
        for sub in ["db", "state", "spool"] {
            fs::create_dir(path.join(sub)).expect("a cluster directory");
        }
        let conf = path.join("slurm.conf");
        fs::write(
            &conf,
            slurm_conf(&path, &socket, ctld_port, slurmd_port, dbd_port),
        )
        .expect("slurm.conf written");
        let dbd_conf = path.join("slurmdbd.conf");
        fs::write(
            &dbd_conf,
            slurmdbd_conf(&path, &socket, dbd_port, mysql_port),
        )
        .expect("slurmdbd.conf written");
        // slurmdbd refuses a configuration others can read: it may hold a password.
        fs::set_permissions(&dbd_conf, fs::Permissions::from_mode(0o600))
            .expect("slurmdbd.conf made private");
        let key = path.join("munge.key");
        let created = Command::new(program("mungekey"))
            .arg("--create")
            .arg(format!("--keyfile={}", key.display()))
            .output()
            .expect("mungekey runs");
        assert!(created.status.success(), "mungekey: {created:?}");

        let cluster = Cluster {
            dir,
            conf,
            daemons: RefCell::new(Vec::new()),
        };
        cluster.spawn(
            "munged",
            &[
                "--foreground".into(),
                format!("--key-file={}", key.display()),
                format!("--socket={}", socket.display()),
                format!("--pid-file={}", path.join("munged.pid").display()),
                format!("--seed-file={}", path.join("munged.seed").display()),
            ],
        );
        cluster.wait_for("munged's socket", START_BOUND, || socket.exists());
        // No privilege tables: a throwaway database, on 127.0.0.1 only, for
        // the test's lifetime; small InnoDB files to start fast.
        cluster.spawn(
            "mariadbd",
            &[
                "--no-defaults".into(),
                format!("--datadir={}", path.join("db").display()),
                "--user=root".into(),
                "--skip-grant-tables".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--port={mysql_port}"),
                format!("--socket={}", path.join("mysql.sock").display()),
                format!("--pid-file={}", path.join("mariadbd.pid").display()),
                "--innodb-buffer-pool-size=32M".into(),
                "--innodb-log-file-size=8M".into(),
                "--innodb-flush-log-at-trx-commit=0".into(),
            ],
        );
        cluster.wait_for("MariaDB's port", START_BOUND, || listening(mysql_port));
        cluster.spawn("slurmdbd", &["-D".into()]);
        cluster.wait_for("slurmdbd's port", START_BOUND, || listening(dbd_port));
        cluster.spawn("slurmctld", &["-D".into()]);
        cluster.spawn("slurmd", &["-D".into(), "-N".into(), NODE.into()]);
        cluster.wait_for("the node idle", START_BOUND, || {
            let node = cluster.client("scontrol", &["show", "node", "-o", NODE]);
            String::from_utf8_lossy(&node.stdout).contains("State=IDLE")
        });
        cluster
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A command run against this cluster (`SLURM_CONF` set).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }

    /// A Slurm client command, its output, within `CLIENT_BOUND` seconds (a
    /// client retries for long when the controller does not answer).
    pub fn client(&self, name: &str, args: &[&str]) -> Output {
        self.command("timeout")
            .args(["--kill-after=5", CLIENT_BOUND])
            .arg(program(name))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|err| panic!("{name} runs: {err}"))
    }

    /// Polls `done` until it holds; past `bound`, or when a daemon has
    /// died, panics with what the daemons logged.
    pub fn wait_for(&self, what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        loop {
            if done() {
                return;
            }
            let dead = self.dead_daemons();
            assert!(
                dead.is_empty() && start.elapsed() < bound,
                "waited {:.0?} for {what}; {}; {}",
                start.elapsed(),
                if dead.is_empty() {
                    "every daemon runs".to_string()
                } else {
                    format!("{} exited", dead.join(", "))
                },
                self.logs()
            );
            std::thread::sleep(POLL);
        }
    }

    fn spawn(&self, name: &'static str, args: &[String]) {
        let log = self.dir().join(format!("{name}.log"));
        let output = File::create(&log).expect("a daemon log");
        let child = self
            .command(program(name))
            .args(args)
            .stdin(Stdio::null())
            .stdout(output.try_clone().expect("the log again"))
            .stderr(output)
            .spawn()
            .unwrap_or_else(|err| panic!("{name} starts: {err}"));
        self.daemons.borrow_mut().push(Daemon { name, child, log });
    }

    fn dead_daemons(&self) -> Vec<&'static str> {
        self.daemons
            .borrow_mut()
            .iter_mut()
            .filter_map(|daemon| {
                (!matches!(daemon.child.try_wait(), Ok(None))).then_some(daemon.name)
            })
            .collect()
    }

    /// The last lines each daemon logged, for a failure's message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for daemon in self.daemons.borrow().iter() {
            let log = fs::read_to_string(&daemon.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(8)..].join("\n  ");
            let _ = write!(text, "\n{} log:\n  {tail}", daemon.name);
        }
        text
    }

    /// Cancels every job, and waits (bounded) until none is left: slurmd
    /// leaves running jobs alone when it stops.
    fn cancel_jobs(&self) {
        let cancelled = self.client("scancel", &["--me"]);
        if !cancelled.status.success() {
            return;
        }
        let start = Instant::now();
        while start.elapsed() < STOP_BOUND {
            let queue = self.client("squeue", &["--me", "--noheader"]);
            if !queue.status.success() || queue.stdout.is_empty() {
                return;
            }
            std::thread::sleep(POLL);
        }
    }
}

fn listening(port: u16) -> bool {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Without a controller no job can have started, or be cancelled.
        let controller_started = self
            .daemons
            .get_mut()
            .iter()
            .any(|daemon| daemon.name == "slurmctld");
        if controller_started && !self.dead_daemons().contains(&"slurmctld") {
            self.cancel_jobs();
        }
        for daemon in self.daemons.get_mut().iter_mut().rev() {
            daemon.stop();
        }
    }
}

/// The node declares 16 CPUs whatever the host has (`config_overrides`), so
/// jobs asking for several CPUs each run side by side on a small host.
fn slurm_conf(dir: &Path, munge: &Path, ctld_port: u16, slurmd_port: u16, dbd_port: u16) -> String {
    let dir = dir.display();
    let munge = munge.display();
    let host = short_hostname();
    format!(
        "ClusterName=dirq
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge}
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
KillWait=5
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStoragePass={munge}
JobAcctGatherType=jobacct_gather/none
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs=16 State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"
    )
}

fn slurmdbd_conf(dir: &Path, munge: &Path, dbd_port: u16, mysql_port: u16) -> String {
    let dir = dir.display();
    let munge = munge.display();
    format!(
        "AuthType=auth/munge
AuthInfo=socket={munge}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={dir}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={mysql_port}
StorageUser=root
StorageLoc=slurm_acct_db
"
    )
}
