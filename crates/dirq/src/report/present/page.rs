//! The page's sections, top to bottom: one declared list. Each step adds
//! its sections as it runs; the page shows them in this order, whatever
//! the order they were made in.

use crate::report::present::data::Section;

/// One part of the page, in the page's order: what the report found
/// first, then the real runs and how far the model follows them, then the
/// studies and the simulated scenarios, and the host's reference tables
/// last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Conclusions,
    Real,
    /// VMs watched by `dirq observe`, beside dirq's own runs.
    Observed,
    ModelVsReality,
    Pivots,
    Extrapolation,
    RealTraces,
    Studies,
    /// One section per built-in scenario, in the built-in order.
    Scenario,
    SimTrace,
    Host,
    Emulation,
    Calibration,
}

impl Part {
    pub const PAGE: [Part; 13] = [
        Part::Conclusions,
        Part::Real,
        Part::Observed,
        Part::ModelVsReality,
        Part::Pivots,
        Part::Extrapolation,
        Part::RealTraces,
        Part::Studies,
        Part::Scenario,
        Part::SimTrace,
        Part::Host,
        Part::Emulation,
        Part::Calibration,
    ];

    /// The section's id (HTML anchor); a scenario's is this prefix and
    /// its name.
    pub fn id(self) -> &'static str {
        match self {
            Part::Conclusions => "conclusions",
            Part::Real => "real",
            Part::Observed => "observed",
            Part::ModelVsReality => "model-vs-reality",
            Part::Pivots => "pivots",
            Part::Extrapolation => "extrapolation",
            Part::RealTraces => "real-traces",
            Part::Studies => "studies",
            Part::Scenario => "scenario-",
            Part::SimTrace => "sim-trace-exits",
            Part::Host => "host",
            Part::Emulation => "emulation",
            Part::Calibration => "calibration",
        }
    }

    /// The part a section of `id` belongs to.
    pub fn of(id: &str) -> Option<Part> {
        Part::PAGE.into_iter().find(|part| match part {
            Part::Scenario => id.starts_with(part.id()),
            _ => id == part.id(),
        })
    }
}

/// Puts `sections` in the page's order (a section of no part last);
/// sections of one part keep the order they were made in.
pub fn in_page_order(sections: &mut [Section]) {
    sections.sort_by_key(|section| {
        let part = Part::of(&section.id);
        (part.is_none(), part)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(id: &str) -> Section {
        Section {
            id: id.into(),
            ..Section::default()
        }
    }

    #[test]
    fn sections_follow_the_declared_list_and_scenarios_keep_their_order() {
        let mut sections: Vec<Section> = [
            "host",
            "scenario-b",
            "real",
            "scenario-a",
            "conclusions",
            "calibration",
            "undeclared",
        ]
        .map(section)
        .to_vec();
        in_page_order(&mut sections);
        let ids: Vec<&str> = sections.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "conclusions",
                "real",
                "scenario-b",
                "scenario-a",
                "host",
                "calibration",
                "undeclared"
            ]
        );
        for part in Part::PAGE {
            assert_eq!(
                Part::of(&format!("{}x", part.id())).is_some(),
                part == Part::Scenario
            );
        }
    }
}
