//! The software-only designs of mechanisms.md sections 6-8, measured for
//! real: each module runs its benchmark in every mode and returns one
//! side-by-side table (`Display` for people, serde for the report).

use serde::{Deserialize, Serialize};

/// How long a comparison runs: `Quick` for tests and `dirq report --quick`,
/// `Full` for the benchmark command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scale {
    Quick,
    Full,
}
