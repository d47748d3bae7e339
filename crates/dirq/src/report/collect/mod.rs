//! The first stage of `dirq report`: what only the report runs (the real
//! runs' traces, the simulated twins and the built-in scenarios); the real
//! benchmarks themselves are run by `common::plan`, which the calibration shares.

#[cfg(test)]
pub mod fixtures;
pub mod real_trace;
pub mod simulate;
pub mod twins;
