//! The "what each design leaves" section: the analysed exits per interrupt
//! of every design on the same four workloads, one row per interrupt kind
//! and exit reason, one column per design.

use crate::report::analyse::leaves::{DesignLeaves, SCENARIO};
use crate::report::present::data::{Cell, Section, Table, TableRow, Unit};

/// The section, quoting `command` (the run that made it).
pub fn leaves_section(leaves: &DesignLeaves, command: &str) -> Section {
    let mut columns = vec!["interrupt".to_string(), "exit reason".to_string()];
    columns.extend(
        leaves
            .designs
            .iter()
            .map(|design| design.name().to_string()),
    );
    let mut rows = Vec::new();
    for (kind, cells) in &leaves.kinds {
        let number = |value: Option<f64>| match value {
            Some(value) => Cell::number(value, Unit::Count),
            None => Cell::text("not run"),
        };
        for reason in DesignLeaves::reasons(cells) {
            let mut row = vec![Cell::text(kind.name()), Cell::text(reason.name())];
            row.extend(cells.iter().map(|cell| {
                number(
                    cell.as_ref()
                        .map(|cell| cell.by_reason.get(&reason).copied().unwrap_or(0.0)),
                )
            }));
            rows.push(TableRow::new(row));
        }
        let mut total = vec![Cell::text(kind.name()), Cell::text("all exits")];
        total.extend(
            cells
                .iter()
                .map(|cell| number(cell.as_ref().map(|cell| cell.total))),
        );
        rows.push(TableRow::new(total));
    }
    Section {
        id: "design-gap".into(),
        title: "What each design leaves".into(),
        intro: vec![
            format!(
                "Exits per interrupt, by VMX exit reason, for each design on the same four \
                 workloads (the built-in scenario {SCENARIO}, `{command}`): the studies' designs \
                 (vanilla KVM, APICv, ELI, DID) beside today's hardware (apicv-pi: APICv with \
                 VT-d posted interrupts; apicv-pi-ipiv: the same with IPI virtualization; avic: \
                 AMD AVIC). Each cell is the run's exits of that reason per second over the \
                 interrupts it raised per second; reasons under 0.005 per interrupt are left \
                 out, and \"all exits\" counts every exit. What a column keeps above DID's is \
                 the gap between that hardware and DID, exit by exit."
            ),
            "AVIC's own exits are counted under the VMX reason they stand for: \
             AVIC_INCOMPLETE_IPI (an IPI to a vCPU that is not running) and AVIC_NOACCEL (a \
             timer write) as MSR_WRITE, the x2APIC MSR write that takes them. A prediction of \
             the model with the did-2015 costs (docs/calibration.md says which costs today's \
             designs assume); no hardware of today was measured."
                .into(),
        ],
        figures: Vec::new(),
        tables: vec![Table {
            title: "Exits per interrupt, by reason and design".into(),
            columns,
            rows,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::analyse::leaves::{ExitsPerInterrupt, InterruptKind};
    use dirq_arch::exit::VmxExit;
    use dirq_sim::design::DesignKind;

    #[test]
    fn one_row_per_reason_and_a_total_per_kind_with_typed_cells() {
        let vanilla = ExitsPerInterrupt {
            by_reason: [(VmxExit::MsrWrite, 1.0), (VmxExit::Hlt, 0.5)].into(),
            total: 1.5,
        };
        let leaves = DesignLeaves {
            designs: vec![DesignKind::Vanilla, DesignKind::Avic],
            kinds: vec![(InterruptKind::Halt, vec![Some(vanilla), None])],
        };
        let section = leaves_section(&leaves, "dirq sim design-gap --seed 1");
        let table = &section.tables[0];
        assert_eq!(
            table.columns,
            ["interrupt", "exit reason", "vanilla", "avic"]
        );
        let texts: Vec<Vec<&str>> = table
            .rows
            .iter()
            .map(|row| row.cells.iter().map(|cell| cell.text.as_str()).collect())
            .collect();
        assert_eq!(texts.len(), 3);
        assert_eq!(texts[0][1], "HLT");
        assert_eq!(texts[2][1], "all exits");
        assert_eq!(texts[2][3], "not run");
        let total = &table.rows[2].cells[2];
        assert_eq!((total.value, total.unit), (Some(1.5), Some(Unit::Count)));
    }
}
