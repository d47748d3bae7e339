//! dirq-vmm: a small KVM VMM that boots dirq's guest test kernel, delivers
//! interrupts to it through a chosen path and counts every exit.
//!
//! Entry points: [`bench::run`] (one benchmark, a [`report::RunReport`]),
//! [`probe::probe`] (capabilities and exit costs), the `compare` of each
//! module in [`studies`] (a software-only study in every mode, as a table),
//! and [`testing::require_kvm`] for tests.
//!
//! Layers, each using only those below it: `studies` and `probe` compare
//! runs of `bench`; `bench` runs one benchmark on a `machine`; the machine
//! boots a `vm` with its `vcpu`s, `devices` on the `bus`, and the `interrupt`
//! path its config's irqchip mode chooses (whose controllers sit on the bus
//! too: `bus` depends on neither).
//!
//! Adding a benchmark: a guest file `guest/bench_<name>.c` defining a
//! `struct bench` (one line in guest/bench.c's table; hot interrupt
//! handlers go in guest/irq_entries.S, see why there), a `Bench` variant
//! with its ABI id, its parameter set in `config/params.rs` (defaults,
//! rules, flags, and what the guest reads of it: bench-specific values
//! travel in `shared->args`), and a host side in `bench/` that calls
//! [`machine::run`] with [`machine::Extensions`]: an `attach` hook that
//! puts new devices (`bus::{PioDevice, MmioDevice, MsrDevice}`) on the
//! bus and a device thread that raises interrupts through the run's
//! `interrupt::InterruptSink`.

pub mod abi;
pub mod attack;
pub mod bench;
mod boot;
pub mod bus;
pub mod config;
pub mod devices;
pub mod exec;
pub mod exits;
pub mod host_load;
pub mod hostile;
pub mod interrupt;
pub mod machine;
pub mod memory;
pub mod multiboot;
pub mod observe;
pub mod placement;
pub mod probe;
pub mod report;
pub mod results;
pub mod run_control;
mod stats;
pub mod studies;
pub mod testing;
pub mod trace;
pub mod vcpu;
pub mod vm;

pub use config::BenchConfig;
pub use report::RunReport;
