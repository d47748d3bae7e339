//! What every command shares: running a real bench and reading its result
//! (`plan`, `real`, `views`), the statistics of repeated runs (`spread`),
//! numbers as text (`format`), progress and step records (`progress`), and
//! the metadata every `--json` document carries (`meta`). It imports no
//! command, so `calibrate` and `report` both build on it without importing
//! each other's internals.

pub mod format;
pub mod meta;
pub mod plan;
pub mod progress;
pub mod real;
pub mod spread;
pub mod views;
