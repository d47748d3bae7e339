//! The APIC bus (SDM 10.6.2): which local APICs receive an [`Interrupt`].
//!
//! Each LAPIC decides whether a destination names it
//! ([`Lapic::matches_destination`]: physical, logical flat and cluster,
//! x2APIC cluster, broadcast IDs, shorthands); the bus adds what needs the
//! whole set: the shorthand and delivery-mode combinations that are valid
//! (SDM 10.6.1 table 10-3) and lowest-priority arbitration (SDM 10.6.2.4).
//! Routing only decides; the caller latches the interrupt into the targets
//! (`Lapic::accept` for fixed and lowest priority, its own NMI path for NMI).

use thiserror::Error;

use crate::interrupt::{
    DeliveryMode, Destination, Interrupt, X2APIC_BROADCAST_ID, XAPIC_BROADCAST_ID,
};
use crate::lapic::Lapic;

/// Combinations the bus does not deliver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum BusError {
    /// SDM 10.6.1 table 10-3: the self and all-including-self shorthands
    /// carry fixed interrupts only.
    #[error("{mode:?} delivery cannot use the {destination:?} shorthand (SDM 10.6.1 table 10-3)")]
    ShorthandNeedsFixed {
        mode: DeliveryMode,
        destination: Destination,
    },
    /// SDM 10.6.2.4: lowest priority is not supported with a broadcast.
    #[error("lowest-priority delivery to a broadcast is not supported (SDM 10.6.2.4)")]
    LowestPriorityBroadcast,
}

/// The LAPICs an interrupt reaches, as indices into the slice routed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targets {
    None,
    One(usize),
    Many(Vec<usize>),
}

impl Targets {
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let (one, many) = match self {
            Targets::None => (None, &[][..]),
            Targets::One(index) => (Some(*index), &[][..]),
            Targets::Many(indices) => (None, indices.as_slice()),
        };
        one.into_iter().chain(many.iter().copied())
    }

    fn from_vec(mut indices: Vec<usize>) -> Targets {
        match indices.len() {
            0 => Targets::None,
            1 => Targets::One(indices.pop().unwrap_or_default()),
            _ => Targets::Many(indices),
        }
    }
}

impl AsRef<Lapic> for Lapic {
    fn as_ref(&self) -> &Lapic {
        self
    }
}

/// Routes `interrupt` over `lapics` (the bus order: lowest-priority ties go
/// to the first). Fixed, NMI, SMI, INIT, start-up and ExtInt reach every
/// LAPIC the destination names; lowest priority reaches the one of them
/// with the lowest processor priority.
pub fn route<L: AsRef<Lapic>>(interrupt: &Interrupt, lapics: &[L]) -> Result<Targets, BusError> {
    check_combination(interrupt)?;
    let destination = &interrupt.destination;
    if let Some(index) = physical_unicast(destination, lapics) {
        return Ok(Targets::One(index));
    }
    let matching = lapics
        .iter()
        .enumerate()
        .filter(|(_, lapic)| lapic.as_ref().matches_destination(destination));
    if interrupt.delivery_mode == DeliveryMode::LowestPriority {
        // SDM 10.6.2.4 arbitrates on the processor priority; min_by_key keeps
        // the first of equals, so ties go to the lowest bus position.
        return Ok(matching
            .min_by_key(|(_, lapic)| lapic.as_ref().ppr())
            .map_or(Targets::None, |(index, _)| Targets::One(index)));
    }
    Ok(Targets::from_vec(
        matching.map(|(index, _)| index).collect(),
    ))
}

fn check_combination(interrupt: &Interrupt) -> Result<(), BusError> {
    let mode = interrupt.delivery_mode;
    match interrupt.destination {
        Destination::SelfOnly { .. } | Destination::AllIncludingSelf
            if mode != DeliveryMode::Fixed =>
        {
            Err(BusError::ShorthandNeedsFixed {
                mode,
                destination: interrupt.destination,
            })
        }
        Destination::AllExcludingSelf { .. } if mode == DeliveryMode::LowestPriority => {
            Err(BusError::LowestPriorityBroadcast)
        }
        _ => Ok(()),
    }
}

/// APIC IDs are unique (SDM 10.4.6), so when the LAPIC at position `id`
/// has ID `id`, a physical unicast to `id` reaches it alone: no scan of the
/// bus. Broadcast IDs take the scan.
fn physical_unicast<L: AsRef<Lapic>>(destination: &Destination, lapics: &[L]) -> Option<usize> {
    let Destination::Physical(id) = *destination else {
        return None;
    };
    if id == XAPIC_BROADCAST_ID || id == X2APIC_BROADCAST_ID {
        return None;
    }
    let index = usize::try_from(id).ok()?;
    let lapic = lapics.get(index)?.as_ref();
    (lapic.apic_id() == id && lapic.matches_destination(destination)).then_some(index)
}
