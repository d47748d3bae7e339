//! The scenario format's rules.

use super::*;

#[test]
fn every_builtin_parses_and_is_named_after_its_file() {
    for name in builtin_names() {
        let scenario = builtin(name).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(scenario.name, name);
        assert_eq!(
            scenario.nic,
            NicCoalescing::FITTED,
            "{name} must not refit the NIC"
        );
        assert!(!scenario.expand().is_empty());
    }
}

#[test]
fn a_scenario_built_as_a_value_is_validated() {
    let mut group = RunGroup::new(WorkloadKind::Cyclictest, vec![DesignKind::Did]);
    group.host = HostShape {
        cores: 256,
        vms: 1024,
        vcpus_per_vm: 1,
    };
    let mut scenario = Scenario {
        name: "fleet".into(),
        description: "value-built".into(),
        duration_ms: 10,
        nic: NicCoalescing::FITTED,
        profile: BuiltinProfile::Did2015,
        figure: None,
        runs: vec![group],
    };
    assert_eq!(scenario.validate(), Ok(()));
    scenario.runs[0].host.cores = 2;
    assert_eq!(
        scenario.validate(),
        Err(InvalidScenario::HostVectorsPerCore)
    );
    scenario.runs[0].designs.clear();
    scenario.runs[0].host.cores = 256;
    assert_eq!(
        scenario.validate(),
        Err(InvalidScenario::NoDesigns(WorkloadKind::Cyclictest))
    );
}

#[test]
fn the_halting_idle_mode_is_named_halt_and_still_read_as_hlt() {
    for name in ["halt", "hlt"] {
        let mode: IdleMode = serde_json::from_value(name.into()).expect("known");
        assert_eq!(mode, IdleMode::Hlt);
    }
    assert_eq!(enum_name(&IdleMode::Hlt), "halt");
}

#[test]
fn vioapic_takes_a_level_and_no_other_workload_beside_it() {
    let vioapic = |level: &str, more: &str| {
        Scenario::from_toml(&format!(
            "name = \"v\"\ndescription = \"v\"\n[[runs]]\nworkload = \"vioapic\"\ndesigns = [\"vanilla\"]\n{level}\n{more}"
        ))
    };
    let params = vioapic("level = \"ro-page\"", "").expect("valid").expand()[0].params();
    assert_eq!(params["level"], "ro-page");
    assert!(matches!(
        vioapic("", ""),
        Err(ScenarioError::Invalid(InvalidScenario::Level))
    ));
    let beside = "[[runs]]\nworkload = \"cyclictest\"\ndesigns = [\"did\"]";
    assert!(matches!(
        vioapic("level = \"pv\"", beside),
        Err(ScenarioError::Invalid(InvalidScenario::MixedTestbeds))
    ));
}

#[test]
fn a_group_names_its_designs_and_the_old_key_still_reads() {
    let group = |key: &str| {
        Scenario::from_toml(&format!(
            "name = \"g\"\ndescription = \"g\"\n[[runs]]\nworkload = \"cyclictest\"\n{key} = [\"vanilla\", \"did\"]"
        ))
        .map(|scenario| scenario.runs[0].designs.clone())
    };
    let both = vec![DesignKind::Vanilla, DesignKind::Did];
    assert_eq!(group("designs").expect("the key"), both);
    assert_eq!(group("policies").expect("the old key"), both);
    assert!(group("layouts").is_err(), "an unknown key");
}

#[test]
fn udp_rx_expands_rates_times_designs() {
    let scenario = builtin("did-udp-rx").unwrap();
    let group = &scenario.runs[0];
    assert_eq!(group.rates_pps.len(), 4);
    assert_eq!(
        scenario.expand().len(),
        group.rates_pps.len() * group.designs.len()
    );
}

#[test]
fn every_vcpu_owning_queues_needs_a_host_vector_and_an_irte_handle_each() {
    let mut group = RunGroup::new(WorkloadKind::UdpRx, vec![DesignKind::Did]);
    group.rates_pps = vec![1000];
    group.queue_owners = QueueOwners::EveryVcpu;
    group.host = HostShape {
        cores: 2,
        vms: 1,
        vcpus_per_vm: HOST_VECTORS_PER_CORE / VF_MSIX_VECTORS,
    };
    assert_eq!(group.validate(), Ok(()));
    group.host.vcpus_per_vm += 1;
    assert_eq!(group.validate(), Err(InvalidScenario::HostVectorsPerCore));
    group.host = HostShape {
        cores: MAX_CORES,
        vms: MAX_VMS,
        vcpus_per_vm: MAX_VCPUS_PER_VM,
    };
    assert_eq!(group.validate(), Err(InvalidScenario::Queues));
    group.queue_owners = QueueOwners::FirstVcpu;
    assert_eq!(group.validate(), Ok(()));
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    assert!(matches!(
        builtin("nope"),
        Err(ScenarioError::UnknownBuiltin(_))
    ));
    assert!(Scenario::from_toml("name = 1").is_err());
    let no_rate = r#"
        name = "x"
        description = "x"
        [[runs]]
        workload = "udp-rx"
        designs = ["did"]
    "#;
    assert!(matches!(
        Scenario::from_toml(no_rate),
        Err(ScenarioError::Invalid(InvalidScenario::NeedsRates(
            WorkloadKind::UdpRx
        )))
    ));
}
