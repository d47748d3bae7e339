//! The second stage of `dirq report`: pure functions of the collected data
//! (the model checks against the real runs, their misses, the
//! extrapolation to other designs, the statistics of repeated runs, what
//! the studies and the host's probe found). No I/O and no rendering, so
//! each is tested on data built by hand.

pub mod checks;
pub mod compare;
pub mod host;
pub mod leaves;
pub mod misses;
pub mod model;
pub mod studies;
