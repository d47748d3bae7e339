//! The `loongson-2019` cost profile: the Loongson VIOAPIC paper's testbed
//! (`profiles/loongson-2019.toml`, every value's provenance there).

use serde::{Deserialize, Serialize};

use super::flow::{controller_accesses, toggles_line, Landing, Step, FLOW};
use crate::profile::ProfileError;

/// Costs in cycles of the one core host and guest share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VioapicCycles {
    /// Getting one interrupt into the guest, the guest returning at once.
    pub injection: u64,
    /// One register access exiting to the controller in the kernel.
    pub kernel_access: u64,
    /// One register access exiting to the controller in the userspace VMM
    /// (measured for a read; a write takes the same exit, and one that
    /// changes the line adds [`LoongsonProfile::vmm_crossing`]).
    pub userspace_access: u64,
    /// One whole interrupt with the controller in the userspace VMM: the
    /// injection, the handler and its accesses.
    pub userspace_response: u64,
    /// A load or store to a mapped page.
    pub memory_access: u64,
    /// The pv page's lock around a MASK store.
    pub shared_page_lock: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoongsonProfile {
    pub name: String,
    pub cpu_hz: u64,
    pub cycles: VioapicCycles,
}

/// The embedded profile text.
pub const LOONGSON_2019_TOML: &str = include_str!("../../../../profiles/loongson-2019.toml");

/// Costs are at most a second of a 10 GHz clock, so no sum overflows.
const MAX_CYCLES: u64 = 10_000_000_000;

impl LoongsonProfile {
    pub fn loongson_2019() -> LoongsonProfile {
        match Self::from_toml(LOONGSON_2019_TOML) {
            Ok(profile) => profile,
            // The embedded text is checked by a unit test.
            Err(err) => unreachable!("embedded loongson-2019 profile is invalid: {err}"),
        }
    }

    pub fn from_toml(text: &str) -> Result<LoongsonProfile, ProfileError> {
        let profile: LoongsonProfile = toml::from_str(text)?;
        let c = &profile.cycles;
        let costs = [
            c.injection,
            c.kernel_access,
            c.userspace_access,
            c.userspace_response,
            c.memory_access,
            c.shared_page_lock,
        ];
        if costs.iter().any(|&cost| cost > MAX_CYCLES) {
            return Err(ProfileError::Invalid {
                field: "cycles",
                rule: "at most 1e10 cycles each",
            });
        }
        if c.userspace_access < c.kernel_access {
            return Err(ProfileError::Invalid {
                field: "userspace_access",
                rule: "at least kernel_access (the VMM's round trip adds to the kernel's)",
            });
        }
        if profile.derived_handler().is_none() {
            return Err(ProfileError::Invalid {
                field: "userspace_response",
                rule:
                    "more than the injection, the flow's userspace accesses and the VMM's crossings",
            });
        }
        if !(1_000_000..=100_000_000_000).contains(&profile.cpu_hz) {
            return Err(ProfileError::Invalid {
                field: "cpu_hz",
                rule: "1 MHz to 100 GHz",
            });
        }
        Ok(profile)
    }

    /// The handler's own instructions besides its register accesses: the
    /// measured userspace response less the injection, the flow's
    /// accesses, every one of which (the device's read among them) exits
    /// to the userspace VMM at that level, and the VMM's second crossing
    /// for each write that toggles the line (`flow::toggles_line`).
    pub fn handler_cycles(&self) -> u64 {
        // from_toml refuses a profile without one.
        self.derived_handler().unwrap_or_default()
    }

    fn derived_handler(&self) -> Option<u64> {
        let c = &self.cycles;
        let accesses: u64 = FLOW
            .iter()
            .map(|&step| u64::from(step != Step::Handler))
            .sum();
        let crossings = controller_accesses().filter(|&a| toggles_line(a)).count() as u64;
        c.userspace_response
            .checked_sub(c.injection)?
            .checked_sub(accesses * c.userspace_access)?
            .checked_sub(crossings * self.vmm_crossing())
    }

    /// The VMM's own trip into the kernel and back (an ioctl telling KVM
    /// to set or clear the vCPU's interrupt), derived as what an access
    /// served in the userspace VMM costs beyond one served in the kernel:
    /// KVM_RUN's return to the VMM and its re-entry, the same user-kernel
    /// round trip.
    pub fn vmm_crossing(&self) -> u64 {
        let c = &self.cycles;
        c.userspace_access.saturating_sub(c.kernel_access)
    }

    /// Cycles of one controller access landing at `landing`.
    pub fn access_cycles(&self, landing: Landing) -> u64 {
        let c = &self.cycles;
        match landing {
            Landing::Memory => c.memory_access,
            Landing::SharedPageLocked => c.memory_access + c.shared_page_lock,
            Landing::Kernel => c.kernel_access,
            Landing::Userspace => c.userspace_access,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_profile_parses_with_its_measured_values() {
        let profile = LoongsonProfile::loongson_2019();
        assert_eq!(profile.cpu_hz, 1_200_000_000);
        assert_eq!(profile.cycles.injection, 3217);
        assert_eq!(profile.cycles.kernel_access, 2265);
        assert_eq!(profile.cycles.userspace_access, 6886);
        assert_eq!(profile.cycles.userspace_response, 91_769);
    }

    #[test]
    fn the_handler_is_the_userspace_response_less_injection_accesses_and_crossings() {
        let profile = LoongsonProfile::loongson_2019();
        assert_eq!(profile.vmm_crossing(), 6_886 - 2_265);
        // 8 controller accesses and the device's read, each 6,886 cycles;
        // the mask and the unmask each cross once more.
        assert_eq!(
            profile.handler_cycles(),
            91_769 - 3_217 - 9 * 6_886 - 2 * (6_886 - 2_265)
        );
        let short =
            LOONGSON_2019_TOML.replace("userspace_response = 91769", "userspace_response = 60000");
        assert!(matches!(
            LoongsonProfile::from_toml(&short),
            Err(ProfileError::Invalid {
                field: "userspace_response",
                ..
            })
        ));
    }

    #[test]
    fn bad_profiles_are_errors() {
        let unknown = LOONGSON_2019_TOML.replace("[cycles]", "[cycles]\nbogus = 1");
        assert!(LoongsonProfile::from_toml(&unknown).is_err());
        let huge =
            LOONGSON_2019_TOML.replace("memory_access = 10 ", "memory_access = 99999999999 ");
        assert!(matches!(
            LoongsonProfile::from_toml(&huge),
            Err(ProfileError::Invalid {
                field: "cycles",
                ..
            })
        ));
    }

    #[test]
    fn a_userspace_access_cheaper_than_the_kernels_is_refused() {
        let cheap =
            LOONGSON_2019_TOML.replace("userspace_access = 6886", "userspace_access = 2000");
        assert!(matches!(
            LoongsonProfile::from_toml(&cheap),
            Err(ProfileError::Invalid {
                field: "userspace_access",
                ..
            })
        ));
    }

    #[test]
    fn each_landing_costs_its_own_figure() {
        let profile = LoongsonProfile::loongson_2019();
        let c = &profile.cycles;
        assert_eq!(
            profile.access_cycles(Landing::Userspace),
            c.userspace_access
        );
        assert_eq!(profile.access_cycles(Landing::Kernel), c.kernel_access);
        assert!(
            profile.access_cycles(Landing::SharedPageLocked)
                > profile.access_cycles(Landing::Memory)
        );
    }
}
