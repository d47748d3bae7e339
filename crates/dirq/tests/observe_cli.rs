//! `dirq observe` from the command line: a separate process watching a VM
//! it did not start, checked against what no one here wrote: dirq's own
//! accounting of the same run, the guest's symbol map, and a foreign VMM
//! (Debian's QEMU) running a kernel whose loops are counted.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;

use dirq_vmm::observe::symbols::SymbolMap;
use serde_json::Value;

fn dirq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dirq"))
}

fn run(args: &[&str]) -> Output {
    dirq().args(args).output().expect("dirq runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// One watched VM at a time: two would slow each other on a small host.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn a_process_that_is_not_a_vmm_is_refused_with_status_3() {
    let output = run(&[
        "observe",
        "--pid",
        &std::process::id().to_string(),
        "--duration",
        "1",
    ]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("holds no KVM VM"),
        "{}",
        stderr(&output)
    );
    let gone = run(&["observe", "--pid", "4194303", "--duration", "1"]);
    assert_eq!(gone.status.code(), Some(3), "{}", stderr(&gone));
    assert!(
        stderr(&gone).contains("no process 4194303"),
        "{}",
        stderr(&gone)
    );
}

#[test]
fn bad_arguments_and_input_files_are_refused_with_status_2() {
    let bad_vm = run(&["observe", "--vm", "12"]);
    assert_eq!(bad_vm.status.code(), Some(2));
    assert!(
        stderr(&bad_vm).contains("<pid>-<fd>"),
        "{}",
        stderr(&bad_vm)
    );
    let dir = std::env::temp_dir().join(format!("dirq-observe-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage");
    std::fs::write(&garbage, "not symbols\n").unwrap();
    let symbols = run(&[
        "observe",
        "--symbols",
        garbage.to_str().unwrap(),
        "--duration",
        "1",
    ]);
    assert_eq!(symbols.status.code(), Some(2), "{}", stderr(&symbols));
    assert!(
        stderr(&symbols).contains("names no code symbol"),
        "{}",
        stderr(&symbols)
    );
    let replay = run(&["observe", "--replay", garbage.to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(2), "{}", stderr(&replay));
    assert!(
        stderr(&replay).contains("not a `dirq observe --record` file"),
        "{}",
        stderr(&replay)
    );
    let directory = run(&["observe", "--replay", dir.to_str().unwrap()]);
    assert_eq!(directory.status.code(), Some(2));
    assert!(
        stderr(&directory).contains("not a regular file"),
        "{}",
        stderr(&directory)
    );
    let probe = run(&[
        "observe",
        "--probe",
        garbage.to_str().unwrap(),
        "--duration",
        "1",
    ]);
    assert_eq!(probe.status.code(), Some(2), "{}", stderr(&probe));
    let short = run(&["observe", "--duration", "0"]);
    assert_eq!(short.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Watches the VMM `child` with `dirq observe --json` until it ends; the
/// observation, or `None` (said loudly) where this host does not let a
/// process trace KVM.
fn observe(child: &Child, extra: &[&str]) -> Option<Value> {
    let pid = child.id().to_string();
    let mut args = vec![
        "observe",
        "--pid",
        &pid,
        "--wait",
        "30",
        "--duration",
        "600",
        "--json",
        "--no-probe",
    ];
    args.extend_from_slice(extra);
    let output = run(&args);
    match output.status.code() {
        Some(0) => Some(serde_json::from_slice(&output.stdout).expect("one JSON object")),
        Some(4 | 5) => {
            eprintln!(
                "OBSERVE TEST SKIPPED: this host does not let dirq trace KVM: {}",
                stderr(&output)
            );
            None
        }
        _ => panic!("dirq observe failed: {}", stderr(&output)),
    }
}

/// A `dirq run` and an observation of it from outside.
fn run_watched(bench: &[&str]) -> Option<(Value, Value)> {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let child = dirq()
        .arg("run")
        .args(bench)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dirq run starts");
    let record = std::env::temp_dir().join(format!(
        "dirq-observe-record-{}-{}.json",
        std::process::id(),
        bench[0]
    ));
    let observed = observe(&child, &["--record", record.to_str().unwrap()]);
    let output = child.wait_with_output().expect("dirq run ends");
    if let Some(observed) = &observed {
        // The record reads back as what was printed.
        let replayed = run(&["observe", "--replay", record.to_str().unwrap(), "--json"]);
        assert!(replayed.status.success(), "{}", stderr(&replayed));
        let replayed: Value = serde_json::from_slice(&replayed.stdout).expect("replayed JSON");
        assert_eq!(replayed["vms"], observed["vms"]);
        std::fs::remove_file(&record).unwrap();
    }
    assert!(
        output.status.success(),
        "dirq run {bench:?}: {}",
        stderr(&output)
    );
    let run: Value = serde_json::from_slice(&output.stdout).expect("the run's JSON");
    Some((run, observed?))
}

fn number(value: &Value) -> f64 {
    value.as_f64().unwrap_or(0.0)
}

fn within(observed: f64, truth: f64, share: f64) -> bool {
    (observed - truth).abs() <= share * truth.abs()
}

/// The watched VM's exits by dirq's one naming (VMX reason).
fn observed_categories(vm: &Value) -> std::collections::BTreeMap<String, f64> {
    let mut categories = std::collections::BTreeMap::new();
    for row in vm["exit_table"].as_array().expect("an exit table") {
        let category = row["category"].as_str().unwrap_or("none").to_string();
        *categories.entry(category).or_insert(0.0) += number(&row["samples"]);
    }
    categories
}

/// The exits by reason the observer saw equal the run's own accounting
/// within 1% (the observer watches the whole VM, the run its measured
/// window: what lies outside it must stay under 1%).
fn assert_exits_match(bench: &str, run: &Value, vm: &Value) {
    let truth = number(&run["exits"]["total"]);
    let seen = number(&vm["exits"]);
    assert!(
        within(seen, truth, 0.01),
        "{bench}: observed {seen} exits, the run counted {truth}"
    );
    let categories = observed_categories(vm);
    for (category, count) in run["exits"]["by_category"].as_object().expect("categories") {
        let count = number(count);
        if count >= 1_000.0 {
            let seen = categories.get(category).copied().unwrap_or(0.0);
            assert!(
                within(seen, count, 0.01),
                "{bench}: {category} observed {seen}, run {count}"
            );
        }
    }
}

fn vm_of(observed: &Value) -> &Value {
    let vms = observed["vms"].as_array().expect("vms");
    assert_eq!(vms.len(), 1, "one VM watched");
    &vms[0]
}

/// EOIs of the device's vector: the interrupts the guest handled.
fn device_eois(vm: &Value) -> f64 {
    vm["interrupts"]
        .as_array()
        .expect("interrupts")
        .iter()
        .map(|row| number(&row["eois"]))
        .fold(0.0, f64::max)
}

/// The observer's top hot spot, checked against the guest's own symbol
/// map: its name is the function the map puts that address in.
fn top_hot_spot(vm: &Value) -> (u64, String, String, Vec<String>) {
    let spot = &vm["hot_spots"][0];
    let rip = spot["rip"].as_u64().expect("a RIP");
    let symbol = vm["symbols"][rip.to_string()]
        .as_str()
        .unwrap_or_else(|| {
            panic!(
                "hot spot {rip:#x} unnamed: {} {}",
                vm["symbols"], vm["symbol_fit"]
            )
        })
        .to_string();
    let map = SymbolMap::from_elf(dirq_vmm::abi::GUEST_ELF);
    assert_eq!(
        map.name(rip).as_deref(),
        Some(symbol.as_str()),
        "named as the guest's map names it"
    );
    let instruction = spot["instruction"].as_str().unwrap_or("-").to_string();
    let classes = spot["classes"]
        .as_object()
        .expect("classes")
        .keys()
        .cloned()
        .collect();
    (rip, symbol, instruction, classes)
}

#[test]
fn irq_latency_on_each_irqchip_is_seen_from_outside_as_dirq_counts_it() {
    for irqchip in ["kernel", "split", "userspace"] {
        if !dirq_vmm::testing::require_kvm(&format!("observe irq-latency {irqchip}")) {
            return;
        }
        let bench = ["irq-latency", "--irqchip", irqchip, "--count", "20000"];
        let Some((run, observed)) = run_watched(&bench) else {
            return;
        };
        let vm = vm_of(&observed);
        assert_exits_match(&bench.join(" "), &run, vm);
        let handled = number(&run["interrupts"]);
        let (_, symbol, instruction, classes) = top_hot_spot(vm);
        if irqchip == "userspace" {
            // The VMM injects through KVM_INTERRUPT: KVM counts the
            // injections, no tracepoint names them.
            let injected = number(&vm["kvm_stats"]["vm"]["irq_injections"]);
            assert!(
                within(injected, handled, 0.01),
                "{irqchip}: {injected} injected, {handled} handled"
            );
            assert_eq!(classes, ["untraced-msr"], "its EOI goes to the VMM");
        } else {
            let eois = device_eois(vm);
            assert!(
                within(eois, handled, 0.01),
                "{irqchip}: {eois} EOIs, {handled} handled"
            );
            assert_eq!(classes, ["eoi-write"]);
        }
        assert_eq!(instruction, "wrmsr");
        assert!(
            symbol.starts_with("device_irq"),
            "the guest's device IRQ entry EOIs: {symbol}"
        );
    }
}

#[test]
fn ipi_and_io_batch_are_seen_from_outside_as_dirq_counts_them() {
    if !dirq_vmm::testing::require_kvm("observe ipi and io-batch") {
        return;
    }
    let bench = ["ipi", "--count", "20000"];
    let Some((run, observed)) = run_watched(&bench) else {
        return;
    };
    let vm = vm_of(&observed);
    assert_exits_match("ipi", &run, vm);
    let ipis: f64 = vm["interrupts"]
        .as_array()
        .expect("interrupts")
        .iter()
        .map(|row| number(&row["sources"]["ipi"]))
        .sum();
    assert!(
        within(ipis, number(&run["interrupts"]), 0.01),
        "{ipis} IPIs accepted, run {}",
        run["interrupts"]
    );
    let sends = vm["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .filter(|row| row["cause"]["class"] == "ipi-send");
    assert!(within(
        sends.map(|row| number(&row["count"])).sum(),
        number(&run["interrupts"]),
        0.01
    ));

    let bench = ["io-batch", "--count", "20000"];
    let Some((run, observed)) = run_watched(&bench) else {
        return;
    };
    let vm = vm_of(&observed);
    assert_exits_match("io-batch", &run, vm);
    let (_, symbol, instruction, classes) = top_hot_spot(vm);
    assert_eq!(
        (instruction.as_str(), classes),
        ("out", vec!["port-io".to_string()]),
        "{symbol}"
    );
    // Each of the command's port writes is its own hot spot, each a VMM exit.
    let spots = vm["hot_spots"].as_array().expect("hot spots");
    // On kvm_pvm the hot spots come from kvm_emulate_insn: a record the
    // kernel could not store (said, by tracepoint) is a hot spot's exit short.
    let lost = ["kvm_exit", "kvm_emulate_insn"]
        .iter()
        .map(|t| number(&observed["sources"]["lost_by_tracepoint"][*t]))
        .sum::<f64>();
    let commands = spots
        .iter()
        .filter(|spot| {
            let exits = number(&spot["exits"]);
            exits <= 20_000.0 && exits + lost >= 20_000.0
        })
        .count();
    assert!(
        commands >= 10,
        "{commands} port writes once per command: {}",
        vm["hot_spots"]
    );
    let to_vmm = number(&run["exits"]["userspace_by_reason"]["io"]);
    let port_io: f64 = vm["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .filter(|row| row["cause"]["class"] == "port-io")
        .map(|row| number(&row["to_userspace"]))
        .sum();
    assert!(
        within(port_io, to_vmm, 0.01),
        "{port_io} port exits to the VMM, run {to_vmm}"
    );
}

#[test]
fn whileloop_is_seen_from_outside_as_dirq_counts_its_window() {
    if !dirq_vmm::testing::require_kvm("observe whileloop") {
        return;
    }
    let bench = [
        "whileloop",
        "--irqchip",
        "kernel",
        "--rate",
        "20000",
        "--duration-ms",
        "1000",
    ];
    let Some((run, observed)) = run_watched(&bench) else {
        return;
    };
    let vm = vm_of(&observed);
    // The observer sees the whole VM; the run counts its window and, apart,
    // what lay outside it (the boot, the unloaded loop): together they are
    // what the observer must have seen.
    let categories = observed_categories(vm);
    let exits = &run["exits"];
    let whole = |category: &str| {
        number(&exits["by_category"][category]) + number(&exits["outside_window"][category])
    };
    for (category, seen) in &categories {
        let truth = whole(category);
        assert!(
            within(*seen, truth, 0.01),
            "{category}: observed {seen}, run {truth} (window and outside)"
        );
    }
    let total: f64 = categories.values().sum();
    let truth = number(&exits["total"])
        + exits["outside_window"]
            .as_object()
            .expect("outside the window")
            .values()
            .map(number)
            .sum::<f64>();
    assert!(
        within(total, truth, 0.01),
        "observed {total} exits, the run {truth}"
    );
    let handled = number(&run["interrupts"]);
    assert!(
        within(device_eois(vm), handled, 0.01),
        "{} EOIs, {handled} handled",
        device_eois(vm)
    );
}

/// Assembles guest/multiboot/observe.S into a Multiboot ELF32 kernel.
fn observe_kernel(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest/multiboot/observe.S");
    let object = dir.join("observe.o");
    let kernel = dir.join("observe.elf");
    let assembled = Command::new("gcc")
        .args(["-m32", "-c", "-o"])
        .arg(&object)
        .arg(&source)
        .status();
    assert!(
        assembled.is_ok_and(|status| status.success()),
        "gcc -m32 assembles {}",
        source.display()
    );
    let linked = Command::new("ld")
        .args(["-m", "elf_i386", "-Ttext=0x100000", "-o"])
        .arg(&kernel)
        .arg(&object)
        .status();
    assert!(
        linked.is_ok_and(|status| status.success()),
        "ld links the kernel"
    );
    kernel
}

/// Debian's QEMU (`-accel kvm`) boots a kernel whose loops are counted:
/// 1,000 `inl` from port 0xe0, 500 `outb` to 0xe1, 1,000 self-IPIs of
/// vector 0x41 each followed by an EOI write. Seen from outside, each loop
/// is that many exits, and the IPIs appear by vector. A dirq VM started
/// meanwhile sends IPIs of the same vector: none may count as QEMU's.
#[test]
fn a_foreign_vmms_counted_loops_are_that_many_exits() {
    if Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_err()
    {
        // .ci/run sets it where it installed QEMU.
        assert!(
            std::env::var_os("DIRQ_REQUIRE_QEMU").is_none_or(|value| value != "1"),
            "qemu-system-x86_64 is not installed and DIRQ_REQUIRE_QEMU=1 forbids skipping"
        );
        eprintln!("OBSERVE QEMU TEST SKIPPED: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)");
        return;
    }
    if !dirq_vmm::testing::require_kvm("observe qemu") {
        return;
    }
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = std::env::temp_dir().join(format!("dirq-observe-qemu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kernel = observe_kernel(&dir);
    let child = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "kvm",
            "-display",
            "none",
            "-serial",
            "none",
            "-no-reboot",
            "-m",
            "32",
        ])
        .args([
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=0x4",
            "-kernel",
        ])
        .arg(&kernel)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("QEMU starts");
    let neighbour = std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(2));
        run(&["run", "ipi", "--count", "20000"])
    });
    let observed = observe(&child, &[]);
    let output = child.wait_with_output().expect("QEMU ends");
    std::fs::remove_dir_all(&dir).unwrap();
    let neighbour = neighbour.join().expect("the neighbour VM's thread");
    assert!(neighbour.status.success(), "{}", stderr(&neighbour));
    // isa-debug-exit: status (0 << 1) | 1: the kernel ran to its end.
    assert_eq!(output.status.code(), Some(1), "QEMU: {}", stderr(&output));
    let Some(observed) = observed else { return };
    let vm = vm_of(&observed);
    assert_eq!(vm["vmm"], "qemu-system-x86");
    let lost_by = &observed["sources"]["lost_by_tracepoint"];
    let causes = vm["causes"].as_array().expect("causes");
    let count = |class: &str, field: &str, value: u64| -> f64 {
        causes
            .iter()
            .filter(|row| {
                row["cause"]["class"] == class && row["cause"][field].as_u64() == Some(value)
            })
            .map(|row| number(&row["count"]))
            .sum()
    };
    let interrupts = vm["interrupts"].as_array().expect("interrupts");
    let vectors: Vec<u64> = interrupts
        .iter()
        .filter_map(|row| row["vector"].as_u64())
        .collect();
    assert_eq!(
        vectors,
        [0x41],
        "the kernel's only vector, none of its neighbour's"
    );
    let vector = interrupts
        .iter()
        .find(|row| row["vector"] == 0x41)
        .map_or(0.0, |row| number(&row["sources"]["ipi"]));
    let expected = [
        (
            "inl from 0xe0",
            count("port-io", "port", 0xe0),
            1_000.0,
            &["kvm_pio"][..],
        ),
        (
            "outb to 0xe1",
            count("port-io", "port", 0xe1),
            500.0,
            &["kvm_pio"][..],
        ),
        (
            "self-IPI ICR writes",
            count("ipi-send", "icr", 0x4_0041),
            1_000.0,
            &["kvm_apic", "kvm_apic_ipi"],
        ),
        (
            "vector 0x41 accepted",
            vector,
            1_000.0,
            &["kvm_apic_accept_irq"],
        ),
    ];
    for (what, seen, truth, tracepoints) in expected {
        // Records the kernel could not store are counted by tracepoint:
        // with none of these ones' lost the count is exact.
        let lost: f64 = tracepoints.iter().map(|t| number(&lost_by[*t])).sum();
        if lost == 0.0 {
            assert_eq!(seen, truth, "{what}");
        } else {
            assert!(
                seen <= truth && seen + lost >= truth,
                "{what}: {seen} seen, {lost} lost"
            );
        }
    }
}
