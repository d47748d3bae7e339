//! The network workloads' settings of a run group: message sizes, NAPI's
//! weight, the NIC's throttling, netperf's computation, a server's clients
//! and QoS target; their limits and their `params` in the results.

use std::collections::BTreeMap;

use super::{InvalidScenario, RunGroup, WorkloadKind};

/// A message at most as large as a GSO buffer.
pub const MAX_MESSAGE_BYTES: u64 = 65_536;
/// Linux caps a device's NAPI weight at 64 (netif_napi_add); a profile
/// or scenario may go lower, never higher than this bound.
pub const MAX_NAPI_WEIGHT: u32 = 4096;
/// The 82599's EITR interval field holds at most about 1 ms.
pub const MAX_ITR_US: u64 = 1_000;
pub const MAX_CLIENTS: u32 = 100_000;
pub const MAX_QOS_MS: u64 = 60_000;

impl RunGroup {
    pub(super) fn validate_network(&self) -> Result<(), InvalidScenario> {
        if self
            .message_bytes
            .is_some_and(|bytes| bytes == 0 || bytes > MAX_MESSAGE_BYTES)
        {
            return Err(InvalidScenario::MessageBytes);
        }
        if self
            .napi_weight
            .is_some_and(|weight| weight == 0 || weight > MAX_NAPI_WEIGHT)
        {
            return Err(InvalidScenario::NapiWeight);
        }
        if self.itr_us.is_some_and(|us| us > MAX_ITR_US) {
            return Err(InvalidScenario::ItrUs);
        }
        let clients_ok = self
            .clients
            .is_some_and(|clients| (1..=MAX_CLIENTS).contains(&clients));
        if self.workload.is_server() && !clients_ok {
            return Err(InvalidScenario::Clients(self.workload));
        }
        if self.qos_p95_ms.is_some_and(|ms| ms == 0 || ms > MAX_QOS_MS) {
            return Err(InvalidScenario::QosTarget);
        }
        if self.workload == WorkloadKind::Sip && self.host.vms != 1 {
            return Err(InvalidScenario::SipNeedsOneVm);
        }
        Ok(())
    }

    /// The network settings a run names, under their scenario keys.
    pub(super) fn network_params(&self, params: &mut BTreeMap<String, serde_json::Value>) {
        let numbers = [
            ("message_bytes", self.message_bytes),
            ("napi_weight", self.napi_weight.map(u64::from)),
            ("itr_us", self.itr_us),
            ("compute_cycles_per_byte", self.compute_cycles_per_byte),
            ("clients", self.clients.map(u64::from)),
            ("qos_p95_ms", self.qos_p95_ms),
        ];
        for (key, value) in numbers {
            if let Some(value) = value {
                params.insert(key.into(), value.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::builtin;
    use super::*;
    use crate::design::DesignKind;

    #[test]
    fn a_scenario_selects_its_profile_by_name_and_defaults_to_did_2015() {
        let eli = builtin("eli-2012").expect("built-in");
        assert_eq!(eli.profile.profile().name, "eli-2012");
        let udp = builtin("did-udp-rx").expect("built-in");
        assert_eq!(udp.profile.profile().name, "did-2015");
    }

    #[test]
    fn a_server_needs_clients_and_sip_one_vm() {
        let mut group = RunGroup::new(WorkloadKind::Memcached, vec![DesignKind::Did]);
        assert_eq!(
            group.validate_network(),
            Err(InvalidScenario::Clients(WorkloadKind::Memcached))
        );
        group.clients = Some(200);
        assert_eq!(group.validate_network(), Ok(()));
        group.napi_weight = Some(0);
        assert_eq!(group.validate_network(), Err(InvalidScenario::NapiWeight));
        let mut sip = RunGroup::new(WorkloadKind::Sip, vec![DesignKind::Did]);
        sip.host.vms = 2;
        assert_eq!(sip.validate_network(), Err(InvalidScenario::SipNeedsOneVm));
    }
}
