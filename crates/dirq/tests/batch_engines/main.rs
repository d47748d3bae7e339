//! docs/scale.md's batch-engine recipes, checked. The Slurm array job runs
//! for real, its script and commands taken from the doc, on a one-node
//! cluster started here; one shard is made to fail, is seen failed in
//! `sacct`, refused by `merge` while missing and rerun alone, and the merged
//! result equals one `dirq sim --all --json`. The Kubernetes Indexed Job
//! stays on paper: its manifest is checked against the Job schema and
//! against the Slurm task's command, shard by shard.

mod cluster;

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster::Cluster;
use k8s_openapi::api::batch::v1::Job;
use serde_json::Value;
use wait_timeout::ChildExt;

const DOC: &str = include_str!("../../../../docs/scale.md");

/// The test's sweep: `dirq sim --all` in this many shards, of which this one
/// is made to fail once.
const SHARDS: u32 = 4;
const FAILING_SHARD: u32 = 3;

/// How long the sweep's jobs, and the one run beside them, may take: a
/// whole sweep took 90 s of wall time on the 2-CPU development host at load 7.
const JOB_BOUND: Duration = Duration::from_secs(20 * 60);

/// The job states Slurm leaves a job in once it ended.
const ENDED: [&str; 9] = [
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
];

/// The code block of docs/scale.md tagged `name`: its info string's second
/// word (```` ```sh slurm-submit ````).
fn doc_block(name: &str) -> String {
    use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for event in Parser::new(DOC) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info)))
                if info.split_whitespace().nth(1) == Some(name) =>
            {
                current = Some(String::new());
            }
            Event::Text(text) => {
                if let Some(block) = &mut current {
                    block.push_str(&text);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(current.take()),
            _ => {}
        }
    }
    assert_eq!(blocks.len(), 1, "docs/scale.md has one block tagged {name}");
    blocks.remove(0)
}

fn dirq() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_dirq"))
}

/// PATH with `dir` first.
fn path_with(dir: &Path) -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&path));
    std::env::join_paths(dirs).expect("a PATH")
}

/// PATH with this build's dirq first, as the doc asks of the submitting shell.
fn path_with_dirq() -> std::ffi::OsString {
    path_with(dirq().parent().expect("a directory"))
}

/// A child killed if the test ends before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The doc's block `name`, then `after`, as a bash command (`set -euo
/// pipefail`) run in `work` with `vars` set, the way the doc says to.
fn block_command(
    cluster: &Cluster,
    work: &Path,
    name: &str,
    after: &str,
    vars: &[(&str, &str)],
) -> Command {
    let mut command = cluster.command("timeout");
    command
        .args(["60", "bash", "-euo", "pipefail", "-c"])
        .arg(format!("{}\n{after}", doc_block(name)))
        .current_dir(work)
        .env("PATH", path_with_dirq())
        .envs(vars.iter().copied())
        .stdin(Stdio::null());
    command
}

/// Runs the doc's block `name`; gives the values of `outputs` it left set.
fn run_block(
    cluster: &Cluster,
    work: &Path,
    name: &str,
    vars: &[(&str, &str)],
    outputs: &[&str],
) -> Vec<String> {
    let print: Vec<String> = outputs.iter().map(|var| format!("\"${var}\"")).collect();
    let after = format!("printf '%s\\n' {}", print.join(" "));
    let output = block_command(cluster, work, name, &after, vars)
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the doc's {name} block: {output:?}{}",
        cluster.logs()
    );
    let values: Vec<String> = stdout.lines().map(str::to_string).collect();
    assert_eq!(values.len(), outputs.len(), "{name}: {stdout}");
    values
}

/// `JobState` and `Reason` of each record `scontrol` holds for job `id`
/// (one per array task).
fn job_states(cluster: &Cluster, id: &str) -> Vec<(String, String)> {
    let output = cluster.client("scontrol", &["show", "job", "-o", id]);
    assert!(
        output.status.success(),
        "scontrol show job {id}: {output:?}"
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|word| word.strip_prefix(key))
                    .unwrap_or_default()
                    .to_string()
            };
            (field("JobState="), field("Reason="))
        })
        .collect()
}

fn wait_until_ended(cluster: &Cluster, id: &str) {
    cluster.wait_for(&format!("job {id} to end"), JOB_BOUND, || {
        job_states(cluster, id)
            .iter()
            .all(|(state, _)| ENDED.contains(&state.as_str()))
    });
}

/// The rows (JobID, State, ExitCode) of the doc's `sacct` command for the
/// array's tasks, once accounting holds every task ended (it lags the
/// controller by a few seconds).
fn accounted_tasks(cluster: &Cluster, work: &Path, array: &str) -> Vec<[String; 3]> {
    let mut rows = Vec::new();
    let mut table = String::new();
    cluster.wait_for("sacct to hold every task", JOB_BOUND, || {
        let output = block_command(cluster, work, "slurm-watch", "", &[("array", array)])
            .output()
            .expect("sacct runs");
        table = String::from_utf8_lossy(&output.stdout).to_string();
        rows = table
            .lines()
            .skip(2)
            .filter_map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                (words.len() >= 3 && words[0].starts_with(&format!("{array}_")))
                    .then(|| [words[0], words[1], words[2]].map(str::to_string))
            })
            .collect();
        rows.len() == SHARDS as usize && rows.iter().all(|row| ENDED.contains(&row[1].as_str()))
    });
    eprintln!("{table}");
    rows.sort();
    rows
}

/// A `--json` document without its wall-clock and provenance fields: the
/// metadata `merge` writes its own, and each run's `wall_s`.
fn without_wall_clock(mut document: Value) -> Value {
    let object = document.as_object_mut().expect("a JSON object");
    for field in ["started", "ended", "command_line", "host"] {
        assert!(object.remove(field).is_some(), "no {field}");
    }
    let results = object["results"].as_array_mut().expect("results");
    assert!(!results.is_empty(), "no results");
    for result in results {
        for run in result["runs"].as_array_mut().expect("runs") {
            let run = run.as_object_mut().expect("a run");
            assert!(run.remove("wall_s").is_some(), "a run without wall_s");
        }
    }
    document
}

/// The first line where two documents' pretty texts differ, for a
/// failure's message.
fn first_difference(left: &Value, right: &Value) -> String {
    let left = serde_json::to_string_pretty(left).expect("JSON");
    let right = serde_json::to_string_pretty(right).expect("JSON");
    left.lines()
        .zip(right.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map_or_else(
            || "one is a prefix of the other".to_string(),
            |(line, (a, b))| format!("line {}: {a} / {b}", line + 1),
        )
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

#[test]
fn slurm_array_job_of_the_doc_merges_to_one_run() {
    if !cluster::available("slurm_array_job_of_the_doc_merges_to_one_run") {
        return;
    }
    let started = Instant::now();
    let cluster = Cluster::start();
    eprintln!("cluster up after {:.1?}", started.elapsed());
    let work = cluster.dir().join("sweep");
    fs::create_dir(&work).expect("the sweep's directory");

    // The one run to compare with, beside the jobs: they share the CPUs either way.
    let single_path = cluster.dir().join("single.json");
    let mut single = KillOnDrop(
        Command::new(dirq())
            .args(["sim", "--all", "--json", "--seed", "1", "--threads", "2"])
            .stdout(File::create(&single_path).expect("single.json"))
            .stderr(Stdio::null())
            .spawn()
            .expect("dirq runs"),
    );

    fs::write(work.join("sweep.sbatch"), doc_block("sweep.sbatch")).expect("sweep.sbatch");
    // The failing shard cannot write its part: a directory stands in its way.
    let blocker = work.join(format!("parts/part-{FAILING_SHARD}.json.tmp"));
    fs::create_dir_all(&blocker).expect("the blocker");
    let shards = SHARDS.to_string();
    let submitted = run_block(
        &cluster,
        &work,
        "slurm-submit",
        &[("N", &shards)],
        &["array", "merge"],
    );
    let [array, merge] = [&submitted[0], &submitted[1]];
    wait_until_ended(&cluster, array);
    eprintln!("array ended after {:.1?}", started.elapsed());

    // What a failed shard looks like: in sacct, in its log, to the merge job.
    let tasks = accounted_tasks(&cluster, &work, array);
    let expected: Vec<[String; 3]> = (1..=SHARDS)
        .map(|task| {
            let (state, exit) = if task == FAILING_SHARD {
                ("FAILED", "1:0")
            } else {
                ("COMPLETED", "0:0")
            };
            [format!("{array}_{task}"), state.into(), exit.into()]
        })
        .collect();
    assert_eq!(tasks, expected);
    let failed_log = fs::read_to_string(work.join(format!("logs/{array}_{FAILING_SHARD}.log")))
        .expect("the failed task's log");
    assert!(failed_log.contains("Is a directory"), "{failed_log}");
    // The controller marks the dependency at its next scheduling pass.
    cluster.wait_for("the merge job to be left waiting", JOB_BOUND, || {
        let states = job_states(&cluster, merge);
        assert_eq!(states.len(), 1, "{states:?}");
        assert_eq!(states[0].0, "PENDING", "{states:?}");
        states[0].1 == "DependencyNeverSatisfied"
    });
    eprintln!("merge job left waiting after {:.1?}", started.elapsed());

    // A partial set of parts is refused, and nothing is written.
    let mut parts: Vec<PathBuf> = fs::read_dir(work.join("parts"))
        .expect("parts")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    parts.sort();
    assert_eq!(parts.len(), (SHARDS - 1) as usize, "{parts:?}");
    let refused = Command::new(dirq())
        .args(["sim", "merge"])
        .args(&parts)
        .output()
        .expect("dirq runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("shards missing: {FAILING_SHARD} of {SHARDS}")),
        "{stderr}"
    );
    assert!(refused.stdout.is_empty());

    // Rerun only the failed shard, then the merge, as the doc says.
    fs::remove_dir(&blocker).expect("the blocker removed");
    let failing = FAILING_SHARD.to_string();
    let rerun = run_block(
        &cluster,
        &work,
        "slurm-rerun",
        &[
            ("N", &shards),
            ("I", &failing),
            ("array", array),
            ("merge", merge),
        ],
        &["rerun", "merge"],
    );
    let merge = &rerun[1];
    wait_until_ended(&cluster, merge);
    assert_eq!(job_states(&cluster, merge)[0].0, "COMPLETED");
    eprintln!("merge ended after {:.1?}", started.elapsed());

    let finished = single.0.wait_timeout(JOB_BOUND).expect("dirq waited for");
    assert!(
        finished.is_some_and(|status| status.success()),
        "dirq sim --all --json: {finished:?}"
    );
    let merged = without_wall_clock(read_json(&work.join("all.json")));
    let single = without_wall_clock(read_json(&single_path));
    assert!(
        merged == single,
        "all.json differs from one run: {}",
        first_difference(&merged, &single)
    );
    eprintln!("done after {:.1?}", started.elapsed());
}

/// A stand-in for dirq that writes its arguments, one a line, to the file
/// `$DIRQ_ARGV`.
fn argv_recorder(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    fs::create_dir(&bin).expect("bin");
    let recorder = bin.join("dirq");
    fs::write(
        &recorder,
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$DIRQ_ARGV\"\n",
    )
    .expect("written");
    fs::set_permissions(&recorder, fs::Permissions::from_mode(0o755)).expect("executable");
    bin
}

/// What one task did: dirq's arguments and the files it left where parts go.
#[derive(Debug, PartialEq)]
struct Task {
    argv: Vec<String>,
    parts: Vec<String>,
}

/// Runs `command` in a fresh directory of `dir` with `bin` first on PATH;
/// `parts` is where, under that directory, the task writes its part.
fn run_task(dir: &Path, bin: &Path, parts: &str, mut command: Command) -> Task {
    let root = dir.join("task");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(root.join(parts)).expect("the task's directory");
    let argv_file = dir.join("argv");
    let output = command
        .current_dir(&root)
        .env("PATH", path_with(bin))
        .env("DIRQ_ARGV", &argv_file)
        .env_remove("SHARDS")
        .output()
        .expect("the task runs");
    assert!(output.status.success(), "{command:?}: {output:?}");
    let argv = fs::read_to_string(&argv_file).expect("dirq ran");
    let mut parts: Vec<String> = fs::read_dir(root.join(parts))
        .expect("parts")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into()
        })
        .collect();
    parts.sort();
    Task {
        argv: argv.lines().map(str::to_string).collect(),
        parts,
    }
}

#[test]
fn kubernetes_indexed_job_runs_the_slurm_task_for_each_index() {
    let manifest: Value =
        serde_yaml_ng::from_str(&doc_block("sweep.yaml")).expect("the manifest is YAML");
    let job: Job = serde_json::from_value(manifest.clone()).expect("a batch/v1 Job");
    // A field the schema does not know (a typo) is dropped on the way back.
    assert_eq!(
        serde_json::to_value(&job).expect("JSON"),
        manifest,
        "every field of the manifest is the Job schema's"
    );
    let spec = job.spec.expect("a spec");
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    let completions = spec.completions.expect("completions");
    assert_eq!(
        spec.parallelism,
        Some(completions),
        "one pod per shard at once"
    );
    let pod = spec.template.spec.expect("a pod spec");
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let [container] = pod.containers.as_slice() else {
        panic!("one container: {:?}", pod.containers);
    };
    let mounts = container.volume_mounts.as_deref().unwrap_or_default();
    let [mount] = mounts else {
        panic!("one volume mount: {mounts:?}");
    };
    let volumes = pod.volumes.as_deref().unwrap_or_default();
    assert!(
        volumes
            .iter()
            .any(|volume| volume.name == mount.name && volume.persistent_volume_claim.is_some()),
        "the parts are on a claimed volume, shared by the pods: {volumes:?}"
    );
    let cpus = &container
        .resources
        .as_ref()
        .and_then(|resources| resources.requests.as_ref())
        .and_then(|requests| requests.get("cpu"))
        .expect("a CPU request")
        .0;
    let command = container.command.as_deref().unwrap_or_default();
    let args = container.args.as_deref().unwrap_or_default();
    assert!(!command.is_empty(), "a command");

    let dir = tempfile::tempdir().expect("a temporary directory");
    let bin = argv_recorder(dir.path());
    let sbatch = dir.path().join("sweep.sbatch");
    fs::write(&sbatch, doc_block("sweep.sbatch")).expect("sweep.sbatch");
    // The pod's volume, mounted where the manifest says, is a directory here.
    let mount_path = mount.mount_path.trim_end_matches('/');
    let mounted = dir.path().join("task/parts");
    let pod_args: Vec<String> = args
        .iter()
        .map(|arg| arg.replace(mount_path, &mounted.to_string_lossy()))
        .collect();
    for index in 0..completions {
        let task_id = index + 1;
        let mut pod_command = Command::new(&command[0]);
        pod_command
            .args(&command[1..])
            .args(&pod_args)
            .env("JOB_COMPLETION_INDEX", index.to_string());
        let pod_task = run_task(dir.path(), &bin, "parts", pod_command);
        let mut slurm_command = Command::new("bash");
        slurm_command
            .arg(&sbatch)
            .env("SLURM_ARRAY_TASK_ID", task_id.to_string())
            .env("SLURM_ARRAY_TASK_COUNT", completions.to_string())
            .env("SLURM_CPUS_PER_TASK", cpus);
        let slurm_task = run_task(dir.path(), &bin, "parts", slurm_command);
        assert_eq!(pod_task, slurm_task, "index {index}");
        let shard = slurm_task
            .argv
            .iter()
            .skip_while(|arg| *arg != "--shard")
            .nth(1);
        assert_eq!(shard, Some(&format!("{task_id}/{completions}")));
        assert_eq!(slurm_task.parts, [format!("part-{task_id}.json")]);
    }
}
