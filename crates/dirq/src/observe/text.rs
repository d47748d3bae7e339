//! `dirq observe`'s tables, in the formats people already read:
//! `perf kvm stat report` for exits, top-style for hot spots.

use std::fmt::Write as _;

use dirq_sim::what_if::Saving;
use dirq_stats::f64_of;
use dirq_vmm::observe::account::Timing;
use dirq_vmm::observe::kvm_stats::StatsOrigin;
use dirq_vmm::observe::{ExitTableRow, TableSource};
use dirq_vmm::report::{text_table, PERF_KVM_STAT_COLUMNS};

use super::record::{ObservedVm, Record};

fn percent(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.2}%", 100.0 * part / whole)
    } else {
        "-".to_string()
    }
}

fn us(ns: u64) -> String {
    format!("{:.2}us", f64_of(ns) / 1e3)
}

/// A span of time in the unit that reads best.
fn span(ns: u64) -> String {
    let ns = f64_of(ns);
    match ns {
        ns if ns >= 1e9 => format!("{:.2} s", ns / 1e9),
        ns if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        ns if ns >= 1e3 => format!("{:.2} us", ns / 1e3),
        ns => format!("{ns:.0} ns"),
    }
}

/// One of a VM's tables, as text cells: the terminal and the report draw
/// the same rows.
pub struct Grid {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Grid {
    fn new(title: impl Into<String>, columns: &[&str]) -> Grid {
        Grid {
            title: title.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    fn add_row(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// The grid as a terminal table under its title.
    fn text(&self) -> String {
        let columns: Vec<&str> = self.columns.iter().map(String::as_str).collect();
        let mut table = text_table(&columns);
        for row in &self.rows {
            table.add_row(row.clone());
        }
        format!("{}:\n{table}", self.title)
    }
}

/// `perf kvm stat report`'s table.
fn exit_table(title: String, rows: &[ExitTableRow]) -> Grid {
    let mut table = Grid::new(title, &PERF_KVM_STAT_COLUMNS);
    let samples: u64 = rows.iter().map(|row| row.samples).sum();
    let time_ns: u64 = rows
        .iter()
        .filter_map(|row| row.time)
        .map(|time| time.total_ns)
        .sum();
    for row in rows {
        let [share, min, max, avg] = match row.time {
            Some(Timing {
                samples,
                total_ns,
                min_ns,
                max_ns,
            }) => [
                percent(f64_of(total_ns), f64_of(time_ns)),
                us(min_ns),
                us(max_ns),
                us(total_ns / samples.max(1)),
            ],
            None => ["-".into(), "-".into(), "-".into(), "-".into()],
        };
        table.add_row(vec![
            row.reason.clone(),
            row.samples.to_string(),
            percent(f64_of(row.samples), f64_of(samples)),
            share,
            min,
            max,
            avg,
        ]);
    }
    table
}

fn table_note(source: TableSource) -> &'static str {
    match source {
        TableSource::ExitTracepoint => "from kvm_exit/kvm_entry: time is exit to the next entry",
        TableSource::Statistics => {
            "from KVM's statistics (kvm_exit does not fire here: no times); OTHER split by the \
             instructions KVM emulated"
        }
        TableSource::Traps => "the instructions KVM emulated (no statistics, no kvm_exit)",
    }
}

fn savings_table(savings: &[Saving], exits: f64, timed_by_floors: bool) -> Grid {
    let mut table = Grid::new(
        "what each design would save this VM (the simulator's design tables on every traced exit)",
        &[
            "design",
            "exits removed/s",
            "of all exits",
            "CPU us/s back",
            "undecided",
            "removes",
        ],
    );
    for saving in savings {
        let undecided: Vec<String> = saving
            .undecided
            .iter()
            .map(|u| format!("{} {} ({})", u.exits, u.class, u.why.reason()))
            .collect();
        let removes: Vec<String> = saving
            .removed_by_class
            .iter()
            .map(|(class, count)| format!("{class} {count}"))
            .collect();
        let cpu = if timed_by_floors {
            format!("{:.1}*", saving.cpu_us_per_s)
        } else {
            format!("{:.1}", saving.cpu_us_per_s)
        };
        table.add_row(vec![
            saving.design.to_string(),
            format!("{:.0}", saving.removed_per_s),
            percent(f64_of(saving.removed_exits), exits),
            cpu,
            if undecided.is_empty() {
                "-".into()
            } else {
                undecided.join("; ")
            },
            if removes.is_empty() {
                "nothing".into()
            } else {
                removes.join(", ")
            },
        ]);
    }
    table
}

/// Every table of one VM, in the order the terminal shows them.
pub fn vm_grids(vm: &ObservedVm, record: &Record, top: usize) -> Vec<Grid> {
    let mut grids = exit_tables(vm);
    grids.extend(causes_table(vm));
    grids.extend(hot_spots_table(vm, top));
    grids.extend(interrupts_table(vm));
    grids.push(savings(vm, record));
    grids
}

/// The VM's perf-kvm-stat table, then each vCPU's where it has several.
fn exit_tables(vm: &ObservedVm) -> Vec<Grid> {
    let seen = &vm.seen;
    let mut grids = vec![exit_table(
        format!("exits ({})", table_note(seen.exit_table_source)),
        &seen.exit_table,
    )];
    if seen.vcpu_exit_tables.len() > 1 {
        for (vcpu, rows) in &seen.vcpu_exit_tables {
            grids.push(exit_table(vcpu.to_string(), rows));
        }
    }
    grids
}

fn per_s(vm: &ObservedVm, count: u64) -> f64 {
    f64_of(count) / vm.seen.observed_s.max(1e-9)
}

fn causes_table(vm: &ObservedVm) -> Option<Grid> {
    let classes = vm.seen.classes();
    if classes.is_empty() {
        return None;
    }
    let traced: u64 = classes.values().map(|tally| tally.count).sum();
    let mut table = Grid::new(
        "exits by cause (the traced ones)",
        &["cause", "exits", "/s", "share", "to VMM", "avg time"],
    );
    let mut rows: Vec<_> = classes.into_iter().collect();
    rows.sort_by_key(|(_, tally)| std::cmp::Reverse(tally.count));
    for (class, tally) in rows {
        table.add_row(vec![
            class.to_string(),
            tally.count.to_string(),
            format!("{:.0}", per_s(vm, tally.count)),
            percent(f64_of(tally.count), f64_of(traced)),
            tally.to_userspace.to_string(),
            tally
                .time
                .total_ns
                .checked_div(tally.time.samples)
                .map_or_else(|| "-".into(), us),
        ]);
    }
    Some(table)
}

fn hot_spots_table(vm: &ObservedVm, top: usize) -> Option<Grid> {
    let spots = &vm.seen.hot_spots;
    if spots.is_empty() {
        return None;
    }
    let traced: u64 = spots.iter().map(|spot| spot.exits).sum::<u64>().max(1);
    let mut table = Grid::new(
        "hot spots (guest instructions by exits)",
        &[
            "guest RIP",
            "symbol",
            "exits",
            "share",
            "time",
            "instruction",
            "causes",
        ],
    );
    for spot in spots.iter().take(top) {
        let causes: Vec<String> = spot
            .classes
            .iter()
            .map(|(class, n)| format!("{class} {n}"))
            .collect();
        table.add_row(vec![
            format!("{:#x}", spot.rip),
            vm.symbols
                .get(&spot.rip)
                .cloned()
                .unwrap_or_else(|| "-".into()),
            spot.exits.to_string(),
            percent(f64_of(spot.exits), f64_of(traced)),
            if spot.time.samples > 0 {
                us(spot.time.total_ns)
            } else {
                "-".into()
            },
            spot.instruction.clone().unwrap_or_else(|| "-".into()),
            causes.join(", "),
        ]);
    }
    Some(table)
}

fn interrupts_table(vm: &ObservedVm) -> Option<Grid> {
    if vm.seen.interrupts.is_empty() {
        return None;
    }
    let mut table = Grid::new(
        "interrupts by vector",
        &[
            "vector", "source", "accepted", "/s", "level", "injected", "EOIs", "PV EOIs",
        ],
    );
    for row in &vm.seen.interrupts {
        let sources: Vec<String> = row
            .sources
            .iter()
            .map(|(source, n)| format!("{} {n}", kebab(source)))
            .collect();
        table.add_row(vec![
            format!("{:#04x}", row.vector),
            sources.join(", "),
            row.accepted.to_string(),
            format!("{:.0}", row.per_s),
            row.level_triggered.to_string(),
            row.injected.to_string(),
            row.eois.to_string(),
            row.pv_eois.to_string(),
        ]);
    }
    Some(table)
}

/// Whether untraced exits were timed by the probe's floors (marked `*`).
fn timed_by_floors(vm: &ObservedVm, record: &Record) -> bool {
    record.costs.is_some()
        && vm
            .seen
            .causes
            .iter()
            .any(|row| row.time.samples < row.count)
}

fn savings(vm: &ObservedVm, record: &Record) -> Grid {
    let exits = vm.seen.exits.unwrap_or_else(|| classes_total(vm));
    savings_table(&vm.what_if, f64_of(exits), timed_by_floors(vm, record))
}

/// What a VM's tables are of: the VM, where its statistics came from and
/// its exit count.
pub fn vm_heading(vm: &ObservedVm) -> Vec<String> {
    let seen = &vm.seen;
    let statistics = match &seen.statistics {
        StatsOrigin::VmmStatsFds => "the VMM's own KVM statistics fds (per vCPU)".to_string(),
        StatsOrigin::Debugfs(dir) => format!("debugfs {}", dir.display()),
        StatsOrigin::Unavailable(why) => format!("unavailable: {why}"),
    };
    vec![
        format!(
            "VM {} ({}), {} vCPUs, watched {:.2} s{}",
            seen.vm,
            seen.vmm,
            seen.vcpus,
            seen.observed_s,
            if seen.ended {
                " (the VMM ended: what was seen until then)"
            } else {
                ""
            }
        ),
        format!("statistics: {statistics}"),
        match seen.exits {
            Some(exits) => format!(
                "exits {exits} ({:.0}/s), {} traced events",
                per_s(vm, exits),
                seen.traced_events
            ),
            None => format!(
                "exits: not counted (no statistics, no kvm_exit); {} traced events",
                seen.traced_events
            ),
        },
    ]
}

/// One VM's tables.
fn vm_text(vm: &ObservedVm, record: &Record, top: usize) -> String {
    let seen = &vm.seen;
    let mut text = vm_heading(vm).join("\n");
    text.push('\n');
    text.push('\n');
    for grid in exit_tables(vm) {
        let _ = writeln!(text, "{}", grid.text());
    }

    if let Some(grid) = causes_table(vm) {
        let _ = writeln!(text, "{}", grid.text());
    }

    if let Some(grid) = hot_spots_table(vm, top) {
        let _ = writeln!(text, "{}", grid.text());
        if let Some(warning) = vm.symbol_fit.as_ref().and_then(|fit| fit.warning()) {
            let _ = writeln!(text, "WARNING: {warning}\n");
        }
    }

    if let Some(grid) = interrupts_table(vm) {
        let _ = writeln!(text, "{}", grid.text());
    }
    if seen.eois_with_none_in_service > 0 {
        let _ = writeln!(
            text,
            "{} EOIs found no interrupt in service in KVM's LAPIC (it does not hold delivered interrupts in service here, or the guest wrote stray EOIs)\n",
            seen.eois_with_none_in_service
        );
    }

    let halts = &seen.halts;
    if halts.traced.halts + halts.traced.woke_from_sleep + halts.traced.woke_while_polling > 0
        || !halts.statistics.is_empty()
    {
        let t = halts.traced;
        let _ = writeln!(
            text,
            "halts: {} traced; woke {} times from sleep ({} slept), {} while polling ({} polled), {} invalid; poll window grew {}, shrank {}",
            t.halts,
            t.woke_from_sleep,
            span(t.slept_ns),
            t.woke_while_polling,
            span(t.polled_ns),
            t.invalid,
            t.poll_grew,
            t.poll_shrank
        );
        if !halts.statistics.is_empty() {
            let stats: Vec<String> = halts
                .statistics
                .iter()
                .map(|(name, value)| format!("{name} {value}"))
                .collect();
            let _ = writeln!(text, "  KVM: {}", stats.join(", "));
        }
        text.push('\n');
    }

    let floors = timed_by_floors(vm, record);
    let _ = writeln!(text, "{}", savings(vm, record).text());
    match &record.costs {
        Some(costs) if floors => {
            let _ = writeln!(
                text,
                "* untraced exit times taken from this host's floors ({}): {:.2} us in KVM, {:.2} us to the VMM\n",
                costs.from,
                costs.floors.kernel_ns / 1e3,
                costs.floors.userspace_ns / 1e3
            );
        }
        None if seen.causes.iter().any(|row| row.time.samples < row.count) => {
            let _ = writeln!(text, "CPU time counts traced exit times only (no probe: --probe FILE gives this host's floors)\n");
        }
        _ => {}
    }
    if !seen.unseen.is_empty() {
        let _ = writeln!(text, "not seen here:");
        for item in &seen.unseen {
            let _ = writeln!(text, "  - {item}");
        }
    }
    text
}

fn classes_total(vm: &ObservedVm) -> u64 {
    vm.seen.causes.iter().map(|row| row.count).sum()
}

fn kebab(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The whole record as text.
pub fn render(record: &Record, top: usize) -> String {
    let mut text = String::new();
    for vm in &record.vms {
        text += &vm_text(vm, record, top);
        text.push('\n');
    }
    let sources = &record.sources;
    let _ = writeln!(
        text,
        "sources: {} kvm tracepoints on every CPU, {} records, {} lost by the kernel{}, {} of no watched VM",
        sources.tracepoints.len(),
        sources.records,
        sources.lost,
        sources
            .lost_records()
            .map(|lost| format!(" ({lost}: what those count is short by as much)"))
            .unwrap_or_default(),
        sources.unattributed
    );
    for (tracepoint, why) in &sources.disabled {
        let _ = writeln!(text, "{tracepoint} turned off while watching: {why}");
    }
    if let Some(error) = &sources.trace_error {
        let _ = writeln!(text, "tracepoints unreadable: {error}");
    }
    for mounted in &sources.mounted {
        let _ = writeln!(text, "mounted {mounted} to read it");
    }
    text
}

/// The live view: one line per VM and its top causes.
pub fn live(record: &Record) -> String {
    let mut text = format!(
        "dirq observe: {:.0} s (Ctrl-C ends with the summary)\n\n",
        record.duration_s
    );
    for vm in &record.vms {
        let seen = &vm.seen;
        let per_s = |count: u64| f64_of(count) / seen.observed_s.max(1e-9);
        let _ = writeln!(
            text,
            "VM {} ({}) {} vCPUs: {} exits/s{}",
            seen.vm,
            seen.vmm,
            seen.vcpus,
            seen.exits
                .map_or_else(|| "?".to_string(), |exits| format!("{:.0}", per_s(exits))),
            if seen.ended { ", ended" } else { "" }
        );
        let mut classes: Vec<_> = seen.classes().into_iter().collect();
        classes.sort_by_key(|(_, tally)| std::cmp::Reverse(tally.count));
        for (class, tally) in classes.iter().take(6) {
            let _ = writeln!(
                text,
                "  {:<22} {:>10.0}/s",
                class.to_string(),
                per_s(tally.count)
            );
        }
        for spot in seen.hot_spots.iter().take(3) {
            let _ = writeln!(
                text,
                "  rip {:#x} {} {:.0}/s",
                spot.rip,
                vm.symbols.get(&spot.rip).map_or("", String::as_str),
                per_s(spot.exits)
            );
        }
    }
    text
}
