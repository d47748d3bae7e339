//! The `loongson-2019` cost profile: the Loongson VIOAPIC study's testbed
//! (`profiles/loongson-2019.toml`, every value's provenance there).

use serde::{Deserialize, Serialize};

use super::flow::Landing;
use crate::profile::ProfileError;

/// Costs in cycles of the one core host and guest share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VioapicCycles {
    /// Getting one interrupt into the guest, the guest returning at once.
    pub injection: u64,
    /// One register access exiting to the controller in the kernel.
    pub kernel_access: u64,
    /// One register read exiting to the controller in the userspace VMM.
    pub userspace_read: u64,
    /// One register write exiting to the controller in the userspace VMM.
    pub userspace_write: u64,
    /// The handler's instructions besides its register accesses.
    pub handler: u64,
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
            c.userspace_read,
            c.userspace_write,
            c.handler,
            c.memory_access,
            c.shared_page_lock,
        ];
        if costs.iter().any(|&cost| cost > MAX_CYCLES) {
            return Err(ProfileError::Invalid {
                field: "cycles",
                rule: "at most 1e10 cycles each",
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

    /// Cycles of one controller access landing at `landing`.
    pub fn access_cycles(&self, landing: Landing, write: bool) -> u64 {
        let c = &self.cycles;
        match landing {
            Landing::Memory => c.memory_access,
            Landing::SharedPageLocked => c.memory_access + c.shared_page_lock,
            Landing::Kernel => c.kernel_access,
            Landing::Userspace if write => c.userspace_write,
            Landing::Userspace => c.userspace_read,
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
        assert_eq!(profile.cycles.userspace_read, 6886);
    }

    #[test]
    fn bad_profiles_are_errors() {
        let unknown = LOONGSON_2019_TOML.replace("[cycles]", "[cycles]\nbogus = 1");
        assert!(LoongsonProfile::from_toml(&unknown).is_err());
        let huge = LOONGSON_2019_TOML.replace("handler = 500", "handler = 99999999999");
        assert!(matches!(
            LoongsonProfile::from_toml(&huge),
            Err(ProfileError::Invalid {
                field: "cycles",
                ..
            })
        ));
    }

    #[test]
    fn a_userspace_write_costs_its_own_figure_and_a_read_the_measured_one() {
        let profile = LoongsonProfile::loongson_2019();
        let c = &profile.cycles;
        assert_eq!(
            profile.access_cycles(Landing::Userspace, false),
            c.userspace_read
        );
        assert_eq!(
            profile.access_cycles(Landing::Userspace, true),
            c.userspace_write
        );
        assert_eq!(
            profile.access_cycles(Landing::Kernel, true),
            c.kernel_access
        );
        assert!(
            profile.access_cycles(Landing::SharedPageLocked, true)
                > profile.access_cycles(Landing::Memory, true)
        );
    }
}
