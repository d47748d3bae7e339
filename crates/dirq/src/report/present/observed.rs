//! VMs watched from outside (`dirq observe --record FILE`, given to the
//! report with `--observation FILE`): the same tables the terminal shows,
//! beside dirq's own runs.

use std::path::PathBuf;

use crate::observe::record::Record;
use crate::observe::text::{vm_grids, vm_heading, Grid};
use crate::report::present::data::{Cell, Section, Table, TableRow};
use crate::report::present::page::Part;

/// Hot spots shown per VM, as `dirq observe`'s default.
const TOP_HOT_SPOTS: usize = 20;

fn table(grid: Grid, folded: bool) -> Table {
    Table {
        title: grid.title,
        columns: grid.columns,
        rows: grid
            .rows
            .into_iter()
            .map(|row| TableRow::new(row.into_iter().map(Cell::text).collect()))
            .collect(),
        folded,
    }
}

/// One section for every observed VM of every record.
pub fn observed_section(records: &[(PathBuf, Record)]) -> Section {
    let mut intro = vec![
        "Each VM below was watched from outside by `dirq observe` (KVM's statistics and its \
         `kvm:` tracepoints; the VMM was not asked). Its exits are counted as `perf kvm stat` \
         counts them, its hot spots are the guest instructions that caused them, and the \
         what-if applies the simulator's design tables to every traced exit."
            .to_string(),
    ];
    let mut tables = Vec::new();
    for (path, record) in records {
        for vm in &record.vms {
            intro.push(format!(
                "From {}: {}",
                path.display(),
                vm_heading(vm).join("; ")
            ));
            let grids = vm_grids(vm, record, TOP_HOT_SPOTS);
            let last = grids.len().saturating_sub(1);
            for (index, grid) in grids.into_iter().enumerate() {
                // The exit table and the what-if carry the point; the rest folds.
                let folded = index != 0 && index != last;
                let mut grid = grid;
                grid.title = format!("VM {} ({}): {}", vm.seen.vm, vm.seen.vmm, grid.title);
                tables.push(table(grid, folded));
            }
            intro.extend(
                vm.seen
                    .unseen
                    .iter()
                    .map(|item| format!("Not seen: {item}")),
            );
        }
    }
    Section {
        id: Part::Observed.id().into(),
        title: "VMs seen from outside".into(),
        intro,
        given: Vec::new(),
        figures: Vec::new(),
        tables,
    }
}
