//! Does KVM's LAPIC hold a delivered interrupt in service until its EOI,
//! as the SDM says? One kvm_pvm host's did not (docs/native.md): there a
//! level-triggered IOAPIC line re-fires before the guest can read its
//! remote IRR. The vioapic guest checks before its window
//! (guest/lapic_check.c); this reads its answer as a claim, accepted only
//! when everything it reported agrees.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::BenchError;
use crate::abi::{self, SharedPage};
use crate::config::params::VioapicParams;
use crate::config::{BenchConfig, BenchParams, GuestExec, VioapicLevel};

/// What the LAPIC does with a delivered interrupt until its EOI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LapicInService {
    /// As the SDM says: ISR set, PPR raised, the same vector waits in IRR.
    Held,
    /// ISR and PPR stay 0 and the same vector is taken again at once.
    NotHeld,
}

impl fmt::Display for LapicInService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LapicInService::Held => {
                "held until EOI (ISR set, PPR raised, a second one of the vector waits)"
            }
            LapicInService::NotHeld => {
                "NOT held: ISR and PPR read 0 and a second one of the vector is taken at once, \
                 so level-triggered IOAPIC lines re-fire before the guest can service them"
            }
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LapicCheckError {
    #[error(
        "the guest's LAPIC in-service check contradicts itself: ISR bit {isr_set}, PPR {ppr:#x}, \
         {taken_before_eoi} of its 2 self-IPIs taken before the EOI, {taken} in all"
    )]
    Inconsistent {
        isr_set: u64,
        ppr: u64,
        taken_before_eoi: u64,
        taken: u64,
    },
}

/// The guest's check, from its results: held needs the ISR bit, PPR at
/// the vector's priority class and the second self-IPI held back; not held
/// needs all three the other way. Both need both self-IPIs delivered (KVM
/// may deliver one twice, so more is allowed).
pub fn from_guest(shared: &SharedPage) -> Result<LapicInService, LapicCheckError> {
    let result = |index: usize| shared.result[index];
    let (isr_set, ppr, taken_before_eoi, taken) = (
        result(abi::RESULT_LAPIC_ISR_SET),
        result(abi::RESULT_LAPIC_PPR),
        result(abi::RESULT_LAPIC_TAKEN_BEFORE_EOI),
        result(abi::RESULT_LAPIC_TAKEN),
    );
    let class = |priority: u64| priority & 0xf0;
    let raised = class(ppr) >= class(u64::from(abi::VECTOR_DEVICE));
    match (isr_set, raised, taken_before_eoi, taken >= 2) {
        (1, true, 1, true) => Ok(LapicInService::Held),
        (0, false, 2.., true) => Ok(LapicInService::NotHeld),
        _ => Err(LapicCheckError::Inconsistent {
            isr_set,
            ppr,
            taken_before_eoi,
            taken,
        }),
    }
}

/// Checks this host's in-kernel LAPIC with one short vioapic run at the
/// paravirtual level, which works whatever the answer.
pub fn check(guest_exec: Option<GuestExec>) -> Result<LapicInService, BenchError> {
    let params = VioapicParams {
        vioapic: VioapicLevel::Pv,
        count: 1,
        ..VioapicParams::default()
    };
    let mut config = BenchConfig::from(BenchParams::Vioapic(params.clone()));
    config.common.guest_exec = guest_exec;
    config.validate()?;
    Ok(super::vioapic::measure(&config, &params, false)?.in_service)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(isr_set: u64, ppr: u64, taken_before_eoi: u64, taken: u64) -> SharedPage {
        let mut shared = SharedPage::default();
        shared.result[abi::RESULT_LAPIC_ISR_SET] = isr_set;
        shared.result[abi::RESULT_LAPIC_PPR] = ppr;
        shared.result[abi::RESULT_LAPIC_TAKEN_BEFORE_EOI] = taken_before_eoi;
        shared.result[abi::RESULT_LAPIC_TAKEN] = taken;
        shared
    }

    #[test]
    fn a_consistent_claim_is_accepted_either_way() {
        let vector = u64::from(abi::VECTOR_DEVICE);
        assert_eq!(
            from_guest(&claim(1, vector, 1, 2)).expect("consistent"),
            LapicInService::Held
        );
        assert_eq!(
            from_guest(&claim(0, 0, 2, 2)).expect("consistent"),
            LapicInService::NotHeld
        );
        // A duplicate delivery (kvm_pvm's emulator) adds one.
        assert_eq!(
            from_guest(&claim(0, 0, 3, 3)).expect("consistent"),
            LapicInService::NotHeld
        );
    }

    #[test]
    fn a_claim_that_contradicts_itself_is_refused() {
        let vector = u64::from(abi::VECTOR_DEVICE);
        for (isr, ppr, before, taken) in [
            (1, vector, 2, 2), // in service, yet the second came in
            (0, 0, 1, 2),      // nothing in service, yet the second waited
            (1, 0, 1, 2),      // in service without raising PPR
            (1, vector, 1, 1), // the held one never came after the EOI
            (0, 0, 0, 0),      // no self-IPI arrived at all
        ] {
            assert!(
                from_guest(&claim(isr, ppr, before, taken)).is_err(),
                "{isr} {ppr} {before} {taken}"
            );
        }
    }
}
