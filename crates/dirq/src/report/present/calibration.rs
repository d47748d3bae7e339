//! The report's calibration section: this host's measured costs, and the
//! simulator profile made from them.

use crate::calibrate::Calibration;

use crate::report::present::data::{Cell, Section, Table, TableRow, Unit};
use crate::report::present::page::Part;

pub fn calibration_section(calibration: &Calibration, profile_file: &str) -> Section {
    let costs = Table {
        folded: true,
        title: "What one event costs on this host".into(),
        columns: vec!["cost".into(), "ns".into(), "how it was measured".into()],
        rows: calibration
            .costs
            .rows()
            .iter()
            .map(|(name, measured)| {
                let ns = Cell::number(measured.ns, Unit::Ns);
                TableRow::new(vec![
                    Cell::text(*name),
                    match measured.not_derivable {
                        Some(_) => ns.clone().shown_as(format!("{} (fallback)", ns.text)),
                        None => ns,
                    },
                    Cell::text(measured.provenance()),
                ])
            })
            .collect(),
    };
    Section {
        given: Vec::new(),
        id: Part::Calibration.id().into(),
        title: "Calibration: this host's costs".into(),
        intro: vec![format!(
            "`dirq calibrate` measured these costs with the real VMM and wrote them as the \
             simulator profile {profile_file} (use it with `dirq sim <scenario> --profile \
             {profile_file}`). The model checks and the extrapolation below use that profile. \
             Costs derived by subtracting the probe's floors are kept when the subtraction \
             leaves less than the floors' run-to-run spread: the row says why, and which \
             fallback the simulator uses instead."
        )],
        figures: Vec::new(),
        tables: vec![costs],
    }
}
