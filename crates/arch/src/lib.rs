//! `dirq-arch`: models of the x86 interrupt hardware to the Intel SDM and
//! the VT-d specification. No I/O and no wall clock: time is injected
//! through [`clock::Clock`], and what a model sends is returned to the caller.
#![forbid(unsafe_code)]

pub mod bits;
pub mod bus;
pub mod clock;
pub mod exit;
pub mod exit_cause;
pub mod interrupt;
pub mod ioapic;
pub mod iommu;
pub mod ipi_virtualization;
pub mod lapic;
pub mod msi;
pub mod pit;
pub mod posted;
pub mod vectors;
pub mod vioapic;
pub mod vmcs;
